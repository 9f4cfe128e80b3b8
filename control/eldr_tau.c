// SPDX-License-Identifier: MIT
/*
 * tau chosen from the calibration data (locusctl fit --tau auto): two-fold
 * replay of the calibration requests through the router over a grid of
 * bands, the fewest expert pairs per decode step within a load bound.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_eldr.h"
#include "locus_eldrfit.h"

static const float default_grid[] = { 0.0f,   0.025f, 0.05f, 0.075f, 0.1f,
				      0.125f, 0.15f,  0.2f,  0.25f,  0.3f };

#define FOLDS 2

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

static int check_tau_opts(const struct locus_trace *t, const uint32_t *calib, uint32_t n_calib,
			  const struct locus_eldrfit_opts *o,
			  const struct locus_eldrfit_tau_opts *to, const float *grid,
			  uint32_t n_grid, uint32_t B, struct locus_error *err)
{
	int any_decode = 0;

	if (!to || !to->replay)
		return locus_error_set(err, EINVAL, "tau auto: no replay given");
	if (!n_grid || n_grid > LOCUS_ELDRFIT_TAU_GRID_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "tau auto: %u grid points (1..%u)",
				       n_grid, LOCUS_ELDRFIT_TAU_GRID_MAX);
	for (uint32_t g = 0; g < n_grid; g++)
		if (!isfinite(grid[g]) || grid[g] < 0.0f || grid[g] > 2.0f ||
		    (g && !(grid[g] > grid[g - 1])))
			return locus_error_set(err, LOCUS_ERANGE,
					       "tau auto: grid must ascend within [0, 2]");
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

/*
 * One fold: fit on part[f], replay part[1 - f] at every tau and with the
 * exact-balance reference; adds each figure / FOLDS into tr.
 */
static int run_fold(const struct locus_trace *t, uint32_t *const part[FOLDS],
		    const uint32_t n_part[FOLDS], uint32_t f, const struct locus_eldrfit_opts *o,
		    const struct locus_eldrfit_tau_opts *to, const float *grid, uint32_t n_grid,
		    uint32_t B, uint32_t orders, struct locus_eldrfit_tau_result *tr,
		    struct locus_error *err)
{
	const uint64_t seed = 0x7a0a0707ull + f;
	const uint32_t *val = part[1 - f], n_val = n_part[1 - f];
	struct locus_eldrfit_opts fo = *o, xo = { 0 };
	struct locus_eldrfit_result fit = { 0 }, ref = { 0 };
	struct locus_trace *sub = NULL;
	double pairs, load;
	int ret;

	ret = sub_trace(t, part[f], n_part[f], &sub, err);
	if (ret < 0)
		return ret;
	fo.progress = NULL;
	fo.tau = 0;
	xo.n_decoders = o->n_decoders;
	xo.decoder_ids = o->decoder_ids;
	xo.tau = LOCUS_ELDR_TAU_DEFAULT;
	xo.seed = o->seed;
	xo.no_mask = o->no_mask;
	xo.max_iter = o->max_iter;
	xo.mask_sample = o->mask_sample;
	xo.mask_neighbours = o->mask_neighbours;
	ret = locus_eldrfit_trace(sub, &fo, &fit, err);
	if (ret < 0)
		goto out;
	ret = locus_eldrfit_trace(sub, &xo, &ref, err);
	if (ret < 0)
		goto out;
	ret = to->replay(to->replay_arg, t, payload_hdr(&ref), ref.blob_len - 64, val, n_val, B,
			 orders, seed, &pairs, &load, err);
	if (ret < 0)
		goto out;
	tr->ref_pairs += pairs / FOLDS;
	tr->ref_load += load / FOLDS;
	for (uint32_t g = 0; g < n_grid; g++) {
		payload_hdr(&fit)->tau = grid[g];
		ret = to->replay(to->replay_arg, t, payload_hdr(&fit), fit.blob_len - 64, val,
				 n_val, B, orders, seed, &pairs, &load, err);
		if (ret < 0)
			goto out;
		tr->pt[g].pairs += pairs / FOLDS;
		tr->pt[g].load += load / FOLDS;
	}
out:
	locus_eldrfit_result_free(&ref);
	locus_eldrfit_result_free(&fit);
	locus_trace_free(sub);
	return ret;
}

