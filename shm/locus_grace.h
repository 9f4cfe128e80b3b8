/* SPDX-License-Identifier: MIT */
/*
 * GRACE placement table and dispatch planner (DESIGN.md, "GRACE-MoE").
 *
 * Three forms of one placement:
 *
 *  - the payload of a sealed table blob (locus_tblfile.h, kind
 *    LOCUS_TBL_GRACE, kind_version LOCUS_GRACE_KIND_VERSION): dims, then
 *    flat arrays, little-endian, no pointers. It travels through files, the
 *    segment's table channel and `locusctl show`.
 *  - struct locus_grace_view: process-local pointers into such a payload,
 *    for the control plane that fills or reads it.
 *  - struct locus_grace_map: the form the planner reads, built from a
 *    validated payload into caller-provided memory (offsets, no pointers),
 *    with each expert's copies and their round-robin weights precomputed.
 *
 * Payload layout (kind_version 1), with L layers, E experts, N = nodes x
 * gpus_per_node ranks and R replica slots per expert:
 *
 *   struct locus_grace_dims                       32 bytes
 *   u16 primary[L][E]                             rank holding the expert
 *   u16 replica[L][E][R]                          extra copies, ascending,
 *                                                 LOCUS_GRACE_NO_RANK padded
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

struct locus_grace_view {
	struct locus_grace_dims *dims;
	uint16_t *primary;      /* [L][E] */
	uint16_t *replica;      /* [L][E][R] */
	float *expert_load;     /* [L][E] */
	float *pred_load;       /* [L][N] */
};

/*
 * Check dims alone (ranges, capacity x ranks >= E, R < ranks, reserved 0).
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
 * topology has no such GPU"), an expert with no primary, a replica on its
 * own primary or twice, replica lists not ascending or with holes, more
 * primaries than capacity or replicas than the budget on one GPU, NaN,
 * infinite or negative loads. Returns 0 or the first problem as -LOCUS_E*.
 */
int locus_grace_validate(const struct locus_grace_view *v, struct locus_error *err);

/*
 * A group map (CSR: rank r holds members[start[r] .. start[r+1]-1]) to a
 * primary[E] array. Rejects an expert id >= E, an expert placed twice, an
 * expert placed nowhere, and start[] not monotone or not ending at E.
 */
int locus_grace_groups_to_primary(uint32_t n_experts, uint32_t n_ranks, const uint32_t *start,
				  const uint16_t *members, uint16_t *primary,
				  struct locus_error *err);

/* The segment's table channel that carries GRACE tables. */
#define LOCUS_GRACE_TABLE_CHANNEL 1u

/*
 * Check a whole sealed blob: locus_tbl_check with kind LOCUS_TBL_GRACE and
 * kind_version LOCUS_GRACE_KIND_VERSION, then locus_grace_validate. On
 * success *payload / *payload_len (may be NULL) point into blob.
 */
int locus_grace_blob_check(const void *blob, size_t len, const void **payload,
			   size_t *payload_len, struct locus_error *err);

/* locus_grace_blob_check with the table channel's validate signature. */
int locus_grace_table_validate_cb(const void *blob, size_t len, void *arg,
				  struct locus_error *err);

/* ------------------------------------------------------------------------ */
/* Planner map: built once per table, read by every lcore.                  */

struct locus_grace_map {
	struct locus_grace_dims dims;
	uint32_t n_ranks;
	uint32_t n_slots;        /* copies per expert slot: 1 + R */
	uint64_t generation;     /* caller's table generation; resets SWRR state */
	uint64_t off_ncopies;    /* u8  [L][E] */
	uint64_t off_rank;       /* u16 [L][E][n_slots], primary first */
	uint64_t off_weight;     /* u16 [L][E][n_slots], >= 1 */
	uint64_t off_pred;       /* f32 [L][N] */
	uint64_t size;
};

/* Bytes locus_grace_map_build needs for these dims (0 if dims are invalid). */
size_t locus_grace_map_size(const struct locus_grace_dims *d);

/*
 * Validate a payload (as locus_grace_validate) and build the planner map in
 * mem (len bytes, 8-byte aligned). Weights: w = round(SCALE * minW'/W') over
 * an expert's copies, at least 1, with W' floored at 1e-9 of the layer's
 * total so an idle GPU does not get an infinite share.
 */
int locus_grace_map_build(void *mem, size_t len, const void *payload, size_t payload_len,
			  uint64_t generation, struct locus_error *err);

static inline const uint8_t *locus_grace_map_ncopies(const struct locus_grace_map *m)
{
	return (const uint8_t *)m + m->off_ncopies;
}

static inline const uint16_t *locus_grace_map_ranks(const struct locus_grace_map *m)
{
	return (const uint16_t *)((const uint8_t *)m + m->off_rank);
}

static inline const uint16_t *locus_grace_map_weights(const struct locus_grace_map *m)
{
	return (const uint16_t *)((const uint8_t *)m + m->off_weight);
}

