// SPDX-License-Identifier: MIT
/* EPLB phy2log / log2phy / logcnt import and export: hand cases, round trip, bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>
#include <cmocka.h>

#include "locus_gracefit.h"
#include "locus_tblfile.h"

#define NR LOCUS_GRACE_NO_RANK

static const struct locus_gracefit_topo t12 = { 1, 2, 0, 0 };

static int import(const char *json, const struct locus_gracefit_topo *t, void **blob,
		  struct locus_grace_view *v, struct locus_error *err)
{
	size_t len, plen;
	const void *pl;
	int rc = locus_gracefit_eplb_import(json, strlen(json), t, NULL, blob, &len, err);

	if (rc)
		return rc;
	assert_int_equal(locus_tbl_check(*blob, len, LOCUS_TBL_GRACE, &pl, &plen, err), 0);
	assert_int_equal(locus_grace_view_init(v, (void *)pl, plen, err), 0);
	return 0;
}

static void test_import_hand(void **state)
{
	/* 2 ranks x 3 slots: rank 0 holds 0 1 2, rank 1 holds 3 0 1 */
	const char *j = "{\"phy2log\": [[0, 1, 2, 3, 0, 1]],\n"
			" \"log2phy\": [[[0, 4], [1, 5], [2, -1], [3, -1]]],\n"
			" \"logcnt\": [[2, 2, 1, 1]]}";
	struct locus_grace_view v;
	struct locus_error err = { 0 };
	void *blob = NULL;
	(void)state;

	if (import(j, &t12, &blob, &v, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(v.dims->n_layers, 1);
	assert_int_equal(v.dims->n_experts, 4);
	assert_int_equal(v.dims->max_replicas, 1);
	assert_int_equal(v.dims->capacity, 3);
	assert_int_equal(v.dims->replica_budget, 2);
	assert_int_equal(v.primary[0], 0);
	assert_int_equal(v.primary[1], 0);
	assert_int_equal(v.primary[2], 0);
	assert_int_equal(v.primary[3], 1);
	assert_int_equal(v.replica[0], 1);
	assert_int_equal(v.replica[1], 1);
	assert_int_equal(v.replica[2], NR);
	assert_int_equal(v.replica[3], NR);
	/* loads default to 1 per expert, split over copies: 0.5 0.5 1 | 0.5 0.5 1 */
	assert_true(v.pred_load[0] == 2.0f && v.pred_load[1] == 2.0f);
	free(blob);
}

static void test_export_hand_and_round_trip(void **state)
{
	/* 2 layers, 4 experts, 1 x 2 ranks, each rank 3 copies in both layers */
	struct locus_grace_dims d = { .n_layers = 2, .n_experts = 4, .n_nodes = 1,
				      .gpus_per_node = 2, .max_replicas = 1, .capacity = 3,
				      .replica_budget = 2 };
	static const uint16_t pri[8] = { 0, 0, 1, 1, /* layer 1: */ 1, 0, 0, 0 };
	static const uint16_t rep[8] = { 1, NR, NR, 0, /* layer 1: */ NR, 1, 1, NR };
	size_t plen = locus_grace_payload_size(&d);
	void *pl = calloc(1, plen), *blob = NULL;
	struct locus_grace_view v, w;
	struct locus_error err = { 0 };
	char *json = NULL;
	(void)state;

	memcpy(pl, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, pl, plen, NULL), 0);
	memcpy(v.primary, pri, sizeof(pri));
	memcpy(v.replica, rep, sizeof(rep));
	for (int i = 0; i < 8; i++)
		v.expert_load[i] = 1;
	assert_int_equal(locus_grace_validate(&v, &err), 0);
	if (locus_gracefit_eplb_export(pl, plen, &json, &err))
		fail_msg("%s", err.msg);
	/* layer 0: rank 0 = primaries 0 1 + replica 3; rank 1 = 2 3 + replica 0
	 * layer 1: rank 0 = 1 2 3;       rank 1 = 0 + replicas 1 2 */
	assert_string_equal(json,
			    "{\"phy2log\": [[0, 1, 3, 2, 3, 0], [1, 2, 3, 0, 1, 2]],\n"
			    " \"log2phy\": [[[0, 5], [1, -1], [3, -1], [4, 2]], "
			    "[[3, -1], [0, 4], [1, 5], [2, -1]]],\n"
			    " \"logcnt\": [[2, 1, 1, 2], [1, 2, 2, 1]]}\n");
	if (import(json, &t12, &blob, &w, &err))
		fail_msg("%s", err.msg);
	assert_memory_equal(w.primary, pri, sizeof(pri));
	assert_memory_equal(w.replica, rep, sizeof(rep));
	free(blob);
	free(json);
	free(pl);
}

