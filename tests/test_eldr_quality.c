// SPDX-License-Identifier: MIT
/*
 * Routing quality when decoders outnumber the natural clusters: a
 * synthetic trace of 3 clusters with their own experts, unequal in nothing
 * but the count of decoders (4), fitted by `locusctl fit`'s default options
 * and by the exact-balance fit (--exact-balance), the held-out
 * requests routed by the real router in eldr_quality's rounds
 * (control/eldr_quality_sim.c, the same simulation). Exact balance must split
 * the 3 clusters over 4 equal centroids and mix one of them; the default fit
 * keeps each cluster whole (a centroid is never shared by two clusters) and
 * routes with no busier decoder than the oracle that knows the labels, and
 * within 1% of its distinct experts per decode step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eldr_quality.h"
#include "eldr_replay.h"
#include "locus_eldrfit.h"

#define L  4
#define E  32
#define KT 2  /* experts per token */
#define G  3  /* natural clusters */
#define PER 80 /* requests per cluster, per half */
#define T  16 /* prompt and generated tokens per request */

static const char *const names[G] = { "a", "b", "c" };

static uint32_t lcg(uint32_t *s)
{
	*s = *s * 1103515245u + 12345u;
	return *s >> 8;
}

/*
 * Cluster g's tokens take each of their k experts from g's own 8 with
 * probability 0.85, else from 8 shared ones (ids 24..31); a request adds
 * its own two favourites (a finer structure inside the cluster).
 */
static void gen_tokens(uint16_t *ids, uint32_t g, uint32_t fav, uint32_t *seed)
{
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t l = 0; l < L; l++) {
			uint16_t *s = ids + ((size_t)t * L + l) * KT;

			for (uint32_t k = 0; k < KT; k++) {
				uint32_t r = lcg(seed) % 100;

				s[k] = (uint16_t)(r < 70 ? g * 8 + lcg(seed) % 8 :
						  r < 85 ? g * 8 + (fav + k) % 8 :
						  24 + lcg(seed) % 8);
			}
			if (s[1] == s[0])
				s[1] = (uint16_t)(s[0] ^ 1);
		}
}

/* 2 * G * PER requests, cluster by cluster; even index = calibration. */
static struct locus_trace *synthetic(uint16_t **store)
{
	const uint32_t n = 2 * G * PER;
	struct locus_trace_req *reqs = calloc(n, sizeof(*reqs));
	const char **dom = calloc(n, sizeof(*dom));
	uint16_t *ids = malloc(sizeof(*ids) * n * 2 * T * L * KT);
	struct locus_trace *t = NULL;
	struct locus_error e = { 0 };
	uint32_t seed = 77;

	assert_non_null(reqs);
	assert_non_null(dom);
	assert_non_null(ids);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t g = i / (2 * PER), fav = lcg(&seed) % 8;
		uint16_t *p = ids + (size_t)i * 2 * T * L * KT;

		gen_tokens(p, g, fav, &seed);
		gen_tokens(p + T * L * KT, g, fav, &seed);
		snprintf(reqs[i].id, sizeof(reqs[i].id), "%s-%u", names[g], i);
		reqs[i].prompt = p;
		reqs[i].prompt_len = T;
		reqs[i].gen = p + T * L * KT;
		reqs[i].gen_len = T;
		dom[i] = names[g];
	}
	assert_int_equal(locus_trace_from_arrays(L, KT, E, n, reqs, dom, &t, &e), 0);
	free(dom);
	free(reqs);
	*store = ids;
	return t;
}

/* Fit the calibration half; build the router into *mem. Returns the purity. */
static double fit(const struct locus_trace *cal, const struct locus_eldrfit_opts *o,
		  struct locus_eldr_router **r, void **mem)
{
	struct locus_eldrfit_result res;
	struct locus_error e = { 0 };
	uint32_t cnt[8][G + 1] = { { 0 } }, agree = 0;
	size_t msz;

