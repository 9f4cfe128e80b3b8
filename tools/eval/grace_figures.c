// SPDX-License-Identifier: MIT
/*
 * GRACE against EPLB on real routing data (../shared/data, or
 * $LOCUS_DATA_DIR), on tokens the placements were not fitted on.
 *
 * ESFT (per-token top-6 of 64 experts, 26 layers, 4 domains; each token's
 * experts in descending gate weight, the order vLLM's top-k emits): every
 * placement is fitted per domain on the first half of its sequences and
 * scored on that half (calibration), on the second half (held-out), and on
 * the other three domains whole (domain shift). Token t of a scored set sits
 * on source GPU t mod N; each (source GPU, layer) is one batch. Placements,
 * at the same redundant slots (grace_figures.h):
 *   uniform contiguous     E/N consecutive experts per GPU
 *   EPLB, 1 group          DeepSeek's EPLB as vLLM calls it for this model
 *                          (num_groups = its n_group = 1: the global policy,
 *                          hierarchical with one group on one node)
 *   EPLB, 8 groups         EPLB's hierarchical policy with DeepSeek-V3's 8
 *                          groups (of 8 consecutive experts here)
 *   GRACE grouping only    locusctl fit --grace without replication
 *   GRACE grouping+repl.   locusctl fit --grace
 *   EPLB at GRACE's peak   EPLB, 1 group, with as many slots on every GPU as
 *                          GRACE's fullest GPU holds (same per-GPU memory)
 * EPLB's copies are chosen as vLLM does (flattened position mod copies),
 * GRACE's by the locus planner (a copy on the source GPU, else the node's,
 * else any, by smooth weighted round robin). Per placement: token rows off
 * the source GPU and to other nodes per token-layer (one row per distinct
 * destination GPU), per-layer max/mean and CV (std/mean) of the pairs each
 * GPU serves over the scored set, averaged over layers and fitted domains;
 * slots/GPU is the fullest GPU's expert copies. Then GRACE minus EPLB,
 * paired, with 95 % bootstrap intervals over sequences (resampled within
 * each domain's half).
 *
 * OLMoE (loads only): grace_olmoe.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_paths.h"
#include "grace_figures.h"
#include "grace_heldout.h"
#include "locus_grace_plan.h"
#include "locus_tblfile.h"
#include "locus_trace.h"

#define N_DOM LOCUS_TRACE_ESFT_DOMAINS
#define N_PL 6
#define N_CELL 3
#define BOOT 1000

/* fitted in this order: EPLB at GRACE's peak takes the slots of GRACE's fullest GPU */
enum { PL_UNIFORM, PL_EPLB1, PL_EPLB8, PL_GROUP, PL_GRACE, PL_EPLBPEAK };
static const char *const pl_name[N_PL] = {
	"uniform contiguous", "EPLB, 1 group (vLLM)", "EPLB, 8 groups", "GRACE grouping only",
	"GRACE grouping+repl.", "EPLB at GRACE's peak",
};
static const char *const cell_name[N_CELL] = { "calibration", "held-out", "domain shift" };

/* The comparisons reported with intervals: a minus b. */
static const struct {
	int a, b;
} cmp[] = { { PL_GRACE, PL_EPLB1 }, { PL_GRACE, PL_EPLB8 }, { PL_GROUP, PL_EPLB1 },
	    { PL_GRACE, PL_EPLBPEAK } };
#define N_CMP (sizeof(cmp) / sizeof(cmp[0]))

const struct gf_topo gf_topos[GF_N_TOPOS] = { { 1, 4 }, { 2, 2 }, { 2, 4 }, { 4, 8 } };

/* One topology's scores: [placement][fitted domain][scored domain][half]. */
struct topo_run {
	struct gh_score sc[N_PL][N_DOM][N_DOM][2];
	double r, U, U0, reps;   /* GRACE's grouping ratio, affinity kept, replicas per layer */
	uint32_t fallbacks;      /* GRACE's layers that took EPLB's packing, over the 4 fits */
	double eplb_planned;     /* EPLB (1 group)'s own max/mean: each copy W / copies */
};

