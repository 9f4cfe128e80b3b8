// SPDX-License-Identifier: MIT
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "vt_util.h"

const uint8_t vt_secret[LOCUS_VERBS_SECRET_LEN] = "locus-test-cluster-secret-012345";

uint64_t vt_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int vt_dev_addr(const char *dev, struct in_addr *a)
{
	int rc = locus_verbs_gid_ipv4("/sys", dev, 1, NULL, a);

	return rc < 0 ? rc : 0;
}

static int on_recv(void *arg, struct locus_verbs_peer *p, const void *data, uint32_t len)
{
	struct vt_node *n = arg;
	const uint8_t *d = data;
	uint64_t seq = n->rx_count, i;
	uint32_t want = n->rx_sizes ? n->rx_sizes[seq % n->rx_nsizes] : len;
	bool bad = len != want;

	(void)p;
	for (i = 0; !bad && i < len; i++)
		bad = d[i] != vt_pat(n->rx_stream, seq, i);
	if (bad) {
		if (n->rx_bad++ < 5)
			fprintf(stderr, "%s: message %llu: len %u (want %u) or data differs at %llu\n",
				n->name, (unsigned long long)seq, len, want, (unsigned long long)i);
	}
	n->rx_count++;
	n->rx_bytes += len;
	if (n->rx_kill_after && n->rx_count >= n->rx_kill_after)
		raise(SIGKILL); /* a peer dying mid-stream, without any goodbye */
	if (n->rx_hold && n->rx_held < LOCUS_ARRAY_SIZE(n->held)) {
		n->held[n->rx_held].d = d;
		n->held[n->rx_held].len = len;
		n->held[n->rx_held].seq = seq;
		n->rx_held++;
		return LOCUS_VERBS_HOLD;
	}
	return 0;
}

static void on_send_done(void *arg, struct locus_verbs_peer *p, uint64_t cookie, int status)
{
	struct vt_node *n = arg;

	(void)p;
	if (cookie < n->done_cap && n->done_count[cookie]++)
		n->done_dup++;
	n->tx_done++;
	if (status) {
		n->tx_err++;
		n->tx_last_err = status;
	} else {
		n->tx_ok++;
	}
}

static void on_up(void *arg, struct locus_verbs_peer *p)
{
	(void)p;
	((struct vt_node *)arg)->ups++;
}

static void on_down(void *arg, struct locus_verbs_peer *p, int reason)
{
	struct vt_node *n = arg;

	(void)p;
	n->downs++;
	n->last_down = reason;
}

int vt_node_init(struct vt_node *n, const char *name, const char *dev, uint16_t port,
		 uint16_t node_id, void (*tune)(struct locus_verbs_ep_params *))
{
	struct locus_verbs_ep_params prm;
	struct locus_error err = { 0 };
	int rc;

	memset(n, 0, sizeof(*n));
	n->name = name;
	memset(&prm, 0, sizeof(prm));
	rc = vt_dev_addr(dev, &prm.local_addr);
	if (rc < 0) {
		fprintf(stderr, "%s: no RoCE v2 IPv4 GID on %s: %s\n", name, dev, strerror(-rc));
		return rc;
	}
	prm.port = port;
	prm.dev_name = dev;
	prm.cluster_id = 7;
	prm.node_id = node_id;
	memcpy(prm.secret, vt_secret, sizeof(prm.secret));
	prm.cb.on_recv = on_recv;
	prm.cb.on_send_done = on_send_done;
	prm.cb.on_peer_up = on_up;
	prm.cb.on_peer_down = on_down;
	prm.cb.arg = n;
	if (tune)
		tune(&prm);
	rc = locus_verbs_ep_create(&prm, &n->ep, &err);
	if (rc < 0)
		fprintf(stderr, "%s: ep_create: %s: %s\n", name, locus_strerror(rc), err.msg);
	return rc;
}

int vt_node_peer(struct vt_node *n, uint16_t peer_node, const char *remote_dev, uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct locus_error err = { 0 };
	int rc;

	if (remote_dev) {
		rc = vt_dev_addr(remote_dev, &sin.sin_addr);
		if (rc < 0)
			return rc;
	}
	rc = locus_verbs_peer_add(n->ep, peer_node, remote_dev ? &sin : NULL, &n->peer, &err);
	if (rc < 0)
		fprintf(stderr, "%s: peer_add: %s: %s\n", n->name, locus_strerror(rc), err.msg);
	return rc;
}

