/* SPDX-License-Identifier: MIT */
/*
 * The offline ELDR fit (control/README-eldr.md, "The fit"):
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
#define LOCUS_ELDRFIT_MAX_CENTROIDS_PER_DECODER 16u
#define LOCUS_ELDRFIT_SUB_SLACK             0.5f /* balance slack of the sub-clusters */

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
	/*
	 * Centroids per decoder m (0 or 1: one): each decoder's cluster split
	 * into min(m, members) sub-clusters (eldr_subcent.c), all of them that
	 * decoder's in the table (a version 2 table with a centroid map).
	 */
	uint32_t centroids_per_decoder;
	/* The table's load spill: spill_tau 0 = off (margin then 0), else (tau, 2]. */
	float spill_tau;
	uint32_t spill_margin;
	int overflow_spread;         /* the table's LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD */
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
	uint32_t n_centroids;    /* centroids in the table (K with one per decoder) */
};

/*
 * Fit an ELDR table from a calibration trace. Requests are used in trace
 * order. Errors: K = 0 or K > requests, bad decoder ids, tau, spill or
 * centroids per decoder out of range, shapes beyond locus_eldr.h limits
 * (-LOCUS_ERANGE), -ENOMEM.
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
 * A zero-initialised struct (with n_decoders and tau) is the exact-balance
 * fit (locusctl fit --exact-balance): floor/ceil(N/K), one seed, prefill only.
 */
void locus_eldrfit_opts_default(struct locus_eldrfit_opts *o, uint32_t n_decoders);

void locus_eldrfit_result_free(struct locus_eldrfit_result *res);

/* ---- tau chosen from the calibration data (locusctl fit --tau auto) ---- */

#define LOCUS_ELDRFIT_TAU_GRID_MAX      32
#define LOCUS_ELDRFIT_TAU_BATCH_DEFAULT 4u  /* requests per decoder batch replayed */
#define LOCUS_ELDRFIT_TAU_ORDERS_DEFAULT 20u /* arrival orders replayed per fold */

/*
 * Replay requests idx[n] (indices into t) through the router built from an
 * ELDR table payload (payload, len; its tau is the band), in `orders`
 * random arrival orders drawn from seed, each in rounds of K * B requests
 * (a tail shorter than a round left out) as eldr_quality routes them:
 * *pairs = distinct (layer, expert) pairs one decode step of a decoder
 * batch reads with every batch capped at B (a full decoder marked down for
 * the rest of the round), *load = the busiest decoder's requests over the
 * mean B with no cap, both averaged over rounds and orders. The control
 * plane does not link the data plane's router: the caller hands one in
 * (eldr_replay_router, control/eldr_replay.c). Returns 0 or a
 * negative code with err set.
 */
typedef int (*locus_eldrfit_replay_fn)(void *arg, const struct locus_trace *t,
				       const void *payload, size_t len, const uint32_t *idx,
				       uint32_t n, uint32_t B, uint32_t orders, uint64_t seed,
				       double *pairs, double *load, struct locus_error *err);

/*
 * The same rounds, orders and seed as a locus_eldrfit_replay_fn, every
 * request of idx[n] routed by its domain label as eldr_quality's oracle
 * routes it (K decoders split evenly among the labelled domains, the
 * least-filled of its own): the reference that knows the domain.
 */
typedef int (*locus_eldrfit_oracle_fn)(void *arg, const struct locus_trace *t, uint32_t K,
				       const uint32_t *idx, uint32_t n, uint32_t B,
				       uint32_t orders, uint64_t seed, double *pairs,
				       double *load, struct locus_error *err);

struct locus_eldrfit_tau_opts {
	const float *grid;      /* candidate taus in [0, 2], ascending; NULL: the default grid */
	uint32_t n_grid;        /* <= LOCUS_ELDRFIT_TAU_GRID_MAX */
	uint32_t batch;         /* B of the replay; 0: LOCUS_ELDRFIT_TAU_BATCH_DEFAULT */
	uint32_t orders;        /* 0: LOCUS_ELDRFIT_TAU_ORDERS_DEFAULT */
	/*
	 * Bound on the busiest decoder's load (max/mean, no cap); 0: the load
	 * the exact-balance fit (locusctl fit --exact-balance) gives at
	 * LOCUS_ELDR_TAU_DEFAULT on the same folds.
	 */
	float load_bound;
	locus_eldrfit_replay_fn replay;
	void *replay_arg;
};