static void test_export_pads_with_hottest(void **state)
{
	/* rank 0 holds 3 experts, rank 1 holds 1: rank 1 is padded with two
	 * copies of the experts with the highest load per copy (2 then 0) */
	struct locus_grace_dims d = { .n_layers = 1, .n_experts = 4, .n_nodes = 1,
				      .gpus_per_node = 2, .max_replicas = 1, .capacity = 3,
				      .replica_budget = 1 };
	static const uint16_t pri[4] = { 0, 0, 0, 1 };
	static const float load[4] = { 5, 1, 9, 3 };
	size_t plen = locus_grace_payload_size(&d);
	void *pl = calloc(1, plen), *blob = NULL;
	struct locus_grace_view v, w;
	struct locus_error err = { 0 };
	char *json = NULL;
	(void)state;

	memcpy(pl, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, pl, plen, NULL), 0);
	memcpy(v.primary, pri, sizeof(pri));
	for (int i = 0; i < 4; i++)
		v.replica[i] = NR;
	memcpy(v.expert_load, load, sizeof(load));
	assert_int_equal(locus_gracefit_eplb_export(pl, plen, &json, &err), 0);
	assert_non_null(strstr(json, "\"phy2log\": [[0, 1, 2, 3, 2, 0]]"));
	assert_non_null(strstr(json, "\"logcnt\": [[2, 1, 2, 1]]"));
	assert_int_equal(import(json, &t12, &blob, &w, &err), 0);
	assert_memory_equal(w.primary, pri, sizeof(pri));
	assert_int_equal(w.replica[0], 1);
	assert_int_equal(w.replica[2], 1);
	free(blob);
	free(json);
	free(pl);
}

static void expect_bad(const char *j, const struct locus_gracefit_topo *t, int code,
		       const char *needle)
{
	struct locus_error err = { 0 };
	void *blob = NULL;
	size_t len;

	assert_int_equal(locus_gracefit_eplb_import(j, strlen(j), t, NULL, &blob, &len, &err),
			 -code);
	assert_null(blob);
	if (!strstr(err.msg, needle))
		fail_msg("message \"%s\" lacks \"%s\"", err.msg, needle);
}

