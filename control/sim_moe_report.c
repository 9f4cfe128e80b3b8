// SPDX-License-Identifier: MIT
/*
 * locusctl simulate --moe's report: per set (calibration, held-out),
 * topology and placement the mean MoE-layer time over the steps with a 95 %
 * interval by random groups (the set's requests split at random into G
 * groups, each group's tokens timed on their own; the interval is the point
 * +- t(G-1) x the groups' standard deviation / sqrt(G); the differences
 * are paired, the same groups for every placement), its all-to-all and
 * compute parts, rows per token-layer by tier and max/mean of GPU pairs.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_args.h"
#include "trace_json.h"
#include "sim_moe_ctl.h"

const char *const sim_moe_pl_name[MOE_N_PL] = { "uniform", "EPLB", "GRACE" };
static const char *const set_name[MOE_N_SETS] = { "calibration", "held-out" };
static const char *const set_key[MOE_N_SETS] = { "calibration", "held_out" };

/* The paired comparisons: a relative to b. */
static const struct {
	int a, b;
} cmp[MOE_N_CMP] = { { MOE_GRACE, MOE_EPLB }, { MOE_GRACE, MOE_UNIFORM },
		     { MOE_EPLB, MOE_UNIFORM } };

struct cell {
	double layer[MOE_N_PL], lo[MOE_N_PL], hi[MOE_N_PL];  /* us */
	double a2a[MOE_N_PL], comp[MOE_N_PL];                 /* us */
	double d[MOE_N_CMP], dlo[MOE_N_CMP], dhi[MOE_N_CMP];  /* relative */
};

static double mean(const double *v, uint32_t n)
{
	double s = 0;

	for (uint32_t i = 0; i < n; i++)
		s += v[i];
	return n ? s / n : 0;
}

/* Student's t, two-sided 95 %, for df 1..30 (beyond: 1.96 is within 2 %). */
static double t975(uint32_t df)
{
	static const double t[30] = { 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
				      2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
				      2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
				      2.060, 2.056, 2.052, 2.048, 2.045, 2.042 };

	return df >= 1 && df <= 30 ? t[df - 1] : 1.960;
}

/* point +- t x sd(x) / sqrt(n) into lo, hi; NAN when n < 2. */
static void interval(double point, const double *x, uint32_t n, double *lo, double *hi)
{
	double m = mean(x, n), v = 0;

	if (n < 2) {
		*lo = *hi = NAN;
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		v += (x[i] - m) * (x[i] - m) / (n - 1);
	*lo = point - t975(n - 1) * sqrt(v / n);
	*hi = point + t975(n - 1) * sqrt(v / n);
}

/* Points and intervals of one (topology, set). */
static void cell_of(const struct moe_setup *su, const struct moe_run *run, int set,
		    struct cell *c)
{
	const struct locus_sim_moe_result *res = run->res[set];
	uint32_t S = res[0].n_steps, G = su->n_groups[set];
	double x[MOE_MAX_GROUPS];

	for (int p = 0; p < MOE_N_PL; p++) {
		c->layer[p] = mean(res[p].layer_s, S) * 1e6;
		c->a2a[p] = mean(res[p].a2a_s, S) * 1e6;
		c->comp[p] = mean(res[p].compute_s, S) * 1e6;
		for (uint32_t g = 0; g < G; g++)
			x[g] = run->grp[set][p][g] * 1e6;
		interval(c->layer[p], x, G, &c->lo[p], &c->hi[p]);
	}
	for (int i = 0; i < MOE_N_CMP; i++) {
		c->d[i] = c->layer[cmp[i].a] / c->layer[cmp[i].b] - 1;
		for (uint32_t g = 0; g < G; g++)
			x[g] = run->grp[set][cmp[i].a][g] / run->grp[set][cmp[i].b][g] - 1;
		interval(c->d[i], x, G, &c->dlo[i], &c->dhi[i]);
	}
}

/* JSON has no NaN: null for a missing interval. */
static void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.17g", v);
	else
		fprintf(f, "null");
}


