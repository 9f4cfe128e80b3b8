// SPDX-License-Identifier: MIT
/*
 * locusctl fit / show / push end to end: the real binary (next to this test:
 * <build>/tests/.. /bin/locusctl) on the repo's sample, its exit codes and
 * messages on bad input, and a push through the control socket to a reader
 * that validates with the ELDR callback and adopts the exact bytes of the file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_grace.h"
#include "locus_grace_priv.h"
#include "locus_shm.h"
#include "locus_table.h"
#include "locus_tblfile.h"
#include "push_util.h"
#include "trace_json.h"
#include "data_paths.h"


static char locusctl[4096];
static char tmpdir[] = "/tmp/test_eldr_ctl.XXXXXX";
static char out[1 << 16];

static const char *sample(void)
{
	static char buf[4200];

	snprintf(buf, sizeof(buf), "%s/tests/data/calib_sample.jsonl", locus_data_root());
	return buf;
}

/* Run "locusctl <args>" with stderr folded into out; returns the exit status. */
static int ctl(const char *fmt, ...)
{
	char args[2048], cmd[8192];
	va_list ap;
	size_t n = 0;
	FILE *p;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1 </dev/null", locusctl, args);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (n + 1 < sizeof(out)) {
		size_t got = fread(out + n, 1, sizeof(out) - 1 - n, p);

		if (!got)
			break;
		n += got;
	}
	out[n] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

/* The number after key in text (a float), or NAN. */
static double num_after(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	double v;

	return p && sscanf(p + strlen(key), "%lf", &v) == 1 ? v : NAN;
}

