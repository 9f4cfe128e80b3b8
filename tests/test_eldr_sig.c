// SPDX-License-Identifier: MIT
/* ELDR signatures and table payloads: building, and every rejection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

/* ---- signatures ---- */

static void test_counts_dedupe_and_saturate(void **state)
{
	/* 2 tokens, L=2, k=3, E=4 */
	const uint16_t ids[] = {
		1, 1, 2,   0, 3, 3, /* token 0: layer 0 {1,2}, layer 1 {0,3} */
		2, 3, 1,   3, 3, 3, /* token 1: layer 0 {1,2,3}, layer 1 {3} */
	};
	uint16_t counts[8] = { 0 }, *sat;
	uint16_t *many;
	(void)state;

	assert_int_equal(locus_eldr_counts_add(counts, 2, 4, 3, ids, 2, NULL), 0);
	assert_int_equal(counts[0], 0);
	assert_int_equal(counts[1], 2);
	assert_int_equal(counts[2], 2);
	assert_int_equal(counts[3], 1);
	assert_int_equal(counts[4 + 0], 1);
	assert_int_equal(counts[4 + 3], 2);
	assert_int_equal(counts[4 + 1] + counts[4 + 2], 0);

	/* 70,000 tokens routed to expert 0 saturate at 65535 */
	many = calloc(70000, sizeof(*many));
	sat = calloc(2, sizeof(*sat));
	assert_non_null(many);
	assert_non_null(sat);
	assert_int_equal(locus_eldr_counts_add(sat, 1, 2, 1, many, 70000, NULL), 0);
	assert_int_equal(sat[0], 65535);
	assert_int_equal(sat[1], 0);
	free(sat);
	free(many);
}

static void test_counts_bad_id(void **state)
{
	const uint16_t ids[] = { 0, 4 };
	uint16_t counts[4] = { 0 };
	struct locus_error e = { 0 };
	(void)state;

	assert_int_equal(locus_eldr_counts_add(counts, 1, 4, 2, ids, 1, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "expert id 4"));
	assert_int_equal(locus_eldr_counts_add(counts, 1, 4, 0, ids, 1, &e), -EINVAL);
}

static void test_sig_build_and_check(void **state)
{
	const uint16_t ids[] = { 0, 1, 1, 2 }; /* 2 tokens, L=1, k=2, E=3 */
	uint8_t buf[64];
	struct locus_eldr_sig_hdr *h = (void *)buf;
	struct locus_error e = { 0 };
	long len;
	(void)state;

	len = locus_eldr_sig_build(buf, sizeof(buf), 1, 3, 2, ids, 2, 0x5, &e);
	assert_int_equal(len, 32 + 6);
	assert_int_equal(h->magic, LOCUS_ELDR_SIG_MAGIC);
	assert_int_equal(h->prompt_tokens, 2);
	assert_int_equal(h->allowed_decoders, 0x5);
	assert_int_equal(locus_eldr_sig_counts(buf)[0], 1);
	assert_int_equal(locus_eldr_sig_counts(buf)[1], 2);
	assert_int_equal(locus_eldr_sig_counts(buf)[2], 1);
	assert_int_equal(locus_eldr_sig_check(buf, (size_t)len, 1, 3, &e), 0);
	/* reference size: 48 x 128 is the paper's 12 KiB */
	assert_int_equal(locus_eldr_sig_len(48, 128), 32 + 12288);
	/* too small a buffer */
	assert_int_equal(locus_eldr_sig_build(buf, 20, 1, 3, 2, ids, 2, 0, &e), -LOCUS_ERANGE);
}

