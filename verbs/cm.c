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
 *
 * The handshake's first two legs are here (locus_verbs.h, verbs/README.md):
 * the active side's request carries its nonce and a MAC, the passive side
 * checks it and answers with its nonce and its MAC, the active side checks
 * that; each then arms the connection with the MAC the peer's hello must
 * carry (checked by the data side) and its own hello, and the link goes UP
 * on the data side once the hellos crossed. Control counts the refusals of
 * its legs and a peer that does not prove itself within its leg's bound.
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

/* Our view of a new attempt with p; nonce_a / nonce_b: which one is ours to draw. */
static int hs_begin(struct locus_verbs_peer *p, uint16_t active_node, uint16_t passive_node)
{
	const struct locus_verbs_ep *ep = p->ep;

	memset(&p->hs, 0, sizeof(p->hs));
	p->hs.version = ep->prm.proto_version;
	p->hs.cluster_id = ep->prm.cluster_id;
	p->hs.active_node = active_node;
	p->hs.passive_node = passive_node;
	p->proving = false;
	return locus_verbs_nonce(p->active ? p->hs.nonce_a : p->hs.nonce_b, LOCUS_VERBS_NONCE_LEN);
}

/*
 * Our hello (role mine) into hs_mr and the MAC the peer's (role theirs)
 * must carry into hs_expect, both over p->hs complete. Control, before the
 * connection is armed: from then on the data side reads them.
 */
static int hs_hellos(struct locus_verbs_peer *p, unsigned mine, unsigned theirs)
{
	const struct locus_verbs_ep *ep = p->ep;
	struct locus_verbs_hello h = {
		.version = ep->prm.proto_version,
		.kind = (uint8_t)mine,
		.slot_shift = (uint8_t)ep->prm.slot_shift,
		.from = ep->prm.node_id,
		.slot_count = (uint16_t)ep->prm.slot_count,
		.rkey = p->inbox.rkey,
		.inbox_addr = (uintptr_t)p->inbox.addr,
	};
	int rc;

	rc = locus_verbs_auth_mac(ep->prm.secret, mine, &p->hs, h.mac);
	if (rc == 0)
		rc = locus_verbs_auth_mac(ep->prm.secret, theirs, &p->hs, p->hs_expect);
	if (rc < 0)
		return rc;
	locus_verbs_hello_encode(&h, (uint8_t *)p->hs_mr.addr + HS_TX_OFF);
	return 0;
}

/* REQ / REP private data of kind from us to p over p->hs: returns its length or -EIO. */
static int hs_pdata(const struct locus_verbs_peer *p, unsigned kind, uint8_t *buf)
{
	const struct locus_verbs_ep *ep = p->ep;
	struct locus_verbs_pdata pd = {
		.version = ep->prm.proto_version,
		.kind = (uint8_t)kind,
		.cluster_id = ep->prm.cluster_id,
		.from = ep->prm.node_id,
		.to = p->node_id,
	};
	int rc;

	memcpy(pd.nonce, kind == LOCUS_VERBS_PD_REQ ? p->hs.nonce_a : p->hs.nonce_b,
	       LOCUS_VERBS_NONCE_LEN);
	rc = locus_verbs_auth_mac(ep->prm.secret, kind, &p->hs, pd.mac);
	return rc < 0 ? rc : (int)locus_verbs_pdata_encode(&pd, buf);
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
	p->proving = false;
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
			   const struct locus_verbs_pdata *in, uint32_t active_qpn);

