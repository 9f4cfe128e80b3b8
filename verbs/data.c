// SPDX-License-Identifier: MIT
/*
 * Data path: WRITE_WITH_IMM posting with credits and selective signalling,
 * CQ polling in bursts, RECV reposting in batches, credit return, the
 * peer's hello (the last leg of the handshake), and the data side of the
 * connection hand-over (locus_verbs_link.h). No allocation, no syscall,
 * no lock.
 *
 * A connection ends the same way whoever noticed first: the data side stops
 * posting (FAILING, or told CLOSING), control moves the QP to the error
 * state, every outstanding work request completes (the last one posted is
 * always signalled, and completions of a QP come in order, so its
 * completion means nothing is in flight: no more DMA from the senders'
 * buffers), what did not complete fine fails with the connection's reason,
 * held messages are dropped, on_peer_down runs, and only then does the data
 * side ack QUIESCED and control destroy the QP.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "verbs_priv.h"

static inline uint32_t sq_room(const struct locus_verbs_peer *p)
{
	return p->ep->prm.sq_depth - (uint32_t)(p->sq_posted - p->sq_done);
}

/* Whole length of m (buf + gathered segments); 0 if it overflows 32 bits. */
static inline uint64_t msg_len(const struct locus_verbs_msg *m)
{
	uint64_t len = m->len;

	for (uint32_t j = 0; j < m->n_sg; j++)
		len += m->sg[j].len;
	return len;
}

static inline bool data_live(const struct locus_verbs_peer *p)
{
	return p->dstate == LOCUS_LINK_ARMED || p->dstate == LOCUS_LINK_UP;
}

static void data_observe(struct locus_verbs_peer *p, uint64_t w);

/* Complete sends up to seq32 (in order) with status; 0 if seq32 is not ours. */
static void tx_complete(struct locus_verbs_peer *p, uint32_t seq32, int status)
{
	const struct locus_verbs_callbacks *cb = &p->ep->prm.cb;
	uint32_t mask = p->ep->prm.sq_depth - 1;
	uint64_t end = p->sq_done + (uint32_t)(seq32 - (uint32_t)p->sq_done) + 1;

	if (end > p->sq_posted) /* a completion for a WR we never posted */
		return;
	for (; p->sq_done < end; p->sq_done++) {
		uint64_t s = p->sq_done;

		if (p->tx_kind[s & mask] == TX_MSG) {
			if (status)
				p->dstats.tx_failed++;
			if (cb->on_send_done)
				cb->on_send_done(cb->arg, p, p->tx_cookie[s & mask], status);
		} else if (p->tx_kind[s & mask] == TX_AREA) {
			p->area_busy = false; /* the staging buffer is free again */
		}
		p->tx_kind[s & mask] = 0;
	}
}

/* The data side found p's connection broken: stop posting, ask control to flush. */
static void data_fail(struct locus_verbs_peer *p, int reason)
{
	if (!data_live(p))
		return;
	data_observe(p, locus_verbs_link_fail(&p->link, p->dgen, reason));
}

/*
 * Everything of the closing connection completed (or DRAIN_NS passed: a
 * partially failed post can leave an unsignalled tail, see the top comment;
 * control destroys the QP next): fail the rest, report, hand back.
 */
static void data_finish(struct locus_verbs_peer *p)
{
	const struct locus_verbs_callbacks *cb = &p->ep->prm.cb;
	uint32_t mask = p->ep->prm.sq_depth - 1;
	int reason = p->dreason;

	for (; p->sq_done < p->sq_posted; p->sq_done++) {
		uint64_t s = p->sq_done;

		if (p->tx_kind[s & mask] == TX_MSG) {
			p->dstats.tx_failed++;
			if (cb->on_send_done)
				cb->on_send_done(cb->arg, p, p->tx_cookie[s & mask], reason);
		}
		p->tx_kind[s & mask] = 0;
	}
	/* held messages die with the connection: the sender saw them acked */
	for (uint32_t i = 0, cnt = p->lring.slot_count; i < p->held_n; i++)
		p->dstats.rx_dropped += !(p->held[(p->held_head + i) % cnt] & HELD_DONE);
	p->held_n = 0;
	p->credit_pending = false;
	p->area_busy = false;
	p->dstate = LOCUS_LINK_IDLE; /* post / release refuse from here */
	p->ep->n_draining--;
	if (cb->on_peer_down)
		cb->on_peer_down(cb->arg, p, reason);
	/* last: from here control may destroy the QP and re-arm the ring */
	locus_verbs_link_quiesce(&p->link,
				 locus_verbs_link_pack(LOCUS_LINK_CLOSING, p->dgen, reason));
}

