// SPDX-License-Identifier: MIT
/* Scoring EP-group placements on routed requests (epgroups_score.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "epgroups_score.h"

static void die(const char *what, const struct locus_error *e)
{
	fprintf(stderr, "epgroups_figures: %s: %s\n", what, e ? e->msg : "out of memory");
	exit(1);
}

void es_placement_load(struct es_placement *p, const void *blob, size_t len)
{
	static struct locus_graceset_group g[LOCUS_GRACESET_MAX_GROUPS];
	struct locus_error e = { 0 };
	const struct locus_graceset_hdr *h;
	const void *pl;

	memset(p, 0, sizeof(*p));
	if (locus_graceset_blob_check(blob, len, &pl, NULL, g, NULL, &e) < 0)
		die("placement set", &e);
	h = pl;
	p->n_groups = h->n_groups;
	p->n_layers = h->n_layers;
	for (uint32_t i = 0; i < h->n_groups; i++) {
		size_t msz = locus_grace_map_size(g[i].payload);
		void *m = NULL;

		if (posix_memalign(&m, 64, msz))
			die("map", NULL);
		if (locus_grace_map_build(m, msz, g[i].payload, g[i].payload_len, 1, &e) < 0)
			die("map build", &e);
		p->map[i] = m;
		p->first[i] = g[i].entry->first_rank;
		p->n[i] = g[i].entry->n_ranks;
	}
}

void es_placement_free(struct es_placement *p)
{
	for (uint32_t i = 0; i < p->n_groups; i++)
		free(p->map[i]);
	memset(p, 0, sizeof(*p));
}

/*
 * Shares of expert slot (copies ranks[0..n-1], weights w) that go to each
 * local rank (rank - first) from source src: TAR with SWRR's long-run split.
 */
static void shares(const uint16_t *ranks, const uint16_t *w, uint32_t n, uint32_t src,
		   uint32_t gpn, uint32_t first, double *out)
{
	uint32_t local = 0;
	double tot = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (ranks[i] == src) {
			out[src - first] += 1.0;
			return;
		}
		local += ranks[i] / gpn == src / gpn;
	}
	for (uint32_t i = 0; i < n; i++)
		if (!local || ranks[i] / gpn == src / gpn)
			tot += w[i];
	for (uint32_t i = 0; i < n; i++)
		if (!local || ranks[i] / gpn == src / gpn)
			out[ranks[i] - first] += w[i] / tot;
}

void es_contrib(const struct es_placement *p, const struct locus_trace *t, const uint32_t *req,
		const uint32_t *decoder, uint32_t n, struct es_contrib *c)
{
	uint32_t L = t->n_layers, E = t->n_experts, R = p->n[0];
	double one[LOCUS_GRACE_MAX_TOPK][64], q[64];

	for (uint32_t g = 0; g < p->n_groups; g++)
		if (p->n[g] != R || R > 64 || t->k > LOCUS_GRACE_MAX_TOPK)
			die("groups of equal size up to 64 ranks and top-k up to 32 only", NULL);
	*c = (struct es_contrib){ .n_req = n, .L = L, .R = R };
	c->decoder = malloc(n * sizeof(*c->decoder));
	c->load = calloc((size_t)n * L * R, sizeof(double));
	c->leave = calloc(n, sizeof(double));
	c->tok_layers = calloc(n, sizeof(double));
	if (!c->decoder || !c->load || !c->leave || !c->tok_layers)
		die("contributions", NULL);
	for (uint32_t i = 0; i < n; i++) {
		const struct locus_trace_req *q_req = &t->reqs[req[i]];
		const uint16_t *base = q_req->gen_len ? q_req->gen : q_req->prompt;
		uint32_t ntok = q_req->gen_len ? q_req->gen_len : q_req->prompt_len;
		uint32_t d = decoder[i], first = p->first[d];
		const struct locus_grace_map *m = p->map[d];
		uint32_t S = m->n_slots, gpn = m->dims.gpus_per_node;
		const uint8_t *ncp = locus_grace_map_ncopies(m);
		const uint16_t *rk = locus_grace_map_ranks(m), *wt = locus_grace_map_weights(m);

		c->decoder[i] = d;
		for (uint32_t tok = 0; tok < ntok; tok++) {
			uint32_t src = first + (tok + req[i]) % R;

			for (uint32_t l = 0; l < L; l++) {
				const uint16_t *ex = locus_trace_tok(t, base, tok, l);
				double *ld = c->load + ((size_t)i * L + l) * R;

				for (uint32_t r = 0; r < R; r++)
					q[r] = 1.0;
				for (uint32_t j = 0; j < t->k; j++) {
					size_t le = (size_t)l * E + ex[j];

					memset(one[j], 0, R * sizeof(double));
					shares(rk + le * S, wt + le * S, ncp[le], src, gpn, first,
					       one[j]);
					for (uint32_t r = 0; r < R; r++) {
						ld[r] += one[j][r];
						q[r] *= 1.0 - one[j][r];
					}
				}
				for (uint32_t r = 0; r < R; r++)
					if (r != src - first)
						c->leave[i] += 1.0 - q[r];
				c->tok_layers[i] += 1;
			}
		}
	}
}

