// SPDX-License-Identifier: MIT
/*
 * GRACE fitting: hand examples for the replication formulas, the knee on a
 * curve with a known knee, spectral clustering of planted groups, capacity
 * and size bounds over many random instances, profiling, whole fits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <errno.h>
#include <cmocka.h>

#include "locus_grace_plan.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"
#include "locus_trace.h"

#define NR LOCUS_GRACE_NO_RANK
#define EPS 1e-4

static void test_knee_known_curve(void **state)
{
	double x[21], y[21];
	(void)state;

	/* slope 1 up to x = 5, then slope 0.1: the knee is x = 5 */
	for (int i = 0; i < 21; i++) {
		x[i] = i;
		y[i] = i <= 5 ? i : 5 + 0.1 * (i - 5);
	}
	assert_int_equal(locus_gracefit_knee(x, y, 21), 5);
	/* same curve, uneven x spacing and a scaled y */
	for (int i = 0; i < 21; i++) {
		x[i] = i * 0.5;
		y[i] = 100 * (i <= 12 ? i : 12 + 0.05 * (i - 12));
	}
	assert_int_equal(locus_gracefit_knee(x, y, 21), 12);
	/* a straight line has no knee above the chord: the first point */
	for (int i = 0; i < 21; i++)
		y[i] = 2 * x[i];
	assert_int_equal(locus_gracefit_knee(x, y, 21), 0);
	/* flat or too short */
	for (int i = 0; i < 21; i++)
		y[i] = 3;
	assert_int_equal(locus_gracefit_knee(x, y, 21), 0);
	assert_int_equal(locus_gracefit_knee(x, y, 2), 0);
}

static const struct locus_gracefit_topo topo14 = { 1, 4, 4, 2 };

static void test_replication_fills_budget(void **state)
{
	/* W_g = [60, 10, 10, 20], budget 1 copy per GPU (4 in all), by hand:
	 * 0 (40) -> 1: [40, 30, 10, 20]; 0 (20 per copy) -> 2: [33.3, 23.3, 23.3, 20];
	 * on GPU 0, 1 (20 a copy) beats 0 (13.3): 1 -> 3: [23.3, 23.3, 23.3, 30];
	 * GPU 3's heaviest per copy that fits GPU 0 (the one free slot): 6 -> 0 */
	const double W[8] = { 40, 20, 5, 5, 5, 5, 10, 10 };
	const uint16_t pri[8] = { 0, 0, 1, 1, 2, 2, 3, 3 };
	struct locus_gracefit_topo t = { 1, 4, 4, 1 };
	uint16_t rep[8 * 3];
	float pred[4];
	struct locus_gracefit_layer_info li = { 0 };
	(void)state;

	assert_int_equal(locus_gracefit_replicate_layer(&t, 8, W, NULL, pri, 3, rep, pred, &li, NULL),
			 0);
	assert_true(fabs(li.rho - 2.4) < EPS);
	assert_int_equal(li.n_replicas, 4); /* the whole budget */
	assert_int_equal(li.n_hot, 3);
	assert_int_equal(li.n_rep, 2);
	assert_int_equal(rep[0], 1);
	assert_int_equal(rep[1], 2);
	assert_int_equal(rep[2], NR);
	assert_int_equal(rep[3], 3);
	assert_int_equal(rep[4], NR);
	assert_int_equal(rep[6 * 3], 0);
	assert_int_equal(rep[6 * 3 + 1], NR);
	for (int e = 2; e < 8; e++)
		if (e != 6)
			assert_int_equal(rep[e * 3], NR);
	assert_true(fabs(pred[0] - (40.0 / 3 + 10 + 5)) < EPS);
	assert_true(fabs(pred[1] - (10 + 40.0 / 3)) < EPS);
	assert_true(fabs(pred[2] - (10 + 40.0 / 3)) < EPS);
	assert_true(fabs(pred[3] - (10 + 5 + 10)) < EPS);
	assert_true(fabs(li.rho_after - (85.0 / 3) / 25) < EPS);

	/* a budget of 2 a GPU: more copies (while one still lowers a GPU), a
	 * lower peak, never more than 2 on a GPU */
	t.replica_budget = 2;
	assert_int_equal(locus_gracefit_replicate_layer(&t, 8, W, NULL, pri, 3, rep, pred, &li, NULL),
			 0);
	assert_true(li.n_replicas > 4 && li.n_replicas <= 8);
	assert_true(li.rho_after < (85.0 / 3) / 25);
	{
		uint32_t per[4] = { 0 };

		for (int i = 0; i < 8 * 3; i++)
			if (rep[i] != NR)
				per[rep[i]]++;
		for (int r = 0; r < 4; r++)
			assert_true(per[r] <= 2);
	}
}

