// SPDX-License-Identifier: MIT
/*
 * GRACE benchmarks (figures printed, never asserted):
 *  1. fit time, grouping + replication, 48 layers x 128 experts on 4 x 8
 *     GPUs from a synthetic skewed profile, beside EPLB-style greedy packing
 *     of the same loads in the same run;
 *  2. planned (token, expert) pairs per second on one core, 4096 tokens x
 *     top-8 per batch on that table, locus planner beside a naive planner
 *     (per-pair random weighted replica choice, malloc and qsort to group
 *     rows by destination) in the same run.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_grace_plan.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"

#define L_ 48
#define E_ 128
#define K_ 8
#define T_ 4096
#define NODES 4
#define GPN 8
#define N_ (NODES * GPN)

static uint64_t rs = 0x2545f4914f6cdd1dull;

static uint32_t rnd(void)
{
	rs ^= rs >> 12;
	rs ^= rs << 25;
	rs ^= rs >> 27;
	return (uint32_t)((rs * 2685821657736338717ull) >> 32);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Zipf(1.1)-popular latent groups of 8 experts; 6 choices from the group, 2 anywhere. */
static void gen_token(uint16_t *ids, const double *cdf)
{
	double u = (rnd() + 0.5) / 4294967296.0;
	uint32_t g = 0, n = 0;

	while (g < 15 && cdf[g] < u)
		g++;
	while (n < K_) {
		uint32_t e = n < 6 ? g * 8 + rnd() % 8 : rnd() % E_;
		int dup = 0;

		for (uint32_t q = 0; q < n; q++)
			dup |= ids[q] == e;
		if (!dup)
			ids[n++] = (uint16_t)e;
	}
}

static void greedy(const double *W, uint16_t *pri)
{
	uint32_t cnt[N_] = { 0 }, ord[E_];
	double load[N_] = { 0 };

	for (uint32_t e = 0; e < E_; e++)
		ord[e] = e;
	for (uint32_t i = 1; i < E_; i++) {
		uint32_t v = ord[i], j = i;

		while (j > 0 && W[ord[j - 1]] < W[v]) {
			ord[j] = ord[j - 1];
			j--;
		}
		ord[j] = v;
	}
	for (uint32_t i = 0; i < E_; i++) {
		uint32_t b = N_;

		for (uint32_t r = 0; r < N_; r++)
			if (cnt[r] < E_ / N_ && (b == N_ || load[r] < load[b]))
				b = r;
		pri[ord[i]] = (uint16_t)b;
		cnt[b]++;
		load[b] += W[ord[i]];
	}
}

struct naive_row {
	uint32_t dst, token, kmask;
};

static int row_cmp(const void *a, const void *b)
{
	const struct naive_row *x = a, *y = b;

	if (x->dst != y->dst)
		return x->dst < y->dst ? -1 : 1;
	return x->token < y->token ? -1 : (x->token > y->token);
}

/* The obvious planner: random weighted copy per pair, sort pairs, merge. */
static uint32_t naive_plan(const struct locus_grace_map *m, uint32_t layer, const uint16_t *ex)
{
	struct naive_row *rows = malloc((size_t)T_ * K_ * sizeof(*rows));
	uint32_t n = 0, out = 0;

	for (uint32_t t = 0; t < T_; t++) {
		for (uint32_t j = 0; j < K_; j++) {
			size_t le = (size_t)layer * E_ + ex[t * K_ + j];
			const uint16_t *rk = locus_grace_map_ranks(m) + le * m->n_slots;
			const uint16_t *w = locus_grace_map_weights(m) + le * m->n_slots;
			uint32_t c = locus_grace_map_ncopies(m)[le], tot = 0, pick, i = 0;

			for (uint32_t q = 0; q < c; q++)
				tot += w[q];
			pick = (uint32_t)rand() % tot;
			while (pick >= w[i]) {
				pick -= w[i];
				i++;
			}
			rows[n++] = (struct naive_row){ rk[i], t, 1u << j };
		}
	}
	qsort(rows, n, sizeof(*rows), row_cmp);
	for (uint32_t i = 0; i < n; i++) {
		if (out && rows[out - 1].dst == rows[i].dst && rows[out - 1].token == rows[i].token)
			rows[out - 1].kmask |= rows[i].kmask;
		else
			rows[out++] = rows[i];
	}
	free(rows);
	return out;
}

