/* SPDX-License-Identifier: MIT */
/*
 * GRACE fitting (control plane; control/README-grace.md): profile ->
 * hierarchical grouping -> balance -> per-layer objective -> replication ->
 * sealed table (locus_grace.h payload).
 *
 * Profile: per layer W[e] (tokens routed to e) and A[i][j] (tokens that
 * chose both i and j), from per-token top-k ids (a calibration trace) or W
 * alone from live per-(layer, expert) counters.
 *
 * Grouping, per layer:
 *  1. nodes: spectral clustering of A (normalised Laplacian
 *     I - D^-1/2 A D^-1/2, its k smallest eigenvectors from LAPACKE dsyevr,
 *     rows normalised to unit length, k-means++ with a fixed seed and a few
 *     restarts). Fully non-uniform: the only bound is the node's capacity
 *     (gpus_per_node x capacity). Feasible by construction: after k-means, a
 *     repair moves experts out of over-full clusters, each time the one whose
 *     move loses the least affinity (sum of A to its cluster minus to the
 *     target), into clusters with room, until every bound holds.
 *  2. GPUs inside each node: the same clustering on the node's sub-matrix,
 *     then the same repair with sizes in [floor(m)-d, ceil(m)+d] (and <=
 *     capacity), m = node's experts / gpus_per_node, d = floor(m r).
 *  3. r: for r on a grid 0, 1/16, ... 1, U(r) = intra-GPU affinity / total
 *     affinity and S(r) = sum over GPUs |size - m| / E are computed; r is the
 *     knee of U against S: both normalised to [0,1] over the grid, the knee is
 *     the point farthest above the chord from first to last point (Kneedle's
 *     difference curve; ties to the smaller r).
 *
 * Balance (locus_gracefit_balance_layer), objective and fallback to EPLB's
 * packing (locus_gracefit_layer_cost, locus_gracefit_fit): below.
 *
 * Replication, per layer (locus_gracefit_replicate_layer): one copy at a
 * time, the heaviest GPU that can shed load giving its expert with the most
 * load per copy a copy on a GPU that stays below it, while a copy lowers a
 * GPU and the per-GPU replica budget lasts. Predicted loads W' = W -
 * W_removed + W_received per GPU, an expert's load split evenly over its
 * copies.
 */
#ifndef LOCUS_GRACEFIT_H
#define LOCUS_GRACEFIT_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"
#include "locus_grace.h"

struct locus_trace;

struct locus_gracefit_topo {
	uint32_t n_nodes;
	uint32_t gpus_per_node;
	uint32_t capacity;       /* primary experts per GPU; 0: ceil(E/N) */
	uint32_t replica_budget; /* replicas per GPU */
};

struct locus_gracefit_profile {
	uint32_t n_layers;
	uint32_t n_experts;
	uint64_t n_tokens;       /* token-layer rows added */
	double *W;               /* [L][E] */
	double *A;               /* [L][E][E] symmetric, zero diagonal; NULL: loads only */
	/* tokens kept for the per-layer objective (keep_tokens; NULL: none):
	 * tok[L][tok_cap][tok_k], tok_n[l] kept at layer l (the first tok_cap) */
	uint16_t *tok;
	uint64_t *tok_n;
	uint64_t tok_cap;
	uint32_t tok_k;
};

/* Allocate a zeroed profile; with_affinity 0 gives loads only. */
int locus_gracefit_profile_init(struct locus_gracefit_profile *p, uint32_t n_layers,
				uint32_t n_experts, int with_affinity, struct locus_error *err);
void locus_gracefit_profile_free(struct locus_gracefit_profile *p);

/*
 * Keep up to cap tokens of top-k per layer as they are added, so that the
 * fit can score each layer's traffic on them (the per-layer objective).
 */
int locus_gracefit_profile_keep_tokens(struct locus_gracefit_profile *p, uint32_t k,
				       uint64_t cap, struct locus_error *err);

/*
 * Add n_tokens tokens of one layer (ids [n_tokens][k]). An id >= E or the
 * same expert twice in one token is rejected and nothing of the call is
 * added.
 */
