// SPDX-License-Identifier: MIT
/*
 * The rail choice (dataplane/rails.c): home rails by local rank or by a GPU
 * map (rdma_device = auto with gpu_pci), and the
 * order promise of locus_rails.h under rails going down and coming back,
 * against a model of the transport: one FIFO per rail and peer (an RC
 * connection behind its backlog), messages delivered from its front at
 * random, a rail that goes down fails everything it holds first.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "locus_common.h"
#include "locus_config.h"
#include "locus_rails.h"

static void two_nodes(struct locus_config *c, unsigned rails0, unsigned rails1, unsigned gpus)
{
	locus_config_defaults(c);
	c->n_nodes = 3;
	c->gpus_per_node = gpus;
	c->nodes[0].n_rails = (uint8_t)rails0;
	c->nodes[1].n_rails = (uint8_t)rails1;
	c->nodes[2].n_rails = 1;
	for (int i = 0; i < 3; i++)
		c->nodes[i].set = 1;
}

static void test_home_rails(void **state)
{
	struct locus_config c;
	static struct locus_rails r;
	(void)state;

	two_nodes(&c, 2, 2, 4);
	locus_rails_init(&r, &c);
	assert_int_equal(r.common[0], 0);
	assert_int_equal(r.common[1], 2);
	assert_int_equal(r.common[2], 1);
	/* ranks 0..3 of node 0 (and 4..7 of node 1, the same local ranks) */
	for (uint32_t rank = 0; rank < 8; rank++) {
		uint32_t s = locus_rails_src(&r, rank);

		assert_int_equal(s, rank % 4);
		assert_int_equal(locus_rails_pick(&r, 1, s, 3), (int)(rank % 4 % 2));
		assert_int_equal(locus_rails_pick(&r, 2, s, 3), 0); /* one rail in common */
	}
	/* rail 1 down: everything moves to rail 0; none up: -1 */
	assert_int_equal(locus_rails_pick(&r, 1, 1, 1), 0);
	assert_int_equal(locus_rails_pick(&r, 1, 1, 0), -1);
	/* back home once nothing is outstanding on rail 0 */
	assert_int_equal(locus_rails_pick(&r, 1, 1, 3), 1);
	/* but not while something is: then the order would break */
	assert_int_equal(locus_rails_pick(&r, 1, 1, 1), 0);
	locus_rails_sent(&r, 1, 1);
	assert_int_equal(locus_rails_pick(&r, 1, 1, 3), 0);
	locus_rails_ended(&r, 1, 1);
	assert_int_equal(locus_rails_pick(&r, 1, 1, 3), 1);
	/* three rails here, two there: two in common */
	two_nodes(&c, 3, 2, 4);
	locus_rails_init(&r, &c);
	assert_int_equal(locus_rails_pick(&r, 1, 2, 7), 0);
	assert_int_equal(locus_rails_pick(&r, 1, 3, 7), 1);
}

/*
 * Home rails by a GPU map: the rail of the device nearest each GPU where the
 * peer has that rail, the mod rule where it does not.
 */
static void test_home_rails_map(void **state)
{
	/* 4 GPUs on 2 NICs: GPUs 0, 1 share rail 0's NIC, 2, 3 rail 1's */
	static const uint8_t shared_nics[4] = { 0, 0, 1, 1 };
	/* 8 GPUs, 8 NICs: GPU g's nearest NIC is rail 7 - g */
	static const uint8_t reversed[8] = { 7, 6, 5, 4, 3, 2, 1, 0 };
	struct locus_config c;
	static struct locus_rails r;
	(void)state;

	two_nodes(&c, 2, 2, 4);
	locus_rails_init(&r, &c);
	locus_rails_map(&r, shared_nics, 4);
	for (uint32_t s = 0; s < 4; s++) {
		assert_int_equal(locus_rails_home(&r, 1, s), shared_nics[s]);
		assert_int_equal(locus_rails_pick(&r, 1, s, 3), shared_nics[s]);
		/* node 2 has rail 0 only: everything there */
		assert_int_equal(locus_rails_pick(&r, 2, s, 1), 0);
	}
	/* the mod rule would have spread them 0, 1, 0, 1 */
	assert_int_equal(locus_rails_pick(&r, 1, 1, 3), 0);
	assert_int_equal(locus_rails_pick(&r, 1, 2, 3), 1);
	/* rail 1 down: GPU 2's rank moves to rail 0 and back home once it is up */
	assert_int_equal(locus_rails_pick(&r, 1, 2, 1), 0);
	assert_int_equal(locus_rails_pick(&r, 1, 2, 3), 1);

	/* eight rails here, three there: homes 7..3 are not shared, they take the mod rule */
	two_nodes(&c, 8, 3, 8);
	locus_rails_init(&r, &c);
	locus_rails_map(&r, reversed, 8);
	for (uint32_t s = 0; s < 8; s++)
		assert_int_equal(locus_rails_home(&r, 1, s), reversed[s] < 3 ? reversed[s] : s % 3);
	/* a map given again replaces the first */
	locus_rails_map(&r, shared_nics, 4);
	assert_int_equal(locus_rails_home(&r, 1, 2), 1);
	assert_int_equal(locus_rails_home(&r, 1, 1), 0);
}

