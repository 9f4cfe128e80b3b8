// SPDX-License-Identifier: MIT
/*
 * Two nodes of one cluster in one process: each has its own segment, control
 * thread and engine thread; the inter-node transport between the engines is
 * a pair of in-memory queues plus, for the one-sided decoder load rows, a
 * load area per node pair that the writer memcpys into while the reader
 * may be reading (the verbs transport is tested for real in the Soft-RoCE
 * VM). Checked: decoder loads reach the other node and make its decoders
 * routable; a row that stops moving makes its decoders stale, torn and
 * malformed rows are skipped and counted with the last good state kept;
 * signatures routed to a remote decoder arrive byte for
 * byte and complete once the send completed; a failed send completes the
 * request with an error exactly once; a peer marked down takes its decoders
 * out of routing; dispatch and combine cross nodes with every (token, k)
 * served once and the content intact; malformed remote messages are refused
 * and counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_crc32c.h"
#include "locus_dispatch.h"
#include "locus_eldr.h"
#include "locus_grace.h"
#include "locus_node.h"
#include "locus_shm.h"
#include "locus_table.h"
#include "locus_tblfile.h"
#include "locus_wire.h"
#include "node_util.h"

#define L 2
#define E 8
#define GPN 2
#define ROW 128
#define QCAP 4096
#define AREA 128 /* locus_load_row_size(max_decoders 8) = 88, rounded up */

struct qmsg {
	void *buf;
	size_t len;
	uint64_t cookie;
	int status;
};

/* One direction of the fake wire, and the send completions of a node. */
struct queue {
	pthread_mutex_t mu;
	struct qmsg m[QCAP];
	unsigned head, tail;
};

struct fake_node {
	int id;
	struct locus_node *node;
	struct locus_engine_remote rt;
	struct queue rx;        /* messages for this node */
	struct queue done;      /* this node's send completions */
	struct fake_node *peer;
	int peer_up;            /* what peer_up() answers */
	int fail_sends;         /* complete sends with an error */
	int freeze_loads;       /* load row writes do nothing: the row stops moving */
	uint8_t load_area[AREA] __locus_cache_aligned; /* where the peer's row lands */
	int hold, held;         /* the test borrows the engine lcore */
	pthread_t th_ctl, th_eng;
	struct locus_shm *view;
	struct locus_table_region *tables;
	struct locus_counters *ctrs;
	char inst[16];
};

static struct fake_node N[2];
static volatile int stop;
static char shm_dir[64];

static int q_push(struct queue *q, struct qmsg m)
{
	int ok;

	pthread_mutex_lock(&q->mu);
	ok = q->tail - q->head < QCAP;
	if (ok)
		q->m[q->tail++ % QCAP] = m;
	pthread_mutex_unlock(&q->mu);
	return ok;
}

/* The oldest message without taking it (a receiver with no room keeps it). */
static int q_peek(struct queue *q, struct qmsg *m)
{
	int ok;

	pthread_mutex_lock(&q->mu);
	ok = q->head != q->tail;
	if (ok)
		*m = q->m[q->head % QCAP];
	pthread_mutex_unlock(&q->mu);
	return ok;
}

static int q_pop(struct queue *q, struct qmsg *m)
{
	int ok;

	pthread_mutex_lock(&q->mu);
	ok = q->head != q->tail;
	if (ok)
		*m = q->m[q->head++ % QCAP];
	pthread_mutex_unlock(&q->mu);
	return ok;
}

/* ---- the transport the engine sees ---------------------------------------------- */

static void *t_alloc(void *ctx, size_t len)
{
	(void)ctx;
	return malloc(len);
}

static void t_free(void *ctx, void *buf)
{
	(void)ctx;
	free(buf);
}

static int t_send(void *ctx, uint32_t node, void *buf, size_t len, uint64_t cookie)
{
	struct fake_node *n = ctx;
	struct fake_node *to = &N[node];

	if (node == (uint32_t)n->id || !__atomic_load_n(&n->peer_up, __ATOMIC_ACQUIRE))
		return -LOCUS_EPEERDOWN;
	if (__atomic_load_n(&n->fail_sends, __ATOMIC_ACQUIRE)) {
		/* the wire ate it: the completion says so, later */
		free(buf);
		return q_push(&n->done, (struct qmsg){ .cookie = cookie,
						      .status = -LOCUS_EPEERDOWN }) ? 0 : -LOCUS_EFULL;
	}
	if (!q_push(&to->rx, (struct qmsg){ .buf = buf, .len = len }))
		return -LOCUS_EFULL;
	q_push(&n->done, (struct qmsg){ .cookie = cookie, .status = 0 });
	return 0;
}

