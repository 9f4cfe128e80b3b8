// SPDX-License-Identifier: MIT
/*
 * locusctl fit (ELDR): the calibration trace fitted into a table, with the
 * balance price, centroids per decoder, tau, overflow rule and load spill
 * chosen from the calibration requests by default (--tune auto,
 * locus_eldrfit_tune), or as given.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_eldr.h"
#include "locus_eldrfit.h"
#include "locus_err_priv.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locus_trace.h"
#include "locusctl.h"

/* "0,1,5": comma-separated u32 ids, no empty or stray fields. */
static int parse_ids(const char *s, uint32_t **out, uint32_t *n)
{
	uint32_t cap = 16, cnt = 0, *ids = malloc(cap * sizeof(*ids));
	const char *p = s;

	if (!ids || !*s)
		goto err;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char field[24];
		uint64_t v;

		if (!len || len >= sizeof(field))
			goto err;
		memcpy(field, p, len);
		field[len] = '\0';
		if (locusctl_parse_u64(field, UINT32_MAX, &v) < 0)
			goto err;
		if (cnt == cap) {
			uint32_t *n2 = realloc(ids, 2 * cap * sizeof(*ids));

			if (!n2)
				goto err;
			ids = n2;
			cap *= 2;
		}
		ids[cnt++] = (uint32_t)v;
		if (!comma)
			break;
		p = comma + 1;
	}
	*out = ids;
	*n = cnt;
	return 0;
err:
	free(ids);
	return -1;
}

/* Share of requests whose cluster's majority domain is their own. */
static double domain_purity(const struct locus_trace *t, const struct locus_eldrfit_result *r,
			    uint32_t K)
{
	uint32_t *cnt = calloc((size_t)K * t->n_domains, sizeof(*cnt)), agree = 0;

	if (!cnt)
		return NAN;
	for (uint32_t i = 0; i < r->n_used; i++)
		cnt[(size_t)r->assign[i] * t->n_domains + t->reqs[r->req_index[i]].domain]++;
	for (uint32_t k = 0; k < K; k++) {
		uint32_t best = 0;

		for (uint32_t d = 0; d < t->n_domains; d++)
			if (cnt[(size_t)k * t->n_domains + d] > best)
				best = cnt[(size_t)k * t->n_domains + d];
		agree += best;
	}
	free(cnt);
	return (double)agree / r->n_used;
}

static const char *score_kind_name(enum locus_eldrfit_score_kind k)
{
	return k == LOCUS_ELDRFIT_SCORE_DECODE ? "decode expert overlap" :
	       k == LOCUS_ELDRFIT_SCORE_SPLIT_HALF ? "split-half prompt proxy" : "none";
}

/* Cluster sizes against their bounds, and how the clustering ran. */
static void print_balance(const struct locus_eldrfit_opts *o, const struct locus_eldrfit_result *r)
{
	uint32_t *size = calloc(o->n_decoders, sizeof(*size)), mn = UINT32_MAX, mx = 0;

	if (!size)
		return;
	for (uint32_t i = 0; i < r->n_used; i++)
		size[r->assign[i]]++;
	for (uint32_t k = 0; k < o->n_decoders; k++) {
		mn = size[k] < mn ? size[k] : mn;
		mx = size[k] > mx ? size[k] : mx;
	}
	printf("clusters of %u..%u requests (bounds %u..%u: slack %.2f, balance price %.2f); "
	       "best of %u k-means++ seeds (seed %" PRIu64 "); %s\n", mn, mx, r->size_lo,
	       r->size_hi, (double)o->slack, (double)o->balance_price,
	       o->restarts ? o->restarts : 1, r->seed,
	       r->decode_clustered ? "clustered on prefill and decode expert use" :
	       "clustered on prefill signatures");
	free(size);
}

