// SPDX-License-Identifier: MIT
/*
 * Soft-RoCE tests of the handshake (protocol 2), run inside the qemu guest by
 * tests/vm/guest-auth.sh while tcpdump captures the RoCEv2 traffic of the
 * veth pair into $VT_CAPTURE. Two endpoints connect across the pair; what
 * they put on the wire is then taken from the capture and replayed through
 * rdma_cm by raw clients and listeners of this file, each leg against a
 * real endpoint, which must refuse and count it:
 *   the captured request, to the passive side that saw it (its nonce is
 *   remembered) and to a fresh one (it names another QP); the captured
 *   accept, to a new active side; the captured hellos, on connections that
 *   got that far with the secret (the test knows it); a first message
 *   longer than a hello; a request nonce used twice; a client that never
 *   sends its proof; a request made with another secret. The live
 *   connection stays up throughout.
 * `vt_auth --scan FILE` then reads the whole capture: the cluster secret
 * (its bytes, its hex in both cases) must not occur in it, while the rdma_cm
 * exchange (REQ, REP, RTU) must: a capture of protocol 1 fails it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "vt_util.h"

#define DEV_A "rxex"  /* active sides (vx, 192.0.2.20) */
#define DEV_P "rxey"  /* passive sides (vy, 192.0.2.21) */
#define CLUSTER 7u
#define REJ_TAG 0x4c
#define ROCE_PORT 4791

/* ---- the capture ----------------------------------------------------------------------------- */

struct blob {
	uint8_t b[LOCUS_VERBS_PDATA_MAX];
	size_t len;
};

static uint8_t *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
		b = malloc((size_t)n);
		if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
			free(b);
			b = NULL;
		}
		*len = (size_t)n;
	}
	fclose(f);
	return b;
}

/* The first occurrence of head[hlen] in the capture, len bytes from there. */
static int capture_blob(const uint8_t *head, size_t hlen, size_t len, struct blob *out)
{
	const char *path = getenv("VT_CAPTURE");
	size_t n = 0;
	uint8_t *b, *at;
	int rc = -ENOENT;

	if (!path || !(b = read_file(path, &n)))
		return -ENOENT;
	at = memmem(b, n, head, hlen);
	if (at && (size_t)(b + n - at) >= len) {
		memcpy(out->b, at, len);
		out->len = len;
		rc = 0;
	}
	free(b);
	return rc;
}

/* Occurrences of pat in b. */
static unsigned count(const uint8_t *b, size_t n, const void *pat, size_t plen)
{
	unsigned c = 0;
	const uint8_t *p = b, *end = b + n;

	while ((p = memmem(p, (size_t)(end - p), pat, plen))) {
		c++;
		p++;
	}
	return c;
}

static uint16_t be16(const uint8_t *b)
{
	return (uint16_t)(b[0] << 8 | b[1]);
}

/*
 * The whole capture: rdma_cm MADs by attribute (BTH to QP 1, DETH, MAD of
 * management class 7), RC SENDs and which of them are v2 hellos, and the
 * secret in any form anywhere in the file. Exit 0 only with no secret and
 * the connection exchange present.
 */