int locus_gracefit_profile_add(struct locus_gracefit_profile *p, uint32_t layer,
			       const uint16_t *ids, size_t n_tokens, uint32_t k,
			       struct locus_error *err);

/*
 * Add every prompt (and, with use_gen, generated) token of a calibration
 * trace. The trace's layers and E must match the profile's.
 */
int locus_gracefit_profile_add_trace(struct locus_gracefit_profile *p,
				     const struct locus_trace *t, int use_gen,
				     struct locus_error *err);

/*
 * Add request r of a trace the way its decoder sees it: its generated
 * (decode) tokens when the trace has them, else its prompt tokens.
 */
int locus_gracefit_profile_add_request(struct locus_gracefit_profile *p,
				       const struct locus_trace *t, uint32_t r,
				       struct locus_error *err);
/* Add live counts [L][E] (loads only; A is left as is). */
int locus_gracefit_profile_add_counts(struct locus_gracefit_profile *p, const uint64_t *counts,
				      struct locus_error *err);

/* ---- building blocks (exposed for tests and the figures tool) ---------- */

/*
 * Knee of an increasing curve (x[i], y[i]), i = 0..n-1, x ascending: the
 * index maximising ynorm - xnorm. Returns 0 when n < 3 or a range is 0.
 */
size_t locus_gracefit_knee(const double *x, const double *y, size_t n);

/*
 * Spectral clustering of the n x n affinity a (row-major) into k clusters:
 * label[i] in 0..k-1, embedding each item by the dim (>= k) smallest
 * eigenvectors. The node level embeds with as many eigenvectors as there are
 * GPUs, so that whole GPU-sized communities move between nodes together
 * instead of a k-dimensional embedding cutting through them. Deterministic
 * for a seed. Returns 0 or -errno /
 * -LOCUS_E* (a LAPACK failure is -LOCUS_ESTATE with the info code).
 */
int locus_gracefit_spectral(const double *a, uint32_t n, uint32_t k, uint32_t dim,
			    uint64_t seed, uint32_t *label, struct locus_error *err);

/*
 * Move items between clusters until every cluster c has lo[c] <= size <=
 * hi[c], each move the one that loses the least affinity. Fails with
 * -LOCUS_ERANGE when sum(lo) > n or sum(hi) < n.
 */
int locus_gracefit_repair_sizes(const double *a, uint32_t n, uint32_t k, const uint32_t *lo,
				const uint32_t *hi, uint32_t *label, struct locus_error *err);

struct locus_gracefit_layer_info {
	double r;            /* chosen non-uniformity ratio */
	double U, S;         /* at that r */
	double U_uniform;    /* at r = 0 */
	double rho;          /* load skew before replication */
	double rho_after;    /* predicted, after */
	uint32_t n_rep;      /* replicas per hot expert */
	uint32_t n_hot;      /* hot experts */
	uint32_t n_replicas; /* replicas placed (budget may cut) */
	uint32_t n_swaps;    /* swaps after the grouping (load, then affinity) */
	int fallback;        /* 1: the layer took EPLB's packing (objective below) */
	double cost;         /* the objective of the placement kept */
	double cost_grouped; /* and of the grouping's, when both were scored */
	double cost_packed;  /* and of the packing's */
};

struct locus_gracefit_opts {
	double r;            /* < 0: pick by the knee; else fixed in [0, 1] */
	uint64_t seed;       /* default 1 */
	int no_grouping;     /* contiguous placement instead (loads-only fits) */
	int no_replication;
	int uneven;          /* keep the grouping's uneven sizes (up to capacity) */
	double load_tol;     /* swap primaries while peak > (1 + tol) x mean; 0: 0.1 */
	double cost_gpu;     /* weight of a row off GPU in the swap cost; 0: 1 */
	double cost_node;    /* extra weight of a row off node; 0: 1 */
	double cost_peak;    /* a swap's cost per unit of peak cut must stay below; 0: no bound */
	double w_peak;       /* objective: weight of k x (predicted max/mean - 1); 0: 1 */
	int no_fallback;     /* keep the grouping on every layer, whatever the objective */
};

