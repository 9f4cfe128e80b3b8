// SPDX-License-Identifier: MIT
/*
 * Online against online on real routing traces (../shared/data, or
 * $LOCUS_DATA_DIR): locusctl rebalance's loop and vLLM's EPLB, each
 * replayed in time order at vLLM's cadence with the same expert slots per
 * GPU, beside the placements never rebalanced (grace_online.h).
 *
 * Models with per-token routing: ESFT-vanilla-lite (DeepSeek-V2-Lite, the
 * four domains' sequences one after another) and gpt-oss-20b (decode
 * routing, the file's order). Neither trace has timestamps: file order is
 * taken as time, and both files are ordered by source (topic), so the
 * stream drifts; a shuffled order (a stationary mix) is replayed beside it.
 * Topologies 1x8 and 2x4. Per window after a rebalance: busiest GPU / mean
 * of the window's loads (mean over layers), token rows off the source GPU
 * and to other nodes per token-layer, and the copies each rebalance moves
 * ((GPU, expert) pairs gained) times one expert's weight bytes. 95 %
 * bootstrap intervals over windows, paired for locus against EPLB. A
 * diagnostic row re-runs the whole GRACE fit on each window (grouping too,
 * not what locusctl rebalance does): where it balances no better than
 * locus online, the loss is grouping itself, not a grouping gone stale.
 *
 *   grace_online_figures [--batch B] [--min-windows N] [--boot N] [--only MODEL]
 *                        [--per-window]
 * --per-window adds each window's figures for the two online methods.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_paths.h"
#include "grace_heldout.h"
#include "grace_online.h"
#include "locus_common.h"
#include "locus_trace.h"

static const struct gf_topo topos[] = { { 1, 8 }, { 2, 4 } };
#define N_TOPO (sizeof(topos) / sizeof(topos[0]))
#define MAX_TR LOCUS_TRACE_ESFT_DOMAINS
#define SHUFFLE_SEED 20261207u

struct model {
	const char *name, *key;
	uint32_t n_tr;
	struct locus_trace *tr[MAX_TR];
	double expert_bytes;   /* one routed expert's weights */
	const char *bytes_how;
};

struct opts {
	uint32_t batch, min_windows, boot, swaps;
	const char *only;
	int per_window;
};

static double rel(double a, double b)
{
	return b > 0 ? a / b : 0;
}

/* Bootstrap over windows: [method][metric][resample], and locus / EPLB paired. */
enum { MT_MM, MT_GPU, MT_NODE, MT_MOVES, MT_N };

static void bootstrap(const struct go_run *r, uint32_t boot, double *rep, double *pair)
{
	uint32_t n = r->n_windows, *idx = calloc(n, sizeof(uint32_t));
	uint64_t seed = 20260601;

	if (!idx)
		gf_die("bootstrap", NULL, -ENOMEM);
	for (uint32_t b = 0; b < boot; b++) {
		struct go_metrics m[GO_N_METHODS];

		for (uint32_t i = 0; i < n; i++)
			idx[i] = locus_splitmix_below(&seed, n);
		for (int x = 0; x < GO_N_METHODS; x++) {
			double *v = rep + ((size_t)x * MT_N) * boot;

			go_metrics_of(r->w[x], idx, n, &m[x]);
			v[MT_MM * boot + b] = m[x].mm;
			v[MT_GPU * boot + b] = m[x].rows_gpu;
			v[MT_NODE * boot + b] = m[x].rows_node;
			v[MT_MOVES * boot + b] = m[x].moves;
		}
		pair[0 * boot + b] = m[GO_LOCUS].mm - m[GO_EPLB].mm;
		pair[1 * boot + b] = rel(m[GO_LOCUS].rows_gpu, m[GO_EPLB].rows_gpu);
		pair[2 * boot + b] = rel(m[GO_LOCUS].rows_node, m[GO_EPLB].rows_node);
		pair[3 * boot + b] = m[GO_LOCUS].moves - m[GO_EPLB].moves;
	}
	free(idx);
}

