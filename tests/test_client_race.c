// SPDX-License-Identifier: MIT
/*
 * A client rewrites its request while the engine handles it: the stage is the client's memory, so nothing stops a thread of
 * the client from changing expert ids, row refs or a signature header
 * between the engine's check and its use. Each test runs the engine on a
 * thread (as locusd's worker lcore), submits requests from one thread and
 * flips the request's bytes from another as fast as it can, for a few
 * seconds. What must hold: the engine never crashes or reads out of bounds
 * (run under ASan by `make asan`), every request gets exactly one
 * completion, served or refused, and whatever reaches a receiver is what
 * the engine checked (valid expert ids, non-zero k-slot masks, a valid
 * signature header).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_dispatch.h"
#include "locus_eldr.h"
#include "locus_node.h"
#include "locus_table.h"
#include "node_tables.h"
#include "node_util.h"

#define INST "t-race"
#define ROW 128
#define T 48            /* tokens per batch */
#define K 2             /* top-k */
#define RUN_NS 2000000000ull   /* each test runs this long, and on until it saw */
#define MAX_NS 10000000000ull  /* both outcomes (served, refused), at most this */
#define MAX_REQS 200000

static char shm_dir[64];
static struct locus_node *node;
static pthread_t th_ctl, th_eng;
static volatile int stop;
static struct tu_view tv;
static struct tu_control ctl;

static void *eng_loop(void *arg)
{
	struct locus_engine *e = locus_node_engine(node);

	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
		if (locus_engine_poll(e) == 0)
			sched_yield();
	return NULL;
}