/* One-sided: straight into the peer's area, whatever its reader is doing. */
static int t_write_load(void *ctx, uint32_t node, const void *row, size_t len)
{
	struct fake_node *n = ctx;

	if (node == (uint32_t)n->id || !__atomic_load_n(&n->peer_up, __ATOMIC_ACQUIRE))
		return -LOCUS_EPEERDOWN;
	assert_true(len <= AREA);
	if (!__atomic_load_n(&n->freeze_loads, __ATOMIC_ACQUIRE))
		memcpy(N[node].load_area, row, len);
	return 0;
}

static const volatile void *t_load_area(void *ctx, uint32_t node)
{
	struct fake_node *n = ctx;

	return node == (uint32_t)n->peer->id ? n->load_area : NULL;
}

static int t_peer_up(void *ctx, uint32_t node)
{
	struct fake_node *n = ctx;

	(void)node;
	return __atomic_load_n(&n->peer_up, __ATOMIC_ACQUIRE);
}

static void *ctl_loop(void *arg)
{
	struct fake_node *n = arg;

	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		locus_node_control(n->node);
		tu_nap();
	}
	return NULL;
}

/* The engine lcore: poll, take arrivals and send completions. */
static void *eng_loop(void *arg)
{
	struct fake_node *n = arg;
	struct locus_engine *e = locus_node_engine(n->node);

	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		struct qmsg m;
		int work;

		if (__atomic_load_n(&n->hold, __ATOMIC_ACQUIRE)) {
			__atomic_store_n(&n->held, 1, __ATOMIC_RELEASE);
			tu_nap();
			continue;
		}
		__atomic_store_n(&n->held, 0, __ATOMIC_RELEASE);
		work = locus_engine_poll(e);

		/* like locusd_net: a message the receiver has no room for waits, in order */
		while (q_peek(&n->rx, &m)) {
			if (locus_engine_remote_recv(e, (uint32_t)n->peer->id, m.buf, m.len) ==
			    -LOCUS_EFULL)
				break;
			q_pop(&n->rx, &m);
			free(m.buf);
			work++;
		}
		while (q_pop(&n->done, &m)) {
			locus_engine_remote_done(e, m.cookie, m.status);
			work++;
		}
		if (!work)
			sched_yield();
	}
	return NULL;
}

static uint64_t ctr(struct fake_node *n, const char *name, uint32_t elem)
{
	return tu_ctr(n->ctrs, name, elem);
}

/* ---- tables (as in test_node.c, for 2 nodes x 2 GPUs) ----------------------------- */

static void *eldr_table(size_t *len)
{
	struct locus_eldr_tbl_layout lay;
	uint32_t *ids;
	uint8_t *mask;
	float *idf, *cen;
	uint8_t *blob;
	const float w = (float)(1.0 / sqrt(2.0 * L));

	assert_int_equal(locus_eldr_tbl_layout(L, E, 2, &lay), 0);
	blob = calloc(1, 64 + lay.len);
	assert_int_equal(locus_eldr_tbl_init(blob + 64, lay.len, L, E, 2, 0.1f, &ids, &mask, &idf,
					     &cen), 0);
	ids[0] = 0;
	ids[1] = 1;
	for (int l = 0; l < L; l++) {
		mask[l] = 1;
		for (int e = 0; e < E; e++)
			idf[l * E + e] = 1.0f;
		cen[0 * L * E + l * E + 0] = w;
		cen[0 * L * E + l * E + 3] = w;
		cen[1 * L * E + l * E + 7] = w;
		cen[1 * L * E + l * E + 3] = w;
	}
	((struct locus_eldr_tbl_hdr *)(blob + 64))->n_masked = L;
	assert_int_equal(locus_tbl_seal(blob, 64 + lay.len, LOCUS_TBL_ELDR, LOCUS_ELDR_TBL_VERSION,
					lay.len), 0);
	*len = 64 + lay.len;
	return blob;
}

/* expert e on rank e / 2: ranks 0, 1 on node 0, ranks 2, 3 on node 1 */
static void *grace_table(size_t *len)
{
	struct locus_grace_dims d = { .n_layers = L, .n_experts = E, .n_nodes = 2,
				      .gpus_per_node = GPN, .max_replicas = 0, .capacity = 2,
				      .replica_budget = 0 };
	struct locus_grace_view v;
	size_t plen = locus_grace_payload_size(&d);
	uint8_t *blob = calloc(1, 64 + plen);

	memcpy(blob + 64, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, blob + 64, plen, NULL), 0);
	for (int l = 0; l < L; l++) {
		for (int e = 0; e < E; e++) {
			v.primary[l * E + e] = (uint16_t)(e / 2);
			v.expert_load[l * E + e] = 10.0f;
		}
		for (int r = 0; r < 4; r++)
			v.pred_load[l * 4 + r] = 20.0f;
	}
	assert_int_equal(locus_tbl_seal(blob, 64 + plen, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION,
					plen), 0);
	*len = 64 + plen;
	return blob;
}

