// SPDX-License-Identifier: MIT
/*
 * eldr_quality: routing quality on ESFT, the figure ELDR exists for: how
 * many distinct (layer, expert) pairs a decoder's batch touches during
 * decode (fewer = less expert weight to read per step), and what each
 * policy does to the load per decoder.
 *
 * Requests are 64-token windows of the ESFT sequences of all four domains:
 * 32 prompt tokens (the signature) and 32 "generated" tokens (teacher-forced
 * continuation standing in for decode; see control/esft2jsonl.c). Windows are
 * split alternately into a calibration half (every fit) and a held-out half.
 * Both halves are routed, the held-out one being the figure that counts.
 * Requests arrive in rounds of K * B; in each round every policy fills each
 * of the K decoders with exactly B requests (same batch sizes for all):
 *   round-robin  request i of the round -> decoder i mod K;
 *   domain       oracle label: decoders split evenly among the domains, a
 *                request goes to the least-filled decoder of its domain with
 *                room, else to the least-filled decoder with room;
 *   ELDR         the router (the table's band tau, least loaded with the
 *                herding guard, the table's overflow rule and load spill); a
 *                decoder whose batch is full is marked down for the rest of
 *                the round. Four tables: what `locusctl fit --tau-batch B`
 *                produces by default (its balance price, centroids per
 *                decoder, tau, overflow rule and load spill chosen on the
 *                calibration half alone by two-fold replay, eldr_tune.c),
 *                "ELDR fixed" (`--tune off`: tau 0.1, one centroid per
 *                decoder, no spill: nothing tuned), the same with every
 *                layer (--no-mask), and the exact-balance fit
 *                (--exact-balance: floor/ceil(N/K), one k-means++ seed,
 *                prefill only).
 * Figures per (K, B) and half (both halves printed side by side, each with
 * its interval):
 *   per decode step  distinct pairs of the batch's t-th generated tokens
 *                    (what one decode step must read), averaged over steps
 *                    and decoder batches, as a ratio to round-robin, and for
 *                    ELDR in % against the oracle (negative: ELDR reads less);
 *   whole batch      distinct pairs over all its generated tokens (this
 *                    saturates towards L * E = 1664 for ESFT), held-out only;
 *   load max/mean    the same rounds with no batch cap (ELDR: band and least
 *                    loaded only; domain: least-filled decoder of its domain
 *                    always): the busiest decoder's requests over the mean
 *                    B, averaged over rounds (round-robin: 1.00), and the
 *                    busiest decoder's share of all the half's requests over
 *                    1/K (no interval: a half-sample's max is biased up).
 * Each figure is the mean over --orders random arrival orders of the whole
 * half (default 50); [95% intervals] are the 2.5 and 97.5 percentiles over
 * --boot R random halves of the half's requests (default 100; drawn without
 * replacement, each routed in --boot-orders random arrival orders, default
 * 4), so they hold the request sample's noise and what is left of the
 * arrival order's (a half smaller than one round of K * B is one round:
 * the repository's sample, whose intervals are then too narrow). Every random choice has a fixed seed: the output is the
 * same on every run.
 *
 *   eldr_quality [--check] [--trace FILE] [--path P] [--orders N] [--boot R] [--boot-orders N]
 *                [--slack S] [--balance-price P] [--restarts R]
 *                [--decode-weight W] [--tau T] [--centroids-per-decoder M]
 *                [--spill-tau T] [--spill-margin M] [--overflow spread|nearest]
 *                [--clairvoyant N]
 *       (--slack .. --overflow refit the ELDR rows with those options, as
 *        the same options of `locusctl fit` do: in the tuned row each one
 *        fixes that choice and the rest is still chosen; --clairvoyant N:
 *        arrival orders of the clairvoyant line, default 4, 0 leaves it out:
 *        the oracle's held-out batches improved by swaps with the decode
 *        experts known, what better batches exist at all)
 *       (--path: the router's scoring path for every ELDR row, default auto,
 *        the 16-bit arithmetic; auto-i8 the 8-bit one)
 *       (--check: exit 1 unless the "ELDR" row reads no more pairs per step
 *        than the oracle and its busiest decoder is no busier, held-out, at
 *        every K, B; the figures are deterministic (fixed seeds), so this is
 *        ELDR's acceptance on this sample, not a test of it on new
 *        requests: the differences are inside their intervals)
 *       (default trace: the full ESFT data under $LOCUS_DATA_DIR, default
 *        <repo>/../shared/data, else <repo>/tests/data/calib_sample.jsonl)
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_paths.h"
#include "eldr_quality.h"
#include "eldr_replay.h"
#include "locus_eldrfit.h"


/* 64-token windows (32 prompt + 32 decoded) of every ESFT domain; NULL if absent. */
static struct locus_trace *load_esft(const char *base)
{
	struct locus_error e = { 0 };
	struct locus_trace *t;

