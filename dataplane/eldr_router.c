// SPDX-License-Identifier: MIT
/*
 * The locality-band decode router (built by eldr_router_build.c): score and
 * choose with no allocation per request.
 */
#include <math.h>
#include <string.h>

#include "eldr_priv.h"

static inline float *x_buf(const struct locus_eldr_router *r, uint32_t i)
{
	return r->x + (size_t)i * r->n_blocks * ELDR_LANES;
}

static inline uint16_t *xq_buf(const struct locus_eldr_router *r, uint32_t i)
{
	return r->xq + (size_t)i * (r->i8 ? r->n_q8blocks * ELDR_Q8LANES :
					    r->n_qblocks * ELDR_QLANES);
}

static inline uint8_t *a8_buf(const struct locus_eldr_router *r, uint32_t i)
{
	return r->a8 + (size_t)i * r->n_q8blocks * ELDR_Q8LANES;
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
static void finish(struct locus_eldr_router *r, uint32_t i, float norm2, uint64_t n8,
		   uint64_t asum)
{
	float inv = norm2 > 0.0f ? 1.0f / sqrtf(norm2) : 0.0f, *dots = dots_buf(r, i), *sv;

	if (r->f32) {
		for (uint32_t c = 0; c < r->n_cent; c++)
			dots[c] *= inv;
	} else if (r->i8) {
		const int64_t *qd = r->qdot + (size_t)i * r->k_pad;
		double inv8 = n8 ? 1.0 / sqrt((double)n8 * r->wscale) : 0.0;

		/*
		 * A cosine is in [-1, 1]; the rounded idf^2 of the norm can put the
		 * quotient past it when a table's idf spans a wide range: clamp.
		 */
		for (uint32_t c = 0; c < r->n_cent; c++)
			dots[c] = (float)fmin(1.0, fmax(-1.0, ((double)qd[c] * r->qscale[c] +
							       (double)asum * r->qoff[c]) * inv8));
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
	float norm2[ELDR_BATCH] = { 0 };
	uint64_t n8[ELDR_BATCH] = { 0 }, asum[ELDR_BATCH] = { 0 };
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
	} else if (r->i8) {
		const uint16_t *xs[ELDR_BATCH];
		const uint8_t *as[ELDR_BATCH];
		int64_t *qd[ELDR_BATCH];

		for (j = 0; j < m; j++) {
			xs[j] = xq_buf(r, j);
			as[j] = a8_buf(r, j);
			qd[j] = r->qdot + (size_t)j * r->k_pad;
			n8[j] = r->q8load(r, counts[j], xq_buf(r, j), a8_buf(r, j), &asum[j], pf);
		}
		if (r->q8dots)
			r->q8dots(r, as, m, qd, pf);
		else
			r->qdots(r, xs, m, ELDR_A8MAX, qd, pf);
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
		finish(r, j, norm2[j], n8[j], asum[j]);
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
		struct eldr_prefetch pf = { .off = r->line_off, .n_lines = r->n_lines };

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
			pf.base[pf.n_sigs++] = (const uint8_t *)counts[k];
			taken++;
		}
		/*
		 * Steps of the kernels that prefetch: the dot products' blocks
		 * (of 64 or 32 features), and with AVX-512's 8-bit path also
		 * the load's groups of four 32-count steps of each signature.
		 */
		steps = r->k_pad / ELDR_GROUP * (r->q8dots ? r->n_q8blocks : r->n_qblocks);
		if (r->q8dots)
			steps += m * (r->n_q8blocks * 2 / 4);
		/*
		 * Evenly over the steps; the 8-bit path's batch is short
		 * enough that its requests must be out by the middle of it
		 * (eldr_bench from memory: faster than spreading them evenly;
		 * the same for the 16-bit path is slower).
		 */
		pf.per_step = (pf.n_sigs * pf.n_lines * (r->q8dots ? 2 : 1) + steps - 1) / steps;
		score_rows(r, cs, m, pf.n_sigs ? &pf : NULL);
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
