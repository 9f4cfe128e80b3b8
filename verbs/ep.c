// SPDX-License-Identifier: MIT
/*
 * Endpoint and peer set-up and teardown, the completion-channel wait, and
 * accessors. Connection handling lives in cm.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_err_priv.h"
#include "verbs_priv.h"

uint64_t locus_verbs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t locus_verbs_tsc_mult(void)
{
#if defined(__x86_64__)
	struct timespec d = { .tv_nsec = 2000000 };
	uint64_t t0 = locus_verbs_now_ns(), c0 = __builtin_ia32_rdtsc(), t1, c1;

	nanosleep(&d, NULL);
	t1 = locus_verbs_now_ns();
	c1 = __builtin_ia32_rdtsc();
	if (c1 <= c0 || t1 <= t0)
		return 0;
	return (uint64_t)(((unsigned __int128)(t1 - t0) << 32) / (c1 - c0));
#else
	return 0;
#endif
}

void locus_verbs_ep_params_default(struct locus_verbs_ep_params *p)
{
	if (!p->proto_version)
		p->proto_version = LOCUS_VERBS_PROTO_VERSION;
	if (!p->slot_shift)
		p->slot_shift = 14;
	if (!p->slot_count)
		p->slot_count = 256;
	if (!p->sq_depth)
		p->sq_depth = 256;
	if (!p->signal_every)
		p->signal_every = 16;
	if (!p->max_peers)
		p->max_peers = 16;
	if (!p->cq_depth)
		p->cq_depth = p->max_peers * (p->sq_depth + p->slot_count + RECV_BATCH);
	if (!p->max_inline)
		p->max_inline = 256;
	if (!p->backoff_min_ms)
		p->backoff_min_ms = 20;
	if (!p->backoff_max_ms)
		p->backoff_max_ms = 1000;
	if (!p->connect_timeout_ms)
		p->connect_timeout_ms = 2000;
	if (!p->ack_timeout)
		p->ack_timeout = 14;
	if (!p->credit_idle_us)
		p->credit_idle_us = 50;
	if (!p->dev_probe_ms)
		p->dev_probe_ms = 500;
	if (!p->stall_ms) {
		/* RC's own end: (RC_RETRY_COUNT + 1) ACK time-outs, 4.096 us << ack_timeout */
		uint64_t rc_ms = 7ull * (4096ull << LOCUS_MIN(p->ack_timeout, 31u)) / 1000000ull;

		p->stall_ms = (uint32_t)LOCUS_MIN(LOCUS_MAX(5000ull, 2 * rc_ms), 3600000ull);
	}
	p->area_len = LOCUS_ALIGN_UP(p->area_len, 64u);
}

static int check_params(const struct locus_verbs_ep_params *p, struct locus_error *err)
{
	if (p->slot_shift < LOCUS_VERBS_SLOT_SHIFT_MIN || p->slot_shift > LOCUS_VERBS_SLOT_SHIFT_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "slot_shift %u outside [%u, %u]",
				       p->slot_shift, LOCUS_VERBS_SLOT_SHIFT_MIN,
				       LOCUS_VERBS_SLOT_SHIFT_MAX);
	if (p->slot_count < LOCUS_VERBS_SLOTS_MIN || p->slot_count > LOCUS_VERBS_SLOTS_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "slot_count %u outside [%u, %u]",
				       p->slot_count, LOCUS_VERBS_SLOTS_MIN, LOCUS_VERBS_SLOTS_MAX);
	if (!LOCUS_IS_POW2(p->sq_depth) || p->sq_depth < 8 || p->sq_depth > 16384)
		return locus_error_set(err, LOCUS_ERANGE, "sq_depth %u: want a power of two in [8, 16384]",
				       p->sq_depth);
	if (p->signal_every >= p->sq_depth / 2)
		return locus_error_set(err, LOCUS_ERANGE, "signal_every %u must be < sq_depth / 2",
				       p->signal_every);
	if (p->ack_timeout > 31)
		return locus_error_set(err, LOCUS_ERANGE, "ack_timeout %u > 31", p->ack_timeout);
	if (p->area_len > LOCUS_VERBS_AREA_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "area_len %u > %u", p->area_len,
				       LOCUS_VERBS_AREA_MAX);
	if (p->max_peers > 0xffff || p->backoff_min_ms > p->backoff_max_ms)
		return locus_error_set(err, LOCUS_ERANGE, "max_peers or back-off bounds out of range");
	return 0;
}