static void test_import_rejects(void **state)
{
	static const struct locus_gracefit_topo t14 = { 1, 4, 0, 0 };
	(void)state;

	expect_bad("{\"phy2log\": [[0, 1, 2, 3, 0, 9]], \"log2phy\": [[[0, 4], [1, 5], [2, -1],"
		   " [3, -1]]], \"logcnt\": [[2, 2, 1, 1]]}", &t12, LOCUS_ERANGE,
		   "phy2log[0][5] = 9 is not an expert id < 4");
	expect_bad("{\"phy2log\": [[0, 1, 2, 3, 0, 1]], \"log2phy\": [[[0, 5], [1, 4], [2, -1],"
		   " [3, -1]]], \"logcnt\": [[2, 2, 1, 1]]}", &t12, LOCUS_ERANGE,
		   "log2phy[0][0][1] = 5 does not hold expert 0");
	expect_bad("{\"phy2log\": [[0, 1, 2, 3, 0, 1]], \"log2phy\": [[[0, 4], [1, 5], [2, -1],"
		   " [3, -1]]], \"logcnt\": [[2, 1, 1, 1]]}", &t12, LOCUS_ERANGE,
		   "layer 0 expert 1: logcnt 1, log2phy lists 2, phy2log holds 2");
	expect_bad("{\"phy2log\": [[0, 1, 2, 0, 1, 2]], \"log2phy\": [[[0, 3], [1, 4], [2, 5],"
		   " [-1, -1]]], \"logcnt\": [[2, 2, 2, 0]]}", &t12, LOCUS_ERANGE,
		   "expert 3 has no physical slot");
	expect_bad("{\"phy2log\": [[0, 1, 2, 3, 0, 1]], \"log2phy\": [[[0, 4], [1, 5], [2, -1],"
		   " [3, -1]]], \"logcnt\": [[2, 2, 1, 1]]}", &t14, LOCUS_ERANGE,
		   "6 physical slots do not divide over 4 ranks");
	expect_bad("{\"phy2log\": [[0, 1, 2, 3, 0, 1]], \"log2phy\": [[[0, 4], [1, 5], [2],"
		   " [3, -1]]], \"logcnt\": [[2, 2, 1, 1]]}", &t12, LOCUS_EPARSE,
		   "rows of different lengths");
	expect_bad("{\"phy2log\": [[0, 1, 2, 3, 0, 1]], \"logcnt\": [[2, 2, 1, 1]]}", &t12,
		   LOCUS_EPARSE, "needs phy2log, log2phy and logcnt");
	expect_bad("{\"phy2log\": [[0, 1.5]]}", &t12, LOCUS_EPARSE, "fraction");
	expect_bad("{\"phy2log\": [[0, 1,]]}", &t12, LOCUS_EPARSE, "expected an integer");
	expect_bad("{\"phy2log\": [[0, 1]]} x", &t12, LOCUS_EPARSE, "trailing");
	expect_bad("{\"weights\": [[0, 1]]}", &t12, LOCUS_EPARSE, "unknown key");
	expect_bad("", &t12, LOCUS_EPARSE, "expected '{'");
	expect_bad("{\"phy2log\": [[0, 1, 2, 3, 0, 1]], \"log2phy\": [[[0, 0], [1, 5], [2, -1],"
		   " [3, -1]]], \"logcnt\": [[2, 2, 1, 1]]}", &t12, LOCUS_ERANGE,
		   "lists slot 0 twice");
}

/*
 * An expert with copies on more ranks than a table's replica row holds is
 * refused (writing past the row would land in layer 0's loads, and
 * dropping the extra copies would be silent). N ranks, one slot each: expert 0 on
 * ranks 0..n0-1, expert 1 on the rest; n0 = R + 1 fits exactly, R + 2 not.
 */
static char *eplb_wide(uint32_t n_ranks, uint32_t n0)
{
	size_t cap = 64 + 24 * (size_t)n_ranks;
	char *j = malloc(cap), *p = j;
	uint32_t n1 = n_ranks - n0, x = LOCUS_MAX(n0, n1);

	assert_non_null(j);
	p += sprintf(p, "{\"phy2log\": [[");
	for (uint32_t r = 0; r < n_ranks; r++)
		p += sprintf(p, "%s%u", r ? ", " : "", r < n0 ? 0u : 1u);
	p += sprintf(p, "]], \"log2phy\": [[[");
	for (uint32_t i = 0; i < x; i++)
		p += sprintf(p, "%s%d", i ? ", " : "", i < n0 ? (int)i : -1);
	p += sprintf(p, "], [");
	for (uint32_t i = 0; i < x; i++)
		p += sprintf(p, "%s%d", i ? ", " : "", i < n1 ? (int)(n0 + i) : -1);
	p += sprintf(p, "]]], \"logcnt\": [[%u, %u]]}", n0, n1);
	assert_true((size_t)(p - j) < cap);
	return j;
}

