// SPDX-License-Identifier: MIT
/*
 * locus-stat end to end: the test creates a segment in a private
 * LOCUS_SHM_DIR, registers and fills counters with values it knows, runs
 * the built binary (build/bin/locus-stat beside this test's directory) and
 * checks its table, its JSON (parsed back) and its Prometheus text (parsed
 * back line by line), and --watch rates. Error exits are in
 * test_locus_stat_errors.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_counters.h"
#include "locus_counters_priv.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"
#include "locus_stat.h"
#include "mini_json.h"
#include "stat_test_prom.h"
#include "stat_test_run.h"

#define HELP_ROUTED "Requests routed, \"quoted\" and back\\slashed"
#define BIG_SUM_TXT "9223372036854776825" /* 2^63 + 1017 */

struct fixture {
	struct locus_shm *shm;
	struct locus_counters *c;
	uint64_t routed_off;
};

static struct fixture fx;

/*
 * Known contents:
 *   eldr_routed        counter  100 + 23 + 7 = 130 over blocks 0, 1, 3
 *   inflight           gauge    -5 (block 0) + 12 (block 2) = 7
 *   decoder_assigned   counter  [decoder] = 1, 0, 5, 9
 *   tokens             counter  [layer][expert] 3 x 4, (i, j) = 10 i + j
 *   lat_ns             histogram 0, 1, 5, 5, 6, 1000, 2^63
 *   queue_wait         histogram [ring] 2: ring 0 has 3, ring 1 is empty
 */
static int setup(void **state)
{
	struct locus_ctr_params p = { .max_entries = 16, .n_blocks = 4, .block_size = 4096 };
	uint64_t off;
	void *b[4];
	(void)state;

	stat_test_env();
	fx.shm = make_segment("stattest", locus_counters_region_size(&p), &p, &fx.c);
	for (uint32_t i = 0; i < 4; i++)
		b[i] = locus_counters_block(fx.c, i);
	reg(fx.c, "eldr_routed", HELP_ROUTED, LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &off);
	fx.routed_off = off;
	locus_counter_add(b[0], off, 100);
	locus_counter_add(b[1], off, 23);
	locus_counter_add(b[3], off, 7);
	reg(fx.c, "inflight", "Requests in flight", LOCUS_CTR_GAUGE, 0, 0, 0, NULL, NULL, &off);
	locus_gauge_set(b[0], off, -5);
	locus_gauge_set(b[2], off, 12);
	reg(fx.c, "decoder_assigned", "Requests per decoder", LOCUS_CTR_COUNTER, 1, 4, 0,
	    "decoder", NULL, &off);
	locus_counter_add_elem(b[0], off, 0, 1);
	locus_counter_add_elem(b[1], off, 2, 5);
	locus_counter_add_elem(b[2], off, 3, 4);
	locus_counter_add_elem(b[3], off, 3, 5);
	reg(fx.c, "tokens", "", LOCUS_CTR_COUNTER, 2, 3, 4, "layer", "expert", &off);
	for (uint32_t i = 0; i < 3; i++)
		for (uint32_t j = 0; j < 4; j++)
			locus_counter_add_elem(b[j % 4], off, i * 4 + j, 10 * i + j);
	reg(fx.c, "lat_ns", "Latency", LOCUS_CTR_HISTOGRAM, 0, 0, 0, NULL, NULL, &off);
	locus_hist_record(b[0], off, 0);
	locus_hist_record(b[1], off, 1);
	locus_hist_record(b[2], off, 5);
	locus_hist_record(b[3], off, 5);
	locus_hist_record(b[0], off, 6);
	locus_hist_record(b[1], off, 1000);
	locus_hist_record(b[2], off, 1ull << 63);
	reg(fx.c, "queue_wait", "Wait per ring", LOCUS_CTR_HISTOGRAM, 1, 2, 0, "ring", NULL, &off);
	locus_hist_record_elem(b[1], off, 0, 3);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	locus_counters_close(fx.c);
	locus_shm_detach(fx.shm);
	return stat_test_env_cleanup();
}

/* The line of out that starts with prefix followed by a blank, or NULL. */
static const char *line_of(const char *out, const char *prefix)
{
	size_t n = strlen(prefix);

	for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, prefix, n) == 0 && l[n] == ' ')
			return l;
	return NULL;
}