int locus_verbs_ep_create(const struct locus_verbs_ep_params *prm, struct locus_verbs_ep **out,
			  struct locus_error *err)
{
	struct locus_verbs_ep *ep;
	int rc, fl;

	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return locus_error_set(err, ENOMEM, "out of memory");
	ep->prm = *prm;
	locus_verbs_ep_params_default(&ep->prm);
	rc = check_params(&ep->prm, err);
	if (rc < 0)
		goto err_free;
	ep->credit_idle_ns = (uint64_t)ep->prm.credit_idle_us * 1000u;
	ep->stall_ns = (uint64_t)ep->prm.stall_ms * 1000000ull;
	ep->dev_probe_ns = (uint64_t)ep->prm.dev_probe_ms * 1000000ull;
	ep->tsc_mult = locus_verbs_tsc_mult();
	ep->peers = calloc(ep->prm.max_peers, sizeof(*ep->peers));
	if (!ep->peers) {
		rc = locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	ep->ch = rdma_create_event_channel();
	if (!ep->ch) {
		rc = locus_error_set(err, errno, "rdma_create_event_channel: %s (is rdma_ucm loaded?)",
				     strerror(errno));
		goto err_peers;
	}
	fl = fcntl(ep->ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ep->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		rc = locus_error_set(err, errno, "cannot make the CM channel non-blocking");
		goto err_ch;
	}
	/* the device: listener, context, PD, CQ (dev.c: the same when it comes back) */
	rc = locus_verbs_dev_open(ep, false, err);
	if (rc < 0)
		goto err_ch;
	*out = ep;
	return 0;

err_ch:
	rdma_destroy_event_channel(ep->ch);
err_peers:
	free(ep->peers);
err_free:
	free(ep);
	return rc;
}

static void peer_free(struct locus_verbs_peer *p)
{
	locus_verbs_mr_free(&p->hs_mr);
	locus_verbs_mr_free(&p->area_tx);
	locus_verbs_mr_free(&p->inbox);
	free(p->tx_cookie);
	free(p->tx_kind);
	free(p->held);
	free(p);
}

/* Every peer handed back and its QP destroyed? */
static bool all_reaped(const struct locus_verbs_ep *ep)
{
	for (uint32_t i = 0; i < ep->n_peers; i++)
		if (ep->peers[i]->id)
			return false;
	return true;
}

void locus_verbs_ep_destroy(struct locus_verbs_ep *ep)
{
	uint64_t end;
	uint32_t i;

	if (!ep)
		return;
	/* both halves of the hand-over run here: the data thread has stopped */
	for (i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		p->active = false; /* no redial */
		if (p->pend_id) {
			rdma_reject(p->pend_id, NULL, 0);
			rdma_destroy_id(p->pend_id);
			p->pend_id = NULL;
		}
		if (p->id)
			locus_verbs_ctl_close(p, -LOCUS_EPEERDOWN);
	}
	/* let the flushed sends complete, bounded */
	end = locus_verbs_now_ns() + 2 * DRAIN_NS;
	while (!all_reaped(ep) && locus_verbs_now_ns() < end) {
		locus_verbs_poll(ep);
		locus_verbs_ctl_handover(ep);
	}
	for (i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		if (!p->id)
			continue;
		/* the device never flushed: destroy the QP first, then fail the rest */
		if (p->qp)
			rdma_destroy_qp(p->id);
		p->qp = NULL;
		locus_verbs_data_force_quiesce(p);
		locus_verbs_ctl_handover(ep);
	}
	/* drain completions of the torn-down QPs before the CQ goes */
	while (locus_verbs_poll(ep) > 0)
		;
	/* the device's objects (the caller's MRs before the PD: dev_cb.release), then memory */
	locus_verbs_dev_close(ep, false);
	for (i = 0; i < ep->n_peers; i++)
		peer_free(ep->peers[i]);
	rdma_destroy_event_channel(ep->ch);
	free(ep->ctrs);
	free(ep->peers);
	explicit_bzero(ep->prm.secret, sizeof(ep->prm.secret));
	free(ep);
}

int locus_verbs_peer_add(struct locus_verbs_ep *ep, uint16_t node_id,
			 const struct sockaddr_in *remote, struct locus_verbs_peer **out,
			 struct locus_error *err)
{
	struct locus_verbs_peer *p;
	uint64_t len;
	uint32_t i;
	int rc;

