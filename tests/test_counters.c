// SPDX-License-Identifier: MIT
/*
 * Counter region: registration rules, concurrent writers against a reader,
 * histogram bucket edges and quantiles, and rejection of corrupt regions.
 * Regions live in plain heap memory of the exact size, so an out-of-bounds
 * read shows up under `make asan`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <cmocka.h>

#include "locus_counters.h"
#include "locus_counters_priv.h"

struct region {
	void *mem;
	size_t size;
	struct locus_counters *rw;
};

static void region_new(struct region *r, uint32_t entries, uint32_t blocks, uint64_t bs)
{
	struct locus_ctr_params p = { .max_entries = entries, .n_blocks = blocks,
				      .block_size = bs };
	struct locus_error err;

	r->size = locus_counters_region_size(&p);
	assert_true(r->size > 0);
	assert_int_equal(posix_memalign(&r->mem, 64, r->size), 0);
	memset(r->mem, 0xa5, r->size); /* init must not rely on zeroed memory */
	assert_int_equal(locus_counters_init(r->mem, r->size, &p, &err), 0);
	assert_int_equal(locus_counters_open(r->mem, r->size, 0, &r->rw, &err), 0);
}

static void region_free(struct region *r)
{
	locus_counters_close(r->rw);
	free(r->mem);
}

static int reg(struct locus_counters *c, const char *name, enum locus_ctr_kind kind,
	       uint32_t ndims, uint32_t d0, uint32_t d1, const char *l0, const char *l1,
	       uint64_t *off)
{
	struct locus_ctr_desc d = { .name = name, .help = "help text", .kind = kind,
				    .ndims = ndims, .dim = { d0, d1 }, .label = { l0, l1 } };
	uint64_t dummy;

	return locus_counters_register(c, &d, off ? off : &dummy, NULL);
}

static void test_params(void **state)
{
	struct locus_ctr_params p = { .max_entries = 4, .n_blocks = 2, .block_size = 100 };
	struct locus_error err;
	size_t sz = locus_counters_region_size(&p);
	uint64_t *mem;
	(void)state;

	/* header 128, directory 4 * 320, two blocks rounded up to 128 bytes */
	assert_int_equal(sz, 128 + 4 * 320 + 2 * 128);
	p.n_blocks = 0;
	assert_int_equal(locus_counters_region_size(&p), 0);
	p.n_blocks = 2;
	p.max_entries = 0;
	assert_int_equal(locus_counters_region_size(&p), 0);
	p.max_entries = 4;
	mem = calloc(1, sz);
	assert_non_null(mem);
	assert_int_equal(locus_counters_init(mem, sz - 1, &p, &err), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_counters_init((char *)mem + 4, sz - 4, &p, &err), -EINVAL);
	p.block_size = 0;
	assert_int_equal(locus_counters_init(mem, sz, &p, &err), -EINVAL);
	free(mem);
}