static void reject(struct locus_verbs_ep *ep, struct rdma_cm_id *id, int reason)
{
	uint8_t rej[2] = { REJ_TAG, (uint8_t)reason };

	rdma_reject(id, rej, sizeof(rej));
	rdma_destroy_id(id);
	if (reason == LOCUS_VERBS_REJ_AUTH)
		ep->stats.auth_refused[LOCUS_VERBS_AUTH_REQ_MAC]++;
	else if (reason == LOCUS_VERBS_REJ_CLUSTER)
		ep->stats.auth_refused[LOCUS_VERBS_AUTH_CLUSTER]++;
	else if (reason == LOCUS_VERBS_REJ_REPLAY)
		ep->stats.auth_refused[LOCUS_VERBS_AUTH_REPLAY]++;
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
		if (!p->member)
			return reject(ep, id, LOCUS_VERBS_REJ_PEER); /* it left meanwhile */
		if (locus_verbs_dev_state(&ep->dev) != LOCUS_DEV_LIVE)
			return reject(ep, id, LOCUS_VERBS_REJ_BUSY); /* the device is going */
		accept_request(p, id, &p->pend_pd, p->pend_qpn);
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

/* The data side took p's connection UP (both hellos crossed, it counted it). */
static void ctl_connected(struct locus_verbs_peer *p)
{
	ctl_set_phase(p, CTL_CONNECTED);
	p->proving = false;
	p->backoff_ms = p->ep->prm.backoff_min_ms;
}

/*
 * Fresh ring state and receives for connection gen + 1 (the first takes
 * the peer's hello), our hello posted first if we are the active side,
 * then the connection published ARMED: the data side's from here.
 */
static int ctl_arm(struct locus_verbs_peer *p)
{
	uint16_t gen = locus_verbs_link_next_gen(&p->link);
	int rc;

	rc = locus_verbs_peer_arm(p, gen);
	if (rc == 0 && p->active)
		rc = locus_verbs_post_hello(p, gen);
	if (rc < 0)
		return rc;
	rc = locus_verbs_link_arm(&p->link);
	return rc < 0 ? rc : 0;
}

/*
 * Accept a request that passed locus_verbs_req_admit: our QP, our nonce,
 * the transcript complete, our hello and the MAC of the peer's ready, the
 * connection armed, then the REP with our proof. The peer gets our inbox
 * only in our hello, which the data side sends once the peer's proved it.
 */
static void accept_request(struct locus_verbs_peer *p, struct rdma_cm_id *id,
			   const struct locus_verbs_pdata *in, uint32_t active_qpn)
{
	struct locus_verbs_ep *ep = p->ep;
	uint8_t rep[LOCUS_VERBS_PDATA_MAX];
	struct rdma_conn_param cp;
	int rc, len = 0;

	id->context = p;
	ctl_set_phase(p, CTL_CONNECTING);
	p->deadline_ns = locus_verbs_now_ns() + 4ull * ep->prm.connect_timeout_ms * 1000000ull;
	rc = make_qp(p, id);
	if (rc < 0) {
		ctl_set_phase(p, CTL_DOWN); /* no QP: nothing to hand over */
		reject(ep, id, LOCUS_VERBS_REJ_BUSY);
		locus_verbs_dev_check(ep, rc);
		return;
	}
	rc = hs_begin(p, in->from, ep->prm.node_id);
	if (rc == 0) {
		p->hs.active_qpn = active_qpn;
		p->hs.passive_qpn = p->qp->qp_num;
		memcpy(p->hs.nonce_a, in->nonce, LOCUS_VERBS_NONCE_LEN);
		rc = hs_hellos(p, LOCUS_VERBS_HELLO_P, LOCUS_VERBS_HELLO_A);
	}
	if (rc == 0)
		rc = len = hs_pdata(p, LOCUS_VERBS_PD_REP, rep);
	if (rc >= 0)
		rc = ctl_arm(p);
	if (rc < 0) {
		rdma_reject(p->id, NULL, 0);
		return locus_verbs_ctl_close(p, locus_verbs_dev_check(ep, rc));
	}
	memset(&cp, 0, sizeof(cp));
	cp.private_data = rep;
	cp.private_data_len = (uint8_t)len;
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.rnr_retry_count = 7;
	if (rdma_accept(id, &cp))
		return locus_verbs_ctl_close(p, -errno);
	p->proving = true; /* the active side's hello is due before the deadline */
}

static void on_connect_request(struct locus_verbs_ep *ep, struct rdma_cm_id *id,
			       const uint8_t *pd, size_t pdlen, uint32_t active_qpn)
{
	struct locus_verbs_transcript t = {
		.version = ep->prm.proto_version, .cluster_id = ep->prm.cluster_id,
		.passive_node = ep->prm.node_id, .active_qpn = active_qpn,
	};
	enum locus_verbs_auth_reason why = LOCUS_VERBS_AUTH_REQ_MAC;
	struct locus_verbs_pdata in;
	struct locus_verbs_peer *p = NULL;
	uint32_t i;
	int rc;

	rc = locus_verbs_pdata_decode(pd, pdlen, LOCUS_VERBS_PD_REQ, &in, NULL);
	if (rc == -LOCUS_EVERSION || (rc == 0 && in.version != ep->prm.proto_version))
		return reject(ep, id, LOCUS_VERBS_REJ_VERSION);
	if (rc < 0)
		return reject(ep, id, LOCUS_VERBS_REJ_INVALID);
	if (in.cluster_id != ep->prm.cluster_id)
		return reject(ep, id, LOCUS_VERBS_REJ_CLUSTER);
	/* the device is going: nothing can be built on it */
	if (locus_verbs_dev_state(&ep->dev) != LOCUS_DEV_LIVE)
		return reject(ep, id, LOCUS_VERBS_REJ_BUSY);
	for (i = 0; i < ep->n_peers; i++)
		if (ep->peers[i]->node_id == in.from && !ep->peers[i]->active)
			p = ep->peers[i];
	if (!p || !p->member || in.to != ep->prm.node_id)
		return reject(ep, id, LOCUS_VERBS_REJ_PEER);
	t.active_node = in.from;
	memcpy(t.nonce_a, in.nonce, LOCUS_VERBS_NONCE_LEN);
	rc = locus_verbs_req_admit(&in, &t, ep->prm.secret, &p->seen, &why, NULL);
	if (rc == -LOCUS_EAUTH)
		return reject(ep, id, why == LOCUS_VERBS_AUTH_REPLAY ? LOCUS_VERBS_REJ_REPLAY
								    : LOCUS_VERBS_REJ_AUTH);
	if (rc < 0)
		return reject(ep, id, LOCUS_VERBS_REJ_INVALID);
	/* only a request that proved the secret: forged ones cannot fill the memory */
	locus_verbs_replay_add(&p->seen, in.nonce);
	if (p->phase == CTL_DOWN && !p->id)
		return accept_request(p, id, &in, active_qpn);
	/*
	 * A peer that comes back replaces its old connection (it restarted):
	 * the request waits until the data side let go of the old one. A newer
	 * request replaces an older waiting one. (The request proved the secret
	 * and is not a replay of one we remember: a stranger cannot do this.)
	 */
	if (p->pend_id)
		reject(ep, p->pend_id, LOCUS_VERBS_REJ_BUSY);
	id->context = NULL;
	p->pend_id = id;
	p->pend_pd = in;
	p->pend_qpn = active_qpn;
	locus_verbs_ctl_close(p, -ECONNRESET);
}

/* The active side's leg 2: the accept must prove the passive side; then arm and send our hello. */
static void on_established_active(struct locus_verbs_peer *p, const uint8_t *pd, size_t pdlen,
				  uint32_t passive_qpn)
{
	struct locus_verbs_ep *ep = p->ep;
	enum locus_verbs_auth_reason why = LOCUS_VERBS_AUTH_REP_MAC;
	struct locus_verbs_pdata in;
	int rc;

	rc = locus_verbs_pdata_decode(pd, pdlen, LOCUS_VERBS_PD_REP, &in, NULL);
	if (rc == 0) {
		p->hs.passive_qpn = passive_qpn;
		memcpy(p->hs.nonce_b, in.nonce, LOCUS_VERBS_NONCE_LEN);
		rc = locus_verbs_rep_admit(&in, &p->hs, ep->prm.secret, &why, NULL);
		if (rc == -LOCUS_EAUTH)
			ep->stats.auth_refused[why]++;
	}
	if (rc < 0) {
		if (rc != -LOCUS_EAUTH)
			p->cstats.proto_errors++; /* someone else answers at that address */
		return locus_verbs_ctl_close(p, rc);
	}
	/* the passive side proved itself: it may have our inbox, in our hello */
	rc = hs_hellos(p, LOCUS_VERBS_HELLO_A, LOCUS_VERBS_HELLO_P);
	if (rc == 0)
		rc = ctl_arm(p);
	if (rc < 0)
		return locus_verbs_ctl_close(p, locus_verbs_dev_check(ep, rc));
	/*
	 * The last leg gets a bound of its own: the passive side goes up on our
	 * hello, so giving up on its answer early would make it flap.
	 */
	p->deadline_ns = locus_verbs_now_ns() + 4ull * ep->prm.connect_timeout_ms * 1000000ull;
	p->proving = true; /* the passive side's hello is due before the deadline */
}

/* One rdma_cm event; qpn: the remote QP number the event carries (request, accept). */
static void handle_event(struct locus_verbs_ep *ep, enum rdma_cm_event_type type,
			 struct rdma_cm_id *id, const uint8_t *pd, size_t pdlen, uint32_t qpn)
{
	struct locus_verbs_peer *p = id->context;

	ep->stats.cm_events++;
	/* on any id of ours, the listener's too: the device went away (dev.c) */
	if (type == RDMA_CM_EVENT_DEVICE_REMOVAL)
		return locus_verbs_dev_lost(ep, "device removal (rdma_cm)");
	if (type == RDMA_CM_EVENT_CONNECT_REQUEST)
		return on_connect_request(ep, id, pd, pdlen, qpn);
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
		uint8_t req[LOCUS_VERBS_PDATA_MAX];
		struct rdma_conn_param cp;
		int rc = make_qp(p, id), len = 0;

		/* leg 1: our nonce and a MAC bound to our QP; the connection arms at leg 2 */
		if (rc == 0)
			rc = hs_begin(p, ep->prm.node_id, p->node_id);
		if (rc == 0) {
			p->hs.active_qpn = p->qp->qp_num;
			rc = len = hs_pdata(p, LOCUS_VERBS_PD_REQ, req);
		}
		if (rc < 0)
			return locus_verbs_ctl_close(p, locus_verbs_dev_check(ep, rc));
		memset(&cp, 0, sizeof(cp));
		cp.private_data = req;
		cp.private_data_len = (uint8_t)len;
		cp.responder_resources = 1;
		cp.initiator_depth = 1;
		cp.retry_count = RC_RETRY_COUNT;
		cp.rnr_retry_count = 7;
		if (rdma_connect(id, &cp))
			locus_verbs_ctl_close(p, -errno);
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		/* passive: nothing to do, the link goes UP when the active side's hello checks out */
		if (p->active)
			on_established_active(p, pd, pdlen, qpn);
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
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		locus_verbs_ctl_close(p, -ECONNRESET);
		break;
	default:
		break;
	}
}

