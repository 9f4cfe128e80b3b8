// SPDX-License-Identifier: MIT
/*
 * The locality-band decode router: build from a validated ELDR payload into
 * caller memory, then score and choose with no allocation per request.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "eldr_priv.h"

struct router_layout {
	size_t off_slots, off_layers, off_idf, off_cw, off_qscale, off_x, off_dots, off_qdot;
	size_t off_map, off_sv, off_lines, off_pf, size;
	uint32_t k_pad, n_blocks, n_qblocks, n_lines;
};

/*
 * Memory of a router for L x E, K decoders, C centroids (0: one per
 * decoder, no map nor decoder scratch), M masked layers.
 */
static int router_layout(uint32_t L, uint32_t E, uint32_t K, uint32_t C, uint32_t M,
			 struct router_layout *o)
{
	size_t off = LOCUS_ALIGN_UP(sizeof(struct locus_eldr_router), (size_t)LOCUS_CACHE_LINE);
	size_t feat, qfeat;

	if (!L || !E || !K || !M || M > L || L > LOCUS_ELDR_MAX_LAYERS ||
	    E > LOCUS_ELDR_MAX_EXPERTS || K > LOCUS_ELDR_MAX_DECODERS ||
	    (C && (C < K || C > LOCUS_ELDR_MAX_CENTROIDS)))
		return -LOCUS_ERANGE;
	o->k_pad = (uint32_t)LOCUS_ALIGN_UP(C ? C : K, ELDR_GROUP);
	o->n_blocks = (uint32_t)(((size_t)M * E + ELDR_LANES - 1) / ELDR_LANES);
	feat = (size_t)o->n_blocks * ELDR_LANES;
	o->n_qblocks = (uint32_t)(((size_t)M * E + ELDR_QLANES - 1) / ELDR_QLANES);
	qfeat = (size_t)o->n_qblocks * ELDR_QLANES;
	o->off_slots = off;
	off = LOCUS_ALIGN_UP(off + sizeof(struct eldr_slot) * K, (size_t)LOCUS_CACHE_LINE);
	o->off_layers = off;
	off = LOCUS_ALIGN_UP(off + 2 * (size_t)M, (size_t)LOCUS_CACHE_LINE);
	o->off_idf = off;
	off = LOCUS_ALIGN_UP(off + 4 * feat, (size_t)LOCUS_CACHE_LINE);
	o->off_cw = off; /* float centroids, or the integer path's int16 ones */
	off = LOCUS_ALIGN_UP(off + LOCUS_MAX(4 * feat, 2 * qfeat) * o->k_pad,
			     (size_t)LOCUS_CACHE_LINE);
	o->off_qscale = off;
	off = LOCUS_ALIGN_UP(off + 8 * (size_t)o->k_pad, (size_t)LOCUS_CACHE_LINE);
	o->off_x = off; /* float features, or the integer path's u16 counts */
	off = LOCUS_ALIGN_UP(off + LOCUS_MAX(4 * feat, 2 * qfeat) * ELDR_BATCH,
			     (size_t)LOCUS_CACHE_LINE);
	o->off_dots = off;
	off = LOCUS_ALIGN_UP(off + 4 * (size_t)o->k_pad * ELDR_BATCH, (size_t)LOCUS_CACHE_LINE);
	o->off_qdot = off;
	off = LOCUS_ALIGN_UP(off + 8 * (size_t)o->k_pad * ELDR_BATCH, (size_t)LOCUS_CACHE_LINE);
	/* the 64-byte lines of the masked counts (E x 2 bytes a layer) */
	o->n_lines = M * (uint32_t)((2 * (size_t)E + 2 * LOCUS_CACHE_LINE - 2) / LOCUS_CACHE_LINE);
	o->off_lines = off;
	off = LOCUS_ALIGN_UP(off + 4 * (size_t)o->n_lines, (size_t)LOCUS_CACHE_LINE);
	o->off_pf = off;
	off = LOCUS_ALIGN_UP(off + sizeof(void *) * o->n_lines * ELDR_BATCH,
			     (size_t)LOCUS_CACHE_LINE);
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
	}
	return "unknown";
}

