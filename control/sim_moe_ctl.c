// SPDX-License-Identifier: MIT
/*
 * locusctl simulate --moe: placements fitted on the calibration requests
 * (uniform contiguous, EPLB, GRACE: the fit locusctl fit --grace runs, the
 * same memory for EPLB and GRACE), every one timed on the calibration and
 * on the held-out requests by locus_sim_moe_run, for each topology.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_grace_plan.h"
#include "locus_gracefit.h"
#include "locus_sim.h"
#include "locus_trace.h"
#include "locusctl.h"
#include "sim_args.h"
#include "sim_moe_ctl.h"

#define FIT_KEEP 65536u /* tokens per layer kept for the layer objective, as locusctl fit --grace */

struct moe_opts {
	struct sim_common c;           /* --trace, --fit-trace, --model, --gpu, --seed, ... */
	const char *fabric;
	struct moe_topo topos[MOE_MAX_TOPOS];
	uint32_t n_topos;
	uint64_t tokens_per_step, groups, budget;
	double tflops, hbm_gbps, intra_gbps, inter_gbps, latency_us;
};

#define CMD "locusctl simulate --moe"

static int usage_err(const char *fmt, const char *arg)
{
	return sim_usage_err(CMD, fmt, arg);
}

/* One of "1x8,2x4,4x8": nodes x GPUs per node, up to MOE_MAX_TOPOS, at most 4096 GPUs each. */
static int add_topo(const char *tok, void *arg)
{
	struct moe_opts *o = arg;
	unsigned a, b;
	int used = 0;

	if (o->n_topos == MOE_MAX_TOPOS || sscanf(tok, "%ux%u%n", &a, &b, &used) != 2 ||
	    tok[used] || !a || !b || a > 4096 || b > 4096 || a * b > 4096)
		return -1;
	o->topos[o->n_topos++] = (struct moe_topo){ .nodes = a, .gpus = b };
	return 0;
}

static int parse_topos(const char *s, struct moe_opts *o)
{
	o->n_topos = 0;
	return sim_split_list(s, 256, add_topo, o);
}

enum {
	O_MOE = 256, O_TRACE, O_FIT, O_TOPO, O_STEP, O_MODEL, O_GPU, O_FABRIC, O_INTRA, O_INTER,
	O_TFLOPS, O_HBM, O_LAT, O_HIDDEN, O_INTERM, O_DTYPE, O_BUDGET, O_SEED, O_BOOT, O_JSON,
	O_ALLOW,
};

static const struct option moe_lo[] = {
	{ "moe", no_argument, NULL, O_MOE },
	{ "trace", required_argument, NULL, O_TRACE },
	{ "fit-trace", required_argument, NULL, O_FIT },
	{ "topo", required_argument, NULL, O_TOPO },
	{ "tokens-per-step", required_argument, NULL, O_STEP },
	{ "model", required_argument, NULL, O_MODEL },
	{ "gpu", required_argument, NULL, O_GPU },
	{ "fabric", required_argument, NULL, O_FABRIC },
	{ "intra-gbps", required_argument, NULL, O_INTRA },
	{ "inter-gbps", required_argument, NULL, O_INTER },
	{ "tflops", required_argument, NULL, O_TFLOPS },
	{ "hbm-gbps", required_argument, NULL, O_HBM },
	{ "latency-us", required_argument, NULL, O_LAT },
	{ "hidden", required_argument, NULL, O_HIDDEN },
	{ "moe-intermediate", required_argument, NULL, O_INTERM },
	{ "dtype-bytes", required_argument, NULL, O_DTYPE },
	{ "replica-budget", required_argument, NULL, O_BUDGET },
	{ "seed", required_argument, NULL, O_SEED },
	{ "groups", required_argument, NULL, O_BOOT },
	{ "json", no_argument, NULL, O_JSON },
	{ "allow-shape-mismatch", no_argument, NULL, O_ALLOW },
	{ NULL, 0, NULL, 0 },
};

/* A positive double option in GB/s, TFLOP/s or us; NAN until given. */
static int opt_double(const char *a, double min, double *v, const char *what)
{
	if (sim_parse_double(a, min, 1e9, v))
		return usage_err(what, a);
	return 0;
}