static void table_head(FILE *f, const struct moe_setup *su)
{
	const struct locus_sim_moe_hw *h = &su->hw;

	fprintf(f, "simulate --moe: model %s on %s, fabric %s: %.4g GB/s in a node, %.4g GB/s "
		"between nodes (per GPU and direction)\n", su->model, su->gpu, su->fabric,
		h->intra_bytes_per_s / 1e9, h->inter_bytes_per_s / 1e9);
	fprintf(f, "  placements fitted on the calibration requests (%s); %u tokens per step, "
		"seed %" PRIu64 "\n", su->fit_trace ? su->fit_trace : "the even-numbered requests "
		"of --trace", su->tokens_per_step, su->seed);
	for (int s = 0; s < MOE_N_SETS; s++)
		fprintf(f, "  %-11s %u requests, %u tokens, %u steps; %u random groups for the "
			"interval\n", set_name[s], su->n_req[s], su->n_tok[s],
			su->n_tok[s] / su->tokens_per_step, su->n_groups[s]);
	fprintf(f, "  layer = 2 x (%.4g us + max over GPUs of rows x %.0f B / tier bandwidth) + "
		"max over GPUs of\n          max(pairs x %.4g MFLOP / %.4g TFLOP/s, expert copies x "
		"%.0f B / %.4g GB/s)\n", h->latency_s * 1e6, h->row_bytes,
		h->flops_per_pair / 1e6, h->gpu_flops / 1e12, h->expert_bytes,
		h->hbm_bytes_per_s / 1e9);
	fprintf(f, "%-11s %-5s %-8s %10s %21s %9s %10s %9s %9s %8s\n", "set", "topo",
		"placement", "layer_us", "[95% interval]", "a2a_us", "compute_us", "rows/GPU",
		"rows/node", "max/mean");
}

static void table_rows(FILE *f, const struct moe_run *r, int s, const struct cell *c)
{
	for (int p = 0; p < MOE_N_PL; p++) {
		const struct locus_sim_moe_result *x = &r->res[s][p];

		fprintf(f, "%-11s %ux%-3u %-8s %10.3f [%8.3f, %8.3f] %9.3f %10.3f %9.3f %9.3f "
			"%8.3f\n", set_name[s], r->topo.nodes, r->topo.gpus, sim_moe_pl_name[p],
			c->layer[p], c->lo[p], c->hi[p], c->a2a[p], c->comp[p], x->rows_gpu,
			x->rows_node, x->load_mm);
	}
}

static void json_cell(FILE *f, const struct moe_run *r, int s, const struct cell *c)
{
	fprintf(f, "\"%s\":{\"placements\":[", set_key[s]);
	for (int p = 0; p < MOE_N_PL; p++) {
		const struct locus_sim_moe_result *x = &r->res[s][p];

		fprintf(f, "%s{\"name\":\"%s\",\"layer_us\":%.17g,\"layer_us_ci\":[", p ? "," : "",
			sim_moe_pl_name[p], c->layer[p]);
		json_num(f, c->lo[p]);
		fputc(',', f);
		json_num(f, c->hi[p]);
		fprintf(f, "],\"a2a_us\":%.17g,\"compute_us\":%.17g,\"rows_off_gpu\":%.17g,"
			"\"rows_off_node\":%.17g,\"load_max_mean\":%.17g,\"steps\":%u}",
			c->a2a[p], c->comp[p], x->rows_gpu, x->rows_node, x->load_mm, x->n_steps);
	}
	fprintf(f, "],\"differences\":[");
	for (int i = 0; i < MOE_N_CMP; i++) {
		fprintf(f, "%s{\"a\":\"%s\",\"b\":\"%s\",\"rel\":%.17g,\"ci\":[", i ? "," : "",
			sim_moe_pl_name[cmp[i].a], sim_moe_pl_name[cmp[i].b], c->d[i]);
		json_num(f, c->dlo[i]);
		fputc(',', f);
		json_num(f, c->dhi[i]);
		fprintf(f, "]}");
	}
	fprintf(f, "]}");
}

