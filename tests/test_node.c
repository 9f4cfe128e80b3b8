// SPDX-License-Identifier: MIT
/*
 * One node's data plane end to end, without EAL: the node's control work
 * and the engine each run on a thread of their own, clients attach through
 * the client library (in this process and in child processes), tables are
 * pushed through the segment as locusctl does.
 *
 * Checked: every submitted request gets exactly one completion; routing
 * decisions equal the pure router's for the same table and loads; decoders
 * receive the exact signature bytes; a table push under traffic is adopted,
 * a refused push leaves the old table; malformed descriptors are refused and
 * counted; dispatch delivers each (token, k) exactly once by tier with the
 * rows' content intact, and combine brings every result back; a killed
 * client's slot is reclaimed.
 *
 * The whole set runs three times: intra-node rows copied by the engine's
 * CPU; moved by an intra-node DMA engine (intra_node = verbs; here a
 * stand-in that copies one poll iteration later, so a delivery before the
 * copy ended would show); and with two engines (engine_lcores = 2, each on
 * a thread of its own: ranks 0-1 on one, 2-3 on the other, prefillers and
 * decoders spread), so rows, results and signatures cross between engines.
 * The verbs loopback itself runs in the Soft-RoCE VM.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_dispatch.h"
#include "locus_eldr_router.h"
#include "locus_grace.h"
#include "locus_node.h"
#include "locus_shm.h"
#include "locus_table.h"
#include "locus_tblfile.h"
#include "node_tables.h"
#include "node_util.h"

#define ROW 256
#define INST "t-node"

static char shm_dir[64];
static struct locus_node *node;
static pthread_t th_ctl, th_eng[LOCUS_CFG_MAX_ENGINES];
static volatile int stop;
static int two_engines; /* the third run: engine_lcores = 2 */
static int precision8;  /* the fourth: eldr_precision = 8, against the 8-bit router */

/* the test's own view of the segment, as locusctl and locus-stat have it */
static struct tu_view tv;
static struct locus_counters *ctrs;

static struct tu_control ctl;

/* ---- the stand-in DMA engine (engine thread only) ------------------------------ */

#define DMA_Q 4096
static struct {
	int on, fail;               /* fail: copies end with -EIO */
	uint8_t *base;
	size_t len;
	struct { uint64_t dst, cookie; uint32_t n; struct locus_engine_ldma_src src[64]; } q[DMA_Q];
	uint32_t head, tail;
	uint64_t started, bytes;
} dma;
static struct locus_engine_ldma dma_ops;

static int dma_copy(void *ctx, uint64_t dst_off, const struct locus_engine_ldma_src *src,
		    uint32_t n, uint64_t cookie)
{
	(void)ctx;
	if (dma.tail - dma.head == DMA_Q || n > 64)
		return -LOCUS_EFULL;
	dma.q[dma.tail % DMA_Q].dst = dst_off;
	dma.q[dma.tail % DMA_Q].cookie = cookie;
	dma.q[dma.tail % DMA_Q].n = n;
	memcpy(dma.q[dma.tail % DMA_Q].src, src, n * sizeof(*src));
	dma.tail++;
	dma.started++;
	return 0;
}

/* End what was started before this poll: one iteration of delay. */
static void dma_poll(struct locus_engine *e)
{
	uint32_t end = dma.tail;

	while (dma.head != end) {
		typeof(&dma.q[0]) c = &dma.q[dma.head % DMA_Q];
		uint64_t at = c->dst;

		dma.head++;
		for (uint32_t i = 0; i < c->n && !dma.fail; i++) {
			assert_true(c->src[i].off + c->src[i].len <= dma.len);
			assert_true(at + c->src[i].len <= dma.len);
			memmove(dma.base + at, dma.base + c->src[i].off, c->src[i].len);
			at += c->src[i].len;
			dma.bytes += c->src[i].len;
		}
		locus_engine_ldma_done(e, c->cookie, dma.fail ? -EIO : 0);
	}
}

static void *eng_loop(void *arg)
{
	struct locus_engine *e = locus_node_engine_at(node, (uint32_t)(uintptr_t)arg);

	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		int n = locus_engine_poll(e);

		if (dma.on)
			dma_poll(e);
		if (n == 0)
			sched_yield();
	}
	return NULL;
}

#define ctr_(name, elem) tu_ctr(ctrs, name, elem)

/* ---- tables (node_tables.c builds them) ---------------------------------------- */

/* Push like `locusctl push`; returns the generation and whether readers took it. */
static int64_t push(unsigned ch, const void *blob, size_t len, int *refused)
{
	return tu_push(INST, node, ch, blob, len, refused);
}

/* ---- clients --------------------------------------------------------------------- */