static void data_try_finish(struct locus_verbs_peer *p, uint64_t now)
{
	if (p->dstate != LOCUS_LINK_CLOSING)
		return;
	if (p->sq_done == p->sq_posted || now - p->drain_since_ns >= DRAIN_NS)
		data_finish(p);
}

/* Act on link word w of p (idempotent: the same word twice does nothing). */
static void data_observe(struct locus_verbs_peer *p, uint64_t w)
{
	const struct locus_verbs_callbacks *cb = &p->ep->prm.cb;
	unsigned st = locus_verbs_link_state_of(w);
	uint16_t gen = locus_verbs_link_gen_of(w);

	if (st == LOCUS_LINK_IDLE || st == LOCUS_LINK_QUIESCED)
		return; /* control's: nothing of ours */
	if (gen != p->dgen || p->dstate == LOCUS_LINK_IDLE) {
		if (p->dstate != LOCUS_LINK_IDLE && gen != p->dgen)
			return; /* cannot happen: control never skips our ack */
		/* a connection we have not seen: control reset its state (conn fields) */
		p->dgen = gen;
		p->dstate = LOCUS_LINK_IDLE;
	}
	switch (st) {
	case LOCUS_LINK_ARMED:
		if (p->dstate == LOCUS_LINK_IDLE)
			p->dstate = LOCUS_LINK_ARMED;
		break;
	case LOCUS_LINK_UP:
		if (p->dstate != LOCUS_LINK_IDLE && p->dstate != LOCUS_LINK_ARMED)
			break;
		p->dstate = LOCUS_LINK_UP;
		if (cb->on_peer_up)
			cb->on_peer_up(cb->arg, p);
		/* what arrived while armed may have released slots */
		if (p->dstate == LOCUS_LINK_UP && p->rx_released != p->rx_credit_sent)
			locus_verbs_post_credit(p);
		break;
	case LOCUS_LINK_FAILING:
		if (p->dstate == LOCUS_LINK_FAILING || p->dstate == LOCUS_LINK_CLOSING)
			break;
		p->dstate = LOCUS_LINK_FAILING;
		p->dreason = locus_verbs_link_reason_of(w);
		break;
	case LOCUS_LINK_CLOSING:
		if (p->dstate == LOCUS_LINK_CLOSING)
			break;
		p->dstate = LOCUS_LINK_CLOSING;
		p->dreason = locus_verbs_link_reason_of(w);
		p->drain_since_ns = locus_verbs_data_now_ns(p->ep);
		p->ep->n_draining++;
		data_try_finish(p, p->drain_since_ns);
		break;
	default:
		break;
	}
}

void locus_verbs_data_sync(struct locus_verbs_ep *ep)
{
	for (uint32_t i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];
		uint64_t w = locus_verbs_link_load(&p->link);

		/* the common case: nothing changed */
		if (likely(locus_verbs_link_state_of(w) == p->dstate &&
			   locus_verbs_link_gen_of(w) == p->dgen))
			continue;
		data_observe(p, w);
	}
}

void locus_verbs_data_force_quiesce(struct locus_verbs_peer *p)
{
	if (p->dstate == LOCUS_LINK_IDLE)
		return;
	if (p->dstate != LOCUS_LINK_CLOSING) {
		p->dstate = LOCUS_LINK_CLOSING;
		p->dreason = locus_verbs_link_reason_of(locus_verbs_link_load(&p->link));
		p->ep->n_draining++;
	}
	data_finish(p);
}

