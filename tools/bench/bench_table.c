// SPDX-License-Identifier: MIT
/*
 * Table channel costs, each printed next to a baseline from the same run
 * (never asserted):
 *  1. the reader's per-iteration "is there a new table?" against a plain
 *     relaxed load of a shared word;
 *  2. publish-to-visible latency (writer's publish call until a spinning
 *     reader has adopted the table) against a bare release-store ->
 *     acquire-load handoff of a timestamp between the same two threads.
 *
 * Usage: bench_table [iterations-millions (default 200)] [samples (default 20000)]
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_common.h"
#include "locus_table.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, size_t n, double p)
{
	size_t i = (size_t)(p * (double)(n - 1));

	return v[i];
}

static struct locus_table_region *make_region(size_t slot_size, void **mem, size_t *size)
{
	struct locus_table_params p = { .n_channels = 1, .n_readers = 2 };
	struct locus_table_region *t;
	struct locus_error err;

	p.channel[0].n_slots = 3;
	p.channel[0].slot_size = slot_size;
	*size = locus_table_region_size(&p);
	*mem = aligned_alloc(LOCUS_CACHE_LINE, LOCUS_ALIGN_UP(*size, (size_t)LOCUS_CACHE_LINE));
	if (!*mem || locus_table_region_init(*mem, *size, &p, &err) ||
	    locus_table_region_attach(*mem, *size, &t, &err)) {
		fprintf(stderr, "bench_table: region: %s\n", err.msg);
		exit(1);
	}
	return t;
}

/* ---- 1. fast path ---------------------------------------------------------- */

static void bench_fast_path(uint64_t iters)
{
	static uint64_t shared_word __locus_cache_aligned;
	struct locus_table_reader r;
	struct locus_table_region *t;
	struct locus_error err;
	volatile uint64_t sink = 0;
	uint64_t acc, t0, t_relaxed, t_poll, t_get;
	size_t size, len;
	void *mem;

	t = make_region(256, &mem, &size);
	if (locus_table_push(t, 0, "table", 5, 0, &err) < 0 ||
	    locus_table_reader_register(t, 0, 0, NULL, NULL, &r, &err) < 0 ||
	    locus_table_reader_poll(&r) != 1) {
		fprintf(stderr, "bench_table: setup: %s\n", err.msg);
		exit(1);
	}
	__atomic_store_n(&shared_word, 1, __ATOMIC_RELEASE);

	/* interleave twice so frequency ramps and noise hit both sides */
	t_relaxed = t_poll = t_get = 0;
	for (int round = 0; round < 2; round++) {
		acc = 0;
		t0 = now_ns();
		for (uint64_t i = 0; i < iters; i++)
			acc += __atomic_load_n(&shared_word, __ATOMIC_RELAXED);
		t_relaxed += now_ns() - t0;
		sink = acc;

		acc = 0;
		t0 = now_ns();
		for (uint64_t i = 0; i < iters; i++)
			acc += (uint64_t)locus_table_reader_poll(&r);
		t_poll += now_ns() - t0;
		sink = acc;

		acc = 0;
		t0 = now_ns();
		for (uint64_t i = 0; i < iters; i++)
			acc += (uintptr_t)locus_table_reader_get(&r, &len);
		t_get += now_ns() - t0;
		sink = acc;
	}
	(void)sink;
	printf("reader fast path, no new table (%llu x 2 iterations):\n",
	       (unsigned long long)iters);
	printf("  relaxed load of a shared word      %6.3f ns/op (baseline)\n",
	       (double)t_relaxed / (2.0 * (double)iters));
	printf("  locus_table_reader_poll            %6.3f ns/op  %.2fx baseline\n",
	       (double)t_poll / (2.0 * (double)iters), (double)t_poll / (double)t_relaxed);
	printf("  locus_table_reader_get (poll+ptr)  %6.3f ns/op  %.2fx baseline\n",
	       (double)t_get / (2.0 * (double)iters), (double)t_get / (double)t_relaxed);
	locus_table_reader_unregister(&r);
	locus_table_region_detach(t);
	free(mem);
}

/* ---- 2. publish-to-visible ------------------------------------------------ */

struct lat {
	struct locus_table_region *t;
	uint64_t *samples;
	size_t n;
	uint64_t handoff __locus_cache_aligned; /* baseline: a timestamp word */
	uint64_t ack __locus_cache_aligned;     /* reader -> writer: seen sample i */
	int mode;                               /* 0 baseline, 1 table */
	int fail;
};

