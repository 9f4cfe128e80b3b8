// SPDX-License-Identifier: MIT
/*
 * Connections: rdma_cm handling (dial, accept or refuse, establish), peer up
 * and down, reconnect with back-off. Every wait is bounded: rdma_cm events
 * are read from a non-blocking channel after poll() with a timeout, address
 * and route resolution carry a timeout, and a connection attempt that does
 * not finish within 4 x connect_timeout_ms is abandoned and retried.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "verbs_priv.h"

#define REJ_TAG 0x4c /* 'L': our reject private data: { tag, reason } */

static void fill_pdata(const struct locus_verbs_peer *p, enum locus_verbs_pdata_kind kind,
		       uint8_t *buf)
{
	const struct locus_verbs_ep *ep = p->ep;
	struct locus_verbs_pdata pd = {
		.version = ep->prm.proto_version,
		.kind = (uint8_t)kind,
		.slot_shift = (uint8_t)ep->prm.slot_shift,
		.cluster_id = ep->prm.cluster_id,
		.node_id = ep->prm.node_id,
		.slot_count = (uint16_t)ep->prm.slot_count,
		.rkey = p->inbox.rkey,
		.inbox_addr = (uintptr_t)p->inbox.addr,
	};

	memcpy(pd.secret, ep->prm.secret, sizeof(pd.secret));
	locus_verbs_pdata_encode(&pd, buf);
}

static int make_qp(struct locus_verbs_peer *p, struct rdma_cm_id *id)
{
	struct locus_verbs_ep *ep = p->ep;
	uint32_t inl = ep->max_inline ? ep->max_inline : ep->prm.max_inline;
	struct ibv_qp_init_attr qa;

	if (id->verbs != ep->ctx)
		return -EXDEV; /* routed through another device than our PD's */
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ep->prm.ack_timeout,
			    sizeof(ep->prm.ack_timeout)))
		return -errno;
	for (;;) {
		memset(&qa, 0, sizeof(qa));
		qa.send_cq = qa.recv_cq = ep->cq;
		qa.qp_type = IBV_QPT_RC;
		qa.cap.max_send_wr = ep->prm.sq_depth;
		qa.cap.max_recv_wr = ep->prm.slot_count + 2 * RECV_BATCH;
		qa.cap.max_send_sge = ep->max_send_sge;
		qa.cap.max_recv_sge = 1;
		qa.cap.max_inline_data = inl;
		qa.sq_sig_all = 0;
		if (!rdma_create_qp(id, ep->pd, &qa))
			break;
		if (inl == 0)
			return -errno;
		inl = inl > 64 ? 64 : 0; /* the device offers less inline room */
	}
	ep->max_inline = qa.cap.max_inline_data;
	p->qp = id->qp;
	p->id = id;
	return 0;
}

/* Start dialling p. */
static void dial(struct locus_verbs_peer *p)
{
	struct locus_verbs_ep *ep = p->ep;
	struct sockaddr_in src = { .sin_family = AF_INET, .sin_addr = ep->prm.local_addr };
	struct rdma_cm_id *id;

	p->state = LOCUS_VERBS_CONNECTING;
	p->deadline_ns = locus_verbs_now_ns() + 4ull * ep->prm.connect_timeout_ms * 1000000ull;
	if (rdma_create_id(ep->ch, &id, p, RDMA_PS_TCP)) {
		locus_verbs_peer_down(p, -errno);
		return;
	}
	p->id = id;
	if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&p->remote,
			      (int)ep->prm.connect_timeout_ms))
		locus_verbs_peer_down(p, -errno);
}

void locus_verbs_peer_up(struct locus_verbs_peer *p)
{
	const struct locus_verbs_callbacks *cb = &p->ep->prm.cb;

	if (p->state == LOCUS_VERBS_UP)
		return;
	p->state = LOCUS_VERBS_UP;
	p->backoff_ms = p->ep->prm.backoff_min_ms;
	if (p->stats.connects++)
		p->stats.reconnects++;
	if (cb->on_peer_up)
		cb->on_peer_up(cb->arg, p);
	if (p->state == LOCUS_VERBS_UP && p->rx_released != p->rx_credit_sent)
		locus_verbs_post_credit(p);
}

