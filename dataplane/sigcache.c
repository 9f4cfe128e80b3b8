// SPDX-License-Identifier: MIT
/*
 * The signature cache (locus_sigcache.h): two stores of fixed-size entries
 * (blocks' uint8 counts, prefix checkpoints' uint16 sums), each an open-
 * addressing hash table over a pool with its own LRU list, all allocated
 * at create. The prompt-level sum is sigcache_route.c's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "locus_common.h"
#include "locus_blocks.h"
#include "locus_eldr.h"
#include "sigcache_priv.h"
#include "locus_err_priv.h"

#define MAX_SLOTS  (1u << 30)

static uint64_t mix(uint64_t x)
{
	/* splitmix64's finaliser: every input bit moves every output bit */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint32_t home(const struct locus_sigcache *c, const struct sc_store *s, uint64_t hash)
{
	return (uint32_t)mix(hash ^ c->seed) & s->mask;
}

static int params_ok(const struct locus_sigcache_params *p)
{
	return p && p->n_layers && p->n_layers <= LOCUS_ELDR_MAX_LAYERS && p->n_experts &&
	       p->n_experts <= LOCUS_ELDR_MAX_EXPERTS && p->top_k &&
	       p->top_k <= LOCUS_ELDR_MAX_K && p->block_tokens &&
	       p->block_tokens <= LOCUS_SIGCACHE_MAX_BLOCK_TOKENS &&
	       p->checkpoint_blocks <= LOCUS_SIGCACHE_MAX_CHECKPOINT_BLOCKS;
}

size_t locus_sigcache_entry_bytes(const struct locus_sigcache_params *p)
{
	if (!params_ok(p))
		return 0;
	return SC_HDR_BYTES + LOCUS_ALIGN_UP((size_t)p->n_layers * p->n_experts, 64);
}

size_t locus_sigcache_checkpoint_bytes(const struct locus_sigcache_params *p)
{
	if (!params_ok(p))
		return 0;
	return SC_HDR_BYTES + LOCUS_ALIGN_UP((size_t)p->n_layers * p->n_experts * 2, 64);
}

/* Every slot free, every bucket empty; entries of stride bytes. */
static void store_reset(struct sc_store *s, size_t stride)
{
	s->stride = stride;
	if (s->bucket)
		memset(s->bucket, 0, ((size_t)s->mask + 1) * sizeof(*s->bucket));
	for (uint32_t i = 0; i < s->n_slots; i++)
		s->slot[i].next = i + 1 < s->n_slots ? i + 1 : SC_NIL;
	s->free = s->n_slots ? 0 : SC_NIL;
	s->head = s->tail = SC_NIL;
	s->entries = 0;
}

/* n slots of stride bytes and twice as many buckets (a power of two); 0 or -ENOMEM. */
static int store_alloc(struct sc_store *s, uint64_t n, size_t stride)
{
	uint64_t nb = 2;

	s->n_slots = (uint32_t)n;
	if (!n) {
		store_reset(s, stride);
		return 0;
	}
	while (nb < 2 * n)
		nb <<= 1;
	s->mask = (uint32_t)(nb - 1);
	s->bucket = calloc(nb, sizeof(*s->bucket));
	s->slot = calloc(n, sizeof(*s->slot));
	if (posix_memalign((void **)&s->data, 64, n * stride))
		s->data = NULL;
	if (!s->bucket || !s->slot || !s->data)
		return -ENOMEM;
	store_reset(s, stride);
	return 0;
}

static void store_free(struct sc_store *s)
{
	free(s->data);
	free(s->slot);
	free(s->bucket);
}

void locus_sigcache_split(const struct locus_sigcache_params *p, uint64_t *blocks,
			  uint64_t *checkpoints)
{
	size_t ebytes = locus_sigcache_entry_bytes(p), cbytes = locus_sigcache_checkpoint_bytes(p);

	*blocks = *checkpoints = 0;
	if (!ebytes)
		return;
	/* one checkpoint's room per C blocks': both fill at the rate requests write them */
	if (p->checkpoint_blocks)
		*checkpoints = p->capacity_bytes / (p->checkpoint_blocks * ebytes + cbytes);
	*blocks = (p->capacity_bytes - *checkpoints * cbytes) / ebytes;
}

