// SPDX-License-Identifier: MIT
/*
 * locus_eldrfit_tune (locusctl fit's default) with a replay whose figures
 * are a known function of the table it is handed (tau, overflow rule, load
 * spill, centroids per decoder): the search space, the choice within the
 * load bound and without one, the bound in each fold and the domain
 * oracle's, the choices fixed from the fit's options, the
 * replay seeing calibration requests only and the tables the fits wrote,
 * and the refusals. The real router's replay is tests/test_eldr_quality's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
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
	const uint8_t *is_calib;  /* [n_requests] */
	uint32_t calls, outside;
	uint32_t seen_cpd[8];     /* tables seen with C / K centroids per decoder */
};

/*
 * pairs = 100 + 100 (tau - 0.1)^2 - (spread) - (spill 0.3 / 2 ? 1.5 : a
 * spill ? -0.5 : 0) + 0.2 |cpd - 3|; load = 1.5 - tau - 0.2 (a spill).
 */
static int mock_replay(void *arg, const struct locus_trace *t, const void *payload, size_t len,
		       const uint32_t *idx, uint32_t n, uint32_t B, uint32_t orders,
		       uint64_t seed, double *pairs, double *load, struct locus_error *err)
{
	const struct locus_eldr_tbl_hdr *h = payload;
	struct locus_eldr_tbl_view v;
	struct mock *m = arg;
	double tau = h->tau, cpd;
	int spill = h->spill_tau != 0.0f;

	(void)t, (void)B, (void)orders, (void)seed;
	assert_int_equal(locus_eldr_tbl_validate(payload, len, &v, err), 0);
	for (uint32_t i = 0; i < n; i++)
		m->outside += !m->is_calib[idx[i]];
	cpd = (double)v.n_centroids / h->n_decoders;
	if (cpd == floor(cpd) && cpd < 8)
		m->seen_cpd[(int)cpd]++;
	m->calls++;
	*pairs = 100 + 100 * (tau - 0.1) * (tau - 0.1) -
		 (h->flags & LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD ? 1 : 0) -
		 (spill ? (fabsf(h->spill_tau - 0.3f) < 1e-6 && h->spill_margin == 2 ? 1.5 : -0.5) :
		  0) + 0.2 * fabs(cpd - 3);
	*load = 1.5 - tau - (spill ? 0.2 : 0);
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

static void expect(const struct locus_eldrfit_tune_point *p, float tau, int spread, float spill,
		   uint32_t margin, uint32_t cpd, float price)
{
	print_message("chosen: price %g, %u per decoder, tau %g, spread %d, spill %g/%u: "
		      "%.3f / %.3f\n", (double)p->balance_price, p->centroids_per_decoder,
		      (double)p->tau, p->overflow_spread, (double)p->spill_tau, p->spill_margin,
		      p->pairs, p->load);
	assert_float_equal(p->tau, tau, 1e-6);
	assert_int_equal(p->overflow_spread, spread);
	assert_float_equal(p->spill_tau, spill, 1e-6);
	assert_int_equal(p->spill_margin, margin);
	assert_int_equal(p->centroids_per_decoder, cpd);
	assert_float_equal(p->balance_price, price, 1e-6);
}

static void test_search_and_choice(void **state)
{
	struct locus_trace *t = sample();
	uint32_t *calib = malloc(sizeof(*calib) * t->n_requests), nc = 0;
	uint8_t *is_calib = calloc(t->n_requests, 1);
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_tune_result r;
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
	{
		struct mock m = { .is_calib = is_calib };
		struct locus_eldrfit_tune_opts to = { .load_bound = 10, .replay = mock_replay,
						      .replay_arg = &m, .batch = 2 };

		assert_int_equal(locus_eldrfit_tune(t, calib, nc, &o, &to, &r, &e), 0);
		/*
		 * per fit: 5 taus x 2 overflow rules x (no spill + the spills wider
		 * than tau x 2 margins): 7 + 7 + 7 + 7 + 5; 2 prices x 4 per decoder
		 */
		assert_int_equal(r.n_pt, 2 * 33 * 8);
		assert_int_equal(m.calls, 2 * (r.n_pt + 1)); /* both folds, each with its reference */
		assert_int_equal(m.outside, 0);
		assert_int_equal(r.n_part[0] + r.n_part[1], nc);
		/* the fits wrote 1..4 centroids per decoder (clusters of about 8 per fold) */
		for (int c = 1; c <= 4; c++)
			assert_true(m.seen_cpd[c] >= 2 * 2 * 66);
		assert_int_equal(r.feasible, 1);
		/* no price effect in the mock: the tie goes to the later point, price 2 */
		expect(&r.pt[r.chosen], 0.1f, 1, 0.3f, 2, 3, 2.0f);
		locus_eldrfit_tune_result_free(&r);
		assert_null(r.pt);
	}
	{
		/* load <= 1.16: a spill and tau >= 0.15 (a spill wider than 0.15: 0.3 or 0.5) */
		struct mock m = { .is_calib = is_calib };
		struct locus_eldrfit_tune_opts to = { .load_bound = 1.16f, .replay = mock_replay,
						      .replay_arg = &m, .batch = 2 };

		assert_int_equal(locus_eldrfit_tune(t, calib, nc, &o, &to, &r, &e), 0);
		assert_true(r.pt[r.chosen].load <= 1.16);
		expect(&r.pt[r.chosen], 0.15f, 1, 0.3f, 2, 3, 2.0f);
		locus_eldrfit_tune_result_free(&r);
	}
	{
		/* none within 0.5: the least loaded (1.1), the last of the ties */
		struct mock m = { .is_calib = is_calib };
		struct locus_eldrfit_tune_opts to = { .load_bound = 0.5f, .replay = mock_replay,
						      .replay_arg = &m, .batch = 2 };

		assert_int_equal(locus_eldrfit_tune(t, calib, nc, &o, &to, &r, &e), 0);
		assert_int_equal(r.feasible, 0);
		expect(&r.pt[r.chosen], 0.2f, 1, 0.5f, 2, 4, 2.0f);
		assert_int_equal(r.chosen, r.n_pt - 1);
		locus_eldrfit_tune_result_free(&r);
	}
	{
		/* the bound by default: the exact-balance reference's load, 1.4 in the mock */
		struct mock m = { .is_calib = is_calib };
		struct locus_eldrfit_tune_opts to = { .replay = mock_replay, .replay_arg = &m,
						      .batch = 2 };

		assert_int_equal(locus_eldrfit_tune(t, calib, nc, &o, &to, &r, &e), 0);
		assert_float_equal(r.ref_load, 1.4, 1e-6);
		assert_float_equal(r.bound, 1.4, 1e-6);
		locus_eldrfit_tune_result_free(&r);
	}
	free(is_calib);
	free(calib);
	locus_trace_free(t);
}

/* Choices fixed from the options: one value each, o's; a fixed spill no tau fits is refused. */
static void test_fixed_choices(void **state)
{
	struct locus_trace *t = sample();
	uint8_t *is_calib = malloc(t->n_requests);
	struct mock m = { .is_calib = is_calib };
	struct locus_eldrfit_tune_opts to = { .load_bound = 10, .replay = mock_replay,
					      .replay_arg = &m };
	struct locus_eldrfit_tune_result r;
	struct locus_eldrfit_opts o, back;
	struct locus_error e = { 0 };
	(void)state;

	memset(is_calib, 1, t->n_requests);
	locus_eldrfit_opts_default(&o, 4);
	o.tau = 0.05f;
	o.balance_price = 1.5f;
	o.centroids_per_decoder = 2;
	o.spill_tau = 0.5f;
	o.spill_margin = 1;
	o.overflow_spread = 0;
	to.fixed = LOCUS_ELDRFIT_FIX_TAU | LOCUS_ELDRFIT_FIX_PRICE | LOCUS_ELDRFIT_FIX_CPD |
		   LOCUS_ELDRFIT_FIX_SPILL | LOCUS_ELDRFIT_FIX_SPREAD;
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e), 0);
	assert_int_equal(r.n_pt, 1);
	expect(&r.pt[0], 0.05f, 0, 0.5f, 1, 2, 1.5f);
	back = o;
	memset(&o, 0, sizeof(o));
	locus_eldrfit_tune_apply(&r.pt[0], &o);
	assert_float_equal(o.tau, back.tau, 0);
	assert_float_equal(o.balance_price, back.balance_price, 0);
	assert_int_equal(o.centroids_per_decoder, 2);
	assert_float_equal(o.spill_tau, 0.5f, 0);
	assert_int_equal(o.spill_margin, 1);
	assert_int_equal(o.overflow_spread, 0);
	locus_eldrfit_tune_result_free(&r);
	/* only the spill fixed (off): the rest searched, never a spill */
	o = back;
	o.spill_tau = 0;
	o.spill_margin = 0;
	to.fixed = LOCUS_ELDRFIT_FIX_SPILL;
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e), 0);
	assert_int_equal(r.n_pt, 2 * 4 * 5 * 2);
	for (uint32_t i = 0; i < r.n_pt; i++)
		assert_true(r.pt[i].spill_tau == 0.0f && r.pt[i].spill_margin == 0);
	expect(&r.pt[r.chosen], 0.1f, 1, 0, 0, 3, 1.5f);
	locus_eldrfit_tune_result_free(&r);
	/* a fixed spill of 0.05 with taus 0 only wider: points at tau 0 alone */
	o.spill_tau = 0.05f;
	o.spill_margin = 2;
	to.fixed = LOCUS_ELDRFIT_FIX_SPILL | LOCUS_ELDRFIT_FIX_CPD | LOCUS_ELDRFIT_FIX_PRICE;
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e), 0);
	assert_int_equal(r.n_pt, 2);
	expect(&r.pt[r.chosen], 0.0f, 1, 0.05f, 2, 2, 1.5f);
	locus_eldrfit_tune_result_free(&r);
	/* ... and with tau fixed at 0.1 nothing is left */
	o.tau = 0.1f;
	to.fixed |= LOCUS_ELDRFIT_FIX_TAU;
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "no routing point"));
	assert_null(r.pt);
	free(is_calib);
	locus_trace_free(t);
}