/* ---- sending --------------------------------------------------------------- */

int locus_verbs_post(struct locus_verbs_peer *p, const struct locus_verbs_msg *msgs, unsigned n)
{
	struct ibv_send_wr wr[32], *bad;
	struct ibv_sge sge[64];
	const struct locus_verbs_ep *ep = p->ep;
	uint32_t mask = ep->prm.sq_depth - 1;
	uint32_t max_inline = __atomic_load_n(&ep->max_inline, __ATOMIC_RELAXED);
	uint64_t released, head = p->tx_head, max;
	uint64_t lens[32];
	unsigned i, k = 0, ns = 0;
	uint8_t blocked = 0;
	int rc;

	if (unlikely(p->dstate != LOCUS_LINK_UP))
		return -LOCUS_EPEERDOWN;
	max = locus_verbs_max_msg(&p->rring);
	released = *p->credit_in;
	if (n > LOCUS_ARRAY_SIZE(wr))
		n = LOCUS_ARRAY_SIZE(wr);
	for (i = 0; i < n; i++) {
		const struct locus_verbs_msg *m = &msgs[i];
		uint32_t slots, used, idx, nsge = 1 + m->n_sg;
		uint64_t seq = p->sq_posted + k, len = msg_len(m);

		if (unlikely(len == 0 || len > max || nsge > ep->max_send_sge)) {
			if (k == 0)
				return -LOCUS_ERANGE;
			break;
		}
		if (ns + nsge > LOCUS_ARRAY_SIZE(sge))
			break; /* the rest goes in the next list */
		slots = locus_verbs_slots_for(&p->rring, len);
		used = locus_verbs_place(&p->rring, head, slots, &idx);
		if (used > locus_verbs_credits(&p->rring, head, released)) {
			p->dstats.credit_stalls++;
			blocked = BLOCKED_CREDITS;
			p->blocked_released = released;
			break;
		}
		/* keep 2 WRs for credit returns, which must never wait behind messages */
		if (sq_room(p) <= k + 2) {
			p->dstats.sq_stalls++;
			blocked = BLOCKED_SQ;
			p->blocked_done = p->sq_done;
			break;
		}
		sge[ns].addr = (uintptr_t)m->buf;
		sge[ns].length = m->len;
		sge[ns].lkey = m->lkey;
		for (uint32_t j = 0; j < m->n_sg; j++)
			sge[ns + 1 + j] = (struct ibv_sge){ .addr = m->sg[j].addr,
							    .length = m->sg[j].len,
							    .lkey = m->sg[j].lkey };
		wr[k].wr_id = locus_verbs_wrid(p, p->dgen, (uint32_t)seq);
		wr[k].next = &wr[k + 1];
		wr[k].sg_list = &sge[ns];
		wr[k].num_sge = (int)nsge;
		wr[k].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr[k].send_flags = len <= max_inline ? IBV_SEND_INLINE : 0;
		wr[k].imm_data = htonl(locus_verbs_imm_encode(idx, slots));
		wr[k].wr.rdma.remote_addr = p->raddr + ((uint64_t)idx << p->rring.slot_shift);
		wr[k].wr.rdma.rkey = p->rkey;
		if (++p->unsignaled >= ep->prm.signal_every) {
			wr[k].send_flags |= IBV_SEND_SIGNALED;
			p->unsignaled = 0;
		}
		p->tx_cookie[seq & mask] = m->cookie;
		p->tx_kind[seq & mask] = TX_MSG;
		lens[k] = len;
		head += used;
		ns += nsge;
		k++;
	}
	p->blocked = blocked;
	if (k == 0)
		return 0;
	/* the last WR of a batch is always signalled: nothing waits on a later post */
	if (!(wr[k - 1].send_flags & IBV_SEND_SIGNALED)) {
		wr[k - 1].send_flags |= IBV_SEND_SIGNALED;
		p->unsignaled = 0;
	}
	wr[k - 1].next = NULL;
	rc = ibv_post_send(p->qp, wr, &bad);
	if (unlikely(rc)) {
		/* nothing from bad on was posted; what was completes through the drain */
		unsigned posted = (unsigned)(bad - wr);

		for (i = 0; i < posted; i++) {
			p->dstats.tx_msgs++;
			p->dstats.tx_bytes += lens[i];
		}
		p->sq_posted += posted;
		data_fail(p, -rc);
		return posted ? (int)posted : -LOCUS_EPEERDOWN;
	}
	for (i = 0; i < k; i++) {
		p->dstats.tx_msgs++;
		p->dstats.tx_bytes += lens[i];
		p->dstats.tx_signaled += (wr[i].send_flags & IBV_SEND_SIGNALED) != 0;
	}
	p->dstats.tx_doorbells++;
	p->sq_posted += k;
	p->tx_head = head;
	return (int)k;
}

