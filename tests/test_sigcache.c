// SPDX-License-Identifier: MIT
/*
 * The signature cache (dataplane/locus_sigcache.h): a prompt's signature
 * from its cached blocks plus its new tokens equals the whole prompt's, on
 * the repository's real trace; LRU and explicit eviction; refresh and
 * replace; the counts checks; and the hash table under a random sequence
 * of operations against a plain reference model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "locus_eldr.h"
#include "locus_sigcache.h"
#include "locus_trace.h"

#define BLOCK 16u

static struct locus_sigcache *make(uint32_t L, uint32_t E, uint32_t k, uint32_t entries)
{
	struct locus_sigcache_params p = { .n_layers = L, .n_experts = E, .top_k = k,
					   .block_tokens = BLOCK };
	struct locus_sigcache *c = NULL;
	struct locus_error err = { 0 };

	p.capacity_bytes = entries * locus_sigcache_entry_bytes(&p);
	if (locus_sigcache_create(&p, &c, &err))
		fail_msg("create: %s", err.msg);
	return c;
}

static void test_params(void **state)
{
	struct locus_sigcache_params p = { .n_layers = 48, .n_experts = 128, .top_k = 8,
					   .block_tokens = 16, .capacity_bytes = 6175 };
	struct locus_sigcache *c = NULL;
	struct locus_error err = { 0 };
	(void)state;

	/* 48 x 128 bytes of counts and the 32-byte header: locus_sigcache.h's figure */
	assert_int_equal(locus_sigcache_entry_bytes(&p), 6176);
	assert_int_equal(locus_sigcache_create(&p, &c, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "room for 0 entries"));
	p.capacity_bytes = 6176;
	assert_int_equal(locus_sigcache_create(&p, &c, &err), 0);
	locus_sigcache_destroy(c);
	p.block_tokens = 256;
	assert_int_equal(locus_sigcache_entry_bytes(&p), 0);
	assert_int_equal(locus_sigcache_create(&p, &c, &err), -LOCUS_ERANGE);
	p.block_tokens = 16;
	p.top_k = 0;
	assert_int_equal(locus_sigcache_create(&p, &c, &err), -LOCUS_ERANGE);
}

static void test_counts_check(void **state)
{
	struct locus_sigcache *c = make(2, 8, 2, 4);
	struct locus_error err = { 0 };
	uint8_t cnt[16] = { 0 };
	(void)state;

	cnt[3] = 16;
	cnt[4] = 16;
	assert_int_equal(locus_sigcache_counts_check(c, cnt, &err), 0);
	cnt[5] = 1; /* layer 0 now sums to 33 > 16 tokens x top-2 */
	assert_int_equal(locus_sigcache_counts_check(c, cnt, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "layer 0 sums to 33"));
	memset(cnt, 0, sizeof(cnt));
	cnt[8 + 7] = 17; /* layer 1, expert 7: more tokens than the block has */
	assert_int_equal(locus_sigcache_counts_check(c, cnt, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "layer 1 expert 7 counts 17"));
	locus_sigcache_destroy(c);
}

