// SPDX-License-Identifier: MIT
/*
 * locus_eldrfit_tau_choose (locusctl fit --tau auto) with a replay whose
 * figures are a known function of the band: the choice is the fewest pairs
 * within the load bound (given, or the exact-balance fit's at tau 0.1), the
 * least loaded when none is within it; the replay only ever sees
 * calibration requests, each fold's other part; bad options are refused.
 * The real router's replay is tests/test_eldr_quality's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "locus_eldr.h"
#include "locus_eldrfit.h"
#include "locus_trace.h"
#include "data_paths.h"

struct mock {
	const uint8_t *is_calib; /* [n_requests] */
	uint32_t calls, requests, outside, B;
};

/* pairs = 100 + 1000 (tau - 0.15)^2 (best 0.15), load = 2 - 4 tau (falls with the band). */
static int mock_replay(void *arg, const struct locus_trace *t, const void *payload, size_t len,
		       const uint32_t *idx, uint32_t n, uint32_t B, uint32_t orders,
		       uint64_t seed, double *pairs, double *load, struct locus_error *err)
{
	const struct locus_eldr_tbl_hdr *h = payload;
	struct mock *m = arg;
	double tau = h->tau;

	(void)t;
	(void)orders;
	(void)seed;
	assert_int_equal(locus_eldr_tbl_validate(payload, len, NULL, err), 0);
	for (uint32_t i = 0; i < n; i++)
		m->outside += !m->is_calib[idx[i]];
	m->calls++;
	m->requests += n;
	m->B = B;
	*pairs = 100 + 1000 * (tau - 0.15) * (tau - 0.15);
	*load = 2 - 4 * tau;
	return 0;
}

static struct locus_trace *sample(void)
{
	struct locus_error e = { 0 };
	struct locus_trace *t = NULL;
	char path[4096];

	snprintf(path, sizeof(path), "%s/tests/data/calib_sample.jsonl", locus_data_root());
	assert_int_equal(locus_trace_load(path, NULL, &t, &e), 0);
	return t;
}

static void test_choice_within_bound(void **state)
{
	static const struct {
		float bound, tau;
		int feasible;
	} cases[] = {
		{ 0, 0.15f, 1 },      /* the exact-balance fit's load: 2 - 0.4 = 1.6 */
		{ 1.55f, 0.15f, 1 },  /* tau >= 0.1125 */
		{ 1.3f, 0.2f, 1 },    /* tau >= 0.175 */
		{ 1.0f, 0.25f, 1 },   /* tau >= 0.25 */
		{ 0.5f, 0.3f, 0 },    /* none: the least loaded */
	};
	struct locus_trace *t = sample();
	uint32_t *calib = malloc(sizeof(*calib) * t->n_requests), nc = 0;
	uint8_t *is_calib = calloc(t->n_requests, 1);
	struct locus_eldrfit_opts o;
	struct locus_error e = { 0 };
	(void)state;

	assert_non_null(calib);
	assert_non_null(is_calib);
	/* two thirds are calibration, the rest must never reach the replay */
	for (uint32_t i = 0; i < t->n_requests; i++)
		if (i % 3) {
			calib[nc++] = i;
			is_calib[i] = 1;
		}
	locus_eldrfit_opts_default(&o, 4);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct mock m = { .is_calib = is_calib };
		struct locus_eldrfit_tau_opts to = { .load_bound = cases[c].bound,
						     .replay = mock_replay, .replay_arg = &m,
						     .batch = 3 };
		struct locus_eldrfit_tau_result r;

		assert_int_equal(locus_eldrfit_tau_choose(t, calib, nc, &o, &to, &r, &e), 0);
		print_message("bound %.2f: tau %.3f (bound applied %.3f, reference load %.3f)\n",
			      (double)cases[c].bound, (double)r.tau, r.bound, r.ref_load);
		assert_float_equal(r.tau, cases[c].tau, 1e-6);
		assert_int_equal(r.feasible, cases[c].feasible);
		assert_float_equal(r.ref_load, 1.6, 1e-6);
		assert_int_equal(r.n_grid, 10);
		assert_int_equal(r.n_part[0] + r.n_part[1], nc);
		/* both folds: every grid point and the reference, the other part each time */
		assert_int_equal(m.calls, 2 * (r.n_grid + 1));
		assert_int_equal(m.requests, (r.n_grid + 1) * nc);
		assert_int_equal(m.outside, 0);
		assert_int_equal(m.B, 3);
	}
	free(is_calib);
	free(calib);
	locus_trace_free(t);
}