static void test_register_rules(void **state)
{
	struct region r;
	struct locus_counters *ro;
	struct locus_error err;
	const struct locus_ctr_info *in;
	uint64_t o1, o2, o3, o4;
	char long_name[80];
	(void)state;

	region_new(&r, 8, 2, 1024);
	assert_int_equal(reg(r.rw, "eldr_routed", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &o1), 0);
	assert_int_equal(reg(r.rw, "eldr_routed", LOCUS_CTR_GAUGE, 0, 0, 0, NULL, NULL, NULL),
			 -EEXIST);
	assert_int_equal(reg(r.rw, "Upper", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), -EINVAL);
	assert_int_equal(reg(r.rw, "a-b", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), -EINVAL);
	assert_int_equal(reg(r.rw, "", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), -EINVAL);
	memset(long_name, 'a', 64);
	long_name[64] = '\0';
	assert_int_equal(reg(r.rw, long_name, LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), -EINVAL);
	long_name[63] = '\0';
	assert_int_equal(reg(r.rw, long_name, LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &o2), 1);
	assert_int_equal(o2, o1 + 8);
	assert_int_equal(reg(r.rw, "k", 7, 0, 0, 0, NULL, NULL, NULL), -EINVAL);
	assert_int_equal(reg(r.rw, "v", LOCUS_CTR_COUNTER, 3, 1, 1, "a", "b", NULL), -EINVAL);
	assert_int_equal(reg(r.rw, "v", LOCUS_CTR_COUNTER, 1, 0, 0, "a", NULL, NULL), -EINVAL);
	assert_int_equal(reg(r.rw, "v", LOCUS_CTR_COUNTER, 1, 4, 0, NULL, NULL, NULL), -EINVAL);
	assert_int_equal(reg(r.rw, "v", LOCUS_CTR_COUNTER, 1, 4, 0, "9lbl", NULL, NULL), -EINVAL);
	assert_int_equal(reg(r.rw, "v", LOCUS_CTR_COUNTER, 1, 4, 2, "a", NULL, NULL), -EINVAL);
	assert_int_equal(reg(r.rw, "v", LOCUS_CTR_COUNTER, 2, 4, 2, "a", "a", NULL), -EINVAL);
	assert_int_equal(reg(r.rw, "v", LOCUS_CTR_HISTOGRAM, 1, 4, 0, "le", NULL, NULL), -EINVAL);
	assert_int_equal(reg(r.rw, "v", LOCUS_CTR_COUNTER, 1, 4, 0, "__x", NULL, NULL), -EINVAL);
	{
		struct locus_ctr_desc d = { .name = "h", .help = "line\nbreak",
					    .kind = LOCUS_CTR_COUNTER };
		uint64_t off;

		assert_int_equal(locus_counters_register(r.rw, &d, &off, &err), -EINVAL);
		assert_non_null(strstr(err.msg, "help"));
	}
	/* a 2-D vector and a histogram, which starts on a cache line */
	assert_int_equal(reg(r.rw, "tokens", LOCUS_CTR_COUNTER, 2, 3, 5, "layer", "expert", &o3), 2);
	assert_int_equal(o3, o2 + 8);
	assert_int_equal(reg(r.rw, "lat_ns", LOCUS_CTR_HISTOGRAM, 0, 0, 0, NULL, NULL, &o4), 3);
	assert_int_equal(o4 % 64, 0);
	assert_true(o4 >= o3 + 15 * 8);
	/* block space: 1024 - (o4 + 528) bytes left, a 100-element vector does not fit */
	assert_int_equal(reg(r.rw, "big", LOCUS_CTR_COUNTER, 1, 100, 0, "i", NULL, NULL),
			 -LOCUS_EFULL);
	assert_int_equal(locus_counters_find(r.rw, "tokens"), 2);
	assert_int_equal(locus_counters_find(r.rw, "nope"), -ENOENT);

	/* a reader sees the same directory; refresh picks up later entries */
	assert_int_equal(locus_counters_open(r.mem, r.size, LOCUS_CTR_RDONLY, &ro, &err), 0);
	assert_int_equal(locus_counters_n_entries(ro), 4);
	in = locus_counters_info(ro, 2);
	assert_non_null(in);
	assert_string_equal(in->name, "tokens");
	assert_string_equal(in->label[0], "layer");
	assert_string_equal(in->label[1], "expert");
	assert_int_equal(in->n_elems, 15);
	assert_int_equal(in->offset, o3);
	assert_null(locus_counters_info(ro, 4));
	assert_int_equal(reg(ro, "x", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), -EPERM);
	assert_int_equal(reg(r.rw, "late", LOCUS_CTR_GAUGE, 0, 0, 0, NULL, NULL, NULL), 4);
	assert_int_equal(locus_counters_n_entries(ro), 4);
	assert_int_equal(locus_counters_refresh(ro, &err), 5);
	assert_string_equal(locus_counters_info(ro, 4)->name, "late");
	assert_int_equal(((struct locus_ctr_hdr *)r.mem)->epoch, 5);

	/* directory capacity */
	assert_int_equal(reg(r.rw, "e5", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), 5);
	assert_int_equal(reg(r.rw, "e6", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), 6);
	assert_int_equal(reg(r.rw, "e7", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), 7);
	assert_int_equal(reg(r.rw, "e8", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL),
			 -LOCUS_EFULL);
	locus_counters_close(ro);
	region_free(&r);
}