static int scan_main(const char *path)
{
	static const char *cm_name[] = { "REQ", "MRA", "REJ", "REP", "RTU", "DREQ", "DREP" };
	unsigned cm[7] = { 0 }, packets = 0, roce = 0, sends = 0, hello_a = 0, hello_p = 0;
	unsigned raw, lower, upper;
	char hex_l[2 * LOCUS_VERBS_SECRET_LEN + 1], hex_u[2 * LOCUS_VERBS_SECRET_LEN + 1];
	size_t n = 0, off = 24;
	uint8_t *b = read_file(path, &n);

	if (!b || n < 24 || b[0] != 0xd4 || b[1] != 0xc3 || b[2] != 0xb2 || b[3] != 0xa1 ||
	    b[20] != 1) {
		fprintf(stderr, "scan: %s is not a little-endian Ethernet pcap\n", path);
		free(b);
		return 2;
	}
	while (off + 16 <= n) {
		uint32_t incl = (uint32_t)b[off + 8] | (uint32_t)b[off + 9] << 8 |
				(uint32_t)b[off + 10] << 16 | (uint32_t)b[off + 11] << 24;
		const uint8_t *e = b + off + 16, *ip, *udp, *bth;

		if (off + 16 + incl > n)
			break;
		off += 16 + incl;
		packets++;
		if (incl < 14 + 20 + 8 + 12 || be16(e + 12) != 0x0800)
			continue;
		ip = e + 14;
		if (ip[9] != 17 || incl < 14 + (ip[0] & 15u) * 4 + 8 + 12)
			continue;
		udp = ip + (ip[0] & 15u) * 4;
		if (be16(udp + 2) != ROCE_PORT)
			continue;
		roce++;
		bth = udp + 8;
		/* UD SEND only to QP 1 (the GSI): DETH, then the MAD */
		if (bth[0] == 0x64 && bth[5] == 0 && bth[6] == 0 && bth[7] == 1 &&
		    bth + 12 + 8 + 24 <= e + incl && bth[12 + 8 + 1] == 0x07) {
			uint16_t attr = be16(bth + 12 + 8 + 16);

			if (attr >= 0x10 && attr <= 0x16)
				cm[attr - 0x10]++;
		} else if (bth[0] == 0x04 && bth + 12 + 3 <= e + incl) { /* RC SEND only */
			const uint8_t *pl = bth + 12;

			sends++;
			if (pl[0] == 2 && pl[1] == 0 && pl[2] == LOCUS_VERBS_HELLO_A)
				hello_a++;
			if (pl[0] == 2 && pl[1] == 0 && pl[2] == LOCUS_VERBS_HELLO_P)
				hello_p++;
		}
	}
	for (unsigned i = 0; i < LOCUS_VERBS_SECRET_LEN; i++) {
		snprintf(hex_l + 2 * i, 3, "%02x", vt_secret[i]);
		snprintf(hex_u + 2 * i, 3, "%02X", vt_secret[i]);
	}
	raw = count(b, n, vt_secret, LOCUS_VERBS_SECRET_LEN);
	lower = count(b, n, hex_l, 2 * LOCUS_VERBS_SECRET_LEN);
	upper = count(b, n, hex_u, 2 * LOCUS_VERBS_SECRET_LEN);
	printf("scan %s: %zu bytes, %u packets, %u RoCEv2; rdma_cm MADs:", path, n, packets, roce);
	for (unsigned i = 0; i < 7; i++)
		printf(" %s %u", cm_name[i], cm[i]);
	printf("; RC SENDs %u (protocol 2 hellos: %u active, %u passive)\n", sends, hello_a, hello_p);
	printf("scan: the secret's 32 bytes occur %u times, its hex %u (lower case) + %u (upper "
	       "case) times\n", raw, lower, upper);
	free(b);
	if (raw || lower || upper) {
		printf("scan: FAIL: the cluster secret crossed the wire\n");
		return 1;
	}
	if (!cm[0] || !cm[3] || !cm[4]) {
		printf("scan: FAIL: the capture does not hold the connection exchange\n");
		return 1;
	}
	printf("scan: ok: the exchange is in the capture, the secret is not\n");
	return 0;
}

/* ---- raw rdma_cm peers (what an attacker on the fabric can run) ----------------------------- */

struct raw {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;       /* dialling id, or the one a listener accepted */
	struct rdma_cm_id *lid;      /* listener */
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t buf[256];            /* [0, 128) receives, [128, 256) sends */
	/* the event waited for */
	uint32_t want;               /* mask of enum rdma_cm_event_type */
	int ev;
	struct rdma_cm_id *ev_id;
	uint8_t pd_in[256];
	size_t pd_len;
	uint32_t qpn_in;
	unsigned extra_requests;     /* connect requests refused while waiting for something else */
};

static bool raw_event(void *arg)
{
	struct raw *r = arg;
	struct rdma_cm_event *e;

	while (!rdma_get_cm_event(r->ch, &e)) {
		int type = e->event;
		struct rdma_cm_id *id = e->id;

		if (!(r->want & (1u << type))) {
			rdma_ack_cm_event(e);
			if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
				r->extra_requests++;
				rdma_reject(id, NULL, 0);
				rdma_destroy_id(id);
			}
			continue;
		}
		r->ev = type;
		r->ev_id = id;
		r->pd_len = LOCUS_MIN((size_t)e->param.conn.private_data_len, sizeof(r->pd_in));
		if (e->param.conn.private_data && r->pd_len)
			memcpy(r->pd_in, e->param.conn.private_data, r->pd_len);
		else
			r->pd_len = 0;
		r->qpn_in = e->param.conn.qp_num;
		rdma_ack_cm_event(e);
		return true;
	}
	return false;
}