/*
 * A copy goes where its expert's co-activated experts live: expert 0 (10 on
 * GPU 0) can shed 5 to GPU 1, 2 or 3 (2, 3, 1 before); without affinity the
 * least-loaded (3) takes it, with expert 0 firing beside expert 2, GPU 2.
 */
static void test_replication_follows_affinity(void **state)
{
	const double W[4] = { 10, 2, 3, 1 };
	const uint16_t pri[4] = { 0, 1, 2, 3 };
	double A[16] = { 0 };
	struct locus_gracefit_topo t = { 1, 4, 4, 1 };
	uint16_t rep[4];
	float pred[4];
	(void)state;

	A[0 * 4 + 2] = A[2 * 4 + 0] = 5;
	assert_int_equal(locus_gracefit_replicate_layer(&t, 4, W, NULL, pri, 1, rep, pred, NULL,
							NULL), 0);
	assert_int_equal(rep[0], 3);
	assert_int_equal(locus_gracefit_replicate_layer(&t, 4, W, A, pri, 1, rep, pred, NULL,
							NULL), 0);
	assert_int_equal(rep[0], 2);
}

static void test_replication_bounds(void **state)
{
	const uint16_t pri2[2] = { 0, 1 };
	const double W2[2] = { 100, 0 };
	const uint16_t prib[4] = { 0, 1, 2, 3 };
	const double Wb[4] = { 10, 10, 10, 10 };
	struct locus_gracefit_topo t = { 1, 2, 1, 1 };
	uint16_t rep[4 * 3];
	float pred[4];
	struct locus_gracefit_layer_info li = { 0 };
	double Wz[4] = { 0 };
	(void)state;

	/* one copy fits in the table (R = 1): 100 split in two, then nothing */
	assert_int_equal(locus_gracefit_replicate_layer(&t, 2, W2, NULL, pri2, 1, rep, pred, &li, NULL),
			 0);
	assert_true(fabs(li.rho - 2) < EPS);
	assert_int_equal(li.n_replicas, 1);
	assert_int_equal(rep[0], 1);
	assert_true(fabs(pred[0] - 50) < EPS && fabs(pred[1] - 50) < EPS);
	/* balanced already: no copy lowers any GPU, none is placed */
	assert_int_equal(locus_gracefit_replicate_layer(&topo14, 4, Wb, NULL, prib, 3, rep, pred, &li,
							NULL), 0);
	assert_int_equal(li.n_replicas, 0);
	/* no load: nothing to replicate, no NaN */
	assert_int_equal(locus_gracefit_replicate_layer(&topo14, 4, Wz, NULL, prib, 3, rep, pred, &li,
							NULL), 0);
	assert_int_equal(li.n_replicas, 0);
	assert_true(li.rho == 1.0);
	Wz[2] = NAN;
	assert_int_equal(locus_gracefit_replicate_layer(&topo14, 4, Wz, NULL, prib, 3, rep, pred, &li,
							NULL), -LOCUS_ENAN);
}