static void test_lru_refresh_replace(void **state)
{
	struct locus_sigcache *c = make(1, 4, 1, 3);
	struct locus_sigcache_stats st;
	uint8_t a[4] = { 1, 0, 0, 0 }, b[4] = { 0, 2, 0, 0 };
	uint16_t sig[4] = { 0 };
	(void)state;

	assert_int_equal(locus_sigcache_insert(c, 1, a), LOCUS_SIGCACHE_INSERTED);
	assert_int_equal(locus_sigcache_insert(c, 2, a), LOCUS_SIGCACHE_INSERTED);
	assert_int_equal(locus_sigcache_insert(c, 3, a), LOCUS_SIGCACHE_INSERTED);
	/* 1 used again: 2 is now the least recently used, and goes for 4 */
	assert_int_equal(locus_sigcache_add(c, 1, sig), 1);
	assert_int_equal(locus_sigcache_insert(c, 4, b), LOCUS_SIGCACHE_INSERTED);
	assert_false(locus_sigcache_contains(c, 2));
	assert_true(locus_sigcache_contains(c, 1) && locus_sigcache_contains(c, 3) &&
		    locus_sigcache_contains(c, 4));
	/* the same counts refresh (3 becomes most recent), others replace */
	assert_int_equal(locus_sigcache_insert(c, 3, a), LOCUS_SIGCACHE_REFRESHED);
	assert_int_equal(locus_sigcache_insert(c, 1, b), LOCUS_SIGCACHE_REPLACED);
	memset(sig, 0, sizeof(sig));
	assert_int_equal(locus_sigcache_add(c, 1, sig), 1);
	assert_int_equal(sig[1], 2);
	assert_int_equal(sig[0], 0);
	/* 4 is the oldest now */
	assert_int_equal(locus_sigcache_insert(c, 5, a), LOCUS_SIGCACHE_INSERTED);
	assert_false(locus_sigcache_contains(c, 4));
	assert_int_equal(locus_sigcache_evict(c, 3), 1);
	assert_int_equal(locus_sigcache_evict(c, 3), 0);
	assert_int_equal(locus_sigcache_add(c, 3, sig), 0);
	locus_sigcache_stats(c, &st);
	assert_int_equal(st.inserts, 5);
	assert_int_equal(st.refreshes, 1);
	assert_int_equal(st.replaced, 1);
	assert_int_equal(st.evictions[LOCUS_SIGCACHE_EVICT_LRU], 2);
	assert_int_equal(st.evictions[LOCUS_SIGCACHE_EVICT_EXPLICIT], 1);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.misses, 1);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.bytes_used, 2 * locus_sigcache_entry_bytes(
						   &(struct locus_sigcache_params){
							   .n_layers = 1, .n_experts = 4,
							   .top_k = 1, .block_tokens = BLOCK }));
	locus_sigcache_destroy(c);
}

static void test_saturates(void **state)
{
	struct locus_sigcache *c = make(1, 2, 1, 1);
	uint8_t a[2] = { 16, 0 };
	uint16_t sig[2] = { 65530, 7 };
	(void)state;

	locus_sigcache_insert(c, 9, a);
	assert_int_equal(locus_sigcache_add(c, 9, sig), 1);
	assert_int_equal(sig[0], 65535);
	assert_int_equal(sig[1], 7);
	locus_sigcache_destroy(c);
}

/* The picked sum (AVX2 where the CPU has it) against the plain loop, saturation included. */
static void test_sum_paths(void **state)
{
	enum { N = 6144 + 7 };
	static uint16_t a[N], b[N];
	static uint8_t c[N];
	locus_sigcache_sum_fn f = locus_sigcache_sum_pick();
	uint32_t x = 7, sat = 0;
	(void)state;

	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < N; i++) {
			x = x * 1103515245u + 12345u;
			a[i] = b[i] = (uint16_t)(x >> 16) | (round % 2 ? 0xff00 : 0);
			c[i] = (uint8_t)(x >> 5);
		}
		f(a + round % 3, c + round % 3, N - round % 3);
		for (int i = round % 3; i < N; i++) {
			uint32_t v = (uint32_t)b[i] + c[i];

			assert_int_equal(a[i], v > 65535 ? 65535 : v);
			sat += v > 65535;
		}
	}
	assert_true(sat > 1000);
}