static void push_both(unsigned ch, const void *blob, size_t len)
{
	for (int i = 0; i < 2; i++) {
		struct locus_table_wait_result res;
		int64_t gen = locus_table_push(N[i].tables, ch, blob, len, 2000000000ull, NULL);

		assert_true(gen > 0);
		assert_int_equal(locus_table_wait(N[i].tables, ch, (uint64_t)gen, 5000000000ull, &res), 0);
		assert_int_equal(res.n_refused, 0);
	}
}

/* ---- clients ---------------------------------------------------------------------- */

static struct locus_client *attach(struct fake_node *n, uint32_t roles, uint32_t dec, uint32_t rank)
{
	return tu_attach(n->inst, roles, dec, rank);
}

static size_t put_signature(struct locus_client *c, uint64_t off, int w0, int w7)
{
	uint8_t *stage = locus_client_stage(c, NULL);
	uint16_t tok[64][L][1];
	int t = 0;

	/* w0 tokens on expert 0 and w7 on 7, at every layer */
	for (int i = 0; i < w0; i++, t++)
		for (int l = 0; l < L; l++)
			tok[t][l][0] = 0;
	for (int i = 0; i < w7; i++, t++)
		for (int l = 0; l < L; l++)
			tok[t][l][0] = 7;
	return (size_t)locus_eldr_sig_build(stage + off, 65536, L, E, 1, &tok[0][0][0],
					    (uint32_t)t, 0, NULL);
}

static int setup(void **state)
{
	struct locus_error e;
	(void)state;

	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-2node-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	for (int i = 0; i < 2; i++) {
		struct fake_node *n = &N[i];
		struct locus_config cfg;
		char conf[1024];
		void *region;
		size_t size;

		n->id = i;
		n->peer = &N[!i];
		n->peer_up = 1;
		pthread_mutex_init(&n->rx.mu, NULL);
		pthread_mutex_init(&n->done.mu, NULL);
		snprintf(n->inst, sizeof(n->inst), "t-n%d", i);
		snprintf(conf, sizeof(conf),
			 "[locusd]\ninstance = %s\nnode = %d\nrdma_device = rxe%d\n"
			 "secret_file = /nonexistent\nclient_slots = 8\nring_size = 64\n"
			 "stage_size = 262144\nclient_inbox_slots = 32\ninbox_slot_size = 4096\n"
			 "moe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\n"
			 "max_batch_tokens = 64\ntable_slot_size = 65536\nload_timeout_ms = 200\n"
			 "[cluster]\ngpus_per_node = 2\nnode.0 = 127.0.0.1:7471\n"
			 "node.1 = 127.0.0.2:7471\n", n->inst, i, i);
		n->rt = (struct locus_engine_remote){ .alloc = t_alloc, .free = t_free,
						      .send = t_send, .peer_up = t_peer_up,
						      .write_load = t_write_load,
						      .load_area = t_load_area,
						      .ctx = n, .max_msg = 1 << 16,
						      .load_area_len = AREA,
						      .load_period_us = 1000 };
		if (locus_config_parse(conf, strlen(conf), n->inst, &cfg, &e) ||
		    locus_node_create_remote(&cfg, tu_now_ns, 1000000000ull, &n->rt, &n->node, &e)) {
			fprintf(stderr, "%s\n", e.msg);
			return -1;
		}
		locus_node_set_running(n->node);
		if (locus_shm_attach(n->inst, 0, &n->view, &e))
			return -1;
		region = locus_shm_region(n->view, LOCUS_REGION_TABLES, &size);
		if (locus_table_region_attach(region, size, &n->tables, &e))
			return -1;
		region = locus_shm_region(n->view, LOCUS_REGION_COUNTERS, &size);
		if (locus_counters_open(region, size, LOCUS_CTR_RDONLY, &n->ctrs, &e))
			return -1;
	}
	for (int i = 0; i < 2; i++) {
		pthread_create(&N[i].th_ctl, NULL, ctl_loop, &N[i]);
		pthread_create(&N[i].th_eng, NULL, eng_loop, &N[i]);
	}
	return 0;
}

