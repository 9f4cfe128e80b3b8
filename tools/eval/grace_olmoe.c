// SPDX-License-Identifier: MIT
/*
 * grace_figures' OLMoE part: per-domain expert loads only (3 layers, 6
 * domains, no per-token routing, so no co-activation and no locality
 * columns). Fitted on c4, max/mean GPU load on every domain: uniform
 * contiguous, EPLB (1 group; a copy's share is 1/copies, what vLLM's
 * position-modulo choice gives over many tokens) and GRACE's replication on
 * the uniform placement (an expert's load split by the planner's round-robin
 * weights), at the same redundant slots (grace_figures.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grace_figures.h"
#include "locus_grace_plan.h"

#define OL_DOMS 6
#define OL_LAYERS 3
#define OL_E 64
static const char *const ol_dom[OL_DOMS] = { "arxiv", "book", "c4", "github", "tulu",
					     "wikipedia" };

static int olmoe_load(const char *root, double W[OL_DOMS][OL_LAYERS][OL_E])
{
	char path[512], line[256];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "%s/olmoe/expert_counts.csv", root);
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "grace_figures: %s: %s\n", path, strerror(errno));
		return -1;
	}
	memset(W, 0, sizeof(double) * OL_DOMS * OL_LAYERS * OL_E);
	while (fgets(line, sizeof(line), f)) {
		char md[32], model[64], dom[32], sel[16];
		int layer, e, li = -1, di = -1;
		long long cnt;

		if (sscanf(line, "%31[^,],%63[^,],%31[^,],%15[^,],%d,%d,%lld", md, model, dom,
			   sel, &layer, &e, &cnt) != 7)
			continue; /* the header line */
		if (strcmp(md, "olmoe") || strcmp(sel, "topk"))
			continue;
		for (int i = 0; i < OL_DOMS; i++)
			if (!strcmp(dom, ol_dom[i]))
				di = i;
		li = layer == 0 ? 0 : layer == 7 ? 1 : layer == 15 ? 2 : -1;
		if (di < 0 || li < 0 || e < 0 || e >= OL_E || cnt < 0) {
			fprintf(stderr, "grace_figures: %s: unexpected row: %s", path, line);
			fclose(f);
			return -1;
		}
		W[di][li][e] = (double)cnt;
		n++;
	}
	fclose(f);
	if (n != OL_DOMS * OL_LAYERS * OL_E) {
		fprintf(stderr, "grace_figures: %s: %d OLMoE top-k rows, expected %d\n", path, n,
			OL_DOMS * OL_LAYERS * OL_E);
		return -1;
	}
	return 0;
}

static double max_over_mean(const double *load, uint32_t N)
{
	double sum = 0, mx = 0;

	for (uint32_t r = 0; r < N; r++) {
		sum += load[r];
		mx = fmax(mx, load[r]);
	}
	return mx / (sum / N);
}

/* max/mean GPU load with each expert's load split by the SWRR weights. */
static double grace_mm(const struct locus_grace_map *m, uint32_t l, const double *W)
{
	uint32_t E = m->dims.n_experts, N = m->n_ranks;
	double load[LOCUS_GRACE_MAX_RANKS] = { 0 };

	for (uint32_t e = 0; e < E; e++) {
		size_t le = (size_t)l * E + e;
		const uint16_t *rk = locus_grace_map_ranks(m) + le * m->n_slots;
		const uint16_t *w = locus_grace_map_weights(m) + le * m->n_slots;
		uint32_t n = locus_grace_map_ncopies(m)[le];
		double tw = 0;

		for (uint32_t i = 0; i < n; i++)
			tw += w[i];
		for (uint32_t i = 0; i < n; i++)
			load[rk[i]] += W[e] * w[i] / tw;
	}
	return max_over_mean(load, N);
}

/* max/mean GPU load with each expert's load split evenly over its slots. */
static double eplb_mm(const struct locus_gracefit_eplb *p, uint32_t l, const double *W)
{
	double load[LOCUS_GRACE_MAX_RANKS] = { 0 };
	uint32_t S = p->n_phys / p->n_gpus;

	for (uint32_t s = 0; s < p->n_phys; s++) {
		int32_t e = p->phy2log[(size_t)l * p->n_phys + s];

		load[s / S] += W[e] / p->logcnt[(size_t)l * p->n_experts + e];
	}
	return max_over_mean(load, p->n_gpus);
}

/* One placement's row: fit-domain figure, mean and worst over the domains. */
static void olmoe_row(const struct gf_topo *t, const char *name, const struct locus_grace_map *m,
		      const struct locus_gracefit_eplb *p, double W[OL_DOMS][OL_LAYERS][OL_E],
		      int calib)
{
	double mean = 0, worst = 0, self = 0;

	for (int d = 0; d < OL_DOMS; d++) {
		double mm = 0;

		for (int l = 0; l < OL_LAYERS; l++)
			mm += (m ? grace_mm(m, l, W[d][l]) : eplb_mm(p, l, W[d][l])) / OL_LAYERS;
		mean += mm / OL_DOMS;
		worst = fmax(worst, mm);
		if (d == calib)
			self = mm;
	}
	printf("%ux%-4u %-24s %9.3f %9.3f %9.3f\n", t->nodes, t->gpus, name, self, mean, worst);
}

void gf_olmoe_figures(const char *root)
{
	static double W[OL_DOMS][OL_LAYERS][OL_E];
	const int calib = 2; /* c4 */

	if (olmoe_load(root, W))
		exit(1);
	printf("\nOLMoE-1B-7B top-8 loads (layers 0, 7, 15; 64 experts): fitted on c4, max/mean "
	       "GPU load\nevaluated on each of the 6 domains (loads only: no grouping, no "
	       "locality columns)\n");
	printf("%-6s %-24s %9s %9s %9s\n", "topo", "placement", "c4 (fit)", "mean", "worst");
	for (size_t ti = 0; ti < GF_N_TOPOS; ti++) {
		const struct gf_topo *t = &gf_topos[ti];
		struct locus_gracefit_topo tp = gf_grace_topo(t, OL_E);
		struct locus_gracefit_profile p;
		struct locus_gracefit_eplb eplb;
		struct locus_error err = { 0 };
		int rc = locus_gracefit_profile_init(&p, OL_LAYERS, OL_E, 0, &err);

		if (rc)
			gf_die("profile", &err, rc);
		memcpy(p.W, W[calib], sizeof(W[calib]));
		for (int s = 0; s < 2; s++) {
			struct locus_gracefit_opts o = { .r = -1, .seed = 1, .no_grouping = 1,
							 .no_replication = s == 0 };
			void *blob = NULL, *m;
			size_t len;

			rc = locus_gracefit_fit(&p, &tp, &o, &blob, &len, NULL, &err);
			if (rc)
				gf_die("fit", &err, rc);
			m = gf_map(blob, len);
			if (s == 1) {
				rc = locus_gracefit_eplb_rebalance(p.W, OL_LAYERS, OL_E,
								   gf_eplb_slots(t, OL_E), 1,
								   t->nodes, t->nodes * t->gpus,
								   &eplb, &err);
				if (rc)
					gf_die("EPLB", &err, rc);
				olmoe_row(t, "EPLB, 1 group", NULL, &eplb, W, calib);
				locus_gracefit_eplb_free(&eplb);
			}
			olmoe_row(t, s ? "uniform+replication" : "uniform contiguous", m, NULL, W,
				  calib);
			free(m);
			free(blob);
		}
		locus_gracefit_profile_free(&p);
	}
}