	return locus_trace_esft_windows(base, 32, 32, &t, &e) < 0 ? NULL : t;
}

static const char *const pol_name[QPOL_N] = { "round-robin", "domain (oracle)", "ELDR",
					      "ELDR fixed", "ELDR --no-mask",
					      "ELDR exact balance" };

enum { NB = 3 }; /* figures per policy and replicate */

struct half {
	const char *name;
	uint32_t *idx, n; /* trace indices */
	struct qfig mean; /* over the arrival orders */
	double *boot;     /* [R][QPOL_N][NB]: step ratio to RR, % vs oracle, load */
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* 2.5 and 97.5 percentiles of field f of policy p over R replicates. */
static void interval(const struct half *h, uint32_t R, int p, int f, double *lo, double *hi,
		     double *tmp)
{
	for (uint32_t b = 0; b < R; b++)
		tmp[b] = h->boot[((size_t)b * QPOL_N + p) * NB + f];
	qsort(tmp, R, sizeof(*tmp), cmp_double);
	*lo = tmp[(size_t)(0.025 * (R - 1) + 0.5)];
	*hi = tmp[(size_t)(0.975 * (R - 1) + 0.5)];
}

static void shuffle(uint32_t *v, uint32_t n, uint64_t *rng)
{
	for (uint32_t i = n - 1; n > 1 && i > 0; i--) {
		uint32_t j = (uint32_t)(locus_splitmix64(rng) % (i + 1)), x = v[i];

		v[i] = v[j];
		v[j] = x;
	}
}

/* f += g / w */
static void add_fig(struct qfig *f, const struct qfig *g, double w)
{
	for (int p = 0; p < QPOL_N; p++) {
		f->step[p] += g->step[p] / w;
		f->whole[p] += g->whole[p] / w;
		f->load[p] += g->load[p] / w;
		f->share[p] += g->share[p] / w;
	}
}

/*
 * Mean figures over `orders` arrival orders of the half, then R replicates
 * for the intervals: a random half of the half's requests (drawn without
 * replacement: the spread of a half-sample's mean is that of the whole
 * sample's, and no request meets its own copy in a batch as a resample
 * with replacement would make it), averaged over bo arrival orders.
 */
static int evaluate(struct qsim *s, struct half *h, uint32_t orders, uint32_t R, uint32_t bo,
		    uint64_t seed)
{
	uint32_t *seq = malloc(sizeof(*seq) * h->n), *res = malloc(sizeof(*res) * h->n);
	/* at least one round (a small trace: more than half, narrower intervals) */
	uint32_t half = h->n / 2 < s->K * s->B ? s->K * s->B : h->n / 2;
	uint64_t rng = seed;
	struct qfig f, m;
	int ret = -1;

	h->boot = malloc(sizeof(double) * R * QPOL_N * NB);
	if (!seq || !res || !h->boot)
		goto out;
	memset(&h->mean, 0, sizeof(h->mean));
	for (uint32_t o = 0; o < orders; o++) {
		memcpy(seq, h->idx, sizeof(*seq) * h->n);
		shuffle(seq, h->n, &rng);
		if (qsim_run(s, seq, h->n, 1, &f) <= 0)
			goto out;
		add_fig(&h->mean, &f, orders);
	}
	for (uint32_t b = 0; b < R; b++) {
		memcpy(res, h->idx, sizeof(*res) * h->n);
		shuffle(res, h->n, &rng); /* a random half: res[0 .. half) */
		memset(&m, 0, sizeof(m));
		for (uint32_t o = 0; o < bo; o++) {
			memcpy(seq, res, sizeof(*seq) * half);
			shuffle(seq, half, &rng);
			if (qsim_run(s, seq, half, 0, &f) <= 0)
				goto out;
			add_fig(&m, &f, bo);
		}
		for (int p = 0; p < QPOL_N; p++) {
			double *v = h->boot + ((size_t)b * QPOL_N + p) * NB;

			v[0] = m.step[p] / m.step[QPOL_RR];
			v[1] = 100.0 * (m.step[p] / m.step[QPOL_DOMAIN] - 1.0);
			v[2] = m.load[p];
		}
	}
	ret = 0;
out:
	free(res);
	free(seq);
	return ret;
}

/*
 * Options of the ELDR fits beyond the defaults (--slack, --balance-price,
 * --restarts, --decode-weight, --tau, --centroids-per-decoder, --spill-tau,
 * --spill-margin, --overflow; < 0: the default), to measure a variant
 * against the oracle and the exact-balance fit. In the tuned row each fixes
 * its choice.
 */
static struct {
	float slack, price, weight, tau, spill_tau;
	int32_t restarts, cpd, spill_margin, spread;
} variant = { -1, -1, -1, -1, -1, -1, -1, -1, -1 };

/* The router's scoring path for the ELDR rows (--path). */
static enum locus_eldr_path route_path = LOCUS_ELDR_PATH_AUTO;

/* o with the variant's options; the fixed rows' defaults otherwise. */
static void apply_variant(struct locus_eldrfit_opts *o)
{
	if (variant.slack >= 0)
		o->slack = variant.slack;
	if (variant.price >= 0)
		o->balance_price = variant.price;
	if (variant.weight >= 0)
		o->decode_weight = variant.weight;
	if (variant.tau >= 0)
		o->tau = variant.tau;
	if (variant.restarts >= 0)
		o->restarts = (uint32_t)variant.restarts;
	if (variant.cpd >= 0)
		o->centroids_per_decoder = (uint32_t)variant.cpd;
	if (variant.spill_tau >= 0) { /* 0: no spill, and no margin */
		o->spill_tau = variant.spill_tau;
		o->spill_margin = variant.spill_tau == 0.0f ? 0 :
				  variant.spill_margin >= 0 ? (uint32_t)variant.spill_margin : 1;
	}
	if (variant.spread >= 0)
		o->overflow_spread = variant.spread;
}

/*
 * The "ELDR" row's choices, as `locusctl fit --tau-batch B` makes them:
 * locus_eldrfit_tune on the calibration requests calib[n] of t alone (the
 * held-out half is never passed), the variant's options fixed. Sets o and
 * prints the choice. A half too small to tune keeps the fixed defaults, as
 * locusctl fit falls back.
 */
static int tune(const struct locus_trace *t, const uint32_t *calib, uint32_t n,
		struct locus_eldrfit_opts *o, uint32_t B, struct locus_error *e)
{
	struct locus_eldrfit_tune_opts to = { .batch = B, .replay = eldr_replay_router,
					      .oracle = eldr_replay_domain };
	struct locus_eldrfit_tune_result r;
	const struct locus_eldrfit_tune_point *c;
	struct eldr_replay_cache *cache;
	char spill[40];
	int ret;