/* A reference: which of the keys 0..N-1 are in, and with which first byte. */
#define N_KEYS 97u
static void test_random_against_model(void **state)
{
	const uint32_t cap = 40;
	struct locus_sigcache *c = make(1, 1, 1, cap);
	int present[N_KEYS] = { 0 }, val[N_KEYS] = { 0 };
	uint64_t stamp[N_KEYS] = { 0 }, now = 0;
	uint32_t rng = 12345, n_in = 0;
	(void)state;

	for (int it = 0; it < 200000; it++) {
		uint32_t k, op;
		uint64_t key;
		uint8_t v;
		uint16_t sig;

		rng = rng * 1103515245u + 12345u;
		k = (rng >> 8) % N_KEYS;
		op = (rng >> 24) % 4;
		/* keys spread over the space, some sharing low bits, so probe runs form */
		key = ((uint64_t)k << 40) | (k & 3);
		v = (uint8_t)(1 + (rng >> 4) % 16);
		now++;
		if (op <= 1) {
			int r = locus_sigcache_insert(c, key, &v);

			if (present[k])
				assert_int_equal(r, val[k] == v ? LOCUS_SIGCACHE_REFRESHED
								: LOCUS_SIGCACHE_REPLACED);
			else
				assert_int_equal(r, LOCUS_SIGCACHE_INSERTED);
			if (!present[k] && n_in == cap) {
				/* the model evicts its least recently used key too */
				uint32_t old = N_KEYS;

				for (uint32_t j = 0; j < N_KEYS; j++)
					if (present[j] && (old == N_KEYS || stamp[j] < stamp[old]))
						old = j;
				present[old] = 0;
				n_in--;
			}
			if (!present[k])
				n_in++;
			present[k] = 1;
			val[k] = v;
			stamp[k] = now;
		} else if (op == 2) {
			sig = 0;
			assert_int_equal(locus_sigcache_add(c, key, &sig), present[k]);
			assert_int_equal(sig, present[k] ? val[k] : 0);
			if (present[k])
				stamp[k] = now;
		} else {
			assert_int_equal(locus_sigcache_evict(c, key), present[k]);
			if (present[k])
				n_in--;
			present[k] = 0;
		}
		if (it % 1000 == 0)
			for (uint32_t j = 0; j < N_KEYS; j++)
				assert_int_equal(locus_sigcache_contains(c, ((uint64_t)j << 40) | (j & 3)),
						 present[j]);
	}
	locus_sigcache_destroy(c);
}

/*
 * The repository's real trace: every request's prompt cut into 16-token
 * blocks, the full blocks inserted, then each prompt's signature rebuilt
 * from its cached blocks and its last partial block's tokens: equal to the
 * signature of the whole prompt, for every request.
 */
static void test_cached_equals_whole_prompt(void **state)
{
	struct locus_trace *t = NULL;
	struct locus_error err = { 0 };
	struct locus_sigcache *c;
	uint16_t *whole, *cached, *blk;
	uint8_t *blk8;
	size_t cells;
	uint32_t checked = 0, blocks = 0;
	(void)state;

	if (locus_trace_load("tests/data/calib_sample.jsonl", NULL, &t, &err))
		fail_msg("trace: %s", err.msg);
	cells = (size_t)t->n_layers * t->n_experts;
	c = make(t->n_layers, t->n_experts, t->k, 4096);
	whole = calloc(cells, 2);
	cached = calloc(cells, 2);
	blk = calloc(cells, 2);
	blk8 = calloc(cells, 1);
	assert_non_null(whole && cached && blk && blk8);
	for (uint32_t r = 0; r < t->n_requests; r++) {
		const struct locus_trace_req *q = &t->reqs[r];
		const size_t tok = (size_t)t->n_layers * t->k;
		uint32_t full = q->prompt_len / BLOCK;
		uint64_t h = 0xcbf29ce484222325ull ^ r;

		memset(whole, 0, cells * 2);
		memset(cached, 0, cells * 2);
		assert_int_equal(locus_eldr_counts_add(whole, t->n_layers, t->n_experts, t->k,
						       q->prompt, q->prompt_len, &err), 0);
		/* the serving engine's side: each full block's counts, under a chained hash */
		for (uint32_t b = 0; b < full; b++) {
			memset(blk, 0, cells * 2);
			locus_eldr_counts_add(blk, t->n_layers, t->n_experts, t->k,
					      q->prompt + (size_t)b * BLOCK * tok, BLOCK, &err);
			for (size_t i = 0; i < cells; i++)
				blk8[i] = (uint8_t)blk[i];
			assert_int_equal(locus_sigcache_counts_check(c, blk8, &err), 0);
			h = h * 0x100000001b3ull + b;
			locus_sigcache_insert(c, h, blk8);
			blocks++;
		}
		/* locusd's side: the cached blocks, then the new tokens */
		h = 0xcbf29ce484222325ull ^ r;
		for (uint32_t b = 0; b < full; b++) {
			h = h * 0x100000001b3ull + b;
			assert_int_equal(locus_sigcache_add(c, h, cached), 1);
		}
		locus_eldr_counts_add(cached, t->n_layers, t->n_experts, t->k,
				      q->prompt + (size_t)full * BLOCK * tok,
				      q->prompt_len - full * BLOCK, &err);
		assert_memory_equal(cached, whole, cells * 2);
		checked += full > 0;
	}
	print_message("%u requests (%u with a full block), %u blocks of %u tokens, L %u E %u "
		      "k %u: cached blocks + new tokens = the whole prompt, every one\n",
		      t->n_requests, checked, blocks, BLOCK, t->n_layers, t->n_experts, t->k);
	assert_true(checked > 0);
	free(blk8);
	free(blk);
	free(cached);
	free(whole);
	locus_sigcache_destroy(c);
	locus_trace_free(t);
}

