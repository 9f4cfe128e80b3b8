// SPDX-License-Identifier: MIT
/*
 * The engine-lcore / net-lcore relay (dataplane/locus_relay.h) with two
 * threads, as locusd runs it: an "engine" thread sends and takes arrivals
 * and send ends, a "net" thread passes sends down to a stand-in transport
 * that ends each one later (or refuses it at once) and produces arrivals.
 *
 * Checked: every send the engine handed over ends exactly once, with the
 * transport's refusal where it refused; arrivals reach the engine exactly
 * once each, in order per node, byte for byte, also while the engine's
 * receiver keeps answering "full" (held and handed again); a full tx ring is
 * an error the engine sees; arrivals that find no buffer stay with the
 * transport (-LOCUS_EFULL) and come again.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <cmocka.h>

#include "locus_err.h"
#include "locus_relay.h"

#define SENDS   200000u
#define NODES   3u
#define ARRIVE  60000u      /* per node */
#define MSG     48u

/* ---- the stand-in transport (net thread, except alloc/free) ------------------------------- */

static struct locus_relay *R;
static const struct locus_engine_sink *S;   /* the relay's sink */
static int pool_left = 64;                  /* buffers: arrivals must sometimes find none */

static void *t_alloc(void *ctx, size_t len)
{
	(void)ctx;
	if (__atomic_sub_fetch(&pool_left, 1, __ATOMIC_ACQ_REL) < 0) {
		__atomic_add_fetch(&pool_left, 1, __ATOMIC_ACQ_REL);
		return NULL;
	}
	return malloc(len);
}

static void t_free(void *ctx, void *buf)
{
	(void)ctx;
	free(buf);
	__atomic_add_fetch(&pool_left, 1, __ATOMIC_ACQ_REL);
}

static int t_peer_up(void *ctx, uint32_t node)
{
	(void)ctx;
	return node < NODES;
}

/* sends taken, ended later by the net thread (in order) */
static uint64_t taken[1024];
static uint32_t t_head, t_tail;

static int t_send(void *ctx, uint32_t node, void *buf, size_t len, uint64_t cookie)
{
	(void)ctx;
	(void)node;
	(void)len;
	if (cookie % 7 == 3)
		return -LOCUS_EPEERDOWN; /* refused below: the relay ends it */
	if (t_tail - t_head == 1024)
		return -LOCUS_EFULL;
	free(buf);
	__atomic_add_fetch(&pool_left, 1, __ATOMIC_ACQ_REL);
	taken[t_tail % 1024] = cookie;
	__atomic_store_n(&t_tail, t_tail + 1, __ATOMIC_RELEASE);
	return 0;
}

/* ---- the engine side's sink ------------------------------------------------------------ */

static uint8_t ended[SENDS];
static int32_t end_status[SENDS];
static uint32_t next_seq[NODES];
static uint64_t full_answers;
static int bad;

static void e_done(void *ctx, uint64_t cookie, int status)
{
	(void)ctx;
	if (cookie >= SENDS || ended[cookie]++) {
		bad++;
		return;
	}
	end_status[cookie] = status;
}

static int e_recv(void *ctx, uint32_t node, const void *msg, size_t len)
{
	const uint8_t *m = msg;
	uint32_t seq;

	(void)ctx;
	/* a receiver that is full now and then: the relay must hand the same one again */
	if (rand() % 5 == 0) {
		full_answers++;
		return -LOCUS_EFULL;
	}
	memcpy(&seq, m, 4);
	if (node >= NODES || len != MSG || seq != next_seq[node]) {
		bad++;
		return 0;
	}
	for (uint32_t b = 4; b < MSG; b++)
		if (m[b] != (uint8_t)(seq * 13 + node * 7 + b))
			bad++;
	next_seq[node]++;
	return 0;
}

/* ---- threads ----------------------------------------------------------------------------- */

static int stop_net;
static uint64_t left_with_transport;

static void *net_thread(void *arg)
{
	uint32_t sent[NODES] = { 0 };
	uint8_t msg[MSG];

	(void)arg;
	while (!__atomic_load_n(&stop_net, __ATOMIC_ACQUIRE)) {
		locus_relay_poll_net(R);
		/* end a few taken sends, in order */
		for (int i = 0; i < 8 && t_head != t_tail; i++) {
			S->done(S->ctx, taken[t_head % 1024], 0);
			__atomic_store_n(&t_head, t_head + 1, __ATOMIC_RELEASE);
		}
		/* one arrival per node if the relay has room; else it stays ours */
		for (uint32_t node = 0; node < NODES; node++) {
			uint32_t seq = sent[node];

			if (seq == ARRIVE)
				continue;
			memcpy(msg, &seq, 4);
			for (uint32_t b = 4; b < MSG; b++)
				msg[b] = (uint8_t)(seq * 13 + node * 7 + b);
			if (S->recv(S->ctx, node, msg, MSG) == 0)
				sent[node]++;
			else
				left_with_transport++;
		}
	}
	return NULL;
}

