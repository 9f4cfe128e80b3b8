// SPDX-License-Identifier: MIT
/*
 * locusctl simulate: the trace, the table and the presets read and checked,
 * every policy run on the same arrivals (locus_sim_run), the report printed.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_eldr.h"
#include "locus_err_priv.h"
#include "locus_tblfile.h"
#include "locusctl.h"
#include "sim_args.h"
#include "sim_ctl.h"

#define CMD "locusctl simulate"

struct sim_opts {
	struct sim_common c;           /* --trace, --fit-trace, --model, --gpu, --seed, ... */
	const char *table;
	uint64_t decoders, batch_cap, requests, gen_len;
	double rate;
	int shuffle, policies_given;
	unsigned policies;            /* 1u << policy */
	float taus[SIM_MAX_TAUS];
	uint32_t n_taus;
	/* overrides; NAN / 0 = the preset's */
	double hbm_gbps, fixed_us, overhead_us, kv_bytes;
};

static int usage_err(const char *fmt, const char *arg)
{
	return sim_usage_err(CMD, fmt, arg);
}

/* One of "0.05,0.1": up to SIM_MAX_TAUS taus in [0, 2]. */
static int add_tau(const char *tok, void *arg)
{
	struct sim_opts *o = arg;

	if (o->n_taus == SIM_MAX_TAUS || locusctl_parse_float(tok, 0, 2, &o->taus[o->n_taus]))
		return -1;
	o->n_taus++;
	return 0;
}

static int parse_taus(const char *s, struct sim_opts *o)
{
	o->n_taus = 0;
	return sim_split_list(s, 512, add_tau, o);
}

/* One of "jsq,eldr": policy names. */
static int add_policy(const char *tok, void *arg)
{
	struct sim_opts *o = arg;
	int p = locus_sim_policy_parse(tok);

	if (p < 0)
		return -1;
	o->policies |= 1u << p;
	return 0;
}

static int parse_policies(const char *s, struct sim_opts *o)
{
	o->policies = 0;
	o->policies_given = 1;
	return sim_split_list(s, 256, add_policy, o);
}

enum {
	O_TRACE = 256, O_TABLE, O_TAU, O_DECODERS, O_MODEL, O_GPU, O_RATE, O_ORDER, O_REQUESTS,
	O_GEN, O_CAP, O_SEED, O_POLICIES, O_JSON, O_HIDDEN, O_INTER, O_DTYPE, O_HBM, O_FIXED,
	O_OVERHEAD, O_KV, O_ALLOW, O_FIT,
};

static const struct option sim_lo[] = {
	{ "trace", required_argument, NULL, O_TRACE },
	{ "table", required_argument, NULL, O_TABLE },
	{ "tau", required_argument, NULL, O_TAU },
	{ "decoders", required_argument, NULL, O_DECODERS },
	{ "model", required_argument, NULL, O_MODEL },
	{ "gpu", required_argument, NULL, O_GPU },
	{ "rate", required_argument, NULL, O_RATE },
	{ "order", required_argument, NULL, O_ORDER },
	{ "requests", required_argument, NULL, O_REQUESTS },
	{ "gen-len", required_argument, NULL, O_GEN },
	{ "batch-cap", required_argument, NULL, O_CAP },
	{ "seed", required_argument, NULL, O_SEED },
	{ "policies", required_argument, NULL, O_POLICIES },
	{ "json", no_argument, NULL, O_JSON },
	{ "hidden", required_argument, NULL, O_HIDDEN },
	{ "moe-intermediate", required_argument, NULL, O_INTER },
	{ "dtype-bytes", required_argument, NULL, O_DTYPE },
	{ "hbm-gbps", required_argument, NULL, O_HBM },
	{ "fixed-us", required_argument, NULL, O_FIXED },
	{ "overhead-us", required_argument, NULL, O_OVERHEAD },
	{ "kv-bytes-per-token", required_argument, NULL, O_KV },
	{ "allow-shape-mismatch", no_argument, NULL, O_ALLOW },
	{ "fit-trace", required_argument, NULL, O_FIT },
	{ NULL, 0, NULL, 0 },
};