static void test_fit_and_show(void **state)
{
	char tbl[4200], fitout[sizeof(out)], key[64];
	struct locus_error e = { 0 };
	struct tj j;
	unsigned ver, cen;
	(void)state;

	snprintf(tbl, sizeof(tbl), "%s/k4.tbl", tmpdir);
	/* the default: the tuning chooses, the table and show say what it chose */
	assert_int_equal(ctl("fit --trace %s --decoders 4 --decoder-ids 10,11,12,13 --seed 7 -o %s",
			     sample(), tbl), 0);
	assert_non_null(strstr(out, "fitted 96 requests (L=26 E=64 k=6) into K=4 decoders"));
	assert_non_null(strstr(out, "mask score (decode expert overlap)"));
	assert_non_null(strstr(out, "tune: calibration split in two parts (48 / 48 requests)"));
	assert_non_null(strstr(out, "rounds of K=4 x B=4"));
	assert_non_null(strstr(out, "<- chosen"));
	assert_non_null(strstr(out, "tune: the fewest pairs per step with the busiest decoder "
				    "within"));
	memcpy(fitout, out, sizeof(out));
	assert_non_null(strstr(fitout, "routing: tau "));
	assert_int_equal(sscanf(strstr(fitout, "routing: tau "), "routing: tau %*f, %u centroids",
				&cen), 1);
	assert_int_equal(sscanf(strstr(fitout, "table version "), "table version %u", &ver), 1);
	assert_int_equal(ctl("show %s", tbl), 0);
	snprintf(key, sizeof(key), "ELDR table v%u", ver);
	assert_non_null(strstr(out, key));
	assert_non_null(strstr(out, "decoders K=4"));
	assert_non_null(strstr(out, "decoder ids: 10 11 12 13"));
	snprintf(key, sizeof(key), "centroids: %u ", cen);
	assert_non_null(strstr(out, key));
	assert_true(fabs(num_after(out, "tau=") - num_after(fitout, "routing: tau ")) < 1e-6);
	assert_true(!strstr(fitout, "overflow spread by load") ==
		    !strstr(out, "overflow: spread"));
	assert_true(!strstr(fitout, "no load spill") == !!strstr(out, "load spill: within"));
	assert_true(ver == 2 || (cen == 4 && strstr(out, "load spill: off") &&
				 strstr(out, "overflow: nearest")));
	assert_int_equal(ctl("show %s --json", tbl), 0);
	/* one valid JSON object on one line */
	tj_init(&j, out, strlen(out), "show --json", 1, &e);
	assert_int_equal(tj_skip(&j), 0);
	assert_int_equal(tj_peek(&j), -1);
	assert_non_null(strstr(out, "\"n_decoders\":4"));
	assert_non_null(strstr(out, "\"decoder_ids\":[10,11,12,13]"));
	assert_true(num_after(out, "\"n_centroids\":") == cen);
	/* --tune off: tau 0.1, one centroid per decoder, nearest, no spill: version 1 */
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tune off --quiet -o %s", sample(), tbl),
			 0);
	assert_null(strstr(out, "tune:"));
	assert_non_null(strstr(out, "routing: tau 0.1, 4 centroids (one per decoder), overflow "
				    "to the nearest up, no load spill"));
	assert_int_equal(ctl("show %s", tbl), 0);
	assert_non_null(strstr(out, "ELDR table v1"));
	assert_non_null(strstr(out, "centroids: 4 (one per decoder)"));
	/* each choice given: written as given */
	assert_int_equal(ctl("fit --trace %s --decoders 4 --decoder-ids 10,11,12,13 --tune off "
			     "--centroids-per-decoder 3 --spill-tau 0.3 --spill-margin 2 "
			     "--overflow spread --quiet -o %s", sample(), tbl), 0);
	assert_non_null(strstr(out, "12 centroids (several per decoder), overflow spread by load, "
				    "load spill within 0.3 beyond a margin of 2"));
	assert_int_equal(ctl("show %s", tbl), 0);
	assert_non_null(strstr(out, "ELDR table v2"));
	assert_non_null(strstr(out, "centroids: 12 (decoder id of each: 10 10 10 11 11 11 12 12 12 "
				    "13 13 13)"));
	assert_non_null(strstr(out, "overflow: spread"));
	assert_non_null(strstr(out, "load spill: within 0.3 of the best, beyond a margin of 2"));
	assert_int_equal(ctl("show %s --json", tbl), 0);
	assert_non_null(strstr(out, "\"centroid_decoder_ids\":[10,10,10,11,11,11,12,12,12,13,13,"
				    "13],\"overflow\":\"spread\",\"spill_tau\":0.300000012,"
				    "\"spill_margin\":2"));
	/* --eldr names the default kind of fit explicitly; --no-mask keeps 26 layers */
	assert_int_equal(ctl("fit --eldr --trace %s --decoders 2 --no-mask --quiet -o %s", sample(),
			     tbl), 0);
	assert_non_null(strstr(out, "26/26 layers masked"));
	/* the fixed balance and clustering, printed; --exact-balance: exact bounds, one seed */
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tune off --quiet -o %s", sample(), tbl),
			 0);
	assert_non_null(strstr(out, "(bounds 12..36: slack 0.50, balance price 2.00); best of 8 "
				    "k-means++ seeds"));
	assert_non_null(strstr(out, "clustered on prefill and decode expert use"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --exact-balance --quiet -o %s", sample(),
			     tbl), 0);
	assert_null(strstr(out, "tune:"));
	assert_non_null(strstr(out, "clusters of 24..24 requests (bounds 24..24: slack 0.00, "
				    "balance price 0.00); best of 1 k-means++ seeds"));
	assert_non_null(strstr(out, "clustered on prefill signatures"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --slack 0.2 --balance-price 0 --restarts 3 "
			     "--decode-weight 0 --tune off --quiet -o %s", sample(), tbl), 0);
	assert_non_null(strstr(out, "(bounds 20..28: slack 0.20, balance price 0.00); best of 3"));
	/* diff says what version 2 changed: per decoder centroids, spill, overflow */
	{
		char a[4200], b[4200];

		snprintf(a, sizeof(a), "%s/d1.tbl", tmpdir);
		snprintf(b, sizeof(b), "%s/d2.tbl", tmpdir);
		assert_int_equal(ctl("fit --trace %s --decoders 4 --tune off --quiet -o %s",
				     sample(), a), 0);
		assert_int_equal(ctl("fit --trace %s --decoders 4 --tune off --centroids-per-decoder 2 "
				     "--spill-tau 0.3 --overflow spread --quiet -o %s", sample(), b),
				 0);
		assert_int_equal(ctl("diff %s %s", a, b), 1);
		assert_non_null(strstr(out, "load spill: 0/0 -> 0.3/1 (0: off)"));
		assert_non_null(strstr(out, "overflow: nearest -> spread"));
		assert_non_null(strstr(out, "decoder 3: 1 -> 2 centroids"));
		assert_int_equal(ctl("diff %s %s", b, b), 0);
	}
	/* a given balance price is kept by the tuning (the rest still chosen) */
	assert_int_equal(ctl("fit --trace %s --decoders 4 --balance-price 1.5 --quiet -o %s",
			     sample(), tbl), 0);
	assert_non_null(strstr(out, "tune: calibration split"));
	assert_non_null(strstr(out, "balance price 1.50)"));
}