static int teardown(void **state)
{
	struct qmsg m;
	(void)state;

	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++) {
		pthread_join(N[i].th_ctl, NULL);
		pthread_join(N[i].th_eng, NULL);
	}
	for (int i = 0; i < 2; i++) {
		while (q_pop(&N[i].rx, &m))
			free(m.buf);
		locus_counters_close(N[i].ctrs);
		locus_table_region_detach(N[i].tables);
		locus_shm_detach(N[i].view);
		locus_node_destroy(N[i].node, 1);
	}
	return rmdir(shm_dir);
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_signatures_cross_nodes(void **state)
{
	struct locus_client *pre = attach(&N[0], LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *dec1 = attach(&N[1], LOCUS_ROLE_DECODE, 1, 0);
	struct locus_desc d, in;
	size_t tlen;
	void *t = eldr_table(&tlen);
	(void)state;

	push_both(0, t, tlen);
	locus_client_report_load(dec1, 2);
	/* node 1's load reports make decoder 1 routable on node 0 */
	for (int i = 0; i < 50000 && (ctr(&N[0], "decoder_up", 1) != 1 ||
				      ctr(&N[0], "decoder_load", 1) != 2); i++)
		tu_nap();
	assert_int_equal(ctr(&N[0], "decoder_up", 1), 1);
	assert_int_equal(ctr(&N[0], "decoder_load", 1), 2);
	for (int i = 0; i < 20; i++) {
		/* leaning to decoder 0's experts: but only decoder 1 is up anywhere */
		size_t len = put_signature(pre, 0, 5 + i % 3, 1);
		const struct locus_msg_hdr *m;

		locus_client_report_load(dec1, 2); /* stay up: the heartbeat */

		d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 500 + i, .off = 0,
					 .len = (uint32_t)len };
		assert_int_equal(locus_client_submit(pre, &d, 1), 1);
		tu_wait_desc(pre, &d);
		assert_int_equal(d.id, 500 + i);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.peer, 1);
		tu_wait_desc(dec1, &in);
		assert_int_equal(in.op, LOCUS_OP_SIGNATURE_IN);
		assert_int_equal(in.id, 500 + i);
		assert_int_equal(in.peer, 0x80000000u);
		m = locus_client_inbox(dec1, &in);
		assert_non_null(m);
		assert_int_equal(m->type, LOCUS_MSG_SIGNATURE);
		assert_int_equal(m->src_rank, 0);
		assert_int_equal(m->dst_rank, 1);
		assert_memory_equal(m + 1, locus_client_stage(pre, NULL), len);
		locus_client_release_slot(dec1, in.slot);
	}
	assert_int_equal(ctr(&N[0], "routed", 1), 20);
	assert_true(ctr(&N[0], "remote_messages_out", 1) >= 20);

	/* the wire fails a send: exactly one error completion */
	__atomic_store_n(&N[0].fail_sends, 1, __ATOMIC_RELEASE);
	d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 777, .off = 0,
				 .len = (uint32_t)put_signature(pre, 0, 1, 6) };
	assert_int_equal(locus_client_submit(pre, &d, 1), 1);
	tu_wait_desc(pre, &d);
	assert_int_equal(d.id, 777);
	assert_int_equal(d.status, -LOCUS_EPEERDOWN);
	assert_false(tu_try_desc(pre, &d, 20));
	assert_false(tu_try_desc(dec1, &in, 5));
	assert_true(ctr(&N[0], "remote_send_errors", 0) >= 1);
	__atomic_store_n(&N[0].fail_sends, 0, __ATOMIC_RELEASE);

	/* the peer goes down: its decoders leave routing, requests fail cleanly */
	__atomic_store_n(&N[0].peer_up, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 50000 && ctr(&N[0], "decoder_up", 1) != 0; i++)
		tu_nap();
	d.id = 778;
	assert_int_equal(locus_client_submit(pre, &d, 1), 1);
	tu_wait_desc(pre, &d);
	assert_int_equal(d.status, -LOCUS_ENODEST);
	/* and come back when it returns */
	__atomic_store_n(&N[0].peer_up, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 50000 && ctr(&N[0], "decoder_up", 1) != 1; i++)
		tu_nap();
	d.id = 779;
	assert_int_equal(locus_client_submit(pre, &d, 1), 1);
	tu_wait_desc(pre, &d);
	assert_int_equal(d.status, 0);
	tu_wait_desc(dec1, &in);
	locus_client_release_slot(dec1, in.slot);
	locus_client_detach(dec1);
	locus_client_detach(pre);
	free(t);
}

/*
 * A remote decoder that does not release its inbox: what does not fit waits
 * at the transport and arrives, in order and intact, once slots are freed.
 */
