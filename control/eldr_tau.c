// SPDX-License-Identifier: MIT
/*
 * tau chosen from the calibration data alone (locusctl fit --tau auto with
 * the rest fixed): the tuning of eldr_tune.c over a grid of taus only.
 */
#include <errno.h>
#include <string.h>

#include "locus_eldrfit.h"
#include "locus_err_priv.h"

static const float default_grid[] = { 0.0f,   0.025f, 0.05f, 0.075f, 0.1f,
				      0.125f, 0.15f,  0.2f,  0.25f,  0.3f };

int locus_eldrfit_tau_choose(const struct locus_trace *t, const uint32_t *calib,
			     uint32_t n_calib, const struct locus_eldrfit_opts *o,
			     const struct locus_eldrfit_tau_opts *to,
			     struct locus_eldrfit_tau_result *tr, struct locus_error *err)
{
	static const float no_spill[] = { 0.0f };
	const float *grid = to && to->grid ? to->grid : default_grid;
	const uint32_t n_grid = to && to->grid ? to->n_grid :
				(uint32_t)(sizeof(default_grid) / sizeof(default_grid[0]));
	struct locus_eldrfit_tune_result r;
	struct locus_eldrfit_tune_opts tu;
	int ret;

	memset(tr, 0, sizeof(*tr));
	if (!to)
		return locus_error_set(err, EINVAL, "tau auto: no replay given");
	if (!n_grid || n_grid > LOCUS_ELDRFIT_TAU_GRID_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "tau auto: %u grid points (1..%u)",
				       n_grid, LOCUS_ELDRFIT_TAU_GRID_MAX);
	if (!o)
		return locus_error_set(err, LOCUS_ERANGE, "tau auto: no options");
	tu = (struct locus_eldrfit_tune_opts){
		.fixed = LOCUS_ELDRFIT_FIX_PRICE | LOCUS_ELDRFIT_FIX_CPD | LOCUS_ELDRFIT_FIX_SPREAD,
		.batch = to->batch, .orders = to->orders, .load_bound = to->load_bound,
		.replay = to->replay, .replay_arg = to->replay_arg,
		.taus = grid, .n_taus = n_grid,
		.spill_taus = no_spill, .n_spill_taus = 1,
	};
	ret = locus_eldrfit_tune(t, calib, n_calib, o, &tu, &r, err);
	if (ret < 0)
		return ret;
	tr->n_grid = r.n_pt;
	for (uint32_t g = 0; g < r.n_pt; g++) {
		tr->pt[g].tau = r.pt[g].tau;
		tr->pt[g].pairs = r.pt[g].pairs;
		tr->pt[g].load = r.pt[g].load;
		tr->pt[g].over = r.pt[g].fold_load[0] > r.fold_bound[0] ||
				 r.pt[g].fold_load[1] > r.fold_bound[1];
	}
	tr->chosen = r.chosen;
	tr->tau = r.pt[r.chosen].tau;
	tr->feasible = r.feasible;
	tr->bound = r.bound;
	tr->ref_pairs = r.ref_pairs;
	tr->ref_load = r.ref_load;
	tr->n_part[0] = r.n_part[0];
	tr->n_part[1] = r.n_part[1];
	locus_eldrfit_tune_result_free(&r);
	return 0;
}
