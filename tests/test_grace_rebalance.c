// SPDX-License-Identifier: MIT
/*
 * Online rebalance (control/grace_rebalance.c): the sliding window with
 * decay, the moves a push costs, and the refit held to a move budget. The
 * case: 1 node x 2 GPUs, one expert per GPU (e0 on GPU 0, e1 on GPU 1),
 * one replica per GPU, every figure worked by hand from the split model
 * (an expert's load shared evenly by its copies).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "locus_err.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"

#define HDR sizeof(struct locus_tbl_hdr)

static void test_window(void **state)
{
	struct locus_gracefit_window w;
	struct locus_error err = { 0 };
	double x[2], W[2];
	(void)state;

	assert_int_equal(locus_gracefit_window_init(&w, 1, 2, 3, 0.5, &err), 0);
	assert_true(locus_gracefit_window_loads(&w, W) == 0);
	/* intervals 1, 2, 4, 8 (expert 1: 10x); 3 kept: 8 + 4/2 + 2/4 = 10.5 */
	for (int i = 0; i < 4; i++) {
		x[0] = 1 << i;
		x[1] = 10 * x[0];
		locus_gracefit_window_add(&w, x);
	}
	assert_true(fabs(locus_gracefit_window_loads(&w, W) - 115.5) < 1e-12);
	assert_true(fabs(W[0] - 10.5) < 1e-12);
	assert_true(fabs(W[1] - 105) < 1e-12);
	locus_gracefit_window_free(&w);
	/* decay 1, window 1 (the defaults): the newest interval alone */
	assert_int_equal(locus_gracefit_window_init(&w, 1, 2, 1, 1, &err), 0);
	x[0] = 3;
	x[1] = 4;
	locus_gracefit_window_add(&w, x);
	x[0] = 5;
	locus_gracefit_window_add(&w, x);
	assert_true(locus_gracefit_window_loads(&w, W) == 9);
	locus_gracefit_window_free(&w);
	assert_int_equal(locus_gracefit_window_init(&w, 1, 2, 3, 0, &err), -LOCUS_ERANGE);
	assert_int_equal(locus_gracefit_window_init(&w, 1, 2, 3, 1.5, &err), -LOCUS_ERANGE);
	assert_int_equal(locus_gracefit_window_init(&w, 1, 2, 0, 1, &err), -LOCUS_ERANGE);
}

/* The base table: 2 layers, loads equal, no copy lowers a GPU: no replicas. */
static void base_table(void **blob, size_t *len)
{
	struct locus_gracefit_profile p;
	struct locus_gracefit_topo t = { .n_nodes = 1, .gpus_per_node = 2, .capacity = 1,
					 .replica_budget = 1 };
	struct locus_gracefit_opts o = { .r = -1, .seed = 1, .no_grouping = 1 };
	struct locus_error err = { 0 };

	assert_int_equal(locus_gracefit_profile_init(&p, 2, 2, 0, &err), 0);
	for (int i = 0; i < 4; i++)
		p.W[i] = 1;
	assert_int_equal(locus_gracefit_fit(&p, &t, &o, blob, len, NULL, &err), 0);
	locus_gracefit_profile_free(&p);
}

static void view(void *blob, size_t len, struct locus_grace_view *v)
{
	const void *pl;
	size_t plen;

	assert_int_equal(locus_grace_blob_check(blob, len, &pl, &plen, NULL), 0);
	assert_int_equal(locus_grace_view_init(v, (void *)pl, plen, NULL), 0);
}

/*
 * Loads layer 0 {6, 1}, layer 1 {3, 1}. Each layer's refit copies e0 to
 * GPU 1 (layer 0: GPUs 3 | 4, below 6; layer 1: 1.5 | 2.5, below 3), then
 * e1 to GPU 0 (both GPUs (w0 + w1) / 2): 2 moves, skew 1. Before: layer 0
 * 6 / 3.5, layer 1 3 / 2. Gain per move: layer 0 (6/3.5 - 1) / 2 = 0.357,
 * layer 1 0.25.
 */
