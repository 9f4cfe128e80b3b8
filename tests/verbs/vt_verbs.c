// SPDX-License-Identifier: MIT
/*
 * Soft-RoCE tests of the verbs transport, run inside the qemu guest by
 * tests/vm/verbs-vm-test.sh. Needs rxe0 (192.0.2.1 on dummy0) and
 * rxex/rxey on the two ends of a veth pair (see tests/vm/guest-verbs.sh).
 * Every received byte is checked against the sender's generator.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "locus_counters.h"
#include "locus_counters_priv.h"
#include "vt_util.h"

#define DEV_LO "rxe0"
#define DEV_X  "rxex"
#define DEV_Y  "rxey"

struct stream {
	struct vt_node *tx[2], *rx[2];
	unsigned n;                 /* directions */
	const uint32_t *sizes;
	unsigned nsizes, batch;
	uint64_t total;
	unsigned release_step;      /* receivers holding: release this many per round */
	unsigned rounds;
};

static bool stream_done(void *a)
{
	struct stream *s = a;
	bool done = true;
	unsigned i;

	for (i = 0; i < s->n; i++) {
		struct vt_node *t = s->tx[i], *r = s->rx[i];

		if (locus_verbs_peer_state(t->peer) != LOCUS_VERBS_UP)
			return true; /* let the test's asserts say what broke */
		vt_send(t, s->sizes, s->nsizes, s->batch, s->total);
		/* hold messages across a few rounds (the sender keeps trying), then release */
		if (s->release_step && r->rx_held >= s->release_step)
			vt_release_held(r, s->release_step);
		else if (s->release_step && r->rx_held && (++s->rounds & 7) == 0)
			vt_release_held(r, r->rx_held);
		if (r->rx_count < s->total || t->tx_done < s->total || r->rx_held)
			done = false;
	}
	return done;
}

static void check_stream(const struct stream *s)
{
	unsigned i;

	for (i = 0; i < s->n; i++) {
		assert_int_equal(s->rx[i]->rx_bad, 0);
		assert_int_equal(s->rx[i]->rx_count, s->total);
		assert_int_equal(s->tx[i]->tx_ok, s->total);
		assert_int_equal(s->tx[i]->tx_err, 0);
		assert_int_equal(s->tx[i]->done_dup, 0);
		assert_int_equal(s->tx[i]->downs, 0);
	}
}

/* Two nodes: a listens on dev_a:port (passive for 2), b dials it from dev_b. */
static void pair_up(struct vt_node *a, struct vt_node *b, const char *dev_a, const char *dev_b,
		    uint16_t port, void (*tune_a)(struct locus_verbs_ep_params *),
		    void (*tune_b)(struct locus_verbs_ep_params *))
{
	assert_int_equal(vt_node_init(a, "a", dev_a, port, 1, tune_a), 0);
	assert_int_equal(vt_node_init(b, "b", dev_b, 0, 2, tune_b), 0);
	assert_int_equal(vt_node_peer(a, 2, NULL, 0), 0);
	assert_int_equal(vt_node_peer(b, 1, dev_a, port), 0);
}

static const uint32_t all_sizes[] = { 1, 7, 8, 31, 32, 64, 100, 200, 255, 256, 257, 1000, 4096,
				      12288, 14336, 16384, 16385, 65536, 262144, 1048576,
				      2097152 };

static void test_loopback_sizes(void **state)
{
	struct vt_node a, b, *nodes[] = { &a, &b };
	struct stream s = { .tx = { &b }, .rx = { &a }, .n = 1, .sizes = all_sizes,
			    .nsizes = LOCUS_ARRAY_SIZE(all_sizes), .batch = 4,
			    .total = 2 * LOCUS_ARRAY_SIZE(all_sizes) };
	static const uint32_t sig[] = { 12288 };
	uint32_t inl;

	(void)state;
	pair_up(&a, &b, DEV_LO, DEV_LO, 7471, NULL, NULL);
	assert_true(vt_wait_up(nodes, 2, 10000));
	assert_int_equal(vt_node_txbufs(&b, 8, 2097152, 4096), 0);
	inl = locus_verbs_ep_max_inline(b.ep);
	printf("# %s: max_inline %u, NUMA node %d\n", locus_verbs_ep_dev_name(b.ep), inl,
	       locus_verbs_ep_numa_node(b.ep));
	/* both paths are exercised: sizes above go from 1 B to 2 MiB */
	assert_true(inl >= 8 && inl < 4096);
	a.rx_sizes = all_sizes;
	a.rx_nsizes = s.nsizes;
	assert_true(vt_pump(nodes, 2, stream_done, &s, 60000));
	check_stream(&s);
	/* too large / empty messages are refused, not truncated */
	{
		struct locus_verbs_msg m = { .buf = b.txmr.addr, .len = 2097153, .lkey = b.txmr.lkey };

		assert_int_equal(locus_verbs_post(b.peer, &m, 1), -LOCUS_ERANGE);
		m.len = 0;
		assert_int_equal(locus_verbs_post(b.peer, &m, 1), -LOCUS_ERANGE);
	}
	/* then a stream of 12,288 B signatures in batches of 8 */
	a.rx_count = b.tx_posted = b.tx_done = b.tx_ok = 0;
	memset(b.done_count, 0, b.done_cap);
	a.rx_sizes = sig;
	a.rx_nsizes = 1;
	b.tx_stream = a.rx_stream = 5;
	s.sizes = sig;
	s.nsizes = 1;
	s.batch = 8;
	s.total = 400;
	assert_true(vt_pump(nodes, 2, stream_done, &s, 60000));
	check_stream(&s);
	assert_true(locus_verbs_peer_stats(b.peer)->tx_msgs == 400 + 2 * LOCUS_ARRAY_SIZE(all_sizes));
	assert_true(locus_verbs_peer_stats(a.peer)->rx_bytes > 400 * 12288);
	vt_node_fini(&b);
	vt_node_fini(&a);
}