/* Whitespace-separated field i of the line at l. */
static void field(const char *l, int i, char *buf, size_t len)
{
	int k = 0;

	buf[0] = '\0';
	while (*l && *l != '\n') {
		size_t n;

		while (*l == ' ')
			l++;
		n = strcspn(l, " \n");
		if (k++ == i) {
			snprintf(buf, len, "%.*s", (int)n, l);
			return;
		}
		l += n;
	}
}

static void expect_field(const char *out, const char *name, int i, const char *want)
{
	const char *l = line_of(out, name);
	char got[128];

	if (!l)
		fail_msg("no line for %s in:\n%s", name, out);
	field(l, i, got, sizeof(got));
	if (strcmp(got, want))
		fail_msg("%s field %d: \"%s\", want \"%s\"", name, i, got, want);
}

static void test_table(void **state)
{
	struct run r;
	char head[128];
	(void)state;

	RUN(&r, "-i", "stattest");
	assert_int_equal(r.status, 0);
	snprintf(head, sizeof(head), "instance stattest  state running  owner pid %d  uptime 0d ",
		 (int)getpid());
	assert_memory_equal(r.out, head, strlen(head));
	expect_field(r.out, "eldr_routed", 1, "counter");
	expect_field(r.out, "eldr_routed", 2, "130");
	expect_field(r.out, "inflight", 2, "7");
	expect_field(r.out, "decoder_assigned{decoder=0}", 2, "1");
	expect_field(r.out, "decoder_assigned{decoder=2}", 2, "5");
	expect_field(r.out, "decoder_assigned{decoder=3}", 2, "9");
	assert_null(line_of(r.out, "decoder_assigned{decoder=1}")); /* zero: omitted */
	expect_field(r.out, "tokens{layer=2,expert=3}", 2, "23");
	assert_null(line_of(r.out, "tokens{layer=0,expert=0}"));
	/* histogram: count, sum, mean, p50 (rank 3.5 of 7 lies halfway in [4, 7]) */
	expect_field(r.out, "lat_ns", 3, "7");
	expect_field(r.out, "lat_ns", 5, BIG_SUM_TXT);
	expect_field(r.out, "lat_ns", 9, "5.5");
	expect_field(r.out, "queue_wait{ring=0}", 3, "1");
	assert_null(line_of(r.out, "queue_wait{ring=1}"));
	assert_null(strstr(r.out, "RATE/s"));
	assert_string_equal(r.err, "");
	run_free(&r);

	/* $LOCUS_INSTANCE names the default instance; patterns select by glob */
	setenv("LOCUS_INSTANCE", "stattest", 1);
	RUN(&r, "dec*", "infl?ght");
	unsetenv("LOCUS_INSTANCE");
	assert_int_equal(r.status, 0);
	assert_non_null(line_of(r.out, "inflight"));
	assert_non_null(line_of(r.out, "decoder_assigned{decoder=3}"));
	assert_null(line_of(r.out, "eldr_routed"));
	assert_null(line_of(r.out, "lat_ns"));
	run_free(&r);
}

static const struct mj_val *metric(const struct mj_val *doc, const char *name)
{
	const struct mj_val *m = mj_get(doc, "metrics");

	for (size_t i = 0; m && i < m->n; i++) {
		const struct mj_val *nm = mj_get(&m->kid[i], "name");

		if (nm && nm->t == MJ_STR && strcmp(nm->s, name) == 0)
			return &m->kid[i];
	}
	fail_msg("metric %s missing", name);
	return NULL;
}

static void expect_num(const struct mj_val *v, const char *txt)
{
	assert_non_null(v);
	assert_int_equal(v->t, MJ_NUM);
	assert_string_equal(v->s, txt);
}