/* What --tau auto measured and why it chose its tau. */
static void print_tau(const struct locus_eldrfit_tau_result *r, uint32_t K, uint32_t B,
		      int bound_given)
{
	printf("tau auto: calibration split in two parts (%u / %u requests), each fitted and "
	       "the other replayed by the router in rounds of K=%u x B=%u, mean of both folds\n",
	       r->n_part[0], r->n_part[1], K, B);
	printf("  %-6s %-16s %s\n", "tau", "pairs per step", "busiest decoder (no cap)");
	for (uint32_t g = 0; g < r->n_grid; g++)
		printf("  %-6.3f %-16.2f %.3f%s%s\n", (double)r->pt[g].tau, r->pt[g].pairs,
		       r->pt[g].load, r->pt[g].over ? "  over the bound" : "",
		       g == r->chosen ? "  <- chosen" : "");
	printf("  exact-balance fit at tau %.2f: %.2f pairs per step, busiest decoder %.3f\n",
	       (double)LOCUS_ELDR_TAU_DEFAULT, r->ref_pairs, r->ref_load);
	if (r->feasible)
		printf("tau auto: tau %.3f, the fewest pairs per step with the busiest decoder "
		       "within %.3f (%s)\n", (double)r->tau, r->bound,
		       bound_given ? "--tau-load-bound" : "the exact-balance fit's");
	else
		printf("tau auto: no tau kept the busiest decoder within %.3f; tau %.3f, the "
		       "least loaded\n", r->bound, (double)r->tau);
}

/* Whether point q's load is over r's bound in a fold (the tuning's rule). */
static int over_bound(const struct locus_eldrfit_tune_result *r,
		      const struct locus_eldrfit_tune_point *q)
{
	return q->fold_load[0] > r->fold_bound[0] || q->fold_load[1] > r->fold_bound[1];
}

/* What the tuning measured: the best point of each (price, centroids per decoder), and the choice. */
static void print_tune(const struct locus_eldrfit_tune_result *r, uint32_t K, uint32_t B,
		       int bound_given)
{
	printf("tune: calibration split in two parts (%u / %u requests), each fitted at every "
	       "(balance price, centroids per decoder) and the other replayed by the router in "
	       "rounds of K=%u x B=%u at every routing point (%u points), mean of both folds\n",
	       r->n_part[0], r->n_part[1], K, B, r->n_pt);
	printf("  %-6s %-9s %-6s %-8s %-12s %-15s %s\n", "price", "centroids", "tau", "overflow",
	       "spill", "pairs per step", "busiest decoder (no cap)");
	for (uint32_t i = 0; i < r->n_pt;) {
		const struct locus_eldrfit_tune_point *p = &r->pt[i], *b = NULL;
		uint32_t j = i, bi = i;
		char spill[24];

		/* the fewest pairs within the bound of this (price, centroids), else the least loaded */
		for (; j < r->n_pt && r->pt[j].balance_price == p->balance_price &&
		       r->pt[j].centroids_per_decoder == p->centroids_per_decoder; j++) {
			const struct locus_eldrfit_tune_point *q = &r->pt[j];
			int in = !over_bound(r, q), bin = b && !over_bound(r, b);

			if (!b || (in && (!bin || q->pairs < b->pairs)) ||
			    (!in && !bin && q->load < b->load)) {
				b = q;
				bi = j;
			}
		}
		if (b->spill_tau != 0.0f)
			snprintf(spill, sizeof(spill), "%.2g/%u", (double)b->spill_tau,
				 b->spill_margin);
		else
			snprintf(spill, sizeof(spill), "off");
		printf("  %-6.3g %-9u %-6.3g %-8s %-12s %-15.2f %.3f%s%s\n",
		       (double)b->balance_price, b->centroids_per_decoder, (double)b->tau,
		       b->overflow_spread ? "spread" : "nearest", spill, b->pairs, b->load,
		       over_bound(r, b) ? "  over the bound" : "",
		       bi == r->chosen ? "  <- chosen" : "");
		i = j;
	}
	printf("  exact-balance fit at tau %.2f: %.2f pairs per step, busiest decoder %.3f\n",
	       (double)LOCUS_ELDR_TAU_DEFAULT, r->ref_pairs, r->ref_load);
	if (r->bound_oracle)
		printf("  domain oracle (the trace's labels): %.2f pairs per step, busiest decoder "
		       "%.3f\n", r->oracle_pairs, r->oracle_load);
	if (r->feasible)
		printf("tune: the fewest pairs per step with the busiest decoder within %.3f / %.3f "
		       "in the two folds (%s)\n", r->fold_bound[0], r->fold_bound[1],
		       bound_given ? "--tau-load-bound" : r->bound_oracle ?
		       "the domain oracle's" : "the exact-balance fit's");
	else
		printf("tune: no point kept the busiest decoder within %.3f / %.3f in the two "
		       "folds: the least loaded\n", r->fold_bound[0], r->fold_bound[1]);
}

