// SPDX-License-Identifier: MIT
/*
 * The blocks ROUTE and EVICT formats (shm/locus_blocks.h): a request built
 * by locus_blocks_build checks and lays out where the header says; every
 * rule refused with its fault (header fields, shape, block size, caps,
 * length, duplicate hashes in either list or across them, counts over the
 * block's tokens or a layer over block_tokens x top-k, the tail's
 * signature header); the duplicate check against brute force on random
 * lists; the body check reads nothing past the tail's header.
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

#include "locus_blocks.h"

#define L 3
#define E 8
#define BT 16
#define K 2
#define NC 5
#define NN 2

static const struct locus_blocks_shape shape = { L, E, BT, K };
static uint64_t req[4096], scratch[LOCUS_BLOCKS_MAX_CACHED + LOCUS_BLOCKS_MAX_NEW];
static uint8_t tail[4096] __attribute__((aligned(8)));

/* A valid request of NC cached and NN new blocks into req: its length. */
static size_t build(void)
{
	uint64_t cached[NC], nh[NN];
	uint8_t counts[NN][L * E] = { { 0 } };
	uint16_t ids[3][L][K];
	struct locus_blocks_route r;
	long n;

	for (int i = 0; i < NC; i++)
		cached[i] = 0x1000 + (uint64_t)i;
	for (int i = 0; i < NN; i++) {
		nh[i] = 0x2000 + (uint64_t)i;
		for (int l = 0; l < L; l++) {
			counts[i][l * E + l] = BT;      /* every token on expert l ... */
			counts[i][l * E + 7] = BT;      /* ... and 7: top-2 */
		}
	}
	for (int t = 0; t < 3; t++)
		for (int l = 0; l < L; l++) {
			ids[t][l][0] = (uint16_t)t;
			ids[t][l][1] = 5;
		}
	assert_true(locus_eldr_sig_build(tail, sizeof(tail), L, E, K, &ids[0][0][0], 3, 0, NULL) > 0);
	r = (struct locus_blocks_route){ .block_tokens = BT, .n_cached = NC, .cached = cached,
					 .n_new = NN, .new_hashes = nh,
					 .new_counts = &counts[0][0], .tail = tail };
	n = locus_blocks_build(req, sizeof(req), &r, NULL);
	assert_true(n > 0);
	return (size_t)n;
}

static int check(size_t len, enum locus_blocks_fault *f, struct locus_error *err)
{
	struct locus_blocks_layout lay;

	return locus_blocks_check(req, len, &shape, scratch, &lay, f, err);
}

static struct locus_blocks_hdr *hdr(void)
{
	return (struct locus_blocks_hdr *)req;
}

static void test_build_and_layout(void **state)
{
	size_t len = build();
	struct locus_blocks_layout lay;
	enum locus_blocks_fault f = LOCUS_BLOCKS_FORMAT;
	struct locus_error err = { 0 };
	(void)state;

	assert_int_equal(len, locus_blocks_req_len(L, E, NC, NN));
	assert_int_equal(len, 32 + NC * 8 + NN * (8 + 24) + locus_eldr_sig_len(L, E));
	assert_int_equal(locus_blocks_check(req, len, &shape, scratch, &lay, &f, &err), 0);
	assert_int_equal(f, LOCUS_BLOCKS_OK);
	assert_int_equal(lay.n_cached, NC);
	assert_int_equal(lay.n_new, NN);
	assert_int_equal(locus_blocks_cached(req, &lay)[4], 0x1004);
	assert_int_equal(locus_blocks_new_hash(req, &lay, 1), 0x2001);
	assert_int_equal(locus_blocks_new_counts(req, &lay, 1)[2 * E + 2], BT);
	assert_memory_equal((uint8_t *)req + lay.off_sig, tail, lay.sig_len);
	assert_int_equal(lay.off_sig + lay.sig_len, len);
	/* does not fit */
	assert_int_equal(locus_blocks_build(req, len - NN * (8 + 24) - 1,
					    &(struct locus_blocks_route){
						    .block_tokens = BT, .tail = tail, .n_cached = NC,
						    .cached = (uint64_t[NC]){ 0 } }, &err),
			 -LOCUS_ERANGE);
}