static void test_sig_rejections(void **state)
{
	const uint16_t ids[] = { 0, 1 };
	uint8_t buf[64], bad[64];
	struct locus_eldr_sig_hdr *h = (void *)bad;
	struct locus_error e = { 0 };
	long len;
	(void)state;

	len = locus_eldr_sig_build(buf, sizeof(buf), 1, 3, 2, ids, 1, 0, NULL);
	assert_true(len > 0);
	/* wrong L / E */
	assert_int_equal(locus_eldr_sig_check(buf, (size_t)len, 2, 3, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "table is 2x3"));
	assert_int_equal(locus_eldr_sig_check(buf, (size_t)len, 1, 4, &e), -LOCUS_ERANGE);
	/* short payload, header-short payload, NULL, long payload */
	assert_int_equal(locus_eldr_sig_check(buf, (size_t)len - 1, 1, 3, &e), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_eldr_sig_check(buf, 10, 1, 3, &e), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_eldr_sig_check(NULL, 0, 1, 3, &e), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_eldr_sig_check(buf, (size_t)len + 2, 1, 3, &e), -LOCUS_ERANGE);
	/* bad magic, version, flags, reserved */
	memcpy(bad, buf, (size_t)len);
	h->magic ^= 1;
	assert_int_equal(locus_eldr_sig_check(bad, (size_t)len, 1, 3, &e), -LOCUS_EBADMAGIC);
	assert_non_null(strstr(e.msg, "magic"));
	memcpy(bad, buf, (size_t)len);
	h->version = 2;
	assert_int_equal(locus_eldr_sig_check(bad, (size_t)len, 1, 3, &e), -LOCUS_EVERSION);
	memcpy(bad, buf, (size_t)len);
	h->flags = 1;
	assert_int_equal(locus_eldr_sig_check(bad, (size_t)len, 1, 3, &e), -LOCUS_EPROTO);
	memcpy(bad, buf, (size_t)len);
	h->reserved[7] = 1;
	assert_int_equal(locus_eldr_sig_check(bad, (size_t)len, 1, 3, &e), -LOCUS_EPROTO);
}

/* ---- table payloads ---- */

struct tbl {
	uint8_t *blob;     /* sealed: 64-byte header + payload */
	uint8_t *payload;
	size_t len;
	uint32_t *ids;
	uint8_t *mask;
	float *idf, *cen;
};

/* L=2, E=2, K=2, layer 0 masked, unit centroids (1,0) and (0,1). */
static void tbl_make(struct tbl *t)
{
	struct locus_eldr_tbl_layout lay;
	struct locus_eldr_tbl_hdr *h;

	assert_int_equal(locus_eldr_tbl_layout(2, 2, 2, &lay), 0);
	t->len = lay.len;
	t->blob = calloc(1, 64 + lay.len);
	assert_non_null(t->blob);
	t->payload = t->blob + 64;
	assert_int_equal(locus_eldr_tbl_init(t->payload, lay.len, 2, 2, 2, 0.1f, &t->ids,
					     &t->mask, &t->idf, &t->cen), 0);
	h = (void *)t->payload;
	h->n_masked = 1;
	t->ids[0] = 10;
	t->ids[1] = 11;
	t->mask[0] = 1;
	for (int i = 0; i < 4; i++)
		t->idf[i] = 1.0f;
	t->cen[0] = 1.0f;        /* d0 layer 0 = (1, 0) */
	t->cen[4 + 1] = 1.0f;    /* d1 layer 0 = (0, 1) */
}

static int tbl_check(struct tbl *t, int code, const char *needle)
{
	struct locus_error e = { 0 };
	int ret = locus_eldr_tbl_validate(t->payload, t->len, NULL, &e);

	if (ret != code)
		print_error("expected %d got %d (%s)\n", code, ret, e.msg);
	if (needle && !strstr(e.msg, needle))
		print_error("message '%s' lacks '%s'\n", e.msg, needle);
	return ret == code && (!needle || strstr(e.msg, needle));
}

