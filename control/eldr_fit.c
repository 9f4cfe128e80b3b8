// SPDX-License-Identifier: MIT
/* The ELDR fit: IDF, vectors, mask, balanced k-means, sealed table. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eldr_fit_priv.h"
#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_err_priv.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

#define DEF_MASK_SAMPLE 512u
#define DEF_NEIGHBOURS  8u

void locus_eldrfit_idf(const uint16_t *counts, uint32_t n, size_t le, float *idf)
{
	for (size_t f = 0; f < le; f++) {
		uint32_t df = 0;

		for (uint32_t i = 0; i < n; i++)
			df += counts[(size_t)i * le + f] != 0;
		idf[f] = (float)(log((1.0 + n) / (1.0 + df)) + 1.0);
	}
}

double locus_eldrfit_vector(const uint16_t *counts, uint16_t L, uint16_t E, const float *idf,
			    const uint8_t *mask, float *x)
{
	double n2 = 0, inv;
	size_t o = 0;

	for (uint32_t l = 0; l < L; l++) {
		if (!mask[l])
			continue;
		for (uint32_t e = 0; e < E; e++, o++) {
			size_t f = (size_t)l * E + e;

			x[o] = (float)counts[f] * idf[f];
			n2 += (double)x[o] * x[o];
		}
	}
	if (n2 <= 0)
		return 0;
	inv = 1.0 / sqrt(n2);
	for (size_t i = 0; i < o; i++)
		x[i] = (float)(x[i] * inv);
	return sqrt(n2);
}

void locus_eldrfit_opts_default(struct locus_eldrfit_opts *o, uint32_t n_decoders)
{
	memset(o, 0, sizeof(*o));
	o->n_decoders = n_decoders;
	o->tau = LOCUS_ELDR_TAU_DEFAULT;
	o->slack = LOCUS_ELDRFIT_SLACK_DEFAULT;
	o->balance_price = LOCUS_ELDRFIT_BALANCE_PRICE_DEFAULT;
	o->restarts = LOCUS_ELDRFIT_RESTARTS_DEFAULT;
	o->decode_weight = LOCUS_ELDRFIT_DECODE_WEIGHT_DEFAULT;
}

void locus_eldrfit_result_free(struct locus_eldrfit_result *res)
{
	if (!res)
		return;
	free(res->blob);
	free(res->assign);
	free(res->req_index);
	memset(res, 0, sizeof(*res));
}

static int check_opts(const struct locus_eldrfit_opts *o, uint32_t n, uint16_t L, uint16_t E,
		      struct locus_error *err)
{
	if (!o || !o->n_decoders)
		return locus_error_set(err, LOCUS_ERANGE,
				       "number of decoders K must be at least 1");
	if (o->n_decoders > LOCUS_ELDR_MAX_DECODERS)
		return locus_error_set(err, LOCUS_ERANGE, "K=%u exceeds the maximum %u",
				       o->n_decoders, LOCUS_ELDR_MAX_DECODERS);
	if (o->n_decoders > n)
		return locus_error_set(err, LOCUS_ERANGE,
				       "K=%u decoders but only %u calibration requests",
				       o->n_decoders, n);
	if (!L || L > LOCUS_ELDR_MAX_LAYERS || !E || E > LOCUS_ELDR_MAX_EXPERTS)
		return locus_error_set(err, LOCUS_ERANGE, "shape L=%u E=%u out of range", L, E);
	if ((uint64_t)n * L * E > LOCUS_ELDRFIT_MAX_CELLS)
		return locus_error_set(err, LOCUS_ERANGE,
				       "%u requests x %u layers x %u experts = %llu cells exceeds the "
				       "fit's limit of %llu", n, L, E,
				       (unsigned long long)n * L * E,
				       (unsigned long long)LOCUS_ELDRFIT_MAX_CELLS);
	if (!isfinite(o->decode_weight) || o->decode_weight < 0.0f || o->decode_weight > 100.0f)
		return locus_error_set(err, LOCUS_ERANGE, "decode weight %g outside [0, 100]",
				       (double)o->decode_weight);
	if (!isfinite(o->balance_price) || o->balance_price < 0.0f || o->balance_price > 100.0f)
		return locus_error_set(err, LOCUS_ERANGE, "balance price %g outside [0, 100]",
				       (double)o->balance_price);
	if (!isfinite(o->slack) || o->slack < 0.0f || o->slack > 1.0f)
		return locus_error_set(err, LOCUS_ERANGE, "balance slack %g outside [0, 1]",
				       (double)o->slack);
	if (!isfinite(o->tau) || o->tau < 0.0f || o->tau > 2.0f)
		return locus_error_set(err, LOCUS_ERANGE, "tau %g outside [0, 2]", (double)o->tau);
	if (o->spill_tau != 0.0f &&
	    (!isfinite(o->spill_tau) || !(o->spill_tau > o->tau) || o->spill_tau > 2.0f))
		return locus_error_set(err, LOCUS_ERANGE, "spill tau %g outside (tau %g, 2]",
				       (double)o->spill_tau, (double)o->tau);
	if (o->spill_tau == 0.0f && o->spill_margin)
		return locus_error_set(err, LOCUS_ERANGE, "a spill margin without a spill tau");
	if (o->centroids_per_decoder > LOCUS_ELDRFIT_MAX_CENTROIDS_PER_DECODER ||
	    (uint64_t)o->n_decoders * (o->centroids_per_decoder ? o->centroids_per_decoder : 1) >
	    LOCUS_ELDR_MAX_CENTROIDS)
		return locus_error_set(err, LOCUS_ERANGE,
				       "%u centroids per decoder (at most %u, and K x that at most %u)",
				       o->centroids_per_decoder,
				       LOCUS_ELDRFIT_MAX_CENTROIDS_PER_DECODER,
				       LOCUS_ELDR_MAX_CENTROIDS);
	if (o->decoder_ids) {
		for (uint32_t d = 0; d < o->n_decoders; d++)
			for (uint32_t e = 0; e < d; e++)
				if (o->decoder_ids[d] == o->decoder_ids[e])
					return locus_error_set(err, LOCUS_ERANGE,
							       "decoder id %u given twice",
							       o->decoder_ids[d]);
	}
	return 0;
}

/*
 * The sealed table: C centroids cen[C][M * E] over the mask, slot[C] their
 * decoders (NULL with C = K: centroid d is decoder d's, version 1's layout),
 * the options' tau, load spill and overflow rule; sealed as the oldest
 * version that holds it (locus_eldr_tbl_kind_version).
 */
