// SPDX-License-Identifier: MIT
/*
 * Building the locality-band router (eldr_router.c routes with it): its
 * memory layout, the scoring paths and their kernels, the centroids
 * quantised and packed for the chosen arithmetic, all from a validated ELDR
 * payload into caller memory.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "eldr_priv.h"
#include "locus_err_priv.h"

struct router_layout {
	size_t off_slots, off_layers, off_idf, off_cw, off_qscale, off_qoff, off_x, off_dots, off_qdot;
	size_t off_map, off_sv, off_lines, off_w8, off_a8, size;
	uint32_t k_pad, n_blocks, n_qblocks, n_q8blocks, n_lines;
};

/*
 * Memory of a router for L x E, K decoders, C centroids (0: one per
 * decoder, no map nor decoder scratch), M masked layers.
 */
static int router_layout(uint32_t L, uint32_t E, uint32_t K, uint32_t C, uint32_t M,
			 struct router_layout *o)
{
	size_t off = LOCUS_ALIGN_UP(sizeof(struct locus_eldr_router), (size_t)LOCUS_CACHE_LINE);
	size_t feat, qfeat, q8feat, xfeat;

	if (!L || !E || !K || !M || M > L || L > LOCUS_ELDR_MAX_LAYERS ||
	    E > LOCUS_ELDR_MAX_EXPERTS || K > LOCUS_ELDR_MAX_DECODERS ||
	    (C && (C < K || C > LOCUS_ELDR_MAX_CENTROIDS)))
		return -LOCUS_ERANGE;
	o->k_pad = (uint32_t)LOCUS_ALIGN_UP(C ? C : K, ELDR_GROUP);
	o->n_blocks = (uint32_t)(((size_t)M * E + ELDR_LANES - 1) / ELDR_LANES);
	feat = (size_t)o->n_blocks * ELDR_LANES;
	o->n_qblocks = (uint32_t)(((size_t)M * E + ELDR_QLANES - 1) / ELDR_QLANES);
	qfeat = (size_t)o->n_qblocks * ELDR_QLANES;
	o->n_q8blocks = (uint32_t)(((size_t)M * E + ELDR_Q8LANES - 1) / ELDR_Q8LANES);
	q8feat = (size_t)o->n_q8blocks * ELDR_Q8LANES;
	/* a signature's scratch: floats, or the integer paths' u16 counts (8-bit: 64-padded) */
	xfeat = LOCUS_MAX(4 * feat, 2 * q8feat);
	o->off_slots = off;
	off = LOCUS_ALIGN_UP(off + sizeof(struct eldr_slot) * K, (size_t)LOCUS_CACHE_LINE);
	o->off_layers = off;
	off = LOCUS_ALIGN_UP(off + 2 * (size_t)M, (size_t)LOCUS_CACHE_LINE);
	o->off_idf = off;
	off = LOCUS_ALIGN_UP(off + 4 * feat, (size_t)LOCUS_CACHE_LINE);
	o->off_cw = off; /* float centroids, or the integer paths' int16 or u8 ones */
	off = LOCUS_ALIGN_UP(off + LOCUS_MAX(LOCUS_MAX(4 * feat, 2 * qfeat), q8feat) * o->k_pad,
			     (size_t)LOCUS_CACHE_LINE);
	o->off_qscale = off;
	off = LOCUS_ALIGN_UP(off + 8 * (size_t)o->k_pad, (size_t)LOCUS_CACHE_LINE);
	o->off_qoff = off; /* the 8-bit centroids' offsets */
	off = LOCUS_ALIGN_UP(off + 8 * (size_t)o->k_pad, (size_t)LOCUS_CACHE_LINE);
	o->off_x = off; /* float features, or the integer paths' u16 counts */
	off = LOCUS_ALIGN_UP(off + xfeat * ELDR_BATCH, (size_t)LOCUS_CACHE_LINE);
	o->off_w8 = off; /* the 8-bit norm's weights */
	off = LOCUS_ALIGN_UP(off + 2 * q8feat, (size_t)LOCUS_CACHE_LINE);
	o->off_a8 = off; /* the 8-bit levels as bytes */
	off = LOCUS_ALIGN_UP(off + q8feat * ELDR_BATCH, (size_t)LOCUS_CACHE_LINE);
	o->off_dots = off;
	off = LOCUS_ALIGN_UP(off + 4 * (size_t)o->k_pad * ELDR_BATCH, (size_t)LOCUS_CACHE_LINE);
	o->off_qdot = off;
	off = LOCUS_ALIGN_UP(off + 8 * (size_t)o->k_pad * ELDR_BATCH, (size_t)LOCUS_CACHE_LINE);
	/* the 64-byte lines of the masked counts (E x 2 bytes a layer) */
	o->n_lines = M * (uint32_t)((2 * (size_t)E + 2 * LOCUS_CACHE_LINE - 2) / LOCUS_CACHE_LINE);
	o->off_lines = off;
	off = LOCUS_ALIGN_UP(off + 4 * (size_t)o->n_lines, (size_t)LOCUS_CACHE_LINE);
	o->off_map = off;
	if (C)
		off = LOCUS_ALIGN_UP(off + 2 * (size_t)C, (size_t)LOCUS_CACHE_LINE);
	o->off_sv = off;
	if (C)
		off = LOCUS_ALIGN_UP(off + 4 * (size_t)K * ELDR_BATCH, (size_t)LOCUS_CACHE_LINE);
	o->size = off;
	return 0;
}

