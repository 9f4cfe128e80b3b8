// SPDX-License-Identifier: MIT
/*
 * The routing choices made from the calibration data (locusctl fit's
 * default, and --tau auto): two-fold replay of the calibration requests
 * through the router over a grid of fit choices (balance price, centroids
 * per decoder) and routing choices (tau, overflow rule, load spill), the
 * fewest expert pairs per decode step within a load bound in each fold: the
 * domain oracle's load when the calibration requests are labelled, else the
 * exact-balance fit's.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eldr_fit_priv.h"
#include "locus_eldr.h"
#include "locus_eldrfit.h"
#include "locus_err_priv.h"

#define FOLDS 2

static const float def_taus[] = { 0.0f, 0.05f, 0.1f, 0.15f, 0.2f };
static const float def_spills[] = { 0.0f, 0.2f, 0.3f, 0.5f };
static const uint32_t def_margins[] = { 1, 2 };
static const uint32_t def_cpd[] = { 1, 2, 3, 4 };
static const int def_spread[] = { 0, 1 };

/* The search space with every default filled in. */
struct space {
	const float *taus, *spills, *prices;
	const uint32_t *margins, *cpd;
	const int *spread;
	uint32_t n_taus, n_spills, n_prices, n_margins, n_cpd, n_spread;
	float own_prices[2];
	/* the values fixed from the fit's options */
	float fix_tau, fix_spill;
	uint32_t fix_margin, fix_cpd;
	int fix_spread;
};

/* The choices to->fixed takes from o: one-value lists. */
static void fix_space(const struct locus_eldrfit_opts *o, uint32_t fixed, struct space *sp)
{
	if (fixed & LOCUS_ELDRFIT_FIX_TAU) {
		sp->fix_tau = o->tau;
		sp->taus = &sp->fix_tau;
		sp->n_taus = 1;
	}
	if (fixed & LOCUS_ELDRFIT_FIX_PRICE) {
		sp->own_prices[0] = o->balance_price;
		sp->prices = sp->own_prices;
		sp->n_prices = 1;
	}
	if (fixed & LOCUS_ELDRFIT_FIX_CPD) {
		sp->fix_cpd = o->centroids_per_decoder ? o->centroids_per_decoder : 1;
		sp->cpd = &sp->fix_cpd;
		sp->n_cpd = 1;
	}
	if (fixed & LOCUS_ELDRFIT_FIX_SPILL) {
		sp->fix_spill = o->spill_tau;
		sp->fix_margin = o->spill_margin ? o->spill_margin : 1;
		sp->spills = &sp->fix_spill;
		sp->n_spills = 1;
		sp->margins = &sp->fix_margin;
		sp->n_margins = 1;
	}
	if (fixed & LOCUS_ELDRFIT_FIX_SPREAD) {
		sp->fix_spread = !!o->overflow_spread;
		sp->spread = &sp->fix_spread;
		sp->n_spread = 1;
	}
}

#define PICK(dst, n_dst, src, n_src, def)                                        \
	do {                                                                     \
		(dst) = (src) ? (src) : (def);                                   \
		(n_dst) = (src) ? (n_src) : (uint32_t)LOCUS_ARRAY_SIZE(def);     \
	} while (0)

static int list_bad(uint32_t n, const void *list)
{
	return list && (!n || n > LOCUS_ELDRFIT_TUNE_LIST_MAX);
}

