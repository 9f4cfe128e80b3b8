/* SPDX-License-Identifier: MIT */
/*
 * The offline ELDR fit (DESIGN.md, "ELDR"; control/README-eldr.md):
 *
 *   1. counts[i][l][e] from each calibration request's prompt (saturating,
 *      as the router's signatures are built);
 *   2. idf[l][e] = ln((1 + N) / (1 + df[l][e])) + 1, df = requests with
 *      counts[i][l][e] > 0;
 *   3. a layer mask chosen by greedy forward selection on the signature
 *      quality score below (or every layer with no_mask);
 *   4. x_i = normalize(counts_i * idf over the mask); bounded spherical
 *      K-means: k-means++ seeding (fixed seed), each iteration an exact
 *      bounded assignment (cluster sizes within the slack's bounds, a
 *      balance price beyond N/K; floor/ceil(N/K) with no slack) that
 *      minimises sum_i -z_i . c_assign(i) + the price, then c_k =
 *      normalize(mean); stops when the assignment repeats or at max_iter;
 *      z_i = x_i, or [x_i ; w y_i] normalised with the request's decode
 *      expert use y_i (decode_weight w); from `restarts` seeds, the best
 *      kept;
 *   5. centroids = normalize(mean of the members' x_i) (prefill only);
 *   6. the sealed ELDR table (locus_eldr.h layout).
 *
 * Signature quality score of a mask M (what the greedy search maximises):
 *   over a sample of S requests, for each request i take its nn nearest
 *   neighbours j under the cosine of masked prefill signatures, and average
 *   cos(y_i, y_j), where y is the request's decode expert use: its
 *   routed_experts counts over all layers, L2-normalised. High when requests
 *   the router would put together really share decode experts.
 *   Without decode data in the trace, y comes from the second half of each
 *   prompt's tokens and the prefill signature of the score from the first
 *   half (split-half proxy: "does the beginning predict what follows").
 *   The search adds the layer with the best score while the gain exceeds
 *   1e-4, and keeps every layer instead when that scores at least as well.
 * Everything is sequential with fixed summation order: the same input and
 * seed give a byte-identical payload.
 */
#ifndef LOCUS_ELDRFIT_H
#define LOCUS_ELDRFIT_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"
#include "locus_trace.h"

#define LOCUS_ELDRFIT_SLACK_DEFAULT         0.5f
#define LOCUS_ELDRFIT_BALANCE_PRICE_DEFAULT 2.0f
#define LOCUS_ELDRFIT_RESTARTS_DEFAULT      8u
#define LOCUS_ELDRFIT_DECODE_WEIGHT_DEFAULT 1.0f

/*
 * Bound on requests x layers x experts a fit accepts: the fit holds the
 * counts (2 bytes a cell) and the vectors (4 bytes a cell) in memory, so
 * this is about 6 GiB (up to 16 GiB with decode_weight > 0: the decode
 * counts and the rows [x ; w y] too). Above it, subsample the calibration trace.
 */
#define LOCUS_ELDRFIT_MAX_CELLS (1ull << 30)

enum locus_eldrfit_score_kind {
	LOCUS_ELDRFIT_SCORE_NONE = 0,   /* no_mask: no search ran */
	LOCUS_ELDRFIT_SCORE_DECODE,     /* decode routed_experts as target */
	LOCUS_ELDRFIT_SCORE_SPLIT_HALF, /* prompt first half -> second half */
};

typedef void (*locus_eldrfit_progress_fn)(void *arg, const char *stage, uint32_t done,
					  uint32_t total);