int locus_eldr_path_supported(enum locus_eldr_path p)
{
	__builtin_cpu_init();
	switch (p) {
	case LOCUS_ELDR_PATH_AUTO:
	case LOCUS_ELDR_PATH_SCALAR:
	case LOCUS_ELDR_PATH_F32:
		return 1;
	case LOCUS_ELDR_PATH_AVX2:
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	case LOCUS_ELDR_PATH_AVX512:
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

/* Kernels of a path; LOCUS_ELDR_PATH_F32 takes the widest float ISA the CPU runs. */
static void set_kernels(struct locus_eldr_router *r, enum locus_eldr_path path)
{
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
 * line its end may straddle.
 */
static void set_lines(struct locus_eldr_router *r, uint32_t *off, uint32_t n)
{
	const size_t E2 = 2 * (size_t)r->n_experts;
	uint32_t i = 0;

	for (uint32_t m = 0; m < r->n_masked; m++) {
		size_t start = r->layers[m] * E2, end = start + E2 + LOCUS_CACHE_LINE - 1;

		for (size_t a = start; a < end && i < n; a += LOCUS_CACHE_LINE)
			off[i++] = (uint32_t)a;
	}
	r->line_off = off;
	r->n_lines = i;
}

/*
 * Centroid k (idf folded in, masked layers only) quantised to int16 with
 * its own scale: its largest |element| becomes ELDR_QMAX; computed in
 * double, so any finite table gives finite scales.
 */
static void pack_quantised(const struct locus_eldr_router *r, uint32_t k, const float *c,
			   int16_t *q, double *qscale)
{
	const uint32_t E = r->n_experts, g = k / ELDR_GROUP, cl = k % ELDR_GROUP;
	double maxabs = 0.0, s;

	for (uint32_t f = 0; f < r->n_feat; f++) {
		double w = fabs((double)r->idf[f] * c[(size_t)r->layers[f / E] * E + f % E]);

		maxabs = w > maxabs ? w : maxabs;
	}
	s = maxabs > 0.0 ? ELDR_QMAX / maxabs : 0.0;
	qscale[k] = maxabs / ELDR_QMAX;
	for (uint32_t f = 0; f < r->n_feat; f++) {
		uint32_t b = f / ELDR_QLANES, lane = f % ELDR_QLANES;
		double w = (double)r->idf[f] * c[(size_t)r->layers[f / E] * E + f % E] * s;
		long v = lrint(w);

		v = v > ELDR_QMAX ? ELDR_QMAX : v < -ELDR_QMAX ? -ELDR_QMAX : v;
		q[(((size_t)g * r->n_qblocks + b) * ELDR_GROUP + cl) * ELDR_QLANES + lane] =
			(int16_t)v;
	}
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
	if (path == LOCUS_ELDR_PATH_AUTO)
		path = locus_eldr_path_supported(LOCUS_ELDR_PATH_AVX512) ? LOCUS_ELDR_PATH_AVX512 :
		       locus_eldr_path_supported(LOCUS_ELDR_PATH_AVX2) ? LOCUS_ELDR_PATH_AVX2 :
		       LOCUS_ELDR_PATH_SCALAR;
	if (path > LOCUS_ELDR_PATH_F32 || !locus_eldr_path_supported(path))
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
	r->qscale = (const double *)(base + o.off_qscale);
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
	r->pf_addr = (const uint8_t **)(base + o.off_pf);
	for (uint32_t k = 0; k < C; k++) {
		const float *c = v.centroids + (size_t)k * L * E;
		uint32_t g = k / ELDR_GROUP, cl = k % ELDR_GROUP;

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

static inline float *x_buf(const struct locus_eldr_router *r, uint32_t i)
{
	return r->x + (size_t)i * r->n_blocks * ELDR_LANES;
}

static inline uint16_t *xq_buf(const struct locus_eldr_router *r, uint32_t i)
{
	return r->xq + (size_t)i * r->n_qblocks * ELDR_QLANES;
}

static inline float *dots_buf(const struct locus_eldr_router *r, uint32_t i)
{
	return r->dots + (size_t)i * r->k_pad;
}

/* Row i of the decoders' similarities (the centroids' row when unmapped). */
static inline float *sv_buf(const struct locus_eldr_router *r, uint32_t i)
{
	return r->cent_slot ? r->sv + (size_t)i * r->n_decoders : dots_buf(r, i);
}

/*
 * The centroids' similarities of row i (dots_buf: raw dot products on the
 * float path; the integer path's exact sums in qdot), then, with a
 * centroid map, each decoder's: the best of its centroids' (in centroid
 * order; every slot owns one, the validator checked).
 */
static void finish(struct locus_eldr_router *r, uint32_t i, float norm2)
{
	float inv = norm2 > 0.0f ? 1.0f / sqrtf(norm2) : 0.0f, *dots = dots_buf(r, i), *sv;

	if (r->f32) {
		for (uint32_t c = 0; c < r->n_cent; c++)
			dots[c] *= inv;
	} else {
		const int64_t *qd = r->qdot + (size_t)i * r->k_pad;

		for (uint32_t c = 0; c < r->n_cent; c++)
			dots[c] = (float)((double)qd[c] * r->qscale[c]) * inv;
	}
	if (!r->cent_slot)
		return;
	sv = sv_buf(r, i);
	for (uint32_t d = 0; d < r->n_decoders; d++)
		sv[d] = -INFINITY;
	for (uint32_t c = 0; c < r->n_cent; c++)
		if (dots[c] > sv[r->cent_slot[c]])
			sv[r->cent_slot[c]] = dots[c];
}

/*
 * Decoder similarities of m (1..batch_width) checked signatures into rows
 * 0..m-1, one pass over the centroids for all of them when m > 1; the
 * integer kernels prefetch pf's signatures (the next batch) meanwhile.
 */
static void score_rows(struct locus_eldr_router *r, const uint16_t *const *counts, uint32_t m,
		       struct eldr_prefetch *pf)
{
	float norm2[ELDR_BATCH];
	uint32_t j;

	if (r->f32) {
		const float *xs[ELDR_BATCH];
		float *ds[ELDR_BATCH];

		for (j = 0; j < m; j++) {
			norm2[j] = r->loadnorm(r, counts[j], x_buf(r, j));
			xs[j] = x_buf(r, j);
			ds[j] = dots_buf(r, j);
		}
		if (m == r->batch_width && m > 1)
			r->dots_batch(r, xs, ds);
		else
			for (j = 0; j < m; j++)
				r->dots_one(r, xs[j], ds[j]);
	} else {
		const uint16_t *xs[ELDR_BATCH];
		int64_t *qd[ELDR_BATCH];
		uint32_t maxc = 0;

		for (j = 0; j < m; j++) {
			uint32_t mc;

			xs[j] = xq_buf(r, j);
			qd[j] = r->qdot + (size_t)j * r->k_pad;
			norm2[j] = r->qload(r, counts[j], xq_buf(r, j), &mc);
			maxc = mc > maxc ? mc : maxc;
		}
		r->qdots(r, xs, m, maxc, qd, pf);
	}
	for (j = 0; j < m; j++)
		finish(r, j, norm2[j]);
}

int locus_eldr_score(struct locus_eldr_router *r, const void *sig, size_t sig_len,
		     float *scores)
{
	int ret = locus_eldr_sig_check(sig, sig_len, (uint16_t)r->n_layers,
				       (uint16_t)r->n_experts, NULL);
	const uint16_t *counts;

	if (ret < 0)
		return ret;
	counts = locus_eldr_sig_counts(sig);
	score_rows(r, &counts, 1, NULL);
	memcpy(scores, sv_buf(r, 0), sizeof(float) * r->n_decoders);
	return 0;
}

/* Effective load of slot s: reported + local, saturating. */
static inline uint64_t eff_load(const struct eldr_slot *s)
{
	uint64_t load = s->reported + s->local;

	return load < s->reported ? UINT64_MAX : load;
}

/*
 * The least loaded eligible slot with sv >= thr, ties to the higher score,
 * then the lower slot; *n counts the slots considered. UINT32_MAX if none.
 */
static uint32_t least_loaded(const struct locus_eldr_router *r, const float *sv,
			     uint64_t allowed, float thr, uint32_t *n)
{
	const struct eldr_slot *slots = r->slots;
	uint64_t best_load = UINT64_MAX;
	uint32_t pick = UINT32_MAX;

	for (uint32_t s = 0; s < r->n_decoders; s++) {
		uint64_t load;

		if (!slots[s].up || (allowed && !(slots[s].bit & allowed)) || sv[s] < thr)
			continue;
		(*n)++;
		load = eff_load(&slots[s]);
		if (pick == UINT32_MAX || load < best_load ||
		    (load == best_load && sv[s] > sv[pick])) {
			best_load = load;
			pick = s;
		}
	}
	return pick;
}

/*
 * Band, eligibility and load rules on decoder similarities sv[]; counts the
 * pick. The band is [anchor - tau]: anchor is the best eligible (up,
 * allowed) score, or with the overflow spread the best allowed score up or
 * not, and then a request none of whose band is up goes to the least loaded
 * eligible decoder. The load spill (off unless the table or
 * locus_eldr_router_set_spill() widened it): when the least loaded decoder
 * of the wider band [anchor - spill_tau] is lighter than the band's pick by
 * more than spill_margin, it takes the request.
 */
static int choose(struct locus_eldr_router *r, const float *sv, uint64_t allowed,
		  struct locus_eldr_decision *d)
{
	struct eldr_slot *slots = r->slots;
	float best = -INFINITY, anchor = -INFINITY;
	uint32_t pick, n_cand = 0, n_wide = 0;
	uint64_t load;

	for (uint32_t s = 0; s < r->n_decoders; s++) {
		if (allowed && !(slots[s].bit & allowed))
			continue;
		if (slots[s].up && sv[s] > best)
			best = sv[s];
		if (sv[s] > anchor)
			anchor = sv[s];
	}
	if (unlikely(best == -INFINITY))
		return -LOCUS_ENODEST;
	if (!r->spread)
		anchor = best;
	pick = least_loaded(r, sv, allowed, anchor - r->tau, &n_cand);
	if (pick == UINT32_MAX) /* spread: the band is down, every eligible decoder is */
		pick = least_loaded(r, sv, allowed, -INFINITY, &n_cand);
	load = eff_load(&slots[pick]);
	if (r->spill_tau > r->tau) {
		uint32_t wide = least_loaded(r, sv, allowed, anchor - r->spill_tau, &n_wide);
		uint64_t wl = wide == UINT32_MAX ? load : eff_load(&slots[wide]);

		if (wl < load && load - wl > r->spill_margin) {
			pick = wide;
			load = wl;
		}
	}
	slots[pick].local++;
	d->slot = pick;
	d->decoder_id = slots[pick].decoder_id;
	d->similarity = sv[pick];
	d->best = best;
	d->n_candidates = n_cand;
	d->load = load;
	return 0;
}

int locus_eldr_route(struct locus_eldr_router *r, const void *sig, size_t sig_len,
		     struct locus_eldr_decision *d)
{
	if (unlikely(!sig || sig_len < sizeof(struct locus_eldr_sig_hdr)))
		return -LOCUS_ETRUNCATED;
	return locus_eldr_route_split(r, sig, locus_eldr_sig_counts(sig), sig_len, d);
}

int locus_eldr_route_split(struct locus_eldr_router *r, const struct locus_eldr_sig_hdr *hdr,
			   const uint16_t *counts, size_t sig_len, struct locus_eldr_decision *d)
{
	int ret = locus_eldr_sig_hdr_check(hdr, sig_len, (uint16_t)r->n_layers,
					   (uint16_t)r->n_experts, NULL);

	if (unlikely(ret < 0))
		return ret;
	score_rows(r, &counts, 1, NULL);
	return choose(r, sv_buf(r, 0), hdr->allowed_decoders, d);
}

/*
 * Route signatures i in [0, n) for which hdrs[i] is set (checked copies,
 * or NULL where rc[i] already holds a check's code), batch_width at a
 * time, the decisions in submission order. Returns the number routed.
 */
static uint32_t route_checked(struct locus_eldr_router *r,
			      const struct locus_eldr_sig_hdr *const *hdrs,
			      const uint16_t *const *counts, uint32_t n,
			      struct locus_eldr_decision *d, int *rc)
{
	const uint32_t w = r->batch_width;
	uint32_t i = 0, ok = 0;

	while (i < n) {
		const uint16_t *cs[ELDR_BATCH];
		uint32_t idx[ELDR_BATCH], m = 0, steps;
		struct eldr_prefetch pf = { .addr = r->pf_addr };

		for (; i < n && m < w; i++) {
			if (!hdrs[i])
				continue;
			cs[m] = counts[i];
			idx[m++] = i;
		}
		if (!m)
			break;
		/* the next batch's counts, spread over this batch's block steps */
		for (uint32_t k = i, taken = 0; !r->f32 && k < n && taken < w; k++) {
			if (!hdrs[k])
				continue;
			for (uint32_t l = 0; l < r->n_lines; l++)
				r->pf_addr[pf.n++] = (const uint8_t *)counts[k] + r->line_off[l];
			taken++;
		}
		steps = r->k_pad / ELDR_GROUP * r->n_qblocks;
		pf.per_step = (pf.n + steps - 1) / steps;
		score_rows(r, cs, m, pf.n ? &pf : NULL);
		for (uint32_t j = 0; j < m; j++) {
			rc[idx[j]] = choose(r, sv_buf(r, j), hdrs[idx[j]]->allowed_decoders,
					    &d[idx[j]]);
			ok += rc[idx[j]] == 0;
		}
	}
	return ok;
}

uint32_t locus_eldr_route_split_batch(struct locus_eldr_router *r,
				      const struct locus_eldr_sig_hdr *hdrs,
				      const uint16_t *const *counts, const size_t *lens,
				      uint32_t n, struct locus_eldr_decision *d, int *rc)
{
	const struct locus_eldr_sig_hdr *h[LOCUS_ELDR_MAX_BATCH];
	uint32_t done = 0, ok = 0;

	while (done < n) {
		uint32_t m = LOCUS_MIN(n - done, (uint32_t)LOCUS_ELDR_MAX_BATCH);

		for (uint32_t i = 0; i < m; i++) {
			rc[done + i] = locus_eldr_sig_hdr_check(&hdrs[done + i], lens[done + i],
								(uint16_t)r->n_layers,
								(uint16_t)r->n_experts, NULL);
			h[i] = rc[done + i] < 0 ? NULL : &hdrs[done + i];
		}
		ok += route_checked(r, h, counts + done, m, d + done, rc + done);
		done += m;
	}
	return ok;
}

uint32_t locus_eldr_route_batch(struct locus_eldr_router *r, const void *const *sigs,
				const size_t *lens, uint32_t n, struct locus_eldr_decision *d,
				int *rc)
{
	const struct locus_eldr_sig_hdr *h[LOCUS_ELDR_MAX_BATCH];
	const uint16_t *cs[LOCUS_ELDR_MAX_BATCH];
	uint32_t done = 0, ok = 0;

	while (done < n) {
		uint32_t m = LOCUS_MIN(n - done, (uint32_t)LOCUS_ELDR_MAX_BATCH);

		for (uint32_t i = 0; i < m; i++) {
			rc[done + i] = locus_eldr_sig_check(sigs[done + i], lens[done + i],
							    (uint16_t)r->n_layers,
							    (uint16_t)r->n_experts, NULL);
			h[i] = rc[done + i] < 0 ? NULL : sigs[done + i];
			cs[i] = rc[done + i] < 0 ? NULL : locus_eldr_sig_counts(sigs[done + i]);
		}
		ok += route_checked(r, h, cs, m, d + done, rc + done);
		done += m;
	}
	return ok;
}

void locus_eldr_router_set_load(struct locus_eldr_router *r, uint32_t slot, uint64_t load)
{
	if (slot < r->n_decoders) {
		r->slots[slot].reported = load;
		r->slots[slot].local = 0;
	}
}

int locus_eldr_router_set_spill(struct locus_eldr_router *r, float spill_tau, uint64_t margin)
{
	if (!isfinite(spill_tau) || spill_tau > 2.0f || spill_tau < r->tau)
		return -LOCUS_ERANGE;
	r->spill_tau = spill_tau;
	r->spill_margin = margin;
	return 0;
}

void locus_eldr_router_set_up(struct locus_eldr_router *r, uint32_t slot, int up)
{
	if (slot < r->n_decoders)
		r->slots[slot].up = !!up;
}

int locus_eldr_router_slot(const struct locus_eldr_router *r, uint32_t decoder_id)
{
	for (uint32_t s = 0; s < r->n_decoders; s++)
		if (r->slots[s].decoder_id == decoder_id)
			return (int)s;
	return -LOCUS_ERANGE;
}

uint32_t locus_eldr_router_n_decoders(const struct locus_eldr_router *r)
{
	return r->n_decoders;
}

void locus_eldr_router_shape(const struct locus_eldr_router *r, uint16_t *n_layers,
			     uint16_t *n_experts)
{
	*n_layers = (uint16_t)r->n_layers;
	*n_experts = (uint16_t)r->n_experts;
}

enum locus_eldr_path locus_eldr_router_path(const struct locus_eldr_router *r)
{
	return r->path;
}