	assert_int_equal(locus_eldrfit_trace(cal, o, &res, &e), 0);
	msz = locus_eldr_router_mem_size((uint8_t *)res.blob + 64, res.blob_len - 64);
	*mem = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
	assert_non_null(*mem);
	assert_int_equal(locus_eldr_router_build(*mem, msz, (uint8_t *)res.blob + 64,
						 res.blob_len - 64, LOCUS_ELDR_PATH_AUTO, r, &e), 0);
	for (uint32_t i = 0; i < res.n_used; i++)
		cnt[res.assign[i]][cal->reqs[res.req_index[i]].domain]++;
	for (uint32_t k = 0; k < o->n_decoders; k++) {
		uint32_t best = 0;

		for (uint32_t d = 1; d <= G; d++)
			best = cnt[k][d] > best ? cnt[k][d] : best;
		agree += best;
	}
	locus_eldrfit_result_free(&res);
	return (double)agree / (G * PER);
}

static void test_decoders_outnumber_clusters(void **state)
{
	const uint32_t K = 4, B = 4, orders = 40;
	struct locus_trace *t, *cal;
	struct locus_trace_req *creq = calloc(G * PER, sizeof(*creq));
	const char **cdom = calloc(G * PER, sizeof(*cdom));
	uint32_t *held = malloc(sizeof(*held) * G * PER), *seq = malloc(sizeof(*seq) * G * PER);
	struct locus_eldrfit_opts def, exact = { .n_decoders = K, .tau = 0.1f, .seed = 1 };
	struct locus_error e = { 0 };
	struct qsim s = { .K = K, .B = B };
	struct qfig f, m;
	void *mem[QPOL_N] = { 0 };
	uint64_t rng = 1;
	uint16_t *store;
	uint8_t *sigs;
	double pur_def, pur_exact;
	(void)state;

	t = synthetic(&store);
	assert_non_null(creq);
	assert_non_null(cdom);
	assert_non_null(held);
	assert_non_null(seq);
	for (uint32_t i = 0, c = 0, h = 0; i < t->n_requests; i++) {
		if (i % 2 == 0) {
			cdom[c] = t->domains[t->reqs[i].domain];
			creq[c++] = t->reqs[i];
		} else {
			held[h++] = i;
		}
	}
	assert_int_equal(locus_trace_from_arrays(L, KT, E, G * PER, creq, cdom, &cal, &e), 0);
	locus_eldrfit_opts_default(&def, K);
	pur_def = fit(cal, &def, &s.r[QPOL_ELDR], &mem[QPOL_ELDR]);
	def.no_mask = 1;
	fit(cal, &def, &s.r[QPOL_ELDR_NOMASK], &mem[QPOL_ELDR_NOMASK]);
	pur_exact = fit(cal, &exact, &s.r[QPOL_ELDR_EXACT], &mem[QPOL_ELDR_EXACT]);
	s.t = t;
	s.slen = locus_eldr_sig_len(L, E);
	sigs = malloc(s.slen * t->n_requests);
	s.seen = calloc(L * E, sizeof(*s.seen));
	s.batch = malloc(sizeof(*s.batch) * K * B);
	s.fill = calloc(K, sizeof(*s.fill));
	s.total = calloc(QPOL_N * K, sizeof(*s.total));
	assert_non_null(sigs);
	assert_non_null(s.seen);
	assert_non_null(s.batch);
	assert_non_null(s.fill);
	assert_non_null(s.total);
	for (uint32_t i = 0; i < t->n_requests; i++)
		assert_int_equal(locus_eldr_sig_build(sigs + s.slen * i, s.slen, L, E, KT,
						      t->reqs[i].prompt, T, 0, &e), (long)s.slen);
	s.sigs = sigs;
	memset(&m, 0, sizeof(m));
	for (uint32_t o = 0; o < orders; o++) {
		memcpy(seq, held, sizeof(*seq) * G * PER);
		for (uint32_t i = G * PER - 1; i > 0; i--) {
			uint32_t j = (uint32_t)(locus_splitmix64(&rng) % (i + 1)), x = seq[i];

			seq[i] = seq[j];
			seq[j] = x;
		}
		assert_int_equal(qsim_run(&s, seq, G * PER, 0, &f), G * PER / (K * B));
		for (int p = 0; p < QPOL_N; p++) {
			m.step[p] += f.step[p] / orders;
			m.load[p] += f.load[p] / orders;
		}
	}
	print_message("purity: default fit %.3f, exact balance %.3f\n", pur_def, pur_exact);
	print_message("pairs per step (load max/mean, no cap): round-robin %.2f (%.2f), oracle "
		      "%.2f (%.2f), ELDR %.2f (%.2f), --no-mask %.2f (%.2f), exact %.2f (%.2f)\n",
		      m.step[QPOL_RR], m.load[QPOL_RR], m.step[QPOL_DOMAIN], m.load[QPOL_DOMAIN],
		      m.step[QPOL_ELDR], m.load[QPOL_ELDR], m.step[QPOL_ELDR_NOMASK],
		      m.load[QPOL_ELDR_NOMASK], m.step[QPOL_ELDR_EXACT], m.load[QPOL_ELDR_EXACT]);
	/*
	 * every centroid holds one cluster (0.99: room for a stray request);
	 * exact balance cannot: 3 clusters over 4 equal centroids mix one
	 */
	assert_true(pur_def >= 0.99);
	/*
	 * No busier decoder than the oracle's and, within 1%, no more distinct
	 * pairs per step: with every cluster whole the default fit splits the
	 * decoders among the clusters as the oracle does; the 0.02 and the 1%
	 * leave room for how each picks within a cluster (least loaded in the
	 * band against least filled). Exact balance, printed beside, is
	 * busier (its three pure decoders attract, the mixed one idles) and
	 * may read fewer pairs (with a batch cap, one mixed decoder takes
	 * every cluster's overflow and leaves three batches pure).
	 */
	assert_true(m.load[QPOL_ELDR] <= m.load[QPOL_DOMAIN] + 0.02);
	assert_true(m.step[QPOL_ELDR] <= m.step[QPOL_DOMAIN] * 1.01);
	for (int p = 0; p < QPOL_N; p++)
		free(mem[p]);
	free(s.total);
	free(s.fill);
	free(s.batch);
	free(s.seen);
	free(sigs);
	free(seq);
	free(held);
	free(cdom);
	free(creq);
	locus_trace_free(cal);
	locus_trace_free(t);
	free(store);
}

