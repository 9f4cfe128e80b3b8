// SPDX-License-Identifier: MIT
/*
 * Inter-node side of the engine: requests waiting on remote sends and
 * messages arriving from other nodes (decoder loads: engine_load.c).
 *
 * DISPATCH rows for a local rank that does not hold the placement
 * generation they were planned under are dropped, and the source rank is
 * told with a refusal: a COMBINE of no rows with LOCUS_ROWS_REFUSED, sent
 * back from here like any COMBINE (no request of ours waits on it).
 *
 * A request whose bytes leave the node is completed when the transport has
 * finished every send it needed (RDMA completion), with the first error if
 * any: the client still gets exactly one completion. Across nodes a dispatch
 * is not all-or-nothing: rows already delivered stay delivered, and the
 * completion's status says the batch did not fully go out.
 */
#include <string.h>

#include "engine_priv.h"
#include "locus_counters_priv.h"
#include "locus_wire.h"

/*
 * A send's cookie: the pending record's index, and the low 24 bits of its
 * generation (a record reused 2^24 times while one of its sends is still
 * out is not a case); the top byte stays 0 for a relay mux
 * (locus_relay.h) to name the engine in.
 */
#define COOKIE_GEN_MASK 0xffffffu
/* the cookie of a send no request waits on (a refusal): no pending index */
#define COOKIE_NO_REQUEST 0xffffffffu

