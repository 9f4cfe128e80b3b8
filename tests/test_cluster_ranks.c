// SPDX-License-Identifier: MIT
/*
 * Which ranks a recovery counts as lost (control/cluster_ranks.c): reports
 * parsed and refused field by field; a rank never seen live is pending, not
 * lost; one seen and gone (record away, client gone) is lost and live again
 * when it is back; a member most reporting peers cannot reach is cut off.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "locus_cluster_ranks.h"

static int parse(const char *s, uint32_t node, struct locus_ranks_report *r)
{
	struct locus_error err = { 0 };
	int ret = locus_ranks_report_parse(s, strlen(s), node, 3, 4, r, &err);

	if (ret)
		assert_true(err.msg[0] != 0);
	return ret;
}

static void test_reports(void **state)
{
	struct locus_ranks_report r;
	(void)state;

	assert_int_equal(parse("{\"node\":1,\"attached\":[0,2,3],\"down\":[2]}", 1, &r), 0);
	assert_int_equal(r.attached, 0xd);
	assert_int_equal(r.n_down, 1);
	assert_int_equal(r.down[0], 2);
	assert_int_equal(parse("{\"node\":1,\"attached\":[],\"down\":[]}", 1, &r), 0);
	assert_int_equal(r.attached, 0);
	/* refused: another node's, a GPU or node out of range, itself down, not JSON */
	assert_true(parse("{\"node\":2,\"attached\":[],\"down\":[]}", 1, &r) < 0);
	assert_true(parse("{\"node\":1,\"attached\":[4],\"down\":[]}", 1, &r) < 0);
	assert_true(parse("{\"node\":1,\"attached\":[-1],\"down\":[]}", 1, &r) < 0);
	assert_true(parse("{\"node\":1,\"attached\":[0],\"down\":[3]}", 1, &r) < 0);
	assert_true(parse("{\"node\":1,\"attached\":[0],\"down\":[1]}", 1, &r) < 0);
	assert_true(parse("{\"node\":1,\"attached\":\"0\",\"down\":[]}", 1, &r) < 0);
	assert_true(parse("{\"node\":1,\"attached\":[0],\"down\":[\"2\"]}", 1, &r) < 0);
	assert_true(parse("[1,2]", 1, &r) < 0);
	assert_true(parse("{\"node\":1", 1, &r) < 0);
	assert_true(parse("{\"node\":1,\"node\":1,\"attached\":[],\"down\":[]}", 1, &r) < 0);
}

static int bit(const uint64_t *w, uint32_t r)
{
	return w[r / 64] >> (r % 64) & 1;
}

static void test_view(void **state)
{
	struct locus_ranks_view v;
	struct locus_ranks_report rp[3];
	const struct locus_ranks_report *rep[3] = { NULL, NULL, NULL };
	uint8_t member[3] = { 1, 1, 0 };
	(void)state;

	assert_int_equal(locus_ranks_view_init(&v, 3, 4, NULL), 0);
	/* node 0 all attached, node 1 reports GPUs 0-1 only, node 2 never came */
	assert_int_equal(parse("{\"node\":0,\"attached\":[0,1,2,3],\"down\":[]}", 0, &rp[0]), 0);
	assert_int_equal(parse("{\"node\":1,\"attached\":[0,1],\"down\":[]}", 1, &rp[1]), 0);
	rep[0] = &rp[0];
	rep[1] = &rp[1];
	locus_ranks_view_update(&v, member, rep);
	assert_int_equal(v.n_live, 6);
	assert_int_equal(v.n_lost, 0); /* 6, 7 and node 2's are pending */
	/* GPU 1 of node 1 leaves: lost; node 0's record goes: its four are lost */
	assert_int_equal(parse("{\"node\":1,\"attached\":[0],\"down\":[0]}", 1, &rp[1]), 0);
	member[0] = 0;
	locus_ranks_view_update(&v, member, rep);
	assert_int_equal(v.n_live, 1);
	assert_int_equal(v.n_lost, 5);
	assert_true(bit(v.lost, 5) && bit(v.lost, 0) && !bit(v.lost, 6) && !bit(v.lost, 8));
	/* node 0 back, every GPU again: live */
	member[0] = 1;
	assert_int_equal(parse("{\"node\":1,\"attached\":[0,1],\"down\":[]}", 1, &rp[1]), 0);
	locus_ranks_view_update(&v, member, rep);
	assert_int_equal(v.n_live, 6);
	assert_int_equal(v.n_lost, 0);
	/* node 2 joins; nodes 1 and 2 cannot reach node 0, node 0 cannot reach either:
	 * node 0 is cut off (2 of 2 voters), the others not (1 of 2 each) */
	member[2] = 1;
	assert_int_equal(parse("{\"node\":2,\"attached\":[0,1,2,3],\"down\":[0]}", 2, &rp[2]), 0);
	assert_int_equal(parse("{\"node\":1,\"attached\":[0,1],\"down\":[0]}", 1, &rp[1]), 0);
	assert_int_equal(parse("{\"node\":0,\"attached\":[0,1,2,3],\"down\":[1,2]}", 0, &rp[0]), 0);
	rep[2] = &rp[2];
	locus_ranks_view_update(&v, member, rep);
	assert_true(v.cut_off[0] && !v.cut_off[1] && !v.cut_off[2]);
	assert_int_equal(v.n_live, 6);  /* node 1's two, node 2's four */
	assert_int_equal(v.n_lost, 4);  /* node 0's, seen before */
	locus_ranks_view_free(&v);
	assert_true(locus_ranks_view_init(&v, 0, 4, NULL) < 0);
	assert_true(locus_ranks_view_init(&v, 2, 33, NULL) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reports),
		cmocka_unit_test(test_view),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
