// SPDX-License-Identifier: MIT
/*
 * Connections, the control side: rdma_cm handling (dial, accept or refuse,
 * establish), QP creation and destruction, reconnect with back-off, and the
 * control half of the hand-over to the data side (locus_verbs_link.h).
 * Every wait is bounded: rdma_cm events are read from a non-blocking channel
 * after poll() with a timeout, address and route resolution carry a timeout,
 * and a connection attempt that does not finish within 4 x
 * connect_timeout_ms is abandoned and retried.
 *
 * Control never frees what the data side may touch: a connection is taken
 * down by moving its QP to the error state and asking the data side to let
 * go (CLOSING); the QP and its rdma_cm id are destroyed once the data side
 * acked (QUIESCED). A returning peer's connect request waits (not accepted,
 * not refused) until its old connection is gone.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "verbs_priv.h"

/*
 * RC transport retries before a work request fails (the passive side takes
 * the dialler's from the REQ): a dead or black-holed link must end in an
 * error, so every outstanding send fails once and the connection is redialled.
 * Soft-RoCE takes 7 for "retry forever" (its completer never counts 7 down),
 * which left requests pending for as long as a link stayed black-holed; 6 is
 * finite everywhere: 7 time-outs of ack_timeout (470 ms at the default 14).
 */
#define RC_RETRY_COUNT 6

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
	uint32_t cur = __atomic_load_n(&ep->max_inline, __ATOMIC_RELAXED);
	uint32_t inl = cur ? cur : ep->prm.max_inline;
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
	/* read by the data side of other peers: the same value every time */
	if (cur != qa.cap.max_inline_data)
		__atomic_store_n(&ep->max_inline, qa.cap.max_inline_data, __ATOMIC_RELAXED);
	p->qp = id->qp;
	p->id = id;
	return 0;
}

void locus_verbs_ctl_close(struct locus_verbs_peer *p, int reason)
{
	uint64_t w = locus_verbs_link_load(&p->link);

	if (p->phase == CTL_CLOSING)
		return;
	if (locus_verbs_link_state_of(w) == LOCUS_LINK_UP || p->phase == CTL_CONNECTED)
		p->cstats.disconnects++;
	/* first the word, so that the flushes below are not taken for the cause */
	locus_verbs_link_close(&p->link, reason);
	ctl_set_phase(p, CTL_CLOSING);
	if (p->qp) {
		/* everything outstanding completes (flushed) before the data side acks */
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		ibv_modify_qp(p->qp, &a, IBV_QP_STATE);
		rdma_disconnect(p->id); /* tell the peer; harmless if never connected */
	}
}

static void accept_request(struct locus_verbs_peer *p, struct rdma_cm_id *id,
			   const struct locus_verbs_pdata *in);

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

/* The data side let go of p's connection: destroy it, then redial or accept. */
static void ctl_reap(struct locus_verbs_peer *p)
{
	struct locus_verbs_ep *ep = p->ep;
	int32_t reason;

	if (!locus_verbs_link_reap(&p->link, &reason))
		return;
	if (p->id) {
		if (p->qp)
			rdma_destroy_qp(p->id);
		rdma_destroy_id(p->id);
	}
	p->id = NULL;
	p->qp = NULL;
	if (p->active) {
		ctl_set_phase(p, CTL_BACKOFF);
		p->deadline_ns = locus_verbs_now_ns() + (uint64_t)p->backoff_ms * 1000000ull;
		p->backoff_ms = LOCUS_MIN(p->backoff_ms * 2, ep->prm.backoff_max_ms);
		return;
	}
	ctl_set_phase(p, CTL_DOWN);
	if (p->pend_id) {
		struct rdma_cm_id *id = p->pend_id;

		p->pend_id = NULL;
		accept_request(p, id, &p->pend_pd);
	}
}

