// SPDX-License-Identifier: MIT
/*
 * The signature cache through a whole node: the node's
 * control work and its engine on threads, clients through the client
 * library, tables pushed through the control socket.
 *
 * Prompts are built from the repository's real trace (ESFT-vanilla-lite,
 * 26 x 64, top-6): a head shared by every request of a domain (the first
 * requests' prompts of that domain one after the other, 6 blocks of 16
 * tokens), then the request's own prompt (one block) and 7 tokens of its
 * continuation (the tail). Checked:
 *   - a ROUTE_BLOCKS naming the cached head gets the decision the pure
 *     router gives the whole prompt's signature, and its decoder receives
 *     exactly the bytes a ROUTE of the whole prompt delivers;
 *   - EVICT reports what it found; a route naming evicted blocks is routed
 *     on what is known, flagged partial and counted; LRU at capacity;
 *   - a node restarted (the daemon's state gone) routes partial, counted;
 *   - every kind of bad input refused with one completion and counted by
 *     reason, nothing cached from it; the cache off refuses with
 *     -EOPNOTSUPP; a table of another shape empties the cache.
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
#include <unistd.h>
#include <cmocka.h>

#include "locus_blocks.h"
#include "locus_client.h"
#include "locus_eldr_priv.h"
#include "locus_eldr_router.h"
#include "locus_node.h"
#include "locus_shm.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locus_trace.h"
#include "locus_wire.h"
#include "node_util.h"

#define INST "t-sigroute"
#define BT 16u          /* tokens per block */
#define HEAD_BLOCKS 6u  /* the domain's shared head */
#define TAIL 7u         /* tokens after the last full block */
#define N_DEC 4u
#define MAX_TOK ((HEAD_BLOCKS + 1) * BT + TAIL)

static char shm_dir[64];
static struct tu_node tn;
static struct locus_trace *tr;
static uint16_t NL, NE, NK;
static size_t cells, tok_ids;

#define CONF(extra)                                                                         \
	"[locusd]\ninstance = " INST "\nclient_slots = 8\nring_size = 64\n"                 \
	"stage_size = 1048576\nclient_inbox_slots = 16\ninbox_slot_size = 4096\n"          \
	"moe_layers = 26\nmoe_experts = 64\nmoe_top_k = 6\nmax_decoders = 8\n"              \
	"max_batch_tokens = 64\ntable_slot_size = 1048576\nload_timeout_ms = 60000\n"      \
	extra "[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n"

/* ---- prompts from the trace --------------------------------------------------------- */

struct prompt {
	uint16_t ids[MAX_TOK * 26 * 6];
	uint32_t n;                          /* tokens */
	uint64_t hash[HEAD_BLOCKS + 1];      /* chained block hashes, as a serving engine's */
	uint32_t domain;
};

/* The first request of domain d at or after index from, or UINT32_MAX. */
static uint32_t req_of(uint32_t d, uint32_t from)
{
	for (uint32_t r = from; r < tr->n_requests; r++)
		if (tr->reqs[r].domain == d)
			return r;
	return UINT32_MAX;
}

static void append(struct prompt *p, const uint16_t *ids, uint32_t n)
{
	memcpy(p->ids + (size_t)p->n * tok_ids, ids, n * tok_ids * 2);
	p->n += n;
}

/*
 * Request r as a prefix-cached prompt: its domain's head (the domain's
 * first HEAD_BLOCKS prompts, 16 tokens each), r's prompt, TAIL tokens of
 * r's continuation. Block hashes chain over the parent's hash and the
 * block's ids (FNV-1a), so equal heads have equal hashes.
 */
static void make_prompt(uint32_t r, struct prompt *p)
{
	const struct locus_trace_req *q = &tr->reqs[r];
	uint32_t from = 0;
	uint64_t h = 0xcbf29ce484222325ull;

	memset(p, 0, sizeof(*p));
	p->domain = q->domain;
	for (uint32_t b = 0; b < HEAD_BLOCKS; b++) {
		uint32_t hr = req_of(q->domain, from);

		assert_true(hr != UINT32_MAX && tr->reqs[hr].prompt_len >= BT);
		append(p, tr->reqs[hr].prompt, BT);
		from = hr + 1;
	}
	assert_true(q->prompt_len >= BT && q->gen_len >= TAIL);
	append(p, q->prompt, BT);
	append(p, q->gen, TAIL);
	for (uint32_t b = 0; b <= HEAD_BLOCKS; b++) {
		const uint8_t *x = (const uint8_t *)(p->ids + (size_t)b * BT * tok_ids);

		for (size_t i = 0; i < BT * tok_ids * 2; i++)
			h = (h ^ x[i]) * 0x100000001b3ull;
		p->hash[b] = h;
	}
}