static int parse_opts(int argc, char **argv, struct moe_opts *o)
{
	int c, li = -1, rc = 0;

	*o = (struct moe_opts){ .c = SIM_COMMON_DEFAULTS, .tokens_per_step = 128, .groups = 10,
				.tflops = NAN, .hbm_gbps = NAN, .intra_gbps = NAN,
				.inter_gbps = NAN, .latency_us = 0, .n_topos = 3,
				.topos = { { 1, 8, 0 }, { 2, 4, 0 }, { 4, 8, 0 } } };
	optind = 1;
	opterr = 0;
	while (!rc && (c = getopt_long(argc, argv, "", moe_lo, &li)) != -1) {
		const char *a = optarg;

		switch (c) {
		case O_MOE:
			break;
		case O_FABRIC:
			o->fabric = a;
			break;
		case O_TOPO:
			if (parse_topos(a, o))
				return usage_err("--topo '%s': want up to 8 of NODESxGPUS, e.g. "
						 "1x8,2x4,4x8 (at most 4096 GPUs)", a);
			break;
		case O_STEP:
			if (locusctl_parse_u64(a, 1u << 20, &o->tokens_per_step) ||
			    !o->tokens_per_step)
				return usage_err("--tokens-per-step '%s': want 1..1048576", a);
			break;
		case O_BUDGET:
			if (locusctl_parse_u64(a, 63, &o->budget) || !o->budget)
				return usage_err("--replica-budget '%s': want 1..63 per GPU", a);
			break;
		case O_BOOT:
			if (locusctl_parse_u64(a, MOE_MAX_GROUPS, &o->groups) || o->groups < 2)
				return usage_err("--groups '%s': want 2..64 random groups of requests",
						 a);
			break;
		case O_INTRA:
			rc = opt_double(a, 1e-3, &o->intra_gbps,
					"--intra-gbps '%s': want GB/s in [0.001, 1e9]");
			break;
		case O_INTER:
			rc = opt_double(a, 1e-3, &o->inter_gbps,
					"--inter-gbps '%s': want GB/s in [0.001, 1e9]");
			break;
		case O_TFLOPS:
			rc = opt_double(a, 1e-3, &o->tflops,
					"--tflops '%s': want TFLOP/s in [0.001, 1e9]");
			break;
		case O_HBM:
			rc = opt_double(a, 1e-3, &o->hbm_gbps,
					"--hbm-gbps '%s': want GB/s in [0.001, 1e9]");
			break;
		case O_LAT:
			rc = opt_double(a, 0, &o->latency_us,
					"--latency-us '%s': want microseconds in [0, 1e9]");
			break;
		default:
			/* the options both commands take, by name */
			if (sim_common_getopt(CMD, c, li < 0 ? NULL : moe_lo[li].name, a, argv, &o->c))
				return 2;
		}
		li = -1;
	}
	if (rc)
		return rc;
	if (optind < argc)
		return usage_err("unexpected argument '%s'", argv[optind]);
	if (!o->c.trace)
		return usage_err("%s", "--trace FILE is required");
	return 0;
}

/* The layer model from presets and overrides; 0 or an exit status. */
static int layer_model(const struct moe_opts *o, const struct locus_trace *t,
		       struct moe_setup *su)
{
	const struct locus_sim_fabric *fb;
	const struct locus_sim_gpu *pg;
	struct locus_sim_model m;
	int rc = sim_model_resolve(CMD, o->c.model, o->c.gpu, t, o->c.allow_shape,
				   " (--allow-shape-mismatch prices it anyway)", &o->c.ov, &m, &pg);

	if (rc)
		return rc;
	su->fabric = o->fabric ? o->fabric : pg->fabric;
	fb = locus_sim_fabric_find(su->fabric);
	if (!fb) {
		fprintf(stderr, CMD ": --fabric '%s': want one of %s\n", su->fabric,
			locus_sim_fabric_names());
		return 2;
	}
	su->hw = (struct locus_sim_moe_hw){
		.row_bytes = (double)m.hidden * m.dtype_bytes,
		.expert_bytes = locus_sim_expert_bytes(&m),
		/* gate and up (hidden -> inter), down (inter -> hidden): 2 FLOPs per MAC */
		.flops_per_pair = 6.0 * m.hidden * m.moe_intermediate,
		.gpu_flops = isnan(o->tflops) ? pg->bf16_flops : o->tflops * 1e12,
		.hbm_bytes_per_s = isnan(o->hbm_gbps) ? pg->hbm_bytes_per_s : o->hbm_gbps * 1e9,
		.intra_bytes_per_s = isnan(o->intra_gbps) ? fb->intra_bytes_per_s :
							    o->intra_gbps * 1e9,
		.inter_bytes_per_s = isnan(o->inter_gbps) ? fb->inter_bytes_per_s :
							    o->inter_gbps * 1e9,
		.latency_s = o->latency_us * 1e-6,
	};
	return 0;
}

