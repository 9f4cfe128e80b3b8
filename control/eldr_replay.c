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
	struct qmemo memo;           /* pairs per step of the batches replayed */
	/* the last table replayed: its router and its decoder scores of the requests */
	uint8_t *tbl;                /* its payload, routing fields cleared; NULL: none */
	size_t tbl_len;
	void *rmem;
	struct locus_eldr_router *r; /* built from it, routing fields set per replay */
	uint32_t K;
	float *scores;               /* [n_requests][K] */
	uint8_t *scored;             /* [n_requests]: scores[i] is set */
};

/* Slots of the memo: 2^20 batches (24 MiB at B = 4). */
#define MEMO_SLOTS (1u << 20)

int eldr_replay_cache_new(struct eldr_replay_cache **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

static void table_clear(struct eldr_replay_cache *c)
{
	free(c->tbl);
	free(c->rmem);
	free(c->scores);
	free(c->scored);
	c->tbl = NULL;
	c->rmem = NULL;
	c->r = NULL;
	c->scores = NULL;
	c->scored = NULL;
	c->tbl_len = 0;
	c->K = 0;
}

static void cache_clear(struct eldr_replay_cache *c)
{
	table_clear(c);
	qmemo_free(&c->memo);
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
 * The routing fields of a table header (tau, overflow rule, spill) cleared:
 * two payloads equal but for those score every signature alike.
 */
static void scoring_hdr(const void *payload, struct locus_eldr_tbl_hdr *h)
{
	memcpy(h, payload, sizeof(*h));
	h->tau = 0;
	h->flags &= ~LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD;
	h->spill_tau = 0;
	h->spill_margin = 0;
}

/* payload scores like c's table. */
static int same_table(const struct eldr_replay_cache *c, const void *payload, size_t len)
{
	struct locus_eldr_tbl_hdr h;

	if (!c->tbl || c->tbl_len != len || len < sizeof(h))
		return 0;
	scoring_hdr(payload, &h);
	return !memcmp(c->tbl, &h, sizeof(h)) &&
	       !memcmp(c->tbl + sizeof(h), (const uint8_t *)payload + sizeof(h), len - sizeof(h));
}

/*
 * c's router for payload: the one built for the last table when it scores
 * alike (its routing fields set to payload's), else built anew (the scores
 * forgotten). 0, or a negative code with err set.
 */
static int cache_table(struct eldr_replay_cache *c, const void *payload, size_t len,
		       struct locus_error *err)
{
	const struct locus_eldr_tbl_hdr *ph = payload;
	size_t msz;
	int ret;

	if (!same_table(c, payload, len)) {
		table_clear(c);
		msz = len >= sizeof(*ph) ? locus_eldr_router_mem_size(payload, len) : 0;
		if (!msz)
			return locus_error_set(err, EINVAL, "replay: invalid table shape");
		c->rmem = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
		c->tbl = malloc(len);
		if (!c->rmem || !c->tbl) {
			table_clear(c);
			return locus_error_set(err, ENOMEM, "out of memory");
		}
		ret = locus_eldr_router_build(c->rmem, msz, payload, len, LOCUS_ELDR_PATH_AUTO,
					      &c->r, err);
		if (ret < 0) {
			table_clear(c);
			return ret;
		}
		c->K = locus_eldr_router_n_decoders(c->r);
		c->scores = malloc(sizeof(*c->scores) * c->K * c->t->n_requests);
		c->scored = calloc(c->t->n_requests, 1);
		if (!c->scores || !c->scored) {
			table_clear(c);
			return locus_error_set(err, ENOMEM, "out of memory");
		}
		memcpy(c->tbl + sizeof(*ph), (const uint8_t *)payload + sizeof(*ph),
		       len - sizeof(*ph));
		scoring_hdr(payload, (struct locus_eldr_tbl_hdr *)c->tbl);
		c->tbl_len = len;
		return 0;
	}
	/* as locus_eldr_router_build() reads them from the header */
	ret = locus_eldr_router_set_band(c->r, ph->tau,
					 !!(ph->flags & LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD));
	if (ret == 0)
		ret = locus_eldr_router_set_spill(c->r, ph->spill_tau > ph->tau ? ph->spill_tau :
						  ph->tau, ph->spill_margin);
	if (ret < 0)
		return locus_error_set(err, LOCUS_ERANGE, "replay: tau %g, spill tau %g",
				       (double)ph->tau, (double)ph->spill_tau);
	return 0;
}

/* The decoder scores under c's router of idx[n], each request scored once per table. */
static int cache_scores(struct eldr_replay_cache *c, const uint32_t *idx, uint32_t n,
			struct locus_error *err)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t q = idx[i];

		if (c->scored[q])
			continue;
		if (locus_eldr_score(c->r, c->sigs + c->slen * q, c->slen,
				     c->scores + (size_t)c->K * q) < 0)
			return locus_error_set(err, LOCUS_ERANGE,
					       "replay: the router refused signature %u", q);
		c->scored[q] = 1;
	}
	return 0;
}