/* Start dialling p. */
static void dial(struct locus_verbs_peer *p)
{
	struct locus_verbs_ep *ep = p->ep;
	struct sockaddr_in src = { .sin_family = AF_INET, .sin_addr = ep->prm.local_addr };
	struct rdma_cm_id *id;

	ctl_set_phase(p, CTL_CONNECTING);
	p->deadline_ns = locus_verbs_now_ns() + 4ull * ep->prm.connect_timeout_ms * 1000000ull;
	if (rdma_create_id(ep->ch, &id, p, RDMA_PS_TCP))
		return locus_verbs_ctl_close(p, -errno);
	p->id = id;
	if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&p->remote,
			      (int)ep->prm.connect_timeout_ms))
		locus_verbs_ctl_close(p, -errno);
}

/* The connection of p is established: hand it to the data side as UP. */
static void ctl_up(struct locus_verbs_peer *p)
{
	if (locus_verbs_link_publish_up(&p->link, p->cgen) < 0)
		return; /* failing already: the hand-over takes it down */
	ctl_set_phase(p, CTL_CONNECTED);
	p->backoff_ms = p->ep->prm.backoff_min_ms;
	if (p->cstats.connects++)
		p->cstats.reconnects++;
}

/* Make the QP, post receives and publish the connection ARMED (gen + 1). */
static int ctl_arm(struct locus_verbs_peer *p, struct rdma_cm_id *id)
{
	uint16_t gen = locus_verbs_link_next_gen(&p->link);
	int rc;

	rc = make_qp(p, id);
	if (rc < 0)
		return rc;
	rc = locus_verbs_peer_arm(p, gen);
	if (rc < 0)
		return rc;
	p->cgen = gen;
	rc = locus_verbs_link_arm(&p->link);
	return rc < 0 ? rc : 0;
}

static void accept_request(struct locus_verbs_peer *p, struct rdma_cm_id *id,
			   const struct locus_verbs_pdata *in)
{
	struct locus_verbs_ep *ep = p->ep;
	uint8_t rep[LOCUS_VERBS_PDATA_LEN];
	struct rdma_conn_param cp;
	int rc;

	id->context = p;
	p->rring.slot_count = in->slot_count;
	p->rring.slot_shift = in->slot_shift;
	p->raddr = in->inbox_addr;
	p->rkey = in->rkey;
	ctl_set_phase(p, CTL_CONNECTING);
	p->deadline_ns = locus_verbs_now_ns() + 4ull * ep->prm.connect_timeout_ms * 1000000ull;
	rc = ctl_arm(p, id);
	if (rc < 0) {
		if (!p->id) { /* no QP: nothing to hand over */
			ctl_set_phase(p, CTL_DOWN);
			return reject(ep, id, LOCUS_VERBS_REJ_BUSY);
		}
		rdma_reject(p->id, NULL, 0);
		return locus_verbs_ctl_close(p, rc);
	}
	fill_pdata(p, LOCUS_VERBS_PD_REP, rep);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = rep;
	cp.private_data_len = sizeof(rep);
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.rnr_retry_count = 7;
	if (rdma_accept(id, &cp))
		locus_verbs_ctl_close(p, -errno);
}

static void on_connect_request(struct locus_verbs_ep *ep, struct rdma_cm_id *id,
			       const uint8_t *pd, size_t pdlen)
{
	struct locus_verbs_pdata in;
	struct locus_verbs_peer *p = NULL;
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
	if (p->phase == CTL_DOWN && !p->id)
		return accept_request(p, id, &in);
	/*
	 * A peer that comes back replaces its old connection (it restarted):
	 * the request waits until the data side let go of the old one. A newer
	 * request replaces an older waiting one.
	 */
	if (p->pend_id)
		reject(ep, p->pend_id, LOCUS_VERBS_REJ_BUSY);
	id->context = NULL;
	p->pend_id = id;
	p->pend_pd = in;
	locus_verbs_ctl_close(p, -ECONNRESET);
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
		p->cstats.proto_errors++;
		return locus_verbs_ctl_close(p, rc);
	}
	/* the data side reads these only once the link is UP (release below) */
	p->rring.slot_count = in.slot_count;
	p->rring.slot_shift = in.slot_shift;
	p->raddr = in.inbox_addr;
	p->rkey = in.rkey;
	ctl_up(p);
}

static void handle_event(struct locus_verbs_ep *ep, enum rdma_cm_event_type type,
			 struct rdma_cm_id *id, const uint8_t *pd, size_t pdlen)
{
	struct locus_verbs_peer *p = id->context;