bool locus_verbs_post_blocked(const struct locus_verbs_peer *p)
{
	switch (p->blocked) {
	case BLOCKED_CREDITS:
		return p->dstate == LOCUS_LINK_UP && *p->credit_in == p->blocked_released;
	case BLOCKED_SQ:
		return p->dstate == LOCUS_LINK_UP && p->sq_done == p->blocked_done;
	default:
		return false;
	}
}

int locus_verbs_post_credit(struct locus_verbs_peer *p)
{
	const struct locus_verbs_ep *ep = p->ep;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	uint64_t val = p->rx_released, seq = p->sq_posted;
	int rc;

	if (p->dstate != LOCUS_LINK_UP || val == p->rx_credit_sent)
		return 0;
	if (sq_room(p) < 1) {
		p->credit_pending = true;
		return 0;
	}
	memset(&wr, 0, sizeof(wr));
	if (__atomic_load_n(&ep->max_inline, __ATOMIC_RELAXED) >= sizeof(val)) {
		sge.addr = (uintptr_t)&val;
		sge.lkey = 0;
		wr.send_flags = IBV_SEND_INLINE;
	} else {
		/* a later DMA read of a larger cumulative value is still correct */
		*p->credit_src = val;
		sge.addr = (uintptr_t)p->credit_src;
		sge.lkey = p->inbox.lkey;
	}
	sge.length = sizeof(val);
	wr.wr_id = locus_verbs_wrid(p, p->dgen, (uint32_t)seq);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags |= IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = p->raddr + ((uint64_t)p->rring.slot_count << p->rring.slot_shift);
	wr.wr.rdma.rkey = p->rkey;
	p->tx_kind[seq & (ep->prm.sq_depth - 1)] = TX_CREDIT;
	rc = ibv_post_send(p->qp, &wr, &bad);
	if (unlikely(rc)) {
		data_fail(p, -rc);
		return -rc;
	}
	p->unsignaled = 0;
	p->sq_posted++;
	p->rx_credit_sent = val;
	p->credit_pending = false;
	p->dstats.credit_writes++;
	return 1;
}

int locus_verbs_write_area(struct locus_verbs_peer *p, const void *buf, uint32_t len)
{
	const struct locus_verbs_ep *ep = p->ep;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	uint64_t seq = p->sq_posted;
	int rc;

	if (unlikely(p->dstate != LOCUS_LINK_UP))
		return -LOCUS_EPEERDOWN;
	if (unlikely(len == 0 || len > ep->prm.area_len))
		return -LOCUS_ERANGE;
	/* one in flight: the staging buffer is being read; 2 WRs stay for credits */
	if (p->area_busy || sq_room(p) <= 2)
		return -EBUSY;
	memcpy(p->area_tx.addr, buf, len);
	memset(&wr, 0, sizeof(wr));
	sge.addr = (uintptr_t)p->area_tx.addr;
	sge.length = len;
	sge.lkey = p->area_tx.lkey;
	wr.wr_id = locus_verbs_wrid(p, p->dgen, (uint32_t)seq);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (len <= __atomic_load_n(&ep->max_inline, __ATOMIC_RELAXED))
		wr.send_flags |= IBV_SEND_INLINE;
	wr.wr.rdma.remote_addr = p->raddr + ((uint64_t)p->rring.slot_count << p->rring.slot_shift) +
				 LOCUS_VERBS_CTRL_LEN;
	wr.wr.rdma.rkey = p->rkey;
	p->tx_kind[seq & (ep->prm.sq_depth - 1)] = TX_AREA;
	rc = ibv_post_send(p->qp, &wr, &bad);
	if (unlikely(rc)) {
		data_fail(p, -rc);
		return -LOCUS_EPEERDOWN;
	}
	p->unsignaled = 0;
	p->sq_posted++;
	p->area_busy = true;
	return 1;
}