/* The tuning's and the new options' refusals, and the trace it cannot use. */
static void test_tune_refusals(void **state)
{
	char tbl[4200];
	(void)state;

	snprintf(tbl, sizeof(tbl), "%s/r.tbl", tmpdir);
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tune maybe -o %s", sample(), tbl), 2);
	assert_non_null(strstr(out, "bad value 'maybe' for --tune"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --overflow far -o %s", sample(), tbl), 2);
	assert_non_null(strstr(out, "bad value 'far' for --overflow"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --centroids-per-decoder 0 -o %s", sample(),
			     tbl), 2);
	assert_int_equal(ctl("fit --trace %s --decoders 4 --centroids-per-decoder 17 -o %s",
			     sample(), tbl), 2);
	assert_non_null(strstr(out, "bad value '17' for --centroids-per-decoder"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --spill-margin 2 -o %s", sample(), tbl),
			 2);
	assert_non_null(strstr(out, "--spill-margin goes with --spill-tau"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --spill-tau 0 --spill-margin 2 -o %s",
			     sample(), tbl), 2);
	assert_int_equal(ctl("fit --trace %s --decoders 4 --spill-tau 3 -o %s", sample(), tbl), 2);
	/* a spill not wider than the band: the fit refuses it */
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tune off --spill-tau 0.05 -o %s",
			     sample(), tbl), 1);
	assert_non_null(strstr(out, "spill tau 0.05 outside (tau 0.1, 2]"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --exact-balance --tune auto -o %s",
			     sample(), tbl), 2);
	assert_non_null(strstr(out, "--exact-balance tunes nothing"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tau auto --tune auto -o %s", sample(),
			     tbl), 2);
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tune off --tau-batch 4 -o %s", sample(),
			     tbl), 2);
	assert_non_null(strstr(out, "go with the tuning"));
	/* too few requests for two rounds of K x B: the fixed defaults, said so */
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tau-batch 13 --quiet -o %s", sample(),
			     tbl), 0);
	assert_non_null(strstr(out, "tune: not run (fewer than 2 x K x B calibration requests)"));
	assert_non_null(strstr(out, "routing: tau 0.1, 4 centroids (one per decoder)"));
}

/*
 * fit --tau auto: prints the grid it replayed and the choice, and writes
 * that tau into the table; its options are refused when bad or alone, and a
 * trace too small for one round per part or without decode tokens fails.
 */