	if (ep->n_peers >= ep->prm.max_peers)
		return locus_error_set(err, LOCUS_EFULL, "endpoint already has %u peers", ep->n_peers);
	for (i = 0; i < ep->n_peers; i++)
		if (ep->peers[i]->node_id == node_id)
			return locus_error_set(err, EEXIST, "node %u already declared", node_id);
	p = calloc(1, sizeof(*p));
	if (!p)
		return locus_error_set(err, ENOMEM, "out of memory");
	p->ep = ep;
	p->idx = (uint16_t)ep->n_peers;
	p->node_id = node_id;
	p->member = true;
	p->lring.slot_count = ep->prm.slot_count;
	p->lring.slot_shift = ep->prm.slot_shift;
	p->backoff_ms = ep->prm.backoff_min_ms;
	p->tx_cookie = calloc(ep->prm.sq_depth, sizeof(*p->tx_cookie));
	p->tx_kind = calloc(ep->prm.sq_depth, sizeof(*p->tx_kind));
	p->held = calloc(ep->prm.slot_count, sizeof(*p->held));
	if (!p->tx_cookie || !p->tx_kind || !p->held) {
		rc = locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	len = ((uint64_t)ep->prm.slot_count << ep->prm.slot_shift) + LOCUS_VERBS_CTRL_LEN;
	rc = locus_verbs_mr_alloc(ep, len + ep->prm.area_len,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &p->inbox, err);
	if (rc < 0)
		goto err_free;
	p->credit_in = (volatile uint64_t *)((uint8_t *)p->inbox.addr + len - LOCUS_VERBS_CTRL_LEN);
	p->credit_src = p->credit_in + 1;
	/* the hellos: local only (a SEND lands in a posted receive's buffer) */
	rc = locus_verbs_mr_alloc(ep, HS_MR_LEN, IBV_ACCESS_LOCAL_WRITE, &p->hs_mr, err);
	if (rc < 0)
		goto err_free;
	if (ep->prm.area_len) {
		/* local only: the peer cannot write what we are about to send it */
		rc = locus_verbs_mr_alloc(ep, ep->prm.area_len, IBV_ACCESS_LOCAL_WRITE,
					  &p->area_tx, err);
		if (rc < 0)
			goto err_free;
	}
	if (remote) {
		p->active = true;
		p->remote = *remote;
		p->phase = CTL_BACKOFF;
		p->deadline_ns = locus_verbs_now_ns(); /* dial at the next service() */
	}
	ep->peers[ep->n_peers++] = p;
	*out = p;
	return 0;

err_free:
	peer_free(p);
	return rc;
}

int locus_verbs_wait(struct locus_verbs_ep *ep, int timeout_ms)
{
	struct pollfd pfd[2] = { { .fd = ep->comp->fd, .events = POLLIN },
				 { .fd = ep->ch->fd, .events = POLLIN } };
	struct ibv_cq *cq;
	void *ctx;
	int n;

	if (!locus_verbs_dev_use(&ep->dev)) {
		/* no device (being freed or reopened): only rdma_cm can say anything */
		if (poll(&pfd[1], 1, timeout_ms < 0 ? 0 : timeout_ms) < 0 && errno != EINTR)
			return -errno;
		return 0;
	}
	if (ibv_req_notify_cq(ep->cq, 0))
		return -errno;
	/* whatever completed before the notification was armed is in the CQ */
	n = locus_verbs_poll(ep);
	if (n)
		return n;
	/* about to sleep: a sender waiting for the last slots must not wait on us */
	locus_verbs_flush_all_credits(ep);
	if (poll(pfd, 2, timeout_ms < 0 ? 0 : timeout_ms) < 0)
		return errno == EINTR ? 0 : -errno;
	while (!ibv_get_cq_event(ep->comp, &cq, &ctx))
		ep->cq_events++;
	/* acknowledging takes a lock in the library: do it in batches */
	if (ep->cq_events >= 64) {
		ibv_ack_cq_events(ep->cq, ep->cq_events);
		ep->cq_events = 0;
	}
	return locus_verbs_poll(ep);
}

enum locus_verbs_peer_state locus_verbs_peer_state(const struct locus_verbs_peer *p)
{
	if (locus_verbs_link_state_of(locus_verbs_link_load(&p->link)) == LOCUS_LINK_UP)
		return LOCUS_VERBS_UP;
	switch (__atomic_load_n(&p->phase, __ATOMIC_RELAXED)) {
	case CTL_BACKOFF:
		return LOCUS_VERBS_BACKOFF;
	case CTL_CONNECTING:
	case CTL_CONNECTED:
		return LOCUS_VERBS_CONNECTING;
	case CTL_CLOSING:
		return p->active ? LOCUS_VERBS_BACKOFF : LOCUS_VERBS_DOWN;
	default:
		return LOCUS_VERBS_DOWN;
	}
}

uint16_t locus_verbs_peer_node(const struct locus_verbs_peer *p)
{
	return p->node_id;
}

const struct locus_verbs_stats *locus_verbs_peer_stats(struct locus_verbs_peer *p)
{
	const uint64_t *d = (const uint64_t *)&p->dstats, *c = (const uint64_t *)&p->cstats;
	uint64_t *s = (uint64_t *)&p->sum;

	/* every field is a u64 count: sum word by word */
	for (size_t i = 0; i < offsetof(struct locus_verbs_stats, cq_errors) / 8 + 32; i++)
		s[i] = d[i] + c[i];
	return &p->sum;
}

const struct locus_verbs_ep_stats *locus_verbs_ep_stats(struct locus_verbs_ep *ep)
{
	ep->stats_sum = ep->stats;
	ep->stats_sum.auth_refused[LOCUS_VERBS_AUTH_HELLO] +=
		__atomic_load_n(&ep->hello_refused, __ATOMIC_RELAXED);
	return &ep->stats_sum;
}

uint32_t locus_verbs_ep_max_inline(const struct locus_verbs_ep *ep)
{
	return __atomic_load_n(&ep->max_inline, __ATOMIC_RELAXED);
}

uint32_t locus_verbs_ep_max_send_sge(const struct locus_verbs_ep *ep)
{
	return ep->max_send_sge;
}

const char *locus_verbs_ep_dev_name(const struct locus_verbs_ep *ep)
{
	return ep->dev_name;
}

int locus_verbs_ep_numa_node(const struct locus_verbs_ep *ep)
{
	return ep->numa_node;
}

void *locus_verbs_peer_qp(struct locus_verbs_peer *p)
{
	return p->qp;
}

void *locus_verbs_ep_pd(struct locus_verbs_ep *ep)
{
	return ep->pd;
}

uint64_t locus_verbs_peer_raw_wrid(const struct locus_verbs_peer *p)
{
	return locus_verbs_wrid(p, p->dgen, (uint32_t)p->sq_posted);
}

void locus_verbs_peer_remote(const struct locus_verbs_peer *p, uint64_t *addr, uint32_t *rkey,
			     uint64_t *len)
{
	*addr = p->raddr;
	*rkey = p->rkey;
	*len = ((uint64_t)p->rring.slot_count << p->rring.slot_shift) + LOCUS_VERBS_CTRL_LEN +
	       p->ep->prm.area_len;
}

const volatile void *locus_verbs_peer_area(const struct locus_verbs_peer *p, uint32_t *len)
{
	uint64_t off = ((uint64_t)p->lring.slot_count << p->lring.slot_shift) + LOCUS_VERBS_CTRL_LEN;

	*len = p->ep->prm.area_len;
	return *len ? (const volatile uint8_t *)p->inbox.addr + off : NULL;
}

void *locus_verbs_peer_inbox(const struct locus_verbs_peer *p, uint64_t *len)
{
	*len = p->inbox.len;
	return p->inbox.addr;
}