static void block_counts(const struct prompt *p, uint32_t b, uint8_t *out)
{
	assert_int_equal(locus_blocks_counts_build(out, NL, NE, NK,
						   p->ids + (size_t)b * BT * tok_ids, BT, NULL), 0);
}

/* The signature of tokens [from, p->n) of p. */
static size_t sig_of(const struct prompt *p, uint32_t from, void *buf, size_t cap)
{
	long n = locus_eldr_sig_build(buf, cap, NL, NE, NK, p->ids + (size_t)from * tok_ids,
				      p->n - from, 0, NULL);

	assert_true(n > 0);
	return (size_t)n;
}

/* ---- the table: one centroid per domain, from its head ------------------------------ */

static void *table(uint16_t n_layers, size_t *len)
{
	struct locus_eldr_tbl_layout lay;
	uint32_t *ids;
	uint8_t *mask, *blob;
	float *idf, *cen;
	static uint16_t sig[32 + 26 * 64];

	assert_int_equal(locus_eldr_tbl_layout(n_layers, NE, N_DEC, &lay), 0);
	blob = calloc(1, 64 + lay.len);
	assert_int_equal(locus_eldr_tbl_init(blob + 64, lay.len, n_layers, NE, N_DEC, 0.05f, &ids,
					     &mask, &idf, &cen), 0);
	for (uint32_t k = 0; k < N_DEC; k++) {
		struct prompt p;
		double s = 0;

		ids[k] = k;
		make_prompt(req_of(1 + k % (tr->n_domains - 1), 0), &p);
		sig_of(&p, 0, sig, sizeof(sig));
		for (uint32_t j = 0; j < (uint32_t)n_layers * NE; j++)
			s += (double)sig[16 + j] * sig[16 + j];
		for (uint32_t j = 0; j < (uint32_t)n_layers * NE; j++)
			cen[k * n_layers * NE + j] = (float)(sig[16 + j] / sqrt(s));
	}
	for (uint32_t l = 0; l < n_layers; l++) {
		mask[l] = 1;
		for (uint32_t e = 0; e < NE; e++)
			idf[l * NE + e] = 1.0f;
	}
	((struct locus_eldr_tbl_hdr *)(blob + 64))->n_masked = n_layers;
	assert_int_equal(locus_tbl_seal(blob, 64 + lay.len, LOCUS_TBL_ELDR, LOCUS_ELDR_TBL_VERSION,
					lay.len), 0);
	*len = 64 + lay.len;
	return blob;
}

/* ---- node, clients ------------------------------------------------------------------ */

static struct locus_client *pre, *dec[N_DEC];
static struct locus_eldr_router *ref;
static uint8_t ref_mem[1 << 20] __attribute__((aligned(64)));

static uint64_t ctr(const char *name, uint32_t elem)
{
	return tu_ctr(tn.view.ctrs, name, elem);
}

/* Start the node with conf, attach the clients, push the table, settle the loads. */
static void start(const char *conf, int push)
{
	size_t tlen;
	void *tbl;
	int refused;

	assert_int_equal(tu_node_start(&tn, conf), 0);
	pre = tu_attach(INST, LOCUS_ROLE_PREFILL, 0, 0);
	for (uint32_t k = 0; k < N_DEC; k++)
		dec[k] = tu_attach(INST, LOCUS_ROLE_DECODE, k, 0);
	if (!push)
		return;
	tbl = table(NL, &tlen);
	assert_true(tu_push(INST, tn.node, 0, tbl, tlen, &refused) > 0);
	assert_false(refused);
	assert_int_equal(locus_eldr_router_build(ref_mem, sizeof(ref_mem), (uint8_t *)tbl + 64,
						 tlen - 64, LOCUS_ELDR_PATH_SCALAR, &ref, NULL), 0);
	free(tbl);
	for (uint32_t k = 0; k < N_DEC; k++)
		locus_client_report_load(dec[k], 1 + k % 2);
	for (int i = 0; i < 50000; i++) {
		uint32_t ok = 0;

		for (uint32_t k = 0; k < N_DEC; k++)
			ok += ctr("decoder_load", k) == 1 + k % 2;
		if (ok == N_DEC)
			break;
		tu_nap();
	}
	for (uint32_t k = 0; k < N_DEC; k++) {
		assert_int_equal(ctr("decoder_load", k), 1 + k % 2);
		locus_eldr_router_set_load(ref, k, 1 + k % 2);
	}
}

static void stop_node(void)
{
	locus_client_detach(pre);
	for (uint32_t k = 0; k < N_DEC; k++)
		locus_client_detach(dec[k]);
	tu_node_stop(&tn);
}

