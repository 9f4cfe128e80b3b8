// SPDX-License-Identifier: MIT
/*
 * locusd's inter-node side: the verbs endpoint (verbs/locus_verbs.h) behind
 * the engine's transport interface (struct locus_engine_remote).
 *
 * The endpoint is threaded (locus_verbs.h): the worker lcore that runs the
 * engine owns the data side (CQ polled every iteration, posts, credits,
 * inbox; no syscall), the main lcore the connections (rdma_cm events,
 * QP creation and destruction, redials: locusd_net_control every control
 * period). Peers going up or down are counted on the worker and logged by
 * the main lcore. With one lcore, both run there. Message buffers come from a DPDK mempool whose memory is
 * registered with every endpoint's PD once; every message waits in its peer's
 * backlog until the next poll posts it, in order, with the others queued
 * since (one list, one doorbell), as far as credits go; the rest waits there
 * for credits. Every message handed over completes exactly once: by its
 * RDMA completion, or with -LOCUS_EPEERDOWN when its peer goes down before
 * it was posted.
 *
 * Rails: one endpoint per RDMA device of rdma_device (each bound to this
 * node's address for that rail, listening on its port), one RC connection
 * per rail per peer on every rail the two nodes share. Backlogs, held
 * messages, credits (the endpoint's) and connection state are per rail and
 * peer; a message goes out on the one rail locus_rails_pick() chose from its
 * header's source rank (dataplane/locus_rails.h: the order it keeps).
 *
 * A rail whose device goes away (removed, reset: verbs/dev.c) fails over as
 * on a port error (its connections end, queued messages move to another
 * rail, posted ones fail once); its endpoint then frees the device's verbs
 * objects, asking us first to release what we registered there (rail_release:
 * the message pool's MRs and every client region's), looks for the device
 * by name and, when it is back, reopens it and asks us to register again
 * (rail_restore) before its peers reconnect. All on the main lcore.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mempool.h>

#include "locus_verbs.h"
#include "locusd_loop.h"
#include "locus_wire.h"
#include "locus_dispatch.h"
#include "locus_rails.h"
#include "locus_rail_devs.h"
#include "locus_relay.h"
#include "locusd_net.h"
#include "locus_counters_priv.h"
#include "locus_err_priv.h"

#include "locusd_net_priv.h"

/* ---- buffers ----------------------------------------------------------------------------- */

static void reg_chunk(struct rte_mempool *mp, void *opaque, struct rte_mempool_memhdr *mh,
		      unsigned idx)
{
	struct rail *n = opaque;
	struct locus_error err;

	(void)mp;
	(void)idx;
	if (n->n_mr >= MAX_CHUNKS) {
		n->mr_err = -E2BIG;
		return;
	}
	if (locus_verbs_mr_reg(n->ep, mh->addr, mh->len, 0, &n->mr[n->n_mr], &err) < 0) {
		fprintf(stderr, "locusd: registering the message pool with %s: %s\n", n->dev,
			err.msg);
		n->mr_err = -EIO;
		return;
	}
	n->n_mr++;
}

/* Deregister the message pool from rail rl's device (main lcore; nothing of it in use there). */
static void pool_unreg(struct rail *rl)
{
	for (unsigned i = 0; i < rl->n_mr; i++)
		locus_verbs_mr_free(&rl->mr[i]);
	rl->n_mr = 0;
}

/* Register every chunk of the message pool with rail rl's device: 0, or -EIO with none left. */
static int pool_reg(struct locusd_net *n, struct rail *rl)
{
	rl->mr_err = 0;
	rl->n_mr = 0;
	rte_mempool_mem_iter(n->pool, reg_chunk, rl);
	if (rl->mr_err || !rl->n_mr) {
		pool_unreg(rl);
		return -EIO;
	}
	return 0;
}

static uint32_t lkey_of(const struct rail *n, const void *buf)
{
	for (unsigned i = 0; i < n->n_mr; i++)
		if ((const uint8_t *)buf >= (const uint8_t *)n->mr[i].addr &&
		    (const uint8_t *)buf < (const uint8_t *)n->mr[i].addr + n->mr[i].len)
			return n->mr[i].lkey;
	return 0;
}

static void *rt_alloc(void *ctx, size_t len)
{
	struct locusd_net *n = ctx;
	void *obj;

	if (len > POOL_OBJ || rte_mempool_get(n->pool, &obj) < 0)
		return NULL;
	return obj;
}

static void rt_free(void *ctx, void *buf)
{
	struct locusd_net *n = ctx;

	rte_mempool_put(n->pool, buf);
}

/* Any rail up to node (the engine's lcore may ask while the network's changes it). */
static int rt_peer_up(void *ctx, uint32_t node)
{
	struct locusd_net *n = ctx;

	return node < LOCUS_CFG_MAX_NODES && __atomic_load_n(&n->up_mask[node], __ATOMIC_RELAXED);
}

int locusd_net_peer_up(struct locusd_net *n, uint32_t node)
{
	return rt_peer_up(n, node);
}

/* The lowest rail up to node (both ends agree on it once their views settle), or 0. */
static uint32_t load_rail(struct locusd_net *n, uint32_t node)
{
	uint32_t m = __atomic_load_n(&n->up_mask[node], __ATOMIC_RELAXED);

	return m ? (uint32_t)__builtin_ctz(m) : 0;
}

/* ---- decoder load rows: one-sided, into the area after each inbox -------------------------- */

/* On the lowest rail up: the peer reads that rail's area (rt_load_area). */
static int rt_write_load(void *ctx, uint32_t node, const void *row, size_t len)
{
	struct locusd_net *n = ctx;
	struct rail *r;

	if (node >= n->cfg->n_nodes)
		return -LOCUS_EPEERDOWN;
	r = &n->rail[load_rail(n, node)];
	if (!r->peer[node] || !r->up[node])
		return -LOCUS_EPEERDOWN;
	return LOCUS_MIN(locus_verbs_write_area(r->peer[node], row, (uint32_t)len), 0);
}

