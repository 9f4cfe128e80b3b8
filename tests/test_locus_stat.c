// SPDX-License-Identifier: MIT
/*
 * locus-stat end to end: the test creates a segment in a private
 * LOCUS_SHM_DIR, registers and fills counters with values it knows, runs
 * the built binary (build/bin/locus-stat beside this test's directory) and
 * checks its table, its JSON (parsed back) and its Prometheus text (parsed
 * back line by line), then every documented error exit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <unistd.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "locus_counters.h"
#include "locus_shm.h"
#include "locus_stat.h"
#include "mini_json.h"
#include "stat_test_prom.h"

#define HELP_ROUTED "Requests routed, \"quoted\" and back\\slashed"
#define BIG_SUM_TXT "9223372036854776825" /* 2^63 + 1017 */

static char tmpdir[64];
static char stat_bin[PATH_MAX];

struct fixture {
	struct locus_shm *shm;
	struct locus_counters *c;
	uint64_t routed_off;
};

static struct fixture fx;

struct run {
	int status;      /* exit code, or 128 + signal */
	char *out, *err;
};

static char *slurp(int fd)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	ssize_t r;

	assert_non_null(buf);
	lseek(fd, 0, SEEK_SET);
	while ((r = read(fd, buf + n, cap - n - 1)) > 0) {
		n += (size_t)r;
		if (n + 1 == cap) {
			buf = realloc(buf, cap *= 2);
			assert_non_null(buf);
		}
	}
	buf[n] = '\0';
	return buf;
}

static int tmp_fd(void)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/outXXXXXX", tmpdir);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	return fd;
}

/*
 * Run locus-stat with argv (NULL-terminated, argv[0] excluded) as uid (or
 * as ourselves when uid < 0). tick, when set, runs in the parent every
 * millisecond, with the child's stdout, until the child exits.
 */
static void run_stat(struct run *r, int uid, const char *bin, void (*tick)(int out_fd),
		     const char *const *args)
{
	const char *argv[32] = { bin };
	int out = tmp_fd(), err = tmp_fd(), st;
	pid_t pid;
	size_t n = 1;

	for (; args[n - 1]; n++) {
		assert_true(n < LOCUS_ARRAY_SIZE(argv) - 1);
		argv[n] = args[n - 1];
	}
	argv[n] = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(30); /* survives exec: a hung locus-stat dies */
		dup2(out, 1);
		dup2(err, 2);
		if (uid >= 0 && (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
				 setresuid(uid, uid, uid) < 0))
			_exit(125);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &st, tick ? WNOHANG : 0) == 0) {
		tick(out);
		usleep(1000);
	}
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r->out = slurp(out);
	r->err = slurp(err);
	close(out);
	close(err);
}

#define RUN(r, ...) run_stat((r), -1, stat_bin, NULL, (const char *const[]){ __VA_ARGS__, NULL })

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
}

static void reg(struct locus_counters *c, const char *name, const char *help,
		enum locus_ctr_kind kind, uint32_t ndims, uint32_t d0, uint32_t d1,
		const char *l0, const char *l1, uint64_t *off)
{
	struct locus_ctr_desc d = { .name = name, .help = help, .kind = kind, .ndims = ndims,
				    .dim = { d0, d1 }, .label = { l0, l1 } };
	struct locus_error err;

	if (locus_counters_register(c, &d, off, &err) < 0)
		fail_msg("register %s: %s", name, err.msg);
}

static struct locus_shm *make_segment(const char *instance, size_t ctr_size,
				      struct locus_ctr_params *p, struct locus_counters **c)
{
	struct locus_shm_params sp = { .instance = instance };
	struct locus_shm *shm;
	struct locus_error err;
	size_t size;
	void *region;