/* max/mean of a plan's GPU loads on W[L][E] with each copy taking W / copies. */
static double eplb_planned_mm(const struct locus_gracefit_eplb *p, const double *W)
{
	uint32_t S = p->n_phys / p->n_gpus;
	double mm = 0;

	for (uint32_t l = 0; l < p->n_layers; l++) {
		double load[LOCUS_GRACE_MAX_RANKS] = { 0 }, sum = 0, mx = 0;

		for (uint32_t s = 0; s < p->n_phys; s++) {
			int32_t e = p->phy2log[(size_t)l * p->n_phys + s];
			size_t le = (size_t)l * p->n_experts + (uint32_t)e;

			load[s / S] += W[le] / p->logcnt[le];
		}
		for (uint32_t r = 0; r < p->n_gpus; r++) {
			sum += load[r];
			mx = fmax(mx, load[r]);
		}
		mm += sum > 0 ? mx / (sum / p->n_gpus) / p->n_layers : 0;
	}
	return mm;
}

/* Fit every placement on domain f and score it on every half of every domain. */
static void fit_and_score(const struct gf_topo *t, struct gf_domain *dom, uint32_t f,
			  struct topo_run *run)
{
	const struct gf_domain *d = &dom[f];
	uint32_t L = d->prof.n_layers, E = d->prof.n_experts, N = t->nodes * t->gpus;
	struct locus_gracefit_topo tp = gf_grace_topo(t, E);
	struct locus_gracefit_layer_info *li = calloc(L, sizeof(*li));
	struct locus_error err = { 0 };
	int rc;

	for (int p = 0; p < N_PL; p++) {
		struct locus_gracefit_opts o = { .r = -1, .seed = 1,
						 .no_grouping = p == PL_UNIFORM,
						 .no_replication = p != PL_GRACE,
						 .no_fallback = p == PL_GROUP };
		struct locus_gracefit_eplb eplb;
		void *blob = NULL, *m = NULL;
		size_t len;

		if (p == PL_EPLB1 || p == PL_EPLB8 || p == PL_EPLBPEAK) {
			uint32_t P = p == PL_EPLBPEAK ? N * run->sc[PL_GRACE][f][0][0].slots_max :
							gf_eplb_slots(t, E);

			uint32_t groups = p == PL_EPLB8 ? 8 : 1;

			rc = locus_gracefit_eplb_rebalance(d->prof.W, L, E, P, groups, t->nodes, N,
							   &eplb, &err);
			if (rc)
				gf_die("EPLB", &err, rc);
			if (p == PL_EPLB1)
				run->eplb_planned += eplb_planned_mm(&eplb, d->prof.W) / N_DOM;
		} else {
			rc = locus_gracefit_fit(&d->prof, &tp, &o, &blob, &len, li, &err);
			if (rc)
				gf_die("fit", &err, rc);
			m = gf_map(blob, len);
		}
		for (uint32_t e = 0; p == PL_GRACE && e < L; e++) {
			run->r += li[e].r / (L * N_DOM);
			run->U += li[e].U / (L * N_DOM);
			run->U0 += li[e].U_uniform / (L * N_DOM);
			run->reps += (double)li[e].n_replicas / (L * N_DOM);
			run->fallbacks += li[e].fallback;
		}
		for (uint32_t x = 0; x < N_DOM; x++)
			for (int h = 0; h < 2; h++) {
				struct gh_score *s = &run->sc[p][f][x][h];

				if (m)
					gh_score_grace(m, &dom[x].half[h], s);
				else
					gh_score_eplb(&eplb, t->gpus, &dom[x].half[h], s);
			}
		if (!m)
			locus_gracefit_eplb_free(&eplb);
		free(m);
		free(blob);
	}
	free(li);
}

/* The units of a cell for placement p, with draw counts cnt (NULL: once each). */
static size_t cell_units(const struct topo_run *run, int p, int cell,
			 const uint32_t *const cnt[N_DOM][2], struct gh_unit *u)
{
	size_t n = 0;

	for (uint32_t f = 0; f < N_DOM; f++) {
		if (cell < 2) {
			u[n++] = (struct gh_unit){ .sc = { &run->sc[p][f][f][cell] },
						   .cnt = { cnt ? cnt[f][cell] : NULL }, .n = 1 };
			continue;
		}
		for (uint32_t x = 0; x < N_DOM; x++)
			if (x != f)
				u[n++] = (struct gh_unit){
					.sc = { &run->sc[p][f][x][0], &run->sc[p][f][x][1] },
					.cnt = { cnt ? cnt[x][0] : NULL, cnt ? cnt[x][1] : NULL },
					.n = 2 };
	}
	return n;
}

