// SPDX-License-Identifier: MIT
/*
 * The oracle bound of tools/eval/grace_bound.c: its terms on a hand case worked
 * out below, the assignment solver on hand matrices, and, on small random
 * token sets, that the bound never exceeds the true optimum, which the test
 * finds by trying every placement (6 experts, 3 GPUs, 2 primaries and one
 * copy each) and every token's best routing; and the pairing placements
 * of tools/eval/grace_pairs.c on a hand case.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "grace_bound.h"
#include "grace_pairs.h"

static void test_assign(void **state)
{
	/* best permutation 0->2, 1->0, 2->1: 7 + 5 + 6; with 1->1 allowed 0->2 1->1 2->0 = 7+9+4 */
	const double w[9] = { 1, 2, 7, 5, 9, 0, 4, 6, 3 };
	uint32_t perm[3];
	double best;

	(void)state;
	assert_int_equal(gb_assign_max(w, 3, 0, perm, &best), 0);
	assert_true(best == 20);
	assert_int_equal(perm[0], 2);
	assert_int_equal(perm[1], 1);
	assert_int_equal(perm[2], 0);
	assert_int_equal(gb_assign_max(w, 3, 1, perm, &best), 0);
	assert_true(best == 18);
	assert_int_equal(perm[0], 2);
	assert_int_equal(perm[1], 0);
	assert_int_equal(perm[2], 1);
}

/*
 * 4 experts on 2 GPUs (2 primaries + 1 copy each), top-2, tokens on GPU t mod 2:
 *   t0 {0,1} (GPU 0), t1 {0,1} (GPU 1), t2 {2,3} (GPU 0), t3 {0,2} (GPU 1).
 * Tokens per expert W = 3 2 2 1; co-counts A01 = 2, A23 = 1, A02 = 1.
 * group: the best assignment without fixed points 0<->1, 2<->3 = 2+2+1+1,
 *        half of it 3 (the matching {01, 23} saves exactly 3).
 * replica: 2 copies, each meets 2 other experts; expert 0: min(3, 2+1) = 3,
 *        expert 1: min(2, 2) = 2 (first of the ties 1 and 2): 5.
 * shared: GPU {a,b,r} saves A_ab + A_ar + A_br (no token holds 3): w01 = 2+1,
 *        w23 = 1+1, w02 = 1+2, w13 = 0+2, w03 = 0+2, w12 = 0+3; every
 *        derangement sums to 10, half: 5 (GPUs {0,1,2}, {2,3,0} save 5),
 *        below group + replica = 8.
 * source: GPU 0's tokens {0,1} {2,3}, GPU 1's {0,1} {0,2}: 3 experts touch
 *        both of each: 4 (the coupled form: primaries 0 and one of 1, 2 on
 *        GPU 1: 2+1, the others on GPU 0: 1+1, copies 1 + 2: 8).
 * rows: 8 - 5 - 4 < 0 and no token needs 2 GPUs: bound 0.
 */
static void test_hand_terms(void **state)
{
	const uint16_t ids[8] = { 0, 1, 0, 1, 2, 3, 0, 2 };
	const struct gb_place p = { .E = 4, .N = 2, .group = 2, .reps = 1 };
	struct gb_terms b;

	(void)state;
	assert_int_equal(gb_layer_bound(ids, 4, 2, &p, &b), 0);
	assert_true(b.tokens == 4);
	assert_true(b.pairs == 8);
	assert_true(b.group == 3);
	assert_true(b.replica == 5);
	assert_true(b.shared == 5);
	assert_true(b.source == 4);
	assert_true(b.floor == 0);
	assert_true(b.rows_lb == 0);
}

/*
 * Top-4 of 4 experts (every token all of them), 2 GPUs of 3 slots: each
 * token needs 2 GPUs, so at least 1 row (the floor), and GPU 0 = {0,1,2},
 * GPU 1 = {2,3,0} reaches it: the bound is exact here.
 */
static void test_floor(void **state)
{
	const uint16_t ids[12] = { 0, 1, 2, 3, 3, 2, 1, 0, 1, 3, 0, 2 };
	const struct gb_place p = { .E = 4, .N = 2, .group = 2, .reps = 1 };
	struct gb_terms b;

	(void)state;
	assert_int_equal(gb_layer_bound(ids, 3, 4, &p, &b), 0);
	assert_true(b.floor == 3);
	assert_true(b.rows_lb == 3);
}