static void test_tau_auto(void **state)
{
	char tbl[4200], nodec[4200], line[64];
	const char *p;
	float tau;
	FILE *f;
	(void)state;

	snprintf(tbl, sizeof(tbl), "%s/auto.tbl", tmpdir);
	snprintf(nodec, sizeof(nodec), "%s/nodec.jsonl", tmpdir);
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tau auto --quiet -o %s", sample(), tbl),
			 0);
	assert_non_null(strstr(out, "tau auto: calibration split in two parts (48 / 48 requests)"));
	assert_non_null(strstr(out, "rounds of K=4 x B=4"));
	assert_non_null(strstr(out, "<- chosen"));
	p = strstr(out, "tau auto: tau ");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "tau auto: tau %f", &tau), 1);
	assert_non_null(strstr(p, "(the exact-balance fit's)"));
	assert_int_equal(ctl("show %s", tbl), 0);
	snprintf(line, sizeof(line), "tau=%g", (double)tau);
	assert_non_null(strstr(out, line));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tau auto --tau-batch 2 "
			     "--tau-load-bound 1 --quiet -o %s", sample(), tbl), 0);
	assert_non_null(strstr(out, "rounds of K=4 x B=2"));
	assert_non_null(strstr(out, "no tau kept the busiest decoder within 1.000"));
	/* refusals */
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tau autox -o %s", sample(), tbl), 2);
	assert_non_null(strstr(out, "bad value 'autox' for --tau"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tau auto --tau-batch 0 -o %s", sample(),
			     tbl), 2);
	assert_non_null(strstr(out, "bad value '0' for --tau-batch"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tau auto --tau-load-bound 0.5 -o %s",
			     sample(), tbl), 2);
	assert_non_null(strstr(out, "bad value '0.5' for --tau-load-bound"));
	/* a given tau is kept by the tuning, which chooses the rest within the bound */
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tau 0.2 --tau-load-bound 2 --quiet "
			     "-o %s", sample(), tbl), 0);
	assert_non_null(strstr(out, "within 2.000 / 2.000 in the two folds (--tau-load-bound)"));
	assert_int_equal(ctl("show %s", tbl), 0);
	assert_non_null(strstr(out, "tau=0.2"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tau auto --tau-batch 13 -o %s", sample(),
			     tbl), 1);
	assert_non_null(strstr(out, "at least 2 x K x B = 104 calibration requests"));
	f = fopen(nodec, "w");
	assert_non_null(f);
	for (int i = 0; i < 8; i++)
		fprintf(f, "{\"id\":\"r%d\",\"prompt_routed_experts\":[[[%d,%d]]]}\n", i, i % 4,
			4 + i % 3);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(ctl("fit --trace %s --decoders 2 --quiet -o %s", nodec, tbl), 0);
	assert_non_null(strstr(out, "tune: not run (the trace has no routed_experts"));
	assert_int_equal(ctl("fit --trace %s --decoders 2 --tau auto --tau-batch 2 -o %s", nodec,
			     tbl), 1);
	assert_non_null(strstr(out, "no routed_experts"));
}