/* rebalance: a layer's primaries are swapped while their skew exceeds 1 + this */
#define LOCUS_GRACEFIT_SWAP_TOL 0.1
/* rebalance: primary swaps per layer by default */
#define LOCUS_GRACEFIT_SWAPS 2u

/*
 * The objective of one layer's placement, lower is better:
 *   w_peak x k x (rho - 1) + cost_gpu x rows_gpu + cost_node x rows_node
 * rho the predicted max/mean after replication; rows_gpu / rows_node the
 * token rows a kept token of that layer sends off its GPU / to other nodes
 * by the primaries (distinct destination GPUs, the source uniform over the
 * GPUs: 1 - 1/N of them off it, 1 - 1/nodes off its node; copies are not
 * counted). With no kept tokens the rows are 0. rows_gpu/rows_node (may be
 * NULL) get the rows.
 */
double locus_gracefit_layer_cost(const struct locus_gracefit_topo *t,
				 const struct locus_gracefit_profile *p, uint32_t layer,
				 const uint16_t *primary, double rho,
				 const struct locus_gracefit_opts *o, double *rows_gpu,
				 double *rows_node);

/*
 * EPLB's balanced packing of primaries (eplb.py, balanced_packing): the
 * heaviest expert first onto the lightest GPU holding fewer than ceil(E/N)
 * (ties: lowest expert, lowest rank). The layer a fit falls back to.
 */
void locus_gracefit_pack_layer(const struct locus_gracefit_topo *t, uint32_t E,
			       const double *W, uint16_t *primary);

/*
 * Group one layer: primary[E] gets each expert's rank. A (E x E) may be
 * NULL only with opts->no_grouping.
 */
int locus_gracefit_group_layer(const struct locus_gracefit_topo *topo, uint32_t n_experts,
			       const double *A, const struct locus_gracefit_opts *opts,
			       uint16_t *primary, struct locus_gracefit_layer_info *info,
			       struct locus_error *err);

/*
 * Load-aware repair of a grouping: unless opts->uneven, move experts until
 * every GPU holds at most ceil(E/N) primaries (EPLB's slots), each move the
 * one losing the least tier-weighted co-activation; then, while the peak
 * GPU load exceeds (1 + load_tol) x mean, swap an expert of the peak GPU
 * with a lighter one, the swap losing the least affinity per unit of peak
 * removed; last, swaps that gain tier-weighted co-activation while no GPU
 * ends above the peak so reached and the sum of squared GPU loads does not
 * grow. W[E] are the loads; deterministic.
 */
int locus_gracefit_balance_layer(const struct locus_gracefit_topo *topo, uint32_t n_experts,
				 const double *A, const double *W,
				 const struct locus_gracefit_opts *opts, uint16_t *primary,
				 struct locus_gracefit_layer_info *info, struct locus_error *err);

/*
 * Replicate one layer: replica[E][R] (ascending, NO_RANK padded) and
 * pred[N] (W') from W[E] and primary[E]. R = max replicas per expert in
 * the table; n_rep is cut to R. Each copy goes to a GPU that stays below
 * the one it sheds load from: with A (E x E co-activation, may be NULL)
 * the one whose primaries co-activate most with the expert (the planner
 * sends a token there when it goes there anyway, a row saved), else, or
 * when none does, the least-loaded one, the primary's node first.
 */
int locus_gracefit_replicate_layer(const struct locus_gracefit_topo *topo, uint32_t n_experts,
				   const double *W, const double *A, const uint16_t *primary,
				   uint32_t R, uint16_t *replica, float *pred,
				   struct locus_gracefit_layer_info *info, struct locus_error *err);

/*
 * Swap primaries between ranks (N of them; every rank keeps its count)
 * while the busiest rank's load on W[E] is above (1 + tol) x the mean, at
 * most max_swaps: each swap the pair that lowers that peak most, or with A
 * (E x E co-activation, may be NULL) the pair losing the least
 * co-activation among those with half that gain or more. *swaps (may be
 * NULL) gets the swaps made. For a grouping whose balance drifted with the
 * traffic: each swap moves two experts' weights.
 */
int locus_gracefit_swap_primaries(uint32_t N, uint32_t n_experts, const double *W,
				  const double *A, uint16_t *primary, uint32_t max_swaps,
				  double tol, uint32_t *swaps, struct locus_error *err);

