/* SPDX-License-Identifier: MIT */
/*
 * An upper bound on how few token rows any placement of one layer can send
 * off the source GPU, on a known set of tokens (an oracle that knows the
 * scored tokens, so the bound holds for any placement fitted on anything),
 * scored as grace_figures scores: token t of the set on source GPU t mod N,
 * one row per distinct destination GPU other than the source.
 *
 * Placements bounded: N GPUs, each with `group` primaries (every expert
 * exactly one primary, E = N x group) and `reps` replica slots (any expert,
 * copies of any expert on any GPUs): GRACE's rule at the same memory as
 * EPLB (grace_figures.h). The routing is free (each token takes the fewest
 * rows its placement allows; balance is ignored), which only lowers rows.
 *
 * For one token with expert set X, C_g the experts GPU g holds, any routing:
 *   rows = (GPUs used) - [the source GPU is used]
 *   GPUs used >= D - #{r in X served from a copy, off its home, on a GPU
 *                that also serves another expert of X}
 *   D (the distinct homes of X) = |X| - sum_g (|X n prim(g)| - 1)+
 *   [source used] <= [X n C_source nonempty]
 * and the sums over the tokens are bounded over all placements by counts of
 * the tokens (A: co-counts, W: tokens per expert):
 *   shared:  2 primaries + 1 copy per GPU: the pairs save their A_ab,
 *            a copied r at most min(W_r, sum over its GPUs of cov(r | pair))
 *            (cov: tokens with r and either of the pair), and since min(W, S)
 *            <= lambda W + (1 - lambda) S for any lambda in [0,1], the sum is
 *            at most sum_r lambda_r W_r + a maximum-weight perfect matching
 *            on A_ab + max_r (1 - lambda_r) cov(r | a,b), at most half the
 *            best assignment without fixed points (a matching read both ways
 *            is one); the least value over a subgradient descent on lambda;
 *            the smaller of that and group + replica:
 *   group:   group 2: half the best assignment on A; larger groups: an
 *            expert's share of (c-1) is (c-1)/c <= (cmax-1)/cmax when it has
 *            a partner in its group, cmax = min(|X|, group), and it has one
 *            in at most min(W_e, its group-1 largest co-counts) tokens
 *   replica: an expert with c copies meets at most (group+reps-1) c other
 *            experts on their GPUs: at most min(W_r, that many largest
 *            co-counts) tokens gain, one row each (with 2 others per copy
 *            also at most c x the most tokens any 2 others cover with it);
 *            the reps x N slots spread by greedy marginal gain (concave in
 *            c: greedy is the maximum)
 *   source:  per source GPU the most of its tokens group+reps experts touch
 *            (exact for 3 slots, else the singleton sum), or, if smaller, the
 *            best assignment of primaries to sources plus each source's best
 *            reps experts
 * rows >= sum |X| - shared - source; also each token needs
 * ceil(|X| / (group + reps)) GPUs, so rows >= that - 1 token by token.
 */
#ifndef GRACE_BOUND_H
#define GRACE_BOUND_H

#include <stdint.h>

/* the 2+1 triple bound keeps E^3 counts: used up to this many experts */
#define GB_TRIPLE_MAX_E 128
/* steps of the descent on the copies' multipliers (each value found is a bound) */
#define GB_LAMBDA_STEPS 60

struct gb_place {
	uint32_t E, N;      /* experts, GPUs (E = N x group) */
	uint32_t group;     /* primaries per GPU */
	uint32_t reps;      /* replica slots per GPU */
};

struct gb_terms {
	double tokens;      /* tokens scored */
	double pairs;       /* sum over tokens of |X|: rows with nothing shared, nothing local */
	double group;       /* bound on the grouping's savings */
	double replica;     /* bound on the replicas' savings */
	double shared;      /* bound on all savings from experts sharing a GPU */
	double source;      /* bound on tokens the source GPU serves */
	double floor;       /* sum over tokens of ceil(|X| / slots) - 1 */
	double rows_lb;     /* max(floor, pairs - shared - source, 0) */
};

/*
 * The terms for one layer: ids[n_tok][k] (ids < E; repeats inside a token
 * count once), token t on source GPU t mod N. 0, or -EINVAL (shape), or
 * -ENOMEM.
 */
int gb_layer_bound(const uint16_t *ids, uint32_t n_tok, uint32_t k, const struct gb_place *p,
		   struct gb_terms *out);

/*
 * The maximum over permutations s of sum_i w[i][s(i)], with s(i) != i when
 * no_fixed (n >= 2), w row-major n x n. The assignment itself in perm (may
 * be NULL). -ENOMEM, else 0.
 */
int gb_assign_max(const double *w, uint32_t n, int no_fixed, uint32_t *perm, double *best);

#endif /* GRACE_BOUND_H */
