// SPDX-License-Identifier: MIT
/*
 * The locality-band router: hand-computed scores, masking, band, ties,
 * herding guard, down and disallowed decoders; and every SIMD path giving
 * bit-identical scores on real signatures (the repo's ESFT sample).
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

#include "eldr_rand.h"
#include "locus_eldr_priv.h"
#include "locus_eldr_router.h"
#include "locus_eldrfit.h"
#include "locus_trace.h"
#include "data_paths.h"

/* The repo's calibration sample; tests run from the repository root. */

struct fixture {
	uint8_t *payload;
	size_t len;
	void *mem;
	struct locus_eldr_router *r;
};

/*
 * L=2, E=4, K=3, only layer 0 masked, ids 5, 7, 9; idf 1 except idf[0][0].
 * Centroids (layer 0): d0 (1,0,0,0), d1 (0,1,0,0), d2 (0.6,0.8,0,0).
 */
static void make_table(struct fixture *f, float idf00, float tau, enum locus_eldr_path path)
{
	struct locus_eldr_tbl_layout lay;
	struct locus_error e = { 0 };
	uint32_t *ids;
	uint8_t *mask;
	float *idf, *cen;
	size_t msz;

	assert_int_equal(locus_eldr_tbl_layout(2, 4, 3, &lay), 0);
	f->len = lay.len;
	f->payload = aligned_alloc(64, LOCUS_ALIGN_UP(lay.len, 64));
	assert_non_null(f->payload);
	assert_int_equal(locus_eldr_tbl_init(f->payload, lay.len, 2, 4, 3, tau, &ids, &mask, &idf,
					     &cen), 0);
	((struct locus_eldr_tbl_hdr *)f->payload)->n_masked = 1;
	ids[0] = 5;
	ids[1] = 7;
	ids[2] = 9;
	mask[0] = 1;
	for (int i = 0; i < 8; i++)
		idf[i] = 1.0f;
	idf[0] = idf00;
	cen[0] = 1.0f;
	cen[8 + 1] = 1.0f;
	cen[16 + 0] = 0.6f;
	cen[16 + 1] = 0.8f;
	msz = locus_eldr_router_mem_size(f->payload, f->len);
	assert_true(msz > 0);
	f->mem = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
	assert_non_null(f->mem);
	assert_int_equal(locus_eldr_router_build(f->mem, msz, f->payload, f->len, path, &f->r, &e),
			 0);
}

static void free_table(struct fixture *f)
{
	free(f->mem);
	free(f->payload);
}

/* A 2x4 signature: layer 0 = c, layer 1 = 9s (must be ignored: unmasked). */
static void make_sig(uint8_t *buf, const uint16_t c[4], uint64_t allowed)
{
	struct locus_eldr_sig_hdr *h = (void *)buf;
	uint16_t *cnt = (uint16_t *)(h + 1);

	memset(buf, 0, locus_eldr_sig_len(2, 4));
	h->magic = LOCUS_ELDR_SIG_MAGIC;
	h->version = LOCUS_ELDR_SIG_VERSION;
	h->n_layers = 2;
	h->n_experts = 4;
	h->allowed_decoders = allowed;
	memcpy(cnt, c, 8);
	for (int e = 0; e < 4; e++)
		cnt[4 + e] = 9;
}

/*
 * The integer paths' score bound (locus_eldr_router.h) on these 2 x 4
 * signatures: 7 masked counts x largest |idf x c| (2 at most) / (2 x
 * 32767) / idf norm (5 at least) = 4.3e-5, plus float rounding.
 */
#define HAND_TOL 5e-5

static const enum locus_eldr_path all_paths[] = {
	LOCUS_ELDR_PATH_SCALAR, LOCUS_ELDR_PATH_AVX2, LOCUS_ELDR_PATH_AVX512,
};