static void test_json(void **state)
{
	struct mj_val doc;
	const struct mj_val *m, *v;
	const char *end;
	struct run r;
	char pid[32];
	(void)state;

	RUN(&r, "-i", "stattest", "--json");
	assert_int_equal(r.status, 0);
	if (mj_parse(r.out, &doc, &end) < 0 || *end)
		fail_msg("invalid JSON at offset %td: %s", end - r.out, r.out);
	assert_string_equal(mj_get(&doc, "instance")->s, "stattest");
	assert_string_equal(mj_get(&doc, "state")->s, "running");
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	expect_num(mj_get(&doc, "owner_pid"), pid);
	expect_num(mj_get(&doc, "lcore_blocks"), "4");
	assert_true(mj_get(&doc, "uptime_s")->num >= 0);
	assert_null(mj_get(&doc, "interval_s"));
	assert_int_equal(mj_get(&doc, "metrics")->n, 6);

	m = metric(&doc, "eldr_routed");
	assert_string_equal(mj_get(m, "help")->s, HELP_ROUTED); /* escaping round-trips */
	assert_string_equal(mj_get(m, "kind")->s, "counter");
	expect_num(mj_get(m, "value"), "130");
	assert_null(mj_get(m, "rate"));
	expect_num(mj_get(metric(&doc, "inflight"), "value"), "7");

	m = metric(&doc, "decoder_assigned");
	assert_string_equal(mj_at(mj_get(m, "labels"), 0)->s, "decoder");
	expect_num(mj_at(mj_get(m, "shape"), 0), "4");
	v = mj_get(m, "values");
	assert_int_equal(v->n, 4);
	expect_num(mj_at(v, 0), "1");
	expect_num(mj_at(v, 1), "0");
	expect_num(mj_at(v, 2), "5");
	expect_num(mj_at(v, 3), "9");

	m = metric(&doc, "tokens");
	assert_string_equal(mj_at(mj_get(m, "labels"), 1)->s, "expert");
	v = mj_get(m, "values");
	assert_int_equal(v->n, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(mj_at(v, i)->n, 4);
		for (size_t j = 0; j < 4; j++)
			assert_true(mj_at(mj_at(v, i), j)->num == (double)(10 * i + j));
	}

	v = mj_get(metric(&doc, "lat_ns"), "value");
	expect_num(mj_get(v, "count"), "7");
	expect_num(mj_get(v, "sum"), BIG_SUM_TXT);
	assert_true(mj_get(v, "p50")->num == 5.5);
	/* non-empty buckets as [upper bound, count]: 0, 1, [4,7], [512,1023], open */
	assert_int_equal(mj_get(v, "buckets")->n, 5);
	expect_num(mj_at(mj_at(mj_get(v, "buckets"), 2), 0), "7");
	expect_num(mj_at(mj_at(mj_get(v, "buckets"), 2), 1), "3");
	expect_num(mj_at(mj_at(mj_get(v, "buckets"), 4), 0), "18446744073709551615");

	v = mj_get(metric(&doc, "queue_wait"), "values");
	expect_num(mj_get(mj_at(v, 0), "count"), "1");
	expect_num(mj_get(mj_at(v, 1), "count"), "0");
	assert_int_equal(mj_get(mj_at(v, 1), "p50")->t, MJ_NULL);
	mj_free(&doc);
	run_free(&r);
}

static void test_prometheus(void **state)
{
	struct prom_doc d;
	struct run r;
	char err[256];
	(void)state;

	RUN(&r, "-i", "stattest", "--prometheus");
	assert_int_equal(r.status, 0);
	if (prom_parse(r.out, &d, err, sizeof(err)) < 0)
		fail_msg("%s\n%s", err, r.out);
	assert_string_equal(prom_value(&d, "locus_eldr_routed_total"), "130");
	assert_string_equal(prom_help(&d, "locus_eldr_routed_total"),
			    "Requests routed, \"quoted\" and back\\\\slashed");
	assert_string_equal(prom_type(&d, "locus_eldr_routed_total"), "counter");
	assert_string_equal(prom_type(&d, "locus_inflight"), "gauge");
	assert_string_equal(prom_value(&d, "locus_inflight"), "7");
	assert_string_equal(prom_value(&d, "locus_decoder_assigned_total{decoder=\"1\"}"), "0");
	assert_string_equal(prom_value(&d, "locus_decoder_assigned_total{decoder=\"3\"}"), "9");
	assert_string_equal(prom_value(&d, "locus_tokens_total{layer=\"2\",expert=\"3\"}"), "23");
	/* lat_ns is exported in base units: locus_lat_seconds, bounds and sum / 10^9 exactly */
	assert_null(prom_type(&d, "locus_lat_ns"));
	assert_string_equal(prom_type(&d, "locus_lat_seconds"), "histogram");
	assert_string_equal(prom_value(&d, "locus_lat_seconds_bucket{le=\"0\"}"), "1");
	assert_string_equal(prom_value(&d, "locus_lat_seconds_bucket{le=\"0.000000007\"}"), "5");
	assert_string_equal(prom_value(&d, "locus_lat_seconds_bucket{le=\"0.000001023\"}"), "6");
	assert_string_equal(prom_value(&d, "locus_lat_seconds_bucket{le=\"+Inf\"}"), "7");
	assert_string_equal(prom_value(&d, "locus_lat_seconds_count"), "7");
	assert_string_equal(prom_value(&d, "locus_lat_seconds_sum"), "9223372036.854776825");
	assert_string_equal(prom_value(&d, "locus_queue_wait_count{ring=\"0\"}"), "1");
	assert_string_equal(prom_value(&d, "locus_queue_wait_bucket{ring=\"1\",le=\"+Inf\"}"), "0");
	assert_null(prom_value(&d, "locus_lat_seconds_bucket{le=\"18446744073.709551615\"}"));
	assert_non_null(prom_value(&d, "locus_lat_seconds_bucket{le=\"4611686018.427387903\"}"));
	/* 2 segment lines + 1 + 1 + 4 + 12 + (64 + 2) * 3 */
	assert_int_equal(d.n_samples, 2 + 1 + 1 + 4 + 12 + 66 * 3);
	prom_free(&d);
	run_free(&r);
}

