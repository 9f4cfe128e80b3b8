// SPDX-License-Identifier: MIT
/*
 * The integer scoring kernels against the float reference
 * (LOCUS_ELDR_PATH_F32) on real signatures: the repo's ESFT
 * sample, and the full ESFT data ($LOCUS_DATA_DIR, default ../shared/data)
 * when present. Two arithmetics, each checked on its own:
 *  - 16-bit (scalar, avx2, avx512): every path this CPU runs gives the same
 *    bits; every score lies within the quantisation bound of the
 *    reference's; decisions are the reference's except at a band edge (a
 *    score within twice the bound of a threshold or of another
 *    candidate's), and at most 1 in 500 of them.
 *  - 8-bit (scalar-i8, avx2-i8, avx512-i8): the same bits across paths;
 *    every score equals this file's own evaluation of the arithmetic the
 *    router's header states (u8 centroids over their range, levels of at
 *    most 127, idf^2 to 16 bits) to float rounding; every score within the stated
 *    tolerance TOL8 of the reference's; decisions the reference's except
 *    at a band edge of width 2 x TOL8, at most 1 in 50.
 * Large counts (chunked int32 sums, the scalar fallback above 32767, the
 * 8-bit levels' shifts) on a synthetic table.
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

#include "locus_eldr_priv.h"
#include "locus_eldr_router.h"
#include "locus_eldrfit.h"
#include "locus_trace.h"
#include "data_paths.h"

#define QMAX 32767.0
#define FLOAT_TOL 4e-6 /* the reference's own rounding, and the final float products */
/*
 * The 8-bit arithmetic's stated tolerance: |score - exact cosine| on real
 * signatures (README-eldr.md, "The 8-bit arithmetic"). The test prints the
 * largest deviation it sees as a multiple of it.
 */
#define TOL8 2e-3
#define N_INT 3u

/* An arithmetic and its paths. */
struct family {
	const char *name;
	enum locus_eldr_path paths[N_INT];
	int i8;
};

static const struct family fam16 = {
	"16-bit", { LOCUS_ELDR_PATH_SCALAR, LOCUS_ELDR_PATH_AVX2, LOCUS_ELDR_PATH_AVX512 }, 0
};
static const struct family fam8 = {
	"8-bit",
	{ LOCUS_ELDR_PATH_SCALAR_I8, LOCUS_ELDR_PATH_AVX2_I8, LOCUS_ELDR_PATH_AVX512_I8 }, 1
};

struct routers {
	const struct family *fam;
	struct locus_eldr_tbl_view v;
	void *mem[N_INT + 1];
	struct locus_eldr_router *r[N_INT + 1]; /* the family's paths, then F32 */
	double *maxabs;                         /* [n_centroids] largest |idf x c| */
	uint32_t K;
};

static void routers_build(struct routers *rs, const void *payload, size_t len,
			  const struct family *fam)
{
	size_t msz = locus_eldr_router_mem_size(payload, len);
	const uint32_t L = 0, E = 1; /* indices into shape[] */
	uint32_t shape[2];

	memset(rs, 0, sizeof(*rs));
	rs->fam = fam;
	assert_int_equal(locus_eldr_tbl_validate(payload, len, &rs->v, NULL), 0);
	shape[L] = rs->v.hdr->n_layers;
	shape[E] = rs->v.hdr->n_experts;
	rs->K = rs->v.hdr->n_decoders;
	for (size_t p = 0; p <= N_INT; p++) {
		enum locus_eldr_path path = p < N_INT ? fam->paths[p] : LOCUS_ELDR_PATH_F32;

		if (!locus_eldr_path_supported(path))
			continue;
		rs->mem[p] = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
		assert_non_null(rs->mem[p]);
		assert_int_equal(locus_eldr_router_build(rs->mem[p], msz, payload, len, path,
							 &rs->r[p], NULL), 0);
	}
	rs->maxabs = calloc(rs->v.n_centroids, sizeof(double));
	assert_non_null(rs->maxabs);
	for (uint32_t c = 0; c < rs->v.n_centroids; c++)
		for (uint32_t f = 0; f < shape[L] * shape[E]; f++) {
			double w = fabs((double)rs->v.idf[f] *
					rs->v.centroids[(size_t)c * shape[L] * shape[E] + f]);

			if (rs->v.layer_mask[f / shape[E]] && w > rs->maxabs[c])
				rs->maxabs[c] = w;
		}
}

