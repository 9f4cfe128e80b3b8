// SPDX-License-Identifier: MIT
/*
 * Dispatch planner: TAR order is strict, SWRR shares match the weights over
 * a cycle, a token reuses the GPUs it already goes to, combine's inverse map
 * inverts dispatch, bad batches plan nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "locus_grace_plan.h"

#define NR LOCUS_GRACE_NO_RANK

/*
 * 1 layer, 16 experts, 2 nodes x 4 GPUs (8 ranks), 3 replica slots.
 * Expert e's primary is rank e / 2. Replicas:
 *   expert 0 (rank 0): ranks 1, 5        -> a same-GPU copy for src 1
 *   expert 9 (rank 4): ranks 5, 6        -> only remote copies from node 0
 *   expert 2 (rank 1): ranks 2, 3        -> same-node copies from src 0
 * Predicted loads: rank r -> 10 * (r + 1).
 */
struct env {
	void *payload, *map, *state, *pmem;
	size_t plen, slen;
	struct locus_grace_plan plan;
};

static struct locus_grace_map *build_map(struct env *v, uint64_t gen)
{
	struct locus_grace_dims d = {
		.n_layers = 1, .n_experts = 16, .n_nodes = 2, .gpus_per_node = 4,
		.max_replicas = 3, .capacity = 4, .replica_budget = 4,
	};
	struct locus_grace_view w;
	struct locus_error err = { 0 };
	size_t msz;

	v->plen = locus_grace_payload_size(&d);
	v->payload = calloc(1, v->plen);
	memcpy(v->payload, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&w, v->payload, v->plen, NULL), 0);
	for (int e = 0; e < 16; e++) {
		w.primary[e] = (uint16_t)(e / 2);
		w.expert_load[e] = 1;
		for (int i = 0; i < 3; i++)
			w.replica[e * 3 + i] = NR;
	}
	w.replica[0] = 1;
	w.replica[1] = 5;
	w.replica[9 * 3 + 0] = 5;
	w.replica[9 * 3 + 1] = 6;
	w.replica[2 * 3 + 0] = 2;
	w.replica[2 * 3 + 1] = 3;
	for (int r = 0; r < 8; r++)
		w.pred_load[r] = 10.0f * (float)(r + 1);
	msz = locus_grace_map_size(&d);
	assert_int_equal(posix_memalign(&v->map, 64, msz), 0);
	if (locus_grace_map_build(v->map, msz, v->payload, v->plen, gen, &err))
		fail_msg("%s", err.msg);
	return v->map;
}

static void setup_env(struct env *v, uint32_t node)
{
	struct locus_grace_map *m = build_map(v, 1);
	size_t pm = locus_grace_plan_mem_size(256, 8, 8);

	v->slen = locus_grace_plan_state_size(&m->dims);
	assert_int_equal(posix_memalign(&v->state, 64, v->slen), 0);
	assert_int_equal(locus_grace_plan_state_init(v->state, v->slen, m, node, NULL), 0);
	v->pmem = malloc(pm);
	assert_int_equal(locus_grace_plan_init(&v->plan, v->pmem, pm, 256, 8, 8), 0);
}

static void free_env(struct env *v)
{
	free(v->payload);
	free(v->map);
	free(v->state);
	free(v->pmem);
}

static int plan_one(struct env *v, uint32_t src, uint16_t e)
{
	struct locus_grace_batch b = { .layer = 0, .src_rank = src, .n_tokens = 1, .top_k = 1,
				       .experts = &e };

	assert_int_equal(locus_grace_plan_batch(v->state, v->map, &b, &v->plan, NULL), 1);
	return v->plan.slots[0].rank;
}

static void test_tar_local_replica_always(void **state)
{
	struct env v;
	(void)state;

	setup_env(&v, 0);
	for (int i = 0; i < 500; i++) {
		assert_int_equal(plan_one(&v, 1, 0), 1); /* own GPU holds a copy */
		assert_int_equal(plan_one(&v, 0, 0), 0); /* the primary is local */
		assert_int_equal(plan_one(&v, 3, 7), 3); /* single copy */
	}
	assert_int_equal(v.plan.tier_start[1] - v.plan.tier_start[0], 1);
	free_env(&v);
}