static void tune_small_ring(struct locus_verbs_ep_params *p)
{
	p->slot_shift = 12; /* 4 KiB slots */
	p->slot_count = 16; /* 64 KiB ring, messages up to 32 KiB */
	p->sq_depth = 64;
	p->signal_every = 8;
}

/* The same figures reach a counter directory (locus_counters.h). */
static void check_counters(struct vt_node *a, struct vt_node *b, uint64_t total)
{
	struct locus_ctr_params cp = { .max_entries = 64, .n_blocks = 2, .block_size = 65536 };
	size_t sz = locus_counters_region_size(&cp);
	void *region = aligned_alloc(64, LOCUS_ALIGN_UP(sz, 64));
	struct locus_counters *c;
	struct locus_error err;
	uint64_t v[32 * 16];
	unsigned i;

	assert_non_null(region);
	assert_int_equal(locus_counters_init(region, sz, &cp, &err), 0);
	assert_int_equal(locus_counters_open(region, sz, 0, &c, &err), 0);
	assert_int_equal(locus_verbs_counters_attach(a->ep, c, 0, 0, "verbs_a", &err), 0);
	assert_int_equal(locus_verbs_counters_attach(b->ep, c, 1, 1, "verbs_b", &err), 0);
	assert_int_equal(locus_verbs_counters_attach(b->ep, c, 1, 1, "verbs_c", &err), -LOCUS_ESTATE);
	locus_verbs_service(a->ep, 0);
	locus_verbs_service(b->ep, 0);
	assert_int_equal(locus_counters_sum(c, (uint32_t)locus_counters_find(c, "verbs_b_tx_msgs"),
					    v, 32 * 16), 16);
	assert_int_equal(v[0], total);
	assert_int_equal(v[1], 0);
	locus_counters_sum(c, (uint32_t)locus_counters_find(c, "verbs_a_rx_msgs"), v, 32 * 16);
	assert_int_equal(v[0], total);
	locus_counters_sum(c, (uint32_t)locus_counters_find(c, "verbs_b_credit_stalls"), v, 32 * 16);
	assert_true(v[0] > 0);
	locus_counters_sum(c, (uint32_t)locus_counters_find(c, "verbs_a_peer_node"), v, 32 * 16);
	assert_int_equal(v[0], 2);
	locus_counters_sum(c, (uint32_t)locus_counters_find(c, "verbs_a_peer_up"), v, 32 * 16);
	assert_int_equal(v[0], 1);
	assert_int_equal(locus_counters_sum(c, (uint32_t)locus_counters_find(c, "verbs_a_cq_errors"),
					    v, 32 * 16), 16 * 32);
	for (i = 0; i < 16 * 32; i++)
		assert_int_equal(v[i], 0);
	locus_counters_close(c);
	free(region);
}

static void test_loopback_credit_wrap(void **state)
{
	static const uint32_t sizes[] = { 1, 4096, 4097, 12288, 8192, 100, 32768, 5000, 12288, 64,
					  20000, 3 };
	struct vt_node a, b, *nodes[] = { &a, &b };
	struct stream s = { .tx = { &b }, .rx = { &a }, .n = 1, .sizes = sizes,
			    .nsizes = LOCUS_ARRAY_SIZE(sizes), .batch = 6, .total = 1500,
			    .release_step = 3 };
	const struct locus_verbs_stats *st;
	uint64_t slots = 0, i;

	(void)state;
	pair_up(&a, &b, DEV_LO, DEV_LO, 7472, tune_small_ring, tune_small_ring);
	assert_true(vt_wait_up(nodes, 2, 10000));
	assert_int_equal(vt_node_txbufs(&b, 16, 32768, 2000), 0);
	a.rx_sizes = sizes;
	a.rx_nsizes = s.nsizes;
	a.rx_hold = true; /* release 3 at a time, re-checking the held bytes first */
	assert_true(vt_pump(nodes, 2, stream_done, &s, 90000));
	check_stream(&s);
	for (i = 0; i < s.total; i++)
		slots += (sizes[i % s.nsizes] + 4095) / 4096;
	st = locus_verbs_peer_stats(b.peer);
	printf("# %llu slots through a 16-slot ring (%llu wraps), %llu credit stalls, %llu credit writes\n",
	       (unsigned long long)slots, (unsigned long long)slots / 16,
	       (unsigned long long)st->credit_stalls,
	       (unsigned long long)locus_verbs_peer_stats(a.peer)->credit_writes);
	assert_true(slots / 16 > 100);
	assert_true(st->credit_stalls > 0); /* flow control did hold the sender back */
	assert_true(locus_verbs_peer_stats(a.peer)->credit_writes > 0);

	check_counters(&a, &b, s.total);
	vt_node_fini(&b);
	vt_node_fini(&a);
}