int main(void)
{
	struct locus_gracefit_profile p;
	struct locus_gracefit_topo topo = { NODES, GPN, 6, 1 };
	struct locus_error err = { 0 };
	static uint16_t batch[16][T_ * K_];
	double cdf[16], z = 0, t0, t_prof, t_fit, t_greedy;
	uint16_t pri[E_];
	void *blob = NULL, *map = NULL, *st = NULL, *pm;
	const void *pl;
	size_t len, plen, msz, ssz, pmsz;
	struct locus_grace_plan plan;
	int rc;

	for (int g = 0; g < 16; g++)
		z += cdf[g] = 1.0 / pow(g + 1, 1.1);
	for (int g = 0; g < 16; g++)
		cdf[g] = (g ? cdf[g - 1] : 0) + cdf[g] / z;

	/* 1. fit */
	t0 = now_s();
	if ((rc = locus_gracefit_profile_init(&p, L_, E_, 1, &err)))
		goto fail;
	for (uint32_t l = 0; l < L_; l++)
		for (uint32_t t = 0; t < T_; t++) {
			uint16_t ids[K_];

			gen_token(ids, cdf);
			locus_gracefit_profile_add(&p, l, ids, 1, K_, NULL);
		}
	t_prof = now_s() - t0;
	t0 = now_s();
	rc = locus_gracefit_fit(&p, &topo, NULL, &blob, &len, NULL, &err);
	t_fit = now_s() - t0;
	if (rc)
		goto fail;
	t0 = now_s();
	for (int rep = 0; rep < 10; rep++)
		for (uint32_t l = 0; l < L_; l++)
			greedy(p.W + (size_t)l * E_, pri);
	t_greedy = (now_s() - t0) / 10;
	printf("fit: %d layers x %d experts on %dx%d GPUs (profile of %d tokens x top-%d per "
	       "layer built in %.3f s)\n", L_, E_, NODES, GPN, T_, K_, t_prof);
	printf("  grouping + replication fit   %8.3f s\n", t_fit);
	printf("  EPLB-style greedy packing    %8.5f s   (fit / greedy = %.0fx)\n", t_greedy,
	       t_fit / t_greedy);

	/* 2. planner */
	if ((rc = locus_grace_blob_check(blob, len, &pl, &plen, &err)))
		goto fail;
	msz = locus_grace_map_size(pl);
	ssz = locus_grace_plan_state_size(pl);
	pmsz = locus_grace_plan_mem_size(T_, K_, N_);
	pm = malloc(pmsz);
	if (posix_memalign(&map, 64, msz) || posix_memalign(&st, 64, ssz) || !pm) {
		rc = -ENOMEM;
		goto fail;
	}
	if ((rc = locus_grace_map_build(map, msz, pl, plen, 1, &err)) ||
	    (rc = locus_grace_plan_state_init(st, ssz, map, 0, &err)) ||
	    (rc = locus_grace_plan_init(&plan, pm, pmsz, T_, K_, N_)))
		goto fail;
	for (int b = 0; b < 16; b++)
		for (uint32_t t = 0; t < T_; t++)
			gen_token(batch[b] + t * K_, cdf);
	for (int pass = 0; pass < 2; pass++) {
		double pairs = 0, el;
		uint64_t sink = 0;
		int iters = pass ? 40 : 400;

		t0 = now_s();
		for (int i = 0; i < iters; i++) {
			uint32_t layer = (uint32_t)i % L_;

			if (pass) {
				sink += naive_plan(map, layer, batch[i % 16]);
			} else {
				struct locus_grace_batch b = { .layer = layer,
							       .src_rank = (uint32_t)i % GPN,
							       .n_tokens = T_, .top_k = K_,
							       .experts = batch[i % 16] };

				rc = locus_grace_plan_batch(st, map, &b, &plan, &err);
				if (rc < 0)
					goto fail;
				sink += plan.n_rows;
			}
			pairs += (double)T_ * K_;
		}
		el = now_s() - t0;
		printf("%s %10.2f M pairs/s  (%d batches of %d x top-%d, %.1f rows/batch)\n",
		       pass ? "  naive planner              " :
			      "planner: locus (TAR + SWRR)  ",
		       pairs / el / 1e6, iters, T_, K_, (double)sink / iters);
		if (!pass)
			z = pairs / el;
		else
			printf("  locus / naive = %.1fx\n", z / (pairs / el));
	}
	free(pm);
	free(st);
	free(map);
	free(blob);
	locus_gracefit_profile_free(&p);
	return 0;
fail:
	fprintf(stderr, "grace_bench: %s (%s)\n", err.msg, locus_strerror(rc));
	return 1;
}