struct locus_eldrfit_opts {
	uint32_t n_decoders;         /* K >= 1 */
	const uint32_t *decoder_ids; /* [K] unique, or NULL for 0..K-1 */
	float tau;                   /* locality band written to the table, [0, 2] */
	uint64_t seed;               /* k-means++ seed */
	int no_mask;                 /* use every layer */
	uint32_t max_iter;           /* k-means cap; 0: 100 */
	/*
	 * Balance slack s: every cluster owns between (1 - s) N / K and
	 * (1 + s) N / K calibration requests (locus_eldrfit_slack_bounds);
	 * 0 is the exact balance floor(N/K) or ceil(N/K).
	 */
	float slack;
	/*
	 * Balance price lambda (0: none): within the slack, a cluster's s-th
	 * request costs lambda * (s - N/K) / (N/K) beyond the mean N/K, in the
	 * units of 1 - cosine, so a cluster grows past its share only for
	 * requests that fit it that much better than any other.
	 */
	float balance_price;
	uint32_t restarts;           /* k-means++ seeds seed, seed + 1, ..; best objective kept; 0: 1 */
	/*
	 * Weight w of each calibration request's decode expert use in the
	 * clustering (the k-means sees [x_i ; w * y_i], y_i its idf-weighted
	 * routed_experts counts, unit); 0: prefill signatures only. Requests
	 * without decode tokens are clustered on x_i alone. The table's
	 * centroids are always the members' mean prefill signatures.
	 */
	float decode_weight;
	uint32_t mask_sample;        /* requests scored by the mask search; 0: 512 */
	uint32_t mask_neighbours;    /* nn of the score; 0: 8 */
	locus_eldrfit_progress_fn progress; /* may be NULL */
	void *progress_arg;
};

struct locus_eldrfit_result {
	void *blob;              /* sealed table (64-byte header + payload), malloc'd */
	size_t blob_len;
	uint32_t *assign;        /* [n_used] cluster slot of each fitted request */
	uint32_t *req_index;     /* [n_used] trace index of each fitted request */
	uint32_t n_used;         /* requests fitted */
	uint32_t iterations;     /* k-means iterations run */
	int converged;           /* assignment stable before the cap */
	uint32_t n_masked;
	enum locus_eldrfit_score_kind score_kind;
	float mask_score;        /* score of the chosen mask */
	float full_score;        /* score of every layer */
	double objective;        /* sum over requests of x_i . c_assign(i) (prefill, table centroids) */
	uint64_t seed;           /* k-means++ seed of the restart kept */
	uint32_t size_lo, size_hi; /* cluster size bounds the slack gave */
	int decode_clustered;    /* the clustering saw decode expert use */
};

/*
 * Fit an ELDR table from a calibration trace. Requests are used in trace
 * order. Errors: K = 0 or K > requests, bad decoder ids, tau out of range,
 * shapes beyond locus_eldr.h limits (-LOCUS_ERANGE), -ENOMEM.
 */
int locus_eldrfit_trace(const struct locus_trace *t, const struct locus_eldrfit_opts *o,
			struct locus_eldrfit_result *res, struct locus_error *err);

/*
 * The same fit from count arrays: prefill[n][L][E] (IDF and clusters),
 * decode[n][L][E] (decode expert use for the clustering, or NULL), and
 * for the mask score either score_pre/score_target [n_score][L][E] (counts of
 * the score's prefill and target, for requests score_idx[n_score] of
 * prefill) or NULL (then no search: every layer, as no_mask).
 */
int locus_eldrfit_arrays(const uint16_t *prefill, const uint16_t *decode, uint32_t n,
			 uint16_t L, uint16_t E, const uint16_t *score_pre,
			 const uint16_t *score_target, uint32_t n_score,
			 enum locus_eldrfit_score_kind kind, const struct locus_eldrfit_opts *o,
			 struct locus_eldrfit_result *res, struct locus_error *err);

/*
 * The recommended options (what locusctl fit uses): everything 0 but tau
 * LOCUS_ELDR_TAU_DEFAULT, slack LOCUS_ELDRFIT_SLACK_DEFAULT, balance_price
 * LOCUS_ELDRFIT_BALANCE_PRICE_DEFAULT, restarts
 * LOCUS_ELDRFIT_RESTARTS_DEFAULT, decode_weight LOCUS_ELDRFIT_DECODE_WEIGHT_DEFAULT.
 * A zero-initialised struct (with n_decoders and tau) is the original fit:
 * exact balance, one seed, prefill only.
 */