static const volatile void *rt_load_area(void *ctx, uint32_t node)
{
	struct locusd_net *n = ctx;
	struct rail *r;
	uint32_t len;

	if (node >= n->cfg->n_nodes)
		return NULL;
	r = &n->rail[load_rail(n, node)];
	if (!r->peer[node])
		return NULL;
	return locus_verbs_peer_area(r->peer[node], &len);
}

/* ---- sending ----------------------------------------------------------------------------- */

static void rec_put(struct locusd_net *n, uint32_t idx)
{
	n->rec_free[n->n_rec_free++] = idx;
}

/* Post as much of node's backlog on rail n as credits allow, oldest first, in one list. */
static void flush_backlog(struct rail *n, uint32_t node)
{
	struct backlog *b = &n->bl[node];

	while (b->head != b->tail && n->up[node] && !locus_verbs_post_blocked(n->peer[node])) {
		struct locus_verbs_msg m[POST_BURST];
		unsigned k = 0;
		uint64_t now;
		int posted;

		for (uint32_t i = b->head; i != b->tail && k < POST_BURST; i++, k++) {
			struct tx_rec *r = &n->n->rec[b->idx[i % BACKLOG]];

			m[k] = (struct locus_verbs_msg){ .buf = r->buf, .len = r->len,
							 .lkey = lkey_of(n, r->buf),
							 .cookie = b->idx[i % BACKLOG],
							 .sg = r->n_sg ? r->sg : NULL,
							 .n_sg = r->n_sg };
		}
		posted = locus_verbs_post(n->peer[node], m, k);
		if (posted <= 0)
			return; /* no credits or send queue room now; a down peer is drained */
		now = rte_get_tsc_cycles();
		if (unlikely(!n->up_msg_tsc))
			n->up_msg_tsc = now; /* the rail carries traffic again */
		for (int j = 0; j < posted; j++) {
			struct tx_rec *r = &n->n->rec[b->idx[(b->head + (uint32_t)j) % BACKLOG]];

			r->t_post = now;
			if (r->n_sg)
				n->rows_zc += r->rows;
			else
				n->rows_copied += r->rows;
		}
		b->head += (uint32_t)posted;
	}
}

/*
 * Make record r sendable on rail k: its region's segments take rail k's
 * lkey, or are copied into its buffer when rail k's device has no MR of the
 * region (then it is whole and goes anywhere). 0 or negative (nothing to
 * copy from: a region neither mapped nor registered with k's device).
 */
static int place(struct locusd_net *n, struct tx_rec *r, uint32_t k)
{
	int ret;

	if (!r->key)
		return 0;
	ret = locus_rail_mrs_resolve(&n->mrs, r->key, k, r->buf, &r->len, POOL_OBJ, r->sg,
				     &r->n_sg);
	if (ret == 1)
		r->key = 0;
	return ret < 0 ? ret : 0;
}

/* Rows of a client region in a rows message (header, rows header, ...), or 0. */
static uint32_t region_rows(const void *buf, size_t len)
{
	if (len < sizeof(struct locus_msg_hdr) + sizeof(struct locus_rows_hdr))
		return 0;
	return locus_rows_hdr_of((void *)buf)->n_rows;
}

/*
 * Queue a message (header buf, then n_sg gathered segments). It is posted by
 * the next locusd_net_poll() of this lcore with every other message queued
 * since, as one list behind one doorbell: on Soft-RoCE each doorbell is a
 * system call that runs the device's send path in it.
 */
static int enqueue(struct locusd_net *n, uint32_t node, void *buf, size_t len, uint64_t cookie,
		   const struct locus_engine_sge *sg, uint32_t n_sg)
{
	const struct locus_msg_hdr *h = buf;
	struct backlog *b;
	struct tx_rec *r;
	uint32_t idx, src;
	int k, ret;

	if (node >= n->cfg->n_nodes || node == n->cfg->node_id)
		return -LOCUS_EPEERDOWN;
	if (n_sg > LOCUS_VERBS_MAX_SGE - 1)
		return -LOCUS_ERANGE;
	/* the segments come from one region, their lkey its key (locus_engine.h) */
	for (uint32_t j = 1; j < n_sg; j++)
		if (sg[j].lkey != sg[0].lkey)
			return -EINVAL;
	/* the engine's messages start with the header; the rail follows its source rank */
	src = locus_rails_src(&n->pick, len >= sizeof(*h) ? h->src_rank : 0);
	k = locus_rails_pick(&n->pick, node, src, n->up_mask[node]);
	if (k < 0)
		return -LOCUS_EPEERDOWN;
	b = &n->rail[k].bl[node];
	if (!n->n_rec_free || b->tail - b->head >= BACKLOG)
		return -LOCUS_EFULL;
	idx = n->rec_free[--n->n_rec_free];
	r = &n->rec[idx];
	r->buf = buf;
	r->len = (uint32_t)len;
	r->node = node;
	r->cookie = cookie;
	r->n_sg = n_sg;
	r->src = src;
	r->key = n_sg ? sg[0].lkey : 0;
	r->rows = n_sg ? region_rows(buf, len) : 0;
	for (uint32_t j = 0; j < n_sg; j++)
		r->sg[j] = (struct locus_verbs_sge){ .addr = sg[j].addr, .len = sg[j].len,
						     .lkey = sg[j].lkey };
	ret = place(n, r, (uint32_t)k);
	if (ret < 0) {
		rec_put(n, idx);
		return ret;
	}
	if ((uint32_t)k != locus_rails_home(&n->pick, node, src)) {
		struct rail *home = &n->rail[locus_rails_home(&n->pick, node, src)];

		n->rail[k].away++;
		if (unlikely(!home->moved_tsc))
			home->moved_tsc = rte_get_tsc_cycles();
	}
	b->idx[b->tail++ % BACKLOG] = idx;
	locus_rails_sent(&n->pick, node, src);
	return 0;
}