static int fill_space(const struct locus_eldrfit_opts *o, const struct locus_eldrfit_tune_opts *to,
		      struct space *sp, struct locus_error *err)
{
	if (list_bad(to->n_taus, to->taus) || list_bad(to->n_spill_taus, to->spill_taus) ||
	    list_bad(to->n_spill_margins, to->spill_margins) ||
	    list_bad(to->n_centroids_per_decoder, to->centroids_per_decoder) ||
	    list_bad(to->n_balance_prices, to->balance_prices) ||
	    list_bad(to->n_overflow_spread, to->overflow_spread))
		return locus_error_set(err, LOCUS_ERANGE, "tune: a list of 0 or more than %u values",
				       LOCUS_ELDRFIT_TUNE_LIST_MAX);
	PICK(sp->taus, sp->n_taus, to->taus, to->n_taus, def_taus);
	PICK(sp->spills, sp->n_spills, to->spill_taus, to->n_spill_taus, def_spills);
	PICK(sp->margins, sp->n_margins, to->spill_margins, to->n_spill_margins, def_margins);
	PICK(sp->cpd, sp->n_cpd, to->centroids_per_decoder, to->n_centroids_per_decoder, def_cpd);
	PICK(sp->spread, sp->n_spread, to->overflow_spread, to->n_overflow_spread, def_spread);
	if (to->balance_prices) {
		sp->prices = to->balance_prices;
		sp->n_prices = to->n_balance_prices;
	} else {
		sp->own_prices[0] = 0.0f;
		sp->own_prices[1] = o->balance_price;
		sp->prices = sp->own_prices;
		sp->n_prices = o->balance_price > 0.0f ? 2 : 1;
	}
	fix_space(o, to->fixed, sp);
	for (uint32_t g = 0; g < sp->n_taus; g++)
		if (!isfinite(sp->taus[g]) || sp->taus[g] < 0.0f || sp->taus[g] > 2.0f ||
		    (g && !(sp->taus[g] > sp->taus[g - 1])))
			return locus_error_set(err, LOCUS_ERANGE,
					       "tau auto: grid must ascend within [0, 2]");
	for (uint32_t g = 0; g < sp->n_spills; g++)
		if (!isfinite(sp->spills[g]) || sp->spills[g] < 0.0f || sp->spills[g] > 2.0f)
			return locus_error_set(err, LOCUS_ERANGE, "tune: spill tau %g outside [0, 2]",
					       (double)sp->spills[g]);
	for (uint32_t g = 0; g < sp->n_margins; g++)
		if (!sp->margins[g])
			return locus_error_set(err, LOCUS_ERANGE, "tune: a spill margin of 0");
	for (uint32_t g = 0; g < sp->n_cpd; g++)
		if (!sp->cpd[g] || sp->cpd[g] > LOCUS_ELDRFIT_MAX_CENTROIDS_PER_DECODER)
			return locus_error_set(err, LOCUS_ERANGE,
					       "tune: %u centroids per decoder (1..%u)", sp->cpd[g],
					       LOCUS_ELDRFIT_MAX_CENTROIDS_PER_DECODER);
	for (uint32_t g = 0; g < sp->n_prices; g++)
		if (!isfinite(sp->prices[g]) || sp->prices[g] < 0.0f || sp->prices[g] > 100.0f)
			return locus_error_set(err, LOCUS_ERANGE, "tune: balance price %g",
					       (double)sp->prices[g]);
	for (uint32_t g = 0; g < sp->n_spread; g++)
		if (sp->spread[g] != 0 && sp->spread[g] != 1)
			return locus_error_set(err, LOCUS_ERANGE, "tune: overflow rule %d",
					       sp->spread[g]);
	return 0;
}

/*
 * The routing points of one fit, in search order (tau, overflow rule, then
 * each spill tau of the list: 0 no spill, else only above tau, x margin):
 * into pt (NULL: count only).
 */
static uint32_t route_points(const struct space *sp, float price, uint32_t cpd,
			     struct locus_eldrfit_tune_point *pt)
{
	uint32_t n = 0;

	for (uint32_t a = 0; a < sp->n_taus; a++)
		for (uint32_t b = 0; b < sp->n_spread; b++) {
			struct locus_eldrfit_tune_point p = {
				.balance_price = price, .centroids_per_decoder = cpd,
				.tau = sp->taus[a], .overflow_spread = sp->spread[b],
			};

			for (uint32_t c = 0; c < sp->n_spills; c++) {
				if (sp->spills[c] == 0.0f) {
					p.spill_tau = 0;
					p.spill_margin = 0;
					if (pt)
						pt[n] = p;
					n++;
					continue;
				}
				if (!(sp->spills[c] > sp->taus[a]))
					continue; /* not wider than the band */
				for (uint32_t d = 0; d < sp->n_margins; d++) {
					p.spill_tau = sp->spills[c];
					p.spill_margin = sp->margins[d];
					if (pt)
						pt[n] = p;
					n++;
				}
			}
		}
	return n;
}

