// SPDX-License-Identifier: MIT
/*
 * A placement for a changed set of live ranks, with the fewest moves from
 * the one in force (pure). Ranks fail and come back; what was placed on a
 * live rank stays there unless evening the load out needs it:
 *
 *  1. copies on lost ranks are dropped (no move);
 *  2. an expert whose primary was lost takes its live replica on the rank
 *     of least predicted load as primary (no move: the weights are there);
 *  3. an expert with no live copy goes to the live rank of least predicted
 *     load in its layer, hottest first (a move from storage: no holder);
 *  4. while a layer's busiest live rank predicts more than skew x the live
 *     mean, or its least loaded one less than the mean / skew (skew 0: the
 *     balance the layer had before the change, plus 2 %), the busiest
 *     one's largest copy that lowers the peak moves to the live rank of
 *     least load not holding that expert (a rank that came back with
 *     nothing fills up this way), up to max_moves in all.
 *
 * Predicted loads use the table's model: an expert's profiled load split
 * evenly over its copies. Capacity and the replica budget are raised when
 * the survivors need more (the weights of a lost GPU must go somewhere).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

#define HDR sizeof(struct locus_tbl_hdr)
#define ADAPT_SLACK 1.02 /* skew 0: how far past the placed balance a layer may end */

/* One layer being adapted: copies per expert as a flat list, loads per rank. */
struct layer {
	uint32_t E, R, N;
	uint16_t *pri;       /* [E] */
	uint16_t *rep;       /* [E][R] ascending, NO_RANK padded */
	const float *W;      /* [E] */
	double *pred;        /* [N] */
	const uint64_t *lost;
};

static uint32_t n_replicas(const struct layer *y, uint32_t e)
{
	uint32_t n = 0;

	while (n < y->R && y->rep[(size_t)e * y->R + n] != LOCUS_GRACE_NO_RANK)
		n++;
	return n;
}

static void sort_replicas(struct layer *y, uint32_t e)
{
	uint16_t *r = y->rep + (size_t)e * y->R;
	uint32_t n = n_replicas(y, e);

	for (uint32_t i = 1; i < n; i++)
		for (uint32_t j = i; j > 0 && r[j - 1] > r[j]; j--) {
			uint16_t t = r[j];

			r[j] = r[j - 1];
			r[j - 1] = t;
		}
}

/* Whether rank holds a copy of e. */
static int holds(const struct layer *y, uint32_t e, uint32_t rank)
{
	const uint16_t *r = y->rep + (size_t)e * y->R;

	if (y->pri[e] == rank)
		return 1;
	for (uint32_t i = 0; i < y->R && r[i] != LOCUS_GRACE_NO_RANK; i++)
		if (r[i] == rank)
			return 1;
	return 0;
}

/* Predicted load per rank: each expert's load split evenly over its copies. */
static void predict(struct layer *y)
{
	memset(y->pred, 0, y->N * sizeof(*y->pred));
	for (uint32_t e = 0; e < y->E; e++) {
		uint32_t n = n_replicas(y, e);
		double share = y->W[e] / (1.0 + n);

		if (y->pri[e] != LOCUS_GRACE_NO_RANK)
			y->pred[y->pri[e]] += share;
		for (uint32_t i = 0; i < n; i++)
			y->pred[y->rep[(size_t)e * y->R + i]] += share;
	}
}

/* The live rank of least predicted load not holding e (e = UINT32_MAX: any), or N. */
static uint32_t least_live(const struct layer *y, uint32_t e)
{
	uint32_t best = y->N;

	for (uint32_t r = 0; r < y->N; r++) {
		if (locus_grace_rank_lost(y->lost, r) || (e != UINT32_MAX && holds(y, e, r)))
			continue;
		if (best == y->N || y->pred[r] < y->pred[best])
			best = r;
	}
	return best;
}