static int write_table(const struct locus_eldrfit_opts *o, uint16_t L, uint16_t E, uint32_t n,
		       const uint8_t *mask, uint32_t M, const float *idf, const float *cen,
		       const uint16_t *slot, uint32_t C, struct locus_eldrfit_result *res,
		       struct locus_error *err)
{
	struct locus_eldr_tbl_layout lay;
	struct locus_eldr_tbl_hdr *h;
	uint32_t *ids, K = o->n_decoders, TC = slot ? C : 0;
	uint8_t *tmask, *blob;
	uint16_t *tmap;
	float *tidf, *tcen;
	int ret;

	ret = locus_eldr_tbl_layout_mapped(L, E, K, TC, &lay);
	if (ret < 0)
		return locus_error_set(err, -ret, "table for L=%u E=%u K=%u C=%u too large", L, E,
				       K, TC);
	blob = calloc(1, sizeof(struct locus_tbl_hdr) + lay.len);
	if (!blob)
		return locus_error_set(err, ENOMEM, "out of memory");
	h = (struct locus_eldr_tbl_hdr *)(blob + sizeof(struct locus_tbl_hdr));
	ret = locus_eldr_tbl_init_mapped(h, lay.len, L, E, (uint16_t)K, (uint16_t)TC, o->tau, &ids,
					 &tmap, &tmask, &tidf, &tcen);
	if (ret < 0) {
		ret = locus_error_set(err, -ret, "table init failed");
		goto err_free;
	}
	for (uint32_t d = 0; d < K; d++)
		ids[d] = o->decoder_ids ? o->decoder_ids[d] : d;
	for (uint32_t k = 0; k < C; k++) {
		size_t c = 0;

		if (tmap)
			tmap[k] = slot[k];
		for (uint32_t l = 0; l < L; l++) {
			if (!mask[l])
				continue;
			memcpy(tcen + ((size_t)k * L + l) * E, cen + ((size_t)k * M + c) * E,
			       sizeof(float) * E);
			c++;
		}
	}
	memcpy(tmask, mask, L);
	memcpy(tidf, idf, sizeof(float) * L * E);
	h->n_masked = (uint16_t)M;
	h->n_calib = n;
	h->seed = res->seed;
	h->mask_score = res->mask_score;
	h->full_score = res->full_score;
	h->iterations = res->iterations;
	h->spill_tau = o->spill_tau;
	h->spill_margin = o->spill_tau != 0.0f ? o->spill_margin : 0;
	h->flags = o->overflow_spread ? LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD : 0;
	ret = locus_eldr_tbl_validate(h, lay.len, NULL, err);
	if (ret < 0)
		goto err_free;
	res->n_centroids = C;
	ret = locus_tbl_seal(blob, sizeof(struct locus_tbl_hdr) + lay.len, LOCUS_TBL_ELDR,
			     locus_eldr_tbl_kind_version(h), lay.len);
	if (ret < 0) {
		ret = locus_error_set(err, -ret, "sealing the table failed");
		goto err_free;
	}
	res->blob = blob;
	res->blob_len = sizeof(struct locus_tbl_hdr) + lay.len;
	return 0;

err_free:
	free(blob);
	return ret;
}

