// SPDX-License-Identifier: MIT
/*
 * How far any placement could go: the oracle bound of grace_bound.h on the
 * held-out tokens of grace_figures (ESFT, the second half of each domain's
 * sequences, token t on source GPU t mod N, the same memory rule), beside
 * EPLB's (1 group, vLLM's dispatch) and GRACE's (locusctl fit --grace
 * defaults) rows off the GPU on the same tokens, fitted on the first half as
 * grace_figures fits them; at 2 primaries per GPU (4x8) also pairing
 * placements that exist (grace_pairs.h), scored with the tool's own routing
 * and with the locus planner, to show where between them the truth lies.
 *
 * usage: grace_bound_figures [topology ...]   e.g. 4x8 2x4 (default: all four)
 * Data: $LOCUS_DATA_DIR or ../shared/data (absent: skipped).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_paths.h"
#include "grace_bound.h"
#include "grace_figures.h"
#include "grace_heldout.h"
#include "grace_pairs.h"
#include "locus_grace_plan.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locus_trace.h"

#define N_DOM LOCUS_TRACE_ESFT_DOMAINS

static double sum(const double *x, uint32_t n)
{
	double s = 0;

	for (uint32_t i = 0; i < n; i++)
		s += x[i];
	return s;
}

/*
 * A GRACE table's placement (at most one copy per GPU) routed by the tool's
 * own rule (grace_pairs.h: a copy on a GPU the token already uses first) on
 * h: adds the rows to *rows and each layer's max/mean to *mm.
 */
static void own_routing(const void *pl, size_t plen, const struct gh_set *h, double *rows,
			double *mm)
{
	struct locus_grace_view v;
	struct locus_error err = { 0 };
	uint32_t E, N, R;
	struct gp_place p;
	double load[64];

	if (locus_grace_view_init(&v, (void *)(uintptr_t)pl, plen, &err))
		gf_die("view", &err, -EINVAL);
	E = v.dims->n_experts;
	N = locus_grace_n_ranks(v.dims);
	R = v.dims->max_replicas;
	p = (struct gp_place){ .E = E, .N = N, .home = malloc(E * sizeof(uint16_t)),
			       .copy = malloc(N * sizeof(uint16_t)) };
	if (!p.home || !p.copy || N > 64)
		gf_die("own routing", NULL, -ENOMEM);
	for (uint32_t l = 0; l < h->L; l++) {
		double mx = 0, tot = 0;

		for (uint32_t g = 0; g < N; g++)
			p.copy[g] = (uint16_t)E;
		for (uint32_t e = 0; e < E; e++) {
			const uint16_t *rep = v.replica + ((size_t)l * E + e) * R;

			p.home[e] = v.primary[(size_t)l * E + e];
			for (uint32_t i = 0; i < R && rep[i] != LOCUS_GRACE_NO_RANK; i++) {
				if (p.copy[rep[i]] != E)
					gf_die("own routing: two copies on one GPU", NULL, -EINVAL);
				p.copy[rep[i]] = (uint16_t)e;
			}
		}
		*rows += gp_score(&p, h->ids + (size_t)l * h->n_tok * h->k, h->n_tok, h->k, load);
		for (uint32_t g = 0; g < N; g++) {
			mx = load[g] > mx ? load[g] : mx;
			tot += load[g];
		}
		*mm += mx / (tot / N);
	}
	gp_free(&p);
}

/* EPLB's and GRACE's scores on d's held-out half; GRACE by own routing too. */
static void placements(uint32_t nodes, uint32_t gpus, struct gf_domain *d, struct gh_score *se,
		       struct gh_score *sg, double *own_rows, double *own_mm)
{
	uint32_t L = d->prof.n_layers, E = d->prof.n_experts, N = nodes * gpus;
	struct locus_gracefit_topo tp = gf_grace_topo(&(struct gf_topo){ nodes, gpus }, E);
	struct locus_gracefit_opts o = { .r = -1, .seed = 1 };
	struct locus_error err = { 0 };
	struct locus_gracefit_eplb ep;
	const void *pl;
	size_t len, plen;
	void *blob = NULL, *m = NULL;
	int rc = locus_gracefit_eplb_rebalance(d->prof.W, L, E, E + N * tp.replica_budget, 1,
					       nodes, N, &ep, &err);