	sp.region_size[LOCUS_REGION_COUNTERS] = ctr_size;
	if (locus_shm_create(&sp, &shm, &err) < 0)
		fail_msg("create %s: %s", instance, err.msg);
	region = locus_shm_region(shm, LOCUS_REGION_COUNTERS, &size);
	if (p) {
		assert_int_equal(locus_counters_init(region, size, p, &err), 0);
		assert_int_equal(locus_counters_open(region, size, 0, c, &err), 0);
	}
	locus_shm_set_state(shm, LOCUS_SHM_RUNNING);
	return shm;
}

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
	char self[PATH_MAX];
	ssize_t n;
	uint64_t off;
	void *b[4];
	(void)state;

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(n > 0);
	self[n] = '\0';
	snprintf(stat_bin, sizeof(stat_bin), "%s/../bin/locus-stat", dirname(self));
	if (access(stat_bin, X_OK) < 0)
		fail_msg("%s not built", stat_bin);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/locus-stat-test.XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	chmod(tmpdir, 0755); /* uid 65534 must reach the files to meet their modes */
	setenv(LOCUS_SHM_DIR_ENV, tmpdir, 1);
	unsetenv("LOCUS_INSTANCE");

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
	char cmd[PATH_MAX + 16];
	(void)state;

	locus_counters_close(fx.c);
	locus_shm_detach(fx.shm);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
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
	assert_string_equal(prom_type(&d, "locus_lat_ns"), "histogram");
	assert_string_equal(prom_value(&d, "locus_lat_ns_bucket{le=\"0\"}"), "1");
	assert_string_equal(prom_value(&d, "locus_lat_ns_bucket{le=\"7\"}"), "5");
	assert_string_equal(prom_value(&d, "locus_lat_ns_bucket{le=\"1023\"}"), "6");
	assert_string_equal(prom_value(&d, "locus_lat_ns_bucket{le=\"+Inf\"}"), "7");
	assert_string_equal(prom_value(&d, "locus_lat_ns_count"), "7");
	assert_string_equal(prom_value(&d, "locus_lat_ns_sum"), BIG_SUM_TXT);
	assert_string_equal(prom_value(&d, "locus_queue_wait_count{ring=\"0\"}"), "1");
	assert_string_equal(prom_value(&d, "locus_queue_wait_bucket{ring=\"1\",le=\"+Inf\"}"), "0");
	assert_null(prom_value(&d, "locus_lat_ns_bucket{le=\"18446744073709551615\"}"));
	/* 2 segment lines + 1 + 1 + 4 + 12 + (64 + 2) * 3 */
	assert_int_equal(d.n_samples, 2 + 1 + 1 + 4 + 12 + 66 * 3);
	prom_free(&d);
	run_free(&r);
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

static void expect_exit(int want, const char *err_has, const char *const *args)
{
	struct run r;

	run_stat(&r, -1, stat_bin, NULL, args);
	if (r.status != want || (err_has && !strstr(r.err, err_has)))
		fail_msg("locus-stat %s ...: exit %d (want %d), stderr: %s", args[0], r.status,
			 want, r.err);
	run_free(&r);
}

#define EXPECT_EXIT(want, err_has, ...) \
	expect_exit((want), (err_has), (const char *const[]){ __VA_ARGS__, NULL })

static void test_usage_errors(void **state)
{
	struct run r;
	(void)state;

	EXPECT_EXIT(1, "exclude", "-i", "stattest", "--json", "--prometheus");
	EXPECT_EXIT(1, "--count needs --watch", "-i", "stattest", "--count", "2");
	EXPECT_EXIT(1, "--watch", "-i", "stattest", "--watch", "0");
	EXPECT_EXIT(1, "--watch", "-i", "stattest", "--watch", "1s");
	EXPECT_EXIT(1, "--count", "-i", "stattest", "--watch", "1", "--count", "-1");
	EXPECT_EXIT(1, "--prometheus", "-i", "stattest", "--prometheus", "--watch", "1");
	EXPECT_EXIT(1, "bad instance name", "-i", "../etc");
	EXPECT_EXIT(1, NULL, "--no-such-option");
	RUN(&r, "--help");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "Exit codes"));
	run_free(&r);
}

static void test_no_instance(void **state)
{
	(void)state;
	EXPECT_EXIT(LOCUS_STAT_EXIT_NOINSTANCE, "no locus instance \"nosuch\"", "-i", "nosuch");
	/* default instance name when neither -i nor $LOCUS_INSTANCE is given */
	EXPECT_EXIT(LOCUS_STAT_EXIT_NOINSTANCE, "\"default\"", "--json");
}

