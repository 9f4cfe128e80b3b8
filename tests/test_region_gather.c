// SPDX-License-Identifier: MIT
/*
 * Rows leaving the node from a client's buffer region, at the engine's
 * transport interface: node 0 of a two-node cluster runs its control and
 * engine threads; the transport is a recorder standing in for locusd_net
 * (the verbs gather itself is tested for real in the Soft-RoCE VM). Regions
 * are handed to the engine through its command interface with host memory
 * playing the registered dma-buf (iova = its address, a made-up lkey).
 *
 * Checked: a dispatch from a region reaches the other node as a header plus
 * one gather entry per run of consecutive rows, which reassembled is a valid
 * rows message with every row's content; when a message has more runs than
 * the transport's entries the rows are copied from the mapping instead (and
 * counted), and without a mapping the request completes once with
 * -EOPNOTSUPP; a region removed while a send from it is in flight is
 * acknowledged only after that send completed.
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
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_dispatch.h"
#include "locus_grace.h"
#include "locus_node.h"
#include "locus_shm.h"
#include "locus_table.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "node_util.h"

#define L 2
#define E 8
#define ROW 512
#define INST "t-gather"
#define MAXMSG 64
#define LKEY 0x5a5a

/* What the transport was handed: reassembled messages and their shapes. */
struct sent {
	uint8_t *msg;
	size_t len;
	uint32_t n_sg;           /* 0: a plain send */
	uint64_t cookie;
};

static char shm_dir[64];
static struct locus_node *node;
static pthread_t th_ctl, th_eng;
static volatile int stop;
static struct tu_view tv;
static struct locus_counters *ctrs;
static struct locus_engine_remote rt;

/* decoder load rows are not what this test looks at: written nowhere, none arrive */
static uint8_t load_area[4096];

static int t_write_load(void *ctx, uint32_t node, const void *row, size_t len)
{
	(void)ctx;
	(void)node;
	(void)row;
	(void)len;
	return 0;
}

static const volatile void *t_load_area(void *ctx, uint32_t node)
{
	(void)ctx;
	(void)node;
	return load_area;
}
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct sent sent[MAXMSG];
static unsigned n_sent, n_done;
static int hold_done;    /* the test decides when sends complete */
static int bad_lkey;

#define ctr_(name, elem) tu_ctr(ctrs, name, elem)

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

static int record(void *buf, size_t hdr_len, const struct locus_engine_sge *sg, uint32_t n_sg,
		  uint64_t cookie)
{
	size_t len = hdr_len;
	uint8_t *m;

	for (uint32_t j = 0; j < n_sg; j++)
		len += sg[j].len;
	m = malloc(len);
	memcpy(m, buf, hdr_len);
	for (uint32_t j = 0, at = (uint32_t)hdr_len; j < n_sg; at += sg[j].len, j++) {
		if (sg[j].lkey != LKEY)
			bad_lkey = 1;
		memcpy(m + at, (const void *)(uintptr_t)sg[j].addr, sg[j].len);
	}
	free(buf);
	pthread_mutex_lock(&mu);
	assert_true(n_sent < MAXMSG);
	sent[n_sent++] = (struct sent){ .msg = m, .len = len, .n_sg = n_sg, .cookie = cookie };
	pthread_mutex_unlock(&mu);
	return 0;
}

static int t_send(void *ctx, uint32_t nd, void *buf, size_t len, uint64_t cookie)
{
	(void)ctx;
	(void)nd;
	return record(buf, len, NULL, 0, cookie);
}

static int t_send_sg(void *ctx, uint32_t nd, void *buf, size_t hdr_len,
		     const struct locus_engine_sge *sg, uint32_t n_sg, uint64_t cookie)
{
	(void)ctx;
	(void)nd;
	return record(buf, hdr_len, sg, n_sg, cookie);
}

static int t_peer_up(void *ctx, uint32_t nd)
{
	(void)ctx;
	return nd == 1;
}

