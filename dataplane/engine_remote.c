// SPDX-License-Identifier: MIT
/*
 * Inter-node side of the engine: requests waiting on remote sends and
 * messages arriving from other nodes (decoder loads: engine_load.c).
 *
 * A request whose bytes leave the node is completed when the transport has
 * finished every send it needed (RDMA completion), with the first error if
 * any: the client still gets exactly one completion. Across nodes a dispatch
 * is not all-or-nothing: rows already delivered stay delivered, and the
 * completion's status says the batch did not fully go out.
 */
#include <string.h>

#include "engine_priv.h"
#include "locus_wire.h"

uint64_t engine_cookie(const struct locus_engine *e, int idx)
{
	return (uint64_t)e->pend[idx].gen << 32 | (uint32_t)idx;
}

int engine_remote_peer_up(struct locus_engine *e, uint32_t node)
{
	return e->rt && node < e->p.dims.n_nodes && node != e->p.dims.node_id &&
	       e->rt->peer_up(e->rt->ctx, node);
}

/*
 * Take a pending record for the request d of client slot: its completion
 * entry moves from this burst's reservation to the pending count.
 */
int engine_pending_get(struct locus_engine *e, uint32_t slot, const struct locus_desc *d,
		       uint64_t t0, uint64_t hist)
{
	struct engine_client *c = &e->cl[slot];
	struct engine_pending *p;
	uint32_t idx;

	if (!e->n_pend_free)
		return -LOCUS_EFULL;
	idx = e->pend_free[--e->n_pend_free];
	p = &e->pend[idx];
	p->gen++;
	p->slot = slot;
	p->outstanding = 1; /* held until armed */
	p->status = 0;
	p->t0 = t0;
	p->hist = hist;
	p->region = -1;
	p->d = *d;
	p->epoch = c->epoch;
	if (c->cpl_reserved)
		c->cpl_reserved--;
	c->cpl_pending++;
	return (int)idx;
}

static void pending_complete(struct locus_engine *e, uint32_t idx)
{
	struct engine_pending *p = &e->pend[idx];
	struct engine_client *c = &e->cl[p->slot];

	if (p->status < 0)
		p->d.status = p->status;
	engine_region_put(e, p->region);
	/* a client that left (or a new one in its slot) is owed nothing */
	if (c->active && c->epoch == p->epoch) {
		c->cpl_pending--;
		engine_deliver(e, p->slot, &p->d);
		locus_hist_record(e->blk, p->hist, (e->p.now() - p->t0) * 1000000000ull / e->p.tsc_hz);
	}
	e->pend_free[e->n_pend_free++] = idx;
}

/* Sends of the request are all issued: complete now if they are done too. */
void engine_pending_arm(struct locus_engine *e, int idx, int status)
{
	struct engine_pending *p = &e->pend[idx];

	if (status < 0 && p->status == 0)
		p->status = status;
	if (--p->outstanding == 0)
		pending_complete(e, (uint32_t)idx);
}

/*
 * The transport's answer ret to a send of request idx: on failure buf comes
 * back and the request carries the error; on success the send is counted.
 */
static int pending_sent(struct locus_engine *e, int idx, uint32_t node, void *buf, size_t len,
			int ret)
{
	if (ret < 0) {
		e->pend[idx].outstanding--;
		e->rt->free(e->rt->ctx, buf);
		engine_pending_fail(e, idx, ret);
		engine_count(e, e->c.remote_send_errors);
		return ret;
	}
	locus_counter_add_elem(e->blk, e->c.remote_msgs_out, node, 1);
	locus_counter_add_elem(e->blk, e->c.remote_bytes_out, node, len);
	return 0;
}

/* Send one message of request idx to node; the transport owns buf on success. */
int engine_pending_send(struct locus_engine *e, int idx, uint32_t node, void *buf, size_t len)
{
	e->pend[idx].outstanding++;
	return pending_sent(e, idx, node, buf, len,
			    e->rt->send(e->rt->ctx, node, buf, len, engine_cookie(e, idx)));
}

/* The same with the rows gathered from a region (send_sg); len: the whole message. */
int engine_pending_send_sg(struct locus_engine *e, int idx, uint32_t node, void *buf,
			   size_t hdr_len, const struct locus_engine_sge *sg, uint32_t n_sg,
			   size_t len)
{
	e->pend[idx].outstanding++;
	return pending_sent(e, idx, node, buf, len,
			    e->rt->send_sg(e->rt->ctx, node, buf, hdr_len, sg, n_sg,
					   engine_cookie(e, idx)));
}

/* A message of request idx could not be sent at all: its status says so. */
void engine_pending_fail(struct locus_engine *e, int idx, int status)
{
	if (e->pend[idx].status == 0)
		e->pend[idx].status = status;
}

/* Request idx's sends read region g: g stays until the request completes. */
void engine_pending_hold_region(struct locus_engine *e, int idx, struct engine_region *g)
{
	e->pend[idx].region = (int32_t)(g - e->regs);
	g->inflight++;
}