	if (n < 2 * o->n_decoders * B) {
		printf("  tune skipped: %u calibration requests, the tuning needs 2 x K x B = %u "
		       "(the fixed defaults fitted)\n", n, 2 * o->n_decoders * B);
		return 0;
	}
	to.fixed = (variant.tau >= 0 ? LOCUS_ELDRFIT_FIX_TAU : 0) |
		   (variant.price >= 0 ? LOCUS_ELDRFIT_FIX_PRICE : 0) |
		   (variant.cpd >= 0 ? LOCUS_ELDRFIT_FIX_CPD : 0) |
		   (variant.spill_tau >= 0 ? LOCUS_ELDRFIT_FIX_SPILL : 0) |
		   (variant.spread >= 0 ? LOCUS_ELDRFIT_FIX_SPREAD : 0);
	if (eldr_replay_cache_new(&cache) < 0) {
		e->code = ENOMEM;
		snprintf(e->msg, sizeof(e->msg), "out of memory");
		return -1;
	}
	to.replay_arg = cache;
	to.oracle_arg = cache;
	ret = locus_eldrfit_tune(t, calib, n, o, &to, &r, e);
	eldr_replay_cache_free(cache);
	if (ret < 0)
		return -1;
	c = &r.pt[r.chosen];
	if (c->spill_tau != 0.0f)
		snprintf(spill, sizeof(spill), "spill tau %.3g margin %u", (double)c->spill_tau,
			 c->spill_margin);
	else
		snprintf(spill, sizeof(spill), "no spill");
	printf("  tune (calibration half, 2 folds of %u/%u, %u points): balance price %.3g, %u "
	       "centroid(s) per decoder, tau %.3g, overflow %s, %s: %.1f pairs / load %.3f "
	       "(folds %.3f %.3f); bound %.3f %.3f (%s; exact balance %.1f/%.3f",
	       r.n_part[0], r.n_part[1], r.n_pt, (double)c->balance_price,
	       c->centroids_per_decoder, (double)c->tau, c->overflow_spread ? "spread" : "nearest",
	       spill, c->pairs, c->load, c->fold_load[0], c->fold_load[1], r.fold_bound[0],
	       r.fold_bound[1], r.bound_oracle ? "the oracle's" : "exact balance's", r.ref_pairs,
	       r.ref_load);
	if (r.bound_oracle)
		printf(", oracle %.1f/%.3f", r.oracle_pairs, r.oracle_load);
	printf(")%s\n", r.feasible ? "" : ", none within it: the least loaded");
	locus_eldrfit_tune_apply(c, o);
	locus_eldrfit_tune_result_free(&r);
	return 0;
}

/* The ELDR tables from the calibration half calib[n_calib] of t, and their routers. */
static int fit_policies(const struct locus_trace *t, const uint32_t *calib, uint32_t n_calib,
			const struct locus_trace *calt, uint32_t K, struct qsim *s, void **mem,
			struct locus_error *e)
{
	for (int p = QPOL_ELDR; p <= QPOL_ELDR_EXACT; p++) {
		struct locus_eldrfit_opts o;
		struct locus_eldrfit_result res;
		uint32_t *size, mn = UINT32_MAX, mx = 0;
		size_t msz;

		locus_eldrfit_opts_default(&o, K);
		if (p == QPOL_ELDR_NOMASK)
			o.no_mask = 1;
		apply_variant(&o);
		if (p == QPOL_ELDR && tune(t, calib, n_calib, &o, s->B, e) < 0)
			return -1;
		if (p == QPOL_ELDR_EXACT) /* the exact-balance fit: no options, tau 0.1, seed 1 */
			o = (struct locus_eldrfit_opts){ .n_decoders = K, .tau = 0.1f, .seed = 1 };
		if (locus_eldrfit_trace(calt, &o, &res, e) < 0)
			return -1;
		msz = locus_eldr_router_mem_size((uint8_t *)res.blob + 64, res.blob_len - 64);
		mem[p] = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
		size = calloc(K, sizeof(*size));
		if (!mem[p] || !size ||
		    locus_eldr_router_build(mem[p], msz, (uint8_t *)res.blob + 64,
					    res.blob_len - 64, route_path, &s->r[p],
					    e) < 0) {
			free(size);
			locus_eldrfit_result_free(&res);
			return -1;
		}
		for (uint32_t i = 0; i < res.n_used; i++)
			size[res.assign[i]]++;
		for (uint32_t k = 0; k < K; k++) {
			mn = size[k] < mn ? size[k] : mn;
			mx = size[k] > mx ? size[k] : mx;
		}
		printf("  fit %-18s clusters of %u..%u calibration requests (bounds %u..%u), "
		       "%u/%u layers, seed %llu of %u, %s, %u centroids, tau %.3g%s\n", pol_name[p],
		       mn, mx, res.size_lo, res.size_hi, res.n_masked, calt->n_layers,
		       (unsigned long long)res.seed, o.restarts ? o.restarts : 1,
		       res.decode_clustered ? "decode-aware" : "prefill only", res.n_centroids,
		       (double)o.tau, o.spill_tau != 0.0f ? ", spill" :
		       o.overflow_spread ? ", spread" : "");
		free(size);
		locus_eldrfit_result_free(&res);
	}
	return 0;
}

/*
 * Both halves side by side, each with its [95%] interval (over random halves
 * of that half's requests): pairs per step (x round-robin; ELDR rows also
 * in % against the oracle), the whole batch (held-out), the load.
 */
static void print_config(const struct half *h, const struct qsim *s, uint32_t R)
{
	const struct half *ho = &h[0], *ca = &h[1];
	double *tmp = malloc(sizeof(double) * R), lo, hi, lo2, hi2;

	if (!tmp)
		return;
	printf("  %-18s %-49s %-44s %s\n", "pairs per step", "held-out: x round-robin, vs oracle",
	       "calibration: the same", "whole batch, held-out");
	for (int p = 0; p < QPOL_N; p++) {
		char vs[40] = "", vsc[40] = "";

		if (p >= QPOL_ELDR && !s->r[p]) {
			printf("  %-18s not measured (not fitted, above)\n", pol_name[p]);
			continue;
		}
		interval(ho, R, p, 0, &lo, &hi, tmp);
		if (p >= QPOL_ELDR) {
			interval(ho, R, p, 1, &lo2, &hi2, tmp);
			snprintf(vs, sizeof(vs), "%+.2f%% [%+.2f,%+.2f]",
				 100.0 * (ho->mean.step[p] / ho->mean.step[QPOL_DOMAIN] - 1), lo2,
				 hi2);
			interval(ca, R, p, 1, &lo2, &hi2, tmp);
			snprintf(vsc, sizeof(vsc), "%+.2f%% [%+.2f,%+.2f]",
				 100.0 * (ca->mean.step[p] / ca->mean.step[QPOL_DOMAIN] - 1), lo2,
				 hi2);
		}
		printf("  %-18s %6.1f %.3fx [%.3f,%.3f] %-22s %6.1f %.3fx %-24s %7.1f %.3fx\n",
		       pol_name[p], ho->mean.step[p], ho->mean.step[QPOL_RR] > 0 ?
		       ho->mean.step[p] / ho->mean.step[QPOL_RR] : 0, lo, hi, vs, ca->mean.step[p],
		       ca->mean.step[QPOL_RR] > 0 ? ca->mean.step[p] / ca->mean.step[QPOL_RR] : 0,
		       vsc, ho->mean.whole[p], ho->mean.whole[QPOL_RR] > 0 ?
		       ho->mean.whole[p] / ho->mean.whole[QPOL_RR] : 0);
	}
	printf("  %-18s %-30s %-22s %-22s %s\n", "load, no cap", "max/mean per round: held-out",
	       "calibration", "over all rounds: held", "calibration");
	for (int p = 0; p < QPOL_N; p++) {
		if (p >= QPOL_ELDR && !s->r[p]) {
			printf("  %-18s not measured\n", pol_name[p]);
			continue;
		}
		interval(ho, R, p, 2, &lo, &hi, tmp);
		interval(ca, R, p, 2, &lo2, &hi2, tmp);
		printf("  %-18s %.2f [%.2f,%.2f]%-13s %.2f [%.2f,%.2f]%-4s %-22.2f %.2f\n",
		       pol_name[p], ho->mean.load[p], lo, hi, "", ca->mean.load[p], lo2, hi2, "",
		       ho->mean.share[p], ca->mean.share[p]);
	}
	free(tmp);
}

/* Arrival orders of the clairvoyant line (--clairvoyant N; 0: not printed). */
static uint32_t clairvoyant_orders = 4;

/*
 * The held-out half's room below the oracle for a policy that knew the
 * decode experts (qsim_swap_search), over `orders` arrival orders.
 */
static int clairvoyant(struct qsim *s, const struct half *h, uint32_t orders)
{
	uint32_t *seq = malloc(sizeof(*seq) * h->n);
	double o_sum = 0, b_sum = 0, o, b;
	uint64_t rng = 0xc1a1ull + s->K * 64 + s->B;

	s->cost = malloc(sizeof(*s->cost) * s->K);
	if (!seq || !s->cost) {
		free(seq);
		return -1;
	}
	for (uint32_t k = 0; k < orders; k++) {
		memcpy(seq, h->idx, sizeof(*seq) * h->n);
		shuffle(seq, h->n, &rng);
		qsim_swap_search(s, seq, h->n, &o, &b);
		o_sum += o / orders;
		b_sum += b / orders;
	}
	printf("  clairvoyant        held-out, %u orders: the oracle's batches %.1f pairs per "
	       "step, swapped between decoders with the decode experts known %.1f (%+.2f%%; a "
	       "local optimum: the best assignment reads at most this)\n", orders, o_sum, b_sum,
	       100.0 * (b_sum / o_sum - 1));
	free(s->cost);
	s->cost = NULL;
	free(seq);
	return 0;
}

static int run(const struct locus_trace *t, uint32_t K, uint32_t B, uint32_t orders,
	       uint32_t R, uint32_t bo, double vs_oracle[2], double load_over[2])
{
	struct qsim s = { .t = t, .K = K, .B = B };
	struct half h[2] = { { .name = "held-out" }, { .name = "calibration" } };
	struct locus_trace_req *cal = NULL;
	struct locus_trace *calt = NULL;
	struct locus_error e = { 0 };
	void *mem[QPOL_N] = { 0 };
	struct qsteps steps = { 0 };
	uint8_t *sigs = NULL;
	int ret = 1;

	s.slen = locus_eldr_sig_len(t->n_layers, t->n_experts);
	cal = calloc(t->n_requests, sizeof(*cal));
	h[0].idx = calloc(t->n_requests, sizeof(uint32_t));
	h[1].idx = calloc(t->n_requests, sizeof(uint32_t));
	sigs = malloc(s.slen * t->n_requests);
	s.seen = calloc((size_t)t->n_layers * t->n_experts, sizeof(*s.seen));
	s.batch = malloc(sizeof(*s.batch) * K * B);
	s.fill = calloc(K, sizeof(*s.fill));
	s.total = calloc((size_t)QPOL_N * K, sizeof(*s.total));
	if (!cal || !h[0].idx || !h[1].idx || !sigs || !s.seen || !s.batch || !s.fill || !s.total)
		goto out;
	s.sigs = sigs;
	if (qsteps_build(&steps, t) < 0)
		goto out;
	s.steps = &steps;
	for (uint32_t i = 0; i < t->n_requests; i++) {
		if (locus_eldr_sig_build(sigs + s.slen * i, s.slen, t->n_layers, t->n_experts,
					 t->k, t->reqs[i].prompt, t->reqs[i].prompt_len, 0,
					 &e) < 0)
			goto fail;
		if (i % 2 == 0) {
			cal[h[1].n] = t->reqs[i];
			h[1].idx[h[1].n++] = i;
		} else {
			h[0].idx[h[0].n++] = i;
		}
	}
	if (h[0].n < K * B || h[1].n < K * B) {
		fprintf(stderr, "eldr_quality: %u held-out requests are less than one round of %u\n",
			h[0].n, K * B);
		goto out;
	}
	printf("K=%u decoders, batch B=%u: %u calibration / %u held-out requests, mean of %u "
	       "arrival orders of %u rounds, [95%%] over %u random halves x %u orders\n", K, B,
	       h[1].n, h[0].n, orders, h[0].n / (K * B), R, bo);
	if (locus_trace_from_arrays(t->n_layers, t->k, t->n_experts, h[1].n, cal, NULL, &calt,
				    &e) < 0 ||
	    fit_policies(t, h[1].idx, h[1].n, calt, K, &s, mem, &e) < 0)
		goto fail;
	if (evaluate(&s, &h[0], orders, R, bo, 0x5eed0000ull + K * 64 + B) < 0 ||
	    evaluate(&s, &h[1], orders, R, bo, 0xca110000ull + K * 64 + B) < 0) {
		fprintf(stderr, "eldr_quality: routing failed\n");
		goto out;
	}
	print_config(h, &s, R);
	if (clairvoyant_orders && clairvoyant(&s, &h[0], clairvoyant_orders) < 0)
		goto out;
	for (int i = 0; i < 2; i++) {
		static const int row[2] = { QPOL_ELDR, QPOL_ELDR_FIXED };
		int p = row[i];

		if (!s.r[p]) { /* a row not fitted: not measured */
			vs_oracle[i] = load_over[i] = NAN;
			continue;
		}
		vs_oracle[i] = 100.0 * (h[0].mean.step[p] / h[0].mean.step[QPOL_DOMAIN] - 1);
		load_over[i] = h[0].mean.load[p] - h[0].mean.load[QPOL_DOMAIN];
	}
	ret = 0;
	goto out;
fail:
	fprintf(stderr, "eldr_quality: %s (%s)\n", e.msg, locus_strerror(e.code));
out:
	for (int p = 0; p < QPOL_N; p++)
		free(mem[p]);
	locus_trace_free(calt);
	free(h[0].boot);
	free(h[1].boot);
	free(s.total);
	free(s.fill);
	free(s.batch);
	free(s.seen);
	qsteps_free(&steps);
	free(sigs);
	free(h[1].idx);
	free(h[0].idx);
	free(cal);
	return ret;
}

static int parse_float(const char *s, float max, float *v)
{
	char *end;
	float x;

	errno = 0;
	x = strtof(s, &end);
	if (errno || !*s || *end || !(x >= 0) || x > max)
		return -1;
	*v = x;
	return 0;
}

static int parse_count(const char *s, uint32_t max, uint32_t *v)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(s, &end, 10);
	if (errno || !*s || *end || *s == '-' || !x || x > max)
		return -1;
	*v = (uint32_t)x;
	return 0;
}

