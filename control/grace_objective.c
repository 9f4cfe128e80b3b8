// SPDX-License-Identifier: MIT
/*
 * One objective per layer, and the packing a layer falls back to when
 * grouping does not pay for itself: EPLB's balanced packing of primaries.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_gracefit.h"

int locus_gracefit_profile_keep_tokens(struct locus_gracefit_profile *p, uint32_t k,
				       uint64_t cap, struct locus_error *err)
{
	if (!p || !p->W || k == 0 || k > LOCUS_GRACE_MAX_TOPK || cap == 0 ||
	    cap > (1ull << 26))
		return locus_error_set(err, EINVAL, "keep tokens: bad arguments");
	free(p->tok);
	free(p->tok_n);
	p->tok = calloc((size_t)p->n_layers * cap * k, sizeof(uint16_t));
	p->tok_n = calloc(p->n_layers, sizeof(uint64_t));
	if (!p->tok || !p->tok_n) {
		free(p->tok);
		free(p->tok_n);
		p->tok = NULL;
		p->tok_n = NULL;
		return locus_error_set(err, ENOMEM, "keep %llu tokens: out of memory",
				       (unsigned long long)cap);
	}
	p->tok_cap = cap;
	p->tok_k = k;
	return 0;
}

void locus_gracefit_pack_layer(const struct locus_gracefit_topo *t, uint32_t E,
			       const double *W, uint16_t *primary)
{
	uint32_t N = t->n_nodes * t->gpus_per_node, m = (E + N - 1) / N;
	uint32_t cnt[LOCUS_GRACE_MAX_RANKS] = { 0 };
	double load[LOCUS_GRACE_MAX_RANKS] = { 0 };
	uint8_t done[LOCUS_GRACE_MAX_EXPERTS] = { 0 };

	for (uint32_t i = 0; i < E; i++) {
		uint32_t e = UINT32_MAX, g = UINT32_MAX;

		for (uint32_t x = 0; x < E; x++)
			if (!done[x] && (e == UINT32_MAX || W[x] > W[e]))
				e = x;
		for (uint32_t r = 0; r < N; r++)
			if (cnt[r] < m && (g == UINT32_MAX || load[r] < load[g]))
				g = r;
		done[e] = 1;
		primary[e] = (uint16_t)g;
		cnt[g]++;
		load[g] += W[e];
	}
}

double locus_gracefit_layer_cost(const struct locus_gracefit_topo *t,
				 const struct locus_gracefit_profile *p, uint32_t layer,
				 const uint16_t *primary, double rho,
				 const struct locus_gracefit_opts *o, double *rows_gpu,
				 double *rows_node)
{
	uint32_t N = t->n_nodes * t->gpus_per_node, k = p->tok_k;
	uint64_t n = p->tok && p->tok_n ? p->tok_n[layer] : 0;
	double w_peak = o && o->w_peak > 0 ? o->w_peak : 1.0;
	double c_gpu = o && o->cost_gpu > 0 ? o->cost_gpu : 1.0;
	double c_node = o && o->cost_node > 0 ? o->cost_node : 1.0;
	double dst = 0, rg, rn;

	for (uint64_t i = 0; i < n; i++) {
		const uint16_t *x = p->tok + ((size_t)layer * p->tok_cap + i) * k;

		for (uint32_t j = 0; j < k; j++) {
			int first = 1;

			for (uint32_t q = 0; q < j; q++)
				first &= primary[x[q]] != primary[x[j]];
			dst += first;
		}
	}
	dst = n ? dst / (double)n : 0;
	/* a source GPU uniform over the N: a destination is off it with
	 * probability 1 - 1/N, off its node with 1 - 1/nodes */
	rg = dst * (1 - 1.0 / N);
	rn = dst * (1 - 1.0 / t->n_nodes);
	if (rows_gpu)
		*rows_gpu = rg;
	if (rows_node)
		*rows_node = rn;
	return w_peak * k * (rho - 1) + c_gpu * rg + c_node * rn;
}
