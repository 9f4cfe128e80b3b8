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

/*
 * Policy p of s (s->K, s->r set) over requests idx[n] of t in `orders`
 * arrival orders drawn from seed (the same orders for every policy and
 * table): the mean pairs per step (capped) and load (no cap).
 */
static int replay_orders(struct qsim *s, int p, const struct locus_trace *t, const uint32_t *idx,
			 uint32_t n, uint32_t B, uint32_t orders, uint64_t seed, double *pairs,
			 double *load, struct locus_error *err)
{
	uint32_t *seq = malloc(sizeof(*seq) * (n ? n : 1));
	uint8_t *sigs = NULL;
	uint64_t rng = seed;
	struct qfig f;
	int ret;

	s->t = t;
	s->B = B;
	s->only = 1u << p;
	s->slen = locus_eldr_sig_len(t->n_layers, t->n_experts);
	sigs = p == QPOL_DOMAIN ? NULL : malloc(s->slen * t->n_requests);
	s->seen = calloc((size_t)t->n_layers * t->n_experts, sizeof(*s->seen));
	s->batch = malloc(sizeof(*s->batch) * s->K * B);
	s->fill = calloc(s->K, sizeof(*s->fill));
	s->total = calloc((size_t)QPOL_N * s->K, sizeof(*s->total));
	if (!seq || (p != QPOL_DOMAIN && !sigs) || !s->seen || !s->batch || !s->fill ||
	    !s->total) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto out;
	}
	s->sigs = sigs;
	for (uint32_t i = 0; sigs && i < n; i++) {
		long sl = locus_eldr_sig_build(sigs + s->slen * idx[i], s->slen, t->n_layers,
					       t->n_experts, t->k, t->reqs[idx[i]].prompt,
					       t->reqs[idx[i]].prompt_len, 0, err);

		if (sl < 0) {
			ret = (int)sl;
			goto out;
		}
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
	free(s->total);
	free(s->fill);
	free(s->batch);
	free(s->seen);
	free(sigs);
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

	(void)arg;
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
		ret = replay_orders(&s, QPOL_ELDR, t, idx, n, B, orders, seed, pairs, load, err);
	}
	free(mem);
	return ret;
}

int eldr_replay_domain(void *arg, const struct locus_trace *t, uint32_t K, const uint32_t *idx,
		       uint32_t n, uint32_t B, uint32_t orders, uint64_t seed, double *pairs,
		       double *load, struct locus_error *err)
{
	struct qsim s = { .K = K };

	(void)arg;
	*pairs = 0;
	*load = 0;
	if (!K)
		return locus_error_set(err, EINVAL, "replay: no decoders");
	return replay_orders(&s, QPOL_DOMAIN, t, idx, n, B, orders, seed, pairs, load, err);
}