/* Signature with w0 tokens on expert 0, w3 on 3, w7 on 7, at every layer. */
static size_t put_signature(struct locus_client *c, uint64_t off, int w0, int w3, int w7)
{
	uint64_t size;
	uint8_t *stage = locus_client_stage(c, &size);
	struct locus_eldr_sig_hdr *h = (struct locus_eldr_sig_hdr *)(stage + off);
	uint16_t *counts = (uint16_t *)(h + 1);

	memset(h, 0, locus_eldr_sig_len(L, E));
	h->magic = LOCUS_ELDR_SIG_MAGIC;
	h->version = LOCUS_ELDR_SIG_VERSION;
	h->n_layers = L;
	h->n_experts = E;
	h->prompt_tokens = (uint32_t)(w0 + w3 + w7);
	for (int l = 0; l < L; l++) {
		counts[l * E + 0] = (uint16_t)w0;
		counts[l * E + 3] = (uint16_t)w3;
		counts[l * E + 7] = (uint16_t)w7;
	}
	return locus_eldr_sig_len(L, E);
}

static int setup(void **state)
{
	struct locus_config cfg;
	struct locus_error e;
	char conf[1024];
	static const char base[] =
		"[locusd]\ninstance = " INST "\nclient_slots = 12\nring_size = 64\n"
		"stage_size = 262144\nclient_inbox_slots = 16\ninbox_slot_size = 4096\n"
		"moe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\nmax_batch_tokens = 64\n"
		"table_slot_size = 65536\nload_timeout_ms = 60000\n"
		"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";
	(void)state;

	snprintf(conf, sizeof(conf), "%s", base);
	if (two_engines) /* a section may open twice */
		snprintf(conf, sizeof(conf), "[locusd]\nengine_lcores = 2\n%s", base);
	if (precision8)
		snprintf(conf, sizeof(conf), "[locusd]\neldr_precision = 8\n%s", base);

	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-node-test-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	if (locus_config_parse(conf, strlen(conf), "test.conf", &cfg, &e) ||
	    locus_node_create(&cfg, tu_now_ns, 1000000000ull, &node, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	locus_node_set_running(node);
	if (dma.on) {
		dma.base = locus_node_client_region(node, &dma.len);
		dma_ops = (struct locus_engine_ldma){ .copy = dma_copy };
		locus_engine_set_ldma(locus_node_engine(node), &dma_ops);
	}
	if (tu_view_open(INST, &tv))
		return -1;
	ctrs = tv.ctrs;
	ctl = (struct tu_control){ .node = node, .stop = &stop };
	pthread_create(&th_ctl, NULL, tu_control_loop, &ctl);
	for (uint32_t k = 0; k < locus_node_n_engines(node); k++)
		pthread_create(&th_eng[k], NULL, eng_loop, (void *)(uintptr_t)k);
	return 0;
}

static int setup_engines(void **state)
{
	memset(&dma, 0, sizeof(dma)); /* the CPU copies: the DMA loopback serves one engine */
	two_engines = 1;
	return setup(state);
}

static int setup_precision8(void **state)
{
	memset(&dma, 0, sizeof(dma));
	two_engines = 0;
	precision8 = 1;
	return setup(state);
}

/* The pure router locusd's decisions are compared with: its arithmetic's scalar path. */
static enum locus_eldr_path ref_path(void)
{
	return precision8 ? LOCUS_ELDR_PATH_SCALAR_I8 : LOCUS_ELDR_PATH_SCALAR;
}

/* The path locusd's router must run: the best of the configured arithmetic here. */
static int64_t want_router_path(const void *tbl, size_t tlen)
{
	static uint8_t mem[1 << 16] __attribute__((aligned(64)));
	struct locus_eldr_router *r;

	assert_int_equal(locus_eldr_router_build(mem, sizeof(mem), (const uint8_t *)tbl + 64,
						 tlen - 64, precision8 ? LOCUS_ELDR_PATH_AUTO_I8 :
									 LOCUS_ELDR_PATH_AUTO,
						 &r, NULL), 0);
	return locus_eldr_router_path(r);
}

static int setup_dma(void **state)
{
	memset(&dma, 0, sizeof(dma));
	dma.on = 1;
	return setup(state);
}

static int teardown(void **state)
{
	(void)state;
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(th_ctl, NULL);
	for (uint32_t k = 0; k < locus_node_n_engines(node); k++)
		pthread_join(th_eng[k], NULL);
	__atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
	tu_view_close(&tv);
	locus_node_destroy(node, 1);
	return rmdir(shm_dir);
}

/* ---- signature routing ----------------------------------------------------------- */

/* A version 2 table (centroid map, spread, spill) in locusd routes as the pure router. */
static void route_v2(struct locus_client *pre, struct locus_client *dec[2])
{
	static uint8_t mem[1 << 16] __attribute__((aligned(64)));
	struct locus_eldr_router *ref;
	struct locus_desc d, in;
	size_t tlen;
	void *tbl = eldr_table_v2(0.1f, &tlen);
	int refused, on0 = 0;

	assert_true(push(0, tbl, tlen, &refused) == 2);
	assert_false(refused);
	assert_int_equal(locus_eldr_router_build(mem, sizeof(mem), (uint8_t *)tbl + 64, tlen - 64,
						 ref_path(), &ref, NULL), 0);
	locus_eldr_router_set_load(ref, 0, 3); /* as reported */
	locus_eldr_router_set_load(ref, 1, 1);
	for (int i = 0; i < 12; i++) {
		int w5 = i % 2 ? 9 : 0, w7 = i % 2 ? 0 : 9;
		size_t len = put_signature(pre, 0, 0, 0, w7);
		uint16_t *counts = (uint16_t *)(locus_client_stage(pre, NULL) +
						sizeof(struct locus_eldr_sig_hdr));
		struct locus_eldr_decision want;

		for (int l = 0; l < L; l++)
			counts[l * E + 5] = (uint16_t)w5;

		assert_int_equal(locus_eldr_route(ref, locus_client_stage(pre, NULL), len, &want),
				 0);
		d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 500 + i, .len = (uint32_t)len };
		assert_int_equal(locus_client_submit(pre, &d, 1), 1);
		tu_wait_desc(pre, &d);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.peer, want.decoder_id);
		assert_int_equal(d.count, want.n_candidates);
		on0 += w5 && d.peer == 0;
		tu_wait_desc(dec[d.peer], &in);
		assert_int_equal(locus_client_release_slot(dec[d.peer], in.slot), 0);
	}
	assert_true(on0 > 0); /* expert 5's requests reach decoder 0 */
	free(tbl);
}