	if (rc)
		gf_die("EPLB", &err, rc);
	gh_score_eplb(&ep, gpus, &d->half[1], se);
	locus_gracefit_eplb_free(&ep);
	rc = locus_gracefit_fit(&d->prof, &tp, &o, &blob, &len, NULL, &err);
	if (!rc)
		rc = locus_grace_blob_check(blob, len, &pl, &plen, &err);
	if (rc)
		gf_die("GRACE fit", &err, rc);
	m = gf_map(blob, len);
	gh_score_grace(m, &d->half[1], sg);
	if (tp.replica_budget == 1)   /* the tool's placements hold one copy per GPU */
		own_routing(pl, plen, &d->half[1], own_rows, own_mm);
	free(m);
	free(blob);
}

/*
 * Pairing placements that exist (grace_pairs.h) on d's held-out half, fitted
 * on the calibration half (fit 0) or on the held-out half itself (fit 1, an
 * oracle), with or without the copy slots: rows and sum of per-layer
 * max/mean.
 */
static void pairs_score(const struct gf_domain *d, uint32_t N, int fit, uint32_t hot, double tol,
			double *rows, double *mm)
{
	const struct gh_set *h = &d->half[1], *f = &d->half[fit];
	uint32_t E = 64;
	double *A = malloc((size_t)E * E * sizeof(double)), W[64], load[64];

	if (!A)
		gf_die("pairs", NULL, -ENOMEM);
	for (uint32_t l = 0; l < h->L; l++) {
		struct gp_place pl;
		double mx = 0, tot = 0;

		gp_counts(f->ids + (size_t)l * f->n_tok * f->k, f->n_tok, f->k, E, A, W);
		if (gp_fit(A, W, E, N, hot, tol, &pl))
			gf_die("pairs", NULL, -ENOMEM);
		*rows += gp_score(&pl, h->ids + (size_t)l * h->n_tok * h->k, h->n_tok, h->k, load);
		for (uint32_t g = 0; g < N; g++) {
			mx = load[g] > mx ? load[g] : mx;
			tot += load[g];
		}
		*mm += mx / (tot / N);
		gp_free(&pl);
	}
	free(A);
}

/*
 * The same pairing placement for every layer of d, fitted on half fit, as a
 * sealed GRACE table (2 primaries and 1 copy slot per GPU), so that the
 * locus planner routes it as grace_figures routes GRACE; scored on the
 * held-out half into s.
 */
static void pairs_table_score(const struct gf_domain *d, uint32_t nodes, uint32_t gpus, int fit,
			      uint32_t hot, double tol, struct gh_score *sc)
{
	const struct gh_set *f = &d->half[fit];
	uint32_t N = nodes * gpus, E = 64, L = f->L;
	struct locus_grace_dims dm = { .n_layers = L, .n_experts = E, .n_nodes = nodes,
				       .gpus_per_node = gpus, .max_replicas = N - 1,
				       .capacity = 2, .replica_budget = 1 };
	size_t hdr = sizeof(struct locus_tbl_hdr), plen = locus_grace_payload_size(&dm);
	uint8_t *b = calloc(1, hdr + plen);
	double *A = malloc((size_t)E * E * sizeof(double)), W[64], pred[64];
	struct locus_error err = { 0 };
	struct locus_grace_view v;
	void *m = NULL;
	int rc;

	if (!b || !A)
		gf_die("pairs table", NULL, -ENOMEM);
	memcpy(b + hdr, &dm, sizeof(dm));
	locus_grace_view_init(&v, b + hdr, plen, NULL);
	for (uint32_t l = 0; l < L; l++) {
		struct gp_place pc;

		gp_counts(f->ids + (size_t)l * f->n_tok * f->k, f->n_tok, f->k, E, A, W);
		if (gp_fit(A, W, E, N, hot, tol, &pc))
			gf_die("pairs", NULL, -ENOMEM);
		for (uint32_t e = 0; e < E; e++) {
			uint16_t *rep = v.replica + ((size_t)l * E + e) * dm.max_replicas;
			uint32_t c = 0;

			v.primary[(size_t)l * E + e] = pc.home[e];
			v.expert_load[(size_t)l * E + e] = (float)W[e];
			for (uint32_t i = 0; i < dm.max_replicas; i++)
				rep[i] = LOCUS_GRACE_NO_RANK;
			for (uint32_t g = 0; g < N; g++)   /* ascending */
				if (pc.copy[g] == e)
					rep[c++] = (uint16_t)g;
		}
		locus_gracefit_predict(&dm, W, v.primary + (size_t)l * E,
				       v.replica + (size_t)l * E * dm.max_replicas, pred);
		for (uint32_t r = 0; r < N; r++)
			v.pred_load[(size_t)l * N + r] = (float)pred[r];
		gp_free(&pc);
	}
	rc = locus_grace_validate(&v, &err);
	if (!rc)
		rc = locus_tbl_seal(b, hdr + plen, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, plen);
	if (rc)
		gf_die("pairs table", &err, rc);
	m = gf_map(b, hdr + plen);
	gh_score_grace(m, &d->half[1], sc);
	free(m);
	free(A);
	free(b);
}

