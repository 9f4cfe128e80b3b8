// SPDX-License-Identifier: MIT
/*
 * The signature cache (locus_sigcache.h): a pool of fixed-size entries, an
 * open-addressing hash table over them and an LRU list, all allocated at
 * create.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "locus_common.h"
#include "locus_blocks.h"
#include "locus_eldr.h"
#include "locus_sigcache.h"

#define NIL        UINT32_MAX
#define HDR_BYTES  32u /* what an entry's header costs, counted in its bytes */
#define MAX_SLOTS  (1u << 30)

struct slot {
	uint64_t hash;
	uint32_t prev, next; /* LRU order (head: most recent); next links the free list */
};

struct locus_sigcache {
	struct locus_sigcache_params p;
	uint32_t max_layers, max_experts; /* the shape at create: the pool's stride */
	size_t cells;          /* L x E */
	size_t stride;         /* bytes of counts per entry, 64-byte multiple */
	uint32_t n_slots;
	uint32_t mask;         /* buckets - 1 */
	uint64_t seed;         /* keys the bucket of a hash: a client cannot aim at one */
	uint32_t *bucket;      /* slot + 1, 0 empty */
	struct slot *slot;
	uint8_t *counts;       /* n_slots x stride */
	uint32_t head, tail, free;
	locus_sigcache_sum_fn sum;
	struct locus_sigcache_stats st;
};

