// SPDX-License-Identifier: MIT
/*
 * Two nodes of one cluster in one process, for the two-node tests: each has
 * its own segment, control thread and engine thread; the inter-node
 * transport between the engines is a pair of in-memory queues plus, for the
 * one-sided decoder load rows, a load area per node pair that the writer
 * memcpys into while the reader may be reading (the verbs transport is
 * tested for real in the Soft-RoCE VM).
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
#include "locus_eldr_priv.h"
#include "locus_grace.h"
#include "locus_node.h"
#include "locus_shm.h"
#include "locus_table.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locus_wire.h"
#include "node_util.h"
#include "twonode_harness.h"

struct fake_node N[2];
int tn_engines = 1;
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

static uint32_t arrival_engine(void *ctx, const void *msg, size_t len)
{
	return locus_node_arrival_engine(ctx, msg, len);
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
	const struct locus_engine_sink *mux = n->mux ? locus_relay_mux_sink(n->mux) : NULL;

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
		for (int k = 1; mux && k < tn_engines; k++)
			work += locus_engine_poll(locus_node_engine_at(n->node, (uint32_t)k));
		for (int k = 0; mux && k < tn_engines; k++) {
			work += locus_relay_poll_engine(n->relay[k]);
			work += locus_relay_poll_net(n->relay[k]);
		}

		/* like locusd_net: a message the receiver has no room for waits, in order */
		while (q_peek(&n->rx, &m)) {
			if ((mux ? mux->recv(mux->ctx, (uint32_t)n->peer->id, m.buf, m.len)
				 : locus_engine_remote_recv(e, (uint32_t)n->peer->id, m.buf,
							    m.len)) == -LOCUS_EFULL)
				break;
			q_pop(&n->rx, &m);
			free(m.buf);
			work++;
		}
		while (q_pop(&n->done, &m)) {
			if (mux)
				mux->done(mux->ctx, m.cookie, m.status);
			else
				locus_engine_remote_done(e, m.cookie, m.status);
			work++;
		}
		if (!work)
			sched_yield();
	}
	return NULL;
}

uint64_t tn_ctr(struct fake_node *n, const char *name, uint32_t elem)
{
	return tu_ctr(n->ctrs, name, elem);
}

/* ---- tables (as in test_node.c, for 2 nodes x 2 GPUs) ----------------------------- */

void *tn_eldr_table(size_t *len)
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

void tn_push_both(unsigned ch, const void *blob, size_t len)
{
	for (int i = 0; i < 2; i++) {
		int refused;

		tu_push(N[i].inst, NULL, ch, blob, len, &refused);
		assert_int_equal(refused, 0);
	}
}

/* ---- clients ---------------------------------------------------------------------- */

struct locus_client *tn_attach(struct fake_node *n, uint32_t roles, uint32_t dec, uint32_t rank)
{
	return tu_attach(n->inst, roles, dec, rank);
}

void tn_wait_ranks(struct locus_client *c, uint32_t n_lost)
{
	struct locus_client_ranks info = { 0 };
	uint64_t lost[1];

	for (int i = 0; i < 100000; i++) {
		if (locus_client_ranks(c, lost, 1, &info) == 0 && info.n_ranks &&
		    info.n_lost == n_lost)
			return;
		tu_nap();
	}
	fail_msg("the rank set stayed at %u lost of %u, waiting for %u", info.n_lost,
		 info.n_ranks, n_lost);
}

size_t tn_put_signature(struct locus_client *c, uint64_t off, int w0, int w7)
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

int tn_setup(void **state)
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
			 "engine_lcores = %d\n"
			 "secret_file = /nonexistent\nclient_slots = 8\nring_size = 64\n"
			 "stage_size = 262144\nclient_inbox_slots = 32\ninbox_slot_size = 4096\n"
			 "moe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\n"
			 "max_batch_tokens = 64\ntable_slot_size = 65536\nload_timeout_ms = 1000\n"
			 "[cluster]\ngpus_per_node = 2\nnode.0 = 127.0.0.1:7471\n"
			 "node.1 = 127.0.0.2:7471\n", n->inst, i, i, tn_engines);
		n->rt = (struct locus_engine_remote){ .alloc = t_alloc, .free = t_free,
						      .send = t_send, .peer_up = t_peer_up,
						      .write_load = t_write_load,
						      .load_area = t_load_area,
						      .ctx = n, .max_msg = 1 << 16,
						      .load_area_len = AREA,
						      .load_period_us = 1000 };
		if (tn_engines > 1) {
			const struct locus_engine_remote *rts[2];

			for (int k = 0; k < tn_engines; k++) {
				if (locus_relay_create(&n->rt, 1024, &n->relay[k]))
					return -1;
				rts[k] = locus_relay_transport(n->relay[k]);
			}
			if (locus_relay_mux_create(n->relay, (uint32_t)tn_engines, &n->mux) ||
			    locus_config_parse(conf, strlen(conf), n->inst, &cfg, &e) ||
			    locus_node_create_remotes(&cfg, tu_now_ns, 1000000000ull, rts,
						      (uint32_t)tn_engines, &n->node, &e)) {
				fprintf(stderr, "%s\n", e.msg);
				return -1;
			}
			for (int k = 0; k < tn_engines; k++) {
				struct locus_engine_sink es;

				locus_engine_sink_of(locus_node_engine_at(n->node, (uint32_t)k), &es);
				locus_relay_attach(n->relay[k], &es);
			}
			locus_relay_mux_set_pick(n->mux, arrival_engine, n->node);
		} else if (locus_config_parse(conf, strlen(conf), n->inst, &cfg, &e) ||
			   locus_node_create_remote(&cfg, tu_now_ns, 1000000000ull, &n->rt, &n->node,
						    &e)) {
			fprintf(stderr, "%s\n", e.msg);
			return -1;
		}
		locus_node_set_running(n->node);
		if (locus_shm_attach(n->inst, LOCUS_SHM_RDONLY, &n->view, &e))
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

int tn_teardown(void **state)
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
		locus_shm_detach(N[i].view);
		locus_node_destroy(N[i].node, 1);
		for (int k = 0; k < 2; k++) {
			locus_relay_destroy(N[i].relay[k]);
			N[i].relay[k] = NULL;
		}
		locus_relay_mux_destroy(N[i].mux);
		N[i].mux = NULL;
	}
	__atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
	return rmdir(shm_dir);
}

