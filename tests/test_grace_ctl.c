// SPDX-License-Identifier: MIT
/*
 * locusctl GRACE subcommands end to end: fit from a JSONL trace, show,
 * EPLB export/import, usage errors, and rebalance against a live segment
 * whose expert counters a writer thread keeps bumping (skewed), checking
 * that a refit lands on the GRACE table channel and passes validation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_counters.h"
#include "locus_counters_priv.h"
#include "locus_grace.h"
#include "locus_grace_priv.h"
#include "locus_gracefit.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"
#include "locus_table.h"
#include "locus_tblfile.h"
#include "locusctl_grace.h"
#include "push_util.h"

static char dir[64];

static void path(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", dir, name);
}

static int run(const char *sub, ...)
{
	char *argv[32];
	int argc = 0;
	va_list ap;

	argv[argc++] = (char *)sub;
	va_start(ap, sub);
	for (char *s; (s = va_arg(ap, char *)) != NULL;)
		argv[argc++] = s;
	va_end(ap);
	argv[argc] = NULL;
	return locusctl_grace_main(sub, argc, argv);
}

/* 40 requests, 2 layers, top-2 over 8 experts, in co-activated pairs. */
static void write_trace(const char *file)
{
	FILE *f = fopen(file, "w");

	assert_non_null(f);
	fprintf(f, "{\"locus_trace\":1,\"n_layers\":2,\"k\":2,\"n_experts\":8}\n");
	for (int r = 0; r < 40; r++) {
		fprintf(f, "{\"id\":%d,\"prompt_routed_experts\":[", r);
		for (int t = 0; t < 6; t++) {
			int a = 2 * ((r + t) % 4), b = a + 1;

			if (t % 3 == 0) {
				a = 0;
				b = 1; /* experts 0 and 1 are hot */
			}
			fprintf(f, "%s[[%d,%d],[%d,%d]]", t ? "," : "", a, b, b, a);
		}
		fprintf(f, "]}\n");
	}
	fclose(f);
}