static void test_import_too_many_copies(void **state)
{
	const uint32_t R = LOCUS_GRACE_MAX_REPLICAS, N = R + 8;
	const struct locus_gracefit_topo t = { 1, N, 0, 0 };
	struct locus_grace_view v;
	struct locus_error err;
	void *blob = NULL;
	char *j;
	(void)state;

	/* the most a row holds: accepted, every copy kept, loads untouched */
	j = eplb_wide(N, R + 1);
	if (import(j, &t, &blob, &v, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(v.dims->max_replicas, R);
	for (uint32_t i = 0; i < R; i++)
		assert_int_equal(v.replica[i], i + 1);
	assert_true(v.expert_load[0] == 1.0f && v.expert_load[1] == 1.0f);
	free(blob);
	free(j);
	/* one more copy: refused with a message, nothing produced */
	j = eplb_wide(N, R + 2);
	blob = NULL;
	assert_int_equal(import(j, &t, &blob, &v, &err), -LOCUS_ERANGE);
	assert_null(blob);
	assert_non_null(strstr(err.msg, "layer 0 expert 0 has 65 copies: a GRACE table holds "
			       "at most 64"));
	free(j);
}

/*
 * EPLB's global policy puts two copies of one expert on one GPU (loads 10 4
 * 3 1 on 6 slots of 2 GPUs, worked by hand in test_eplb_balance): GPU 0
 * holds experts 1 0 3, GPU 1 holds 0 0 2. Both copies on GPU 1 stay slots:
 * expert 0's primary is its first listed slot (3, GPU 1), its replicas GPU 0
 * and GPU 1 again, and the predicted loads are EPLB's own GPU sums (4 + 10/3
 * + 1 and 2 x 10/3 + 3). Merged, GPU 1 would hold 2 slots and get half of
 * expert 0 instead of two thirds.
 */
static void test_import_two_copies_one_gpu(void **state)
{
	static const char *j = "{\"phy2log\": [[1, 0, 3, 0, 0, 2]],\n"
			       " \"log2phy\": [[[3, 4, 1], [0, -1, -1], [5, -1, -1], "
			       "[2, -1, -1]]],\n \"logcnt\": [[3, 1, 1, 1]]}";
	static const double W[4] = { 10, 4, 3, 1 };
	struct locus_grace_view v;
	struct locus_error err = { 0 };
	const void *pl;
	void *blob = NULL;
	size_t len, plen;
	char *json = NULL;
	(void)state;

	if (locus_gracefit_eplb_import(j, strlen(j), &t12, W, &blob, &len, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(locus_grace_blob_check(blob, len, &pl, &plen, &err), 0);
	assert_int_equal(locus_grace_view_init(&v, (void *)pl, plen, &err), 0);
	assert_int_equal(v.dims->max_replicas, 2);
	assert_int_equal(v.dims->capacity, 2);
	assert_int_equal(v.dims->replica_budget, 1);
	assert_int_equal(v.primary[0], 1);
	assert_int_equal(v.replica[0], 0);
	assert_int_equal(v.replica[1], 1);
	assert_int_equal(v.primary[1], 0);
	assert_int_equal(v.replica[2], NR);
	assert_int_equal(v.primary[2], 1);
	assert_int_equal(v.primary[3], 0);
	assert_true(fabs(v.pred_load[0] - (4 + 10.0 / 3 + 1)) < 1e-5);
	assert_true(fabs(v.pred_load[1] - (20.0 / 3 + 3)) < 1e-5);
	/* and out again: three slots per GPU, expert 0 twice on GPU 1 */
	if (locus_gracefit_eplb_export(pl, plen, &json, &err))
		fail_msg("%s", err.msg);
	assert_non_null(strstr(json, "\"logcnt\": [[3, 1, 1, 1]]"));
	assert_non_null(strstr(json, "\"phy2log\": [[1, 3, 0, 0, 2, 0]]"));
	free(json);
	free(blob);
}

/* Every strict prefix of a valid document and a few byte flips are refused cleanly. */
static void test_import_truncated_and_flipped(void **state)
{
	const char *j = "{\"phy2log\": [[0, 1, 2, 3, 0, 1]],\n"
			" \"log2phy\": [[[0, 4], [1, 5], [2, -1], [3, -1]]],\n"
			" \"logcnt\": [[2, 2, 1, 1]]}";
	size_t n = strlen(j);
	char *buf = malloc(n + 1);
	(void)state;

	for (size_t cut = 0; cut < n; cut++) {
		struct locus_error err = { 0 };
		void *blob = NULL;
		size_t len;

		memcpy(buf, j, cut);
		buf[cut] = '\0';
		assert_true(locus_gracefit_eplb_import(buf, cut, &t12, NULL, &blob, &len, &err) <
			    0);
		assert_null(blob);
		assert_true(err.msg[0] != '\0');
	}
	for (size_t at = 0; at < n; at++) {
		static const char subst[] = "9-,[]{}\" x";

		for (size_t s = 0; s < sizeof(subst) - 1; s++) {
			struct locus_error err = { 0 };
			void *blob = NULL;
			size_t len;
			int rc;

			memcpy(buf, j, n + 1);
			buf[at] = subst[s];
			rc = locus_gracefit_eplb_import(buf, n, &t12, NULL, &blob, &len, &err);
			if (rc == 0)
				assert_int_equal(locus_grace_blob_check(blob, len, NULL, NULL, &err),
						 0);
			else
				assert_null(blob);
			free(blob);
		}
	}
	free(buf);
}

/*
 * Fitted tables through EPLB and back: primaries come back unchanged and
 * every replica survives (export may add padding copies, never drop one).
 */
static void test_round_trip_fitted(void **state)
{
	static const struct locus_gracefit_topo tp[] = { { 1, 4, 0, 2 }, { 2, 2, 0, 3 },
							  { 2, 4, 0, 1 } };
	uint64_t x = 99;
	(void)state;

	for (size_t ti = 0; ti < LOCUS_ARRAY_SIZE(tp); ti++) {
		struct locus_gracefit_profile p;
		struct locus_error err = { 0 };
		struct locus_grace_view a, b;
		const void *pl;
		size_t len, plen;
		void *blob = NULL, *blob2 = NULL;
		char *json = NULL;
		uint16_t ids[4];

		assert_int_equal(locus_gracefit_profile_init(&p, 3, 32, 1, NULL), 0);
		for (uint32_t l = 0; l < 3; l++)
			for (int t = 0; t < 500; t++) {
				x = x * 6364136223846793005ull + 1442695040888963407ull;
				uint32_t base = (uint32_t)(x >> 33) % 32;

				if ((x >> 20) % 3 == 0)
					base = 0; /* a hot corner */
				for (int j = 0; j < 4; j++)
					ids[j] = (uint16_t)((base + j) % 32);
				assert_int_equal(locus_gracefit_profile_add(&p, l, ids, 1, 4, NULL),
						 0);
			}
		if (locus_gracefit_fit(&p, &tp[ti], NULL, &blob, &len, NULL, &err))
			fail_msg("%s", err.msg);
		assert_int_equal(locus_grace_blob_check(blob, len, &pl, &plen, &err), 0);
		assert_int_equal(locus_grace_view_init(&a, (void *)pl, plen, &err), 0);
		if (locus_gracefit_eplb_export(pl, plen, &json, &err))
			fail_msg("%s", err.msg);
		if (import(json, &tp[ti], &blob2, &b, &err))
			fail_msg("%s", err.msg);
		assert_int_equal(b.dims->max_replicas, a.dims->max_replicas);
		assert_memory_equal(b.primary, a.primary, 3 * 32 * sizeof(uint16_t));
		for (size_t e = 0; e < 3 * 32; e++) {
			uint32_t R = a.dims->max_replicas;

			for (uint32_t i = 0; i < R; i++) {
				uint16_t r = a.replica[e * R + i];
				int found = r == NR;

				for (uint32_t q = 0; q < R; q++)
					found |= b.replica[e * R + q] == r;
				assert_true(found);
			}
		}
		free(json);
		free(blob2);
		free(blob);
		locus_gracefit_profile_free(&p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_import_hand),
		cmocka_unit_test(test_export_hand_and_round_trip),
		cmocka_unit_test(test_export_pads_with_hottest),
		cmocka_unit_test(test_import_rejects),
		cmocka_unit_test(test_import_too_many_copies),
		cmocka_unit_test(test_import_two_copies_one_gpu),
		cmocka_unit_test(test_import_truncated_and_flipped),
		cmocka_unit_test(test_round_trip_fitted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