/* Each header rule, one at a time, on a fresh valid request. */
static void test_header_refusals(void **state)
{
	enum locus_blocks_fault f;
	struct locus_error err;
	size_t len;
	(void)state;

	len = build();
	hdr()->magic ^= 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_EBADMAGIC);
	assert_int_equal(f, LOCUS_BLOCKS_FORMAT);
	len = build();
	hdr()->version = 2;
	assert_int_equal(check(len, &f, &err), -LOCUS_EVERSION);
	len = build();
	hdr()->flags = 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_EPROTO);
	len = build();
	hdr()->reserved0 = 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_EPROTO);
	len = build();
	hdr()->reserved[7] = 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_EPROTO);
	len = build();
	hdr()->block_tokens = 32;
	assert_int_equal(check(len, &f, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "blocks of 32 tokens, this cache keeps blocks of 16"));
	len = build();
	hdr()->n_experts = 16;
	assert_int_equal(check(len, &f, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "the table is 3x8"));
	len = build();
	hdr()->n_cached = LOCUS_BLOCKS_MAX_CACHED + 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "at most 16384 and 256"));
	len = build();
	hdr()->n_new = LOCUS_BLOCKS_MAX_NEW + 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_ERANGE);
	/* a list length that does not match the descriptor's len, either way */
	len = build();
	hdr()->n_cached = NC + 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_ETRUNCATED);
	len = build();
	hdr()->n_cached = NC - 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_ERANGE);
	len = build();
	assert_int_equal(check(len - 1, &f, &err), -LOCUS_ETRUNCATED);
	assert_int_equal(check(len + 8, &f, &err), -LOCUS_ERANGE);
	assert_int_equal(check(31, &f, &err), -LOCUS_ETRUNCATED);
	assert_int_equal(f, LOCUS_BLOCKS_FORMAT);
}

static void test_body_refusals(void **state)
{
	struct locus_blocks_layout lay;
	enum locus_blocks_fault f;
	struct locus_error err;
	size_t len;
	uint8_t *p = (uint8_t *)req;
	(void)state;

	/* duplicates: within the cached list, within the new blocks, across the two */
	len = build();
	req[4 + 3] = 0x1001;
	assert_int_equal(check(len, &f, &err), -EEXIST);
	assert_int_equal(f, LOCUS_BLOCKS_DUPLICATE);
	assert_non_null(strstr(err.msg, "0x0000000000001001 twice"));
	len = build();
	assert_int_equal(check(len, &f, NULL), 0);
	assert_int_equal(locus_blocks_check(req, len, &shape, scratch, &lay, &f, NULL), 0);
	memcpy(p + lay.off_new + lay.new_stride, p + lay.off_new, 8);
	assert_int_equal(check(len, &f, &err), -EEXIST);
	assert_int_equal(f, LOCUS_BLOCKS_DUPLICATE);
	len = build();
	memcpy(p + lay.off_new, &req[4 + 0], 8);
	assert_int_equal(check(len, &f, &err), -EEXIST);
	assert_int_equal(f, LOCUS_BLOCKS_DUPLICATE);
	/* counts: one over the block's tokens; a layer over block_tokens x top-k */
	len = build();
	p[lay.off_new + 8 + 1 * E + 3] = BT + 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_ERANGE);
	assert_int_equal(f, LOCUS_BLOCKS_COUNTS);
	assert_non_null(strstr(err.msg, "layer 1 expert 3 counts 17"));
	len = build();
	p[lay.off_new + lay.new_stride + 8 + 2 * E + 4] = 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_ERANGE);
	assert_int_equal(f, LOCUS_BLOCKS_COUNTS);
	assert_non_null(strstr(err.msg, "layer 2 sums to 33"));
	/* the tail signature's header */
	len = build();
	p[lay.off_sig] ^= 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_EBADMAGIC);
	assert_int_equal(f, LOCUS_BLOCKS_SIGNATURE);
	len = build();
	((struct locus_eldr_sig_hdr *)(p + lay.off_sig))->n_layers = L + 1;
	assert_int_equal(check(len, &f, &err), -LOCUS_ERANGE);
	assert_int_equal(f, LOCUS_BLOCKS_SIGNATURE);
	/* the tail's counts carry no structure: any value passes */
	len = build();
	memset(p + lay.off_sig + 32, 0xff, lay.sig_len - 32);
	assert_int_equal(check(len, &f, &err), 0);
}