/*
 * A burst of ROUTEs in one submission (scored together by the engine,
 * locus_eldr_route_split_batch): completions in submission order, each the
 * pure router's decision one by one, a bad signature and an out-of-stage
 * descriptor among them refused in place.
 */
static void route_burst(struct locus_client *pre, struct locus_client *dec[2],
			struct locus_eldr_router *ref)
{
	struct locus_desc burst[10], d, in;
	struct locus_eldr_decision want[10];
	uint8_t *stage = locus_client_stage(pre, NULL);
	uint64_t bad_before = ctr_("rejected_bad_signature", 0);

	for (int i = 0; i < 10; i++) {
		uint64_t off = (uint64_t)i * 4096;
		size_t len = put_signature(pre, off, i % 3 ? 9 : 2, i % 4, i % 3 ? 1 : 9);

		burst[i] = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 700 + i, .off = off,
						.len = (uint32_t)len };
		if (i == 3)
			stage[off] ^= 0xff; /* bad magic */
		if (i == 6)
			burst[i].off = 1ull << 40;
		if (i != 3 && i != 6)
			assert_int_equal(locus_eldr_route(ref, stage + off, len, &want[i]), 0);
	}
	assert_int_equal(locus_client_submit(pre, burst, 10), 10);
	for (int i = 0; i < 10; i++) {
		tu_wait_desc(pre, &d);
		assert_int_equal(d.id, 700 + i);
		if (i == 3 || i == 6) {
			assert_true(d.status < 0);
			continue;
		}
		assert_int_equal(d.status, 0);
		assert_int_equal(d.peer, want[i].decoder_id);
		assert_int_equal(d.count, want[i].n_candidates);
		tu_wait_desc(dec[d.peer], &in);
		assert_int_equal(in.id, 700 + i);
		assert_int_equal(locus_client_release_slot(dec[d.peer], in.slot), 0);
	}
	assert_int_equal(ctr_("rejected_bad_signature", 0), bad_before + 1);
}