static void test_reopen_rw_resumes(void **state)
{
	struct region r;
	struct locus_counters *again;
	uint64_t o1, o2;
	(void)state;

	region_new(&r, 4, 1, 256);
	assert_int_equal(reg(r.rw, "a", LOCUS_CTR_COUNTER, 1, 3, 0, "i", NULL, &o1), 0);
	locus_counter_add_elem(locus_counters_block(r.rw, 0), o1, 2, 9);
	assert_int_equal(locus_counters_open(r.mem, r.size, 0, &again, NULL), 0);
	assert_int_equal(reg(again, "a", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), -EEXIST);
	assert_int_equal(reg(again, "b", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &o2), 1);
	assert_int_equal(o2, o1 + 24);
	assert_null(locus_counters_block(again, 1));
	locus_counters_close(again);
	region_free(&r);
}

#define N_REG_THREADS 4
#define N_REG_EACH    40

struct reg_arg {
	struct locus_counters *c;
	int id, failures;
	uint64_t off[N_REG_EACH];
};

static void *register_main(void *p)
{
	struct reg_arg *a = p;
	char name[32];

	for (int i = 0; i < N_REG_EACH; i++) {
		snprintf(name, sizeof(name), "t%d_c%d", a->id, i);
		/* every thread also races for one shared name: exactly one wins */
		if (reg(a->c, name, i & 1 ? LOCUS_CTR_HISTOGRAM : LOCUS_CTR_COUNTER, 0, 0, 0,
			NULL, NULL, &a->off[i]) < 0)
			a->failures++;
		if (i == N_REG_EACH / 2 &&
		    reg(a->c, "shared", LOCUS_CTR_GAUGE, 0, 0, 0, NULL, NULL, NULL) >= 0)
			a->failures += 1000;
	}
	return NULL;
}

/* Registration from several threads of the owner: no lost or overlapping entries. */
static void test_register_threads(void **state)
{
	struct reg_arg a[N_REG_THREADS];
	pthread_t t[N_REG_THREADS];
	struct locus_counters *ro;
	struct region r;
	uint64_t end = 0;
	int wins = 0;
	(void)state;

	region_new(&r, N_REG_THREADS * N_REG_EACH + 1, 2, 64 * 1024);
	for (int i = 0; i < N_REG_THREADS; i++) {
		a[i] = (struct reg_arg){ .c = r.rw, .id = i };
		assert_int_equal(pthread_create(&t[i], NULL, register_main, &a[i]), 0);
	}
	for (int i = 0; i < N_REG_THREADS; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(a[i].failures % 1000, 0);
		wins += a[i].failures / 1000;
	}
	assert_int_equal(wins, 1);
	assert_int_equal(locus_counters_open(r.mem, r.size, LOCUS_CTR_RDONLY, &ro, NULL), 0);
	assert_int_equal(locus_counters_n_entries(ro), N_REG_THREADS * N_REG_EACH + 1);
	/* directory order is allocation order: offsets strictly increase */
	for (uint32_t i = 0; i < locus_counters_n_entries(ro); i++) {
		const struct locus_ctr_info *in = locus_counters_info(ro, i);

		assert_true(in->offset >= end);
		end = in->offset + 8ull * in->n_elems * in->elem_words;
	}
	for (int i = 0; i < N_REG_THREADS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "t%d_c%d", i, N_REG_EACH - 1);
		assert_int_equal(locus_counters_info(ro, (uint32_t)locus_counters_find(ro, name))->offset,
				 a[i].off[N_REG_EACH - 1]);
	}
	assert_null(locus_counters_block(ro, 0)); /* readers get no block to write */
	locus_counters_close(ro);
	region_free(&r);
}