static void routers_free(struct routers *rs)
{
	for (size_t p = 0; p <= N_INT; p++)
		free(rs->mem[p]);
	free(rs->maxabs);
}

/*
 * Per decoder, the bound of |integer score - exact cosine|: sum of masked
 * counts x largest |element| / (2 QMAX) / idf norm (every q is within half
 * a step), the worst of the decoder's centroids; plus float rounding.
 */
static void score_bound(const struct routers *rs, const uint16_t *cnt, double *bound)
{
	const uint32_t L = rs->v.hdr->n_layers, E = rs->v.hdr->n_experts;
	double sum = 0, n2 = 0;

	for (uint32_t f = 0; f < L * E; f++) {
		double x = (double)cnt[f] * rs->v.idf[f];

		if (!rs->v.layer_mask[f / E])
			continue;
		sum += cnt[f];
		n2 += x * x;
	}
	for (uint32_t d = 0; d < rs->K; d++)
		bound[d] = 0;
	for (uint32_t c = 0; c < rs->v.n_centroids; c++) {
		uint32_t d = rs->v.centroid_slot ? rs->v.centroid_slot[c] : c;
		double b = n2 > 0 ? sum * rs->maxabs[c] / (2 * QMAX) / sqrt(n2) : 0;

		if (b > bound[d])
			bound[d] = b;
	}
	for (uint32_t d = 0; d < rs->K; d++)
		bound[d] += FLOAT_TOL;
}

/*
 * The 8-bit arithmetic as locus_eldr_router.h and eldr_priv.h state it,
 * evaluated here in plain C from the table: each centroid's idf x c mapped
 * onto 0..255 over its range [min(0, smallest), largest] and rounded;
 * counts rounded to levels round(c / 2^s) with the smallest s keeping them
 * <= 127; idf^2 in units of the largest / 65535, rounded; score = (sum a x
 * p x range / 255 + sum a x offset) / sqrt(sum a^2 x W x unit), clamped to
 * [-1, 1]. Per decoder, the best of its centroids'.
 */
static void score8_model(const struct routers *rs, const uint16_t *cnt, double *out)
{
	const uint32_t L = rs->v.hdr->n_layers, E = rs->v.hdr->n_experts;
	uint32_t maxc = 0, sh = 0;
	double m2 = 0, n2 = 0, asum = 0;

	for (uint32_t f = 0; f < L * E; f++)
		if (rs->v.layer_mask[f / E]) {
			maxc = cnt[f] > maxc ? cnt[f] : maxc;
			m2 = fmax(m2, (double)rs->v.idf[f] * rs->v.idf[f]);
		}
	while (floor((double)maxc / (1u << sh) + 0.5) > 127)
		sh++;
	for (uint32_t f = 0; f < L * E; f++) {
		double a = floor((double)cnt[f] / (1u << sh) + 0.5);

		if (!rs->v.layer_mask[f / E])
			continue;
		n2 += a * a * lrint((double)rs->v.idf[f] * rs->v.idf[f] / (m2 / 65535));
		asum += a;
	}
	for (uint32_t d = 0; d < rs->K; d++)
		out[d] = -INFINITY;
	for (uint32_t c = 0; c < rs->v.n_centroids; c++) {
		const float *cen = rs->v.centroids + (size_t)c * L * E;
		uint32_t d = rs->v.centroid_slot ? rs->v.centroid_slot[c] : c;
		double dot = 0, lo = 0, hi = 0, v;

		for (uint32_t f = 0; f < L * E; f++)
			if (rs->v.layer_mask[f / E]) {
				lo = fmin(lo, (double)rs->v.idf[f] * cen[f]);
				hi = fmax(hi, (double)rs->v.idf[f] * cen[f]);
			}
		for (uint32_t f = 0; f < L * E; f++) {
			long p;

			if (!rs->v.layer_mask[f / E] || hi <= lo)
				continue;
			p = lrint(((double)rs->v.idf[f] * cen[f] - lo) * (255 / (hi - lo)));
			p = p > 255 ? 255 : p < 0 ? 0 : p;
			dot += floor((double)cnt[f] / (1u << sh) + 0.5) * (double)p;
		}
		v = n2 > 0 ? (dot * ((hi - lo) / 255) + asum * lo) / sqrt(n2 * (m2 / 65535)) : 0;
		out[d] = fmax(out[d], fmin(1.0, fmax(-1.0, v)));
	}
}