static void test_route_matches_pure_router(void **state)
{
	struct locus_client *pre = tu_attach(INST, LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *dec[2] = { tu_attach(INST, LOCUS_ROLE_DECODE, 0, 0),
					tu_attach(INST, LOCUS_ROLE_DECODE, 1, 0) };
	static uint8_t router_mem[1 << 16] __attribute__((aligned(64)));
	struct locus_eldr_router *ref;
	struct locus_desc d, in;
	size_t tlen;
	void *tbl = eldr_table(0.1f, 0, &tlen);
	uint64_t submitted = 0, completed = 0;
	int refused;
	(void)state;

	/* no table yet: an error completion, not silence */
	d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 1, .off = 0,
				 .len = (uint32_t)put_signature(pre, 0, 5, 0, 0) };
	assert_int_equal(locus_client_submit(pre, &d, 1), 1);
	tu_wait_desc(pre, &d);
	assert_int_equal(d.status, -LOCUS_ESTATE);
	assert_int_equal(ctr_("rejected_no_table", 0), 1);

	assert_true(push(0, tbl, tlen, &refused) > 0);
	assert_false(refused);
	assert_int_equal(locus_engine_table_generation(locus_node_engine(node), 0), 1);
	assert_int_equal(locus_eldr_router_build(router_mem, sizeof(router_mem),
						 (uint8_t *)tbl + 64, tlen - 64, ref_path(), &ref,
						 NULL), 0);
	assert_int_equal(ctr_("router_path", 0), want_router_path(tbl, tlen));
	/* loads as the decoders report them, seen by the engine */
	locus_client_report_load(dec[0], 3);
	locus_client_report_load(dec[1], 1);
	for (int i = 0; i < 50000 && (ctr_("decoder_load", 0) != 3 || ctr_("decoder_load", 1) != 1); i++)
		tu_nap();
	assert_int_equal(ctr_("decoder_load", 0), 3);
	locus_eldr_router_set_load(ref, 0, 3);
	locus_eldr_router_set_load(ref, 1, 1);

	for (int i = 0; i < 40; i++) {
		/* leaning to 0, to 7, or mixed (both in the band: load decides) */
		int w0 = (i % 3 == 0) ? 9 : (i % 3 == 1 ? 0 : 4);
		int w7 = (i % 3 == 1) ? 9 : (i % 3 == 0 ? 0 : 4);
		uint64_t off = (uint64_t)(i % 8) * 4096;
		size_t len = put_signature(pre, off, w0, 3, w7);
		const uint8_t *sig = locus_client_stage(pre, NULL) + off;
		struct locus_eldr_decision want;
		const struct locus_msg_hdr *m;
		int who;

		assert_int_equal(locus_eldr_route(ref, sig, len, &want), 0);
		d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 100 + i, .off = off,
					 .len = (uint32_t)len };
		assert_int_equal(locus_client_submit(pre, &d, 1), 1);
		submitted++;
		tu_wait_desc(pre, &d);
		completed++;
		assert_int_equal(d.op, LOCUS_OP_ROUTE);
		assert_int_equal(d.id, 100 + i);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.peer, want.decoder_id);
		assert_int_equal(d.count, want.n_candidates);
		/* the chosen decoder got header + the exact signature bytes */
		who = (int)d.peer;
		tu_wait_desc(dec[who], &in);
		assert_int_equal(in.op, LOCUS_OP_SIGNATURE_IN);
		assert_int_equal(in.id, 100 + i);
		m = locus_client_inbox(dec[who], &in);
		assert_non_null(m);
		assert_int_equal(m->type, LOCUS_MSG_SIGNATURE);
		assert_int_equal(m->payload_len, len);
		assert_memory_equal(m + 1, sig, len);
		assert_int_equal(locus_client_release_slot(dec[who], in.slot), 0);
		assert_false(tu_try_desc(dec[!who], &in, 2));
	}
	assert_int_equal(submitted, completed);
	assert_int_equal(ctr_("routed", 0) + ctr_("routed", 1), 40);
	assert_true(ctr_("routed", 0) > 0 && ctr_("routed", 1) > 0);
	route_burst(pre, dec, ref);
	route_v2(pre, dec);

	/* malformed: bad magic, wrong role, unknown op, out-of-stage offset */
	{
		uint8_t *stage = locus_client_stage(pre, NULL);
		struct locus_desc bad[4] = {
			{ .op = LOCUS_OP_ROUTE, .id = 900, .off = 0,
			  .len = (uint32_t)put_signature(pre, 0, 1, 1, 1) },
			{ .op = 77, .id = 901 },
			{ .op = LOCUS_OP_ROUTE, .id = 902, .off = 1ull << 40, .len = 10 },
			{ .op = LOCUS_OP_DISPATCH, .id = 903 },
		};
		uint64_t before = ctr_("rejected_bad_descriptor", 0);
		uint64_t bad_sig = ctr_("rejected_bad_signature", 0);

		stage[0] ^= 0xff; /* magic */
		assert_int_equal(locus_client_submit(pre, bad, 4), 4);
		for (int i = 0; i < 4; i++) {
			tu_wait_desc(pre, &d);
			assert_int_equal(d.id, 900 + i);
			assert_true(d.status < 0);
		}
		assert_int_equal(ctr_("rejected_bad_signature", 0), bad_sig + 1);
		assert_int_equal(ctr_("rejected_bad_descriptor", 0), before + 3);
	}

	/* a decoder leaves: routing goes to the other one; both gone: no decoder */
	locus_client_detach(dec[1]);
	for (int i = 0; i < 50000 && ctr_("clients_attached", 0) != 2; i++)
		tu_nap();
	d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 950, .off = 0,
				 .len = (uint32_t)put_signature(pre, 0, 0, 0, 9) };
	assert_int_equal(locus_client_submit(pre, &d, 1), 1);
	tu_wait_desc(pre, &d);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.peer, 0);
	tu_wait_desc(dec[0], &in);
	locus_client_release_slot(dec[0], in.slot);
	locus_client_detach(dec[0]);
	for (int i = 0; i < 50000 && ctr_("clients_attached", 0) != 1; i++)
		tu_nap();
	d.id = 951;
	assert_int_equal(locus_client_submit(pre, &d, 1), 1);
	tu_wait_desc(pre, &d);
	assert_int_equal(d.status, -LOCUS_ENODEST);
	locus_client_detach(pre);
	free(tbl);
}