/* The requests of a set: all of t, or (split) the even- or odd-numbered ones. */
static int in_set(uint32_t r, int split, int set)
{
	return !split || (int)(r % 2) == set;
}

/*
 * Every prompt and generated token of a set's requests, [n_tok][L][k];
 * request i of the set holds tokens (*tok0)[i] .. (*tok0)[i+1]-1.
 */
static int set_tokens(const struct locus_trace *t, int split, int set, uint16_t **ids,
		      uint32_t **tok0, uint32_t *n_tok, uint32_t *n_req)
{
	size_t per = (size_t)t->n_layers * t->k, at = 0, n = 0;

	*n_req = 0;
	for (uint32_t r = 0; r < t->n_requests; r++)
		if (in_set(r, split, set)) {
			n += t->reqs[r].prompt_len + t->reqs[r].gen_len;
			(*n_req)++;
		}
	if (n > UINT32_MAX / 2)
		return -LOCUS_ERANGE;
	*ids = malloc((n ? n : 1) * per * sizeof(uint16_t));
	*tok0 = calloc(*n_req + 1, sizeof(uint32_t));
	if (!*ids || !*tok0)
		return -ENOMEM;
	for (uint32_t r = 0, i = 0; r < t->n_requests; r++) {
		const struct locus_trace_req *q = &t->reqs[r];

		if (!in_set(r, split, set))
			continue;
		(*tok0)[i++] = (uint32_t)at;
		memcpy(*ids + at * per, q->prompt, q->prompt_len * per * sizeof(uint16_t));
		at += q->prompt_len;
		if (q->gen_len)
			memcpy(*ids + at * per, q->gen, q->gen_len * per * sizeof(uint16_t));
		at += q->gen_len;
	}
	(*tok0)[*n_req] = (uint32_t)n;
	*n_tok = (uint32_t)n;
	return 0;
}

/* A seeded permutation of 0..n-1 (splitmix64, Fisher-Yates). */
static void permute(uint32_t *v, uint32_t n, uint64_t seed)
{
	uint64_t x = seed ^ 0x6a09e667f3bcc909ull;

	for (uint32_t i = 0; i < n; i++)
		v[i] = i;
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = locus_splitmix_below(&x, i), tmp;

		tmp = v[i - 1];
		v[i - 1] = v[j];
		v[j] = tmp;
	}
}

struct sets {
	struct locus_sim_moe_tokens tok[MOE_N_SETS];
	uint32_t *order[MOE_N_SETS];
	uint32_t *tok0[MOE_N_SETS];   /* [n_req + 1] each request's first token */
	uint32_t n_req[MOE_N_SETS];
	/* random groups: group g's tokens are grp_order[grp_start[g] .. grp_start[g+1]-1] */
	uint32_t *grp_order[MOE_N_SETS];
	uint32_t grp_start[MOE_N_SETS][MOE_MAX_GROUPS + 1];
};

