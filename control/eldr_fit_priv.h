/* SPDX-License-Identifier: MIT */
/* Internals of the ELDR fit shared between its files. */
#ifndef LOCUS_ELDR_FIT_PRIV_H
#define LOCUS_ELDR_FIT_PRIV_H

#include <stdint.h>

#include "locus_eldrfit.h"

/*
 * The fit's float kernels: an AVX2 clone and a default one that run the same
 * operations in the same order, with multiply and add never contracted into
 * an FMA, so results are bit-identical on every CPU. GCC says so per
 * function (optimize); clang has no such attribute and takes a pragma at the
 * top of the function's body instead (LOCUS_FIT_NO_CONTRACT).
 */
#ifdef __clang__
#define LOCUS_FIT_KERNEL __attribute__((target_clones("avx2", "default")))
#define LOCUS_FIT_NO_CONTRACT _Pragma("clang fp contract(off)")
#else
#define LOCUS_FIT_KERNEL __attribute__((target_clones("avx2", "default"), optimize("fp-contract=off")))
#define LOCUS_FIT_NO_CONTRACT
#endif

/*
 * Greedy layer mask over S requests: pre/target [S][L][E] counts, idf
 * [L][E]. Writes mask[L] (0/1) and the scores (definition in
 * locus_eldrfit.h). Returns 0, -EINVAL (S < 2), -ENOMEM.
 */
int eldr_select_mask(const uint16_t *pre, const uint16_t *target, uint32_t S, uint16_t L,
		     uint16_t E, const float *idf, uint32_t nn, uint8_t *mask, float *mask_score,
		     float *full_score, locus_eldrfit_progress_fn progress, void *progress_arg);

/*
 * Cluster unit rows x[n][D] (prefill signatures over the mask) into
 * o->n_decoders clusters of sizes within locus_eldrfit_slack_bounds(o->slack):
 * bounded k-means from o->restarts seeds (o->seed, o->seed + 1, ..), the
 * highest objective kept (the first on ties). With decode [n][L][E] and
 * o->decode_weight > 0 the k-means sees [x_i ; w * y_i] normalised, y_i the
 * request's idf-weighted decode counts (unit; 0 without decode tokens).
 * Writes cen[K][D] = normalised mean of the members' x (the router scores
 * prefill signatures only), res->assign, iterations, converged, seed,
 * size_lo/hi, decode_clustered and objective (sum x_i . cen[assign(i)]).
 * Returns 0, -EINVAL, -ENOMEM.
 */
int eldr_cluster(const struct locus_eldrfit_opts *o, const float *x, uint32_t n, uint32_t D,
		 const uint16_t *decode, uint16_t L, uint16_t E, float *cen,
		 struct locus_eldrfit_result *res);

/* sum over rows of x_i . c[assign(i)] (fixed order). */
double eldr_objective(const float *x, uint32_t n, uint32_t D, const float *cen,
		      const uint32_t *assign);

/*
 * The rows the decode-aware clustering sees: z_i = [x_i ; w y_i] normalised,
 * y_i the request's decode counts weighted by their own idf, unit (0 for a
 * request without decode tokens). malloc'd n x (D + L*E), or NULL on
 * ENOMEM; *any is set when some request has decode tokens.
 */
float *eldr_joint_rows(const float *x, uint32_t n, uint32_t D, const uint16_t *decode,
		       uint16_t L, uint16_t E, float w, int *any);

/*
 * cen[k] = normalize(sum of x over the rows assigned k), for k < K; a
 * vanishing mean gives the uniform unit vector. acc: D doubles of scratch.
 */
void eldr_prefill_centroids(const float *x, uint32_t n, uint32_t D, uint32_t K,
			    const uint32_t *assign, float *cen, double *acc);

/*
 * Sub-centroids (o->centroids_per_decoder = m > 1): the members of each
 * decoder's cluster (assign[n], slots 0..K-1) are split into min(m, members)
 * sub-clusters by bounded spherical k-means (sizes within the slack
 * LOCUS_ELDRFIT_SUB_SLACK of equal, no price, o->restarts seeds, the best
 * objective kept) on the rows the clustering saw (the decode-aware rows
 * when decode is given and o->decode_weight > 0, else x), each centroid the
 * normalised mean of its members' x. A cluster with fewer than two members
 * keeps its centroid cen_k[k]. Writes cen[C][D] (room for K * m rows),
 * slot[C] (the decoder slot of each, slots in order) and *C.
 * Returns 0, -EINVAL, -ENOMEM.
 */
int eldr_subcentroids(const struct locus_eldrfit_opts *o, const float *x, uint32_t n, uint32_t D,
		      const uint16_t *decode, uint16_t L, uint16_t E, const uint32_t *assign,
		      const float *cen_k, float *cen, uint16_t *slot, uint32_t *C);

/*
 * A fit's inputs prepared once for several fits of the same requests (the
 * tuning's grid): counts, idf, layer mask and vectors, and the last
 * clustering with the options it ran with (a fit that differs only in
 * centroids per decoder or routing reuses it). Zero-initialise; free with
 * eldr_prep_free().
 */
struct eldr_prep {
	const uint16_t *pre, *dec;   /* [n][L][E] counts; dec may be NULL */
	uint16_t *own_pre, *own_dec; /* what eldr_prep_trace allocated */
	uint32_t n, K, M, D;          /* K: the fits' n_decoders */
	uint16_t L, E;
	uint8_t *mask;
	float *idf, *x;              /* [L][E], [n][D] */
	enum locus_eldrfit_score_kind score_kind;
	float mask_score, full_score;
	/* the last clustering */
	int have_cluster;
	uint32_t key_k, key_restarts, key_max_iter;
	uint64_t key_seed;
	float key_slack, key_price, key_weight;
	uint32_t *assign, iterations, size_lo, size_hi;
	float *cen;                  /* [K][D] */
	uint64_t seed;
	int converged, decode_clustered;
	double objective;
};

/*
 * locus_eldrfit_arrays' and locus_eldrfit_trace's preparation (the same
 * arguments and checks; the mask options of o are used, the arrays are
 * borrowed) into p. Returns 0 or a negative code with err set.
 */
int eldr_prep_arrays(const uint16_t *prefill, const uint16_t *decode, uint32_t n, uint16_t L,
		     uint16_t E, const uint16_t *score_pre, const uint16_t *score_target,
		     uint32_t n_score, enum locus_eldrfit_score_kind kind,
		     const struct locus_eldrfit_opts *o, struct eldr_prep *p,
		     struct locus_error *err);
int eldr_prep_trace(const struct locus_trace *t, const struct locus_eldrfit_opts *o,
		    struct eldr_prep *p, struct locus_error *err);

/*
 * The fit of p's requests with o (the same K and mask options as the
 * preparation): what locus_eldrfit_arrays() writes into res, the clustering
 * reused when its options match the last one's. Returns 0 or a negative
 * code with err set.
 */
int eldr_prep_fit(struct eldr_prep *p, const struct locus_eldrfit_opts *o,
		  struct locus_eldrfit_result *res, struct locus_error *err);
void eldr_prep_free(struct eldr_prep *p);

#endif /* LOCUS_ELDR_FIT_PRIV_H */
