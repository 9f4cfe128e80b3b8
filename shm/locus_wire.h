/* SPDX-License-Identifier: MIT */
/*
 * The message header every locus RDMA message starts with (shm/README.md, "Wire
 * formats"). 32 bytes, little-endian, naturally aligned. The payload that
 * follows is defined by the type's own module (signature: locus_eldr.h;
 * dispatch/combine: locus_grace.h / the data plane).
 *
 * The immediate value of a WRITE_WITH_IMM names the inbox slot; the header
 * says what is in it. A receiver checks locus_msg_hdr_check() before it
 * trusts a single byte of the payload.
 */
#ifndef LOCUS_WIRE_H
#define LOCUS_WIRE_H

#include <stdint.h>

#include "locus_common.h"
#include "locus_err.h"

#define LOCUS_MSG_MAGIC   0x4d53434cu /* "LCSM" */
#define LOCUS_MSG_VERSION 2u

enum locus_msg_type {
	LOCUS_MSG_SIGNATURE = 1, /* request header + expert signature (ELDR) */
	LOCUS_MSG_DISPATCH  = 2, /* token rows to expert ranks (GRACE) */
	LOCUS_MSG_COMBINE   = 3, /* expert outputs back to the source rank */
	LOCUS_MSG_LOAD      = 4, /* retired: loads travel as load rows (below); refused */
	LOCUS_MSG_HEARTBEAT = 5,
	LOCUS_MSG_CREDIT    = 6, /* inbox slots released by the receiver */
	LOCUS_MSG_TYPE_MAX
};

struct locus_msg_hdr {
	uint32_t magic;       /* LOCUS_MSG_MAGIC */
	uint8_t  version;     /* LOCUS_MSG_VERSION */
	uint8_t  type;        /* enum locus_msg_type */
	uint16_t flags;
	uint32_t payload_len; /* bytes after this header */
	uint32_t seq;         /* per (source, destination) sequence number */
	uint64_t id;          /* request id or batch id */
	uint32_t src_rank;
	uint32_t dst_rank;
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_msg_hdr) == 32, "message header is 32 bytes");

/*
 * Check a header received in a buffer of len bytes (header + payload) and
 * whose ranks must be below n_ranks. Returns 0 or -LOCUS_E*.
 */
static inline int locus_msg_hdr_check(const struct locus_msg_hdr *h, uint64_t len,
				      uint32_t n_ranks)
{
	if (unlikely(len < sizeof(*h)))
		return -LOCUS_ETRUNCATED;
	if (unlikely(h->magic != LOCUS_MSG_MAGIC))
		return -LOCUS_EBADMAGIC;
	if (unlikely(h->version != LOCUS_MSG_VERSION))
		return -LOCUS_EVERSION;
	if (unlikely(h->type == 0 || h->type >= LOCUS_MSG_TYPE_MAX))
		return -LOCUS_EPROTO;
	if (unlikely(h->payload_len != len - sizeof(*h)))
		return -LOCUS_ETRUNCATED;
	if (unlikely(h->src_rank >= n_ranks || h->dst_rank >= n_ranks))
		return -LOCUS_ERANGE;
	return 0;
}

static inline void locus_msg_hdr_init(struct locus_msg_hdr *h, enum locus_msg_type type,
				      uint32_t payload_len, uint64_t id, uint32_t src_rank,
				      uint32_t dst_rank, uint32_t seq)
{
	h->magic = LOCUS_MSG_MAGIC;
	h->version = LOCUS_MSG_VERSION;
	h->type = (uint8_t)type;
	h->flags = 0;
	h->payload_len = payload_len;
	h->seq = seq;
	h->id = id;
	h->src_rank = src_rank;
	h->dst_rank = dst_rank;
}

/*
 * Decoder load row: what one node tells every peer about the decoders it
 * serves, written by a one-sided RDMA WRITE (no immediate: no receiver CPU,
 * no credits) into the load area the peer exposes to it, rewritten in place
 * every load period. The reader copies the row whenever it likes and may
 * catch it half written: crc32c over every byte after the crc field tells.
 * It also says which of the writer's GPUs have a rank attached, so every
 * node stops planning rows to a rank that left within a load period.
 * Little-endian, 24 bytes + 8 per entry.
 */
#define LOCUS_LOAD_ROW_MAGIC 0x5244414cu /* "LADR" */

struct locus_load_entry {
	uint32_t decoder_id;
	uint32_t load;
};

struct locus_load_row {
	uint32_t magic;       /* LOCUS_LOAD_ROW_MAGIC */
	uint32_t crc;         /* crc32c of bytes [8, locus_load_row_size(n)) */
	uint64_t seq;         /* moves at every write: a row that stops moving is stale */
	uint16_t node;        /* the writer */
	uint16_t n;           /* entries */
	uint32_t ranks;       /* LOCUS_LOAD_ROW_RANKS | bit g: the writer's GPU g has its
			       * rank client attached */
	struct locus_load_entry e[];
};

/* In a load row's ranks: the low bits are the writer's ranks attached. */
#define LOCUS_LOAD_ROW_RANKS 0x80000000u

LOCUS_STATIC_ASSERT(sizeof(struct locus_load_row) == 24, "load row header is 24 bytes");

static inline size_t locus_load_row_size(uint32_t n)
{
	return sizeof(struct locus_load_row) + (size_t)n * sizeof(struct locus_load_entry);
}

#endif /* LOCUS_WIRE_H */
