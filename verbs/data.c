// SPDX-License-Identifier: MIT
/*
 * Data path: WRITE_WITH_IMM posting with credits and selective signalling,
 * CQ polling in bursts, RECV reposting in batches, credit return. No
 * allocation, no syscall, no lock (one thread owns the endpoint).
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

int locus_verbs_post(struct locus_verbs_peer *p, const struct locus_verbs_msg *msgs, unsigned n)
{
	struct ibv_send_wr wr[32], *bad;
	struct ibv_sge sge[64];
	const struct locus_verbs_ep *ep = p->ep;
	uint32_t mask = ep->prm.sq_depth - 1;
	uint64_t released, head = p->tx_head, max = locus_verbs_max_msg(&p->rring);
	uint64_t lens[32];
	unsigned i, k = 0, ns = 0;
	int rc;

	if (unlikely(p->state != LOCUS_VERBS_UP))
		return -LOCUS_EPEERDOWN;
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
			p->stats.credit_stalls++;
			break;
		}
		/* keep 2 WRs for credit returns, which must never wait behind messages */
		if (sq_room(p) <= k + 2) {
			p->stats.sq_stalls++;
			break;
		}
		sge[ns].addr = (uintptr_t)m->buf;
		sge[ns].length = m->len;
		sge[ns].lkey = m->lkey;
		for (uint32_t j = 0; j < m->n_sg; j++)
			sge[ns + 1 + j] = (struct ibv_sge){ .addr = m->sg[j].addr,
							    .length = m->sg[j].len,
							    .lkey = m->sg[j].lkey };
		wr[k].wr_id = locus_verbs_wrid(p, (uint32_t)seq);
		wr[k].next = &wr[k + 1];
		wr[k].sg_list = &sge[ns];
		wr[k].num_sge = (int)nsge;
		wr[k].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr[k].send_flags = len <= ep->max_inline ? IBV_SEND_INLINE : 0;
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
		/* nothing from bad on was posted; report the failure for the whole list */
		unsigned posted = (unsigned)(bad - wr);

		for (i = 0; i < posted; i++) {
			p->stats.tx_msgs++;
			p->stats.tx_bytes += lens[i];
		}
		p->sq_posted += posted;
		locus_verbs_peer_down(p, -rc);
		return posted ? (int)posted : -LOCUS_EPEERDOWN;
	}
	for (i = 0; i < k; i++) {
		p->stats.tx_msgs++;
		p->stats.tx_bytes += lens[i];
	}
	p->sq_posted += k;
	p->tx_head = head;
	return (int)k;
}

int locus_verbs_post_credit(struct locus_verbs_peer *p)
{
	const struct locus_verbs_ep *ep = p->ep;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	uint64_t val = p->rx_released, seq = p->sq_posted;
	int rc;

	if (p->state != LOCUS_VERBS_UP || val == p->rx_credit_sent)
		return 0;
	if (sq_room(p) < 1) {
		p->credit_pending = true;
		return 0;
	}
	memset(&wr, 0, sizeof(wr));
	if (ep->max_inline >= sizeof(val)) {
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
	wr.wr_id = locus_verbs_wrid(p, (uint32_t)seq);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags |= IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = p->raddr + ((uint64_t)p->rring.slot_count << p->rring.slot_shift);
	wr.wr.rdma.rkey = p->rkey;
	p->tx_kind[seq & (ep->prm.sq_depth - 1)] = TX_CREDIT;
	rc = ibv_post_send(p->qp, &wr, &bad);
	if (unlikely(rc)) {
		locus_verbs_peer_down(p, -rc);
		return -rc;
	}
	p->unsignaled = 0;
	p->sq_posted++;
	p->rx_credit_sent = val;
	p->credit_pending = false;
	p->stats.credit_writes++;
	return 1;
}

bool locus_verbs_credits_pending(const struct locus_verbs_ep *ep)
{
	uint32_t i;

	for (i = 0; i < ep->n_peers; i++)
		if (ep->peers[i]->rx_released != ep->peers[i]->rx_credit_sent &&
		    ep->peers[i]->state == LOCUS_VERBS_UP)
			return true;
	return false;
}

void locus_verbs_flush_all_credits(struct locus_verbs_ep *ep)
{
	uint32_t i;

	for (i = 0; i < ep->n_peers; i++)
		if (ep->peers[i]->rx_released != ep->peers[i]->rx_credit_sent)
			locus_verbs_post_credit(ep->peers[i]);
	ep->idle_since_ns = 0;
}

int locus_verbs_flush_credits(struct locus_verbs_peer *p)
{
	int rc = locus_verbs_post_credit(p);

	return rc < 0 ? rc : 0;
}

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

	for (i = 0, pos = p->held_head; n && i < p->held_n; i++, pos = (pos + 1) % cnt) {
		if (!(p->held[pos] & HELD_DONE)) {
			p->held[pos] |= HELD_DONE;
			n--;
		}
	}
	held_retire(p);
	return n ? -LOCUS_ESTATE : 0;
}