static int setup(void **state)
{
	struct locus_error err = { 0 };
	(void)state;

	if (locus_trace_load("tests/data/calib_sample.jsonl", NULL, &tr, &err)) {
		fprintf(stderr, "trace: %s\n", err.msg);
		return -1;
	}
	NL = tr->n_layers;
	NE = tr->n_experts;
	NK = tr->k;
	cells = (size_t)NL * NE;
	tok_ids = (size_t)NL * NK;
	if (NL != 26 || NE != 64 || NK != 6 || tr->n_domains < 5)
		return -1;
	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-sigroute-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	locus_trace_free(tr);
	return rmdir(shm_dir);
}

/* The prefiller's completion of id (the decoders are drained by the caller). */
static struct locus_desc completion(uint64_t id)
{
	struct locus_desc d;

	tu_wait_desc(pre, &d);
	assert_int_equal(d.id, id);
	return d;
}

/*
 * What decoder who received for id: its payload must be want (len bytes);
 * released. Returns 0, or fails.
 */
static void expect_delivery(uint32_t who, uint64_t id, const void *want, size_t len)
{
	const struct locus_msg_hdr *m;
	struct locus_desc in;

	tu_wait_desc(dec[who], &in);
	assert_int_equal(in.op, LOCUS_OP_SIGNATURE_IN);
	assert_int_equal(in.id, id);
	m = locus_client_inbox(dec[who], &in);
	assert_non_null(m);
	assert_int_equal(m->payload_len, len);
	assert_memory_equal(m + 1, want, len);
	assert_int_equal(locus_client_release_slot(dec[who], in.slot), 0);
	for (uint32_t k = 0; k < N_DEC; k++)
		assert_false(tu_try_desc(dec[k], &in, 1));
}

/* Take and release the one delivery decoder who got. */
static void drain_one(uint32_t who)
{
	struct locus_desc in;

	tu_wait_desc(dec[who], &in);
	assert_int_equal(in.op, LOCUS_OP_SIGNATURE_IN);
	assert_int_equal(locus_client_release_slot(dec[who], in.slot), 0);
}

/*
 * Route p as a prefix-cached prompt: its first n_cached blocks named as
 * cached, the rest of its full blocks new, the tail's signature. Returns
 * the completion.
 */
static struct locus_desc route_blocks(const struct prompt *p, uint32_t n_cached, uint64_t id,
				      uint64_t off)
{
	static uint8_t counts[(HEAD_BLOCKS + 1) * 26 * 64];
	static uint8_t tail[32 + 2 * 26 * 64] __attribute__((aligned(8)));
	uint32_t full = p->n / BT;
	struct locus_blocks_route r;
	struct locus_error err = { 0 };

	for (uint32_t b = n_cached; b < full; b++)
		block_counts(p, b, counts + (size_t)(b - n_cached) * cells);
	sig_of(p, full * BT, tail, sizeof(tail));
	r = (struct locus_blocks_route){ .block_tokens = BT, .n_cached = n_cached,
					 .cached = p->hash, .n_new = full - n_cached,
					 .new_hashes = p->hash + n_cached, .new_counts = counts,
					 .tail = tail };
	if (locus_client_route_blocks(pre, off, &r, id, &err))
		fail_msg("route_blocks: %s", err.msg);
	return completion(id);
}

static void evict(const uint64_t *h, uint32_t n, uint64_t id, uint32_t want_found)
{
	struct locus_error err = { 0 };
	struct locus_desc d;

	if (locus_client_evict(pre, 0, h, n, id, &err))
		fail_msg("evict: %s", err.msg);
	d = completion(id);
	assert_int_equal(d.op, LOCUS_OP_EVICT);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.blocks, want_found);
}

/* ---- the tests ------------------------------------------------------------------------ */

/* Block entries and checkpoints 32 MiB holds at 26 x 64 with a checkpoint every C blocks. */
static void capacity_of(uint32_t C, uint64_t *blocks, uint64_t *ckpts)
{
	const uint64_t cap = 32u << 20, eb = 32 + 26 * 64, cb = 32 + 2 * 26 * 64;

	*ckpts = C ? cap / (C * eb + cb) : 0;
	*blocks = (cap - *ckpts * cb) / eb;
}

/*
 * Every request of the trace that has the tokens: routed with its domain's
 * head cached, against the whole prompt's ROUTE; with prefix checkpoints
 * every C blocks (conf sets C; C 0 = none). A prompt has 7 full blocks, the
 * head's 6 named as cached: C = 2 and 3 start every sum from the head's
 * last checkpoint (block 5) and sum no cached block, C = 7 checkpoints each
 * request's own block, C = 8 (the default) and 0 sum every cached block.
 */