static void test_tar_same_node_before_remote(void **state)
{
	struct env v;
	int seen[8] = { 0 };
	(void)state;

	setup_env(&v, 0);
	/* expert 0 from src 2: copies 0, 1 on node 0 and 5 on node 1 */
	for (int i = 0; i < 300; i++)
		seen[plan_one(&v, 2, 0)]++;
	assert_int_equal(seen[5], 0);
	assert_int_equal(seen[0] + seen[1], 300);
	/* W' 10 (rank 0) vs 20 (rank 1): weights 64 and 32 */
	assert_int_equal(seen[0], 200);
	assert_int_equal(seen[1], 100);
	free_env(&v);
}

static void test_swrr_cycle_shares(void **state)
{
	struct env v;
	int seen[8] = { 0 };
	(void)state;

	setup_env(&v, 0);
	/* expert 9: copies 4, 5, 6 all remote from node 0; W' 50, 60, 70 */
	const uint16_t *w = locus_grace_map_weights(v.map) + 9 * 4;
	int cycle = w[0] + w[1] + w[2];

	assert_int_equal(w[0], 64);
	assert_int_equal(w[1], 53); /* round(64 * 50 / 60) */
	assert_int_equal(w[2], 46); /* round(64 * 50 / 70) */
	for (int c = 1; c <= 5; c++) {
		for (int i = 0; i < cycle; i++)
			seen[plan_one(&v, 3, 9)]++;
		assert_in_range(seen[4], c * 64 - 1, c * 64 + 1);
		assert_in_range(seen[5], c * 53 - 1, c * 53 + 1);
		assert_in_range(seen[6], c * 46 - 1, c * 46 + 1);
	}
	/* within a cycle the picks interleave: no copy twice in a row 3 times */
	int last = -1, run = 0;

	for (int i = 0; i < cycle; i++) {
		int r = plan_one(&v, 3, 9);

		run = (r == last) ? run + 1 : 1;
		last = r;
		assert_true(run < 3);
	}
	free_env(&v);
}

static uint64_t rng = 88172645463325252ull;

