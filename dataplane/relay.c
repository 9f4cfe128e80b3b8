// SPDX-License-Identifier: MIT
/*
 * The engine-lcore / net-lcore relay (locus_relay.h). Three SPSC rings
 * (locus_spsc.h): tx (engine -> net), done and rx (net -> engine); the
 * rings are sized so that what must never be lost (send ends) always fits,
 * and a done that still finds its ring full waits in a net-side overflow
 * queue.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "locus_common.h"
#include "locus_err.h"
#include "locus_relay.h"
#include "locus_spsc.h"

#define RELAY_MAX_SG 16
#define MAX_NODE_IDS 1024       /* node ids a message may come from (LOCUS_CFG_MAX_NODES) */
#define MAX_PEERS    64         /* distinct nodes held for at once (LOCUS_CFG_MAX_PEERS) */
#define NO_FIFO      0xffffu
/* a counter only this side writes, read by the other: plain store, no lock */
#define BUMP(x) __atomic_store_n(&(x), (x) + 1, __ATOMIC_RELAXED)

enum { TX_SEND = 1, TX_LOAD = 2 };

struct tx_item {
	uint32_t kind, node;
	void *buf;
	uint64_t len;            /* SEND: whole message (n_sg = 0) or header bytes */
	uint64_t cookie;
	uint32_t n_sg, pad;
	struct locus_engine_sge sg[RELAY_MAX_SG];
};

struct done_item {
	uint64_t cookie;
	int64_t status;
};

struct rx_item {
	void *buf;
	uint32_t node, len;
};

struct rx_fifo {
	struct rx_item *e;
	uint32_t head, tail;
};

struct locus_relay {
	struct locus_engine_remote down;     /* the transport below (a copy) */
	struct locus_engine_remote up;       /* what the engine sees */
	struct locus_engine_sink sink;       /* what the transport below sees */
	struct locus_engine_sink eng;        /* where the engine side hands things */
	uint64_t tag;                        /* our id in a mux, in the cookies' top byte */
	int in_mux;                          /* given to a mux (relay 0's tag is 0 too) */
	uint32_t ring;
	struct locus_spsc tx, done, rx;
	/* engine side */
	struct rx_fifo held[MAX_PEERS] __locus_cache_aligned;
	uint32_t held_node[MAX_PEERS];       /* the node each fifo holds for */
	uint16_t fifo_of[MAX_NODE_IDS];      /* a node's fifo, NO_FIFO before its first message */
	uint32_t n_fifos, n_held;
	uint64_t e_tx, e_rx, e_rx_held, e_done, e_rx_refused;
	/* net side */
	struct done_item *ovf __locus_cache_aligned; /* dones that found their ring full */
	uint32_t ovf_head, ovf_tail;
	uint64_t n_tx_refused, n_rx, n_rx_no_room, n_rx_refused, n_tx;
};

/* ---- the engine as a sink ----------------------------------------------------------------- */

static int eng_recv(void *ctx, uint32_t node, const void *msg, size_t len)
{
	return locus_engine_remote_recv(ctx, node, msg, len);
}

static void eng_done(void *ctx, uint64_t cookie, int status)
{
	locus_engine_remote_done(ctx, cookie, status);
}

void locus_engine_sink_of(struct locus_engine *e, struct locus_engine_sink *out)
{
	*out = (struct locus_engine_sink){ .recv = eng_recv, .done = eng_done, .ctx = e };
}

/* ---- engine side: the transport the engine sees -------------------------------------------- */

static void *up_alloc(void *ctx, size_t len)
{
	struct locus_relay *r = ctx;

	return r->down.alloc(r->down.ctx, len);
}

static void up_free(void *ctx, void *buf)
{
	struct locus_relay *r = ctx;

	r->down.free(r->down.ctx, buf);
}

static int up_peer_up(void *ctx, uint32_t node)
{
	struct locus_relay *r = ctx;

	return r->down.peer_up(r->down.ctx, node);
}