static void test_full_remote_inbox_waits(void **state)
{
	struct locus_client *pre = attach(&N[0], LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *dec1 = attach(&N[1], LOCUS_ROLE_DECODE, 1, 0);
	struct locus_desc d, in[64];
	const uint32_t total = 48; /* the decoder's inbox has 32 slots */
	uint64_t undeliverable = ctr(&N[1], "remote_undeliverable", 0);
	uint32_t got = 0;
	(void)state;

	locus_client_report_load(dec1, 0);
	for (int i = 0; i < 50000 && ctr(&N[0], "decoder_up", 1) != 1; i++)
		tu_nap();
	for (uint32_t i = 0; i < total; i++) {
		uint64_t off = (uint64_t)(i % 16) * 4096;
		size_t len = put_signature(pre, off, 1 + (int)(i % 7), 2);

		d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 1000 + i, .off = off,
					 .len = (uint32_t)len };
		assert_int_equal(locus_client_submit(pre, &d, 1), 1);
		tu_wait_desc(pre, &d);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.peer, 1);
		if (i % 16 == 15)
			locus_client_report_load(dec1, 0); /* stay up: the heartbeat */
	}
	/* 32 arrived; the rest wait at the transport until slots come back */
	for (int i = 0; i < 200 && got < 32; i++)
		got += (uint32_t)locus_client_poll(dec1, in + got, 32 - got), tu_nap();
	assert_int_equal(got, 32);
	assert_false(tu_try_desc(dec1, in, 20));
	for (uint32_t i = 0; i < total; i++) {
		struct locus_desc x = in[i % 32];
		const struct locus_msg_hdr *m;

		if (i >= 32)
			tu_wait_desc(dec1, &x);
		assert_int_equal(x.op, LOCUS_OP_SIGNATURE_IN);
		assert_int_equal(x.id, 1000 + i); /* in order, none lost */
		m = locus_client_inbox(dec1, &x);
		assert_non_null(m);
		assert_int_equal(m->payload_len, locus_eldr_sig_len(L, E));
		assert_int_equal(locus_client_release_slot(dec1, x.slot), 0);
	}
	assert_int_equal(ctr(&N[1], "remote_undeliverable", 0), undeliverable);
	locus_client_detach(dec1);
	locus_client_detach(pre);
}

static void fill_row(uint8_t *row, uint32_t token)
{
	for (int i = 0; i < ROW; i++)
		row[i] = (uint8_t)(token * 13 + i);
}