/*
 * Policy p of s (s->K set; ELDR: cache's router) over requests idx[n] of t
 * in `orders` arrival orders drawn from seed (the same orders for every
 * policy and table): the mean pairs per step (capped) and load (no cap).
 * cache holds t (cache_for); memo: remember batches' pairs in it.
 */
static int replay_orders(struct eldr_replay_cache *cache, int memo, struct qsim *s, int p,
			 const struct locus_trace *t, const uint32_t *idx, uint32_t n, uint32_t B,
			 uint32_t orders, uint64_t seed, double *pairs, double *load,
			 struct locus_error *err)
{
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
	if (!seq || !s->seen || !s->batch || !s->fill || !s->total) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto out;
	}
	s->steps = &cache->steps;
	s->slen = cache->slen;
	s->sigs = p == QPOL_DOMAIN ? NULL : cache->sigs;
	if (p != QPOL_DOMAIN) {
		s->r[p] = cache->r;
		ret = cache_sigs(cache, idx, n, err);
		if (ret == 0)
			ret = cache_scores(cache, idx, n, err);
		if (ret < 0)
			goto out;
		s->scores[p] = cache->scores;
	}
	if (memo && cache->memo.B != B && B <= QMEMO_MAX_BATCH) {
		qmemo_free(&cache->memo);
		if (qmemo_init(&cache->memo, B, MEMO_SLOTS) < 0) {
			ret = locus_error_set(err, ENOMEM, "out of memory");
			goto out;
		}
	}
	s->memo = memo && cache->memo.B == B ? &cache->memo : NULL;
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
	free(s->total);
	free(s->fill);
	free(s->batch);
	free(s->seen);
	free(seq);
	return ret;
}

/* The caller's cache, else *own (made for one call; no memo): holding t. */
static int use_cache(void *arg, const struct locus_trace *t, int want_sigs,
		     struct eldr_replay_cache **own, struct eldr_replay_cache **c,
		     struct locus_error *err)
{
	*own = NULL;
	*c = arg;
	if (!*c && eldr_replay_cache_new(own) == 0)
		*c = *own;
	if (!*c || cache_for(*c, t, want_sigs) < 0)
		return locus_error_set(err, ENOMEM, "out of memory");
	return 0;
}

int eldr_replay_router(void *arg, const struct locus_trace *t, const void *payload, size_t len,
		       const uint32_t *idx, uint32_t n, uint32_t B, uint32_t orders,
		       uint64_t seed, double *pairs, double *load, struct locus_error *err)
{
	struct eldr_replay_cache *own, *c;
	struct qsim s = { 0 };
	int ret;

	*pairs = 0;
	*load = 0;
	ret = use_cache(arg, t, 1, &own, &c, err);
	if (ret == 0)
		ret = cache_table(c, payload, len, err);
	if (ret == 0) {
		s.K = c->K;
		ret = replay_orders(c, !own, &s, QPOL_ELDR, t, idx, n, B, orders, seed, pairs,
				    load, err);
	}
	eldr_replay_cache_free(own);
	return ret;
}

int eldr_replay_domain(void *arg, const struct locus_trace *t, uint32_t K, const uint32_t *idx,
		       uint32_t n, uint32_t B, uint32_t orders, uint64_t seed, double *pairs,
		       double *load, struct locus_error *err)
{
	struct eldr_replay_cache *own, *c;
	struct qsim s = { .K = K };
	int ret;

	*pairs = 0;
	*load = 0;
	if (!K)
		return locus_error_set(err, EINVAL, "replay: no decoders");
	ret = use_cache(arg, t, 0, &own, &c, err);
	if (ret == 0)
		ret = replay_orders(c, !own, &s, QPOL_DOMAIN, t, idx, n, B, orders, seed, pairs,
				    load, err);
	eldr_replay_cache_free(own);
	return ret;
}
