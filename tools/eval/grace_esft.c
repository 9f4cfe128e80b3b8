// SPDX-License-Identifier: MIT
/*
 * What grace_figures and grace_bound_figures read and build the same way
 * (grace_figures.h): the memory rule, a sealed table's planner map, and an
 * ESFT domain split in halves with the profile of the first.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grace_figures.h"
#include "locus_grace_plan.h"
#include "locus_tblfile.h"
#include "locus_trace.h"

void gf_die(const char *what, const struct locus_error *err, int rc)
{
	fprintf(stderr, "%s: %s: %s (%s)\n", program_invocation_short_name, what, err ? err->msg : "",
		locus_strerror(rc));
	exit(1);
}

static uint32_t per_gpu_budget(const struct gf_topo *t, uint32_t E)
{
	uint32_t N = t->nodes * t->gpus, m = (E + N - 1) / N;

	return LOCUS_MAX(1u, m / 4);
}

struct locus_gracefit_topo gf_grace_topo(const struct gf_topo *t, uint32_t E)
{
	uint32_t N = t->nodes * t->gpus, m = (E + N - 1) / N;

	return (struct locus_gracefit_topo){ .n_nodes = t->nodes, .gpus_per_node = t->gpus,
					     .capacity = (m * 3 + 1) / 2,
					     .replica_budget = per_gpu_budget(t, E) };
}

uint32_t gf_eplb_slots(const struct gf_topo *t, uint32_t E)
{
	return E + t->nodes * t->gpus * per_gpu_budget(t, E);
}

void *gf_map(const void *blob, size_t len)
{
	struct locus_error err = { 0 };
	void *m;
	int rc = locus_grace_map_of_blob(blob, len, &m, &err);

	if (rc)
		gf_die("planner map", &err, rc);
	return m;
}

/* Token tok of request q: its prompt tokens, then its generated ones. */
static const uint16_t *req_tok(const struct locus_trace *t, const struct locus_trace_req *q,
			       uint32_t tok, uint32_t l)
{
	return tok < q->prompt_len ? locus_trace_tok(t, q->prompt, tok, l)
				   : locus_trace_tok(t, q->gen, tok - q->prompt_len, l);
}

/* Requests from, from + step, ... below to as one set, every token of each. */
static void half_set(const struct locus_trace *t, uint32_t from, uint32_t to, uint32_t step,
		     struct gh_set *s)
{
	uint32_t at = 0, i = 0;

	s->L = t->n_layers;
	s->k = t->k;
	s->n_seq = (to - from + step - 1) / step;
	s->tok0 = calloc(s->n_seq + 1, sizeof(uint32_t));
	if (!s->tok0)
		gf_die("sets", NULL, -ENOMEM);
	for (uint32_t r = from; r < to; r += step, i++)
		s->tok0[i + 1] = s->tok0[i] + t->reqs[r].prompt_len + t->reqs[r].gen_len;
	s->n_tok = s->tok0[s->n_seq];
	s->ids = malloc((size_t)s->L * s->n_tok * s->k * sizeof(uint16_t) + 1);
	if (!s->ids)
		gf_die("sets", NULL, -ENOMEM);
	for (uint32_t r = from; r < to; r += step) {
		const struct locus_trace_req *q = &t->reqs[r];

		for (uint32_t tok = 0; tok < q->prompt_len + q->gen_len; tok++, at++)
			for (uint32_t l = 0; l < s->L; l++)
				memcpy(s->ids + ((size_t)l * s->n_tok + at) * s->k,
				       req_tok(t, q, tok, l), s->k * sizeof(uint16_t));
	}
}

void gf_domain_split(struct locus_trace *t, int alternate, struct gf_domain *d)
{
	struct locus_error err = { 0 };
	uint32_t n = t->n_requests, h = n / 2, step = alternate ? 2 : 1;
	int rc;

	d->t = t;
	half_set(t, 0, alternate ? n : h, step, &d->half[0]);
	half_set(t, alternate ? 1 : h, n, step, &d->half[1]);
	rc = locus_gracefit_profile_init(&d->prof, t->n_layers, t->n_experts, 1, &err);
	if (!rc)
		rc = locus_gracefit_profile_keep_tokens(&d->prof, t->k, d->half[0].n_tok, &err);
	for (uint32_t r = 0; !rc && r < (alternate ? n : h); r += step) {
		const struct locus_trace_req *q = &t->reqs[r];

		for (uint32_t tok = 0; !rc && tok < q->prompt_len + q->gen_len; tok++)
			for (uint32_t l = 0; !rc && l < t->n_layers; l++)
				rc = locus_gracefit_profile_add(&d->prof, l, req_tok(t, q, tok, l),
								1, t->k, &err);
	}
	if (rc)
		gf_die("profile", &err, rc);
}

void gf_domain_load(const char *root, const char *dom, struct gf_domain *d)
{
	struct locus_error err = { 0 };
	struct locus_trace *t;
	char dir[4200];
	int rc;

	snprintf(dir, sizeof(dir), "%s/esft/results/expert_scores/%s", root, dom);
	rc = locus_trace_load_esft_flags(dir, dom, 26, 6, 64, LOCUS_TRACE_ESFT_GATE_ORDER, &t,
					 &err);
	if (rc)
		gf_die(dir, &err, rc);
	gf_domain_split(t, 0, d);
}

void gf_domain_free(struct gf_domain *d)
{
	for (int h = 0; h < 2; h++) {
		free(d->half[h].tok0);
		free(d->half[h].ids);
	}
	locus_gracefit_profile_free(&d->prof);
	locus_trace_free(d->t);
}

