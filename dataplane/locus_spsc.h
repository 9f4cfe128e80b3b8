/* SPDX-License-Identifier: MIT */
/*
 * The single-producer single-consumer ring between two of locusd's lcores
 * (the relay's, engine <-> network; the engines' hand-overs, engine <->
 * engine): fixed-size entries copied by value, free-running 64-bit
 * indices, each written by one side only (release) and read by the other
 * (acquire), each on a cache line of its own. No lock, no allocation after
 * init. Both sides live in locusd's own memory: neither index is hostile,
 * so nothing is re-validated (the client rings, locus_ring.h, are the
 * ones a process locusd does not trust can write).
 */
#ifndef LOCUS_SPSC_H
#define LOCUS_SPSC_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "locus_common.h"

struct locus_spsc {
	uint64_t prod __locus_cache_aligned; /* producer's */
	uint64_t cons __locus_cache_aligned; /* consumer's */
	uint32_t mask, esize;
	uint8_t *slots;
};

/* n entries (a power of two) of esize bytes: 0 or -ENOMEM / -EINVAL. */
static inline int locus_spsc_init(struct locus_spsc *q, uint32_t n, uint32_t esize)
{
	if (!n || (n & (n - 1)) || !esize)
		return -EINVAL;
	q->prod = q->cons = 0;
	q->slots = calloc(n, esize);
	q->mask = n - 1;
	q->esize = esize;
	return q->slots ? 0 : -ENOMEM;
}

static inline void locus_spsc_fini(struct locus_spsc *q)
{
	free(q->slots);
	q->slots = NULL;
}

/* Producer: copy one entry in. 0, or -1 when full (nothing written). */
static inline int locus_spsc_put(struct locus_spsc *q, const void *e)
{
	uint64_t p = q->prod;

	if (p - __atomic_load_n(&q->cons, __ATOMIC_ACQUIRE) > q->mask)
		return -1;
	memcpy(q->slots + (p & q->mask) * q->esize, e, q->esize);
	__atomic_store_n(&q->prod, p + 1, __ATOMIC_RELEASE);
	return 0;
}

/* Producer: entries it may put now (only ever grows until its next put). */
static inline uint32_t locus_spsc_room(const struct locus_spsc *q)
{
	return (uint32_t)(q->mask + 1 - (q->prod - __atomic_load_n(&q->cons, __ATOMIC_ACQUIRE)));
}

/* Consumer: the oldest entry, left in place; NULL when empty. */
static inline const void *locus_spsc_peek(const struct locus_spsc *q)
{
	uint64_t c = q->cons;

	if (c == __atomic_load_n(&q->prod, __ATOMIC_ACQUIRE))
		return NULL;
	return q->slots + (c & q->mask) * q->esize;
}

/* Consumer: drop the entry peek returned. */
static inline void locus_spsc_pop(struct locus_spsc *q)
{
	__atomic_store_n(&q->cons, q->cons + 1, __ATOMIC_RELEASE);
}

/* Consumer: copy the oldest entry out. 0, or -1 when empty. */
static inline int locus_spsc_get(struct locus_spsc *q, void *e)
{
	const void *s = locus_spsc_peek(q);

	if (!s)
		return -1;
	memcpy(e, s, q->esize);
	locus_spsc_pop(q);
	return 0;
}

/* Entries in the ring (either side, or a third one: a snapshot). */
static inline uint32_t locus_spsc_count(const struct locus_spsc *q)
{
	return (uint32_t)(__atomic_load_n(&q->prod, __ATOMIC_ACQUIRE) -
			  __atomic_load_n(&q->cons, __ATOMIC_ACQUIRE));
}

#endif /* LOCUS_SPSC_H */