static int rt_send(void *ctx, uint32_t node, void *buf, size_t len, uint64_t cookie)
{
	return enqueue(ctx, node, buf, len, cookie, NULL, 0);
}

/*
 * A message whose rows stay in a client's registered region: the header
 * from our pool buffer, then the region's segments, in one WRITE_WITH_IMM
 * on whichever rail the message takes (each rail has its own MR of the
 * region: the segments carry the region's key, place() gives them the
 * rail's lkey, or copies them where the rail has none). The engine keeps
 * the region registered until this send completes.
 */
static int rt_send_sg(void *ctx, uint32_t node, void *buf, size_t hdr_len,
		      const struct locus_engine_sge *sg, uint32_t n_sg, uint64_t cookie)
{
	return enqueue(ctx, node, buf, hdr_len, cookie, sg, n_sg);
}

/* ---- client buffer regions: an MR per rail (main lcore; verbs calls are thread-safe) ---- */

/*
 * -ENODEV when rail's device is going or gone (its endpoint frees it next,
 * or has): locus_rail_mrs registers the region there when it is back. While
 * it is being reopened (REOPENING: the restore) it takes registrations.
 */
static int dev_gone(const struct locusd_net *n, uint32_t rail, struct locus_error *err)
{
	unsigned st = locus_verbs_ep_device_state(n->rail[rail].ep);

	if (st == LOCUS_DEV_LIVE || st == LOCUS_DEV_REOPENING)
		return 0;
	return locus_error_set(err, ENODEV, "%s is gone", n->rail[rail].dev);
}

static int dev_reg_dmabuf(void *ctx, uint32_t rail, int fd, uint64_t offset, uint64_t len,
			  uint64_t iova, uint32_t *lkey, void **mr, struct locus_error *err)
{
	struct locusd_net *n = ctx;
	struct locus_verbs_mr *m;
	int ret = dev_gone(n, rail, err);

	if (ret < 0)
		return ret;
	m = calloc(1, sizeof(*m));
	if (!m)
		return locus_error_set(err, ENOMEM, "out of memory");
	ret = locus_verbs_mr_reg_dmabuf(n->rail[rail].ep, fd, offset, len, iova, 0, m, err);
	if (ret < 0) {
		free(m);
		return ret;
	}
	*lkey = m->lkey;
	*mr = m;
	return 0;
}

static int dev_reg_mapped(void *ctx, uint32_t rail, void *addr, uint64_t len, uint32_t *lkey,
			  void **mr, struct locus_error *err)
{
	struct locusd_net *n = ctx;
	struct locus_verbs_mr *m;
	int ret = dev_gone(n, rail, err);

	if (ret < 0)
		return ret;
	m = calloc(1, sizeof(*m));
	if (!m)
		return locus_error_set(err, ENOMEM, "out of memory");
	ret = locus_verbs_mr_reg(n->rail[rail].ep, addr, len, 0, m, err);
	if (ret < 0) {
		free(m);
		return ret;
	}
	*lkey = m->lkey;
	*mr = m;
	return 0;
}

static void dev_dereg(void *ctx, uint32_t rail, void *mr)
{
	(void)ctx;
	(void)rail;
	locus_verbs_mr_free(mr);
	free(mr);
}

/* A region on every rail: its key is what the engine's gather entries carry as lkey. */
static int mr_reg(void *ctx, int fd, uint64_t offset, uint64_t len, void *map, uint32_t *lkey,
		  uint64_t *iova, void **handle, struct locus_rail_mr_how *how)
{
	struct locusd_net *n = ctx;
	int key = locus_rail_mrs_reg(&n->mrs, fd, offset, len, map, iova, how);

	if (key < 0)
		return key;
	*lkey = (uint32_t)key;
	*handle = (void *)(uintptr_t)key;
	return 0;
}

static void mr_dereg(void *ctx, void *handle)
{
	struct locusd_net *n = ctx;

	locus_rail_mrs_dereg(&n->mrs, (uint32_t)(uintptr_t)handle);
}

const struct locus_regions_mr_ops *locusd_net_mr_ops(struct locusd_net *n)
{
	n->mr_ops = (struct locus_regions_mr_ops){ .reg = mr_reg, .dereg = mr_dereg, .ctx = n };
	return &n->mr_ops;
}

/* ---- verbs callbacks (on the worker lcore) ----------------------------------------------- */

/*
 * The engine checks every byte and copies what it keeps. When the local
 * receiver has no room, the message stays in the verbs inbox (its slots are
 * not credited back, so the sender slows down) and is handed again from
 * locusd_net_poll(); later messages of that peer wait behind it, in order.
 */
static int on_recv(void *arg, struct locus_verbs_peer *p, const void *data, uint32_t len)
{
	struct rail *rl = arg;
	struct locusd_net *n = rl->n;
	uint16_t node = locus_verbs_peer_node(p);
	struct held *h = &rl->rx_held[node];

	if (h->head == h->tail &&
	    n->sink.recv(n->sink.ctx, node, data, len) != -LOCUS_EFULL)
		return 0;
	if (h->tail - h->head >= h->cap)
		return 0; /* more messages than inbox slots: cannot happen, never hold it */
	h->data[h->tail % h->cap] = data;
	h->len[h->tail % h->cap] = len;
	h->tail++;
	return LOCUS_VERBS_HOLD;
}