/* Predicted loads W'[N] of a placement (the split model) and rho = max/mean. */
double locus_gracefit_predict(const struct locus_grace_dims *d, const double *W,
			      const uint16_t *primary, const uint16_t *replica, double *pred);

/*
 * Resolve a topology against E: capacity 0 becomes ceil(E/N); R for the
 * table is min(N - 1, LOCUS_GRACE_MAX_REPLICAS). Fills dims.
 */
int locus_gracefit_dims(const struct locus_gracefit_topo *topo, uint32_t n_layers,
			uint32_t n_experts, struct locus_grace_dims *d, struct locus_error *err);

/*
 * Whole fit: every layer grouped (unless no_grouping) and replicated (unless
 * no_replication) into a sealed blob (*blob malloc'd: header + payload).
 * When the profile kept tokens (and not no_fallback), each grouped layer is
 * scored against EPLB's packing with the same replication by the objective
 * above, and takes the packing when that costs less (info[l].fallback).
 * info (may be NULL) gets n_layers entries.
 */
int locus_gracefit_fit(const struct locus_gracefit_profile *p,
		       const struct locus_gracefit_topo *topo,
		       const struct locus_gracefit_opts *opts, void **blob, size_t *blob_len,
		       struct locus_gracefit_layer_info *info, struct locus_error *err);

/*
 * Refit replication only, on the primaries of an existing payload, with
 * fresh loads W[L][E]: writes a new sealed blob. The rebalance loop uses it.
 */
int locus_gracefit_refit_replicas(const void *payload, size_t payload_len, const double *W,
				  void **blob, size_t *blob_len, double *rho_before,
				  double *rho_after, struct locus_error *err);

/* ---- EPLB interop (deepseek-ai/EPLB, vLLM, SGLang) --------------------- */

/*
 * Export a payload as JSON {"phy2log": [L][P], "log2phy": [L][E][X],
 * "logcnt": [L][E]} with P = ranks x slots per rank (physical slot p lives
 * on rank p / slots), X = most copies of any expert, -1 padded. Ranks
 * holding fewer copies than the fullest rank are padded with extra replicas
 * of the experts with the highest per-copy load not yet on that rank (EPLB
 * has no empty slots). *json is malloc'd, NUL-terminated.
 */
int locus_gracefit_eplb_export(const void *payload, size_t payload_len, char **json,
			       struct locus_error *err);

/*
 * Import such JSON for a topology: slots per rank = P / ranks (P must
 * divide); each expert's primary is its first slot in log2phy, others are
 * replicas; capacity and budget are the largest per-rank counts seen (and
 * at least topo's when given). W (may be NULL: every expert 1) gives the
 * expert loads. Checks phy2log against log2phy and logcnt. Writes a sealed
 * blob.
 */
int locus_gracefit_eplb_import(const char *json, size_t len,
			       const struct locus_gracefit_topo *topo, const double *W,
			       void **blob, size_t *blob_len, struct locus_error *err);

/* ---- EPLB itself (control/grace_eplb_balance.c) ------------------------ */

/*
 * A placement as DeepSeek's EPLB computes it (eplb.py, rebalance_experts),
 * physical slot p on GPU p / (n_phys / n_gpus):
 *   phy2log[L][P]        logical expert in slot p
 *   log2phy[L][E][X]     EPLB's order: entry i is the expert's copy of rank
 *                        i (0: the slot it had before replication), -1 padded
 *   vllm_log2phy[L][E][X] the same slots ascending, as vLLM rebuilds them
 *                        from phy2log (eplb_state.py, compute_logical_maps)
 *   logcnt[L][E]         copies of each expert
 */
struct locus_gracefit_eplb {
	uint32_t n_layers, n_experts, n_phys, n_gpus;
	uint32_t max_copies;     /* X */
	int hierarchical;        /* 1: hierarchical policy, 0: global */
	int32_t *phy2log;
	int32_t *log2phy;
	int32_t *vllm_log2phy;
	int32_t *logcnt;
};