/* " point [lo, hi]" with fmt for each of the three. */
static void interval(const char *fmt, double point, double *x, uint32_t n, double scale)
{
	double lo, hi;

	gh_interval_bc(point, x, n, &lo, &hi);
	printf(fmt, point * scale, lo * scale, hi * scale);
}

static void print_run(const struct model *md, const char *order, const struct gf_topo *t,
		      const struct go_run *r, const struct opts *o)
{
	double *rep = malloc(sizeof(double) * GO_N_METHODS * MT_N * o->boot);
	double *pair = malloc(sizeof(double) * 4 * o->boot);
	double gb = md->expert_bytes / 1e9;
	struct go_metrics m[GO_N_METHODS];
	uint32_t pushes = 0;

	if (!rep || !pair)
		gf_die("bootstrap", NULL, -ENOMEM);
	bootstrap(r, o->boot, rep, pair);
	for (uint32_t j = 0; j < r->n_windows; j++)
		pushes += r->w[GO_LOCUS][j].pushed;
	printf("\n%s, %s, %ux%u GPUs (rows: %u windows)\n", md->name, order, t->nodes, t->gpus,
	       r->n_windows);
	printf("%-19s %5s %25s %25s %25s %22s %14s\n", "method", "slots", "busiest/mean [95%]",
	       "rows off GPU [95%]", "rows off node [95%]", "copies moved/rebal.", "GB/rebalance");
	for (int x = 0; x < GO_N_METHODS; x++) {
		double *v = rep + ((size_t)x * MT_N) * o->boot;

		go_metrics_of(r->w[x], NULL, r->n_windows, &m[x]);
		printf("%-19s %5u", go_method_name[x], r->slots[x]);
		interval(" %7.3f [%.3f, %.3f]", m[x].mm, v + MT_MM * o->boot, o->boot, 1);
		interval(" %7.3f [%.3f, %.3f]", m[x].rows_gpu, v + MT_GPU * o->boot, o->boot, 1);
		if (t->nodes > 1)
			interval(" %7.3f [%.3f, %.3f]", m[x].rows_node, v + MT_NODE * o->boot,
				 o->boot, 1);
		else
			printf(" %25s", "(one node)");
		if (x == GO_LOCUS || x == GO_EPLB || x == GO_REFIT) {
			interval(" %6.1f [%.1f, %.1f]", m[x].moves, v + MT_MOVES * o->boot,
				 o->boot, 1);
			printf(" %14.2f\n", m[x].moves * gb);
		} else {
			printf(" %22s %14s\n", "(never)", "0");
		}
	}
	printf("  locus pushed at %u of %u rebalances; locus vs EPLB, paired: busiest/mean",
	       pushes, r->n_windows);
	interval(" %+.3f [%+.3f, %+.3f]", m[GO_LOCUS].mm - m[GO_EPLB].mm, pair, o->boot, 1);
	printf(", rows off GPU");
	interval(" %.2fx [%.2f, %.2f]", rel(m[GO_LOCUS].rows_gpu, m[GO_EPLB].rows_gpu),
		 pair + o->boot, o->boot, 1);
	if (t->nodes > 1) {
		printf(", off node");
		interval(" %.2fx [%.2f, %.2f]", rel(m[GO_LOCUS].rows_node, m[GO_EPLB].rows_node),
			 pair + 2 * o->boot, o->boot, 1);
	}
	printf("\n  busiest/mean on the window each rebalance read (in sample): locus %.3f, "
	       "EPLB %.3f\n", m[GO_LOCUS].mm_fit, m[GO_EPLB].mm_fit);
	if (o->per_window) {
		printf("  %6s %21s %21s %21s %15s\n", "window", "busiest/mean l/E",
		       "in sample l/E", "rows off GPU l/E", "moved l/E");
		for (uint32_t j = 0; j < r->n_windows; j++) {
			const struct go_window *a = &r->w[GO_LOCUS][j], *b = &r->w[GO_EPLB][j];

			printf("  %6u %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %6u%c %7u\n", j,
			       a->mm, b->mm, a->mm_fit, b->mm_fit, a->rows_gpu / a->tl,
			       b->rows_gpu / b->tl, a->moves, a->pushed ? ' ' : '*', b->moves);
		}
		printf("  (l: locus online, E: EPLB online; * locus kept its table)\n");
	}
	free(pair);
	free(rep);
}