/*
 * Per decoder, the allowed |score - reference|: the 16-bit arithmetic's
 * bound, or the 8-bit one's stated tolerance (after checking the scores s
 * against score8_model, when given).
 */
static void path_bound(const struct routers *rs, const uint8_t *sig, const float *s,
		       double *bound)
{
	const uint16_t *cnt = (const uint16_t *)locus_eldr_sig_counts(sig);
	double model[64];

	if (!rs->fam->i8) {
		score_bound(rs, cnt, bound);
		return;
	}
	for (uint32_t d = 0; d < rs->K; d++)
		bound[d] = TOL8;
	if (!s)
		return;
	score8_model(rs, cnt, model);
	for (uint32_t d = 0; d < rs->K; d++)
		if (fabs(s[d] - model[d]) > 1e-6 * fmax(1.0, fabs(model[d])))
			fail_msg("8-bit decoder %u: %.9f, the stated arithmetic gives %.9f", d,
				 (double)s[d], model[d]);
}

/*
 * Scores of every path of the family: bit-identical, each within bound
 * of F32's (the 8-bit ones also the stated arithmetic's).
 */
static double check_scores(struct routers *rs, const uint8_t *sig, size_t slen, double *bound)
{
	float s[N_INT + 1][64], *ref = s[N_INT];
	double worst = 0; /* largest |difference| / bound */
	int first = -1;

	assert_int_equal(locus_eldr_score(rs->r[N_INT], sig, slen, ref), 0);
	for (size_t p = 0; p < N_INT; p++) {
		if (!rs->r[p])
			continue;
		assert_int_equal(locus_eldr_score(rs->r[p], sig, slen, s[p]), 0);
		if (first < 0) {
			first = (int)p;
			path_bound(rs, sig, s[p], bound);
		} else {
			assert_memory_equal(s[p], s[first], sizeof(float) * rs->K);
		}
		for (uint32_t d = 0; d < rs->K; d++) {
			double diff = fabs((double)s[p][d] - ref[d]);

			if (diff > bound[d])
				fail_msg("path %s decoder %u: %.9f vs reference %.9f, bound %.3g",
					 locus_eldr_path_name(rs->fam->paths[p]), d, (double)s[p][d],
					 (double)ref[d], bound[d]);
			if (diff / bound[d] > worst)
				worst = diff / bound[d];
		}
	}
	return worst;
}

/*
 * Whether a decision may flip within the scores' bounds: a decoder's
 * reference score within 2 x bound of the band's or the spill's threshold,
 * or two decoders' within 2 x bound of each other (best, load ties).
 */
static int at_band_edge(const float *ref, const double *bound, uint32_t K, float tau,
			float spill_tau)
{
	float best = -INFINITY;

	for (uint32_t d = 0; d < K; d++)
		best = ref[d] > best ? ref[d] : best;
	for (uint32_t d = 0; d < K; d++) {
		double b = 2 * bound[d];

		if (fabs(ref[d] - (best - tau)) <= b || fabs(ref[d] - (best - spill_tau)) <= b)
			return 1;
		for (uint32_t o = d + 1; o < K; o++)
			if (fabs(ref[d] - ref[o]) <= b + 2 * bound[o])
				return 1;
	}
	return 0;
}

struct tally {
	uint32_t n, differ, edge;
	double worst;
};

#define GROUP 6 /* signatures per batch call: a batch of 4 and a partial one of 2 (AVX-512) */