static int setup(void **state)
{
	(void)state;
	size_t n = (size_t)snprintf(dir, sizeof(dir), "/tmp/locus-grace-ctl.");

	memset(dir + n, 'X', 6); /* mkdtemp's template suffix */
	dir[n + 6] = '\0';
	assert_non_null(mkdtemp(dir));
	setenv(LOCUS_SHM_DIR_ENV, dir, 1); /* the segment and its control socket */
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_fit_show_eplb(void **state)
{
	char tr[128], tbl[128], js[128], tbl2[128];
	void *buf = NULL;
	size_t len;
	struct locus_error err = { 0 };
	const void *pl;
	size_t plen;
	(void)state;

	path(tr, sizeof(tr), "trace.jsonl");
	path(tbl, sizeof(tbl), "g.tbl");
	path(js, sizeof(js), "g.json");
	path(tbl2, sizeof(tbl2), "g2.tbl");
	write_trace(tr);
	assert_int_equal(run("fit", "--grace", "--trace", tr, "--nodes", "2", "--gpus", "2",
			     "--replica-budget", "1", "--load-tol", "1", "-o", tbl, NULL), 0);
	assert_int_equal(locus_tbl_read_file(tbl, LOCUS_TBL_GRACE, &buf, &len, &err), 0);
	assert_int_equal(locus_grace_blob_check(buf, len, &pl, &plen, &err), 0);
	/* experts 0 and 1 always co-activate: grouping keeps them on one GPU
	 * (their GPU carries 2x the mean: a load tolerance of 1 keeps the
	 * load-aware swaps from splitting them; replication takes the load) */
	struct locus_grace_view v;

	assert_int_equal(locus_grace_view_init(&v, (void *)pl, plen, &err), 0);
	assert_int_equal(v.primary[0], v.primary[1]);
	free(buf);
	assert_int_equal(run("show", tbl, NULL), 0);
	assert_int_equal(run("eplb-export", tbl, "-o", js, NULL), 0);
	assert_int_equal(run("eplb-import", js, "--nodes", "2", "--gpus", "2", "-o", tbl2, NULL),
			 0);
	assert_int_equal(run("show", tbl2, NULL), 0);
	/* usage and input errors */
	assert_int_equal(run("fit", "--trace", tr, "--nodes", "2", "--gpus", "2", "-o", tbl,
			     NULL), 2); /* no --grace */
	assert_int_equal(run("fit", "--grace", "--trace", tr, "--nodes", "0", "--gpus", "2",
			     "-o", tbl, NULL), 2);
	assert_int_equal(run("fit", "--grace", "--trace", tr, "--nodes", "2", "--gpus", "2",
			     "--r", "1.5", "-o", tbl, NULL), 2);
	assert_int_equal(run("fit", "--grace", "--trace", "/nonexistent", "--nodes", "2",
			     "--gpus", "2", "-o", tbl, NULL), 1);
	assert_int_equal(run("show", js, NULL), 1);        /* not a table */
	assert_int_equal(run("eplb-import", tbl, "--nodes", "2", "--gpus", "2", "-o", tbl2,
			     NULL), 1);                    /* not JSON */
	assert_int_equal(run("eplb-import", js, "--nodes", "5", "--gpus", "1", "-o", tbl2,
			     NULL), 1);                    /* slots do not divide */
	assert_int_equal(run("frobnicate", NULL), 2);
	assert_int_equal(run("show", "--bogus", tbl, NULL), 2);
}

struct writer {
	void *block;
	uint64_t off;
	volatile int stop;
};

static void *bump(void *arg)
{
	struct writer *w = arg;

	while (!w->stop) {
		/* layer l expert e at [l][e] of a [4][16] counter: expert 0 is hot */
		for (uint32_t l = 0; l < 2; l++) {
			locus_counter_add_elem(w->block, w->off, l * 16 + 0, 50);
			for (uint32_t e = 1; e < 8; e++)
				locus_counter_add_elem(w->block, w->off, l * 16 + e, 2);
		}
		usleep(1000);
	}
	return NULL;
}

/* Read a whole small file into buf (NUL-terminated). */
static void slurp(const char *file, char *buf, size_t n)
{
	FILE *f = fopen(file, "r");
	size_t got;

	assert_non_null(f);
	got = fread(buf, 1, n - 1, f);
	buf[got] = '\0';
	fclose(f);
}

/*
 * Refit every 3rd interval from a window of 3 with decay 0.5, at most one
 * copy moved: one refit line (round 3) naming the budget, and a pushed
 * table (if any) moves at most one copy from the base.
 */
static void budget_run(const char *inst, const char *tbl)
{
	char log[128], out[128], text[4096];
	struct locus_error err = { 0 };
	void *a = NULL, *b = NULL;
	size_t alen, blen;
	int saved, fd;

	path(log, sizeof(log), "budget.log");
	path(out, sizeof(out), "budget.tbl");
	fflush(stdout);
	saved = dup(1);
	fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(saved >= 0 && fd >= 0);
	dup2(fd, 1);
	close(fd);
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.03",
			     "--count", "3", "--window", "3", "--decay", "0.5", "--every", "3",
			     "--max-moves", "1", "-o", out, NULL), 0);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	slurp(log, text, sizeof(text));
	fputs(text, stdout);
	assert_null(strstr(text, "rebalance 1:"));
	assert_null(strstr(text, "rebalance 2:"));
	assert_non_null(strstr(text, "rebalance 3: "));
	assert_non_null(strstr(text, "(3 intervals)"));
	assert_non_null(strstr(text, "of 1 allowed"));
	if (access(out, F_OK) == 0) {
		struct locus_grace_view va, vb;
		const void *pa, *pb;
		size_t la, lb;
		uint32_t moves = 0;

		assert_int_equal(locus_tbl_read_file(tbl, LOCUS_TBL_GRACE, &a, &alen, &err), 0);
		assert_int_equal(locus_tbl_read_file(out, LOCUS_TBL_GRACE, &b, &blen, &err), 0);
		assert_int_equal(locus_grace_blob_check(a, alen, &pa, &la, &err), 0);
		assert_int_equal(locus_grace_blob_check(b, blen, &pb, &lb, &err), 0);
		assert_int_equal(locus_grace_view_init(&va, (void *)pa, la, &err), 0);
		assert_int_equal(locus_grace_view_init(&vb, (void *)pb, lb, &err), 0);
		for (uint32_t l = 0; l < va.dims->n_layers; l++)
			moves += locus_gracefit_moves_layer(&va, &vb, l);
		assert_true(moves <= 1);
		free(a);
		free(b);
	}
}