struct blocked_wait {
	struct vt_node *a, *b;
	int want;      /* what locus_verbs_post_blocked(b) must say */
};

static bool blocked_is(void *arg)
{
	struct blocked_wait *w = arg;

	return locus_verbs_post_blocked(w->b->peer) == w->want;
}

static bool held_is_16(void *arg)
{
	return ((struct vt_node *)arg)->rx_held == 16;
}

static bool is_down(void *arg)
{
	return ((struct vt_node *)arg)->downs > 0;
}

/*
 * locus_verbs_post_blocked(): true from a post stopped for credits until the
 * receiver gave slots back (and not before, however long the sender polls);
 * a list of messages is one doorbell (verbs_tx_doorbells), its last one
 * signalled; what the receiver still holds when the connection ends is
 * counted dropped (verbs_rx_dropped: the sender saw it acked).
 */
static void test_post_blocked(void **state)
{
	static const uint32_t sizes[] = { 4096 };
	struct vt_node a, b, *nodes[] = { &a, &b };
	struct blocked_wait w = { .a = &a, .b = &b };
	const struct locus_verbs_stats *st;
	uint64_t doorbells, msgs, signaled;
	int rc;

	(void)state;
	pair_up(&a, &b, DEV_LO, DEV_LO, 7480, tune_small_ring, tune_small_ring);
	assert_true(vt_wait_up(nodes, 2, 10000));
	assert_int_equal(vt_node_txbufs(&b, 32, 4096, 64), 0);
	a.rx_sizes = sizes;
	a.rx_nsizes = 1;
	a.rx_hold = true; /* nothing goes back until we say so */
	assert_false(locus_verbs_post_blocked(b.peer));
	st = locus_verbs_peer_stats(b.peer);
	doorbells = st->tx_doorbells;
	msgs = st->tx_msgs;
	signaled = st->tx_signaled;
	/* 5 one-slot messages in one list: one doorbell */
	assert_int_equal(vt_send(&b, sizes, 1, 5, 5), 5);
	st = locus_verbs_peer_stats(b.peer);
	assert_int_equal(st->tx_msgs - msgs, 5);
	assert_int_equal(st->tx_doorbells - doorbells, 1);
	assert_int_equal(st->tx_signaled - signaled, 1); /* the list's last */
	assert_false(locus_verbs_post_blocked(b.peer));
	/* the rest of the 16-slot ring, then a post that finds no credits */
	assert_int_equal(vt_send(&b, sizes, 1, 11, 16), 11);
	assert_int_equal(vt_send(&b, sizes, 1, 1, 17), 0);
	assert_true(locus_verbs_post_blocked(b.peer));
	/* polling (every completion, the idle credit flush) changes nothing while a holds them */
	w.want = 0;
	assert_false(vt_pump(nodes, 2, blocked_is, &w, 1500));
	assert_true(locus_verbs_post_blocked(b.peer));
	assert_int_equal(vt_send(&b, sizes, 1, 1, 17), 0);
	/* a gives one back: the credit write reaches b, the block ends, the post goes */
	assert_int_equal(a.rx_held, 16);
	assert_int_equal(vt_release_held(&a, 1), 0);
	assert_true(vt_pump(nodes, 2, blocked_is, &w, 10000));
	assert_int_equal(vt_send(&b, sizes, 1, 1, 17), 1);
	assert_true(vt_pump(nodes, 2, held_is_16, &a, 10000));
	/* a takes 6, then b goes away: the 10 a still holds die with the connection, counted */
	rc = vt_release_held(&a, 6);
	assert_int_equal(rc, 0);
	assert_int_equal(locus_verbs_peer_stats(a.peer)->rx_dropped, 0);
	vt_node_fini(&b);
	assert_true(vt_pump(nodes, 1, is_down, &a, 20000));
	printf("# b gone with 10 messages held by a: a dropped %llu\n",
	       (unsigned long long)locus_verbs_peer_stats(a.peer)->rx_dropped);
	assert_int_equal(locus_verbs_peer_stats(a.peer)->rx_dropped, 10);
	vt_node_fini(&a);
}