static void *lat_reader(void *p)
{
	struct lat *l = p;
	struct locus_table_reader r;
	struct locus_error err;

	if (l->mode == 1 &&
	    locus_table_reader_register(l->t, 0, 0, NULL, NULL, &r, &err) < 0) {
		fprintf(stderr, "bench_table: register: %s\n", err.msg);
		l->fail = 1;
		__atomic_store_n(&l->ack, UINT64_MAX, __ATOMIC_RELEASE);
		return NULL;
	}
	for (size_t i = 0; i < l->n; i++) {
		uint64_t t1, t0;

		if (l->mode == 0) {
			while (!(t0 = __atomic_load_n(&l->handoff, __ATOMIC_ACQUIRE)))
				;
			t1 = now_ns();
			__atomic_store_n(&l->handoff, 0, __ATOMIC_RELAXED);
		} else {
			const uint64_t *tb;

			while (locus_table_reader_poll(&r) != 1)
				;
			t1 = now_ns();
			tb = locus_table_reader_table(&r, NULL);
			t0 = tb[0];
		}
		l->samples[i] = t1 - t0;
		__atomic_store_n(&l->ack, i + 1, __ATOMIC_RELEASE);
	}
	if (l->mode == 1)
		locus_table_reader_unregister(&r);
	return NULL;
}

static void run_latency(struct lat *l, size_t table_len)
{
	struct locus_table_writer *w = NULL;
	struct locus_error err;
	pthread_t th;
	size_t cap;
	void *buf;

	l->ack = 0;
	l->handoff = 0;
	if (l->mode == 1 && locus_table_writer_open(l->t, 0, &w, &err) < 0) {
		fprintf(stderr, "bench_table: writer: %s\n", err.msg);
		exit(1);
	}
	pthread_create(&th, NULL, lat_reader, l);
	for (size_t i = 0; i < l->n && !l->fail; i++) {
		if (l->mode == 1) {
			if (locus_table_writer_reserve(w, 1000000000ull, &buf, &cap, &err) < 0) {
				fprintf(stderr, "bench_table: reserve: %s\n", err.msg);
				exit(1);
			}
			memset((uint8_t *)buf + 8, (int)i, table_len - 8);
			/* the clock starts where locusctl would call publish */
			*(uint64_t *)buf = now_ns();
			if (locus_table_writer_publish(w, table_len, &err) < 0) {
				fprintf(stderr, "bench_table: publish: %s\n", err.msg);
				exit(1);
			}
		} else {
			__atomic_store_n(&l->handoff, now_ns(), __ATOMIC_RELEASE);
		}
		while (__atomic_load_n(&l->ack, __ATOMIC_ACQUIRE) < i + 1)
			;
	}
	pthread_join(th, NULL);
	locus_table_writer_close(w);
	qsort(l->samples, l->n, sizeof(uint64_t), cmp_u64);
}

static void bench_latency(size_t n)
{
	static const size_t lens[] = { 256, 4096, 65536 };
	uint64_t base50, base99;
	struct lat l;
	size_t size;
	void *mem;

	memset(&l, 0, sizeof(l));
	l.n = n;
	l.samples = calloc(n, sizeof(uint64_t));
	if (!l.samples)
		exit(1);

	l.mode = 0;
	run_latency(&l, 0);
	base50 = pct(l.samples, n, 0.50);
	base99 = pct(l.samples, n, 0.99);
	printf("publish-to-visible, 1 spinning reader thread, %zu samples:\n", n);
	printf("  bare store->load handoff           p50 %6llu ns  p99 %6llu ns (baseline)\n",
	       (unsigned long long)base50, (unsigned long long)base99);

	for (size_t k = 0; k < LOCUS_ARRAY_SIZE(lens); k++) {
		uint64_t p50, p99;

		l.t = make_region(lens[k], &mem, &size);
		l.mode = 1;
		run_latency(&l, lens[k]);
		p50 = pct(l.samples, n, 0.50);
		p99 = pct(l.samples, n, 0.99);
		printf("  table of %6zu B (CRC both sides)  p50 %6llu ns  p99 %6llu ns  "
		       "%.1fx / %.1fx baseline\n", lens[k], (unsigned long long)p50,
		       (unsigned long long)p99, (double)p50 / (double)(base50 ? base50 : 1),
		       (double)p99 / (double)(base99 ? base99 : 1));
		locus_table_region_detach(l.t);
		free(mem);
	}
	free(l.samples);
}

int main(int argc, char **argv)
{
	uint64_t iters = 200;
	size_t samples = 20000;

	if (argc > 1)
		iters = strtoull(argv[1], NULL, 10);
	if (argc > 2)
		samples = strtoull(argv[2], NULL, 10);
	if (!iters || !samples || iters > 100000 || samples > 10000000) {
		fprintf(stderr, "usage: bench_table [iterations-millions 1..100000] [samples]\n");
		return 2;
	}
	bench_fast_path(iters * 1000000ull);
	bench_latency(samples);
	return 0;
}