void locus_verbs_peer_down(struct locus_verbs_peer *p, int reason)
{
	struct locus_verbs_ep *ep = p->ep;
	const struct locus_verbs_callbacks *cb = &ep->prm.cb;
	uint32_t mask = ep->prm.sq_depth - 1;
	bool was_up = p->state == LOCUS_VERBS_UP;

	if (p->state != LOCUS_VERBS_UP && p->state != LOCUS_VERBS_CONNECTING)
		return;
	/* From here on completions of this connection are stale (gen) and its QP is gone. */
	p->gen++;
	if (p->id) {
		if (was_up)
			rdma_disconnect(p->id);
		if (p->qp)
			rdma_destroy_qp(p->id);
		rdma_destroy_id(p->id);
	}
	p->id = NULL;
	p->qp = NULL;
	for (; p->sq_done < p->sq_posted; p->sq_done++) {
		uint64_t s = p->sq_done;

		if (p->tx_kind[s & mask] == TX_MSG) {
			p->stats.tx_failed++;
			if (cb->on_send_done)
				cb->on_send_done(cb->arg, p, p->tx_cookie[s & mask], reason);
		}
		p->tx_kind[s & mask] = 0;
	}
	p->held_n = 0; /* held messages die with the connection */
	if (p->active) {
		p->state = LOCUS_VERBS_BACKOFF;
		p->deadline_ns = locus_verbs_now_ns() + (uint64_t)p->backoff_ms * 1000000ull;
		p->backoff_ms = LOCUS_MIN(p->backoff_ms * 2, ep->prm.backoff_max_ms);
	} else {
		p->state = LOCUS_VERBS_DOWN;
	}
	if (was_up)
		p->stats.disconnects++;
	if (cb->on_peer_down)
		cb->on_peer_down(cb->arg, p, reason);
}

static void reject(struct locus_verbs_ep *ep, struct rdma_cm_id *id, int reason)
{
	uint8_t rej[2] = { REJ_TAG, (uint8_t)reason };

	rdma_reject(id, rej, sizeof(rej));
	rdma_destroy_id(id);
	if (reason == LOCUS_VERBS_REJ_AUTH || reason == LOCUS_VERBS_REJ_CLUSTER)
		ep->stats.auth_rejects++;
	else if (reason == LOCUS_VERBS_REJ_VERSION)
		ep->stats.version_rejects++;
	else
		ep->stats.peer_rejects++;
}

static void on_connect_request(struct locus_verbs_ep *ep, struct rdma_cm_id *id,
			       const uint8_t *pd, size_t pdlen)
{
	struct locus_verbs_pdata in;
	struct locus_verbs_peer *p = NULL;
	uint8_t rep[LOCUS_VERBS_PDATA_LEN];
	struct rdma_conn_param cp;
	uint32_t i;
	int rc;

	rc = locus_verbs_pdata_decode(pd, pdlen, &in, NULL);
	if (rc == -LOCUS_EVERSION || (rc == 0 && in.version != ep->prm.proto_version))
		return reject(ep, id, LOCUS_VERBS_REJ_VERSION);
	if (rc < 0)
		return reject(ep, id, LOCUS_VERBS_REJ_INVALID);
	rc = locus_verbs_pdata_admit(&in, ep->prm.cluster_id, ep->prm.secret, LOCUS_VERBS_PD_REQ, NULL);
	if (rc == -LOCUS_EAUTH)
		return reject(ep, id, LOCUS_VERBS_REJ_AUTH);
	if (rc < 0)
		return reject(ep, id, LOCUS_VERBS_REJ_INVALID);
	for (i = 0; i < ep->n_peers; i++)
		if (ep->peers[i]->node_id == in.node_id && !ep->peers[i]->active)
			p = ep->peers[i];
	if (!p)
		return reject(ep, id, LOCUS_VERBS_REJ_PEER);
	/* a peer that comes back replaces its old connection (it restarted) */
	locus_verbs_peer_down(p, -ECONNRESET);
	if (make_qp(p, id) < 0)
		return reject(ep, id, LOCUS_VERBS_REJ_BUSY);
	id->context = p;
	p->rring.slot_count = in.slot_count;
	p->rring.slot_shift = in.slot_shift;
	p->raddr = in.inbox_addr;
	p->rkey = in.rkey;
	p->state = LOCUS_VERBS_CONNECTING;
	p->deadline_ns = locus_verbs_now_ns() + 4ull * ep->prm.connect_timeout_ms * 1000000ull;
	if (locus_verbs_peer_arm(p) < 0)
		goto err_down;
	fill_pdata(p, LOCUS_VERBS_PD_REP, rep);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = rep;
	cp.private_data_len = sizeof(rep);
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.rnr_retry_count = 7;
	if (rdma_accept(id, &cp))
		goto err_down;
	return;

err_down:
	locus_verbs_peer_down(p, -errno);
}

static void on_route_resolved(struct locus_verbs_peer *p)
{
	uint8_t req[LOCUS_VERBS_PDATA_LEN];
	struct rdma_conn_param cp;
	int rc;

	rc = make_qp(p, p->id);
	if (rc < 0)
		return locus_verbs_peer_down(p, rc);
	rc = locus_verbs_peer_arm(p);
	if (rc < 0)
		return locus_verbs_peer_down(p, rc);
	fill_pdata(p, LOCUS_VERBS_PD_REQ, req);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = req;
	cp.private_data_len = sizeof(req);
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(p->id, &cp))
		locus_verbs_peer_down(p, -errno);
}