/*
 * EPLB's rebalance_experts on loads W[L][E] for n_phys physical slots,
 * n_groups expert groups (consecutive blocks of E / n_groups experts),
 * n_nodes nodes, n_gpus GPUs. When the nodes divide the groups, the
 * hierarchical policy: groups packed onto nodes by load (equal group counts,
 * heaviest first onto the lightest node), experts replicated inside each
 * node (each extra slot to the expert with the highest load per copy), the
 * node's slots packed onto its GPUs by load per copy (equal slot counts).
 * Otherwise the global policy: the same with one group and one node. Needs
 * n_phys >= E, n_gpus dividing n_phys, n_nodes dividing n_gpus, n_groups
 * dividing E, finite non-negative loads. Free with
 * locus_gracefit_eplb_free.
 */
int locus_gracefit_eplb_rebalance(const double *W, uint32_t n_layers, uint32_t n_experts,
				  uint32_t n_phys, uint32_t n_groups, uint32_t n_nodes,
				  uint32_t n_gpus, struct locus_gracefit_eplb *out,
				  struct locus_error *err);
void locus_gracefit_eplb_free(struct locus_gracefit_eplb *p);

/*
 * vLLM's choice of a copy for a batch of one rank (vllm/model_executor/
 * layers/fused_moe/router/base_router.py, eplb_map_to_physical_and_record):
 * the (token, slot) at flattened position pos = t * k + j of the batch's
 * top-k ids goes to copy pos % logcnt[e] of vllm_log2phy[layer][e].
 * gpu[n_tokens * k] gets the GPU of that physical slot. The caller checks
 * layer < n_layers and every id < n_experts (a scoring loop, not an input).
 */
void locus_gracefit_eplb_dispatch(const struct locus_gracefit_eplb *p, uint32_t layer,
				  const uint16_t *ids, uint32_t n_tokens, uint32_t k,
				  uint16_t *gpu);

/* ---- rebalance decision (pure) ----------------------------------------- */

/*
 * One interval's loads from two reads of monotonic counters laid out
 * [layers][stride] (stride >= E): W[l][e] = now - prev, or now when the
 * counter went backwards (the data plane restarted and counts from zero).
 * Returns the total.
 */
double locus_gracefit_counts_delta(const uint64_t *prev, const uint64_t *now, uint32_t n_layers,
				   uint32_t n_experts, uint32_t stride, double *W);

/*
 * Push a refit when the predicted skew improves by more than threshold
 * (relative): (rho_now - rho_new) / rho_now > threshold. Non-finite input
 * never pushes.
 */
static inline int locus_gracefit_should_push(double rho_now, double rho_new, double threshold)
{
	if (!(rho_now > 0) || !(rho_new > 0) || rho_now != rho_now || rho_new != rho_new)
		return 0;
	if (rho_now > 1e300 || rho_new > 1e300)
		return 0;
	return (rho_now - rho_new) / rho_now > threshold;
}

/* ---- online rebalance (control/grace_rebalance.c, pure) ---------------- */

/*
 * The loads of the last size intervals, an interval age k old weighted by
 * decay^k (EPLB's practice: a window of iterations; decay 1 weighs them
 * alike).
 */
struct locus_gracefit_window {
	uint32_t n_layers, n_experts;
	uint32_t size, n, head;   /* intervals kept, filled, newest slot */
	double decay;             /* in (0, 1] */
	double *ring;             /* [size][L][E] */
};

int locus_gracefit_window_init(struct locus_gracefit_window *w, uint32_t n_layers,
			       uint32_t n_experts, uint32_t size, double decay,
			       struct locus_error *err);
void locus_gracefit_window_free(struct locus_gracefit_window *w);
/* Add the newest interval's loads W[L][E]; the oldest falls out when full. */
void locus_gracefit_window_add(struct locus_gracefit_window *w, const double *W);
/* W[L][E] = sum over kept intervals of decay^age x loads; returns the total. */
double locus_gracefit_window_loads(const struct locus_gracefit_window *w, double *W);

/*
 * Copies of layer `layer` that next places on a GPU where cur has none of
 * that expert (primary or replica): the weights a push must move. Both
 * views have the same dimensions.
 */