static void test_veth_both_directions(void **state)
{
	static const uint32_t sizes[] = { 12288, 4096, 64, 65536, 14336, 1, 8 };
	struct vt_node x, y, *nodes[] = { &x, &y };
	struct stream s = { .tx = { &x, &y }, .rx = { &y, &x }, .n = 2, .sizes = sizes,
			    .nsizes = LOCUS_ARRAY_SIZE(sizes), .batch = 8, .total = 300 };

	(void)state;
	pair_up(&x, &y, DEV_X, DEV_Y, 7473, NULL, NULL);
	assert_string_equal(locus_verbs_ep_dev_name(x.ep), DEV_X);
	assert_string_equal(locus_verbs_ep_dev_name(y.ep), DEV_Y);
	assert_true(vt_wait_up(nodes, 2, 10000));
	assert_int_equal(vt_node_txbufs(&x, 16, 65536, 512), 0);
	assert_int_equal(vt_node_txbufs(&y, 16, 65536, 512), 0);
	x.tx_stream = y.rx_stream = 11;
	y.tx_stream = x.rx_stream = 12;
	x.rx_sizes = y.rx_sizes = sizes;
	x.rx_nsizes = y.rx_nsizes = s.nsizes;
	assert_true(vt_pump(nodes, 2, stream_done, &s, 60000));
	check_stream(&s);
	vt_node_fini(&y);
	vt_node_fini(&x);
}

static bool first_down(void *a)
{
	return ((struct vt_node *)a)->downs > 0;
}

static void tune_area(struct locus_verbs_ep_params *p)
{
	p->area_len = 1000; /* rounded up to 1024 */
}

struct area_wait {
	struct vt_node *from, *to;
	const uint8_t *want;
	uint32_t len;
};

/* Until to's area for from holds want (the writer is not asked for anything). */
static bool area_holds(void *a)
{
	struct area_wait *w = a;
	uint32_t len;
	const volatile uint8_t *area = locus_verbs_peer_area(w->to->peer, &len);

	for (uint32_t i = 0; i < w->len; i++)
		if (area[i] != w->want[i])
			return false;
	return true;
}

/*
 * One-sided area writes across the veth pair: they land after the control
 * block, one at a time (the staging buffer is busy until the write
 * completed), sizes checked; messages keep flowing meanwhile.
 */
static void test_area_writes(void **state)
{
	static const uint32_t sizes[] = { 12288, 64 };
	struct vt_node x, y, *nodes[] = { &x, &y };
	struct stream s = { .tx = { &y }, .rx = { &x }, .n = 1, .sizes = sizes,
			    .nsizes = LOCUS_ARRAY_SIZE(sizes), .batch = 8, .total = 200 };
	uint8_t buf[1024];
	struct area_wait w = { .from = &y, .to = &x, .want = buf, .len = sizeof(buf) };
	uint32_t len;
	unsigned busy = 0;

	(void)state;
	pair_up(&x, &y, DEV_X, DEV_Y, 7490, tune_area, tune_area);
	assert_true(vt_wait_up(nodes, 2, 10000));
	assert_non_null(locus_verbs_peer_area(x.peer, &len));
	assert_int_equal(len, 1024);
	assert_int_equal(locus_verbs_write_area(y.peer, buf, 0), -LOCUS_ERANGE);
	assert_int_equal(locus_verbs_write_area(y.peer, buf, 1025), -LOCUS_ERANGE);
	for (unsigned round = 0; round < 50; round++) {
		int rc = -EBUSY;

		for (uint32_t i = 0; i < sizeof(buf); i++)
			buf[i] = vt_pat(round, round, i);
		/* the previous write is done once its completion was polled */
		for (unsigned tries = 0; rc == -EBUSY && tries < 1000000; tries++)
			if ((rc = locus_verbs_write_area(y.peer, buf, sizeof(buf))) == -EBUSY) {
				locus_verbs_poll(y.ep);
				busy++;
			}
		assert_int_equal(rc, 1);
		/* one in flight at a time: the staging buffer is being read */
		assert_int_equal(locus_verbs_write_area(y.peer, buf, sizeof(buf)), -EBUSY);
		assert_true(vt_pump(nodes, 2, area_holds, &w, 10000));
	}
	printf("# 50 area writes of 1024 B landed whole; %u polls waiting for the previous one\n",
	       busy);
	/* messages into the same inbox MR are unaffected */
	assert_int_equal(vt_node_txbufs(&y, 16, 16384, 256), 0);
	y.tx_stream = x.rx_stream = 21;
	x.rx_sizes = sizes;
	x.rx_nsizes = s.nsizes;
	assert_true(vt_pump(nodes, 2, stream_done, &s, 60000));
	check_stream(&s);
	assert_true(area_holds(&w));
	vt_node_fini(&y);
	vt_node_fini(&x);
}

static void tune_bad_secret(struct locus_verbs_ep_params *p)
{
	p->secret[5] ^= 0x20;
}

static void tune_bad_version(struct locus_verbs_ep_params *p)
{
	p->proto_version = LOCUS_VERBS_PROTO_VERSION + 1;
}