static void whole_prompt_run(const char *conf, uint32_t C)
{
	static uint8_t whole[32 + 2 * 26 * 64] __attribute__((aligned(8)));
	uint32_t seen[64] = { 0 }, routed = 0, hits = 0, by_dec[N_DEC] = { 0 }, domains = 0;
	uint32_t from_ckpt = C && C <= HEAD_BLOCKS ? HEAD_BLOCKS / C * C : 0;
	uint64_t cap_blocks, cap_ckpts;

	start(conf, 1);
	for (uint32_t r = 0; r < tr->n_requests; r++) {
		static struct prompt p;
		struct locus_eldr_decision want;
		struct locus_desc d;
		uint32_t cached;
		size_t len;

		if (tr->reqs[r].prompt_len < BT || tr->reqs[r].gen_len < TAIL)
			continue;
		make_prompt(r, &p);
		len = sig_of(&p, 0, whole, sizeof(whole));
		/* the plain ROUTE of the whole prompt: the reference bytes and decision */
		assert_int_equal(locus_eldr_route(ref, whole, len, &want), 0);
		memcpy(locus_client_stage(pre, NULL), whole, len);
		assert_int_equal(locus_client_submit(pre, &(struct locus_desc){
			.op = LOCUS_OP_ROUTE, .id = 2 * r, .off = 0, .len = (uint32_t)len }, 1), 1);
		d = completion(2 * r);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.peer, want.decoder_id);
		expect_delivery(d.peer, 2 * r, whole, len);
		/* the same prompt, its domain's head named as cached once a request inserted it */
		cached = seen[p.domain] ? HEAD_BLOCKS : 0;
		assert_int_equal(locus_eldr_route(ref, whole, len, &want), 0);
		d = route_blocks(&p, cached, 2 * r + 1, 65536);
		assert_int_equal(d.op, LOCUS_OP_ROUTE_BLOCKS);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.blocks, cached);
		assert_false(d.flags & LOCUS_DESC_F_PARTIAL);
		assert_int_equal(d.peer, want.decoder_id);
		assert_int_equal(d.count, want.n_candidates);
		expect_delivery(d.peer, 2 * r + 1, whole, len);
		domains += !seen[p.domain];
		seen[p.domain] = 1;
		routed++;
		hits += cached;
		by_dec[d.peer]++;
	}
	print_message("checkpoint every %u blocks: %u prompts of %u tokens (%u head blocks "
		      "shared per domain): %u cached blocks named and found (%llu summed, %llu "
		      "routes from a checkpoint), every decision and every delivered byte equal "
		      "to the whole prompt's ROUTE; decoders %u/%u/%u/%u\n", C, routed, MAX_TOK,
		      HEAD_BLOCKS, hits, (unsigned long long)ctr("sigcache_blocks_summed", 0),
		      (unsigned long long)ctr("sigcache_checkpoint_hits", 0), by_dec[0], by_dec[1],
		      by_dec[2], by_dec[3]);
	assert_true(routed >= 40);
	assert_true(by_dec[0] + by_dec[1] + by_dec[2] + by_dec[3] == routed);
	assert_int_equal(ctr("sigcache_hits", 0), hits);
	assert_int_equal(ctr("sigcache_misses", 0), 0);
	assert_int_equal(ctr("route_blocks_requests", 0), routed);
	assert_int_equal(ctr("route_blocks_partial", 0), 0);
	assert_int_equal(ctr("route_requests", 0), 2 * routed);
	/* head blocks inserted once per domain, then refreshed; one own block per request */
	assert_true(ctr("sigcache_inserts", 0) > 0);
	assert_int_equal(ctr("sigcache_entries", 0), ctr("sigcache_inserts", 0));
	/* a cached block under the checkpoint is looked up, not summed */
	assert_int_equal(ctr("sigcache_blocks_summed", 0),
			 hits - (uint64_t)from_ckpt * (hits / HEAD_BLOCKS));
	assert_int_equal(ctr("sigcache_checkpoint_hits", 0), from_ckpt ? hits / HEAD_BLOCKS : 0);
	/* the head's checkpoints once per domain; C = 7: each request's own block's */
	assert_int_equal(ctr("sigcache_checkpoints", 0),
			 (C ? (uint64_t)domains * (HEAD_BLOCKS / C) : 0) +
			 (C && (HEAD_BLOCKS + 1) % C == 0 ? routed : 0));
	assert_int_equal(ctr("sigcache_checkpoint_inserts", 0), ctr("sigcache_checkpoints", 0));
	assert_int_equal(ctr("sigcache_checkpoint_mismatch", 0), 0);
	assert_int_equal(ctr("sigcache_bytes", 0), ctr("sigcache_entries", 0) * (32 + 26 * 64) +
			 ctr("sigcache_checkpoints", 0) * (32 + 2 * 26 * 64));
	capacity_of(C, &cap_blocks, &cap_ckpts);
	assert_int_equal(ctr("sigcache_capacity", 0), cap_blocks);
	assert_int_equal(ctr("sigcache_checkpoint_capacity", 0), cap_ckpts);
	stop_node();
}