static void pairs_figures(uint32_t nodes, uint32_t gpus, struct gf_domain *dom, double eplb,
			  double tl)
{
	/* fitted on half fit (1: the held-out half, an oracle), H, cap */
	static const struct {
		int fit;
		uint32_t hot;
		double tol;
	} cfg[] = { { 0, 0, -1 }, { 0, 1, -1 }, { 0, 2, -1 }, { 0, 4, -1 }, { 0, 8, -1 },
		    { 0, 8, 0.1 }, { 0, 12, 0.1 }, { 0, 16, 0.1 }, { 0, 24, -1 }, { 0, 32, -1 },
		    { 1, 0, -1 }, { 1, 1, -1 }, { 1, 16, 0.1 }, { 1, 32, -1 } };

	printf("pairing placements that exist, fitted on the calibration (or the held-out) "
	       "half, scored on\nthe held-out half: copies shared by the H heaviest, pair loads "
	       "within (1 + cap) x the mean\n(cap -1: none); rows off GPU (vs EPLB) and "
	       "max/mean with the tool's own routing (a GPU\nalready used first) and with the "
	       "locus planner (as grace_figures scores GRACE)\n");
	for (size_t i = 0; i < sizeof(cfg) / sizeof(cfg[0]); i++) {
		double rows = 0, mm = 0;
		struct gh_score sc[N_DOM];
		struct gh_unit u[N_DOM];
		struct gh_metrics gm;

		for (uint32_t f = 0; f < N_DOM; f++) {
			pairs_score(&dom[f], nodes * gpus, cfg[i].fit, cfg[i].hot, cfg[i].tol, &rows,
				    &mm);
			pairs_table_score(&dom[f], nodes, gpus, cfg[i].fit, cfg[i].hot, cfg[i].tol,
					  &sc[f]);
			u[f] = (struct gh_unit){ .sc = { &sc[f] }, .n = 1 };
		}
		gh_metrics(u, N_DOM, &gm);
		for (uint32_t f = 0; f < N_DOM; f++)
			gh_score_free(&sc[f]);
		printf("%ux%-4u %-11s H %2u cap %5.2f: own routing %.3f (%+.1f%%) %.3f; planner "
		       "%.3f (%+.1f%%) %.3f\n", nodes, gpus,
		       cfg[i].fit ? "held-out" : "calibration", cfg[i].hot, cfg[i].tol, rows / tl,
		       100 * (rows / eplb - 1), mm / (N_DOM * dom[0].half[1].L), gm.rows_gpu,
		       100 * (gm.rows_gpu * tl / eplb - 1), gm.mm);
	}
}