static void test_balance_hand(void **state)
{
	/* two co-activated pairs {0, 1} and {2, 3}, weakly 0-2 */
	double A[16] = { 0 };
	const double Wh[4] = { 10, 10, 1, 1 }, W1[4] = { 1, 1, 1, 1 };
	struct locus_gracefit_topo t = { 1, 2, 3, 1 };
	struct locus_gracefit_opts o = { .r = -1, .seed = 1, .load_tol = 0.05 };
	struct locus_gracefit_layer_info li = { 0 };
	uint16_t pri[4] = { 0, 0, 1, 1 };
	(void)state;

	A[0 * 4 + 1] = A[1 * 4 + 0] = 5;
	A[2 * 4 + 3] = A[3 * 4 + 2] = 5;
	A[0 * 4 + 2] = A[2 * 4 + 0] = 0.1;
	/* affinity alone keeps the pairs: loads [20, 2]; one swap gives [11, 11] */
	assert_int_equal(locus_gracefit_balance_layer(&t, 4, A, Wh, &o, pri, &li, NULL), 0);
	assert_int_equal(li.n_swaps, 1);
	assert_int_equal(pri[0] + pri[1], 1);
	assert_int_equal(pri[2] + pri[3], 1);
	assert_int_equal(pri[0] == 0 ? 0 : 1, pri[0]);
	assert_true(pri[0] != pri[1]);
	/* a tolerance above the peak (20 <= 2 x 11): no swap */
	pri[0] = pri[1] = 0;
	pri[2] = pri[3] = 1;
	o.load_tol = 1.0;
	assert_int_equal(locus_gracefit_balance_layer(&t, 4, A, Wh, &o, pri, &li, NULL), 0);
	assert_int_equal(li.n_swaps, 0);
	assert_int_equal(pri[0], 0);
	assert_int_equal(pri[1], 0);
	/* three primaries on GPU 0 (capacity 3 allows it): equal slots move the
	 * cheapest, expert 2 (0.1 to lose, 5 to gain with 3) */
	uint16_t p3[4] = { 0, 0, 0, 1 };

	assert_int_equal(locus_gracefit_balance_layer(&t, 4, A, W1, &o, p3, &li, NULL), 0);
	assert_int_equal(p3[0], 0);
	assert_int_equal(p3[1], 0);
	assert_int_equal(p3[2], 1);
	assert_int_equal(p3[3], 1);
	/* --uneven keeps them */
	uint16_t p4[4] = { 0, 0, 0, 1 };

	o.uneven = 1;
	assert_int_equal(locus_gracefit_balance_layer(&t, 4, A, W1, &o, p4, &li, NULL), 0);
	assert_int_equal(p4[2], 0);
	assert_int_equal(locus_gracefit_balance_layer(&t, 4, A, NULL, &o, p4, &li, NULL),
			 -EINVAL);
}

/*
 * After the load swaps, pairwise swaps regain co-activation the grouping
 * left split, and only when the GPU loads' spread does not widen.
 */
static void test_balance_refine(void **state)
{
	double A[16] = { 0 };
	const double W1[4] = { 1, 1, 1, 1 };
	struct locus_gracefit_topo t = { 1, 2, 2, 1 };
	struct locus_gracefit_opts o = { .r = -1, .seed = 1 };
	struct locus_gracefit_layer_info li = { 0 };
	uint16_t pri[4] = { 0, 1, 0, 1 };
	(void)state;

	/* pairs {0, 1} and {2, 3} placed across: equal loads, one swap joins them */
	A[0 * 4 + 1] = A[1 * 4 + 0] = 5;
	A[2 * 4 + 3] = A[3 * 4 + 2] = 5;
	assert_int_equal(locus_gracefit_balance_layer(&t, 4, A, W1, &o, pri, &li, NULL), 0);
	assert_int_equal(li.n_swaps, 1);
	assert_int_equal(pri[0], pri[1]);
	assert_int_equal(pri[2], pri[3]);
	assert_true(pri[0] != pri[2]);
	/* 0 and 3 co-activated, expert 4 alone sets the peak (10): joining 0
	 * and 3 gives GPU loads [4, 2] against [3, 3], below the peak but a
	 * wider spread, so nothing moves */
	{
		double A5[25] = { 0 };
		const double W5[5] = { 2, 1, 1, 2, 10 };
		struct locus_gracefit_topo t3 = { 1, 3, 2, 1 };
		uint16_t p5[5] = { 0, 0, 1, 1, 2 };

		A5[0 * 5 + 3] = A5[3 * 5 + 0] = 5;
		o.load_tol = 10;
		assert_int_equal(locus_gracefit_balance_layer(&t3, 5, A5, W5, &o, p5, &li, NULL),
				 0);
		assert_int_equal(li.n_swaps, 0);
		assert_int_equal(p5[0], 0);
		assert_int_equal(p5[1], 0);
		assert_int_equal(p5[3], 1);
		/* equal loads there: the same join is taken */
		const double W6[5] = { 1, 1, 1, 1, 10 };

		assert_int_equal(locus_gracefit_balance_layer(&t3, 5, A5, W6, &o, p5, &li, NULL),
				 0);
		assert_int_equal(li.n_swaps, 1);
		assert_int_equal(p5[0], p5[3]);
	}
}

/*
 * The layer objective and the fallback to EPLB's packing. 1 node x 2 GPUs,
 * 4 experts, top-2, no replicas: 90 tokens choose {0, 1}, 10 choose {2, 3}.
 * Grouped ({0, 1} | {2, 3}, kept by a load tolerance of 10): loads 180 | 20,
 * max/mean 1.8, each token on 1 GPU, off its source with probability 1/2:
 * cost 1 x 2 x 0.8 + 0.5 = 2.1. Packed (0 -> GPU 0, 1 -> 1, 2 -> 0, 3 -> 1):
 * 100 | 100, every token on both GPUs: 0 + 1 = 1. The packing wins at peak
 * weight 1; at 0.1 the grouping does (0.16 + 0.5 = 0.66 < 1).
 */