/* A reader keeps what it validated when the shared directory goes bad later. */
static void test_refresh_rejects(void **state)
{
	struct locus_counters *ro;
	struct locus_ctr_hdr *h;
	struct locus_ctr_entry *e;
	struct locus_error err;
	struct region r;
	uint64_t off, v;
	(void)state;

	region_new(&r, 4, 1, 512);
	h = r.mem;
	e = (struct locus_ctr_entry *)((char *)r.mem + h->dir_off);
	assert_int_equal(reg(r.rw, "a", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &off), 0);
	locus_counter_add(locus_counters_block(r.rw, 0), off, 42);
	assert_int_equal(locus_counters_open(r.mem, r.size, LOCUS_CTR_RDONLY, &ro, NULL), 0);
	assert_int_equal(reg(r.rw, "b", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), 1);
	e[1].offset = 4096; /* the new entry is corrupt */
	assert_int_equal(locus_counters_refresh(ro, &err), -LOCUS_ERANGE);
	assert_int_equal(locus_counters_n_entries(ro), 1);
	/* a later rewrite of entry 0 cannot move what this reader reads */
	e[0].offset = 1ull << 40;
	assert_int_equal(locus_counters_sum(ro, 0, &v, 1), 1);
	assert_int_equal(v, 42);
	h->n_entries = 0; /* entries never disappear */
	assert_int_equal(locus_counters_refresh(ro, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "entry count 0"));
	locus_counters_close(ro);
	region_free(&r);
}

#define N_WRITERS 4
#define N_INCS    400000

struct writer_arg {
	void *block;
	uint64_t c_off, v_off, h_off, g_off;
	uint32_t id;
};

static volatile int writers_done;
static uint64_t reader_samples; /* atomic: samples the reader has taken */

static void *writer_main(void *p)
{
	struct writer_arg *a = p;

	for (uint64_t i = 0; i < N_INCS; i++) {
		/* halfway, wait for the reader to sample a while: its checks
		 * then provably ran against writers in mid-flight */
		if (i == N_INCS / 2) {
			uint64_t target = __atomic_load_n(&reader_samples, __ATOMIC_ACQUIRE) + 200;

			while (__atomic_load_n(&reader_samples, __ATOMIC_ACQUIRE) < target)
				sched_yield();
		}
		locus_counter_inc(a->block, a->c_off);
		locus_counter_add_elem(a->block, a->v_off, (uint32_t)(i % 3), 2);
		if ((i & 63) == 0)
			locus_hist_record(a->block, a->h_off, i);
		locus_gauge_set(a->block, a->g_off, (int64_t)a->id - 10);
	}
	return NULL;
}

struct reader_arg {
	struct locus_counters *ro;
	uint64_t samples, partial;
	int bad;
};

static void *reader_main(void *p)
{
	struct reader_arg *a = p;
	uint64_t last_c = 0, last_v[3] = { 0 }, last_h = 0, out[LOCUS_HIST_WORDS];

	while (!__atomic_load_n(&writers_done, __ATOMIC_ACQUIRE) || a->samples < 10) {
		if (locus_counters_sum(a->ro, 0, out, 1) != 1 || out[0] < last_c)
			a->bad++;
		if (out[0] > 0 && out[0] < (uint64_t)N_WRITERS * N_INCS)
			a->partial++;
		last_c = out[0];
		if (locus_counters_sum(a->ro, 1, out, 3) != 3)
			a->bad++;
		for (int k = 0; k < 3; k++) {
			if (out[k] < last_v[k])
				a->bad++;
			last_v[k] = out[k];
		}
		if (locus_counters_sum(a->ro, 2, out, LOCUS_HIST_WORDS) != LOCUS_HIST_WORDS ||
		    out[LOCUS_HIST_COUNT] < last_h)
			a->bad++;
		last_h = out[LOCUS_HIST_COUNT];
		a->samples++;
		__atomic_store_n(&reader_samples, a->samples, __ATOMIC_RELEASE);
	}
	return NULL;
}