static struct tu_control ctl;

/* The engine lcore: poll, and complete recorded sends unless the test holds them. */
static void *eng_loop(void *arg)
{
	struct locus_engine *e = locus_node_engine(node);

	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		int work = locus_engine_poll(e);

		pthread_mutex_lock(&mu);
		while (!__atomic_load_n(&hold_done, __ATOMIC_ACQUIRE) && n_done < n_sent) {
			locus_engine_remote_done(e, sent[n_done++].cookie, 0);
			work++;
		}
		pthread_mutex_unlock(&mu);
		if (!work)
			sched_yield();
	}
	return NULL;
}

/* Expert e on rank e / 2: ranks 0, 1 here, 2, 3 on node 1. */
static void push_grace(void)
{
	struct locus_grace_dims d = { .n_layers = L, .n_experts = E, .n_nodes = 2,
				      .gpus_per_node = 2, .max_replicas = 0, .capacity = 2,
				      .replica_budget = 0 };
	struct locus_grace_view v;
	int refused;
	size_t plen = locus_grace_payload_size(&d);
	uint8_t *blob = calloc(1, 64 + plen);

	memcpy(blob + 64, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, blob + 64, plen, NULL), 0);
	for (int l = 0; l < L; l++) {
		for (int x = 0; x < E; x++) {
			v.primary[l * E + x] = (uint16_t)(x / 2);
			v.expert_load[l * E + x] = 10.0f;
		}
		for (int r = 0; r < 4; r++)
			v.pred_load[l * 4 + r] = 20.0f;
	}
	assert_int_equal(locus_tbl_seal(blob, 64 + plen, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION,
					plen), 0);
	tu_push(INST, node, 1, blob, 64 + plen, &refused);
	assert_int_equal(refused, 0);
	free(blob);
}