/* Hand held messages of rail rl again, oldest first, and release each one taken. */
static void retry_held(struct rail *rl, uint32_t node)
{
	struct locusd_net *n = rl->n;
	struct held *h = &rl->rx_held[node];

	while (h->head != h->tail) {
		uint32_t i = h->head % h->cap;

		if (n->sink.recv(n->sink.ctx, node, h->data[i], h->len[i]) == -LOCUS_EFULL)
			return;
		h->head++;
		locus_verbs_release(rl->peer[node], 1);
	}
}

/* A message's end, once: to the engine, its buffer and record back. */
static void msg_end(struct locusd_net *n, uint32_t idx, int status)
{
	struct tx_rec *r = &n->rec[idx];

	locus_rails_ended(&n->pick, r->node, r->src);
	n->sink.done(n->sink.ctx, r->cookie, status);
	rte_mempool_put(n->pool, r->buf);
	rec_put(n, idx);
}

/*
 * A message's send time, post to completion (the peer's device acknowledged
 * it: a round trip plus the queue ahead of it), by rail and peer: the peer
 * or rail that stalls the others shows here (rail_send_ns).
 */
static void send_time(struct rail *rl, const struct tx_rec *r)
{
	struct locusd_net *n = rl->n;
	uint64_t hz = rte_get_tsc_hz(), dt;
	uint8_t pi;

	if (!n->ctr_block || !n->ctr_send_ns || !r->t_post || r->node >= LOCUS_CFG_MAX_NODES ||
	    (pi = n->peer_idx[r->node]) == 0xff || !hz)
		return;
	dt = rte_get_tsc_cycles() - r->t_post;
	locus_hist_record_elem(n->ctr_block, n->ctr_send_ns, rl->idx * n->n_peer_ids + pi,
			       dt / hz * 1000000000ull + dt % hz * 1000000000ull / hz);
}

/*
 * A posted message that failed may have reached the peer (only its ACK may
 * be lost): it is never sent again, it fails once, counted on its rail.
 */
static void on_send_done(void *arg, struct locus_verbs_peer *p, uint64_t cookie, int status)
{
	struct rail *rl = arg;

	(void)p;
	if (cookie >= POOL_N)
		return;
	if (status < 0)
		rl->failed++;
	else
		send_time(rl, &rl->n->rec[cookie]);
	msg_end(rl->n, (uint32_t)cookie, status);
}

static void on_peer_up(void *arg, struct locus_verbs_peer *p)
{
	struct rail *rl = arg;
	uint16_t node = locus_verbs_peer_node(p);

	rl->up_msg_tsc = 0; /* flush_backlog stamps the rail's first message from here */
	if (rl->down_since[node]) {
		rl->down_tsc += rte_get_tsc_cycles() - rl->down_since[node];
		rl->down_since[node] = 0;
	}
	__atomic_store_n(&rl->up[node], 1, __ATOMIC_RELAXED);
	__atomic_fetch_or(&rl->n->up_mask[node], 1u << rl->idx, __ATOMIC_RELAXED);
	__atomic_store_n(&rl->n_up[node], rl->n_up[node] + 1, __ATOMIC_RELEASE);
}

/*
 * Rail failover: messages of this rail's backlog never reached the wire, so
 * the peer cannot have seen them: each goes to the backlog of the rail its
 * source moves to (in order: a source's messages were all on this rail),
 * its region rows given that rail's lkey or copied (place()), or fails once
 * when no rail to node is up, that backlog is full or the rows cannot go
 * there.
 * Everything posted on this connection has ended before (locus_verbs.h,
 * "Failure"): once the rail is down to node, nothing of it is in flight.
 */
static void on_peer_down(void *arg, struct locus_verbs_peer *p, int reason)
{
	struct rail *rl = arg;
	struct locusd_net *n = rl->n;
	uint16_t node = locus_verbs_peer_node(p);
	struct backlog *b = &rl->bl[node];

	/* a refused dial of a peer that is not there yet is no news */
	if (rl->up[node] || reason != -ECONNREFUSED) {
		__atomic_store_n(&rl->down_reason[node], reason, __ATOMIC_RELAXED);
		__atomic_store_n(&rl->n_down[node], rl->n_down[node] + 1, __ATOMIC_RELEASE);
	}
	if (rl->up[node]) {
		rl->failovers++;
		rl->failed_tsc = rl->down_since[node] = rte_get_tsc_cycles() | 1;
		rl->moved_tsc = 0;
	}
	__atomic_store_n(&rl->up[node], 0, __ATOMIC_RELAXED);
	__atomic_fetch_and(&n->up_mask[node], ~(1u << rl->idx), __ATOMIC_RELAXED);
	/* held messages died with the connection (the peer rewrites its slots) */
	rl->rx_held[node].head = rl->rx_held[node].tail;
	while (b->head != b->tail) {
		uint32_t idx = b->idx[b->head++ % BACKLOG];
		int k = locus_rails_pick(&n->pick, node, n->rec[idx].src, n->up_mask[node]);
		struct backlog *to = k >= 0 ? &n->rail[k].bl[node] : NULL;

		if (to && to->tail - to->head < BACKLOG && place(n, &n->rec[idx], (uint32_t)k) == 0) {
			to->idx[to->tail++ % BACKLOG] = idx;
			rl->resent++;
			if (!rl->moved_tsc)
				rl->moved_tsc = rte_get_tsc_cycles();
			continue;
		}
		rl->failed++;
		msg_end(n, idx, -LOCUS_EPEERDOWN);
	}
}

/* ---- a rail's device going away and coming back (main lcore, verbs/dev.c) ------------------ */

/*
 * "RDMA device rxex2 (rail 1)" with several rails, "RDMA device rxex" with
 * one: the rail's name in the log lines below.
 */
