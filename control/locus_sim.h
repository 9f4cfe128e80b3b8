/* SPDX-License-Identifier: MIT */
/*
 * locusctl simulate: a trace-driven discrete-event simulation of xPyD decode
 * serving. Requests of a calibration trace arrive, a policy picks a decoder
 * for each (the ELDR one through the data plane's own router,
 * lib eldr_router, the code locusd runs), every decoder batches
 * continuously (requests join at step boundaries up to a cap and leave
 * after their generated tokens) and a decode step takes
 *
 *   fixed + sum over layers of distinct experts x expert_bytes / HBM bandwidth
 *         + context tokens of the batch x KV bytes per token / HBM bandwidth.
 *
 * Pure C: no EAL, verbs or shm. control/sim_preset.c holds the model and GPU
 * presets, control/sim_ctl.c the command line.
 */
#ifndef LOCUS_SIM_H
#define LOCUS_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "locus_eldr_router.h"
#include "locus_err.h"
#include "locus_trace.h"

enum locus_sim_policy {
	LOCUS_SIM_RANDOM,   /* uniform over the decoders (seeded) */
	LOCUS_SIM_RR,       /* request i -> decoder i mod K */
	LOCUS_SIM_JSQ,      /* least loaded (requests running + queued), ties to the lower index */
	LOCUS_SIM_P2C,      /* the less loaded of two distinct random decoders (seeded) */
	LOCUS_SIM_DOMAIN,   /* oracle: decoders split among the trace's domains, least loaded of its own */
	LOCUS_SIM_ELDR,     /* locus_eldr_route() with every decoder's load reported exactly */
	LOCUS_SIM_N_POLICIES,
};

/* "random", "rr", "jsq", "p2c", "domain", "eldr". */
const char *locus_sim_policy_name(enum locus_sim_policy p);
/* The policy of a name above, or -1. */
int locus_sim_policy_parse(const char *name);

/* The step-time model; every field finite and >= 0, bandwidth > 0. */
struct locus_sim_hw {
	double expert_bytes;       /* one routed expert's weights */
	double hbm_bytes_per_s;    /* HBM bandwidth */
	double fixed_s;            /* per step: dense weights read and launch overhead */
	double kv_bytes_per_token; /* KV cache bytes one context token costs to read */
};

/* One request arriving: trace request req at time t (seconds), decoding gen_len tokens. */
struct locus_sim_arrival {
	double t;
	uint32_t req;
	uint32_t gen_len;
};

/*
 * n arrivals of the trace's n_trace requests: request i is trace request
 * i mod n_trace in file order, or (shuffle) in a seeded permutation drawn
 * anew for each pass over the trace; times are Poisson at rate requests/s
 * (exponential gaps, seeded; the first arrives after one gap) or all 0 when
 * rate is 0. gen_len is gen (when non-zero) else the trace request's
 * gen_len. -LOCUS_ERANGE for a rate that is negative or not finite, n or
 * n_trace 0.
 */
int locus_sim_arrivals(const struct locus_trace *t, uint32_t n, double rate, int shuffle,
		       uint32_t gen, uint64_t seed, struct locus_sim_arrival *out,
		       struct locus_error *err);

/*
 * Called for each routing decision (tests): arrival i saw loads[K]
 * (requests running + queued per decoder) and went to decoder d.
 */
typedef void (*locus_sim_route_fn)(void *arg, uint32_t i, const uint64_t *loads, uint32_t K,
				   uint32_t d);

struct locus_sim_cfg {
	const struct locus_trace *t;
	const struct locus_sim_arrival *arr; /* [n], t non-decreasing */
	uint32_t n;
	uint32_t n_decoders;                 /* K >= 1 */
	uint32_t batch_cap;                  /* requests decoding at once per decoder, >= 1 */
	struct locus_sim_hw hw;
	enum locus_sim_policy policy;
	uint64_t seed;                       /* random and p2c */
	/* ELDR: a router built for K decoders, the prompt signature of trace request i at sigs + i * slen */
	struct locus_eldr_router *router;
	const uint8_t *sigs;
	size_t slen;
	locus_sim_route_fn on_route;         /* optional */
	void *arg;
};