static void test_hand_scores(void **state)
{
	static const uint16_t c[4] = { 3, 4, 0, 0 };
	uint8_t sig[64];
	float s[3];
	(void)state;

	make_sig(sig, c, 0);
	for (size_t p = 0; p < LOCUS_ARRAY_SIZE(all_paths); p++) {
		struct fixture f;

		if (!locus_eldr_path_supported(all_paths[p]))
			continue;
		/* idf 1: x = (0.6, 0.8): scores 0.6, 0.8, 1.0 */
		make_table(&f, 1.0f, 0.1f, all_paths[p]);
		assert_int_equal(locus_eldr_score(f.r, sig, locus_eldr_sig_len(2, 4), s), 0);
		assert_float_equal(s[0], 0.6f, HAND_TOL);
		assert_float_equal(s[1], 0.8f, HAND_TOL);
		assert_float_equal(s[2], 1.0f, HAND_TOL);
		free_table(&f);
		/*
		 * idf[0][0] = 2: x = (6, 4) / sqrt(52); c' = idf * c, so
		 * s_d = (6 c0 + 4 c1) / sqrt(52)
		 */
		make_table(&f, 2.0f, 0.1f, all_paths[p]);
		assert_int_equal(locus_eldr_score(f.r, sig, locus_eldr_sig_len(2, 4), s), 0);
		assert_float_equal(s[0], 6.0 / sqrt(52.0), HAND_TOL);
		assert_float_equal(s[1], 4.0 / sqrt(52.0), HAND_TOL);
		assert_float_equal(s[2], (6 * 0.6 + 4 * 0.8) / sqrt(52.0), HAND_TOL);
		free_table(&f);
	}
}

static void test_unmasked_layers_ignored(void **state)
{
	static const uint16_t c[4] = { 0, 5, 0, 0 };
	uint8_t a[64], b[64];
	float sa[3], sb[3];
	struct fixture f;
	(void)state;

	make_table(&f, 1.0f, 0.1f, LOCUS_ELDR_PATH_AUTO);
	make_sig(a, c, 0);
	make_sig(b, c, 0);
	((uint16_t *)(b + 32))[4 + 2] = 60000; /* layer 1 differs */
	assert_int_equal(locus_eldr_score(f.r, a, locus_eldr_sig_len(2, 4), sa), 0);
	assert_int_equal(locus_eldr_score(f.r, b, locus_eldr_sig_len(2, 4), sb), 0);
	assert_memory_equal(sa, sb, sizeof(sa));
	assert_float_equal(sa[1], 1.0f, 1e-6);
	free_table(&f);
}

static void test_band_and_ties(void **state)
{
	static const uint16_t c[4] = { 3, 4, 0, 0 }; /* scores 0.6, 0.8, 1.0 */
	struct locus_eldr_decision d;
	size_t len = locus_eldr_sig_len(2, 4);
	uint8_t sig[64];
	struct fixture f;
	(void)state;

	make_sig(sig, c, 0);
	/* tau 0.1: only d2 in the band, whatever the loads */
	make_table(&f, 1.0f, 0.1f, LOCUS_ELDR_PATH_AUTO);
	locus_eldr_router_set_load(f.r, 2, 1000);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 2);
	assert_int_equal(d.decoder_id, 9);
	assert_int_equal(d.n_candidates, 1);
	assert_int_equal(d.load, 1000);
	free_table(&f);

	/* tau 0.25: d1 and d2; equal loads -> higher similarity (d2) */
	make_table(&f, 1.0f, 0.25f, LOCUS_ELDR_PATH_AUTO);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 2);
	assert_int_equal(d.n_candidates, 2);
	assert_float_equal(d.best, 1.0f, HAND_TOL);
	/* reported d2 = 5: d1 takes the next 5 (herding guard counts them) */
	locus_eldr_router_set_load(f.r, 2, 5);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
		assert_int_equal(d.slot, 1);
		assert_int_equal(d.load, (uint64_t)i);
	}
	/* d1 now 0 + 5 local = d2's 5: tie -> higher similarity: d2 */
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 2);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 1);
	/* a load report clears local assignments */
	locus_eldr_router_set_load(f.r, 1, 0);
	locus_eldr_router_set_load(f.r, 2, 0);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 2);
	/* d0 (0.6) is never a candidate at tau 0.25 even when idle */
	locus_eldr_router_set_load(f.r, 1, 100);
	locus_eldr_router_set_load(f.r, 2, 100);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_true(d.slot == 1 || d.slot == 2);
	free_table(&f);
}