static void cell_metrics(const struct topo_run *run, int p, int cell,
			 const uint32_t *const cnt[N_DOM][2], struct gh_metrics *m)
{
	struct gh_unit u[N_DOM * N_DOM];
	size_t n = cell_units(run, p, cell, cnt, u);

	gh_metrics(u, n, m);
}

/* Paired differences over resamples: [cell][comparison][metric][resample]. */
struct boot {
	double d[N_CELL][N_CMP][4][BOOT];
};

static double rel(double a, double b)
{
	return b > 0 ? a / b - 1 : NAN;
}

static void bootstrap(const struct topo_run *run, const struct gf_domain *dom, struct boot *bt)
{
	uint32_t *cnt[N_DOM][2];
	uint64_t seed = 20260601;

	for (uint32_t x = 0; x < N_DOM; x++)
		for (int h = 0; h < 2; h++)
			cnt[x][h] = calloc(dom[x].half[h].n_seq, sizeof(uint32_t));
	for (uint32_t b = 0; b < BOOT; b++) {
		for (uint32_t x = 0; x < N_DOM; x++)
			for (int h = 0; h < 2; h++) {
				uint32_t n = dom[x].half[h].n_seq;

				memset(cnt[x][h], 0, n * sizeof(uint32_t));
				for (uint32_t i = 0; i < n; i++)
					cnt[x][h][locus_splitmix_below(&seed, n)]++;
			}
		for (int c = 0; c < N_CELL; c++) {
			struct gh_metrics m[N_PL];

			for (int p = 0; p < N_PL; p++)
				if (p != PL_UNIFORM)
					cell_metrics(run, p, c, (const uint32_t *const(*)[2])cnt,
						     &m[p]);
			for (size_t k = 0; k < N_CMP; k++) {
				const struct gh_metrics *a = &m[cmp[k].a], *z = &m[cmp[k].b];

				bt->d[c][k][0][b] = rel(a->rows_gpu, z->rows_gpu);
				bt->d[c][k][1][b] = rel(a->rows_node, z->rows_node);
				bt->d[c][k][2][b] = a->mm - z->mm;
				bt->d[c][k][3][b] = a->cv - z->cv;
			}
		}
	}
	for (uint32_t x = 0; x < N_DOM; x++)
		for (int h = 0; h < 2; h++)
			free(cnt[x][h]);
}

static void print_placements(int cell, struct topo_run *const *runs)
{
	printf("\n%s%s\n", cell_name[cell],
	       cell == 0 ? ": scored on the fitted half (the first half of each domain's "
			   "sequences)" :
	       cell == 1 ? ": fitted on the first half, scored on the second" :
			   ": fitted on one domain's first half, scored on the other three "
			   "domains");
	printf("%-6s %-22s %9s %13s %15s %9s %7s\n", "topo", "placement", "slots/GPU",
	       "rows off GPU", "rows off node", "max/mean", "CV");
	for (size_t ti = 0; ti < GF_N_TOPOS; ti++) {
		const struct gf_topo *t = &gf_topos[ti];

		for (int p = 0; p < N_PL; p++) {
			struct gh_metrics m;
			uint32_t slots = 0;

			cell_metrics(runs[ti], p, cell, NULL, &m);
			for (uint32_t f = 0; f < N_DOM; f++)
				slots = LOCUS_MAX(slots, runs[ti]->sc[p][f][0][0].slots_max);
			printf("%ux%-4u %-22s %9u %13.3f %15.3f %9.3f %7.3f\n", t->nodes, t->gpus,
			       pl_name[p], slots, m.rows_gpu, m.rows_node, m.mm, m.cv);
		}
		if (cell == 1)
			printf("%-6s GRACE: mean r %.3f, intra-GPU affinity U(r) %.3f (U(0) %.3f), "
			       "%.1f replicas per layer of %u allowed,\n%-6s %u of %u layers "
			       "fell back to EPLB's packing (the layer objective)\n%-6s EPLB, 1 "
			       "group: max/mean %.3f as planned (each copy W / copies, "
			       "calibration loads)\n", "", runs[ti]->r, runs[ti]->U, runs[ti]->U0,
			       runs[ti]->reps, gf_eplb_slots(t, 64) - 64, "", runs[ti]->fallbacks,
			       26 * N_DOM, "", runs[ti]->eplb_planned);
	}
}

/*
 * GRACE's goal, judged on the intervals: rows off the GPU at least 20 %
 * fewer (the interval's upper end at or below -20 %) and max/mean not
 * shown worse (the interval's lower end at or below 0).
 */