/* Per-request and per-run figures of one simulation (locus_sim_result_alloc). */
struct locus_sim_result {
	uint32_t n, K;
	double *tpot;          /* [n] (leave - join) / gen_len, seconds */
	double *queue;         /* [n] join - arrival: waiting for a batch slot, seconds */
	uint32_t *decoder;     /* [n] */
	uint64_t *assigned;    /* [K] requests routed to each decoder */
	double *batch_time;    /* [K] sum over steps of batch size x step time */
	uint64_t steps;        /* decode steps of all decoders */
	uint64_t pairs;        /* distinct (layer, expert) pairs summed over steps */
	uint64_t step_reqs;    /* batch sizes summed over steps */
	double step_time;      /* step times summed, seconds */
	double makespan;       /* last leave, seconds from 0 */
	uint64_t tokens;       /* decoded tokens */
};

int locus_sim_result_alloc(struct locus_sim_result *r, uint32_t n, uint32_t K);
void locus_sim_result_free(struct locus_sim_result *r);

/*
 * Run one policy on cfg's arrivals into res (allocated for cfg->n, K).
 * A request arriving at a step's end joins at that boundary (arrivals of an
 * instant are routed before the steps ending then); an idle decoder starts
 * its step at the arrival's instant with every request routed to it then.
 * Every arrival is routed, joins and leaves. Checks the configuration (a clear error for
 * each field), allocates its scratch and frees it. 0, or negative with err
 * set: -LOCUS_ERANGE (configuration), the router's code (a signature it
 * refused, no decoder eligible), -ENOMEM.
 */
int locus_sim_run(const struct locus_sim_cfg *cfg, struct locus_sim_result *res,
		  struct locus_error *err);

/* What the table and JSON print for one run. */
struct locus_sim_summary {
	double tpot_p50, tpot_p90, tpot_p99;  /* seconds */
	double queue_mean, queue_p50, queue_p99;
	double pairs_per_step;                /* distinct (layer, expert) pairs read per step */
	double batch_mean;                    /* requests per step */
	double step_mean;                     /* seconds */
	double skew_assigned;                 /* max / mean requests per decoder */
	double skew_batch;                    /* max / mean of batch_time (time-weighted batch occupancy) */
	double tokens_per_s;                  /* tokens / makespan */
};

/* Nearest-rank percentile p (0 < p <= 100) of v[n] (n >= 1), sorting v in place. */
double locus_sim_percentile(double *v, uint32_t n, double p);

/* The summary of res (its arrays are not changed). 0 or -ENOMEM. */
int locus_sim_summarize(const struct locus_sim_result *res, struct locus_sim_summary *s);

/* ---- presets (control/sim_preset.c) ---- */

struct locus_sim_model {
	const char *name;
	uint32_t hidden;             /* hidden_size */
	uint32_t moe_intermediate;   /* moe_intermediate_size */
	uint32_t moe_layers;         /* layers with routed experts */
	uint32_t n_experts;          /* routed experts per layer */
	uint32_t top_k;
	uint32_t dtype_bytes;
	double kv_bytes_per_token;   /* over every layer */
	double dense_bytes;          /* weights read once per step besides the routed experts */
};

struct locus_sim_gpu {
	const char *name;
	double hbm_bytes_per_s;
	double bf16_flops;           /* dense, FLOP/s (simulate --moe) */
	const char *fabric;          /* its usual fabric (simulate --moe; locus_sim_moe.h) */
};

/* A preset by name, or NULL. */
const struct locus_sim_model *locus_sim_model_find(const char *name);
const struct locus_sim_gpu *locus_sim_gpu_find(const char *name);
/* Names for usage lines: "a|b". */
const char *locus_sim_model_names(void);
const char *locus_sim_gpu_names(void);

/* One routed expert: hidden x moe_intermediate x 3 matrices (gate, up, down) x dtype bytes. */
double locus_sim_expert_bytes(const struct locus_sim_model *m);

#endif /* LOCUS_SIM_H */