int locus_sigcache_create(const struct locus_sigcache_params *p, struct locus_sigcache **out,
			  struct locus_error *err)
{
	size_t ebytes = locus_sigcache_entry_bytes(p), cbytes = locus_sigcache_checkpoint_bytes(p);
	struct locus_sigcache *c;
	uint64_t n, n_ck;

	if (!ebytes)
		return locus_error_set(err, LOCUS_ERANGE, "signature cache: L %u, E %u, top-k %u, "
				       "block of %u tokens, a checkpoint every %u blocks: out of "
				       "range", p ? p->n_layers : 0, p ? p->n_experts : 0,
				       p ? p->top_k : 0, p ? p->block_tokens : 0,
				       p ? p->checkpoint_blocks : 0);
	locus_sigcache_split(p, &n, &n_ck);
	if (p->checkpoint_blocks && (n_ck == 0 || n_ck > MAX_SLOTS))
		return locus_error_set(err, LOCUS_ERANGE, "signature cache of %llu bytes: room "
				       "for %llu checkpoints of %zu bytes beside their %u blocks "
				       "of %zu (1..%u; raise sig_cache_bytes or set "
				       "sig_cache_checkpoint_blocks = 0)",
				       (unsigned long long)p->capacity_bytes,
				       (unsigned long long)n_ck, cbytes, p->checkpoint_blocks,
				       ebytes, MAX_SLOTS);
	if (n == 0 || n > MAX_SLOTS)
		return locus_error_set(err, LOCUS_ERANGE, "signature cache of %llu bytes: room "
				       "for %llu entries of %zu bytes (1..%u)",
				       (unsigned long long)p->capacity_bytes,
				       (unsigned long long)n, ebytes, MAX_SLOTS);
	c = calloc(1, sizeof(*c));
	if (!c)
		return locus_error_set(err, ENOMEM, "out of memory");
	c->p = *p;
	c->sum = locus_sigcache_sum_pick();
	c->sum16 = locus_sigcache_sum16_pick();
	c->max_layers = p->n_layers;
	c->max_experts = p->n_experts;
	c->cells = (size_t)p->n_layers * p->n_experts;
	if (store_alloc(&c->blk, n, ebytes - SC_HDR_BYTES) ||
	    store_alloc(&c->ck, n_ck, cbytes - SC_HDR_BYTES)) {
		locus_sigcache_destroy(c);
		return locus_error_set(err, ENOMEM, "signature cache: %llu entries, %llu "
				       "checkpoints: out of memory", (unsigned long long)n,
				       (unsigned long long)n_ck);
	}
	if (getrandom(&c->seed, sizeof(c->seed), 0) != sizeof(c->seed))
		c->seed = (uint64_t)(uintptr_t)c ^ 0x9e3779b97f4a7c15ull; /* better than none */
	c->st.capacity = n;
	c->st.ckpt_capacity = n_ck;
	*out = c;
	return 0;
}

void locus_sigcache_destroy(struct locus_sigcache *c)
{
	if (!c)
		return;
	store_free(&c->ck);
	store_free(&c->blk);
	free(c);
}

int locus_sigcache_counts_check(const struct locus_sigcache *c, const uint8_t *counts,
				struct locus_error *err)
{
	return locus_blocks_counts_check(counts, c->p.n_layers, c->p.n_experts,
					 c->p.block_tokens, c->p.top_k, err);
}

int locus_sigcache_reshape(struct locus_sigcache *c, uint32_t n_layers, uint32_t n_experts,
			   struct locus_error *err)
{
	if (!n_layers || !n_experts || n_layers > c->max_layers || n_experts > c->max_experts)
		return locus_error_set(err, LOCUS_ERANGE, "signature cache of %ux%u cannot hold "
				       "blocks of %ux%u", c->max_layers, c->max_experts,
				       n_layers, n_experts);
	c->p.n_layers = n_layers;
	c->p.n_experts = n_experts;
	c->cells = (size_t)n_layers * n_experts;
	store_reset(&c->blk, LOCUS_ALIGN_UP(c->cells, 64));
	store_reset(&c->ck, LOCUS_ALIGN_UP(c->cells * 2, 64));
	c->st.resets++;
	return 0;
}