/* The clustering options of o, the key of a prepared fit's last clustering. */
static void cluster_key(const struct locus_eldrfit_opts *o, struct eldr_prep *p)
{
	p->key_k = o->n_decoders;
	p->key_restarts = o->restarts;
	p->key_max_iter = o->max_iter;
	p->key_seed = o->seed;
	p->key_slack = o->slack;
	p->key_price = o->balance_price;
	p->key_weight = o->decode_weight;
}

static int same_key(const struct locus_eldrfit_opts *o, const struct eldr_prep *p)
{
	return p->have_cluster && p->key_k == o->n_decoders && p->key_restarts == o->restarts &&
	       p->key_max_iter == o->max_iter && p->key_seed == o->seed &&
	       p->key_slack == o->slack && p->key_price == o->balance_price &&
	       p->key_weight == o->decode_weight;
}

void eldr_prep_free(struct eldr_prep *p)
{
	free(p->own_pre);
	free(p->own_dec);
	free(p->mask);
	free(p->idf);
	free(p->x);
	free(p->assign);
	free(p->cen);
	memset(p, 0, sizeof(*p));
}

int eldr_prep_arrays(const uint16_t *prefill, const uint16_t *decode, uint32_t n, uint16_t L,
		     uint16_t E, const uint16_t *score_pre, const uint16_t *score_target,
		     uint32_t n_score, enum locus_eldrfit_score_kind kind,
		     const struct locus_eldrfit_opts *o, struct eldr_prep *p,
		     struct locus_error *err)
{
	const size_t LE = (size_t)L * E;
	uint32_t nn;
	int ret;

	ret = check_opts(o, n, L, E, err);
	if (ret < 0)
		return ret;
	if (!prefill)
		return locus_error_set(err, EINVAL, "no calibration counts");
	p->pre = prefill;
	p->dec = decode;
	p->n = n;
	p->K = o->n_decoders;
	p->L = L;
	p->E = E;
	nn = o->mask_neighbours ? o->mask_neighbours : DEF_NEIGHBOURS;
	p->mask = malloc(L);
	p->idf = malloc(sizeof(float) * LE);
	if (!p->mask || !p->idf) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	if (o->progress)
		o->progress(o->progress_arg, "idf", 0, 1);
	locus_eldrfit_idf(prefill, n, LE, p->idf);
	if (o->progress)
		o->progress(o->progress_arg, "idf", 1, 1);
	memset(p->mask, 1, L);
	p->score_kind = LOCUS_ELDRFIT_SCORE_NONE;
	if (!o->no_mask && score_pre && score_target && n_score >= 2) {
		ret = eldr_select_mask(score_pre, score_target, n_score, L, E, p->idf, nn, p->mask,
				       &p->mask_score, &p->full_score, o->progress,
				       o->progress_arg);
		if (ret < 0) {
			ret = locus_error_set(err, -ret, "layer mask search: %s",
					      locus_strerror(ret));
			goto err_free;
		}
		p->score_kind = kind;
	}
	for (uint32_t l = 0; l < L; l++)
		p->M += p->mask[l];
	p->D = p->M * E;
	p->x = malloc(sizeof(float) * (size_t)n * p->D);
	p->assign = malloc(sizeof(uint32_t) * n);
	p->cen = malloc(sizeof(float) * (size_t)o->n_decoders * p->D);
	if (!p->x || !p->assign || !p->cen) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	for (uint32_t i = 0; i < n; i++)
		locus_eldrfit_vector(prefill + (size_t)i * LE, L, E, p->idf, p->mask,
				     p->x + (size_t)i * p->D);
	return 0;

err_free:
	eldr_prep_free(p);
	return ret;
}