/* The load spill: off after build; on, a lighter decoder of the wider band by > margin. */
static void test_load_spill(void **state)
{
	static const uint16_t c[4] = { 3, 4, 0, 0 }; /* scores 0.6, 0.8, 1.0 */
	struct locus_eldr_decision d;
	size_t len = locus_eldr_sig_len(2, 4);
	uint8_t sig[64];
	struct fixture f;
	(void)state;

	make_sig(sig, c, 0);
	make_table(&f, 1.0f, 0.1f, LOCUS_ELDR_PATH_AUTO); /* band: d2 only */
	/* off after build: d2 however loaded */
	locus_eldr_router_set_load(f.r, 2, 1000);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 2);
	assert_int_equal(locus_eldr_router_set_spill(f.r, 0.05f, 0), -LOCUS_ERANGE);
	assert_int_equal(locus_eldr_router_set_spill(f.r, 2.5f, 0), -LOCUS_ERANGE);
	assert_int_equal(locus_eldr_router_set_spill(f.r, NAN, 0), -LOCUS_ERANGE);
	/* spill_tau == tau: still off */
	assert_int_equal(locus_eldr_router_set_spill(f.r, 0.1f, 0), 0);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 2);
	/* wider band 0.25 (d1, d2), margin 2: d2 at 2 over d1 stays, at 3 spills */
	assert_int_equal(locus_eldr_router_set_spill(f.r, 0.25f, 2), 0);
	locus_eldr_router_set_load(f.r, 1, 0);
	locus_eldr_router_set_load(f.r, 2, 2);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 2);
	assert_int_equal(d.load, 2);
	assert_int_equal(d.n_candidates, 1);
	/* d2 now 2 + 1 local = 3 > 0 + 2: d1 takes it, then d1 (1) vs d2 (3): no spill */
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 1);
	assert_int_equal(d.decoder_id, 7);
	assert_int_equal(d.load, 0);
	assert_int_equal(d.n_candidates, 1);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 2);
	/* d0 (0.6) is outside the wider band however idle it is */
	locus_eldr_router_set_load(f.r, 1, 100);
	locus_eldr_router_set_load(f.r, 2, 100);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_true(d.slot == 1 || d.slot == 2);
	/* a down band decoder: the band is d1's (best 0.8), the wider band d0..d1 */
	locus_eldr_router_set_up(f.r, 2, 0);
	locus_eldr_router_set_load(f.r, 0, 0);
	locus_eldr_router_set_load(f.r, 1, 3);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 0);
	free_table(&f);
}

static void test_equal_scores_lower_slot(void **state)
{
	static const uint16_t zero[4] = { 0, 0, 0, 0 };
	struct locus_eldr_decision d;
	uint8_t sig[64];
	struct fixture f;
	float s[3];
	(void)state;

	/* an all-zero (masked) signature scores 0 everywhere: all in band */
	make_sig(sig, zero, 0);
	make_table(&f, 1.0f, 0.0f, LOCUS_ELDR_PATH_AUTO);
	assert_int_equal(locus_eldr_score(f.r, sig, locus_eldr_sig_len(2, 4), s), 0);
	assert_true(s[0] == 0.0f && s[1] == 0.0f && s[2] == 0.0f);
	assert_int_equal(locus_eldr_route(f.r, sig, locus_eldr_sig_len(2, 4), &d), 0);
	assert_int_equal(d.slot, 0); /* same load, same score: lower slot */
	assert_int_equal(d.n_candidates, 3);
	assert_int_equal(locus_eldr_route(f.r, sig, locus_eldr_sig_len(2, 4), &d), 0);
	assert_int_equal(d.slot, 1); /* slot 0 now has one local assignment */
	free_table(&f);
}