static void test_bad_shape(void **state)
{
	const uint16_t ids[2] = { 0, 4 };
	const struct gb_place p = { .E = 4, .N = 2, .group = 2, .reps = 1 };
	const struct gb_place q = { .E = 5, .N = 2, .group = 2, .reps = 1 };
	struct gb_terms b;

	(void)state;
	assert_int_equal(gb_layer_bound(ids, 1, 2, &p, &b), -EINVAL);
	assert_int_equal(gb_layer_bound(ids, 1, 2, &q, &b), -EINVAL);
}

#define BE 6
#define BN 3

/* The fewest rows off the source GPU for the token set x (bits) from src. */
static uint32_t best_rows(const uint8_t gpu[BN], uint32_t src, uint8_t x)
{
	uint32_t best = BN;

	for (uint32_t s = 0; s < (1u << BN); s++) {
		uint8_t cov = gpu[src];
		uint32_t n = 0;

		if (s & (1u << src))
			continue;
		for (uint32_t g = 0; g < BN; g++)
			if (s & (1u << g)) {
				cov |= gpu[g];
				n++;
			}
		if ((cov & x) == x && n < best)
			best = n;
	}
	return best;
}

/* Over every placement of BE experts, 2 primaries + 1 copy on each of BN GPUs. */
struct brute {
	uint32_t rows;               /* the fewest rows of any placement */
	uint32_t group, rep, src;    /* the most any placement saves by each term */
	uint32_t per_gpu;            /* the most sum_g (|X n C_g| - 1)+ of any placement */
	uint32_t shared;             /* the most grouping + copies savings of any placement */
};

/*
 * Every placement, every token: the inequality the bound rests on, rows >=
 * |X| - (grouping's savings) - (copies, off their home, beside another
 * expert of X) - [the source GPU holds an expert of X], and the per-GPU
 * form rows >= |X| - sum_g (|X n C_g| - 1)+ - [the same], checked token by
 * token, and the totals of each term kept at their maximum over placements
 * (shared: grouping + copies together).
 */
static void brute_force(const uint16_t *ids, uint32_t n_tok, uint32_t k, struct brute *out)
{
	uint32_t home[BE];
	uint8_t x[64];

	memset(out, 0, sizeof(*out));
	out->rows = UINT32_MAX;
	for (uint32_t t = 0; t < n_tok; t++) {
		x[t] = 0;
		for (uint32_t j = 0; j < k; j++)
			x[t] |= (uint8_t)(1u << ids[t * k + j]);
	}
	/* home[e] in base BN, each GPU exactly 2 experts */
	for (uint32_t code = 0; code < 729; code++) {
		uint32_t c = code, cnt[BN] = { 0 }, ok = 1;

		for (uint32_t e = 0; e < BE; e++, c /= BN) {
			home[e] = c % BN;
			ok &= ++cnt[home[e]] <= 2;
		}
		if (!ok)
			continue;
		for (uint32_t rep = 0; rep < 216; rep++) {
			uint8_t prim[BN] = { 0 }, gpu[BN], copy[BN];
			uint32_t r = rep, rows = 0, G = 0, R = 0, S = 0, H = 0;

			for (uint32_t e = 0; e < BE; e++)
				prim[home[e]] |= (uint8_t)(1u << e);
			for (uint32_t g = 0; g < BN; g++, r /= BE) {
				copy[g] = (uint8_t)(1u << (r % BE));
				gpu[g] = prim[g] | copy[g];
			}
			for (uint32_t t = 0; t < n_tok; t++) {
				uint32_t src = t % BN, rt = best_rows(gpu, src, x[t]), g_t = 0, h_t = 0;
				uint8_t shared = 0;
				int s_t = (gpu[src] & x[t]) != 0;

				for (uint32_t g = 0; g < BN; g++) {
					int c_g = __builtin_popcount(prim[g] & x[t]);

					int h_g = __builtin_popcount(gpu[g] & x[t]);

					g_t += c_g > 1 ? (uint32_t)c_g - 1 : 0;
					h_t += h_g > 1 ? (uint32_t)h_g - 1 : 0;
					if ((copy[g] & ~prim[g] & x[t]) && (prim[g] & x[t]))
						shared |= copy[g];
				}
				assert_true((int)rt >= __builtin_popcount(x[t]) - (int)g_t -
								__builtin_popcount(shared) - s_t);
				assert_true((int)rt >= __builtin_popcount(x[t]) - (int)h_t - s_t);
				rows += rt;
				H += h_t;
				G += g_t;
				R += (uint32_t)__builtin_popcount(shared);
				S += (uint32_t)s_t;
			}
			out->rows = rows < out->rows ? rows : out->rows;
			out->group = G > out->group ? G : out->group;
			out->per_gpu = H > out->per_gpu ? H : out->per_gpu;
			out->shared = G + R > out->shared ? G + R : out->shared;
			out->rep = R > out->rep ? R : out->rep;
			out->src = S > out->src ? S : out->src;
		}
	}
}