int eldr_prep_fit(struct eldr_prep *p, const struct locus_eldrfit_opts *o,
		  struct locus_eldrfit_result *res, struct locus_error *err)
{
	const uint32_t n = p->n, D = p->D;
	float *sub = NULL;
	uint16_t *slot = NULL;
	uint32_t K, C;
	int ret;

	memset(res, 0, sizeof(*res));
	ret = check_opts(o, n, p->L, p->E, err);
	if (ret < 0)
		return ret;
	if (o->n_decoders != p->K)
		return locus_error_set(err, EINVAL, "a prepared fit serves one K");
	K = o->n_decoders;
	res->assign = malloc(sizeof(uint32_t) * n);
	res->req_index = malloc(sizeof(uint32_t) * n);
	if (!res->assign || !res->req_index) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	for (uint32_t i = 0; i < n; i++)
		res->req_index[i] = i;
	res->score_kind = p->score_kind;
	res->mask_score = p->mask_score;
	res->full_score = p->full_score;
	if (!same_key(o, p)) {
		struct locus_eldrfit_result cr = { .assign = p->assign };

		p->have_cluster = 0;
		ret = eldr_cluster(o, p->x, n, D, p->dec, p->L, p->E, p->cen, &cr);
		if (ret < 0) {
			ret = locus_error_set(err, -ret, "k-means: %s", locus_strerror(ret));
			goto err_free;
		}
		p->iterations = cr.iterations;
		p->converged = cr.converged;
		p->seed = cr.seed;
		p->size_lo = cr.size_lo;
		p->size_hi = cr.size_hi;
		p->decode_clustered = cr.decode_clustered;
		p->objective = cr.objective;
		cluster_key(o, p);
		p->have_cluster = 1;
	}
	memcpy(res->assign, p->assign, sizeof(uint32_t) * n);
	res->iterations = p->iterations;
	res->converged = p->converged;
	res->seed = p->seed;
	res->size_lo = p->size_lo;
	res->size_hi = p->size_hi;
	res->decode_clustered = p->decode_clustered;
	res->objective = p->objective;
	res->n_used = n;
	res->n_masked = p->M;
	C = K;
	if (o->centroids_per_decoder > 1) {
		sub = malloc(sizeof(float) * (size_t)K * o->centroids_per_decoder * D);
		slot = malloc(sizeof(uint16_t) * K * o->centroids_per_decoder);
		ret = sub && slot ? eldr_subcentroids(o, p->x, n, D, p->dec, p->L, p->E,
						      res->assign, p->cen, sub, slot, &C) :
				    -ENOMEM;
		if (ret < 0) {
			ret = locus_error_set(err, -ret, "sub-centroids: %s", locus_strerror(ret));
			goto err_free;
		}
	}
	ret = write_table(o, p->L, p->E, n, p->mask, p->M, p->idf, C > K ? sub : p->cen,
			  C > K ? slot : NULL, C, res, err);
	if (ret < 0)
		goto err_free;
	free(slot);
	free(sub);
	return 0;

err_free:
	free(slot);
	free(sub);
	locus_eldrfit_result_free(res);
	return ret;
}

int locus_eldrfit_arrays(const uint16_t *prefill, const uint16_t *decode, uint32_t n,
			 uint16_t L, uint16_t E, const uint16_t *score_pre,
			 const uint16_t *score_target, uint32_t n_score,
			 enum locus_eldrfit_score_kind kind, const struct locus_eldrfit_opts *o,
			 struct locus_eldrfit_result *res, struct locus_error *err)
{
	struct eldr_prep p = { 0 };
	int ret;

	memset(res, 0, sizeof(*res));
	ret = eldr_prep_arrays(prefill, decode, n, L, E, score_pre, score_target, n_score, kind,
			       o, &p, err);
	if (ret < 0)
		return ret;
	ret = eldr_prep_fit(&p, o, res, err);
	eldr_prep_free(&p);
	return ret;
}

/* Evenly spaced pick of at most max of the m candidates in cand. */
static uint32_t sample_even(uint32_t *cand, uint32_t m, uint32_t max)
{
	if (m <= max)
		return m;
	for (uint32_t i = 0; i < max; i++)
		cand[i] = cand[(uint64_t)i * m / max];
	return max;
}