static int check_trace(const struct locus_trace *t, const uint32_t *calib, uint32_t n_calib,
		       const struct locus_eldrfit_opts *o, const struct locus_eldrfit_tune_opts *to,
		       uint32_t B, struct locus_error *err)
{
	int any_decode = 0;

	for (uint32_t i = 0; calib && i < n_calib; i++)
		if (calib[i] >= t->n_requests)
			return locus_error_set(err, LOCUS_ERANGE, "calibration index %u of %u",
					       calib[i], t->n_requests);
	if (!to || !to->replay)
		return locus_error_set(err, EINVAL, "tau auto: no replay given");
	if (!isfinite(to->load_bound) || to->load_bound < 0.0f)
		return locus_error_set(err, LOCUS_ERANGE, "tau auto: load bound %g",
				       (double)to->load_bound);
	if (!B || B > 100000 || !o || !o->n_decoders)
		return locus_error_set(err, LOCUS_ERANGE, "tau auto: batch %u, K %u", B,
				       o ? o->n_decoders : 0);
	if ((uint64_t)o->n_decoders * B * FOLDS > n_calib)
		return locus_error_set(err, LOCUS_ERANGE,
				       "tau auto needs at least 2 x K x B = %llu calibration "
				       "requests (one round of K=%u decoders x B=%u per part), "
				       "the trace has %u",
				       (unsigned long long)o->n_decoders * B * FOLDS,
				       o->n_decoders, B, n_calib);
	for (uint32_t i = 0; i < n_calib && !any_decode; i++)
		any_decode = t->reqs[calib ? calib[i] : i].gen_len > 0;
	if (!any_decode)
		return locus_error_set(err, LOCUS_ERANGE,
				       "tau auto replays decode steps: the calibration trace has "
				       "no routed_experts (decode tokens)");
	return 0;
}

/* The sub-trace of requests idx[n] of t (the fit's input for one part). */
static int sub_trace(const struct locus_trace *t, const uint32_t *idx, uint32_t n,
		     struct locus_trace **out, struct locus_error *err)
{
	struct locus_trace_req *reqs = malloc(sizeof(*reqs) * n);
	int ret;

	if (!reqs)
		return locus_error_set(err, ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++)
		reqs[i] = t->reqs[idx[i]];
	ret = locus_trace_from_arrays(t->n_layers, t->k, t->n_experts, n, reqs, NULL, out, err);
	free(reqs);
	return ret;
}

/* The table payload's header inside a sealed blob (the fit's result). */
static struct locus_eldr_tbl_hdr *payload_hdr(const struct locus_eldrfit_result *r)
{
	return (struct locus_eldr_tbl_hdr *)((uint8_t *)r->blob + 64);
}

/* Replay val[n_val] through fit's table with point p's routing; adds / FOLDS into p. */
static int replay_point(const struct locus_trace *t, const struct locus_eldrfit_tune_opts *to,
			struct locus_eldrfit_result *fit, struct locus_eldrfit_tune_point *p,
			uint32_t f, const uint32_t *val, uint32_t n_val, uint32_t B,
			uint32_t orders, uint64_t seed, struct locus_error *err)
{
	struct locus_eldr_tbl_hdr *h = payload_hdr(fit);
	double pairs, load;
	int ret;

	h->tau = p->tau;
	h->spill_tau = p->spill_tau;
	h->spill_margin = p->spill_tau != 0.0f ? p->spill_margin : 0;
	h->flags = p->overflow_spread ? LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD : 0;
	ret = to->replay(to->replay_arg, t, h, fit->blob_len - 64, val, n_val, B, orders, seed,
			 &pairs, &load, err);
	if (ret < 0)
		return ret;
	p->fold_pairs[f] = pairs;
	p->fold_load[f] = load;
	p->pairs += pairs / FOLDS;
	p->load += load / FOLDS;
	return 0;
}

/*
 * One fold: the exact-balance reference and, for each (price, centroids per
 * decoder), a fit on part[f] replayed on part[1 - f] at each of its routing
 * points (the next n_route of tr->pt each time).
 */
