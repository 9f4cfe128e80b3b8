// SPDX-License-Identifier: MIT
/* Client side of the signature cache: blocks ROUTE and EVICT (locus_client.h). */
#include <errno.h>

#include "locus_blocks.h"
#include "locus_client.h"
#include "locus_err_priv.h"

/* The stage from off on, 8-byte aligned, or NULL (err says). */
static uint8_t *stage_at(struct locus_client *c, uint64_t off, size_t *room,
			 struct locus_error *err)
{
	uint64_t size;
	uint8_t *stage = locus_client_stage(c, &size);

	if (!stage || off % 8 || off >= size) {
		locus_error_set(err, LOCUS_ERANGE, "stage offset %llu: not 8-byte aligned or "
				"past the %llu-byte stage", (unsigned long long)off,
				(unsigned long long)size);
		return NULL;
	}
	*room = size - off;
	return stage + off;
}

static int submit(struct locus_client *c, uint8_t op, uint64_t off, long len, uint64_t id,
		  struct locus_error *err)
{
	struct locus_desc d = { .op = op, .id = id, .off = off, .len = (uint32_t)len };

	if (locus_client_submit(c, &d, 1) != 1)
		return locus_error_set(err, LOCUS_EFULL, "submit ring full");
	return 0;
}

int locus_client_route_blocks(struct locus_client *c, uint64_t off,
			      const struct locus_blocks_route *r, uint64_t id,
			      struct locus_error *err)
{
	size_t room;
	uint8_t *p = stage_at(c, off, &room, err);
	long len;

	if (!p)
		return -LOCUS_ERANGE;
	len = locus_blocks_build(p, room, r, err);
	if (len < 0)
		return (int)len;
	return submit(c, LOCUS_OP_ROUTE_BLOCKS, off, len, id, err);
}

int locus_client_evict(struct locus_client *c, uint64_t off, const uint64_t *hashes, uint32_t n,
		       uint64_t id, struct locus_error *err)
{
	size_t room;
	uint8_t *p = stage_at(c, off, &room, err);
	long len;

	if (!p)
		return -LOCUS_ERANGE;
	len = locus_evict_build(p, room, hashes, n, err);
	if (len < 0)
		return (int)len;
	return submit(c, LOCUS_OP_EVICT, off, len, id, err);
}
