// SPDX-License-Identifier: MIT
/*
 * The GRACE placement set format (shm/locus_graceset.h): a valid set and
 * every refusal by class (missing group, overlapping groups, dims that
 * disagree, a group's placement outside its ranks), checksums, versions,
 * truncation and the builder.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "graceset_util.h"
#include "locus_graceset.h"
#include "locus_graceset_priv.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

#define NL 2
#define NE 8
#define NO LOCUS_GRACE_NO_RANK

/* Group table on 1 node x 4: experts spread over ranks first..first+n-1, R replicas of 0. */
static void *group_table(uint32_t first, uint32_t n, uint32_t R, uint32_t nodes, uint32_t gpn,
			 uint32_t layers, size_t *len)
{
	uint16_t pri[NE], rep[NE * 4];

	for (uint32_t e = 0; e < NE; e++)
		pri[e] = (uint16_t)(first + e % n);
	for (uint32_t i = 0; i < NE * 4; i++)
		rep[i] = NO;
	for (uint32_t i = 0; i < R; i++)
		rep[i] = (uint16_t)(first + 1 + i); /* expert 0's extra copies */
	return gs_table(layers, NE, nodes, gpn, R, pri, rep, len);
}

static void *two_groups(uint32_t f0, uint32_t n0, uint32_t id0, uint32_t f1, uint32_t n1,
			uint32_t id1, size_t *len)
{
	struct gs_group g[2] = {
		{ .id = id0, .first = f0, .n = n0 }, { .id = id1, .first = f1, .n = n1 },
	};

	g[0].blob = group_table(f0, n0, n0 - 1, 1, 4, NL, &g[0].len);
	g[1].blob = group_table(f1, n1, 0, 1, 4, NL, &g[1].len);
	return gs_set(g, 2, len);
}

static int check(const void *blob, size_t len, enum locus_graceset_problem *why,
		 struct locus_error *err)
{
	return locus_graceset_blob_check(blob, len, NULL, NULL, NULL, why, err);
}