static const char *dev_tag(const struct rail *rl, char *buf, size_t len)
{
	if (rl->n->n_rails > 1)
		snprintf(buf, len, "RDMA device %s (rail %u)", rl->dev, rl->idx);
	else
		snprintf(buf, len, "RDMA device %s", rl->dev);
	return buf;
}

/* CLOCK_REALTIME in ms (the rail_*_at_ms counters' clock). */
static int64_t wall_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The rail's endpoint is about to free its PD (lost: its device went away;
 * else the transport is being destroyed): the message pool's MRs and every
 * client region's MR on this rail go first, and rail_mr forgets their keys.
 * Why none of them is in use: the endpoint calls this only once every
 * connection of the rail ended (on_peer_down ran for each on the data lcore:
 * the rail's backlog moved to other rails or failed, nothing posted is
 * outstanding) and the data lcore acked that it touches the device no more
 * (the endpoint's device word, locus_verbs_dev.h: a quiescent handshake). The
 * data lcore reads a rail's lkeys (lkey_of, place()) only for a rail it has
 * a connection up on, and has one again only after rail_restore and a new
 * connection, both published to it with release / acquire.
 */
static void rail_release(void *arg, struct locus_verbs_ep *ep, bool lost)
{
	struct rail *rl = arg;
	char tag[96];

	(void)ep;
	pool_unreg(rl);
	locus_rail_mrs_drop_rail(&rl->n->mrs, rl->idx);
	if (lost)
		fprintf(stderr, "locusd: %s released: its QPs, CQ, the message pool's and the "
			"client regions' MRs, PD and context\n", dev_tag(rl, tag, sizeof(tag)));
}

/*
 * The rail's device is back (reopened by its endpoint, new PD): the message
 * pool and every client region registered with it again, before any
 * connection of it (a region its device does not take copies its rows on
 * this rail only, counted in rail_region_no_mr). 0, or -EIO with the pool
 * left unregistered (the endpoint closes the device and tries again later).
 */
static int rail_restore(void *arg, struct locus_verbs_ep *ep, struct locus_error *err)
{
	struct rail *rl = arg;

	(void)ep;
	if (pool_reg(rl->n, rl) < 0)
		return locus_error_set(err, EIO, "cannot register the message pool with %s again",
				       rl->dev);
	rl->restored_regions = locus_rail_mrs_restore_rail(&rl->n->mrs, rl->idx,
							   &rl->restored_no_mr);
	return 0;
}

/* What the rail's device did since the last control pass: counted, timed, logged. */
static void rail_dev_news(struct rail *rl)
{
	const struct locus_verbs_ep_stats *st = locus_verbs_ep_stats(rl->ep);
	const char *note = locus_verbs_ep_device_note(rl->ep);
	char tag[96];

	if (st->dev_lost != rl->seen_dev_lost) {
		rl->seen_dev_lost = st->dev_lost;
		rl->failed_note[0] = '\0';
		__atomic_store_n(&rl->dev_lost_ms, wall_now_ms(), __ATOMIC_RELAXED);
		__atomic_store_n(&rl->dev_lost, rl->dev_lost + 1, __ATOMIC_RELAXED);
		fprintf(stderr, "locusd: %s lost (%s): its connections close, then its verbs "
			"objects are freed and it is looked for every %u ms\n",
			dev_tag(rl, tag, sizeof(tag)), note, rl->n->dev_probe_ms);
	}
	if (st->dev_reopen_failed != rl->seen_reopen_failed) {
		rl->seen_reopen_failed = st->dev_reopen_failed;
		/* the same reason every probe: once */
		if (strncmp(rl->failed_note, note, sizeof(rl->failed_note) - 1)) {
			snprintf(rl->failed_note, sizeof(rl->failed_note), "%s", note);
			fprintf(stderr, "locusd: %s %s (tried again every %u ms)\n",
				dev_tag(rl, tag, sizeof(tag)), note, rl->n->dev_probe_ms);
		}
	}
	if (st->dev_back != rl->seen_dev_back) {
		int64_t now = wall_now_ms();

		rl->seen_dev_back = st->dev_back;
		__atomic_store_n(&rl->dev_back_ms, now, __ATOMIC_RELAXED);
		__atomic_store_n(&rl->dev_back, rl->dev_back + 1, __ATOMIC_RELAXED);
		fprintf(stderr, "locusd: %s back %lld ms after it was lost: reopened, the message "
			"pool and %u client region(s) registered with it again (%u without an MR "
			"there: copied on it); its peers reconnect\n", dev_tag(rl, tag, sizeof(tag)),
			(long long)(now - rl->dev_lost_ms), rl->restored_regions, rl->restored_no_mr);
	}
}

/* ---- life cycle ----------------------------------------------------------------------------- */

/* Free what rail_open() and the set-up made of rl (NULL endpoint: nothing). */
static void rail_close(struct rail *rl)
{
	/*
	 * tearing the peers down completes what is in flight (engine still
	 * alive); the pool's MRs go before the PD (rail_release)
	 */
	locus_verbs_ep_destroy(rl->ep);
	pool_unreg(rl);
	for (uint32_t i = 0; i < rl->n->n_peer_ids; i++) {
		free(rl->rx_held[rl->n->peer_ids[i]].data);
		free(rl->rx_held[rl->n->peer_ids[i]].len);
	}
}

/*
 * Open rail r: its device (n->devs, resolved from rdma_device: names, or
 * auto's choice), bound to this node's address for the rail, listening on
 * its port, and the held-message rings for its peers. ep: the parameters
 * every rail shares.
 */
static int rail_open(struct locusd_net *n, uint32_t r, struct locus_verbs_ep_params *ep,
		     struct locus_error *err)
{
	const struct locus_config *cfg = n->cfg;
	const struct locus_cfg_addr *me = &cfg->nodes[cfg->node_id].rail[r];
	struct rail *rl = &n->rail[r];
	int ret;

	rl->n = n;
	rl->idx = r;
	snprintf(rl->dev, sizeof(rl->dev), "%s", n->devs.name[r]);
	ep->local_addr.s_addr = me->ipv4;
	ep->port = me->port;
	ep->dev_name = rl->dev;
	ep->cb.arg = rl;
	ep->dev_cb.arg = rl;
	ret = locus_verbs_ep_create(ep, &rl->ep, err);
	if (ret < 0 && n->n_rails > 1) {
		char why[sizeof(err->msg)];

		snprintf(why, sizeof(why), "%s", err->msg);
		return locus_error_set(err, -ret, "rail %u (%s): %s", r, rl->dev, why);
	}
	if (ret < 0)
		return ret;
	for (uint32_t i = 0; i < n->n_peer_ids; i++) {
		struct held *h = &rl->rx_held[n->peer_ids[i]];

		h->cap = cfg->inbox_slots;
		h->data = calloc(h->cap, sizeof(*h->data));
		h->len = calloc(h->cap, sizeof(*h->len));
		if (!h->data || !h->len)
			return locus_error_set(err, ENOMEM, "out of memory");
	}
	return 0;
}

/*
 * Declare every node that shares rail r (the lower id dials, the higher
 * accepts). With etcd a node is a member only once its record is read
 * (locusd_net_member): until then it is neither dialled nor accepted.
 */
static int rail_peers(struct locusd_net *n, uint32_t r, struct locus_error *err)
{
	const struct locus_config *cfg = n->cfg;
	struct rail *rl = &n->rail[r];

	for (uint32_t i = 0; i < n->n_peer_ids; i++) {
		uint32_t node = n->peer_ids[i];
		struct sockaddr_in sa = { .sin_family = AF_INET };
		int ret;

		if (r >= locus_config_common_rails(cfg, cfg->node_id, node))
			continue;
		if (cfg->nodes[node].set) {
			sa.sin_addr.s_addr = cfg->nodes[node].rail[r].ipv4;
			sa.sin_port = htons(cfg->nodes[node].rail[r].port);
		}
		ret = locus_verbs_peer_add(rl->ep, (uint16_t)node,
					   cfg->node_id < node ? &sa : NULL, &rl->peer[node], err);
		if (ret < 0)
			return ret;
		if (cfg->etcd[0])
			locus_verbs_peer_set_member(rl->peer[node], false, NULL);
	}
	return 0;
}

int locusd_net_member(struct locusd_net *n, uint32_t node, const uint32_t *ipv4,
		      const uint16_t *port, uint32_t n_rails, struct locus_error *err)
{
	const struct locus_config *cfg = n->cfg;

	if (node >= cfg->n_nodes || node == cfg->node_id)
		return locus_error_set(err, LOCUS_ERANGE, "node %u is not a peer of node %u (ids "
				       "0..%u)", node, cfg->node_id, cfg->n_nodes - 1);
	if (!locus_config_talks(cfg, cfg->node_id, node))
		return 1; /* in none of this node's groups: never connected */
	if (ipv4 && n_rails != n->n_rails)
		return locus_error_set(err, LOCUS_ERANGE, "node %u lists %u rail(s), this node %u: "
				       "the cluster's nodes have the same rails", node, n_rails,
				       n->n_rails);
	for (uint32_t r = 0; r < n->n_rails; r++) {
		struct locus_verbs_peer *p = n->rail[r].peer[node];
		struct sockaddr_in sa = { .sin_family = AF_INET };

		if (!p)
			continue;
		if (ipv4) {
			sa.sin_addr.s_addr = ipv4[r];
			sa.sin_port = htons(port[r]);
		}
		locus_verbs_peer_set_member(p, ipv4 != NULL, ipv4 ? &sa : NULL);
	}
	return 0;
}

/*
 * rdma_device = auto with gpu_pci: which GPUs' ranks go home to which rail,
 * "locusd: rails by GPU (nearest RDMA device): rail 0 mlx5_0: GPUs 0 (0000:17:00.0), 1 (...)".
 */
static void log_gpu_map(const struct locusd_net *n)
{
	const struct locus_config *cfg = n->cfg;

	for (uint32_t r = 0; r < n->n_rails && n->devs.n_gpus; r++) {
		char list[LOCUS_CFG_MAX_GPUS * 24] = "";
		size_t at = 0;

		for (uint32_t g = 0; g < n->devs.n_gpus; g++)
			if (n->devs.gpu_rail[g] == r && at < sizeof(list))
				at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%u (%s)",
						       at ? ", " : "", g, cfg->gpu_pci[g]);
		fprintf(stderr, "locusd: rail %u (%s) is the home of the ranks of GPU%s %s: the "
			"RDMA device nearest them\n", r, n->rail[r].dev, strchr(list, ',') ? "s" : "",
			list);
	}
}