uint32_t locus_gracefit_moves_layer(const struct locus_grace_view *cur,
				    const struct locus_grace_view *next, uint32_t layer);

struct locus_gracefit_rebalance {
	double rho_now;          /* predicted skew of the table in use, these loads */
	double rho_full;         /* a refit of every layer, no move budget */
	double rho_after;        /* the pushed plan: the layers chosen in the budget */
	uint32_t moves_full;     /* copies the full refit moves */
	uint32_t moves;          /* copies the plan moves (<= max_moves) */
	uint32_t layers_changed; /* layers that take the refit */
	uint32_t swaps;          /* primary swaps before the refit (in layers taken or not) */
};

/*
 * Refit replication on payload's grouping with loads W[L][E] (skew = mean
 * over layers of the predicted max/mean), then keep the refit only for the
 * layers it improves, best gain per moved copy first (a layer that moves
 * nothing first), while the moves fit max_moves (UINT32_MAX: no bound);
 * every other layer keeps its copies, its predicted loads taken on W.
 * Writes a sealed blob and the figures into *rep.
 */
int locus_gracefit_rebalance_plan(const void *payload, size_t payload_len, const double *W,
				  uint32_t max_moves, void **blob, size_t *blob_len,
				  struct locus_gracefit_rebalance *rep, struct locus_error *err);

/*
 * The same, letting the grouping follow the traffic: each layer's primaries
 * first take up to max_swaps swaps (locus_gracefit_swap_primaries on W, tol
 * LOCUS_GRACEFIT_SWAP_TOL, co-activation A[L][E][E] from the calibration
 * trace, may be NULL) when its balance drifted; a swap's two experts count
 * as moved copies. max_swaps 0 is locus_gracefit_rebalance_plan.
 */
int locus_gracefit_rebalance_plan_swaps(const void *payload, size_t payload_len,
					const double *W, const double *A, uint32_t max_swaps,
					uint32_t max_moves, void **blob, size_t *blob_len,
					struct locus_gracefit_rebalance *rep,
					struct locus_error *err);

/* ---- ranks lost and back (control/grace_adapt.c, pure) ----------------- */

struct locus_gracefit_adapt {
	uint32_t dropped;        /* copies on lost ranks removed */
	uint32_t promoted;       /* live replicas made primary: no move */
	uint32_t orphans;        /* experts with no live copy placed again: from storage */
	uint32_t moved;          /* copies moved to even the load out: from their holder */
	uint32_t capacity;       /* the result's primaries per GPU (raised if needed) */
	uint32_t replica_budget; /* the result's replicas per GPU (raised if needed) */
	double skew_after;       /* mean over layers of the busiest live rank / live mean */
};

/*
 * A placement for the live ranks (bit r of lost set: rank r is lost; NULL:
 * none) with the fewest moves from payload (a GRACE payload in force):
 * copies on lost ranks dropped, a live replica promoted where the primary
 * was lost, experts with no live copy placed on the least-loaded live rank
 * (hottest first), then, while a layer's busiest live rank predicts more
 * than skew x the live mean or its least loaded one less than the mean /
 * skew (skew 0: the layer's balance as placed, its busiest holder over the
 * holders' mean, plus 2 %), the busiest one's largest copy that lowers the
 * peak moved to the
 * least-loaded live rank without one, at most max_moves in all (a rank
 * back with nothing fills up this way). A sealed blob (generation 0) in
 * *out (free() it). 0, or -LOCUS_ERANGE (every rank lost, skew < 1, the
 * payload) / -ENOMEM with err.
 */
int locus_gracefit_adapt(const void *payload, size_t len, const uint64_t *lost, double skew,
			 uint32_t max_moves, void **out, size_t *out_len,
			 struct locus_gracefit_adapt *rep, struct locus_error *err);

/*
 * Copies of the placement v on lost ranks (0: it uses none). With idle
 * (bits for every rank, zeroed by the caller), the live ranks that hold no
 * copy at all are set there: ranks back, or new, that the placement does
 * not use.
 */
uint32_t locus_gracefit_uses_lost(const struct locus_grace_view *v, const uint64_t *lost,
				  uint64_t *idle);

#endif /* LOCUS_GRACEFIT_H */
