/* SPDX-License-Identifier: MIT */
/*
 * GRACE placement set: one GRACE placement per expert-parallel group (a
 * decoder instance and its EP ranks), in one sealed table, so that a push
 * replaces every group's placement at once or none of them. Shared by the
 * control plane that fits it and the data plane that plans with it. Pure C.
 *
 * Ranks are the cluster's global ranks (rank = node x gpus_per_node +
 * local GPU). Group g owns the contiguous ranks first_rank ..
 * first_rank + n_ranks - 1; `locusctl fit --ep-ranks-per-decoder R` makes
 * group d = ranks d*R .. d*R+R-1 for ELDR decoder d. A DISPATCH from a rank
 * is planned with the table of the group holding that rank.
 *
 * Payload (sealed blob kind LOCUS_TBL_GRACE_SET, kind_version
 * LOCUS_GRACESET_KIND_VERSION), little-endian, no pointers:
 *
 *   struct locus_graceset_hdr                      32 bytes
 *   struct locus_graceset_entry entry[n_groups]    32 bytes each
 *   then each group's table: a whole sealed GRACE blob (locus_grace.h: its
 *   own 64-byte header and CRC32C), at 8-byte aligned offsets, ascending,
 *   apart, in entry order; zero padding between them, none after the last.
 *
 * A valid set:
 *  - n_groups in 1..LOCUS_GRACESET_MAX_GROUPS; group ids are exactly
 *    0..n_groups-1, once each (a gap is a missing group);
 *  - the rank ranges do not overlap and cover every rank of the cluster
 *    (n_nodes x gpus_per_node of the header): a rank in no group is a
 *    missing group;
 *  - every group's blob passes locus_grace_blob_check, has the header's
 *    n_layers, n_experts, n_nodes and gpus_per_node (the same model on the
 *    same cluster), places every primary and replica inside its group's
 *    range, max_replicas < the group's ranks, and predicts no load outside
 *    its range.
 */
#ifndef LOCUS_GRACESET_H
#define LOCUS_GRACESET_H

#include <stddef.h>
#include <stdint.h>

#include "locus_common.h"
#include "locus_err.h"
#include "locus_grace.h"

#define LOCUS_GRACESET_KIND_VERSION 1u
#define LOCUS_GRACESET_MAX_GROUPS   256u

struct locus_graceset_hdr {
	uint32_t n_groups;
	uint32_t n_nodes;
	uint32_t gpus_per_node;
	uint32_t n_layers;
	uint32_t n_experts;
	uint32_t reserved[3];    /* zero */
};

struct locus_graceset_entry {
	uint32_t group_id;       /* 0..n_groups-1 */
	uint32_t decoder_id;     /* the ELDR decoder this group serves (informational) */
	uint32_t first_rank;
	uint32_t n_ranks;        /* >= 1 */
	uint64_t offset;         /* of the group's sealed GRACE blob, from the payload start */
	uint64_t length;         /* of that blob */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_graceset_hdr) == 32, "graceset header is 32 bytes");
LOCUS_STATIC_ASSERT(sizeof(struct locus_graceset_entry) == 32, "graceset entry is 32 bytes");

/* Why a set was refused (the data plane counts refusals by this). */
enum locus_graceset_problem {
	LOCUS_GRACESET_OK = 0,
	LOCUS_GRACESET_MALFORMED,     /* layout, a group's table, placement outside its range */
	LOCUS_GRACESET_MISSING_GROUP, /* a group id or a rank range missing */
	LOCUS_GRACESET_OVERLAP,       /* two groups' ranks overlap, or a group id twice */
	LOCUS_GRACESET_DIMS,          /* groups disagree with the header or the node */
	LOCUS_GRACESET_N_PROBLEMS
};

/* One group of a checked set: its entry and its GRACE payload. */
struct locus_graceset_group {
	const struct locus_graceset_entry *entry;
	const void *payload;          /* GRACE payload (after its 64-byte header) */
	size_t payload_len;
};

/*
 * Check a set payload (len bytes, 8-byte aligned) against the rules above.
 * groups (may be NULL) gets n_groups entries indexed by group id; *why (may
 * be NULL) the class of the first problem. Returns 0, or -LOCUS_E* with a
 * message naming the group, its ranks and the field.
 */
int locus_graceset_check(const void *payload, size_t len,
			 struct locus_graceset_group groups[LOCUS_GRACESET_MAX_GROUPS],
			 enum locus_graceset_problem *why, struct locus_error *err);

/*
 * Check a whole sealed blob: locus_tbl_check with kind LOCUS_TBL_GRACE_SET
 * and kind_version LOCUS_GRACESET_KIND_VERSION, then locus_graceset_check.
 * On success *payload / *payload_len (may be NULL) point into blob.
 */
int locus_graceset_blob_check(const void *blob, size_t len, const void **payload,
			      size_t *payload_len,
			      struct locus_graceset_group groups[LOCUS_GRACESET_MAX_GROUPS],
			      enum locus_graceset_problem *why, struct locus_error *err);

/* Name of a problem class ("missing group", ...). */
const char *locus_graceset_problem_name(enum locus_graceset_problem p);

#endif /* LOCUS_GRACESET_H */