#define RAILS 3
#define SRCS  4
#define DEPTH 64

/* A map for the random runs: every source's home differs from the mod rule's. */
static const uint8_t flap_map[SRCS] = { 2, 2, 0, 1 };

/*
 * Every source's most used rail while all rails were up and it had nothing
 * outstanding elsewhere is its home (the map's rail, or the mod rule's).
 */
static void check_homes(uint64_t (*sent_on)[RAILS], const uint8_t *map)
{
	for (uint32_t s = 0; s < SRCS; s++) {
		uint32_t best = 0, want = map ? map[s] : s % RAILS;

		for (uint32_t k = 1; k < RAILS; k++)
			if (sent_on[s][k] > sent_on[s][best])
				best = k;
		if (best != want)
			fail_msg("source %u sent mostly on rail %u (%llu messages), its home is %u "
				 "(%llu)", s, best, (unsigned long long)sent_on[s][best], want,
				 (unsigned long long)sent_on[s][want]);
	}
}

struct fifo {
	uint32_t src[DEPTH], seq[DEPTH];
	unsigned head, tail;
};

/*
 * Random traffic from SRCS sources to one peer over RAILS rails that go
 * down and come back: every message a source sends carries its own next
 * sequence number; what is delivered must be increasing per source, and
 * every message ends exactly once (delivered or failed).
 */
static void order_under_flaps(const uint8_t *map)
{
	struct locus_config c;
	static struct locus_rails r;
	static struct fifo q[RAILS];
	uint32_t next[SRCS] = { 0 }, last[SRCS], up = (1u << RAILS) - 1;
	uint64_t rng = 16, sent = 0, ended = 0, moves_seen, sent_on[SRCS][RAILS] = { { 0 } };

	two_nodes(&c, RAILS, RAILS, SRCS);
	locus_rails_init(&r, &c);
	if (map)
		locus_rails_map(&r, map, SRCS);
	memset(q, 0, sizeof(q));
	memset(last, 0xff, sizeof(last));
	for (int step = 0; step < 200000; step++) {
		uint32_t what = locus_splitmix_below(&rng, 100);

		if (what < 50) { /* a source sends */
			uint32_t s = locus_splitmix_below(&rng, SRCS);
			int k = locus_rails_pick(&r, 1, s, up);

			if (k < 0 || q[k].tail - q[k].head == DEPTH)
				continue;
			if (up == (1u << RAILS) - 1)
				sent_on[s][k]++;
			q[k].src[q[k].tail % DEPTH] = s;
			q[k].seq[q[k].tail % DEPTH] = next[s]++;
			q[k].tail++;
			locus_rails_sent(&r, 1, s);
			sent++;
		} else if (what < 98) { /* a rail delivers its oldest message */
			uint32_t k = locus_splitmix_below(&rng, RAILS);
			uint32_t s, seq;

			if (q[k].head == q[k].tail)
				continue;
			s = q[k].src[q[k].head % DEPTH];
			seq = q[k].seq[q[k].head % DEPTH];
			q[k].head++;
			if (last[s] != UINT32_MAX && seq <= last[s])
				fail_msg("source %u: message %u delivered after %u (rail %u)", s, seq,
					 last[s], k);
			last[s] = seq;
			locus_rails_ended(&r, 1, s);
			ended++;
		} else { /* a rail goes down (failing what it holds) or comes back */
			uint32_t k = locus_splitmix_below(&rng, RAILS);

			if (up & 1u << k) {
				for (; q[k].head != q[k].tail; q[k].head++, ended++)
					locus_rails_ended(&r, 1, q[k].src[q[k].head % DEPTH]);
				up &= ~(1u << k);
			} else {
				up |= 1u << k;
			}
		}
	}
	for (uint32_t k = 0; k < RAILS; k++)
		ended += q[k].tail - q[k].head;
	assert_int_equal(sent, ended);
	moves_seen = r.moves;
	/* the flaps made sources move, or the test did not test the moves */
	assert_true(moves_seen > 100);
	for (uint32_t s = 0; s < SRCS; s++)
		assert_true(last[s] != UINT32_MAX && last[s] > 1000);
	check_homes(sent_on, map);
}

static void test_order_under_flaps(void **state)
{
	(void)state;
	order_under_flaps(NULL);
}

