/* SPDX-License-Identifier: MIT */
/*
 * Online rebalancing replayed in time order (grace_online_figures and its
 * test). A trace's requests run through continuous batching: B slots, each
 * step one token of every running request, a finished request's slot taken
 * by the next one; a step is one forward pass, as vLLM counts steps. At
 * vLLM's EPLB cadence (a rebalance every `interval` steps from the loads of
 * the last `window` steps; vLLM's defaults 3,000 and 1,000), with the same
 * expert slots per GPU (grace_figures.h's memory rule), the methods:
 *   locus online   locusctl rebalance --window 1 --every 3 --interval
 *                  <window steps> --trace <the first interval> (threshold
 *                  0.05, no move bound, --swaps 2): up to 2 swaps of
 *                  primaries per layer where the grouping's balance drifted,
 *                  at the least co-activation lost, then the replication
 *                  refit (locus_gracefit_rebalance_plan_swaps), pushed when
 *                  it predicts more than 5 % lower skew; routed by the
 *                  locus planner
 *   EPLB online    EPLB (1 group, as vLLM calls it) re-run on the window's
 *                  loads at every rebalance; dispatched as vLLM does
 *   GRACE static   the initial fit, never rebalanced
 *   EPLB static    EPLB's initial placement, never rebalanced
 *   round robin    slot p holds expert p mod E, vLLM's placement before
 *                  EPLB runs; dispatched as vLLM does
 *   GRACE refit    a diagnostic, not what locusctl rebalance does: the whole
 *                  fit (grouping too) re-run on each window, pushed always;
 *                  it tells a grouping fitted on old traffic from grouping
 *                  itself
 * Both online methods start from a placement fitted on the first interval
 * (GRACE: locusctl fit --grace on its tokens; EPLB: on its loads), the
 * same information for both. Window j (j = 0..n_windows-1) is the interval
 * after the (j+1)-th rebalance; each is scored under the placement in force,
 * token t of the window on source GPU t mod N.
 */
#ifndef GRACE_ONLINE_H
#define GRACE_ONLINE_H

#include <stdint.h>

#include "grace_figures.h"
#include "locus_gracefit.h"
#include "locus_trace.h"

/* vLLM's EPLBConfig defaults (vllm/config/parallel.py). */
#define GO_VLLM_WINDOW 1000u
#define GO_VLLM_INTERVAL 3000u

/* The token stream: ids[L][n_tok][k] in time order, step s is tokens step0[s]..step0[s+1]-1. */
struct go_stream {
	uint32_t L, E, k, batch;
	uint32_t n_tok, n_steps, n_req;
	uint32_t *step0;   /* [n_steps + 1] */
	uint16_t *ids;
};

/*
 * Requests of traces tr[0..n_tr-1] (same layers, k and E) in file order, the
 * traces one after the other, or with shuffle in an order drawn from seed;
 * every token of a request (prompt, then generated), batch slots. Exits on
 * error (the traces are the program's own).
 */
void go_stream_build(struct locus_trace *const *tr, uint32_t n_tr, int shuffle, uint64_t seed,
		     uint32_t batch, struct go_stream *s);
void go_stream_free(struct go_stream *s);

/*
 * The cadence for a stream of n_steps: vLLM's (interval 3,000, window 1,000)
 * when the stream holds min_windows + 1 intervals, else both scaled down by
 * the same factor until it does (window = interval / 3, at least 1 step).
 * n_windows: intervals scored (after a rebalance), the tail that does not
 * fill one dropped. 0 windows when the stream is shorter than 3 x
 * (min_windows + 1) steps.
 */
struct go_cadence {
	uint32_t window, interval, n_windows;
	double scale;      /* interval / 3,000 */
	uint32_t swaps;    /* locus's primary swaps per layer and rebalance */
};
void go_cadence_of(uint32_t n_steps, uint32_t min_windows, struct go_cadence *c);

enum { GO_LOCUS, GO_EPLB, GO_GRACE_STATIC, GO_EPLB_STATIC, GO_RR, GO_REFIT, GO_N_METHODS };
extern const char *const go_method_name[GO_N_METHODS];

/* One method on one window. */
struct go_window {
	double rows_gpu, rows_node, tl;   /* rows off the source GPU, to other nodes; token-layers */
	double mm;                        /* busiest GPU / mean, mean over layers */
	double mm_fit;                    /* online: the same on the window the rebalance read */
	uint32_t moves;                   /* (GPU, expert) copies gained at the rebalance before */
	int pushed;                       /* locus: the rebalance pushed a new table */
};

struct go_run {
	uint32_t n_windows;
	struct go_window *w[GO_N_METHODS];   /* [n_windows] each */
	uint32_t slots[GO_N_METHODS];        /* copies on the fullest GPU, any window or layer */
};

/*
 * Replay s on topology t at cadence c (n_windows >= 1); the diagnostic
 * GRACE refit only with refit (its windows left zero otherwise). Exits on
 * error.
 */
void go_replay(const struct go_stream *s, const struct gf_topo *t, const struct go_cadence *c,
	       int refit, struct go_run *r);
void go_run_free(struct go_run *r);

/*
 * Metrics over windows idx[0..n-1] (repeats allowed: a bootstrap draw):
 * rows per token-layer (sums over windows), mean busiest/mean, mean moves.
 */
struct go_metrics {
	double rows_gpu, rows_node, mm, moves;
	double mm_fit;
};
void go_metrics_of(const struct go_window *w, const uint32_t *idx, uint32_t n,
		   struct go_metrics *m);

#endif /* GRACE_ONLINE_H */