static void test_dispatch_combine_cross_nodes(void **state)
{
	struct locus_client *rk[4];
	struct locus_dispatch_req *rq;
	struct locus_desc d, in;
	uint8_t hits[32][2] = { { 0 } }, back[32][2] = { { 0 } };
	uint16_t ex[32][2];
	const uint32_t T = 32, K = 2;
	size_t glen;
	void *g = grace_table(&glen);
	uint8_t *st0;
	float *gates;
	(void)state;

	for (int r = 0; r < 4; r++)
		rk[r] = attach(&N[r / GPN], LOCUS_ROLE_RANK, 0, (uint32_t)r);
	push_both(1, g, glen);
	st0 = locus_client_stage(rk[0], NULL);
	rq = (struct locus_dispatch_req *)st0;
	*rq = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = 0, .top_k = K,
					   .n_tokens = T, .row_bytes = ROW, .rows_off = 65536,
					   .batch_id = 99 };
	for (uint32_t t = 0; t < T; t++) {
		ex[t][0] = (uint16_t)(t % 8);
		ex[t][1] = (uint16_t)((t + 3) % 8);
		fill_row(st0 + 65536 + t * ROW, t);
	}
	memcpy(rq + 1, ex, sizeof(ex));
	gates = (float *)((uint8_t *)(rq + 1) + locus_ids_bytes(T, K));
	for (uint32_t i = 0; i < T * K; i++)
		gates[i] = 0.25f;
	d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = 1, .off = 0,
				 .len = (uint32_t)locus_dispatch_req_len(T, K) };
	assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);

	/*
	 * One event loop over the four ranks (as four serving processes would
	 * run): rows are answered with COMBINE, results gathered at rank 0. With
	 * remote destinations rank 0's DISPATCH completion comes once the sends
	 * completed, so any of these may arrive in any order.
	 */
	{
		int dispatch_done = 0, combines_done = 0, combines_sent = 0;
		uint32_t pairs_back = 0;

		for (int guard = 0; guard < 200000 && (!dispatch_done || pairs_back < T * K ||
						       combines_done < combines_sent); guard++) {
			for (int r = 0; r < 4; r++) {
				struct locus_combine_req *cq;
				uint8_t *msg, *st = locus_client_stage(rk[r], NULL);
				struct locus_msg_hdr *m;
				struct locus_rows_hdr *h;
				struct locus_row_ref *refs;

				if (locus_client_poll(rk[r], &in, 1) != 1)
					continue;
				if (in.op == LOCUS_OP_DISPATCH) {
					assert_int_equal(r, 0);
					assert_int_equal(in.status, 0);
					assert_int_equal(in.count, 4);
					dispatch_done++;
					continue;
				}
				if (in.op == LOCUS_OP_COMBINE) {
					assert_int_equal(in.status, 0);
					combines_done++;
					continue;
				}
				msg = (uint8_t *)locus_client_inbox(rk[r], &in);
				assert_non_null(msg);
				assert_int_equal(locus_rows_msg_check(msg, in.len, 4, 262144, NULL), 0);
				m = (struct locus_msg_hdr *)msg;
				h = locus_rows_hdr_of(msg);
				refs = locus_rows_refs(msg);
				if (in.op == LOCUS_OP_RESULTS_IN) {
					assert_int_equal(r, 0);
					for (uint32_t j = 0; j < h->n_rows; j++) {
						const uint8_t *row = (h->flags & LOCUS_ROWS_IN_PLACE)
							? st0 + h->rows_off + (size_t)j * ROW
							: msg + h->rows_off + (size_t)j * ROW;
						uint8_t want[ROW];

						fill_row(want, refs[j].token);
						for (int b = 0; b < ROW; b++)
							want[b] = (uint8_t)(want[b] + m->src_rank + 1);
						assert_memory_equal(row, want, ROW);
						for (uint32_t k = 0; k < K; k++)
							if (refs[j].kmask & (1u << k)) {
								assert_int_equal(back[refs[j].token][k]++, 0);
								pairs_back++;
							}
					}
					locus_client_release_slot(rk[0], in.slot);
					continue;
				}
				assert_int_equal(in.op, LOCUS_OP_ROWS_IN);
				cq = (struct locus_combine_req *)(st + 131072 + 16384 * (combines_sent % 4));
				*cq = (struct locus_combine_req){ .magic = LOCUS_COMBINE_MAGIC,
								  .dst_rank = 0, .n_rows = h->n_rows,
								  .row_bytes = ROW,
								  .rows_off = 196608 + 16384 * (combines_sent % 4),
								  .batch_id = 99 };
				for (uint32_t j = 0; j < h->n_rows; j++) {
					uint32_t t = refs[j].token;
					const uint8_t *row = (h->flags & LOCUS_ROWS_IN_PLACE)
						? st + h->rows_off + (size_t)t * ROW
						: msg + h->rows_off + (size_t)j * ROW;
					uint8_t want[ROW];

					assert_true(t < T);
					fill_row(want, t);
					assert_memory_equal(row, want, ROW);
					for (uint32_t k = 0; k < K; k++)
						if (refs[j].kmask & (1u << k)) {
							assert_int_equal(ex[t][k] / 2, r);
							assert_int_equal(hits[t][k]++, 0);
						}
					((struct locus_row_ref *)(cq + 1))[j] = refs[j];
					for (int b = 0; b < ROW; b++)
						st[cq->rows_off + j * ROW + b] = (uint8_t)(row[b] + r + 1);
				}
				locus_client_release_slot(rk[r], in.slot);
				d = (struct locus_desc){ .op = LOCUS_OP_COMBINE, .id = 60 + r,
							 .off = 131072 + 16384 * (combines_sent % 4),
							 .len = (uint32_t)locus_combine_req_len(h->n_rows) };
				assert_int_equal(locus_client_submit(rk[r], &d, 1), 1);
				combines_sent++;
			}
			if (guard % 64 == 63)
				tu_nap();
		}
		assert_int_equal(dispatch_done, 1);
		assert_int_equal(combines_done, combines_sent);
		assert_int_equal(pairs_back, T * K);
	}
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t k = 0; k < K; k++) {
			assert_int_equal(hits[t][k], 1);
			assert_int_equal(back[t][k], 1);
		}
	/* the remote tier carried ranks 2 and 3's rows, both ways */
	assert_true(ctr(&N[0], "rows", 0 * 3 + 2) > 0);
	assert_true(ctr(&N[1], "rows", 1 * 3 + 2) > 0);
	assert_int_equal(ctr(&N[1], "remote_undeliverable", 0), 0);
	for (int r = 0; r < 4; r++)
		locus_client_detach(rk[r]);
	free(g);
}

