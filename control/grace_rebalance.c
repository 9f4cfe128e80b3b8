// SPDX-License-Identifier: MIT
/*
 * Online rebalance (pure): a sliding window of interval loads with a decay,
 * and a replication refit held to a budget of expert copies that must be
 * loaded onto GPUs (their weights cross the network), spent on the layers
 * that gain the most skew per copy.
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

int locus_gracefit_window_init(struct locus_gracefit_window *w, uint32_t n_layers,
			       uint32_t n_experts, uint32_t size, double decay,
			       struct locus_error *err)
{
	memset(w, 0, sizeof(*w));
	if (n_layers == 0 || n_experts == 0 || size == 0 || size > 65536)
		return locus_error_set(err, LOCUS_ERANGE, "window of %u intervals of %u x %u "
				       "loads", size, n_layers, n_experts);
	if (!(decay > 0 && decay <= 1))
		return locus_error_set(err, LOCUS_ERANGE, "decay %g not in (0, 1]", decay);
	w->ring = calloc((size_t)size * n_layers * n_experts, sizeof(double));
	if (!w->ring)
		return locus_error_set(err, ENOMEM, "window: out of memory");
	w->n_layers = n_layers;
	w->n_experts = n_experts;
	w->size = size;
	w->decay = decay;
	return 0;
}

void locus_gracefit_window_free(struct locus_gracefit_window *w)
{
	free(w->ring);
	memset(w, 0, sizeof(*w));
}

void locus_gracefit_window_add(struct locus_gracefit_window *w, const double *W)
{
	size_t le = (size_t)w->n_layers * w->n_experts;

	w->head = (w->head + 1) % w->size;
	memcpy(w->ring + w->head * le, W, le * sizeof(double));
	if (w->n < w->size)
		w->n++;
}

double locus_gracefit_window_loads(const struct locus_gracefit_window *w, double *W)
{
	size_t le = (size_t)w->n_layers * w->n_experts;
	double f = 1, tot = 0;

	memset(W, 0, le * sizeof(double));
	for (uint32_t age = 0; age < w->n; age++, f *= w->decay) {
		const double *x = w->ring + ((w->head + w->size - age) % w->size) * le;

		for (size_t i = 0; i < le; i++)
			W[i] += f * x[i];
	}
	for (size_t i = 0; i < le; i++)
		tot += W[i];
	return tot;
}

uint32_t locus_gracefit_moves_layer(const struct locus_grace_view *cur,
				    const struct locus_grace_view *next, uint32_t layer)
{
	uint32_t E = cur->dims->n_experts, R = cur->dims->max_replicas, moves = 0;

	for (uint32_t e = 0; e < E; e++) {
		size_t le = (size_t)layer * E + e;
		const uint16_t *a = cur->replica + le * R, *b = next->replica + le * R;

		/* copy i of next: its primary (i = R), then its replicas */
		for (uint32_t i = 0; i <= R; i++) {
			uint16_t r = i == R ? next->primary[le] : b[i];
			int held;

			if (r == LOCUS_GRACE_NO_RANK)
				continue;
			held = r == cur->primary[le];
			for (uint32_t j = 0; !held && j < R && a[j] != LOCUS_GRACE_NO_RANK; j++)
				held = a[j] == r;
			moves += !held;
		}
	}
	return moves;
}

/* Same dimensions: a refit of the same table's shape. */
static int same_dims(const struct locus_grace_view *a, const struct locus_grace_view *b)
{
	return !memcmp(a->dims, b->dims, sizeof(*a->dims));
}

/* A copy of payload whose primaries took up to max_swaps swaps per layer on W. */
static int swapped_payload(const void *payload, size_t payload_len, const double *W,
			   const double *A, uint32_t max_swaps, void **out, uint32_t *swaps,
			   struct locus_error *err)
{
	struct locus_grace_view v;
	uint32_t L, E, N;
	int rc;

	*out = malloc(payload_len);
	if (!*out)
		return locus_error_set(err, ENOMEM, "rebalance plan: out of memory");
	memcpy(*out, payload, payload_len);
	rc = locus_grace_view_init(&v, *out, payload_len, err);
	if (!rc)
		rc = locus_grace_validate(&v, err);
	if (rc)
		goto err_free;
	L = v.dims->n_layers;
	E = v.dims->n_experts;
	N = locus_grace_n_ranks(v.dims);
	for (uint32_t l = 0; l < L; l++) {
		uint32_t n = 0;

		rc = locus_gracefit_swap_primaries(N, E, W + (size_t)l * E,
						   A ? A + (size_t)l * E * E : NULL,
						   v.primary + (size_t)l * E, max_swaps,
						   LOCUS_GRACEFIT_SWAP_TOL, &n, err);
		if (rc)
			goto err_free;
		*swaps += n;
	}
	return 0;

err_free:
	free(*out);
	*out = NULL;
	return rc;
}

int locus_gracefit_rebalance_plan(const void *payload, size_t payload_len, const double *W,
				  uint32_t max_moves, void **blob, size_t *blob_len,
				  struct locus_gracefit_rebalance *rep, struct locus_error *err)
{
	return locus_gracefit_rebalance_plan_swaps(payload, payload_len, W, NULL, 0, max_moves,
						   blob, blob_len, rep, err);
}