/* Entry names that map to one Prometheus name: the later one is left out. */
static void test_prometheus_name_clash(void **state)
{
	struct locus_ctr_params p = { .max_entries = 8, .n_blocks = 1, .block_size = 2048 };
	struct locus_counters *c;
	struct locus_shm *shm;
	struct prom_doc d;
	struct run r;
	char err[256];
	uint64_t off;
	(void)state;

	shm = make_segment("clash", locus_counters_region_size(&p), &p, &c);
	reg(c, "h", "", LOCUS_CTR_HISTOGRAM, 0, 0, 0, NULL, NULL, &off);
	reg(c, "h_sum", "", LOCUS_CTR_GAUGE, 0, 0, 0, NULL, NULL, &off);
	reg(c, "c", "", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &off);
	reg(c, "c_total", "", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &off);
	reg(c, "stat_segment_info", "", LOCUS_CTR_GAUGE, 0, 0, 0, NULL, NULL, &off);
	reg(c, "ok", "", LOCUS_CTR_GAUGE, 0, 0, 0, NULL, NULL, &off);
	RUN(&r, "-i", "clash", "--prometheus");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.err, "h_sum left out"));
	assert_non_null(strstr(r.err, "c_total left out"));
	assert_non_null(strstr(r.err, "stat_segment_info left out"));
	if (prom_parse(r.out, &d, err, sizeof(err)) < 0)
		fail_msg("%s\n%s", err, r.out);
	assert_string_equal(prom_value(&d, "locus_ok"), "0");
	assert_string_equal(prom_value(&d, "locus_c_total"), "0");
	assert_string_equal(prom_type(&d, "locus_h"), "histogram");
	prom_free(&d);
	run_free(&r);
	locus_counters_close(c);
	locus_shm_detach(shm);
	assert_int_equal(locus_shm_remove("clash"), 0);
}

