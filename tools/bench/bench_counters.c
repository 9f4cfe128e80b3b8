// SPDX-License-Identifier: MIT
/*
 * Counter increment cost: locus_counter_add on a per-lcore block of a real
 * counter region, against a plain local variable increment in the same run.
 * Also shown against the same baseline: a locked atomic add (what the
 * single-writer design avoids) and a log2 histogram record.
 *
 * An empty asm on the loop index in every loop keeps the compiler from
 * folding or vectorising any of them; the baseline's variable is kept in a
 * register by an asm that claims to modify it, so each iteration does one add.
 * Figures are printed, never asserted; best of several repetitions.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_counters.h"
#include "locus_counters_priv.h"

#define ITERS 100000000ull
#define REPS  5

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t sink;

static double run_local(void)
{
	uint64_t t0 = now_ns(), x = 0;

	for (uint64_t i = 0; i < ITERS; i++) {
		x += 1;
		__asm__ volatile("" : "+r"(x), "+r"(i));
	}
	sink += x;
	return (double)(now_ns() - t0) / ITERS;
}

static double run_counter(void *blk, uint64_t off)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < ITERS; i++) {
		locus_counter_add(blk, off, 1);
		__asm__ volatile("" : "+r"(i));
	}
	return (double)(now_ns() - t0) / ITERS;
}

static double run_locked(void *blk, uint64_t off)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < ITERS; i++) {
		__atomic_fetch_add(locus_ctr_word(blk, off), 1, __ATOMIC_RELAXED);
		__asm__ volatile("" : "+r"(i));
	}
	return (double)(now_ns() - t0) / ITERS;
}

static double run_hist(void *blk, uint64_t off)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < ITERS; i++) {
		locus_hist_record(blk, off, i & 0xffff);
		__asm__ volatile("" : "+r"(i));
	}
	return (double)(now_ns() - t0) / ITERS;
}

static double best(double a, double b)
{
	return a < b ? a : b;
}

int main(void)
{
	struct locus_ctr_params p = { .max_entries = 4, .n_blocks = 4, .block_size = 4096 };
	struct locus_ctr_desc dc = { .name = "ops", .kind = LOCUS_CTR_COUNTER };
	struct locus_ctr_desc dh = { .name = "lat", .kind = LOCUS_CTR_HISTOGRAM };
	double local = 1e9, ctr = 1e9, locked = 1e9, hist = 1e9;
	struct locus_counters *c;
	struct locus_error err;
	uint64_t c_off, h_off, total;
	size_t size = locus_counters_region_size(&p);
	void *region, *blk;

	if (posix_memalign(&region, 64, size))
		return 1;
	if (locus_counters_init(region, size, &p, &err) < 0 ||
	    locus_counters_open(region, size, 0, &c, &err) < 0 ||
	    locus_counters_register(c, &dc, &c_off, &err) < 0 ||
	    locus_counters_register(c, &dh, &h_off, &err) < 0) {
		fprintf(stderr, "bench_counters: %s\n", err.msg);
		return 1;
	}
	blk = locus_counters_block(c, 2);
	for (int r = 0; r < REPS; r++) {
		local = best(local, run_local());
		ctr = best(ctr, run_counter(blk, c_off));
		locked = best(locked, run_locked(blk, c_off));
		hist = best(hist, run_hist(blk, h_off));
	}
	if (locus_counters_sum(c, 0, &total, 1) != 1 || total != 2 * REPS * ITERS) {
		fprintf(stderr, "bench_counters: counter sum %llu, expected %llu\n",
			(unsigned long long)total, 2ull * REPS * ITERS);
		return 1;
	}
	printf("counter increment, %llu iterations, best of %d (sink %llu):\n",
	       ITERS, REPS, (unsigned long long)(sink & 1));
	printf("  plain local variable (baseline)   %6.3f ns/op  1.00x\n", local);
	printf("  locus_counter_add (lcore block)   %6.3f ns/op  %.2fx\n", ctr, ctr / local);
	printf("  locked atomic add (not used)      %6.3f ns/op  %.2fx\n", locked, locked / local);
	printf("  locus_hist_record                 %6.3f ns/op  %.2fx\n", hist, hist / local);
	locus_counters_close(c);
	free(region);
	return 0;
}