/* Time placement p (GRACE map m, or EPLB e) on both sets into run->res[*][p]. */
static int time_placement(const struct moe_setup *su, const struct sets *s,
			  struct moe_run *run, int p, const struct locus_grace_map *m,
			  struct locus_gracefit_eplb *e, struct locus_error *err)
{
	for (int set = 0; set < MOE_N_SETS; set++) {
		struct locus_sim_moe_cfg cfg = {
			.tok = &s->tok[set], .order = s->order[set],
			.tokens_per_step = su->tokens_per_step, .n_nodes = run->topo.nodes,
			.gpus_per_node = run->topo.gpus, .hw = su->hw,
		};
		struct locus_sim_moe_grace *g = NULL;
		uint32_t N = run->topo.nodes * run->topo.gpus;
		int rc;

		if (m) {
			/* fresh round-robin state per set: the sets do not depend on each other */
			rc = locus_sim_moe_grace_init(&g, m, su->tokens_per_step / N + 1, su->k,
						      err);
			if (rc)
				return rc;
			cfg.route = locus_sim_moe_route_grace;
			cfg.ctx = g;
		} else {
			cfg.route = locus_sim_moe_route_eplb;
			cfg.ctx = e;
		}
		rc = locus_sim_moe_run(&cfg, &run->res[set][p], err);
		/* each random group timed on its own, with fresh round-robin state */
		for (uint32_t gi = 0; !rc && gi < su->n_groups[set]; gi++) {
			struct locus_sim_moe_result r;

			if (m) {
				locus_sim_moe_grace_free(g);
				rc = locus_sim_moe_grace_init(&g, m, su->tokens_per_step / N + 1,
							      su->k, err);
				cfg.ctx = g;
			}
			cfg.order = s->grp_order[set] + s->grp_start[set][gi];
			cfg.n_order = s->grp_start[set][gi + 1] - s->grp_start[set][gi];
			if (!rc)
				rc = locus_sim_moe_run(&cfg, &r, err);
			if (rc)
				break;
			run->grp[set][p][gi] = 0;
			for (uint32_t st = 0; st < r.n_steps; st++)
				run->grp[set][p][gi] += r.layer_s[st] / r.n_steps;
			locus_sim_moe_result_free(&r);
		}
		locus_sim_moe_grace_free(g);
		if (rc)
			return rc;
	}
	return 0;
}

/*
 * Random groups of a set's requests: a seeded permutation of the requests
 * dealt round robin into n groups, each group's tokens in a seeded order.
 */
static int make_groups(struct sets *s, int set, uint32_t n, uint64_t seed)
{
	uint32_t nreq = s->n_req[set], *perm = malloc(sizeof(uint32_t) * (nreq ? nreq : 1));
	uint32_t at = 0;

	s->grp_order[set] = malloc(sizeof(uint32_t) * (s->tok[set].n_tok ? s->tok[set].n_tok : 1));
	if (!perm || !s->grp_order[set]) {
		free(perm);
		return -ENOMEM;
	}
	permute(perm, nreq, seed);
	for (uint32_t g = 0; g < n; g++) {
		uint32_t from = at, *tmp;

		s->grp_start[set][g] = at;
		for (uint32_t i = g; i < nreq; i += n)
			for (uint32_t t = s->tok0[set][perm[i]]; t < s->tok0[set][perm[i] + 1]; t++)
				s->grp_order[set][at++] = t;
		/* shuffle the group's tokens: a seeded permutation applied to them */
		tmp = malloc(sizeof(uint32_t) * ((at - from) ? at - from : 1));
		if (!tmp) {
			free(perm);
			return -ENOMEM;
		}
		permute(tmp, at - from, seed + 1 + g);
		for (uint32_t i = 0; i < at - from; i++)
			tmp[i] = s->grp_order[set][from + tmp[i]];
		memcpy(s->grp_order[set] + from, tmp, sizeof(uint32_t) * (at - from));
		free(tmp);
	}
	s->grp_start[set][n] = at;
	free(perm);
	return 0;
}

/* The fewest tokens any of a set's n groups holds. */
static uint32_t smallest_group(const struct sets *s, int set, uint32_t n)
{
	uint32_t least = UINT32_MAX;

	for (uint32_t g = 0; g < n; g++)
		least = LOCUS_MIN(least, s->grp_start[set][g + 1] - s->grp_start[set][g]);
	return least;
}