/* The real shape of per-(layer, expert) token counts: 48 x 128, lcore-summed. */
static void test_big_vector(void **state)
{
	struct locus_ctr_params p = { .max_entries = 2, .n_blocks = 3,
				      .block_size = 48 * 128 * 8 };
	const struct mj_val *v;
	struct locus_counters *c;
	struct locus_shm *shm;
	struct mj_val doc;
	struct prom_doc d;
	const char *end;
	struct run r;
	char err[256];
	uint64_t off;
	(void)state;

	shm = make_segment("big", locus_counters_region_size(&p), &p, &c);
	reg(c, "grace_expert_tokens", "Tokens routed per (layer, expert)", LOCUS_CTR_COUNTER, 2,
	    48, 128, "layer", "expert", &off);
	for (uint32_t b = 0; b < 3; b++)
		for (uint32_t k = 0; k < 48 * 128; k++)
			locus_counter_add_elem(locus_counters_block(c, b), off, k, k % 7 + b);

	RUN(&r, "-i", "big", "--json");
	assert_int_equal(r.status, 0);
	if (mj_parse(r.out, &doc, &end) < 0 || *end)
		fail_msg("invalid JSON");
	v = mj_get(metric(&doc, "grace_expert_tokens"), "values");
	assert_int_equal(v->n, 48);
	for (size_t l = 0; l < 48; l++) {
		assert_int_equal(mj_at(v, l)->n, 128);
		for (size_t e = 0; e < 128; e++)
			assert_true(mj_at(mj_at(v, l), e)->num == (double)(3 * ((l * 128 + e) % 7) + 3));
	}
	mj_free(&doc);
	run_free(&r);

	RUN(&r, "-i", "big", "--prometheus");
	assert_int_equal(r.status, 0);
	if (prom_parse(r.out, &d, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(d.n_samples, 2 + 48 * 128);
	/* (47 * 128 + 127) % 7 = 6143 % 7 = 4: 3 * 4 + 3 */
	assert_string_equal(prom_value(&d, "locus_grace_expert_tokens_total{layer=\"47\",expert=\"127\"}"),
			    "15");
	prom_free(&d);
	run_free(&r);
	locus_counters_close(c);
	locus_shm_detach(shm);
	assert_int_equal(locus_shm_remove("big"), 0);
}

static void bump_routed(int out_fd)
{
	(void)out_fd;
	locus_counter_add(locus_counters_block(fx.c, 2), fx.routed_off, 1000);
}

static void test_watch(void **state)
{
	const char *p;
	struct run r;
	uint64_t last = 0;
	int lines = 0;
	(void)state;

	run_stat(&r, -1, stat_bin, bump_routed, (const char *const[]){
		"-i", "stattest", "--json", "--watch", "0.05", "--count", "3", "eldr_*", NULL });
	assert_int_equal(r.status, 0);
	for (p = r.out; *p; lines++) {
		const struct mj_val *m, *rate;
		struct mj_val doc;
		const char *end;
		uint64_t v;

		if (mj_parse(p, &doc, &end) < 0)
			fail_msg("sample %d is not JSON: %s", lines, p);
		m = metric(&doc, "eldr_routed");
		v = strtoull(mj_get(m, "value")->s, NULL, 10);
		assert_true(v >= last);
		rate = mj_get(m, "rate");
		if (lines == 0) {
			assert_null(rate);
			assert_null(mj_get(&doc, "interval_s"));
		} else {
			double dt = mj_get(&doc, "interval_s")->num;

			/* the rate is the increase over the interval it reports */
			assert_true(dt > 0);
			assert_non_null(rate);
			assert_true(fabs(rate->num * dt - (double)(v - last)) <= 1e-6 * (double)(v - last) + 1e-9);
		}
		last = v;
		mj_free(&doc);
		p = end;
	}
	assert_int_equal(lines, 3);
	run_free(&r);

	RUN(&r, "-i", "stattest", "--watch", "0.02", "--count", "2", "inflight");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "RATE/s"));
	run_free(&r);
}