static void refused(uint16_t port, void (*tune)(struct locus_verbs_ep_params *), int want)
{
	struct vt_node a, b, *nodes[] = { &a, &b };

	pair_up(&a, &b, DEV_LO, DEV_LO, port, NULL, tune);
	assert_true(vt_pump(nodes, 2, first_down, &b, 10000));
	assert_int_equal(b.last_down, want);
	assert_int_equal(a.ups, 0);
	assert_int_equal(b.ups, 0);
	assert_int_equal(locus_verbs_peer_state(a.peer), LOCUS_VERBS_DOWN);
	if (want == -LOCUS_EAUTH)
		assert_true(locus_verbs_ep_stats(a.ep)->auth_refused[LOCUS_VERBS_AUTH_REQ_MAC] >= 1);
	else if (want == -LOCUS_EVERSION)
		assert_true(locus_verbs_ep_stats(a.ep)->version_rejects >= 1);
	else
		assert_true(locus_verbs_ep_stats(a.ep)->peer_rejects >= 1);
	assert_true(locus_verbs_peer_stats(b.peer)->rejects_received >= 1);
	vt_node_fini(&b);
	vt_node_fini(&a);
}

static void tune_unknown_node(struct locus_verbs_ep_params *p)
{
	p->node_id = 9; /* a has declared node 2 only */
}

static void test_unknown_node(void **state)
{
	(void)state;
	refused(7479, tune_unknown_node, -LOCUS_EPROTO);
}

/* Endpoint creation refuses what it cannot honour, and says why. */
static void test_ep_errors(void **state)
{
	struct locus_verbs_ep_params prm;
	struct locus_verbs_ep *ep = NULL;
	struct locus_error err;

	(void)state;
	memset(&prm, 0, sizeof(prm));
	assert_int_equal(vt_dev_addr(DEV_LO, &prm.local_addr), 0);
	prm.slot_count = 1;
	assert_int_equal(locus_verbs_ep_create(&prm, &ep, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "slot_count"));
	prm.slot_count = 0;
	prm.sq_depth = 100;
	assert_int_equal(locus_verbs_ep_create(&prm, &ep, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "sq_depth"));
	prm.sq_depth = 0;
	/* the address belongs to rxe0, not to the device asked for */
	prm.dev_name = DEV_X;
	assert_int_equal(locus_verbs_ep_create(&prm, &ep, &err), -ENODEV);
	printf("# %s\n", err.msg);
	assert_non_null(strstr(err.msg, DEV_X));
	/* an address no RDMA device owns */
	prm.dev_name = NULL;
	inet_aton("198.51.100.7", &prm.local_addr);
	assert_true(locus_verbs_ep_create(&prm, &ep, &err) < 0);
	printf("# %s\n", err.msg);
	assert_non_null(strstr(err.msg, "198.51.100.7"));
	assert_null(ep);
}

static bool never(void *a)
{
	(void)a;
	return false;
}

static void test_wrong_secret(void **state)
{
	struct vt_node a, b, *nodes[] = { &a, &b };
	uint64_t r0, r1;

	(void)state;
	refused(7474, tune_bad_secret, -LOCUS_EAUTH);

	/* a refused dialler keeps trying, with back-off: 20 ms doubling to 1 s */
	pair_up(&a, &b, DEV_LO, DEV_LO, 7480, NULL, tune_bad_secret);
	assert_true(vt_pump(nodes, 2, first_down, &b, 10000));
	r0 = locus_verbs_peer_stats(b.peer)->rejects_received;
	vt_pump(nodes, 2, never, NULL, 3000);
	r1 = locus_verbs_peer_stats(b.peer)->rejects_received;
	printf("# refused dialler: %llu more attempts in 3 s\n", (unsigned long long)(r1 - r0));
	assert_true(r1 - r0 >= 3);  /* it does come back */
	assert_true(r1 - r0 <= 12); /* but does not hammer the listener */
	assert_int_equal(locus_verbs_ep_stats(a.ep)->auth_refused[LOCUS_VERBS_AUTH_REQ_MAC], r1);
	assert_int_equal(b.downs, (int)r1);
	assert_int_equal(b.ups, 0);
	vt_node_fini(&b);
	vt_node_fini(&a);
}

static void test_wrong_version(void **state)
{
	(void)state;
	refused(7475, tune_bad_version, -LOCUS_EVERSION);
}

/*
 * Receiver process: passive node 2 on rxe0:port expecting messages of size;
 * dies by SIGKILL at message kill_after (0: never), else exits 0 when it got
 * expect messages intact. A fresh exec, not a bare fork: librdmacm caches
 * device contexts whose file descriptors a forked child may not use.
 */
static int receiver_main(uint16_t port, uint32_t size, uint64_t kill_after, uint64_t expect)
{
	struct vt_node c;
	uint64_t end;

	alarm(60); /* never outlive the test */
	if (vt_node_init(&c, "receiver", DEV_LO, port, 2, NULL) < 0 || vt_node_peer(&c, 1, NULL, 0) < 0)
		return 2;
	c.rx_sizes = &size;
	c.rx_nsizes = 1;
	c.rx_kill_after = kill_after;
	end = vt_now_us() + 40000000ull;
	while (vt_now_us() < end && c.rx_count < expect) {
		locus_verbs_poll(c.ep);
		locus_verbs_service(c.ep, 0);
	}
	/* let the last completions and credit writes reach the sender */
	end = vt_now_us() + 300000;
	while (vt_now_us() < end) {
		locus_verbs_poll(c.ep);
		locus_verbs_service(c.ep, 1);
	}
	return c.rx_count == expect && c.rx_bad == 0 ? 0 : 3;
}

