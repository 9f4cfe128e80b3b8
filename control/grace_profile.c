// SPDX-License-Identifier: MIT
/* GRACE profiling: per-layer loads W and co-activation A. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_gracefit.h"
#include "locus_trace.h"

int locus_gracefit_profile_init(struct locus_gracefit_profile *p, uint32_t n_layers,
				uint32_t n_experts, int with_affinity, struct locus_error *err)
{
	size_t le;

	if (!p)
		return locus_error_set(err, EINVAL, "no profile");
	memset(p, 0, sizeof(*p));
	if (n_layers == 0 || n_layers > LOCUS_GRACE_MAX_LAYERS || n_experts == 0 ||
	    n_experts > LOCUS_GRACE_MAX_EXPERTS)
		return locus_error_set(err, LOCUS_ERANGE, "profile of %u layers x %u experts "
				       "is out of range", n_layers, n_experts);
	le = (size_t)n_layers * n_experts;
	p->W = calloc(le, sizeof(double));
	if (!p->W)
		goto err_nomem;
	if (with_affinity) {
		p->A = calloc(le * n_experts, sizeof(double));
		if (!p->A)
			goto err_free_w;
	}
	p->n_layers = n_layers;
	p->n_experts = n_experts;
	return 0;

err_free_w:
	free(p->W);
	p->W = NULL;
err_nomem:
	return locus_error_set(err, ENOMEM, "profile of %u layers x %u experts: out of memory",
			       n_layers, n_experts);
}

void locus_gracefit_profile_free(struct locus_gracefit_profile *p)
{
	if (!p)
		return;
	free(p->W);
	free(p->A);
	free(p->tok);
	free(p->tok_n);
	p->W = NULL;
	p->A = NULL;
	p->tok = NULL;
	p->tok_n = NULL;
}

static int check_ids(const struct locus_gracefit_profile *p, const uint16_t *ids,
		     size_t n_tokens, uint32_t k, struct locus_error *err)
{
	for (size_t t = 0; t < n_tokens; t++) {
		const uint16_t *x = ids + t * k;

		for (uint32_t j = 0; j < k; j++) {
			if (x[j] >= p->n_experts)
				return locus_error_set(err, LOCUS_ERANGE,
						       "token %zu slot %u: expert id %u >= E=%u",
						       t, j, x[j], p->n_experts);
			for (uint32_t q = 0; q < j; q++)
				if (x[q] == x[j])
					return locus_error_set(err, LOCUS_ERANGE,
							       "token %zu chose expert %u "
							       "twice", t, x[j]);
		}
	}
	return 0;
}

int locus_gracefit_profile_add(struct locus_gracefit_profile *p, uint32_t layer,
			       const uint16_t *ids, size_t n_tokens, uint32_t k,
			       struct locus_error *err)
{
	uint32_t E;
	double *W, *A;
	int rc;

	if (!p || !p->W || (!ids && n_tokens))
		return locus_error_set(err, EINVAL, "no profile or ids");
	if (layer >= p->n_layers)
		return locus_error_set(err, LOCUS_ERANGE, "layer %u >= %u", layer, p->n_layers);
	if (k == 0 || k > LOCUS_GRACE_MAX_TOPK || k > p->n_experts)
		return locus_error_set(err, LOCUS_ERANGE, "top-k %u out of range", k);
	rc = check_ids(p, ids, n_tokens, k, err);
	if (rc)
		return rc;
	E = p->n_experts;
	W = p->W + (size_t)layer * E;
	A = p->A ? p->A + (size_t)layer * E * E : NULL;
	for (size_t t = 0; t < n_tokens; t++) {
		const uint16_t *x = ids + t * k;

		for (uint32_t j = 0; j < k; j++) {
			W[x[j]] += 1;
			if (!A)
				continue;
			for (uint32_t q = 0; q < j; q++) {
				A[(size_t)x[j] * E + x[q]] += 1;
				A[(size_t)x[q] * E + x[j]] += 1;
			}
		}
	}
	if (p->tok && k == p->tok_k) {
		uint64_t room = p->tok_cap - p->tok_n[layer];
		size_t n = n_tokens < room ? n_tokens : (size_t)room;

		memcpy(p->tok + ((size_t)layer * p->tok_cap + p->tok_n[layer]) * k, ids,
		       n * k * sizeof(uint16_t));
		p->tok_n[layer] += n;
	}
	p->n_tokens += n_tokens;
	return 0;
}

int locus_gracefit_profile_add_trace(struct locus_gracefit_profile *p,
				     const struct locus_trace *t, int use_gen,
				     struct locus_error *err)
{
	int rc;

	if (!p || !t)
		return locus_error_set(err, EINVAL, "no profile or trace");
	if (t->n_layers != p->n_layers || t->n_experts > p->n_experts)
		return locus_error_set(err, LOCUS_ERANGE,
				       "trace has %u layers x %u experts, profile %u x %u",
				       t->n_layers, t->n_experts, p->n_layers, p->n_experts);
	for (uint32_t r = 0; r < t->n_requests; r++) {
		const struct locus_trace_req *q = &t->reqs[r];

		for (int phase = 0; phase < 1 + !!use_gen; phase++) {
			const uint16_t *base = phase ? q->gen : q->prompt;
			uint32_t n = phase ? q->gen_len : q->prompt_len;

			for (uint32_t tok = 0; tok < n; tok++) {
				for (uint32_t l = 0; l < t->n_layers; l++) {
					rc = locus_gracefit_profile_add(
						p, l, locus_trace_tok(t, base, tok, l), 1, t->k,
						err);
					if (rc)
						return rc;
				}
			}
		}
	}
	return 0;
}

int locus_gracefit_profile_add_request(struct locus_gracefit_profile *p,
				       const struct locus_trace *t, uint32_t r,
				       struct locus_error *err)
{
	const struct locus_trace_req *q;
	const uint16_t *base;
	uint32_t n;
	int rc;

	if (!p || !t || r >= t->n_requests)
		return locus_error_set(err, EINVAL, "no profile, trace or request %u", r);
	if (t->n_layers != p->n_layers || t->n_experts > p->n_experts)
		return locus_error_set(err, LOCUS_ERANGE,
				       "trace has %u layers x %u experts, profile %u x %u",
				       t->n_layers, t->n_experts, p->n_layers, p->n_experts);
	q = &t->reqs[r];
	base = q->gen_len ? q->gen : q->prompt;
	n = q->gen_len ? q->gen_len : q->prompt_len;
	for (uint32_t tok = 0; tok < n; tok++)
		for (uint32_t l = 0; l < t->n_layers; l++) {
			rc = locus_gracefit_profile_add(p, l, locus_trace_tok(t, base, tok, l), 1,
							t->k, err);
			if (rc)
				return rc;
		}
	return 0;
}

int locus_gracefit_profile_add_counts(struct locus_gracefit_profile *p, const uint64_t *counts,
				      struct locus_error *err)
{
	size_t le;

	if (!p || !p->W || !counts)
		return locus_error_set(err, EINVAL, "no profile or counts");
	le = (size_t)p->n_layers * p->n_experts;
	for (size_t i = 0; i < le; i++)
		p->W[i] += (double)counts[i];
	return 0;
}

double locus_gracefit_counts_delta(const uint64_t *prev, const uint64_t *now, uint32_t n_layers,
				   uint32_t n_experts, uint32_t stride, double *W)
{
	double tot = 0;

	for (uint32_t l = 0; l < n_layers; l++)
		for (uint32_t e = 0; e < n_experts; e++) {
			size_t i = (size_t)l * stride + e;
			uint64_t d = now[i] >= prev[i] ? now[i] - prev[i] : now[i];

			W[(size_t)l * n_experts + e] = (double)d;
			tot += (double)d;
		}
	return tot;
}
