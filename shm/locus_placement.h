/* SPDX-License-Identifier: MIT */
/*
 * Which experts a rank holds under a placement, and what it gains and loses
 * from one placement to the next: what a rank client loads and frees around
 * a placement change (locus_client.h, "Placement changes"). A placement is
 * a sealed GRACE table or placement set (locus_grace.h, locus_graceset.h);
 * a rank holds an expert when it is the primary or a replica. Pure C.
 *
 * An expert is named by one u32: layer << 16 | expert.
 */
#ifndef LOCUS_PLACEMENT_H
#define LOCUS_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

static inline uint32_t locus_placement_id(uint32_t layer, uint32_t expert)
{
	return layer << 16 | expert;
}

/*
 * The experts rank holds under the placement blob (len bytes): bit
 * layer * n_experts + expert of held (held_len bytes, at least
 * (n_layers * n_experts + 7) / 8; zeroed here). *n_layers / *n_experts (may
 * be NULL) get the placement's shape. 0, or -LOCUS_E* when the blob fails
 * its checks, rank is outside the cluster, or held is too small.
 */
int locus_placement_rank_experts(const void *blob, size_t len, uint32_t rank, uint8_t *held,
				 size_t held_len, uint32_t *n_layers, uint32_t *n_experts,
				 struct locus_error *err);

/*
 * What rank gains and loses going from placement old (NULL: none, every
 * expert it holds under new is a gain) to placement new: expert ids
 * ascending, at most cap of each written; *n_gains / *n_losses the whole
 * counts (more than cap: call again with room). Both placements must have
 * one shape. 0, or -LOCUS_E* (err says which blob and why).
 */
int locus_placement_rank_moves(const void *old_blob, size_t old_len, const void *new_blob,
			       size_t new_len, uint32_t rank, uint32_t *gains, uint32_t *n_gains,
			       uint32_t *losses, uint32_t *n_losses, uint32_t cap,
			       struct locus_error *err);

/* A fetch's source when no live rank holds the expert: its weights come from storage. */
#define LOCUS_PLACEMENT_STORAGE 0xffffu

/* One copy a rank gains in a placement change, and where its weights come from. */
struct locus_placement_fetch {
	uint32_t id;          /* layer << 16 | expert */
	uint16_t dst;         /* the rank that gains the copy */
	uint16_t src;         /* the nearest live rank holding it under the old placement:
			       * on dst's node if one is, the least used of those;
			       * LOCUS_PLACEMENT_STORAGE when none is */
	uint16_t old_primary; /* its primary under the old placement (the baseline a reload
			       * from the primary uses), STORAGE when that rank is lost */
	uint16_t reserved;
};

/*
 * Every copy gained going from GRACE table old to GRACE table new (one
 * shape), ranks lost (bit r of lost; NULL: none) holding nothing, with its
 * weights' source: the holder on the gaining rank's node before one on
 * another node, spread over holders. At most cap written to out (NULL:
 * count only); *n the whole count. 0, or -LOCUS_E* (placement sets are
 * refused) with err.
 */
int locus_placement_fetches(const void *old_blob, size_t old_len, const void *new_blob,
			    size_t new_len, const uint64_t *lost,
			    struct locus_placement_fetch *out, uint32_t cap, uint32_t *n,
			    struct locus_error *err);

#endif /* LOCUS_PLACEMENT_H */