const char *locus_eldr_path_name(enum locus_eldr_path p)
{
	switch (p) {
	case LOCUS_ELDR_PATH_SCALAR:
		return "scalar";
	case LOCUS_ELDR_PATH_AVX2:
		return "avx2";
	case LOCUS_ELDR_PATH_AVX512:
		return "avx512";
	case LOCUS_ELDR_PATH_F32:
		return "f32";
	case LOCUS_ELDR_PATH_AUTO:
		return "auto";
	case LOCUS_ELDR_PATH_SCALAR_I8:
		return "scalar-i8";
	case LOCUS_ELDR_PATH_AVX2_I8:
		return "avx2-i8";
	case LOCUS_ELDR_PATH_AVX512_I8:
		return "avx512-i8";
	case LOCUS_ELDR_PATH_AUTO_I8:
		return "auto-i8";
	}
	return "unknown";
}

int locus_eldr_path_parse(const char *name, enum locus_eldr_path *out)
{
	for (int p = LOCUS_ELDR_PATH_AUTO; p <= LOCUS_ELDR_PATH_AUTO_I8; p++)
		if (name && !strcmp(name, locus_eldr_path_name((enum locus_eldr_path)p))) {
			*out = (enum locus_eldr_path)p;
			return 0;
		}
	return -LOCUS_ERANGE;
}

int locus_eldr_path_supported(enum locus_eldr_path p)
{
	__builtin_cpu_init();
	switch (p) {
	case LOCUS_ELDR_PATH_AUTO:
	case LOCUS_ELDR_PATH_SCALAR:
	case LOCUS_ELDR_PATH_F32:
	case LOCUS_ELDR_PATH_AUTO_I8:
	case LOCUS_ELDR_PATH_SCALAR_I8:
		return 1;
	case LOCUS_ELDR_PATH_AVX2:
	case LOCUS_ELDR_PATH_AVX2_I8:
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	case LOCUS_ELDR_PATH_AVX512:
	case LOCUS_ELDR_PATH_AVX512_I8:
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx2") &&
		       __builtin_cpu_supports("fma");
	}
	return 0;
}

size_t locus_eldr_router_mem_size(const void *payload, size_t len)
{
	const struct locus_eldr_tbl_hdr *h = payload;
	struct router_layout o;

	if (!payload || len < sizeof(*h))
		return 0;
	if (router_layout(h->n_layers, h->n_experts, h->n_decoders, h->n_centroids, h->n_masked,
			  &o) < 0)
		return 0;
	return o.size;
}

/*
 * The best path of an arithmetic this CPU runs: AUTO (16-bit) or AUTO_I8
 * (8-bit) resolved; any other path as it is.
 */
static enum locus_eldr_path resolve_path(enum locus_eldr_path p)
{
	const int i8 = p == LOCUS_ELDR_PATH_AUTO_I8;

	if (p != LOCUS_ELDR_PATH_AUTO && !i8)
		return p;
	if (locus_eldr_path_supported(LOCUS_ELDR_PATH_AVX512))
		return i8 ? LOCUS_ELDR_PATH_AVX512_I8 : LOCUS_ELDR_PATH_AVX512;
	if (locus_eldr_path_supported(LOCUS_ELDR_PATH_AVX2))
		return i8 ? LOCUS_ELDR_PATH_AVX2_I8 : LOCUS_ELDR_PATH_AVX2;
	return i8 ? LOCUS_ELDR_PATH_SCALAR_I8 : LOCUS_ELDR_PATH_SCALAR;
}