/*
 * Route sigs with every path in lockstep, GROUP at a time: the reference
 * one call per signature, each integer path one locus_eldr_route_batch()
 * (its batched kernels), from the same load reports (the reference's
 * picks so far, plus a drift so the band's loads differ). A decision must
 * be the reference's, with its similarity and best within bound, or
 * differ at a band edge; after a difference the rest of that group's
 * loads differ, so its later decisions are not compared.
 */
static void route_lockstep(struct routers *rs, const uint8_t *sigs, uint32_t n, size_t slen,
			   struct tally *t)
{
	uint64_t load[64] = { 0 };
	double bound[GROUP][64];
	float ref[GROUP][64];

	for (uint32_t i0 = 0; i0 < n; i0 += GROUP) {
		uint32_t g = LOCUS_MIN(n - i0, (uint32_t)GROUP);
		struct locus_eldr_decision want[GROUP], got[GROUP];
		const void *ptr[GROUP];
		size_t lens[GROUP];
		int rc[GROUP];

		for (size_t p = 0; p <= N_INT; p++)
			for (uint32_t s = 0; s < rs->K && rs->r[p]; s++)
				locus_eldr_router_set_load(rs->r[p], s, load[s]);
		for (uint32_t j = 0; j < g; j++) {
			const uint8_t *sig = sigs + (size_t)(i0 + j) * slen;

			ptr[j] = sig;
			lens[j] = slen;
			t->worst = fmax(t->worst, check_scores(rs, sig, slen, bound[j]));
			assert_int_equal(locus_eldr_score(rs->r[N_INT], sig, slen, ref[j]), 0);
			assert_int_equal(locus_eldr_route(rs->r[N_INT], sig, slen, &want[j]), 0);
		}
		for (size_t p = 0; p < N_INT; p++) {
			if (!rs->r[p])
				continue;
			assert_int_equal(locus_eldr_route_batch(rs->r[p], ptr, lens, g, got, rc), g);
			for (uint32_t j = 0; j < g; j++) {
				const struct locus_eldr_decision *a = &got[j], *w = &want[j];
				double bmax = 0;

				for (uint32_t s = 0; s < rs->K; s++)
					bmax = fmax(bmax, bound[j][s]);
				if (a->slot == w->slot && a->n_candidates == w->n_candidates) {
					if (fabs((double)a->similarity - w->similarity) >
						    bound[j][w->slot] ||
					    fabs((double)a->best - w->best) > bmax)
						fail_msg("signature %u, path %s (batch): similarity %.9f "
							 "best %.9f, reference %.9f %.9f", i0 + j,
							 locus_eldr_path_name(rs->fam->paths[p]),
							 (double)a->similarity, (double)a->best,
							 (double)w->similarity, (double)w->best);
					continue;
				}
				t->differ++;
				if (!at_band_edge(ref[j], bound[j], rs->K, rs->v.hdr->tau,
						  rs->v.hdr->spill_tau > rs->v.hdr->tau ?
							  rs->v.hdr->spill_tau : rs->v.hdr->tau))
					fail_msg("signature %u, path %s: slot %u (%u candidates), "
						 "reference %u (%u), not at a band edge", i0 + j,
						 locus_eldr_path_name(rs->fam->paths[p]), a->slot,
						 a->n_candidates, w->slot, w->n_candidates);
				t->edge++;
				break;
			}
		}
		for (uint32_t j = 0; j < g; j++) {
			load[want[j].slot]++;
			load[(i0 + j) % rs->K] += (i0 + j) % 3;
		}
		t->n += g;
	}
}

static uint8_t *trace_sigs(const struct locus_trace *t, size_t *slen)
{
	struct locus_error e = { 0 };
	uint8_t *sigs;

	*slen = locus_eldr_sig_len(t->n_layers, t->n_experts);
	sigs = malloc(*slen * t->n_requests);
	assert_non_null(sigs);
	for (uint32_t i = 0; i < t->n_requests; i++)
		assert_int_equal(locus_eldr_sig_build(sigs + i * *slen, *slen, t->n_layers,
						      t->n_experts, t->k, t->reqs[i].prompt,
						      t->reqs[i].prompt_len, 0, &e),
				 (long)*slen);
	return sigs;
}

