// SPDX-License-Identifier: MIT
/*
 * Two engine lcores on one node (engine_lcores = 2), each engine on a
 * thread of its own, the node's control work on a third, clients attached
 * through the client library: ranks 0-1 are polled by engine 0, ranks 2-3
 * by engine 1, prefillers and decoders spread.
 *
 * Checked: four ranks, a thread each, dispatch batches with several in
 * flight to every rank at once; every batch gets exactly one completion;
 * every (token, k) of a batch that completed 0 arrives exactly once, with
 * its row's bytes, expert ids and gates intact, none of a refused one
 * (all-or-nothing across engines); each receiver sees each source's
 * batches in order. Signatures from a prefiller on one engine reach
 * decoders on both, byte for byte. A rank polled by engine 1 is killed
 * while rank 0 (engine 0) keeps dispatching to it: every request still
 * gets one completion, its slot is reclaimed, nothing is left in an inbox,
 * and the rank attached again receives only what was sent to it. Tables
 * pushed while both engines are busy are adopted by both, traffic going on.
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
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_dispatch.h"
#include "locus_eldr.h"
#include "locus_node.h"
#include "locus_shm.h"
#include "node_tables.h"
#include "node_util.h"

#define INST "t-engines"
#define ROW 128
#define T 16          /* tokens per batch */
#define K 2           /* experts per token */
#define W 4           /* batches a rank keeps in flight */
#define MAX_BATCHES 16384
#define REQ_OFF(j) ((uint64_t)(j) * 8192)
#define ROWS_OFF(j) (65536 + (uint64_t)(j) * T * ROW)

static char shm_dir[64];
static struct locus_node *node;
static pthread_t th_ctl, th_eng[2];
static volatile int stop;
static struct tu_control ctl;
static struct tu_view tv;
static uint64_t eng_busy[2]; /* polls that found work, per engine */

