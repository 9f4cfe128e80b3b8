// SPDX-License-Identifier: MIT
/*
 * Version 2 tables in the router: several centroids per decoder (a
 * decoder's score is the best of its centroids'), the overflow spread, the
 * table's load spill; bit-identical scores on every path with a centroid map.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eldr_rand.h"
#include "locus_eldr_priv.h"
#include "locus_eldr_router.h"

static const enum locus_eldr_path all_paths[] = {
	LOCUS_ELDR_PATH_SCALAR, LOCUS_ELDR_PATH_AVX2, LOCUS_ELDR_PATH_AVX512,
};

struct tbl {
	uint8_t *payload;
	size_t len;
	void *mem;
	struct locus_eldr_router *r;
};

/*
 * L=1, E=4, K decoders with ids 5, 7, 9.., C centroids (0: one per decoder),
 * centroid c the unit vector cen[c] (4 floats), map[c] its slot; idf4 the
 * four idf values (NULL: 1 each).
 */
static void build_idf(struct tbl *t, uint16_t K, uint16_t C, const float (*cen)[4],
		      const uint16_t *map, float tau, float spill_tau, uint32_t margin,
		      uint32_t flags, enum locus_eldr_path path, const float *idf4)
{
	struct locus_eldr_tbl_layout lay;
	struct locus_eldr_tbl_hdr *h;
	struct locus_error e = { 0 };
	uint32_t *ids;
	uint16_t *tmap;
	uint8_t *mask;
	float *idf, *tcen;
	size_t msz;

	assert_int_equal(locus_eldr_tbl_layout_mapped(1, 4, K, C, &lay), 0);
	t->len = lay.len;
	t->payload = aligned_alloc(64, LOCUS_ALIGN_UP(lay.len, 64));
	assert_non_null(t->payload);
	assert_int_equal(locus_eldr_tbl_init_mapped(t->payload, lay.len, 1, 4, K, C, tau, &ids,
						    &tmap, &mask, &idf, &tcen), 0);
	assert_true(C ? tmap != NULL : tmap == NULL);
	h = (void *)t->payload;
	h->n_masked = 1;
	h->spill_tau = spill_tau;
	h->spill_margin = margin;
	h->flags = flags;
	mask[0] = 1;
	for (int i = 0; i < 4; i++)
		idf[i] = idf4 ? idf4[i] : 1.0f;
	for (uint16_t d = 0; d < K; d++)
		ids[d] = 5 + 2u * d;
	for (uint16_t c = 0; c < (C ? C : K); c++) {
		memcpy(tcen + 4 * c, cen[c], sizeof(cen[c]));
		if (C)
			tmap[c] = map[c];
	}
	assert_int_equal(locus_eldr_tbl_validate(t->payload, t->len, NULL, &e), 0);
	msz = locus_eldr_router_mem_size(t->payload, t->len);
	assert_true(msz > 0);
	t->mem = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
	assert_non_null(t->mem);
	assert_int_equal(locus_eldr_router_build(t->mem, msz, t->payload, t->len, path, &t->r, &e),
			 0);
}

static void build(struct tbl *t, uint16_t K, uint16_t C, const float (*cen)[4],
		  const uint16_t *map, float tau, float spill_tau, uint32_t margin,
		  uint32_t flags, enum locus_eldr_path path)
{
	build_idf(t, K, C, cen, map, tau, spill_tau, margin, flags, path, NULL);
}

static void unbuild(struct tbl *t)
{
	free(t->mem);
	free(t->payload);
}

static size_t sig(uint8_t *buf, const uint16_t c[4], uint64_t allowed)
{
	struct locus_eldr_sig_hdr *h = (void *)buf;

	memset(buf, 0, locus_eldr_sig_len(1, 4));
	h->magic = LOCUS_ELDR_SIG_MAGIC;
	h->version = LOCUS_ELDR_SIG_VERSION;
	h->n_layers = 1;
	h->n_experts = 4;
	h->allowed_decoders = allowed;
	memcpy(h + 1, c, 8);
	return locus_eldr_sig_len(1, 4);
}

