/* SPDX-License-Identifier: MIT */
/*
 * The signature cache: each prefix-cached KV block's expert counts, kept
 * beside it by the serving engine's block hash (ELDR's "signature cache
 * co-indexed with KV blocks"). A request whose prefix hit the KV cache
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
 *
 * Prefix checkpoints (checkpoint_blocks = C > 0): a second store of uint16
 * [L][E] sums, the cumulative counts of a prompt's blocks 0..i, kept under
 * block i's hash for every C-th block (i + 1 a multiple of C), with its own
 * slots, table and LRU list. A serving engine's block hash is chained over
 * its parent's (vLLM, SGLang), so it names its whole prefix: a prompt's sum
 * starts from the deepest checkpoint it names and adds the blocks after it,
 * at most C - 1 of them when the checkpoints are in, whatever the prefix's
 * length (locus_sigcache_prompt_sum). A client whose hashes are not chained
 * must run with C = 0. The capacity is shared: one checkpoint's room per C
 * blocks' (12,320 bytes beside 8 x 6,176 for 48 x 128, C = 8: 20 %).
 */
#ifndef LOCUS_SIGCACHE_H
#define LOCUS_SIGCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

#define LOCUS_SIGCACHE_MAX_BLOCK_TOKENS 255u /* a count must fit a byte */
#define LOCUS_SIGCACHE_MAX_CHECKPOINT_BLOCKS 4096u

struct locus_sigcache_params {
	uint32_t n_layers;      /* L, as the ELDR table's */
	uint32_t n_experts;     /* E */
	uint32_t top_k;         /* experts per token per layer: bounds a layer's sum */
	uint32_t block_tokens;  /* tokens per KV block: bounds every count */
	uint64_t capacity_bytes;/* entries' bytes at most (headers included), checkpoints' too */
	uint32_t checkpoint_blocks; /* C: a prefix checkpoint every C-th block; 0 = none */
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
	uint64_t hits, misses;       /* named blocks looked up: found / not found */
	uint64_t summed;             /* cached blocks' counts added into a sum */
	uint64_t inserts, refreshes, replaced;
	uint64_t evictions[LOCUS_SIGCACHE_EVICT_N];
	uint64_t entries, capacity;  /* entries in use, slots */
	uint64_t bytes_used;         /* entries' and checkpoints' bytes */
	uint64_t resets;             /* emptied by locus_sigcache_reshape */
	uint64_t ckpt_hits;          /* prompt sums started from a checkpoint */
	uint64_t ckpt_mismatch;      /* a checkpoint named at another depth than its own (unused) */
	uint64_t ckpt_inserts, ckpt_replaced;
	uint64_t ckpt_evictions[LOCUS_SIGCACHE_EVICT_N];
	uint64_t ckpt_entries, ckpt_capacity;
};

struct locus_sigcache;

/* Bytes one entry takes for these parameters (header included); 0 if they are invalid. */
size_t locus_sigcache_entry_bytes(const struct locus_sigcache_params *p);

/* Bytes one prefix checkpoint takes (uint16 [L][E] and the header); 0 if p is invalid. */
size_t locus_sigcache_checkpoint_bytes(const struct locus_sigcache_params *p);

/* How many block entries and checkpoints p's capacity holds (0, 0 if p is invalid). */
void locus_sigcache_split(const struct locus_sigcache_params *p, uint64_t *blocks,
			  uint64_t *checkpoints);

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

/* Look hash up and make it the most recent entry, adding nothing: 1 or 0. Counted. */
int locus_sigcache_touch(struct locus_sigcache *c, uint64_t hash);

/* Whether hash is cached (no effect on recency, not counted). */
int locus_sigcache_contains(const struct locus_sigcache *c, uint64_t hash);

/*
 * Drop hash's block and its checkpoint: 1 if either was there, else 0.
 * Counted as explicit evictions (of each).
 */
int locus_sigcache_evict(struct locus_sigcache *c, uint64_t hash);

/*
 * Store sum (uint16 [L][E]: the counts of a prompt's blocks 0..depth) as
 * the checkpoint of block depth, whose hash is hash; the most recent, a
 * full store drops its least recently used checkpoint. Returns an enum
 * locus_sigcache_insert_result, or -EOPNOTSUPP (checkpoints off).
 */
int locus_sigcache_checkpoint_insert(struct locus_sigcache *c, uint64_t hash, uint32_t depth,
				     const uint16_t *sum);

/* The checkpoint of hash if it was stored at depth, else NULL (no effect on recency). */
const uint16_t *locus_sigcache_checkpoint_find(const struct locus_sigcache *c, uint64_t hash,
					       uint32_t depth);

/* A request's blocks, as a ROUTE_BLOCKS names them (locus_blocks.h). */
struct locus_sigcache_prompt {
	const uint64_t *cached;    /* [n_cached]: the prompt's first blocks' hashes, in order */
	uint32_t n_cached;
	const uint8_t *new_blocks; /* n_new x { uint64_t hash; uint8_t counts[L][E] }, */
	size_t new_stride;         /* new_stride bytes apart (counts checked by the caller) */
	uint32_t n_new;            /* the blocks after the cached ones, in order */
};

struct locus_sigcache_prompt_sum {
	uint32_t known;            /* named cached blocks whose counts are in the sum */
	uint32_t from_checkpoint;  /* of which the checkpoint covered (0: none used) */
	uint32_t summed;           /* cached blocks' entries added */
};

/*
 * sum[L][E] = the counts of the prompt's full blocks that are known: the
 * deepest checkpoint among the named hashes (stored at that block's index),
 * plus the cached blocks after it, plus the new blocks, saturating at
 * 65535. Every named hash is looked up (recency, hits, misses) whether or
 * not it is summed. Checkpoints are written at every C-th block after the
 * one used, as long as every earlier named block was known; then the new
 * blocks are inserted. The tail is the caller's to add (locus_sigcache_sum_sig).
 */
void locus_sigcache_prompt_sum(struct locus_sigcache *c, const struct locus_sigcache_prompt *pr,
			       uint16_t *sum, struct locus_sigcache_prompt_sum *out);

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

/*
 * sig[i] += add[i] for the cache's L x E cells, saturating at 65535: a
 * signature's counts (a ROUTE_BLOCKS's tail) into a sum; each add[i] read once.
 */
typedef void (*locus_sigcache_sum16_fn)(uint16_t *sig, const uint16_t *add, size_t n);
void locus_sigcache_sum_sig(const struct locus_sigcache *c, uint16_t *sig, const uint16_t *add);
locus_sigcache_sum16_fn locus_sigcache_sum16_pick(void);

#endif /* LOCUS_SIGCACHE_H */