/* Options into o: 0, or an exit status (2) after a message. */
static int parse_opts(int argc, char **argv, struct sim_opts *o)
{
	int c, li = -1;

	*o = (struct sim_opts){ .c = SIM_COMMON_DEFAULTS, .batch_cap = 32, .hbm_gbps = NAN, .fixed_us = NAN, .overhead_us = 0,
				.kv_bytes = NAN };
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", sim_lo, &li)) != -1) {
		const char *a = optarg;

		switch (c) {
		case O_TABLE:
			o->table = a;
			break;
		case O_TAU:
			if (parse_taus(a, o))
				return usage_err("--tau '%s': want up to 16 comma-separated taus in [0, 2]", a);
			break;
		case O_POLICIES:
			if (parse_policies(a, o))
				return usage_err("--policies '%s': want names among random, rr, jsq, p2c, "
						 "domain, eldr", a);
			break;
		case O_DECODERS:
			if (locusctl_parse_u64(a, 65535, &o->decoders) || !o->decoders)
				return usage_err("--decoders '%s': want 1..65535", a);
			break;
		case O_CAP:
			if (locusctl_parse_u64(a, 1u << 20, &o->batch_cap) || !o->batch_cap)
				return usage_err("--batch-cap '%s': want 1..1048576", a);
			break;
		case O_REQUESTS:
			if (locusctl_parse_u64(a, 10000000, &o->requests) || !o->requests)
				return usage_err("--requests '%s': want 1..10000000", a);
			break;
		case O_GEN:
			if (locusctl_parse_u64(a, 1000000, &o->gen_len) || !o->gen_len)
				return usage_err("--gen-len '%s': want 1..1000000 tokens", a);
			break;
		case O_RATE:
			if (sim_parse_double(a, 0, 1e9, &o->rate))
				return usage_err("--rate '%s': want requests/s in [0, 1e9] (0: all at once)", a);
			break;
		case O_ORDER:
			if (strcmp(a, "trace") && strcmp(a, "shuffle"))
				return usage_err("--order '%s': want trace or shuffle", a);
			o->shuffle = !strcmp(a, "shuffle");
			break;
		case O_HBM:
			if (sim_parse_double(a, 1e-3, 1e6, &o->hbm_gbps))
				return usage_err("--hbm-gbps '%s': want GB/s in [0.001, 1e6]", a);
			break;
		case O_FIXED:
			if (sim_parse_double(a, 0, 1e9, &o->fixed_us))
				return usage_err("--fixed-us '%s': want microseconds in [0, 1e9]", a);
			break;
		case O_OVERHEAD:
			if (sim_parse_double(a, 0, 1e9, &o->overhead_us))
				return usage_err("--overhead-us '%s': want microseconds in [0, 1e9]", a);
			break;
		case O_KV:
			if (sim_parse_double(a, 0, 1e12, &o->kv_bytes))
				return usage_err("--kv-bytes-per-token '%s': want bytes in [0, 1e12]", a);
			break;
		default:
			/* the options both commands take, by name */
			if (sim_common_getopt(CMD, c, li < 0 ? NULL : sim_lo[li].name, a, argv, &o->c))
				return 2;
		}
		li = -1;
	}
	if (optind < argc)
		return usage_err("unexpected argument '%s'", argv[optind]);
	if (!o->c.trace)
		return usage_err("%s", "--trace FILE is required");
	if (!o->decoders)
		return usage_err("%s", "--decoders K is required");
	if (o->n_taus && !o->table)
		return usage_err("%s", "--tau needs --table (the ELDR table whose tau it replaces)");
	if (o->policies_given && (o->policies & 1u << LOCUS_SIM_ELDR) && !o->table)
		return usage_err("%s", "policy eldr needs --table TABLE (locusctl fit)");
	if (o->c.fit_trace && (o->n_taus < 2 || !o->table))
		return usage_err("%s", "--fit-trace picks one of several --tau (with --table): give "
				 "at least two");
	return 0;
}

/* The step model from the presets and overrides; 0 or an exit status. */
static int step_model(const struct sim_opts *o, const struct locus_trace *t,
		      struct sim_setup *su)
{
	const struct locus_sim_gpu *pg;
	struct locus_sim_model m;
	int rc = sim_model_resolve(CMD, o->c.model, o->c.gpu, t, o->c.allow_shape,
				   ": simulate with a trace of that model (or "
				   "--allow-shape-mismatch to price this trace's routings at the "
				   "model's costs)", &o->c.ov, &m, &pg);