static void test_down_and_allowed(void **state)
{
	static const uint16_t c[4] = { 3, 4, 0, 0 };
	struct locus_eldr_decision d;
	size_t len = locus_eldr_sig_len(2, 4);
	uint8_t sig[64];
	struct fixture f;
	(void)state;

	make_table(&f, 1.0f, 0.1f, LOCUS_ELDR_PATH_AUTO);
	make_sig(sig, c, 0);
	/* best decoder down: the band is relative to the best one up */
	locus_eldr_router_set_up(f.r, 2, 0);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.slot, 1);
	assert_float_equal(d.best, 0.8f, 1e-6);
	locus_eldr_router_set_up(f.r, 1, 0);
	locus_eldr_router_set_up(f.r, 0, 0);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), -LOCUS_ENODEST);
	locus_eldr_router_set_up(f.r, 0, 1);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.decoder_id, 5);
	locus_eldr_router_set_up(f.r, 1, 1);
	locus_eldr_router_set_up(f.r, 2, 1);
	/* the signature allows decoder id 5 only (bit 5) */
	make_sig(sig, c, 1ull << 5);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.decoder_id, 5);
	/* ids 7 or 9: 9 is best */
	make_sig(sig, c, (1ull << 7) | (1ull << 9));
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), 0);
	assert_int_equal(d.decoder_id, 9);
	/* nobody allowed */
	make_sig(sig, c, 1ull << 3);
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), -LOCUS_ENODEST);
	/* slot lookup */
	assert_int_equal(locus_eldr_router_slot(f.r, 7), 1);
	assert_int_equal(locus_eldr_router_slot(f.r, 8), -LOCUS_ERANGE);
	assert_int_equal(locus_eldr_router_n_decoders(f.r), 3);
	free_table(&f);
}

static void test_bad_signatures_and_build(void **state)
{
	static const uint16_t c[4] = { 3, 4, 0, 0 };
	struct locus_eldr_decision d;
	struct locus_error e = { 0 };
	size_t len = locus_eldr_sig_len(2, 4), msz;
	uint8_t sig[64];
	struct fixture f;
	void *mem;
	(void)state;

	make_table(&f, 1.0f, 0.1f, LOCUS_ELDR_PATH_AUTO);
	make_sig(sig, c, 0);
	assert_int_equal(locus_eldr_route(f.r, sig, len - 2, &d), -LOCUS_ETRUNCATED);
	((struct locus_eldr_sig_hdr *)sig)->n_experts = 3;
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), -LOCUS_ERANGE);
	((struct locus_eldr_sig_hdr *)sig)->magic = 0;
	assert_int_equal(locus_eldr_route(f.r, sig, len, &d), -LOCUS_EBADMAGIC);
	/* build: too little memory, misaligned memory, invalid table */
	msz = locus_eldr_router_mem_size(f.payload, f.len);
	mem = aligned_alloc(64, LOCUS_ALIGN_UP(msz + 64, 64));
	assert_non_null(mem);
	assert_int_equal(locus_eldr_router_build(mem, msz - 1, f.payload, f.len,
						 LOCUS_ELDR_PATH_AUTO, &f.r, &e), -LOCUS_ERANGE);
	assert_int_equal(locus_eldr_router_build((uint8_t *)mem + 8, msz, f.payload, f.len,
						 LOCUS_ELDR_PATH_AUTO, &f.r, &e), -EINVAL);
	assert_int_equal(locus_eldr_router_build(mem, msz, f.payload, f.len,
						 (enum locus_eldr_path)9, &f.r, &e), -ENOTSUP);
	assert_non_null(strstr(e.msg, "not supported"));
	((float *)(f.payload + f.len))[-1] = NAN; /* last centroid value */
	assert_int_equal(locus_eldr_router_build(mem, msz, f.payload, f.len,
						 LOCUS_ELDR_PATH_AUTO, &f.r, &e), -LOCUS_ENAN);
	assert_non_null(strstr(e.msg, "centroid 2"));
	assert_int_equal(locus_eldr_router_mem_size(f.payload, 10), 0);
	free(mem);
	free_table(&f);
}

