/* SPDX-License-Identifier: MIT */
/*
 * Per-decoder expert placement (control plane): one GRACE placement per
 * decoder's expert-parallel group, in one placement set (locus_graceset.h).
 *
 * Rank numbering. The cluster has N = n_nodes x gpus_per_node global ranks
 * (rank = node x gpus_per_node + local GPU). With K decoders in the ELDR
 * table and R ranks per decoder (K x R = N), the decoder in table slot k
 * (decoder id decoder_ids[k]) owns group k = ranks k*R .. k*R+R-1. R must
 * divide gpus_per_node (several decoders share a node, each on R of its
 * GPUs: the group is fitted as 1 node x R GPUs) or be a multiple of it (a
 * decoder spans R / gpus_per_node whole nodes: fitted as that many nodes x
 * gpus_per_node), so that a group's node boundaries are the cluster's.
 *
 * Profile of group k: the calibration requests whose nearest ELDR centroid
 * is slot k (cosine of the prompt signature x = normalize(counts * idf over
 * the table's mask) with each centroid: the router's score, without the
 * band and the loads it adds at serve time), each through
 * locus_gracefit_profile_add_request (decode tokens where the trace has
 * them, else prompt tokens). A group that owns no request is fitted from
 * every request (reported in its info). With one_profile every group is
 * fitted from every request: one placement, the same in every group (the
 * baseline with the same memory).
 *
 * Every group gets the same per-GPU capacity and replica budget (topo), so
 * per-decoder and global placements hold the same expert slots per rank.
 */
#ifndef LOCUS_GRACE_EPGROUPS_H
#define LOCUS_GRACE_EPGROUPS_H

#include <stddef.h>
#include <stdint.h>

#include "locus_eldr.h"
#include "locus_err.h"
#include "locus_gracefit.h"

struct locus_trace;

struct locus_epgroups_opts {
	uint32_t ranks_per_decoder;        /* R */
	struct locus_gracefit_topo topo;   /* the cluster; capacity, budget per GPU */
	struct locus_gracefit_opts fit;
	int one_profile;                   /* every group from every request */
};

struct locus_epgroups_info {
	uint32_t decoder_id;
	uint32_t first_rank, n_ranks;
	uint32_t n_requests;               /* calibration requests the group owns */
	uint64_t n_tokens;                 /* token-layer rows of its profile */
	uint32_t n_decode;                 /* of its requests, profiled from decode tokens */
	int fallback;                      /* owned nothing: fitted from every request */
	double rho, rho_after;             /* mean over layers of the fit's skew, before/after */
};

/*
 * Nearest centroid of every request of t under the ELDR table v: assign[i]
 * = table slot (ties to the lower slot). t's layers and experts must be the
 * table's.
 */
int locus_epgroups_assign(const struct locus_eldr_tbl_view *v, const struct locus_trace *t,
			  uint32_t *assign, struct locus_error *err);

/* The topology a group of R ranks is fitted on (see the header comment). */
int locus_epgroups_group_topo(const struct locus_gracefit_topo *cluster, uint32_t R,
			      struct locus_gracefit_topo *group, struct locus_error *err);

/*
 * A sealed GRACE table (*blob malloc'd) for the cluster (n_nodes x
 * gpus_per_node) from a group-local payload: every rank shifted by
 * first_rank, predicted loads zero outside the group, capacity and budget
 * kept.
 */
int locus_epgroups_lift(const void *payload, size_t len, uint32_t first_rank,
			uint32_t n_nodes, uint32_t gpus_per_node, void **blob, size_t *blob_len,
			struct locus_error *err);

/*
 * The whole fit: a sealed placement set (*blob malloc'd) of K groups, K the
 * table's decoders; info (may be NULL) gets K entries. assign (may be NULL)
 * is used instead of locus_epgroups_assign when given (n_requests entries).
 */
int locus_epgroups_fit(const struct locus_trace *t, const struct locus_eldr_tbl_view *v,
		       const uint32_t *assign, const struct locus_epgroups_opts *o, void **blob,
		       size_t *blob_len, struct locus_epgroups_info *info,
		       struct locus_error *err);

#endif /* LOCUS_GRACE_EPGROUPS_H */