	if (rc)
		return rc;
	su->hw.expert_bytes = locus_sim_expert_bytes(&m);
	su->hw.hbm_bytes_per_s = isnan(o->hbm_gbps) ? pg->hbm_bytes_per_s : o->hbm_gbps * 1e9;
	su->hw.kv_bytes_per_token = isnan(o->kv_bytes) ? m.kv_bytes_per_token : o->kv_bytes;
	su->dense_bytes = m.dense_bytes;
	su->overhead_s = o->overhead_us * 1e-6;
	su->hw.fixed_s = isnan(o->fixed_us) ? m.dense_bytes / su->hw.hbm_bytes_per_s +
					      su->overhead_s : o->fixed_us * 1e-6;
	return 0;
}

/* A router for the table at tau (the table's own when tau is NAN), in *mem. */
static int build_router(const void *payload, size_t len, float tau, void **mem,
			struct locus_eldr_router **r, struct locus_error *err)
{
	struct locus_eldr_tbl_hdr *h;
	void *copy = aligned_alloc(64, LOCUS_ALIGN_UP(len, 64));
	size_t msz = locus_eldr_router_mem_size(payload, len);
	int ret;

	*mem = NULL;
	if (!copy)
		return locus_error_set(err, ENOMEM, "out of memory");
	memcpy(copy, payload, len);
	h = copy;
	if (!isnan(tau)) {
		if (h->spill_tau != 0.0f && !(h->spill_tau > tau)) {
			/* a band at least as wide as the spill's leaves it nothing to do */
			fprintf(stderr, "locusctl simulate: tau %g: the table's load spill (within "
				"%g) is off at this tau\n", (double)tau, (double)h->spill_tau);
			h->spill_tau = 0;
			h->spill_margin = 0;
		}
		h->tau = tau;
	}
	*mem = msz ? aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64)) : NULL;
	if (!*mem) {
		ret = locus_error_set(err, msz ? ENOMEM : LOCUS_ERANGE,
				      msz ? "out of memory" : "the table's shape is invalid");
		goto out;
	}
	ret = locus_eldr_router_build(*mem, msz, copy, len, LOCUS_ELDR_PATH_AUTO, r, err);
out:
	free(copy);
	return ret;
}

/* One run into row. 0 or an exit status (the error printed). */
static int run_one(struct locus_sim_cfg *cfg, struct locus_sim_result *res, struct sim_row *row)
{
	struct locus_error err = { 0 };
	double *tmp = malloc(sizeof(*tmp) * cfg->n);
	int ret;

	if (!tmp)
		return locusctl_fail(&(struct locus_error){ .msg = "out of memory" }, ENOMEM);
	ret = locus_sim_run(cfg, res, &err);
	if (ret == 0)
		ret = locus_sim_summarize(res, &row->s) ? -ENOMEM : 0;
	if (ret < 0) {
		free(tmp);
		return locusctl_fail(&err, ret);
	}
	memcpy(tmp, res->tpot, sizeof(*tmp) * cfg->n);
	locus_sim_percentile(tmp, cfg->n, 100); /* sorts */
	for (int q = 0; q < SIM_QUANTILES; q++)
		row->tpot_q[q] = q ? locus_sim_percentile(tmp, cfg->n, q) : tmp[0];
	row->policy = cfg->policy;
	free(tmp);
	return 0;
}

/* Prompt signatures of every trace request, as a prefiller builds them. */
static int build_sigs(const struct locus_trace *t, uint8_t **out, size_t *slen,
		      struct locus_error *err)
{
	*slen = locus_eldr_sig_len(t->n_layers, t->n_experts);
	*out = malloc(*slen * t->n_requests);
	if (!*out)
		return locus_error_set(err, ENOMEM, "out of memory");
	for (uint32_t i = 0; i < t->n_requests; i++) {
		long n = locus_eldr_sig_build(*out + *slen * i, *slen, t->n_layers, t->n_experts,
					      t->k, t->reqs[i].prompt, t->reqs[i].prompt_len, 0, err);

		if (n < 0)
			return (int)n;
	}
	return 0;
}

/*
 * Every policy of mask (ELDR once per tau) on trace t's arrivals, into
 * rows[*nrows..]. 0 or an exit status (the error printed).
 */