static void test_cached_equals_whole_prompt(void **state)
{
	(void)state;
	whole_prompt_run(CONF(""), 8); /* the default */
}

static void test_cached_equals_whole_prompt_no_checkpoints(void **state)
{
	(void)state;
	whole_prompt_run(CONF("sig_cache_checkpoint_blocks = 0\n"), 0);
}

static void test_cached_equals_whole_prompt_checkpoints(void **state)
{
	(void)state;
	whole_prompt_run(CONF("sig_cache_checkpoint_blocks = 2\n"), 2);
	whole_prompt_run(CONF("sig_cache_checkpoint_blocks = 3\n"), 3);
	whole_prompt_run(CONF("sig_cache_checkpoint_blocks = 7\n"), 7);
}

/* EVICT, a partial route, LRU at capacity, and a restart. */
static void test_evict_lru_restart(void **state)
{
	static struct prompt p, q;
	static uint8_t want[32 + 2 * 26 * 64] __attribute__((aligned(8)));
	struct locus_eldr_decision dd;
	struct locus_desc d;
	uint64_t h[3];
	size_t len;
	uint32_t r0 = req_of(1, 0), r1 = req_of(1, r0 + 1);
	(void)state;

	/* room for 8 blocks of 26 x 64 (per-block LRU: no checkpoints) */
	start(CONF("sig_cache_bytes = 13568\nsig_cache_checkpoint_blocks = 0\n"), 1);
	assert_int_equal(ctr("sigcache_capacity", 0), 8);
	make_prompt(r0, &p);
	make_prompt(r1, &q);
	len = sig_of(&p, 0, want, sizeof(want));
	assert_int_equal(locus_eldr_route(ref, want, len, &dd), 0);
	d = route_blocks(&p, 0, 1, 0);          /* inserts all 7 blocks of p */
	assert_int_equal(d.status, 0);
	expect_delivery(d.peer, 1, want, len);
	assert_int_equal(ctr("sigcache_entries", 0), 7);

	/* EVICT two of the head and one never cached: 2 found */
	h[0] = p.hash[0];
	h[1] = p.hash[3];
	h[2] = 0xdeadbeef;
	evict(h, 3, 2, 2);
	assert_int_equal(ctr("sigcache_evictions", 1), 2);
	assert_int_equal(ctr("sigcache_entries", 0), 5);
	/* q names p's head: 4 of 6 found, routed partial on what is known */
	{
		static uint16_t part[32 + 26 * 64];
		struct locus_eldr_sig_hdr *sh = (void *)part;
		uint8_t blk[26 * 64];

		len = sig_of(&q, HEAD_BLOCKS * BT, part, sizeof(part)); /* q's own block + tail */
		for (uint32_t b = 0; b < HEAD_BLOCKS; b++) {
			if (b == 0 || b == 3)
				continue;
			block_counts(&q, b, blk);
			for (size_t i = 0; i < cells; i++)
				part[16 + i] = (uint16_t)(part[16 + i] + blk[i]);
		}
		sh->prompt_tokens = (4 + 1) * BT + TAIL;
		assert_int_equal(locus_eldr_route(ref, part, len, &dd), 0);
		d = route_blocks(&q, HEAD_BLOCKS, 3, 0);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.blocks, 4);
		assert_true(d.flags & LOCUS_DESC_F_PARTIAL);
		assert_int_equal(d.peer, dd.decoder_id);
		expect_delivery(d.peer, 3, part, len);
	}
	assert_int_equal(ctr("route_blocks_partial", 0), 1);
	assert_int_equal(ctr("sigcache_misses", 0), 2);
	/* q's own block went in: 6 entries; q's whole prompt as new adds back 0 and 3: 8 */
	assert_int_equal(ctr("sigcache_entries", 0), 6);
	d = route_blocks(&q, 0, 4, 0);
	assert_int_equal(d.status, 0);
	drain_one(d.peer);
	assert_int_equal(ctr("sigcache_entries", 0), 8);
	assert_int_equal(ctr("sigcache_refreshes", 0), 5);
	assert_int_equal(ctr("sigcache_evictions", 0), 0);
	/* a third request's own block makes 9 > 8: the least recently used (p's own) goes */
	make_prompt(req_of(1, r1 + 1), &q);
	d = route_blocks(&q, HEAD_BLOCKS, 5, 0);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.blocks, HEAD_BLOCKS);
	drain_one(d.peer);
	assert_int_equal(ctr("sigcache_evictions", 0), 1);
	assert_int_equal(ctr("sigcache_entries", 0), 8);
	d = route_blocks(&p, HEAD_BLOCKS + 1, 6, 0);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.blocks, HEAD_BLOCKS);
	assert_true(d.flags & LOCUS_DESC_F_PARTIAL);
	drain_one(d.peer);
	assert_int_equal(ctr("route_blocks_partial", 0), 2);
	assert_int_equal(ctr("sigcache_inserts", 0) - ctr("sigcache_evictions", 0) -
			 ctr("sigcache_evictions", 1), 8);
	stop_node();

	/* a restarted node: the cache is empty, routing still works (partial, counted) */
	start(CONF("sig_cache_bytes = 13568\nsig_cache_checkpoint_blocks = 0\n"), 1);
	assert_int_equal(ctr("sigcache_entries", 0), 0);
	len = sig_of(&p, HEAD_BLOCKS * BT, want, sizeof(want));
	((struct locus_eldr_sig_hdr *)want)->prompt_tokens = BT + TAIL;
	assert_int_equal(locus_eldr_route(ref, want, len, &dd), 0);
	d = route_blocks(&p, HEAD_BLOCKS, 7, 0);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.blocks, 0);
	assert_true(d.flags & LOCUS_DESC_F_PARTIAL);
	assert_int_equal(d.peer, dd.decoder_id);
	expect_delivery(d.peer, 7, want, len);
	assert_int_equal(ctr("route_blocks_partial", 0), 1);
	assert_int_equal(ctr("sigcache_misses", 0), HEAD_BLOCKS);
	assert_int_equal(ctr("sigcache_entries", 0), 1);
	stop_node();
}