int locusd_net_create(const struct locus_config *cfg, bool threaded, struct locusd_net **out,
		      struct locus_error *err)
{
	struct locus_verbs_ep_params ep = { 0 };
	uint32_t max_sge = LOCUS_VERBS_MAX_SGE;
	struct in_addr me;
	struct locusd_net *n;
	int ret;

	n = calloc(1, sizeof(*n));
	if (!n)
		return locus_error_set(err, ENOMEM, "out of memory");
	n->cfg = cfg;
	n->n_rails = cfg->nodes[cfg->node_id].n_rails;
	memset(n->peer_idx, 0xff, sizeof(n->peer_idx));
	for (uint32_t node = 0; node < cfg->n_nodes; node++)
		if (node != cfg->node_id && locus_config_talks(cfg, cfg->node_id, node) &&
		    n->n_peer_ids < LOCUS_CFG_MAX_PEERS) {
			n->peer_idx[node] = (uint8_t)n->n_peer_ids;
			n->peer_ids[n->n_peer_ids++] = node;
		}
	ret = locus_rail_devs_resolve(cfg, locusd_sysfs_root(), 1, &n->devs, err);
	if (ret < 0)
		goto err_free;
	if (n->devs.n != n->n_rails) {
		/* the config parser and the resolution say the same: a bug if not */
		ret = locus_error_set(err, ERANGE, "%u RDMA device(s) for %u rail(s)", n->devs.n,
				      n->n_rails);
		goto err_free;
	}
	locus_rails_init(&n->pick, cfg);
	if (n->devs.n_gpus)
		locus_rails_map(&n->pick, n->devs.gpu_rail, n->devs.n_gpus);
	ret = locusd_read_secret(cfg->secret_file, ep.secret, err);
	if (ret < 0)
		goto err_free;
	ep.cluster_id = (uint32_t)cfg->cluster_id;
	ep.node_id = (uint16_t)cfg->node_id;
	ep.slot_count = cfg->inbox_slots;
	ep.max_peers = n->n_peer_ids ? n->n_peer_ids : 1;
	ep.threaded = threaded;
	ep.ack_timeout = cfg->rdma_ack_timeout;
	ep.stall_ms = cfg->rdma_stall_ms; /* 0: the endpoint's default */
	/* every node is configured with the same max_decoders: the same area */
	ep.area_len = (uint32_t)locus_load_row_size(cfg->max_decoders);
	ep.cb = (struct locus_verbs_callbacks){ .on_recv = on_recv, .on_send_done = on_send_done,
						.on_peer_up = on_peer_up,
						.on_peer_down = on_peer_down };
	ep.dev_cb = (struct locus_verbs_dev_callbacks){ .release = rail_release,
							.restore = rail_restore };
	for (unsigned s = 6; s <= 24; s++)
		if ((1u << s) == cfg->inbox_slot_size)
			ep.slot_shift = s;
	if (!ep.slot_shift) {
		ret = locus_error_set(err, EINVAL, "inbox_slot_size %u is not a power of two for "
				      "the RDMA inbox", cfg->inbox_slot_size);
		goto err_rails;
	}
	locus_verbs_ep_params_default(&ep);
	n->dev_probe_ms = ep.dev_probe_ms;
	for (uint32_t r = 0; r < n->n_rails; r++) {
		ret = rail_open(n, r, &ep, err);
		if (ret < 0)
			break;
	}
	explicit_bzero(ep.secret, sizeof(ep.secret)); /* the endpoints keep their own copies */
	if (ret < 0)
		goto err_rails;