static void test_table_valid_and_layout(void **state)
{
	struct locus_eldr_tbl_view v;
	struct tbl t;
	(void)state;

	tbl_make(&t);
	assert_int_equal(locus_eldr_tbl_validate(t.payload, t.len, &v, NULL), 0);
	assert_int_equal(v.hdr->n_decoders, 2);
	assert_int_equal(v.decoder_ids[1], 11);
	assert_int_equal(((const uint8_t *)v.centroids - t.payload) % 64, 0);
	assert_int_equal(locus_eldr_tbl_layout(0, 2, 2, &(struct locus_eldr_tbl_layout){ 0 }),
			 -LOCUS_ERANGE);
	/* 48 x 128 x 16 centroids plus idf, ids, mask */
	{
		struct locus_eldr_tbl_layout lay;

		assert_int_equal(locus_eldr_tbl_layout(48, 128, 16, &lay), 0);
		assert_true(lay.len >= 64 + 16 * 4 + 48 + 48 * 128 * 4 * 17);
		assert_true(lay.len < 64 + 16 * 4 + 48 + 48 * 128 * 4 * 17 + 256);
	}
	free(t.blob);
}

static void test_table_rejections(void **state)
{
	struct locus_eldr_tbl_hdr *h;
	struct tbl t;
	(void)state;

	tbl_make(&t);
	h = (void *)t.payload;

	t.cen[1] = NAN;
	assert_true(tbl_check(&t, -LOCUS_ENAN, "centroid 0"));
	t.cen[1] = 0.0f;
	t.idf[3] = INFINITY;
	assert_true(tbl_check(&t, -LOCUS_ENAN, "idf"));
	t.idf[3] = -1.0f;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "idf"));
	t.idf[3] = 1.0f;
	h->tau = NAN;
	assert_true(tbl_check(&t, -LOCUS_ENAN, "tau"));
	h->tau = 3.0f;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "tau"));
	h->tau = 0.1f;
	t.ids[1] = 10;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "decoder id 10 appears twice"));
	t.ids[1] = 11;
	t.mask[0] = 0;
	h->n_masked = 0;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "selects no layer"));
	t.mask[0] = 2;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "not 0/1"));
	t.mask[0] = 1;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "masked layers"));
	h->n_masked = 1;
	t.cen[2] = 0.5f; /* weight on unmasked layer 1 */
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "unmasked layer 1"));
	t.cen[2] = 0.0f;
	t.cen[0] = 0.5f;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "norm"));
	t.cen[0] = 1.0f;
	h->flags = 2; /* not a known flag */
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "flags 0x2 unknown"));
	h->flags = 0;
	h->reserved0 = 1;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "reserved"));
	h->reserved0 = 0;
	h->reserved[11] = 1;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "reserved"));
	h->reserved[11] = 0;
	h->n_decoders = 0; /* K = 0 */
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "K=0"));
	h->n_decoders = 2;
	t.len -= 4; /* truncated */
	assert_true(tbl_check(&t, -LOCUS_ETRUNCATED, "needs"));
	t.len = 10;
	assert_true(tbl_check(&t, -LOCUS_ETRUNCATED, "header"));
	t.len += 0;
	free(t.blob);
	tbl_make(&t);
	assert_true(tbl_check(&t, 0, NULL));
	free(t.blob);
}

static void test_blob_check(void **state)
{
	struct locus_error e = { 0 };
	struct locus_tbl_hdr *th;
	struct tbl t;
	(void)state;

	tbl_make(&t);
	th = (void *)t.blob;
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_ELDR, LOCUS_ELDR_TBL_VERSION,
					t.len), 0);
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e), 0);
	assert_int_equal(locus_eldr_table_validate_cb(t.blob, 64 + t.len, NULL, &e), 0);
	/* truncated file */
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len - 1, NULL, &e),
			 -LOCUS_ETRUNCATED);
	/* payload bit flip: CRC */
	t.cen[0] = 0.999f;
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e), -LOCUS_ECRC);
	/* resealed: CRC fine, contents judged */
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_ELDR, LOCUS_ELDR_TBL_VERSION,
					t.len), 0);
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e),
			 0); /* 0.999 within tol */
	t.cen[0] = 0.9f;
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_ELDR, LOCUS_ELDR_TBL_VERSION,
					t.len), 0);
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "norm"));
	t.cen[0] = 1.0f;
	/* another layout version, another kind */
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_ELDR, 99, t.len), 0);
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e), -LOCUS_EVERSION);
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_GRACE, 1, t.len), 0);
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "grace"));
	/* bad magic */
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_ELDR, 1, t.len), 0);
	th->magic ^= 1;
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e), -LOCUS_EBADMAGIC);
	free(t.blob);
}