static void test_concurrent_writers(void **state)
{
	struct region r;
	struct writer_arg wa[N_WRITERS];
	struct reader_arg ra = { 0 };
	pthread_t wt[N_WRITERS], rt;
	uint64_t c_off, v_off, h_off, g_off, out[LOCUS_HIST_WORDS];
	uint64_t expect_sum = 0;
	(void)state;

	region_new(&r, 8, N_WRITERS, 2048);
	assert_int_equal(reg(r.rw, "ops", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &c_off), 0);
	assert_int_equal(reg(r.rw, "per_mod", LOCUS_CTR_COUNTER, 1, 3, 0, "mod", NULL, &v_off), 1);
	assert_int_equal(reg(r.rw, "val", LOCUS_CTR_HISTOGRAM, 0, 0, 0, NULL, NULL, &h_off), 2);
	assert_int_equal(reg(r.rw, "depth", LOCUS_CTR_GAUGE, 0, 0, 0, NULL, NULL, &g_off), 3);
	assert_int_equal(locus_counters_open(r.mem, r.size, LOCUS_CTR_RDONLY, &ra.ro, NULL), 0);

	writers_done = 0;
	reader_samples = 0;
	assert_int_equal(pthread_create(&rt, NULL, reader_main, &ra), 0);
	for (uint32_t i = 0; i < N_WRITERS; i++) {
		wa[i] = (struct writer_arg){ .block = locus_counters_block(r.rw, i), .c_off = c_off,
					     .v_off = v_off, .h_off = h_off, .g_off = g_off,
					     .id = i };
		assert_int_equal(pthread_create(&wt[i], NULL, writer_main, &wa[i]), 0);
	}
	for (int i = 0; i < N_WRITERS; i++)
		pthread_join(wt[i], NULL);
	__atomic_store_n(&writers_done, 1, __ATOMIC_RELEASE);
	pthread_join(rt, NULL);

	assert_int_equal(ra.bad, 0);
	assert_true(ra.samples >= 200);
	assert_true(ra.partial >= 200); /* it checked totals in mid-flight */
	assert_int_equal(locus_counters_sum(ra.ro, 0, out, 1), 1);
	assert_int_equal(out[0], (uint64_t)N_WRITERS * N_INCS);
	assert_int_equal(locus_counters_sum(ra.ro, 1, out, 3), 3);
	/* i % 3 == k for ceil((N - k) / 3) values of i, each adding 2 */
	for (int k = 0; k < 3; k++)
		assert_int_equal(out[k], (uint64_t)N_WRITERS * 2 * ((N_INCS - k + 2) / 3));
	assert_int_equal(locus_counters_sum(ra.ro, 2, out, LOCUS_HIST_WORDS), LOCUS_HIST_WORDS);
	for (uint64_t i = 0; i < N_INCS; i += 64)
		expect_sum += i;
	assert_int_equal(out[LOCUS_HIST_COUNT], (uint64_t)N_WRITERS * (N_INCS / 64));
	assert_int_equal(out[LOCUS_HIST_SUM], N_WRITERS * expect_sum);
	/* gauges are summed: -10 - 9 - 8 - 7 */
	assert_int_equal(locus_counters_sum(ra.ro, 3, out, 1), 1);
	assert_int_equal((int64_t)out[0], -34);
	assert_int_equal(locus_counters_sum(ra.ro, 9, out, 1), -LOCUS_ERANGE);
	assert_int_equal(locus_counters_sum(ra.ro, 1, out, 2), -ENOSPC);
	locus_counters_close(ra.ro);
	region_free(&r);
}