/*
 * A replay whose load differs between the two folds: with every request of
 * the sample calibration, fold 0 replays the odd requests (idx[0] == 1),
 * fold 1 the even ones. pairs = 100 - 10 tau; load: tau 0.2 1.0 / 1.8
 * (mean 1.4), tau 0.1 1.3 / 1.3, tau 0 1.5 / 1.5.
 */
static int fold_replay(void *arg, const struct locus_trace *t, const void *payload, size_t len,
		       const uint32_t *idx, uint32_t n, uint32_t B, uint32_t orders,
		       uint64_t seed, double *pairs, double *load, struct locus_error *err)
{
	const struct locus_eldr_tbl_hdr *h = payload;
	int fold = idx[0] == 0;

	(void)arg, (void)t, (void)len, (void)n, (void)B, (void)orders, (void)seed, (void)err;
	*pairs = 100 - 10 * h->tau;
	*load = h->tau > 0.15f ? (fold ? 1.8 : 1.0) : h->tau > 0.05f ? 1.3 : 1.5;
	return 0;
}

struct oracle_mock {
	uint32_t calls, K, B, n;
};

/* The domain oracle's replay: load 1.1 in fold 0, 1.9 in fold 1; 99.5 pairs. */
static int oracle_replay(void *arg, const struct locus_trace *t, uint32_t K, const uint32_t *idx,
			 uint32_t n, uint32_t B, uint32_t orders, uint64_t seed, double *pairs,
			 double *load, struct locus_error *err)
{
	struct oracle_mock *m = arg;

	(void)t, (void)orders, (void)seed, (void)err;
	m->calls++;
	m->K = K;
	m->B = B;
	m->n += n;
	*pairs = 99.5;
	*load = idx[0] == 0 ? 1.9 : 1.1;
	return 0;
}