void locus_verbs_peer_set_member(struct locus_verbs_peer *p, bool member,
				 const struct sockaddr_in *remote)
{
	struct locus_verbs_ep *ep = p->ep;
	bool moved = remote && p->active &&
		     (p->remote.sin_addr.s_addr != remote->sin_addr.s_addr ||
		      p->remote.sin_port != remote->sin_port);
	bool was = p->member;

	if (remote && p->active)
		p->remote = *remote;
	p->member = member;
	if (!member) {
		if (p->pend_id) {
			reject(ep, p->pend_id, LOCUS_VERBS_REJ_PEER);
			p->pend_id = NULL;
		}
		if (p->phase != CTL_DOWN && p->phase != CTL_BACKOFF)
			locus_verbs_ctl_close(p, -LOCUS_EPEERDOWN);
		return;
	}
	/* a connection to the address it left: close it; the reap dials the new one */
	if (moved && p->phase != CTL_DOWN && p->phase != CTL_BACKOFF)
		locus_verbs_ctl_close(p, -ECONNRESET);
	if (p->active && (!was || moved)) {
		p->backoff_ms = ep->prm.backoff_min_ms;
		if (p->phase == CTL_BACKOFF)
			p->deadline_ns = locus_verbs_now_ns();
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
			/* a post failing with ENODEV / EIO may say the device is gone */
			locus_verbs_ctl_close(p, locus_verbs_dev_check(ep,
							locus_verbs_link_reason_of(w)));
			break;
		case LOCUS_LINK_QUIESCED:
			ctl_reap(p);
			break;
		case LOCUS_LINK_UP:
			if (p->phase == CTL_CONNECTING)
				ctl_connected(p);
			break;
		default:
			break;
		}
	}
}

