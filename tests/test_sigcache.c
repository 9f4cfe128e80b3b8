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

	/* 48 x 128 bytes of counts and the 32-byte header: the README's figure */
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
