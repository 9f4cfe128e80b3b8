/* SPDX-License-Identifier: MIT */
/*
 * Dispatch and combine payloads: what an expert-parallel rank puts in its
 * staging area for LOCUS_OP_DISPATCH / LOCUS_OP_COMBINE, and the rows
 * message locusd writes into a receiver's inbox (and sends between nodes).
 * Pure formats and their checks; no EAL, verbs or shm.
 *
 * Dispatch request (at desc.off in the source rank's stage, desc.len bytes):
 *   struct locus_dispatch_req
 *   u16 experts[n_tokens][top_k]   padded with zeros to a multiple of 4 bytes
 *   f32 gates[n_tokens][top_k]     carried to the experts, never changed
 * and the token rows, row_bytes each, at rows_off in the same stage.
 *
 * Combine request (at desc.off, desc.len bytes):
 *   struct locus_combine_req
 *   struct locus_row_ref refs[n_rows]   which (token, k slots) each row answers
 * and the output rows at rows_off in the stage.
 *
 * Rows message (in the receiver's inbox, one or more consecutive slots):
 *   struct locus_msg_hdr           type DISPATCH or COMBINE, id = batch id
 *   struct locus_rows_hdr          (LOCUS_ROWS_REFUSED: nothing follows but
 *                                  the padding to rows_off)
 *   struct locus_row_ref refs[n_rows]
 *   DISPATCH only: u16 experts[n_rows][top_k] (padded to 4), f32 gates[n_rows][top_k]
 *   rows at rows_off from the message start (64-byte aligned), row j at
 *   rows_off + j * row_bytes; unless LOCUS_ROWS_IN_PLACE: then the rows were
 *   not copied (the same-GPU tier hands over) and lie in the receiver's own
 *   stage: DISPATCH row of token t at rows_off + t * row_bytes (its own
 *   dispatch buffer), COMBINE row j at rows_off + j * row_bytes.
 */
#ifndef LOCUS_DISPATCH_H
#define LOCUS_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "locus_common.h"
#include "locus_err.h"
#include "locus_wire.h"

#define LOCUS_DISPATCH_MAGIC 0x52505344u /* "DSPR" */
#define LOCUS_COMBINE_MAGIC  0x52424d43u /* "CMBR" */
#define LOCUS_ROWS_MAGIC     0x53574f52u /* "ROWS" */
#define LOCUS_MAX_TOPK       32u
#define LOCUS_MAX_ROW_BYTES  (1u << 20)

struct locus_dispatch_req {
	uint32_t magic;      /* LOCUS_DISPATCH_MAGIC */
	uint16_t layer;
	uint16_t top_k;      /* 1..LOCUS_MAX_TOPK */
	uint32_t n_tokens;   /* >= 1 */
	uint32_t row_bytes;  /* 1..LOCUS_MAX_ROW_BYTES */
	uint64_t rows_off;   /* token rows in the stage, 64-byte aligned */
	uint64_t batch_id;   /* names the batch in rows messages and combine */
};

struct locus_combine_req {
	uint32_t magic;      /* LOCUS_COMBINE_MAGIC */
	uint16_t layer;
	uint16_t reserved;   /* 0 */
	uint32_t dst_rank;   /* the rank that dispatched the batch */
	uint32_t n_rows;     /* >= 1 */
	uint32_t row_bytes;
	uint32_t reserved2;  /* 0 */
	uint64_t rows_off;   /* output rows in the stage, 64-byte aligned */
	uint64_t batch_id;
};

/* One row's identity: the source token and the k slots it serves. */
struct locus_row_ref {
	uint32_t token;
	uint32_t kmask;      /* bit j: the token's j-th expert choice */
};

enum locus_rows_flags {
	LOCUS_ROWS_IN_PLACE  = 1u << 0,
	/* with IN_PLACE: rows_off is in the registered region the delivering
	 * descriptor names (LOCUS_DESC_F_REGION), not in the stage */
	LOCUS_ROWS_IN_REGION = 1u << 1,
	/*
	 * COMBINE only, with no rows and no other flag: the receiving rank
	 * (src_rank) refused the source's DISPATCH rows of batch batch_id,
	 * planned under placement_gen, a placement it does not hold; it got
	 * none of that message's rows
	 */
	LOCUS_ROWS_REFUSED   = 1u << 2,
	/*
	 * with REFUSED alone: the receiving rank was not attached on its node
	 * when the rows came (it left); the source's batch lost those rows
	 */
	LOCUS_ROWS_GONE      = 1u << 3,
};

struct locus_rows_hdr {
	uint32_t magic;      /* LOCUS_ROWS_MAGIC */
	uint16_t layer;
	uint16_t top_k;      /* DISPATCH: experts/gates per row; COMBINE: 0 */
	uint32_t n_rows;
	uint32_t row_bytes;
	uint32_t flags;      /* enum locus_rows_flags */
	uint16_t chunk;      /* this message's index among the batch's messages */
	uint16_t n_chunks;   /* messages this destination gets for the batch */
	uint64_t rows_off;
	uint64_t batch_id;
	uint64_t placement_gen; /* DISPATCH: the placement generation the rows were
				 * planned under (the table header's generation, else
				 * the node's channel generation); COMBINE: 0, or with
				 * LOCUS_ROWS_REFUSED the refused generation */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_dispatch_req) == 32, "dispatch request header");
LOCUS_STATIC_ASSERT(sizeof(struct locus_combine_req) == 40, "combine request header");
LOCUS_STATIC_ASSERT(sizeof(struct locus_rows_hdr) == 48, "rows header");