/* Submit the request at the stage's start as op: its one completion's status. */
static int submit_raw(uint8_t op, size_t len, uint64_t id)
{
	struct locus_desc d;

	assert_int_equal(locus_client_submit(pre, &(struct locus_desc){
		.op = op, .id = id, .off = 0, .len = (uint32_t)len }, 1), 1);
	d = completion(id);
	assert_int_equal(d.op, op);
	return d.status;
}

/* A valid request of p (3 cached, the rest new) at the stage's start: its length. */
static size_t stage_request(const struct prompt *p, struct locus_blocks_layout *lay)
{
	static uint8_t counts[(HEAD_BLOCKS + 1) * 26 * 64];
	static uint8_t tail[32 + 2 * 26 * 64] __attribute__((aligned(8)));
	struct locus_blocks_shape s = { NL, NE, BT, NK };
	static uint64_t scratch[LOCUS_BLOCKS_MAX_CACHED + LOCUS_BLOCKS_MAX_NEW];
	uint8_t *stage = locus_client_stage(pre, NULL);
	long len;

	for (uint32_t b = 3; b <= HEAD_BLOCKS; b++)
		block_counts(p, b, counts + (size_t)(b - 3) * cells);
	sig_of(p, (HEAD_BLOCKS + 1) * BT, tail, sizeof(tail));
	len = locus_blocks_build(stage, 1 << 20, &(struct locus_blocks_route){
		.block_tokens = BT, .n_cached = 3, .cached = p->hash, .n_new = HEAD_BLOCKS - 2,
		.new_hashes = p->hash + 3, .new_counts = counts, .tail = tail }, NULL);
	assert_true(len > 0);
	assert_int_equal(locus_blocks_check(stage, (size_t)len, &s, scratch, lay, NULL, NULL), 0);
	return (size_t)len;
}

