// SPDX-License-Identifier: MIT
/*
 * GRACE figures on real routing data (../shared/data, or $LOCUS_DATA_DIR).
 *
 * ESFT (per-token top-6 of 64 experts, 26 layers, 4 domains): each domain's
 * even-numbered sequences calibrate, the odd ones are evaluated, so nothing
 * is scored on the data it was fitted on. Evaluated token i sits on source
 * rank i mod N (data-parallel ranks). For every topology and placement:
 *   pairs@GPU / pairs@node  fraction of (token, expert) pairs served on the
 *                           token's own GPU / own node
 *   rows/tok node, remote   token rows sent to another GPU of the node / to
 *                           another node (a row goes once per destination)
 *   max/mean                GPU load (pairs served) max over mean, averaged
 *                           over layers
 * Placements: uniform contiguous; EPLB-style greedy packing (hottest expert
 * first onto the least-loaded GPU, equal expert counts); GRACE grouping
 * only; grouping + replication routed by weighted round robin over all
 * copies (no locality); + TAR (the locus planner: local copy first).
 *
 * OLMoE (loads only, 3 layers, 6 domains): there is no co-activation, so
 * only the balance columns: uniform, greedy, uniform + replication, fitted
 * on c4 and evaluated on every domain (a replicated expert's load split by
 * the planner's round-robin weights).
 *
 * Capacity per GPU: ceil(E/N) * 3/2; replica budget: max(1, ceil(E/N)/4).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locus_grace_plan.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"
#include "locus_trace.h"

#define HDR sizeof(struct locus_tbl_hdr)
#define N_STRAT 5

static const char *const strat_name[N_STRAT] = {
	"uniform contiguous", "EPLB greedy packing", "grouping only",
	"grouping+replication", "  + TAR (locus)",
};

struct topo {
	uint32_t nodes, gpus;
};

static const struct topo topos[] = { { 1, 4 }, { 2, 2 }, { 2, 4 }, { 4, 8 } };

struct score {
	double pairs, gpu, node, rows_node, rows_remote, tokens, mm;
	uint32_t layers;
};

static void die(const char *what, const struct locus_error *err, int rc)
{
	fprintf(stderr, "grace_figures: %s: %s (%s)\n", what, err ? err->msg : "",
		locus_strerror(rc));
	exit(1);
}

static struct locus_gracefit_topo mk_topo(const struct topo *t, uint32_t E)
{
	uint32_t N = t->nodes * t->gpus, m = (E + N - 1) / N;

	return (struct locus_gracefit_topo){ .n_nodes = t->nodes, .gpus_per_node = t->gpus,
					     .capacity = (m * 3 + 1) / 2,
					     .replica_budget = LOCUS_MAX(1u, m / 4) };
}

/* EPLB-style balanced packing: equal counts, hottest first, least load. */
static void greedy_pack(const double *W, uint32_t E, uint32_t N, uint16_t *primary)
{
	uint32_t per = (E + N - 1) / N, *cnt = calloc(N, sizeof(*cnt)), *ord = malloc(E * 4);
	double *load = calloc(N, sizeof(*load));

	for (uint32_t e = 0; e < E; e++)
		ord[e] = e;
	for (uint32_t i = 1; i < E; i++) {
		uint32_t v = ord[i], j = i;

		while (j > 0 && W[ord[j - 1]] < W[v]) {
			ord[j] = ord[j - 1];
			j--;
		}
		ord[j] = v;
	}
	for (uint32_t i = 0; i < E; i++) {
		uint32_t best = N;

		for (uint32_t r = 0; r < N; r++)
			if (cnt[r] < per && (best == N || load[r] < load[best]))
				best = r;
		primary[ord[i]] = (uint16_t)best;
		cnt[best]++;
		load[best] += W[ord[i]];
	}
	free(cnt);
	free(ord);
	free(load);
}

/* The planner map of a sealed blob (built, checked). */
static void *to_map(const void *blob, size_t len)
{
	struct locus_error err = { 0 };
	const void *pl;
	size_t plen, msz;
	void *m = NULL;
	int rc = locus_grace_blob_check(blob, len, &pl, &plen, &err);

	if (rc)
		die("table check", &err, rc);
	msz = locus_grace_map_size(pl);
	if (posix_memalign(&m, 64, msz))
		die("map", NULL, ENOMEM);
	rc = locus_grace_map_build(m, msz, pl, plen, 1, &err);
	if (rc)
		die("map build", &err, rc);
	return m;
}