static uint32_t xr(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

static void test_combine_inverts_dispatch(void **state)
{
	enum { T = 256, K = 8 };
	static uint16_t ex[T * K];
	static float gates[T * K], gcopy[T * K];
	struct env v;
	struct locus_error err = { 0 };
	(void)state;

	setup_env(&v, 1);
	for (int round = 0; round < 20; round++) {
		uint32_t src = 4 + xr() % 4;
		int n_dest;

		for (int t = 0; t < T; t++) {
			for (int j = 0; j < K; j++) {
				int dup;

				do {
					ex[t * K + j] = (uint16_t)(xr() % 16);
					dup = 0;
					for (int q = 0; q < j; q++)
						dup |= ex[t * K + q] == ex[t * K + j];
				} while (dup);
				gates[t * K + j] = (float)(xr() % 1000) / 1000.0f;
			}
		}
		memcpy(gcopy, gates, sizeof(gates));
		struct locus_grace_batch b = { .layer = 0, .src_rank = src, .n_tokens = T,
					       .top_k = K, .experts = ex, .gates = gates };

		n_dest = locus_grace_plan_batch(v.state, v.map, &b, &v.plan, &err);
		assert_true(n_dest > 0);
		struct locus_grace_plan *p = &v.plan;

		assert_ptr_equal(p->gates, gates);
		assert_memory_equal(gates, gcopy, sizeof(gates));
		/* tiers: ranges cover dest[], each dest in its tier, ranks distinct */
		assert_int_equal(p->tier_start[0], 0);
		assert_int_equal(p->tier_start[LOCUS_GRACE_N_TIERS], (uint32_t)n_dest);
		for (int tier = 0; tier < LOCUS_GRACE_N_TIERS; tier++)
			for (uint32_t i = p->tier_start[tier]; i < p->tier_start[tier + 1]; i++)
				assert_int_equal(locus_grace_tier_of(src, p->dest[i], 4), tier);
		/* expected rows: one per distinct destination of each token */
		uint32_t expect_rows = 0;

		for (int t = 0; t < T; t++) {
			for (int j = 0; j < K; j++) {
				int dup = 0;

				for (int q = 0; q < j; q++)
					dup |= p->slots[t * K + q].rank == p->slots[t * K + j].rank;
				expect_rows += !dup;
			}
		}
		assert_int_equal(p->n_rows, expect_rows);
		/* inverse map: each slot finds its token row with its k bit set */
		for (int t = 0; t < T; t++) {
			for (int j = 0; j < K; j++) {
				const struct locus_grace_slot *s = &p->slots[t * K + j];
				uint32_t i, at;
				uint16_t e = ex[t * K + j];
				const uint16_t *rk = locus_grace_map_ranks(v.map) + e * 4;
				int holds = 0;

				for (int c = 0; c < 4; c++)
					holds |= rk[c] == s->rank;
				assert_true(holds); /* the destination holds the expert */
				for (i = 0; i < (uint32_t)n_dest; i++)
					if (p->dest[i] == s->rank)
						break;
				assert_true(i < (uint32_t)n_dest);
				assert_true(s->row < p->dest_start[i + 1] - p->dest_start[i]);
				at = p->dest_start[i] + s->row;
				assert_int_equal(p->rows[at], t);
				assert_true(p->kmask[at] & (1u << j));
			}
		}
		/* every row's mask names exactly the slots that point at it */
		for (uint32_t i = 0; i < (uint32_t)n_dest; i++) {
			for (uint32_t at = p->dest_start[i]; at < p->dest_start[i + 1]; at++) {
				uint32_t t = p->rows[at];

				if (at > p->dest_start[i])
					assert_true(p->rows[at - 1] < t);
				for (int j = 0; j < K; j++) {
					const struct locus_grace_slot *s = &p->slots[t * K + j];
					int points = s->rank == p->dest[i] &&
						     p->dest_start[i] + s->row == at;

					assert_int_equal(!!(p->kmask[at] & (1u << j)), points);
				}
			}
		}
	}
	free_env(&v);
}

static void test_bad_batches_plan_nothing(void **state)
{
	struct env v;
	struct locus_error err = { 0 };
	uint16_t ex[4] = { 0, 9, 16, 2 };
	void *snap;
	(void)state;

	setup_env(&v, 0);
	for (int i = 0; i < 7; i++)
		plan_one(&v, 2, 0); /* leave SWRR state mid-cycle */
	snap = malloc(v.slen);
	memcpy(snap, v.state, v.slen);
	struct locus_grace_batch b = { .layer = 0, .src_rank = 2, .n_tokens = 2, .top_k = 2,
				       .experts = ex };

	assert_int_equal(locus_grace_plan_batch(v.state, v.map, &b, &v.plan, &err),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "token 1 slot 0: expert id 16 >= E=16"));
	assert_int_equal(v.plan.n_dest, 0);
	assert_int_equal(v.plan.n_rows, 0);
	assert_memory_equal(snap, v.state, v.slen);
	ex[2] = 3;
	b.layer = 1;
	assert_int_equal(locus_grace_plan_batch(v.state, v.map, &b, &v.plan, &err),
			 -LOCUS_ERANGE);
	b.layer = 0;
	b.src_rank = 5; /* node 1, state is node 0 */
	assert_int_equal(locus_grace_plan_batch(v.state, v.map, &b, &v.plan, &err),
			 -LOCUS_ERANGE);
	b.src_rank = 8;
	assert_int_equal(locus_grace_plan_batch(v.state, v.map, &b, &v.plan, &err),
			 -LOCUS_ERANGE);
	b.src_rank = 2;
	b.n_tokens = 257;
	assert_int_equal(locus_grace_plan_batch(v.state, v.map, &b, &v.plan, &err),
			 -LOCUS_EFULL);
	b.n_tokens = 2;
	b.top_k = 9;
	assert_int_equal(locus_grace_plan_batch(v.state, v.map, &b, &v.plan, &err),
			 -LOCUS_EFULL);
	assert_memory_equal(snap, v.state, v.slen);
	b.top_k = 2;
	assert_true(locus_grace_plan_batch(v.state, v.map, &b, &v.plan, &err) > 0);
	/* an empty batch plans nothing and is not an error */
	b.n_tokens = 0;
	assert_int_equal(locus_grace_plan_batch(v.state, v.map, &b, &v.plan, &err), 0);
	assert_int_equal(v.plan.n_rows, 0);
	free(snap);
	free_env(&v);
}