/* Fit the three placements of one topology on prof and time them. */
static int fit_topo(const struct moe_setup *su, const struct locus_gracefit_profile *prof,
		    const struct sets *s, struct moe_run *run, struct locus_error *err)
{
	uint32_t N = run->topo.nodes * run->topo.gpus, E = su->E, L = su->L;
	uint32_t slots = (E + N - 1) / N;
	struct locus_gracefit_topo tp = { .n_nodes = run->topo.nodes,
					  .gpus_per_node = run->topo.gpus,
					  .capacity = (slots * 3 + 1) / 2,
					  .replica_budget = run->topo.budget };
	struct locus_gracefit_layer_info *li = calloc(L, sizeof(*li));
	int rc = li ? 0 : locus_error_set(err, ENOMEM, "out of memory");

	for (int p = 0; !rc && p < MOE_N_PL; p++) {
		struct locus_gracefit_opts o = { .r = -1, .seed = 1,
						 .no_grouping = p == MOE_UNIFORM,
						 .no_replication = p == MOE_UNIFORM };
		struct locus_gracefit_eplb e;
		void *blob = NULL, *m = NULL;
		size_t len;

		if (p == MOE_EPLB) {
			/* DeepSeek's EPLB, one group (what vLLM runs for DeepSeek-V2-Lite) */
			rc = locus_gracefit_eplb_rebalance(prof->W, L, E, E + N * run->topo.budget,
							   1, run->topo.nodes, N, &e, err);
			if (rc)
				break;
			rc = time_placement(su, s, run, p, NULL, &e, err);
			locus_gracefit_eplb_free(&e);
			continue;
		}
		rc = locus_gracefit_fit(prof, &tp, &o, &blob, &len, li, err);
		if (!rc)
			rc = locus_grace_map_of_blob(blob, len, &m, err);
		if (!rc)
			rc = time_placement(su, s, run, p, m, NULL, err);
		for (uint32_t l = 0; !rc && p == MOE_GRACE && l < L; l++) {
			run->grace_fallbacks += li[l].fallback;
			run->grace_replicas += (double)li[l].n_replicas / L;
		}
		free(m);
		free(blob);
	}
	free(li);
	return rc;
}

/* The calibration set's profile, as locusctl fit --grace builds it (prompt and decode tokens). */
static int build_profile(const struct moe_setup *su, const struct locus_sim_moe_tokens *tk,
			 struct locus_gracefit_profile *p, struct locus_error *err)
{
	int rc = locus_gracefit_profile_init(p, su->L, su->E, 1, err);

	if (!rc)
		rc = locus_gracefit_profile_keep_tokens(p, su->k, LOCUS_MIN(tk->n_tok, FIT_KEEP),
							err);
	for (uint32_t t = 0; !rc && t < tk->n_tok; t++)
		for (uint32_t l = 0; !rc && l < su->L; l++)
			rc = locus_gracefit_profile_add(p, l,
							tk->ids + ((size_t)t * su->L + l) * su->k,
							1, su->k, err);
	return rc;
}

