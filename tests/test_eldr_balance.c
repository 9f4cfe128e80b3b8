// SPDX-License-Identifier: MIT
/*
 * The fit's balance and clustering options: slack bounds
 * by hand, the bounded and priced assignment against brute force, bounded
 * k-means keeping its bounds and following unequal natural clusters,
 * restarts keeping the best seed, the decode-aware clustering's contract,
 * the defaults and their range checks, and the repository's sample fitted
 * with the defaults.
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
#include "locus_tblfile.h"
#include "locus_trace.h"
#include "data_paths.h"

static uint32_t lcg(uint32_t *s)
{
	*s = *s * 1103515245u + 12345u;
	return *s >> 8;
}

static void test_slack_bounds_by_hand(void **state)
{
	uint32_t lo, hi;
	(void)state;

	locus_eldrfit_slack_bounds(214, 4, 0.0f, &lo, &hi); /* mean 53.5 */
	assert_int_equal(lo, 53);
	assert_int_equal(hi, 54);
	locus_eldrfit_slack_bounds(214, 4, 0.5f, &lo, &hi); /* 26.75 .. 80.25 */
	assert_int_equal(lo, 27);
	assert_int_equal(hi, 80);
	locus_eldrfit_slack_bounds(8, 4, 0.0f, &lo, &hi);
	assert_int_equal(lo, 2);
	assert_int_equal(hi, 2);
	locus_eldrfit_slack_bounds(8, 4, 1.0f, &lo, &hi);
	assert_int_equal(lo, 0);
	assert_int_equal(hi, 4);
	/* rounding never tighter than exact balance: mean 3.33, s = 0.1 */
	locus_eldrfit_slack_bounds(10, 3, 0.1f, &lo, &hi);
	assert_int_equal(lo, 3);
	assert_int_equal(hi, 4);
	locus_eldrfit_slack_bounds(10, 3, 0.3f, &lo, &hi); /* 2.33 .. 4.33 */
	assert_int_equal(lo, 3);
	assert_int_equal(hi, 4);
	locus_eldrfit_slack_bounds(10, 3, 0.4f, &lo, &hi); /* 2.0 .. 4.67 */
	assert_int_equal(lo, 2);
	assert_int_equal(hi, 4);
}

/* Minimum of sum c + penalties over assignments with sizes in [lo, hi]. */
static double brute(const double *c, uint32_t n, uint32_t K, uint32_t lo, uint32_t hi,
		    double lambda)
{
	double best = DBL_MAX;
	uint64_t total = 1;

	for (uint32_t i = 0; i < n; i++)
		total *= K;
	for (uint64_t code = 0; code < total; code++) {
		uint32_t size[8] = { 0 };
		uint64_t x = code;
		double s = 0;
		int ok = 1;

		for (uint32_t i = 0; i < n; i++) {
			uint32_t a = (uint32_t)(x % K);

			x /= K;
			size[a]++;
			s += c[i * K + a];
		}
		for (uint32_t k = 0; k < K; k++) {
			ok &= size[k] >= lo && size[k] <= hi;
			s += locus_eldrfit_balance_penalty(n, K, lambda, size[k]);
		}
		if (ok && s < best)
			best = s;
	}
	return best;
}

static void test_bounded_assign_vs_brute_force(void **state)
{
	const double lambdas[] = { 0.0, 0.7, 5.0 };
	uint32_t seed = 11, checked = 0;
	(void)state;

	for (uint32_t n = 1; n <= 8; n++) {
		for (uint32_t K = 1; K <= 4; K++) {
			for (int trial = 0; trial < 18; trial++) {
				double c[8 * 4], got = 0, lambda = lambdas[trial % 3];
				uint32_t a[8], size[4] = { 0 }, lo, hi;

				/* random valid bounds: lo <= floor(n/K), hi >= ceil(n/K) */
				lo = lcg(&seed) % (n / K + 1);
				hi = (n + K - 1) / K + lcg(&seed) % (n - (n + K - 1) / K + 1);
				for (uint32_t i = 0; i < n * K; i++)
					c[i] = trial % 2 ? (double)(lcg(&seed) % 4) :
						(double)(lcg(&seed) % 65536) / 65536.0 - 0.5;
				assert_int_equal(locus_eldrfit_bounded_assign(c, n, K, lo, hi, lambda,
									    a), 0);
				for (uint32_t i = 0; i < n; i++) {
					assert_true(a[i] < K);
					size[a[i]]++;
					got += c[i * K + a[i]];
				}
				for (uint32_t k = 0; k < K; k++) {
					assert_true(size[k] >= lo && size[k] <= hi);
					got += locus_eldrfit_balance_penalty(n, K, lambda, size[k]);
				}
				assert_float_equal(got, brute(c, n, K, lo, hi, lambda), 1e-9);
				checked++;
			}
		}
	}
	assert_int_equal(checked, 8 * 4 * 18);
	/* bounds that no assignment meets */
	assert_int_equal(locus_eldrfit_bounded_assign((double[4]){ 0 }, 2, 2, 2, 2, 0, (uint32_t[2]){ 0 }),
			 -EINVAL);
	assert_int_equal(locus_eldrfit_bounded_assign((double[4]){ 0 }, 4, 2, 0, 1, 0,
						      (uint32_t[4]){ 0 }), -EINVAL);
	assert_int_equal(locus_eldrfit_bounded_assign((double[4]){ 0 }, 4, 2, 0, 4, -1,
						      (uint32_t[4]){ 0 }), -EINVAL);
}

