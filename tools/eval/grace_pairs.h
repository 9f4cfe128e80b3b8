/* SPDX-License-Identifier: MIT */
/*
 * Placements that only pair experts (2 primaries per GPU, E = 2N) plus one
 * copy slot per GPU, for grace_bound_figures: how close a placement that
 * exists comes to the bound (grace_bound.h). The pairing is a maximum-weight
 * matching on co-counts by greedy and pair swaps (a local optimum, not the
 * exact blossom), the copies go to the heaviest experts by load per copy.
 */
#ifndef GRACE_PAIRS_H
#define GRACE_PAIRS_H

#include <stdint.h>

struct gp_place {
	uint32_t E, N;
	uint16_t *home;   /* [E] GPU of each expert's primary */
	uint16_t *copy;   /* [N] the expert in each GPU's copy slot, or E (none) */
};

/* Co-counts A[E][E] and loads W[E] of ids[n_tok][k]. */
void gp_counts(const uint16_t *ids, uint32_t n_tok, uint32_t k, uint32_t E, double *A,
	       double *W);

/*
 * The N copy slots go one at a time to the expert, among the hot heaviest
 * (0: no copies), with the most load W per copy (at most N - 1 copies);
 * then the E = 2N experts are paired by weight A (greedy, then swaps of
 * partners between two pairs while the sum grows), keeping every pair's
 * load (each copy holding W / copies) within (1 + tol) x the mean (tol < 0:
 * no cap), pair i on GPU i; then the copies, heaviest expert first, each on
 * the least-loaded GPU with a free slot that holds no copy of it. 0,
 * -EINVAL (E != 2N) or -ENOMEM.
 */
int gp_fit(const double *A, const double *W, uint32_t E, uint32_t N, uint32_t hot, double tol,
	   struct gp_place *out);
void gp_free(struct gp_place *p);

/*
 * Rows off the source GPU (token t on GPU t mod N, one row per distinct
 * destination) and the pairs each GPU serves (load[N]), routing each token
 * to its experts' homes except where the source GPU, or a GPU it already
 * uses, holds a copy. Returns the rows.
 */
double gp_score(const struct gp_place *p, const uint16_t *ids, uint32_t n_tok, uint32_t k,
		double *load);

#endif /* GRACE_PAIRS_H */
