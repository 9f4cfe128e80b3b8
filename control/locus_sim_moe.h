/* SPDX-License-Identifier: MIT */
/*
 * locusctl simulate --moe: MoE-layer time per expert placement (the GRACE
 * side of the simulation). Tokens of a trace are dealt into steps of B
 * tokens over the cluster's N GPUs (token i of a step on source GPU i mod N); each
 * (step, layer) batch of a source GPU is routed by a placement (the locus
 * GRACE planner over a fitted map, or EPLB's copies as vLLM picks them),
 * and the layer's time is
 *
 *   dispatch + max over GPUs of compute + combine
 *   dispatch = combine = latency + max over GPUs of
 *                  max(rows over NVLink/PCIe x row bytes / intra bandwidth,
 *                      rows over RDMA x row bytes / inter bandwidth)
 *   compute(g) = max(pairs(g) x FLOPs per pair / GPU FLOP/s,
 *                    distinct expert copies touched(g) x expert bytes / HBM)
 *
 * where a GPU's rows on a tier are the larger of those it sends and those
 * it receives (one row per token and distinct destination GPU, as locus
 * and DeepEP send them; a row staying on its GPU costs nothing), the tiers'
 * links run concurrently, and compute is a roofline of the pairs served
 * and the weights read. Pure C: no EAL, verbs or shm.
 */
#ifndef LOCUS_SIM_MOE_H
#define LOCUS_SIM_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

struct locus_gracefit_eplb;
struct locus_grace_map;

/* The layer-time model; every field finite, bandwidths and FLOP/s > 0, the rest >= 0. */
struct locus_sim_moe_hw {
	double row_bytes;          /* one token row: hidden x activation bytes */
	double expert_bytes;       /* one routed expert's weights */
	double flops_per_pair;     /* one (token, expert): 3 matrices x 2 x hidden x inter */
	double gpu_flops;          /* per GPU, FLOP/s */
	double hbm_bytes_per_s;    /* per GPU */
	double intra_bytes_per_s;  /* per GPU and direction, to GPUs of its node */
	double inter_bytes_per_s;  /* per GPU and direction, to other nodes */
	double latency_s;          /* fixed cost of each all-to-all (dispatch, combine) */
};

/* What one (step, layer) did on each of N GPUs (counts; arrays [N]). */
struct locus_sim_moe_counts {
	uint32_t N, gpus_per_node;
	uint32_t *sent_intra, *recv_intra;  /* rows to / from GPUs of the same node */
	uint32_t *sent_inter, *recv_inter;  /* rows to / from other nodes */
	uint32_t *pairs;                    /* (token, expert) pairs served */
	uint32_t *experts;                  /* distinct expert copies touched */
};

/* One (step, layer)'s time, split. */
struct locus_sim_moe_time {
	double a2a_s;      /* one all-to-all (dispatch; combine costs the same) */
	double compute_s;  /* the slowest GPU's expert compute */
	double layer_s;    /* 2 x a2a_s + compute_s */
};

/* The model above on counts c. */
void locus_sim_moe_layer_time(const struct locus_sim_moe_hw *hw,
			      const struct locus_sim_moe_counts *c, struct locus_sim_moe_time *t);

/*
 * A placement: route n tokens of source GPU src at layer (ids [n][k]) into
 * dst[n][k] GPUs (an expert's weights are read once per GPU that serves
 * it in the batch).
 * Returns 0 or negative with err set.
 */
typedef int (*locus_sim_moe_route_fn)(void *ctx, uint32_t layer, uint32_t src,
				      const uint16_t *ids, uint32_t n, uint32_t k,
				      uint16_t *dst, struct locus_error *err);

/* Tokens to score: ids [n_tok][L][k] (a trace's token-layer layout), each < E. */
struct locus_sim_moe_tokens {
	uint32_t L, k, E, n_tok;
	const uint16_t *ids;
};

struct locus_sim_moe_cfg {
	const struct locus_sim_moe_tokens *tok;
	const uint32_t *order;     /* [n_order]: step s holds tokens order[s*B .. s*B+B-1] */
	uint32_t n_order;          /* 0: n_tok */
	uint32_t tokens_per_step;  /* B >= 1; n_order / B steps (a partial last step is dropped) */
	uint32_t n_nodes, gpus_per_node;
	struct locus_sim_moe_hw hw;
	locus_sim_moe_route_fn route;
	void *ctx;
};

/* Per-step figures, each the mean over the step's L layers (seconds). */
struct locus_sim_moe_result {
	uint32_t n_steps;
	double *layer_s, *a2a_s, *compute_s;      /* [n_steps] */
	/* over every (step, layer): rows per token-layer by tier, and max/mean of GPU pairs */
	double rows_gpu, rows_node, load_mm;
};

/*
 * Route every step of cfg and time its layers into res (allocated here;
 * locus_sim_moe_result_free). -LOCUS_ERANGE for a configuration that is
 * not usable (no full step, N > 4096, E x N > 2^24, a bad hw field), the
 * route's error, -ENOMEM.
 */
int locus_sim_moe_run(const struct locus_sim_moe_cfg *cfg, struct locus_sim_moe_result *res,
		      struct locus_error *err);
void locus_sim_moe_result_free(struct locus_sim_moe_result *res);

/* ---- placements (control/sim_moe_route.c) ---- */

/* The locus planner (locus_grace_plan_batch, what locusd runs) over a map. */
struct locus_sim_moe_grace;
int locus_sim_moe_grace_init(struct locus_sim_moe_grace **g, const struct locus_grace_map *m,
			     uint32_t max_tokens, uint32_t k, struct locus_error *err);
void locus_sim_moe_grace_free(struct locus_sim_moe_grace *g);
int locus_sim_moe_route_grace(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids,
			      uint32_t n, uint32_t k, uint16_t *dst, struct locus_error *err);

/*
 * EPLB's placement, copies chosen as vLLM does (locus_gracefit_eplb_dispatch);
 * ctx is the struct locus_gracefit_eplb. Two slots of one expert on one GPU
 * count as one copy read (the dispatch names the GPU, not the slot).
 */
int locus_sim_moe_route_eplb(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids,
			     uint32_t n, uint32_t k, uint16_t *dst, struct locus_error *err);

/* ---- presets (control/sim_preset.c) ---- */

/* A cluster fabric: per-GPU bandwidths of the two tiers. */
struct locus_sim_fabric {
	const char *name;
	double intra_bytes_per_s;
	double inter_bytes_per_s;
};

const struct locus_sim_fabric *locus_sim_fabric_find(const char *name);
const char *locus_sim_fabric_names(void);

#endif /* LOCUS_SIM_MOE_H */