/* Whether the tuning can run on t: decode tokens to replay, two rounds of K x B. */
static const char *cannot_tune(const struct locus_trace *t, uint32_t K, uint32_t B)
{
	int any = 0;

	for (uint32_t i = 0; i < t->n_requests && !any; i++)
		any = t->reqs[i].gen_len > 0;
	if (!any)
		return "the trace has no routed_experts (decode tokens) to replay";
	if ((uint64_t)2 * K * B > t->n_requests)
		return "fewer than 2 x K x B calibration requests";
	return NULL;
}

struct fit_args {
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_tau_opts tauo;
	struct locus_trace_opts to;
	const char *trace, *out;
	uint32_t *ids, n_ids, fixed;
	int quiet, tau_auto, tune, exact, margin_given;
};

static const char *opt_name(int c)
{
	switch (c) {
	case 'k': return "decoders";
	case 'd': return "decoder-ids";
	case 'T': return "tau";
	case 'B': return "tau-batch";
	case 'U': return "tau-load-bound";
	case 's': return "seed";
	case 'm': return "max-iter";
	case 'E': return "n-experts";
	case 'L': return "slack";
	case 'P': return "balance-price";
	case 'R': return "restarts";
	case 'W': return "decode-weight";
	case 'C': return "centroids-per-decoder";
	case 'F': return "spill-tau";
	case 'G': return "spill-margin";
	case 'V': return "overflow";
	case 'A': return "tune";
	default: return "mask-sample";
	}
}