static void *eng_loop(void *arg)
{
	uint32_t k = (uint32_t)(uintptr_t)arg;
	struct locus_engine *e = locus_node_engine_at(node, k);

	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		if (locus_engine_poll(e) == 0) {
			sched_yield();
			continue;
		}
		__atomic_add_fetch(&eng_busy[k], 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static int setup(void **state)
{
	static const char conf[] =
		"[locusd]\ninstance = " INST "\nengine_lcores = 2\nclient_slots = 12\n"
		"ring_size = 128\nstage_size = 262144\nclient_inbox_slots = 32\n"
		"inbox_slot_size = 4096\nmoe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\n"
		"max_batch_tokens = 64\ntable_slot_size = 65536\nload_timeout_ms = 60000\n"
		"sig_cache_bytes = 0\n"
		"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";
	struct locus_config cfg;
	struct locus_error e;
	(void)state;

	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-engines-test-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	if (locus_config_parse(conf, strlen(conf), "test.conf", &cfg, &e) ||
	    locus_node_create(&cfg, tu_now_ns, 1000000000ull, &node, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	if (locus_node_n_engines(node) != 2)
		return -1;
	locus_node_set_running(node);
	if (tu_view_open(INST, &tv))
		return -1;
	ctl = (struct tu_control){ .node = node, .stop = &stop };
	pthread_create(&th_ctl, NULL, tu_control_loop, &ctl);
	for (uintptr_t k = 0; k < 2; k++)
		pthread_create(&th_eng[k], NULL, eng_loop, (void *)k);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(th_ctl, NULL);
	for (int k = 0; k < 2; k++)
		pthread_join(th_eng[k], NULL);
	tu_view_close(&tv);
	locus_node_destroy(node, 1);
	return rmdir(shm_dir);
}

#define ctr_(name, elem) tu_ctr(tv.ctrs, name, elem)

static void push_grace(void)
{
	size_t len;
	void *g = grace_table(&len);
	int refused;
	int64_t gen = tu_push(INST, node, 1, g, len, &refused);

	assert_false(refused);
	/* adopted by both engines, each through its own reader */
	for (uint32_t k = 0; k < 2; k++)
		assert_int_equal(locus_engine_table_generation(locus_node_engine_at(node, k), 1),
				 (uint64_t)gen);
	free(g);
}

/* ---- ranks dispatching to every rank, a thread each ----------------------------- */

static uint8_t row_byte(uint32_t src, uint32_t seq, uint32_t tok, uint32_t i)
{
	return (uint8_t)(src * 131 + seq * 17 + tok * 7 + i);
}

static uint16_t expert_of(uint32_t src, uint32_t seq, uint32_t tok, uint32_t k)
{
	return (uint16_t)((tok + k * 3 + seq + src) % E);
}

struct rank {
	uint32_t rank;
	struct locus_client *c;
	uint32_t n_batches;        /* to send; 0: until told to stop */
	int rank_only;             /* 1: only receive (no dispatches) */
	int peer_down_ok;          /* a receiver may leave: -LOCUS_EPEERDOWN is a refusal */
	/* what this thread saw */
	uint32_t sent, done_ok, done_refused;
	uint8_t completed[MAX_BATCHES];  /* completions per seq: must end at 1 */
	int8_t status_ok[MAX_BATCHES];
	uint32_t last_seq[GPN];          /* per source: batches arrive in order */
	uint8_t seen_any[GPN];
	uint64_t rows_in;
	char err[256];
};

static volatile int ranks_stop;
/* (token, k) of source s's batch seq delivered: must end at 1 (0 for a refused batch) */
static uint8_t hits[GPN][MAX_BATCHES][T][K];

static int fail_rank(struct rank *r, const char *what, unsigned a, unsigned b)
{
	if (!r->err[0])
		snprintf(r->err, sizeof(r->err), "rank %u: %s (%u, %u)", r->rank, what, a, b);
	return -1;
}

static void submit_batch(struct rank *r, uint32_t seq)
{
	uint8_t *st = locus_client_stage(r->c, NULL);
	uint32_t j = seq % W;
	struct locus_dispatch_req *rq = (struct locus_dispatch_req *)(st + REQ_OFF(j));
	uint16_t *ex = (uint16_t *)(rq + 1);
	float *gates = (float *)((uint8_t *)(rq + 1) + locus_ids_bytes(T, K));
	struct locus_desc d;

	*rq = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = 1, .top_k = K,
					   .n_tokens = T, .row_bytes = ROW,
					   .rows_off = ROWS_OFF(j),
					   .batch_id = (uint64_t)r->rank << 32 | seq };
	for (uint32_t t = 0; t < T; t++) {
		for (uint32_t k = 0; k < K; k++) {
			ex[t * K + k] = expert_of(r->rank, seq, t, k);
			gates[t * K + k] = (float)(seq * 100 + t * K + k);
		}
		for (uint32_t i = 0; i < ROW; i++)
			st[ROWS_OFF(j) + t * ROW + i] = row_byte(r->rank, seq, t, i);
	}
	d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = seq, .off = REQ_OFF(j),
				 .len = (uint32_t)locus_dispatch_req_len(T, K) };
	/* W in flight and a release per delivery never fill a 128-entry ring */
	if (locus_client_submit(r->c, &d, 1) != 1)
		fail_rank(r, "submit ring full", seq, 0);
}

/* A ROWS_IN: every byte, id and gate as the source wrote it, in order per source. */
static int check_rows(struct rank *r, const struct locus_desc *in)
{
	uint8_t *msg = (uint8_t *)locus_client_inbox(r->c, in);
	const struct locus_msg_hdr *m;
	const struct locus_rows_hdr *h;
	const struct locus_row_ref *refs;
	const uint16_t *mx;
	const float *mg;
	uint32_t src, seq;

	if (!msg || locus_rows_msg_check(msg, in->len, GPN, 262144, NULL))
		return fail_rank(r, "malformed rows message", in->slot, in->len);
	m = (const struct locus_msg_hdr *)msg;
	h = locus_rows_hdr_of(msg);
	refs = locus_rows_refs(msg);
	mx = locus_rows_experts(msg, h->n_rows);
	mg = locus_rows_gates(msg, h->n_rows, K);
	src = m->src_rank;
	seq = (uint32_t)h->batch_id;
	if (src >= GPN || h->batch_id >> 32 != src || seq >= MAX_BATCHES || m->dst_rank != r->rank)
		return fail_rank(r, "rows of a batch nobody sent", src, seq);
	if (r->seen_any[src] && seq < r->last_seq[src])
		return fail_rank(r, "batches of one source out of order", src, seq);
	r->seen_any[src] = 1;
	r->last_seq[src] = seq;
	for (uint32_t j = 0; j < h->n_rows; j++) {
		uint32_t t = refs[j].token;
		const uint8_t *row;

		if (t >= T)
			return fail_rank(r, "token out of range", src, t);
		/* rows of our own batches stay in our stage (same GPU) */
		row = (h->flags & LOCUS_ROWS_IN_PLACE) ?
			      locus_client_stage(r->c, NULL) + h->rows_off + (size_t)t * ROW
			      : msg + h->rows_off + (size_t)j * ROW;
		for (uint32_t i = 0; i < ROW; i++)
			if (row[i] != row_byte(src, seq, t, i))
				return fail_rank(r, "row bytes differ", seq, t);
		for (uint32_t k = 0; k < K; k++) {
			if (mx[j * K + k] != expert_of(src, seq, t, k) ||
			    mg[j * K + k] != (float)(seq * 100 + t * K + k))
				return fail_rank(r, "expert id or gate differs", seq, t);
			if (refs[j].kmask & (1u << k))
				__atomic_add_fetch(&hits[src][seq][t][k], 1, __ATOMIC_RELAXED);
		}
		r->rows_in++;
	}
	if (locus_client_release_slot(r->c, in->slot) < 0)
		return fail_rank(r, "submit ring full (release)", in->slot, 0);
	return 0;
}

static void *rank_loop(void *arg)
{
	struct rank *r = arg;
	uint32_t outstanding = 0;

	while (!__atomic_load_n(&ranks_stop, __ATOMIC_ACQUIRE) && !r->err[0]) {
		uint32_t want = __atomic_load_n(&r->n_batches, __ATOMIC_ACQUIRE);

		struct locus_desc in[8];
		int n;

		while (!r->rank_only && outstanding < W && r->sent < MAX_BATCHES &&
		       (want == 0 || r->sent < want)) {
			submit_batch(r, r->sent);
			__atomic_store_n(&r->sent, r->sent + 1, __ATOMIC_RELEASE);
			outstanding++;
		}
		n = locus_client_poll(r->c, in, 8);
		if (n < 0) {
			fail_rank(r, "poll failed", 0, (unsigned)-n);
			break;
		}
		for (int i = 0; i < n; i++) {
			if (in[i].op == LOCUS_OP_ROWS_IN) {
				check_rows(r, &in[i]);
				continue;
			}
			if (in[i].op != LOCUS_OP_DISPATCH || in[i].id >= r->sent) {
				fail_rank(r, "unexpected descriptor", in[i].op, (unsigned)in[i].id);
				continue;
			}
			if (r->completed[in[i].id]++)
				fail_rank(r, "two completions", (unsigned)in[i].id, 0);
			r->status_ok[in[i].id] = in[i].status == 0;
			if (in[i].status == 0)
				__atomic_store_n(&r->done_ok, r->done_ok + 1, __ATOMIC_RELEASE);
			else if (in[i].status == -LOCUS_EFULL ||
				 (r->peer_down_ok && in[i].status == -LOCUS_EPEERDOWN))
				/* a receiver's inbox full (or gone): refused */
				__atomic_store_n(&r->done_refused, r->done_refused + 1,
						 __ATOMIC_RELEASE);
			else
				fail_rank(r, "dispatch failed", (unsigned)in[i].id,
					  (unsigned)-in[i].status);
			outstanding--;
		}
		if (n == 0)
			sched_yield();
	}
	return NULL;
}

static struct rank rk[GPN];

static void start_ranks(pthread_t *th, uint32_t n_batches)
{
	memset(rk, 0, sizeof(rk));
	memset(hits, 0, sizeof(hits));
	__atomic_store_n(&ranks_stop, 0, __ATOMIC_RELEASE);
	for (uint32_t r = 0; r < GPN; r++) {
		rk[r].rank = r;
		rk[r].n_batches = n_batches;
		rk[r].c = tu_attach(INST, LOCUS_ROLE_RANK, 0, r);
	}
	for (uint32_t r = 0; r < GPN; r++)
		pthread_create(&th[r], NULL, rank_loop, &rk[r]);
}

/* Every rank sent all it was to (n_batches > 0 by now) and had every batch answered. */
static int all_completed(void)
{
	for (uint32_t r = 0; r < GPN; r++) {
		uint32_t sent = __atomic_load_n(&rk[r].sent, __ATOMIC_ACQUIRE);
		uint32_t want = __atomic_load_n(&rk[r].n_batches, __ATOMIC_ACQUIRE);

		if (rk[r].err[0])
			return 1; /* reported by the caller */
		if ((sent < want && sent < MAX_BATCHES) ||
		    __atomic_load_n(&rk[r].done_ok, __ATOMIC_ACQUIRE) +
				    __atomic_load_n(&rk[r].done_refused, __ATOMIC_ACQUIRE) < sent)
			return 0;
	}
	return 1;
}

/* Once every batch completed and the engines handed over what they had, stop and check. */
static void stop_and_check_ranks(pthread_t *th)
{
	uint64_t ok = 0;

	for (int i = 0; i < 100000 && !all_completed(); i++)
		tu_nap();
	for (int i = 0; i < 25000 && locus_node_engine_inflight(node); i++)
		tu_nap();
	for (int i = 0; i < 50; i++) /* the last deliveries polled and released */
		tu_nap();
	__atomic_store_n(&ranks_stop, 1, __ATOMIC_RELEASE);
	for (uint32_t r = 0; r < GPN; r++)
		pthread_join(th[r], NULL);
	for (uint32_t r = 0; r < GPN; r++) {
		if (rk[r].err[0])
			fail_msg("%s", rk[r].err);
		if (rk[r].done_ok + rk[r].done_refused != rk[r].sent)
			fail_msg("rank %u: %u of %u batches answered (protocol errors %llu)", r,
				 rk[r].done_ok + rk[r].done_refused, rk[r].sent,
				 (unsigned long long)ctr_("client_protocol_errors", 0));
		for (uint32_t s = 0; s < rk[r].sent; s++) {
			assert_int_equal(rk[r].completed[s], 1);
			for (uint32_t t = 0; t < T; t++)
				for (uint32_t k = 0; k < K; k++)
					assert_int_equal(hits[r][s][t][k], rk[r].status_ok[s]);
		}
		ok += rk[r].done_ok;
	}
	assert_true(ok > 0);
	for (uint32_t r = 0; r < GPN; r++)
		locus_client_detach(rk[r].c);
}

static void test_cross_traffic(void **state)
{
	pthread_t th[GPN];
	uint64_t x0 = ctr_("engine_handovers", 0);
	(void)state;

	push_grace();
	start_ranks(th, 400);
	stop_and_check_ranks(th);
	/*
	 * Every batch reaches all four ranks (its 16 tokens name all 8 experts,
	 * expert e's primary is rank e / 2): an accepted one handed at least a
	 * message to each of the two ranks of the other engine.
	 */
	assert_true(ctr_("engine_handovers", 0) >=
		    x0 + 2ull * (rk[0].done_ok + rk[1].done_ok + rk[2].done_ok + rk[3].done_ok));
	fprintf(stderr, "cross traffic: %u+%u+%u+%u batches (refused for a full inbox: %u), "
		"%llu hand-overs between the engines\n", rk[0].done_ok, rk[1].done_ok,
		rk[2].done_ok, rk[3].done_ok,
		rk[0].done_refused + rk[1].done_refused + rk[2].done_refused + rk[3].done_refused,
		(unsigned long long)(ctr_("engine_handovers", 0) - x0));
}

/* ---- ranks placed by their GPU's NUMA node (locus_node_place_gpus) ---------------- */

static void test_ranks_placed(void **state)
{
	static const uint8_t by_order[GPN] = { 0, 0, 1, 1 }, by_numa[GPN] = { 0, 1, 0, 1 };
	static const uint8_t bad[GPN] = { 0, 1, 2, 1 };
	pthread_t th[GPN];
	(void)state;

	assert_int_equal(locus_node_place_gpus(node, bad, GPN), -LOCUS_ERANGE);
	assert_int_equal(locus_node_place_gpus(node, by_numa, GPN - 1), -LOCUS_ERANGE);
	for (int round = 0; round < 2; round++) {
		const uint8_t *want = round ? by_numa : by_order;

		/* round 1: GPUs 0, 2 on one NUMA node and 1, 3 on the other, an engine each */
		if (round)
			assert_int_equal(locus_node_place_gpus(node, by_numa, GPN), 0);
		uint32_t got[GPN];

		start_ranks(th, 60);
		for (uint32_t r = 0; r < GPN; r++)
			got[r] = locus_node_slot_engine(node, locus_client_slot(rk[r].c));
		/* every byte still arrives, now across other engine pairs */
		stop_and_check_ranks(th);
		for (uint32_t r = 0; r < GPN; r++)
			if (got[r] != want[r])
				fail_msg("round %d: rank %u polled by engine %u, want %u", round, r,
					 got[r], want[r]);
	}
	/* the order's placement again, as the later tests expect */
	assert_int_equal(locus_node_place_gpus(node, by_order, GPN), 0);
}

/* ---- signatures from one engine to decoders on both -------------------------------- */

static size_t put_signature(struct locus_client *c, int w0, int w7, uint32_t salt)
{
	uint8_t *stage = locus_client_stage(c, NULL);
	struct locus_eldr_sig_hdr *h = (struct locus_eldr_sig_hdr *)stage;
	uint16_t *counts = (uint16_t *)(h + 1);

	memset(h, 0, locus_eldr_sig_len(L, E));
	h->magic = LOCUS_ELDR_SIG_MAGIC;
	h->version = LOCUS_ELDR_SIG_VERSION;
	h->n_layers = L;
	h->n_experts = E;
	h->prompt_tokens = (uint32_t)(w0 + w7) + salt;
	for (int l = 0; l < L; l++) {
		counts[l * E + 0] = (uint16_t)w0;
		counts[l * E + 7] = (uint16_t)w7;
		counts[l * E + 3] = (uint16_t)(salt % 5);
	}
	return locus_eldr_sig_len(L, E);
}

static void test_signatures_cross(void **state)
{
	struct locus_client *pre = tu_attach(INST, LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *dec[2];
	size_t tlen;
	void *tbl = eldr_table(0.1f, 0, &tlen);
	uint64_t x0 = ctr_("engine_handovers", 0);
	int refused, got[2] = { 0, 0 };
	(void)state;

	/* the prefiller on engine 0, decoder 0 on engine 1, decoder 1 on engine 0 */
	dec[0] = tu_attach(INST, LOCUS_ROLE_DECODE, 0, 0);
	dec[1] = tu_attach(INST, LOCUS_ROLE_DECODE, 1, 0);
	assert_true(tu_push(INST, node, 0, tbl, tlen, &refused) > 0);
	assert_false(refused);
	for (uint32_t i = 0; i < 64; i++) {
		size_t len = put_signature(pre, i % 2 ? 9 : 0, i % 2 ? 0 : 9, i);
		uint8_t want[1024];
		struct locus_desc d = { .op = LOCUS_OP_ROUTE, .id = 1000 + i, .len = (uint32_t)len };
		struct locus_desc in;
		const uint8_t *msg;

		memcpy(want, locus_client_stage(pre, NULL), len);
		assert_int_equal(locus_client_submit(pre, &d, 1), 1);
		tu_wait_desc(pre, &d);
		assert_int_equal(d.id, 1000 + i);
		assert_int_equal(d.status, 0);
		assert_true(d.peer < 2);
		tu_wait_desc(dec[d.peer], &in);
		assert_int_equal(in.op, LOCUS_OP_SIGNATURE_IN);
		assert_int_equal(in.id, 1000 + i);
		msg = locus_client_inbox(dec[d.peer], &in);
		assert_non_null(msg);
		assert_int_equal(in.len, sizeof(struct locus_msg_hdr) + len);
		assert_memory_equal(msg + sizeof(struct locus_msg_hdr), want, len);
		assert_int_equal(locus_client_release_slot(dec[d.peer], in.slot), 0);
		got[d.peer]++;
	}
	/* expert 0 leans to decoder 0, expert 7 to decoder 1: both engines took some */
	assert_true(got[0] > 0 && got[1] > 0);
	assert_true(ctr_("engine_handovers", 0) >= x0 + (uint64_t)got[0]);
	locus_client_detach(dec[0]);
	locus_client_detach(dec[1]);
	locus_client_detach(pre);
	free(tbl);
}

/* ---- a receiver on engine 1 dies while engine 0 delivers to it --------------------- */

static void test_receiver_dies(void **state)
{
	pthread_t th[GPN];
	uint64_t reclaimed = ctr_("clients_reclaimed", 0);
	int sync[2], status;
	char c;
	pid_t pid;
	(void)state;

	push_grace();
	assert_int_equal(pipe(sync), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct locus_client_req req = { .roles = LOCUS_ROLE_RANK, .rank = 3,
						.timeout_ms = 5000 };
		struct locus_client *rc;
		struct locus_desc in;

		if (locus_client_attach(INST, &req, &rc, NULL))
			_exit(1);
		if (write(sync[1], "a", 1) != 1)
			_exit(1);
		/* take a few deliveries, release none, then wait to be killed */
		for (;;)
			if (locus_client_poll(rc, &in, 1) == 0)
				usleep(100);
	}
	assert_int_equal(read(sync[0], &c, 1), 1);
	/* ranks 0-2 in this process; rank 3 is the child's */
	memset(rk, 0, sizeof(rk));
	memset(hits, 0, sizeof(hits));
	__atomic_store_n(&ranks_stop, 0, __ATOMIC_RELEASE);
	for (uint32_t r = 0; r < 3; r++) {
		rk[r] = (struct rank){ .rank = r, .rank_only = r != 0, .peer_down_ok = 1 };
		rk[r].c = tu_attach(INST, LOCUS_ROLE_RANK, 0, r);
	}
	for (uint32_t r = 0; r < 3; r++)
		pthread_create(&th[r], NULL, rank_loop, &rk[r]);
	/*
	 * Rank 0 dispatches to all four: rank 3 releases nothing, so its
	 * inbox fills and later batches are refused whole; then it is killed.
	 */
	for (int i = 0; i < 25000 && __atomic_load_n(&rk[0].done_refused, __ATOMIC_RELAXED) < 8;
	     i++)
		tu_nap();
	assert_true(rk[0].done_ok > 0);
	assert_true(rk[0].done_refused >= 8);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	for (int i = 0; i < 50000 && ctr_("clients_reclaimed", 0) == reclaimed; i++)
		tu_nap();
	assert_int_equal(ctr_("clients_reclaimed", 0), reclaimed + 1);
	/* rank 0 keeps dispatching meanwhile: refused whole (rank 3 is gone) */
	for (int i = 0; i < 100; i++)
		tu_nap();
	__atomic_store_n(&ranks_stop, 1, __ATOMIC_RELEASE);
	for (uint32_t r = 0; r < 3; r++)
		pthread_join(th[r], NULL);
	for (uint32_t r = 0; r < 3; r++)
		if (rk[r].err[0])
			fail_msg("%s", rk[r].err);
	/* every request answered once; a refused batch delivered nothing anywhere */
	{
		uint32_t refused = 0;

		for (uint32_t s = 0; s + W < rk[0].sent; s++) {
			assert_int_equal(rk[0].completed[s], 1);
			refused += !rk[0].status_ok[s];
			if (rk[0].status_ok[s])
				continue;
			for (uint32_t t = 0; t < T; t++)
				for (uint32_t k = 0; k < K; k++)
					assert_int_equal(hits[0][s][t][k], 0);
		}
		assert_true(refused > 0);
	}
	assert_true(ctr_("rejected_peer_down", 0) > 0);
	/* the dead rank's inbox shares are empty on both engines */
	for (int i = 0; i < 25000 && ctr_("inbox_slots_used", 0) != 0; i++)
		tu_nap();
	for (uint32_t r = 0; r < 3; r++)
		locus_client_detach(rk[r].c);
	for (int i = 0; i < 25000 && ctr_("inbox_slots_used", 0) != 0; i++)
		tu_nap();
	assert_int_equal(ctr_("inbox_slots_used", 0), 0);
	close(sync[0]);
	close(sync[1]);

	/* rank 3 again, on engine 1: traffic from all, every byte, nothing stale */
	start_ranks(th, 100);
	stop_and_check_ranks(th);
}

/* ---- tables pushed while both engines are busy -------------------------------------- */

static void test_push_while_busy(void **state)
{
	pthread_t th[GPN];
	(void)state;

	push_grace();
	start_ranks(th, 0);
	for (int i = 0; i < 25000 && rk[3].done_ok < 10; i++)
		tu_nap();
	for (int round = 0; round < 6; round++) {
		uint64_t b0 = __atomic_load_n(&eng_busy[0], __ATOMIC_RELAXED);
		uint64_t b1 = __atomic_load_n(&eng_busy[1], __ATOMIC_RELAXED);

		push_grace();
		/* both engines were handling traffic around the push */
		for (int i = 0; i < 25000 && (__atomic_load_n(&eng_busy[0], __ATOMIC_RELAXED) == b0 ||
					      __atomic_load_n(&eng_busy[1], __ATOMIC_RELAXED) == b1);
		     i++)
			tu_nap();
		for (uint32_t r = 0; r < GPN; r++)
			if (rk[r].err[0])
				fail_msg("%s", rk[r].err);
		assert_true(rk[0].sent < MAX_BATCHES);
		assert_true(__atomic_load_n(&eng_busy[0], __ATOMIC_RELAXED) > b0);
		assert_true(__atomic_load_n(&eng_busy[1], __ATOMIC_RELAXED) > b1);
	}
	/* let the ranks finish what they have in flight */
	for (uint32_t r = 0; r < GPN; r++)
		__atomic_store_n(&rk[r].n_batches, __atomic_load_n(&rk[r].sent, __ATOMIC_ACQUIRE) + 1,
				 __ATOMIC_RELEASE);
	stop_and_check_ranks(th);
	assert_int_equal(ctr_("table_rejected", 1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cross_traffic),
		cmocka_unit_test(test_ranks_placed),
		cmocka_unit_test(test_signatures_cross),
		cmocka_unit_test(test_receiver_dies),
		cmocka_unit_test(test_push_while_busy),
	};

	return cmocka_run_group_tests_name("two engines", tests, setup, teardown);
}
