// SPDX-License-Identifier: MIT
/*
 * The recovery fit (locus_gracefit_adapt) on real routing data
 * (../shared/data, or $LOCUS_DATA_DIR), on tokens no placement was fitted
 * on, against the baselines (grace_adapt_score.h): mask only, a fresh
 * GRACE fit, EPLB re-run on the survivors.
 *
 * Models with per-token traces: ESFT-vanilla-lite (DeepSeek-V2-Lite
 * routing, 4 domains, each fitted on the first half of its sequences and
 * scored on the second, as grace_figures does) and gpt-oss-20b (decode
 * routing; fitted on the even-numbered requests, scored on the odd: the
 * file is ordered by source question). Topologies 1x8 and 2x4. Every rank
 * (node) is lost in turn and brought back; figures are means over those
 * cases and the domains. Scored on the held-out half, tokens spread over
 * the live ranks, each routed by the locus planner over live copies (EPLB
 * by vLLM's dispatch): busiest live GPU / live mean per layer (mean over
 * layers), token rows off the source GPU and to other nodes per
 * token-layer, the share of (token, expert) pairs with no live copy
 * (masked). Moves: copies gained by a live rank, by where their weights
 * come from, and the weights that cross nodes from the nearest holder
 * against from each expert's old primary. 95 % bootstrap intervals over
 * held-out sequences (resampled within each domain's half), and paired
 * differences adapt (recover's default, skew auto) minus EPLB and minus refit.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_paths.h"
#include "grace_adapt_score.h"
#include "locus_trace.h"

#define BOOT 1000
#define MAX_DOM LOCUS_TRACE_ESFT_DOMAINS

struct model {
	const char *name;
	uint32_t n_dom;
	struct gf_domain dom[MAX_DOM];
	double expert_bytes;   /* one routed expert's weights */
};

static const struct gf_topo topos[] = { { 1, 8 }, { 2, 4 } };
#define N_TOPO (sizeof(topos) / sizeof(topos[0]))

/* One fault on one topology: cases[dom][which]. */
struct fault_run {
	uint32_t n_dom, n_case;
	struct ga_case *cases;
};

static struct gh_unit *units_of(const struct fault_run *fr, int m, uint32_t *const *cnt)
{
	struct gh_unit *u = calloc((size_t)fr->n_dom * fr->n_case, sizeof(*u));

	if (!u)
		gf_die("units", NULL, -ENOMEM);
	for (uint32_t d = 0; d < fr->n_dom; d++)
		for (uint32_t w = 0; w < fr->n_case; w++)
			u[d * fr->n_case + w] = (struct gh_unit){
				.sc = { &fr->cases[d * fr->n_case + w].sc[m] },
				.cnt = { cnt ? cnt[d] : NULL }, .n = 1 };
	return u;
}

static void metrics(const struct fault_run *fr, int m, uint32_t *const *cnt,
		    struct gh_metrics *out)
{
	struct gh_unit *u = units_of(fr, m, cnt);

	gh_metrics(u, (size_t)fr->n_dom * fr->n_case, out);
	free(u);
}

static double rel(double a, double b)
{
	return b > 0 ? a / b - 1 : NAN;
}

/* Replicates: [method][resample] max/mean; [comparison][metric][resample] differences. */
struct boot {
	double mm[GA_N_METHODS][BOOT];
	double d[2][3][BOOT];   /* adapt - EPLB, adapt - refit: max/mean, rows off GPU, off node */
};

static const int cmp_b[2] = { GA_EPLB, GA_REFIT };

static void diffs(const struct gh_metrics *a, const struct gh_metrics *b, double v[3])
{
	v[0] = a->mm - b->mm;
	v[1] = rel(a->rows_gpu, b->rows_gpu);
	v[2] = rel(a->rows_node, b->rows_node);
}