/* Wait (pumping the endpoints) for one event of the mask: its type, or -1 on timeout. */
static int raw_wait(struct raw *r, uint32_t want, struct vt_node **nodes, unsigned nn,
		    unsigned timeout_ms)
{
	r->want = want;
	r->ev = -1;
	if (!vt_pump(nodes, nn, raw_event, r, timeout_ms))
		return -1;
	return r->ev;
}

#define EV(x) (1u << RDMA_CM_EVENT_##x)
#define EV_END (EV(REJECTED) | EV(ESTABLISHED) | EV(UNREACHABLE) | EV(CONNECT_ERROR) | \
		EV(DISCONNECTED))

static int raw_channel(struct raw *r)
{
	memset(r, 0, sizeof(*r));
	r->ch = rdma_create_event_channel();
	if (!r->ch)
		return -errno;
	return fcntl(r->ch->fd, F_SETFL, fcntl(r->ch->fd, F_GETFL) | O_NONBLOCK) < 0 ? -errno : 0;
}

/* A QP on id with one receive posted (the peer's hello lands in buf[0, 128)). */
static void raw_qp(struct raw *r, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_sge sge;
	struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;

	r->pd = ibv_alloc_pd(id->verbs);
	assert_non_null(r->pd);
	r->cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	assert_non_null(r->cq);
	r->mr = ibv_reg_mr(r->pd, r->buf, sizeof(r->buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(r->mr);
	qa.send_cq = qa.recv_cq = r->cq;
	assert_int_equal(rdma_create_qp(id, r->pd, &qa), 0);
	sge = (struct ibv_sge){ .addr = (uintptr_t)r->buf, .length = 128, .lkey = r->mr->lkey };
	assert_int_equal(ibv_post_recv(id->qp, &wr, &bad), 0);
	r->id = id;
}

static void raw_close(struct raw *r)
{
	if (r->id) {
		if (r->id->qp)
			rdma_destroy_qp(r->id);
		rdma_destroy_id(r->id);
	}
	if (r->mr)
		ibv_dereg_mr(r->mr);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->lid)
		rdma_destroy_id(r->lid);
	if (r->ch)
		rdma_destroy_event_channel(r->ch);
	memset(r, 0, sizeof(*r));
}

/*
 * Dial DEV_P:port from DEV_A with the request make() writes for our QP
 * number; returns the end event (ESTABLISHED: the accept's private data and
 * QP number in r; REJECTED: the reason in r->pd_in[1]).
 */
typedef size_t (*make_req_fn)(uint32_t qpn, uint8_t *pd, void *arg);

static int raw_dial(struct raw *r, uint16_t port, make_req_fn make, void *arg,
		    struct vt_node **nodes, unsigned nn)
{
	struct sockaddr_in src = { .sin_family = AF_INET };
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *id;
	uint8_t pd[LOCUS_VERBS_PDATA_MAX];

	assert_int_equal(raw_channel(r), 0);
	assert_int_equal(vt_dev_addr(DEV_A, &src.sin_addr), 0);
	assert_int_equal(vt_dev_addr(DEV_P, &dst.sin_addr), 0);
	assert_int_equal(rdma_create_id(r->ch, &id, NULL, RDMA_PS_TCP), 0);
	r->id = id;
	assert_int_equal(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000), 0);
	assert_int_equal(raw_wait(r, EV(ADDR_RESOLVED), nodes, nn, 5000), RDMA_CM_EVENT_ADDR_RESOLVED);
	assert_int_equal(rdma_resolve_route(id, 2000), 0);
	assert_int_equal(raw_wait(r, EV(ROUTE_RESOLVED), nodes, nn, 5000), RDMA_CM_EVENT_ROUTE_RESOLVED);
	raw_qp(r, id);
	cp.private_data = pd;
	cp.private_data_len = (uint8_t)make(id->qp->qp_num, pd, arg);
	assert_int_equal(rdma_connect(id, &cp), 0);
	return raw_wait(r, EV_END, nodes, nn, 10000);
}

/* Post len bytes as a SEND on r's QP. */
static void raw_send(struct raw *r, const void *data, size_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)r->buf + 128, .length = (uint32_t)len,
			       .lkey = r->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	memcpy(r->buf + 128, data, len);
	assert_int_equal(ibv_post_send(r->id->qp, &wr, &bad), 0);
}