bool locus_verbs_credits_pending(const struct locus_verbs_ep *ep)
{
	uint32_t i;

	for (i = 0; i < ep->n_peers; i++)
		if (ep->peers[i]->dstate == LOCUS_LINK_UP &&
		    ep->peers[i]->rx_released != ep->peers[i]->rx_credit_sent)
			return true;
	return false;
}

void locus_verbs_flush_all_credits(struct locus_verbs_ep *ep)
{
	uint32_t i;

	for (i = 0; i < ep->n_peers; i++)
		if (ep->peers[i]->dstate == LOCUS_LINK_UP &&
		    ep->peers[i]->rx_released != ep->peers[i]->rx_credit_sent)
			locus_verbs_post_credit(ep->peers[i]);
	ep->idle_since_ns = 0;
}

int locus_verbs_flush_credits(struct locus_verbs_peer *p)
{
	int rc = locus_verbs_post_credit(p);

	return rc < 0 ? rc : 0;
}

/* ---- receiving -------------------------------------------------------------- */

/* Pop released messages off the front of the held queue into rx_released. */
static void held_retire(struct locus_verbs_peer *p)
{
	uint32_t cnt = p->lring.slot_count;

	while (p->held_n && (p->held[p->held_head] & HELD_DONE)) {
		p->rx_released += p->held[p->held_head] & ~HELD_DONE;
		p->held_head = (p->held_head + 1) % cnt;
		p->held_n--;
	}
	if (p->rx_released - p->rx_credit_sent >= LOCUS_MAX(1u, cnt / 4))
		locus_verbs_post_credit(p);
}

int locus_verbs_release(struct locus_verbs_peer *p, unsigned n)
{
	uint32_t cnt = p->lring.slot_count, i, pos;

	/* not ours (the connection was handed back): nothing is held */
	if (p->dstate == LOCUS_LINK_IDLE)
		return n ? -LOCUS_ESTATE : 0;
	for (i = 0, pos = p->held_head; n && i < p->held_n; i++, pos = (pos + 1) % cnt) {
		if (!(p->held[pos] & HELD_DONE)) {
			p->held[pos] |= HELD_DONE;
			n--;
		}
	}
	held_retire(p);
	return n ? -LOCUS_ESTATE : 0;
}

static int post_recvs(struct locus_verbs_peer *p, uint16_t gen, uint32_t n)
{
	struct ibv_recv_wr wr[RECV_BATCH], *bad;
	uint32_t i, k;
	int rc;

	while (n) {
		k = LOCUS_MIN(n, RECV_BATCH);
		for (i = 0; i < k; i++) {
			wr[i].wr_id = locus_verbs_wrid(p, gen, 0) | WRID_RECV;
			wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
			wr[i].sg_list = NULL;
			wr[i].num_sge = 0;
		}
		rc = ibv_post_recv(p->qp, wr, &bad);
		if (rc)
			return -rc;
		n -= k;
	}
	return 0;
}