/* Replace a blob's primaries (no replicas) and recompute W'. */
static void set_primaries(void *blob, size_t len, const double *W, const uint16_t *pri_all)
{
	struct locus_grace_view v;
	double pred[LOCUS_GRACE_MAX_RANKS];
	uint32_t L, E, N, R;

	locus_grace_view_init(&v, (uint8_t *)blob + HDR, len - HDR, NULL);
	L = v.dims->n_layers;
	E = v.dims->n_experts;
	N = locus_grace_n_ranks(v.dims);
	R = v.dims->max_replicas;
	memcpy(v.primary, pri_all, (size_t)L * E * sizeof(uint16_t));
	for (size_t i = 0; i < (size_t)L * E * R; i++)
		v.replica[i] = LOCUS_GRACE_NO_RANK;
	for (uint32_t l = 0; l < L; l++) {
		locus_gracefit_predict(v.dims, W + (size_t)l * E, v.primary + (size_t)l * E, NULL,
				       pred);
		for (uint32_t r = 0; r < N; r++)
			v.pred_load[(size_t)l * N + r] = (float)pred[r];
	}
	locus_tbl_seal(blob, len, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, len - HDR);
}

/*
 * Score one batch of tokens from source src whose destinations are in dst
 * ([n][k]): pair locality, rows per tier (one per distinct destination),
 * load per rank.
 */
static void score_batch(const uint16_t *dst, uint32_t n, uint32_t k, uint32_t src,
			uint32_t gpn, double *load, struct score *s)
{
	for (uint32_t t = 0; t < n; t++) {
		const uint16_t *d = dst + (size_t)t * k;

		for (uint32_t j = 0; j < k; j++) {
			enum locus_grace_tier tier = locus_grace_tier_of(src, d[j], gpn);
			int first = 1;

			load[d[j]] += 1;
			s->pairs += 1;
			s->gpu += tier == LOCUS_GRACE_TIER_GPU;
			s->node += tier != LOCUS_GRACE_TIER_REMOTE;
			for (uint32_t q = 0; q < j; q++)
				first &= d[q] != d[j];
			if (first) {
				s->rows_node += tier == LOCUS_GRACE_TIER_NODE;
				s->rows_remote += tier == LOCUS_GRACE_TIER_REMOTE;
			}
		}
	}
	s->tokens += n;
}

static void add_layer_balance(const double *load, uint32_t N, struct score *s)
{
	double sum = 0, mx = 0;

	for (uint32_t r = 0; r < N; r++) {
		sum += load[r];
		mx = fmax(mx, load[r]);
	}
	if (sum > 0) {
		s->mm += mx / (sum / N);
		s->layers++;
	}
}

struct evalset {
	uint32_t L, k, E, n_tok;
	uint16_t *ids; /* [L][n_tok][k] */
};

/* Weighted round robin over all copies, ignoring locality (the WRR baseline). */
static uint16_t wrr_all(const struct locus_grace_map *m, int32_t *cur, uint32_t l, uint32_t e)
{
	size_t le = (size_t)l * m->dims.n_experts + e;
	const uint16_t *rk = locus_grace_map_ranks(m) + le * m->n_slots;
	const uint16_t *w = locus_grace_map_weights(m) + le * m->n_slots;
	int32_t *c = cur + le * m->n_slots, tot = 0;
	uint32_t n = locus_grace_map_ncopies(m)[le], best = 0;

	for (uint32_t i = 0; i < n; i++) {
		c[i] += w[i];
		tot += w[i];
		if (c[i] > c[best])
			best = i;
	}
	c[best] -= tot;
	return rk[best];
}

static void evaluate(const struct locus_grace_map *m, const struct evalset *ev, int tar,
		     struct score *s)
{
	uint32_t N = m->n_ranks, gpn = m->dims.gpus_per_node, k = ev->k;
	uint32_t max_tok = ev->n_tok / N + 1;
	size_t pm = locus_grace_plan_mem_size(max_tok, k, N);
	size_t ssz = locus_grace_plan_state_size(&m->dims);
	struct locus_grace_plan plan;
	void *pmem = malloc(pm), **st = calloc(m->dims.n_nodes, sizeof(void *));
	uint16_t *ids = malloc((size_t)max_tok * k * 2), *dst = malloc((size_t)max_tok * k * 2);
	int32_t *cur = calloc((size_t)m->dims.n_layers * m->dims.n_experts * m->n_slots, 4);
	double *load = calloc(N, sizeof(double));
	struct locus_error err = { 0 };