/*
 * Kernels of a path; LOCUS_ELDR_PATH_F32 takes the widest float ISA the CPU
 * runs. The 8-bit paths: their own load, and AVX-512's byte kernel, or the
 * 16-bit kernels of scalar and AVX2 on the levels.
 */
static void set_kernels(struct locus_eldr_router *r, enum locus_eldr_path path)
{
	r->i8 = path == LOCUS_ELDR_PATH_SCALAR_I8 || path == LOCUS_ELDR_PATH_AVX2_I8 ||
		path == LOCUS_ELDR_PATH_AVX512_I8;
	r->q8load = path == LOCUS_ELDR_PATH_AVX512_I8 ? eldr_q8load_avx512 : eldr_q8load_scalar;
	r->q8dots = path == LOCUS_ELDR_PATH_AVX512_I8 ? eldr_q8dots_avx512 : NULL;
	path = path == LOCUS_ELDR_PATH_SCALAR_I8 ? LOCUS_ELDR_PATH_SCALAR :
	       path == LOCUS_ELDR_PATH_AVX2_I8 ? LOCUS_ELDR_PATH_AVX2 :
	       path == LOCUS_ELDR_PATH_AVX512_I8 ? LOCUS_ELDR_PATH_AVX512 : path;
	r->f32 = path == LOCUS_ELDR_PATH_F32;
	if (r->f32)
		path = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
		       __builtin_cpu_supports("fma") ? LOCUS_ELDR_PATH_AVX512 :
		       locus_eldr_path_supported(LOCUS_ELDR_PATH_AVX2) ? LOCUS_ELDR_PATH_AVX2 :
		       LOCUS_ELDR_PATH_SCALAR;
	switch (path) {
	case LOCUS_ELDR_PATH_AVX512:
		r->loadnorm = eldr_loadnorm_avx512;
		r->dots_one = eldr_dots_avx512;
		r->dots_batch = eldr_dots_avx512_x4;
		r->qload = eldr_qload_avx512;
		r->qdots = eldr_qdots_avx512;
		r->batch_width = 4;
		break;
	case LOCUS_ELDR_PATH_AVX2:
		r->loadnorm = eldr_loadnorm_avx2;
		r->dots_one = eldr_dots_avx2;
		r->dots_batch = eldr_dots_avx2_x2;
		r->qload = eldr_qload_avx2;
		r->qdots = eldr_qdots_avx2;
		r->batch_width = 2;
		break;
	default:
		r->loadnorm = eldr_loadnorm_scalar;
		r->dots_one = eldr_dots_scalar;
		r->dots_batch = NULL;
		r->qload = eldr_qload_scalar;
		r->qdots = eldr_qdots_scalar;
		r->batch_width = 1;
		break;
	}
}

/*
 * Byte offsets (from the counts) that touch every 64-byte line of the
 * masked layers whatever the counts' alignment, for the kernels' prefetch
 * of the next batch: one a line from a layer's start, one more for the
 * line its end may straddle, none the previous layer's already covers
 * (adjacent masked layers: one run).
 */
static void set_lines(struct locus_eldr_router *r, uint32_t *off, uint32_t n)
{
	const size_t E2 = 2 * (size_t)r->n_experts;
	uint32_t i = 0;

	for (uint32_t m = 0; m < r->n_masked; m++) {
		size_t start = r->layers[m] * E2, end = start + E2 + LOCUS_CACHE_LINE - 1;

		for (size_t a = start; a < end && i < n; a += LOCUS_CACHE_LINE)
			if (!i || a > off[i - 1])
				off[i++] = (uint32_t)a;
	}
	r->line_off = off;
	r->n_lines = i;
}

/* Centroid k's masked element f with idf folded in, in double. */
static inline double cent_w(const struct locus_eldr_router *r, const float *c, uint32_t f)
{
	const uint32_t E = r->n_experts;

	return (double)r->idf[f] * c[(size_t)r->layers[f / E] * E + f % E];
}

/* Element f of centroid k in q's int16 layout. */
static inline int16_t *q16_at(const struct locus_eldr_router *r, int16_t *q, uint32_t k,
			      uint32_t f)
{
	return &q[(((size_t)(k / ELDR_GROUP) * r->n_qblocks + f / ELDR_QLANES) * ELDR_GROUP +
		   k % ELDR_GROUP) * ELDR_QLANES + f % ELDR_QLANES];
}