int main(int argc, char **argv)
{
	static const uint32_t cfg[][2] = { { 4, 4 }, { 8, 4 }, { 4, 8 }, { 8, 2 } };
	const char *trace = NULL;
	uint32_t orders = 50, R = 100, bo = 4, at_least[2] = { 0 }, no_busier[2] = { 0 };
	double vs[4][2] = { { 0 } }, lo[4][2] = { { 0 } };
	struct locus_error e = { 0 };
	struct locus_trace *t = NULL;
	int ret = 0, check = 0;

	for (int a = 1; a < argc; a += 2) {
		if (!strcmp(argv[a], "--check")) {
			check = 1;
			a--; /* takes no value */
		} else if (a + 1 < argc && !strcmp(argv[a], "--trace")) {
			trace = argv[a + 1];
		} else if (a + 1 < argc && !strcmp(argv[a], "--path")) {
			if (locus_eldr_path_parse(argv[a + 1], &route_path) < 0 ||
			    !locus_eldr_path_supported(route_path))
				goto usage;
		} else if (a + 1 < argc && !strcmp(argv[a], "--orders")) {
			if (parse_count(argv[a + 1], 100000, &orders) < 0)
				goto usage;
		} else if (a + 1 < argc && !strcmp(argv[a], "--boot")) {
			if (parse_count(argv[a + 1], 100000, &R) < 0)
				goto usage;
		} else if (a + 1 < argc && !strcmp(argv[a], "--boot-orders")) {
			if (parse_count(argv[a + 1], 100000, &bo) < 0)
				goto usage;
		} else if (a + 1 < argc && !strcmp(argv[a], "--slack")) {
			if (parse_float(argv[a + 1], 1, &variant.slack) < 0)
				goto usage;
		} else if (a + 1 < argc && !strcmp(argv[a], "--balance-price")) {
			if (parse_float(argv[a + 1], 100, &variant.price) < 0)
				goto usage;
		} else if (a + 1 < argc && !strcmp(argv[a], "--decode-weight")) {
			if (parse_float(argv[a + 1], 100, &variant.weight) < 0)
				goto usage;
		} else if (a + 1 < argc && !strcmp(argv[a], "--tau")) {
			if (parse_float(argv[a + 1], 2, &variant.tau) < 0)
				goto usage;
		} else if (a + 1 < argc && !strcmp(argv[a], "--spill-tau")) {
			if (parse_float(argv[a + 1], 2, &variant.spill_tau) < 0)
				goto usage;
		} else if (a + 1 < argc && !strcmp(argv[a], "--spill-margin")) {
			uint32_t m;

			if (parse_count(argv[a + 1], 1000000, &m) < 0)
				goto usage;
			variant.spill_margin = (int32_t)m;
		} else if (a + 1 < argc && !strcmp(argv[a], "--centroids-per-decoder")) {
			uint32_t m;

			if (parse_count(argv[a + 1], LOCUS_ELDRFIT_MAX_CENTROIDS_PER_DECODER, &m) < 0)
				goto usage;
			variant.cpd = (int32_t)m;
		} else if (a + 1 < argc && !strcmp(argv[a], "--overflow")) {
			if (strcmp(argv[a + 1], "spread") && strcmp(argv[a + 1], "nearest"))
				goto usage;
			variant.spread = !strcmp(argv[a + 1], "spread");
		} else if (a + 1 < argc && !strcmp(argv[a], "--clairvoyant")) {
			if (strcmp(argv[a + 1], "0") &&
			    parse_count(argv[a + 1], 1000, &clairvoyant_orders) < 0)
				goto usage;
			if (!strcmp(argv[a + 1], "0"))
				clairvoyant_orders = 0;
		} else if (a + 1 < argc && !strcmp(argv[a], "--restarts")) {
			uint32_t r;

			if (parse_count(argv[a + 1], 1000, &r) < 0)
				goto usage;
			variant.restarts = (int32_t)r;
		} else {
			goto usage;
		}
	}
	locus_data_find_root(argv[0]);
	if (!trace) {
		t = load_esft(locus_data_dir());
		if (t)
			printf("ESFT (full data): %u windows of 64 tokens, 4 domains\n",
			       t->n_requests);
		else
			trace = locus_data_sample_path();
	}
	if (trace) {
		if (locus_trace_load(trace, NULL, &t, &e) < 0) {
			fprintf(stderr, "eldr_quality: %s\n", e.msg);
			return 1;
		}
		printf("%s: %u requests\n", trace, t->n_requests);
	}
	for (uint32_t c = 0; c < 4; c++) {
		int r = run(t, cfg[c][0], cfg[c][1], orders, R, bo, vs[c], lo[c]);

		ret |= r;
		for (int i = 0; i < 2; i++) {
			if (r)
				vs[c][i] = NAN; /* not measured */
			if (isnan(vs[c][i]))
				continue;
			at_least[i] += vs[c][i] <= 0;
			no_busier[i] += lo[c][i] <= 0;
		}
	}
	for (int i = 0; i < 2; i++) {
		static const char *const name[2] = { "ELDR", "ELDR fixed" };

		printf("%s against the oracle on held-out requests, per decode step "
		       "(busiest decoder's load):", name[i]);
		for (uint32_t c = 0; c < 4; c++)
			if (isnan(vs[c][i]))
				printf(" K=%u B=%u n/a", cfg[c][0], cfg[c][1]);
			else
				printf(" K=%u B=%u %+.2f%% (%+.3f)", cfg[c][0], cfg[c][1],
				       vs[c][i], lo[c][i]);
		printf("; reads no more than the oracle at %u of 4, no busier at %u of 4\n",
		       at_least[i], no_busier[i]);
	}
	locus_trace_free(t);
	if (check && !ret && (at_least[0] < 4 || no_busier[0] < 4)) {
		printf("check: FAILED: ELDR reads no more than the oracle at %u of 4 (K, B), no "
		       "busier at %u of 4 (a configuration not measured counts as failed)\n",
		       at_least[0], no_busier[0]);
		return 1;
	}
	if (check && !ret)
		printf("check: ELDR reads no more than the oracle and is no busier at every K, B\n");
	return ret;
usage:
	fprintf(stderr, "usage: eldr_quality [--check] [--trace FILE.jsonl] [--path auto|auto-i8|...] "
		"[--orders N] [--boot R] "
		"[--boot-orders N] [--slack S] [--balance-price P] [--restarts R] "
		"[--decode-weight W] [--tau T] [--centroids-per-decoder M] [--spill-tau T] "
		"[--spill-margin M] [--overflow spread|nearest] [--clairvoyant N]\n");
	return 2;
}