static int run_policies(const struct sim_opts *o, const struct locus_trace *t,
			const struct locus_sim_hw *hw, unsigned mask, const void *payload,
			size_t plen, struct sim_row *rows, uint32_t *nrows)
{
	struct locus_error err = { 0 };
	struct locus_sim_arrival *arr = NULL;
	struct locus_sim_result res = { 0 };
	struct locus_sim_cfg cfg;
	uint8_t *sigs = NULL;
	void *rmem = NULL;
	size_t slen = 0;
	uint32_t n = o->requests ? (uint32_t)o->requests : t->n_requests;
	int ret = 0;

	if (payload) {
		ret = build_sigs(t, &sigs, &slen, &err);
		if (ret < 0) {
			ret = locusctl_fail(&err, ret);
			goto out;
		}
	}
	arr = malloc(sizeof(*arr) * n);
	if (!arr || locus_sim_result_alloc(&res, n, (uint32_t)o->decoders)) {
		ret = locusctl_fail(&(struct locus_error){ .msg = "out of memory" }, ENOMEM);
		goto out;
	}
	ret = locus_sim_arrivals(t, n, o->rate, o->shuffle, (uint32_t)o->gen_len, o->c.seed, arr,
				 &err);
	if (ret < 0) {
		ret = locusctl_fail(&err, ret);
		goto out;
	}
	cfg = (struct locus_sim_cfg){ .t = t, .arr = arr, .n = n,
				      .n_decoders = (uint32_t)o->decoders,
				      .batch_cap = (uint32_t)o->batch_cap, .hw = *hw,
				      .seed = o->c.seed, .sigs = sigs, .slen = slen };
	for (int p = 0; p < LOCUS_SIM_N_POLICIES; p++) {
		uint32_t ntau = p == LOCUS_SIM_ELDR ? (o->n_taus ? o->n_taus : 1) : 1;

		if (!(mask & 1u << p))
			continue;
		for (uint32_t i = 0; i < ntau; i++) {
			float tau = o->n_taus ? o->taus[i] : NAN;

			cfg.policy = p;
			cfg.router = NULL;
			if (p == LOCUS_SIM_ELDR) {
				free(rmem);
				ret = build_router(payload, plen, tau, &rmem, &cfg.router, &err);
				if (ret < 0) {
					ret = locusctl_fail(&err, ret);
					goto out;
				}
				rows[*nrows].tau = isnan(tau) ?
					((const struct locus_eldr_tbl_hdr *)payload)->tau : tau;
			}
			ret = run_one(&cfg, &res, &rows[*nrows]);
			if (ret)
				goto out;
			(*nrows)++;
		}
	}
out:
	free(rmem);
	locus_sim_result_free(&res);
	free(arr);
	free(sigs);
	return ret;
}

/*
 * tau chosen on the fit trace's rows: the lowest ELDR median TPOT among the
 * taus whose p99 is not above the best load balancer's (lowest p99 of
 * random, rr, jsq, p2c) on that trace; when none qualifies, the lowest p99.
 */
static void choose_tau(const struct sim_row *rows, uint32_t n, struct sim_tau_choice *c)
{
	double lb99 = INFINITY;
	int best = -1, best99 = -1;

	for (uint32_t i = 0; i < n; i++)
		if (rows[i].policy <= LOCUS_SIM_P2C)
			lb99 = fmin(lb99, rows[i].s.tpot_p99);
	for (uint32_t i = 0; i < n; i++) {
		const struct locus_sim_summary *s = &rows[i].s;

		if (rows[i].policy != LOCUS_SIM_ELDR)
			continue;
		if (best99 < 0 || s->tpot_p99 < rows[best99].s.tpot_p99)
			best99 = (int)i;
		if (s->tpot_p99 <= lb99 && (best < 0 || s->tpot_p50 < rows[best].s.tpot_p50))
			best = (int)i;
	}
	c->tail_kept = best >= 0;
	c->fit_row = best >= 0 ? best : best99;
	c->tau = rows[c->fit_row].tau;
	c->fit_lb_p99 = lb99;
}