static void test_hist_buckets(void **state)
{
	struct region r;
	uint64_t off, h[LOCUS_HIST_WORDS];
	void *blk;
	(void)state;

	assert_int_equal(locus_hist_bucket(0), 0);
	assert_int_equal(locus_hist_bucket(1), 1);
	assert_int_equal(locus_hist_bucket(2), 2);
	assert_int_equal(locus_hist_bucket(3), 2);
	assert_int_equal(locus_hist_bucket(4), 3);
	assert_int_equal(locus_hist_bucket(7), 3);
	assert_int_equal(locus_hist_bucket(8), 4);
	assert_int_equal(locus_hist_bucket(1023), 10);
	assert_int_equal(locus_hist_bucket(1024), 11);
	assert_int_equal(locus_hist_bucket((1ull << 62) - 1), 62);
	assert_int_equal(locus_hist_bucket(1ull << 62), 63);
	assert_int_equal(locus_hist_bucket(1ull << 63), 63);
	assert_int_equal(locus_hist_bucket(UINT64_MAX), 63);
	assert_int_equal(locus_hist_bucket_le(0), 0);
	assert_int_equal(locus_hist_bucket_le(1), 1);
	assert_int_equal(locus_hist_bucket_le(3), 7);

	region_new(&r, 2, 2, 4096);
	assert_int_equal(reg(r.rw, "h", LOCUS_CTR_HISTOGRAM, 1, 2, 0, "q", NULL, &off), 0);
	blk = locus_counters_block(r.rw, 1);
	locus_hist_record_elem(blk, off, 1, 0);
	locus_hist_record_elem(blk, off, 1, 3);
	locus_hist_record_elem(locus_counters_block(r.rw, 0), off, 1, 4);
	locus_hist_record_elem(blk, off, 1, 1ull << 63);
	locus_hist_record_elem(blk, off, 0, 5);
	{
		uint64_t all[2 * LOCUS_HIST_WORDS];
		const uint64_t *e1 = all + LOCUS_HIST_WORDS;

		assert_int_equal(locus_counters_sum(r.rw, 0, all, 2 * LOCUS_HIST_WORDS),
				 2 * LOCUS_HIST_WORDS);
		assert_int_equal(all[LOCUS_HIST_COUNT], 1);
		assert_int_equal(all[LOCUS_HIST_BUCKET0 + 3], 1);
		assert_int_equal(e1[LOCUS_HIST_COUNT], 4);
		assert_int_equal(e1[LOCUS_HIST_SUM], (1ull << 63) + 7);
		assert_int_equal(e1[LOCUS_HIST_BUCKET0 + 0], 1);
		assert_int_equal(e1[LOCUS_HIST_BUCKET0 + 2], 1);
		assert_int_equal(e1[LOCUS_HIST_BUCKET0 + 3], 1);
		assert_int_equal(e1[LOCUS_HIST_BUCKET0 + 63], 1);
	}
	region_free(&r);

	/* quantiles: 10 values in [4, 7] -> p50 halfway through it */
	memset(h, 0, sizeof(h));
	assert_true(isnan(locus_hist_quantile(h, 0.5)));
	h[LOCUS_HIST_BUCKET0 + 3] = 10;
	assert_true(fabs(locus_hist_quantile(h, 0.5) - 5.5) < 1e-9);
	assert_true(fabs(locus_hist_quantile(h, 1.0) - 7.0) < 1e-9);
	assert_true(fabs(locus_hist_quantile(h, 0.0) - 4.0) < 1e-9);
	/* 90 zeros and 10 in [1024, 2047]: p50 = 0, p99 = 1024 + 1023 * 0.9 */
	h[LOCUS_HIST_BUCKET0 + 3] = 0;
	h[LOCUS_HIST_BUCKET0 + 0] = 90;
	h[LOCUS_HIST_BUCKET0 + 11] = 10;
	assert_true(fabs(locus_hist_quantile(h, 0.5)) < 1e-9);
	assert_true(fabs(locus_hist_quantile(h, 0.99) - (1024 + 1023 * 0.9)) < 1e-6);
	assert_true(isnan(locus_hist_quantile(h, NAN)));
}