/* Calibration = even requests of the synthetic trace, as eldr_quality splits. */
static uint32_t even_half(const struct locus_trace *t, uint32_t *calib)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < t->n_requests; i += 2)
		calib[n++] = i;
	return n;
}

/*
 * tau auto (the real router's replay, control/eldr_replay.c) reads the
 * calibration requests and nothing else: the held-out half's prompt and
 * decode experts replaced by noise leave the choice and every figure it
 * measured bit-identical, while the same noise in 16 calibration requests
 * changes the figures (the poison is strong enough to be seen).
 */
static void test_tau_auto_ignores_held_out(void **state)
{
	const size_t per = 2 * T * L * KT;
	struct locus_trace *t, *poisoned, *cal_poisoned;
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_tau_opts to = { .batch = 4, .orders = 6,
					     .replay = eldr_replay_router };
	struct locus_eldrfit_tau_result a, b, c;
	struct locus_error e = { 0 };
	uint16_t *store, *noisy;
	uint32_t *calib, nc, seed = 5;
	struct locus_trace_req *reqs;
	(void)state;

	t = synthetic(&store);
	calib = malloc(sizeof(*calib) * t->n_requests);
	reqs = calloc(t->n_requests, sizeof(*reqs));
	noisy = malloc(sizeof(*noisy) * t->n_requests * per);
	assert_non_null(calib);
	assert_non_null(reqs);
	assert_non_null(noisy);
	nc = even_half(t, calib);
	locus_eldrfit_opts_default(&o, 4);
	o.restarts = 2;
	assert_int_equal(locus_eldrfit_tau_choose(t, calib, nc, &o, &to, &a, &e), 0);
	/* every odd request gets random experts (distinct pairs per token-layer) */
	memcpy(noisy, store, sizeof(*noisy) * t->n_requests * per);
	for (uint32_t i = 1; i < t->n_requests; i += 2)
		for (size_t f = 0; f < per; f += KT) {
			noisy[i * per + f] = (uint16_t)(lcg(&seed) % E);
			noisy[i * per + f + 1] = (uint16_t)((noisy[i * per + f] + 1 +
							     lcg(&seed) % (E - 1)) % E);
		}
	for (uint32_t i = 0; i < t->n_requests; i++) {
		reqs[i] = t->reqs[i];
		reqs[i].prompt = noisy + i * per;
		reqs[i].gen = noisy + i * per + T * L * KT;
	}
	assert_int_equal(locus_trace_from_arrays(L, KT, E, t->n_requests, reqs, NULL, &poisoned,
						 &e), 0);
	assert_int_equal(locus_eldrfit_tau_choose(poisoned, calib, nc, &o, &to, &b, &e), 0);
	print_message("tau auto: %.3f, held-out poisoned %.3f\n", (double)a.tau, (double)b.tau);
	assert_memory_equal(&a, &b, sizeof(a));
	/* the same noise in calibration requests 0, 2, .., 30 is seen */
	for (uint32_t i = 0; i < t->n_requests; i++) {
		int noise = i % 2 ? 0 : i < 32;

		reqs[i].prompt = (noise ? noisy + (i + 1) * per : store + i * per);
		reqs[i].gen = reqs[i].prompt + T * L * KT;
	}
	assert_int_equal(locus_trace_from_arrays(L, KT, E, t->n_requests, reqs, NULL,
						 &cal_poisoned, &e), 0);
	assert_int_equal(locus_eldrfit_tau_choose(cal_poisoned, calib, nc, &o, &to, &c, &e), 0);
	assert_true(memcmp(a.pt, c.pt, sizeof(a.pt)) != 0);
	locus_trace_free(cal_poisoned);
	locus_trace_free(poisoned);
	free(noisy);
	free(reqs);
	free(calib);
	locus_trace_free(t);
	free(store);
}