static void test_balance_price_by_hand(void **state)
{
	/* every point costs 0 in cluster 0 and 1 in cluster 1; bounds 0..4 */
	const double c[] = { 0, 1, 0, 1, 0, 1, 0, 1 };
	uint32_t a[4], in0;
	(void)state;

	/* no price: all in cluster 0 */
	assert_int_equal(locus_eldrfit_bounded_assign(c, 4, 2, 0, 4, 0.0, a), 0);
	in0 = (a[0] == 0) + (a[1] == 0) + (a[2] == 0) + (a[3] == 0);
	assert_int_equal(in0, 4);
	/* lambda 3: slot 3 of cluster 0 costs 3 * (3 - 2) / 2 = 1.5 > 1: a 2/2 split */
	assert_int_equal(locus_eldrfit_bounded_assign(c, 4, 2, 0, 4, 3.0, a), 0);
	in0 = (a[0] == 0) + (a[1] == 0) + (a[2] == 0) + (a[3] == 0);
	assert_int_equal(in0, 2);
	/* lambda 1.5: slot 3 costs 0.75 < 1, slot 4 costs 1.5 > 1: 3 and 1 */
	assert_int_equal(locus_eldrfit_bounded_assign(c, 4, 2, 0, 4, 1.5, a), 0);
	in0 = (a[0] == 0) + (a[1] == 0) + (a[2] == 0) + (a[3] == 0);
	assert_int_equal(in0, 3);
	assert_float_equal(locus_eldrfit_balance_penalty(4, 2, 1.5, 3), 0.75, 1e-12);
	assert_float_equal(locus_eldrfit_balance_penalty(4, 2, 1.5, 4), 2.25, 1e-12);
}

/*
 * n unit rows in D = 3 * 16 dims: natural cluster g (sizes[g]) is a bump
 * on block g plus noise; returns the rows, truth[i] = g.
 */
static float *natural_rows(const uint32_t *sizes, uint32_t G, uint32_t D, uint32_t *truth,
			   uint32_t *n_out)
{
	uint32_t n = 0, seed = 5;
	float *x;

	for (uint32_t g = 0; g < G; g++)
		n += sizes[g];
	x = malloc(sizeof(float) * n * D);
	assert_non_null(x);
	for (uint32_t g = 0, i = 0; g < G; g++) {
		for (uint32_t j = 0; j < sizes[g]; j++, i++) {
			double n2 = 0;

			truth[i] = g;
			for (uint32_t d = 0; d < D; d++) {
				x[i * D + d] = (float)(lcg(&seed) % 100) / 400.0f +
					       (d / (D / G) == g ? 1.0f : 0.0f);
				n2 += (double)x[i * D + d] * x[i * D + d];
			}
			for (uint32_t d = 0; d < D; d++)
				x[i * D + d] = (float)(x[i * D + d] / sqrt(n2));
		}
	}
	*n_out = n;
	return x;
}