static pid_t spawn_receiver(uint16_t port, uint32_t size, uint64_t kill_after, uint64_t expect)
{
	char a[4][24];
	pid_t pid;

	snprintf(a[0], sizeof(a[0]), "%u", port);
	snprintf(a[1], sizeof(a[1]), "%u", size);
	snprintf(a[2], sizeof(a[2]), "%llu", (unsigned long long)kill_after);
	snprintf(a[3], sizeof(a[3]), "%llu", (unsigned long long)expect);
	pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", "vt_verbs", "--receiver", a[0], a[1], a[2], a[3], (char *)NULL);
		_exit(127);
	}
	return pid;
}

struct kill_ctx {
	struct vt_node *n;
	uint32_t size;
	uint64_t limit;
	int want_ups;
	int downs0;  /* failed dials before the receiver listened */
};

static bool is_up(void *a)
{
	struct kill_ctx *k = a;

	return k->n->ups >= k->want_ups;
}

static bool send_until_down(void *a)
{
	struct kill_ctx *k = a;

	if (k->n->downs > k->downs0)
		return true;
	if (locus_verbs_peer_state(k->n->peer) == LOCUS_VERBS_UP)
		vt_send(k->n, &k->size, 1, 2, k->limit);
	return false;
}

static bool send_all_ok(void *a)
{
	struct kill_ctx *k = a;

	if (k->n->ups < k->want_ups)
		return false;
	if (locus_verbs_peer_state(k->n->peer) == LOCUS_VERBS_UP)
		vt_send(k->n, &k->size, 1, 4, k->limit);
	return k->n->tx_ok == k->limit || k->n->tx_err > 0;
}

static void test_peer_killed_reconnect(void **state)
{
	struct vt_node p, *nodes[] = { &p };
	struct kill_ctx k = { .n = &p, .size = 1048576, .limit = 1000, .want_ups = 1 };
	struct locus_verbs_msg m;
	pid_t c1, c2;
	int st, i;

	(void)state;
	/* receiver dies (SIGKILL) when the 6th 1 MiB message lands */
	c1 = spawn_receiver(7476, k.size, 6, 1000);
	assert_true(c1 > 0);
	assert_int_equal(vt_node_init(&p, "survivor", DEV_LO, 0, 1, NULL), 0);
	assert_int_equal(vt_node_txbufs(&p, 4, 1048576, 1000), 0);
	assert_int_equal(vt_node_peer(&p, 2, DEV_LO, 7476), 0);
	/* dials refused until the receiver listens come back as peer-down events */
	assert_true(vt_pump(nodes, 1, is_up, &k, 20000));
	k.downs0 = p.downs;
	assert_true(vt_pump(nodes, 1, send_until_down, &k, 30000));
	assert_int_equal(waitpid(c1, &st, 0), c1);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	printf("# peer killed: %llu posted, %llu ok, %llu failed (last %s), down reason %s\n",
	       (unsigned long long)p.tx_posted, (unsigned long long)p.tx_ok,
	       (unsigned long long)p.tx_err, locus_strerror(p.tx_last_err),
	       locus_strerror(p.last_down));
	assert_int_equal(p.downs, k.downs0 + 1);
	assert_int_equal(p.ups, 1);
	/* every message completed exactly once; the ones in flight with an error */
	assert_int_equal(p.done_dup, 0);
	assert_int_equal(p.tx_done, p.tx_posted);
	for (i = 0; i < (int)p.tx_posted; i++)
		assert_int_equal(p.done_count[i], 1);
	assert_true(p.tx_err >= 1);
	assert_true(p.tx_ok >= 5);
	m = (struct locus_verbs_msg){ .buf = p.txmr.addr, .len = 8, .lkey = p.txmr.lkey };
	assert_int_equal(locus_verbs_post(p.peer, &m, 1), -LOCUS_EPEERDOWN);
	assert_int_not_equal(locus_verbs_peer_state(p.peer), LOCUS_VERBS_UP);

	/* the peer restarts: we redial with back-off and carry on */
	p.tx_posted = p.tx_done = p.tx_ok = p.tx_err = 0;
	memset(p.done_count, 0, p.done_cap);
	k.size = 12288;
	k.limit = 50;
	k.want_ups = 2;
	c2 = spawn_receiver(7476, k.size, 0, 50);
	assert_true(c2 > 0);
	assert_true(vt_pump(nodes, 1, send_all_ok, &k, 30000));
	assert_int_equal(p.tx_ok, 50);
	assert_int_equal(p.tx_err, 0);
	assert_int_equal(p.ups, 2);
	assert_int_equal(locus_verbs_peer_stats(p.peer)->reconnects, 1);
	assert_int_equal(waitpid(c2, &st, 0), c2);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0); /* child checked all 50 messages */
	vt_node_fini(&p);
}