	ep->stats.cm_events++;
	if (type == RDMA_CM_EVENT_CONNECT_REQUEST)
		return on_connect_request(ep, id, pd, pdlen);
	if (!p) {
		/* a waiting request whose dialler gave up */
		for (uint32_t i = 0; i < ep->n_peers; i++)
			if (ep->peers[i]->pend_id == id) {
				ep->peers[i]->pend_id = NULL;
				rdma_destroy_id(id);
			}
		return;
	}
	/* events of an id we already destroyed cannot arrive: rdma_destroy_id drains them */
	if (p->id != id || p->phase == CTL_CLOSING)
		return;
	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(id, (int)ep->prm.connect_timeout_ms))
			locus_verbs_ctl_close(p, -errno);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED: {
		uint8_t req[LOCUS_VERBS_PDATA_LEN];
		struct rdma_conn_param cp;
		int rc = ctl_arm(p, id);

		if (rc < 0)
			return locus_verbs_ctl_close(p, rc);
		fill_pdata(p, LOCUS_VERBS_PD_REQ, req);
		memset(&cp, 0, sizeof(cp));
		cp.private_data = req;
		cp.private_data_len = sizeof(req);
		cp.responder_resources = 1;
		cp.initiator_depth = 1;
		cp.retry_count = RC_RETRY_COUNT;
		cp.rnr_retry_count = 7;
		if (rdma_connect(id, &cp))
			locus_verbs_ctl_close(p, -errno);
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		if (p->active)
			on_established_active(p, pd, pdlen);
		else
			ctl_up(p);
		break;
	case RDMA_CM_EVENT_REJECTED:
		p->cstats.rejects_received++;
		if (pd && pdlen >= 2 && pd[0] == REJ_TAG)
			locus_verbs_ctl_close(p, locus_verbs_reject_errno(pd[1]));
		else
			locus_verbs_ctl_close(p, -ECONNREFUSED); /* nobody listening */
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		locus_verbs_ctl_close(p, -EHOSTUNREACH);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		locus_verbs_ctl_close(p, -ECONNRESET);
		break;
	default:
		break;
	}
}

/* The data side's half of the hand-over: failures to flush, quiesced connections to reap. */
void locus_verbs_ctl_handover(struct locus_verbs_ep *ep)
{
	for (uint32_t i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];
		uint64_t w = locus_verbs_link_load(&p->link);

		switch (locus_verbs_link_state_of(w)) {
		case LOCUS_LINK_FAILING:
			locus_verbs_ctl_close(p, locus_verbs_link_reason_of(w));
			break;
		case LOCUS_LINK_QUIESCED:
			ctl_reap(p);
			break;
		default:
			break;
		}
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

		if (p->phase == CTL_BACKOFF || p->phase == CTL_CONNECTING)
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
			size_t pdlen = LOCUS_MIN((size_t)ev->param.conn.private_data_len, sizeof(pd));

			/* copy and ack first: tearing an id down waits for its events' acks */
			if (ev->param.conn.private_data && pdlen)
				memcpy(pd, ev->param.conn.private_data, pdlen);
			else
				pdlen = 0;
			rdma_ack_cm_event(ev);
			handle_event(ep, type, id, pdlen ? pd : NULL, pdlen);
			handled++;
		}
	}
	/* after the events: a reject or disconnect says why better than the flushes */
	locus_verbs_ctl_handover(ep);
	now = locus_verbs_now_ns();
	for (i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		if (p->phase == CTL_BACKOFF && now >= p->deadline_ns)
			dial(p);
		else if (p->phase == CTL_CONNECTING && now >= p->deadline_ns)
			locus_verbs_ctl_close(p, -ETIMEDOUT);
	}
	if (!ep->prm.threaded) {
		/* one thread: run the data side's half now, as the callbacks always came */
		locus_verbs_data_sync(ep);
		locus_verbs_ctl_handover(ep);
		locus_verbs_counters_sync_data(ep);
	}
	locus_verbs_counters_sync_ctl(ep);
	return handled;
}