static void bootstrap(const struct fault_run *fr, const struct model *md, struct boot *bt)
{
	uint32_t *cnt[MAX_DOM];
	uint64_t seed = 20260601;

	for (uint32_t d = 0; d < md->n_dom; d++)
		if (!(cnt[d] = calloc(md->dom[d].half[1].n_seq, sizeof(uint32_t))))
			gf_die("bootstrap", NULL, -ENOMEM);
	for (uint32_t b = 0; b < BOOT; b++) {
		struct gh_metrics m[GA_N_METHODS];

		for (uint32_t d = 0; d < md->n_dom; d++) {
			uint32_t n = md->dom[d].half[1].n_seq;

			memset(cnt[d], 0, n * sizeof(uint32_t));
			for (uint32_t i = 0; i < n; i++)
				cnt[d][locus_splitmix_below(&seed, n)]++;
		}
		for (int x = 0; x < GA_N_METHODS; x++) {
			metrics(fr, x, cnt, &m[x]);
			bt->mm[x][b] = m[x].mm;
		}
		for (int k = 0; k < 2; k++) {
			double v[3];

			diffs(&m[GA_ADAPT], &m[cmp_b[k]], v);
			for (int j = 0; j < 3; j++)
				bt->d[k][j][b] = v[j];
		}
	}
	for (uint32_t d = 0; d < md->n_dom; d++)
		free(cnt[d]);
}

static void print_fault(const struct model *md, const struct gf_topo *t, int fault,
			const struct fault_run *fr, struct boot *bt)
{
	double cases = (double)fr->n_dom * fr->n_case, gb = md->expert_bytes / 1e9;
	struct gh_metrics m[GA_N_METHODS];

	printf("\n%s, %ux%u, %s (mean over %u %s x %u domain%s)\n", md->name, t->nodes, t->gpus,
	       ga_fault_name[fault], fr->n_case,
	       fault == GA_RANK_LOST || fault == GA_RANK_BACK ? "ranks" : "nodes", fr->n_dom,
	       fr->n_dom > 1 ? "s" : "");
	printf("%-18s %5s %24s %8s %8s %7s %7s %6s %6s %6s %15s\n", "method", "slots",
	       "busiest/mean [95%]", "off GPU", "off node", "masked", "gained", "stor.", "same",
	       "other", "GB x-node h/p");
	for (int x = 0; x < GA_N_METHODS; x++) {
		double mv[6] = { 0 }, lo, hi;
		uint32_t slots = 0;

		metrics(fr, x, NULL, &m[x]);
		gh_interval_bc(m[x].mm, bt->mm[x], BOOT, &lo, &hi);
		for (uint32_t i = 0; i < fr->n_dom * fr->n_case; i++) {
			const struct ga_moves *v = &fr->cases[i].mv[x];

			mv[0] += v->gained / cases;
			mv[1] += v->storage / cases;
			mv[2] += v->same_node / cases;
			mv[3] += v->other_node / cases;
			mv[4] += v->primary_cross / cases;
			slots = LOCUS_MAX(slots, fr->cases[i].slots[x]);
		}
		printf("%-18s %5u %7.3f [%.3f, %.3f] %8.3f %8.3f %6.2f%% %7.1f %6.1f %6.1f %6.1f "
		       "%7.2f/%-7.2f\n", ga_method_name[x], slots, m[x].mm, lo, hi, m[x].rows_gpu,
		       m[x].rows_node, 100 * m[x].masked, mv[0], mv[1], mv[2], mv[3], mv[3] * gb,
		       mv[4] * gb);
	}
	for (int k = 0; k < 2; k++) {
		double v[3];

		diffs(&m[GA_ADAPT], &m[cmp_b[k]], v);
		printf("  adapt auto - %-7s busiest/mean", k ? "refit" : "EPLB");
		gh_print_interval(v[0], bt->d[k][0], BOOT, 0);
		printf("  off GPU");
		gh_print_interval(v[1], bt->d[k][1], BOOT, 1);
		printf("  off node");
		gh_print_interval(v[2], bt->d[k][2], BOOT, 1);
		printf("\n");
	}
}

