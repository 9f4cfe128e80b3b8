// SPDX-License-Identifier: MIT
/*
 * DeepSeek's EPLB (github.com/deepseek-ai/EPLB, eplb.py, rebalance_experts;
 * vLLM's copy: vllm/distributed/eplb/policy/default.py), written from the
 * description of its steps, and vLLM's choice of a replica per (token,
 * expert). What users of vLLM and SGLang run today; locus's figures score
 * GRACE against it.
 *
 * Arithmetic is in double on loads rounded to float first, as vLLM's numpy
 * copy does (weight.float(), then float64 divisions and pack sums); EPLB's
 * torch original sums in float32, which differs only where two sums tie to
 * within a float's rounding. Sorts are stable (ties to the lower index);
 * numpy's and torch's sorts are not guaranteed stable, so exact ties between
 * different experts may be ordered otherwise there.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_gracefit.h"

struct idx_w {
	uint32_t i;
	double w;
};

static int by_weight_desc(const void *a, const void *b)
{
	const struct idx_w *x = a, *y = b;

	if (x->w != y->w)
		return x->w < y->w ? 1 : -1;
	return x->i < y->i ? -1 : (x->i > y->i);
}

/*
 * EPLB's balanced_packing: n items into m packs of exactly n/m items each,
 * heaviest item first into the lightest pack that still has room (the
 * first such pack on a tie). With one item per pack, item i goes to pack i
 * unsorted, as EPLB does. pack[i] and rank[i] (position inside the pack,
 * in order of arrival). sc is scratch of n entries.
 */