static struct locus_shm *small_segment(const char *instance, struct locus_counters **c)
{
	struct locus_ctr_params p = { .max_entries = 4, .n_blocks = 2, .block_size = 256 };

	return make_segment(instance, locus_counters_region_size(&p), &p, c);
}

static void drop_segment(struct locus_shm *shm, struct locus_counters *c, const char *instance)
{
	locus_counters_close(c);
	locus_shm_detach(shm);
	assert_int_equal(locus_shm_remove(instance), 0);
}

static void shm_file_patch(const char *instance, off_t off, const void *buf, size_t len)
{
	char path[PATH_MAX];
	int fd;

	assert_int_equal(locus_shm_path(instance, path, sizeof(path)), 0);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, len, off), (ssize_t)len);
	close(fd);
}

static struct locus_ctr_hdr *ctr_hdr(struct locus_shm *shm)
{
	return locus_shm_region(shm, LOCUS_REGION_COUNTERS, NULL);
}

static void test_version_mismatch(void **state)
{
	struct locus_counters *c;
	struct locus_shm *shm;
	uint32_t abi = LOCUS_SHM_ABI_VERSION + 1;
	(void)state;

	shm = small_segment("ctrver", &c);
	ctr_hdr(shm)->version = LOCUS_CTR_VERSION + 1;
	EXPECT_EXIT(LOCUS_STAT_EXIT_VERSION, "layout version", "-i", "ctrver");
	drop_segment(shm, c, "ctrver");

	shm = small_segment("abiver", &c);
	shm_file_patch("abiver", offsetof(struct locus_shm_hdr, abi_version), &abi, sizeof(abi));
	EXPECT_EXIT(LOCUS_STAT_EXIT_VERSION, "ABI version", "-i", "abiver");
	drop_segment(shm, c, "abiver");
}

static void test_corrupt(void **state)
{
	struct locus_counters *c;
	struct locus_shm *shm;
	struct locus_ctr_entry *e;
	uint64_t off, magic = 0x1122334455667788ull;
	(void)state;

	shm = small_segment("ctrbad", &c);
	reg(c, "x", NULL, LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &off);
	e = (struct locus_ctr_entry *)((char *)ctr_hdr(shm) + ctr_hdr(shm)->dir_off);
	e->offset = 256;
	EXPECT_EXIT(LOCUS_STAT_EXIT_CORRUPT, "beyond", "-i", "ctrbad");
	e->offset = 0;
	e->name[0] = 'X';
	EXPECT_EXIT(LOCUS_STAT_EXIT_CORRUPT, "name", "-i", "ctrbad");
	ctr_hdr(shm)->magic = magic;
	EXPECT_EXIT(LOCUS_STAT_EXIT_CORRUPT, "bad magic", "-i", "ctrbad");
	drop_segment(shm, c, "ctrbad");

	shm = small_segment("segbad", &c);
	shm_file_patch("segbad", 0, &magic, sizeof(magic));
	EXPECT_EXIT(LOCUS_STAT_EXIT_CORRUPT, "not a locus segment", "-i", "segbad");
	drop_segment(shm, c, "segbad");
}

static void test_no_counters(void **state)
{
	struct locus_shm_params sp = { .instance = "noctr" };
	struct locus_shm *shm;
	(void)state;

	shm = make_segment("uninit", 4096, NULL, NULL);
	locus_shm_set_state(shm, LOCUS_SHM_STARTING);
	EXPECT_EXIT(LOCUS_STAT_EXIT_NOCOUNTERS, "state starting): counters not initialised",
		    "-i", "uninit");
	drop_segment(shm, NULL, "uninit");

	sp.region_size[LOCUS_REGION_TABLES] = 4096;
	assert_int_equal(locus_shm_create(&sp, &shm, NULL), 0);
	EXPECT_EXIT(LOCUS_STAT_EXIT_NOCOUNTERS, "no counters region", "-i", "noctr");
	drop_segment(shm, NULL, "noctr");
}