int locus_verbs_peer_arm(struct locus_verbs_peer *p, uint16_t gen)
{
	struct ibv_sge sge = { .addr = (uintptr_t)p->hs_mr.addr + HS_RX_OFF,
			       .length = HS_TX_OFF - HS_RX_OFF, .lkey = p->hs_mr.lkey };
	struct ibv_recv_wr wr = { .wr_id = locus_verbs_wrid(p, gen, 0) | WRID_RECV,
				  .sg_list = &sge, .num_sge = 1 }, *bad;
	int rc;

	p->tx_head = 0;
	p->sq_posted = p->sq_done = 0;
	p->unsignaled = 0;
	p->rx_head = p->rx_released = p->rx_credit_sent = 0;
	p->recv_to_post = 0;
	p->credit_pending = false;
	p->blocked = 0;
	p->held_head = p->held_n = 0;
	p->area_busy = false;
	*p->credit_in = 0;
	/*
	 * The first receive takes the peer's hello (a SEND: it needs a buffer;
	 * a longer one fails with a length error); the rest take ring messages,
	 * which carry their data in the RDMA WRITE and need none.
	 */
	memset((uint8_t *)p->hs_mr.addr + HS_RX_OFF, 0, HS_TX_OFF - HS_RX_OFF);
	rc = ibv_post_recv(p->qp, &wr, &bad);
	if (rc)
		return -rc;
	return post_recvs(p, gen, p->lring.slot_count + RECV_BATCH);
}

int locus_verbs_post_hello(struct locus_verbs_peer *p, uint16_t gen)
{
	const struct locus_verbs_ep *ep = p->ep;
	struct ibv_sge sge = { .addr = (uintptr_t)p->hs_mr.addr + HS_TX_OFF,
			       .length = LOCUS_VERBS_HELLO_LEN, .lkey = p->hs_mr.lkey };
	struct ibv_send_wr wr, *bad;
	uint64_t seq = p->sq_posted;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = locus_verbs_wrid(p, gen, (uint32_t)seq);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (LOCUS_VERBS_HELLO_LEN <= __atomic_load_n(&ep->max_inline, __ATOMIC_RELAXED))
		wr.send_flags |= IBV_SEND_INLINE;
	p->tx_kind[seq & (ep->prm.sq_depth - 1)] = TX_HELLO;
	rc = ibv_post_send(p->qp, &wr, &bad);
	if (rc) {
		p->tx_kind[seq & (ep->prm.sq_depth - 1)] = 0;
		return -rc;
	}
	p->unsignaled = 0;
	p->sq_posted++;
	return 0;
}

static void rx_complete(struct locus_verbs_peer *p, const struct ibv_wc *wc)
{
	const struct locus_verbs_callbacks *cb = &p->ep->prm.cb;
	uint32_t idx, n, used, slot;
	int keep = 0;

	if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM) ||
	    locus_verbs_ring_accept(&p->lring, p->rx_head, ntohl(wc->imm_data), wc->byte_len,
				    &idx, &n, &used) < 0) {
		p->dstats.proto_errors++;
		data_fail(p, -LOCUS_EPROTO);
		return;
	}
	(void)n;
	p->rx_head += used;
	p->dstats.rx_msgs++;
	p->dstats.rx_bytes += wc->byte_len;
	slot = (p->held_head + p->held_n) % p->lring.slot_count;
	p->held[slot] = used;
	p->held_n++;
	if (++p->recv_to_post >= RECV_BATCH) {
		if (post_recvs(p, p->dgen, p->recv_to_post) < 0) {
			data_fail(p, -EIO);
			return;
		}
		p->recv_to_post = 0;
	}
	if (cb->on_recv)
		keep = cb->on_recv(cb->arg, p,
				   (const uint8_t *)p->inbox.addr + ((uint64_t)idx << p->lring.slot_shift),
				   wc->byte_len);
	if (keep != LOCUS_VERBS_HOLD)
		p->held[slot] |= HELD_DONE;
	/* the callback may have failed the connection (a post): its slots are dead */
	if (keep != LOCUS_VERBS_HOLD && data_live(p))
		held_retire(p);
}

/*
 * The peer's hello arrived (the connection is ARMED: nothing of ours went
 * to its inbox, nothing of it is known). Check it against the MAC control
 * computed when it armed the connection (pure compares: no allocation, no
 * syscall), learn the peer's inbox, promote the link; the passive side
 * answers with its own hello before anything else can be posted. A
 * refused hello fails the connection: the peer never gets our inbox (the
 * active side's went out with its own proof, to a passive side that had
 * proved itself first).
 */