/*
 * A trace whose best band is known: 3 clean clusters of equal mass over 3
 * decoders. tau 0 routes each request to its own cluster's decoder (pure
 * batches, fewest pairs); tau 2 puts every decoder in the band, i.e. least
 * loaded (exactly B each, load 1.00, mixed batches). With a loose bound
 * the choice is 0; with the bound 1.0 only tau 2 keeps the busiest
 * decoder within it.
 */
static void test_tau_auto_known_best(void **state)
{
	static const float grid[] = { 0.0f, 2.0f };
	struct locus_trace *t;
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_tau_opts to = { .grid = grid, .n_grid = 2, .batch = 4, .orders = 6,
					     .load_bound = 100, .replay = eldr_replay_router };
	struct locus_eldrfit_tau_result r;
	struct locus_error e = { 0 };
	uint32_t *calib, nc;
	uint16_t *store;
	(void)state;

	t = synthetic(&store);
	calib = malloc(sizeof(*calib) * t->n_requests);
	assert_non_null(calib);
	nc = even_half(t, calib);
	locus_eldrfit_opts_default(&o, G);
	o.restarts = 2;
	assert_int_equal(locus_eldrfit_tau_choose(t, calib, nc, &o, &to, &r, &e), 0);
	print_message("tau 0: %.2f pairs, load %.3f; tau 2: %.2f pairs, load %.3f\n",
		      r.pt[0].pairs, r.pt[0].load, r.pt[1].pairs, r.pt[1].load);
	assert_float_equal(r.tau, 0.0f, 0);
	assert_int_equal(r.feasible, 1);
	assert_true(r.pt[0].pairs < r.pt[1].pairs);
	assert_float_equal(r.pt[1].load, 1.0, 1e-9);
	assert_true(r.pt[0].load > 1.0);
	to.load_bound = 1.0f;
	assert_int_equal(locus_eldrfit_tau_choose(t, calib, nc, &o, &to, &r, &e), 0);
	assert_float_equal(r.tau, 2.0f, 0);
	free(calib);
	locus_trace_free(t);
	free(store);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decoders_outnumber_clusters),
		cmocka_unit_test(test_tau_auto_ignores_held_out),
		cmocka_unit_test(test_tau_auto_known_best),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