static int run_fold(const struct locus_trace *t, uint32_t *const part[FOLDS],
		    const uint32_t n_part[FOLDS], uint32_t f, const struct locus_eldrfit_opts *o,
		    const struct locus_eldrfit_tune_opts *to, const struct space *sp, uint32_t B,
		    uint32_t orders, struct locus_eldrfit_tune_result *tr, struct locus_error *err)
{
	const uint64_t seed = 0x7a0a0707ull + f;
	const uint32_t *val = part[1 - f], n_val = n_part[1 - f];
	struct locus_eldrfit_opts fo = *o, xo = { 0 };
	struct locus_eldrfit_result ref = { 0 };
	struct locus_eldrfit_tune_point rp = { .tau = LOCUS_ELDR_TAU_DEFAULT };
	struct locus_trace *sub = NULL;
	struct eldr_prep prep = { 0 };
	uint32_t at = 0;
	int ret;

	ret = sub_trace(t, part[f], n_part[f], &sub, err);
	if (ret < 0)
		return ret;
	fo.progress = NULL;
	fo.tau = 0;
	fo.spill_tau = 0;
	fo.spill_margin = 0;
	fo.overflow_spread = 0;
	xo.n_decoders = o->n_decoders;
	xo.decoder_ids = o->decoder_ids;
	xo.tau = LOCUS_ELDR_TAU_DEFAULT;
	xo.seed = o->seed;
	xo.no_mask = o->no_mask;
	xo.max_iter = o->max_iter;
	xo.mask_sample = o->mask_sample;
	xo.mask_neighbours = o->mask_neighbours;
	/* one preparation (mask, vectors) for every fit of the part; a clustering per price */
	ret = eldr_prep_trace(sub, &fo, &prep, err);
	if (ret < 0)
		goto out;
	ret = eldr_prep_fit(&prep, &xo, &ref, err);
	if (ret < 0)
		goto out;
	ret = replay_point(t, to, &ref, &rp, f, val, n_val, B, orders, seed, err);
	if (ret < 0)
		goto out;
	tr->ref_pairs += rp.pairs;
	tr->ref_load += rp.load;
	tr->ref_fold_load[f] = rp.fold_load[f];
	for (uint32_t a = 0; a < sp->n_prices; a++)
		for (uint32_t c = 0; c < sp->n_cpd; c++) {
			struct locus_eldrfit_result fit = { 0 };
			uint32_t n = route_points(sp, sp->prices[a], sp->cpd[c], NULL);

			fo.balance_price = sp->prices[a];
			fo.centroids_per_decoder = sp->cpd[c];
			ret = eldr_prep_fit(&prep, &fo, &fit, err);
			for (uint32_t i = 0; ret == 0 && i < n; i++)
				ret = replay_point(t, to, &fit, &tr->pt[at + i], f, val, n_val,
						   B, orders, seed, err);
			locus_eldrfit_result_free(&fit);
			if (ret < 0)
				goto out;
			at += n;
			if (o->progress)
				o->progress(o->progress_arg, "tune", f * sp->n_prices * sp->n_cpd +
					    a * sp->n_cpd + c + 1, FOLDS * sp->n_prices * sp->n_cpd);
		}
out:
	eldr_prep_free(&prep);
	locus_eldrfit_result_free(&ref);
	locus_trace_free(sub);
	return ret;
}

/*
 * Whether every calibration request of t carries a domain label, of at least
 * two domains: the oracle that knows the domain can be replayed.
 */
static int labelled(const struct locus_trace *t, const uint32_t *calib, uint32_t n_calib)
{
	uint32_t first = 0;
	int two = 0;

	for (uint32_t i = 0; i < n_calib; i++) {
		uint32_t d = t->reqs[calib ? calib[i] : i].domain;

		if (!d)
			return 0;
		two |= first && d != first;
		first = first ? first : d;
	}
	return two;
}

/* The domain oracle on each fold's replayed part, into the bounds. */
static int oracle_bounds(const struct locus_trace *t, uint32_t *const part[FOLDS],
			 const uint32_t n_part[FOLDS], uint32_t K,
			 const struct locus_eldrfit_tune_opts *to, uint32_t B, uint32_t orders,
			 struct locus_eldrfit_tune_result *tr, struct locus_error *err)
{
	for (uint32_t f = 0; f < FOLDS; f++) {
		double pairs, load;
		int ret = to->oracle(to->oracle_arg, t, K, part[1 - f], n_part[1 - f], B, orders,
				     0x7a0a0707ull + f, &pairs, &load, err);

		if (ret < 0)
			return ret;
		tr->fold_bound[f] = load;
		tr->oracle_pairs += pairs / FOLDS;
		tr->oracle_load += load / FOLDS;
	}
	tr->bound_oracle = 1;
	return 0;
}

/*
 * The fewest pairs within the bound in every fold (a mean within it can
 * hide one fold over it: the choice must hold on both halves it was
 * measured on); ties: lower load, then the later point.
 */