static void test_new_generation_resets_swrr(void **state)
{
	struct env v;
	int first[4], again[4];
	(void)state;

	setup_env(&v, 0);
	for (int i = 0; i < 4; i++)
		first[i] = plan_one(&v, 2, 0);
	((struct locus_grace_map *)v.map)->generation = 2;
	for (int i = 0; i < 4; i++)
		again[i] = plan_one(&v, 2, 0);
	assert_memory_equal(first, again, sizeof(first));
	free_env(&v);
}

/* Plan n tokens of top-k ids (the same k ids each) from src; the plan's destinations. */
static int plan_same(struct env *v, uint32_t src, const uint16_t *ids, uint32_t k, uint32_t n)
{
	static uint16_t ex[256 * 8];
	struct locus_grace_batch b = { .layer = 0, .src_rank = src, .n_tokens = n, .top_k = k,
				       .experts = ex };

	for (uint32_t t = 0; t < n; t++)
		memcpy(ex + t * k, ids, k * sizeof(*ids));
	return locus_grace_plan_batch(v->state, v->map, &b, &v->plan, NULL);
}

/* Every row of the plan carries all k slots of its token (one destination each). */
static void assert_one_row_per_token(const struct env *v, uint32_t n, uint32_t k, int rank)
{
	assert_int_equal(v->plan.n_dest, 1);
	assert_int_equal(v->plan.dest[0], rank);
	assert_int_equal(v->plan.n_rows, n);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(v->plan.rows[i], i);
		assert_int_equal(v->plan.kmask[i], (1u << k) - 1);
		for (uint32_t j = 0; j < k; j++)
			assert_int_equal(v->plan.slots[i * k + j].rank, rank);
	}
}

/*
 * A copy on a GPU the token already goes to costs no row: it wins over the
 * nearest tier's round robin (which would spread the pairs, one more row
 * for most tokens), whatever the slot order, across tiers, among several
 * such copies; and a copy a later expert of the token can share wins too.
 */
static void test_token_reuses_its_gpus(void **state)
{
	static const uint16_t fixed_first[] = { 4, 2 }, choice_first[] = { 2, 4 };
	static const uint16_t remote[] = { 10, 0 }, two_hits[] = { 4, 6, 2 }, chain[] = { 9, 0 };
	struct env v;
	int seen[8] = { 0 }, via5 = 0;
	(void)state;

	setup_env(&v, 0);
	/* expert 4: rank 2 only; expert 2: ranks 1, 2, 3 (none on src 0) */
	assert_int_equal(plan_same(&v, 0, fixed_first, 2, 200), 1);
	assert_one_row_per_token(&v, 200, 2, 2);
	assert_int_equal(plan_same(&v, 0, choice_first, 2, 200), 1);
	assert_one_row_per_token(&v, 200, 2, 2);
	/* expert 10: rank 5 only; expert 0: ranks 0, 1 (src 2's node) and 5 */
	assert_int_equal(plan_same(&v, 2, remote, 2, 200), 1);
	assert_one_row_per_token(&v, 200, 2, 5);
	assert_int_equal(v.plan.tier_start[2], 0);
	/*
	 * experts 4 and 6 on ranks 2 and 3: expert 2 goes to one of them; rank
	 * 2 took the 400 pairs above (SWRR values 64, 43 - 139, 32 x 400), so
	 * the round robin gives rank 3 these turns
	 */
	assert_int_equal(plan_same(&v, 0, two_hits, 3, 75), 2);
	for (uint32_t t = 0; t < 75; t++)
		seen[v.plan.slots[t * 3 + 2].rank]++;
	assert_int_equal(seen[3], 75);
	assert_int_equal(v.plan.n_rows, 150);
	free_env(&v);

	/*
	 * From src 2, expert 9 (copies 4, 5, 6: weights 64, 53, 46, total 163)
	 * resolves first and takes rank 5, where expert 0 (0, 1, 5) also has a
	 * copy, so expert 0 follows it there: one row, not two. Each such pick
	 * moves rank 5's SWRR value by 53 - 163; below -64 x 64 it waits for
	 * its share again, so over 200 tokens rank 5 gets (53 x 200 - cur) /
	 * 163 of them with cur within a pick of -4096: 89.5 to 90.8.
	 */
	setup_env(&v, 0);
	assert_true(plan_same(&v, 2, chain, 2, 200) > 0);
	for (uint32_t t = 0; t < 200; t++) {
		const struct locus_grace_slot *sl = v.plan.slots + t * 2;

		if (sl[0].rank == 5) {
			assert_int_equal(sl[1].rank, 5);
			via5++;
		} else {
			assert_true(sl[1].rank <= 1);
		}
	}
	assert_in_range(via5, 89, 91);
	free_env(&v);
}

