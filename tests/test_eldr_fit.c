// SPDX-License-Identifier: MIT
/*
 * The ELDR fit: IDF and masking by hand, the balanced assignment against
 * brute force, k-means balance and determinism, option errors, and a fit of
 * the repo's ESFT sample (purity against chance, byte-identical reruns).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "locus_eldr.h"
#include "locus_eldrfit.h"
#include "locus_trace.h"
#include "data_paths.h"


static void test_idf_by_hand(void **state)
{
	/* 3 requests x 3 features */
	const uint16_t c[] = { 1, 0, 5,   0, 0, 5,   2, 0, 5 };
	float idf[3];
	(void)state;

	locus_eldrfit_idf(c, 3, 3, idf);
	assert_float_equal(idf[0], log(4.0 / 3.0) + 1, 1e-6); /* df 2 */
	assert_float_equal(idf[1], log(4.0) + 1, 1e-6);       /* df 0 */
	assert_float_equal(idf[2], 1.0, 1e-6);                /* df 3 = N */
}

static void test_vector_masking_by_hand(void **state)
{
	const uint16_t c[] = { 3, 4, 5, 6 }; /* L=2, E=2 */
	const float idf[] = { 1, 1, 2, 1 };
	const uint8_t m0[] = { 1, 0 }, m1[] = { 0, 1 }, mall[] = { 1, 1 };
	float x[4];
	(void)state;

	assert_float_equal(locus_eldrfit_vector(c, 2, 2, idf, m0, x), 5.0, 1e-9);
	assert_float_equal(x[0], 0.6, 1e-7);
	assert_float_equal(x[1], 0.8, 1e-7);
	assert_float_equal(locus_eldrfit_vector(c, 2, 2, idf, m1, x), sqrt(136.0), 1e-6);
	assert_float_equal(x[0], 10 / sqrt(136.0), 1e-7); /* 5 * idf 2 */
	assert_float_equal(x[1], 6 / sqrt(136.0), 1e-7);
	locus_eldrfit_vector(c, 2, 2, idf, mall, x);
	assert_float_equal(x[2], 10 / sqrt(161.0), 1e-7);
}

/* Minimum cost over all balanced assignments, by enumeration. */
static double brute(const double *c, uint32_t n, uint32_t K)
{
	uint32_t a[8] = { 0 }, size[8];
	double best = DBL_MAX;
	uint64_t total = 1;

	for (uint32_t i = 0; i < n; i++)
		total *= K;
	for (uint64_t code = 0; code < total; code++) {
		uint64_t x = code;
		double s = 0;
		int ok = 1;

		memset(size, 0, sizeof(size));
		for (uint32_t i = 0; i < n; i++) {
			a[i] = (uint32_t)(x % K);
			x /= K;
			size[a[i]]++;
			s += c[i * K + a[i]];
		}
		for (uint32_t k = 0; k < K; k++)
			ok &= size[k] == n / K || size[k] == n / K + 1;
		if (ok && s < best)
			best = s;
	}
	return best;
}

static void test_balanced_assign_vs_brute_force(void **state)
{
	uint32_t seed = 7, checked = 0;
	(void)state;

	for (uint32_t n = 1; n <= 8; n++) {
		for (uint32_t K = 1; K <= 5; K++) {
			for (int trial = 0; trial < 12; trial++) {
				double c[8 * 5], got = 0;
				uint32_t a[8], size[5] = { 0 };

				for (uint32_t i = 0; i < n * K; i++) {
					seed = seed * 1103515245u + 12345u;
					/* half the trials with many ties (small integers) */
					c[i] = trial % 2 ? (double)((seed >> 16) % 4) :
						(double)(seed >> 8) / 16777216.0 - 0.5;
				}
				assert_int_equal(locus_eldrfit_balanced_assign(c, n, K, a), 0);
				for (uint32_t i = 0; i < n; i++) {
					assert_true(a[i] < K);
					size[a[i]]++;
					got += c[i * K + a[i]];
				}
				for (uint32_t k = 0; k < K; k++)
					assert_true(size[k] == n / K || size[k] == n / K + 1);
				assert_float_equal(got, brute(c, n, K), 1e-9);
				checked++;
			}
		}
	}
	assert_int_equal(checked, 8 * 5 * 12);
	assert_int_equal(locus_eldrfit_balanced_assign(NULL, 3, 2, (uint32_t[3]){ 0 }), -EINVAL);
	assert_int_equal(locus_eldrfit_balanced_assign((double[2]){ 0 }, 1, 0, (uint32_t[1]){ 0 }),
			 -EINVAL);
}

