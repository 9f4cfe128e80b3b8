// SPDX-License-Identifier: MIT
/*
 * Client buffer regions on the engine's side. The control thread checks,
 * maps and registers a region, then hands it over with a command; the
 * engine serves requests from it until a DEL, and acknowledges the DEL only
 * when no send reading the region is in flight any more (an MR deregistered
 * under a posted WR would fail the connection, a munmap would fault).
 */
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"
#include "locus_counters_priv.h"

#define MAXR LOCUS_CLIENT_MAX_REGIONS

int engine_regions_alloc(struct locus_engine *e)
{
	size_t n = (size_t)e->n_slots * MAXR;

	if (posix_memalign((void **)&e->rcmds, LOCUS_CACHE_LINE, n * sizeof(*e->rcmds)) ||
	    posix_memalign((void **)&e->regs, LOCUS_CACHE_LINE, n * sizeof(*e->regs)))
		return -1;
	memset(e->rcmds, 0, n * sizeof(*e->rcmds));
	memset(e->regs, 0, n * sizeof(*e->regs));
	return 0;
}

void engine_regions_free(struct locus_engine *e)
{
	free(e->rcmds);
	free(e->regs);
}

uint64_t locus_engine_region_command(struct locus_engine *e, uint32_t slot, uint32_t idx,
				     enum locus_engine_region_cmd cmd,
				     const struct locus_engine_region *r)
{
	struct engine_region_cmd *c = &e->rcmds[(size_t)slot * MAXR + idx];
	uint64_t ticket = c->ticket + 1;

	c->cmd = cmd;
	if (r)
		c->r = *r;
	__atomic_store_n(&c->ticket, ticket, __ATOMIC_RELEASE);
	__atomic_add_fetch(&e->rcmd_posted, 1, __ATOMIC_RELEASE);
	return ticket;
}

int locus_engine_region_done(struct locus_engine *e, uint32_t slot, uint32_t idx,
			     uint64_t ticket)
{
	return __atomic_load_n(&e->rcmds[(size_t)slot * MAXR + idx].done, __ATOMIC_ACQUIRE) >=
	       ticket;
}

static void region_gone(struct locus_engine *e, struct engine_region *g)
{
	size_t i = (size_t)(g - e->regs);

	memset(&g->r, 0, sizeof(g->r));
	g->closing = 0;
	locus_gauge_add(e->blk, e->c.regions, -1);
	__atomic_store_n(&e->rcmds[i].done, g->del_ticket, __ATOMIC_RELEASE);
}

/* Between iterations: ADD installs, DEL closes (and finishes when idle). */
void engine_region_commands(struct locus_engine *e)
{
	uint64_t posted = __atomic_load_n(&e->rcmd_posted, __ATOMIC_ACQUIRE);

	if (likely(posted == e->rcmd_seen))
		return;
	for (size_t i = 0; i < (size_t)e->n_slots * MAXR; i++) {
		struct engine_region_cmd *c = &e->rcmds[i];
		struct engine_region *g = &e->regs[i];
		uint64_t t = __atomic_load_n(&c->ticket, __ATOMIC_ACQUIRE);

		if (t == c->done || (g->closing && g->del_ticket == t))
			continue;
		if (c->cmd == LOCUS_ENGINE_REGION_ADD) {
			/* control never reuses an index before its DEL was acknowledged */
			if (!g->r.id)
				locus_gauge_add(e->blk, e->c.regions, 1);
			g->r = c->r;
			g->inflight = 0;
			g->closing = 0;
			__atomic_store_n(&c->done, t, __ATOMIC_RELEASE);
			continue;
		}
		g->del_ticket = t;
		if (!g->r.id) {
			__atomic_store_n(&c->done, t, __ATOMIC_RELEASE);
			continue;
		}
		if (g->inflight) {
			g->closing = 1;
			e->n_closing++;
			continue;
		}
		region_gone(e, g);
	}
	e->rcmd_seen = posted;
}

/* Closing regions whose last send completed since: acknowledge their DEL. */
void engine_regions_retire(struct locus_engine *e)
{
	if (likely(!e->n_closing))
		return;
	for (size_t i = 0; i < (size_t)e->n_slots * MAXR && e->n_closing; i++) {
		struct engine_region *g = &e->regs[i];

		if (g->closing && !g->inflight) {
			e->n_closing--;
			region_gone(e, g);
		}
	}
}

struct engine_region *engine_region_get(struct locus_engine *e, uint32_t slot, uint32_t id)
{
	struct engine_region *g = &e->regs[(size_t)slot * MAXR + id % MAXR];

	if (id == 0 || g->r.id != id || g->closing)
		return NULL;
	return g;
}

void engine_region_put(struct locus_engine *e, int32_t idx)
{
	if (idx >= 0 && e->regs[idx].inflight)
		e->regs[idx].inflight--;
}