static inline const float *locus_grace_map_pred(const struct locus_grace_map *m)
{
	return (const float *)((const uint8_t *)m + m->off_pred);
}

/* ------------------------------------------------------------------------ */
/* Dispatch planner: pure C, no allocation per batch, one state per lcore.  */

enum locus_grace_tier {
	LOCUS_GRACE_TIER_GPU   = 0, /* the source rank itself: hand over */
	LOCUS_GRACE_TIER_NODE  = 1, /* another GPU of the source's node */
	LOCUS_GRACE_TIER_REMOTE = 2, /* another node */
	LOCUS_GRACE_N_TIERS
};

/* One lcore's SWRR state; memory from locus_grace_plan_state_size(). */
struct locus_grace_plan_state {
	uint64_t generation;     /* map generation the SWRR counters belong to */
	uint32_t node;           /* node this lcore plans for */
	uint32_t n_cur;          /* int32 counters available in cur[] */
	uint64_t bytes;
	int32_t cur[] __locus_cache_aligned; /* [L][E][n_slots] SWRR current weights */
} __locus_cache_aligned;

/* Bytes of state for a map of these dims. */
size_t locus_grace_plan_state_size(const struct locus_grace_dims *d);

/* Initialise state (bytes from the size function) for an lcore of node. */
int locus_grace_plan_state_init(struct locus_grace_plan_state *st, size_t bytes,
				const struct locus_grace_map *m, uint32_t node,
				struct locus_error *err);

struct locus_grace_batch {
	uint32_t layer;
	uint32_t src_rank;
	uint32_t n_tokens;
	uint32_t top_k;
	const uint16_t *experts; /* [n_tokens][top_k] */
	const float *gates;      /* [n_tokens][top_k]: carried, never read or changed */
};

/* Where one (token, k) slot went: what combine needs to gather it back. */
struct locus_grace_slot {
	uint16_t rank;  /* destination rank */
	uint16_t pad;
	uint32_t row;   /* row index inside that destination's buffer */
};

/*
 * Plan output, preallocated for up to max_tokens x max_k and n_ranks. Each
 * token row goes once to each destination rank it needs; rows of
 * destination dest[i] are rows[dest_start[i] .. dest_start[i+1]-1] (token
 * indices, ascending) with kmask[] saying which of the token's k slots that
 * destination serves. Destinations are ordered by tier: tier_start[t] ..
 * tier_start[t+1]-1 index dest[] for tier t.
 */
struct locus_grace_plan {
	uint32_t max_tokens;
	uint32_t max_k;
	uint32_t n_ranks;
	uint32_t n_dest;
	uint32_t n_rows;
	uint32_t tier_start[LOCUS_GRACE_N_TIERS + 1];
	const float *gates;              /* the batch's gates, unchanged */
	uint16_t *dest;                  /* [n_ranks] */
	uint32_t *dest_start;            /* [n_ranks + 1] */
	uint32_t *rows;                  /* [max_tokens * max_k] */
	uint32_t *kmask;                 /* [max_tokens * max_k] */
	struct locus_grace_slot *slots;  /* [max_tokens * max_k] */
	uint32_t *count;                 /* [n_ranks] scratch */
	uint32_t *first;                 /* [n_ranks] scratch */
};

/* Bytes for a plan's arrays (excluding the struct). */
size_t locus_grace_plan_mem_size(uint32_t max_tokens, uint32_t max_k, uint32_t n_ranks);

/* Carve the plan's arrays from mem (bytes from the size function). */
int locus_grace_plan_init(struct locus_grace_plan *p, void *mem, size_t bytes,
			  uint32_t max_tokens, uint32_t max_k, uint32_t n_ranks);

/*
 * Resolve every (token, k) of the batch: the copy on the source GPU if there
 * is one; else the copies on the source's node by smooth weighted round
 * robin (weights ~ 1/W'); else all copies, likewise. Expert ids >= E, a
 * layer >= L, a source rank outside the map or not on the state's node, or
 * a batch larger than the plan are rejected before anything is planned (the
 * plan is then empty). Returns the number of destinations or -LOCUS_E*.
 * The ids are read twice (checked, then resolved): b->experts must be memory
 * nobody else writes during the call (locusd copies a request out of the
 * client's stage first), else a rewritten id is used unchecked.
 */
int locus_grace_plan_batch(struct locus_grace_plan_state *st, const struct locus_grace_map *m,
			   const struct locus_grace_batch *b, struct locus_grace_plan *p,
			   struct locus_error *err);

/* Tier of dst as seen from src, for a topology of gpus_per_node. */
static inline enum locus_grace_tier locus_grace_tier_of(uint32_t src, uint32_t dst,
							uint32_t gpus_per_node)
{
	if (src == dst)
		return LOCUS_GRACE_TIER_GPU;
	if (src / gpus_per_node == dst / gpus_per_node)
		return LOCUS_GRACE_TIER_NODE;
	return LOCUS_GRACE_TIER_REMOTE;
}

#endif /* LOCUS_GRACE_H */