/* The body check of a prefix copy agrees with the whole check (the engine's way). */
static void test_prefix_only(void **state)
{
	static uint64_t copy[4096];
	struct locus_blocks_layout lay;
	enum locus_blocks_fault f;
	size_t len = build();
	(void)state;

	assert_int_equal(locus_blocks_hdr_check((void *)req, len, &shape, &lay, NULL), 0);
	memset(copy, 0xa5, sizeof(copy));
	memcpy(copy, req, lay.off_sig + 32);
	assert_int_equal(locus_blocks_body_check(copy, &lay, &shape, scratch, &f, NULL), 0);
	((uint8_t *)req)[lay.off_new + 8] = BT + 1;
	memcpy(copy, req, lay.off_sig + 32);
	assert_int_equal(locus_blocks_body_check(copy, &lay, &shape, scratch, &f, NULL),
			 -LOCUS_ERANGE);
	assert_int_equal(f, LOCUS_BLOCKS_COUNTS);
}

/* Random cached lists with and without a repeat: refused exactly when brute force finds one. */
static void test_duplicates_random(void **state)
{
	static uint64_t h[600];
	struct locus_blocks_layout lay;
	enum locus_blocks_fault f;
	uint64_t x = 88172645463325252ull;
	int refused = 0, accepted = 0;
	(void)state;

	for (int round = 0; round < 400; round++) {
		uint32_t n = 1 + (uint32_t)(round * 7 % 600);
		struct locus_blocks_route r;
		int dup = 0, ret;
		long len;

		for (uint32_t i = 0; i < n; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			h[i] = round % 3 ? x : x % 512; /* small values repeat often */
		}
		for (uint32_t i = 0; i < n && !dup; i++)
			for (uint32_t j = 0; j < i && !dup; j++)
				dup = h[i] == h[j];
		build();
		r = (struct locus_blocks_route){ .block_tokens = BT, .n_cached = n, .cached = h,
						 .tail = tail };
		len = locus_blocks_build(req, sizeof(req), &r, NULL);
		assert_true(len > 0);
		ret = locus_blocks_check(req, (size_t)len, &shape, scratch, &lay, &f, NULL);
		assert_int_equal(ret, dup ? -EEXIST : 0);
		refused += dup;
		accepted += !dup;
	}
	assert_true(refused > 50 && accepted > 50);
}

static void test_evict(void **state)
{
	uint64_t h[3] = { 1, 2, 3 };
	struct locus_evict_hdr e;
	long n;
	(void)state;

	n = locus_evict_build(req, sizeof(req), h, 3, NULL);
	assert_int_equal(n, 16 + 24);
	memcpy(&e, req, sizeof(e));
	assert_int_equal(locus_evict_hdr_check(&e, (size_t)n, NULL), 0);
	assert_int_equal(locus_evict_hdr_check(&e, (size_t)n - 8, NULL), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_evict_hdr_check(&e, (size_t)n + 8, NULL), -LOCUS_ERANGE);
	e.magic ^= 1;
	assert_int_equal(locus_evict_hdr_check(&e, (size_t)n, NULL), -LOCUS_EBADMAGIC);
	e.magic ^= 1;
	e.reserved = 1;
	assert_int_equal(locus_evict_hdr_check(&e, (size_t)n, NULL), -LOCUS_EPROTO);
	e.reserved = 0;
	e.n_hashes = LOCUS_EVICT_MAX + 1;
	assert_int_equal(locus_evict_hdr_check(&e, locus_evict_req_len(LOCUS_EVICT_MAX + 1), NULL),
			 -LOCUS_ERANGE);
	assert_int_equal(locus_evict_build(req, 16 + 8, h, 3, NULL), -LOCUS_ERANGE);
}

static void test_counts_build(void **state)
{
	uint16_t ids[2][1][3] = { { { 1, 1, 2 } }, { { 2, 3, 0 } } };
	uint8_t c[4];
	(void)state;

	assert_int_equal(locus_blocks_counts_build(c, 1, 4, 3, &ids[0][0][0], 2, NULL), 0);
	/* the repeated 1 in token 0 counts once */
	assert_int_equal(c[0], 1);
	assert_int_equal(c[1], 1);
	assert_int_equal(c[2], 2);
	assert_int_equal(c[3], 1);
	ids[1][0][2] = 4;
	assert_int_equal(locus_blocks_counts_build(c, 1, 4, 3, &ids[0][0][0], 2, NULL),
			 -LOCUS_ERANGE);
	assert_int_equal(locus_blocks_counts_build(c, 1, 4, 3, &ids[0][0][0], 256, NULL),
			 -LOCUS_ERANGE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_build_and_layout),
		cmocka_unit_test(test_header_refusals),
		cmocka_unit_test(test_body_refusals),
		cmocka_unit_test(test_prefix_only),
		cmocka_unit_test(test_duplicates_random),
		cmocka_unit_test(test_evict),
		cmocka_unit_test(test_counts_build),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