static bool raw_recv_done(void *arg)
{
	struct raw *r = arg;
	struct ibv_wc wc;

	while (ibv_poll_cq(r->cq, 1, &wc) == 1)
		if (wc.status == IBV_WC_SUCCESS && (wc.opcode & IBV_WC_RECV))
			return true;
	return false;
}

static void raw_listen(struct raw *r, uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };

	assert_int_equal(raw_channel(r), 0);
	assert_int_equal(vt_dev_addr(DEV_P, &sin.sin_addr), 0);
	assert_int_equal(rdma_create_id(r->ch, &r->lid, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(r->lid, (struct sockaddr *)&sin), 0);
	assert_int_equal(rdma_listen(r->lid, 4), 0);
}

/* Accept the request r holds (r->ev_id) with the given private data. */
static void raw_accept(struct raw *r, const uint8_t *pd, size_t len)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .rnr_retry_count = 7, .private_data = pd,
				      .private_data_len = (uint8_t)len };

	raw_qp(r, r->ev_id);
	assert_int_equal(rdma_accept(r->id, &cp), 0);
}

/* ---- requests ---------------------------------------------------------------------------------- */

struct req_spec {
	uint16_t from;
	const uint8_t *key;          /* secret the MAC is made with */
	uint8_t nonce[LOCUS_VERBS_NONCE_LEN];
	const struct blob *replay;   /* send these bytes instead */
};

static size_t make_req(uint32_t qpn, uint8_t *pd, void *arg)
{
	struct req_spec *s = arg;
	struct locus_verbs_transcript t = { .version = LOCUS_VERBS_PROTO_VERSION,
					    .cluster_id = CLUSTER, .active_node = s->from,
					    .passive_node = 1, .active_qpn = qpn };
	struct locus_verbs_pdata p = { .version = LOCUS_VERBS_PROTO_VERSION,
				       .kind = LOCUS_VERBS_PD_REQ, .cluster_id = CLUSTER,
				       .from = s->from, .to = 1 };

	if (s->replay) {
		memcpy(pd, s->replay->b, s->replay->len);
		return s->replay->len;
	}
	memcpy(t.nonce_a, s->nonce, sizeof(t.nonce_a));
	memcpy(p.nonce, s->nonce, sizeof(p.nonce));
	assert_int_equal(locus_verbs_auth_mac(s->key, LOCUS_VERBS_PD_REQ, &t, p.mac), 0);
	return locus_verbs_pdata_encode(&p, pd);
}

/* ---- traffic on the live connection ------------------------------------------------------------ */

static const uint32_t sizes[] = { 64, 4096, 12288, 1 };

struct both {
	struct vt_node *x, *y;
	uint64_t total;
};

static bool both_done(void *arg)
{
	struct both *s = arg;

	vt_send(s->x, sizes, LOCUS_ARRAY_SIZE(sizes), 4, s->total);
	vt_send(s->y, sizes, LOCUS_ARRAY_SIZE(sizes), 4, s->total);
	return s->x->tx_ok == s->total && s->y->tx_ok == s->total &&
	       s->x->rx_count == s->total && s->y->rx_count == s->total;
}

/* total more messages each way over the connection, every byte checked. */
static void traffic(struct vt_node *a, struct vt_node *b, uint64_t more)
{
	struct vt_node *nodes[] = { a, b };
	struct both s = { a, b, a->tx_posted + more };

	assert_true(vt_pump(nodes, 2, both_done, &s, 30000));
	assert_int_equal(a->rx_bad + b->rx_bad, 0);
	assert_int_equal(a->tx_err + b->tx_err, 0);
}

static uint64_t refused(struct vt_node *n, enum locus_verbs_auth_reason r)
{
	return locus_verbs_ep_stats(n->ep)->auth_refused[r];
}

struct refused_wait {
	struct vt_node *n;
	uint64_t want;
};

static bool hello_refused_is(void *arg)
{
	struct refused_wait *w = arg;

	return refused(w->n, LOCUS_VERBS_AUTH_HELLO) >= w->want;
}

/*
 * The victim n refuses the raw client's hello (its want-th refusal), then
 * the raw client sees the disconnect: the event, or -1. The bounds are wide
 * because Soft-RoCE's CM under TCG on a busy host can take seconds to carry
 * a DREQ; what the test proves is the refusal, counted first.
 */
static int hello_refused_wait(struct raw *r, struct vt_node *n, uint64_t want,
			      struct vt_node **nodes)
{
	struct refused_wait w = { .n = n, .want = want };

