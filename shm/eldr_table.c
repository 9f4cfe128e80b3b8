// SPDX-License-Identifier: MIT
/* ELDR table payload: layout, validation, initialisation. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_err_priv.h"
#include "locus_tblfile.h"

#define SECTION_ALIGN 64u

int locus_eldr_tbl_layout_mapped(uint32_t n_layers, uint32_t n_experts, uint32_t n_decoders,
				 uint32_t n_centroids, struct locus_eldr_tbl_layout *out)
{
	uint64_t off, le;

	if (!n_layers || n_layers > LOCUS_ELDR_MAX_LAYERS || !n_experts ||
	    n_experts > LOCUS_ELDR_MAX_EXPERTS || !n_decoders ||
	    n_decoders > LOCUS_ELDR_MAX_DECODERS ||
	    (n_centroids && (n_centroids < n_decoders || n_centroids > LOCUS_ELDR_MAX_CENTROIDS)))
		return -LOCUS_ERANGE;
	le = (uint64_t)n_layers * n_experts;
	off = sizeof(struct locus_eldr_tbl_hdr);
	out->off_ids = off;
	off = LOCUS_ALIGN_UP(off + 4ull * n_decoders, SECTION_ALIGN);
	out->off_map = off;
	if (n_centroids)
		off = LOCUS_ALIGN_UP(off + 2ull * n_centroids, SECTION_ALIGN);
	out->off_mask = off;
	off = LOCUS_ALIGN_UP(off + n_layers, SECTION_ALIGN);
	out->off_idf = off;
	off = LOCUS_ALIGN_UP(off + 4 * le, SECTION_ALIGN);
	out->off_centroids = off;
	off += 4 * le * (n_centroids ? n_centroids : n_decoders);
	if (off > LOCUS_TBL_MAX_PAYLOAD)
		return -LOCUS_ERANGE;
	out->len = off;
	return 0;
}

int locus_eldr_tbl_layout(uint32_t n_layers, uint32_t n_experts, uint32_t n_decoders,
			  struct locus_eldr_tbl_layout *out)
{
	return locus_eldr_tbl_layout_mapped(n_layers, n_experts, n_decoders, 0, out);
}

static int zero_bytes(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/*
 * Every centroid maps to a slot < K and every slot owns at least one: a
 * decoder without a centroid could never be scored. A bitmap of K <= 1024
 * bits on the stack: no allocation, so any context may validate.
 */
static int check_map(const struct locus_eldr_tbl_hdr *h, const uint16_t *map,
		     struct locus_error *err)
{
	uint64_t owned[LOCUS_ELDR_MAX_DECODERS / 64] = { 0 };

	for (uint32_t c = 0; c < h->n_centroids; c++) {
		if (map[c] >= h->n_decoders)
			return locus_error_set(err, LOCUS_ERANGE,
					       "centroid %u belongs to decoder slot %u, the table has %u",
					       c, map[c], h->n_decoders);
		owned[map[c] / 64] |= 1ull << (map[c] % 64);
	}
	for (uint32_t d = 0; d < h->n_decoders; d++)
		if (!(owned[d / 64] >> (d % 64) & 1))
			return locus_error_set(err, LOCUS_ERANGE,
					       "decoder slot %u owns no centroid", d);
	return 0;
}

/* spill_tau's bits are zero: the spill is off (-0.0 is not off, and is refused). */
static int spill_off(const struct locus_eldr_tbl_hdr *h)
{
	uint32_t bits;

	memcpy(&bits, &h->spill_tau, sizeof(bits));
	return !bits;
}

/* The load spill: off (0, margin 0) or a band wider than tau, at most 2. */
static int check_spill(const struct locus_eldr_tbl_hdr *h, struct locus_error *err)
{
	if (spill_off(h)) {
		if (h->spill_margin)
			return locus_error_set(err, LOCUS_ERANGE,
					       "spill margin %u with the spill off (spill_tau 0)",
					       h->spill_margin);
		return 0;
	}
	if (!isfinite(h->spill_tau) || !(h->spill_tau > h->tau) || h->spill_tau > 2.0f)
		return locus_error_set(err, isfinite(h->spill_tau) ? LOCUS_ERANGE : LOCUS_ENAN,
				       "spill_tau %g outside (tau %g, 2] (0: off)",
				       (double)h->spill_tau, (double)h->tau);
	return 0;
}