void es_contrib_free(struct es_contrib *c)
{
	free(c->decoder);
	free(c->load);
	free(c->leave);
	free(c->tok_layers);
	memset(c, 0, sizeof(*c));
}

void es_figures(const struct es_contrib *c, const uint32_t *w, uint32_t K, double *mm,
		double *leave)
{
	uint32_t L = c->L, R = c->R, n_mm = 0;
	double *agg = calloc((size_t)K * L * R, sizeof(double)), lv = 0, tl = 0, sum_mm = 0;

	if (!agg)
		die("figures", NULL);
	for (uint32_t i = 0; i < c->n_req; i++) {
		double wi = w ? w[i] : 1;

		if (wi == 0)
			continue;
		for (size_t j = 0; j < (size_t)L * R; j++)
			agg[(size_t)c->decoder[i] * L * R + j] += wi * c->load[(size_t)i * L * R + j];
		lv += wi * c->leave[i];
		tl += wi * c->tok_layers[i];
	}
	for (uint32_t d = 0; d < K; d++)
		for (uint32_t l = 0; l < L; l++) {
			const double *a = agg + ((size_t)d * L + l) * R;
			double mx = 0, s = 0;

			for (uint32_t r = 0; r < R; r++) {
				s += a[r];
				mx = a[r] > mx ? a[r] : mx;
			}
			if (s > 0) {
				sum_mm += mx * R / s;
				n_mm++;
			}
		}
	*mm = n_mm ? sum_mm / n_mm : 0;
	*leave = tl > 0 ? lv / tl : 0;
	free(agg);
}

int es_eplb_layer(const double *W, uint32_t E, uint32_t n, uint32_t slots, uint32_t R,
		  uint16_t *primary, uint16_t *replica, float *pred)
{
	uint32_t total = n * slots, nc = 0, *cnt = calloc(E, sizeof(*cnt));
	uint32_t *used = calloc(n, sizeof(*used)), *ce = malloc(total * sizeof(*ce));
	double *load = calloc(n, sizeof(*load)), *cw = malloc(total * sizeof(*cw));
	uint8_t *has = calloc((size_t)E * n, 1);
	int rc = -1;

	if (!cnt || !used || !ce || !load || !cw || !has || total < E)
		goto out;
	for (uint32_t e = 0; e < E; e++)
		cnt[e] = 1;
	for (uint32_t x = E; x < total; x++) {
		uint32_t best = E;

		for (uint32_t e = 0; e < E; e++)
			if (cnt[e] < n && (best == E || W[e] / cnt[e] > W[best] / cnt[best]))
				best = e;
		if (best == E)
			break;
		cnt[best]++;
	}
	for (uint32_t e = 0; e < E; e++)
		for (uint32_t j = 0; j < cnt[e]; j++) {
			ce[nc] = e;
			cw[nc++] = W[e] / cnt[e];
		}
	for (uint32_t i = 1; i < nc; i++) { /* hottest first, stable */
		uint32_t e = ce[i], j = i;
		double v = cw[i];

		while (j > 0 && cw[j - 1] < v) {
			ce[j] = ce[j - 1];
			cw[j] = cw[j - 1];
			j--;
		}
		ce[j] = e;
		cw[j] = v;
	}
	for (uint32_t i = 0; i < nc; i++) {
		uint32_t best = n;

		for (uint32_t r = 0; r < n; r++)
			if (used[r] < slots && !has[(size_t)ce[i] * n + r] &&
			    (best == n || load[r] < load[best]))
				best = r;
		if (best == n)
			goto out;
		has[(size_t)ce[i] * n + best] = 1;
		used[best]++;
		load[best] += cw[i];
	}
	for (uint32_t e = 0; e < E; e++) {
		uint32_t k = 0;

		primary[e] = LOCUS_GRACE_NO_RANK;
		for (uint32_t i = 0; i < R; i++)
			replica[(size_t)e * R + i] = LOCUS_GRACE_NO_RANK;
		for (uint32_t r = 0; r < n; r++) {
			if (!has[(size_t)e * n + r])
				continue;
			if (primary[e] == LOCUS_GRACE_NO_RANK)
				primary[e] = (uint16_t)r;
			else if (k < R)
				replica[(size_t)e * R + k++] = (uint16_t)r;
		}
	}
	for (uint32_t r = 0; r < n; r++)
		pred[r] = (float)load[r];
	rc = 0;
out:
	free(cnt);
	free(used);
	free(ce);
	free(load);
	free(cw);
	free(has);
	return rc;
}