	if (!vt_pump(nodes, 2, hello_refused_is, &w, 20000)) {
		printf("# the victim counted %llu refused hellos, not %llu\n",
		       (unsigned long long)refused(n, LOCUS_VERBS_AUTH_HELLO),
		       (unsigned long long)want);
		return -1;
	}
	return raw_wait(r, EV(DISCONNECTED), nodes, 2, 30000);
}

static void tune_passive(struct locus_verbs_ep_params *p)
{
	p->connect_timeout_ms = 300; /* a proof is due within 4 x 300 ms */
}

/* The first wire bytes of each leg between node 2 (active) and node 1, as documented. */
#define PV_LO (LOCUS_VERBS_PROTO_VERSION & 0xff)
#define PV_HI (LOCUS_VERBS_PROTO_VERSION >> 8)
static const uint8_t req_head[16] = { PV_LO, PV_HI, LOCUS_VERBS_PD_REQ, 0, CLUSTER, 0, 0, 0, 2, 0, 1, 0 };
static const uint8_t rep_head[16] = { PV_LO, PV_HI, LOCUS_VERBS_PD_REP, 0, CLUSTER, 0, 0, 0, 1, 0, 2, 0 };
static const uint8_t hello_a_head[8] = { PV_LO, PV_HI, LOCUS_VERBS_HELLO_A, 14, 2, 0, 0, 1 };
static const uint8_t hello_p_head[8] = { PV_LO, PV_HI, LOCUS_VERBS_HELLO_P, 14, 1, 0, 0, 1 };

struct captured {
	struct blob req, rep, hello_a, hello_p;
};

static bool got_capture(void *arg)
{
	static uint64_t last;
	struct captured *c = arg;

	/* read the file at most every 100 ms, not at every poll */
	if (vt_now_us() - last < 100000)
		return false;
	last = vt_now_us();
	return capture_blob(req_head, 16, LOCUS_VERBS_REQ_LEN, &c->req) == 0 &&
	       capture_blob(rep_head, 16, LOCUS_VERBS_REP_LEN, &c->rep) == 0 &&
	       capture_blob(hello_a_head, 8, LOCUS_VERBS_HELLO_LEN, &c->hello_a) == 0 &&
	       capture_blob(hello_p_head, 8, LOCUS_VERBS_HELLO_LEN, &c->hello_p) == 0;
}

static struct captured cap;

/*
 * Node 2 (rxex) connects to node 1 (rxey) across the veth pair under the
 * capture; then every leg it put on the wire comes back from the capture,
 * replayed against node 1 while the connection carries traffic.
 */