static void test_fallback(void **state)
{
	struct locus_gracefit_topo t = { .n_nodes = 1, .gpus_per_node = 2, .capacity = 2 };
	struct locus_gracefit_opts o = { .r = -1, .seed = 1, .load_tol = 10,
					 .no_replication = 1 };
	struct locus_gracefit_layer_info li;
	struct locus_gracefit_profile p;
	struct locus_grace_view v;
	struct locus_error err = { 0 };
	const uint16_t hot[2] = { 0, 1 }, cold[2] = { 2, 3 };
	const void *pl;
	size_t len, plen;
	void *blob;
	(void)state;

	assert_int_equal(locus_gracefit_profile_init(&p, 1, 4, 1, &err), 0);
	assert_int_equal(locus_gracefit_profile_keep_tokens(&p, 2, 100, &err), 0);
	for (int i = 0; i < 100; i++)
		assert_int_equal(locus_gracefit_profile_add(&p, 0, i < 90 ? hot : cold, 1, 2,
							    &err), 0);
	assert_int_equal(p.tok_n[0], 100);
	assert_int_equal(locus_gracefit_fit(&p, &t, &o, &blob, &len, &li, &err), 0);
	assert_true(fabs(li.cost_grouped - 2.1) < 1e-9);
	assert_true(fabs(li.cost_packed - 1.0) < 1e-9);
	assert_int_equal(li.fallback, 1);
	assert_int_equal(locus_grace_blob_check(blob, len, &pl, &plen, &err), 0);
	assert_int_equal(locus_grace_view_init(&v, (void *)pl, plen, &err), 0);
	assert_int_equal(v.primary[0], 0);
	assert_int_equal(v.primary[1], 1);
	assert_int_equal(v.primary[2], 0);
	assert_int_equal(v.primary[3], 1);
	free(blob);
	/* the peak weighs less: the grouping stays */
	o.w_peak = 0.1;
	assert_int_equal(locus_gracefit_fit(&p, &t, &o, &blob, &len, &li, &err), 0);
	assert_true(fabs(li.cost_grouped - 0.66) < 1e-9);
	assert_int_equal(li.fallback, 0);
	assert_int_equal(locus_grace_blob_check(blob, len, &pl, &plen, &err), 0);
	assert_int_equal(locus_grace_view_init(&v, (void *)pl, plen, &err), 0);
	assert_int_equal(v.primary[0], v.primary[1]);
	free(blob);
	/* no_fallback keeps the grouping whatever the objective */
	o.w_peak = 0;
	o.no_fallback = 1;
	assert_int_equal(locus_gracefit_fit(&p, &t, &o, &blob, &len, &li, &err), 0);
	assert_int_equal(li.fallback, 0);
	assert_int_equal(locus_grace_blob_check(blob, len, &pl, &plen, &err), 0);
	assert_int_equal(locus_grace_view_init(&v, (void *)pl, plen, &err), 0);
	assert_int_equal(v.primary[0], v.primary[1]);
	free(blob);
	locus_gracefit_profile_free(&p);
}