/*
 * Three centroids for two decoders: e0 and e2 are slot 0's, e1 slot 1's. A
 * decoder scores the best of its centroids, on every path and in batches.
 */
static void test_map_scores(void **state)
{
	static const float cen[3][4] = { { 1, 0, 0, 0 }, { 0, 1, 0, 0 }, { 0, 0, 1, 0 } };
	static const uint16_t map[3] = { 0, 1, 0 };
	static const uint16_t c_e2[4] = { 0, 0, 5, 0 }, c_34[4] = { 3, 4, 0, 0 },
			      c_034[4] = { 0, 3, 4, 0 };
	uint8_t s1[64], s2[64], s3[64];
	size_t len = sig(s1, c_e2, 0);
	(void)state;

	sig(s2, c_34, 0);
	sig(s3, c_034, 0);
	for (size_t p = 0; p < LOCUS_ARRAY_SIZE(all_paths); p++) {
		const void *sigs[3] = { s1, s2, s3 };
		const size_t lens[3] = { len, len, len };
		struct locus_eldr_decision d, db[3];
		struct tbl t, one;
		int rc[3];
		float s[2];

		if (!locus_eldr_path_supported(all_paths[p]))
			continue;
		build(&t, 2, 3, cen, map, 0.0f, 0, 0, 0, all_paths[p]);
		assert_int_equal(locus_eldr_router_n_decoders(t.r), 2);
		assert_int_equal(locus_eldr_score(t.r, s1, len, s), 0);
		assert_float_equal(s[0], 1.0f, 1e-6);
		assert_float_equal(s[1], 0.0f, 1e-6);
		assert_int_equal(locus_eldr_route(t.r, s1, len, &d), 0);
		assert_int_equal(d.slot, 0);
		assert_int_equal(d.decoder_id, 5);
		assert_float_equal(d.similarity, 1.0f, 1e-6);
		/* slot 0's first centroid (e0: 0.6) loses to slot 1 (0.8) */
		assert_int_equal(locus_eldr_score(t.r, s2, len, s), 0);
		assert_float_equal(s[0], 0.6f, 1e-6);
		assert_float_equal(s[1], 0.8f, 1e-6);
		/* slot 0's second centroid (e2: 0.8) beats slot 1 (0.6): the best, not the first */
		assert_int_equal(locus_eldr_score(t.r, s3, len, s), 0);
		assert_float_equal(s[0], 0.8f, 1e-6);
		assert_float_equal(s[1], 0.6f, 1e-6);
		assert_int_equal(locus_eldr_route(t.r, s3, len, &d), 0);
		assert_int_equal(d.slot, 0);
		/* a batch decides as one by one (fresh routers: loads start at 0) */
		unbuild(&t);
		build(&t, 2, 3, cen, map, 0.0f, 0, 0, 0, all_paths[p]);
		assert_int_equal(locus_eldr_route_batch(t.r, sigs, lens, 3, db, rc), 3);
		assert_int_equal(db[0].slot, 0);
		assert_int_equal(db[1].slot, 1);
		assert_int_equal(db[2].slot, 0);
		unbuild(&t);
		/* without the map (e0, e1 only) e2's signature scores 0 at both */
		build(&one, 2, 0, cen, NULL, 0.0f, 0, 0, 0, all_paths[p]);
		assert_int_equal(locus_eldr_score(one.r, s1, len, s), 0);
		assert_true(s[0] == 0.0f && s[1] == 0.0f);
		unbuild(&one);
	}
}