static void test_table_push_under_traffic(void **state)
{
	struct locus_client *pre = tu_attach(INST, LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *dec = tu_attach(INST, LOCUS_ROLE_DECODE | LOCUS_ROLE_PREFILL, 2, 0);
	struct locus_engine *eng = locus_node_engine(node);
	size_t glen, blen;
	void *good, *bad;
	uint64_t gen0, gen1;
	int refused, n_ok = 0;
	(void)state;

	/* decoder 2 is not in the table: a table naming 0 and 1 routes nowhere */
	good = eldr_table(0.2f, 0, &glen);
	bad = eldr_table(0.2f, 1, &blen);
	gen0 = locus_engine_table_generation(eng, 0);
	for (int round = 0; round < 3; round++) {
		struct locus_desc d[8];

		for (int i = 0; i < 8; i++)
			d[i] = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = round * 8 + i,
						    .off = (uint64_t)i * 4096,
						    .len = (uint32_t)put_signature(pre, (uint64_t)i * 4096,
										   3, 3, 3) };
		assert_int_equal(locus_client_submit(pre, d, 8), 8);
		if (round == 1) {
			gen1 = (uint64_t)push(0, good, glen, &refused);
			assert_false(refused);
		}
		for (int i = 0; i < 8; i++) {
			tu_wait_desc(pre, &d[0]);
			/* no decoder 0/1 attached: every answer is a clean refusal */
			assert_int_equal(d[0].status, -LOCUS_ENODEST);
			n_ok++;
		}
	}
	assert_int_equal(n_ok, 24);
	assert_int_equal(locus_engine_table_generation(eng, 0), gen1);
	assert_true(gen1 > gen0);
	/* a table that fails validation is refused; the old one stays */
	assert_true(push(0, bad, blen, &refused) > (int64_t)gen1);
	assert_true(refused);
	assert_int_equal(locus_engine_table_generation(eng, 0), gen1);
	assert_int_equal(ctr_("table_rejected", 0), 1);
	assert_int_equal(ctr_("table_generation", 0), gen1);
	locus_client_detach(dec);
	locus_client_detach(pre);
	free(good);
	free(bad);
}

/* ---- dispatch and combine ------------------------------------------------------------ */

struct seen {
	uint8_t hits[64][8]; /* (token, k) delivered */
	uint8_t back[64][8]; /* (token, k) combined back */
};

static void fill_row(uint8_t *row, uint32_t token)
{
	for (int i = 0; i < ROW; i++)
		row[i] = (uint8_t)(token * 31 + i);
}