static void hello_rx(struct locus_verbs_peer *p, const struct ibv_wc *wc)
{
	unsigned want = p->active ? LOCUS_VERBS_HELLO_P : LOCUS_VERBS_HELLO_A;
	struct locus_verbs_hello h;
	int rc = -LOCUS_EPROTO;

	if (wc->opcode == IBV_WC_RECV && !(wc->wc_flags & IBV_WC_WITH_IMM) &&
	    locus_verbs_hello_decode((const uint8_t *)p->hs_mr.addr + HS_RX_OFF, wc->byte_len, want,
				     &h, NULL) == 0)
		rc = locus_verbs_hello_admit(&h, p->node_id, p->hs_expect);
	if (rc < 0) {
		__atomic_store_n(&p->ep->hello_refused, p->ep->hello_refused + 1, __ATOMIC_RELAXED);
		data_fail(p, -LOCUS_EAUTH);
		return;
	}
	p->rring.slot_count = h.slot_count;
	p->rring.slot_shift = h.slot_shift;
	p->raddr = h.inbox_addr;
	p->rkey = h.rkey;
	if (!locus_verbs_link_promote(&p->link, p->dgen)) {
		data_observe(p, locus_verbs_link_load(&p->link)); /* closing meanwhile */
		return;
	}
	if (!p->active && (rc = locus_verbs_post_hello(p, p->dgen)) < 0) {
		data_fail(p, rc); /* before on_peer_up: nothing else was posted */
		return;
	}
	/* the side that takes the link up counts it (control learns it later) */
	if (p->dstats.connects++)
		p->dstats.reconnects++;
	data_observe(p, locus_verbs_link_load(&p->link)); /* UP: on_peer_up */
}

static int wc_status_errno(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_LOC_PROT_ERR:
		return -EACCES;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -ETIMEDOUT;
	case IBV_WC_WR_FLUSH_ERR:
		return -LOCUS_EPEERDOWN;
	default:
		return -EIO;
	}
}

/* One completion of a connection the data side holds (ARMED .. CLOSING). */
static void handle_wc(struct locus_verbs_peer *p, const struct ibv_wc *wc)
{
	bool recv = wc->wr_id & WRID_RECV;

	if (unlikely(wc->status != IBV_WC_SUCCESS)) {
		/*
		 * The first error of a connection is its cause; flushes follow
		 * it, also the flushes of a close control asked for just now.
		 */
		if (data_live(p))
			data_observe(p, locus_verbs_link_load(&p->link));
		if (data_live(p)) {
			int reason = wc_status_errno(wc->status);

			/* a flush is no cause: the QP was moved to error from outside */
			if (wc->status != IBV_WC_WR_FLUSH_ERR)
				p->dstats.cq_errors[LOCUS_MIN((unsigned)wc->status, 31u)]++;
			/* what failed the hello's receive (e.g. a longer SEND) is no proof */
			if (recv && p->dstate == LOCUS_LINK_ARMED && wc->status != IBV_WC_WR_FLUSH_ERR) {
				__atomic_store_n(&p->ep->hello_refused, p->ep->hello_refused + 1,
						 __ATOMIC_RELAXED);
				reason = -LOCUS_EAUTH;
			}
			data_fail(p, reason);
		}
		if (!recv)
			tx_complete(p, (uint32_t)wc->wr_id, p->dreason);
		return;
	}
	if (!recv) {
		tx_complete(p, (uint32_t)wc->wr_id, 0);
		if (p->credit_pending)
			locus_verbs_post_credit(p);
		return;
	}
	if (!data_live(p)) {
		/* arrived as the connection failed: the peer rewrites it later */
		p->dstats.rx_dropped += wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM;
		return;
	}
	/* the first arrival of a connection is the peer's hello, and nothing else is */
	if (p->dstate == LOCUS_LINK_ARMED)
		return hello_rx(p, wc);
	rx_complete(p, wc);
}