static void test_kmeans_bounded_follows_natural_sizes(void **state)
{
	const uint32_t sizes[3] = { 12, 30, 58 }, D = 48, K = 3;
	uint32_t truth[100], a[100], n, lo, hi;
	float *x = natural_rows(sizes, 3, D, truth, &n), c[3 * 48];
	const float slacks[] = { 0.0f, 0.3f, 0.8f };
	int conv;
	(void)state;

	for (int s = 0; s < 3; s++) {
		for (int priced = 0; priced < 2; priced++) {
			uint32_t size[3] = { 0 }, cnt[3][3] = { { 0 } }, pure = 0;

			locus_eldrfit_slack_bounds(n, K, slacks[s], &lo, &hi);
			assert_true(locus_eldrfit_kmeans_bounded(x, n, D, K, lo, hi,
								 priced ? 2.0 : 0.0, 3, 50, c, a,
								 &conv, NULL, NULL) > 0);
			for (uint32_t i = 0; i < n; i++) {
				size[a[i]]++;
				cnt[a[i]][truth[i]]++;
			}
			for (uint32_t k = 0; k < K; k++) {
				uint32_t mx = 0;

				assert_true(size[k] >= lo && size[k] <= hi);
				for (uint32_t g = 0; g < 3; g++)
					mx = cnt[k][g] > mx ? cnt[k][g] : mx;
				pure += mx;
			}
			print_message("slack %.1f price %d: sizes %u %u %u (bounds %u..%u), "
				      "purity %.2f\n", (double)slacks[s], priced ? 2 : 0, size[0],
				      size[1], size[2], lo, hi, (double)pure / n);
			if (s == 0) /* 33/33/34 cannot be pure */
				assert_true(pure < n);
			if (s == 2 && !priced) /* bounds 7..60 hold the natural sizes */
				assert_int_equal(pure, n);
		}
	}
	free(x);
}

static void test_restarts_keep_best_seed(void **state)
{
	const uint16_t L = 2, E = 16;
	const uint32_t n = 60;
	uint16_t *pre = calloc((size_t)n * L * E, sizeof(*pre));
	struct locus_eldrfit_opts o = { .n_decoders = 5, .tau = 0.1f, .seed = 40, .no_mask = 1,
					.restarts = 6 };
	struct locus_eldrfit_result best, one;
	struct locus_error e = { 0 };
	double max = -DBL_MAX;
	uint64_t arg = 0;
	uint32_t seed = 3;
	(void)state;

	assert_non_null(pre);
	for (uint32_t i = 0; i < n * L * E; i++) /* loose structure: many local optima */
		pre[i] = (uint16_t)(lcg(&seed) % 4 + (i % E < 4 && (i / (L * E)) % 3 == 0 ? 3 : 0));
	assert_int_equal(locus_eldrfit_arrays(pre, NULL, n, L, E, NULL, NULL, 0, 0, &o, &best, &e),
			 0);
	for (uint32_t r = 0; r < 6; r++) {
		struct locus_eldrfit_opts o1 = o;

		o1.restarts = 1;
		o1.seed = o.seed + r;
		assert_int_equal(locus_eldrfit_arrays(pre, NULL, n, L, E, NULL, NULL, 0, 0, &o1,
						      &one, &e), 0);
		if (one.objective > max) {
			max = one.objective;
			arg = o1.seed;
		}
		locus_eldrfit_result_free(&one);
	}
	assert_true(best.objective == max);
	assert_int_equal(best.seed, arg);
	locus_eldrfit_result_free(&best);
	free(pre);
}

/*
 * Prefill signatures that do not tell two groups apart (the same counts
 * plus noise) and decode counts that do: the decode-aware clustering finds
 * the groups, the prefill-only one cannot, and the table's centroids are the
 * members' mean prefill vectors either way.
 */