/* Write row (n entries) from node `from` into node 0's area for node 1, sealed. */
static void put_row(uint64_t seq, uint16_t from, uint16_t n, const struct locus_load_entry *ent,
		    int tear)
{
	uint8_t buf[AREA] = { 0 };
	struct locus_load_row *row = (struct locus_load_row *)buf;
	size_t len = locus_load_row_size(n);

	assert_true(len <= AREA);
	row->magic = LOCUS_LOAD_ROW_MAGIC;
	row->seq = seq;
	row->node = from;
	row->n = n;
	memcpy(row->e, ent, n * sizeof(*ent));
	row->crc = locus_crc32c(buf + 8, len - 8);
	if (tear)
		buf[len - 1] ^= 0x5a; /* the end of the row not written yet */
	memcpy(N[0].load_area, buf, len);
}

/*
 * Node 1's load row in node 0's area: it makes decoder 1 routable on node 0;
 * when it stops moving (node 1 still up) decoder 1 goes stale; torn and
 * malformed rows are counted and change nothing; a good row brings it back.
 */
static void test_load_rows(void **state)
{
	struct locus_client *dec1 = attach(&N[1], LOCUS_ROLE_DECODE, 1, 0);
	struct locus_load_entry ent[2] = { { 1, 9 }, { 0, 0 } };
	uint64_t read0 = ctr(&N[0], "load_rows_read", 1), seq;
	(void)state;

	locus_client_report_load(dec1, 5);
	for (int i = 0; i < 50000 && (ctr(&N[0], "decoder_up", 1) != 1 ||
				      ctr(&N[0], "decoder_load", 1) != 5); i++)
		tu_nap();
	assert_int_equal(ctr(&N[0], "decoder_up", 1), 1);
	assert_int_equal(ctr(&N[0], "decoder_load", 1), 5);
	assert_true(ctr(&N[1], "load_rows_written", 0) > 0);
	assert_true(ctr(&N[0], "load_rows_read", 1) > read0);

	/* the writer stops: its row stops moving, node 1 stays up */
	__atomic_store_n(&N[1].freeze_loads, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 50000 && (ctr(&N[0], "decoder_up", 1) != 0 ||
				      ctr(&N[0], "load_decoders_stale", 0) != 1); i++) {
		locus_client_report_load(dec1, 5); /* the decoder itself is fine */
		tu_nap();
	}
	assert_int_equal(ctr(&N[0], "decoder_up", 1), 0);
	assert_int_equal(ctr(&N[0], "load_decoders_stale", 0), 1);
	assert_int_equal(ctr(&N[0], "decoder_load", 1), 5);
	seq = ((const struct locus_load_row *)N[0].load_area)->seq;

	/* torn: counted, nothing taken */
	read0 = ctr(&N[0], "load_rows_read", 1);
	put_row(seq + 1, 1, 1, ent, 1);
	for (int i = 0; i < 50000 && ctr(&N[0], "load_rows_torn", 1) == 0; i++)
		tu_nap();
	assert_true(ctr(&N[0], "load_rows_torn", 1) > 0);
	/* malformed, each sealed correctly: wrong writer, decoder id out of range, n too big */
	put_row(seq + 2, 0, 1, ent, 0);
	for (int i = 0; i < 50000 && ctr(&N[0], "load_rows_bad", 1) < 1; i++)
		tu_nap();
	ent[1] = (struct locus_load_entry){ 8, 1 }; /* max_decoders is 8 */
	put_row(seq + 3, 1, 2, ent, 0);
	for (int i = 0; i < 50000 && ctr(&N[0], "load_rows_bad", 1) < 2; i++)
		tu_nap();
	assert_true(ctr(&N[0], "load_rows_bad", 1) >= 2);
	put_row(seq + 4, 1, 1, ent, 0);
	((struct locus_load_row *)N[0].load_area)->n = 9; /* more than max_decoders */
	for (int i = 0; i < 50000 && ctr(&N[0], "load_rows_bad", 1) < 3; i++)
		tu_nap();
	assert_true(ctr(&N[0], "load_rows_bad", 1) >= 3);
	assert_int_equal(ctr(&N[0], "load_rows_read", 1), read0);
	assert_int_equal(ctr(&N[0], "decoder_load", 1), 5); /* the last good state */
	assert_int_equal(ctr(&N[0], "decoder_up", 1), 0);

	/* a good row with a new seq: taken, decoder 1 routable with its new load */
	put_row(seq + 5, 1, 1, ent, 0);
	for (int i = 0; i < 50000 && ctr(&N[0], "decoder_load", 1) != 9; i++)
		tu_nap();
	assert_int_equal(ctr(&N[0], "decoder_load", 1), 9);
	assert_int_equal(ctr(&N[0], "load_rows_read", 1), read0 + 1);

	/* the writer resumes: up for good */
	__atomic_store_n(&N[1].freeze_loads, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 50000 && (ctr(&N[0], "decoder_up", 1) != 1 ||
				      ctr(&N[0], "decoder_load", 1) != 5); i++) {
		locus_client_report_load(dec1, 5);
		tu_nap();
	}
	assert_int_equal(ctr(&N[0], "decoder_up", 1), 1);
	assert_int_equal(ctr(&N[0], "load_decoders_stale", 0), 0);

	/* the decoder leaves node 1: the next row no longer lists it; gone, not stale */
	locus_client_detach(dec1);
	for (int i = 0; i < 50000 && ctr(&N[0], "decoder_up", 1) != 0; i++)
		tu_nap();
	assert_int_equal(ctr(&N[0], "decoder_up", 1), 0);
	for (int i = 0; i < 2000; i++) /* 400 ms: twice the load timeout */
		tu_nap();
	assert_int_equal(ctr(&N[0], "load_decoders_stale", 0), 0);
}