/*
 * Sends that stopped completing: a connection whose oldest outstanding send
 * saw no completion for stall_ns fails (-ETIMEDOUT), which flushes each of
 * them once. RC's own retries end sooner; this is for a QP that stalls
 * without an error (Soft-RoCE's did after its link went down and up: no
 * completion, no error, requests pending for good). On empty polls only.
 */
static void watch_stalls(struct locus_verbs_ep *ep)
{
	uint64_t now = 0;

	for (uint32_t i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		if (p->dstate != LOCUS_LINK_UP || p->sq_done == p->sq_posted) {
			p->watch_ns = 0;
			continue;
		}
		if (!now)
			now = locus_verbs_data_now_ns(ep);
		if (!p->watch_ns || p->watch_done != p->sq_done) {
			p->watch_done = p->sq_done;
			p->watch_ns = now;
		} else if (now - p->watch_ns >= ep->stall_ns) {
			p->dstats.stalls++;
			p->watch_ns = 0;
			data_fail(p, -ETIMEDOUT);
		}
	}
}

int locus_verbs_poll(struct locus_verbs_ep *ep)
{
	struct ibv_wc wc[POLL_BURST];
	int n, i, ret;

	/*
	 * The device first: while control frees or reopens it (locus_verbs_dev.h)
	 * nothing of it is touched, and this poll is the ack that says so. No
	 * connection is ours then (they all ended before control parked it).
	 */
	if (unlikely(!locus_verbs_dev_use(&ep->dev)))
		return 0;
	locus_verbs_data_sync(ep);
	n = ibv_poll_cq(ep->cq, POLL_BURST, wc);
	/* a CQ that cannot be polled (a device gone): closing connections still end, bounded */
	ret = unlikely(n < 0) ? -EIO : n;
	if (unlikely(n < 0))
		n = 0;
	for (i = 0; i < n; i++) {
		uint32_t pidx = (uint32_t)(wc[i].wr_id >> 48);
		uint16_t gen = (uint16_t)(wc[i].wr_id >> 32) & WRID_GEN_MASK;
		struct locus_verbs_peer *p;

		if (pidx >= ep->n_peers) {
			ep->stats.stale_cqes++;
			continue;
		}
		p = ep->peers[pidx];
		/* a connection published after this poll's sync: adopt it first */
		if ((p->dgen & WRID_GEN_MASK) != gen || p->dstate == LOCUS_LINK_IDLE)
			data_observe(p, locus_verbs_link_load(&p->link));
		if ((p->dgen & WRID_GEN_MASK) != gen || p->dstate == LOCUS_LINK_IDLE) {
			ep->stats.stale_cqes++;
			/* a message of a connection already ended: it is lost to us */
			p->dstats.rx_dropped += wc[i].status == IBV_WC_SUCCESS &&
						wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM;
			continue;
		}
		p->dstats.cqes++;
		handle_wc(p, &wc[i]);
	}
	ep->cq_bursts += n > 0;
	if (unlikely(ep->n_draining)) {
		uint64_t now = locus_verbs_data_now_ns(ep);

		for (uint32_t j = 0; j < ep->n_peers; j++)
			data_try_finish(ep->peers[j], now);
	}
	if (n == 0)
		watch_stalls(ep);
	/*
	 * Announce what was released below the batching threshold once the CQ
	 * has stayed empty for credit_idle_us: a threshold alone could strand a
	 * sender that needs the last few slots (a message wrapping the ring
	 * needs up to 2n - 1 of them), while announcing at every idle poll
	 * would put a credit write on the wire ahead of every reply.
	 */
	if (n > 0) {
		ep->idle_since_ns = 0;
	} else if (locus_verbs_credits_pending(ep)) {
		uint64_t now = locus_verbs_data_now_ns(ep);

		if (!ep->idle_since_ns)
			ep->idle_since_ns = now;
		else if (now - ep->idle_since_ns >= ep->credit_idle_ns)
			locus_verbs_flush_all_credits(ep);
	}
	return ret;
}