static void test_capture_and_replays(void **state)
{
	struct vt_node a, b, *nodes[] = { &a, &b };
	struct locus_verbs_peer *a3;
	struct locus_error err;
	struct req_spec spec = { .from = 3, .key = vt_secret };
	struct raw r;
	uint8_t wrong[LOCUS_VERBS_SECRET_LEN];
	int ev;
	(void)state;

	assert_non_null(getenv("VT_CAPTURE"));
	assert_int_equal(vt_node_init(&a, "a", DEV_P, 7490, 1, tune_passive), 0);
	assert_int_equal(vt_node_init(&b, "b", DEV_A, 0, 2, NULL), 0);
	assert_int_equal(vt_node_peer(&a, 2, NULL, 0), 0);
	/* node 3: the identity the raw clients below claim (they know the secret, or not) */
	assert_int_equal(locus_verbs_peer_add(a.ep, 3, NULL, &a3, &err), 0);
	assert_int_equal(vt_node_peer(&b, 1, DEV_P, 7490), 0);
	assert_true(vt_wait_up(nodes, 2, 10000));
	assert_int_equal(vt_node_txbufs(&a, 16, 12288, 4096), 0);
	assert_int_equal(vt_node_txbufs(&b, 16, 12288, 4096), 0);
	a.rx_sizes = b.rx_sizes = sizes;
	a.rx_nsizes = b.rx_nsizes = LOCUS_ARRAY_SIZE(sizes);
	traffic(&a, &b, 200);
	/* tcpdump writes each packet as it comes (-U): the four legs are in the file */
	assert_true(vt_pump(nodes, 2, got_capture, &cap, 10000));
	printf("# captured: request %zu B, accept %zu B, hellos %zu + %zu B\n", cap.req.len,
	       cap.rep.len, cap.hello_a.len, cap.hello_p.len);

	/* 1. the captured request, replayed through rdma_cm: its nonce is remembered */
	spec.replay = &cap.req;
	ev = raw_dial(&r, 7490, make_req, &spec, nodes, 2);
	printf("# captured request replayed: %s, reason %d\n", rdma_event_str(ev), r.pd_in[1]);
	assert_int_equal(ev, RDMA_CM_EVENT_REJECTED);
	assert_int_equal(r.pd_in[0], REJ_TAG);
	assert_int_equal(r.pd_in[1], LOCUS_VERBS_REJ_REPLAY);
	raw_close(&r);
	assert_int_equal(refused(&a, LOCUS_VERBS_AUTH_REPLAY), 1);

	/* 2. a client with the secret gets as far as the QP, then sends the captured hello */
	spec.replay = NULL;
	assert_int_equal(locus_verbs_nonce(spec.nonce, sizeof(spec.nonce)), 0);
	ev = raw_dial(&r, 7490, make_req, &spec, nodes, 2);
	assert_int_equal(ev, RDMA_CM_EVENT_ESTABLISHED);
	{
		/* the accept it got proves node 1 over this connection's transcript */
		struct locus_verbs_transcript t = { .version = LOCUS_VERBS_PROTO_VERSION,
						    .cluster_id = CLUSTER, .active_node = 3,
						    .passive_node = 1, .active_qpn = r.id->qp->qp_num,
						    .passive_qpn = r.qpn_in };
		struct locus_verbs_pdata rep;
		uint8_t hello[LOCUS_VERBS_HELLO_LEN];

		assert_int_equal(locus_verbs_pdata_decode(r.pd_in, r.pd_len, LOCUS_VERBS_PD_REP, &rep,
							  NULL), 0);
		memcpy(t.nonce_a, spec.nonce, sizeof(t.nonce_a));
		memcpy(t.nonce_b, rep.nonce, sizeof(t.nonce_b));
		assert_int_equal(locus_verbs_rep_admit(&rep, &t, vt_secret, NULL, NULL), 0);
		/* node 2's hello of the captured connection, its node id made ours */
		memcpy(hello, cap.hello_a.b, sizeof(hello));
		hello[4] = 3;
		raw_send(&r, hello, sizeof(hello));
	}
	ev = hello_refused_wait(&r, &a, 1, nodes);
	printf("# captured hello replayed on a new connection: %s\n", rdma_event_str(ev));
	assert_int_equal(ev, RDMA_CM_EVENT_DISCONNECTED);
	raw_close(&r);
	assert_int_equal(refused(&a, LOCUS_VERBS_AUTH_HELLO), 1);

	/* 2b. with the secret again, a first message longer than a hello */
	assert_int_equal(locus_verbs_nonce(spec.nonce, sizeof(spec.nonce)), 0);
	ev = raw_dial(&r, 7490, make_req, &spec, nodes, 2);
	assert_int_equal(ev, RDMA_CM_EVENT_ESTABLISHED);
	{
		uint8_t big[100];

		memcpy(big, cap.hello_a.b, LOCUS_VERBS_HELLO_LEN);
		memset(big + LOCUS_VERBS_HELLO_LEN, 0, sizeof(big) - LOCUS_VERBS_HELLO_LEN);
		big[4] = 3;
		raw_send(&r, big, sizeof(big));
	}
	ev = hello_refused_wait(&r, &a, 2, nodes);
	assert_int_equal(ev, RDMA_CM_EVENT_DISCONNECTED);
	raw_close(&r);
	assert_int_equal(refused(&a, LOCUS_VERBS_AUTH_HELLO), 2);

	/* 3. a client's nonce again, in a request that is otherwise valid */
	ev = raw_dial(&r, 7490, make_req, &spec, nodes, 2);
	assert_int_equal(ev, RDMA_CM_EVENT_REJECTED);
	assert_int_equal(r.pd_in[1], LOCUS_VERBS_REJ_REPLAY);
	raw_close(&r);
	assert_int_equal(refused(&a, LOCUS_VERBS_AUTH_REPLAY), 2);

	/* 4. a client that never sends its proof is dropped within the bound */
	assert_int_equal(locus_verbs_nonce(spec.nonce, sizeof(spec.nonce)), 0);
	ev = raw_dial(&r, 7490, make_req, &spec, nodes, 2);
	assert_int_equal(ev, RDMA_CM_EVENT_ESTABLISHED);
	{
		uint64_t t0 = vt_now_us();

		ev = raw_wait(&r, EV(DISCONNECTED), nodes, 2, 10000);
		printf("# silent client: %s after %.1f s (bound 4 x 300 ms)\n", rdma_event_str(ev),
		       (double)(vt_now_us() - t0) / 1e6);
	}
	assert_int_equal(ev, RDMA_CM_EVENT_DISCONNECTED);
	raw_close(&r);
	assert_int_equal(refused(&a, LOCUS_VERBS_AUTH_TIMEOUT), 1);

	/* 5. a request made with another secret */
	memcpy(wrong, vt_secret, sizeof(wrong));
	wrong[0] ^= 1;
	spec.key = wrong;
	assert_int_equal(locus_verbs_nonce(spec.nonce, sizeof(spec.nonce)), 0);
	ev = raw_dial(&r, 7490, make_req, &spec, nodes, 2);
	assert_int_equal(ev, RDMA_CM_EVENT_REJECTED);
	assert_int_equal(r.pd_in[1], LOCUS_VERBS_REJ_AUTH);
	raw_close(&r);
	assert_int_equal(refused(&a, LOCUS_VERBS_AUTH_REQ_MAC), 1);

	/* node 3 never came up; node 2's connection never went down and still carries */
	assert_int_equal(locus_verbs_peer_stats(a3)->connects, 0);
	assert_int_not_equal(locus_verbs_peer_state(a3), LOCUS_VERBS_UP);
	assert_int_equal(locus_verbs_peer_state(a.peer), LOCUS_VERBS_UP);
	assert_int_equal(b.downs, 0);
	assert_int_equal(a.ups, 1);
	assert_int_equal(b.ups, 1);
	traffic(&a, &b, 200);
	printf("# node 1 refused: %llu replayed requests, %llu wrong MACs, %llu hellos, %llu "
	       "silent; the live connection carried %llu messages each way\n",
	       (unsigned long long)refused(&a, LOCUS_VERBS_AUTH_REPLAY),
	       (unsigned long long)refused(&a, LOCUS_VERBS_AUTH_REQ_MAC),
	       (unsigned long long)refused(&a, LOCUS_VERBS_AUTH_HELLO),
	       (unsigned long long)refused(&a, LOCUS_VERBS_AUTH_TIMEOUT),
	       (unsigned long long)a.tx_ok);
	vt_node_fini(&b);
	vt_node_fini(&a);
}