static uint32_t next(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 33);
}

/*
 * Random token sets, uniform in odd trials, skewed in even ones (experts 0
 * and 1 hot, 2-3 and 4-5 often together): the lemma holds for every
 * placement and token, each term of the bound is at least the most any
 * placement saves by it, and the bound is at most the optimum.
 */
static void test_bound_below_optimum(void **state)
{
	uint64_t seed = 14;

	(void)state;
	for (uint32_t trial = 0; trial < 24; trial++) {
		uint32_t k = 2 + (trial / 2) % 2, n_tok = 8 + next(&seed) % 16;
		const struct gb_place p = { .E = BE, .N = BN, .group = 2, .reps = 1 };
		uint16_t ids[24 * 3];
		struct gb_terms b;
		struct brute bf;

		for (uint32_t t = 0; t < n_tok; t++) {
			uint32_t have = 0;

			for (uint32_t j = 0; j < k;) {
				uint32_t e = next(&seed) % 9;

				if (trial & 1)
					e = next(&seed) % BE;
				else
					e = e < 3 ? e % 2 : e < 6 ? 2 + (j & 1) + 2 * (e & 1) : e - 3;
				if (have & (1u << e))
					continue;
				have |= 1u << e;
				ids[t * k + j++] = (uint16_t)e;
			}
		}
		assert_int_equal(gb_layer_bound(ids, n_tok, k, &p, &b), 0);
		brute_force(ids, n_tok, k, &bf);
		/* 1e-6: the multipliers' sums round */
		if (b.group < bf.group || b.replica < bf.rep || b.shared < bf.shared - 1e-6 ||
		    b.source < bf.src || b.rows_lb > bf.rows + 1e-6)
			fail_msg("trial %u (k %u, %u tokens): bound terms %.1f %.1f %.1f %.1f "
				 "rows %.1f, any placement's %u %u %u %u rows %u", trial, k, n_tok,
				 b.group, b.replica, b.shared, b.source, b.rows_lb, bf.group,
				 bf.rep, bf.shared, bf.src, bf.rows);
	}
}

/*
 * The pairing placement on a hand case: 4 experts, 2 GPUs, co-counts A01 = 5,
 * A23 = 3, A02 = 1, loads 6 5 4 3. Greedy pairs {0,1} on GPU 0, {2,3} on
 * GPU 1. Tokens t0 {0,1} (GPU 0), t1 {0,2} (GPU 1), t2 {2,3} (GPU 0): rows
 * 0, 1, 1; loads 3 and 3. With the copy on the heaviest expert (H 1): at
 * most N - 1 = 1 copy, of expert 0 on GPU 1, so t1 stays local: rows 0, 0,
 * 1; loads 2 (t0) and 4 (t1, t2).
 */
static void test_pairs(void **state)
{
	const double A[16] = { 0, 5, 1, 0, 5, 0, 0, 0, 1, 0, 0, 3, 0, 0, 3, 0 };
	const double W[4] = { 6, 5, 4, 3 };
	const uint16_t ids[6] = { 0, 1, 0, 2, 2, 3 };
	struct gp_place p;
	double load[2];

	(void)state;
	assert_int_equal(gp_fit(A, W, 4, 2, 0, -1, &p), 0);
	assert_int_equal(p.home[0], p.home[1]);
	assert_int_equal(p.home[2], p.home[3]);
	assert_int_not_equal(p.home[0], p.home[2]);
	assert_int_equal(p.copy[0], 4);
	assert_int_equal(p.copy[1], 4);
	assert_true(gp_score(&p, ids, 3, 2, load) == 2);
	assert_true(load[0] == 3 && load[1] == 3);
	gp_free(&p);
	assert_int_equal(gp_fit(A, W, 4, 2, 1, -1, &p), 0);
	assert_int_equal(p.home[0], 0);
	assert_int_equal(p.copy[0], 4);
	assert_int_equal(p.copy[1], 0);
	assert_true(gp_score(&p, ids, 3, 2, load) == 1);
	assert_true(load[0] == 2 && load[1] == 4);
	gp_free(&p);
	assert_int_equal(gp_fit(A, W, 5, 2, 0, -1, &p), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_assign),
		cmocka_unit_test(test_hand_terms),
		cmocka_unit_test(test_floor),
		cmocka_unit_test(test_bad_shape),
		cmocka_unit_test(test_bound_below_optimum),
		cmocka_unit_test(test_pairs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