/*
 * Centroid k (idf folded in, masked layers only) quantised to int16 with
 * its own scale: its largest |element| becomes ELDR_QMAX; computed in
 * double, so any finite table gives finite scales.
 */
static void pack_quantised(const struct locus_eldr_router *r, uint32_t k, const float *c,
			   int16_t *q, double *qscale)
{
	double maxabs = 0.0, s;

	for (uint32_t f = 0; f < r->n_feat; f++)
		maxabs = LOCUS_MAX(maxabs, fabs(cent_w(r, c, f)));
	s = maxabs > 0.0 ? ELDR_QMAX / maxabs : 0.0;
	qscale[k] = maxabs / ELDR_QMAX;
	for (uint32_t f = 0; f < r->n_feat; f++) {
		long v = lrint(cent_w(r, c, f) * s);

		*q16_at(r, q, k, f) = (int16_t)(v > ELDR_QMAX ? ELDR_QMAX :
						v < -ELDR_QMAX ? -ELDR_QMAX : v);
	}
}

/*
 * The 8-bit paths' centroid k: w = off + scale x p, p = 0..ELDR_Q8MAX
 * over the centroid's range (off its smallest element, or 0 when none is
 * negative); as u8 in q8's layout for AVX-512, else as int16 in q's.
 */
static void pack_quantised8(const struct locus_eldr_router *r, uint32_t k, const float *c,
			    void *q, double *qscale, double *qoff)
{
	double lo = 0.0, hi = 0.0, s;

	for (uint32_t f = 0; f < r->n_feat; f++) {
		lo = LOCUS_MIN(lo, cent_w(r, c, f));
		hi = LOCUS_MAX(hi, cent_w(r, c, f));
	}
	s = hi > lo ? ELDR_Q8MAX / (hi - lo) : 0.0;
	qscale[k] = (hi - lo) / ELDR_Q8MAX;
	qoff[k] = lo;
	for (uint32_t f = 0; f < r->n_feat; f++) {
		long v = lrint((cent_w(r, c, f) - lo) * s);

		v = v > ELDR_Q8MAX ? ELDR_Q8MAX : v < 0 ? 0 : v;
		if (r->q8dots)
			((uint8_t *)q)[(((size_t)(k / ELDR_GROUP) * r->n_q8blocks +
					 f / ELDR_Q8LANES) * ELDR_GROUP + k % ELDR_GROUP) *
					       ELDR_Q8LANES + f % ELDR_Q8LANES] = (uint8_t)v;
		else
			*q16_at(r, q, k, f) = (int16_t)v;
	}
}

/*
 * The 8-bit norm's weights: idf^2 of every masked feature in units of
 * wscale, the largest ELDR_W8MAX (0 in the padding).
 */
static void pack_weights(struct locus_eldr_router *r, uint16_t *w8)
{
	double m2 = 0.0;

	for (uint32_t f = 0; f < r->n_feat; f++)
		m2 = LOCUS_MAX(m2, (double)r->idf[f] * r->idf[f]);
	r->wscale = m2 / ELDR_W8MAX;
	for (uint32_t f = 0; f < r->n_feat; f++)
		w8[f] = (uint16_t)lrint((double)r->idf[f] * r->idf[f] / r->wscale);
	r->w8 = w8;
}

int locus_eldr_router_build(void *mem, size_t mem_len, const void *payload, size_t len,
			    enum locus_eldr_path path, struct locus_eldr_router **out,
			    struct locus_error *err)
{
	struct locus_eldr_tbl_view v;
	struct locus_eldr_router *r = mem;
	struct router_layout o;
	uint8_t *base = mem;
	uint16_t *layers;
	float *idf, *cw;
	uint32_t L, E, K, C, M, m;
	int ret;