/* Random shapes with padding (E = 13, K = 7): paths agree bit for bit. */
static void test_paths_agree_random(void **state)
{
	struct locus_eldr_tbl_layout lay;
	const uint32_t L = 5, E = 13, K = 7;
	uint32_t *ids, seed = 12345;
	uint8_t *payload, *mask, sig[32 + 5 * 13 * 2];
	float *idf, *cen, ref[7];
	(void)state;

	assert_int_equal(locus_eldr_tbl_layout(L, E, K, &lay), 0);
	payload = aligned_alloc(64, LOCUS_ALIGN_UP(lay.len, 64));
	assert_non_null(payload);
	assert_int_equal(locus_eldr_tbl_init(payload, lay.len, L, E, K, 0.1f, &ids, &mask, &idf,
					     &cen), 0);
	mask[0] = mask[2] = mask[3] = 1;
	((struct locus_eldr_tbl_hdr *)payload)->n_masked = 3;
	for (uint32_t i = 0; i < L * E; i++)
		idf[i] = 1.0f + (float)er_next(&seed) / 65536.0f * 3.0f;
	for (uint32_t d = 0; d < K; d++) {
		ids[d] = 100 + d;
		er_unit_centroid(cen + d * L * E, L, E, mask, &seed);
	}
	for (int trial = 0; trial < 50; trial++) {
		int have_ref = 0;
		const uint16_t *cnt = er_random_sig(sig, sizeof(sig), (uint16_t)L, (uint16_t)E,
						    trial < 25 ? 50 : 65536, &seed);

		for (size_t p = 0; p < LOCUS_ARRAY_SIZE(all_paths); p++) {
			size_t msz = locus_eldr_router_mem_size(payload, lay.len);
			void *mem = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
			struct locus_eldr_router *r;
			float s[7];

			if (!locus_eldr_path_supported(all_paths[p])) {
				free(mem);
				continue;
			}
			assert_int_equal(locus_eldr_router_build(mem, msz, payload, lay.len,
								 all_paths[p], &r, NULL), 0);
			assert_int_equal(locus_eldr_score(r, sig, sizeof(sig), s), 0);
			if (!have_ref) {
				/* against a double-precision evaluation of the formula */
				for (uint32_t d = 0; d < K; d++) {
					double dot = 0, n2 = 0;

					for (uint32_t f = 0; f < L * E; f++) {
						double x;

						if (!mask[f / E])
							continue;
						x = (double)cnt[f] * idf[f];
						dot += x * cen[d * L * E + f];
						n2 += x * x;
					}
					assert_float_equal(s[d], dot / sqrt(n2), 1e-5);
				}
				memcpy(ref, s, sizeof(s));
				have_ref = 1;
			} else {
				assert_memory_equal(ref, s, sizeof(s));
			}
			free(mem);
		}
	}
	free(payload);
}

/* Real signatures: the repo's ESFT sample, a fitted table, every path. */
static void test_paths_agree_real(void **state)
{
	struct locus_eldrfit_opts o = { .n_decoders = 6, .tau = 0.1f, .seed = 1 };
	struct locus_eldrfit_result res;
	struct locus_trace *t;
	struct locus_error e = { 0 };
	const void *payload;
	size_t plen, slen;
	struct locus_eldr_router *r[3] = { 0 };
	void *mem[3] = { 0 };
	uint8_t *sig;
	uint32_t disagreements = 0, routed = 0;
	(void)state;

	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &e), 0);
	assert_int_equal(locus_eldrfit_trace(t, &o, &res, &e), 0);
	payload = (const uint8_t *)res.blob + 64;
	plen = res.blob_len - 64;
	for (size_t p = 0; p < 3; p++) {
		size_t msz = locus_eldr_router_mem_size(payload, plen);

		if (!locus_eldr_path_supported(all_paths[p]))
			continue;
		mem[p] = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
		assert_non_null(mem[p]);
		assert_int_equal(locus_eldr_router_build(mem[p], msz, payload, plen, all_paths[p],
							 &r[p], &e), 0);
		assert_int_equal(locus_eldr_router_path(r[p]), all_paths[p]);
	}
	slen = locus_eldr_sig_len(t->n_layers, t->n_experts);
	sig = malloc(slen);
	assert_non_null(sig);
	for (uint32_t i = 0; i < t->n_requests; i++) {
		struct locus_eldr_decision d[3];
		float s[3][6];

		assert_int_equal(locus_eldr_sig_build(sig, slen, t->n_layers, t->n_experts, t->k,
						      t->reqs[i].prompt, t->reqs[i].prompt_len, 0,
						      &e), (long)slen);
		for (size_t p = 0; p < 3; p++) {
			if (!r[p])
				continue;
			assert_int_equal(locus_eldr_score(r[p], sig, slen, s[p]), 0);
			assert_int_equal(locus_eldr_route(r[p], sig, slen, &d[p]), 0);
			if (memcmp(s[p], s[0], sizeof(s[0])) || d[p].slot != d[0].slot)
				disagreements++;
		}
		routed++;
	}
	assert_int_equal(disagreements, 0);
	assert_int_equal(routed, t->n_requests);
	free(sig);
	for (size_t p = 0; p < 3; p++)
		free(mem[p]);
	locus_eldrfit_result_free(&res);
	locus_trace_free(t);
}