static int setup(void **state)
{
	struct locus_config cfg;
	struct locus_error e;
	static const char conf[] =
		"[locusd]\ninstance = " INST "\nclient_slots = 8\nring_size = 64\n"
		"stage_size = 262144\nclient_inbox_slots = 32\ninbox_slot_size = 4096\n"
		"moe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\nmax_batch_tokens = 64\n"
		"table_slot_size = 65536\nload_timeout_ms = 60000\n"
		"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";
	(void)state;

	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-race-test-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	if (locus_config_parse(conf, strlen(conf), "test.conf", &cfg, &e) ||
	    locus_node_create(&cfg, tu_now_ns, 1000000000ull, &node, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	locus_node_set_running(node);
	if (tu_view_open(INST, &tv))
		return -1;
	ctl = (struct tu_control){ .node = node, .stop = &stop };
	pthread_create(&th_ctl, NULL, tu_control_loop, &ctl);
	pthread_create(&th_eng, NULL, eng_loop, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(th_ctl, NULL);
	pthread_join(th_eng, NULL);
	__atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
	tu_view_close(&tv);
	locus_node_destroy(node, 1);
	return rmdir(shm_dir);
}

/* Whether to go on: RUN_NS at least, then until both outcomes came, within MAX_NS. */
static int more(uint64_t t0, uint64_t n, uint64_t served, uint64_t refused)
{
	uint64_t dt = tu_now_ns() - t0;

	if (n >= MAX_REQS && served && refused)
		return 0;
	return dt < RUN_NS || (dt < MAX_NS && !(served && refused));
}

/* ---- the flipping thread ------------------------------------------------------------ */

/*
 * Rewrites n u16 words at p with a then b, over and over, until *done;
 * volatile stores, so every rewrite reaches memory.
 */
struct flipper {
	volatile uint16_t *p;
	uint32_t n;
	uint16_t a, b;
	volatile int done;
	uint64_t flips;
};

static void *flip_loop(void *arg)
{
	struct flipper *f = arg;

	while (!f->done) {
		for (uint32_t i = 0; i < f->n; i++)
			f->p[i] = f->a;
		for (uint32_t i = 0; i < f->n; i++)
			f->p[i] = f->b;
		f->flips++;
	}
	return NULL;
}

/* Every descriptor waiting at c: rows messages checked and released; returns other ops' count. */
static uint32_t drain(struct locus_client *c, uint32_t n_ranks, uint64_t stage_size,
		      uint64_t *msgs)
{
	struct locus_desc in;
	uint32_t other = 0;

	while (locus_client_poll(c, &in, 1) == 1) {
		const uint8_t *msg;
		struct locus_error e;

		if (in.op != LOCUS_OP_ROWS_IN && in.op != LOCUS_OP_RESULTS_IN) {
			other++;
			continue;
		}
		msg = locus_client_inbox(c, &in);
		assert_non_null(msg);
		if (locus_rows_msg_check(msg, in.len, n_ranks, stage_size, &e))
			fail_msg("a rows message the engine sent does not check: %s", e.msg);
		if (in.op == LOCUS_OP_ROWS_IN) {
			const struct locus_rows_hdr *h = locus_rows_hdr_of((void *)msg);
			const uint16_t *mx = locus_rows_experts((void *)msg, h->n_rows);

			for (uint32_t i = 0; i < h->n_rows * h->top_k; i++)
				if (mx[i] >= E)
					fail_msg("rows message carries expert id %u >= %u", mx[i], E);
		}
		(*msgs)++;
		assert_int_equal(locus_client_release_slot(c, in.slot), 0);
	}
	return other;
}

/* The submitter's own completion of request id, draining the ranks meanwhile. */
static struct locus_desc wait_completion(struct locus_client **rk, int n, int self, uint8_t op,
					 uint64_t id, uint64_t *msgs)
{
	struct locus_desc d;
	uint64_t t0 = tu_now_ns();

	for (;;) {
		for (int r = 0; r < n; r++)
			if (r != self)
				assert_int_equal(drain(rk[r], GPN, 262144, msgs), 0);
		/* the submitter's inbox may hold its own in-place rows too */
		while (locus_client_poll(rk[self], &d, 1) == 1) {
			const uint8_t *msg;
			struct locus_error e;

			if (d.op == op) {
				assert_int_equal(d.id, id);
				return d;
			}
			msg = locus_client_inbox(rk[self], &d);
			assert_non_null(msg);
			if (locus_rows_msg_check(msg, d.len, GPN, 262144, &e))
				fail_msg("own rows message does not check: %s", e.msg);
			(*msgs)++;
			assert_int_equal(locus_client_release_slot(rk[self], d.slot), 0);
		}
		if (tu_now_ns() - t0 > 10000000000ull)
			fail_msg("request %llu: no completion within 10 s", (unsigned long long)id);
		sched_yield();
	}
}

/* ---- dispatch: expert ids flipped between valid and far out of range --------------- */

static void test_dispatch_ids_rewritten(void **state)
{
	struct locus_client *rk[GPN];
	struct locus_dispatch_req *rq;
	struct flipper f;
	pthread_t th;
	size_t glen;
	void *g = grace_table(&glen);
	uint8_t *stage;
	uint64_t served = 0, refused = 0, msgs = 0, n = 0, t0;
	int was_refused;
	float *gates;
	(void)state;

	for (int r = 0; r < GPN; r++)
		rk[r] = tu_attach(INST, LOCUS_ROLE_RANK, 0, (uint32_t)r);
	assert_true(tu_push(INST, node, 1, g, glen, &was_refused) > 0);
	assert_false(was_refused);
	free(g);

	stage = locus_client_stage(rk[0], NULL);
	rq = (struct locus_dispatch_req *)stage;
	*rq = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = 1, .top_k = K,
					   .n_tokens = T, .row_bytes = ROW, .rows_off = 65536,
					   .batch_id = 1 };
	gates = (float *)((uint8_t *)(rq + 1) + locus_ids_bytes(T, K));
	for (uint32_t i = 0; i < T * K; i++)
		gates[i] = 0.25f;
	for (uint32_t i = 0; i < T * K; i++)
		((uint16_t *)(rq + 1))[i] = (uint16_t)(i % E);
	/* the first token's ids: expert 5 (valid) or 65535, far past any table */
	f = (struct flipper){ .p = (volatile uint16_t *)(rq + 1), .n = K, .a = 5, .b = 65535 };
	pthread_create(&th, NULL, flip_loop, &f);
	t0 = tu_now_ns();
	while (more(t0, n, served, refused)) {
		struct locus_desc d = { .op = LOCUS_OP_DISPATCH, .id = ++n, .off = 0,
					.len = (uint32_t)locus_dispatch_req_len(T, K) };

		assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);
		d = wait_completion(rk, GPN, 0, LOCUS_OP_DISPATCH, n, &msgs);
		if (d.status == 0)
			served++;
		else if (d.status == -LOCUS_ERANGE)
			refused++;
		else
			fail_msg("request %llu: status %d", (unsigned long long)n, d.status);
	}
	f.done = 1;
	pthread_join(th, NULL);
	printf("dispatch under rewrites: %llu requests, %llu served, %llu refused, %llu rows "
	       "messages checked, %llu flips\n", (unsigned long long)n,
	       (unsigned long long)served, (unsigned long long)refused,
	       (unsigned long long)msgs, (unsigned long long)f.flips);
	assert_int_equal(served + refused, n);
	assert_true(refused > 0 && served > 0);
	/* every id the engine counted per expert was in range: nothing past E */
	for (uint32_t ex = E; ex < 16; ex++)
		assert_int_equal(tu_ctr(tv.ctrs, "expert_tokens", 1 * 16 + ex), 0);
	for (int r = 0; r < GPN; r++)
		locus_client_detach(rk[r]);
}

/* ---- combine: k-slot masks flipped between valid and 0 ------------------------------- */

static void test_combine_refs_rewritten(void **state)
{
	struct locus_client *rk[GPN];
	struct locus_combine_req *cq;
	struct locus_row_ref *refs;
	struct flipper f;
	pthread_t th;
	uint8_t *stage;
	uint64_t served = 0, refused = 0, msgs = 0, n = 0, t0;
	const uint32_t rows = 32;
	(void)state;

	for (int r = 0; r < GPN; r++)
		rk[r] = tu_attach(INST, LOCUS_ROLE_RANK, 0, (uint32_t)r);
	/* rank 1 answers rank 0 (same node: the rows are copied into rank 0's inbox) */
	stage = locus_client_stage(rk[1], NULL);
	cq = (struct locus_combine_req *)stage;
	*cq = (struct locus_combine_req){ .magic = LOCUS_COMBINE_MAGIC, .layer = 1,
					  .dst_rank = 0, .n_rows = rows, .row_bytes = ROW,
					  .rows_off = 65536, .batch_id = 9 };
	refs = (struct locus_row_ref *)(cq + 1);
	for (uint32_t j = 0; j < rows; j++)
		refs[j] = (struct locus_row_ref){ .token = j, .kmask = 1 };
	/* the low half of each kmask: 1 (valid) or 0 (refused) */
	f = (struct flipper){ .p = (volatile uint16_t *)&refs[0].kmask, .n = 1, .a = 1, .b = 0 };
	pthread_create(&th, NULL, flip_loop, &f);
	t0 = tu_now_ns();
	while (more(t0, n, served, refused)) {
		struct locus_desc d = { .op = LOCUS_OP_COMBINE, .id = ++n, .off = 0,
					.len = (uint32_t)locus_combine_req_len(rows) };

		assert_int_equal(locus_client_submit(rk[1], &d, 1), 1);
		d = wait_completion(rk, GPN, 1, LOCUS_OP_COMBINE, n, &msgs);
		if (d.status == 0)
			served++;
		else if (d.status == -LOCUS_ERANGE)
			refused++;
		else
			fail_msg("request %llu: status %d", (unsigned long long)n, d.status);
	}
	f.done = 1;
	pthread_join(th, NULL);
	printf("combine under rewrites: %llu requests, %llu served, %llu refused, %llu results "
	       "messages checked\n", (unsigned long long)n, (unsigned long long)served,
	       (unsigned long long)refused, (unsigned long long)msgs);
	assert_int_equal(served + refused, n);
	assert_true(refused > 0 && served > 0);
	assert_int_equal(msgs, served);
	for (int r = 0; r < GPN; r++)
		locus_client_detach(rk[r]);
}

/* ---- route: the signature header flipped between valid and a wrong version ----------- */

static void test_route_header_rewritten(void **state)
{
	struct locus_client *pre = tu_attach(INST, LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *dec[2] = { tu_attach(INST, LOCUS_ROLE_DECODE, 0, 0),
					tu_attach(INST, LOCUS_ROLE_DECODE, 1, 0) };
	struct locus_eldr_sig_hdr *h;
	struct flipper f;
	pthread_t th;
	size_t tlen, len = locus_eldr_sig_len(L, E);
	void *tbl = eldr_table(0.1f, 0, &tlen);
	uint64_t served = 0, refused = 0, delivered = 0, n = 0, t0;
	uint16_t *counts;
	int was_refused;
	(void)state;

	assert_true(tu_push(INST, node, 0, tbl, tlen, &was_refused) > 0);
	assert_false(was_refused);
	free(tbl);
	h = (struct locus_eldr_sig_hdr *)locus_client_stage(pre, NULL);
	memset(h, 0, len);
	*h = (struct locus_eldr_sig_hdr){ .magic = LOCUS_ELDR_SIG_MAGIC,
					  .version = LOCUS_ELDR_SIG_VERSION,
					  .n_layers = L, .n_experts = E, .prompt_tokens = 9 };
	counts = (uint16_t *)(h + 1);
	for (int l = 0; l < L; l++)
		counts[l * E + 3] = 9;
	f = (struct flipper){ .p = &h->version, .n = 1, .a = LOCUS_ELDR_SIG_VERSION,
			      .b = LOCUS_ELDR_SIG_VERSION + 1 };
	pthread_create(&th, NULL, flip_loop, &f);
	t0 = tu_now_ns();
	while (more(t0, n, served, refused)) {
		struct locus_desc d = { .op = LOCUS_OP_ROUTE, .id = ++n, .off = 0,
					.len = (uint32_t)len }, in;

		assert_int_equal(locus_client_submit(pre, &d, 1), 1);
		tu_wait_desc(pre, &d);
		assert_int_equal(d.id, n);
		if (d.status == -LOCUS_EVERSION) {
			refused++;
			continue;
		}
		assert_int_equal(d.status, 0);
		served++;
		tu_wait_desc(dec[d.peer], &in);
		{
			const struct locus_msg_hdr *m = locus_client_inbox(dec[d.peer], &in);
			struct locus_error e;

			assert_non_null(m);
			if (locus_eldr_sig_check(m + 1, m->payload_len, L, E, &e))
				fail_msg("decoder %u got a signature that does not check: %s",
					 d.peer, e.msg);
		}
		delivered++;
		assert_int_equal(locus_client_release_slot(dec[d.peer], in.slot), 0);
	}
	f.done = 1;
	pthread_join(th, NULL);
	printf("route under rewrites: %llu requests, %llu routed, %llu refused, %llu delivered "
	       "and checked, %llu flips\n", (unsigned long long)n, (unsigned long long)served,
	       (unsigned long long)refused, (unsigned long long)delivered,
	       (unsigned long long)f.flips);
	assert_int_equal(served + refused, n);
	assert_int_equal(delivered, served);
	assert_true(refused > 0 && served > 0);
	locus_client_detach(pre);
	locus_client_detach(dec[0]);
	locus_client_detach(dec[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dispatch_ids_rewritten),
		cmocka_unit_test(test_combine_refs_rewritten),
		cmocka_unit_test(test_route_header_rewritten),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