int locus_verbs_service(struct locus_verbs_ep *ep, int timeout_ms)
{
	/* rdma_cm's events, and the device's async events (port.c) while there is one */
	struct pollfd pfd[2] = { { .fd = ep->ch->fd, .events = POLLIN },
				 { .fd = ep->ctx ? ep->ctx->async_fd : -1, .events = POLLIN } };
	bool live = locus_verbs_dev_state(&ep->dev) == LOCUS_DEV_LIVE;
	uint64_t now = locus_verbs_now_ns(), next = UINT64_MAX;
	uint8_t pd[256];
	int handled = 0;
	uint32_t i;

	if (timeout_ms < 0)
		timeout_ms = 0; /* never an unbounded wait */
	for (i = 0; i < ep->n_peers && live; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		if ((p->phase == CTL_BACKOFF && p->member) || p->phase == CTL_CONNECTING)
			next = LOCUS_MIN(next, p->deadline_ns);
	}
	if (locus_verbs_dev_state(&ep->dev) == LOCUS_DEV_DEAD)
		next = LOCUS_MIN(next, ep->dev_next_probe_ns);
	if (next != UINT64_MAX) {
		uint64_t wait = next > now ? (next - now) / 1000000ull : 0;

		timeout_ms = (int)LOCUS_MIN((uint64_t)timeout_ms, wait);
	}
	if (poll(pfd, 2, timeout_ms) > 0 && pfd[0].revents) {
		struct rdma_cm_event *ev;

		while (!rdma_get_cm_event(ep->ch, &ev)) {
			enum rdma_cm_event_type type = ev->event;
			struct rdma_cm_id *id = ev->id;
			size_t pdlen = LOCUS_MIN((size_t)ev->param.conn.private_data_len, sizeof(pd));
			uint32_t qpn = ev->param.conn.qp_num;

			/* copy and ack first: tearing an id down waits for its events' acks */
			if (ev->param.conn.private_data && pdlen)
				memcpy(pd, ev->param.conn.private_data, pdlen);
			else
				pdlen = 0;
			rdma_ack_cm_event(ev);
			handle_event(ep, type, id, pdlen ? pd : NULL, pdlen, qpn);
			handled++;
		}
	}
	/* a port gone down closes its connections before their flushes say less */
	if (pfd[1].revents)
		handled += locus_verbs_port_events(ep);
	/* after the events: a reject or disconnect says why better than the flushes */
	locus_verbs_ctl_handover(ep);
	/* a lost device: let go of it, look for it, reopen it (dev.c) */
	locus_verbs_dev_step(ep);
	live = locus_verbs_dev_state(&ep->dev) == LOCUS_DEV_LIVE;
	now = locus_verbs_now_ns();
	/* no device: nothing to dial, nothing connecting (dev.c redials when it is back) */
	for (i = 0; i < ep->n_peers && live; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		if (p->phase == CTL_BACKOFF && now >= p->deadline_ns) {
			if (p->member)
				dial(p);
		} else if (p->phase == CTL_CONNECTING && now >= p->deadline_ns) {
			/* the data side may have taken it up since the hand-over above */
			if (locus_verbs_link_state_of(locus_verbs_link_load(&p->link)) ==
			    LOCUS_LINK_UP) {
				ctl_connected(p);
				continue;
			}
			/* our proof went out and the peer's never came: it is dropped */
			if (p->proving)
				ep->stats.auth_refused[LOCUS_VERBS_AUTH_TIMEOUT]++;
			locus_verbs_ctl_close(p, -ETIMEDOUT);
		}
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