static int check_centroids(const struct locus_eldr_tbl_hdr *h, uint32_t C, const uint8_t *mask,
			   const float *c, struct locus_error *err)
{
	uint32_t L = h->n_layers, E = h->n_experts;

	for (uint32_t d = 0; d < C; d++) {
		const float *cd = c + (size_t)d * L * E;
		double n2 = 0;

		for (uint32_t l = 0; l < L; l++) {
			for (uint32_t e = 0; e < E; e++) {
				float v = cd[(size_t)l * E + e];

				if (!isfinite(v))
					return locus_error_set(err, LOCUS_ENAN,
							       "centroid %u layer %u expert %u is not finite",
							       d, l, e);
				if (!mask[l] && v != 0.0f)
					return locus_error_set(err, LOCUS_ERANGE,
							       "centroid %u has weight on unmasked layer %u",
							       d, l);
				n2 += (double)v * v;
			}
		}
		if (fabs(sqrt(n2) - 1.0) > LOCUS_ELDR_NORM_TOL)
			return locus_error_set(err, LOCUS_ERANGE,
					       "centroid %u has norm %.6f over the masked layers, expected 1",
					       d, sqrt(n2));
	}
	return 0;
}

int locus_eldr_tbl_validate(const void *payload, size_t len, struct locus_eldr_tbl_view *view,
			    struct locus_error *err)
{
	const struct locus_eldr_tbl_hdr *h = payload;
	struct locus_eldr_tbl_layout lay;
	const uint8_t *base = payload, *mask;
	const uint32_t *ids;
	const float *idf;
	uint32_t masked = 0;
	size_t le;
	int ret;

	if (!payload || len < sizeof(*h))
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "ELDR table payload is %zu bytes, shorter than its %zu-byte header",
				       payload ? len : 0, sizeof(*h));
	if ((uintptr_t)payload % 4)
		return locus_error_set(err, EINVAL, "ELDR table payload is not 4-byte aligned");
	if ((h->flags & ~LOCUS_ELDR_TBL_FLAGS_KNOWN) || h->reserved0 ||
	    !zero_bytes(h->reserved, sizeof(h->reserved)))
		return locus_error_set(err, LOCUS_ERANGE,
				       "ELDR table flags 0x%x unknown or reserved bytes not zero",
				       h->flags & ~LOCUS_ELDR_TBL_FLAGS_KNOWN);
	if (locus_eldr_tbl_layout_mapped(h->n_layers, h->n_experts, h->n_decoders,
					 h->n_centroids, &lay) < 0)
		return locus_error_set(err, LOCUS_ERANGE,
				       "ELDR table shape L=%u E=%u K=%u C=%u out of range (1..%u, 1..%u, "
				       "1..%u, 0 or K..%u)",
				       h->n_layers, h->n_experts, h->n_decoders, h->n_centroids,
				       LOCUS_ELDR_MAX_LAYERS, LOCUS_ELDR_MAX_EXPERTS,
				       LOCUS_ELDR_MAX_DECODERS, LOCUS_ELDR_MAX_CENTROIDS);
	if (len != lay.len)
		return locus_error_set(err, len < lay.len ? LOCUS_ETRUNCATED : LOCUS_ERANGE,
				       "ELDR table payload is %zu bytes, L=%u E=%u K=%u C=%u needs %zu",
				       len, h->n_layers, h->n_experts, h->n_decoders, h->n_centroids,
				       lay.len);
	if (!isfinite(h->tau) || h->tau < 0.0f || h->tau > 2.0f)
		return locus_error_set(err, isfinite(h->tau) ? LOCUS_ERANGE : LOCUS_ENAN,
				       "tau %g outside [0, 2]", (double)h->tau);
	ret = check_spill(h, err);
	if (ret < 0)
		return ret;
	if (h->n_centroids) {
		ret = check_map(h, (const uint16_t *)(base + lay.off_map), err);
		if (ret < 0)
			return ret;
	}
	ids = (const uint32_t *)(base + lay.off_ids);
	mask = base + lay.off_mask;
	idf = (const float *)(base + lay.off_idf);
	for (uint32_t l = 0; l < h->n_layers; l++) {
		if (mask[l] > 1)
			return locus_error_set(err, LOCUS_ERANGE,
					       "layer mask byte %u is %u, not 0/1",
					       l, mask[l]);
		masked += mask[l];
	}
	if (!masked)
		return locus_error_set(err, LOCUS_ERANGE, "layer mask selects no layer");
	if (masked != h->n_masked)
		return locus_error_set(err, LOCUS_ERANGE,
				       "header says %u masked layers, mask has %u",
				       h->n_masked, masked);
	le = (size_t)h->n_layers * h->n_experts;
	for (size_t i = 0; i < le; i++)
		if (!isfinite(idf[i]) || idf[i] <= 0.0f || idf[i] > LOCUS_ELDR_IDF_MAX)
			return locus_error_set(err, isfinite(idf[i]) ? LOCUS_ERANGE : LOCUS_ENAN,
					       "idf[layer %zu][expert %zu] = %g, must be in (0, 1e6]",
					       i / h->n_experts, i % h->n_experts, (double)idf[i]);
	ret = check_centroids(h, h->n_centroids ? h->n_centroids : h->n_decoders, mask,
			      (const float *)(base + lay.off_centroids), err);
	if (ret < 0)
		return ret;
	/* O(K^2) with K <= 1024: no allocation, so any context may validate */
	for (uint32_t d = 1; d < h->n_decoders; d++)
		for (uint32_t e = 0; e < d; e++)
			if (ids[d] == ids[e])
				return locus_error_set(err, LOCUS_ERANGE,
						       "decoder id %u appears twice (slots %u and %u)",
						       ids[d], e, d);
	if (view) {
		view->hdr = h;
		view->decoder_ids = ids;
		view->centroid_slot = h->n_centroids ? (const uint16_t *)(base + lay.off_map) : NULL;
		view->n_centroids = h->n_centroids ? h->n_centroids : h->n_decoders;
		view->layer_mask = mask;
		view->idf = idf;
		view->centroids = (const float *)(base + lay.off_centroids);
	}
	return 0;
}