int vt_node_txbufs(struct vt_node *n, unsigned nbuf, uint32_t size, uint64_t done_cap)
{
	struct locus_error err = { 0 };
	int rc;

	rc = locus_verbs_mr_alloc(n->ep, (size_t)nbuf * size, IBV_ACCESS_LOCAL_WRITE, &n->txmr, &err);
	if (rc < 0) {
		fprintf(stderr, "%s: mr_alloc: %s\n", n->name, err.msg);
		return rc;
	}
	n->tx_nbuf = nbuf;
	n->tx_buf_size = size;
	n->done_cap = done_cap;
	n->done_count = calloc(done_cap ? done_cap : 1, 1);
	return n->done_count ? 0 : -ENOMEM;
}

void vt_node_fini(struct vt_node *n)
{
	if (n->ep) {
		locus_verbs_mr_free(&n->txmr);
		locus_verbs_ep_destroy(n->ep);
	}
	free(n->done_count);
	memset(n, 0, sizeof(*n));
}

int vt_send(struct vt_node *n, const uint32_t *sizes, unsigned nsizes, unsigned batch,
	    uint64_t limit)
{
	struct locus_verbs_msg m[32];
	unsigned k, i;
	uint64_t inflight = n->tx_posted - n->tx_done;
	int rc;

	if (batch > 32)
		batch = 32;
	for (k = 0; k < batch && n->tx_posted + k < limit && inflight + k < n->tx_nbuf; k++) {
		uint64_t seq = n->tx_posted + k;
		uint8_t *b = (uint8_t *)n->txmr.addr + (seq % n->tx_nbuf) * n->tx_buf_size;
		uint32_t len = sizes[seq % nsizes];

		for (i = 0; i < len; i++)
			b[i] = vt_pat(n->tx_stream, seq, i);
		m[k] = (struct locus_verbs_msg){ .buf = b, .len = len, .lkey = n->txmr.lkey,
						 .cookie = seq };
	}
	if (k == 0)
		return 0;
	rc = locus_verbs_post(n->peer, m, k);
	if (rc > 0)
		n->tx_posted += (unsigned)rc;
	return rc;
}

bool vt_pump(struct vt_node **nodes, unsigned nn, bool (*cond)(void *), void *arg,
	     unsigned timeout_ms)
{
	uint64_t end = vt_now_us() + (uint64_t)timeout_ms * 1000u;
	unsigned it = 0, i;

	while (!cond(arg)) {
		int work = 0;

		if (vt_now_us() > end)
			return false;
		for (i = 0; i < nn; i++)
			if (nodes[i]->ep)
				work += locus_verbs_poll(nodes[i]->ep);
		if (!work || (++it & 63) == 0)
			for (i = 0; i < nn; i++)
				if (nodes[i]->ep)
					locus_verbs_service(nodes[i]->ep, 0);
	}
	return true;
}

struct up_arg {
	struct vt_node **nodes;
	unsigned nn;
};

static bool all_up(void *a)
{
	struct up_arg *u = a;
	unsigned i;

	for (i = 0; i < u->nn; i++)
		if (!u->nodes[i]->peer || locus_verbs_peer_state(u->nodes[i]->peer) != LOCUS_VERBS_UP)
			return false;
	return true;
}

bool vt_wait_up(struct vt_node **nodes, unsigned nn, unsigned timeout_ms)
{
	struct up_arg u = { nodes, nn };

	return vt_pump(nodes, nn, all_up, &u, timeout_ms);
}

int vt_release_held(struct vt_node *n, unsigned k)
{
	unsigned i;
	uint64_t j;

	if (k > n->rx_held)
		k = n->rx_held;
	for (i = 0; i < k; i++)
		for (j = 0; j < n->held[i].len; j++)
			if (n->held[i].d[j] != vt_pat(n->rx_stream, n->held[i].seq, j)) {
				if (n->rx_bad++ < 5)
					fprintf(stderr, "%s: held message %llu overwritten at %llu\n",
						n->name, (unsigned long long)n->held[i].seq,
						(unsigned long long)j);
				break;
			}
	memmove(n->held, n->held + k, (n->rx_held - k) * sizeof(n->held[0]));
	n->rx_held -= k;
	return locus_verbs_release(n->peer, k);
}