	locus_grace_plan_init(&plan, pmem, pm, max_tok, k, N);
	for (uint32_t nd = 0; nd < m->dims.n_nodes; nd++) {
		if (posix_memalign(&st[nd], 64, ssz))
			die("state", NULL, ENOMEM);
		locus_grace_plan_state_init(st[nd], ssz, m, nd, NULL);
	}
	for (uint32_t l = 0; l < ev->L; l++) {
		memset(load, 0, N * sizeof(double));
		for (uint32_t src = 0; src < N; src++) {
			uint32_t n = 0;

			for (uint32_t t = src; t < ev->n_tok; t += N, n++)
				memcpy(ids + (size_t)n * k, ev->ids + ((size_t)l * ev->n_tok + t) * k,
				       k * 2);
			if (!n)
				continue;
			if (tar) {
				struct locus_grace_batch b = { .layer = l, .src_rank = src,
							       .n_tokens = n, .top_k = k,
							       .experts = ids };
				int rc = locus_grace_plan_batch(st[src / gpn], m, &b, &plan, &err);

				if (rc < 0)
					die("plan", &err, rc);
				for (size_t i = 0; i < (size_t)n * k; i++)
					dst[i] = plan.slots[i].rank;
			} else {
				for (size_t i = 0; i < (size_t)n * k; i++)
					dst[i] = wrr_all(m, cur, l, ids[i]);
			}
			score_batch(dst, n, k, src, gpn, load, s);
		}
		add_layer_balance(load, N, s);
	}
	for (uint32_t nd = 0; nd < m->dims.n_nodes; nd++)
		free(st[nd]);
	free(st);
	free(pmem);
	free(ids);
	free(dst);
	free(cur);
	free(load);
}

static void esft_domain(const char *root, const char *dom, struct score sc[][N_STRAT],
			double *r_sum, double *u_sum, double *u0_sum)
{
	char dir[512];
	struct locus_trace *t = NULL;
	struct locus_gracefit_profile p;
	struct locus_error err = { 0 };
	struct evalset ev = { 0 };
	int rc;

	snprintf(dir, sizeof(dir), "%s/esft/results/expert_scores/%s", root, dom);
	rc = locus_trace_load_esft(dir, dom, 26, 6, 64, &t, &err);
	if (rc)
		die(dir, &err, rc);
	ev.L = t->n_layers;
	ev.k = t->k;
	ev.E = t->n_experts;
	rc = locus_gracefit_profile_init(&p, ev.L, ev.E, 1, &err);
	if (rc)
		die("profile", &err, rc);
	for (uint32_t r = 0; r < t->n_requests; r++)
		if (r % 2)
			ev.n_tok += t->reqs[r].prompt_len;
	ev.ids = malloc((size_t)ev.L * ev.n_tok * ev.k * 2);
	for (uint32_t l = 0; l < ev.L; l++) {
		uint32_t at = 0;

		for (uint32_t r = 0; r < t->n_requests; r++) {
			const struct locus_trace_req *q = &t->reqs[r];

			for (uint32_t tok = 0; tok < q->prompt_len; tok++) {
				const uint16_t *x = locus_trace_tok(t, q->prompt, tok, l);

				if (r % 2 == 0) {
					rc = locus_gracefit_profile_add(&p, l, x, 1, ev.k, &err);
					if (rc)
						die("profile", &err, rc);
				} else {
					memcpy(ev.ids + ((size_t)l * ev.n_tok + at++) * ev.k, x,
					       ev.k * 2);
				}
			}
		}
	}
	for (size_t ti = 0; ti < LOCUS_ARRAY_SIZE(topos); ti++) {
		struct locus_gracefit_topo tp = mk_topo(&topos[ti], ev.E);
		struct locus_gracefit_opts o[N_STRAT] = {
			{ .r = -1, .seed = 1, .no_grouping = 1, .no_replication = 1 },
			{ .r = -1, .seed = 1, .no_grouping = 1, .no_replication = 1 },
			{ .r = -1, .seed = 1, .no_replication = 1 },
			{ .r = -1, .seed = 1 },
			{ .r = -1, .seed = 1 },
		};
		struct locus_gracefit_layer_info *li = calloc(ev.L, sizeof(*li));
		uint32_t N = topos[ti].nodes * topos[ti].gpus;

		for (int s = 0; s < N_STRAT; s++) {
			void *blob = NULL, *m;
			size_t len;

			rc = locus_gracefit_fit(&p, &tp, &o[s], &blob, &len, li, &err);
			if (rc)
				die("fit", &err, rc);
			if (s == 1) {
				uint16_t *pri = malloc((size_t)ev.L * ev.E * 2);

				for (uint32_t l = 0; l < ev.L; l++)
					greedy_pack(p.W + (size_t)l * ev.E, ev.E, N,
						    pri + (size_t)l * ev.E);
				set_primaries(blob, len, p.W, pri);
				free(pri);
			}
			if (s == 3) {
				for (uint32_t l = 0; l < ev.L; l++) {
					r_sum[ti] += li[l].r / ev.L;
					u_sum[ti] += li[l].U / ev.L;
					u0_sum[ti] += li[l].U_uniform / ev.L;
				}
			}
			m = to_map(blob, len);
			evaluate(m, &ev, s == 4, &sc[ti][s]);
			free(m);
			free(blob);
		}
		free(li);
	}
	free(ev.ids);
	locus_gracefit_profile_free(&p);
	locus_trace_free(t);
}