struct locus_eldrfit_tau_point {
	float tau;
	double pairs, load;     /* mean over the folds */
	int over;               /* over the bound in a fold (not a candidate) */
};

struct locus_eldrfit_tau_result {
	float tau;              /* the choice */
	uint32_t chosen;        /* its index in pt[] */
	int feasible;           /* some tau met the bound (else the least loaded was taken) */
	double bound;           /* the load bound applied */
	double ref_pairs, ref_load; /* the exact-balance fit at the default tau, same folds */
	uint32_t n_grid;
	struct locus_eldrfit_tau_point pt[LOCUS_ELDRFIT_TAU_GRID_MAX];
	uint32_t n_part[2];     /* calibration requests in each fold's part */
};

/*
 * Choose the fit's tau from calibration requests calib[n_calib] of t (NULL:
 * every request) and nothing else: locus_eldrfit_tune() over the grid of
 * taus with o's other choices fixed (its balance price, centroids per
 * decoder and overflow rule; no load spill): the calibration requests are
 * split alternately into two parts; for each part, the fit (options o, tau
 * irrelevant) runs on that part and the other part is replayed (to->replay)
 * at every tau of the grid; pairs and load are averaged over both folds.
 * The choice is the tau with the fewest pairs per step among those whose
 * load is within the bound in each fold (the exact-balance fit's load on
 * that fold, or to->load_bound; ties: the lower load, then the larger tau);
 * none within it: the least loaded. The caller then fits every calibration
 * request with o->tau = tr->tau. Needs decode tokens (routed_experts) and at
 * least K * B requests in each part. Returns 0 or a negative code with err
 * set (-LOCUS_ERANGE for an unusable grid, batch or trace).
 */
int locus_eldrfit_tau_choose(const struct locus_trace *t, const uint32_t *calib,
			     uint32_t n_calib, const struct locus_eldrfit_opts *o,
			     const struct locus_eldrfit_tau_opts *to,
			     struct locus_eldrfit_tau_result *tr, struct locus_error *err);

/* ---- the routing choices made from the calibration data (locusctl fit's default) ---- */

#define LOCUS_ELDRFIT_TUNE_LIST_MAX 32

/* One point of the search: fit choices, then routing choices written into the table. */
struct locus_eldrfit_tune_point {
	float balance_price;
	uint32_t centroids_per_decoder;
	float tau;
	float spill_tau;         /* 0: no load spill */
	uint32_t spill_margin;   /* 0 with no spill */
	int overflow_spread;
	double pairs, load;      /* replayed, mean over the folds */
	double fold_pairs[2], fold_load[2]; /* each fold's replay */
};

/* Choices locus_eldrfit_tune takes from the fit's options instead of searching. */
#define LOCUS_ELDRFIT_FIX_TAU    0x1u  /* o->tau */
#define LOCUS_ELDRFIT_FIX_PRICE  0x2u  /* o->balance_price */
#define LOCUS_ELDRFIT_FIX_CPD    0x4u  /* o->centroids_per_decoder */
#define LOCUS_ELDRFIT_FIX_SPILL  0x8u  /* o->spill_tau and o->spill_margin (0: no spill) */
#define LOCUS_ELDRFIT_FIX_SPREAD 0x10u /* o->overflow_spread */

/*
 * The search space and the replay. Each list: NULL (and n 0) for its
 * default, or up to LOCUS_ELDRFIT_TUNE_LIST_MAX values; a list of one value,
 * or a bit of fixed, fixes that choice (fixed wins over a list).
 */