static int post_recvs(struct locus_verbs_peer *p, uint32_t n)
{
	struct ibv_recv_wr wr[RECV_BATCH], *bad;
	uint32_t i, k;
	int rc;

	while (n) {
		k = LOCUS_MIN(n, RECV_BATCH);
		for (i = 0; i < k; i++) {
			wr[i].wr_id = locus_verbs_wrid(p, 0);
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

int locus_verbs_peer_arm(struct locus_verbs_peer *p)
{
	p->tx_head = 0;
	p->sq_posted = p->sq_done = 0;
	p->unsignaled = 0;
	p->rx_head = p->rx_released = p->rx_credit_sent = 0;
	p->recv_to_post = 0;
	p->credit_pending = false;
	p->held_head = p->held_n = 0;
	*p->credit_in = 0;
	return post_recvs(p, p->lring.slot_count + RECV_BATCH);
}

static void tx_complete(struct locus_verbs_peer *p, uint32_t seq32)
{
	const struct locus_verbs_callbacks *cb = &p->ep->prm.cb;
	uint32_t mask = p->ep->prm.sq_depth - 1;
	uint64_t end = p->sq_done + (uint32_t)(seq32 - (uint32_t)p->sq_done) + 1;

	if (end > p->sq_posted) /* a completion for a WR we never posted */
		return;
	for (; p->sq_done < end; p->sq_done++) {
		uint64_t s = p->sq_done;

		if (p->tx_kind[s & mask] == TX_MSG && cb->on_send_done)
			cb->on_send_done(cb->arg, p, p->tx_cookie[s & mask], 0);
		p->tx_kind[s & mask] = 0;
	}
	if (p->credit_pending)
		locus_verbs_post_credit(p);
}

static void rx_complete(struct locus_verbs_peer *p, const struct ibv_wc *wc)
{
	const struct locus_verbs_callbacks *cb = &p->ep->prm.cb;
	uint32_t idx, n, used, slot;
	uint16_t gen = p->gen;
	int keep = 0;

	if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM) ||
	    locus_verbs_ring_accept(&p->lring, p->rx_head, ntohl(wc->imm_data), wc->byte_len,
				    &idx, &n, &used) < 0) {
		p->stats.proto_errors++;
		locus_verbs_peer_down(p, -LOCUS_EPROTO);
		return;
	}
	(void)n;
	p->rx_head += used;
	p->stats.rx_msgs++;
	p->stats.rx_bytes += wc->byte_len;
	slot = (p->held_head + p->held_n) % p->lring.slot_count;
	p->held[slot] = used;
	p->held_n++;
	if (++p->recv_to_post >= RECV_BATCH) {
		if (post_recvs(p, p->recv_to_post) < 0) {
			locus_verbs_peer_down(p, -EIO);
			return;
		}
		p->recv_to_post = 0;
	}
	if (cb->on_recv)
		keep = cb->on_recv(cb->arg, p,
				   (const uint8_t *)p->inbox.addr + ((uint64_t)idx << p->lring.slot_shift),
				   wc->byte_len);
	/* the callback may have taken the peer down (and re-armed nothing): check gen */
	if (p->gen != gen || !p->qp)
		return;
	if (keep != LOCUS_VERBS_HOLD) {
		p->held[slot] |= HELD_DONE;
		held_retire(p);
	}
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

int locus_verbs_poll(struct locus_verbs_ep *ep)
{
	struct ibv_wc wc[POLL_BURST];
	int n, i;

	n = ibv_poll_cq(ep->cq, POLL_BURST, wc);
	if (unlikely(n < 0))
		return -EIO;
	for (i = 0; i < n; i++) {
		uint32_t pidx = (uint32_t)(wc[i].wr_id >> 48);
		uint16_t gen = (uint16_t)(wc[i].wr_id >> 32);
		struct locus_verbs_peer *p;

		if (pidx >= ep->n_peers || (p = ep->peers[pidx])->gen != gen || !p->qp) {
			ep->stats.stale_cqes++;
			continue;
		}
		/*
		 * The passive side may see the first message before its ESTABLISHED
		 * event: the connection is up. The active side learns the peer's
		 * inbox only from ESTABLISHED, so it just receives until then.
		 */
		if (p->state == LOCUS_VERBS_CONNECTING && !p->active)
			locus_verbs_peer_up(p);
		if (unlikely(wc[i].status != IBV_WC_SUCCESS)) {
			p->stats.cq_errors[LOCUS_MIN((unsigned)wc[i].status, 31u)]++;
			locus_verbs_peer_down(p, wc_status_errno(wc[i].status));
			continue;
		}
		if (wc[i].opcode & IBV_WC_RECV)
			rx_complete(p, &wc[i]);
		else
			tx_complete(p, (uint32_t)wc[i].wr_id);
	}
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
		uint64_t now = locus_verbs_now_ns();

		if (!ep->idle_since_ns)
			ep->idle_since_ns = now;
		else if (now - ep->idle_since_ns >= ep->credit_idle_ns)
			locus_verbs_flush_all_credits(ep);
	}
	return n;
}