/*
 * The bound holds in each fold, not only on the mean of both; it is the
 * domain oracle's per fold when the caller gives its replay and every
 * calibration request is labelled, else the exact-balance fit's (or the
 * given one, which wins).
 */
static void test_bound_each_fold(void **state)
{
	static const float taus[] = { 0.0f, 0.1f, 0.2f }, no_spill[] = { 0.0f }, price[] = { 2 };
	static const uint32_t one[] = { 1 };
	static const int nearest[] = { 0 };
	struct locus_trace *t = sample(), *unlabelled = NULL;
	struct locus_eldrfit_tune_opts base = {
		.replay = fold_replay, .batch = 2, .taus = taus, .n_taus = 3,
		.spill_taus = no_spill, .n_spill_taus = 1, .centroids_per_decoder = one,
		.n_centroids_per_decoder = 1, .balance_prices = price, .n_balance_prices = 1,
		.overflow_spread = nearest, .n_overflow_spread = 1,
	}, to;
	struct oracle_mock om = { 0 };
	struct locus_eldrfit_tune_result r;
	struct locus_eldrfit_opts o;
	struct locus_error e = { 0 };
	(void)state;

	locus_eldrfit_opts_default(&o, 4);
	assert_int_equal(locus_trace_from_arrays(t->n_layers, t->k, t->n_experts, t->n_requests,
						 t->reqs, NULL, &unlabelled, &e), 0);
	/* tau 0.2's mean 1.4 is within 1.45, its fold 1 (1.8) is not: tau 0.1 */
	to = base;
	to.load_bound = 1.45f;
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e), 0);
	assert_int_equal(r.n_pt, 3);
	assert_float_equal(r.pt[2].load, 1.4, 1e-9);
	assert_float_equal(r.pt[2].fold_load[1], 1.8, 1e-9);
	assert_int_equal(r.feasible, 1);
	assert_float_equal(r.pt[r.chosen].tau, 0.1f, 1e-6);
	assert_int_equal(r.bound_oracle, 0);
	locus_eldrfit_tune_result_free(&r);
	/* no bound, no oracle: the exact-balance fit's (tau 0.1: 1.3) in each fold */
	to = base;
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e), 0);
	assert_float_equal(r.fold_bound[0], 1.3, 1e-9);
	assert_float_equal(r.fold_bound[1], 1.3, 1e-9);
	assert_float_equal(r.pt[r.chosen].tau, 0.1f, 1e-6);
	locus_eldrfit_tune_result_free(&r);
	/* the oracle's 1.1 / 1.9: tau 0.2 (1.0 / 1.8) is within both, tau 0 (1.5) is not */
	to = base;
	to.oracle = oracle_replay;
	to.oracle_arg = &om;
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e), 0);
	assert_int_equal(om.calls, 2);
	assert_int_equal(om.K, 4);
	assert_int_equal(om.B, 2);
	assert_int_equal(om.n, t->n_requests); /* each fold's replayed part once */
	assert_int_equal(r.bound_oracle, 1);
	assert_float_equal(r.fold_bound[0], 1.1, 1e-9);
	assert_float_equal(r.fold_bound[1], 1.9, 1e-9);
	assert_float_equal(r.oracle_load, 1.5, 1e-9);
	assert_float_equal(r.oracle_pairs, 99.5, 1e-9);
	assert_float_equal(r.pt[r.chosen].tau, 0.2f, 1e-6);
	locus_eldrfit_tune_result_free(&r);
	/* unlabelled requests: no oracle, the exact-balance bound */
	om.calls = 0;
	assert_int_equal(locus_eldrfit_tune(unlabelled, NULL, 0, &o, &to, &r, &e), 0);
	assert_int_equal(om.calls, 0);
	assert_int_equal(r.bound_oracle, 0);
	assert_float_equal(r.pt[r.chosen].tau, 0.1f, 1e-6);
	locus_eldrfit_tune_result_free(&r);
	/* a bound given wins over the oracle */
	to.load_bound = 1.45f;
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e), 0);
	assert_int_equal(om.calls, 0);
	assert_float_equal(r.bound, 1.45, 1e-6);
	assert_float_equal(r.pt[r.chosen].tau, 0.1f, 1e-6);
	locus_eldrfit_tune_result_free(&r);
	locus_trace_free(unlabelled);
	locus_trace_free(t);
}