	/*
	 * One pool per process: each instance has its own DPDK runtime. Multi-
	 * producer, multi-consumer: with the network on its own lcore, the
	 * engine's lcore and the network's both take and give back buffers
	 * (a single-consumer pool there handed one buffer to two messages).
	 */
	n->pool = rte_mempool_create("locus_tx", POOL_N, POOL_OBJ, 0, 0, NULL, NULL, NULL, NULL,
				     (int)rte_socket_id(), 0);
	if (!n->pool) {
		ret = locus_error_set(err, ENOMEM, "message pool of %d x %d bytes: %s", POOL_N,
				      POOL_OBJ, rte_strerror(rte_errno));
		goto err_rails;
	}
	for (uint32_t r = 0; r < n->n_rails; r++) {
		if (pool_reg(n, &n->rail[r]) < 0) {
			ret = locus_error_set(err, EIO, "cannot register the message pool with %s",
					      n->rail[r].dev);
			goto err_pool;
		}
	}
	for (uint32_t i = 0; i < POOL_N; i++)
		rec_put(n, POOL_N - 1 - i);
	{
		const struct locus_rail_mr_dev dev = { .reg_dmabuf = dev_reg_dmabuf,
						       .reg_mapped = dev_reg_mapped,
						       .dereg = dev_dereg, .ctx = n };

		ret = locus_rail_mrs_init(&n->mrs, n->n_rails,
					  cfg->client_slots * LOCUS_CLIENT_MAX_REGIONS, &dev);
		if (ret < 0) {
			ret = locus_error_set(err, -ret, "client regions' table: %s", strerror(-ret));
			goto err_pool;
		}
	}
	for (uint32_t r = 0; r < n->n_rails; r++) {
		ret = rail_peers(n, r, err);
		if (ret < 0)
			goto err_mrs;
	}
	for (uint32_t r = 0; r < n->n_rails; r++)
		max_sge = LOCUS_MIN(max_sge, (uint32_t)locus_verbs_ep_max_send_sge(n->rail[r].ep));
	n->rt = (struct locus_engine_remote){
		.alloc = rt_alloc, .free = rt_free, .send = rt_send, .peer_up = rt_peer_up,
		/* rows gathered from a client region on any rail: each has an MR of it */
		.send_sg = rt_send_sg,
		/* what every rail's QPs take; the header takes one entry */
		.max_sge = max_sge - 1,
		.write_load = rt_write_load, .load_area = rt_load_area,
		.ctx = n, .max_msg = LOCUS_MIN((size_t)POOL_OBJ,
					       (size_t)(cfg->inbox_slots / 2) * cfg->inbox_slot_size),
		.load_area_len = ep.area_len,
		.load_period_us = 1000,
	};
	n->sync_period = rte_get_tsc_hz() / 1000000 * SYNC_US;
	/* failover instants are exported as wall-clock ms (rail_*_at_ms) */
	n->base_ms = (uint64_t)wall_now_ms();
	n->base_tsc = rte_get_tsc_cycles();
	me.s_addr = cfg->nodes[cfg->node_id].ipv4;
	fprintf(stderr, "locusd: RDMA device %s, node %u at %s:%u, %u peer(s)%s\n",
		n->rail[0].dev, cfg->node_id, inet_ntoa(me), cfg->nodes[cfg->node_id].port,
		n->n_peer_ids, cfg->n_groups ? " (the nodes of its groups)" : "");
	for (uint32_t r = 1; r < n->n_rails; r++) {
		me.s_addr = cfg->nodes[cfg->node_id].rail[r].ipv4;
		fprintf(stderr, "locusd: rail %u: RDMA device %s at %s:%u\n", r, n->rail[r].dev,
			inet_ntoa(me), cfg->nodes[cfg->node_id].rail[r].port);
	}
	log_gpu_map(n);
	*out = n;
	return 0;

err_mrs:
	locus_rail_mrs_fini(&n->mrs);
err_pool:
	for (uint32_t r = 0; r < n->n_rails; r++)
		pool_unreg(&n->rail[r]);
	rte_mempool_free(n->pool);
err_rails:
	for (uint32_t r = n->n_rails; r-- > 0;)
		rail_close(&n->rail[r]);
err_free:
	explicit_bzero(ep.secret, sizeof(ep.secret));
	free(n);
	return ret;
}