static void test_bad_input(void **state)
{
	static struct prompt p;
	struct locus_blocks_layout lay;
	uint8_t *stage;
	uint64_t entries, rej_desc;
	size_t len;
	(void)state;

	start(CONF(""), 0);
	stage = locus_client_stage(pre, NULL);
	make_prompt(req_of(2, 0), &p);
	/* no table yet */
	len = stage_request(&p, &lay);
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 1), -LOCUS_ESTATE);
	assert_int_equal(ctr("rejected_no_table", 0), 1);
	stop_node();
	start(CONF(""), 1);
	stage = locus_client_stage(pre, NULL);
	entries = ctr("sigcache_entries", 0);
	/* format: magic, block size, shape, a list length against the descriptor's len */
	len = stage_request(&p, &lay);
	stage[0] ^= 1;
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 2), -LOCUS_EBADMAGIC);
	len = stage_request(&p, &lay);
	((struct locus_blocks_hdr *)stage)->block_tokens = 32;
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 3), -LOCUS_ERANGE);
	len = stage_request(&p, &lay);
	((struct locus_blocks_hdr *)stage)->n_new++;
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 4), -LOCUS_ETRUNCATED);
	len = stage_request(&p, &lay);
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, 16, 5), -LOCUS_ETRUNCATED);
	assert_int_equal(ctr("rejected_blocks", LOCUS_ENGINE_BLOCKS_FORMAT), 4);
	/* duplicate: a new block that is also named cached */
	len = stage_request(&p, &lay);
	memcpy(stage + lay.off_new, stage + lay.off_cached, 8);
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 6), -EEXIST);
	assert_int_equal(ctr("rejected_blocks", LOCUS_ENGINE_BLOCKS_DUPLICATE), 1);
	/* counts over the block's 16 tokens */
	len = stage_request(&p, &lay);
	stage[lay.off_new + lay.new_stride + 8 + 5] = BT + 1;
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 7), -LOCUS_ERANGE);
	/* a layer over 16 tokens x top-6 */
	len = stage_request(&p, &lay);
	memset(stage + lay.off_new + 8 + 2 * NE, 2, NE);  /* 128 > 96 */
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 8), -LOCUS_ERANGE);
	assert_int_equal(ctr("rejected_blocks", LOCUS_ENGINE_BLOCKS_COUNTS), 2);
	/* the tail's signature header */
	len = stage_request(&p, &lay);
	((struct locus_eldr_sig_hdr *)(stage + lay.off_sig))->version = 9;
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 9), -LOCUS_EVERSION);
	assert_int_equal(ctr("rejected_blocks", LOCUS_ENGINE_BLOCKS_SIGNATURE), 1);
	/* nothing of a refused request was cached */
	assert_int_equal(ctr("sigcache_entries", 0), entries);
	assert_int_equal(ctr("sigcache_misses", 0), 0);
	/* descriptor: misaligned, outside the stage, a decoder's */
	rej_desc = ctr("rejected_bad_descriptor", 0);
	len = stage_request(&p, &lay);
	assert_int_equal(locus_client_submit(pre, &(struct locus_desc){
		.op = LOCUS_OP_ROUTE_BLOCKS, .id = 10, .off = 4, .len = (uint32_t)len }, 1), 1);
	assert_int_equal(completion(10).status, -LOCUS_EPROTO);
	assert_int_equal(locus_client_submit(pre, &(struct locus_desc){
		.op = LOCUS_OP_EVICT, .id = 11, .off = 1 << 20, .len = 24 }, 1), 1);
	assert_int_equal(completion(11).status, -LOCUS_EPROTO);
	assert_int_equal(ctr("rejected_bad_descriptor", 0), rej_desc + 2);
	/* EVICT: bad magic, length not the header's */
	assert_true(locus_evict_build(stage, 1 << 20, p.hash, 2, NULL) > 0);
	stage[1] ^= 0x40;
	assert_int_equal(submit_raw(LOCUS_OP_EVICT, locus_evict_req_len(2), 12), -LOCUS_EBADMAGIC);
	stage[1] ^= 0x40;
	assert_int_equal(submit_raw(LOCUS_OP_EVICT, locus_evict_req_len(3), 13), -LOCUS_ERANGE);
	assert_int_equal(ctr("rejected_blocks", LOCUS_ENGINE_BLOCKS_FORMAT), 6);
	/* and a good request still goes through afterwards */
	len = stage_request(&p, &lay);
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 14), 0);
	{
		struct locus_desc in;
		int got = 0;

		for (uint32_t k = 0; k < N_DEC; k++)
			if (tu_try_desc(dec[k], &in, 200)) {
				assert_int_equal(in.id, 14);
				assert_int_equal(locus_client_release_slot(dec[k], in.slot), 0);
				got++;
			}
		assert_int_equal(got, 1);
	}
	assert_int_equal(ctr("route_blocks_partial", 0), 1); /* its 3 cached were never cached */
	stop_node();
}

static void test_cache_off_and_reshape(void **state)
{
	static struct prompt p;
	struct locus_blocks_layout lay;
	uint64_t h = 1;
	size_t len, tlen;
	void *tbl;
	int refused;
	(void)state;

	start(CONF("sig_cache_bytes = 0\n"), 1);
	make_prompt(req_of(3, 0), &p);
	len = stage_request(&p, &lay);
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 1), -EOPNOTSUPP);
	assert_true(locus_evict_build(locus_client_stage(pre, NULL), 1 << 20, &h, 1, NULL) > 0);
	assert_int_equal(submit_raw(LOCUS_OP_EVICT, locus_evict_req_len(1), 2), -EOPNOTSUPP);
	assert_int_equal(ctr("rejected_blocks", LOCUS_ENGINE_BLOCKS_OFF), 2);
	stop_node();

	/* a table of another shape (13 of the 26 layers) empties the cache */
	start(CONF(""), 1);
	len = stage_request(&p, &lay);
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 3), 0);
	assert_int_equal(ctr("sigcache_entries", 0), HEAD_BLOCKS - 2);
	tbl = table(13, &tlen);
	assert_true(tu_push(INST, tn.node, 0, tbl, tlen, &refused) > 0);
	assert_false(refused);
	free(tbl);
	assert_int_equal(ctr("sigcache_resets", 0), 1);
	assert_int_equal(ctr("sigcache_entries", 0), 0);
	/* a request shaped for the replaced table is refused */
	len = stage_request(&p, &lay);
	assert_int_equal(submit_raw(LOCUS_OP_ROUTE_BLOCKS, len, 4), -LOCUS_ERANGE);
	stop_node();
}