static void test_dispatch_combine(void **state)
{
	struct locus_client *rk[GPN];
	struct locus_dispatch_req *rq;
	struct locus_desc d, in;
	static struct seen s;
	uint16_t ex[64][2];
	float *gates;
	size_t glen;
	void *g = grace_table(&glen);
	const uint32_t T = 48, K = 2;
	uint8_t *stage0;
	uint64_t rows_sent = 0, rows_got = 0;
	int refused, results = 0;
	(void)state;

	memset(&s, 0, sizeof(s));
	for (int r = 0; r < GPN; r++)
		rk[r] = tu_attach(INST, LOCUS_ROLE_RANK, 0, (uint32_t)r);
	assert_true(push(1, g, glen, &refused) > 0);
	assert_false(refused);

	/* rank 0's batch: token t picks experts (t % 8, (t * 3 + 1) % 8) */
	stage0 = locus_client_stage(rk[0], NULL);
	rq = (struct locus_dispatch_req *)stage0;
	*rq = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = 1, .top_k = K,
					   .n_tokens = T, .row_bytes = ROW, .rows_off = 65536,
					   .batch_id = 4242 };
	for (uint32_t t = 0; t < T; t++) {
		ex[t][0] = (uint16_t)(t % 8);
		ex[t][1] = (uint16_t)((t * 3 + 1) % 8);
		if (ex[t][1] == ex[t][0])
			ex[t][1] = (uint16_t)((ex[t][0] + 1) % 8);
		fill_row(stage0 + 65536 + t * ROW, t);
	}
	memcpy(rq + 1, ex, sizeof(uint16_t) * T * K);
	gates = (float *)((uint8_t *)(rq + 1) + locus_ids_bytes(T, K));
	for (uint32_t i = 0; i < T * K; i++)
		gates[i] = 0.5f + (float)i / 1000.0f;
	d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = 7, .off = 0,
				 .len = (uint32_t)locus_dispatch_req_len(T, K) };
	assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);

	/*
	 * Every rank (0 included: in place) takes its rows, checks them and
	 * answers. Rank 0 reads until its DISPATCH completion, which the engine
	 * posts after every delivery of the batch: then all rows are out.
	 */
	for (int r = 0; r < GPN; r++) {
		for (;;) {
			uint8_t *msg, *st = locus_client_stage(rk[r], NULL);
			struct locus_rows_hdr *h;
			struct locus_combine_req *cq;
			struct locus_row_ref *refs;
			struct locus_error e;
			uint16_t *mx;
			float *mg;

			if (r == 0)
				tu_wait_desc(rk[0], &in);
			else if (!tu_try_desc(rk[r], &in, 20))
				break;
			if (in.op == LOCUS_OP_DISPATCH) { /* rank 0's own completion */
				assert_int_equal(in.status, 0);
				assert_int_equal(in.id, 7);
				rows_sent = in.aux;
				/* with two engines: until the other took what was handed over */
				for (int i = 0; i < 25000 && locus_node_engine_inflight(node); i++)
					tu_nap();
				assert_int_equal(locus_node_engine_inflight(node), 0);
				break;
			}
			assert_int_equal(in.op, LOCUS_OP_ROWS_IN);
			msg = (uint8_t *)locus_client_inbox(rk[r], &in);
			assert_non_null(msg);
			if (locus_rows_msg_check(msg, in.len, GPN, 262144, &e))
				fail_msg("rank %d: %s", r, e.msg);
			h = locus_rows_hdr_of(msg);
			refs = locus_rows_refs(msg);
			mx = locus_rows_experts(msg, h->n_rows);
			mg = locus_rows_gates(msg, h->n_rows, K);
			assert_int_equal(h->batch_id, 4242);
			rows_got += h->n_rows;
			assert_int_equal(!!(h->flags & LOCUS_ROWS_IN_PLACE), r == 0);
			/* the answer goes in this rank's stage at 128 KiB */
			cq = (struct locus_combine_req *)(st + 131072);
			*cq = (struct locus_combine_req){ .magic = LOCUS_COMBINE_MAGIC, .layer = 1,
							  .dst_rank = 0, .n_rows = h->n_rows,
							  .row_bytes = ROW, .rows_off = 196608,
							  .batch_id = 4242 };
			for (uint32_t j = 0; j < h->n_rows; j++) {
				uint32_t t = refs[j].token;
				const uint8_t *row = (h->flags & LOCUS_ROWS_IN_PLACE)
					? st + h->rows_off + (size_t)t * ROW
					: msg + h->rows_off + (size_t)j * ROW;
				uint8_t want[ROW];

				assert_true(t < T);
				fill_row(want, t);
				assert_memory_equal(row, want, ROW);
				for (uint32_t k = 0; k < K; k++) {
					uint16_t x = ex[t][k];
					int here = primary_of(x) == r || (x == 5 && r == 0);

					assert_int_equal(mx[j * K + k], x);
					assert_true(mg[j * K + k] == gates[t * K + k]);
					if (!(refs[j].kmask & (1u << k)))
						continue;
					assert_true(here);
					/* TAR: a copy on the source GPU is always used */
					if (x == 5)
						assert_int_equal(r, 0);
					assert_int_equal(s.hits[t][k]++, 0);
				}
				((struct locus_row_ref *)(cq + 1))[j] = refs[j];
				/* "expert output": the row xor the rank */
				for (int b = 0; b < ROW; b++)
					st[196608 + j * ROW + b] = (uint8_t)(row[b] ^ (r + 1));
			}
			locus_client_release_slot(rk[r], in.slot);
			d = (struct locus_desc){ .op = LOCUS_OP_COMBINE, .id = 50 + r, .off = 131072,
						 .len = (uint32_t)locus_combine_req_len(h->n_rows) };
			assert_int_equal(locus_client_submit(rk[r], &d, 1), 1);
			if (r != 0) {
				tu_wait_desc(rk[r], &d);
				assert_int_equal(d.op, LOCUS_OP_COMBINE);
				assert_int_equal(d.status, 0);
			}
		}
	}
	/* every (token, k) went out exactly once, in the rows the completion counted */
	assert_int_equal(rows_sent, rows_got);
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t k = 0; k < K; k++)
			assert_int_equal(s.hits[t][k], 1);

	/* rank 0 collects every result: combine inverts dispatch */
	while (tu_try_desc(rk[0], &in, 500)) {
		uint8_t *msg, *st0 = stage0;
		struct locus_rows_hdr *h;
		struct locus_row_ref *refs;
		struct locus_msg_hdr *m;

		if (in.op == LOCUS_OP_COMBINE) {
			assert_int_equal(in.status, 0);
			continue;
		}
		assert_int_equal(in.op, LOCUS_OP_RESULTS_IN);
		msg = (uint8_t *)locus_client_inbox(rk[0], &in);
		assert_int_equal(locus_rows_msg_check(msg, in.len, GPN, 262144, NULL), 0);
		m = (struct locus_msg_hdr *)msg;
		h = locus_rows_hdr_of(msg);
		refs = locus_rows_refs(msg);
		for (uint32_t j = 0; j < h->n_rows; j++) {
			const uint8_t *row = (h->flags & LOCUS_ROWS_IN_PLACE)
				? st0 + h->rows_off + (size_t)j * ROW
				: msg + h->rows_off + (size_t)j * ROW;
			uint8_t want[ROW];

			fill_row(want, refs[j].token);
			for (int b = 0; b < ROW; b++)
				want[b] ^= (uint8_t)(m->src_rank + 1);
			assert_memory_equal(row, want, ROW);
			for (uint32_t k = 0; k < K; k++)
				if (refs[j].kmask & (1u << k))
					assert_int_equal(s.back[refs[j].token][k]++, 0);
		}
		results++;
		locus_client_release_slot(rk[0], in.slot);
	}
	assert_true(results >= GPN);
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t k = 0; k < K; k++)
			assert_int_equal(s.back[t][k], 1);
	/* tiers: rank 0's own rows stayed put, the rest crossed the node */
	assert_true(ctr_("rows", 0 * 3 + 0) > 0);
	assert_int_equal(ctr_("bytes", 0 * 3 + 0), 0);
	assert_int_equal(ctr_("bytes", 0 * 3 + 1), ctr_("rows", 0 * 3 + 1) * ROW);
	assert_int_equal(ctr_("rows", 0 * 3 + 0) + ctr_("rows", 0 * 3 + 1), rows_got);
	assert_int_equal(ctr_("rows", 0 * 3 + 2), 0);
	if (dma.on) {
		/* every intra-node message's rows went by the DMA engine, none by the CPU */
		assert_int_equal(ctr_("ldma_msgs", 0), ctr_("messages", 0 * 3 + 1) +
						       ctr_("messages", 1 * 3 + 1));
		assert_int_equal(ctr_("ldma_bytes", 0), ctr_("bytes", 0 * 3 + 1) +
							ctr_("bytes", 1 * 3 + 1));
		assert_int_equal(ctr_("ldma_fallbacks", 0), 0);
		assert_true(ctr_("ldma_msgs", 0) > 0);
	} else {
		assert_int_equal(ctr_("ldma_msgs", 0), 0);
	}
	/* with two engines, rank 0's rows to ranks 2-3 and their results crossed */
	if (two_engines)
		assert_true(ctr_("engine_handovers", 0) >= 4);
	else
		assert_int_equal(ctr_("engine_handovers", 0), 0);
	/* the live load matrix counted every (token, k) of layer 1 */
	{
		uint64_t sum = 0;

		for (uint32_t e = 0; e < 16; e++)
			sum += ctr_("expert_tokens", 1 * 16 + e);
		assert_int_equal(sum, T * K);
	}

	/* an expert id outside the table: refused whole, nothing delivered */
	((uint16_t *)(rq + 1))[3] = E;
	d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = 8, .off = 0,
				 .len = (uint32_t)locus_dispatch_req_len(T, K) };
	assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);
	tu_wait_desc(rk[0], &d);
	assert_int_equal(d.id, 8);
	assert_int_equal(d.status, -LOCUS_ERANGE);
	for (int r = 1; r < GPN; r++)
		assert_false(tu_try_desc(rk[r], &in, 5));
	for (int r = 0; r < GPN; r++)
		locus_client_detach(rk[r]);
	free(g);
}

