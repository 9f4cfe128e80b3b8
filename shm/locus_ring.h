/* SPDX-License-Identifier: MIT */
/*
 * Single-producer single-consumer descriptor ring in shared memory.
 *
 * The ring lives in a segment shared with a client process that locusd does
 * not trust. So each side works through a process-local handle that holds
 * its own copy of the geometry (checked once, at attach), never re-reads
 * size or mask from shared memory, and validates the other side's index on
 * every read: a consumer that sees the producer claim more than `size`
 * entries, or an index that went backwards, gets -LOCUS_EPROTO and must stop
 * using the ring.
 *
 * Indices are free-running 64-bit counters; head is written only by the
 * producer, tail only by the consumer, each on its own cache line. Entries
 * are fixed-size (a multiple of 8 bytes), copied in and out in bursts.
 *
 * Used by locusd and inside the client library; not installed (a client
 * submits and polls through locus_client.h).
 */
#ifndef LOCUS_RING_H
#define LOCUS_RING_H

#include <stdint.h>
#include <string.h>

#include "locus_common.h"
#include "locus_err.h"

#define LOCUS_RING_MAGIC 0x474e4952u /* "RING" */
#define LOCUS_RING_MAX_ENTRY 4096u
#define LOCUS_RING_MAX_SIZE (1u << 24)

struct locus_ring {
	uint32_t magic;
	uint32_t size;          /* entries, power of two */
	uint32_t esize;         /* bytes per entry, multiple of 8 */
	uint32_t reserved;
	uint8_t  pad0[LOCUS_CACHE_LINE - 16];
	uint64_t head __locus_cache_aligned; /* producer: entries ever enqueued */
	uint8_t  pad1[LOCUS_CACHE_LINE - 8];
	uint64_t tail __locus_cache_aligned; /* consumer: entries ever dequeued */
	uint8_t  pad2[LOCUS_CACHE_LINE - 8];
	uint8_t  entries[] __locus_cache_aligned;
};

/* Process-local view of one end of a ring. */
struct locus_ring_end {
	struct locus_ring *r;
	uint32_t size;
	uint32_t mask;
	uint32_t esize;
	uint64_t mine;   /* our index (head for producer, tail for consumer) */
	uint64_t theirs; /* last value of the other side's index we validated */
};

/* Bytes a ring of size entries of esize bytes occupies. */
static inline uint64_t locus_ring_bytes(uint32_t size, uint32_t esize)
{
	return sizeof(struct locus_ring) + (uint64_t)size * esize;
}

static inline int locus_ring_geometry_ok(uint32_t size, uint32_t esize)
{
	return LOCUS_IS_POW2(size) && size <= LOCUS_RING_MAX_SIZE && esize >= 8 &&
	       esize <= LOCUS_RING_MAX_ENTRY && esize % 8 == 0;
}

/*
 * Lay out an empty ring at mem (cache-line aligned, locus_ring_bytes()
 * long). Returns 0 or -EINVAL.
 */
int locus_ring_init(void *mem, uint64_t len, uint32_t size, uint32_t esize);

/*
 * Take one end of the ring at mem (len bytes available there). The expected
 * geometry is what the attacher was told out of band (the slot's layout),
 * and must match what lies in memory. Returns 0 or -LOCUS_E*.
 */
int locus_ring_attach(struct locus_ring_end *e, void *mem, uint64_t len, uint32_t size,
		      uint32_t esize, int producer);

/* Entries the consumer may read now, or -LOCUS_EPROTO for a hostile head. */
static inline int64_t locus_ring_count(struct locus_ring_end *c)
{
	uint64_t head = __atomic_load_n(&c->r->head, __ATOMIC_ACQUIRE);

	if (unlikely(head - c->mine > c->size || head < c->theirs))
		return -LOCUS_EPROTO;
	c->theirs = head;
	return (int64_t)(head - c->mine);
}

/*
 * Enqueue up to n entries from objs (n * esize bytes). Returns how many went
 * in (0 when full: the caller reports it, nothing is dropped silently), or
 * -LOCUS_EPROTO when the consumer's tail is impossible.
 */
static inline int64_t locus_ring_enqueue_burst(struct locus_ring_end *p, const void *objs,
					       uint32_t n)
{
	uint64_t free_slots;
	uint32_t idx, first;

	if (p->mine - p->theirs + n > p->size) {
		uint64_t tail = __atomic_load_n(&p->r->tail, __ATOMIC_ACQUIRE);

		if (unlikely(tail > p->mine || tail < p->theirs))
			return -LOCUS_EPROTO;
		p->theirs = tail;
	}
	free_slots = p->size - (p->mine - p->theirs);
	if (n > free_slots)
		n = (uint32_t)free_slots;
	if (unlikely(n == 0))
		return 0;
	idx = (uint32_t)(p->mine & p->mask);
	first = LOCUS_MIN(n, p->size - idx);
	memcpy(p->r->entries + (uint64_t)idx * p->esize, objs, (uint64_t)first * p->esize);
	if (first < n)
		memcpy(p->r->entries, (const uint8_t *)objs + (uint64_t)first * p->esize,
		       (uint64_t)(n - first) * p->esize);
	p->mine += n;
	__atomic_store_n(&p->r->head, p->mine, __ATOMIC_RELEASE);
	return n;
}

/*
 * Dequeue up to n entries into objs. Returns the count (0 when empty) or
 * -LOCUS_EPROTO when the producer's head is impossible.
 */
static inline int64_t locus_ring_dequeue_burst(struct locus_ring_end *c, void *objs,
					       uint32_t n)
{
	uint32_t idx, first;
	int64_t avail;

	avail = (int64_t)(c->theirs - c->mine);
	if ((uint64_t)avail < n) {
		avail = locus_ring_count(c);
		if (unlikely(avail < 0))
			return avail;
	}
	if ((uint64_t)avail < n)
		n = (uint32_t)avail;
	if (unlikely(n == 0))
		return 0;
	idx = (uint32_t)(c->mine & c->mask);
	first = LOCUS_MIN(n, c->size - idx);
	memcpy(objs, c->r->entries + (uint64_t)idx * c->esize, (uint64_t)first * c->esize);
	if (first < n)
		memcpy((uint8_t *)objs + (uint64_t)first * c->esize, c->r->entries,
		       (uint64_t)(n - first) * c->esize);
	c->mine += n;
	__atomic_store_n(&c->r->tail, c->mine, __ATOMIC_RELEASE);
	return n;
}

/* Free entries as the producer sees them (refreshes the tail). */
static inline uint32_t locus_ring_free_count(struct locus_ring_end *p)
{
	uint64_t tail = __atomic_load_n(&p->r->tail, __ATOMIC_ACQUIRE);

	if (tail <= p->mine && tail >= p->theirs)
		p->theirs = tail;
	return p->size - (uint32_t)(p->mine - p->theirs);
}

#endif /* LOCUS_RING_H */