static void test_budget(void **state)
{
	const double W[4] = { 6, 1, 3, 1 };
	const double now = (6 / 3.5 + 1.5) / 2;
	struct locus_gracefit_rebalance rep;
	struct locus_grace_view cur, nx;
	struct locus_error err = { 0 };
	void *base, *blob;
	size_t blen, len;
	(void)state;

	base_table(&base, &blen);
	view(base, blen, &cur);
	assert_true(cur.replica[0] == LOCUS_GRACE_NO_RANK && cur.replica[1] == LOCUS_GRACE_NO_RANK);
	/* no bound: both layers, 4 moves, skew 1 */
	assert_int_equal(locus_gracefit_rebalance_plan(cur.dims, blen - HDR, W, UINT32_MAX,
						       &blob, &len, &rep, &err), 0);
	assert_true(fabs(rep.rho_now - now) < 1e-9);
	assert_true(fabs(rep.rho_full - 1) < 1e-9);
	assert_true(fabs(rep.rho_after - 1) < 1e-9);
	assert_int_equal(rep.moves_full, 4);
	assert_int_equal(rep.moves, 4);
	assert_int_equal(rep.layers_changed, 2);
	view(blob, len, &nx);
	assert_int_equal(nx.replica[0], 1);   /* layer 0: e0 on GPU 1 */
	assert_int_equal(nx.replica[1], 0);   /* e1 on GPU 0 */
	assert_int_equal(locus_gracefit_moves_layer(&cur, &nx, 0), 2);
	assert_int_equal(locus_gracefit_moves_layer(&nx, &nx, 1), 0);
	free(blob);
	/* 3 moves: layer 0 alone (layer 1's 2 no longer fit) */
	for (uint32_t budget = 2; budget <= 3; budget++) {
		assert_int_equal(locus_gracefit_rebalance_plan(cur.dims, blen - HDR, W, budget,
							       &blob, &len, &rep, &err), 0);
		assert_int_equal(rep.moves_full, 4);
		assert_int_equal(rep.moves, 2);
		assert_int_equal(rep.layers_changed, 1);
		assert_true(fabs(rep.rho_after - (1 + 1.5) / 2) < 1e-9);
		view(blob, len, &nx);
		assert_int_equal(nx.replica[0], 1);
		assert_true(nx.replica[2] == LOCUS_GRACE_NO_RANK);   /* layer 1 as it was */
		assert_true(nx.replica[3] == LOCUS_GRACE_NO_RANK);
		/* layer 1's predicted loads on the new loads: 3 | 1 */
		assert_true(nx.pred_load[2] == 3 && nx.pred_load[3] == 1);
		free(blob);
	}
	/* 1 move: nothing fits, the table as it is */
	assert_int_equal(locus_gracefit_rebalance_plan(cur.dims, blen - HDR, W, 1, &blob, &len,
						       &rep, &err), 0);
	assert_int_equal(rep.moves, 0);
	assert_int_equal(rep.layers_changed, 0);
	assert_true(fabs(rep.rho_after - now) < 1e-9);
	assert_false(locus_gracefit_should_push(rep.rho_now, rep.rho_after, 0.05));
	free(blob);
	free(base);
}

/*
 * Primary swaps, 2 GPUs x 3 experts: GPU 0 holds e0, e1, e2 (loads 4, 4,
 * 1), GPU 1 e3, e4, e5 (1 each): 9 | 3, skew 1.5. Swapping e0 or e1 with
 * any of e3..e5 gives 6 | 6 (skew 1); e2 with them moves nothing. Without
 * co-activation the first best pair is taken, (e0, e3); with A (e0-e1 10,
 * e0-e2 5) moving e0 loses 15 and moving e1 10: (e1, e3).
 */
