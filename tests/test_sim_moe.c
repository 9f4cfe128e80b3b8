// SPDX-License-Identifier: MIT
/*
 * simulate --moe's layer model (control/sim_moe.c): every expected time is
 * worked out by hand in the comment above its test, on tokens small enough
 * to follow; one test times a placement the GRACE fit and the locus
 * planner (what locusd runs) produce and checks it against the same model
 * applied to the planner's own answer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "locus_grace_plan.h"
#include "locus_gracefit.h"
#include "locus_sim_moe.h"

/* cmocka 1.1 (Debian 12) has no assert_double_equal: |a - b| <= eps, both printed on failure. */
#define assert_close(a, b, eps)                                                           \
	do {                                                                              \
		double a_ = (a), b_ = (b);                                                \
		if (!(fabs(a_ - b_) <= (eps)))                                            \
			fail_msg("%s = %.12g, want %.12g", #a, a_, b_);                   \
	} while (0)

/* Routes every pair to its source GPU. */
static int route_local(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids, uint32_t n,
		       uint32_t k, uint16_t *dst, struct locus_error *err)
{
	(void)ctx;
	(void)layer;
	(void)ids;
	(void)err;
	for (size_t i = 0; i < (size_t)n * k; i++)
		dst[i] = (uint16_t)src;
	return 0;
}

/* Expert e lives on GPU e mod 4. */
static int route_mod4(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids, uint32_t n,
		      uint32_t k, uint16_t *dst, struct locus_error *err)
{
	(void)ctx;
	(void)layer;
	(void)src;
	(void)err;
	for (size_t i = 0; i < (size_t)n * k; i++)
		dst[i] = ids[i] % 4;
	return 0;
}

static int route_bad(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids, uint32_t n,
		     uint32_t k, uint16_t *dst, struct locus_error *err)
{
	(void)ctx;
	(void)layer;
	(void)src;
	(void)ids;
	(void)err;
	for (size_t i = 0; i < (size_t)n * k; i++)
		dst[i] = 9;
	return 0;
}

/* Milliseconds: a pair 1 ms of compute, an expert 2 ms of weights, a row 1 ms in a node, 10 between. */
static const struct locus_sim_moe_hw ms_hw = {
	.row_bytes = 1000, .expert_bytes = 2e6, .flops_per_pair = 1e6, .gpu_flops = 1e9,
	.hbm_bytes_per_s = 1e9, .intra_bytes_per_s = 1e6, .inter_bytes_per_s = 1e5,
	.latency_s = 0.5e-3,
};

static const uint32_t ident[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };

/*
 * Every row stays on its GPU: no all-to-all but the latency, the layer is
 * the slowest GPU's compute. 1 node x 4 GPUs, 8 tokens of top-2 in one
 * step, token i on GPU i mod 4: GPU 0 gets tokens 0 {0,1} and 4 {0,2}: 4
 * pairs (4 ms) and 3 distinct experts (6 ms): 6 ms; GPU 1 tokens 1 {3,4}
 * and 5 {3,4}: 4 pairs, 2 experts: 4 ms; GPU 2 tokens 2 {5,6}, 6 {7,0}:
 * 4 pairs, 4 experts: 8 ms; GPU 3 tokens 3 {1,2}, 7 {1,2}: 4 pairs, 2
 * experts: 4 ms. Layer = 2 x 0.5 + 8 = 9 ms.
 */
static void test_all_local_is_compute_bound(void **state)
{
	static const uint16_t ids[8][2] = { { 0, 1 }, { 3, 4 }, { 5, 6 }, { 1, 2 },
					    { 0, 2 }, { 3, 4 }, { 7, 0 }, { 1, 2 } };
	struct locus_sim_moe_tokens tk = { .L = 1, .k = 2, .E = 8, .n_tok = 8, .ids = &ids[0][0] };
	struct locus_sim_moe_cfg cfg = { .tok = &tk, .order = ident, .tokens_per_step = 8,
					 .n_nodes = 1, .gpus_per_node = 4, .hw = ms_hw,
					 .route = route_local };
	struct locus_sim_moe_result r;
	struct locus_error err = { 0 };

	(void)state;
	assert_int_equal(locus_sim_moe_run(&cfg, &r, &err), 0);
	assert_int_equal(r.n_steps, 1);
	assert_close(r.a2a_s[0], 0.5e-3, 1e-12);
	assert_close(r.compute_s[0], 8e-3, 1e-12);
	assert_close(r.layer_s[0], 9e-3, 1e-12);
	assert_close(r.rows_gpu, 0, 0);
	assert_close(r.rows_node, 0, 0);
	/* 16 pairs, 4 on every GPU */
	assert_close(r.load_mm, 1.0, 1e-12);
	locus_sim_moe_result_free(&r);
}

/*
 * Two tiers: 2 nodes x 2 GPUs (node 0 = GPUs 0, 1), expert e on GPU e mod
 * 4, one step of 4 tokens, token i on GPU i:
 *   t0 (GPU 0) {2, 3}: GPUs 2, 3, both another node: 2 rows 0 -> node 1
 *   t1 (GPU 1) {5, 3}: GPU 1 (stays), GPU 3: 1 row between nodes
 *   t2 (GPU 2) {0, 7}: GPU 0 (another node), GPU 3 (same node): 1 + 1
 *   t3 (GPU 3) {2, 6}: GPU 2 twice: one row in the node
 * Between nodes, max(sent, received) per GPU: 0: max(2, 1) = 2; 1: 1; 2:
 * max(1, 1) = 1; 3: max(0, 2) = 2: 2 rows x 10 ms = 20 ms; in a node 1
 * row at most, 1 ms: all-to-all 0.5 + 20 = 20.5 ms. Pairs / distinct
 * experts: GPU 0 1/1, 1 1/1, 2 3/2 (2, 2, 6), 3 3/2 (3, 3, 7): compute
 * max(3 x 1, 2 x 2) = 4 ms. Layer 2 x 20.5 + 4 = 45 ms. Rows off the GPU 6
 * of 4 token-layers (1.5), off the node 4 (1.0); pairs max/mean 3 / 2.
 */
static void test_two_tiers_by_hand(void **state)
{
	static const uint16_t ids[4][2] = { { 2, 3 }, { 5, 3 }, { 0, 7 }, { 2, 6 } };
	struct locus_sim_moe_tokens tk = { .L = 1, .k = 2, .E = 8, .n_tok = 4, .ids = &ids[0][0] };
	struct locus_sim_moe_cfg cfg = { .tok = &tk, .order = ident, .tokens_per_step = 4,
					 .n_nodes = 2, .gpus_per_node = 2, .hw = ms_hw,
					 .route = route_mod4 };
	struct locus_sim_moe_result r;
	struct locus_error err = { 0 };

	(void)state;
	assert_int_equal(locus_sim_moe_run(&cfg, &r, &err), 0);
	assert_close(r.a2a_s[0], 20.5e-3, 1e-12);
	assert_close(r.compute_s[0], 4e-3, 1e-12);
	assert_close(r.layer_s[0], 45e-3, 1e-12);
	assert_close(r.rows_gpu, 1.5, 1e-12);
	assert_close(r.rows_node, 1.0, 1e-12);
	assert_close(r.load_mm, 1.5, 1e-12);
	locus_sim_moe_result_free(&r);

	/* the same tokens on one node: every row over the 1 ms tier; GPU 3 sends t3's
	 * row and receives t0's, t1's and t2's: 3 rows, 3 ms; 2 x 3.5 + 4 = 11 ms */
	cfg.n_nodes = 1;
	cfg.gpus_per_node = 4;
	assert_int_equal(locus_sim_moe_run(&cfg, &r, &err), 0);
	assert_close(r.a2a_s[0], 3.5e-3, 1e-12);
	assert_close(r.layer_s[0], 11e-3, 1e-12);
	assert_close(r.rows_node, 0, 0);
	locus_sim_moe_result_free(&r);
}

/*
 * A step's time is the mean of its layers: 2 layers, one step of 4 tokens
 * on 1 x 2 GPUs (GPU 0 tokens 0, 2; GPU 1 tokens 1, 3), all local, no
 * latency. Layer 0 ids {0}, {1}, {0}, {0}: GPU 0 2 pairs of 1 expert
 * (max(2, 2) = 2 ms), GPU 1 2 pairs of 2 experts (4 ms): 4 ms. Layer 1 {1}
 * everywhere: 2 pairs, 1 expert: 2 ms. The step: 3 ms. The fifth token
 * makes no full step and is dropped.
 */
static void test_steps_and_layers(void **state)
{
	/* [token][layer][k] */
	static const uint16_t ids[5][2][1] = { { { 0 }, { 1 } }, { { 1 }, { 1 } },
					       { { 0 }, { 1 } }, { { 0 }, { 1 } },
					       { { 3 }, { 3 } } };
	struct locus_sim_moe_tokens tk = { .L = 2, .k = 1, .E = 4, .n_tok = 5,
					   .ids = &ids[0][0][0] };
	struct locus_sim_moe_hw hw = ms_hw;
	struct locus_sim_moe_cfg cfg = { .tok = &tk, .order = ident, .tokens_per_step = 4,
					 .n_nodes = 1, .gpus_per_node = 2, .route = route_local };
	struct locus_sim_moe_result r;
	struct locus_error err = { 0 };

	(void)state;
	hw.latency_s = 0;
	cfg.hw = hw;
	assert_int_equal(locus_sim_moe_run(&cfg, &r, &err), 0);
	assert_int_equal(r.n_steps, 1);
	assert_close(r.layer_s[0], 3e-3, 1e-12);
	assert_close(r.compute_s[0], 3e-3, 1e-12);
	locus_sim_moe_result_free(&r);
}

static void test_refusals(void **state)
{
	static const uint16_t ids[4][2] = { { 2, 3 }, { 5, 3 }, { 0, 7 }, { 2, 6 } };
	struct locus_sim_moe_tokens tk = { .L = 1, .k = 2, .E = 8, .n_tok = 4, .ids = &ids[0][0] };
	struct locus_sim_moe_cfg ok = { .tok = &tk, .order = ident, .tokens_per_step = 4,
					.n_nodes = 2, .gpus_per_node = 2, .hw = ms_hw,
					.route = route_mod4 };
	struct locus_sim_moe_cfg c;
	struct locus_sim_moe_result r;
	struct locus_error err = { 0 };

	(void)state;
	c = ok;
	c.tokens_per_step = 5; /* no full step */
	assert_int_equal(locus_sim_moe_run(&c, &r, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "no full step"));
	c = ok;
	c.n_nodes = 0;
	assert_int_equal(locus_sim_moe_run(&c, &r, &err), -LOCUS_ERANGE);
	c = ok;
	c.hw.inter_bytes_per_s = 0;
	assert_int_equal(locus_sim_moe_run(&c, &r, &err), -LOCUS_ERANGE);
	c = ok;
	c.hw.latency_s = NAN;
	assert_int_equal(locus_sim_moe_run(&c, &r, &err), -LOCUS_ERANGE);
	c = ok;
	c.route = route_bad;
	assert_int_equal(locus_sim_moe_run(&c, &r, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "GPU 9 of 4"));
}

/*
 * The planner path: a GRACE fit of 8 experts on 1 x 2 GPUs (loads only,
 * contiguous, no replication) routes with locus_grace_plan_batch; the
 * simulated layer must equal the model applied to where the planner sent
 * each pair, recomputed here from the map's primaries: expert e on the GPU
 * of its primary.
 */
static void test_grace_planner_route(void **state)
{
	static const uint16_t ids[4][2] = { { 0, 7 }, { 1, 2 }, { 5, 6 }, { 3, 4 } };
	struct locus_gracefit_profile p;
	struct locus_gracefit_topo topo = { .n_nodes = 1, .gpus_per_node = 2 };
	struct locus_gracefit_opts o = { .r = -1, .seed = 1, .no_grouping = 1,
					 .no_replication = 1 };
	struct locus_error err = { 0 };
	struct locus_sim_moe_grace *g = NULL;
	struct locus_sim_moe_tokens tk = { .L = 1, .k = 2, .E = 8, .n_tok = 4, .ids = &ids[0][0] };
	struct locus_sim_moe_cfg cfg = { .tok = &tk, .order = ident, .tokens_per_step = 4,
					 .n_nodes = 1, .gpus_per_node = 2, .hw = ms_hw,
					 .route = locus_sim_moe_route_grace };
	struct locus_sim_moe_result r;
	void *blob = NULL, *m = NULL;
	size_t len;
	uint32_t sent[2] = { 0 }, recv[2] = { 0 }, pairs[2] = { 0 }, ex[2] = { 0 };
	const uint16_t *rank;
	double a2a, comp;

	(void)state;
	assert_int_equal(locus_gracefit_profile_init(&p, 1, 8, 1, &err), 0);
	assert_int_equal(locus_gracefit_profile_add(&p, 0, &ids[0][0], 4, 2, &err), 0);
	assert_int_equal(locus_gracefit_fit(&p, &topo, &o, &blob, &len, NULL, &err), 0);
	/* a blob whose seal does not hold gives no map */
	((uint8_t *)blob)[len - 1] ^= 1;
	assert_true(locus_grace_map_of_blob(blob, len, &m, &err) < 0);
	assert_null(m);
	((uint8_t *)blob)[len - 1] ^= 1;
	assert_int_equal(locus_grace_map_of_blob(blob, len, &m, &err), 0);
	assert_int_equal(locus_sim_moe_grace_init(&g, m, 4, 2, &err), 0);
	cfg.ctx = g;
	assert_int_equal(locus_sim_moe_run(&cfg, &r, &err), 0);

	/* the same by hand from the primaries: token i on GPU i mod 2 */
	rank = locus_grace_map_ranks(m);
	for (uint32_t i = 0; i < 4; i++) {
		uint32_t src = i % 2, d[2];

		for (uint32_t j = 0; j < 2; j++) {
			d[j] = rank[(size_t)ids[i][j] * ((const struct locus_grace_map *)m)->n_slots];
			pairs[d[j]]++;
			ex[d[j]]++; /* every id of these tokens is distinct */
			if (d[j] != src && (j == 0 || d[0] != d[1])) {
				sent[src]++;
				recv[d[j]]++;
			}
		}
	}
	a2a = 0;
	comp = 0;
	for (int x = 0; x < 2; x++) {
		a2a = fmax(a2a, (sent[x] > recv[x] ? sent[x] : recv[x]) * 1e-3);
		comp = fmax(comp, fmax(pairs[x] * 1e-3, ex[x] * 2e-3));
	}
	assert_close(r.layer_s[0], 2 * (0.5e-3 + a2a) + comp, 1e-12);
	/* contiguous: experts 0-3 on GPU 0, 4-7 on GPU 1 */
	assert_int_equal(rank[0], 0);
	assert_int_equal(rank[7 * ((const struct locus_grace_map *)m)->n_slots], 1);
	locus_sim_moe_result_free(&r);
	locus_sim_moe_grace_free(g);
	free(m);
	free(blob);
	locus_gracefit_profile_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_local_is_compute_bound),
		cmocka_unit_test(test_two_tiers_by_hand),
		cmocka_unit_test(test_steps_and_layers),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_grace_planner_route),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