static void run_model(const struct model *md)
{
	for (size_t ti = 0; ti < N_TOPO; ti++) {
		const struct gf_topo *t = &topos[ti];
		struct ga_fits *fits = calloc(md->n_dom, sizeof(*fits));

		if (!fits)
			gf_die("fits", NULL, -ENOMEM);
		for (uint32_t d = 0; d < md->n_dom; d++)
			ga_fits_init(&fits[d], t, &md->dom[d]);
		for (int fault = 0; fault < GA_N_FAULTS; fault++) {
			struct fault_run fr = { .n_dom = md->n_dom, .n_case = ga_fault_cases(t, fault) };
			struct boot *bt;

			if (!fr.n_case)
				continue;
			fr.cases = calloc((size_t)fr.n_dom * fr.n_case, sizeof(*fr.cases));
			bt = malloc(sizeof(*bt));
			if (!fr.cases || !bt)
				gf_die("cases", NULL, -ENOMEM);
			for (uint32_t d = 0; d < fr.n_dom; d++)
				for (uint32_t w = 0; w < fr.n_case; w++)
					ga_case_run(&fits[d], fault, w, &fr.cases[d * fr.n_case + w]);
			bootstrap(&fr, md, bt);
			print_fault(md, t, fault, &fr, bt);
			fflush(stdout);
			for (uint32_t i = 0; i < fr.n_dom * fr.n_case; i++)
				ga_case_free(&fr.cases[i]);
			free(fr.cases);
			free(bt);
		}
		for (uint32_t d = 0; d < md->n_dom; d++)
			ga_fits_free(&fits[d]);
		free(fits);
	}
}

int main(int argc, char **argv)
{
	static struct model esft = {
		.name = "ESFT-vanilla-lite", .n_dom = MAX_DOM,
		/* DeepSeek-V2-Lite: hidden 2048 x moe_intermediate 1408 x 3 matrices, bf16 */
		.expert_bytes = 2048.0 * 1408 * 3 * 2,
	};
	static struct model oss = {
		.name = "gpt-oss-20b", .n_dom = 1,
		/* hidden 2880 x intermediate 2880 x 3 matrices, MXFP4: 4 bits + a byte per 32 */
		.expert_bytes = 2880.0 * 2880 * 3 * 17 / 32,
	};
	static char path[4200];
	struct locus_error err = { 0 };
	const char *root;

	(void)argc;
	locus_data_find_root(argv[0]);
	root = locus_data_dir();
	printf("The recovery fit held out: GRACE fitted on the calibration half (locusctl fit "
	       "--grace),\nEPLB with 1 group; a rank or node lost, then back; scored on the "
	       "held-out half.\nslots: copies on the fullest GPU; gained: copies a live rank "
	       "loads, by source (storage,\nsame node, other node); GB x-node: weights across "
	       "nodes from the nearest holder / from\neach expert's old primary. Rows per "
	       "token-layer; intervals 95 %% bootstrap over held-out\nsequences (%d resamples), "
	       "percentiles shifted by the bootstrap's bias.\n", BOOT);
	snprintf(path, sizeof(path), "%s/esft/results/expert_scores", root);
	if (!locus_data_absent("grace_adapt_figures", path, "ESFT")) {
		for (uint32_t d = 0; d < esft.n_dom; d++)
			gf_domain_load(root, locus_trace_esft_domains[d], &esft.dom[d]);
		run_model(&esft);
		for (uint32_t d = 0; d < esft.n_dom; d++)
			gf_domain_free(&esft.dom[d]);
	}
	if (!locus_data_absent("grace_adapt_figures", locus_data_gptoss_path(), "gpt-oss-20b")) {
		struct locus_trace *t;
		int rc = locus_trace_load(locus_data_gptoss_path(), NULL, &t, &err);

		if (rc)
			gf_die(locus_data_gptoss_path(), &err, rc);
		gf_domain_split(t, 1, &oss.dom[0]);
		run_model(&oss);
		gf_domain_free(&oss.dom[0]);
	}
	return 0;
}