/* The same with home rails from a GPU map (rdma_device = auto with gpu_pci). */
static void test_order_under_flaps_map(void **state)
{
	(void)state;
	order_under_flaps(flap_map);
}

/*
 * The failover of dataplane/locusd_net.c against the same promise: each rail
 * is a queue (never posted) in front of a window of posted messages; a rail
 * that goes down fails its posted ones once (the peer may have seen them)
 * and moves its queued ones, oldest first, to the queue of the rail
 * locus_rails_pick() gives their source (the peer cannot have seen them).
 * Every message ends once; each source's deliveries increase; moves happen.
 */
struct rail_model {
	struct fifo q;  /* queued, then posted from the front: [head, posted) are posted */
	unsigned posted;
};

static void failover_requeue(const uint8_t *map)
{
	struct locus_config c;
	static struct locus_rails r;
	static struct rail_model m[RAILS];
	uint32_t next[SRCS] = { 0 }, last[SRCS], up = (1u << RAILS) - 1;
	uint64_t rng = 7, sent = 0, delivered = 0, failed = 0, requeued = 0;
	uint64_t sent_on[SRCS][RAILS] = { { 0 } };

	two_nodes(&c, RAILS, RAILS, SRCS);
	locus_rails_init(&r, &c);
	if (map)
		locus_rails_map(&r, map, SRCS);
	memset(last, 0xff, sizeof(last));
	memset(m, 0, sizeof(m));
	for (int step = 0; step < 300000; step++) {
		uint32_t what = locus_splitmix_below(&rng, 100);
		uint32_t k = locus_splitmix_below(&rng, RAILS);
		struct rail_model *x = &m[k];

		if (what < 45) { /* a source hands a message over */
			uint32_t s = locus_splitmix_below(&rng, SRCS);
			int to = locus_rails_pick(&r, 1, s, up);

			if (to < 0 || m[to].q.tail - m[to].q.head == DEPTH)
				continue;
			if (up == (1u << RAILS) - 1)
				sent_on[s][to]++;
			m[to].q.src[m[to].q.tail % DEPTH] = s;
			m[to].q.seq[m[to].q.tail % DEPTH] = next[s]++;
			m[to].q.tail++;
			locus_rails_sent(&r, 1, s);
			sent++;
		} else if (what < 70) { /* a poll posts the oldest queued message */
			if ((up & 1u << k) && x->posted != x->q.tail)
				x->posted++;
		} else if (what < 97) { /* the oldest posted one is delivered */
			uint32_t s, seq;

			if (x->q.head == x->posted)
				continue;
			s = x->q.src[x->q.head % DEPTH];
			seq = x->q.seq[x->q.head % DEPTH];
			x->q.head++;
			if (last[s] != UINT32_MAX && seq <= last[s])
				fail_msg("source %u: message %u delivered after %u", s, seq, last[s]);
			last[s] = seq;
			locus_rails_ended(&r, 1, s);
			delivered++;
		} else if (up & 1u << k) { /* rail k fails */
			for (; x->q.head != x->posted; x->q.head++, failed++)
				locus_rails_ended(&r, 1, x->q.src[x->q.head % DEPTH]);
			up &= ~(1u << k);
			for (; x->q.head != x->q.tail; x->q.head++) {
				uint32_t s = x->q.src[x->q.head % DEPTH];
				int to = locus_rails_pick(&r, 1, s, up);

				if (to >= 0 && m[to].q.tail - m[to].q.head < DEPTH) {
					m[to].q.src[m[to].q.tail % DEPTH] = s;
					m[to].q.seq[m[to].q.tail % DEPTH] = x->q.seq[x->q.head % DEPTH];
					m[to].q.tail++;
					requeued++;
				} else {
					locus_rails_ended(&r, 1, s);
					failed++;
				}
			}
			x->posted = x->q.head;
		} else { /* rail k comes back */
			up |= 1u << k;
		}
	}
	for (uint32_t k = 0; k < RAILS; k++)
		failed += m[k].q.tail - m[k].q.head; /* still queued at the end */
	assert_int_equal(sent, delivered + failed);
	assert_true(requeued > 100);
	assert_true(r.moves > 100);
	for (uint32_t s = 0; s < SRCS; s++)
		assert_true(last[s] != UINT32_MAX && last[s] > 1000);
	check_homes(sent_on, map);
}

static void test_failover_requeue(void **state)
{
	(void)state;
	failover_requeue(NULL);
}

static void test_failover_requeue_map(void **state)
{
	(void)state;
	failover_requeue(flap_map);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_home_rails),
		cmocka_unit_test(test_home_rails_map),
		cmocka_unit_test(test_order_under_flaps),
		cmocka_unit_test(test_order_under_flaps_map),
		cmocka_unit_test(test_failover_requeue),
		cmocka_unit_test(test_failover_requeue_map),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