static void test_balanced_assign_beats_greedy(void **state)
{
	/*
	 * Both points prefer cluster 0; balance forces one out. Moving the
	 * point with the smaller regret is optimal: cost 0 + 5, not 1 + 9.
	 */
	const double c[] = { 0, 9,   1, 5 };
	uint32_t a[2];
	(void)state;

	assert_int_equal(locus_eldrfit_balanced_assign(c, 2, 2, a), 0);
	assert_int_equal(a[0], 0);
	assert_int_equal(a[1], 1);
}

static float *random_unit_rows(uint32_t n, uint32_t D, uint32_t seed)
{
	float *x = malloc(sizeof(float) * n * D);

	assert_non_null(x);
	for (uint32_t i = 0; i < n; i++) {
		double n2 = 0;

		for (uint32_t d = 0; d < D; d++) {
			seed = seed * 1103515245u + 12345u;
			/* 4 loose groups: a bump on a group-specific block */
			x[i * D + d] = (float)((seed >> 16) % 100) / 100.0f +
				       ((d / (D / 4)) == i % 4 ? 2.0f : 0.0f);
			n2 += (double)x[i * D + d] * x[i * D + d];
		}
		for (uint32_t d = 0; d < D; d++)
			x[i * D + d] = (float)(x[i * D + d] / sqrt(n2));
	}
	return x;
}

static void test_kmeans_balanced_and_deterministic(void **state)
{
	const uint32_t n = 103, D = 32, K = 7;
	float *x = random_unit_rows(n, D, 99), c1[7 * 32], c2[7 * 32];
	uint32_t a1[103], a2[103], size[7] = { 0 };
	int conv1, conv2, it1, it2;
	(void)state;

	it1 = locus_eldrfit_kmeans(x, n, D, K, 42, 50, c1, a1, &conv1, NULL, NULL);
	it2 = locus_eldrfit_kmeans(x, n, D, K, 42, 50, c2, a2, &conv2, NULL, NULL);
	assert_true(it1 > 0);
	assert_int_equal(it1, it2);
	assert_memory_equal(a1, a2, sizeof(a1));
	assert_memory_equal(c1, c2, sizeof(c1));
	for (uint32_t i = 0; i < n; i++)
		size[a1[i]]++;
	for (uint32_t k = 0; k < K; k++) {
		double n2 = 0;

		assert_true(size[k] == 14 || size[k] == 15);
		for (uint32_t d = 0; d < D; d++)
			n2 += (double)c1[k * D + d] * c1[k * D + d];
		assert_float_equal(n2, 1.0, 1e-5);
	}
	assert_int_equal(locus_eldrfit_kmeans(x, n, D, 0, 1, 1, c1, a1, &conv1, NULL, NULL),
			 -EINVAL);
	assert_int_equal(locus_eldrfit_kmeans(x, 3, D, 4, 1, 1, c1, a1, &conv1, NULL, NULL),
			 -EINVAL);
	free(x);
}

static void test_fit_option_errors(void **state)
{
	struct locus_eldrfit_opts o = { .n_decoders = 0, .tau = 0.1f };
	struct locus_eldrfit_result res;
	struct locus_error e = { 0 };
	uint16_t counts[2 * 4] = { 1, 2, 3, 4, 4, 3, 2, 1 };
	uint32_t dup[2] = { 3, 3 };
	(void)state;

	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 2, 2, 2, NULL, NULL, 0, 0, &o, &res, &e),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "at least 1"));
	o.n_decoders = 3;
	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 2, 2, 2, NULL, NULL, 0, 0, &o, &res, &e),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "only 2"));
	o.n_decoders = 2;
	o.tau = NAN;
	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 2, 2, 2, NULL, NULL, 0, 0, &o, &res, &e),
			 -LOCUS_ERANGE);
	o.tau = 0.1f;
	o.decoder_ids = dup;
	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 2, 2, 2, NULL, NULL, 0, 0, &o, &res, &e),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "twice"));
	o.decoder_ids = NULL;
	/* more cells than the fit holds in memory: refused before any allocation */
	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 1u << 20, 1024, 2, NULL, NULL, 0, 0, &o, &res,
					      &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "exceeds the fit's limit"));
	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 2, 2, 2, NULL, NULL, 0, 0, &o, &res, &e), 0);
	assert_int_equal(res.n_masked, 2);
	assert_int_equal(locus_eldr_blob_check(res.blob, res.blob_len, NULL, &e), 0);
	locus_eldrfit_result_free(&res);
	assert_int_equal(locus_eldrfit_trace(NULL, &o, &res, &e), -LOCUS_EPARSE);
}