static void pick(struct locus_eldrfit_tune_result *tr)
{
	int have = 0;

	tr->feasible = 0;
	tr->chosen = 0;
	for (uint32_t g = 0; g < tr->n_pt; g++) {
		const struct locus_eldrfit_tune_point *p = &tr->pt[g], *b = &tr->pt[tr->chosen];
		int over = 0;

		for (uint32_t f = 0; f < FOLDS; f++)
			over |= p->fold_load[f] > tr->fold_bound[f];
		if (over)
			continue;
		if (!have || p->pairs < b->pairs || (p->pairs == b->pairs && p->load <= b->load))
			tr->chosen = g;
		have = 1;
	}
	if (have) {
		tr->feasible = 1;
		return;
	}
	for (uint32_t g = 0; g < tr->n_pt; g++)
		if (tr->pt[g].load <= tr->pt[tr->chosen].load)
			tr->chosen = g;
}

int locus_eldrfit_tune(const struct locus_trace *t, const uint32_t *calib, uint32_t n_calib,
		       const struct locus_eldrfit_opts *o, const struct locus_eldrfit_tune_opts *to,
		       struct locus_eldrfit_tune_result *tr, struct locus_error *err)
{
	uint32_t B, orders, *part[FOLDS] = { 0 }, n_part[FOLDS] = { 0 };
	struct space sp;
	int ret;

	memset(tr, 0, sizeof(*tr));
	if (!t || !t->n_requests)
		return locus_error_set(err, LOCUS_EPARSE, "empty trace");
	if (!calib)
		n_calib = t->n_requests;
	B = to && to->batch ? to->batch : LOCUS_ELDRFIT_TAU_BATCH_DEFAULT;
	orders = to && to->orders ? to->orders : LOCUS_ELDRFIT_TAU_ORDERS_DEFAULT;
	ret = check_trace(t, calib, n_calib, o, to, B, err);
	if (ret < 0)
		return ret;
	ret = fill_space(o, to, &sp, err);
	if (ret < 0)
		return ret;
	for (uint32_t a = 0; a < sp.n_prices; a++)
		for (uint32_t c = 0; c < sp.n_cpd; c++)
			tr->n_pt += route_points(&sp, sp.prices[a], sp.cpd[c], NULL);
	if (!tr->n_pt)
		return locus_error_set(err, LOCUS_ERANGE,
				       "tune: no routing point (a fixed spill tau %g not wider than "
				       "any tau)", (double)sp.spills[0]);
	tr->pt = calloc(tr->n_pt, sizeof(*tr->pt));
	for (int f = 0; f < FOLDS; f++)
		part[f] = malloc(sizeof(uint32_t) * (n_calib / FOLDS + 1));
	if (!tr->pt || !part[0] || !part[1]) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t a = 0, at = 0; a < sp.n_prices; a++)
		for (uint32_t c = 0; c < sp.n_cpd; c++)
			at += route_points(&sp, sp.prices[a], sp.cpd[c], tr->pt + at);
	for (uint32_t i = 0; i < n_calib; i++) {
		uint32_t f = i % FOLDS;

		part[f][n_part[f]++] = calib ? calib[i] : i;
	}
	for (uint32_t f = 0; f < FOLDS; f++) {
		ret = run_fold(t, part, n_part, f, o, to, &sp, B, orders, tr, err);
		if (ret < 0)
			goto out;
	}
	tr->n_part[0] = n_part[0];
	tr->n_part[1] = n_part[1];
	for (uint32_t f = 0; f < FOLDS; f++)
		tr->fold_bound[f] = to->load_bound > 0 ? to->load_bound : tr->ref_fold_load[f];
	if (!(to->load_bound > 0) && to->oracle && labelled(t, calib, n_calib)) {
		ret = oracle_bounds(t, part, n_part, o->n_decoders, to, B, orders, tr, err);
		if (ret < 0)
			goto out;
	}
	tr->bound = (tr->fold_bound[0] + tr->fold_bound[1]) / FOLDS;
	pick(tr);
out:
	for (int f = 0; f < FOLDS; f++)
		free(part[f]);
	if (ret < 0)
		locus_eldrfit_tune_result_free(tr);
	return ret;
}

void locus_eldrfit_tune_apply(const struct locus_eldrfit_tune_point *p,
			      struct locus_eldrfit_opts *o)
{
	o->balance_price = p->balance_price;
	o->centroids_per_decoder = p->centroids_per_decoder;
	o->tau = p->tau;
	o->spill_tau = p->spill_tau;
	o->spill_margin = p->spill_tau != 0.0f ? p->spill_margin : 0;
	o->overflow_spread = p->overflow_spread;
}

void locus_eldrfit_tune_result_free(struct locus_eldrfit_tune_result *tr)
{
	if (!tr)
		return;
	free(tr->pt);
	memset(tr, 0, sizeof(*tr));
}