static void check_trace(const struct locus_trace *fit, const struct locus_trace *t,
			const struct locus_eldrfit_opts *o, const char *what)
{
	struct locus_eldrfit_result res;
	struct locus_error e = { 0 };
	static const struct family *const fams[] = { &fam16, &fam8 };
	size_t slen;
	uint8_t *sigs = trace_sigs(t, &slen);

	assert_int_equal(locus_eldrfit_trace(fit, o, &res, &e), 0);
	for (size_t f = 0; f < LOCUS_ARRAY_SIZE(fams); f++) {
		struct routers rs;
		struct tally ty = { 0 };

		routers_build(&rs, (const uint8_t *)res.blob + 64, res.blob_len - 64, fams[f]);
		route_lockstep(&rs, sigs, t->n_requests, slen, &ty);
		print_message("%s, %s, K=%u, %u centroids: %u signatures, %u decisions differ (%u "
			      "at a band edge), largest |score - reference| = %.2f x bound%s\n",
			      what, fams[f]->name, rs.K, rs.v.n_centroids, ty.n, ty.differ, ty.edge,
			      ty.worst, fams[f]->i8 ? " (the stated tolerance)" : "");
		/* per path and signature: 1 in 500 (16-bit), 1 in 50 (8-bit) */
		assert_true(ty.differ * (fams[f]->i8 ? 50 : 500) <= ty.n * N_INT);
		routers_free(&rs);
	}
	locus_eldrfit_result_free(&res);
	free(sigs);
}

static void test_sample_trace(void **state)
{
	struct locus_eldrfit_opts o = { .n_decoders = 6, .tau = 0.1f, .seed = 1 };
	struct locus_error e = { 0 };
	struct locus_trace *t;
	(void)state;

	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &e), 0);
	check_trace(t, t, &o, "ESFT sample");
	o.n_decoders = 4;
	o.centroids_per_decoder = 3; /* a version 2 table: the best of 3 centroids */
	o.tau = 0.05f;
	check_trace(t, t, &o, "ESFT sample, centroid map");
	locus_trace_free(t);
}

/* The full ESFT data in windows of 64 prompt tokens. */
static void test_esft_windows(void **state)
{
	struct locus_eldrfit_opts o = { .n_decoders = 16, .tau = 0.1f, .seed = 3 };
	struct locus_error e = { 0 };
	struct locus_trace *t, *fit;
	(void)state;

	if (locus_trace_esft_windows(locus_data_dir(), 64, 0, &t, &e) < 0) {
		print_message("skipped: no ESFT data under %s (%s)\n", locus_data_dir(), e.msg);
		skip();
	}
	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &fit, &e), 0);
	check_trace(fit, t, &o, "ESFT, 64-token windows");
	locus_trace_free(fit);
	locus_trace_free(t);
}

/*
 * Synthetic 8 x 128 table, counts below 2,000 (int32 sums flushed in
 * chunks; 8-bit levels shifted by 4), below 32,768 (a flush every block),
 * up to 65,535 (the scalar fallback; levels shifted by 9), and below 100
 * but for a late layer's below 1,000 (the 8-bit pass at shift 0 stops
 * there and starts over): every path
 * of each arithmetic the same bits, within bound (the 8-bit one: its
 * stated arithmetic exactly, and uniform random counts and centroids are
 * far from real signatures, so its deviation is printed, not bounded).
 */