static inline size_t locus_ids_bytes(uint64_t n, uint32_t top_k)
{
	return LOCUS_ALIGN_UP((size_t)(n * top_k * sizeof(uint16_t)), (size_t)4);
}

/* Bytes of a dispatch request's descriptor part (header, experts, gates). */
static inline size_t locus_dispatch_req_len(uint32_t n_tokens, uint32_t top_k)
{
	return sizeof(struct locus_dispatch_req) + locus_ids_bytes(n_tokens, top_k) +
	       (size_t)n_tokens * top_k * sizeof(float);
}

static inline const uint16_t *locus_dispatch_experts(const struct locus_dispatch_req *r)
{
	return (const uint16_t *)(r + 1);
}

static inline const float *locus_dispatch_gates(const struct locus_dispatch_req *r)
{
	return (const float *)((const uint8_t *)(r + 1) + locus_ids_bytes(r->n_tokens, r->top_k));
}

static inline size_t locus_combine_req_len(uint32_t n_rows)
{
	return sizeof(struct locus_combine_req) + (size_t)n_rows * sizeof(struct locus_row_ref);
}

/* Offset of the rows in a rows message of n_rows (64-byte aligned). */
static inline size_t locus_rows_msg_rows_off(uint32_t n_rows, uint32_t top_k)
{
	size_t meta = sizeof(struct locus_msg_hdr) + sizeof(struct locus_rows_hdr) +
		      (size_t)n_rows * sizeof(struct locus_row_ref);

	if (top_k)
		meta += locus_ids_bytes(n_rows, top_k) + (size_t)n_rows * top_k * sizeof(float);
	return LOCUS_ALIGN_UP(meta, (size_t)LOCUS_CACHE_LINE);
}

/* Whole rows message: metadata, and the rows unless they stay in place. */
static inline size_t locus_rows_msg_len(uint32_t n_rows, uint32_t top_k, uint32_t row_bytes,
					int in_place)
{
	return locus_rows_msg_rows_off(n_rows, top_k) + (in_place ? 0 : (size_t)n_rows * row_bytes);
}

static inline struct locus_rows_hdr *locus_rows_hdr_of(void *msg)
{
	return (struct locus_rows_hdr *)((uint8_t *)msg + sizeof(struct locus_msg_hdr));
}

static inline struct locus_row_ref *locus_rows_refs(void *msg)
{
	return (struct locus_row_ref *)(locus_rows_hdr_of(msg) + 1);
}

static inline uint16_t *locus_rows_experts(void *msg, uint32_t n_rows)
{
	return (uint16_t *)(locus_rows_refs(msg) + n_rows);
}

static inline float *locus_rows_gates(void *msg, uint32_t n_rows, uint32_t top_k)
{
	return (float *)((uint8_t *)locus_rows_experts(msg, n_rows) +
			 locus_ids_bytes(n_rows, top_k));
}

/*
 * Check a dispatch request: hdr is the receiver's private copy of the header
 * (a client may rewrite shared memory at any time, so what was checked is
 * what is used), body the experts and gates that follow it, len the whole
 * request's length. Magic, sizes, exact length, rows inside a stage of
 * stage_size bytes, layer < n_layers, every expert id < n_experts, gates
 * finite.
 */
int locus_dispatch_req_check(const struct locus_dispatch_req *hdr, const void *body, size_t len,
			     uint64_t stage_size, uint32_t n_layers, uint32_t n_experts,
			     uint32_t max_tokens, struct locus_error *err);

/*
 * Check a combine request (hdr a private copy, refs what follows it): magic,
 * sizes, exact length, rows inside the stage, dst_rank < n_ranks, every
 * k-slot mask non-zero.
 */
int locus_combine_req_check(const struct locus_combine_req *hdr, const struct locus_row_ref *refs,
			    size_t len, uint64_t stage_size, uint32_t n_ranks, uint32_t max_rows,
			    struct locus_error *err);

/*
 * Check a rows message of len bytes (header included) as a receiver does:
 * message header (type DISPATCH or COMBINE), rows header, exact sizes, refs
 * (kmask within top_k bits for DISPATCH). A message with
 * LOCUS_ROWS_IN_PLACE must name rows inside stage_size (the region's length
 * with LOCUS_ROWS_IN_REGION). Rows come one or more to a message, except in
 * a refusal: a COMBINE with LOCUS_ROWS_REFUSED alone, no rows, row_bytes 0,
 * chunk 0 of 1. Another COMBINE carries placement_gen 0.
 */
int locus_rows_msg_check(const void *msg, size_t len, uint32_t n_ranks, uint64_t stage_size,
			 struct locus_error *err);

/*
 * The two halves of locus_rows_msg_check(), for a receiver that copies a
 * message's headers out of memory someone else can write: the headers
 * (m, h: private copies; len the whole message's length; *h is read only
 * when len shows the message holds one), then the refs that follow them,
 * checked against the header h that was checked.
 */
int locus_rows_hdrs_check(const struct locus_msg_hdr *m, const struct locus_rows_hdr *h,
			  size_t len, uint32_t n_ranks, uint64_t stage_size,
			  struct locus_error *err);
int locus_rows_refs_check(const struct locus_msg_hdr *m, const struct locus_rows_hdr *h,
			  const struct locus_row_ref *refs, uint64_t stage_size,
			  struct locus_error *err);

#endif /* LOCUS_DISPATCH_H */