static void test_decode_aware_clustering(void **state)
{
	const uint16_t L = 2, E = 16;
	const uint32_t n = 40, LE = 32;
	uint16_t pre[40 * 32], dec[40 * 32];
	struct locus_eldrfit_opts o = { .n_decoders = 2, .tau = 0.1f, .no_mask = 1,
					.restarts = 4 };
	struct locus_eldrfit_result r;
	struct locus_eldr_tbl_view v;
	struct locus_error e = { 0 };
	uint32_t seed = 9, agree_dec = 0, agree_pre = 0;
	float idf[32], x[32];
	const uint8_t all[2] = { 1, 1 };
	(void)state;

	for (uint32_t i = 0; i < n; i++)
		for (uint32_t f = 0; f < LE; f++) {
			pre[i * LE + f] = (uint16_t)(4 + lcg(&seed) % 3);
			dec[i * LE + f] = (uint16_t)(f % E < 8 ? (i % 2 ? 6 : 0) : (i % 2 ? 0 : 6));
		}
	o.decode_weight = 1.0f;
	assert_int_equal(locus_eldrfit_arrays(pre, dec, n, L, E, NULL, NULL, 0, 0, &o, &r, &e), 0);
	assert_int_equal(r.decode_clustered, 1);
	for (uint32_t i = 0; i < n; i++)
		agree_dec += r.assign[i] == r.assign[i % 2];
	assert_int_equal(agree_dec, n); /* the two decode groups, exactly */
	/* the table's centroid 0 = normalised mean prefill vector of its members */
	assert_int_equal(locus_eldr_tbl_validate((uint8_t *)r.blob + 64, r.blob_len - 64, &v, &e),
			 0);
	locus_eldrfit_idf(pre, n, LE, idf);
	{
		double acc[32] = { 0 }, nn = 0;

		for (uint32_t i = 0; i < n; i++) {
			if (r.assign[i] != 0)
				continue;
			locus_eldrfit_vector(pre + i * LE, L, E, idf, all, x);
			for (uint32_t f = 0; f < LE; f++)
				acc[f] += x[f];
		}
		for (uint32_t f = 0; f < LE; f++)
			nn += acc[f] * acc[f];
		for (uint32_t f = 0; f < LE; f++)
			assert_float_equal(v.centroids[f], acc[f] / sqrt(nn), 1e-6);
	}
	locus_eldrfit_result_free(&r);
	/* prefill only: the same requests, decode ignored */
	o.decode_weight = 0.0f;
	assert_int_equal(locus_eldrfit_arrays(pre, dec, n, L, E, NULL, NULL, 0, 0, &o, &r, &e), 0);
	assert_int_equal(r.decode_clustered, 0);
	for (uint32_t i = 0; i < n; i++)
		agree_pre += r.assign[i] == r.assign[i % 2];
	print_message("decode groups recovered: %u/%u decode-aware, %u/%u prefill only\n",
		      agree_dec, n, agree_pre, n);
	assert_true(agree_pre < n);
	locus_eldrfit_result_free(&r);
	/* no decode tokens at all: prefill only, whatever the weight */
	memset(dec, 0, sizeof(dec));
	o.decode_weight = 1.0f;
	assert_int_equal(locus_eldrfit_arrays(pre, dec, n, L, E, NULL, NULL, 0, 0, &o, &r, &e), 0);
	assert_int_equal(r.decode_clustered, 0);
	locus_eldrfit_result_free(&r);
}

static void test_defaults_and_range_checks(void **state)
{
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_result r;
	struct locus_error e = { 0 };
	uint16_t counts[2 * 4] = { 1, 2, 3, 4, 4, 3, 2, 1 };
	(void)state;

	locus_eldrfit_opts_default(&o, 2);
	assert_int_equal(o.n_decoders, 2);
	assert_float_equal(o.tau, LOCUS_ELDR_TAU_DEFAULT, 0);
	assert_float_equal(o.slack, LOCUS_ELDRFIT_SLACK_DEFAULT, 0);
	assert_float_equal(o.balance_price, LOCUS_ELDRFIT_BALANCE_PRICE_DEFAULT, 0);
	assert_int_equal(o.restarts, LOCUS_ELDRFIT_RESTARTS_DEFAULT);
	assert_float_equal(o.decode_weight, LOCUS_ELDRFIT_DECODE_WEIGHT_DEFAULT, 0);
	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 2, 2, 2, NULL, NULL, 0, 0, &o, &r, &e), 0);
	locus_eldrfit_result_free(&r);
	o.slack = 1.5f;
	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 2, 2, 2, NULL, NULL, 0, 0, &o, &r, &e),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "slack"));
	o.slack = NAN;
	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 2, 2, 2, NULL, NULL, 0, 0, &o, &r, &e),
			 -LOCUS_ERANGE);
	o.slack = 0.5f;
	o.balance_price = -1;
	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 2, 2, 2, NULL, NULL, 0, 0, &o, &r, &e),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "balance price"));
	o.balance_price = 2;
	o.decode_weight = INFINITY;
	assert_int_equal(locus_eldrfit_arrays(counts, NULL, 2, 2, 2, NULL, NULL, 0, 0, &o, &r, &e),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "decode weight"));
}