/* Batched routing: the same decisions, in order, as one call per signature. */
static void test_batch_matches_sequential(void **state)
{
	struct locus_eldrfit_opts o = { .n_decoders = 5, .tau = 0.2f, .seed = 2 };
	struct locus_eldrfit_result res;
	struct locus_trace *t;
	struct locus_error e = { 0 };
	const void *payload;
	size_t plen, slen, msz;
	uint8_t *sigs;
	(void)state;

	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &e), 0);
	assert_int_equal(locus_eldrfit_trace(t, &o, &res, &e), 0);
	payload = (const uint8_t *)res.blob + 64;
	plen = res.blob_len - 64;
	msz = locus_eldr_router_mem_size(payload, plen);
	slen = locus_eldr_sig_len(t->n_layers, t->n_experts);
	sigs = malloc(slen * t->n_requests);
	assert_non_null(sigs);
	for (uint32_t i = 0; i < t->n_requests; i++)
		assert_int_equal(locus_eldr_sig_build(sigs + i * slen, slen, t->n_layers,
						      t->n_experts, t->k, t->reqs[i].prompt,
						      t->reqs[i].prompt_len, i % 5 ? 0 : 0x6,
						      &e), (long)slen);
	((struct locus_eldr_sig_hdr *)(sigs + 10 * slen))->magic = 0; /* one bad signature */
	for (size_t p = 0; p < LOCUS_ARRAY_SIZE(all_paths); p++) {
		void *m1 = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
		void *m2 = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
		struct locus_eldr_router *seq, *bat;
		uint32_t done = 0;

		if (!locus_eldr_path_supported(all_paths[p])) {
			free(m1);
			free(m2);
			continue;
		}
		assert_int_equal(locus_eldr_router_build(m1, msz, payload, plen, all_paths[p], &seq,
							 NULL), 0);
		assert_int_equal(locus_eldr_router_build(m2, msz, payload, plen, all_paths[p], &bat,
							 NULL), 0);
		locus_eldr_router_set_up(seq, 3, 0);
		locus_eldr_router_set_up(bat, 3, 0);
		while (done < t->n_requests) {
			const void *ptr[7];
			size_t lens[7];
			struct locus_eldr_decision db[7], ds;
			int rc[7];
			uint32_t n = t->n_requests - done < 7 ? t->n_requests - done : 7;

			for (uint32_t j = 0; j < n; j++) {
				ptr[j] = sigs + (done + j) * slen;
				lens[j] = slen;
			}
			for (uint32_t j = 0; j < n; j++) {
				int r1 = locus_eldr_route(seq, ptr[j], slen, &ds);

				if (j == 0) {
					uint32_t got = locus_eldr_route_batch(bat, ptr, lens, n, db,
									      rc);

					assert_true(got <= n);
				}
				assert_int_equal(rc[j], r1);
				if (r1 == 0) {
					assert_int_equal(db[j].slot, ds.slot);
					assert_memory_equal(&db[j].similarity, &ds.similarity,
							    sizeof(float));
					assert_int_equal(db[j].load, ds.load);
				}
			}
			done += n;
		}
		free(m1);
		free(m2);
	}
	free(sigs);
	locus_eldrfit_result_free(&res);
	locus_trace_free(t);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hand_scores),
		cmocka_unit_test(test_unmasked_layers_ignored),
		cmocka_unit_test(test_band_and_ties),
		cmocka_unit_test(test_load_spill),
		cmocka_unit_test(test_equal_scores_lower_slot),
		cmocka_unit_test(test_down_and_allowed),
		cmocka_unit_test(test_bad_signatures_and_build),
		cmocka_unit_test(test_paths_agree_random),
		cmocka_unit_test(test_paths_agree_real),
		cmocka_unit_test(test_batch_matches_sequential),
	};

	printf("paths: avx2 %s, avx512 %s\n",
	       locus_eldr_path_supported(LOCUS_ELDR_PATH_AVX2) ? "yes" : "no",
	       locus_eldr_path_supported(LOCUS_ELDR_PATH_AVX512) ? "yes" : "no");
	(void)argc;
	locus_data_find_root(argv[0]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