static int up_send_sg(void *ctx, uint32_t node, void *buf, size_t hdr_len,
		      const struct locus_engine_sge *sg, uint32_t n_sg, uint64_t cookie)
{
	struct locus_relay *r = ctx;
	struct tx_item t = { .kind = TX_SEND, .node = node, .buf = buf, .len = hdr_len,
			     .cookie = cookie | r->tag, .n_sg = n_sg };

	if (n_sg > RELAY_MAX_SG || (cookie & ~LOCUS_RELAY_COOKIE_MASK))
		return -LOCUS_ERANGE;
	if (!r->down.peer_up(r->down.ctx, node))
		return -LOCUS_EPEERDOWN;
	/* no more sends open than their ends have room: the done ring and its overflow */
	if (r->e_tx - r->e_done >= 5ull * r->ring)
		return -LOCUS_EFULL;
	if (n_sg)
		memcpy(t.sg, sg, sizeof(*sg) * n_sg);
	if (locus_spsc_put(&r->tx, &t) < 0)
		return -LOCUS_EFULL; /* buf stays the engine's */
	r->e_tx++;
	return 0;
}

static int up_send(void *ctx, uint32_t node, void *buf, size_t len, uint64_t cookie)
{
	return up_send_sg(ctx, node, buf, len, NULL, 0, cookie);
}

static int up_write_load(void *ctx, uint32_t node, const void *row, size_t len)
{
	struct locus_relay *r = ctx;
	struct tx_item t = { .kind = TX_LOAD, .node = node, .len = len };

	if (!r->down.peer_up(r->down.ctx, node))
		return -LOCUS_EPEERDOWN;
	t.buf = r->down.alloc(r->down.ctx, len);
	if (!t.buf)
		return -EBUSY; /* the next period writes a newer row anyway */
	memcpy(t.buf, row, len);
	if (locus_spsc_put(&r->tx, &t) < 0) {
		r->down.free(r->down.ctx, t.buf);
		return -EBUSY;
	}
	return 0;
}

static const volatile void *up_load_area(void *ctx, uint32_t node)
{
	struct locus_relay *r = ctx;

	return r->down.load_area(r->down.ctx, node);
}

/* ---- net side: the sink the transport below sees -------------------------------------------- */

static int sink_recv(void *ctx, uint32_t node, const void *msg, size_t len)
{
	struct locus_relay *r = ctx;
	struct rx_item it = { .node = node, .len = (uint32_t)len };

	if (node >= MAX_NODE_IDS || len > r->down.max_msg) {
		/* no peer of ours sends that: refused, counted, its slot goes back */
		BUMP(r->n_rx_refused);
		return -LOCUS_EPROTO;
	}
	it.buf = r->down.alloc(r->down.ctx, len);
	if (!it.buf) {
		BUMP(r->n_rx_no_room);
		return -LOCUS_EFULL;
	}
	memcpy(it.buf, msg, len);
	if (locus_spsc_put(&r->rx, &it) < 0) {
		r->down.free(r->down.ctx, it.buf);
		BUMP(r->n_rx_no_room);
		return -LOCUS_EFULL;
	}
	BUMP(r->n_rx);
	return 0;
}

static void sink_done(void *ctx, uint64_t cookie, int status)
{
	struct locus_relay *r = ctx;
	struct done_item d = { .cookie = cookie, .status = status };

	if (r->ovf_head == r->ovf_tail && locus_spsc_put(&r->done, &d) == 0)
		return;
	/*
	 * In order behind what already waits. It cannot fill: the engine side
	 * keeps at most 5 rings' worth of sends open (up_send_sg), and every
	 * end not yet taken is one of them.
	 */
	r->ovf[r->ovf_tail % (4 * r->ring)] = d;
	__atomic_store_n(&r->ovf_tail, r->ovf_tail + 1, __ATOMIC_RELEASE);
}

int locus_relay_poll_net(struct locus_relay *r)
{
	struct tx_item t;
	int work = 0;

	while (r->ovf_head != r->ovf_tail &&
	       locus_spsc_put(&r->done, &r->ovf[r->ovf_head % (4 * r->ring)]) == 0) {
		__atomic_store_n(&r->ovf_head, r->ovf_head + 1, __ATOMIC_RELEASE);
		work++;
	}
	for (int i = 0; i < 32 && locus_spsc_get(&r->tx, &t) == 0; i++, work++) {
		int ret;

		if (t.kind == TX_LOAD) {
			r->down.write_load(r->down.ctx, t.node, t.buf, t.len);
			r->down.free(r->down.ctx, t.buf);
			continue;
		}
		ret = t.n_sg ? r->down.send_sg(r->down.ctx, t.node, t.buf, t.len, t.sg, t.n_sg,
					       t.cookie)
			     : r->down.send(r->down.ctx, t.node, t.buf, t.len, t.cookie);
		if (ret < 0) {
			/* the engine was told the send was taken: it ends here, once */
			r->down.free(r->down.ctx, t.buf);
			BUMP(r->n_tx_refused);
			sink_done(r, t.cookie, ret);
		}
		BUMP(r->n_tx);
	}
	return work;
}