/* A valid region with three entries; the caller corrupts a copy. */
static void corrupt_base(struct region *r)
{
	region_new(r, 4, 2, 1024);
	assert_int_equal(reg(r->rw, "a", LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, NULL), 0);
	assert_int_equal(reg(r->rw, "b", LOCUS_CTR_COUNTER, 1, 4, 0, "i", NULL, NULL), 1);
	assert_int_equal(reg(r->rw, "c", LOCUS_CTR_HISTOGRAM, 0, 0, 0, NULL, NULL, NULL), 2);
}

static int open_copy(const struct region *r, size_t size, void (*mutate)(void *mem),
		     struct locus_error *err)
{
	struct locus_counters *c = NULL;
	void *copy = malloc(size);
	int rc;

	assert_non_null(copy);
	memcpy(copy, r->mem, LOCUS_MIN(size, r->size));
	if (mutate)
		mutate(copy);
	rc = locus_counters_open(copy, size, LOCUS_CTR_RDONLY, &c, err);
	if (rc == 0) {
		assert_non_null(c);
		locus_counters_close(c);
	} else {
		assert_null(c);
	}
	free(copy);
	return rc;
}

static struct locus_ctr_entry *ent(void *mem, int i)
{
	return (struct locus_ctr_entry *)((char *)mem + 128) + i;
}

static void m_magic(void *m) { ((struct locus_ctr_hdr *)m)->magic ^= 1; }
static void m_zero(void *m) { ((struct locus_ctr_hdr *)m)->magic = 0; }
static void m_version(void *m) { ((struct locus_ctr_hdr *)m)->version = 2; }
static void m_entsize(void *m) { ((struct locus_ctr_hdr *)m)->entry_size = 256; }
static void m_nentries(void *m) { ((struct locus_ctr_hdr *)m)->n_entries = 5; }
static void m_blocks(void *m) { ((struct locus_ctr_hdr *)m)->n_blocks = 3; }
static void m_bsize(void *m) { ((struct locus_ctr_hdr *)m)->block_size = 1000; }
static void m_used(void *m) { ((struct locus_ctr_hdr *)m)->block_used = 4096; }
static void m_off_beyond(void *m) { ent(m, 2)->offset = 1024; }
static void m_off_wrap(void *m) { ent(m, 1)->offset = UINT64_MAX - 7; }
static void m_off_overlap(void *m) { ent(m, 1)->offset = 0; }
static void m_off_unaligned(void *m) { ent(m, 2)->offset += 8; }
static void m_name_unterminated(void *m) { memset(ent(m, 1)->name, 'x', LOCUS_CTR_NAME_MAX); }
static void m_name_chars(void *m) { ent(m, 0)->name[0] = '"'; }
static void m_dup(void *m) { ent(m, 1)->name[0] = 'a'; }
static void m_help(void *m) { ent(m, 0)->help[0] = '\x1b'; }
static void m_label(void *m) { memset(ent(m, 1)->label[0], 'y', LOCUS_CTR_LABEL_MAX); }
static void m_kind(void *m) { ent(m, 0)->kind = 9; }
static void m_dims(void *m) { ent(m, 1)->dim[0] = 0xffffffffu; }
static void m_nbytes(void *m) { ent(m, 1)->nbytes = 8; }