/* Share of requests whose cluster's majority domain is their own. */
static double purity(const struct locus_trace *t, const struct locus_eldrfit_result *r,
		     uint32_t K)
{
	uint32_t cnt[8][8] = { { 0 } }, agree = 0;

	for (uint32_t i = 0; i < r->n_used; i++)
		cnt[r->assign[i]][t->reqs[r->req_index[i]].domain]++;
	for (uint32_t k = 0; k < K; k++) {
		uint32_t best = 0;

		for (uint32_t d = 0; d < t->n_domains && d < 8; d++)
			best = cnt[k][d] > best ? cnt[k][d] : best;
		agree += best;
	}
	return (double)agree / r->n_used;
}

/*
 * The repository's ESFT sample (96 requests, 4 domains of 24) at K=4 with
 * the defaults and each of the seeds 0..7: the clusters are the domains,
 * whatever the seed (purity at least 0.93: a few of the sample's requests
 * sit nearer another domain's; the test prints each seed's purity), where
 * the exact-balance fit (one k-means++ seed, prefill only) depends on its
 * seed.
 */
static void test_sample_default_fit_purity(void **state)
{
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_result r;
	struct locus_error e = { 0 };
	struct locus_trace *t = NULL;
	char path[4096];
	double worst = 1;
	(void)state;

	snprintf(path, sizeof(path), "%s/tests/data/calib_sample.jsonl", locus_data_root());
	assert_int_equal(locus_trace_load(path, NULL, &t, &e), 0);
	assert_true(t->n_domains >= 5);
	for (uint64_t seed = 0; seed < 8; seed++) {
		uint32_t size[4] = { 0 }, lo, hi;
		double p;

		locus_eldrfit_opts_default(&o, 4);
		o.seed = seed;
		assert_int_equal(locus_eldrfit_trace(t, &o, &r, &e), 0);
		p = purity(t, &r, 4);
		locus_eldrfit_slack_bounds(r.n_used, 4, o.slack, &lo, &hi);
		for (uint32_t i = 0; i < r.n_used; i++)
			size[r.assign[i]]++;
		for (uint32_t k = 0; k < 4; k++)
			assert_true(size[k] >= lo && size[k] <= hi);
		print_message("sample K=4, defaults, seed %u: purity %.3f, clusters %u %u %u %u\n",
			      (unsigned)seed, p, size[0], size[1], size[2], size[3]);
		worst = p < worst ? p : worst;
		locus_eldrfit_result_free(&r);
	}
	assert_true(worst >= 0.93);
	locus_trace_free(t);
}

/*
 * Centroids per decoder: two decoder clusters, each of two sub-modes. With
 * 2 per decoder the table maps two centroids to each decoder, each the mean
 * of one sub-mode's prefill vectors; with 1 (or 0) it is the fit of one
 * centroid per decoder, byte for byte; the limits are checked.
 */
