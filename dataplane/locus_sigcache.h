/* SPDX-License-Identifier: MIT */
/*
 * The signature cache: each prefix-cached KV block's expert counts, kept
 * beside it by the serving engine's block hash (issue 12, ELDR's "signature
 * cache co-indexed with KV blocks"). A request whose prefix hit the KV cache
 * is routed on the sum of its cached blocks' counts and its new tokens'
 * counts: the same signature the whole prompt would give.
 *
 * Pure C: no EAL, verbs or shm. One writer (the engine lcore); nothing
 * allocates, locks or calls into the kernel after create.
 *
 * An entry holds one block's counts as a dense uint8_t [L][E] (a count is
 * at most the block's tokens, at most 255): L x E bytes plus a 32-byte
 * header, 6,176 bytes for 48 x 128. Entries are fixed-size slots of a pool
 * allocated at create, their number capacity_bytes / entry bytes; a hash
 * table of twice as many buckets (open addressing, linear probing, back-
 * shift deletion: no tombstones) maps a block hash to its slot, and an LRU
 * list orders the slots. A full cache evicts its least recently used entry
 * to take a new one: it never refuses an insert for room.
 */
#ifndef LOCUS_SIGCACHE_H
#define LOCUS_SIGCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

#define LOCUS_SIGCACHE_MAX_BLOCK_TOKENS 255u /* a count must fit a byte */

struct locus_sigcache_params {
	uint32_t n_layers;      /* L, as the ELDR table's */
	uint32_t n_experts;     /* E */
	uint32_t top_k;         /* experts per token per layer: bounds a layer's sum */
	uint32_t block_tokens;  /* tokens per KV block: bounds every count */
	uint64_t capacity_bytes;/* entries' bytes at most (headers included) */
};

/* What happened to an insert. */
enum locus_sigcache_insert_result {
	LOCUS_SIGCACHE_INSERTED  = 0, /* a new entry */
	LOCUS_SIGCACHE_REFRESHED = 1, /* the hash was there with the same counts: now most recent */
	LOCUS_SIGCACHE_REPLACED  = 2, /* the hash was there with other counts: replaced */
};

/* Why entries left: the index of the evictions counter. */
enum locus_sigcache_evict_reason {
	LOCUS_SIGCACHE_EVICT_LRU      = 0, /* room for a new entry */
	LOCUS_SIGCACHE_EVICT_EXPLICIT = 1, /* the serving engine evicted the KV block */
	LOCUS_SIGCACHE_EVICT_N
};

struct locus_sigcache_stats {
	uint64_t hits, misses;       /* locus_sigcache_add found / did not find the hash */
	uint64_t inserts, refreshes, replaced;
	uint64_t evictions[LOCUS_SIGCACHE_EVICT_N];
	uint64_t entries, capacity;  /* entries in use, slots */
	uint64_t bytes_used;         /* entries x entry bytes */
	uint64_t resets;             /* emptied by locus_sigcache_reshape */
};

struct locus_sigcache;

/* Bytes one entry takes for these parameters (header included); 0 if they are invalid. */
size_t locus_sigcache_entry_bytes(const struct locus_sigcache_params *p);

/*
 * A cache for p. Refuses (err says why) L, E or k of 0 or beyond ELDR's
 * bounds, block_tokens of 0 or over LOCUS_SIGCACHE_MAX_BLOCK_TOKENS, and a
 * capacity below one entry. Returns 0 or negative.
 */
int locus_sigcache_create(const struct locus_sigcache_params *p, struct locus_sigcache **out,
			  struct locus_error *err);
void locus_sigcache_destroy(struct locus_sigcache *c);

/*
 * Check a block's counts (uint8_t [L][E], as a client sends them): every
 * count <= block_tokens and each layer's sum <= block_tokens x top_k.
 * 0, or -LOCUS_ERANGE with err naming the layer and expert.
 */
int locus_sigcache_counts_check(const struct locus_sigcache *c, const uint8_t *counts,
				struct locus_error *err);

/*
 * Insert the block hash -> counts (checked by the caller with
 * locus_sigcache_counts_check), the most recent entry. Returns an enum
 * locus_sigcache_insert_result; a full cache evicts its least recently
 * used entry first.
 */
int locus_sigcache_insert(struct locus_sigcache *c, uint64_t hash, const uint8_t *counts);

/*
 * Add hash's cached counts into sig[L][E] (saturating at 65535) and make
 * it the most recent entry: 1, or 0 (a miss: sig unchanged). Counted.
 */
int locus_sigcache_add(struct locus_sigcache *c, uint64_t hash, uint16_t *sig);

/* Whether hash is cached (no effect on recency, not counted). */
int locus_sigcache_contains(const struct locus_sigcache *c, uint64_t hash);

/* Drop hash: 1 if it was there, else 0. Counted as an explicit eviction. */
int locus_sigcache_evict(struct locus_sigcache *c, uint64_t hash);

/*
 * Lay the cache out for blocks of n_layers x n_experts (at most the shape
 * it was created for; a table of another shape was pushed) and empty it:
 * the slots stay as many as at create, each entry's counts take the new
 * shape's bytes. No allocation (the engine calls it in its poll loop when
 * it adopts a table). 0, or -LOCUS_ERANGE for a larger shape (unchanged).
 */
int locus_sigcache_reshape(struct locus_sigcache *c, uint32_t n_layers, uint32_t n_experts,
			   struct locus_error *err);

/* The parameters in force (n_layers, n_experts as of the last reshape). */
void locus_sigcache_shape(const struct locus_sigcache *c, struct locus_sigcache_params *out);

void locus_sigcache_stats(const struct locus_sigcache *c, struct locus_sigcache_stats *out);

/*
 * sig[i] += cnt[i] for i < n, saturating at 65535: the add of
 * locus_sigcache_add, for the caller's own blocks (a request's new ones).
 */
typedef void (*locus_sigcache_sum_fn)(uint16_t *sig, const uint8_t *cnt, size_t n);
void locus_sigcache_sum(const struct locus_sigcache *c, uint16_t *sig, const uint8_t *cnt);

/* The fastest sum this CPU runs (AVX2 or scalar): what create picks. */
locus_sigcache_sum_fn locus_sigcache_sum_pick(void);

#endif /* LOCUS_SIGCACHE_H */