int locus_gracefit_rebalance_plan_swaps(const void *payload, size_t payload_len,
					const double *W, const double *A, uint32_t max_swaps,
					uint32_t max_moves, void **blob, size_t *blob_len,
					struct locus_gracefit_rebalance *rep,
					struct locus_error *err)
{
	struct locus_grace_view cur, nx;
	double *gain = NULL, *pred = NULL, now = 0, full = 0, after = 0;
	uint32_t *moves = NULL, *order = NULL, L, E, N, R, left = max_moves;
	uint8_t *take = NULL;
	void *sw = NULL;
	int rc;

	if (!payload || !W || !blob || !blob_len || !rep)
		return locus_error_set(err, EINVAL, "rebalance plan: bad arguments");
	memset(rep, 0, sizeof(*rep));
	if (max_swaps) {
		rc = swapped_payload(payload, payload_len, W, A, max_swaps, &sw, &rep->swaps,
				     err);
		if (rc)
			return rc;
	}
	rc = locus_gracefit_refit_replicas(sw ? sw : payload, payload_len, W, blob, blob_len,
					   NULL, NULL, err);
	free(sw);
	if (rc)
		return rc;
	rc = locus_grace_view_init(&cur, (void *)(uintptr_t)payload, payload_len, err);
	if (!rc)
		rc = locus_grace_view_init(&nx, (uint8_t *)*blob + HDR, *blob_len - HDR, err);
	if (rc)
		goto err_free;
	if (!same_dims(&cur, &nx)) {
		rc = locus_error_set(err, LOCUS_ESTATE, "rebalance plan: refit changed the "
				     "table's shape");
		goto err_free;
	}
	L = cur.dims->n_layers;
	E = cur.dims->n_experts;
	N = locus_grace_n_ranks(cur.dims);
	R = cur.dims->max_replicas;
	gain = calloc(L, sizeof(*gain));
	pred = calloc(N, sizeof(*pred));
	moves = calloc(L, sizeof(*moves));
	order = calloc(L, sizeof(*order));
	take = calloc(L, 1);
	if (!gain || !pred || !moves || !order || !take) {
		rc = locus_error_set(err, ENOMEM, "rebalance plan: out of memory");
		goto err_free;
	}
	for (uint32_t l = 0; l < L; l++) {
		size_t o = (size_t)l * E;
		double a = locus_gracefit_predict(cur.dims, W + o, cur.primary + o,
						  cur.replica + o * R, pred);
		double b = locus_gracefit_predict(nx.dims, W + o, nx.primary + o,
						  nx.replica + o * R, pred);

		now += a / L;
		full += b / L;
		gain[l] = a - b;
		moves[l] = locus_gracefit_moves_layer(&cur, &nx, l);
		rep->moves_full += moves[l];
		order[l] = l;
	}
	/* best gain per copy first (a layer that moves nothing: first), ties by layer */
	for (uint32_t i = 1; i < L; i++) {
		uint32_t v = order[i], j = i;

		while (j > 0) {
			uint32_t u = order[j - 1];
			double gv = gain[v] * (moves[u] ? moves[u] : 1);
			double gu = gain[u] * (moves[v] ? moves[v] : 1);
			int before = moves[v] == 0 && moves[u] != 0 ? 1 :
				     moves[u] == 0 && moves[v] != 0 ? 0 : gv > gu;

			if (!before)
				break;
			order[j] = u;
			j--;
		}
		order[j] = v;
	}
	for (uint32_t i = 0; i < L; i++) {
		uint32_t l = order[i];

		if (gain[l] > 0 && moves[l] <= left) {
			take[l] = 1;
			left -= moves[l];
			rep->moves += moves[l];
			rep->layers_changed++;
		}
	}
	/* layers left out keep the copies in use, predicted on the new loads */
	for (uint32_t l = 0; l < L; l++) {
		size_t o = (size_t)l * E;

		if (!take[l]) {
			memcpy(nx.primary + o, cur.primary + o, E * sizeof(uint16_t));
			memcpy(nx.replica + o * R, cur.replica + o * R, E * R * sizeof(uint16_t));
			locus_gracefit_predict(cur.dims, W + o, cur.primary + o,
					       cur.replica + o * R, pred);
			for (uint32_t r = 0; r < N; r++)
				nx.pred_load[(size_t)l * N + r] = (float)fmax(pred[r], 0.0);
		}
		after += locus_gracefit_predict(nx.dims, W + o, nx.primary + o,
						nx.replica + o * R, pred) / L;
	}
	rc = locus_grace_validate(&nx, err);
	if (!rc)
		rc = locus_tbl_seal(*blob, *blob_len, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION,
				    *blob_len - HDR);
	if (rc)
		goto err_free;
	rep->rho_now = now;
	rep->rho_full = full;
	rep->rho_after = after;
	free(take);
	free(order);
	free(moves);
	free(pred);
	free(gain);
	return 0;

err_free:
	free(take);
	free(order);
	free(moves);
	free(pred);
	free(gain);
	free(*blob);
	*blob = NULL;
	*blob_len = 0;
	return rc;
}