/* The captured request against a passive side that never saw it: it names another QP. */
static void test_request_replay_fresh(void **state)
{
	struct vt_node a, *nodes[] = { &a };
	struct req_spec spec = { .replay = &cap.req };
	struct raw r;
	int ev;
	(void)state;

	assert_int_not_equal(cap.req.len, 0);
	assert_int_equal(vt_node_init(&a, "a2", DEV_P, 7491, 1, NULL), 0);
	assert_int_equal(vt_node_peer(&a, 2, NULL, 0), 0);
	ev = raw_dial(&r, 7491, make_req, &spec, nodes, 1);
	assert_int_equal(ev, RDMA_CM_EVENT_REJECTED);
	assert_int_equal(r.pd_in[1], LOCUS_VERBS_REJ_AUTH);
	raw_close(&r);
	assert_int_equal(refused(&a, LOCUS_VERBS_AUTH_REQ_MAC), 1);
	assert_int_equal(a.ups, 0);
	vt_node_fini(&a);
}

static bool first_down(void *arg)
{
	return ((struct vt_node *)arg)->downs > 0;
}

/* The captured accept, given by a fake listener to a new active side: refused. */
static void test_accept_replay(void **state)
{
	struct vt_node d, *nodes[] = { &d };
	struct raw f;
	int ev;
	(void)state;

	assert_int_not_equal(cap.rep.len, 0);
	raw_listen(&f, 7492);
	assert_int_equal(vt_node_init(&d, "d", DEV_A, 0, 2, NULL), 0);
	assert_int_equal(vt_node_peer(&d, 1, DEV_P, 7492), 0);
	ev = raw_wait(&f, EV(CONNECT_REQUEST), nodes, 1, 10000);
	assert_int_equal(ev, RDMA_CM_EVENT_CONNECT_REQUEST);
	raw_accept(&f, cap.rep.b, cap.rep.len);
	assert_true(vt_pump(nodes, 1, first_down, &d, 10000));
	printf("# captured accept replayed to node 2: down with %s\n", locus_strerror(d.last_down));
	assert_int_equal(d.last_down, -LOCUS_EAUTH);
	assert_int_equal(refused(&d, LOCUS_VERBS_AUTH_REP_MAC), 1);
	assert_int_equal(d.ups, 0);
	vt_node_fini(&d);
	raw_close(&f);
}