void locus_engine_remote_done(struct locus_engine *e, uint64_t cookie, int status)
{
	uint32_t idx = (uint32_t)cookie;

	if (idx >= e->n_pend || e->pend[idx].gen != (uint32_t)(cookie >> 32) ||
	    e->pend[idx].outstanding == 0)
		return; /* not ours (a transport bug): never complete twice */
	if (status < 0)
		engine_count(e, e->c.remote_send_errors);
	engine_pending_end(e, (int)idx, status);
}

/* One piece of work of request idx ended (a send, a DMA copy). */
void engine_pending_end(struct locus_engine *e, int idx, int status)
{
	struct engine_pending *p = &e->pend[idx];

	if (status < 0 && p->status == 0)
		p->status = status;
	if (--p->outstanding == 0)
		pending_complete(e, (uint32_t)idx);
}

/* ---- arriving messages ---------------------------------------------------------------- */

/* Copy a whole message into a local client's inbox and tell it. */
static int deliver_local(struct locus_engine *e, int32_t slot, const void *msg, size_t len,
			 uint8_t op, uint64_t id, uint16_t layer, uint32_t peer)
{
	struct engine_client *c;
	struct locus_desc out;
	int first;

	if (slot < 0 || !e->cl[slot].active || e->cl[slot].broken)
		return -LOCUS_EPEERDOWN;
	c = &e->cl[slot];
	if (engine_room(e, c) == 0)
		return -LOCUS_EFULL;
	first = engine_inbox_alloc(e, c, engine_span_for(e, len));
	if (first < 0)
		return first;
	memcpy(c->buf + locus_clients_inbox_off(e->cv, (uint32_t)first), msg, len);
	out = (struct locus_desc){
		.op = op, .layer = layer, .id = id,
		.off = locus_clients_inbox_off(e->cv, (uint32_t)first), .len = (uint32_t)len,
		.slot = (uint32_t)first, .peer = peer,
	};
	return engine_deliver(e, (uint32_t)slot, &out);
}

int locus_engine_remote_recv(struct locus_engine *e, uint32_t node, const void *msg, size_t len)
{
	const struct locus_msg_hdr *h = msg;
	int ret;

	if (node >= e->p.dims.n_nodes || node == e->p.dims.node_id) {
		ret = -LOCUS_ERANGE;
		goto bad;
	}
	ret = locus_msg_hdr_check(h, len, UINT32_MAX);
	if (ret < 0)
		goto bad;
	switch (h->type) {
	case LOCUS_MSG_SIGNATURE: {
		const struct locus_eldr_sig_hdr *sh = (const void *)(h + 1);

		/* for signatures the header's ranks are the source node and the decoder */
		if (h->src_rank != node || h->dst_rank >= e->p.dims.max_decoders ||
		    h->payload_len < sizeof(*sh) || sh->magic != LOCUS_ELDR_SIG_MAGIC ||
		    h->payload_len != locus_eldr_sig_len(sh->n_layers, sh->n_experts)) {
			ret = -LOCUS_EPROTO;
			goto bad;
		}
		ret = deliver_local(e, e->dec[h->dst_rank].slot, msg, len, LOCUS_OP_SIGNATURE_IN,
				    h->id, 0, 0x80000000u | node);
		break;
	}
	case LOCUS_MSG_DISPATCH:
	case LOCUS_MSG_COMBINE: {
		const struct locus_rows_hdr *rh;

		ret = locus_rows_msg_check(msg, len, e->n_ranks, 0, NULL);
		if (ret < 0)
			goto bad;
		rh = locus_rows_hdr_of((void *)msg);
		if ((rh->flags & LOCUS_ROWS_IN_PLACE) ||
		    h->src_rank / e->p.dims.gpus_per_node != node ||
		    h->dst_rank / e->p.dims.gpus_per_node != e->p.dims.node_id) {
			ret = -LOCUS_EPROTO;
			goto bad;
		}
		ret = deliver_local(e, e->rank_slot[h->dst_rank], msg, len,
				    h->type == LOCUS_MSG_DISPATCH ? LOCUS_OP_ROWS_IN
								  : LOCUS_OP_RESULTS_IN,
				    rh->batch_id, rh->layer, h->src_rank);
		break;
	}
	default:
		ret = -LOCUS_EPROTO;
		goto bad;
	}
	/* no room at the receiver now: the transport keeps the message and
	 * hands it again (its credits hold the sender back meanwhile) */
	if (ret == -LOCUS_EFULL)
		return ret;
	locus_counter_add_elem(e->blk, e->c.remote_msgs_in, node, 1);
	locus_counter_add_elem(e->blk, e->c.remote_bytes_in, node, len);
	if (ret < 0)
		engine_count(e, e->c.remote_undeliverable);
	return ret;
bad:
	engine_count(e, e->c.remote_bad);
	return ret;
}