/* ---- prefix checkpoints ------------------------------------------------------------- */

#define CK_L 2u
#define CK_E 8u
#define CK_CELLS (CK_L * CK_E)
#define CK_BRANCHES 6u
#define CK_DEPTH 20u

/* A block's counts, a function of its (chained) hash: 16 tokens, top-2 per layer. */
static void ck_counts(uint64_t h, uint8_t *c)
{
	memset(c, 0, CK_CELLS);
	for (uint32_t t = 0; t < BLOCK; t++)
		for (uint32_t l = 0; l < CK_L; l++) {
			h = h * 6364136223846793005ull + 1442695040888963407ull;
			c[l * CK_E + (h >> 60) % 4] += 1;
			c[l * CK_E + 4 + (h >> 56) % 4] += 1;
		}
}

/* A request of n_cached named + n_new new blocks of chain hash[], summed by the cache. */
static void ck_route(struct locus_sigcache *c, const uint64_t *hash, uint32_t n_cached,
		     uint32_t n_new, uint16_t *sum, struct locus_sigcache_prompt_sum *out)
{
	static uint8_t nb[CK_DEPTH * (8 + CK_CELLS)];

	for (uint32_t j = 0; j < n_new; j++) {
		memcpy(nb + j * (8 + CK_CELLS), &hash[n_cached + j], 8);
		ck_counts(hash[n_cached + j], nb + j * (8 + CK_CELLS) + 8);
	}
	locus_sigcache_prompt_sum(c, &(struct locus_sigcache_prompt){
		.cached = hash, .n_cached = n_cached, .new_blocks = nb,
		.new_stride = 8 + CK_CELLS, .n_new = n_new }, sum, out);
}

/*
 * A cache of ckpts checkpoints beside their ckpts x C blocks, and extra
 * blocks more (fewer than one checkpoint's unit: the split gives them to blocks).
 */
static struct locus_sigcache *make_ck(uint32_t C, uint32_t ckpts, uint32_t extra)
{
	struct locus_sigcache_params p = { .n_layers = CK_L, .n_experts = CK_E, .top_k = 2,
					   .block_tokens = BLOCK, .checkpoint_blocks = C };
	struct locus_sigcache *c = NULL;
	struct locus_error err = { 0 };
	struct locus_sigcache_stats st;

	p.capacity_bytes = ckpts * (C * locus_sigcache_entry_bytes(&p) +
				    locus_sigcache_checkpoint_bytes(&p)) +
			   extra * locus_sigcache_entry_bytes(&p);
	if (locus_sigcache_create(&p, &c, &err))
		fail_msg("create: %s", err.msg);
	locus_sigcache_stats(c, &st);
	assert_int_equal(st.capacity, ckpts * C + extra);
	assert_int_equal(st.ckpt_capacity, ckpts);
	return c;
}