/* Route q with n_cached named, expecting the whole prompt's decision and bytes. */
static void route_whole(const struct prompt *q, uint32_t n_cached, uint64_t id)
{
	static uint8_t whole[32 + 2 * 26 * 64] __attribute__((aligned(8)));
	struct locus_eldr_decision want;
	struct locus_desc d;
	size_t len = sig_of(q, 0, whole, sizeof(whole));

	assert_int_equal(locus_eldr_route(ref, whole, len, &want), 0);
	d = route_blocks(q, n_cached, id, 0);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.blocks, n_cached);
	assert_false(d.flags & LOCUS_DESC_F_PARTIAL);
	assert_int_equal(d.peer, want.decoder_id);
	expect_delivery(d.peer, id, whole, len);
}

/*
 * Prefix checkpoints every 2 blocks through the node: the head's
 * checkpoints (blocks 1, 3, 5) written by the first request, used by the
 * next; EVICT of blocks 4 and 5 drops 5's checkpoint, and the route from
 * checkpoint 3 is partial with exactly the known blocks' counts; the
 * checkpoint comes back when the prefix is known again; a block evicted
 * under a checkpoint is still known.
 */
static void test_checkpoints(void **state)
{
	static struct prompt p, q;
	static uint16_t part[32 + 26 * 64];
	struct locus_eldr_sig_hdr *sh = (void *)part;
	struct locus_eldr_decision dd;
	struct locus_desc d;
	uint8_t blk[26 * 64];
	uint64_t h[2];
	size_t len;
	uint32_t r0 = req_of(2, 0), r1 = req_of(2, r0 + 1);
	(void)state;

	start(CONF("sig_cache_checkpoint_blocks = 2\n"), 1);
	make_prompt(r0, &p);
	make_prompt(r1, &q);
	route_whole(&p, 0, 1);
	assert_int_equal(ctr("sigcache_checkpoints", 0), 3);
	route_whole(&q, HEAD_BLOCKS, 2);
	assert_int_equal(ctr("sigcache_checkpoint_hits", 0), 1);
	assert_int_equal(ctr("sigcache_blocks_summed", 0), 0);

	/* EVICT blocks 4 and 5: 5's checkpoint goes with it */
	h[0] = p.hash[4];
	h[1] = p.hash[5];
	evict(h, 2, 3, 2);
	assert_int_equal(ctr("sigcache_checkpoint_evictions", 1), 1);
	assert_int_equal(ctr("sigcache_checkpoints", 0), 2);
	/* from checkpoint 3: blocks 0..3 known, 4 and 5 missing, q's own block and tail */
	len = sig_of(&q, HEAD_BLOCKS * BT, part, sizeof(part));
	for (uint32_t b = 0; b < 4; b++) {
		block_counts(&q, b, blk);
		for (size_t i = 0; i < cells; i++)
			part[16 + i] = (uint16_t)(part[16 + i] + blk[i]);
	}
	sh->prompt_tokens = (4 + 1) * BT + TAIL;
	assert_int_equal(locus_eldr_route(ref, part, len, &dd), 0);
	d = route_blocks(&q, HEAD_BLOCKS, 4, 0);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.blocks, 4);
	assert_true(d.flags & LOCUS_DESC_F_PARTIAL);
	assert_int_equal(d.peer, dd.decoder_id);
	expect_delivery(d.peer, 4, part, len);
	assert_int_equal(ctr("route_blocks_partial", 0), 1);
	assert_int_equal(ctr("sigcache_checkpoint_hits", 0), 2);
	assert_int_equal(ctr("sigcache_checkpoints", 0), 2);

	/* blocks 0..3 named, 4..6 new: the prefix is known, checkpoint 5 written again */
	route_whole(&q, 4, 5);
	assert_int_equal(ctr("sigcache_checkpoints", 0), 3);
	/* block 0 evicted under checkpoint 5: the head is still known, a miss counted */
	evict(p.hash, 1, 6, 1);
	route_whole(&q, HEAD_BLOCKS, 7);
	assert_int_equal(ctr("sigcache_misses", 0), 3);
	assert_int_equal(ctr("sigcache_checkpoint_inserts", 0), 4);
	assert_int_equal(ctr("sigcache_checkpoint_mismatch", 0), 0);
	stop_node();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cached_equals_whole_prompt),
		cmocka_unit_test(test_cached_equals_whole_prompt_no_checkpoints),
		cmocka_unit_test(test_cached_equals_whole_prompt_checkpoints),
		cmocka_unit_test(test_evict_lru_restart),
		cmocka_unit_test(test_checkpoints),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_cache_off_and_reshape),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
