/* SPDX-License-Identifier: MIT */
/*
 * The blocks ROUTE and EVICT requests (the signature cache co-indexed
 * with KV blocks): what a prefill client of a prefix-cached
 * serving engine (vLLM automatic prefix caching, SGLang RadixAttention)
 * stages for LOCUS_OP_ROUTE_BLOCKS and LOCUS_OP_EVICT. Shared by the client
 * library, which writes them, and locusd, which checks them. Pure C: no
 * EAL, verbs or shm.
 *
 * A blocks ROUTE (8-byte aligned, all fields little-endian):
 *   struct locus_blocks_hdr                  32 bytes
 *   uint64_t cached[n_cached]                the prompt's blocks that hit the KV cache
 *   n_new x { uint64_t hash;                 new full blocks to cache
 *             uint8_t counts[L][E];          that block's tokens per (layer, expert)
 *             zero padding to 8 bytes }
 *   a signature (locus_eldr.h)               the tail: tokens after the last full block
 * Block hashes are the serving engine's (chained over the parent's hash and
 * the block's tokens); locus treats them as opaque u64 keys. The routed
 * signature is the sum of the cached blocks' counts, the new blocks' counts
 * and the tail's counts (saturating at 65535): with every cached block
 * found, the whole prompt's signature. The tail's prompt_tokens counts the
 * tail's tokens only; locusd forwards (found + n_new) x block_tokens + that.
 *
 * An EVICT: struct locus_evict_hdr (16 bytes) | uint64_t hashes[n_hashes].
 */
#ifndef LOCUS_BLOCKS_H
#define LOCUS_BLOCKS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "locus_common.h"
#include "locus_eldr.h"
#include "locus_err.h"

#define LOCUS_BLOCKS_MAGIC      0x4b4c4252u /* "RBLK" */
#define LOCUS_BLOCKS_VERSION    1u
#define LOCUS_BLOCKS_MAX_CACHED 16384u /* cached hashes in one request (256k tokens of 16) */
#define LOCUS_BLOCKS_MAX_NEW    256u   /* new blocks in one request (4,096 tokens of 16) */
#define LOCUS_BLOCKS_MAX_BLOCK_TOKENS 255u /* a block's count must fit a byte */
#define LOCUS_EVICT_MAGIC       0x54435645u /* "EVCT" */
#define LOCUS_EVICT_VERSION     1u
#define LOCUS_EVICT_MAX         16384u /* hashes in one EVICT */

struct locus_blocks_hdr {
	uint32_t magic;            /* LOCUS_BLOCKS_MAGIC */
	uint16_t version;          /* LOCUS_BLOCKS_VERSION */
	uint16_t flags;            /* 0 */
	uint16_t block_tokens;     /* tokens per KV block: must be locusd's sig_cache_block_tokens */
	uint16_t n_layers;         /* L of the new blocks' counts and of the tail signature */
	uint16_t n_experts;        /* E */
	uint16_t reserved0;        /* 0 */
	uint32_t n_cached;         /* <= LOCUS_BLOCKS_MAX_CACHED */
	uint32_t n_new;            /* <= LOCUS_BLOCKS_MAX_NEW */
	uint8_t  reserved[8];      /* 0 */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_blocks_hdr) == 32, "blocks header is 32 bytes");

struct locus_evict_hdr {
	uint32_t magic;            /* LOCUS_EVICT_MAGIC */
	uint16_t version;          /* LOCUS_EVICT_VERSION */
	uint16_t flags;            /* 0 */
	uint32_t n_hashes;         /* <= LOCUS_EVICT_MAX */
	uint32_t reserved;         /* 0 */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_evict_hdr) == 16, "evict header is 16 bytes");

/* What the receiver expects: the ELDR table's L and E, the cache's block and top-k. */
struct locus_blocks_shape {
	uint16_t n_layers, n_experts;
	uint16_t block_tokens;     /* 1..LOCUS_BLOCKS_MAX_BLOCK_TOKENS */
	uint16_t top_k;            /* bounds a block layer's sum: block_tokens x top_k */
};

/* Where the sections of a checked request are (offsets from its first byte). */
struct locus_blocks_layout {
	uint32_t n_cached, n_new;
	size_t off_cached;         /* 32 */
	size_t off_new;            /* first new block */
	size_t new_stride;         /* bytes of one new block: 8 + align8(L x E) */
	size_t off_sig;            /* the tail signature */
	size_t sig_len;            /* its bytes: locus_eldr_sig_len(L, E) */
	size_t len;                /* the whole request */
};

/* Which rule a refused request broke (the engine counts refusals by it). */
enum locus_blocks_fault {
	LOCUS_BLOCKS_OK        = 0,
	LOCUS_BLOCKS_FORMAT    = 1, /* header, shape, list lengths, length */
	LOCUS_BLOCKS_DUPLICATE = 2, /* a hash named twice (cached, new, or both) */
	LOCUS_BLOCKS_COUNTS    = 3, /* a count over block_tokens, a layer over block_tokens x k */
	LOCUS_BLOCKS_SIGNATURE = 4, /* the tail signature's header */
	LOCUS_BLOCKS_N_FAULTS
};