/* Sizes: the 48 x 128 figures of the README, the share, and too small a capacity. */
static void test_checkpoint_params(void **state)
{
	struct locus_sigcache_params p = { .n_layers = 48, .n_experts = 128, .top_k = 8,
					   .block_tokens = 16, .capacity_bytes = 32u << 20,
					   .checkpoint_blocks = 8 };
	struct locus_sigcache *c = NULL;
	struct locus_error err = { 0 };
	uint64_t nb, nc;
	(void)state;

	assert_int_equal(locus_sigcache_checkpoint_bytes(&p), 32 + 48 * 128 * 2);
	locus_sigcache_split(&p, &nb, &nc);
	/* 33,554,432 / (8 x 6,176 + 12,320) = 543 checkpoints; the rest in blocks */
	assert_int_equal(nc, 543);
	assert_int_equal(nb, (33554432 - 543 * 12320) / 6176);
	p.capacity_bytes = 8 * 6176 + 12320 - 1;
	assert_int_equal(locus_sigcache_create(&p, &c, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "sig_cache_checkpoint_blocks = 0"));
	p.checkpoint_blocks = 0;
	assert_int_equal(locus_sigcache_create(&p, &c, &err), 0);
	assert_int_equal(locus_sigcache_checkpoint_insert(c, 1, 0, (uint16_t[6144]){ 0 }),
			 -EOPNOTSUPP);
	locus_sigcache_destroy(c);
	p.checkpoint_blocks = LOCUS_SIGCACHE_MAX_CHECKPOINT_BLOCKS + 1;
	assert_int_equal(locus_sigcache_entry_bytes(&p), 0);
}

/*
 * Written where the whole prefix is known only; a later evicted block makes
 * the route partial with the sum exact for what is known; EVICT drops a
 * block's checkpoint; an earlier evicted block under a checkpoint is still
 * known; a checkpoint at another depth is not used.
 */
static void test_checkpoint_rules(void **state)
{
	struct locus_sigcache *c = make_ck(2, 8, 0);
	struct locus_sigcache_prompt_sum ps;
	struct locus_sigcache_stats st;
	uint64_t h[8];
	uint8_t blk[8][CK_CELLS];
	uint16_t sum[CK_CELLS], want[CK_CELLS];
	(void)state;

	for (uint32_t i = 0; i < 8; i++) {
		h[i] = 0x1000 + i * 0x9e3779b97f4a7c15ull;
		ck_counts(h[i], blk[i]);
	}
	/* 0..2 named but not cached: 3..7 new; no checkpoint from this partial prefix */
	ck_route(c, h, 3, 5, sum, &ps);
	assert_int_equal(ps.known, 0);
	locus_sigcache_stats(c, &st);
	assert_int_equal(st.ckpt_entries, 0);
	assert_null(locus_sigcache_checkpoint_find(c, h[3], 3));
	assert_null(locus_sigcache_checkpoint_find(c, h[5], 5));
	/* a shorter prompt of blocks 0..2, all new: the checkpoint of block 1 */
	ck_route(c, h, 0, 3, sum, &ps);
	locus_sigcache_stats(c, &st);
	assert_int_equal(st.ckpt_entries, 1);
	assert_non_null(locus_sigcache_checkpoint_find(c, h[1], 1));
	/* the whole prompt named: from checkpoint 1, blocks 2..7 summed, 3, 5, 7 written */
	ck_route(c, h, 8, 0, sum, &ps);
	memset(want, 0, sizeof(want));
	for (uint32_t i = 0; i < 8; i++)
		for (uint32_t x = 0; x < CK_CELLS; x++)
			want[x] = (uint16_t)(want[x] + blk[i][x]);
	assert_memory_equal(sum, want, sizeof(want));
	assert_int_equal(ps.known, 8);
	assert_int_equal(ps.from_checkpoint, 2);
	assert_int_equal(ps.summed, 6);
	assert_memory_equal(locus_sigcache_checkpoint_find(c, h[7], 7), want, sizeof(want));
	ck_route(c, h, 8, 0, sum, &ps);
	assert_memory_equal(sum, want, sizeof(want));
	assert_int_equal(ps.from_checkpoint, 8);
	assert_int_equal(ps.summed, 0);
	/* EVICT 6 and 7 (7's checkpoint with it): from checkpoint 5, 6 and 7 missing */
	assert_int_equal(locus_sigcache_evict(c, h[6]), 1);
	assert_int_equal(locus_sigcache_evict(c, h[7]), 1);
	assert_null(locus_sigcache_checkpoint_find(c, h[7], 7));
	locus_sigcache_stats(c, &st);
	assert_int_equal(st.ckpt_evictions[LOCUS_SIGCACHE_EVICT_EXPLICIT], 1);
	assert_int_equal(st.evictions[LOCUS_SIGCACHE_EVICT_EXPLICIT], 2);
	ck_route(c, h, 8, 0, sum, &ps);
	for (uint32_t x = 0; x < CK_CELLS; x++)
		want[x] = (uint16_t)(want[x] - blk[6][x] - blk[7][x]);
	assert_memory_equal(sum, want, sizeof(want));
	assert_int_equal(ps.known, 6);
	assert_int_equal(ps.from_checkpoint, 6);
	/* an earlier block evicted under checkpoint 5: still known, a miss counted */
	assert_int_equal(locus_sigcache_evict(c, h[0]), 1);
	locus_sigcache_stats(c, &st);
	ck_route(c, h, 6, 0, sum, &ps);
	assert_memory_equal(sum, want, sizeof(want));
	assert_int_equal(ps.known, 6);
	assert_int_equal(ps.from_checkpoint, 6);
	{
		struct locus_sigcache_stats st2;

		locus_sigcache_stats(c, &st2);
		assert_int_equal(st2.misses - st.misses, 1);
	}
	/* h[5] stored at depth 5 named at depth 1 (hashes not chained): not used, counted */
	{
		uint64_t other[2] = { 0x77, h[5] };

		ck_route(c, other, 2, 0, sum, &ps);
		assert_int_equal(ps.from_checkpoint, 0);
		assert_int_equal(ps.known, 1);
		locus_sigcache_stats(c, &st);
		assert_int_equal(st.ckpt_mismatch, 1);
	}
	locus_sigcache_destroy(c);
}