/* L=2, E=2, K=2, C=3 (centroid map {0, 1, 0}), layer 0 masked: version 2's fields. */
static void tbl_make_mapped(struct tbl *t, uint16_t **map)
{
	struct locus_eldr_tbl_layout lay;
	struct locus_eldr_tbl_hdr *h;

	assert_int_equal(locus_eldr_tbl_layout_mapped(2, 2, 2, 3, &lay), 0);
	t->len = lay.len;
	t->blob = calloc(1, 64 + lay.len);
	assert_non_null(t->blob);
	t->payload = t->blob + 64;
	assert_int_equal(locus_eldr_tbl_init_mapped(t->payload, lay.len, 2, 2, 2, 3, 0.1f, &t->ids,
						    map, &t->mask, &t->idf, &t->cen), 0);
	h = (void *)t->payload;
	h->n_masked = 1;
	t->ids[0] = 10;
	t->ids[1] = 11;
	t->mask[0] = 1;
	for (int i = 0; i < 4; i++)
		t->idf[i] = 1.0f;
	t->cen[0] = 1.0f;     /* c0 (1, 0) -> slot 0 */
	t->cen[4 + 1] = 1.0f; /* c1 (0, 1) -> slot 1 */
	t->cen[8] = 0.6f;     /* c2 (0.6, 0.8) -> slot 0 */
	t->cen[8 + 1] = 0.8f;
	(*map)[0] = 0;
	(*map)[1] = 1;
	(*map)[2] = 0;
}