static void test_repair_sizes_hand(void **state)
{
	/* items 0,1 bound tightly, 2,3 loosely, all in cluster 0; hi = 2 each */
	const double a[16] = {
		0, 9, 1, 0,
		9, 0, 0, 1,
		1, 0, 0, 2,
		0, 1, 2, 0,
	};
	uint32_t lab[4] = { 0, 0, 0, 0 }, lo[2] = { 0, 0 }, hi[2] = { 2, 2 };
	uint32_t lo_bad[2] = { 3, 3 };
	(void)state;

	assert_int_equal(locus_gracefit_repair_sizes(a, 4, 2, lo, hi, lab, NULL), 0);
	/* cheapest moves: 2 (loses 1+2=3, first of the ties) then 3 (loses 1
	 * to cluster 0, gains 2 from 2): {0,1} and {2,3} */
	assert_int_equal(lab[0], 0);
	assert_int_equal(lab[1], 0);
	assert_int_equal(lab[2], 1);
	assert_int_equal(lab[3], 1);
	assert_int_equal(locus_gracefit_repair_sizes(a, 4, 2, lo_bad, hi, lab, NULL),
			 -LOCUS_ERANGE);
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;

static uint32_t xr(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (uint32_t)rs;
}

/* planted: groups of g experts co-activate strongly, plus noise */
static double *planted(uint32_t E, uint32_t g, double noise)
{
	double *A = calloc((size_t)E * E, sizeof(double));

	for (uint32_t i = 0; i < E; i++)
		for (uint32_t j = i + 1; j < E; j++) {
			double v = (i / g == j / g) ? 50 + xr() % 10 : noise * (xr() % 100) / 100;

			A[(size_t)i * E + j] = A[(size_t)j * E + i] = v;
		}
	return A;
}

static void test_spectral_planted(void **state)
{
	/* 24 experts in 4 planted groups, shuffled ids */
	uint32_t perm[24], lab[24];
	double *A0 = planted(24, 6, 0.5), *A = calloc(24 * 24, sizeof(double));
	(void)state;

	for (int i = 0; i < 24; i++)
		perm[i] = i;
	for (int i = 23; i > 0; i--) {
		int j = xr() % (i + 1), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (int i = 0; i < 24; i++)
		for (int j = 0; j < 24; j++)
			A[perm[i] * 24 + perm[j]] = A0[i * 24 + j];
	assert_int_equal(locus_gracefit_spectral(A, 24, 4, 4, 1, lab, NULL), 0);
	for (int i = 0; i < 24; i++)
		for (int j = 0; j < 24; j++)
			assert_int_equal(lab[perm[i]] == lab[perm[j]], i / 6 == j / 6);
	A[5] = NAN;
	assert_int_equal(locus_gracefit_spectral(A, 24, 4, 4, 1, lab, NULL), -LOCUS_ENAN);
	free(A);
	free(A0);
}

/* bounds every grouping must keep, checked from the output alone */
static void check_bounds(const struct locus_gracefit_topo *t, uint32_t E, const uint16_t *pri,
			 double r)
{
	uint32_t N = t->n_nodes * t->gpus_per_node, cnt[64] = { 0 }, node[16] = { 0 };

	for (uint32_t e = 0; e < E; e++) {
		assert_true(pri[e] < N);
		cnt[pri[e]]++;
		node[pri[e] / t->gpus_per_node]++;
	}
	for (uint32_t n = 0; n < t->n_nodes; n++) {
		double m = (double)node[n] / t->gpus_per_node;
		uint32_t d = (uint32_t)floor(m * r);

		assert_true(node[n] <= t->gpus_per_node * t->capacity);
		for (uint32_t g = 0; g < t->gpus_per_node; g++) {
			uint32_t c = cnt[n * t->gpus_per_node + g];

			assert_true(c <= t->capacity);
			assert_true(c <= (uint32_t)ceil(m) + d);
			assert_true(c + d >= (uint32_t)floor(m));
		}
	}
}

static void test_grouping_bounds_random(void **state)
{
	static const struct locus_gracefit_topo tp[] = {
		{ 1, 4, 20, 2 }, { 2, 2, 24, 2 }, { 2, 4, 12, 2 }, { 4, 8, 6, 1 },
		{ 2, 4, 8, 1 }, { 3, 2, 30, 1 },
	};
	(void)state;

	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(tp); i++) {
		for (int trial = 0; trial < 3; trial++) {
			uint32_t E = (tp[i].n_nodes * tp[i].gpus_per_node == 32) ? 128 : 64;
			double *A = planted(E, 3 + trial * 5, 5.0);
			uint16_t pri[128];
			struct locus_gracefit_layer_info li = { 0 };
			struct locus_gracefit_opts o = { .r = -1, .seed = 7 + trial };

			assert_int_equal(locus_gracefit_group_layer(&tp[i], E, A, &o, pri, &li,
								    NULL), 0);
			check_bounds(&tp[i], E, pri, li.r);
			assert_true(li.r >= 0 && li.r <= 1);
			for (int k = 0; k <= 4; k++) {
				o.r = k / 4.0;
				assert_int_equal(locus_gracefit_group_layer(&tp[i], E, A, &o, pri,
									    &li, NULL), 0);
				check_bounds(&tp[i], E, pri, o.r);
			}
			free(A);
		}
	}
}

static void test_grouping_recovers_planted(void **state)
{
	/* 2 x 4 GPUs of capacity 8, 64 experts in 8 planted groups of 8: every
	 * group must land whole on one GPU (with capacity 12 a node may take 5
	 * groups, which 4 GPUs of 12 cannot keep whole) */
	struct locus_gracefit_topo t = { 2, 4, 8, 2 };
	double *A = planted(64, 8, 0.2), intra = 0, total = 0;
	uint16_t pri[64];
	struct locus_gracefit_layer_info li = { 0 };
	struct locus_gracefit_opts o = { .r = -1, .seed = 3 };
	(void)state;

	assert_int_equal(locus_gracefit_group_layer(&t, 64, A, &o, pri, &li, NULL), 0);
	for (int i = 0; i < 64; i++)
		for (int j = i + 1; j < 64; j++) {
			total += A[i * 64 + j];
			intra += pri[i] == pri[j] ? A[i * 64 + j] : 0;
		}
	assert_true(intra / total > 0.95);
	assert_true(fabs(li.U - intra / total) < 1e-9);
	free(A);
}

static void test_profile_counts(void **state)
{
	struct locus_gracefit_profile p;
	struct locus_error err = { 0 };
	const uint16_t ids[6] = { 0, 1, 2, 1, 2, 3 }; /* 2 tokens of top-3 */
	const uint16_t bad[3] = { 0, 4, 1 };
	const uint16_t dup[3] = { 2, 1, 2 };
	(void)state;

	assert_int_equal(locus_gracefit_profile_init(&p, 2, 4, 1, NULL), 0);
	assert_int_equal(locus_gracefit_profile_add(&p, 1, ids, 2, 3, &err), 0);
	assert_true(p.W[4 + 0] == 1 && p.W[4 + 1] == 2 && p.W[4 + 2] == 2 && p.W[4 + 3] == 1);
	assert_true(p.W[0] == 0);
	const double *A = p.A + 16;

	assert_true(A[1 * 4 + 2] == 2 && A[2 * 4 + 1] == 2);
	assert_true(A[0 * 4 + 1] == 1 && A[0 * 4 + 3] == 0 && A[1 * 4 + 3] == 1);
	assert_true(A[1 * 4 + 1] == 0);
	assert_int_equal(locus_gracefit_profile_add(&p, 1, bad, 1, 3, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "expert id 4 >= E=4"));
	assert_int_equal(locus_gracefit_profile_add(&p, 1, dup, 1, 3, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "twice"));
	assert_int_equal(locus_gracefit_profile_add(&p, 2, ids, 1, 3, &err), -LOCUS_ERANGE);
	assert_true(p.W[4 + 1] == 2); /* nothing of the rejected calls added */
	assert_int_equal(p.n_tokens, 2);

	/* from a trace struct: 1 request, 2 tokens, 2 layers, k = 1 */
	uint16_t prompt[4] = { 3, 0, 3, 1 };
	struct locus_trace_req rq = { .prompt_len = 2, .prompt = prompt };
	struct locus_trace tr = { .n_requests = 1, .n_layers = 2, .k = 1, .n_experts = 4,
				  .reqs = &rq };

	assert_int_equal(locus_gracefit_profile_add_trace(&p, &tr, 0, &err), 0);
	assert_true(p.W[3] == 2 && p.W[4 + 0] == 2 && p.W[4 + 1] == 3);
	const uint64_t counts[8] = { 1, 0, 0, 0, 0, 0, 0, 5 };

	assert_int_equal(locus_gracefit_profile_add_counts(&p, counts, &err), 0);
	assert_true(p.W[0] == 1 && p.W[7] == 6);
	locus_gracefit_profile_free(&p);
}

static void fill_profile(struct locus_gracefit_profile *p, uint32_t tokens, uint32_t k)
{
	uint16_t ids[8];

	for (uint32_t l = 0; l < p->n_layers; l++)
		for (uint32_t t = 0; t < tokens; t++) {
			/* skewed: a token's experts cluster around a hot base */
			uint32_t base = (xr() % 4 == 0) ? 0 : (xr() % p->n_experts);

			for (uint32_t j = 0; j < k; j++) {
				uint32_t e;
				int dup;

				do {
					e = (base + xr() % (k + 4)) % p->n_experts;
					dup = 0;
					for (uint32_t q = 0; q < j; q++)
						dup |= ids[q] == e;
				} while (dup);
				ids[j] = (uint16_t)e;
			}
			assert_int_equal(locus_gracefit_profile_add(p, l, ids, 1, k, NULL), 0);
		}
}

static void test_fit_end_to_end(void **state)
{
	struct locus_gracefit_profile p;
	struct locus_gracefit_topo t = { 2, 2, 0, 2 };
	struct locus_gracefit_layer_info li[3];
	struct locus_error err = { 0 };
	struct locus_grace_view v;
	const void *pl;
	size_t plen, len, len2;
	void *blob = NULL, *blob2 = NULL;
	double before, after;
	(void)state;

	assert_int_equal(locus_gracefit_profile_init(&p, 3, 32, 1, NULL), 0);
	fill_profile(&p, 400, 4);
	if (locus_gracefit_fit(&p, &t, NULL, &blob, &len, li, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(locus_tbl_check(blob, len, LOCUS_TBL_GRACE, &pl, &plen, &err), 0);
	assert_int_equal(locus_grace_view_init(&v, (void *)pl, plen, &err), 0);
	assert_int_equal(locus_grace_validate(&v, &err), 0);
	assert_int_equal(v.dims->capacity, 8); /* ceil(32 / 4) */
	assert_int_equal(v.dims->max_replicas, 3);
	for (int l = 0; l < 3; l++) {
		assert_true(li[l].rho_after <= li[l].rho + 1e-9);
		assert_true(li[l].n_replicas > 0);
	}
	/* without replication: no replica anywhere, W' = group loads */
	struct locus_gracefit_opts nr = { .r = -1, .seed = 1, .no_replication = 1 };

	assert_int_equal(locus_gracefit_fit(&p, &t, &nr, &blob2, &len2, li, &err), 0);
	assert_int_equal(locus_tbl_check(blob2, len2, LOCUS_TBL_GRACE, &pl, &plen, &err), 0);
	assert_int_equal(locus_grace_view_init(&v, (void *)pl, plen, &err), 0);
	for (size_t i = 0; i < 3 * 32 * 3; i++)
		assert_int_equal(v.replica[i], NR);
	for (int l = 0; l < 3; l++)
		assert_int_equal(li[l].n_replicas, 0);
	free(blob2);
	assert_int_equal(locus_tbl_check(blob, len, LOCUS_TBL_GRACE, &pl, &plen, &err), 0);
	/* loads alone cannot group */
	struct locus_gracefit_profile q;

	assert_int_equal(locus_gracefit_profile_init(&q, 3, 32, 0, NULL), 0);
	assert_int_equal(locus_gracefit_fit(&q, &t, NULL, &blob2, &len2, NULL, &err), -EINVAL);
	locus_gracefit_profile_free(&q);

	/* refit with loads moved: the predicted skew drops */
	double W[3 * 32];

	for (int i = 0; i < 3 * 32; i++)
		W[i] = (i % 32 == 31) ? 1000 : 10;
	assert_int_equal(locus_gracefit_refit_replicas(pl, plen, W, &blob2, &len2, &before,
						       &after, &err), 0);
	assert_true(after < before);
	assert_int_equal(locus_tbl_check(blob2, len2, LOCUS_TBL_GRACE, NULL, NULL, &err), 0);
	assert_true(locus_gracefit_should_push(before, after, 0.05));
	assert_false(locus_gracefit_should_push(2.0, 1.95, 0.05));
	assert_false(locus_gracefit_should_push(NAN, 1.0, 0.05));
	assert_false(locus_gracefit_should_push(2.0, NAN, 0.05));
	assert_false(locus_gracefit_should_push(2.0, INFINITY, 0.05));
	assert_false(locus_gracefit_should_push(0, 1.0, 0.05));
	free(blob2);
	free(blob);
	locus_gracefit_profile_free(&p);
}

static void test_counts_delta(void **state)
{
	/* 2 layers x 3 experts in a [2][4] counter */
	const uint64_t prev[8] = { 10, 20, 30, 99, 5, 5, 5, 99 };
	const uint64_t now[8] = { 15, 20, 31, 0, 7, 3, 9, 0 };
	double W[6];
	(void)state;

	/* expert (1, 1) went backwards: a restart, its 3 are this interval's */
	assert_true(locus_gracefit_counts_delta(prev, now, 2, 3, 4, W) == 5 + 0 + 1 + 2 + 3 + 4);
	assert_true(W[0] == 5 && W[1] == 0 && W[2] == 1);
	assert_true(W[3] == 2 && W[4] == 3 && W[5] == 4);
}

/* Whether another expert of slot s's token (k slots each, layer l) has a copy on rank d. */
static int shares_rank(const struct locus_grace_map *m, uint32_t l, const uint16_t *ex, int s,
		       int k, uint32_t d)
{
	uint32_t E = m->dims.n_experts;

	for (int q = s - s % k; q < s - s % k + k; q++) {
		size_t le = (size_t)l * E + ex[q];

		for (uint32_t c = 0; q != s && c < locus_grace_map_ncopies(m)[le]; c++)
			if (locus_grace_map_ranks(m)[le * m->n_slots + c] == d)
				return 1;
	}
	return 0;
}

/*
 * The planner on fitted tables (4 x 8 GPUs, 128 experts, top-8): from every
 * source rank, TAR order holds for every slot (own GPU if it has a copy,
 * else own node if a copy is there, unless the copy taken is on a GPU
 * where another expert of the token has a copy), and the inverse map finds
 * each slot's row.
 */
static void test_plan_on_fitted_table(void **state)
{
	struct locus_gracefit_profile p;
	struct locus_gracefit_topo t = { 4, 8, 6, 2 };
	struct locus_error err = { 0 };
	void *blob = NULL, *map = NULL, *pm;
	const void *pl;
	size_t len, plen, msz, ssz, pmsz;
	struct locus_grace_plan plan;
	static uint16_t ex[512 * 8];
	(void)state;

	assert_int_equal(locus_gracefit_profile_init(&p, 2, 128, 1, NULL), 0);
	fill_profile(&p, 3000, 8);
	if (locus_gracefit_fit(&p, &t, NULL, &blob, &len, NULL, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(locus_grace_blob_check(blob, len, &pl, &plen, &err), 0);
	msz = locus_grace_map_size(pl);
	ssz = locus_grace_plan_state_size(pl);
	pmsz = locus_grace_plan_mem_size(512, 8, 32);
	pm = malloc(pmsz);
	assert_int_equal(posix_memalign(&map, 64, msz), 0);
	assert_int_equal(locus_grace_map_build(map, msz, pl, plen, 1, &err), 0);
	assert_int_equal(locus_grace_plan_init(&plan, pm, pmsz, 512, 8, 32), 0);
	const struct locus_grace_map *m = map;
	int replicated = 0;

	for (uint32_t src = 0; src < 32; src++) {
		void *st = NULL;

		assert_int_equal(posix_memalign(&st, 64, ssz), 0);
		assert_int_equal(locus_grace_plan_state_init(st, ssz, m, src / 8, &err), 0);
		for (uint32_t l = 0; l < 2; l++) {
			for (int i = 0; i < 512; i++) {
				uint32_t base = xr() % 128;

				for (int j = 0; j < 8; j++)
					ex[i * 8 + j] = (uint16_t)((base + j * 3) % 128);
			}
			struct locus_grace_batch b = { .layer = l, .src_rank = src,
						       .n_tokens = 512, .top_k = 8, .experts = ex };
			int nd = locus_grace_plan_batch(st, m, &b, &plan, &err);

			assert_true(nd > 0);
			for (int s = 0; s < 512 * 8; s++) {
				size_t le = (size_t)l * 128 + ex[s];
				const uint16_t *rk = locus_grace_map_ranks(m) + le * m->n_slots;
				uint32_t c = locus_grace_map_ncopies(m)[le], d = plan.slots[s].rank;
				int own = 0, node = 0, holds = 0, i;

				replicated |= c > 1;
				for (uint32_t q = 0; q < c; q++) {
					own |= rk[q] == src;
					node |= rk[q] / 8 == src / 8;
					holds |= rk[q] == d;
				}
				assert_true(holds);
				if (own)
					assert_int_equal(d, src);
				else if (node && d / 8 != src / 8)
					assert_true(shares_rank(m, l, ex, s, 8, d));
				for (i = 0; i < nd; i++)
					if (plan.dest[i] == d)
						break;
				assert_true(i < nd);
				assert_int_equal(plan.rows[plan.dest_start[i] + plan.slots[s].row],
						 s / 8);
				assert_true(plan.kmask[plan.dest_start[i] + plan.slots[s].row] &
					    (1u << (s % 8)));
			}
		}
		free(st);
	}
	assert_true(replicated);
	free(pm);
	free(map);
	free(blob);
	locus_gracefit_profile_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_knee_known_curve),
		cmocka_unit_test(test_replication_fills_budget),
		cmocka_unit_test(test_replication_follows_affinity),
		cmocka_unit_test(test_replication_bounds),
		cmocka_unit_test(test_balance_hand),
		cmocka_unit_test(test_balance_refine),
		cmocka_unit_test(test_fallback),
		cmocka_unit_test(test_repair_sizes_hand),
		cmocka_unit_test(test_spectral_planted),
		cmocka_unit_test(test_grouping_bounds_random),
		cmocka_unit_test(test_grouping_recovers_planted),
		cmocka_unit_test(test_profile_counts),
		cmocka_unit_test(test_fit_end_to_end),
		cmocka_unit_test(test_counts_delta),
		cmocka_unit_test(test_plan_on_fitted_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