int locusctl_simulate(int argc, char **argv)
{
	struct sim_opts o;
	struct sim_setup su = { 0 };
	struct locus_error err = { 0 };
	struct locus_trace *t = NULL, *ft = NULL;
	struct sim_row rows[LOCUS_SIM_N_POLICIES + SIM_MAX_TAUS];
	struct sim_row fit_rows[LOCUS_SIM_N_POLICIES + SIM_MAX_TAUS];
	struct sim_tau_choice choice = { 0 };
	void *tbl = NULL;
	const void *payload = NULL;
	size_t tlen = 0, plen = 0;
	uint32_t nrows = 0, nfit = 0, n;
	int ret;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--moe"))
			return locusctl_simulate_moe(argc, argv);
	ret = parse_opts(argc, argv, &o);
	if (ret)
		return ret;
	ret = locus_trace_load(o.c.trace, NULL, &t, &err);
	if (ret < 0) {
		ret = locusctl_fail(&err, ret);
		goto out;
	}
	ret = step_model(&o, t, &su);
	if (ret)
		goto out;
	if (!o.policies_given) {
		o.policies = (1u << LOCUS_SIM_RANDOM) | (1u << LOCUS_SIM_RR) | (1u << LOCUS_SIM_JSQ) |
			     (1u << LOCUS_SIM_P2C) | (o.table ? 1u << LOCUS_SIM_ELDR : 0) |
			     (t->n_domains > 1 ? 1u << LOCUS_SIM_DOMAIN : 0);
	} else if ((o.policies & 1u << LOCUS_SIM_DOMAIN) && t->n_domains < 2) {
		fprintf(stderr, "locusctl simulate: policy domain needs a trace with domain labels\n");
		ret = 1;
		goto out;
	}
	if (o.table) {
		ret = locus_tbl_read_file(o.table, LOCUS_TBL_ELDR, &tbl, &tlen, &err);
		if (ret == 0)
			ret = locus_tbl_check(tbl, tlen, LOCUS_TBL_ELDR, &payload, &plen, &err);
		if (ret == 0)
			ret = locus_eldr_tbl_validate(payload, plen, NULL, &err);
		if (ret < 0) {
			ret = locusctl_fail(&err, ret);
			goto out;
		}
	}
	n = o.requests ? (uint32_t)o.requests : t->n_requests;
	ret = run_policies(&o, t, &su.hw, o.policies, payload, plen, rows, &nrows);
	if (ret)
		goto out;
	if (o.c.fit_trace) {
		/* the same simulation on the fit trace, balancers and ELDR only: tau from it */
		unsigned mask = o.policies & ~(1u << LOCUS_SIM_DOMAIN);

		ret = locus_trace_load(o.c.fit_trace, NULL, &ft, &err);
		if (ret < 0) {
			ret = locusctl_fail(&err, ret);
			goto out;
		}
		if (ft->n_layers != t->n_layers || ft->n_experts != t->n_experts || ft->k != t->k) {
			fprintf(stderr, "locusctl simulate: --fit-trace is %u x %u top-%u, --trace "
				"%u x %u top-%u: both must be one model's\n", ft->n_layers,
				ft->n_experts, ft->k, t->n_layers, t->n_experts, t->k);
			ret = 1;
			goto out;
		}
		ret = run_policies(&o, ft, &su.hw, mask, payload, plen, fit_rows, &nfit);
		if (ret)
			goto out;
		choose_tau(fit_rows, nfit, &choice);
		choice.fit_trace = o.c.fit_trace;
		choice.fit_rows = fit_rows;
		choice.n_fit = nfit;
	}
	su = (struct sim_setup){ .trace = o.c.trace, .table = o.table, .model = o.c.model,
				 .gpu = o.c.gpu, .n_trace = t->n_requests, .n_requests = n,
				 .n_decoders = (uint32_t)o.decoders,
				 .batch_cap = (uint32_t)o.batch_cap, .gen_len = (uint32_t)o.gen_len,
				 .n_layers = t->n_layers, .n_experts = t->n_experts, .k = t->k,
				 .rate = o.rate, .shuffle = o.shuffle, .seed = o.c.seed, .hw = su.hw,
				 .dense_bytes = su.dense_bytes, .overhead_s = su.overhead_s };
	su.choice = o.c.fit_trace ? &choice : NULL;
	if (o.c.json)
		sim_report_json(stdout, &su, rows, nrows);
	else
		sim_report_table(stdout, &su, rows, nrows);
	ret = fflush(stdout) ? 1 : 0;
out:
	free(tbl);
	locus_trace_free(ft);
	locus_trace_free(t);
	return ret;
}