static void print_comparisons(struct topo_run *const *runs, struct boot *const *bts)
{
	printf("\nGRACE minus EPLB, paired: rows as relative change, max/mean and CV as "
	       "differences,\n[95%% bootstrap intervals over sequences, %d resamples within "
	       "each domain's half,\npercentiles shifted by the bootstrap's bias];\ngoal: rows off GPU <= -20%% (upper end) and max/mean not "
	       "worse (lower end <= 0)\n", BOOT);
	printf("%-6s %-12s %-7s %24s %24s %24s %24s  %s\n", "topo", "scored on", "a - b",
	       "rows off GPU", "rows off node", "max/mean", "CV", "goal");
	for (size_t k = 0; k < N_CMP; k++)
		printf("%-19s %-7c %s - %s\n", k ? "" : "comparisons:", (int)('A' + k),
		       pl_name[cmp[k].a], pl_name[cmp[k].b]);
	for (int c = 0; c < N_CELL; c++)
		for (size_t ti = 0; ti < GF_N_TOPOS; ti++)
			for (size_t k = 0; k < N_CMP; k++) {
				struct gh_metrics a, z;
				double v[4], lo, hi, mlo, mhi, tmp[BOOT];

				cell_metrics(runs[ti], cmp[k].a, c, NULL, &a);
				cell_metrics(runs[ti], cmp[k].b, c, NULL, &z);
				v[0] = rel(a.rows_gpu, z.rows_gpu);
				v[1] = rel(a.rows_node, z.rows_node);
				v[2] = a.mm - z.mm;
				v[3] = a.cv - z.cv;
				printf("%ux%-4u %-12s %-7c", gf_topos[ti].nodes, gf_topos[ti].gpus,
				       cell_name[c], (int)('A' + k));
				for (int x = 0; x < 4; x++)
					gh_print_interval(v[x], bts[ti]->d[c][k][x], BOOT, x < 2);
				memcpy(tmp, bts[ti]->d[c][k][0], sizeof(tmp));
				gh_interval_bc(v[0], tmp, BOOT, &lo, &hi);
				memcpy(tmp, bts[ti]->d[c][k][2], sizeof(tmp));
				gh_interval_bc(v[2], tmp, BOOT, &mlo, &mhi);
				printf("  %s\n", hi <= -0.20 && mlo <= 0 ? "met" : "not met");
			}
}

/*
 * The traffic/balance front of GRACE's fit on held-out tokens: --load-tol
 * swept from tight to no load swaps at all (the grouping's own traffic with
 * replication after it), each point fitted per domain on the first half and
 * scored on the second; EPLB (1 group) beside it. A point is on the front
 * when no other point of the sweep has both fewer rows off the GPU and a
 * lower max/mean.
 */
static const double pareto_tol[] = { 0.05, 0.1, 0.2, 0.3, 0.5, 1, 1e9 };
#define N_TOL (sizeof(pareto_tol) / sizeof(pareto_tol[0]))

static void pareto(const struct gf_topo *t, struct gf_domain *dom, const struct topo_run *run)
{
	struct gh_metrics pt[N_TOL], ep;
	uint32_t E = dom[0].prof.n_experts;
	struct locus_gracefit_topo tp = gf_grace_topo(t, E);
	struct locus_error err = { 0 };

	cell_metrics(run, PL_EPLB1, 1, NULL, &ep);
	for (size_t i = 0; i < N_TOL; i++) {
		struct gh_score sc[N_DOM];
		struct gh_unit u[N_DOM];

		for (uint32_t f = 0; f < N_DOM; f++) {
			struct locus_gracefit_opts o = { .r = -1, .seed = 1,
							 .load_tol = pareto_tol[i] };
			void *blob = NULL, *m;
			size_t len;
			int rc = locus_gracefit_fit(&dom[f].prof, &tp, &o, &blob, &len, NULL,
						    &err);

			if (rc)
				gf_die("fit", &err, rc);
			m = gf_map(blob, len);
			gh_score_grace(m, &dom[f].half[1], &sc[f]);
			u[f] = (struct gh_unit){ .sc = { &sc[f] }, .n = 1 };
			free(m);
			free(blob);
		}
		gh_metrics(u, N_DOM, &pt[i]);
		for (uint32_t f = 0; f < N_DOM; f++)
			gh_score_free(&sc[f]);
	}
	for (size_t i = 0; i < N_TOL; i++) {
		int front = 1;
		double dr = rel(pt[i].rows_gpu, ep.rows_gpu), dm = pt[i].mm - ep.mm;

		for (size_t j = 0; j < N_TOL; j++)
			front &= !(j != i && pt[j].rows_gpu <= pt[i].rows_gpu &&
				   pt[j].mm <= pt[i].mm &&
				   (pt[j].rows_gpu < pt[i].rows_gpu || pt[j].mm < pt[i].mm));
		if (pareto_tol[i] < 1e6)
			printf("%ux%-4u %9.2f%c", t->nodes, t->gpus, pareto_tol[i],
			       pareto_tol[i] == 0.1 ? '*' : ' ');
		else
			printf("%ux%-4u %10s", t->nodes, t->gpus, "no swaps");
		printf(" %13.3f %+8.1f%% %15.3f %9.3f %+9.3f  %-5s %s\n", pt[i].rows_gpu,
		       100 * dr, pt[i].rows_node, pt[i].mm, dm, front ? "yes" : "no",
		       dr <= -0.20 && dm <= 0 ? "goal met (point estimates)" : "");
	}
	printf("%ux%-4u %10s %13.3f %9s %15.3f %9.3f\n", t->nodes, t->gpus, "EPLB", ep.rows_gpu,
	       "", ep.rows_node, ep.mm);
}