/* One option into a; 0, or -1 for a bad value. */
static int fit_opt(int c, const char *arg, struct fit_args *a)
{
	struct locus_eldrfit_opts *o = &a->o;
	uint64_t v;

	switch (c) {
	case 't': a->trace = arg; return 0;
	case 'o': a->out = arg; return 0;
	case 'q': a->quiet = 1; return 0;
	case 'n': o->no_mask = 1; return 0;
	case 'e': return 0; /* the default kind of fit, named explicitly */
	case 'k':
		if (locusctl_parse_u64(arg, LOCUS_ELDR_MAX_DECODERS, &v) < 0 || !v)
			return -1;
		o->n_decoders = (uint32_t)v;
		return 0;
	case 'd':
		free(a->ids);
		a->ids = NULL;
		return parse_ids(arg, &a->ids, &a->n_ids);
	case 'T':
		a->tau_auto = !strcmp(arg, "auto");
		a->fixed |= a->tau_auto ? 0 : LOCUS_ELDRFIT_FIX_TAU;
		return a->tau_auto ? 0 : locusctl_parse_float(arg, 0, 2, &o->tau);
	case 'B':
		if (locusctl_parse_u64(arg, 100000, &v) < 0 || !v)
			return -1;
		a->tauo.batch = (uint32_t)v;
		return 0;
	case 'U': return locusctl_parse_float(arg, 1, 1000, &a->tauo.load_bound);
	case 's': return locusctl_parse_u64(arg, UINT64_MAX, &o->seed);
	case 'm':
		if (locusctl_parse_u64(arg, 100000, &v) < 0 || !v)
			return -1;
		o->max_iter = (uint32_t)v;
		return 0;
	case 'E':
		if (locusctl_parse_u64(arg, LOCUS_ELDR_MAX_EXPERTS, &v) < 0 || !v)
			return -1;
		a->to.n_experts = (uint32_t)v;
		return 0;
	case 'S':
		if (locusctl_parse_u64(arg, 100000, &v) < 0 || v < 2)
			return -1;
		o->mask_sample = (uint32_t)v;
		return 0;
	case 'L': return locusctl_parse_float(arg, 0, 1, &o->slack);
	case 'P':
		a->fixed |= LOCUS_ELDRFIT_FIX_PRICE;
		return locusctl_parse_float(arg, 0, 100, &o->balance_price);
	case 'R':
		if (locusctl_parse_u64(arg, 1000, &v) < 0 || !v)
			return -1;
		o->restarts = (uint32_t)v;
		return 0;
	case 'W': return locusctl_parse_float(arg, 0, 100, &o->decode_weight);
	case 'C':
		if (locusctl_parse_u64(arg, LOCUS_ELDRFIT_MAX_CENTROIDS_PER_DECODER, &v) < 0 || !v)
			return -1;
		o->centroids_per_decoder = (uint32_t)v;
		a->fixed |= LOCUS_ELDRFIT_FIX_CPD;
		return 0;
	case 'F': /* 0: no spill */
		a->fixed |= LOCUS_ELDRFIT_FIX_SPILL;
		return locusctl_parse_float(arg, 0, 2, &o->spill_tau);
	case 'G':
		if (locusctl_parse_u64(arg, 1000000, &v) < 0 || !v)
			return -1;
		o->spill_margin = (uint32_t)v;
		a->margin_given = 1;
		return 0;
	case 'V':
		if (strcmp(arg, "spread") && strcmp(arg, "nearest"))
			return -1;
		o->overflow_spread = !strcmp(arg, "spread");
		a->fixed |= LOCUS_ELDRFIT_FIX_SPREAD;
		return 0;
	case 'A':
		if (strcmp(arg, "auto") && strcmp(arg, "off"))
			return -1;
		a->tune = !strcmp(arg, "auto") ? 1 : 0;
		return 0;
	case 'X': /* the exact-balance fit: one seed, prefill only, nothing tuned */
		o->slack = 0;
		o->balance_price = 0;
		o->restarts = 1;
		o->decode_weight = 0;
		a->exact = 1;
		return 0;
	}
	return -2;
}

/* Options that go together or not at all; a message and 2, or 0. */
static int fit_args_check(struct fit_args *a)
{
	const char *why = NULL;

	if (a->exact && a->tune == 1)
		why = "--exact-balance tunes nothing: no --tune auto";
	else if (a->tau_auto && a->tune == 1)
		why = "--tau auto chooses tau alone: no --tune auto";
	else if (a->margin_given && !(a->fixed & LOCUS_ELDRFIT_FIX_SPILL))
		why = "--spill-margin goes with --spill-tau";
	else if (a->margin_given && a->o.spill_tau == 0.0f)
		why = "--spill-margin with --spill-tau 0 (no spill)";
	if (a->exact || a->tau_auto)
		a->tune = 0;
	else if (a->tune < 0)
		a->tune = 1; /* the default */
	if (!why && !a->tune && !a->tau_auto && (a->tauo.batch || a->tauo.load_bound > 0))
		why = "--tau-batch and --tau-load-bound go with the tuning (--tune auto, the "
		      "default) or --tau auto";
	if (!why && a->ids && a->n_ids != a->o.n_decoders) {
		fprintf(stderr, "locusctl: --decoder-ids has %u ids, --decoders is %u\n", a->n_ids,
			a->o.n_decoders);
		return 2;
	}
	if (why) {
		fprintf(stderr, "locusctl fit: %s\n", why);
		return 2;
	}
	if ((a->fixed & LOCUS_ELDRFIT_FIX_SPILL) && a->o.spill_tau != 0.0f && !a->margin_given)
		a->o.spill_margin = 1;
	return 0;
}

/*
 * The tuning (--tune auto) or --tau auto on t, into a->o; a trace the
 * tuning cannot use keeps the fixed defaults, said so. Returns 0 or a
 * negative code with err set.
 */