struct locus_eldrfit_tune_opts {
	uint32_t fixed;          /* LOCUS_ELDRFIT_FIX_* */
	uint32_t batch;          /* B of the replay; 0: LOCUS_ELDRFIT_TAU_BATCH_DEFAULT */
	uint32_t orders;         /* 0: LOCUS_ELDRFIT_TAU_ORDERS_DEFAULT */
	float load_bound;        /* as locus_eldrfit_tau_opts' (0: the exact-balance fit's load) */
	locus_eldrfit_replay_fn replay;
	void *replay_arg;
	/*
	 * With no load_bound and every calibration request labelled with a
	 * domain (of at least 2), the bound in each fold is this oracle's load
	 * on that fold; NULL or unlabelled: the exact-balance fit's.
	 */
	locus_eldrfit_oracle_fn oracle;
	void *oracle_arg;
	const float *taus;       /* ascending in [0, 2]; default 0, 0.05, 0.1, 0.15, 0.2 */
	uint32_t n_taus;
	/* 0 (no spill) or in (0, 2], a spill only where wider than tau; default 0, 0.2, 0.3, 0.5 */
	const float *spill_taus;
	uint32_t n_spill_taus;
	const uint32_t *spill_margins; /* >= 1; default 1, 2 */
	uint32_t n_spill_margins;
	const uint32_t *centroids_per_decoder; /* 1..LOCUS_ELDRFIT_MAX_CENTROIDS_PER_DECODER; default 1, 2, 3, 4 */
	uint32_t n_centroids_per_decoder;
	const float *balance_prices; /* [0, 100]; default 0 and o->balance_price */
	uint32_t n_balance_prices;
	const int *overflow_spread;  /* 0 or 1; default both */
	uint32_t n_overflow_spread;
};

struct locus_eldrfit_tune_result {
	struct locus_eldrfit_tune_point *pt; /* malloc'd [n_pt], in search order */
	uint32_t n_pt;
	uint32_t chosen;         /* index in pt[] */
	int feasible;            /* some point met the bound (else the least loaded was taken) */
	double bound;            /* the load bound applied: the mean of fold_bound */
	double fold_bound[2];    /* ... in each fold (a point must be within both) */
	int bound_oracle;        /* the bounds are the domain oracle's loads */
	double oracle_pairs, oracle_load; /* the oracle's figures, mean of the folds (bound_oracle) */
	double ref_pairs, ref_load; /* the exact-balance fit at the default tau, same folds */
	double ref_fold_load[2];    /* its load in each fold */
	uint32_t n_part[2];      /* calibration requests in each fold's part */
};

/*
 * Choose the fit's balance price and centroids per decoder and the table's
 * tau, load spill and overflow rule from calibration requests calib[n_calib]
 * of t (NULL: every request) and nothing else: the calibration requests
 * are split alternately into two parts; for each part and each (price,
 * centroids per decoder) the fit (options o otherwise) runs on that part,
 * and the other part is replayed (to->replay) with every routing point
 * (tau x overflow rule x {no spill, spill_tau > tau x margin}) written into
 * that table; pairs and load are averaged over both folds. The choice is
 * the point with the fewest pairs per decode step among those whose load
 * is within the bound in each fold (to->load_bound; else the domain
 * oracle's load on that fold when to->oracle is given and every
 * calibration request is labelled; else the exact-balance fit's) (ties: the
 * lower load, then the later point); none within it: the least loaded. The caller then fits every calibration
 * request with locus_eldrfit_tune_apply(). Needs decode tokens
 * (routed_experts) and at least K * B requests in each part. Returns 0 or a
 * negative code with err set (-LOCUS_ERANGE for an unusable list, batch or
 * trace); tr is then empty.
 */
int locus_eldrfit_tune(const struct locus_trace *t, const uint32_t *calib, uint32_t n_calib,
		       const struct locus_eldrfit_opts *o, const struct locus_eldrfit_tune_opts *to,
		       struct locus_eldrfit_tune_result *tr, struct locus_error *err);

/* o's balance price, centroids per decoder, tau, spill and overflow rule set to p's. */
void locus_eldrfit_tune_apply(const struct locus_eldrfit_tune_point *p,
			      struct locus_eldrfit_opts *o);

void locus_eldrfit_tune_result_free(struct locus_eldrfit_tune_result *tr);

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