/* The checkers the tests above rely on must be able to fail. */
static void test_checkers_reject(void **state)
{
	static const char *const bad_prom[] = {
		"locus_x 1\n",                                            /* no HELP/TYPE */
		"# TYPE locus_x gauge\nlocus_x 1\n",                      /* TYPE without HELP */
		"# HELP locus_x h\n# TYPE locus_x gauge\nlocus_y 1\n",   /* other family */
		"# HELP locus_x h\n# TYPE locus_x gauge\nlocus_x one\n", /* value */
		"# HELP locus_x h\n# TYPE locus_x gauge\nlocus_x{a=\"1} 1\n",
		"# HELP locus_x h\n# TYPE locus_x gauge\nlocus_x 1",      /* no line feed */
		"# HELP locus_x h\n# TYPE locus_x counter\nlocus_x 1\n",  /* no _total */
		"# HELP x h\n# TYPE x gauge\nx 1\n",                      /* no locus_ prefix */
		"# HELP locus_x h\n# TYPE locus_x gauge\nlocus_x 1\n"
		"# HELP locus_x h\n# TYPE locus_x gauge\n",               /* family repeated */
		"# HELP locus_h h\n# TYPE locus_h histogram\n"            /* not cumulative */
		"locus_h_bucket{le=\"1\"} 2\nlocus_h_bucket{le=\"+Inf\"} 1\n"
		"locus_h_sum 1\nlocus_h_count 1\n",
		"# HELP locus_h h\n# TYPE locus_h histogram\n"            /* count != +Inf */
		"locus_h_bucket{le=\"1\"} 1\nlocus_h_bucket{le=\"+Inf\"} 2\n"
		"locus_h_sum 1\nlocus_h_count 3\n",
		"# HELP locus_h h\n# TYPE locus_h histogram\n"            /* no +Inf */
		"locus_h_bucket{le=\"1\"} 1\nlocus_h_sum 1\nlocus_h_count 1\n",
	};
	static const char *const bad_json[] = {
		"{", "{\"a\":1,}", "[1 2]", "{\"a\" 1}", "\"\x01\"", "\"\\x\"", "01", "1.",
		"-", "tru", "{\"a\":[1,2}", "\"abc",
	};
	struct prom_doc d;
	struct mj_val v;
	const char *end;
	char err[256];
	(void)state;

	assert_int_equal(prom_parse("# HELP locus_h h\n# TYPE locus_h histogram\n"
				    "locus_h_bucket{le=\"1\"} 1\nlocus_h_bucket{le=\"+Inf\"} 2\n"
				    "locus_h_sum 1\nlocus_h_count 2\n", &d, err, sizeof(err)), 0);
	prom_free(&d);
	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(bad_prom); i++) {
		if (prom_parse(bad_prom[i], &d, err, sizeof(err)) == 0)
			fail_msg("prometheus case %zu accepted", i);
		prom_free(&d);
	}
	assert_int_equal(mj_parse("{\"a\":[1,-2.5e3,\"\\u0041\\n\"],\"b\":null}", &v, &end), 0);
	assert_string_equal(mj_at(mj_get(&v, "a"), 2)->s, "A\n");
	assert_true(mj_at(mj_get(&v, "a"), 1)->num == -2500);
	mj_free(&v);
	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(bad_json); i++) {
		if (mj_parse(bad_json[i], &v, &end) < 0)
			continue;
		mj_free(&v);
		if (*end == '\0')
			fail_msg("json case %zu accepted", i); /* trailing text is an error */
	}
}

/*
 * --by-lcore: each block on its own, in block order, named by what writes
 * it (an engine sets its "engines" gauge to 1; others are "main"). Runs
 * last: it registers that gauge.
 */
static void by_lcore_expect(const char *want_role[4])
{
	static const char *inflight[4] = { "-5", "0", "12", "0" };
	const char *end;
	char *p;
	struct run r;

	RUN(&r, "-i", "stattest", "--by-lcore", "--json", "eldr_routed", "inflight");
	assert_int_equal(r.status, 0);
	p = r.out;
	for (int b = 0; b < 4; b++) {
		struct mj_val doc;
		char num[32], *nl = strchr(p, '\n');

		if (!nl)
			fail_msg("block %d: no line in %s", b, r.out);
		*nl = '\0';
		if (mj_parse(p, &doc, &end) < 0 || *end)
			fail_msg("block %d: not one JSON object a line: %s", b, p);
		snprintf(num, sizeof(num), "%d", b);
		expect_num(mj_get(&doc, "block"), num);
		assert_string_equal(mj_get(&doc, "lcore")->s, want_role[b]);
		/* the block's own word, as its writer left it (test_watch adds to block 2) */
		snprintf(num, sizeof(num), "%llu", (unsigned long long)*locus_ctr_word(
				 locus_counters_block(fx.c, (uint32_t)b), fx.routed_off));
		expect_num(mj_get(metric(&doc, "eldr_routed"), "value"), num);
		expect_num(mj_get(metric(&doc, "inflight"), "value"), inflight[b]);
		mj_free(&doc);
		p = nl + 1;
	}
	assert_int_equal(*p, '\0');
	run_free(&r);
}

static void test_by_lcore(void **state)
{
	const char *none[4] = { "main", "main", "main", "main" };
	const char *two[4] = { "engine 0", "main", "engine 1", "main" };
	uint64_t off;
	struct run r;
	(void)state;

	by_lcore_expect(none);
	reg(fx.c, "engines", "engine lcores", LOCUS_CTR_GAUGE, 0, 0, 0, NULL, NULL, &off);
	locus_gauge_set(locus_counters_block(fx.c, 0), off, 1);
	locus_gauge_set(locus_counters_block(fx.c, 2), off, 1);
	by_lcore_expect(two);
	RUN(&r, "-i", "stattest", "--by-lcore", "eldr_routed");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "lcore block 2 (engine 1)"));
	expect_field(strstr(r.out, "lcore block 1 (main)"), "eldr_routed", 2, "23");
	run_free(&r);
	/* one sample, no rates: --watch and --prometheus are refused */
	RUN(&r, "-i", "stattest", "--by-lcore", "--watch", "1");
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "--by-lcore takes one sample"));
	run_free(&r);
	RUN(&r, "-i", "stattest", "--by-lcore", "--prometheus");
	assert_int_equal(r.status, 1);
	run_free(&r);
}