int locusctl_simulate_moe(int argc, char **argv)
{
	struct moe_opts o;
	struct moe_setup su = { 0 };
	struct locus_error err = { 0 };
	struct locus_trace *t[MOE_N_SETS] = { NULL, NULL };
	struct locus_gracefit_profile prof = { 0 };
	struct moe_run *runs = NULL;
	struct sets s = { 0 };
	uint16_t *ids[MOE_N_SETS] = { NULL, NULL };
	int split, ret = parse_opts(argc, argv, &o);

	if (ret)
		return ret;
	split = !o.c.fit_trace;
	ret = locus_trace_load(o.c.trace, NULL, &t[1], &err);
	if (!ret && o.c.fit_trace)
		ret = locus_trace_load(o.c.fit_trace, NULL, &t[0], &err);
	if (ret < 0) {
		ret = locusctl_fail(&err, ret);
		goto out;
	}
	if (!split && (t[0]->n_layers != t[1]->n_layers || t[0]->n_experts != t[1]->n_experts ||
		       t[0]->k != t[1]->k)) {
		fprintf(stderr, "locusctl simulate: --fit-trace is %u x %u top-%u, --trace %u x %u "
			"top-%u: both must be one model's\n", t[0]->n_layers, t[0]->n_experts,
			t[0]->k, t[1]->n_layers, t[1]->n_experts, t[1]->k);
		ret = 1;
		goto out;
	}
	ret = layer_model(&o, t[1], &su);
	if (ret)
		goto out;
	su.trace = o.c.trace;
	su.fit_trace = o.c.fit_trace;
	su.model = o.c.model;
	su.gpu = o.c.gpu;
	su.tokens_per_step = (uint32_t)o.tokens_per_step;
	su.seed = o.c.seed;
	su.L = t[1]->n_layers;
	su.E = t[1]->n_experts;
	su.k = t[1]->k;
	for (int set = 0; set < MOE_N_SETS; set++) {
		const struct locus_trace *src = split ? t[1] : t[set];

		ret = set_tokens(src, split, set, &ids[set], &s.tok0[set], &su.n_tok[set],
				 &su.n_req[set]);
		if (ret < 0) {
			ret = locusctl_fail(&(struct locus_error){ .msg = "too many tokens or out "
									  "of memory" }, -ret);
			goto out;
		}
		if (su.n_tok[set] < su.tokens_per_step) {
			fprintf(stderr, "locusctl simulate: the %s requests hold %u tokens, fewer "
				"than one step of %u (--tokens-per-step)\n",
				set ? "held-out" : "calibration", su.n_tok[set], su.tokens_per_step);
			ret = 1;
			goto out;
		}
		s.n_req[set] = su.n_req[set];
		s.tok[set] = (struct locus_sim_moe_tokens){ .L = su.L, .k = su.k, .E = su.E,
							    .n_tok = su.n_tok[set],
							    .ids = ids[set] };
		s.order[set] = malloc(sizeof(uint32_t) * su.n_tok[set]);
		if (!s.order[set]) {
			ret = locusctl_fail(&(struct locus_error){ .msg = "out of memory" }, ENOMEM);
			goto out;
		}
		permute(s.order[set], su.n_tok[set], o.c.seed + (uint64_t)set);
		/* groups of 2 steps' tokens on average, each a full step at least (long
		 * requests may unbalance them: then fewer groups); fewer than 2: no interval */
		su.n_groups[set] = LOCUS_MIN((uint32_t)o.groups, su.n_req[set]);
		su.n_groups[set] = LOCUS_MIN(su.n_groups[set],
					     su.n_tok[set] / (2 * su.tokens_per_step));
		for (;;) {
			if (su.n_groups[set] < 2)
				su.n_groups[set] = 0;
			free(s.grp_order[set]);
			s.grp_order[set] = NULL;
			if (make_groups(&s, set, su.n_groups[set],
					o.c.seed * 7919 + 17 + (uint64_t)set)) {
				ret = locusctl_fail(&(struct locus_error){ .msg = "out of memory" },
						    ENOMEM);
				goto out;
			}
			if (!su.n_groups[set] ||
			    smallest_group(&s, set, su.n_groups[set]) >= su.tokens_per_step)
				break;
			su.n_groups[set]--;
		}
	}
	ret = build_profile(&su, &s.tok[0], &prof, &err);
	if (ret) {
		ret = locusctl_fail(&err, ret);
		goto out;
	}
	runs = calloc(o.n_topos, sizeof(*runs));
	if (!runs) {
		ret = locusctl_fail(&(struct locus_error){ .msg = "out of memory" }, ENOMEM);
		goto out;
	}
	for (uint32_t i = 0; i < o.n_topos; i++) {
		uint32_t N = o.topos[i].nodes * o.topos[i].gpus;

		if (su.E % N) {
			fprintf(stderr, "locusctl simulate: topology %ux%u: %u GPUs do not divide "
				"the %u experts (EPLB needs equal slots per GPU)\n",
				o.topos[i].nodes, o.topos[i].gpus, N, su.E);
			ret = 1;
			goto out;
		}
		runs[i].topo = o.topos[i];
		/* the same memory for both (tools/eval/grace_figures): max(1, ceil(E/N)/4) per GPU */
		runs[i].topo.budget = o.budget ? (uint32_t)o.budget :
					LOCUS_MAX(1u, (su.E + N - 1) / N / 4);
		ret = fit_topo(&su, &prof, &s, &runs[i], &err);
		if (ret) {
			ret = locusctl_fail(&err, ret);
			goto out;
		}
	}
	sim_moe_report(stdout, o.c.json, &su, runs, o.n_topos);
	ret = fflush(stdout) ? 1 : 0;
out:
	for (uint32_t i = 0; runs && i < o.n_topos; i++)
		for (int set = 0; set < MOE_N_SETS; set++)
			for (int p = 0; p < MOE_N_PL; p++)
				locus_sim_moe_result_free(&runs[i].res[set][p]);
	free(runs);
	locus_gracefit_profile_free(&prof);
	for (int set = 0; set < MOE_N_SETS; set++) {
		free(s.order[set]);
		free(s.tok0[set]);
		free(s.grp_order[set]);
		free(ids[set]);
		locus_trace_free(t[set]);
	}
	return ret;
}