static void test_swap_primaries(void **state)
{
	const double W[6] = { 4, 4, 1, 1, 1, 1 };
	const uint16_t pri0[6] = { 0, 0, 0, 1, 1, 1 };
	double A[36] = { 0 };
	struct locus_error err = { 0 };
	uint16_t pri[6];
	uint32_t n;
	(void)state;

	memcpy(pri, pri0, sizeof(pri));
	assert_int_equal(locus_gracefit_swap_primaries(2, 6, W, NULL, pri, 8, 0.1, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(pri[0], 1);
	assert_int_equal(pri[3], 0);
	assert_int_equal(pri[1], 0);
	A[0 * 6 + 1] = A[1 * 6 + 0] = 10;
	A[0 * 6 + 2] = A[2 * 6 + 0] = 5;
	memcpy(pri, pri0, sizeof(pri));
	assert_int_equal(locus_gracefit_swap_primaries(2, 6, W, A, pri, 8, 0.1, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(pri[0], 0);
	assert_int_equal(pri[1], 1);
	assert_int_equal(pri[3], 0);
	/* no swap allowed, or the skew within the tolerance: the grouping stays */
	memcpy(pri, pri0, sizeof(pri));
	assert_int_equal(locus_gracefit_swap_primaries(2, 6, W, A, pri, 0, 0.1, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_int_equal(locus_gracefit_swap_primaries(2, 6, W, A, pri, 8, 0.5, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_memory_equal(pri, pri0, sizeof(pri));
	/* bad input */
	pri[5] = 2;
	assert_int_equal(locus_gracefit_swap_primaries(2, 6, W, NULL, pri, 8, 0.1, &n, &err),
			 -LOCUS_ERANGE);
	assert_memory_equal(pri, ((const uint16_t[]){ 0, 0, 0, 1, 1, 2 }), sizeof(pri));
	assert_int_equal(locus_gracefit_swap_primaries(2, 6, NULL, NULL, pri, 8, 0.1, &n, &err),
			 -EINVAL);
}

/*
 * The rebalance with swaps, 1 layer, 2 GPUs x 2 experts (e0, e1 on GPU 0,
 * e2, e3 on GPU 1), one replica per GPU, fitted on equal loads. The traffic
 * drifts to {5, 4, 1, 1}: 9 | 2. Without swaps only copies can even it out
 * (one per GPU). One swap (e0, e2) gives 5 | 6 before any copy; e0 and e2
 * change GPU, so the push moves them too.
 */
static void test_plan_swaps(void **state)
{
	const double W[4] = { 5, 4, 1, 1 };
	struct locus_gracefit_topo t = { .n_nodes = 1, .gpus_per_node = 2, .capacity = 2,
					 .replica_budget = 1 };
	struct locus_gracefit_opts o = { .r = -1, .seed = 1, .no_grouping = 1 };
	struct locus_gracefit_rebalance r0, r1;
	struct locus_gracefit_profile p;
	struct locus_grace_view cur, nx;
	struct locus_error err = { 0 };
	void *base, *b0, *b1, *b2;
	size_t blen, l0, l1, l2;
	(void)state;

	assert_int_equal(locus_gracefit_profile_init(&p, 1, 4, 0, &err), 0);
	for (int i = 0; i < 4; i++)
		p.W[i] = 1;
	assert_int_equal(locus_gracefit_fit(&p, &t, &o, &base, &blen, NULL, &err), 0);
	locus_gracefit_profile_free(&p);
	view(base, blen, &cur);
	assert_int_equal(cur.primary[0], 0);
	assert_int_equal(cur.primary[2], 1);
	/* 0 swaps: the plain plan, byte for byte */
	assert_int_equal(locus_gracefit_rebalance_plan(cur.dims, blen - HDR, W, UINT32_MAX, &b0,
						       &l0, &r0, &err), 0);
	assert_int_equal(locus_gracefit_rebalance_plan_swaps(cur.dims, blen - HDR, W, NULL, 0,
							     UINT32_MAX, &b2, &l2, &r1, &err), 0);
	assert_int_equal(l0, l2);
	assert_memory_equal((uint8_t *)b0 + HDR, (uint8_t *)b2 + HDR, l0 - HDR);
	assert_int_equal(r1.swaps, 0);
	free(b2);
	/* 1 swap: the primaries follow the traffic, better skew, the swapped experts moved */
	assert_int_equal(locus_gracefit_rebalance_plan_swaps(cur.dims, blen - HDR, W, NULL, 1,
							     UINT32_MAX, &b1, &l1, &r1, &err), 0);
	assert_int_equal(r1.swaps, 1);
	assert_true(r1.rho_after < r0.rho_after - 0.05);
	view(b1, l1, &nx);
	assert_int_equal(nx.primary[0], 1);
	assert_int_equal(nx.primary[2], 0);
	assert_int_equal(nx.primary[1], 0);
	assert_int_equal(nx.primary[3], 1);
	assert_true(r1.moves >= 2);
	assert_int_equal(r1.moves, locus_gracefit_moves_layer(&cur, &nx, 0));
	assert_true(r1.moves > r0.moves);
	/* a budget below the swap's moves keeps the layer as it is */
	free(b1);
	assert_int_equal(locus_gracefit_rebalance_plan_swaps(cur.dims, blen - HDR, W, NULL, 1, 1,
							     &b1, &l1, &r1, &err), 0);
	view(b1, l1, &nx);
	assert_memory_equal(nx.primary, cur.primary, 4 * sizeof(uint16_t));
	assert_int_equal(r1.moves, 0);
	free(b1);
	free(b0);
	free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_swap_primaries),
		cmocka_unit_test(test_plan_swaps),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