/* ---- OLMoE loads ------------------------------------------------------- */

#define OL_DOMS 6
#define OL_LAYERS 3
static const char *const ol_dom[OL_DOMS] = { "arxiv", "book", "c4", "github", "tulu",
					     "wikipedia" };

static int olmoe_load(const char *root, double W[OL_DOMS][OL_LAYERS][64])
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
	memset(W, 0, sizeof(double) * OL_DOMS * OL_LAYERS * 64);
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
		if (di < 0 || li < 0 || e < 0 || e >= 64 || cnt < 0) {
			fprintf(stderr, "grace_figures: %s: unexpected row: %s", path, line);
			fclose(f);
			return -1;
		}
		W[di][li][e] = (double)cnt;
		n++;
	}
	fclose(f);
	if (n != OL_DOMS * OL_LAYERS * 64) {
		fprintf(stderr, "grace_figures: %s: %d OLMoE top-k rows, expected %d\n", path, n,
			OL_DOMS * OL_LAYERS * 64);
		return -1;
	}
	return 0;
}

/* max/mean GPU load with each expert's load split by the SWRR weights. */
static double olmoe_mm(const struct locus_grace_map *m, uint32_t l, const double *W)
{
	uint32_t E = m->dims.n_experts, N = m->n_ranks;
	double load[LOCUS_GRACE_MAX_RANKS] = { 0 }, sum = 0, mx = 0;

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
	for (uint32_t r = 0; r < N; r++) {
		sum += load[r];
		mx = fmax(mx, load[r]);
	}
	return mx / (sum / N);
}

static void olmoe_figures(const char *root)
{
	static double W[OL_DOMS][OL_LAYERS][64];
	const int calib = 2; /* c4 */

	if (olmoe_load(root, W))
		exit(1);
	printf("\nOLMoE-1B-7B top-8 loads (layers 0, 7, 15; 64 experts): fitted on c4, "
	       "max/mean GPU load\nevaluated on each of the 6 domains (loads only: no "
	       "grouping, no locality columns)\n");
	printf("%-6s %-22s %9s %9s %9s\n", "topo", "placement", "c4 (fit)", "mean", "worst");
	for (size_t ti = 0; ti < LOCUS_ARRAY_SIZE(topos); ti++) {
		struct locus_gracefit_topo tp = mk_topo(&topos[ti], 64);
		struct locus_gracefit_profile p;
		struct locus_error err = { 0 };
		static const char *const nm[3] = { "uniform contiguous", "EPLB greedy packing",
						   "uniform+replication" };
		int rc = locus_gracefit_profile_init(&p, OL_LAYERS, 64, 0, &err);

		if (rc)
			die("profile", &err, rc);
		memcpy(p.W, W[calib], sizeof(W[calib]));
		for (int s = 0; s < 3; s++) {
			struct locus_gracefit_opts o = { .r = -1, .seed = 1, .no_grouping = 1,
							 .no_replication = s != 2 };
			void *blob = NULL, *m;
			size_t len;
			double mean = 0, worst = 0, self = 0;

			rc = locus_gracefit_fit(&p, &tp, &o, &blob, &len, NULL, &err);
			if (rc)
				die("fit", &err, rc);
			if (s == 1) {
				uint16_t pri[OL_LAYERS * 64];

				for (int l = 0; l < OL_LAYERS; l++)
					greedy_pack(W[calib][l], 64, tp.n_nodes * tp.gpus_per_node,
						    pri + l * 64);
				set_primaries(blob, len, p.W, pri);
			}
			m = to_map(blob, len);
			for (int d = 0; d < OL_DOMS; d++) {
				double mm = 0;

				for (int l = 0; l < OL_LAYERS; l++)
					mm += olmoe_mm(m, l, W[d][l]) / OL_LAYERS;
				mean += mm / OL_DOMS;
				worst = fmax(worst, mm);
				if (d == calib)
					self = mm;
			}
			printf("%ux%-4u %-22s %9.3f %9.3f %9.3f\n", topos[ti].nodes, topos[ti].gpus,
			       nm[s], self, mean, worst);
			free(m);
			free(blob);
		}
		locus_gracefit_profile_free(&p);
	}
}