static int choose(const struct locus_trace *t, struct fit_args *a, struct locus_error *err)
{
	uint32_t K = a->o.n_decoders;
	uint32_t B = a->tauo.batch ? a->tauo.batch : LOCUS_ELDRFIT_TAU_BATCH_DEFAULT;
	const uint32_t all = LOCUS_ELDRFIT_FIX_TAU | LOCUS_ELDRFIT_FIX_PRICE | LOCUS_ELDRFIT_FIX_CPD |
			     LOCUS_ELDRFIT_FIX_SPILL | LOCUS_ELDRFIT_FIX_SPREAD;
	struct locus_eldrfit_tau_result taur;
	struct locus_eldrfit_tune_result r;
	struct locus_eldrfit_tune_opts tu = {
		.fixed = a->fixed, .batch = a->tauo.batch, .load_bound = a->tauo.load_bound,
		.replay = eldr_replay_router, .oracle = eldr_replay_domain,
	};
	struct eldr_replay_cache *cache;
	const char *why;
	int ret;

	if (a->tau_auto) {
		ret = eldr_replay_cache_new(&cache);
		if (ret < 0)
			return locus_error_set(err, -ret, "out of memory");
		a->tauo.replay_arg = cache;
		ret = locus_eldrfit_tau_choose(t, NULL, 0, &a->o, &a->tauo, &taur, err);
		eldr_replay_cache_free(cache);
		a->tauo.replay_arg = NULL;
		if (ret < 0)
			return ret;
		print_tau(&taur, K, B, a->tauo.load_bound > 0);
		a->o.tau = taur.tau;
		return 0;
	}
	if (!a->tune || (a->fixed & all) == all)
		return 0;
	why = cannot_tune(t, K, B);
	if (why) {
		printf("tune: not run (%s): tau %.3g, %u centroid(s) per decoder, no load spill, "
		       "overflow nearest unless given\n", why, (double)a->o.tau,
		       a->o.centroids_per_decoder ? a->o.centroids_per_decoder : 1);
		return 0;
	}
	ret = eldr_replay_cache_new(&cache);
	if (ret < 0)
		return locus_error_set(err, -ret, "out of memory");
	tu.replay_arg = cache;
	tu.oracle_arg = cache;
	ret = locus_eldrfit_tune(t, NULL, 0, &a->o, &tu, &r, err);
	eldr_replay_cache_free(cache);
	if (ret < 0)
		return ret;
	print_tune(&r, K, B, a->tauo.load_bound > 0);
	locus_eldrfit_tune_apply(&r.pt[r.chosen], &a->o);
	locus_eldrfit_tune_result_free(&r);
	return 0;
}

/* What the written table routes with. */
static void print_routing(const struct locus_eldrfit_opts *o, const struct locus_eldrfit_result *r)
{
	printf("routing: tau %.3g, %u centroids (%s), overflow %s, ", (double)o->tau,
	       r->n_centroids, r->n_centroids > o->n_decoders ? "several per decoder" :
	       "one per decoder", o->overflow_spread ? "spread by load" : "to the nearest up");
	if (o->spill_tau != 0.0f)
		printf("load spill within %.3g beyond a margin of %u\n", (double)o->spill_tau,
		       o->spill_margin);
	else
		printf("no load spill\n");
}

static const struct option fit_lo[] = {
	{ "trace", required_argument, NULL, 't' },
	{ "decoders", required_argument, NULL, 'k' },
	{ "decoder-ids", required_argument, NULL, 'd' },
	{ "tau", required_argument, NULL, 'T' },
	{ "seed", required_argument, NULL, 's' },
	{ "no-mask", no_argument, NULL, 'n' },
	{ "max-iter", required_argument, NULL, 'm' },
	{ "n-experts", required_argument, NULL, 'E' },
	{ "mask-sample", required_argument, NULL, 'S' },
	{ "slack", required_argument, NULL, 'L' },
	{ "balance-price", required_argument, NULL, 'P' },
	{ "restarts", required_argument, NULL, 'R' },
	{ "decode-weight", required_argument, NULL, 'W' },
	{ "tau-batch", required_argument, NULL, 'B' },
	{ "tau-load-bound", required_argument, NULL, 'U' },
	{ "centroids-per-decoder", required_argument, NULL, 'C' },
	{ "spill-tau", required_argument, NULL, 'F' },
	{ "spill-margin", required_argument, NULL, 'G' },
	{ "overflow", required_argument, NULL, 'V' },
	{ "tune", required_argument, NULL, 'A' },
	{ "exact-balance", no_argument, NULL, 'X' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "eldr", no_argument, NULL, 'e' },
	{ "output", required_argument, NULL, 'o' },
	{ NULL, 0, NULL, 0 },
};

