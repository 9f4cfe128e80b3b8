// SPDX-License-Identifier: MIT
/*
 * The verbs loopback (intra_node = verbs) against memcpy, side by side in one
 * run on the same device and buffers: gather copies of ROWS scattered rows
 * of ROW bytes into a contiguous message, the shape of a dispatch message.
 * Prints MB/s of each, the ratio, and the CPU time this process spent per
 * MB (on Soft-RoCE the device is the kernel, so only the ratio of rates on
 * the same machine means anything). Run in the Soft-RoCE guest by
 * make bench-verbs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_err.h"
#include "locus_verbs_loop.h"

#define AREA   (64u << 20)
#define ROW    4096u
#define ROWS   32u
#define COPIES 1000u
#define DEPTH  256u

static double now_s(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static unsigned ended;

static void on_done(void *arg, uint64_t cookie, int status)
{
	(void)arg;
	(void)cookie;
	if (status) {
		fprintf(stderr, "bench_loop: copy failed: %d\n", status);
		exit(1);
	}
	ended++;
}

/* the rows of copy c: scattered over the lower half, page-aligned rows */
static uint64_t src_of(unsigned c, unsigned j)
{
	return ((uint64_t)(c * 7919u + j * 104729u) % (AREA / 2 / ROW)) * ROW;
}

static uint64_t dst_of(unsigned c)
{
	return AREA / 2 + (uint64_t)(c % ((AREA / 2) / (ROW * ROWS))) * ROW * ROWS;
}

int main(int argc, char **argv)
{
	const char *dev = argc > 1 ? argv[1] : "rxe0";
	uint8_t *area = aligned_alloc(4096, AREA);
	struct locus_verbs_loop_src src[ROWS];
	struct locus_verbs_loop *l;
	struct locus_error err;
	double t0, c0, t_dma, c_dma, t_cpu, c_cpu, mb = (double)COPIES * ROWS * ROW / 1e6;
	unsigned posted = 0;

	if (!area)
		return 1;
	for (size_t i = 0; i < AREA; i += 64)
		area[i] = (uint8_t)i;
	if (locus_verbs_loop_create(dev, area, AREA, DEPTH, &l, &err) < 0) {
		fprintf(stderr, "bench_loop: %s\n", err.msg);
		return 1;
	}
	t0 = now_s(CLOCK_MONOTONIC);
	c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
	while (ended < COPIES) {
		while (posted < COPIES) {
			for (unsigned j = 0; j < ROWS; j++)
				src[j] = (struct locus_verbs_loop_src){ .off = src_of(posted, j), .len = ROW };
			if (locus_verbs_loop_copy(l, dst_of(posted), src, ROWS, posted) < 0)
				break;
			posted++;
		}
		locus_verbs_loop_poll(l, on_done, NULL);
	}
	t_dma = now_s(CLOCK_MONOTONIC) - t0;
	c_dma = now_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	/* the check: the last copy's rows are where the gather put them */
	for (unsigned j = 0; j < ROWS; j++)
		if (memcmp(area + dst_of(COPIES - 1) + j * ROW, area + src_of(COPIES - 1, j), ROW)) {
			fprintf(stderr, "bench_loop: row %u of the last copy differs\n", j);
			return 1;
		}
	t0 = now_s(CLOCK_MONOTONIC);
	c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
	for (unsigned c = 0; c < COPIES; c++)
		for (unsigned j = 0; j < ROWS; j++)
			memcpy(area + dst_of(c) + j * ROW, area + src_of(c, j), ROW);
	t_cpu = now_s(CLOCK_MONOTONIC) - t0;
	c_cpu = now_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	printf("bench_loop: %u gather copies of %u x %u B rows (%s, queue depth %u)\n", COPIES, ROWS,
	       ROW, dev, DEPTH);
	printf("  verbs loopback %.1f MB/s (process CPU %.2f ms per MB); memcpy %.1f MB/s "
	       "(%.2f ms per MB); loopback / memcpy = %.3f\n", mb / t_dma, c_dma * 1e3 / mb,
	       mb / t_cpu, c_cpu * 1e3 / mb, (mb / t_dma) / (mb / t_cpu));
	printf("  (Soft-RoCE: the 'device' is the guest kernel copying under TCG emulation; "
	       "on a NIC the loopback takes the copy off the CPU)\n");
	locus_verbs_loop_destroy(l);
	free(area);
	return 0;
}