static void test_refusals(void **state)
{
	static const float desc[] = { 0.1f, 0.05f }, far[] = { 3.0f }, neg[] = { -1.0f };
	static const uint32_t zero[] = { 0 }, big[] = { 17 };
	static const int two[] = { 2 };
	struct locus_trace *t = sample();
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_tune_result r;
	struct locus_error e = { 0 };
	struct locus_eldrfit_tune_opts base = { .replay = mock_replay }, to;
	(void)state;

	locus_eldrfit_opts_default(&o, 4);
#define REFUSED(field, list, n, why)                                                         \
	do {                                                                                \
		to = base;                                                                  \
		to.field = list;                                                            \
		to.n_##field = n;                                                           \
		assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e),            \
				 -LOCUS_ERANGE);                                            \
		assert_non_null(strstr(e.msg, why));                                        \
	} while (0)
	REFUSED(taus, desc, 2, "grid must ascend");
	REFUSED(taus, desc, 0, "a list of 0");
	REFUSED(taus, desc, LOCUS_ELDRFIT_TUNE_LIST_MAX + 1, "more than");
	REFUSED(spill_taus, far, 1, "spill tau 3");
	REFUSED(spill_margins, zero, 1, "spill margin of 0");
	REFUSED(centroids_per_decoder, zero, 1, "0 centroids per decoder");
	REFUSED(centroids_per_decoder, big, 1, "17 centroids per decoder");
	REFUSED(balance_prices, neg, 1, "balance price -1");
	REFUSED(overflow_spread, two, 1, "overflow rule 2");
#undef REFUSED
	to = base;
	to.replay = NULL;
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e), -EINVAL);
	to = base;
	to.batch = 13; /* 2 x 4 x 13 > 96 */
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &to, &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "at least 2 x K x B = 104"));
	locus_trace_free(t);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_search_and_choice),
		cmocka_unit_test(test_fixed_choices),
		cmocka_unit_test(test_bound_each_fold),
		cmocka_unit_test(test_refusals),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
