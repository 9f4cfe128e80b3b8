// SPDX-License-Identifier: MIT
/*
 * The replays locus_eldrfit_tune() scores its choices with: the requests
 * routed by the data plane's router (the code locusd runs) in eldr_quality's
 * rounds (control/eldr_quality_sim.c), ELDR policy only; and the same rounds
 * under eldr_quality's domain oracle, the tuning's load reference when the
 * calibration requests are labelled.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "eldr_quality.h"
#include "eldr_replay.h"
#include "locus_err_priv.h"
#include "locusctl.h"

/* Both declarations of each replay (control/ and tools/) are one type. */
_Static_assert(__builtin_types_compatible_p(__typeof__(&eldr_replay_router),
					    locus_eldrfit_replay_fn),
	       "eldr_replay_router is a locus_eldrfit_replay_fn");
_Static_assert(__builtin_types_compatible_p(__typeof__(&eldr_replay_domain),
					    locus_eldrfit_oracle_fn),
	       "eldr_replay_domain is a locus_eldrfit_oracle_fn");

struct eldr_replay_cache {
	const struct locus_trace *t; /* what the rest holds; NULL: nothing yet */
	size_t slen;
	uint8_t *sigs;               /* [n_requests][slen] prompt signatures */
	uint8_t *built;              /* [n_requests]: sigs[i] is built */
	struct qsteps steps;
};

int eldr_replay_cache_new(struct eldr_replay_cache **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

static void cache_clear(struct eldr_replay_cache *c)
{
	qsteps_free(&c->steps);
	free(c->built);
	free(c->sigs);
	memset(c, 0, sizeof(*c));
}

void eldr_replay_cache_free(struct eldr_replay_cache *c)
{
	if (!c)
		return;
	cache_clear(c);
	free(c);
}

/* c holding t: the decode bitsets, room for every signature; 0 or -ENOMEM. */
static int cache_for(struct eldr_replay_cache *c, const struct locus_trace *t, int want_sigs)
{
	int ret;

	if (c->t != t) {
		cache_clear(c);
		ret = qsteps_build(&c->steps, t);
		if (ret < 0)
			return ret;
		c->slen = locus_eldr_sig_len(t->n_layers, t->n_experts);
		c->t = t;
	}
	if (want_sigs && !c->sigs) {
		c->sigs = malloc(c->slen * t->n_requests);
		c->built = calloc(t->n_requests, 1);
		if (!c->sigs || !c->built) {
			cache_clear(c);
			return -ENOMEM;
		}
	}
	return 0;
}

/* The prompt signatures of idx[n] in c (built once per request). */
static int cache_sigs(struct eldr_replay_cache *c, const uint32_t *idx, uint32_t n,
		      struct locus_error *err)
{
	const struct locus_trace *t = c->t;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t q = idx[i];
		long sl;

		if (c->built[q])
			continue;
		sl = locus_eldr_sig_build(c->sigs + c->slen * q, c->slen, t->n_layers,
					  t->n_experts, t->k, t->reqs[q].prompt,
					  t->reqs[q].prompt_len, 0, err);
		if (sl < 0)
			return (int)sl;
		c->built[q] = 1;
	}
	return 0;
}

/*
 * Policy p of s (s->K, s->r set) over requests idx[n] of t in `orders`
 * arrival orders drawn from seed (the same orders for every policy and
 * table): the mean pairs per step (capped) and load (no cap). cache: the
 * caller's, or NULL (one for this call).
 */
static int replay_orders(struct eldr_replay_cache *cache, struct qsim *s, int p,
			 const struct locus_trace *t, const uint32_t *idx, uint32_t n, uint32_t B,
			 uint32_t orders, uint64_t seed, double *pairs, double *load,
			 struct locus_error *err)
{
	struct eldr_replay_cache *own = NULL;
	uint32_t *seq = malloc(sizeof(*seq) * (n ? n : 1));
	uint64_t rng = seed;
	struct qfig f;
	int ret;

	s->t = t;
	s->B = B;
	s->only = 1u << p;
	s->seen = calloc((size_t)t->n_layers * t->n_experts, sizeof(*s->seen));
	s->batch = malloc(sizeof(*s->batch) * s->K * B);
	s->fill = calloc(s->K, sizeof(*s->fill));
	s->total = calloc((size_t)QPOL_N * s->K, sizeof(*s->total));
	if (!cache && eldr_replay_cache_new(&own) == 0)
		cache = own;
	if (!seq || !cache || !s->seen || !s->batch || !s->fill || !s->total ||
	    cache_for(cache, t, p != QPOL_DOMAIN) < 0) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto out;
	}
	s->steps = &cache->steps;
	s->slen = cache->slen;
	s->sigs = p == QPOL_DOMAIN ? NULL : cache->sigs;
	if (p != QPOL_DOMAIN) {
		ret = cache_sigs(cache, idx, n, err);
		if (ret < 0)
			goto out;
	}
	for (uint32_t o = 0; o < orders; o++) {
		memcpy(seq, idx, sizeof(*seq) * n);
		for (uint32_t i = n - 1; n > 1 && i > 0; i--) {
			uint32_t j = (uint32_t)(locus_splitmix64(&rng) % (i + 1)), x = seq[i];

			seq[i] = seq[j];
			seq[j] = x;
		}
		if (qsim_run(s, seq, n, 0, &f) <= 0) {
			ret = locus_error_set(err, LOCUS_ERANGE,
					      "replay: %u requests are not one round of %u, or the "
					      "router refused a signature", n, s->K * B);
			goto out;
		}
		*pairs += f.step[p] / orders;
		*load += f.load[p] / orders;
	}
	ret = 0;
out:
	eldr_replay_cache_free(own);
	free(s->total);
	free(s->fill);
	free(s->batch);
	free(s->seen);
	free(seq);
	return ret;
}

int eldr_replay_router(void *arg, const struct locus_trace *t, const void *payload, size_t len,
		       const uint32_t *idx, uint32_t n, uint32_t B, uint32_t orders,
		       uint64_t seed, double *pairs, double *load, struct locus_error *err)
{
	struct qsim s = { 0 };
	size_t msz = locus_eldr_router_mem_size(payload, len);
	void *mem = NULL;
	int ret;

	*pairs = 0;
	*load = 0;
	mem = msz ? aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64)) : NULL;
	if (!mem)
		return locus_error_set(err, msz ? ENOMEM : EINVAL,
				       msz ? "out of memory" : "replay: invalid table shape");
	ret = locus_eldr_router_build(mem, msz, payload, len, LOCUS_ELDR_PATH_AUTO,
				      &s.r[QPOL_ELDR], err);
	if (ret == 0) {
		s.K = locus_eldr_router_n_decoders(s.r[QPOL_ELDR]);
		ret = replay_orders(arg, &s, QPOL_ELDR, t, idx, n, B, orders, seed, pairs, load, err);
	}
	free(mem);
	return ret;
}

int eldr_replay_domain(void *arg, const struct locus_trace *t, uint32_t K, const uint32_t *idx,
		       uint32_t n, uint32_t B, uint32_t orders, uint64_t seed, double *pairs,
		       double *load, struct locus_error *err)
{
	struct qsim s = { .K = K };

	*pairs = 0;
	*load = 0;
	if (!K)
		return locus_error_set(err, EINVAL, "replay: no decoders");
	return replay_orders(arg, &s, QPOL_DOMAIN, t, idx, n, B, orders, seed, pairs, load, err);
}