/* Pearson correlation of x[0..n-1] and y[0..n-1] (0 when one is constant). */
static double corr(const double *x, const double *y, uint32_t n)
{
	double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;

	for (uint32_t i = 0; i < n; i++) {
		mx += x[i] / n;
		my += y[i] / n;
	}
	for (uint32_t i = 0; i < n; i++) {
		sxy += (x[i] - mx) * (y[i] - my);
		sxx += (x[i] - mx) * (x[i] - mx);
		syy += (y[i] - my) * (y[i] - my);
	}
	return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0;
}

/* Loads W[L][E] of requests [from, to) of a domain's trace. */
static void window_loads(const struct locus_trace *t, uint32_t from, uint32_t to, double *W)
{
	uint32_t E = t->n_experts;

	memset(W, 0, (size_t)t->n_layers * E * sizeof(double));
	for (uint32_t r = from; r < to; r++)
		for (uint32_t tok = 0; tok < t->reqs[r].prompt_len; tok++)
			for (uint32_t l = 0; l < t->n_layers; l++) {
				const uint16_t *id = locus_trace_tok(t, t->reqs[r].prompt, tok, l);

				for (uint32_t j = 0; j < t->k; j++)
					W[(size_t)l * E + id[j]] += 1;
			}
}

/*
 * How stable per-expert loads are, the measure a shrinkage toward the mean
 * would be fitted on: per domain, the correlation of each layer's E loads
 * between the quarters of the calibration half (mean over the 6 pairs),
 * between the two halves, and between the calibration half and each other
 * domain whole (the domain-shift cell's loads).
 */
static void load_stability(struct gf_domain *dom)
{
	uint32_t L = dom[0].t->n_layers, E = dom[0].t->n_experts;
	double *q[4], *h[N_DOM][3]; /* halves and whole */

	printf("\nLoad stability: correlation of a layer's %u expert loads, mean over layers\n"
	       "%-12s %22s %22s %22s\n", E, "domain", "calibration quarters",
	       "calibration/held-out", "other domains");
	for (int i = 0; i < 4; i++)
		if (!(q[i] = malloc((size_t)L * E * sizeof(double))))
			gf_die("stability", NULL, -ENOMEM);
	for (uint32_t d = 0; d < N_DOM; d++)
		for (int x = 0; x < 3; x++)
			if (!(h[d][x] = malloc((size_t)L * E * sizeof(double))))
				gf_die("stability", NULL, -ENOMEM);
	for (uint32_t d = 0; d < N_DOM; d++) {
		uint32_t n = dom[d].t->n_requests / 2;

		window_loads(dom[d].t, 0, n, h[d][0]);
		window_loads(dom[d].t, n, dom[d].t->n_requests, h[d][1]);
		for (size_t i = 0; i < (size_t)L * E; i++)
			h[d][2][i] = h[d][0][i] + h[d][1][i];
	}
	for (uint32_t d = 0; d < N_DOM; d++) {
		const struct locus_trace *t = dom[d].t;
		uint32_t n = t->n_requests / 2;
		double cq = 0, ch = 0, co = 0;

		for (uint32_t i = 0; i < 4; i++)
			window_loads(t, n * i / 4, n * (i + 1) / 4, q[i]);
		for (uint32_t l = 0; l < L; l++) {
			size_t o = (size_t)l * E;

			for (int a = 0; a < 4; a++)
				for (int b = a + 1; b < 4; b++)
					cq += corr(q[a] + o, q[b] + o, E) / (6.0 * L);
			ch += corr(h[d][0] + o, h[d][1] + o, E) / L;
			for (uint32_t x = 0; x < N_DOM; x++)
				if (x != d)
					co += corr(h[d][0] + o, h[x][2] + o, E) /
					      ((N_DOM - 1.0) * L);
		}
		printf("%-12s %22.3f %22.3f %22.3f\n", locus_trace_esft_domains[d], cq, ch, co);
	}
	for (int i = 0; i < 4; i++)
		free(q[i]);
	for (uint32_t d = 0; d < N_DOM; d++)
		for (int x = 0; x < 3; x++)
			free(h[d][x]);
}