/*
 * The pairs a token-aware choice takes are charged to the round robin: 100
 * tokens send expert 2 (ranks 1, 2, 3 from src 0, weights 64, 43, 32) to
 * rank 2 beside expert 4, then 600 tokens of expert 2 alone by SWRR give
 * ranks 1 and 3 what they missed: over the 700 pairs each copy's count is
 * within 2 of 700 x weight / 139 (322.3, 216.5, 161.2).
 */
static void test_token_choice_keeps_shares(void **state)
{
	static const uint16_t with4[] = { 4, 2 }, alone[] = { 2 };
	struct env v;
	int seen[8] = { 0 };
	(void)state;

	setup_env(&v, 0);
	assert_int_equal(plan_same(&v, 0, with4, 2, 100), 1);
	for (uint32_t t = 0; t < 100; t++)
		seen[v.plan.slots[t * 2 + 1].rank]++;
	assert_int_equal(seen[2], 100);
	for (int b = 0; b < 3; b++) {
		assert_true(plan_same(&v, 0, alone, 1, 200) > 0);
		for (uint32_t t = 0; t < 200; t++)
			seen[v.plan.slots[t].rank]++;
	}
	assert_in_range(seen[1], 320, 324);
	assert_in_range(seen[2], 215, 218);
	assert_in_range(seen[3], 159, 163);
	free_env(&v);
}

/*
 * A copy a token-aware choice always passes over stops gaining credit at
 * 2^30: 40 M tokens {4, 2} from src 0 send expert 2 to rank 2 and give rank
 * 1 (weight 64) 64 each, past 2^31 without the bound (it would wrap
 * negative); after them ranks 1 and 3 (both at the bound, rank 1 first)
 * take expert 2's next pairs when it is alone, rank 2 none.
 */
static void test_swrr_credit_bounded(void **state)
{
	static const uint16_t with4[] = { 4, 2 }, alone[] = { 2 };
	const int32_t *cur;
	int seen[8] = { 0 };
	struct env v;
	(void)state;

	setup_env(&v, 0);
	for (int b = 0; b < 40000000 / 256; b++)
		assert_int_equal(plan_same(&v, 0, with4, 2, 256), 1);
	cur = ((const struct locus_grace_plan_state *)v.state)->cur + 2 * 4;
	assert_int_equal(cur[0], 1 << 30);
	assert_int_equal(cur[1], -(1 << 30));
	assert_int_equal(cur[2], 1 << 30);
	assert_true(plan_same(&v, 0, alone, 1, 100) > 0);
	assert_int_equal(v.plan.slots[0].rank, 1);
	for (uint32_t t = 0; t < 100; t++)
		seen[v.plan.slots[t].rank]++;
	assert_int_equal(seen[2], 0);
	assert_true(seen[1] > 0 && seen[3] > 0);
	free_env(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tar_local_replica_always),
		cmocka_unit_test(test_tar_same_node_before_remote),
		cmocka_unit_test(test_swrr_cycle_shares),
		cmocka_unit_test(test_combine_inverts_dispatch),
		cmocka_unit_test(test_bad_batches_plan_nothing),
		cmocka_unit_test(test_new_generation_resets_swrr),
		cmocka_unit_test(test_token_reuses_its_gpus),
		cmocka_unit_test(test_token_choice_keeps_shares),
		cmocka_unit_test(test_swrr_credit_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