/* ---- engine side: polling ------------------------------------------------------------------ */

int locus_relay_poll_engine(struct locus_relay *r)
{
	struct done_item d;
	struct rx_item it;
	int work = 0;

	for (int i = 0; i < 64 && locus_spsc_get(&r->done, &d) == 0; i++, work++) {
		r->e_done++;
		r->eng.done(r->eng.ctx, d.cookie & LOCUS_RELAY_COOKIE_MASK, (int)d.status);
	}
	/* arrivals into their node's queue: a full local receiver holds up only its node */
	while (locus_spsc_count(&r->rx)) {
		struct rx_fifo *f;

		memcpy(&it, locus_spsc_peek(&r->rx), sizeof(it));
		if (r->fifo_of[it.node] == NO_FIFO) {
			if (r->n_fifos == MAX_PEERS) {
				/* more talking nodes than a node has: refused, counted */
				locus_spsc_get(&r->rx, &it);
				r->down.free(r->down.ctx, it.buf);
				r->e_rx_refused++;
				continue;
			}
			r->held_node[r->n_fifos] = it.node;
			r->fifo_of[it.node] = (uint16_t)r->n_fifos++;
		}
		f = &r->held[r->fifo_of[it.node]];
		if (f->tail - f->head > r->rx.mask)
			break; /* that node's queue is full: leave the rest in the ring */
		locus_spsc_get(&r->rx, &it);
		f->e[f->tail++ & r->rx.mask] = it;
		r->n_held++;
		work++;
	}
	for (uint32_t k = 0; r->n_held && k < r->n_fifos; k++) {
		struct rx_fifo *f = &r->held[k];
		uint32_t node = r->held_node[k];

		while (f->head != f->tail) {
			struct rx_item *h = &f->e[f->head & r->rx.mask];

			if (r->eng.recv(r->eng.ctx, node, h->buf, h->len) == -LOCUS_EFULL) {
				r->e_rx_held++;
				break; /* in order: later ones of this node wait behind it */
			}
			r->down.free(r->down.ctx, h->buf);
			f->head++;
			r->n_held--;
			r->e_rx++;
			work++;
		}
	}
	return work;
}

uint32_t locus_relay_inflight(const struct locus_relay *r)
{
	return locus_spsc_count(&r->tx) + locus_spsc_count(&r->done) +
	       locus_spsc_count(&r->rx) + r->n_held +
	       (__atomic_load_n(&r->ovf_tail, __ATOMIC_RELAXED) -
		__atomic_load_n(&r->ovf_head, __ATOMIC_RELAXED));
}

void locus_relay_stats(const struct locus_relay *r, struct locus_relay_stats *out)
{
	*out = (struct locus_relay_stats){
		.tx = __atomic_load_n(&r->n_tx, __ATOMIC_RELAXED),
		.tx_refused = __atomic_load_n(&r->n_tx_refused, __ATOMIC_RELAXED),
		.rx = r->e_rx, .rx_held = r->e_rx_held,
		.rx_no_room = __atomic_load_n(&r->n_rx_no_room, __ATOMIC_RELAXED),
		.rx_refused = __atomic_load_n(&r->n_rx_refused, __ATOMIC_RELAXED) +
			      r->e_rx_refused,
		.done = r->e_done,
	};
}

/* ---- life cycle ---------------------------------------------------------------------------- */

const struct locus_engine_remote *locus_relay_transport(struct locus_relay *r)
{
	return &r->up;
}

const struct locus_engine_sink *locus_relay_sink(struct locus_relay *r)
{
	return &r->sink;
}

void locus_relay_attach(struct locus_relay *r, const struct locus_engine_sink *engine)
{
	r->eng = *engine;
}

/* The done ring and its overflow hold 5 rings' worth of ends: the most sends kept open. */
int locus_relay_create(const struct locus_engine_remote *down, uint32_t ring,
		       struct locus_relay **out)
{
	struct locus_relay *r;