/* Steps 1-3 for one layer. */
static void survive(struct layer *y, struct locus_gracefit_adapt *rep, uint32_t *order)
{
	uint32_t n_orphan = 0;

	for (uint32_t e = 0; e < y->E; e++) {
		uint16_t *r = y->rep + (size_t)e * y->R;
		uint32_t k = 0;

		for (uint32_t i = 0; i < y->R && r[i] != LOCUS_GRACE_NO_RANK; i++) {
			if (locus_grace_rank_lost(y->lost, r[i])) {
				rep->dropped++;
				continue;
			}
			r[k++] = r[i];
		}
		for (uint32_t i = k; i < y->R; i++)
			r[i] = LOCUS_GRACE_NO_RANK;
		if (!locus_grace_rank_lost(y->lost, y->pri[e]))
			continue;
		rep->dropped++;
		y->pri[e] = LOCUS_GRACE_NO_RANK;
	}
	predict(y);
	for (uint32_t e = 0; e < y->E; e++) {
		uint16_t *r = y->rep + (size_t)e * y->R;
		uint32_t n = n_replicas(y, e), best = 0;

		if (y->pri[e] != LOCUS_GRACE_NO_RANK)
			continue;
		if (!n) {
			order[n_orphan++] = e;
			continue;
		}
		for (uint32_t i = 1; i < n; i++)
			if (y->pred[r[i]] < y->pred[r[best]])
				best = i;
		y->pri[e] = r[best];
		memmove(r + best, r + best + 1, (n - best - 1) * sizeof(*r));
		r[n - 1] = LOCUS_GRACE_NO_RANK;
		rep->promoted++;
	}
	/* the hottest orphans first, each to the least-loaded live rank */
	for (uint32_t i = 1; i < n_orphan; i++)
		for (uint32_t j = i; j > 0 && y->W[order[j - 1]] < y->W[order[j]]; j--) {
			uint32_t t = order[j];

			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	predict(y);
	for (uint32_t i = 0; i < n_orphan; i++) {
		uint32_t e = order[i], to = least_live(y, UINT32_MAX);

		y->pri[e] = (uint16_t)to;
		y->pred[to] += y->W[e] / (1.0 + n_replicas(y, e));
		rep->orphans++;
	}
}

/*
 * Busiest live rank's load over the live mean (1 for an idle layer); the
 * least loaded one's in *low.
 */
static double layer_skew(const struct layer *y, uint32_t *busiest, double *low)
{
	double sum = 0, max = -1, min = -1;
	uint32_t live = 0;

	for (uint32_t r = 0; r < y->N; r++) {
		if (locus_grace_rank_lost(y->lost, r))
			continue;
		live++;
		sum += y->pred[r];
		if (y->pred[r] > max) {
			max = y->pred[r];
			*busiest = r;
		}
		if (min < 0 || y->pred[r] < min)
			min = y->pred[r];
	}
	if (!live || !(sum > 0)) {
		*low = 1.0;
		return 1.0;
	}
	*low = min / (sum / live);
	return max / (sum / live);
}

/*
 * The layer's balance as placed: its busiest holder over the mean of the
 * ranks that hold a copy, lost ones included (what the fit reached).
 */
static double placed_skew(struct layer *y)
{
	double sum = 0, max = 0;
	uint32_t n = 0;

	predict(y);
	for (uint32_t r = 0; r < y->N; r++) {
		if (!(y->pred[r] > 0))
			continue;
		n++;
		sum += y->pred[r];
		max = LOCUS_MAX(max, y->pred[r]);
	}
	return n && sum > 0 ? LOCUS_MAX(1.0, max / (sum / n)) : 1.0;
}

/*
 * Step 4 for one layer; the moves it made. It goes on while the busiest
 * live rank is above skew x the mean or the least loaded below the mean /
 * skew: a rank back with nothing takes a fair share.
 */
static uint32_t even_out(struct layer *y, double skew, uint32_t budget)
{
	uint32_t moves = 0, from = 0;
	double low;

	while (moves < budget && (layer_skew(y, &from, &low) > skew || low < 1 / skew)) {
		uint32_t best_e = UINT32_MAX, best_to = y->N;
		double best_share = 0;

		for (uint32_t e = 0; e < y->E; e++) {
			double share;
			uint32_t to;

			if (!holds(y, e, from))
				continue;
			share = y->W[e] / (1.0 + n_replicas(y, e));
			if (share <= best_share)
				continue;
			to = least_live(y, e);
			/* the move must lower the peak: the receiver stays below the source */
			if (to == y->N || y->pred[to] + share >= y->pred[from])
				continue;
			best_e = e;
			best_share = share;
			best_to = to;
		}
		if (best_e == UINT32_MAX)
			break;
		if (y->pri[best_e] == from) {
			y->pri[best_e] = (uint16_t)best_to;
		} else {
			uint16_t *r = y->rep + (size_t)best_e * y->R;

			for (uint32_t i = 0; i < y->R && r[i] != LOCUS_GRACE_NO_RANK; i++)
				if (r[i] == from) {
					r[i] = (uint16_t)best_to;
					break;
				}
			sort_replicas(y, best_e);
		}
		y->pred[from] -= best_share;
		y->pred[best_to] += best_share;
		moves++;
	}
	return moves;
}

int locus_gracefit_adapt(const void *payload, size_t len, const uint64_t *lost, double skew,
			 uint32_t max_moves, void **out, size_t *out_len,
			 struct locus_gracefit_adapt *rep, struct locus_error *err)
{
	struct locus_grace_view v;
	struct locus_grace_dims *d;
	uint32_t L, E, R, N, live = 0, *order = NULL, *cnt = NULL;
	double *pred = NULL, skew_sum = 0;
	uint8_t *blob;
	int ret;

	*out = NULL;
	*out_len = 0;
	memset(rep, 0, sizeof(*rep));
	if (!(skew >= 1) && skew != 0)
		return locus_error_set(err, LOCUS_ERANGE, "skew bound %g: 1 or more, or 0 (the "
				       "balance as placed)", skew);
	blob = malloc(HDR + len);
	if (!blob)
		return locus_error_set(err, ENOMEM, "out of memory");
	memcpy(blob + HDR, payload, len);
	ret = locus_grace_view_init(&v, blob + HDR, len, err);
	if (ret < 0)
		goto err_free;
	d = v.dims;
	L = d->n_layers;
	E = d->n_experts;
	R = d->max_replicas;
	N = locus_grace_n_ranks(d);
	for (uint32_t r = 0; r < N; r++)
		live += !locus_grace_rank_lost(lost, r);
	if (!live) {
		ret = locus_error_set(err, LOCUS_ERANGE, "every one of the %u ranks is lost: no "
				      "placement holds the experts", N);
		goto err_free;
	}
	pred = calloc(N, sizeof(*pred));
	order = calloc(E, sizeof(*order));
	cnt = calloc(2 * (size_t)N, sizeof(*cnt));
	if (!pred || !order || !cnt) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	for (uint32_t l = 0; l < L; l++) {
		struct layer y = { .E = E, .R = R, .N = N, .pri = v.primary + (size_t)l * E,
				   .rep = v.replica + (size_t)l * E * R,
				   .W = v.expert_load + (size_t)l * E, .pred = pred, .lost = lost };
		double bound = skew ? skew : placed_skew(&y) * ADAPT_SLACK, low;
		uint32_t busiest = 0;

		survive(&y, rep, order);
		rep->moved += even_out(&y, bound, max_moves - rep->moved);
		skew_sum += layer_skew(&y, &busiest, &low);
		memset(cnt, 0, 2 * (size_t)N * sizeof(*cnt));
		for (uint32_t e = 0; e < E; e++) {
			uint32_t n = n_replicas(&y, e);

			cnt[y.pri[e]]++;
			for (uint32_t i = 0; i < n; i++)
				cnt[N + y.rep[(size_t)e * R + i]]++;
		}
		for (uint32_t r = 0; r < N; r++) {
			d->capacity = LOCUS_MAX(d->capacity, cnt[r]);
			d->replica_budget = LOCUS_MAX(d->replica_budget, cnt[N + r]);
			v.pred_load[(size_t)l * N + r] = (float)pred[r];
		}
	}
	rep->capacity = d->capacity;
	rep->replica_budget = d->replica_budget;
	rep->skew_after = skew_sum / L;
	ret = locus_grace_validate(&v, err);
	if (ret < 0)
		goto err_free;
	ret = locus_tbl_seal(blob, HDR + len, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, len);
	if (ret < 0) {
		locus_error_set(err, -ret, "sealing the adapted placement");
		goto err_free;
	}
	free(pred);
	free(order);
	free(cnt);
	*out = blob;
	*out_len = HDR + len;
	return 0;

err_free:
	free(pred);
	free(order);
	free(cnt);
	free(blob);
	return ret;
}

uint32_t locus_gracefit_uses_lost(const struct locus_grace_view *v, const uint64_t *lost,
				  uint64_t *idle)
{
	const struct locus_grace_dims *d = v->dims;
	uint32_t N = locus_grace_n_ranks(d), n = 0;
	size_t LE = (size_t)d->n_layers * d->n_experts;

	if (idle)
		for (uint32_t r = 0; r < N; r++)
			if (!locus_grace_rank_lost(lost, r))
				idle[r / 64] |= 1ull << (r % 64);
	for (size_t i = 0; i < LE; i++) {
		uint32_t p = v->primary[i];

		n += locus_grace_rank_lost(lost, p);
		if (idle)
			idle[p / 64] &= ~(1ull << (p % 64));
		for (uint32_t k = 0; k < d->max_replicas; k++) {
			uint32_t r = v->replica[i * d->max_replicas + k];

			if (r == LOCUS_GRACE_NO_RANK)
				break;
			n += locus_grace_rank_lost(lost, r);
			if (idle)
				idle[r / 64] &= ~(1ull << (r % 64));
		}
	}
	return n;
}