int locusctl_eldr_fit(int argc, char **argv)
{
	struct fit_args a = { .tauo = { .replay = eldr_replay_router }, .tune = -1 };
	struct locus_eldrfit_result res;
	struct locus_trace *t = NULL;
	struct locus_error err = { 0 };
	int c, ret;

	locus_eldrfit_opts_default(&a.o, 0);
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:q", fit_lo, NULL)) != -1) {
		ret = fit_opt(c, optarg, &a);
		if (ret == -2)
			goto usage;
		if (ret < 0) {
			fprintf(stderr, "locusctl fit: bad value '%s' for --%s\n", optarg,
				opt_name(c));
			free(a.ids);
			return 2;
		}
	}
	if (optind != argc || !a.trace || !a.out || !a.o.n_decoders)
		goto usage;
	ret = fit_args_check(&a);
	if (ret) {
		free(a.ids);
		return ret;
	}
	a.o.decoder_ids = a.ids;
	if (!a.quiet)
		a.o.progress = locusctl_progress;
	ret = locus_trace_load(a.trace, &a.to, &t, &err);
	if (ret < 0)
		goto fail;
	ret = choose(t, &a, &err);
	if (ret < 0)
		goto fail;
	ret = locus_eldrfit_trace(t, &a.o, &res, &err);
	if (ret < 0)
		goto fail;
	ret = locus_tbl_write_file(a.out, res.blob, res.blob_len, &err);
	if (ret < 0) {
		locus_eldrfit_result_free(&res);
		goto fail;
	}
	printf("fitted %u requests (L=%u E=%u k=%u) into K=%u decoders: %u/%u layers masked, "
	       "%u k-means iterations%s\n", res.n_used, t->n_layers, t->n_experts, t->k,
	       a.o.n_decoders, res.n_masked, t->n_layers, res.iterations,
	       res.converged ? " (converged)" : " (cap reached)");
	if (res.score_kind != LOCUS_ELDRFIT_SCORE_NONE)
		printf("mask score (%s): %.4f with the mask, %.4f with every layer\n",
		       score_kind_name(res.score_kind), res.mask_score, res.full_score);
	printf("mean similarity to own centroid: %.4f\n", res.objective / res.n_used);
	print_balance(&a.o, &res);
	print_routing(&a.o, &res);
	if (t->n_domains > 2 || (t->n_domains == 2 && t->domains[1][0]))
		printf("domain purity (majority domain share per cluster): %.3f\n",
		       domain_purity(t, &res, a.o.n_decoders));
	printf("wrote %s (%zu bytes, table version %u)\n", a.out, res.blob_len,
	       ((const struct locus_tbl_hdr *)res.blob)->kind_version);
	locus_eldrfit_result_free(&res);
	locus_trace_free(t);
	free(a.ids);
	return 0;

fail:
	locus_trace_free(t);
	free(a.ids);
	return locusctl_fail(&err, ret);
usage:
	fprintf(stderr, "usage: locusctl fit --trace FILE --decoders K [--decoder-ids 0,1,..] "
		"[--tune auto|off] [--tau-batch 4] [--tau-load-bound X] [--tau 0.1|auto] "
		"[--centroids-per-decoder M] [--spill-tau T [--spill-margin N]] "
		"[--overflow spread|nearest] [--seed N] [--no-mask] [--max-iter N] [--n-experts E] "
		"[--mask-sample N] [--slack 0.5] [--balance-price 2] [--restarts 8] "
		"[--decode-weight 1] [--exact-balance] [--quiet] -o TABLE\n");
	free(a.ids);
	return 2;
}