/* Random mapped tables: every path the same bits, each decoder the max over its centroids. */
static void test_map_paths_random(void **state)
{
	const uint32_t L = 4, E = 11, K = 5, C = 13;
	struct locus_eldr_tbl_layout lay;
	uint32_t *ids, seed = 777;
	uint16_t *map;
	uint8_t *payload, *mask, buf[32 + 4 * 11 * 2];
	float *idf, *cen, ref[5];
	(void)state;

	assert_int_equal(locus_eldr_tbl_layout_mapped(L, E, K, C, &lay), 0);
	payload = aligned_alloc(64, LOCUS_ALIGN_UP(lay.len, 64));
	assert_non_null(payload);
	assert_int_equal(locus_eldr_tbl_init_mapped(payload, lay.len, L, E, K, C, 0.1f, &ids, &map,
						    &mask, &idf, &cen), 0);
	mask[1] = mask[3] = 1;
	((struct locus_eldr_tbl_hdr *)payload)->n_masked = 2;
	for (uint32_t i = 0; i < L * E; i++)
		idf[i] = 1.0f + (float)er_next(&seed) / 65536.0f;
	for (uint32_t d = 0; d < K; d++)
		ids[d] = 40 + d;
	for (uint32_t c = 0; c < C; c++) {
		uint32_t r = er_next(&seed);

		map[c] = (uint16_t)(c < K ? K - 1 - c : r % K); /* every slot owns one */
		er_unit_centroid(cen + c * L * E, L, E, mask, &seed);
	}
	for (int trial = 0; trial < 40; trial++) {
		int have_ref = 0;
		const uint16_t *cnt = er_random_sig(buf, sizeof(buf), (uint16_t)L, (uint16_t)E, 40,
						    &seed);

		for (size_t p = 0; p < LOCUS_ARRAY_SIZE(all_paths); p++) {
			size_t msz = locus_eldr_router_mem_size(payload, lay.len);
			void *mem = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
			struct locus_eldr_router *r;
			float s[5];

			if (!locus_eldr_path_supported(all_paths[p])) {
				free(mem);
				continue;
			}
			assert_int_equal(locus_eldr_router_build(mem, msz, payload, lay.len,
								 all_paths[p], &r, NULL), 0);
			assert_int_equal(locus_eldr_score(r, buf, sizeof(buf), s), 0);
			if (!have_ref) {
				for (uint32_t d = 0; d < K; d++) {
					double best = -INFINITY;

					for (uint32_t c = 0; c < C; c++) {
						double dot = 0, n2 = 0;

						if (map[c] != d)
							continue;
						for (uint32_t f = 0; f < L * E; f++) {
							double x = (double)cnt[f] * idf[f];

							if (!mask[f / E])
								continue;
							dot += x * cen[c * L * E + f];
							n2 += x * x;
						}
						best = fmax(best, dot / sqrt(n2));
					}
					assert_float_equal(s[d], best, 1e-5);
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

/* Centroids (layer 0): d0 (1,0,0,0), d1 (0,1,0,0), d2 (0.6,0.8,0,0); (3,4,0,0) scores 0.6, 0.8, 1.0. */
static const float three[3][4] = { { 1, 0, 0, 0 }, { 0, 1, 0, 0 }, { 0.6f, 0.8f, 0, 0 } };

/* The overflow spread: the band stays at the best allowed decoder while it is down. */
static void test_overflow_spread(void **state)
{
	static const uint16_t c[4] = { 3, 4, 0, 0 };
	struct locus_eldr_decision d;
	uint8_t s[64];
	size_t len = sig(s, c, 0);
	struct tbl near, spread;
	(void)state;

	build(&near, 3, 0, three, NULL, 0.1f, 0, 0, 0, LOCUS_ELDR_PATH_AUTO);
	build(&spread, 3, 0, three, NULL, 0.1f, 0, 0, LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD,
	      LOCUS_ELDR_PATH_AUTO);
	/* the best decoder up: the same decision either way */
	assert_int_equal(locus_eldr_route(near.r, s, len, &d), 0);
	assert_int_equal(d.slot, 2);
	assert_int_equal(locus_eldr_route(spread.r, s, len, &d), 0);
	assert_int_equal(d.slot, 2);
	assert_int_equal(d.n_candidates, 1);
	/* d2 down, d1 loaded: nearest keeps to d1 (band of 0.8), spread takes d0 */
	for (int i = 0; i < 2; i++) {
		struct tbl *t = i ? &spread : &near;

		locus_eldr_router_set_up(t->r, 2, 0);
		locus_eldr_router_set_load(t->r, 0, 0);
		locus_eldr_router_set_load(t->r, 1, 5);
	}
	assert_int_equal(locus_eldr_route(near.r, s, len, &d), 0);
	assert_int_equal(d.slot, 1);
	assert_float_equal(d.best, 0.8f, 1e-6);
	assert_int_equal(locus_eldr_route(spread.r, s, len, &d), 0);
	assert_int_equal(d.slot, 0);
	assert_int_equal(d.n_candidates, 2); /* every eligible decoder */
	assert_float_equal(d.best, 0.8f, 1e-6);
	/* spread by load: d0 now 1, d1 5: d0 again until it passes d1 */
	for (int i = 0; i < 4; i++) {
		assert_int_equal(locus_eldr_route(spread.r, s, len, &d), 0);
		assert_int_equal(d.slot, 0);
	}
	assert_int_equal(locus_eldr_route(spread.r, s, len, &d), 0);
	assert_int_equal(d.slot, 1); /* 5 and 5: ties to the higher score */
	/* the anchor is the best *allowed* decoder: ids 5 and 7 only, best d1 (0.8) up */
	sig(s, c, (1ull << 5) | (1ull << 7));
	locus_eldr_router_set_load(spread.r, 0, 0);
	locus_eldr_router_set_load(spread.r, 1, 9);
	assert_int_equal(locus_eldr_route(spread.r, s, len, &d), 0);
	assert_int_equal(d.slot, 1);
	/* nobody up: no destination either way */
	for (uint32_t k = 0; k < 3; k++)
		locus_eldr_router_set_up(spread.r, k, 0);
	assert_int_equal(locus_eldr_route(spread.r, s, len, &d), -LOCUS_ENODEST);
	unbuild(&spread);
	unbuild(&near);
}

/* The table's spill routes as locus_eldr_router_set_spill() with the same values. */
static void test_table_spill(void **state)
{
	static const uint16_t c[4] = { 3, 4, 0, 0 };
	struct locus_eldr_decision a, b;
	uint8_t s[64];
	size_t len = sig(s, c, 0);
	struct tbl plain, spilled;
	(void)state;

	build(&plain, 3, 0, three, NULL, 0.1f, 0, 0, 0, LOCUS_ELDR_PATH_AUTO);
	build(&spilled, 3, 0, three, NULL, 0.1f, 0.25f, 2, 0, LOCUS_ELDR_PATH_AUTO);
	/* plain: d2 however loaded; the table's spill: d2 at 3 over d1 gives way */
	locus_eldr_router_set_load(plain.r, 2, 3);
	locus_eldr_router_set_load(spilled.r, 2, 3);
	assert_int_equal(locus_eldr_route(plain.r, s, len, &a), 0);
	assert_int_equal(a.slot, 2);
	assert_int_equal(locus_eldr_route(spilled.r, s, len, &b), 0);
	assert_int_equal(b.slot, 1);
	/* set_spill on the plain router: the same decisions from here on */
	assert_int_equal(locus_eldr_router_set_spill(plain.r, 0.25f, 2), 0);
	for (uint32_t k = 0; k < 3; k++) {
		locus_eldr_router_set_load(plain.r, k, k);
		locus_eldr_router_set_load(spilled.r, k, k);
	}
	for (int i = 0; i < 12; i++) {
		assert_int_equal(locus_eldr_route(plain.r, s, len, &a), 0);
		assert_int_equal(locus_eldr_route(spilled.r, s, len, &b), 0);
		assert_int_equal(a.slot, b.slot);
		assert_int_equal(a.load, b.load);
	}
	/* and the table's spill can be turned off (spill_tau = tau) */
	assert_int_equal(locus_eldr_router_set_spill(spilled.r, 0.1f, 0), 0);
	locus_eldr_router_set_load(spilled.r, 2, 50);
	assert_int_equal(locus_eldr_route(spilled.r, s, len, &b), 0);
	assert_int_equal(b.slot, 2);
	unbuild(&spilled);
	unbuild(&plain);
}

/* A payload whose map leaves a decoder without a centroid builds no router. */
static void test_bad_map_no_router(void **state)
{
	struct locus_eldr_tbl_layout lay;
	struct locus_error e = { 0 };
	struct locus_eldr_router *r = NULL;
	uint32_t *ids;
	uint16_t *map;
	uint8_t *payload, *mask;
	float *idf, *cen;
	size_t msz;
	void *mem;
	(void)state;

	assert_int_equal(locus_eldr_tbl_layout_mapped(1, 4, 2, 3, &lay), 0);
	payload = aligned_alloc(64, LOCUS_ALIGN_UP(lay.len, 64));
	assert_non_null(payload);
	assert_int_equal(locus_eldr_tbl_init_mapped(payload, lay.len, 1, 4, 2, 3, 0.1f, &ids, &map,
						    &mask, &idf, &cen), 0);
	((struct locus_eldr_tbl_hdr *)payload)->n_masked = 1;
	mask[0] = 1;
	for (int i = 0; i < 4; i++)
		idf[i] = 1.0f;
	ids[1] = 1;
	for (int c = 0; c < 3; c++)
		cen[4 * c + c] = 1.0f;
	map[0] = map[1] = map[2] = 0; /* slot 1 owns none */
	msz = locus_eldr_router_mem_size(payload, lay.len);
	assert_true(msz > 0);
	mem = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
	assert_non_null(mem);
	assert_int_equal(locus_eldr_router_build(mem, msz, payload, lay.len, LOCUS_ELDR_PATH_AUTO,
						 &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "decoder slot 1 owns no centroid"));
	map[1] = 1;
	assert_int_equal(locus_eldr_router_build(mem, msz, payload, lay.len, LOCUS_ELDR_PATH_AUTO,
						 &r, &e), 0);
	free(mem);
	free(payload);
}

/*
 * The 8-bit arithmetic rounds idf^2 to units of the largest / 65535: with
 * idf 216.4 beside 1, the small one's idf^2 is 1.4 units, rounded to 1, and
 * the norm comes out short by sqrt(1.4). A signature along the centroid
 * (cosine 1) then scores about 1.18 unclamped; every score stays in [-1, 1]
 * (tests/fuzz/regress/eldr_table/idf-wide-range is the case the fuzzer found).
 */
static void test_i8_score_clamped(void **state)
{
	static const enum locus_eldr_path i8[] = {
		LOCUS_ELDR_PATH_SCALAR_I8, LOCUS_ELDR_PATH_AVX2_I8, LOCUS_ELDR_PATH_AVX512_I8,
	};
	static const float cen[2][4] = { { 0, 1, 0, 0 }, { 0.6f, 0.8f, 0, 0 } };
	static const float idf4[4] = { 216.4f, 1, 1, 1 };
	static const uint16_t along[4] = { 0, 5, 0, 0 };
	uint8_t s1[64];
	size_t len = sig(s1, along, 0);
	(void)state;

	for (size_t p = 0; p < LOCUS_ARRAY_SIZE(i8); p++) {
		struct locus_eldr_decision d;
		struct tbl t;
		float sc[2];

		if (!locus_eldr_path_supported(i8[p]))
			continue;
		build_idf(&t, 2, 0, cen, NULL, 0.1f, 0, 0, 0, i8[p], idf4);
		assert_int_equal(locus_eldr_score(t.r, s1, len, sc), 0);
		for (int k = 0; k < 2; k++)
			if (!(sc[k] >= -1.0f && sc[k] <= 1.0f))
				fail_msg("%s: slot %d scores %g, outside [-1, 1]",
					 locus_eldr_path_name(i8[p]), k, (double)sc[k]);
		assert_true(sc[0] == 1.0f); /* the clamp, not a rounding below it */
		assert_int_equal(locus_eldr_route(t.r, s1, len, &d), 0);
		assert_int_equal(d.slot, 0);
		assert_true(d.similarity == 1.0f && d.best == 1.0f);
		unbuild(&t);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_map_scores),
		cmocka_unit_test(test_map_paths_random),
		cmocka_unit_test(test_overflow_spread),
		cmocka_unit_test(test_table_spill),
		cmocka_unit_test(test_bad_map_no_router),
		cmocka_unit_test(test_i8_score_clamped),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