static void topology(uint32_t nodes, uint32_t gpus, struct gf_domain *dom)
{
	uint32_t N = nodes * gpus, E = 64;
	struct locus_gracefit_topo tp = gf_grace_topo(&(struct gf_topo){ nodes, gpus }, E);
	struct gb_place p = { .E = E, .N = N, .group = E / N, .reps = tp.replica_budget };
	struct gb_terms sum_t = { 0 };
	struct gh_score se[N_DOM], sg[N_DOM];
	struct gh_unit ue[N_DOM], ug[N_DOM];
	struct gh_metrics me, mg;
	double eplb = 0, grace = 0, tl = 0, own_rows = 0, own_mm = 0;

	for (uint32_t f = 0; f < N_DOM; f++) {
		const struct gh_set *h = &dom[f].half[1];

		placements(nodes, gpus, &dom[f], &se[f], &sg[f], &own_rows, &own_mm);
		eplb += sum(se[f].rows_gpu, se[f].n_seq);
		grace += sum(sg[f].rows_gpu, sg[f].n_seq);
		tl += sum(se[f].tl, se[f].n_seq);
		ue[f] = (struct gh_unit){ .sc = { &se[f] }, .n = 1 };
		ug[f] = (struct gh_unit){ .sc = { &sg[f] }, .n = 1 };
		for (uint32_t l = 0; l < h->L; l++) {
			struct gb_terms b;
			int rc = gb_layer_bound(h->ids + (size_t)l * h->n_tok * h->k, h->n_tok,
						h->k, &p, &b);

			if (rc)
				gf_die("bound", NULL, rc);
			sum_t.tokens += b.tokens;
			sum_t.pairs += b.pairs;
			sum_t.group += b.group;
			sum_t.replica += b.replica;
			sum_t.shared += b.shared;
			sum_t.source += b.source;
			sum_t.floor += b.floor;
			sum_t.rows_lb += b.rows_lb;
		}
	}
	printf("%ux%-4u %5u %5u %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f %9.3f %8.1f%% "
	       "%8.1f%%\n",
	       nodes, gpus, p.group, p.reps, sum_t.pairs / tl, sum_t.group / tl,
	       sum_t.replica / tl, sum_t.shared / tl, sum_t.source / tl, eplb / tl, grace / tl,
	       sum_t.rows_lb / tl,
	       100 * (grace / eplb - 1), 100 * (sum_t.rows_lb / eplb - 1));
	gh_metrics(ue, N_DOM, &me);
	gh_metrics(ug, N_DOM, &mg);
	printf("%ux%-4u max/mean: EPLB %.3f, GRACE %.3f\n", nodes, gpus, me.mm, mg.mm);
	if (tp.replica_budget == 1)
		printf("%ux%-4u GRACE's placement with the tool's own routing (a copy on a GPU "
		       "already used first):\n%-6s rows off GPU %.3f (%+.1f%%), max/mean %.3f\n",
		       nodes, gpus, "", own_rows / tl, 100 * (own_rows / eplb - 1),
		       own_mm / (N_DOM * dom[0].half[1].L));
	for (uint32_t f = 0; f < N_DOM; f++) {
		gh_score_free(&se[f]);
		gh_score_free(&sg[f]);
	}
	if (p.group == 2)
		pairs_figures(nodes, gpus, dom, eplb, tl);
}

int main(int argc, char **argv)
{
	static const uint32_t all[4][2] = { { 1, 4 }, { 2, 2 }, { 2, 4 }, { 4, 8 } };
	static struct gf_domain dom[N_DOM];
	static uint32_t topo[64][2];
	const char *root;
	uint32_t n_topo = 0;
	char path[4200];

	for (int i = 1; i < argc; i++) {
		uint32_t nodes, gpus;
		char tail;

		if (n_topo == 64 || sscanf(argv[i], "%ux%u%c", &nodes, &gpus, &tail) != 2 ||
		    !nodes || !gpus || nodes * gpus > 64 || 64 % (nodes * gpus)) {
			fprintf(stderr, "usage: grace_bound_figures [NODESxGPUS ...] (nodes x GPUs "
					"dividing 64, e.g. 4x8; default 1x4 2x2 2x4 4x8)\n");
			return 2;
		}
		topo[n_topo][0] = nodes;
		topo[n_topo++][1] = gpus;
	}
	for (; argc == 1 && n_topo < 4; n_topo++) {
		topo[n_topo][0] = all[n_topo][0];
		topo[n_topo][1] = all[n_topo][1];
	}
	locus_data_find_root(argv[0]);
	root = locus_data_dir();
	snprintf(path, sizeof(path), "%s/esft/results/expert_scores", root);
	if (access(path, F_OK) < 0 && errno == ENOENT) {
		printf("grace_bound_figures: ESFT data absent (%s): skipped\n", path);
		return 0;
	}
	for (uint32_t d = 0; d < N_DOM; d++)
		gf_domain_load(root, locus_trace_esft_domains[d], &dom[d]);
	printf("Held-out ESFT tokens (second half of each domain, fitted on the first), token t "
	       "on GPU t mod N;\nper token-layer: |X| (experts), the bound's savings (grouping, "
	       "replica, the smaller of\ntheir sum and the triple bound = shared, source), rows "
	       "off the GPU of EPLB (1 group, vLLM)\nand GRACE (defaults), the oracle lower bound "
	       "on any placement's rows, and GRACE and\nthe bound against EPLB\n");
	printf("%-6s %5s %5s %7s %7s %7s %7s %7s %7s %7s %9s %9s %9s\n", "topo", "prim", "reps",
	       "|X|", "group", "replica", "shared", "source", "EPLB", "GRACE", "bound", "GRACE",
	       "bound");
	for (uint32_t i = 0; i < n_topo; i++)
		topology(topo[i][0], topo[i][1], dom);
	for (uint32_t d = 0; d < N_DOM; d++)
		gf_domain_free(&dom[d]);
	return 0;
}