static void on_established_active(struct locus_verbs_peer *p, const uint8_t *pd, size_t pdlen)
{
	struct locus_verbs_ep *ep = p->ep;
	struct locus_verbs_pdata in;
	int rc;

	rc = locus_verbs_pdata_decode(pd, pdlen, &in, NULL);
	if (rc == 0)
		rc = locus_verbs_pdata_admit(&in, ep->prm.cluster_id, ep->prm.secret,
					     LOCUS_VERBS_PD_REP, NULL);
	if (rc == 0 && in.node_id != p->node_id)
		rc = -LOCUS_EPROTO; /* someone else answers at that address */
	if (rc < 0) {
		p->stats.proto_errors++;
		return locus_verbs_peer_down(p, rc);
	}
	p->rring.slot_count = in.slot_count;
	p->rring.slot_shift = in.slot_shift;
	p->raddr = in.inbox_addr;
	p->rkey = in.rkey;
	locus_verbs_peer_up(p);
}

static void handle_event(struct locus_verbs_ep *ep, enum rdma_cm_event_type type, int status,
			 struct rdma_cm_id *id, const uint8_t *pd, size_t pdlen)
{
	struct locus_verbs_peer *p = id->context;

	ep->stats.cm_events++;
	if (type == RDMA_CM_EVENT_CONNECT_REQUEST)
		return on_connect_request(ep, id, pd, pdlen);
	/* events of an id we already tore down cannot arrive: rdma_destroy_id drains them */
	if (!p || p->id != id)
		return;
	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(id, (int)ep->prm.connect_timeout_ms))
			locus_verbs_peer_down(p, -errno);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		on_route_resolved(p);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (p->active)
			on_established_active(p, pd, pdlen);
		else
			locus_verbs_peer_up(p);
		break;
	case RDMA_CM_EVENT_REJECTED:
		p->stats.rejects_received++;
		if (pd && pdlen >= 2 && pd[0] == REJ_TAG)
			locus_verbs_peer_down(p, locus_verbs_reject_errno(pd[1]));
		else
			locus_verbs_peer_down(p, -ECONNREFUSED); /* nobody listening (status) */
		(void)status;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		locus_verbs_peer_down(p, -EHOSTUNREACH);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		locus_verbs_peer_down(p, -ECONNRESET);
		break;
	default:
		break;
	}
}

int locus_verbs_service(struct locus_verbs_ep *ep, int timeout_ms)
{
	struct pollfd pfd = { .fd = ep->ch->fd, .events = POLLIN };
	uint64_t now = locus_verbs_now_ns(), next = UINT64_MAX;
	uint8_t pd[256];
	int handled = 0;
	uint32_t i;

	if (timeout_ms < 0)
		timeout_ms = 0; /* never an unbounded wait */
	for (i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		if (p->state == LOCUS_VERBS_BACKOFF || p->state == LOCUS_VERBS_CONNECTING)
			next = LOCUS_MIN(next, p->deadline_ns);
	}
	if (next != UINT64_MAX) {
		uint64_t wait = next > now ? (next - now) / 1000000ull : 0;

		timeout_ms = (int)LOCUS_MIN((uint64_t)timeout_ms, wait);
	}
	if (poll(&pfd, 1, timeout_ms) > 0) {
		struct rdma_cm_event *ev;

		while (!rdma_get_cm_event(ep->ch, &ev)) {
			enum rdma_cm_event_type type = ev->event;
			struct rdma_cm_id *id = ev->id;
			int status = ev->status;
			size_t pdlen = LOCUS_MIN((size_t)ev->param.conn.private_data_len, sizeof(pd));

			/* copy and ack first: tearing an id down waits for its events' acks */
			if (ev->param.conn.private_data && pdlen)
				memcpy(pd, ev->param.conn.private_data, pdlen);
			else
				pdlen = 0;
			rdma_ack_cm_event(ev);
			handle_event(ep, type, status, id, pdlen ? pd : NULL, pdlen);
			handled++;
		}
	}
	now = locus_verbs_now_ns();
	for (i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		if (p->state == LOCUS_VERBS_BACKOFF && now >= p->deadline_ns)
			dial(p);
		else if (p->state == LOCUS_VERBS_CONNECTING && now >= p->deadline_ns)
			locus_verbs_peer_down(p, -ETIMEDOUT);
	}
	locus_verbs_counters_sync(ep);
	return handled;
}