static void json_head(FILE *f, const struct moe_setup *su)
{
	const struct locus_sim_moe_hw *h = &su->hw;

	fprintf(f, "{\"mode\":\"moe\"");
	sim_json_field(f, "trace", su->trace);
	sim_json_field(f, "fit_trace", su->fit_trace);
	sim_json_field(f, "model", su->model);
	sim_json_field(f, "gpu", su->gpu);
	sim_json_field(f, "fabric", su->fabric);
	fprintf(f, ",\"n_layers\":%u,\"n_experts\":%u,\"k\":%u,\"tokens_per_step\":%u,"
		"\"seed\":%" PRIu64 ",", su->L, su->E, su->k, su->tokens_per_step, su->seed);
	fprintf(f, "\"layer_model\":{\"row_bytes\":%.17g,\"expert_bytes\":%.17g,"
		"\"flops_per_pair\":%.17g,\"gpu_flops\":%.17g,\"hbm_bytes_per_s\":%.17g,"
		"\"intra_bytes_per_s\":%.17g,\"inter_bytes_per_s\":%.17g,\"latency_us\":%.17g},",
		h->row_bytes, h->expert_bytes, h->flops_per_pair, h->gpu_flops,
		h->hbm_bytes_per_s, h->intra_bytes_per_s, h->inter_bytes_per_s,
		h->latency_s * 1e6);
	fprintf(f, "\"sets\":{");
	for (int s = 0; s < MOE_N_SETS; s++)
		fprintf(f, "%s\"%s\":{\"requests\":%u,\"tokens\":%u,\"groups\":%u}", s ? "," : "",
			set_key[s], su->n_req[s], su->n_tok[s], su->n_groups[s]);
	fprintf(f, "},\"topologies\":[");
}

void sim_moe_report(FILE *f, int json, const struct moe_setup *su, const struct moe_run *runs,
		    uint32_t n_runs)
{
	struct cell c[MOE_MAX_TOPOS][MOE_N_SETS];

	for (uint32_t i = 0; i < n_runs; i++)
		for (int s = 0; s < MOE_N_SETS; s++)
			cell_of(su, &runs[i], s, &c[i][s]);
	if (json) {
		json_head(f, su);
		for (uint32_t i = 0; i < n_runs; i++) {
			const struct moe_topo *t = &runs[i].topo;

			fprintf(f, "%s{\"topo\":\"%ux%u\",\"nodes\":%u,\"gpus_per_node\":%u,"
				"\"replica_budget\":%u,\"grace_fallback_layers\":%u,"
				"\"grace_replicas_per_layer\":%.17g,", i ? "," : "", t->nodes,
				t->gpus, t->nodes, t->gpus, t->budget, runs[i].grace_fallbacks,
				runs[i].grace_replicas);
			for (int s = 0; s < MOE_N_SETS; s++) {
				json_cell(f, &runs[i], s, &c[i][s]);
				fputc(s + 1 < MOE_N_SETS ? ',' : '}', f);
			}
		}
		fprintf(f, "]}\n");
		return;
	}
	table_head(f, su);
	for (int s = 0; s < MOE_N_SETS; s++)
		for (uint32_t i = 0; i < n_runs; i++)
			table_rows(f, &runs[i], s, &c[i][s]);
	fprintf(f, "layer time, paired [95%% interval: random groups of requests, each timed "
		"alone]:\n%-11s %-5s %28s %28s %28s\n", "set", "topo",
		"GRACE vs EPLB", "GRACE vs uniform", "EPLB vs uniform");
	for (int s = 0; s < MOE_N_SETS; s++)
		for (uint32_t i = 0; i < n_runs; i++) {
			fprintf(f, "%-11s %ux%-3u", set_name[s], runs[i].topo.nodes,
				runs[i].topo.gpus);
			for (int d = 0; d < MOE_N_CMP; d++)
				fprintf(f, "    %+6.1f%% [%+6.1f, %+6.1f]", 100 * c[i][s].d[d],
					100 * c[i][s].dlo[d], 100 * c[i][s].dhi[d]);
			fputc('\n', f);
		}
	for (uint32_t i = 0; i < n_runs; i++)
		fprintf(f, "  %ux%u: %u redundant slots per GPU for EPLB and GRACE; GRACE placed "
			"%.1f replicas per layer, %u of %u layers took EPLB's packing\n",
			runs[i].topo.nodes, runs[i].topo.gpus, runs[i].topo.budget,
			runs[i].grace_replicas, runs[i].grace_fallbacks, su->L);
	fprintf(f, "  times in us, the mean over steps of a step's mean layer; rows per "
		"token-layer; max/mean of the pairs GPUs serve in a (step, layer)\n");
}