static void esft_figures(const char *root)
{
	static struct gf_domain dom[N_DOM];
	struct topo_run *runs[GF_N_TOPOS];
	struct boot *bts[GF_N_TOPOS];

	for (uint32_t d = 0; d < N_DOM; d++)
		gf_domain_load(root, locus_trace_esft_domains[d], &dom[d]);
	printf("ESFT-vanilla-lite (DeepSeek-V2-Lite routing: 64 experts, top-6, 26 layers), "
	       "4 domains;\nper domain fitted on the first half of its sequences; token t on "
	       "source GPU t mod N.\nSame memory: N x max(1, ceil(E/N)/4) redundant slots per "
	       "layer for EPLB (E + that physical\nslots) and GRACE (that replica budget; at "
	       "most ceil(E/N)*3/2 primaries per GPU).\nEPLB copies chosen as vLLM does, "
	       "GRACE's by the locus planner. Rows per token-layer.\n");
	for (size_t ti = 0; ti < GF_N_TOPOS; ti++) {
		runs[ti] = calloc(1, sizeof(*runs[ti]));
		bts[ti] = malloc(sizeof(*bts[ti]));
		if (!runs[ti] || !bts[ti])
			gf_die("runs", NULL, -ENOMEM);
		for (uint32_t f = 0; f < N_DOM; f++)
			fit_and_score(&gf_topos[ti], dom, f, runs[ti]);
		bootstrap(runs[ti], dom, bts[ti]);
	}
	for (int c = 0; c < N_CELL; c++)
		print_placements(c, runs);
	print_comparisons(runs, bts);
	printf("\nThe traffic/balance front, held-out: GRACE grouping+repl. at --load-tol T "
	       "(* the default;\n'no swaps': the grouping's traffic, replication only), EPLB "
	       "(1 group) below each;\nfront: no other T has both fewer rows off the GPU and a "
	       "lower max/mean\n");
	printf("%-6s %10s %13s %9s %15s %9s %9s  %s\n", "topo", "load-tol", "rows off GPU",
	       "vs EPLB", "rows off node", "max/mean", "vs EPLB", "front");
	for (size_t ti = 0; ti < GF_N_TOPOS; ti++)
		pareto(&gf_topos[ti], dom, runs[ti]);
	load_stability(dom);
	for (size_t ti = 0; ti < GF_N_TOPOS; ti++) {
		for (int p = 0; p < N_PL; p++)
			for (uint32_t f = 0; f < N_DOM; f++)
				for (uint32_t x = 0; x < N_DOM; x++)
					for (int h = 0; h < 2; h++)
						gh_score_free(&runs[ti]->sc[p][f][x][h]);
		free(runs[ti]);
		free(bts[ti]);
	}
	for (uint32_t d = 0; d < N_DOM; d++)
		gf_domain_free(&dom[d]);
}

int main(int argc, char **argv)
{
	const char *root;
	static char path[4200];

	(void)argc;
	locus_data_find_root(argv[0]);
	root = locus_data_dir();
	/* absent data is a skip (a fresh clone has none); data present but broken fails */
	snprintf(path, sizeof(path), "%s/esft/results/expert_scores", root);
	if (!locus_data_absent("grace_figures", path, "ESFT"))
		esft_figures(root);
	snprintf(path, sizeof(path), "%s/olmoe/expert_counts.csv", root);
	if (access(path, F_OK) < 0 && errno == ENOENT)
		printf("grace_figures: OLMoE data absent (%s): its figures skipped\n", path);
	else
		gf_olmoe_figures(root);
	return 0;
}