/* The fewest pairs within the bound; ties: lower load, then the larger tau. */
static void pick(struct locus_eldrfit_tau_result *tr)
{
	int have = 0;

	tr->feasible = 0;
	for (uint32_t g = 0; g < tr->n_grid; g++) {
		const struct locus_eldrfit_tau_point *p = &tr->pt[g], *b = &tr->pt[tr->chosen];

		if (p->load > tr->bound)
			continue;
		if (!have || p->pairs < b->pairs || (p->pairs == b->pairs && p->load <= b->load))
			tr->chosen = g;
		have = 1;
	}
	if (have) {
		tr->feasible = 1;
	} else {
		for (uint32_t g = 0; g < tr->n_grid; g++)
			if (tr->pt[g].load <= tr->pt[tr->chosen].load)
				tr->chosen = g;
	}
	tr->tau = tr->pt[tr->chosen].tau;
}

int locus_eldrfit_tau_choose(const struct locus_trace *t, const uint32_t *calib,
			     uint32_t n_calib, const struct locus_eldrfit_opts *o,
			     const struct locus_eldrfit_tau_opts *to,
			     struct locus_eldrfit_tau_result *tr, struct locus_error *err)
{
	const float *grid = to && to->grid ? to->grid : default_grid;
	const uint32_t n_grid = to && to->grid ? to->n_grid :
				(uint32_t)(sizeof(default_grid) / sizeof(default_grid[0]));
	uint32_t B, orders, *part[FOLDS] = { 0 }, n_part[FOLDS] = { 0 };
	int ret;

	memset(tr, 0, sizeof(*tr));
	if (!t || !t->n_requests)
		return locus_error_set(err, LOCUS_EPARSE, "empty trace");
	if (!calib)
		n_calib = t->n_requests;
	B = to && to->batch ? to->batch : LOCUS_ELDRFIT_TAU_BATCH_DEFAULT;
	orders = to && to->orders ? to->orders : LOCUS_ELDRFIT_TAU_ORDERS_DEFAULT;
	for (uint32_t i = 0; calib && i < n_calib; i++)
		if (calib[i] >= t->n_requests)
			return locus_error_set(err, LOCUS_ERANGE, "calibration index %u of %u",
					       calib[i], t->n_requests);
	ret = check_tau_opts(t, calib, n_calib, o, to, grid, n_grid, B, err);
	if (ret < 0)
		return ret;
	for (int f = 0; f < FOLDS; f++) {
		part[f] = malloc(sizeof(uint32_t) * (n_calib / FOLDS + 1));
		if (!part[f]) {
			ret = locus_error_set(err, ENOMEM, "out of memory");
			goto out;
		}
	}
	for (uint32_t i = 0; i < n_calib; i++) {
		uint32_t f = i % FOLDS;

		part[f][n_part[f]++] = calib ? calib[i] : i;
	}
	tr->n_grid = n_grid;
	for (uint32_t g = 0; g < n_grid; g++)
		tr->pt[g].tau = grid[g];
	for (uint32_t f = 0; f < FOLDS; f++) {
		ret = run_fold(t, part, n_part, f, o, to, grid, n_grid, B, orders, tr, err);
		if (ret < 0)
			goto out;
	}
	tr->n_part[0] = n_part[0];
	tr->n_part[1] = n_part[1];
	tr->bound = to->load_bound > 0 ? to->load_bound : tr->ref_load;
	pick(tr);
out:
	for (int f = 0; f < FOLDS; f++)
		free(part[f]);
	return ret;
}