void locus_eldrfit_opts_default(struct locus_eldrfit_opts *o, uint32_t n_decoders);

void locus_eldrfit_result_free(struct locus_eldrfit_result *res);

/* ---- building blocks (exposed for tests and benchmarks) ---- */

/* idf[L*E] from counts[n][L*E] (formula above). */
void locus_eldrfit_idf(const uint16_t *counts, uint32_t n, size_t le, float *idf);

/*
 * x[D] = normalize(counts * idf) over the masked layers, compacted:
 * D = masked layers * E. Returns the norm before normalising (0: x is 0).
 */
double locus_eldrfit_vector(const uint16_t *counts, uint16_t L, uint16_t E, const float *idf,
			    const uint8_t *mask, float *x);

/*
 * Exact balanced assignment: assign[n] in 0..K-1 minimising sum cost[i][K],
 * cluster sizes floor(n/K) or ceil(n/K). Successive shortest paths on the
 * n x K bipartite graph contracted to the K clusters (plus one node for the
 * n mod K larger clusters), Bellman-Ford per augmentation: O(n^2 K + n K^3).
 * Deterministic (ties to lower indices). Returns 0, -EINVAL, -ENOMEM.
 */
int locus_eldrfit_balanced_assign(const double *cost, uint32_t n, uint32_t K,
				  uint32_t *assign);

/*
 * The same with bounds and a balance price: every cluster gets between lo
 * and hi points (K * lo <= n <= K * hi, else -EINVAL), minimising
 * sum cost[i][assign(i)] + sum over clusters of
 * locus_eldrfit_balance_penalty(n, K, lambda, size): a cluster's s-th point
 * costs lambda * (s - n/K) / (n/K) beyond the mean (lambda >= 0; 0: only the
 * bounds). balanced_assign is lo = floor(n/K), hi = ceil(n/K), lambda 0.
 * Same flow with lo direct slots per cluster and hi - lo extra slots of
 * non-decreasing price sharing the n - K * lo units the sink still takes.
 */
int locus_eldrfit_bounded_assign(const double *cost, uint32_t n, uint32_t K, uint32_t lo,
				 uint32_t hi, double lambda, uint32_t *assign);

/* Sum of the balance prices of a cluster of `size` points (definition above). */
double locus_eldrfit_balance_penalty(uint32_t n, uint32_t K, double lambda, uint32_t size);

/*
 * Bounds for a balance slack s >= 0: lo = ceil((1 - s) n / K), hi =
 * floor((1 + s) n / K), widened to floor(n/K) and ceil(n/K) when rounding
 * would make them tighter than exact balance (s = 0 is exact balance).
 */
void locus_eldrfit_slack_bounds(uint32_t n, uint32_t K, float slack, uint32_t *lo,
				uint32_t *hi);

/*
 * Balanced spherical k-means on unit rows x[n][D]: centroids[K][D] (unit,
 * or copied from a member when a mean vanishes), assign[n]. Returns the
 * iterations run (> 0) or a negative code; *converged set.
 */
int locus_eldrfit_kmeans(const float *x, uint32_t n, uint32_t D, uint32_t K, uint64_t seed,
			 uint32_t max_iter, float *centroids, uint32_t *assign, int *converged,
			 locus_eldrfit_progress_fn progress, void *progress_arg);

/*
 * The same with every cluster's size in [lo, hi] and the balance price
 * lambda (bounded_assign's rule); each iteration lowers (or keeps)
 * sum -x_i . c_assign(i) + the balance penalty.
 */
int locus_eldrfit_kmeans_bounded(const float *x, uint32_t n, uint32_t D, uint32_t K,
				 uint32_t lo, uint32_t hi, double lambda, uint64_t seed,
				 uint32_t max_iter, float *centroids, uint32_t *assign,
				 int *converged, locus_eldrfit_progress_fn progress,
				 void *progress_arg);

#endif /* LOCUS_ELDRFIT_H */