static void test_large_counts(void **state)
{
	const uint32_t L = 8, E = 128, K = 12;
	static const uint32_t ranges[] = { 2000, 32768, 65536, 100 };
	static const struct family *const fams[] = { &fam16, &fam8 };
	struct locus_eldr_tbl_layout lay;
	uint32_t *ids, seed = 777;
	uint8_t *payload, *mask, *sig;
	float *idf, *cen;
	size_t slen = locus_eldr_sig_len((uint16_t)L, (uint16_t)E);
	(void)state;

	assert_int_equal(locus_eldr_tbl_layout(L, E, K, &lay), 0);
	payload = aligned_alloc(64, LOCUS_ALIGN_UP(lay.len, 64));
	sig = calloc(1, slen);
	assert_non_null(payload);
	assert_non_null(sig);
	assert_int_equal(locus_eldr_tbl_init(payload, lay.len, L, E, K, 0.1f, &ids, &mask, &idf,
					     &cen), 0);
	for (uint32_t l = 0; l < L; l++)
		mask[l] = l != 3;
	((struct locus_eldr_tbl_hdr *)payload)->n_masked = (uint16_t)(L - 1);
	for (uint32_t i = 0; i < L * E; i++) {
		seed = seed * 1103515245u + 12345u;
		idf[i] = 1.0f + (float)(seed >> 16) / 65536.0f * 7.0f;
	}
	for (uint32_t d = 0; d < K; d++) {
		double n2 = 0;

		ids[d] = d;
		for (uint32_t f = 0; f < L * E; f++) {
			seed = seed * 1103515245u + 12345u;
			cen[d * L * E + f] = mask[f / E] ? (float)(seed >> 16) / 65536.0f - 0.3f : 0;
			n2 += (double)cen[d * L * E + f] * cen[d * L * E + f];
		}
		for (uint32_t f = 0; f < L * E; f++)
			cen[d * L * E + f] = (float)(cen[d * L * E + f] / sqrt(n2));
	}
	for (size_t fi = 0; fi < LOCUS_ARRAY_SIZE(fams); fi++) {
		struct routers rs;
		double bound[64], worst = 0, dev = 0;
		uint32_t sd = seed;

		routers_build(&rs, payload, lay.len, fams[fi]);
		for (int trial = 0; trial < 60; trial++) {
			struct locus_eldr_sig_hdr *h = (void *)sig;
			uint16_t *cnt = (uint16_t *)(h + 1);
			float ref[64], got[N_INT][64];
			int first = -1;

			h->magic = LOCUS_ELDR_SIG_MAGIC;
			h->version = LOCUS_ELDR_SIG_VERSION;
			h->n_layers = (uint16_t)L;
			h->n_experts = (uint16_t)E;
			for (uint32_t f = 0; f < L * E; f++) {
				sd = sd * 1103515245u + 12345u;
				cnt[f] = (uint16_t)((sd >> 12) %
						    (trial % 4 == 3 && f / E == 6 ? 1000 :
						     ranges[trial % 4]));
			}
			if (!fams[fi]->i8) {
				worst = fmax(worst, check_scores(&rs, sig, slen, bound));
				continue;
			}
			/* same bits and the stated arithmetic: check_scores without its tolerance */
			assert_int_equal(locus_eldr_score(rs.r[N_INT], sig, slen, ref), 0);
			for (size_t p = 0; p < N_INT; p++) {
				if (!rs.r[p])
					continue;
				assert_int_equal(locus_eldr_score(rs.r[p], sig, slen, got[p]), 0);
				if (first < 0)
					first = (int)p;
				else
					assert_memory_equal(got[p], got[first], sizeof(float) * K);
				path_bound(&rs, sig, got[p], bound);
				for (uint32_t d = 0; d < K; d++)
					dev = fmax(dev, fabs((double)got[p][d] - ref[d]));
			}
		}
		if (fams[fi]->i8)
			print_message("large counts, %s: the stated arithmetic on every path, largest "
				      "|score - reference| = %.4f\n", fams[fi]->name, dev);
		else
			print_message("large counts, %s: largest |score - reference| = %.2f x bound\n",
				      fams[fi]->name, worst);
		routers_free(&rs);
	}
	free(sig);
	free(payload);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sample_trace),
		cmocka_unit_test(test_esft_windows),
		cmocka_unit_test(test_large_counts),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	for (size_t p = 0; p < N_INT; p++)
		for (int f = 0; f < 2; f++) {
			enum locus_eldr_path path = (f ? &fam8 : &fam16)->paths[p];

			printf("path %s: %s\n", locus_eldr_path_name(path),
			       locus_eldr_path_supported(path) ? "runs" : "not on this CPU");
		}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