/*
 * The DMA engine fails every copy: the dispatch completes with -EIO, the
 * ranks whose rows never arrived are told nothing and get their inbox room
 * back (twice the inbox's worth of failed batches, then one that succeeds).
 */
static void test_dma_copy_fails(void **state)
{
	struct locus_client *rk[GPN];
	struct locus_dispatch_req *rq;
	struct locus_desc d, in;
	const uint32_t T = 16, K = 2;
	uint8_t *stage0;
	float *gates;
	size_t glen;
	void *g = grace_table(&glen);
	uint64_t err0 = ctr_("ldma_errors", 0);
	int refused;
	(void)state;

	for (int r = 0; r < GPN; r++)
		rk[r] = tu_attach(INST, LOCUS_ROLE_RANK, 0, (uint32_t)r);
	assert_true(push(1, g, glen, &refused) > 0);
	stage0 = locus_client_stage(rk[0], NULL);
	rq = (struct locus_dispatch_req *)stage0;
	*rq = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = 1, .top_k = K,
					   .n_tokens = T, .row_bytes = ROW, .rows_off = 65536,
					   .batch_id = 77 };
	for (uint32_t t = 0; t < T; t++) {
		((uint16_t *)(rq + 1))[t * K] = (uint16_t)(t % 8);
		((uint16_t *)(rq + 1))[t * K + 1] = (uint16_t)((t + 3) % 8);
		fill_row(stage0 + 65536 + t * ROW, t);
	}
	gates = (float *)((uint8_t *)(rq + 1) + locus_ids_bytes(T, K));
	for (uint32_t i = 0; i < T * K; i++)
		gates[i] = 0.5f;
	for (int round = 0; round < 33; round++) {
		int last = round == 32;

		__atomic_store_n(&dma.fail, !last, __ATOMIC_RELEASE);
		d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = 100 + round, .off = 0,
					 .len = (uint32_t)locus_dispatch_req_len(T, K) };
		assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);
		for (;;) { /* rank 0's own rows come in place; then the completion */
			tu_wait_desc(rk[0], &in);
			if (in.op == LOCUS_OP_DISPATCH)
				break;
			assert_int_equal(in.op, LOCUS_OP_ROWS_IN);
			locus_client_release_slot(rk[0], in.slot);
		}
		assert_int_equal(in.id, 100 + round);
		assert_int_equal(in.status, last ? 0 : -EIO);
		for (int r = 1; r < GPN; r++) {
			int got = 0;

			while (tu_try_desc(rk[r], &in, last ? 200 : 2)) {
				uint8_t *msg = (uint8_t *)locus_client_inbox(rk[r], &in);
				const struct locus_rows_hdr *h;
				uint8_t want[ROW];

				assert_true(last);
				assert_int_equal(in.op, LOCUS_OP_ROWS_IN);
				assert_int_equal(locus_rows_msg_check(msg, in.len, GPN, 262144, NULL), 0);
				h = locus_rows_hdr_of(msg);
				for (uint32_t j = 0; j < h->n_rows; j++) {
					fill_row(want, locus_rows_refs(msg)[j].token);
					assert_memory_equal(msg + h->rows_off + j * ROW, want, ROW);
				}
				locus_client_release_slot(rk[r], in.slot);
				got++;
			}
			if (last)
				assert_true(got > 0);
		}
	}
	assert_true(ctr_("ldma_errors", 0) >= err0 + 32);
	for (int r = 0; r < GPN; r++)
		locus_client_detach(rk[r]);
	free(g);
}