static void test_centroids_per_decoder(void **state)
{
	enum { L = 1, E = 16, N = 48 };
	uint16_t pre[N * E];
	struct locus_eldrfit_opts o = { .n_decoders = 2, .tau = 0.1f, .no_mask = 1,
					.restarts = 2, .slack = 0.5f };
	struct locus_eldrfit_result r0, r1, r2;
	struct locus_eldr_tbl_view v0, v1, v2;
	struct locus_error e = { 0 };
	uint32_t seed = 3;
	float idf[E], x[E];
	const uint8_t all[L] = { 1 };
	(void)state;

	/* request i: sub-mode i % 4 (0, 1: decoder cluster A; 2, 3: B), plus noise */
	for (uint32_t i = 0; i < N; i++)
		for (uint32_t f = 0; f < E; f++) {
			uint32_t m = i % 4, group = f / 8, half = (f / 4) % 2;

			pre[i * E + f] = (uint16_t)(group != m / 2 ? lcg(&seed) % 2 :
						    half == m % 2 ? 6 + lcg(&seed) % 2 : 2);
		}
	assert_int_equal(locus_eldrfit_arrays(pre, NULL, N, L, E, NULL, NULL, 0, 0, &o, &r0, &e), 0);
	o.centroids_per_decoder = 1;
	assert_int_equal(locus_eldrfit_arrays(pre, NULL, N, L, E, NULL, NULL, 0, 0, &o, &r1, &e), 0);
	o.centroids_per_decoder = 2;
	assert_int_equal(locus_eldrfit_arrays(pre, NULL, N, L, E, NULL, NULL, 0, 0, &o, &r2, &e), 0);
	assert_int_equal(locus_eldr_tbl_validate((uint8_t *)r0.blob + 64, r0.blob_len - 64, &v0, &e),
			 0);
	assert_int_equal(locus_eldr_tbl_validate((uint8_t *)r1.blob + 64, r1.blob_len - 64, &v1, &e),
			 0);
	assert_int_equal(locus_eldr_tbl_validate((uint8_t *)r2.blob + 64, r2.blob_len - 64, &v2, &e),
			 0);
	/* 1 per decoder is the fit of before: same payload but the creation time */
	assert_int_equal(r0.blob_len, r1.blob_len);
	assert_memory_equal((uint8_t *)r0.blob + 64, (uint8_t *)r1.blob + 64, r0.blob_len - 64);
	assert_null(v1.centroid_slot);
	assert_int_equal(r1.n_centroids, 2);
	assert_int_equal(((const struct locus_tbl_hdr *)r1.blob)->kind_version, 1);
	/* the decoder clusters are A and B */
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(r2.assign[i], r2.assign[(i % 4) / 2 * 2]);
	assert_int_equal(r2.n_centroids, 4);
	assert_int_equal(v2.n_centroids, 4);
	assert_non_null(v2.centroid_slot);
	assert_int_equal(((const struct locus_tbl_hdr *)r2.blob)->kind_version, 2);
	locus_eldrfit_idf(pre, N, E, idf);
	for (uint32_t m = 0; m < 4; m++) {
		uint32_t slot = r2.assign[m], owners = 0;
		double acc[E] = { 0 }, nn = 0, best = -1;

		for (uint32_t i = m; i < N; i += 4) {
			locus_eldrfit_vector(pre + i * E, L, E, idf, all, x);
			for (uint32_t f = 0; f < E; f++)
				acc[f] += x[f];
		}
		for (uint32_t f = 0; f < E; f++)
			nn += acc[f] * acc[f];
		for (uint32_t c = 0; c < 4; c++) {
			double dot = 0;

			if (v2.centroid_slot[c] != slot)
				continue;
			owners++;
			for (uint32_t f = 0; f < E; f++)
				dot += v2.centroids[c * E + f] * acc[f] / sqrt(nn);
			best = fmax(best, dot);
		}
		assert_int_equal(owners, 2);
		print_message("sub-mode %u: its decoder's best centroid at cosine %.6f\n", m, best);
		assert_true(best > 0.9999); /* the sub-mode's own mean */
	}
	locus_eldrfit_result_free(&r2);
	/* the most per decoder (clusters of 24 members): 32 centroids; one more is refused */
	o.centroids_per_decoder = 16;
	assert_int_equal(locus_eldrfit_arrays(pre, NULL, N, L, E, NULL, NULL, 0, 0, &o, &r2, &e), 0);
	assert_int_equal(r2.n_centroids, 32);
	locus_eldrfit_result_free(&r2);
	o.centroids_per_decoder = 17;
	assert_int_equal(locus_eldrfit_arrays(pre, NULL, N, L, E, NULL, NULL, 0, 0, &o, &r2, &e),
			 -LOCUS_ERANGE);
	o.centroids_per_decoder = 0;
	o.spill_tau = 0.05f; /* not wider than tau */
	assert_int_equal(locus_eldrfit_arrays(pre, NULL, N, L, E, NULL, NULL, 0, 0, &o, &r2, &e),
			 -LOCUS_ERANGE);
	o.spill_tau = 0;
	o.spill_margin = 1; /* a margin without a spill */
	assert_int_equal(locus_eldrfit_arrays(pre, NULL, N, L, E, NULL, NULL, 0, 0, &o, &r2, &e),
			 -LOCUS_ERANGE);
	locus_eldrfit_result_free(&r1);
	locus_eldrfit_result_free(&r0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slack_bounds_by_hand),
		cmocka_unit_test(test_bounded_assign_vs_brute_force),
		cmocka_unit_test(test_balance_price_by_hand),
		cmocka_unit_test(test_kmeans_bounded_follows_natural_sizes),
		cmocka_unit_test(test_restarts_keep_best_seed),
		cmocka_unit_test(test_decode_aware_clustering),
		cmocka_unit_test(test_defaults_and_range_checks),
		cmocka_unit_test(test_centroids_per_decoder),
		cmocka_unit_test(test_sample_default_fit_purity),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