/*
 * A fake listener with the secret answers a new active side with a valid
 * accept, takes its hello (which it may: it proved itself), and answers
 * with the captured hello of the passive side: refused.
 */
static void test_passive_hello_replay(void **state)
{
	struct vt_node d, *nodes[] = { &d };
	struct locus_verbs_transcript t = { .version = LOCUS_VERBS_PROTO_VERSION,
					    .cluster_id = CLUSTER, .active_node = 2,
					    .passive_node = 1 };
	struct locus_verbs_pdata req, rep = { .version = LOCUS_VERBS_PROTO_VERSION,
					      .kind = LOCUS_VERBS_PD_REP, .cluster_id = CLUSTER,
					      .from = 1, .to = 2 };
	struct locus_verbs_hello h;
	uint8_t pd[LOCUS_VERBS_PDATA_MAX], expect[LOCUS_VERBS_MAC_LEN];
	size_t len;
	struct raw f;
	int ev;
	(void)state;

	assert_int_not_equal(cap.hello_p.len, 0);
	raw_listen(&f, 7493);
	assert_int_equal(vt_node_init(&d, "d", DEV_A, 0, 2, NULL), 0);
	assert_int_equal(vt_node_peer(&d, 1, DEV_P, 7493), 0);
	ev = raw_wait(&f, EV(CONNECT_REQUEST), nodes, 1, 10000);
	assert_int_equal(ev, RDMA_CM_EVENT_CONNECT_REQUEST);
	assert_int_equal(locus_verbs_pdata_decode(f.pd_in, f.pd_len, LOCUS_VERBS_PD_REQ, &req, NULL), 0);
	t.active_qpn = f.qpn_in;
	memcpy(t.nonce_a, req.nonce, sizeof(t.nonce_a));
	assert_int_equal(locus_verbs_req_admit(&req, &t, vt_secret, NULL, NULL, NULL), 0);
	raw_qp(&f, f.ev_id);
	t.passive_qpn = f.id->qp->qp_num;
	assert_int_equal(locus_verbs_nonce(t.nonce_b, sizeof(t.nonce_b)), 0);
	memcpy(rep.nonce, t.nonce_b, sizeof(rep.nonce));
	assert_int_equal(locus_verbs_auth_mac(vt_secret, LOCUS_VERBS_PD_REP, &t, rep.mac), 0);
	len = locus_verbs_pdata_encode(&rep, pd);
	{
		struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
					      .rnr_retry_count = 7, .private_data = pd,
					      .private_data_len = (uint8_t)len };

		assert_int_equal(rdma_accept(f.id, &cp), 0);
	}
	/* node 2 checked our accept and sent its hello: its proof, and its inbox */
	assert_true(vt_pump(nodes, 1, raw_recv_done, &f, 10000));
	assert_int_equal(locus_verbs_hello_decode(f.buf, LOCUS_VERBS_HELLO_LEN, LOCUS_VERBS_HELLO_A,
						  &h, NULL), 0);
	assert_int_equal(locus_verbs_auth_mac(vt_secret, LOCUS_VERBS_HELLO_A, &t, expect), 0);
	assert_int_equal(locus_verbs_hello_admit(&h, 2, expect), 0);
	/* the captured passive hello: the right kind and node, another connection's MAC */
	raw_send(&f, cap.hello_p.b, cap.hello_p.len);
	assert_true(vt_pump(nodes, 1, first_down, &d, 10000));
	printf("# captured passive hello replayed to node 2: down with %s\n",
	       locus_strerror(d.last_down));
	assert_int_equal(d.last_down, -LOCUS_EAUTH);
	assert_int_equal(refused(&d, LOCUS_VERBS_AUTH_HELLO), 1);
	assert_int_equal(d.ups, 0);
	vt_node_fini(&d);
	raw_close(&f);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_capture_and_replays),
		cmocka_unit_test(test_request_replay_fresh),
		cmocka_unit_test(test_accept_replay),
		cmocka_unit_test(test_passive_hello_replay),
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "--scan"))
		return scan_main(argv[2]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
