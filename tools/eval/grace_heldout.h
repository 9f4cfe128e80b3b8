/* SPDX-License-Identifier: MIT */
/*
 * Scoring placements per sequence for the grace_figures tool, so that
 * sequences add up and can be resampled (bootstrap): each placement routes
 * the same tokens from the same source GPUs, one batch per (source GPU,
 * layer); per sequence it records the token rows sent off the source GPU
 * and to other nodes (one row per distinct destination GPU, as locus and
 * DeepEP send them) and the (token, expert) pairs each GPU serves per layer.
 */
#ifndef GRACE_HELDOUT_H
#define GRACE_HELDOUT_H

#include <stddef.h>
#include <stdint.h>

#include "locus_grace_plan.h"
#include "locus_gracefit.h"

/* Sequences to score: token t of the set is on source GPU t mod N. */
struct gh_set {
	uint32_t L, k, n_seq, n_tok;
	uint32_t *tok0;   /* [n_seq + 1]: sequence s is tokens tok0[s] .. tok0[s+1]-1 */
	uint16_t *ids;    /* [L][n_tok][k] */
};

/* Per-sequence contributions under one placement. */
struct gh_score {
	uint32_t n_seq, L, N, k;
	uint64_t lost;       /* bit r: rank r is lost (N <= 64 then): no tokens, no load */
	double *rows_gpu;    /* [n_seq] rows sent off the source GPU */
	double *rows_node;   /* [n_seq] rows sent to another node */
	double *tl;          /* [n_seq] token-layers */
	double *masked;      /* [n_seq] (token, expert) pairs with no live copy; NULL: none */
	double *load;        /* [n_seq][L][N] pairs served per GPU */
	uint32_t slots_max;  /* experts (copies) on the fullest GPU of any layer */
};

/* The locus planner over a GRACE map (TAR: a copy on the source GPU, else
 * the node's, else any, by smooth weighted round robin). */
void gh_score_grace(const struct locus_grace_map *m, const struct gh_set *s,
		    struct gh_score *out);

/*
 * The same with the ranks of lost (bit r: rank r; 0: none) gone: token t
 * of the set sits on the (t mod live)-th live rank, the planner sends
 * nothing to a lost rank, and a pair whose expert has no live copy is
 * masked (counted, served nowhere). Needs N <= 64.
 */
void gh_score_grace_lost(const struct locus_grace_map *m, const struct gh_set *s,
			 uint64_t lost, struct gh_score *out);

/* EPLB's placement under vLLM's dispatch (locus_gracefit_eplb_dispatch). */
void gh_score_eplb(const struct locus_gracefit_eplb *p, uint32_t gpus_per_node,
		   const struct gh_set *s, struct gh_score *out);

/*
 * An EPLB placement for the live ranks of an N-rank cluster: its GPU g is
 * rank rank_of[g] (p->n_gpus of them, the ranks not in lost, ascending);
 * tokens on the live ranks as above.
 */
void gh_score_eplb_on(const struct locus_gracefit_eplb *p, const uint16_t *rank_of,
		      uint32_t N, uint32_t gpus_per_node, uint64_t lost,
		      const struct gh_set *s, struct gh_score *out);

void gh_score_free(struct gh_score *c);

/*
 * A unit of balance: the scores (up to 2: both halves of a domain) whose
 * loads add up under one placement; cnt[i] (NULL: every sequence once)
 * says how often each sequence is drawn.
 */
struct gh_unit {
	const struct gh_score *sc[2];
	const uint32_t *cnt[2];
	uint32_t n;
};

struct gh_metrics {
	double rows_gpu;   /* rows off the source GPU per token-layer */
	double rows_node;  /* rows to other nodes per token-layer */
	double mm;         /* max/mean of the live GPUs' loads, mean over units and layers */
	double cv;         /* std/mean of the same loads, likewise */
	double masked;     /* share of (token, expert) pairs masked */
};

/* Metrics over units u[0..n-1] (loads summed inside a unit). */
void gh_metrics(const struct gh_unit *u, size_t n, struct gh_metrics *m);

/* The 2.5 and 97.5 percentiles of x[0..n-1] (sorted in place). */
void gh_interval(double *x, size_t n, double *lo, double *hi);

/*
 * The 95 % interval of a statistic whose value on the sample is point, from
 * its bootstrap replicates x[0..n-1] (sorted in place): the percentiles of
 * x shifted by the bootstrap's bias, mean(x) - point. max/mean is a max over
 * GPUs of sums over sequences: a resample's loads are noisier than the
 * sample's and their max higher, most for a placement fitted to balance
 * exactly those loads, so the plain percentiles lie above the point and
 * can exclude it (e.g. -0.040 [-0.034, -0.017]).
 */
void gh_interval_bc(double point, double *x, size_t n, double *lo, double *hi);

/*
 * Print " point [lo, hi]" of that interval, as a signed percentage when pct,
 * or "n/a (one node)" when point is NaN (a relative change of nothing).
 */
void gh_print_interval(double point, double *x, size_t n, int pct);


#endif /* GRACE_HELDOUT_H */