/* Checkpoints take their own LRU within their share; blocks keep theirs. */
static void test_checkpoint_lru(void **state)
{
	struct locus_sigcache *c = make_ck(2, 2, 2); /* 6 blocks, 2 checkpoints */
	struct locus_sigcache_prompt_sum ps;
	struct locus_sigcache_stats st;
	uint64_t a[4], b[2], d[2];
	uint16_t sum[CK_CELLS];
	(void)state;

	for (uint32_t i = 0; i < 4; i++)
		a[i] = 0xa0 + i;
	b[0] = 0xb0, b[1] = 0xb1, d[0] = 0xd0, d[1] = 0xd1;
	ck_route(c, a, 0, 4, sum, &ps); /* checkpoints a1, a3 */
	ck_route(c, b, 0, 2, sum, &ps); /* b1: a1 (least recent) goes */
	locus_sigcache_stats(c, &st);
	assert_int_equal(st.ckpt_entries, 2);
	assert_int_equal(st.ckpt_evictions[LOCUS_SIGCACHE_EVICT_LRU], 1);
	assert_int_equal(st.entries, 6);
	assert_null(locus_sigcache_checkpoint_find(c, a[1], 1));
	assert_non_null(locus_sigcache_checkpoint_find(c, a[3], 3));
	/* a named again: from a3, its blocks touched; d then pushes out b's blocks and b1 */
	ck_route(c, a, 4, 0, sum, &ps);
	assert_int_equal(ps.from_checkpoint, 4);
	assert_int_equal(ps.known, 4);
	ck_route(c, d, 0, 2, sum, &ps);
	assert_null(locus_sigcache_checkpoint_find(c, b[1], 1));
	assert_non_null(locus_sigcache_checkpoint_find(c, a[3], 3));
	assert_non_null(locus_sigcache_checkpoint_find(c, d[1], 1));
	assert_false(locus_sigcache_contains(c, b[0]) || locus_sigcache_contains(c, b[1]));
	for (uint32_t i = 0; i < 4; i++)
		assert_true(locus_sigcache_contains(c, a[i]));
	locus_sigcache_stats(c, &st);
	assert_int_equal(st.entries, 6);
	assert_int_equal(st.evictions[LOCUS_SIGCACHE_EVICT_LRU], 2);
	assert_int_equal(st.ckpt_evictions[LOCUS_SIGCACHE_EVICT_LRU], 2);
	assert_int_equal(st.ckpt_entries, 2);
	assert_int_equal(st.bytes_used, 6 * (32 + 64) + 2 * (32 + 64));
	locus_sigcache_destroy(c);
}