static void test_table_v2(void **state)
{
	struct locus_eldr_tbl_layout lay, lay1;
	struct locus_eldr_tbl_view v;
	struct locus_eldr_tbl_hdr *h;
	struct locus_error e = { 0 };
	uint16_t *map;
	struct tbl t;
	(void)state;

	/* the map section sits between ids and mask; C = 0 is version 1's layout */
	assert_int_equal(locus_eldr_tbl_layout_mapped(2, 2, 2, 0, &lay), 0);
	assert_int_equal(locus_eldr_tbl_layout(2, 2, 2, &lay1), 0);
	assert_memory_equal(&lay, &lay1, sizeof(lay));
	assert_int_equal(locus_eldr_tbl_layout_mapped(2, 2, 2, 1, &lay), -LOCUS_ERANGE); /* C < K */
	assert_int_equal(locus_eldr_tbl_layout_mapped(2, 2, 2, LOCUS_ELDR_MAX_CENTROIDS + 1, &lay),
			 -LOCUS_ERANGE);
	tbl_make_mapped(&t, &map);
	h = (void *)t.payload;
	assert_int_equal(locus_eldr_tbl_validate(t.payload, t.len, &v, &e), 0);
	assert_int_equal(v.n_centroids, 3);
	assert_ptr_equal(v.centroid_slot, map);
	assert_int_equal(((const uint8_t *)v.centroid_slot - t.payload) % 64, 0);
	assert_int_equal(v.centroid_slot[2], 0);
	assert_int_equal(locus_eldr_tbl_kind_version(h), 2);
	/* map refusals */
	map[2] = 2;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "centroid 2 belongs to decoder slot 2"));
	map[2] = 0;
	map[1] = 0;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "decoder slot 1 owns no centroid"));
	map[1] = 1;
	h->n_centroids = 1;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "C=1 out of range"));
	h->n_centroids = 4; /* one more than the payload holds */
	assert_true(tbl_check(&t, -LOCUS_ETRUNCATED, "needs"));
	h->n_centroids = 3;
	t.cen[8] = 0.5f; /* the third centroid is checked too */
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "centroid 2 has norm"));
	t.cen[8] = 0.6f;
	/* the load spill */
	h->spill_margin = 2;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "spill margin 2 with the spill off"));
	h->spill_tau = 0.3f;
	assert_true(tbl_check(&t, 0, NULL));
	h->spill_tau = 0.1f; /* not wider than tau */
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "spill_tau"));
	h->spill_tau = 2.5f;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "spill_tau"));
	h->spill_tau = NAN;
	assert_true(tbl_check(&t, -LOCUS_ENAN, "spill_tau"));
	h->spill_tau = -0.0f; /* not "off": its sign bit is set */
	h->spill_margin = 0;
	assert_true(tbl_check(&t, -LOCUS_ERANGE, "spill_tau"));
	h->spill_tau = 0.0f;
	/* flags: the overflow spread is known, others are not */
	h->flags = LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD;
	assert_true(tbl_check(&t, 0, NULL));
	h->flags = 0;
	/* sealed as version 2: accepted; as version 1: refused, it uses version 2's fields */
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_ELDR, 2, t.len), 0);
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e), 0);
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_ELDR, 1, t.len), 0);
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e), -LOCUS_EVERSION);
	assert_non_null(strstr(e.msg, "sealed as version 1 uses version 2 fields"));
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_ELDR, 3, t.len), 0);
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e), -LOCUS_EVERSION);
	assert_non_null(strstr(e.msg, "version 3, this build reads 1..2"));
	free(t.blob);
	/* one centroid per decoder: version 1 unless a spill or a flag is set */
	tbl_make(&t);
	h = (void *)t.payload;
	assert_int_equal(locus_eldr_tbl_kind_version(h), 1);
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_ELDR, 1, t.len), 0);
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, &v, &e), 0);
	assert_int_equal(v.n_centroids, 2);
	assert_null(v.centroid_slot);
	h->spill_tau = 0.2f;
	h->spill_margin = 1;
	assert_int_equal(locus_eldr_tbl_kind_version(h), 2);
	assert_int_equal(locus_tbl_seal(t.blob, 64 + t.len, LOCUS_TBL_ELDR, 1, t.len), 0);
	assert_int_equal(locus_eldr_blob_check(t.blob, 64 + t.len, NULL, &e), -LOCUS_EVERSION);
	h->spill_tau = 0.0f;
	h->spill_margin = 0;
	h->flags = LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD;
	assert_int_equal(locus_eldr_tbl_kind_version(h), 2);
	free(t.blob);
}

/* Random damage to a valid payload: validation rejects or accepts, never crashes. */
static void test_table_mutations(void **state)
{
	uint32_t seed = 5, rejected = 0;
	struct tbl t;
	uint8_t *copy;
	(void)state;

	tbl_make(&t);
	copy = malloc(t.len);
	assert_non_null(copy);
	memcpy(copy, t.payload, t.len);
	for (int it = 0; it < 20000; it++) {
		struct locus_eldr_tbl_view v;
		struct locus_error e = { 0 };
		int ret;

		memcpy(t.payload, copy, t.len);
		for (int m = 0; m < 1 + it % 3; m++) {
			seed = seed * 1103515245u + 12345u;
			t.payload[(seed >> 8) % t.len] = (uint8_t)(seed >> 24);
		}
		ret = locus_eldr_tbl_validate(t.payload, t.len, &v, &e);
		if (ret < 0) {
			assert_true(e.msg[0] != '\0');
			rejected++;
		} else {
			assert_true(v.hdr->n_decoders >= 1 && v.hdr->n_masked >= 1);
		}
	}
	assert_true(rejected > 0);
	free(copy);
	free(t.blob);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts_dedupe_and_saturate),
		cmocka_unit_test(test_counts_bad_id),
		cmocka_unit_test(test_sig_build_and_check),
		cmocka_unit_test(test_sig_rejections),
		cmocka_unit_test(test_table_valid_and_layout),
		cmocka_unit_test(test_table_rejections),
		cmocka_unit_test(test_blob_check),
		cmocka_unit_test(test_table_v2),
		cmocka_unit_test(test_table_mutations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
