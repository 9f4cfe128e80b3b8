// SPDX-License-Identifier: MIT
#include <errno.h>

#include "locus_ring.h"

int locus_ring_init(void *mem, uint64_t len, uint32_t size, uint32_t esize)
{
	struct locus_ring *r = mem;

	if (!mem || ((uintptr_t)mem % LOCUS_CACHE_LINE) || !locus_ring_geometry_ok(size, esize) ||
	    len < locus_ring_bytes(size, esize))
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->size = size;
	r->esize = esize;
	__atomic_store_n(&r->magic, LOCUS_RING_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

int locus_ring_attach(struct locus_ring_end *e, void *mem, uint64_t len, uint32_t size,
		      uint32_t esize, int producer)
{
	struct locus_ring *r = mem;
	uint64_t head, tail;

	if (!e || !mem || ((uintptr_t)mem % LOCUS_CACHE_LINE) || !locus_ring_geometry_ok(size, esize))
		return -EINVAL;
	if (len < locus_ring_bytes(size, esize))
		return -LOCUS_ETRUNCATED;
	if (__atomic_load_n(&r->magic, __ATOMIC_ACQUIRE) != LOCUS_RING_MAGIC)
		return -LOCUS_EBADMAGIC;
	if (r->size != size || r->esize != esize)
		return -LOCUS_ERANGE;
	head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
	tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
	if (head < tail || head - tail > size)
		return -LOCUS_EPROTO;
	e->r = r;
	e->size = size;
	e->mask = size - 1;
	e->esize = esize;
	e->mine = producer ? head : tail;
	e->theirs = producer ? tail : head;
	return 0;
}