	ret = locus_eldr_tbl_validate(payload, len, &v, err);
	if (ret < 0)
		return ret;
	L = v.hdr->n_layers;
	E = v.hdr->n_experts;
	K = v.hdr->n_decoders;
	C = v.n_centroids;
	M = v.hdr->n_masked;
	ret = router_layout(L, E, K, v.hdr->n_centroids, M, &o);
	if (ret < 0)
		return locus_error_set(err, -ret, "router shape out of range");
	if (!mem || (uintptr_t)mem % LOCUS_CACHE_LINE)
		return locus_error_set(err, EINVAL, "router memory must be 64-byte aligned");
	if (mem_len < o.size)
		return locus_error_set(err, LOCUS_ERANGE, "router memory is %zu bytes, needs %zu",
				       mem_len, o.size);
	path = resolve_path(path);
	if (path > LOCUS_ELDR_PATH_AUTO_I8 || !locus_eldr_path_supported(path))
		return locus_error_set(err, ENOTSUP, "routing path %s not supported by this CPU",
				       locus_eldr_path_name(path));
	memset(mem, 0, o.size);
	r->n_layers = L;
	r->n_experts = E;
	r->n_decoders = K;
	r->n_cent = C;
	r->n_masked = M;
	r->k_pad = o.k_pad;
	r->n_feat = M * E;
	r->n_blocks = o.n_blocks;
	r->tau = v.hdr->tau;
	/* the table's load spill (validated: off, or within (tau, 2]) */
	r->spill_tau = v.hdr->spill_tau > v.hdr->tau ? v.hdr->spill_tau : v.hdr->tau;
	r->spill_margin = v.hdr->spill_margin;
	r->spread = !!(v.hdr->flags & LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD);
	r->path = path;
	r->n_qblocks = o.n_qblocks;
	r->n_q8blocks = o.n_q8blocks;
	set_kernels(r, path);
	r->slots = (struct eldr_slot *)(base + o.off_slots);
	layers = (uint16_t *)(base + o.off_layers);
	idf = (float *)(base + o.off_idf);
	cw = (float *)(base + o.off_cw);
	r->layers = layers;
	r->idf = idf;
	r->cw = cw;
	r->x = (float *)(base + o.off_x);
	r->dots = (float *)(base + o.off_dots);
	r->xq = (uint16_t *)(base + o.off_x);
	r->qdot = (int64_t *)(base + o.off_qdot);
	r->q = (const int16_t *)(base + o.off_cw);
	r->q8 = (const uint8_t *)(base + o.off_cw);
	r->qscale = (const double *)(base + o.off_qscale);
	r->qoff = (const double *)(base + o.off_qoff);
	r->a8 = base + o.off_a8;
	if (v.centroid_slot) {
		uint16_t *map = (uint16_t *)(base + o.off_map);

		memcpy(map, v.centroid_slot, sizeof(*map) * C);
		r->cent_slot = map;
		r->sv = (float *)(base + o.off_sv);
	} else {
		r->cent_slot = NULL;
		r->sv = r->dots; /* one centroid per decoder: the same numbers */
	}
	for (uint32_t l = 0, i = 0; l < L; l++)
		if (v.layer_mask[l])
			layers[i++] = (uint16_t)l;
	for (m = 0; m < M; m++)
		memcpy(idf + (size_t)m * E, v.idf + (size_t)layers[m] * E, 4 * (size_t)E);
	set_lines(r, (uint32_t *)(base + o.off_lines), o.n_lines);
	if (r->i8)
		pack_weights(r, (uint16_t *)(base + o.off_w8));
	for (uint32_t k = 0; k < C; k++) {
		const float *c = v.centroids + (size_t)k * L * E;
		uint32_t g = k / ELDR_GROUP, cl = k % ELDR_GROUP;

		if (r->i8) {
			pack_quantised8(r, k, c, base + o.off_cw, (double *)(base + o.off_qscale),
					(double *)(base + o.off_qoff));
			continue;
		}
		if (!r->f32) {
			pack_quantised(r, k, c, (int16_t *)(base + o.off_cw),
				       (double *)(base + o.off_qscale));
			continue;
		}
		for (uint32_t f = 0; f < r->n_feat; f++) {
			uint32_t b = f / ELDR_LANES, lane = f % ELDR_LANES;
			size_t src = (size_t)layers[f / E] * E + f % E;

			cw[(((size_t)g * o.n_blocks + b) * ELDR_GROUP + cl) * ELDR_LANES + lane] =
				idf[f] * c[src];
		}
	}
	for (uint32_t d = 0; d < K; d++) {
		r->slots[d].decoder_id = v.decoder_ids[d];
		r->slots[d].bit = v.decoder_ids[d] < 64 ? 1ull << v.decoder_ids[d] : 0;
		r->slots[d].up = 1;
	}
	*out = r;
	return 0;
}