uint64_t engine_cookie(const struct locus_engine *e, int idx)
{
	return (uint64_t)(e->pend[idx].gen & COOKIE_GEN_MASK) << 32 | (uint32_t)idx;
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

	if (cookie == COOKIE_NO_REQUEST) {
		if (status < 0)
			engine_count(e, e->c.remote_send_errors);
		return;
	}
	if (idx >= e->n_pend || (e->pend[idx].gen & COOKIE_GEN_MASK) != (uint32_t)(cookie >> 32) ||
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

/*
 * The headers of an arriving message, copied out of the transport's buffer
 * before they are checked: a peer's bytes are checked once and what was
 * checked is what is used and what the local client receives.
 */
struct arrival_hdrs {
	struct locus_msg_hdr m;
	union {
		struct locus_eldr_sig_hdr sig;
		struct locus_rows_hdr rows;
	};
};

/*
 * A signature from a peer gets the local path's check: against this node's
 * ELDR table when it has one; without one (a node that only decodes may run
 * without a table) against the signature's own shape, within the largest
 * table this node accepts.
 */
static int remote_sig_check(const struct locus_engine *e, const struct arrival_hdrs *a,
			    uint32_t node)
{
	uint16_t L = a->sig.n_layers, E = a->sig.n_experts;

	/* for signatures the header's ranks are the source node and the decoder */
	if (a->m.src_rank != node || a->m.dst_rank >= e->p.dims.max_decoders)
		return -LOCUS_EPROTO;
	if (e->router)
		locus_eldr_router_shape(e->router, &L, &E);
	else if (!L || !E || L > e->p.dims.max_layers || E > e->p.dims.max_experts)
		return -LOCUS_ERANGE;
	return locus_eldr_sig_hdr_check(&a->sig, a->m.payload_len, L, E, NULL);
}

/* A rows message from a peer: headers (private copies), from that node to one of ours. */
static int remote_rows_check(const struct locus_engine *e, const struct arrival_hdrs *a,
			     uint32_t node, size_t len)
{
	uint32_t gpn = e->p.dims.gpus_per_node;
	int ret = locus_rows_hdrs_check(&a->m, &a->rows, len, e->n_ranks, 0, NULL);

	if (ret < 0)
		return ret;
	if ((a->rows.flags & LOCUS_ROWS_IN_PLACE) || a->m.src_rank / gpn != node ||
	    a->m.dst_rank / gpn != e->p.dims.node_id)
		return -LOCUS_EPROTO;
	return 0;
}

/*
 * Copy a whole message into a local client's inbox, with the headers that
 * were checked (hdr_len bytes of a) over the sender's, and tell the client.
 * Rows messages get their refs checked in the copy, against those headers:
 * a refusal (-LOCUS_ERANGE) gives the inbox room back.
 */
static int deliver_local(struct locus_engine *e, int32_t slot, const struct arrival_hdrs *a,
			 size_t hdr_len, const void *msg, size_t len, uint8_t op, uint64_t id,
			 uint16_t layer, uint32_t peer)
{
	struct engine_client *c;
	struct locus_desc out;
	uint8_t *dst;
	int first;

	if (slot < 0 || !e->cl[slot].active || e->cl[slot].broken)
		return -LOCUS_EPEERDOWN;
	c = &e->cl[slot];
	if (engine_room(e, c) == 0)
		return -LOCUS_EFULL;
	first = engine_inbox_alloc(e, c, engine_span_for(e, len));
	if (first < 0)
		return first;
	dst = c->buf + locus_clients_inbox_off(e->cv, (uint32_t)first);
	memcpy(dst, msg, len);
	memcpy(dst, a, hdr_len);
	if (a->m.type != LOCUS_MSG_SIGNATURE &&
	    locus_rows_refs_check(&a->m, &a->rows, locus_rows_refs(dst), 0, NULL) < 0) {
		engine_inbox_free(e, c, (uint32_t)first);
		return -LOCUS_ERANGE; /* the only -LOCUS_ERANGE here: a bad message */
	}
	out = (struct locus_desc){
		.op = op, .layer = layer, .id = id,
		.off = locus_clients_inbox_off(e->cv, (uint32_t)first), .len = (uint32_t)len,
		.slot = (uint32_t)first, .peer = peer,
	};
	return engine_deliver(e, (uint32_t)slot, &out);
}

/*
 * Tell the source of a refused DISPATCH message a (from node) that its rows
 * to a->m.dst_rank were refused: a COMBINE of no rows with
 * LOCUS_ROWS_REFUSED, for the same batch, echoing the refused generation.
 * Once per (batch, destination): the batch's later chunks are refused
 * without a word. 0, or -LOCUS_EFULL (nothing sent: the arrival is to be
 * handed again), or another code (no way to the source's node).
 */
static int send_refusal(struct locus_engine *e, uint32_t node, const struct arrival_hdrs *a,
			uint32_t flags)
{
	struct engine_refusal *last = &e->refused[a->m.src_rank];
	size_t len = locus_rows_msg_len(0, 0, 0, 0);
	uint8_t *msg;
	int ret;

	if (last->sent && last->batch == a->rows.batch_id && last->dst_rank == a->m.dst_rank)
		return 0;
	msg = e->rt->alloc(e->rt->ctx, len);
	if (!msg)
		return -LOCUS_EFULL;
	memset(msg, 0, len);
	locus_msg_hdr_init((struct locus_msg_hdr *)msg, LOCUS_MSG_COMBINE,
			   (uint32_t)(len - sizeof(struct locus_msg_hdr)), a->rows.batch_id,
			   a->m.dst_rank, a->m.src_rank, e->seq[a->m.src_rank]);
	*locus_rows_hdr_of(msg) = (struct locus_rows_hdr){
		.magic = LOCUS_ROWS_MAGIC, .layer = a->rows.layer, .flags = flags,
		.n_chunks = 1, .rows_off = locus_rows_msg_rows_off(0, 0),
		.batch_id = a->rows.batch_id, .placement_gen = a->rows.placement_gen,
	};
	ret = e->rt->send(e->rt->ctx, node, msg, len, COOKIE_NO_REQUEST);
	if (ret < 0) {
		e->rt->free(e->rt->ctx, msg);
		return ret;
	}
	e->seq[a->m.src_rank]++;
	locus_counter_add_elem(e->blk, e->c.remote_msgs_out, node, 1);
	locus_counter_add_elem(e->blk, e->c.remote_bytes_out, node, len);
	*last = (struct engine_refusal){ .batch = a->rows.batch_id, .dst_rank = a->m.dst_rank,
					 .sent = 1 };
	return 0;
}

/*
 * A DISPATCH message a (from node) for a local rank that takes part in
 * placement changes and does not hold the generation it was planned under:
 * dropped, counted by reason, its source told (send_refusal). For a rank
 * not attached here (it left after the source planned): dropped, its source
 * told that the rank is gone. Returns 0 to deliver it, -LOCUS_EFULL to hand
 * it again later (the refusal could not go out now), -LOCUS_ESTALEPLACEMENT
 * or -LOCUS_EPEERDOWN when it was refused.
 */
static int remote_rows_placement(struct locus_engine *e, uint32_t node,
				 const struct arrival_hdrs *a, int32_t slot)
{
	int why, ret;

	if (a->m.type != LOCUS_MSG_DISPATCH)
		return 0;
	/* a batch's messages to a rank start with chunk 0: a batch id used
	 * again is a new batch, and its first refusal must go out */
	if (!a->rows.chunk)
		e->refused[a->m.src_rank].sent = 0;
	if (slot < 0 || !e->cl[slot].active || e->cl[slot].broken) {
		ret = send_refusal(e, node, a, LOCUS_ROWS_REFUSED | LOCUS_ROWS_GONE);
		if (ret == -LOCUS_EFULL)
			return ret;
		if (ret < 0)
			engine_count(e, e->c.remote_send_errors);
		return -LOCUS_EPEERDOWN;
	}
	why = engine_placement_refusal(&e->cl[slot], a->rows.placement_gen);
	if (why < 0)
		return 0;
	ret = send_refusal(e, node, a, LOCUS_ROWS_REFUSED);
	if (ret == -LOCUS_EFULL)
		return ret;
	if (ret < 0)
		engine_count(e, e->c.remote_send_errors);
	locus_counter_add_elem(e->blk, e->c.rej_placement, (uint32_t)why, 1);
	return -LOCUS_ESTALEPLACEMENT;
}

int locus_engine_remote_recv(struct locus_engine *e, uint32_t node, const void *msg, size_t len)
{
	struct arrival_hdrs a;
	int32_t slot;
	int ret;

	if (node >= e->p.dims.n_nodes || node == e->p.dims.node_id) {
		ret = -LOCUS_ERANGE;
		goto bad;
	}
	memset(&a, 0, sizeof(a));
	memcpy(&a, msg, LOCUS_MIN(len, sizeof(a)));
	ret = locus_msg_hdr_check(&a.m, len, UINT32_MAX);
	if (ret < 0)
		goto bad;
	switch (a.m.type) {
	case LOCUS_MSG_SIGNATURE:
		ret = remote_sig_check(e, &a, node);
		if (ret < 0)
			goto bad;
		ret = deliver_local(e, e->dec[a.m.dst_rank].slot, &a, sizeof(a.m) + sizeof(a.sig),
				    msg, len, LOCUS_OP_SIGNATURE_IN, a.m.id, 0, 0x80000000u | node);
		break;
	case LOCUS_MSG_DISPATCH:
	case LOCUS_MSG_COMBINE:
		ret = remote_rows_check(e, &a, node, len);
		if (ret < 0)
			goto bad;
		slot = e->rank_slot[a.m.dst_rank];
		ret = remote_rows_placement(e, node, &a, slot);
		if (ret == 0)
			ret = deliver_local(e, slot, &a, sizeof(a.m) + sizeof(a.rows), msg, len,
					    a.m.type == LOCUS_MSG_DISPATCH ? LOCUS_OP_ROWS_IN
									   : LOCUS_OP_RESULTS_IN,
					    a.rows.batch_id, a.rows.layer, a.m.src_rank);
		if (ret == -LOCUS_ERANGE)
			goto bad;
		if (ret == 0 && a.m.type == LOCUS_MSG_COMBINE && !(a.rows.flags & LOCUS_ROWS_REFUSED) &&
		    a.rows.chunk + 1 == a.rows.n_chunks)
			engine_answer_back(e, a.m.dst_rank, a.m.src_rank, a.rows.batch_id);
		break;
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
	/* a placement refusal is counted with its reason */
	if (ret < 0 && ret != -LOCUS_ESTALEPLACEMENT)
		engine_count(e, e->c.remote_undeliverable);
	return ret;
bad:
	engine_count(e, e->c.remote_bad);
	return ret;
}