static void test_rebalance_pushes(void **state)
{
	char inst[48], tbl[128], out[128], tr[128];
	struct locus_shm_params sp = { 0 };
	struct locus_ctr_params cp = { .max_entries = 8, .n_blocks = 2, .block_size = 4096 };
	struct locus_table_params tp = { .n_channels = 2, .n_readers = 1 };
	struct locus_error err = { 0 };
	struct locus_shm *shm;
	struct locus_counters *c;
	struct locus_table_region *t;
	struct writer w = { 0 };
	struct tpush srv;
	pthread_t th;
	void *reg, *buf = NULL;
	size_t size, len;
	(void)state;

	/* base table: the one test_fit_show_eplb fitted (same directory) */
	path(tbl, sizeof(tbl), "g.tbl");
	path(out, sizeof(out), "pushed.tbl");
	path(tr, sizeof(tr), "trace.jsonl");
	snprintf(inst, sizeof(inst), "grace-ctl-%d", (int)getpid());
	tp.channel[0] = (struct locus_table_channel_params){ .n_slots = 2, .slot_size = 4096 };
	tp.channel[1] = (struct locus_table_channel_params){ .n_slots = 3, .slot_size = 65536 };
	sp.instance = inst;
	sp.region_size[LOCUS_REGION_COUNTERS] = locus_counters_region_size(&cp);
	if (locus_shm_create(&sp, &shm, &err))
		fail_msg("create: %s", err.msg);
	reg = locus_shm_region(shm, LOCUS_REGION_COUNTERS, &size);
	assert_int_equal(locus_counters_init(reg, size, &cp, &err), 0);
	assert_int_equal(locus_counters_open(reg, size, 0, &c, &err), 0);
	struct locus_ctr_desc d = { .name = "grace_expert_tokens", .kind = LOCUS_CTR_COUNTER,
				    .ndims = 2, .dim = { 4, 16 }, .label = { "layer", "expert" } };

	assert_true(locus_counters_register(c, &d, &w.off, &err) >= 0);
	w.block = locus_counters_block(c, 1);
	/* locusd's side: the channels in this process, pushes through the control socket */
	tpush_open(&srv, inst, &tp, c, locus_counters_block(c, 0), LOCUS_PUSHSRV_NO_GROUP);
	t = srv.t;
	tpush_run(&srv, NULL, NULL);
	locus_shm_set_state(shm, LOCUS_SHM_RUNNING);

	/* no traffic yet: nothing pushed */
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.02",
			     "--count", "1", NULL), 0);
	assert_int_equal(locus_table_published(t, LOCUS_GRACE_TABLE_CHANNEL), 0);
	/* a counter of the wrong shape or name is refused */
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.02",
			     "--count", "1", "--counter", "nope", NULL), 1);
	assert_int_equal(run("rebalance", "-i", "no-such-instance", "--table", tbl,
			     "--interval", "0.02", "--count", "1", NULL), 1);

	/* window, decay, every and move budget: refused out of range */
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.02",
			     "--window", "0", NULL), 2);
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.02",
			     "--decay", "0", NULL), 2);
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.02",
			     "--decay", "1.5", NULL), 2);
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.02",
			     "--every", "0", NULL), 2);
	/* primary swaps: the count checked, the calibration trace read and its shape checked */
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.02",
			     "--swaps", "-1", NULL), 2);
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.02",
			     "--count", "1", "--trace", "/nonexistent", NULL), 1);
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.02",
			     "--count", "1", "--trace", tr, "--swaps", "3", NULL), 0);

	assert_int_equal(pthread_create(&th, NULL, bump, &w), 0);
	budget_run(inst, tbl);
	assert_int_equal(run("rebalance", "-i", inst, "--table", tbl, "--interval", "0.05",
			     "--count", "2", "-o", out, NULL), 0);
	w.stop = 1;
	pthread_join(th, NULL);
	uint64_t p = locus_table_published(t, LOCUS_GRACE_TABLE_CHANNEL);

	assert_true(LOCUS_TABLE_GEN(p) >= 1);
	/* the pushed table replicates the hot expert 0 */
	assert_int_equal(locus_tbl_read_file(out, LOCUS_TBL_GRACE, &buf, &len, &err), 0);
	const void *pl;
	size_t plen;
	struct locus_grace_view v;

	assert_int_equal(locus_grace_blob_check(buf, len, &pl, &plen, &err), 0);
	assert_int_equal(locus_grace_view_init(&v, (void *)pl, plen, &err), 0);
	assert_true(v.replica[0] != LOCUS_GRACE_NO_RANK);
	free(buf);
	tpush_close(&srv);
	locus_counters_close(c);
	locus_shm_detach(shm);
	locus_shm_remove(inst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fit_show_eplb),
		cmocka_unit_test(test_rebalance_pushes),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