static int setup(void **state)
{
	struct locus_config cfg;
	struct locus_error e;
	static const char conf[] =
		"[locusd]\ninstance = " INST "\nnode = 0\nrdma_device = rxe0\n"
		"secret_file = /nonexistent\nclient_slots = 4\nring_size = 64\n"
		"stage_size = 262144\nclient_inbox_slots = 32\ninbox_slot_size = 4096\n"
		"moe_layers = 2\nmoe_experts = 8\nmax_decoders = 4\nmax_batch_tokens = 64\n"
		"table_slot_size = 65536\nload_timeout_ms = 60000\n"
		"[cluster]\ngpus_per_node = 2\nnode.0 = 127.0.0.1:7471\nnode.1 = 127.0.0.2:7471\n";
	(void)state;

	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-gather-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	rt = (struct locus_engine_remote){ .alloc = t_alloc, .free = t_free, .send = t_send,
					   .send_sg = t_send_sg, .max_sge = 4,
					   .peer_up = t_peer_up, .max_msg = 1 << 16,
					   .write_load = t_write_load, .load_area = t_load_area,
					   .load_area_len = sizeof(load_area),
					   .load_period_us = 1000000 };
	if (locus_config_parse(conf, strlen(conf), "test.conf", &cfg, &e) ||
	    locus_node_create_remote(&cfg, tu_now_ns, 1000000000ull, &rt, &node, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	locus_node_set_running(node);
	if (tu_view_open(INST, &tv))
		return -1;
	ctrs = tv.ctrs;
	ctl = (struct tu_control){ .node = node, .stop = &stop };
	pthread_create(&th_ctl, NULL, tu_control_loop, &ctl);
	pthread_create(&th_eng, NULL, eng_loop, NULL);
	push_grace();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(th_ctl, NULL);
	pthread_join(th_eng, NULL);
	for (unsigned i = 0; i < n_sent; i++)
		free(sent[i].msg);
	tu_view_close(&tv);
	locus_node_destroy(node, 1);
	return rmdir(shm_dir);
}

static void fill_row(uint8_t *row, uint32_t token)
{
	for (int i = 0; i < ROW; i++)
		row[i] = (uint8_t)(token * 37 + i * 5 + 3);
}

/* T tokens, token t to expert ex(t) (top-1), rows at 0 of the region. */
static void submit(struct locus_client *c, uint32_t T, uint16_t (*ex)(uint32_t), uint64_t id,
		   uint32_t region)
{
	uint8_t *stage = locus_client_stage(c, NULL);
	struct locus_dispatch_req *rq = (struct locus_dispatch_req *)stage;
	uint16_t *x = (uint16_t *)(rq + 1);
	float *g = (float *)((uint8_t *)x + locus_ids_bytes(T, 1));
	struct locus_desc d = { .op = LOCUS_OP_DISPATCH, .id = id, .flags = LOCUS_DESC_F_REGION,
				.region = region,
				.len = (uint32_t)locus_dispatch_req_len(T, 1) };

	*rq = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = 0, .top_k = 1,
					   .n_tokens = T, .row_bytes = ROW, .rows_off = 0,
					   .batch_id = id };
	for (uint32_t t = 0; t < T; t++) {
		x[t] = ex(t);
		g[t] = 1.0f;
	}
	assert_int_equal(locus_client_submit(c, &d, 1), 1);
}

static uint16_t all_remote(uint32_t t)
{
	return (uint16_t)(4 + t % 4);  /* ranks 2 and 3: runs of 2 consecutive tokens */
}

static uint16_t scattered(uint32_t t)
{
	return (uint16_t)(t % 2 ? 4 : 6); /* odd to rank 2, even to 3: no two consecutive */
}

static void engine_region(uint32_t slot, uint32_t idx, enum locus_engine_region_cmd cmd,
			  const struct locus_engine_region *r, int wait)
{
	struct locus_engine *e = locus_node_engine(node);
	uint64_t t = locus_engine_region_command(e, slot, idx, cmd, r);

	for (int i = 0; wait && i < 50000 && !locus_engine_region_done(e, slot, idx, t); i++)
		tu_nap();
	if (wait)
		assert_true(locus_engine_region_done(e, slot, idx, t));
}

/* Check every recorded message from first on: valid, rows equal to their tokens'. */
static unsigned check_sent(unsigned first, uint64_t batch, unsigned *gathered)
{
	unsigned rows = 0;

	pthread_mutex_lock(&mu);
	for (unsigned i = first; i < n_sent; i++) {
		struct locus_rows_hdr *h = locus_rows_hdr_of(sent[i].msg);
		struct locus_row_ref *refs = locus_rows_refs(sent[i].msg);
		struct locus_error e;

		if (locus_rows_msg_check(sent[i].msg, sent[i].len, 4, 0, &e))
			fail_msg("message %u: %s", i, e.msg);
		assert_int_equal(h->batch_id, batch);
		for (uint32_t j = 0; j < h->n_rows; j++) {
			uint8_t want[ROW];

			fill_row(want, refs[j].token);
			assert_memory_equal(sent[i].msg + h->rows_off + (size_t)j * ROW, want, ROW);
		}
		rows += h->n_rows;
		*gathered += sent[i].n_sg > 0;
	}
	pthread_mutex_unlock(&mu);
	return rows;
}

static void test_gather_copy_and_release(void **state)
{
	struct locus_client *c = tu_attach(INST, LOCUS_ROLE_RANK, 0, 0);
	struct locus_client *c1 = tu_attach(INST, LOCUS_ROLE_RANK, 0, 1);
	const uint32_t T = 32, rid = (1u << 3) | 1, unm = (2u << 3) | 2;
	uint32_t slot = locus_client_slot(c);
	struct locus_engine_region r;
	struct locus_engine *e = locus_node_engine(node);
	struct locus_desc in;
	uint64_t zc0 = ctr_("region_rows_zero_copy", 0), cp0 = ctr_("region_messages_copied", 0);
	unsigned first, gathered = 0;
	uint8_t *buf = aligned_alloc(4096, 65536);
	uint64_t t;
	(void)state;

	for (uint32_t k = 0; k < T; k++)
		fill_row(buf + (size_t)k * ROW, k);
	r = (struct locus_engine_region){ .id = rid, .lkey = LKEY, .addr = buf,
					  .iova = (uintptr_t)buf, .len = 65536 };
	engine_region(slot, rid % LOCUS_CLIENT_MAX_REGIONS, LOCUS_ENGINE_REGION_ADD, &r, 1);

	/* all rows to node 1 in runs of two tokens */
	first = n_sent;
	submit(c, T, all_remote, 1, rid);
	tu_wait_desc(c, &in);
	assert_int_equal(in.status, 0);
	assert_int_equal(check_sent(first, 1, &gathered), T);
	/* rank 2 takes tokens 0,1,4,5,..: 8 runs > the 4 entries after the header: copied */
	assert_int_equal(gathered, 0);
	assert_int_equal(ctr_("region_messages_copied", 0), cp0 + 2);

	/* 6 tokens: runs {0,1} {4,5} to rank 2, {2,3} to rank 3: gathered */
	gathered = 0;
	first = n_sent;
	submit(c, 6, all_remote, 2, rid);
	tu_wait_desc(c, &in);
	assert_int_equal(in.status, 0);
	assert_int_equal(check_sent(first, 2, &gathered), 6);
	assert_int_equal(gathered, 2);
	assert_false(bad_lkey);
	assert_int_equal(ctr_("region_rows_zero_copy", 0), zc0 + 6);

	/* no mapping and 6 runs per message: one error completion, nothing delivered */
	r = (struct locus_engine_region){ .id = unm, .lkey = LKEY, .iova = (uintptr_t)buf,
					  .len = 65536 };
	engine_region(slot, unm % LOCUS_CLIENT_MAX_REGIONS, LOCUS_ENGINE_REGION_ADD, &r, 1);
	submit(c, 12, scattered, 3, unm);
	tu_wait_desc(c, &in);
	assert_int_equal(in.id, 3);
	assert_int_equal(in.status, -EOPNOTSUPP);
	assert_false(tu_try_desc(c, &in, 50));
	assert_false(tu_try_desc(c1, &in, 5));

	/* DEL while a send from the region is in flight: done only after it completes */
	__atomic_store_n(&hold_done, 1, __ATOMIC_RELEASE);
	first = n_sent;
	submit(c, 2, all_remote, 4, rid);
	for (int i = 0; i < 50000 && n_sent == first; i++)
		tu_nap();
	assert_true(n_sent > first);
	t = locus_engine_region_command(e, slot, rid % LOCUS_CLIENT_MAX_REGIONS,
					LOCUS_ENGINE_REGION_DEL, NULL);
	for (int i = 0; i < 2000; i++)
		tu_nap();
	assert_false(locus_engine_region_done(e, slot, rid % LOCUS_CLIENT_MAX_REGIONS, t));
	assert_false(tu_try_desc(c, &in, 5));
	__atomic_store_n(&hold_done, 0, __ATOMIC_RELEASE);
	tu_wait_desc(c, &in);
	assert_int_equal(in.id, 4);
	assert_int_equal(in.status, 0);
	for (int i = 0; i < 50000 &&
	     !locus_engine_region_done(e, slot, rid % LOCUS_CLIENT_MAX_REGIONS, t); i++)
		tu_nap();
	assert_true(locus_engine_region_done(e, slot, rid % LOCUS_CLIENT_MAX_REGIONS, t));
	engine_region(slot, unm % LOCUS_CLIENT_MAX_REGIONS, LOCUS_ENGINE_REGION_DEL, NULL, 1);
	assert_int_equal(ctr_("regions", 0), 0);
	locus_client_detach(c);
	locus_client_detach(c1);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gather_copy_and_release),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
