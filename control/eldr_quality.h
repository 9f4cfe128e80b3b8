/* SPDX-License-Identifier: MIT */
/* eldr_quality's simulation of decoder batches (control/eldr_quality_sim.c). */
#ifndef ELDR_QUALITY_H
#define ELDR_QUALITY_H

#include <stddef.h>
#include <stdint.h>

#include "locus_eldr_router.h"
#include "locus_trace.h"

/* Policies, in print order; every ELDR one is a fitted table routed by the router. */
enum {
	QPOL_RR,          /* request i of a round -> decoder i mod K */
	QPOL_DOMAIN,      /* oracle labels */
	QPOL_ELDR,        /* locusctl fit's default: tuned on the calibration half (eldr_tune.c) */
	QPOL_ELDR_FIXED,  /* --tune off: tau 0.1, one centroid per decoder, no spill */
	QPOL_ELDR_NOMASK, /* the same with every layer */
	QPOL_ELDR_EXACT,  /* --exact-balance: floor/ceil(N/K), one seed, prefill only */
	QPOL_N,
};

/* What one sequence of rounds gives each policy. */
struct qfig {
	double step[QPOL_N];  /* distinct pairs per decode step, mean over decoder batches */
	double whole[QPOL_N]; /* distinct pairs over all generated tokens of a batch */
	double load[QPOL_N];  /* no batch cap: max/mean requests per decoder, mean over rounds */
	double share[QPOL_N]; /* no batch cap: max/mean requests per decoder over all rounds */
};

/*
 * Decode steps as bitsets (control/eldr_steps.c): request i's token tok is
 * the W words at bits + off[i] + tok * W, bit l * E + e set when it routed
 * to expert e of layer l.
 */
struct qsteps {
	uint32_t W;
	uint64_t *bits;
	uint64_t *off;  /* [n_requests] */
};

/* Batches of at most this many requests are counted from the bitsets. */
#define QSTEPS_MAX_BATCH 64

/*
 * Every request's decode steps of t into q. Returns 0 (with q->bits NULL
 * when they would take more than 512 MiB: count with the stamps), or
 * -ENOMEM.
 */
int qsteps_build(struct qsteps *q, const struct locus_trace *t);
void qsteps_free(struct qsteps *q);

/*
 * The distinct pairs of batch[n] (n <= QSTEPS_MAX_BATCH) summed over its
 * first `steps` decode steps: what the stamps count, from the bitsets.
 */
uint64_t qsteps_pairs(const struct qsteps *q, const uint32_t *batch, uint32_t n, uint32_t steps);

struct qsim {
	const struct locus_trace *t;
	const struct qsteps *steps;              /* NULL, or bits NULL: count with the stamps */
	uint32_t K, B;
	const uint8_t *sigs;                     /* [n_requests][slen] prompt signatures */
	size_t slen;
	struct locus_eldr_router *r[QPOL_N];     /* the ELDR policies' routers */
	uint32_t *batch, *fill;                  /* [K * B], [K] */
	uint32_t *total;                         /* [QPOL_N][K] uncapped requests per decoder */
	uint32_t *seen, stamp;                   /* [L * E] generation stamps */
	double *cost;                            /* [K] qsim_swap_search's scratch */
	uint32_t only;                           /* 0: every policy; else 1u << p of those routed */
};

/*
 * Route seq[n] in rounds of K * B requests (a tail shorter than a round is
 * left out) under every policy: with the batch cap (every decoder gets
 * exactly B; an ELDR decoder whose batch is full is marked down for the
 * rest of the round) for step and whole, and without it (ELDR: band and
 * least loaded only; domain: least-filled decoder of the domain) for load
 * and share.
 * whole is left 0 unless want_whole (it costs as much as step). With
 * s->only set, only those policies are routed; an ELDR policy without a
 * router is not routed either (the figures of both are 0).
 * Returns the rounds routed, or -1 when the router refused a signature.
 */
int qsim_run(struct qsim *s, const uint32_t *seq, uint32_t n, int want_whole, struct qfig *f);

/*
 * How far a policy that knew every request's decode experts could go
 * (eldr_quality's "clairvoyant" line): each round of seq[n] filled as the
 * oracle fills it (capped), then improved by swapping requests between
 * decoder batches while a swap lowers the pairs per step (a local optimum,
 * not the optimum: an upper bound on what the best assignment reads).
 * *oracle and *best: pairs per step before and after, mean over batches.
 * Needs s->cost. Returns the rounds.
 */
int qsim_swap_search(struct qsim *s, const uint32_t *seq, uint32_t n, double *oracle,
		     double *best);


#endif /* ELDR_QUALITY_H */