static bool both_down(void *a)
{
	struct vt_node **n = a;

	return n[0]->downs > 0 && n[1]->downs > 0;
}

/* A peer (b) posts a raw WR on its QP: the victim (a) must drop it. */
static void forged(uint16_t port, bool outside, int want_b, int want_a)
{
	struct vt_node a, b, *nodes[] = { &a, &b };
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	uint64_t raddr, rlen, ilen, i;
	uint32_t rkey;
	const uint8_t *inbox;

	pair_up(&a, &b, DEV_LO, DEV_LO, port, NULL, NULL);
	assert_true(vt_wait_up(nodes, 2, 10000));
	assert_int_equal(vt_node_txbufs(&b, 1, 4096, 1), 0);
	memset(b.txmr.addr, 0xa5, 4096);
	locus_verbs_peer_remote(b.peer, &raddr, &rkey, &rlen);
	inbox = locus_verbs_peer_inbox(a.peer, &ilen);
	assert_int_equal(rlen, ilen);
	memset(&wr, 0, sizeof(wr));
	sge.addr = (uintptr_t)b.txmr.addr;
	sge.length = 64;
	sge.lkey = b.txmr.lkey;
	wr.wr_id = locus_verbs_peer_raw_wrid(b.peer);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.rkey = rkey;
	if (outside) {
		/* just past the end of the inbox MR (the page behind it is ours too) */
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = raddr + rlen;
	} else {
		/* inside the inbox, but an immediate naming a slot that does not exist */
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.imm_data = htonl(0x0000ffffu);
		wr.wr.rdma.remote_addr = raddr;
	}
	assert_int_equal(ibv_post_send(locus_verbs_peer_qp(b.peer), &wr, &bad), 0);
	assert_true(vt_pump(nodes, 2, both_down, nodes, 20000));
	printf("# forged %s: attacker down: %s, victim down: %s\n", outside ? "offset" : "imm",
	       locus_strerror(b.last_down), locus_strerror(a.last_down));
	if (want_b)
		assert_int_equal(b.last_down, want_b);
	if (want_a)
		assert_int_equal(a.last_down, want_a);
	if (outside) {
		assert_int_equal(locus_verbs_peer_stats(b.peer)->cq_errors[IBV_WC_REM_ACCESS_ERR], 1);
		for (i = 0; i < 64; i++)
			assert_int_equal(inbox[ilen + i], 0);
	} else {
		assert_int_equal(locus_verbs_peer_stats(a.peer)->proto_errors, 1);
	}
	assert_int_equal(a.rx_count, 0);
	vt_node_fini(&b);
	vt_node_fini(&a);
}

static void test_forged_offset(void **state)
{
	(void)state;
	forged(7477, true, -EACCES, 0);
}

static void test_forged_imm(void **state)
{
	(void)state;
	forged(7478, false, 0, -LOCUS_EPROTO);
}

struct gather_wait {
	struct vt_node *a, *b;
	uint64_t rx, done;
};

static bool gather_done(void *arg)
{
	struct gather_wait *w = arg;

	return w->a->rx_count >= w->rx && w->b->tx_done >= w->done;
}

/*
 * Gather posting (struct locus_verbs_msg.sg): a header from one MR and its
 * rows from another, placed there out of order, arrive as one message whose
 * every byte is the stream's; more entries than the QP has are refused.
 */