/* ---- a client that dies ---------------------------------------------------------------- */

static void test_killed_client_reclaimed(void **state)
{
	uint64_t before = ctr_("clients_reclaimed", 0);
	int status;
	pid_t pid;
	(void)state;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct locus_client_req req = { .roles = LOCUS_ROLE_DECODE, .decoder_id = 5,
						.timeout_ms = 5000 };
		struct locus_client *c;

		if (locus_client_attach(INST, &req, &c, NULL))
			_exit(1);
		_exit(0); /* dies attached */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	for (int i = 0; i < 50000 && ctr_("clients_reclaimed", 0) == before; i++)
		tu_nap();
	assert_int_equal(ctr_("clients_reclaimed", 0), before + 1);
	/* the decoder id is free again */
	locus_client_detach(tu_attach(INST, LOCUS_ROLE_DECODE, 5, 0));
	/* a second claim of a taken rank, or a rank of another node, is refused */
	{
		struct locus_client *a = tu_attach(INST, LOCUS_ROLE_RANK, 0, 2);
		struct locus_client_req req = { .roles = LOCUS_ROLE_RANK, .rank = 2,
						.timeout_ms = 5000 };
		struct locus_client *c;

		assert_int_equal(locus_client_attach(INST, &req, &c, NULL), -EEXIST);
		req.rank = 4;
		assert_int_equal(locus_client_attach(INST, &req, &c, NULL), -LOCUS_ERANGE);
		locus_client_detach(a);
	}
	assert_true(ctr_("clients_refused", 0) >= 2);
}

/*
 * Two engines: arrivals for a rank go to the engine it was granted, not
 * its GPU's when they differ (a rank that prefills too, with the cache on,
 * sits on engine 0; rank 3's GPU is engine 1's), and to its GPU's once
 * nobody holds it.
 */
static void test_arrival_follows_grant(void **state)
{
	struct locus_msg_hdr h = { .type = LOCUS_MSG_DISPATCH, .dst_rank = 3 };
	struct locus_client *both = tu_attach(INST, LOCUS_ROLE_RANK | LOCUS_ROLE_PREFILL, 0, 3);
	struct locus_client *rank2 = tu_attach(INST, LOCUS_ROLE_RANK, 0, 2);
	(void)state;

	assert_int_equal(locus_node_n_engines(node), 2);
	assert_int_equal(locus_node_arrival_engine(node, &h, sizeof(h)), 0);
	h.type = LOCUS_MSG_COMBINE;
	assert_int_equal(locus_node_arrival_engine(node, &h, sizeof(h)), 0);
	h.dst_rank = 2; /* a plain rank: its GPU's engine */
	assert_int_equal(locus_node_arrival_engine(node, &h, sizeof(h)), 1);
	locus_client_detach(both);
	locus_client_detach(rank2);
	h.dst_rank = 3; /* nobody's once the control pass saw the detach: its GPU's */
	for (int i = 0; i < 50000 && locus_node_arrival_engine(node, &h, sizeof(h)) != 1; i++)
		tu_nap();
	assert_int_equal(locus_node_arrival_engine(node, &h, sizeof(h)), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_route_matches_pure_router),
		cmocka_unit_test(test_table_push_under_traffic),
		cmocka_unit_test(test_dispatch_combine),
		cmocka_unit_test(test_killed_client_reclaimed),
	};
	const struct CMUnitTest dma_tests[] = {
		cmocka_unit_test(test_route_matches_pure_router),
		cmocka_unit_test(test_table_push_under_traffic),
		cmocka_unit_test(test_dispatch_combine),
		cmocka_unit_test(test_dma_copy_fails),
		cmocka_unit_test(test_killed_client_reclaimed),
	};
	int fails = cmocka_run_group_tests_name("cpu copies", tests, setup, teardown);

	fails += cmocka_run_group_tests_name("intra-node DMA", dma_tests, setup_dma, teardown);
	const struct CMUnitTest engine_tests[] = {
		cmocka_unit_test(test_route_matches_pure_router),
		cmocka_unit_test(test_table_push_under_traffic),
		cmocka_unit_test(test_dispatch_combine),
		cmocka_unit_test(test_killed_client_reclaimed),
		cmocka_unit_test(test_arrival_follows_grant),
	};
	fails += cmocka_run_group_tests_name("two engines", engine_tests, setup_engines, teardown);
	return fails + cmocka_run_group_tests_name("8-bit router", tests, setup_precision8,
						   teardown);
}