	if (!down || !down->alloc || !down->free || !down->send || !down->peer_up || ring < 16 ||
	    (ring & (ring - 1)) || ring > (1u << 20))
		return -EINVAL;
	r = aligned_alloc(LOCUS_CACHE_LINE, LOCUS_ALIGN_UP(sizeof(*r), LOCUS_CACHE_LINE));
	if (!r)
		return -ENOMEM;
	memset(r, 0, sizeof(*r));
	r->down = *down;
	r->ring = ring;
	if (locus_spsc_init(&r->tx, ring, sizeof(struct tx_item)) ||
	    locus_spsc_init(&r->done, ring, sizeof(struct done_item)) ||
	    locus_spsc_init(&r->rx, ring, sizeof(struct rx_item)))
		goto err_free;
	r->ovf = calloc(4 * (size_t)ring, sizeof(*r->ovf));
	if (!r->ovf)
		goto err_free;
	for (int i = 0; i < MAX_PEERS; i++) {
		r->held[i].e = calloc(ring, sizeof(struct rx_item));
		if (!r->held[i].e)
			goto err_free;
	}
	for (int i = 0; i < MAX_NODE_IDS; i++)
		r->fifo_of[i] = NO_FIFO;
	r->up = (struct locus_engine_remote){
		.alloc = up_alloc, .free = up_free, .send = up_send, .peer_up = up_peer_up,
		.send_sg = down->send_sg ? up_send_sg : NULL,
		.max_sge = LOCUS_MIN(down->max_sge, (uint32_t)RELAY_MAX_SG),
		.write_load = down->write_load ? up_write_load : NULL,
		.load_area = down->load_area ? up_load_area : NULL,
		.ctx = r, .max_msg = down->max_msg, .load_area_len = down->load_area_len,
		.load_period_us = down->load_period_us,
	};
	r->sink = (struct locus_engine_sink){ .recv = sink_recv, .done = sink_done, .ctx = r };
	*out = r;
	return 0;

err_free:
	locus_relay_destroy(r);
	return -ENOMEM;
}

void locus_relay_destroy(struct locus_relay *r)
{
	if (!r)
		return;
	for (int i = 0; i < MAX_PEERS; i++)
		free(r->held[i].e);
	free(r->ovf);
	locus_spsc_fini(&r->tx);
	locus_spsc_fini(&r->done);
	locus_spsc_fini(&r->rx);
	free(r);
}

/* ---- several relays over one transport ------------------------------------------------------ */

struct locus_relay_mux {
	struct locus_engine_sink sink;
	uint32_t (*pick)(void *ctx, const void *msg, size_t len);
	void *pick_ctx;
	uint32_t n;
	struct locus_relay *r[LOCUS_RELAY_MUX_MAX];
};

/* Arrivals: to the engine pick names (its receiver's owner), else engine 0's relay. */
static int mux_recv(void *ctx, uint32_t node, const void *msg, size_t len)
{
	struct locus_relay_mux *m = ctx;
	uint32_t k = m->pick ? m->pick(m->pick_ctx, msg, len) : 0;

	return sink_recv(m->r[k < m->n ? k : 0], node, msg, len);
}

void locus_relay_mux_set_pick(struct locus_relay_mux *m,
			      uint32_t (*pick)(void *ctx, const void *msg, size_t len), void *ctx)
{
	m->pick_ctx = ctx;
	m->pick = pick;
}

/* A send's end: to the relay that passed it down, named by its cookie's top byte. */
static void mux_done(void *ctx, uint64_t cookie, int status)
{
	struct locus_relay_mux *m = ctx;
	uint32_t id = (uint32_t)(cookie >> LOCUS_RELAY_COOKIE_BITS);

	if (id < m->n)
		sink_done(m->r[id], cookie, status);
	/* else not a cookie any of ours passed down (a transport bug): never ended twice */
}

int locus_relay_mux_create(struct locus_relay *const *relays, uint32_t n,
			   struct locus_relay_mux **out)
{
	struct locus_relay_mux *m;

	if (!relays || n == 0 || n > LOCUS_RELAY_MUX_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (!relays[i] || relays[i]->in_mux)
			return -EINVAL; /* each relay in one mux */
		for (uint32_t j = 0; j < i; j++)
			if (relays[j] == relays[i])
				return -EINVAL; /* and there once */
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->n = n;
	for (uint32_t i = 0; i < n; i++) {
		m->r[i] = relays[i];
		relays[i]->tag = (uint64_t)i << LOCUS_RELAY_COOKIE_BITS;
		relays[i]->in_mux = 1;
	}
	m->sink = (struct locus_engine_sink){ .recv = mux_recv, .done = mux_done, .ctx = m };
	*out = m;
	return 0;
}

const struct locus_engine_sink *locus_relay_mux_sink(struct locus_relay_mux *m)
{
	return &m->sink;
}

void locus_relay_mux_destroy(struct locus_relay_mux *m)
{
	free(m);
}