static void test_bad_input(void **state)
{
	char bad[4200], tbl[4200], trunc[4200];
	FILE *f;
	char buf[256];
	size_t n;
	(void)state;

	snprintf(bad, sizeof(bad), "%s/bad.jsonl", tmpdir);
	snprintf(tbl, sizeof(tbl), "%s/t.tbl", tmpdir);
	snprintf(trunc, sizeof(trunc), "%s/trunc.tbl", tmpdir);
	assert_int_equal(ctl(""), 2);
	assert_int_equal(ctl("frobnicate"), 2);
	assert_non_null(strstr(out, "unknown command"));
	assert_int_equal(ctl("fit --trace %s --decoders 0 -o %s", sample(), tbl), 2);
	assert_non_null(strstr(out, "bad value '0' for --decoders"));
	assert_int_equal(ctl("fit --trace %s --decoders 4", sample()), 2);
	assert_int_equal(ctl("fit --trace %s --decoders 4 --tau nan -o %s", sample(), tbl), 2);
	assert_int_equal(ctl("fit --trace %s --decoders 4 --slack 1.5 -o %s", sample(), tbl), 2);
	assert_non_null(strstr(out, "bad value '1.5' for --slack"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --balance-price -1 -o %s", sample(), tbl),
			 2);
	assert_non_null(strstr(out, "bad value '-1' for --balance-price"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --restarts 0 -o %s", sample(), tbl), 2);
	assert_non_null(strstr(out, "bad value '0' for --restarts"));
	assert_int_equal(ctl("fit --trace %s --decoders 4 --decode-weight x -o %s", sample(), tbl),
			 2);
	assert_non_null(strstr(out, "bad value 'x' for --decode-weight"));
	assert_int_equal(ctl("fit --trace %s --decoders 3 --decoder-ids 1,2 -o %s", sample(), tbl),
			 2);
	assert_int_equal(ctl("fit --trace %s --decoders 3 --decoder-ids 1,,2 -o %s", sample(), tbl),
			 2);
	assert_int_equal(ctl("fit --trace %s --decoders 2 --decoder-ids 1,2, -o %s", sample(), tbl),
			 2);
	assert_int_equal(ctl("fit --trace %s --decoders 2 --decoder-ids 1,x -o %s", sample(), tbl),
			 2);
	assert_int_equal(ctl("fit --trace %s --decoders 2 --decoder-ids 1,1 -o %s", sample(), tbl),
			 1);
	assert_non_null(strstr(out, "decoder id 1 given twice"));
	assert_int_equal(ctl("fit --trace %s --decoders 200 -o %s", sample(), tbl), 1);
	assert_non_null(strstr(out, "only 96 calibration requests"));
	/* malformed JSON, with its line and column */
	write_file(bad,
		   "{\"prompt_routed_experts\":[[[0,1]]]}\n{\"prompt_routed_experts\":[[[0,1]],}\n",
		   strlen("{\"prompt_routed_experts\":[[[0,1]]]}\n{\"prompt_routed_experts\":[[[0,1]],}\n"));
	assert_int_equal(ctl("fit --trace %s --decoders 1 -o %s", bad, tbl), 1);
	assert_non_null(strstr(out, "bad.jsonl:2:35:"));
	/* empty trace */
	write_file(bad, "\n", 1);
	assert_int_equal(ctl("fit --trace %s --decoders 1 -o %s", bad, tbl), 1);
	assert_non_null(strstr(out, "trace has no requests"));
	/* no table written by the failures */
	assert_int_equal(access(tbl, F_OK), -1);
	/* show: missing, truncated, not a table */
	assert_int_equal(ctl("show %s/none.tbl", tmpdir), 1);
	assert_non_null(strstr(out, "No such file"));
	assert_int_equal(ctl("fit --trace %s --decoders 2 --quiet -o %s", sample(), tbl), 0);
	f = fopen(tbl, "r");
	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	assert_int_equal(n, sizeof(buf));
	write_file(trunc, buf, sizeof(buf));
	assert_int_equal(ctl("show %s", trunc), 1);
	assert_non_null(strstr(out, "truncated"));
	write_file(trunc, "hello world, not a table at all, but long enough for a header ..", 64);
	assert_int_equal(ctl("show %s", trunc), 1);
	assert_non_null(strstr(out, "not a locus table"));
	assert_int_equal(ctl("show"), 2);
	/* push: no such instance */
	assert_int_equal(ctl("push -i eldr-no-such-instance %s", tbl), 1);
	assert_int_equal(ctl("push %s", tbl), 2);
}

struct poller {
	struct locus_table_reader *r;
	volatile int stop;
	int adopted;
};

static void *poll_thread(void *arg)
{
	struct poller *p = arg;

	for (int i = 0; i < 5000 && !p->stop; i++) {
		int ret = locus_table_reader_poll(p->r);

		if (ret == 1) {
			p->adopted = 1;
			break;
		}
		usleep(1000);
	}
	return NULL;
}

static void test_push_into_segment(void **state)
{
	struct locus_table_params tp = { .n_channels = 2, .n_readers = 1 };
	struct locus_table_region *tr = NULL;
	struct locus_table_reader rd;
	struct locus_error e = { 0 };
	struct poller pl = { 0 };
	struct tpush srv;
	char tbl[4200], inst[64];
	void *file;
	size_t flen, len;
	const void *cur;
	pthread_t th;
	(void)state;

	snprintf(tbl, sizeof(tbl), "%s/push.tbl", tmpdir);
	assert_int_equal(ctl("fit --trace %s --decoders 4 --quiet -o %s", sample(), tbl), 0);
	assert_int_equal(locus_tbl_read_file(tbl, LOCUS_TBL_ELDR, &file, &flen, &e), 0);
	snprintf(inst, sizeof(inst), "eldrctl%d", (int)getpid());
	tp.channel[0].n_slots = 2;
	tp.channel[0].slot_size = flen;
	tp.channel[1].n_slots = 2;
	tp.channel[1].slot_size = 1 << 20; /* room for a GRACE table */
	/* locusd's side: the channels in this process, the real control socket */
	tpush_open(&srv, inst, &tp, NULL, NULL, LOCUS_PUSHSRV_NO_GROUP);
	tr = srv.t;
	tpush_run(&srv, NULL, NULL);
	assert_int_equal(locus_table_reader_register(tr, LOCUS_ELDR_TABLE_CHANNEL, 0,
						     locus_eldr_table_validate_cb, NULL, &rd, &e), 0);
	pl.r = &rd;
	assert_int_equal(pthread_create(&th, NULL, poll_thread, &pl), 0);
	assert_int_equal(ctl("push -i %s %s --timeout-ms 5000", inst, tbl), 0);
	print_message("%s", out);
	pl.stop = 1;
	pthread_join(th, NULL);
	assert_non_null(strstr(out, "generation 1"));
	assert_non_null(strstr(out, "1 live, 1 adopted, 0 refused"));
	assert_int_equal(pl.adopted, 1);
	cur = locus_table_reader_table(&rd, &len);
	assert_non_null(cur);
	assert_int_equal(len, flen);
	assert_memory_equal(cur, file, flen);
	/* a GRACE table goes to its own channel, checked by its own validator */
	{
		char gtbl[4200];
		struct locus_table_reader gr;
		struct poller gp = { 0 };
		void *gfile;
		size_t glen;

		snprintf(gtbl, sizeof(gtbl), "%s/grace.tbl", tmpdir);
		assert_int_equal(ctl("fit --grace --trace %s --nodes 1 --gpus 4 -o %s", sample(),
				     gtbl), 0);
		assert_int_equal(ctl("show %s", gtbl), 0);
		assert_non_null(strstr(out, "GRACE table"));
		assert_int_equal(locus_tbl_read_file(gtbl, LOCUS_TBL_GRACE, &gfile, &glen, &e), 0);
		assert_int_equal(locus_table_reader_register(tr, LOCUS_GRACE_TABLE_CHANNEL, 0,
							     locus_grace_table_validate_cb, NULL,
							     &gr, &e), 0);
		gp.r = &gr;
		assert_int_equal(pthread_create(&th, NULL, poll_thread, &gp), 0);
		assert_int_equal(ctl("push -i %s %s --timeout-ms 5000", inst, gtbl), 0);
		gp.stop = 1;
		pthread_join(th, NULL);
		assert_non_null(strstr(out, "pushed grace table"));
		assert_non_null(strstr(out, "channel 1"));
		assert_int_equal(gp.adopted, 1);
		cur = locus_table_reader_table(&gr, &len);
		assert_int_equal(len, glen);
		assert_memory_equal(cur, gfile, glen);
		/* the ELDR reader did not move */
		cur = locus_table_reader_table(&rd, &len);
		assert_memory_equal(cur, file, flen);
		locus_table_reader_unregister(&gr);
		free(gfile);
	}
	/* a table too large for the channel's slots is refused by the writer */
	assert_int_equal(ctl("fit --trace %s --decoders 8 --tune off --centroids-per-decoder 4 "
			     "--quiet -o %s", sample(), tbl), 0);
	assert_int_equal(ctl("push -i %s %s --timeout-ms 200", inst, tbl), 1);
	print_message("too large for the slot: %s", out);
	assert_non_null(strstr(out, "locusctl: "));
	assert_non_null(strstr(out, "table_slot_size"));
	locus_table_reader_unregister(&rd);
	tpush_close(&srv);
	free(file);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fit_and_show),
		cmocka_unit_test(test_tune_refusals),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_tau_auto),
		cmocka_unit_test(test_push_into_segment),
	};
	char self[4096];
	int ret;

	(void)argc;
	locus_data_find_root(argv[0]);
	snprintf(self, sizeof(self), "%s", argv[0]);
	snprintf(locusctl, sizeof(locusctl), "%s/../bin/locusctl", dirname(self));
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	setenv(LOCUS_SHM_DIR_ENV, tmpdir, 1);
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	snprintf(self, sizeof(self), "rm -rf '%s'", tmpdir);
	if (system(self) != 0)
		ret = ret ? ret : 1;
	return ret;
}
