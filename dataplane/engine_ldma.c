// SPDX-License-Identifier: MIT
/*
 * Intra-node rows moved by the RDMA device (intra_node = verbs). The engine
 * reserved the receiver's inbox space and completion entry in phase 1 and
 * wrote the message header with the CPU; the device copies the rows into
 * the message, and only then does the receiver see the delivery. The
 * sender's request is a pending one (engine_remote.c), completed when every
 * copy and send of it ended.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"
#include "locus_counters_priv.h"

int engine_ldma_create(struct locus_engine *e)
{
	e->n_lmsg = LOCUS_MIN(e->n_slots * e->inbox_slots, 16384u);
	e->lmsg = calloc(e->n_lmsg, sizeof(*e->lmsg));
	e->lmsg_free = calloc(e->n_lmsg, sizeof(*e->lmsg_free));
	e->lsrc = calloc((size_t)e->p.dims.max_tokens + 1, sizeof(*e->lsrc));
	if (!e->lmsg || !e->lmsg_free || !e->lsrc)
		return -ENOMEM;
	for (uint32_t i = 0; i < e->n_lmsg; i++)
		e->lmsg_free[e->n_lmsg_free++] = e->n_lmsg - 1 - i;
	return 0;
}

void engine_ldma_destroy(struct locus_engine *e)
{
	free(e->lmsg);
	free(e->lmsg_free);
	free(e->lsrc);
}

void locus_engine_set_ldma(struct locus_engine *e, const struct locus_engine_ldma *ldma)
{
	e->ldma = ldma;
}

/*
 * Start moving the n_src ranges in e->lsrc to dst_off (offsets in the client
 * region) and deliver d to client dst_slot when done. d's completion entry
 * was reserved in this burst (cpl_reserved): it moves to cpl_pending. Returns
 * 0, or negative with nothing started: the caller copies and delivers itself.
 */
int engine_ldma_deliver(struct locus_engine *e, int pidx, uint32_t dst_slot, uint64_t dst_off,
			uint32_t n_src, const struct locus_desc *d)
{
	struct engine_client *dc = &e->cl[dst_slot];
	struct engine_ldma_msg *m;
	uint64_t bytes = 0;
	uint32_t idx;
	int ret;

	if (!e->ldma || pidx < 0 || !e->n_lmsg_free)
		return -LOCUS_EFULL;
	idx = e->lmsg_free[e->n_lmsg_free - 1];
	m = &e->lmsg[idx];
	ret = e->ldma->copy(e->ldma->ctx, dst_off, e->lsrc, n_src, (uint64_t)(m->gen + 1) << 32 | idx);
	if (ret < 0) {
		engine_count(e, e->c.ldma_fallbacks);
		return ret;
	}
	e->n_lmsg_free--;
	for (uint32_t i = 0; i < n_src; i++)
		bytes += e->lsrc[i].len;
	m->gen++;
	m->slot = dst_slot;
	m->epoch = dc->epoch;
	m->pidx = pidx;
	m->bytes = bytes;
	m->d = *d;
	dc->cpl_reserved--;
	dc->cpl_pending++;
	e->pend[pidx].outstanding++;
	return 0;
}

void locus_engine_ldma_done(struct locus_engine *e, uint64_t cookie, int status)
{
	uint32_t idx = (uint32_t)cookie;
	struct engine_ldma_msg *m;
	struct engine_client *dc;

	if (idx >= e->n_lmsg || e->lmsg[idx].gen != (uint32_t)(cookie >> 32))
		return; /* not ours (a transport bug): never deliver twice */
	m = &e->lmsg[idx];
	m->gen++; /* a second report of the same copy no longer matches */
	dc = &e->cl[m->slot];
	if (dc->active && dc->epoch == m->epoch) {
		dc->cpl_pending--;
		if (status < 0) {
			/* the rows never arrived: the receiver is told nothing, its room comes back */
			engine_inbox_free(e, dc, m->d.slot);
		} else {
			engine_deliver(e, m->slot, &m->d);
		}
	}
	if (status < 0) {
		engine_count(e, e->c.ldma_errors);
	} else {
		engine_count(e, e->c.ldma_msgs);
		locus_counter_add(e->blk, e->c.ldma_bytes, m->bytes);
	}
	e->lmsg_free[e->n_lmsg_free++] = idx;
	engine_pending_end(e, m->pidx, status < 0 ? -EIO : 0);
}
