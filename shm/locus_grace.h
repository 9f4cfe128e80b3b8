/* SPDX-License-Identifier: MIT */
/*
 * GRACE placement table format and its validators (shm/README.md, "GRACE table"),
 * shared by the control plane that fits it and the data plane that plans
 * with it; the planner map and the planner are dataplane/locus_grace_plan.h.
 *
 * Three forms of one placement:
 *
 *  - the payload of a sealed table blob (locus_tblfile.h, kind
 *    LOCUS_TBL_GRACE, kind_version LOCUS_GRACE_KIND_VERSION): dims, then
 *    flat arrays, little-endian, no pointers. It travels through files, the
 *    segment's table channel and `locusctl show`.
 *  - struct locus_grace_view: process-local pointers into such a payload,
 *    for the control plane that fills or reads it.
 *  - struct locus_grace_map (dataplane/locus_grace_plan.h): the form the
 *    planner reads, built from a validated payload into caller-provided
 *    memory (offsets, no pointers), with each expert's copies and their
 *    round-robin weights precomputed.
 *
 * Payload layout (kind_version 1), with L layers, E experts, N = nodes x
 * gpus_per_node ranks and R replica slots per expert:
 *
 *   struct locus_grace_dims                       32 bytes
 *   u16 primary[L][E]                             rank holding the expert
 *   u16 replica[L][E][R]                          extra copies, ascending,
 *                                                 LOCUS_GRACE_NO_RANK padded;
 *                                                 a rank may repeat or be the
 *                                                 primary's (EPLB puts two
 *                                                 copies on one GPU): each
 *                                                 entry is one more copy there
 *   (zero padding to a multiple of 4 bytes)
 *   f32 expert_load[L][E]                         profiled load W[e]
 *   f32 pred_load[L][N]                           predicted load W' per rank
 *
 * Prediction model for W': a replicated expert's load is split evenly over
 * its 1 + n copies (primary keeps W/(1+n), each replica receives W/(1+n)),
 * so W' = W - W_removed + W_received per rank. The planner then spreads an
 * expert's tokens over its copies with weights proportional to 1/W'.
 */
#ifndef LOCUS_GRACE_H
#define LOCUS_GRACE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "locus_common.h"
#include "locus_err.h"

#define LOCUS_GRACE_KIND_VERSION 1u
#define LOCUS_GRACE_NO_RANK      0xffffu
#define LOCUS_GRACE_MAX_LAYERS   512u
#define LOCUS_GRACE_MAX_EXPERTS  4096u
#define LOCUS_GRACE_MAX_RANKS    4096u
#define LOCUS_GRACE_MAX_REPLICAS 63u  /* per expert, besides the primary */
#define LOCUS_GRACE_MAX_TOPK     32u
#define LOCUS_GRACE_WEIGHT_SCALE 64u  /* SWRR weight of the least-loaded copy */

struct locus_grace_dims {
	uint32_t n_layers;
	uint32_t n_experts;
	uint32_t n_nodes;
	uint32_t gpus_per_node;
	uint32_t max_replicas;   /* R: replica slots per expert in the table */
	uint32_t capacity;       /* primary experts one GPU may hold */
	uint32_t replica_budget; /* replicas one GPU may hold */
	uint32_t reserved;       /* zero */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_grace_dims) == 32, "grace dims are 32 bytes");

static inline uint32_t locus_grace_n_ranks(const struct locus_grace_dims *d)
{
	return d->n_nodes * d->gpus_per_node;
}

/*
 * Whether rank r is in a set of lost ranks: bit r % 64 of word r / 64 (the
 * planner's, a recovery's, a weight plan's). NULL: no rank is lost.
 */
static inline int locus_grace_rank_lost(const uint64_t *lost, uint32_t r)
{
	return lost && (lost[r / 64] >> (r % 64) & 1);
}

struct locus_grace_view {
	struct locus_grace_dims *dims;
	uint16_t *primary;      /* [L][E] */
	uint16_t *replica;      /* [L][E][R] */
	float *expert_load;     /* [L][E] */
	float *pred_load;       /* [L][N] */
};

/*
 * Check dims alone (ranges, capacity x ranks >= E, R <= 63, reserved 0).
 * Returns 0 or -LOCUS_ERANGE with a message naming the field.
 */
int locus_grace_dims_check(const struct locus_grace_dims *d, struct locus_error *err);

/* Payload size for valid dims (0 when dims fail locus_grace_dims_check). */
size_t locus_grace_payload_size(const struct locus_grace_dims *d);

/*
 * Point v into payload (len bytes). Checks dims and that len is exactly the
 * size they imply; does not look at the arrays (locus_grace_validate does).
 */
int locus_grace_view_init(struct locus_grace_view *v, void *payload, size_t len,
			  struct locus_error *err);

/*
 * Check every array of a view: a rank >= N (primary or replica: "the
 * topology has no such GPU"), an expert with no primary, replica lists
 * descending somewhere or with holes (a repeated rank, or the primary's, is
 * one more copy on that GPU), more primaries than capacity or replicas than
 * the budget on one GPU, NaN, infinite or negative loads. Returns 0 or the
 * first problem as -LOCUS_E*.
 */
int locus_grace_validate(const struct locus_grace_view *v, struct locus_error *err);

/*
 * Check a whole sealed blob: locus_tbl_check with kind LOCUS_TBL_GRACE and
 * kind_version LOCUS_GRACE_KIND_VERSION, then locus_grace_validate. On
 * success *payload / *payload_len (may be NULL) point into blob.
 */
int locus_grace_blob_check(const void *blob, size_t len, const void **payload,
			   size_t *payload_len, struct locus_error *err);

#endif /* LOCUS_GRACE_H */
