/* SPDX-License-Identifier: MIT */
/*
 * The signature cache's insides, shared by sigcache.c (the stores) and
 * sigcache_route.c (a prompt's sum over them). Not a public header.
 */
#ifndef LOCUS_SIGCACHE_PRIV_H
#define LOCUS_SIGCACHE_PRIV_H

#include "locus_sigcache.h"

#define SC_NIL        UINT32_MAX
#define SC_HDR_BYTES  32u /* what an entry's header costs (slot + 2 buckets), counted in its bytes */

struct sc_slot {
	uint64_t hash;
	uint32_t prev, next; /* LRU order (head: most recent); next links the free list */
	uint32_t depth;      /* a checkpoint's block index in its prompt (blocks: unused) */
};

/* Fixed-size entries: a pool, a hash table over it, an LRU list. */
struct sc_store {
	uint32_t *bucket;      /* slot + 1, 0 empty */
	struct sc_slot *slot;
	uint8_t *data;         /* n_slots x stride */
	size_t stride;         /* bytes per entry, 64-byte multiple */
	uint32_t n_slots;      /* 0: the store is off */
	uint32_t mask;         /* buckets - 1 */
	uint32_t head, tail, free;
	uint64_t entries;
};

struct locus_sigcache {
	struct locus_sigcache_params p;
	uint32_t max_layers, max_experts; /* the shape at create: the pools' strides */
	size_t cells;          /* L x E */
	uint64_t seed;         /* keys the bucket of a hash: a client cannot aim at one */
	struct sc_store blk;   /* per-block uint8 [L][E] counts */
	struct sc_store ck;    /* prefix checkpoints: uint16 [L][E] sums of blocks 0..depth */
	locus_sigcache_sum_fn sum;
	locus_sigcache_sum16_fn sum16;
	struct locus_sigcache_stats st;
};

/* The bucket of s holding hash, or SC_NIL. */
uint32_t sc_find(const struct locus_sigcache *c, const struct sc_store *s, uint64_t hash);

/* Make slot i of s the most recent. */
void sc_touch(struct sc_store *s, uint32_t i);

static inline uint8_t *sc_data(const struct sc_store *s, uint32_t i)
{
	return s->data + (size_t)i * s->stride;
}

#endif /* LOCUS_SIGCACHE_PRIV_H */