static void test_bad_remote_messages(void **state)
{
	struct locus_engine *e = locus_node_engine(N[1].node);
	uint8_t junk[256];
	struct locus_msg_hdr *h = (struct locus_msg_hdr *)junk;
	uint64_t before = ctr(&N[1], "remote_bad", 0);
	(void)state;

	/* these are the engine lcore's calls: borrow node 1's lcore meanwhile */
	memset(junk, 0, sizeof(junk));
	__atomic_store_n(&N[1].hold, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&N[1].held, __ATOMIC_ACQUIRE))
		tu_nap();
	assert_int_equal(locus_engine_remote_recv(e, 0, junk, 10), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_engine_remote_recv(e, 0, junk, sizeof(junk)), -LOCUS_EBADMAGIC);
	/* loads no longer come as messages (load rows): a LOAD message is refused */
	locus_msg_hdr_init(h, LOCUS_MSG_LOAD, 8, 0, 0, 1, 0);
	assert_int_equal(locus_engine_remote_recv(e, 0, junk, 40), -LOCUS_EPROTO);
	locus_msg_hdr_init(h, LOCUS_MSG_DISPATCH, 32, 0, 0, 2, 0);
	assert_true(locus_engine_remote_recv(e, 0, junk, 64) < 0);
	locus_msg_hdr_init(h, LOCUS_MSG_SIGNATURE, 16, 0, 0, 1, 0);
	assert_int_equal(locus_engine_remote_recv(e, 0, junk, 48), -LOCUS_EPROTO);
	assert_int_equal(locus_engine_remote_recv(e, 1, junk, 48), -LOCUS_ERANGE); /* itself */
	assert_int_equal(locus_engine_remote_recv(e, 5, junk, 48), -LOCUS_ERANGE);
	assert_int_equal(ctr(&N[1], "remote_bad", 0), before + 7);
	__atomic_store_n(&N[1].hold, 0, __ATOMIC_RELEASE);
}

struct attach_arg {
	struct fake_node *n;
	struct locus_client *c;
	int done;
};

static void *attach_thread(void *arg)
{
	struct attach_arg *a = arg;

	a->c = attach(a->n, LOCUS_ROLE_RANK, 0, 2);
	__atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * A client is told it is attached only once the engine serves its slot:
 * otherwise rows a peer node sends it at once would find no receiver (and
 * be dropped after the sender was told OK).
 */
static void test_attach_waits_for_engine(void **state)
{
	struct attach_arg a = { .n = &N[1] };
	pthread_t th;
	(void)state;

	__atomic_store_n(&N[1].hold, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&N[1].held, __ATOMIC_ACQUIRE))
		tu_nap();
	assert_int_equal(pthread_create(&th, NULL, attach_thread, &a), 0);
	for (int i = 0; i < 500; i++)
		tu_nap(); /* 100 ms: control has long answered the claim */
	assert_int_equal(__atomic_load_n(&a.done, __ATOMIC_ACQUIRE), 0);
	__atomic_store_n(&N[1].hold, 0, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	assert_non_null(a.c);
	locus_client_detach(a.c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attach_waits_for_engine),
		cmocka_unit_test(test_signatures_cross_nodes),
		cmocka_unit_test(test_full_remote_inbox_waits),
		cmocka_unit_test(test_dispatch_combine_cross_nodes),
		cmocka_unit_test(test_load_rows),
		cmocka_unit_test(test_bad_remote_messages),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