static void test_valid_set(void **state)
{
	struct locus_graceset_group g[LOCUS_GRACESET_MAX_GROUPS];
	enum locus_graceset_problem why = LOCUS_GRACESET_DIMS;
	struct locus_error err;
	const void *pl;
	size_t len, plen;
	/* listed out of id order: groups[] is indexed by id */
	void *b = two_groups(1, 3, 1, 0, 1, 0, &len);
	(void)state;

	if (locus_graceset_blob_check(b, len, &pl, &plen, g, &why, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(why, LOCUS_GRACESET_OK);
	assert_int_equal(((const struct locus_graceset_hdr *)pl)->n_groups, 2);
	assert_int_equal(g[0].entry->first_rank, 0);
	assert_int_equal(g[0].entry->n_ranks, 1);
	assert_int_equal(g[1].entry->first_rank, 1);
	assert_int_equal(g[1].entry->n_ranks, 3);
	assert_int_equal(((const struct locus_grace_dims *)g[1].payload)->max_replicas, 2);
	assert_int_equal(locus_graceset_table_validate_cb(b, len, NULL, &err), 0);
	/* a set is no GRACE table, and the other way round */
	assert_int_equal(locus_grace_blob_check(b, len, NULL, NULL, &err), -LOCUS_ERANGE);
	free(b);
}

static void expect(void *b, size_t len, int code, enum locus_graceset_problem want,
		   const char *needle)
{
	enum locus_graceset_problem why = LOCUS_GRACESET_OK;
	struct locus_error err = { 0 };

	assert_int_equal(check(b, len, &why, &err), code);
	assert_int_equal(why, want);
	if (!strstr(err.msg, needle))
		fail_msg("message '%s' lacks '%s'", err.msg, needle);
	free(b);
}

static void test_missing_group(void **state)
{
	struct gs_group g[1] = { { .id = 0, .first = 0, .n = 2 } };
	size_t len;
	void *blob;
	(void)state;

	/* ranks 2..3 in no group */
	g[0].blob = group_table(0, 2, 1, 1, 4, NL, &g[0].len);
	blob = gs_set(g, 1, &len);
	expect(blob, len, -LOCUS_ERANGE, LOCUS_GRACESET_MISSING_GROUP,
	       "ranks 2..3");
	/* ids 0 and 2 of two groups: group 1 is missing */
	blob = two_groups(0, 2, 0, 2, 2, 2, &len);
	expect(blob, len, -LOCUS_ERANGE,
	       LOCUS_GRACESET_MISSING_GROUP, "group id 2");
}

static void test_overlap(void **state)
{
	struct gs_group g[2] = { { .id = 0, .first = 0, .n = 3 }, { .id = 1, .first = 2, .n = 2 } };
	size_t len;
	void *blob;
	(void)state;

	g[0].blob = group_table(0, 3, 0, 1, 4, NL, &g[0].len);
	g[1].blob = group_table(2, 2, 0, 1, 4, NL, &g[1].len);
	blob = gs_set(g, 2, &len);
	expect(blob, len, -LOCUS_ERANGE, LOCUS_GRACESET_OVERLAP,
	       "overlap at rank 2");
	blob = two_groups(0, 2, 1, 2, 2, 1, &len);
	expect(blob, len, -LOCUS_ERANGE, LOCUS_GRACESET_OVERLAP,
	       "group 1 twice");
}

static void test_dims_disagree(void **state)
{
	struct gs_group g[2] = { { .id = 0, .first = 0, .n = 2 }, { .id = 1, .first = 2, .n = 2 } };
	size_t len;
	void *blob;
	(void)state;

	/* group 1 fitted for another cluster shape (2 nodes x 2 GPUs) */
	g[0].blob = group_table(0, 2, 0, 1, 4, NL, &g[0].len);
	g[1].blob = group_table(2, 2, 0, 2, 2, NL, &g[1].len);
	blob = gs_set(g, 2, &len);
	expect(blob, len, -LOCUS_ERANGE, LOCUS_GRACESET_DIMS, "2 x 2 GPUs");
	/* group 1 for another model depth */
	g[0].blob = group_table(0, 2, 0, 1, 4, NL, &g[0].len);
	g[1].blob = group_table(2, 2, 0, 1, 4, NL + 1, &g[1].len);
	blob = gs_set(g, 2, &len);
	expect(blob, len, -LOCUS_ERANGE, LOCUS_GRACESET_DIMS, "3 layers");
}

static void test_placement_outside_group(void **state)
{
	struct gs_group g[2] = { { .id = 0, .first = 0, .n = 2 }, { .id = 1, .first = 2, .n = 2 } };
	uint16_t pri[NE], rep[NE];
	size_t len;
	void *blob;
	(void)state;

	for (uint32_t e = 0; e < NE; e++) {
		pri[e] = (uint16_t)(2 + e % 2);
		rep[e] = NO;
	}
	pri[3] = 1; /* group 1's expert 3 on group 0's rank 1 */
	g[0].blob = group_table(0, 2, 0, 1, 4, NL, &g[0].len);
	g[1].blob = gs_table(NL, NE, 1, 4, 1, pri, rep, &g[1].len);
	blob = gs_set(g, 2, &len);
	expect(blob, len, -LOCUS_ERANGE, LOCUS_GRACESET_MALFORMED,
	       "expert 3 on rank 1, outside the group");
	pri[3] = 3;
	rep[4] = 0; /* a replica outside */
	g[0].blob = group_table(0, 2, 0, 1, 4, NL, &g[0].len);
	g[1].blob = gs_table(NL, NE, 1, 4, 1, pri, rep, &g[1].len);
	blob = gs_set(g, 2, &len);
	expect(blob, len, -LOCUS_ERANGE, LOCUS_GRACESET_MALFORMED,
	       "replica on rank 0");
	/* as many replica slots as the group has ranks */
	rep[4] = NO;
	g[0].blob = group_table(0, 2, 0, 1, 4, NL, &g[0].len);
	{
		uint16_t rep2[NE * 2];

		for (uint32_t i = 0; i < NE * 2; i++)
			rep2[i] = NO;
		g[1].blob = gs_table(NL, NE, 1, 4, 2, pri, rep2, &g[1].len);
	}
	blob = gs_set(g, 2, &len);
	expect(blob, len, -LOCUS_ERANGE, LOCUS_GRACESET_MALFORMED,
	       "2 replica slots per expert, the group has 2 ranks");
}

static void test_bytes(void **state)
{
	struct locus_graceset_entry *x;
	struct locus_graceset_hdr *h;
	struct locus_error err;
	size_t len;
	uint8_t *b = two_groups(0, 2, 0, 2, 2, 1, &len), *c = malloc(len + 8);
	(void)state;

	assert_int_equal(check(b, len, NULL, &err), 0);
	/* any payload byte changed: the outer checksum */
	memcpy(c, b, len);
	c[64 + 100] ^= 1;
	assert_int_equal(check(c, len, NULL, &err), -LOCUS_ECRC);
	/* a byte of group 1's table changed and the set resealed: group 1's own checksum */
	memcpy(c, b, len);
	h = (struct locus_graceset_hdr *)(c + 64);
	x = (struct locus_graceset_entry *)(h + 1);
	c[64 + x[1].offset + 64 + 40] ^= 1;
	assert_int_equal(locus_tbl_seal(c, len, LOCUS_TBL_GRACE_SET, LOCUS_GRACESET_KIND_VERSION,
					len - 64), 0);
	assert_int_equal(check(c, len, NULL, &err), -LOCUS_ECRC);
	assert_non_null(strstr(err.msg, "group 1"));
	/* another layout version */
	memcpy(c, b, len);
	assert_int_equal(locus_tbl_seal(c, len, LOCUS_TBL_GRACE_SET, 2, len - 64), 0);
	assert_int_equal(check(c, len, NULL, &err), -LOCUS_EVERSION);
	/* group 0's table moved to an unaligned offset, or past the end */
	memcpy(c, b, len);
	x = (struct locus_graceset_entry *)((struct locus_graceset_hdr *)(c + 64) + 1);
	x[0].offset += 4;
	assert_int_equal(locus_tbl_seal(c, len, LOCUS_TBL_GRACE_SET, 1, len - 64), 0);
	assert_int_equal(check(c, len, NULL, &err), -LOCUS_ERANGE);
	memcpy(c, b, len);
	x = (struct locus_graceset_entry *)((struct locus_graceset_hdr *)(c + 64) + 1);
	x[1].length += 8;
	assert_int_equal(locus_tbl_seal(c, len, LOCUS_TBL_GRACE_SET, 1, len - 64), 0);
	assert_int_equal(check(c, len, NULL, &err), -LOCUS_ERANGE);
	/*
	 * an offset near 2^64: refused before any pointer to it is formed
	 * (tests/fuzz/regress/graceset/offset-past-payload: forming one is
	 * UBSan's pointer overflow under make asan)
	 */
	memcpy(c, b, len);
	x = (struct locus_graceset_entry *)((struct locus_graceset_hdr *)(c + 64) + 1);
	x[0].offset = 0xffffffffffffff59ull;
	assert_int_equal(locus_tbl_seal(c, len, LOCUS_TBL_GRACE_SET, 1, len - 64), 0);
	assert_int_equal(check(c, len, NULL, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "not an aligned range"));
	/* trailing bytes after the last table */
	memcpy(c, b, len);
	memset(c + len, 0, 8);
	assert_int_equal(locus_tbl_seal(c, len + 8, LOCUS_TBL_GRACE_SET, 1, len + 8 - 64), 0);
	assert_int_equal(check(c, len + 8, NULL, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "after its last table"));
	/* reserved header bytes, and zero groups */
	memcpy(c, b, len);
	((struct locus_graceset_hdr *)(c + 64))->reserved[1] = 1;
	assert_int_equal(locus_tbl_seal(c, len, LOCUS_TBL_GRACE_SET, 1, len - 64), 0);
	assert_int_equal(check(c, len, NULL, &err), -LOCUS_ERANGE);
	memcpy(c, b, len);
	((struct locus_graceset_hdr *)(c + 64))->n_groups = 0;
	assert_int_equal(locus_tbl_seal(c, len, LOCUS_TBL_GRACE_SET, 1, len - 64), 0);
	assert_int_equal(check(c, len, NULL, &err), -LOCUS_ERANGE);
	/* truncated: shorter than the entries */
	memcpy(c, b, len);
	assert_int_equal(locus_tbl_seal(c, 64 + 40, LOCUS_TBL_GRACE_SET, 1, 40), 0);
	assert_int_equal(check(c, 64 + 40, NULL, &err), -LOCUS_ETRUNCATED);
	free(c);
	free(b);
}

static void test_builder_checks(void **state)
{
	struct locus_graceset_part p[2];
	struct locus_error err;
	size_t l0, l1, len;
	void *b0 = group_table(0, 2, 1, 1, 4, NL, &l0), *b1 = group_table(2, 2, 1, 1, 4, NL, &l1);
	void *blob = NULL;
	(void)state;

	p[0] = (struct locus_graceset_part){ .group_id = 0, .decoder_id = 7, .first_rank = 0,
					     .n_ranks = 2, .blob = b0, .blob_len = l0 };
	p[1] = (struct locus_graceset_part){ .group_id = 1, .decoder_id = 9, .first_rank = 2,
					     .n_ranks = 2, .blob = b1, .blob_len = l1 };
	assert_int_equal(locus_graceset_build(p, 2, &blob, &len, &err), 0);
	assert_int_equal(check(blob, len, NULL, &err), 0);
	free(blob);
	blob = NULL;
	assert_int_equal(locus_graceset_build(p, 1, &blob, &len, &err), -LOCUS_ERANGE);
	assert_null(blob);
	assert_int_equal(locus_graceset_build(p, 0, &blob, &len, &err), -EINVAL);
	free(b0);
	free(b1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_set),
		cmocka_unit_test(test_missing_group),
		cmocka_unit_test(test_overlap),
		cmocka_unit_test(test_dims_disagree),
		cmocka_unit_test(test_placement_outside_group),
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_builder_checks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