static void balanced_packing(const double *w, uint32_t n, uint32_t m, uint32_t *pack,
			     uint32_t *rank, struct idx_w *sc, double *pack_w, uint32_t *items)
{
	uint32_t per = n / m;

	if (per == 1) {
		for (uint32_t i = 0; i < n; i++) {
			pack[i] = i;
			rank[i] = 0;
		}
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		sc[i] = (struct idx_w){ .i = i, .w = w[i] };
	qsort(sc, n, sizeof(*sc), by_weight_desc);
	memset(pack_w, 0, m * sizeof(*pack_w));
	memset(items, 0, m * sizeof(*items));
	for (uint32_t k = 0; k < n; k++) {
		uint32_t best = m;

		for (uint32_t p = 0; p < m; p++)
			if (items[p] < per && (best == m || pack_w[p] < pack_w[best]))
				best = p;
		pack[sc[k].i] = best;
		rank[sc[k].i] = items[best]++;
		pack_w[best] += sc[k].w;
	}
}

/*
 * EPLB's replicate_experts: n_log experts to n_phy physical slots. Slot i <
 * n_log is expert i; each further slot goes to the expert with the highest
 * load per copy (the first on a tie). phy2log[n_phy], rank[n_phy] (which
 * copy of its expert the slot is, 0 for the original), cnt[n_log].
 */
static void replicate_experts(const double *w, uint32_t n_log, uint32_t n_phy,
			      uint32_t *phy2log, uint32_t *rank, uint32_t *cnt)
{
	for (uint32_t i = 0; i < n_log; i++) {
		phy2log[i] = i;
		rank[i] = 0;
		cnt[i] = 1;
	}
	for (uint32_t i = n_log; i < n_phy; i++) {
		uint32_t best = 0;

		for (uint32_t e = 1; e < n_log; e++)
			if (w[e] / cnt[e] > w[best] / cnt[best])
				best = e;
		phy2log[i] = best;
		rank[i] = cnt[best]++;
	}
}

struct scratch {
	double *gw, *mw, *pw, *pack_w;
	uint32_t *gpack, *grank, *log2mlog, *mlog2log, *p2m, *prank, *mcnt, *pack, *prk,
		 *pphy2phy, *items;
	struct idx_w *sc;
};

static void scratch_free(struct scratch *s)
{
	free(s->gw);
	free(s->mw);
	free(s->pw);
	free(s->pack_w);
	free(s->gpack);
	free(s->grank);
	free(s->log2mlog);
	free(s->mlog2log);
	free(s->p2m);
	free(s->prank);
	free(s->mcnt);
	free(s->pack);
	free(s->prk);
	free(s->pphy2phy);
	free(s->items);
	free(s->sc);
}

static int scratch_alloc(struct scratch *s, uint32_t E, uint32_t P, uint32_t G, uint32_t gpus)
{
	uint32_t n = LOCUS_MAX(LOCUS_MAX(E, P), LOCUS_MAX(G, gpus));

	memset(s, 0, sizeof(*s));
	s->gw = calloc(G, sizeof(double));
	s->mw = calloc(E, sizeof(double));
	s->pw = calloc(P, sizeof(double));
	s->pack_w = calloc(n, sizeof(double));
	s->gpack = calloc(G, sizeof(uint32_t));
	s->grank = calloc(G, sizeof(uint32_t));
	s->log2mlog = calloc(E, sizeof(uint32_t));
	s->mlog2log = calloc(E, sizeof(uint32_t));
	s->p2m = calloc(P, sizeof(uint32_t));
	s->prank = calloc(P, sizeof(uint32_t));
	s->mcnt = calloc(E, sizeof(uint32_t));
	s->pack = calloc(P, sizeof(uint32_t));
	s->prk = calloc(P, sizeof(uint32_t));
	s->pphy2phy = calloc(P, sizeof(uint32_t));
	s->items = calloc(n, sizeof(uint32_t));
	s->sc = calloc(n, sizeof(struct idx_w));
	if (!s->gw || !s->mw || !s->pw || !s->pack_w || !s->gpack || !s->grank ||
	    !s->log2mlog || !s->mlog2log || !s->p2m || !s->prank || !s->mcnt || !s->pack ||
	    !s->prk || !s->pphy2phy || !s->items || !s->sc) {
		scratch_free(s);
		return -ENOMEM;
	}
	return 0;
}

/*
 * EPLB's rebalance_experts_hierarchical for one layer w[E]: groups of
 * E/G consecutive experts packed onto M nodes by group load; inside each
 * node its experts replicated onto its P/M slots; the node's slots packed
 * onto its GPUs by load per copy. Writes phy2log[P] and rank[P].
 */
static void hierarchical_layer(const double *w, uint32_t E, uint32_t P, uint32_t G,
			       uint32_t M, uint32_t gpus, int32_t *phy2log, uint32_t *rank,
			       struct scratch *s)
{
	uint32_t gs = E / G, gpn = G / M, epn = E / M, ppn = P / M, ppg = P / gpus;
	uint32_t gpm = gpus / M;

	/* step 1: groups to nodes; a node's experts get consecutive "mlog" ids */
	for (uint32_t g = 0; g < G; g++) {
		s->gw[g] = 0;
		for (uint32_t i = 0; i < gs; i++)
			s->gw[g] += w[g * gs + i];
	}
	balanced_packing(s->gw, G, M, s->gpack, s->grank, s->sc, s->pack_w, s->items);
	for (uint32_t g = 0; g < G; g++)
		for (uint32_t i = 0; i < gs; i++) {
			uint32_t m = (s->gpack[g] * gpn + s->grank[g]) * gs + i;

			s->log2mlog[g * gs + i] = m;
			s->mlog2log[m] = g * gs + i;
		}
	for (uint32_t node = 0; node < M; node++) {
		double *mw = s->mw + (size_t)node * epn;
		uint32_t *p2m = s->p2m + (size_t)node * ppn, *prank = s->prank + (size_t)node * ppn;
		uint32_t *mcnt = s->mcnt + (size_t)node * epn;

		for (uint32_t j = 0; j < epn; j++)
			mw[j] = w[s->mlog2log[node * epn + j]];
		/* step 2: redundant experts inside the node */
		replicate_experts(mw, epn, ppn, p2m, prank, mcnt);
		/* step 3: the node's physical experts onto its GPUs */
		for (uint32_t q = 0; q < ppn; q++)
			s->pw[q] = mw[p2m[q]] / mcnt[p2m[q]];
		balanced_packing(s->pw, ppn, gpm, s->pack, s->prk, s->sc, s->pack_w, s->items);
		for (uint32_t q = 0; q < ppn; q++)
			s->pphy2phy[s->pack[q] * ppg + s->prk[q]] = q;
		for (uint32_t slot = 0; slot < ppn; slot++) {
			uint32_t q = s->pphy2phy[slot];

			phy2log[node * ppn + slot] = (int32_t)s->mlog2log[node * epn + p2m[q]];
			rank[node * ppn + slot] = prank[q];
		}
	}
}

void locus_gracefit_eplb_free(struct locus_gracefit_eplb *p)
{
	if (!p)
		return;
	free(p->phy2log);
	free(p->log2phy);
	free(p->logcnt);
	free(p->vllm_log2phy);
	memset(p, 0, sizeof(*p));
}

static int check_args(const double *W, uint32_t L, uint32_t E, uint32_t P, uint32_t G,
		      uint32_t M, uint32_t gpus, struct locus_error *err)
{
	if (!W || !L || !E || !G || !M || !gpus)
		return locus_error_set(err, EINVAL, "EPLB: no loads, or a zero dimension");
	if (E > LOCUS_GRACE_MAX_EXPERTS || P > 64u * LOCUS_GRACE_MAX_EXPERTS ||
	    gpus > LOCUS_GRACE_MAX_RANKS || L > LOCUS_GRACE_MAX_LAYERS)
		return locus_error_set(err, LOCUS_ERANGE, "EPLB: %u layers, %u experts, %u slots, "
				       "%u GPUs exceed the limits", L, E, P, gpus);
	if (P < E)
		return locus_error_set(err, LOCUS_ERANGE, "EPLB: %u physical slots for %u experts",
				       P, E);
	if (P % gpus)
		return locus_error_set(err, LOCUS_ERANGE, "EPLB: %u physical slots do not divide "
				       "over %u GPUs", P, gpus);
	if (gpus % M)
		return locus_error_set(err, LOCUS_ERANGE, "EPLB: %u GPUs do not divide over %u "
				       "nodes", gpus, M);
	if (E % G)
		return locus_error_set(err, LOCUS_ERANGE, "EPLB: %u experts do not divide into "
				       "%u groups", E, G);
	for (size_t i = 0; i < (size_t)L * E; i++)
		if (!isfinite(W[i]) || W[i] < 0)
			return locus_error_set(err, LOCUS_ERANGE, "EPLB: load of layer %zu expert "
					       "%zu is %g", i / E, i % E, W[i]);
	return 0;
}

/* log2phy in EPLB's order (by copy rank) and vLLM's (ascending slot). */
static int fill_maps(struct locus_gracefit_eplb *p, const uint32_t *rank)
{
	uint32_t L = p->n_layers, E = p->n_experts, P = p->n_phys, X = 0;

	for (size_t i = 0; i < (size_t)L * E; i++)
		X = LOCUS_MAX(X, (uint32_t)p->logcnt[i]);
	p->max_copies = X;
	p->log2phy = malloc((size_t)L * E * X * sizeof(int32_t));
	p->vllm_log2phy = malloc((size_t)L * E * X * sizeof(int32_t));
	if (!p->log2phy || !p->vllm_log2phy)
		return -ENOMEM;
	for (size_t i = 0; i < (size_t)L * E * X; i++)
		p->log2phy[i] = p->vllm_log2phy[i] = -1;
	for (uint32_t l = 0; l < L; l++) {
		uint32_t n[LOCUS_GRACE_MAX_EXPERTS] = { 0 };

		for (uint32_t s = 0; s < P; s++) {
			size_t le = (size_t)l * E + (uint32_t)p->phy2log[(size_t)l * P + s];

			p->log2phy[le * X + rank[(size_t)l * P + s]] = (int32_t)s;
			p->vllm_log2phy[le * X + n[le - (size_t)l * E]++] = (int32_t)s;
		}
	}
	return 0;
}

int locus_gracefit_eplb_rebalance(const double *W, uint32_t n_layers, uint32_t n_experts,
				  uint32_t n_phys, uint32_t n_groups, uint32_t n_nodes,
				  uint32_t n_gpus, struct locus_gracefit_eplb *out,
				  struct locus_error *err)
{
	struct locus_gracefit_eplb p = { 0 };
	uint32_t L = n_layers, E = n_experts, P = n_phys, G = n_groups, M = n_nodes;
	struct scratch s;
	uint32_t *rank = NULL;
	double *w = NULL;
	int rc;

	if (!out)
		return locus_error_set(err, EINVAL, "EPLB: no output");
	rc = check_args(W, L, E, P, G, M, n_gpus, err);
	if (rc)
		return rc;
	p.n_layers = L;
	p.n_experts = E;
	p.n_phys = P;
	p.n_gpus = n_gpus;
	/* EPLB's rule: hierarchical when the nodes divide the groups, else global */
	p.hierarchical = G % M == 0;
	if (!p.hierarchical) {
		G = 1;
		M = 1;
	}
	if (scratch_alloc(&s, E, P, G, n_gpus))
		return locus_error_set(err, ENOMEM, "EPLB: out of memory");
	p.phy2log = malloc((size_t)L * P * sizeof(int32_t));
	p.logcnt = malloc((size_t)L * E * sizeof(int32_t));
	rank = malloc((size_t)L * P * sizeof(uint32_t));
	w = malloc(E * sizeof(double));
	if (!p.phy2log || !p.logcnt || !rank || !w) {
		rc = locus_error_set(err, ENOMEM, "EPLB: out of memory");
		goto err_free;
	}
	for (uint32_t l = 0; l < L; l++) {
		for (uint32_t e = 0; e < E; e++)
			w[e] = (float)W[(size_t)l * E + e];
		hierarchical_layer(w, E, P, G, M, n_gpus, p.phy2log + (size_t)l * P,
				   rank + (size_t)l * P, &s);
		for (uint32_t e = 0; e < E; e++)
			p.logcnt[(size_t)l * E + e] = (int32_t)s.mcnt[s.log2mlog[e]];
	}
	if (fill_maps(&p, rank)) {
		rc = locus_error_set(err, ENOMEM, "EPLB: out of memory");
		goto err_free;
	}
	*out = p;
	free(w);
	free(rank);
	scratch_free(&s);
	return 0;
err_free:
	free(w);
	free(rank);
	scratch_free(&s);
	locus_gracefit_eplb_free(&p);
	return rc;
}

void locus_gracefit_eplb_dispatch(const struct locus_gracefit_eplb *p, uint32_t layer,
				  const uint16_t *ids, uint32_t n_tokens, uint32_t k,
				  uint16_t *gpu)
{
	uint32_t E = p->n_experts, X = p->max_copies, S = p->n_phys / p->n_gpus;

	for (size_t pos = 0; pos < (size_t)n_tokens * k; pos++) {
		size_t le = (size_t)layer * E + ids[pos];
		uint32_t idx = (uint32_t)(pos % (uint32_t)p->logcnt[le]);

		gpu[pos] = (uint16_t)((uint32_t)p->vllm_log2phy[le * X + idx] / S);
	}
}