static uint64_t mix(uint64_t x)
{
	/* splitmix64's finaliser: every input bit moves every output bit */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint32_t home(const struct locus_sigcache *c, uint64_t hash)
{
	return (uint32_t)mix(hash ^ c->seed) & c->mask;
}

static int params_ok(const struct locus_sigcache_params *p)
{
	return p && p->n_layers && p->n_layers <= LOCUS_ELDR_MAX_LAYERS && p->n_experts &&
	       p->n_experts <= LOCUS_ELDR_MAX_EXPERTS && p->top_k &&
	       p->top_k <= LOCUS_ELDR_MAX_K && p->block_tokens &&
	       p->block_tokens <= LOCUS_SIGCACHE_MAX_BLOCK_TOKENS;
}

size_t locus_sigcache_entry_bytes(const struct locus_sigcache_params *p)
{
	if (!params_ok(p))
		return 0;
	return HDR_BYTES + LOCUS_ALIGN_UP((size_t)p->n_layers * p->n_experts, 64);
}

int locus_sigcache_create(const struct locus_sigcache_params *p, struct locus_sigcache **out,
			  struct locus_error *err)
{
	size_t ebytes = locus_sigcache_entry_bytes(p);
	struct locus_sigcache *c;
	uint64_t n, nb = 2;

	if (!ebytes)
		return locus_error_set(err, LOCUS_ERANGE, "signature cache: L %u, E %u, top-k %u, "
				       "block of %u tokens: out of range",
				       p ? p->n_layers : 0, p ? p->n_experts : 0,
				       p ? p->top_k : 0, p ? p->block_tokens : 0);
	n = p->capacity_bytes / ebytes;
	if (n == 0 || n > MAX_SLOTS)
		return locus_error_set(err, LOCUS_ERANGE, "signature cache of %llu bytes: room "
				       "for %llu entries of %zu bytes (1..%u)",
				       (unsigned long long)p->capacity_bytes,
				       (unsigned long long)n, ebytes, MAX_SLOTS);
	while (nb < 2 * n)
		nb <<= 1;
	c = calloc(1, sizeof(*c));
	if (!c)
		return locus_error_set(err, ENOMEM, "out of memory");
	c->p = *p;
	c->sum = locus_sigcache_sum_pick();
	c->max_layers = p->n_layers;
	c->max_experts = p->n_experts;
	c->cells = (size_t)p->n_layers * p->n_experts;
	c->stride = ebytes - HDR_BYTES;
	c->n_slots = (uint32_t)n;
	c->mask = (uint32_t)(nb - 1);
	c->bucket = calloc(nb, sizeof(*c->bucket));
	c->slot = calloc(n, sizeof(*c->slot));
	if (posix_memalign((void **)&c->counts, 64, n * c->stride))
		c->counts = NULL;
	if (!c->bucket || !c->slot || !c->counts) {
		locus_sigcache_destroy(c);
		return locus_error_set(err, ENOMEM, "signature cache: %llu entries: out of memory",
				       (unsigned long long)n);
	}
	if (getrandom(&c->seed, sizeof(c->seed), 0) != sizeof(c->seed))
		c->seed = (uint64_t)(uintptr_t)c ^ 0x9e3779b97f4a7c15ull; /* better than none */
	for (uint32_t i = 0; i < c->n_slots; i++)
		c->slot[i].next = i + 1 < c->n_slots ? i + 1 : NIL;
	c->free = 0;
	c->head = c->tail = NIL;
	c->st.capacity = n;
	*out = c;
	return 0;
}

void locus_sigcache_destroy(struct locus_sigcache *c)
{
	if (!c)
		return;
	free(c->counts);
	free(c->slot);
	free(c->bucket);
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
	c->stride = LOCUS_ALIGN_UP(c->cells, 64);
	memset(c->bucket, 0, ((size_t)c->mask + 1) * sizeof(*c->bucket));
	for (uint32_t i = 0; i < c->n_slots; i++)
		c->slot[i].next = i + 1 < c->n_slots ? i + 1 : NIL;
	c->free = 0;
	c->head = c->tail = NIL;
	c->st.entries = 0;
	c->st.resets++;
	return 0;
}

/* The bucket holding hash, or NIL. */
static uint32_t find(const struct locus_sigcache *c, uint64_t hash)
{
	for (uint32_t b = home(c, hash);; b = (b + 1) & c->mask) {
		uint32_t s = c->bucket[b];

		if (!s)
			return NIL;
		if (c->slot[s - 1].hash == hash)
			return b;
	}
}

static void lru_unlink(struct locus_sigcache *c, uint32_t s)
{
	struct slot *x = &c->slot[s];

	if (x->prev != NIL)
		c->slot[x->prev].next = x->next;
	else
		c->head = x->next;
	if (x->next != NIL)
		c->slot[x->next].prev = x->prev;
	else
		c->tail = x->prev;
}

static void lru_push_head(struct locus_sigcache *c, uint32_t s)
{
	c->slot[s].prev = NIL;
	c->slot[s].next = c->head;
	if (c->head != NIL)
		c->slot[c->head].prev = s;
	c->head = s;
	if (c->tail == NIL)
		c->tail = s;
}

/* Empty bucket b, moving later entries of its probe run back (no tombstones). */
static void bucket_delete(struct locus_sigcache *c, uint32_t b)
{
	uint32_t i = b, j = b;

	c->bucket[i] = 0;
	for (;;) {
		uint32_t k;

		j = (j + 1) & c->mask;
		if (!c->bucket[j])
			return;
		k = home(c, c->slot[c->bucket[j] - 1].hash);
		/* the entry at j stays if its home lies cyclically in (i, j] */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		c->bucket[i] = c->bucket[j];
		c->bucket[j] = 0;
		i = j;
	}
}

/* Remove the entry in bucket b; its slot goes back to the free list. */
static void remove_at(struct locus_sigcache *c, uint32_t b, enum locus_sigcache_evict_reason why)
{
	uint32_t s = c->bucket[b] - 1;

	bucket_delete(c, b);
	lru_unlink(c, s);
	c->slot[s].next = c->free;
	c->free = s;
	c->st.entries--;
	c->st.evictions[why]++;
}

int locus_sigcache_insert(struct locus_sigcache *c, uint64_t hash, const uint8_t *counts)
{
	uint32_t b = find(c, hash), s;

	if (b != NIL) {
		s = c->bucket[b] - 1;
		lru_unlink(c, s);
		lru_push_head(c, s);
		if (!memcmp(c->counts + (size_t)s * c->stride, counts, c->cells)) {
			c->st.refreshes++;
			return LOCUS_SIGCACHE_REFRESHED;
		}
		memcpy(c->counts + (size_t)s * c->stride, counts, c->cells);
		c->st.replaced++;
		return LOCUS_SIGCACHE_REPLACED;
	}
	if (c->free == NIL)
		remove_at(c, find(c, c->slot[c->tail].hash), LOCUS_SIGCACHE_EVICT_LRU);
	s = c->free;
	c->free = c->slot[s].next;
	c->slot[s].hash = hash;
	memcpy(c->counts + (size_t)s * c->stride, counts, c->cells);
	for (b = home(c, hash); c->bucket[b]; b = (b + 1) & c->mask)
		;
	c->bucket[b] = s + 1;
	lru_push_head(c, s);
	c->st.entries++;
	c->st.inserts++;
	return LOCUS_SIGCACHE_INSERTED;
}

int locus_sigcache_add(struct locus_sigcache *c, uint64_t hash, uint16_t *sig)
{
	uint32_t b = find(c, hash), s;
	const uint8_t *cnt;

	if (b == NIL) {
		c->st.misses++;
		return 0;
	}
	s = c->bucket[b] - 1;
	lru_unlink(c, s);
	lru_push_head(c, s);
	cnt = c->counts + (size_t)s * c->stride;
	c->sum(sig, cnt, c->cells);
	c->st.hits++;
	return 1;
}

int locus_sigcache_contains(const struct locus_sigcache *c, uint64_t hash)
{
	return find(c, hash) != NIL;
}

int locus_sigcache_evict(struct locus_sigcache *c, uint64_t hash)
{
	uint32_t b = find(c, hash);

	if (b == NIL)
		return 0;
	remove_at(c, b, LOCUS_SIGCACHE_EVICT_EXPLICIT);
	return 1;
}

void locus_sigcache_sum(const struct locus_sigcache *c, uint16_t *sig, const uint8_t *cnt)
{
	c->sum(sig, cnt, c->cells);
}

void locus_sigcache_shape(const struct locus_sigcache *c, struct locus_sigcache_params *out)
{
	*out = c->p;
}

void locus_sigcache_stats(const struct locus_sigcache *c, struct locus_sigcache_stats *out)
{
	*out = c->st;
	out->bytes_used = c->st.entries * (c->stride + HDR_BYTES);
}
