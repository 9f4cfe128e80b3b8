// SPDX-License-Identifier: MIT
#include "fuzz.h"
#include "fuzz_trace_common.h"

void ftc_check_shape(const struct locus_trace *t)
{
	FUZZ_CHECK(t->n_requests >= 1 && t->n_layers >= 1 &&
		   t->n_layers <= LOCUS_TRACE_MAX_LAYERS && t->k >= 1 &&
		   t->k <= LOCUS_TRACE_MAX_K && t->n_experts >= 1 && t->n_domains >= 1,
		   "shape %u requests L=%u k=%u E=%u", t->n_requests, t->n_layers, t->k,
		   t->n_experts);
	FUZZ_CHECK(t->domains[0][0] == 0, "domain 0 is not the unlabelled one");
	for (uint32_t i = 0; i < t->n_domains; i++)
		FUZZ_CHECK(memchr(t->domains[i], 0, LOCUS_TRACE_DOMAIN_MAX), "domain %u", i);
	for (uint32_t i = 0; i < t->n_requests; i++) {
		const struct locus_trace_req *r = &t->reqs[i];
		size_t per = (size_t)t->n_layers * t->k;

		FUZZ_CHECK(memchr(r->id, 0, sizeof(r->id)), "request %u id not terminated", i);
		FUZZ_CHECK(r->domain < t->n_domains, "request %u domain %u", i, r->domain);
		FUZZ_CHECK(r->prompt_len >= 1 && r->prompt, "request %u without prompt tokens", i);
		FUZZ_CHECK(!r->gen_len == !r->gen, "request %u gen %u tokens at %p", i, r->gen_len,
			   (const void *)r->gen);
		for (size_t x = 0; x < per * r->prompt_len; x++)
			FUZZ_CHECK(r->prompt[x] < t->n_experts, "request %u id %u >= E=%u", i,
				   r->prompt[x], t->n_experts);
		for (size_t x = 0; x < per * r->gen_len; x++)
			FUZZ_CHECK(r->gen[x] < t->n_experts, "request %u gen id >= E", i);
	}
}

int ftc_same(const struct locus_trace *a, const struct locus_trace *b)
{
	size_t per = (size_t)a->n_layers * a->k;

	if (a->n_requests != b->n_requests || a->n_layers != b->n_layers || a->k != b->k ||
	    a->n_experts != b->n_experts || a->n_domains != b->n_domains)
		return 0;
	for (uint32_t i = 0; i < a->n_domains; i++)
		if (strcmp(a->domains[i], b->domains[i]))
			return 0;
	for (uint32_t i = 0; i < a->n_requests; i++) {
		const struct locus_trace_req *x = &a->reqs[i], *y = &b->reqs[i];

		if (strcmp(x->id, y->id) || x->domain != y->domain ||
		    x->prompt_len != y->prompt_len || x->gen_len != y->gen_len ||
		    memcmp(x->prompt, y->prompt, per * x->prompt_len * 2) ||
		    (x->gen_len && memcmp(x->gen, y->gen, per * x->gen_len * 2)))
			return 0;
	}
	return 1;
}
