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

static uint32_t by_node[1024];

static int count_recv(void *ctx, uint32_t node, const void *msg, size_t len)
{
	(void)ctx;
	(void)msg;
	(void)len;
	by_node[node]++;
	return 0;
}

static void count_done(void *ctx, uint64_t cookie, int status)
{
	(void)ctx;
	(void)cookie;
	(void)status;
}

/*
 * Node ids up to 1023 (a cluster of groups), at most 64 distinct senders
 * held for at once (the nodes one node talks with): the 65th is refused,
 * counted, its buffer given back; an id past 1023 is refused at once.
 */
static void test_node_ids(void **state)
{
	struct locus_engine_remote down = {
		.alloc = t_alloc, .free = t_free, .send = t_send, .peer_up = t_peer_up,
		.max_msg = 1024,
	};
	struct locus_engine_sink es = { .recv = count_recv, .done = count_done };
	const struct locus_engine_sink *sink;
	struct locus_relay_stats st;
	struct locus_relay *r;
	uint8_t msg[64] = { 0 };
	(void)state;

	assert_int_equal(locus_relay_create(&down, 16, &r), 0);
	sink = locus_relay_sink(r);
	locus_relay_attach(r, &es);
	assert_int_equal(sink->recv(sink->ctx, 1000, msg, sizeof(msg)), 0);
	locus_relay_poll_engine(r);
	assert_int_equal(by_node[1000], 1);
	/* 64 more distinct senders: 63 fit beside node 1000, node 63 does not */
	for (uint32_t node = 0; node < 64; node++) {
		assert_int_equal(sink->recv(sink->ctx, node, msg, sizeof(msg)), 0);
		locus_relay_poll_engine(r);
	}
	for (uint32_t node = 0; node < 63; node++)
		assert_int_equal(by_node[node], 1);
	assert_int_equal(by_node[63], 0);
	/* the ones with a queue keep getting through */
	assert_int_equal(sink->recv(sink->ctx, 1000, msg, sizeof(msg)), 0);
	locus_relay_poll_engine(r);
	assert_int_equal(by_node[1000], 2);
	assert_int_equal(sink->recv(sink->ctx, 1024, msg, sizeof(msg)), -LOCUS_EPROTO);
	locus_relay_stats(r, &st);
	assert_int_equal(st.rx_refused, 2);
	assert_int_equal(st.rx, 65);
	assert_int_equal(__atomic_load_n(&pool_left, __ATOMIC_ACQUIRE), 64);
	locus_relay_destroy(r);
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

/* ---- several relays over one transport (a mux) --------------------------------------------- */

#define MUX_N     3u
#define MUX_SENDS 300u /* per relay */

static uint64_t mux_taken[MUX_N * MUX_SENDS]; /* the cookies the transport saw, as it saw them */
static uint32_t mux_n_taken;
static uint32_t mux_ended[MUX_N][MUX_SENDS];
static uint32_t mux_arrived[MUX_N];
static int mux_bad;

static int m_send(void *ctx, uint32_t node, void *buf, size_t len, uint64_t cookie)
{
	(void)ctx;
	(void)node;
	(void)len;
	free(buf);
	__atomic_add_fetch(&pool_left, 1, __ATOMIC_ACQ_REL);
	mux_taken[mux_n_taken++] = cookie;
	return 0;
}

static void m_done(void *ctx, uint64_t cookie, int status)
{
	uint32_t k = (uint32_t)(uintptr_t)ctx;

	/* each engine sees its own cookies back, untagged, each once */
	if (cookie >= MUX_SENDS || status != (int)k)
		mux_bad++;
	else
		mux_ended[k][cookie]++;
}

static int m_recv(void *ctx, uint32_t node, const void *msg, size_t len)
{
	(void)node;
	(void)msg;
	(void)len;
	mux_arrived[(uintptr_t)ctx]++;
	return 0;
}

/*
 * Three engines' relays over one transport: every send's end goes back to
 * the relay (so the engine) that sent it, with the engine's own cookie;
 * every arrival goes to relay 0's engine; a cookie using the mux's byte is
 * refused; a relay goes in one mux only.
 */
static void test_mux(void **state)
{
	struct locus_engine_remote down = {
		.alloc = t_alloc, .free = t_free, .send = m_send, .peer_up = t_peer_up,
		.max_msg = 1024,
	};
	struct locus_relay *r[MUX_N], *other;
	struct locus_relay_mux *m, *m2;
	const struct locus_engine_sink *ms;
	uint8_t msg[MSG] = { 0 };
	(void)state;

	for (uint32_t k = 0; k < MUX_N; k++) {
		struct locus_engine_sink es = { .recv = m_recv, .done = m_done,
						.ctx = (void *)(uintptr_t)k };

		assert_int_equal(locus_relay_create(&down, 1024, &r[k]), 0);
		locus_relay_attach(r[k], &es);
	}
	assert_int_equal(locus_relay_mux_create(r, 0, &m), -EINVAL);
	assert_int_equal(locus_relay_mux_create(r, MUX_N, &m), 0);
	assert_int_equal(locus_relay_mux_create(r + 1, 1, &m2), -EINVAL); /* already in m */
	assert_int_equal(locus_relay_mux_create(r, 1, &m2), -EINVAL); /* relay 0 too (tag 0) */
	ms = locus_relay_mux_sink(m);
	for (uint32_t i = 0; i < MUX_SENDS; i++) {
		for (uint32_t k = 0; k < MUX_N; k++) {
			const struct locus_engine_remote *up = locus_relay_transport(r[k]);
			void *b = up->alloc(up->ctx, 64);

			assert_non_null(b);
			assert_int_equal(up->send(up->ctx, 1, b, 64, i), 0);
		}
		for (uint32_t k = 0; k < MUX_N; k++)
			locus_relay_poll_net(r[k]); /* the transport takes them (and frees the buffers) */
	}
	{
		const struct locus_engine_remote *up = locus_relay_transport(r[1]);
		void *b = up->alloc(up->ctx, 64);

		assert_int_equal(up->send(up->ctx, 1, b, 64, 1ull << LOCUS_RELAY_COOKIE_BITS),
				 -LOCUS_ERANGE);
		up->free(up->ctx, b);
	}
	assert_int_equal(mux_n_taken, MUX_N * MUX_SENDS);
	/* ended in another order than sent, the status naming the relay the cookie says */
	for (uint32_t j = mux_n_taken; j-- > 0;)
		ms->done(ms->ctx, mux_taken[j], (int)(mux_taken[j] >> LOCUS_RELAY_COOKIE_BITS));
	ms->done(ms->ctx, (uint64_t)MUX_N << LOCUS_RELAY_COOKIE_BITS, 0); /* no such relay: dropped */
	for (uint32_t i = 0; i < 5; i++)
		assert_int_equal(ms->recv(ms->ctx, i % NODES, msg, sizeof(msg)), 0);
	for (int pass = 0; pass < 64; pass++)
		for (uint32_t k = 0; k < MUX_N; k++)
			locus_relay_poll_engine(r[k]);
	assert_int_equal(mux_bad, 0);
	for (uint32_t k = 0; k < MUX_N; k++)
		for (uint32_t i = 0; i < MUX_SENDS; i++)
			assert_int_equal(mux_ended[k][i], 1);
	assert_int_equal(mux_arrived[0], 5);
	assert_int_equal(mux_arrived[1] + mux_arrived[2], 0);
	for (uint32_t k = 0; k < MUX_N; k++) {
		assert_int_equal(locus_relay_inflight(r[k]), 0);
		locus_relay_destroy(r[k]);
	}
	locus_relay_mux_destroy(m);
	/* a lone relay in a mux of one tags nothing: its cookies pass as they are */
	assert_int_equal(locus_relay_create(&down, 16, &other), 0);
	{
		struct locus_relay *twice[2] = { other, other };

		assert_int_equal(locus_relay_mux_create(twice, 2, &m), -EINVAL);
	}
	assert_int_equal(locus_relay_mux_create(&other, 1, &m), 0);
	locus_relay_mux_destroy(m);
	locus_relay_destroy(other);
	assert_int_equal(__atomic_load_n(&pool_left, __ATOMIC_ACQUIRE), 64);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_lcores),
		cmocka_unit_test(test_bad_params),
		cmocka_unit_test(test_node_ids),
		cmocka_unit_test(test_mux),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