static void run_model(const struct model *md, const struct opts *o)
{
	for (int shuffle = 0; shuffle < 2; shuffle++) {
		const char *order = shuffle ? "shuffled order" :
				    md->n_tr > 1 ? "file order (domains one after another)" :
						   "file order";
		struct go_stream s;
		struct go_cadence c;

		go_stream_build(md->tr, md->n_tr, shuffle, SHUFFLE_SEED, o->batch, &s);
		go_cadence_of(s.n_steps, o->min_windows, &c);
		c.swaps = o->swaps;
		printf("\n%s, %s: %u requests, %u tokens, %u steps of up to %u running requests\n",
		       md->name, order, s.n_req, s.n_tok, s.n_steps, s.batch);
		if (!c.n_windows) {
			printf("  too short for %u windows at any cadence: skipped\n",
			       o->min_windows);
			go_stream_free(&s);
			continue;
		}
		if (c.scale < 1)
			printf("  too short for vLLM's cadence (%u-step window, a rebalance every "
			       "%u steps,\n  %u windows need %u steps): cadence scaled by %.4f to a "
			       "%u-step window (~%.0f tokens),\n  a rebalance every %u steps; %u "
			       "windows scored, %u tail steps dropped\n", GO_VLLM_WINDOW,
			       GO_VLLM_INTERVAL, o->min_windows,
			       GO_VLLM_INTERVAL * (o->min_windows + 1), c.scale, c.window,
			       (double)s.n_tok * c.window / s.n_steps, c.interval, c.n_windows,
			       s.n_steps - (c.n_windows + 1) * c.interval);
		else
			printf("  vLLM's cadence: a %u-step window, a rebalance every %u steps; "
			       "%u windows scored\n", c.window, c.interval, c.n_windows);
		for (size_t ti = 0; ti < N_TOPO; ti++) {
			struct go_run r;

			go_replay(&s, &topos[ti], &c, 1, &r);
			print_run(md, order, &topos[ti], &r, o);
			fflush(stdout);
			go_run_free(&r);
		}
		go_stream_free(&s);
	}
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *v)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || x < lo || x > hi)
		return -1;
	*v = (uint32_t)x;
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: grace_online_figures [--batch B (1..4096, 64)] "
		"[--min-windows N (2..1000, 10)] [--boot N (100..100000, 1000)] "
		"[--only esft|gptoss] [--per-window] [--swaps N (0..64, %u)]\n",
		LOCUS_GRACEFIT_SWAPS);
	return 2;
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "batch", required_argument, NULL, 'b' },
		{ "min-windows", required_argument, NULL, 'w' },
		{ "boot", required_argument, NULL, 'n' },
		{ "only", required_argument, NULL, 'o' },
		{ "per-window", no_argument, NULL, 'p' },
		{ "swaps", required_argument, NULL, 'x' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct opts){ .batch = 64, .min_windows = 10, .boot = 1000,
			    .swaps = LOCUS_GRACEFIT_SWAPS };
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		int bad = 0;

		switch (c) {
		case 'b': bad = parse_u32(optarg, 1, 4096, &o->batch); break;
		case 'w': bad = parse_u32(optarg, 2, 1000, &o->min_windows); break;
		case 'n': bad = parse_u32(optarg, 100, 100000, &o->boot); break;
		case 'p': o->per_window = 1; break;
		case 'x': bad = parse_u32(optarg, 0, 64, &o->swaps); break;
		case 'o':
			o->only = optarg;
			bad = strcmp(optarg, "esft") && strcmp(optarg, "gptoss");
			break;
		default: bad = 1;
		}
		if (bad) {
			if (c == 'b' || c == 'w' || c == 'n' || c == 'o' || c == 'x')
				fprintf(stderr, "grace_online_figures: bad value '%s'\n", optarg);
			return usage();
		}
	}
	return optind < argc ? usage() : 0;
}