static void test_permission(void **state)
{
	char path[PATH_MAX], bin[sizeof(tmpdir) + 16], cmd[2 * PATH_MAX];
	struct locus_counters *c;
	struct locus_shm *shm;
	struct run r;
	(void)state;

	if (geteuid() != 0)
		skip(); /* needs chown and setresuid */
	snprintf(bin, sizeof(bin), "%s/locus-stat", tmpdir);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && chmod 0755 '%s'", stat_bin, bin, bin);
	assert_int_equal(system(cmd), 0);
	shm = small_segment("perm", &c);
	assert_int_equal(locus_shm_path("perm", path, sizeof(path)), 0);

	/* mode 0600, root's: the OS refuses uid 65534 */
	assert_int_equal(chmod(path, 0600), 0);
	run_stat(&r, 65534, bin, NULL, (const char *const[]){ "-i", "perm", NULL });
	if (r.status != LOCUS_STAT_EXIT_PERM || !strstr(r.err, "permission denied"))
		fail_msg("as uid 65534: exit %d, stderr %s", r.status, r.err);
	run_free(&r);
	/* mode 0660 but root:root, and 65534 is not in group root */
	assert_int_equal(chmod(path, 0660), 0);
	run_stat(&r, 65534, bin, NULL, (const char *const[]){ "-i", "perm", NULL });
	assert_int_equal(r.status, LOCUS_STAT_EXIT_PERM);
	run_free(&r);
	/* owned by another user whose group we are not in */
	assert_int_equal(chown(path, 65534, 65534), 0);
	EXPECT_EXIT(LOCUS_STAT_EXIT_PERM, "owned by uid 65534", "-i", "perm");
	/* world-writable */
	assert_int_equal(chown(path, 0, 0), 0);
	assert_int_equal(chmod(path, 0666), 0);
	EXPECT_EXIT(LOCUS_STAT_EXIT_PERM, "world-writable", "-i", "perm");
	assert_int_equal(chmod(path, 0660), 0);
	EXPECT_EXIT(0, NULL, "-i", "perm");
	drop_segment(shm, c, "perm");
}

static const char *shrink_path;
static int shrink_ticks; /* 1 once truncated */

/* Once locus-stat has printed its first sample, pull the pages from under it. */
static void shrink_later(int out_fd)
{
	struct stat st;

	if (shrink_ticks || fstat(out_fd, &st) < 0 || st.st_size == 0)
		return;
	shrink_ticks = 1;
	assert_int_equal(truncate(shrink_path, 0), 0);
}

/* A segment truncated under a running locus-stat: exit 5, not SIGBUS. */
static void test_shrunk_segment(void **state)
{
	char path[PATH_MAX];
	struct locus_counters *c;
	struct locus_shm *shm;
	struct run r;
	(void)state;

	shm = small_segment("shrink", &c);
	assert_int_equal(locus_shm_path("shrink", path, sizeof(path)), 0);
	shrink_path = path;
	shrink_ticks = 0;
	run_stat(&r, -1, stat_bin, shrink_later, (const char *const[]){
		"-i", "shrink", "--json", "--watch", "0.01", "--count", "1000", NULL });
	assert_int_equal(shrink_ticks, 1);
	if (r.status != LOCUS_STAT_EXIT_CORRUPT || !strstr(r.err, "shrank"))
		fail_msg("exit %d, stderr %s", r.status, r.err);
	assert_non_null(strstr(r.out, "\"instance\":\"shrink\"")); /* it ran before */
	run_free(&r);
	/* our own mapping lost its pages too: unmap without touching them */
	locus_counters_close(c);
	locus_shm_detach(shm);
	assert_int_equal(locus_shm_remove("shrink"), 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_prometheus),
		cmocka_unit_test(test_watch),
		cmocka_unit_test(test_usage_errors),
		cmocka_unit_test(test_no_instance),
		cmocka_unit_test(test_version_mismatch),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_no_counters),
		cmocka_unit_test(test_permission),
		cmocka_unit_test(test_shrunk_segment),
		cmocka_unit_test(test_checkers_reject),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