int main(void)
{
	static const char *const doms[] = { "law", "translation", "summary", "intent" };
	static struct score sc[LOCUS_ARRAY_SIZE(topos)][N_STRAT];
	double r[4] = { 0 }, u[4] = { 0 }, u0[4] = { 0 };
	const char *root = getenv("LOCUS_DATA_DIR");
	static char def[4096], esft[4200];

	if (!root) {
		/* <repo>/build/tools/grace_figures -> <repo>/../shared/data */
		ssize_t n = readlink("/proc/self/exe", def, sizeof(def) - 32);

		if (n > 0) {
			def[n] = '\0';
			for (int up = 0; up < 3; up++) {
				char *sl = strrchr(def, '/');

				if (sl)
					*sl = '\0';
			}
			strcat(def, "/../shared/data");
			root = def;
		} else {
			root = "../shared/data";
		}
	}
	/* absent data is a skip (a fresh clone has none); data present but broken fails */
	snprintf(esft, sizeof(esft), "%s/esft/results/expert_scores", root);
	if (access(esft, F_OK) < 0 && errno == ENOENT) {
		printf("grace_figures: ESFT data absent (%s): skipped; the figures need the "
		       "traces of ../shared/data (LOCUS_DATA_DIR to point elsewhere)\n", esft);
		return 0;
	}
	for (size_t d = 0; d < LOCUS_ARRAY_SIZE(doms); d++)
		esft_domain(root, doms[d], sc, r, u, u0);
	printf("ESFT-vanilla-lite (DeepSeek-V2-Lite routing, 64 experts, top-6, 26 layers), "
	       "4 domains pooled;\nfitted on even sequences, scored on odd ones; token i on "
	       "source rank i mod N\n");
	printf("%-6s %-22s %9s %10s %9s %9s %9s %12s\n", "topo", "placement", "pairs@GPU",
	       "pairs@node", "rows/tok", "rows/tok", "max/mean", "remote rows");
	printf("%-6s %-22s %9s %10s %9s %9s %9s %12s\n", "", "", "", "", "node", "remote", "",
	       "vs uniform");
	for (size_t ti = 0; ti < LOCUS_ARRAY_SIZE(topos); ti++) {
		for (int s = 0; s < N_STRAT; s++) {
			struct score *x = &sc[ti][s], *b = &sc[ti][0];

			printf("%ux%-4u %-22s %9.3f %10.3f %9.3f %9.3f %9.3f %12.3f\n",
			       topos[ti].nodes, topos[ti].gpus, strat_name[s], x->gpu / x->pairs,
			       x->node / x->pairs, x->rows_node / x->tokens,
			       x->rows_remote / x->tokens, x->mm / x->layers,
			       b->rows_remote > 0 ? x->rows_remote / b->rows_remote : 1.0);
		}
		printf("%-6s grouping: mean r %.3f, intra-GPU affinity U(r) %.3f (U(0) %.3f)\n",
		       "", r[ti] / 4, u[ti] / 4, u0[ti] / 4);
	}
	snprintf(esft, sizeof(esft), "%s/olmoe/expert_counts.csv", root);
	if (access(esft, F_OK) < 0 && errno == ENOENT)
		printf("grace_figures: OLMoE data absent (%s): its figures skipped\n", esft);
	else
		olmoe_figures(root);
	return 0;
}