static void test_two_lcores(void **state)
{
	struct locus_engine_remote down = {
		.alloc = t_alloc, .free = t_free, .send = t_send, .peer_up = t_peer_up,
		.max_msg = 1024,
	};
	struct locus_engine_sink es = { .recv = e_recv, .done = e_done };
	const struct locus_engine_remote *up;
	struct locus_relay_stats st;
	pthread_t th;
	uint64_t refused_up = 0, got_full = 0;
	uint32_t next = 0;
	(void)state;

	srand(7);
	assert_int_equal(locus_relay_create(&down, 16, &R), 0);
	S = locus_relay_sink(R);
	locus_relay_attach(R, &es);
	up = locus_relay_transport(R);
	assert_int_equal(up->max_msg, 1024);

	/* the net thread is not running yet: the tx ring fills and says so */
	for (uint32_t i = 0; i < 16; i++) {
		void *b = up->alloc(up->ctx, 64);

		assert_int_equal(up->send(up->ctx, 1, b, 64, next++), 0);
	}
	{
		void *b = up->alloc(up->ctx, 64);

		assert_int_equal(up->send(up->ctx, 1, b, 64, 999999), -LOCUS_EFULL);
		up->free(up->ctx, b); /* refused: the buffer stayed ours */
		assert_int_equal(up->send(up->ctx, NODES, NULL, 64, 999999), -LOCUS_EPEERDOWN);
	}
	pthread_create(&th, NULL, net_thread, NULL);
	while (next < SENDS || locus_relay_inflight(R) ||
	       __atomic_load_n(&t_head, __ATOMIC_ACQUIRE) != __atomic_load_n(&t_tail, __ATOMIC_ACQUIRE) ||
	       next_seq[0] + next_seq[1] + next_seq[2] < NODES * ARRIVE) {
		void *b;
		int ret;

		locus_relay_poll_engine(R);
		if (next == SENDS)
			continue;
		b = up->alloc(up->ctx, 64);
		if (!b) {
			got_full++;
			continue;
		}
		ret = up->send(up->ctx, next % NODES, b, 64, next);
		if (ret == 0) {
			next++;
		} else {
			up->free(up->ctx, b);
			assert_int_equal(ret, -LOCUS_EFULL);
			refused_up++;
		}
	}
	__atomic_store_n(&stop_net, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	locus_relay_poll_engine(R);

	assert_int_equal(bad, 0);
	for (uint32_t i = 0; i < SENDS; i++) {
		assert_int_equal(ended[i], 1);
		assert_int_equal(end_status[i], i % 7 == 3 ? -LOCUS_EPEERDOWN : 0);
	}
	for (uint32_t n = 0; n < NODES; n++)
		assert_int_equal(next_seq[n], ARRIVE);
	locus_relay_stats(R, &st);
	assert_int_equal(st.tx, SENDS);
	assert_int_equal(st.done, SENDS);
	assert_int_equal(st.rx, NODES * ARRIVE);
	/* the paths the test is about were taken */
	assert_true(st.tx_refused > 0);
	assert_true(st.rx_held > 0 && full_answers > 0);
	assert_true(st.rx_no_room > 0 && left_with_transport > 0);
	assert_true(refused_up > 0);
	assert_int_equal(st.rx_refused, 0);
	/* an arrival longer than any message a peer sends: refused and counted, never copied */
	{
		static uint8_t big[2048];

		assert_int_equal(S->recv(S->ctx, 0, big, sizeof(big)), -LOCUS_EPROTO);
		locus_relay_stats(R, &st);
		assert_int_equal(st.rx_refused, 1);
	}
	assert_int_equal(__atomic_load_n(&pool_left, __ATOMIC_ACQUIRE), 64);
	printf("relay: %u sends (%llu refused below, %llu 'ring full' to the engine, %llu no "
	       "buffer), %u arrivals (%llu handed again, %llu left with the transport)\n", SENDS,
	       (unsigned long long)st.tx_refused, (unsigned long long)refused_up,
	       (unsigned long long)got_full, NODES * ARRIVE, (unsigned long long)st.rx_held,
	       (unsigned long long)st.rx_no_room);
	locus_relay_destroy(R);
}

static void test_bad_params(void **state)
{
	struct locus_engine_remote down = {
		.alloc = t_alloc, .free = t_free, .send = t_send, .peer_up = t_peer_up,
		.max_msg = 1024,
	};
	struct locus_relay *r;
	(void)state;

	assert_int_equal(locus_relay_create(NULL, 16, &r), -EINVAL);
	assert_int_equal(locus_relay_create(&down, 24, &r), -EINVAL); /* not a power of two */
	assert_int_equal(locus_relay_create(&down, 8, &r), -EINVAL);
	down.send = NULL;
	assert_int_equal(locus_relay_create(&down, 16, &r), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_lcores),
		cmocka_unit_test(test_bad_params),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