int main(int argc, char **argv)
{
	static struct model esft = {
		.name = "ESFT-vanilla-lite", .key = "esft", .n_tr = MAX_TR,
		.expert_bytes = 2048.0 * 1408 * 3 * 2,
		.bytes_how = "DeepSeek-V2-Lite: hidden 2048 x moe_intermediate 1408 x 3 "
			     "matrices, bf16",
	};
	static struct model oss = {
		.name = "gpt-oss-20b", .key = "gptoss", .n_tr = 1,
		.expert_bytes = 2880.0 * 2880 * 3 * 17 / 32,
		.bytes_how = "hidden 2880 x intermediate 2880 x 3 matrices, MXFP4 (4 bits + "
			     "a byte of scale per 32)",
	};
	struct locus_error err = { 0 };
	static char path[4200];
	const char *root;
	struct opts o;
	int rc;

	if ((rc = parse(argc, argv, &o)))
		return rc;
	locus_data_find_root(argv[0]);
	root = locus_data_dir();
	printf("Online against online: locusctl rebalance (--window 1 --every 3, threshold "
	       "0.05, --swaps %u\nwith the first interval's co-activation) and vLLM's EPLB\n"
	       "(1 group; EPLBConfig window_size %u, step_interval %u), "
	       "same expert slots per GPU,\nreplayed in time order; a step is one forward pass "
	       "of up to %u running requests\n(continuous batching). Both start from a "
	       "placement fitted on the first interval;\nwindows are the intervals after each "
	       "rebalance. busiest/mean: the window's busiest GPU\nload over the mean, mean over "
	       "layers; rows per token-layer; moved: (GPU, expert) copies\ngained. Intervals: "
	       "95 %% bootstrap over windows (%u resamples), percentiles shifted\nby the "
	       "bootstrap's bias; paired for locus vs EPLB. GRACE refit (diag.): the whole fit "
	       "(grouping\ntoo) re-run on each window, not what locusctl rebalance does.\nNot replayed: "
	       "OLMoE, Mixtral, Qwen3 and GLM (olmoe/, qwen3_coact/) hold aggregated\nloads, "
	       "no per-token routing in an order.\n", o.swaps,
	       GO_VLLM_WINDOW,
	       GO_VLLM_INTERVAL, o.batch, o.boot);
	snprintf(path, sizeof(path), "%s/esft/results/expert_scores", root);
	if ((!o.only || !strcmp(o.only, esft.key)) &&
	    !locus_data_absent("grace_online_figures", path, "ESFT")) {
		for (uint32_t d = 0; d < esft.n_tr; d++) {
			char dir[4300];

			snprintf(dir, sizeof(dir), "%s/%s", path, locus_trace_esft_domains[d]);
			rc = locus_trace_load_esft_flags(dir, locus_trace_esft_domains[d], 26, 6, 64,
							 LOCUS_TRACE_ESFT_GATE_ORDER, &esft.tr[d],
							 &err);
			if (rc)
				gf_die(dir, &err, rc);
		}
		printf("\nexpert weights assumed: %s: %.1f MB\n", esft.bytes_how,
		       esft.expert_bytes / 1e6);
		run_model(&esft, &o);
		for (uint32_t d = 0; d < esft.n_tr; d++)
			locus_trace_free(esft.tr[d]);
	}
	if ((!o.only || !strcmp(o.only, oss.key)) &&
	    !locus_data_absent("grace_online_figures", locus_data_gptoss_path(), "gpt-oss-20b")) {
		rc = locus_trace_load(locus_data_gptoss_path(), NULL, &oss.tr[0], &err);
		if (rc)
			gf_die(locus_data_gptoss_path(), &err, rc);
		printf("\nexpert weights assumed: %s: %.1f MB\n", oss.bytes_how,
		       oss.expert_bytes / 1e6);
		run_model(&oss, &o);
		locus_trace_free(oss.tr[0]);
	}
	return 0;
}
