/* SPDX-License-Identifier: MIT */
/*
 * GRACE planner map and dispatch planner (dataplane/README.md, "The GRACE
 * planner"): the map is built from a validated GRACE table payload
 * (locus_grace.h, the format both planes share) and read by the data
 * plane's lcores. Pure C: no EAL, verbs or shm.
 */
#ifndef LOCUS_GRACE_PLAN_H
#define LOCUS_GRACE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "locus_common.h"
#include "locus_err.h"
#include "locus_grace.h"

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

/*
 * The map of a sealed GRACE table blob (checked: locus_grace_blob_check),
 * generation 1, in memory of its own for the tools and tests (free() it;
 * the engine builds into its table memory). 0 and *out, or -code and err.
 */
int locus_grace_map_of_blob(const void *blob, size_t len, void **out, struct locus_error *err);

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
	const uint64_t *lost;    /* bit r (word r / 64): rank r is unreachable; NULL: none */
};

/* The rank of a masked slot: its expert has no copy on a reachable rank. */
#define LOCUS_GRACE_MASKED 0xffffu

/* Where one (token, k) slot went: what combine needs to gather it back. */
struct locus_grace_slot {
	uint16_t rank;  /* destination rank; LOCUS_GRACE_MASKED: sent nowhere */
	uint16_t pad;
	uint32_t row;   /* row index inside that destination's buffer; masked: UINT32_MAX */
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
	uint32_t n_masked;               /* slots masked (LOCUS_GRACE_MASKED) */
	uint32_t tier_start[LOCUS_GRACE_N_TIERS + 1];
	const float *gates;              /* the batch's gates, unchanged */
	uint16_t *dest;                  /* [n_ranks] */
	uint32_t *dest_start;            /* [n_ranks + 1] */
	uint32_t *rows;                  /* [max_tokens * max_k] */
	uint32_t *kmask;                 /* [max_tokens * max_k] */
	struct locus_grace_slot *slots;  /* [max_tokens * max_k] */
	uint32_t *count;                 /* [n_ranks + 2] scratch */
	uint32_t *first;                 /* [n_ranks + 2] scratch */
	uint64_t *want;                  /* [n_ranks + 2] scratch */
	struct locus_grace_eroute *eroute; /* [LOCUS_GRACE_MAX_EXPERTS] scratch */
	uint32_t seq;                    /* batches planned: eroute's stamp */
};

/* Copies of a choice an eroute holds (planner scratch). */
#define LOCUS_GRACE_EROUTE_COPIES 4

/* How an expert resolves from one batch's source (planner scratch, a cache line each). */
struct locus_grace_eroute {
	uint64_t cand;   /* SWRR candidates (copy bits) of a choice */
	uint64_t ranks;  /* ranks (bit r) of a choice's copies, on maps of <= 64 ranks */
	uint64_t bit;    /* bit dest when fixed, on maps of <= 64 ranks; else 0 */
	uint64_t live;   /* copy bits of the copies on reachable ranks */
	uint32_t stamp;  /* plan seq this entry was made for */
	uint16_t dest;   /* the rank every pair goes to, or n_ranks: a choice */
	uint8_t choice;  /* 1: a choice per token */
	uint8_t all;     /* bits of the copies held; 0: none, a wide choice reads the map */
	uint16_t rank[LOCUS_GRACE_EROUTE_COPIES];   /* a choice's copies, then spares */
	uint16_t weight[LOCUS_GRACE_EROUTE_COPIES]; /* their SWRR weights, spares 0 */
} __locus_cache_aligned;

/* Bytes for a plan's arrays (excluding the struct). */
size_t locus_grace_plan_mem_size(uint32_t max_tokens, uint32_t max_k, uint32_t n_ranks);

/* Carve the plan's arrays from mem (bytes from the size function). */
int locus_grace_plan_init(struct locus_grace_plan *p, void *mem, size_t bytes,
			  uint32_t max_tokens, uint32_t max_k, uint32_t n_ranks);

/*
 * Resolve every (token, k) of the batch: the only copy, or the copy on the
 * source GPU if there is one; else, once the token's other experts are so
 * resolved and in slot order, a copy on a GPU the token already goes to
 * (costs no row); else one on a GPU where a later such expert of the token
 * has a copy, while that copy is not far ahead of its share; else the
 * copies on the source's node; else all copies. Among several, by smooth
 * weighted round robin (weights ~ 1/W'), every choice charged to it so the
 * copies' shares stay the weights. Copies on ranks b->lost names are not
 * there: an expert with no other copy is masked for the batch (its slots
 * LOCUS_GRACE_MASKED, counted in n_masked, sent nowhere). Expert ids >= E, a
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

#endif /* LOCUS_GRACE_PLAN_H */