/*
 * Random requests over a tree of chained prefixes, random EVICTs, both
 * stores under LRU pressure: every sum is exactly the true counts of the
 * blocks it says it knows (the checkpoint's prefix, the found blocks after
 * it, the new ones), and every checkpoint left in the cache holds its
 * prefix's true sum.
 */
static void test_checkpoint_random(void **state)
{
	static uint64_t chain[CK_BRANCHES][CK_DEPTH];
	static uint8_t truth[CK_BRANCHES][CK_DEPTH][CK_CELLS];
	uint32_t rng = 99, partial = 0, from_ck = 0;
	(void)state;

	for (uint32_t C = 1; C <= 5; C += 2) {
		struct locus_sigcache *c = make_ck(C, 4, 1);

		/* branches share their first blocks with branch 0 for a while */
		for (uint32_t b = 0; b < CK_BRANCHES; b++) {
			uint32_t split = b * 3;

			for (uint32_t i = 0; i < CK_DEPTH; i++) {
				uint64_t parent = i ? chain[b][i - 1] : 0xcbf29ce484222325ull;

				chain[b][i] = i < split ? chain[0][i]
						       : (parent ^ (b * 1000 + i)) * 0x100000001b3ull;
				ck_counts(chain[b][i], truth[b][i]);
			}
		}
		for (int it = 0; it < 20000; it++) {
			struct locus_sigcache_prompt_sum ps;
			uint16_t sum[CK_CELLS], want[CK_CELLS] = { 0 };
			uint32_t b, n, nc, from = 0, known = 0;
			int found[CK_DEPTH];

			rng = rng * 1103515245u + 12345u;
			b = (rng >> 8) % CK_BRANCHES;
			n = 1 + (rng >> 12) % CK_DEPTH;
			nc = (rng >> 20) % (n + 1);
			if ((rng >> 28) % 4 == 0) {
				locus_sigcache_evict(c, chain[b][(rng >> 4) % CK_DEPTH]);
				continue;
			}
			/* what the cache holds before: the deepest usable checkpoint, the blocks */
			for (uint32_t q = C ? nc / C : 0; q > 0 && !from; q--)
				if (locus_sigcache_checkpoint_find(c, chain[b][q * C - 1], q * C - 1))
					from = q * C;
			for (uint32_t i = 0; i < nc; i++)
				found[i] = locus_sigcache_contains(c, chain[b][i]);
			ck_route(c, chain[b], nc, n - nc, sum, &ps);
			for (uint32_t i = 0; i < n; i++)
				if (i < from || i >= nc || found[i]) {
					for (uint32_t x = 0; x < CK_CELLS; x++)
						want[x] = (uint16_t)(want[x] + truth[b][i][x]);
					known += i < nc;
				}
			assert_memory_equal(sum, want, sizeof(want));
			assert_int_equal(ps.known, known);
			assert_int_equal(ps.from_checkpoint, from);
			partial += known < nc;
			from_ck += from > 0;
			/* every checkpoint of this branch in the cache is its prefix's true sum */
			memset(want, 0, sizeof(want));
			for (uint32_t i = 0; i < CK_DEPTH; i++) {
				const uint16_t *ck = locus_sigcache_checkpoint_find(c, chain[b][i], i);

				for (uint32_t x = 0; x < CK_CELLS; x++)
					want[x] = (uint16_t)(want[x] + truth[b][i][x]);
				if (ck)
					assert_memory_equal(ck, want, sizeof(want));
			}
		}
		locus_sigcache_destroy(c);
	}
	print_message("%u partial routes, %u summed from a checkpoint: every sum exact for "
		      "what it knows, every checkpoint its prefix's sum\n", partial, from_ck);
	assert_true(partial > 1000 && from_ck > 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_params),
		cmocka_unit_test(test_counts_check),
		cmocka_unit_test(test_lru_refresh_replace),
		cmocka_unit_test(test_saturates),
		cmocka_unit_test(test_sum_paths),
		cmocka_unit_test(test_random_against_model),
		cmocka_unit_test(test_cached_equals_whole_prompt),
		cmocka_unit_test(test_checkpoint_params),
		cmocka_unit_test(test_checkpoint_rules),
		cmocka_unit_test(test_checkpoint_lru),
		cmocka_unit_test(test_checkpoint_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