static double purity(const struct locus_trace *t, const struct locus_eldrfit_result *r, uint32_t K)
{
	uint32_t cnt[64][8] = { { 0 } }, agree = 0;

	assert_true(K <= 64 && t->n_domains <= 8);
	for (uint32_t i = 0; i < r->n_used; i++)
		cnt[r->assign[i]][t->reqs[r->req_index[i]].domain]++;
	for (uint32_t k = 0; k < K; k++) {
		uint32_t best = 0;

		for (uint32_t d = 0; d < t->n_domains; d++)
			best = cnt[k][d] > best ? cnt[k][d] : best;
		agree += best;
	}
	return (double)agree / r->n_used;
}

static void test_fit_sample(void **state)
{
	struct locus_eldrfit_opts o = { .n_decoders = 8, .tau = 0.1f, .seed = 3 };
	struct locus_eldrfit_result a, b, nm;
	struct locus_eldr_tbl_view v;
	struct locus_trace *t;
	struct locus_error e = { 0 };
	double pa, pn;
	(void)state;

	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &e), 0);
	assert_int_equal(t->n_requests, 96);
	assert_int_equal(locus_eldrfit_trace(t, &o, &a, &e), 0);
	assert_int_equal(locus_eldrfit_trace(t, &o, &b, &e), 0);
	/* deterministic: payloads identical (the sealed header carries a time) */
	assert_int_equal(a.blob_len, b.blob_len);
	assert_memory_equal((uint8_t *)a.blob + 64, (uint8_t *)b.blob + 64, a.blob_len - 64);
	assert_memory_equal(a.assign, b.assign, sizeof(uint32_t) * a.n_used);
	assert_int_equal(a.score_kind, LOCUS_ELDRFIT_SCORE_DECODE);
	assert_true(a.mask_score >= a.full_score);
	assert_int_equal(locus_eldr_blob_check(a.blob, a.blob_len, &v, &e), 0);
	assert_int_equal(v.hdr->n_masked, a.n_masked);
	assert_int_equal(v.hdr->n_calib, 96);
	/* 96 requests, 4 domains of 24: chance purity of K=8 balanced clusters is
	 * about 0.4; locality must be far above it */
	o.no_mask = 1;
	assert_int_equal(locus_eldrfit_trace(t, &o, &nm, &e), 0);
	assert_int_equal(nm.n_masked, t->n_layers);
	assert_int_equal(nm.score_kind, LOCUS_ELDRFIT_SCORE_NONE);
	pa = purity(t, &a, 8);
	pn = purity(t, &nm, 8);
	print_message("sample purity K=8: %.3f with mask (%u layers), %.3f every layer\n", pa,
		      a.n_masked, pn);
	assert_true(pa > 0.6);
	assert_true(pn > 0.6);
	locus_eldrfit_result_free(&nm);
	locus_eldrfit_result_free(&b);
	locus_eldrfit_result_free(&a);
	locus_trace_free(t);
}

static void test_fit_split_half_without_decode(void **state)
{
	struct locus_eldrfit_opts o = { .n_decoders = 4, .tau = 0.1f };
	struct locus_eldrfit_result res;
	struct locus_trace_req *reqs;
	struct locus_trace *t, *p;
	struct locus_error e = { 0 };
	(void)state;

	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &e), 0);
	reqs = calloc(t->n_requests, sizeof(*reqs));
	assert_non_null(reqs);
	for (uint32_t i = 0; i < t->n_requests; i++) {
		reqs[i] = t->reqs[i];
		reqs[i].gen = NULL;
		reqs[i].gen_len = 0;
	}
	assert_int_equal(locus_trace_from_arrays(t->n_layers, t->k, t->n_experts, t->n_requests,
						 reqs, NULL, &p, &e), 0);
	assert_int_equal(locus_eldrfit_trace(p, &o, &res, &e), 0);
	assert_int_equal(res.score_kind, LOCUS_ELDRFIT_SCORE_SPLIT_HALF);
	assert_true(res.n_masked >= 1);
	locus_eldrfit_result_free(&res);
	locus_trace_free(p);
	free(reqs);
	locus_trace_free(t);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idf_by_hand),
		cmocka_unit_test(test_vector_masking_by_hand),
		cmocka_unit_test(test_balanced_assign_vs_brute_force),
		cmocka_unit_test(test_balanced_assign_beats_greedy),
		cmocka_unit_test(test_kmeans_balanced_and_deterministic),
		cmocka_unit_test(test_fit_option_errors),
		cmocka_unit_test(test_fit_sample),
		cmocka_unit_test(test_fit_split_half_without_decode),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