uint32_t sc_find(const struct locus_sigcache *c, const struct sc_store *s, uint64_t hash)
{
	if (!s->n_slots)
		return SC_NIL;
	for (uint32_t b = home(c, s, hash);; b = (b + 1) & s->mask) {
		uint32_t i = s->bucket[b];

		if (!i)
			return SC_NIL;
		if (s->slot[i - 1].hash == hash)
			return b;
	}
}

static void lru_unlink(struct sc_store *s, uint32_t i)
{
	struct sc_slot *x = &s->slot[i];

	if (x->prev != SC_NIL)
		s->slot[x->prev].next = x->next;
	else
		s->head = x->next;
	if (x->next != SC_NIL)
		s->slot[x->next].prev = x->prev;
	else
		s->tail = x->prev;
}

static void lru_push_head(struct sc_store *s, uint32_t i)
{
	s->slot[i].prev = SC_NIL;
	s->slot[i].next = s->head;
	if (s->head != SC_NIL)
		s->slot[s->head].prev = i;
	s->head = i;
	if (s->tail == SC_NIL)
		s->tail = i;
}

void sc_touch(struct sc_store *s, uint32_t i)
{
	if (s->head == i)
		return;
	lru_unlink(s, i);
	lru_push_head(s, i);
}

/* Empty bucket b, moving later entries of its probe run back (no tombstones). */
static void bucket_delete(const struct locus_sigcache *c, struct sc_store *s, uint32_t b)
{
	uint32_t i = b, j = b;

	s->bucket[i] = 0;
	for (;;) {
		uint32_t k;

		j = (j + 1) & s->mask;
		if (!s->bucket[j])
			return;
		k = home(c, s, s->slot[s->bucket[j] - 1].hash);
		/* the entry at j stays if its home lies cyclically in (i, j] */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		s->bucket[i] = s->bucket[j];
		s->bucket[j] = 0;
		i = j;
	}
}

/* Remove the entry in bucket b; its slot goes back to the free list. */
static void remove_at(const struct locus_sigcache *c, struct sc_store *s, uint32_t b)
{
	uint32_t i = s->bucket[b] - 1;

	bucket_delete(c, s, b);
	lru_unlink(s, i);
	s->slot[i].next = s->free;
	s->free = i;
	s->entries--;
}

/*
 * A slot for a new hash (not in s), the most recent: a free one, else the
 * least recently used entry's (*evicted = 1). Its data is the caller's to fill.
 */
static uint32_t take_slot(const struct locus_sigcache *c, struct sc_store *s, uint64_t hash,
			  int *evicted)
{
	uint32_t b, i;

	*evicted = s->free == SC_NIL;
	if (*evicted)
		remove_at(c, s, sc_find(c, s, s->slot[s->tail].hash));
	i = s->free;
	s->free = s->slot[i].next;
	s->slot[i].hash = hash;
	for (b = home(c, s, hash); s->bucket[b]; b = (b + 1) & s->mask)
		;
	s->bucket[b] = i + 1;
	lru_push_head(s, i);
	s->entries++;
	return i;
}

int locus_sigcache_insert(struct locus_sigcache *c, uint64_t hash, const uint8_t *counts)
{
	struct sc_store *s = &c->blk;
	uint32_t b = sc_find(c, s, hash), i;
	int evicted;

	if (b != SC_NIL) {
		i = s->bucket[b] - 1;
		sc_touch(s, i);
		if (!memcmp(sc_data(s, i), counts, c->cells)) {
			c->st.refreshes++;
			return LOCUS_SIGCACHE_REFRESHED;
		}
		memcpy(sc_data(s, i), counts, c->cells);
		c->st.replaced++;
		return LOCUS_SIGCACHE_REPLACED;
	}
	i = take_slot(c, s, hash, &evicted);
	c->st.evictions[LOCUS_SIGCACHE_EVICT_LRU] += (uint64_t)evicted;
	memcpy(sc_data(s, i), counts, c->cells);
	c->st.inserts++;
	return LOCUS_SIGCACHE_INSERTED;
}