/* Bytes of a request of this shape (0 if L, E or a list length is out of range). */
size_t locus_blocks_req_len(uint32_t n_layers, uint32_t n_experts, uint32_t n_cached,
			    uint32_t n_new);

/*
 * Check a header (the caller's private copy) against the descriptor's len
 * and the receiver's shape: magic, version, flags and reserved zero,
 * block_tokens, L and E equal to shape's, list lengths within their caps,
 * len exact. Fills *lay. 0 or negative (err may be NULL); every refusal is
 * LOCUS_BLOCKS_FORMAT.
 */
int locus_blocks_hdr_check(const struct locus_blocks_hdr *h, size_t len,
			   const struct locus_blocks_shape *s, struct locus_blocks_layout *lay,
			   struct locus_error *err);

/*
 * Check one block's counts (uint8_t [L][E]): each <= block_tokens, each
 * layer's sum <= block_tokens x top_k. 0 or -LOCUS_ERANGE naming the layer.
 */
int locus_blocks_counts_check(const uint8_t *counts, uint32_t n_layers, uint32_t n_experts,
			      uint32_t block_tokens, uint32_t top_k, struct locus_error *err);

/*
 * Check what follows a header that locus_blocks_hdr_check accepted into
 * lay: no hash twice among the cached and new ones (scratch: room for
 * n_cached + n_new hashes, overwritten), every new block's counts, the tail
 * signature's header. Reads req[0, lay->off_sig + 32) only (the tail's
 * counts carry no structure: any value is valid), so a receiver may check
 * a private copy of that prefix. 0, or negative with *fault (may be NULL)
 * saying which rule.
 */
int locus_blocks_body_check(const void *req, const struct locus_blocks_layout *lay,
			    const struct locus_blocks_shape *s, uint64_t *scratch,
			    enum locus_blocks_fault *fault, struct locus_error *err);

/* Both checks on a whole request of len bytes (8-byte aligned). */
int locus_blocks_check(const void *req, size_t len, const struct locus_blocks_shape *s,
		       uint64_t *scratch, struct locus_blocks_layout *lay,
		       enum locus_blocks_fault *fault, struct locus_error *err);

/* Sections of a request laid out as lay. */
static inline const uint64_t *locus_blocks_cached(const void *req, const struct locus_blocks_layout *lay)
{
	return (const uint64_t *)((const uint8_t *)req + lay->off_cached);
}

static inline uint64_t locus_blocks_new_hash(const void *req, const struct locus_blocks_layout *lay,
					     uint32_t i)
{
	uint64_t h;

	memcpy(&h, (const uint8_t *)req + lay->off_new + i * lay->new_stride, 8);
	return h;
}

static inline const uint8_t *locus_blocks_new_counts(const void *req,
						     const struct locus_blocks_layout *lay,
						     uint32_t i)
{
	return (const uint8_t *)req + lay->off_new + i * lay->new_stride + 8;
}

/* What a client routes: the writer's input. */
struct locus_blocks_route {
	uint16_t block_tokens;
	uint32_t n_cached;
	const uint64_t *cached;       /* [n_cached] */
	uint32_t n_new;
	const uint64_t *new_hashes;   /* [n_new] */
	const uint8_t *new_counts;    /* [n_new][L][E] */
	const void *tail;             /* a whole signature payload (locus_eldr_sig_build) */
};

/*
 * Write the request r into buf (cap bytes, 8-byte aligned); L and E come
 * from the tail signature's header. Returns the request's length, or
 * -LOCUS_ERANGE (does not fit, or a list over its cap) / -EINVAL. Only the
 * layout is written as given: the receiver checks the rest.
 */
long locus_blocks_build(void *buf, size_t cap, const struct locus_blocks_route *r,
			struct locus_error *err);

/* Bytes of an EVICT of n hashes. */
static inline size_t locus_evict_req_len(uint32_t n)
{
	return sizeof(struct locus_evict_hdr) + (size_t)n * 8;
}

/* Check an EVICT header (private copy) against len: 0 or negative. */
int locus_evict_hdr_check(const struct locus_evict_hdr *h, size_t len, struct locus_error *err);

/* Write an EVICT of n hashes into buf: its length, or -LOCUS_ERANGE. */
long locus_evict_build(void *buf, size_t cap, const uint64_t *hashes, uint32_t n,
		       struct locus_error *err);

/*
 * Counts of a block of n_tokens tokens (ids[t][L][k], as the serving engine
 * returns routed experts; an id repeated in one token's top-k counts once)
 * into counts[L][E], zeroed first: 0, or -LOCUS_ERANGE (an id >= E, or more
 * than LOCUS_BLOCKS_MAX_BLOCK_TOKENS tokens).
 */
int locus_blocks_counts_build(uint8_t *counts, uint16_t n_layers, uint16_t n_experts, uint16_t k,
			      const uint16_t *ids, uint32_t n_tokens, struct locus_error *err);

#endif /* LOCUS_BLOCKS_H */