int locus_eldr_tbl_init_mapped(void *buf, size_t len, uint16_t n_layers, uint16_t n_experts,
			       uint16_t n_decoders, uint16_t n_centroids, float tau,
			       uint32_t **ids, uint16_t **map, uint8_t **mask, float **idf,
			       float **centroids)
{
	struct locus_eldr_tbl_layout lay;
	struct locus_eldr_tbl_hdr *h = buf;
	uint8_t *base = buf;
	int ret;

	ret = locus_eldr_tbl_layout_mapped(n_layers, n_experts, n_decoders, n_centroids, &lay);
	if (ret < 0)
		return ret;
	if (!buf || len != lay.len || (uintptr_t)buf % 4)
		return -EINVAL;
	memset(buf, 0, len);
	h->n_layers = n_layers;
	h->n_experts = n_experts;
	h->n_decoders = n_decoders;
	h->n_centroids = n_centroids;
	h->tau = tau;
	*ids = (uint32_t *)(base + lay.off_ids);
	*map = n_centroids ? (uint16_t *)(base + lay.off_map) : NULL;
	*mask = base + lay.off_mask;
	*idf = (float *)(base + lay.off_idf);
	*centroids = (float *)(base + lay.off_centroids);
	return 0;
}

int locus_eldr_tbl_init(void *buf, size_t len, uint16_t n_layers, uint16_t n_experts,
			uint16_t n_decoders, float tau, uint32_t **ids, uint8_t **mask,
			float **idf, float **centroids)
{
	uint16_t *map;

	return locus_eldr_tbl_init_mapped(buf, len, n_layers, n_experts, n_decoders, 0, tau, ids,
					  &map, mask, idf, centroids);
}

uint32_t locus_eldr_tbl_kind_version(const struct locus_eldr_tbl_hdr *h)
{
	return h->n_centroids || h->flags || !spill_off(h) || h->spill_margin ? 2u : 1u;
}

int locus_eldr_blob_check(const void *blob, size_t len, struct locus_eldr_tbl_view *view,
			  struct locus_error *err)
{
	const struct locus_tbl_hdr *th = blob;
	const void *payload;
	size_t plen;
	int ret;

	ret = locus_tbl_check(blob, len, LOCUS_TBL_ELDR, &payload, &plen, err);
	if (ret < 0)
		return ret;
	if (th->kind_version < LOCUS_ELDR_TBL_VERSION_MIN ||
	    th->kind_version > LOCUS_ELDR_TBL_VERSION)
		return locus_error_set(err, LOCUS_EVERSION,
				       "ELDR table layout version %u, this build reads %u..%u",
				       th->kind_version, LOCUS_ELDR_TBL_VERSION_MIN,
				       LOCUS_ELDR_TBL_VERSION);
	ret = locus_eldr_tbl_validate(payload, plen, view, err);
	if (ret < 0)
		return ret;
	if (th->kind_version < 2 && locus_eldr_tbl_kind_version(payload) >= 2)
		return locus_error_set(err, LOCUS_EVERSION,
				       "ELDR table sealed as version %u uses version 2 fields (centroid "
				       "map, flags or load spill)", th->kind_version);
	return 0;
}

int locus_eldr_table_validate_cb(const void *blob, size_t len, void *arg,
				 struct locus_error *err)
{
	(void)arg;
	return locus_eldr_blob_check(blob, len, NULL, err);
}