/* The ties rule: equal pairs go to the lower load, i.e. the wider band. */
static int flat_replay(void *arg, const struct locus_trace *t, const void *payload, size_t len,
		       const uint32_t *idx, uint32_t n, uint32_t B, uint32_t orders,
		       uint64_t seed, double *pairs, double *load, struct locus_error *err)
{
	const struct locus_eldr_tbl_hdr *h = payload;

	(void)arg, (void)t, (void)len, (void)idx, (void)n, (void)B, (void)orders, (void)seed;
	(void)err;
	*pairs = 50;
	*load = 1.5 - h->tau;
	return 0;
}

static void test_ties_and_grid(void **state)
{
	static const float grid[] = { 0.0f, 0.1f, 0.4f };
	struct locus_trace *t = sample();
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_tau_opts to = { .grid = grid, .n_grid = 3, .replay = flat_replay,
					     .load_bound = 10 };
	struct locus_eldrfit_tau_result r;
	struct locus_error e = { 0 };
	(void)state;

	locus_eldrfit_opts_default(&o, 2);
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), 0);
	assert_float_equal(r.tau, 0.4f, 1e-7);
	assert_int_equal(r.chosen, 2);
	assert_int_equal(r.n_part[0], 48);
	assert_int_equal(r.n_part[1], 48);
	locus_trace_free(t);
}

static void test_refusals(void **state)
{
	static const float desc[] = { 0.1f, 0.05f }, big[] = { 0.1f, 2.5f }, dup[] = { 0.1f, 0.1f };
	static const float nan_grid[] = { NAN };
	struct locus_trace *t = sample(), *nodec = NULL;
	struct locus_trace_req *reqs = calloc(t->n_requests, sizeof(*reqs));
	uint32_t far[2] = { 0, 96 };
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_tau_opts to = { .replay = flat_replay };
	struct locus_eldrfit_tau_result r;
	struct locus_error e = { 0 };
	(void)state;

	assert_non_null(reqs);
	locus_eldrfit_opts_default(&o, 4);
	to.replay = NULL;
	assert_true(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e) < 0);
	to.replay = flat_replay;
	to.grid = desc;
	to.n_grid = 2;
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "grid must ascend"));
	to.grid = big;
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	to.grid = dup;
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	to.grid = nan_grid;
	to.n_grid = 1;
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	to.n_grid = 0;
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	to.n_grid = LOCUS_ELDRFIT_TAU_GRID_MAX + 1;
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	to.grid = NULL;
	to.n_grid = 0;
	to.load_bound = -1;
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	to.load_bound = NAN;
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	to.load_bound = 0;
	/* 2 x K x B = 104 > 96 requests */
	to.batch = 13;
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "at least 2 x K x B = 104 calibration requests"));
	to.batch = 12;
	assert_int_equal(locus_eldrfit_tau_choose(t, NULL, 0, &o, &to, &r, &e), 0);
	to.batch = 0;
	assert_int_equal(locus_eldrfit_tau_choose(t, far, 2, &o, &to, &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "calibration index 96 of 96"));
	/* no decode tokens: nothing to replay */
	for (uint32_t i = 0; i < t->n_requests; i++) {
		reqs[i] = t->reqs[i];
		reqs[i].gen = NULL;
		reqs[i].gen_len = 0;
	}
	assert_int_equal(locus_trace_from_arrays(t->n_layers, t->k, t->n_experts, t->n_requests,
						 reqs, NULL, &nodec, &e), 0);
	assert_int_equal(locus_eldrfit_tau_choose(nodec, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "no routed_experts"));
	locus_trace_free(nodec);
	free(reqs);
	locus_trace_free(t);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_choice_within_bound),
		cmocka_unit_test(test_ties_and_grid),
		cmocka_unit_test(test_refusals),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