/*
 * --slow on a segment of its own: 2 nodes x 2 GPUs; ranks 1 and 3 answered
 * (rank 3 slower: first), rank 3's slowest of the last second 900 us; sends
 * to the peers at index 0 (node 1) and 1 (node 5) on 2 rails, rail 1 to
 * node 5 the slowest.
 */
static void test_slow(void **state)
{
	struct locus_ctr_params p = { .max_entries = 8, .n_blocks = 2, .block_size = 8192 };
	struct locus_counters *c;
	struct locus_shm *shm;
	uint64_t n, ns, mx, out, h, pn;
	void *b0, *b1;
	const char *l;
	struct run r;
	(void)state;

	shm = make_segment("slowtest", locus_counters_region_size(&p), &p, &c);
	b0 = locus_counters_block(c, 0);
	b1 = locus_counters_block(c, 1);
	reg(c, "rank_answers", "", LOCUS_CTR_COUNTER, 1, 4, 0, "rank", NULL, &n);
	reg(c, "rank_answer_ns", "", LOCUS_CTR_COUNTER, 1, 4, 0, "rank", NULL, &ns);
	reg(c, "rank_answer_max_ns", "", LOCUS_CTR_GAUGE, 1, 4, 0, "rank", NULL, &mx);
	reg(c, "remote_messages_out", "", LOCUS_CTR_COUNTER, 1, 2, 0, "node", NULL, &out);
	reg(c, "rail_send_ns", "", LOCUS_CTR_HISTOGRAM, 2, 2, 2, "rail", "peer", &h);
	reg(c, "rail_peer_node", "", LOCUS_CTR_GAUGE, 1, 2, 0, "peer", NULL, &pn);
	locus_counter_add_elem(b0, n, 1, 10);
	locus_counter_add_elem(b0, ns, 1, 10 * 100000);    /* 100 us each */
	locus_counter_add_elem(b0, n, 3, 4);
	locus_counter_add_elem(b1, ns, 3, 4 * 500000);     /* 500 us each, another block */
	locus_gauge_set_elem(b0, mx, 3, 900000);
	locus_gauge_set_elem(b0, pn, 0, 1);
	locus_gauge_set_elem(b0, pn, 1, 5);
	for (int i = 0; i < 50; i++) {
		locus_hist_record_elem(b0, h, 0 * 2 + 0, 10000);  /* rail 0, node 1: 10 us */
		locus_hist_record_elem(b0, h, 1 * 2 + 1, 80000);  /* rail 1, node 5: 80 us */
	}
	RUN(&r, "-i", "slowtest", "--slow");
	assert_int_equal(r.status, 0);
	l = strstr(r.out, "rank   node");
	assert_non_null(l);
	l = strchr(l, '\n') + 1;
	/* rank 3 (node 1), 4 answers, mean 500 us, max 900 us; then rank 1 (node 0) */
	assert_int_equal(strncmp(l, "     3      1            4        500.0            900.0", 56), 0);
	l = strchr(l, '\n') + 1;
	assert_int_equal(strncmp(l, "     1      0           10        100.0", 39), 0);
	l = strstr(r.out, "rail   node");
	assert_non_null(l);
	l = strchr(l, '\n') + 1;
	assert_int_equal(strncmp(l, "     1      5           50", 26), 0);
	l = strchr(l, '\n') + 1;
	assert_int_equal(strncmp(l, "     0      1           50", 26), 0);
	run_free(&r);
	RUN(&r, "-i", "slowtest", "--slow", "--json");
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "--slow takes no other option"));
	run_free(&r);
	drop_segment(shm, c, "slowtest");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_prometheus),
		cmocka_unit_test(test_prometheus_name_clash),
		cmocka_unit_test(test_big_vector),
		cmocka_unit_test(test_watch),
		cmocka_unit_test(test_checkers_reject),
		cmocka_unit_test(test_by_lcore),
		cmocka_unit_test(test_slow),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