int eldr_prep_trace(const struct locus_trace *t, const struct locus_eldrfit_opts *o,
		    struct eldr_prep *p, struct locus_error *err)
{
	const uint16_t L = t ? t->n_layers : 0, E = t ? t->n_experts : 0, k = t ? t->k : 0;
	const size_t LE = (size_t)L * E;
	enum locus_eldrfit_score_kind kind = LOCUS_ELDRFIT_SCORE_DECODE;
	uint16_t *pre = NULL, *spre = NULL, *stgt = NULL, *dec = NULL;
	uint32_t *cand = NULL, m = 0, S = 0, n;
	int ret;

	memset(p, 0, sizeof(*p));
	if (!t || !t->n_requests)
		return locus_error_set(err, LOCUS_EPARSE, "empty trace");
	n = t->n_requests;
	ret = check_opts(o, n, L, E, err);
	if (ret < 0)
		return ret;
	pre = calloc((size_t)n * LE, sizeof(*pre));
	cand = malloc(sizeof(*cand) * n);
	if (!pre || !cand) {
		ret = locus_error_set(err, ENOMEM, "out of memory (%u x %zu counts)", n, LE);
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		ret = locus_eldr_counts_add(pre + (size_t)i * LE, L, E, k, t->reqs[i].prompt,
					    t->reqs[i].prompt_len, err);
		if (ret < 0)
			goto out;
		if (t->reqs[i].gen_len)
			cand[m++] = i;
	}
	if (!m) {
		kind = LOCUS_ELDRFIT_SCORE_SPLIT_HALF;
		for (uint32_t i = 0; i < n; i++)
			if (t->reqs[i].prompt_len >= 2)
				cand[m++] = i;
	}
	if (kind == LOCUS_ELDRFIT_SCORE_DECODE && o->decode_weight > 0) {
		/* every request's decode counts, for the decode-aware clustering */
		dec = calloc((size_t)n * LE, sizeof(*dec));
		if (!dec) {
			ret = locus_error_set(err, ENOMEM, "out of memory (%u x %zu decode counts)",
					      n, LE);
			goto out;
		}
		for (uint32_t i = 0; i < n; i++) {
			ret = locus_eldr_counts_add(dec + (size_t)i * LE, L, E, k, t->reqs[i].gen,
						    t->reqs[i].gen_len, err);
			if (ret < 0)
				goto out;
		}
	}
	S = sample_even(cand, m, o->mask_sample ? o->mask_sample : DEF_MASK_SAMPLE);
	if (!o->no_mask && S >= 2) {
		spre = calloc((size_t)S * LE, sizeof(*spre));
		stgt = calloc((size_t)S * LE, sizeof(*stgt));
		if (!spre || !stgt) {
			ret = locus_error_set(err, ENOMEM, "out of memory");
			goto out;
		}
		for (uint32_t s = 0; s < S; s++) {
			const struct locus_trace_req *r = &t->reqs[cand[s]];

			if (kind == LOCUS_ELDRFIT_SCORE_DECODE) {
				memcpy(spre + (size_t)s * LE, pre + (size_t)cand[s] * LE,
				       sizeof(*spre) * LE);
				ret = locus_eldr_counts_add(stgt + (size_t)s * LE, L, E, k, r->gen,
							    r->gen_len, err);
			} else {
				uint32_t h = r->prompt_len / 2;

				ret = locus_eldr_counts_add(spre + (size_t)s * LE, L, E, k,
							    r->prompt,
							    h, err);
				if (ret >= 0)
					ret = locus_eldr_counts_add(stgt + (size_t)s * LE, L, E, k,
								    locus_trace_tok(t, r->prompt, h,
										    0),
								    r->prompt_len - h, err);
			}
			if (ret < 0)
				goto out;
		}
	}
	ret = eldr_prep_arrays(pre, dec, n, L, E, spre, stgt, spre ? S : 0, kind, o, p, err);
	if (ret == 0) {
		p->own_pre = pre;
		p->own_dec = dec;
		pre = NULL;
		dec = NULL;
	}
out:
	free(dec);
	free(stgt);
	free(spre);
	free(cand);
	free(pre);
	return ret;
}

int locus_eldrfit_trace(const struct locus_trace *t, const struct locus_eldrfit_opts *o,
			struct locus_eldrfit_result *res, struct locus_error *err)
{
	struct eldr_prep p = { 0 };
	int ret;

	memset(res, 0, sizeof(*res));
	ret = eldr_prep_trace(t, o, &p, err);
	if (ret < 0)
		return ret;
	ret = eldr_prep_fit(&p, o, res, err);
	eldr_prep_free(&p);
	return ret;
}