static void test_gather(void **state)
{
	static const uint32_t size[] = { 200 + 3 * 1600 };
	struct vt_node a, b, *nodes[] = { &a, &b };
	struct locus_verbs_sge sg[LOCUS_VERBS_MAX_SGE];
	struct locus_verbs_mr reg;
	struct locus_error err;
	uint32_t max;

	(void)state;
	pair_up(&a, &b, DEV_LO, DEV_LO, 7479, NULL, NULL);
	assert_true(vt_wait_up(nodes, 2, 10000));
	assert_int_equal(vt_node_txbufs(&b, 1, 4096, 64), 0);
	assert_int_equal(locus_verbs_mr_alloc(b.ep, 65536, 0, &reg, &err), 0);
	max = locus_verbs_ep_max_send_sge(b.ep);
	printf("# %s: %u gather entries per message\n", locus_verbs_ep_dev_name(b.ep), max);
	assert_true(max >= 4 && max <= LOCUS_VERBS_MAX_SGE);
	a.rx_sizes = size;
	a.rx_nsizes = 1;
	a.rx_stream = b.tx_stream = 9;
	for (uint64_t seq = 0; seq < 16; seq++) {
		struct locus_verbs_msg m = { .buf = b.txmr.addr, .len = 200, .lkey = b.txmr.lkey,
					     .cookie = seq, .sg = sg, .n_sg = 3 };
		struct gather_wait w = { &a, &b, seq + 1, seq + 1 };
		uint8_t *hdr = b.txmr.addr;

		for (uint32_t i = 0; i < 200; i++)
			hdr[i] = vt_pat(9, seq, i);
		/* row k of the message at (2 - k) * 8192 + seq * 64 in the region */
		for (uint32_t k = 0; k < 3; k++) {
			uint8_t *at = (uint8_t *)reg.addr + (2 - k) * 8192 + seq * 64;

			for (uint32_t i = 0; i < 1600; i++)
				at[i] = vt_pat(9, seq, 200 + k * 1600 + i);
			sg[k] = (struct locus_verbs_sge){ .addr = (uintptr_t)at, .len = 1600,
							  .lkey = reg.lkey };
		}
		while (locus_verbs_post(b.peer, &m, 1) == 0)
			vt_pump(nodes, 2, never, NULL, 1);
		assert_true(vt_pump(nodes, 2, gather_done, &w, 10000));
	}
	assert_int_equal(a.rx_bad, 0);
	assert_int_equal(a.rx_count, 16);
	assert_int_equal(b.tx_ok, 16);
	{
		struct locus_verbs_msg m = { .buf = b.txmr.addr, .len = 200, .lkey = b.txmr.lkey,
					     .sg = sg, .n_sg = max };

		for (uint32_t k = 0; k < max; k++)
			sg[k] = (struct locus_verbs_sge){ .addr = (uintptr_t)reg.addr, .len = 64,
							  .lkey = reg.lkey };
		assert_int_equal(locus_verbs_post(b.peer, &m, 1), -LOCUS_ERANGE);
	}
	locus_verbs_mr_free(&reg);
	vt_node_fini(&b);
	vt_node_fini(&a);
}

/* Device discovery on real sysfs, and memory paths that need a device but no peer. */
static void test_memory(void **state)
{
	struct vt_node a;
	struct locus_verbs_mr mr;
	struct locus_error err;
	int fd;

	(void)state;
	/* discovery on the guest's real sysfs: three software devices, no PCI parent */
	{
		struct locus_verbs_devinfo d[8];

		assert_int_equal(locus_verbs_dev_list("/sys", d, 8), 3);
		assert_string_equal(d[0].name, DEV_LO);
		assert_string_equal(d[1].name, DEV_X);
		assert_int_equal(d[0].numa_node, -1);
		assert_int_equal(d[0].n_ports, 1);
		assert_int_equal(locus_verbs_dev_pick(d, 3, DEV_Y, "/sys", NULL, -1, &err), 2);
		assert_int_equal(locus_verbs_dev_pick(d, 3, "auto", "/sys", NULL, 0, &err), 0);
	}
	assert_int_equal(vt_node_init(&a, "mem", DEV_LO, 0, 1, NULL), 0);
	/* host memory on the device's node, registered */
	assert_int_equal(locus_verbs_mr_alloc(a.ep, 12288, IBV_ACCESS_LOCAL_WRITE, &mr, &err), 0);
	assert_non_null(mr.addr);
	assert_true(mr.lkey != 0 || mr.rkey != 0);
	memset(mr.addr, 1, 12288);
	locus_verbs_mr_free(&mr);
	assert_int_equal(locus_verbs_mr_reg(a.ep, NULL, 0, 0, &mr, &err), -EINVAL);
	/* rxe has no dma-buf support: a clear "not supported" instead of a bare errno */
	fd = memfd_create("locus-dmabuf-probe", 0);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 65536), 0);
	assert_int_equal(locus_verbs_mr_reg_dmabuf(a.ep, fd, 0, 65536, 0, IBV_ACCESS_LOCAL_WRITE,
						   &mr, &err), -EOPNOTSUPP);
	printf("# dma-buf: %s\n", err.msg);
	assert_non_null(strstr(err.msg, "not supported by this device"));
	close(fd);
	assert_int_equal(locus_verbs_mr_reg_dmabuf(a.ep, -1, 0, 65536, 0, 0, &mr, &err), -EINVAL);
	vt_node_fini(&a);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loopback_sizes),
		cmocka_unit_test(test_loopback_credit_wrap),
		cmocka_unit_test(test_post_blocked),
		cmocka_unit_test(test_veth_both_directions),
		cmocka_unit_test(test_area_writes),
		cmocka_unit_test(test_wrong_secret),
		cmocka_unit_test(test_wrong_version),
		cmocka_unit_test(test_unknown_node),
		cmocka_unit_test(test_ep_errors),
		cmocka_unit_test(test_peer_killed_reconnect),
		cmocka_unit_test(test_forged_offset),
		cmocka_unit_test(test_forged_imm),
		cmocka_unit_test(test_memory),
		cmocka_unit_test(test_gather),
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 6 && !strcmp(argv[1], "--receiver"))
		return receiver_main((uint16_t)atoi(argv[2]), (uint32_t)atoi(argv[3]),
				     strtoull(argv[4], NULL, 10), strtoull(argv[5], NULL, 10));
	if (getenv("VT_FILTER"))
		cmocka_set_test_filter(getenv("VT_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