const struct locus_engine_remote *locusd_net_transport(struct locusd_net *n)
{
	return &n->rt;
}

int locusd_net_attach(struct locusd_net *n, struct locus_engine *eng, struct locus_counters *c,
		      uint32_t engine_block, uint32_t ctl_block, struct locus_error *err)
{
	n->eng = eng;
	if (!n->sink.recv)
		locus_engine_sink_of(eng, &n->sink);
	for (uint32_t r = 0; r < n->n_rails; r++) {
		char prefix[16];
		int ret;

		/* rail 0 keeps the single device's names */
		snprintf(prefix, sizeof(prefix), r ? "verbs_r%u" : "verbs", r);
		ret = locus_verbs_counters_attach(n->rail[r].ep, c, engine_block, ctl_block, prefix,
						  err);
		if (ret < 0)
			return ret;
	}
	return locusd_net_attach_rail_counters(n, c, engine_block, err);
}

void locusd_net_set_sink(struct locusd_net *n, const struct locus_engine_sink *sink)
{
	n->sink = *sink;
}

int locusd_net_poll(struct locusd_net *n, uint64_t now)
{
	int work = 0;

	for (uint32_t r = 0; r < n->n_rails; r++) {
		struct rail *rl = &n->rail[r];
		int w = locus_verbs_poll(rl->ep);

		work += w > 0 ? w : 0;
		for (uint32_t i = 0; i < n->n_peer_ids; i++) {
			uint32_t node = n->peer_ids[i];

			if (rl->rx_held[node].head != rl->rx_held[node].tail)
				retry_held(rl, node);
			if (rl->bl[node].head != rl->bl[node].tail)
				flush_backlog(rl, node);
		}
	}
	if (unlikely(now >= n->next_sync)) {
		for (uint32_t r = 0; r < n->n_rails; r++)
			locus_verbs_counters_sync_data(n->rail[r].ep); /* plain stores */
		locusd_net_sync_rail_counters(n, now);
		n->next_sync = now + n->sync_period;
	}
	return work;
}

/* "peer node N up", with several rails "... on rail R (dev)". */
static void log_peer(const struct locusd_net *n, const struct rail *rl, uint32_t node,
		     const char *what, int reason)
{
	char on[96] = "";

	if (n->n_rails > 1)
		snprintf(on, sizeof(on), " on rail %u (%s)", rl->idx, rl->dev);
	fprintf(stderr, "locusd: peer node %u %s%s%s%s\n", node, what, on, reason ? ": " : "",
		reason ? locus_strerror(reason) : "");
}

static void log_down(struct locusd_net *n, struct rail *rl, uint32_t node, uint32_t down)
{
	log_peer(n, rl, node, "down", __atomic_load_n(&rl->down_reason[node], __ATOMIC_RELAXED));
	rl->seen_down[node] = down;
}

void locusd_net_control(struct locusd_net *n)
{
	for (uint32_t r = 0; r < n->n_rails; r++) {
		struct rail *rl = &n->rail[r];

		/* rdma_cm events, redials, hand-overs, the device's life: a non-blocking look */
		locus_verbs_service(rl->ep, 0);
		rail_dev_news(rl);
		for (uint32_t i = 0; i < n->n_peer_ids; i++) {
			uint32_t node = n->peer_ids[i];
			uint32_t up = __atomic_load_n(&rl->n_up[node], __ATOMIC_ACQUIRE);
			uint32_t down = __atomic_load_n(&rl->n_down[node], __ATOMIC_ACQUIRE);
			bool now_up = rl->peer[node] &&
				      locus_verbs_peer_state(rl->peer[node]) == LOCUS_VERBS_UP;

			/* both within one period: a peer up now went down first */
			if (down != rl->seen_down[node] && now_up)
				log_down(n, rl, node, down);
			if (up != rl->seen_up[node]) {
				log_peer(n, rl, node, "up", 0);
				rl->seen_up[node] = up;
			}
			if (down != rl->seen_down[node])
				log_down(n, rl, node, down);
		}
	}
}

void locusd_net_destroy(struct locusd_net *n)
{
	if (!n)
		return;
	/* regions left registered (locusd releases them first): MRs before their PDs */
	locus_rail_mrs_fini(&n->mrs);
	for (uint32_t r = n->n_rails; r-- > 0;)
		rail_close(&n->rail[r]);
	rte_mempool_free(n->pool);
	free(n);
}