static void test_corrupt_rejected(void **state)
{
	static const struct {
		void (*fn)(void *);
		int rc;
		const char *what;
	} cases[] = {
		{ m_magic, -LOCUS_EBADMAGIC, "magic" },
		{ m_zero, -LOCUS_EBADMAGIC, "not initialised" },
		{ m_version, -LOCUS_EVERSION, "version" },
		{ m_entsize, -LOCUS_EVERSION, "version" },
		{ m_nentries, -LOCUS_ERANGE, "entry count" },
		{ m_blocks, -LOCUS_ERANGE, "offsets" },
		{ m_bsize, -LOCUS_ERANGE, "geometry" },
		{ m_used, -LOCUS_ERANGE, "used" },
		{ m_off_beyond, -LOCUS_ERANGE, "beyond" },
		{ m_off_wrap, -LOCUS_ERANGE, "beyond" },
		{ m_off_overlap, -LOCUS_ERANGE, "overlapping" },
		{ m_off_unaligned, -LOCUS_ERANGE, "misaligned" },
		{ m_name_unterminated, -LOCUS_ERANGE, "name" },
		{ m_name_chars, -LOCUS_ERANGE, "name" },
		{ m_dup, -LOCUS_ERANGE, "duplicate" },
		{ m_help, -LOCUS_ERANGE, "help" },
		{ m_label, -LOCUS_ERANGE, "label" },
		{ m_kind, -LOCUS_ERANGE, "kind" },
		{ m_dims, -LOCUS_ERANGE, "elements" },
		{ m_nbytes, -LOCUS_ERANGE, "bytes" },
	};
	struct region r;
	struct locus_error err;
	(void)state;

	corrupt_base(&r);
	assert_int_equal(open_copy(&r, r.size, NULL, &err), 0);
	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(cases); i++) {
		locus_error_clear(&err);
		assert_int_equal(open_copy(&r, r.size, cases[i].fn, &err), cases[i].rc);
		if (!strstr(err.msg, cases[i].what))
			fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.msg, cases[i].what);
	}
	assert_int_equal(open_copy(&r, r.size - 64, NULL, &err), -LOCUS_ETRUNCATED);
	assert_int_equal(open_copy(&r, 100, NULL, &err), -LOCUS_ETRUNCATED);
	region_free(&r);
}

/* Random corruption: open either refuses or yields entries that can all be
 * summed without leaving the region (ASan checks the latter). */
static void test_corrupt_fuzz(void **state)
{
	struct region r;
	uint64_t out[4 * LOCUS_HIST_WORDS];
	void *copy;
	unsigned seed = 12345;
	int opened = 0;
	(void)state;

	corrupt_base(&r);
	copy = malloc(r.size);
	assert_non_null(copy);
	for (int iter = 0; iter < 20000; iter++) {
		struct locus_counters *c;
		size_t pos;

		memcpy(copy, r.mem, r.size);
		for (int k = 0; k < 1 + iter % 4; k++) {
			seed = seed * 1103515245u + 12345u;
			/* aim at the header and the three entries in use */
			pos = (seed >> 8) % (128 + 3 * 320);
			((uint8_t *)copy)[pos] ^= (uint8_t)(1u << ((seed >> 4) & 7));
		}
		if (locus_counters_open(copy, r.size, LOCUS_CTR_RDONLY, &c, NULL) != 0)
			continue;
		opened++;
		for (uint32_t i = 0; i < locus_counters_n_entries(c); i++) {
			const struct locus_ctr_info *in = locus_counters_info(c, i);

			if ((size_t)in->n_elems * in->elem_words <= LOCUS_ARRAY_SIZE(out))
				assert_true(locus_counters_sum(c, i, out, LOCUS_ARRAY_SIZE(out)) > 0);
		}
		locus_counters_close(c);
	}
	assert_true(opened > 0);
	free(copy);
	region_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_params),
		cmocka_unit_test(test_register_rules),
		cmocka_unit_test(test_reopen_rw_resumes),
		cmocka_unit_test(test_register_threads),
		cmocka_unit_test(test_refresh_rejects),
		cmocka_unit_test(test_concurrent_writers),
		cmocka_unit_test(test_hist_buckets),
		cmocka_unit_test(test_corrupt_rejected),
		cmocka_unit_test(test_corrupt_fuzz),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