int locus_sigcache_touch(struct locus_sigcache *c, uint64_t hash)
{
	uint32_t b = sc_find(c, &c->blk, hash);

	if (b == SC_NIL) {
		c->st.misses++;
		return 0;
	}
	sc_touch(&c->blk, c->blk.bucket[b] - 1);
	c->st.hits++;
	return 1;
}

int locus_sigcache_add(struct locus_sigcache *c, uint64_t hash, uint16_t *sig)
{
	uint32_t b = sc_find(c, &c->blk, hash), i;

	if (b == SC_NIL) {
		c->st.misses++;
		return 0;
	}
	i = c->blk.bucket[b] - 1;
	sc_touch(&c->blk, i);
	c->sum(sig, sc_data(&c->blk, i), c->cells);
	c->st.hits++;
	c->st.summed++;
	return 1;
}

int locus_sigcache_contains(const struct locus_sigcache *c, uint64_t hash)
{
	return sc_find(c, &c->blk, hash) != SC_NIL;
}

int locus_sigcache_checkpoint_insert(struct locus_sigcache *c, uint64_t hash, uint32_t depth,
				     const uint16_t *sum)
{
	struct sc_store *s = &c->ck;
	uint32_t b = sc_find(c, s, hash), i;
	int evicted;

	if (!s->n_slots)
		return -EOPNOTSUPP;
	if (b != SC_NIL) {
		i = s->bucket[b] - 1;
		sc_touch(s, i);
		if (s->slot[i].depth == depth && !memcmp(sc_data(s, i), sum, c->cells * 2))
			return LOCUS_SIGCACHE_REFRESHED;
		s->slot[i].depth = depth;
		memcpy(sc_data(s, i), sum, c->cells * 2);
		c->st.ckpt_replaced++;
		return LOCUS_SIGCACHE_REPLACED;
	}
	i = take_slot(c, s, hash, &evicted);
	c->st.ckpt_evictions[LOCUS_SIGCACHE_EVICT_LRU] += (uint64_t)evicted;
	s->slot[i].depth = depth;
	memcpy(sc_data(s, i), sum, c->cells * 2);
	c->st.ckpt_inserts++;
	return LOCUS_SIGCACHE_INSERTED;
}

const uint16_t *locus_sigcache_checkpoint_find(const struct locus_sigcache *c, uint64_t hash,
					       uint32_t depth)
{
	uint32_t b = sc_find(c, &c->ck, hash), i;

	if (b == SC_NIL)
		return NULL;
	i = c->ck.bucket[b] - 1;
	if (c->ck.slot[i].depth != depth)
		return NULL;
	return (const uint16_t *)sc_data(&c->ck, i);
}

int locus_sigcache_evict(struct locus_sigcache *c, uint64_t hash)
{
	uint32_t b = sc_find(c, &c->blk, hash), k = sc_find(c, &c->ck, hash);

	if (b != SC_NIL) {
		remove_at(c, &c->blk, b);
		c->st.evictions[LOCUS_SIGCACHE_EVICT_EXPLICIT]++;
	}
	if (k != SC_NIL) {
		remove_at(c, &c->ck, k);
		c->st.ckpt_evictions[LOCUS_SIGCACHE_EVICT_EXPLICIT]++;
	}
	return b != SC_NIL || k != SC_NIL;
}

void locus_sigcache_sum(const struct locus_sigcache *c, uint16_t *sig, const uint8_t *cnt)
{
	c->sum(sig, cnt, c->cells);
}

void locus_sigcache_sum_sig(const struct locus_sigcache *c, uint16_t *sig, const uint16_t *add)
{
	c->sum16(sig, add, c->cells);
}

void locus_sigcache_shape(const struct locus_sigcache *c, struct locus_sigcache_params *out)
{
	*out = c->p;
}

void locus_sigcache_stats(const struct locus_sigcache *c, struct locus_sigcache_stats *out)
{
	*out = c->st;
	out->entries = c->blk.entries;
	out->ckpt_entries = c->ck.entries;
	out->bytes_used = c->blk.entries * (c->blk.stride + SC_HDR_BYTES) +
			  c->ck.entries * (c->ck.stride + SC_HDR_BYTES);
}
