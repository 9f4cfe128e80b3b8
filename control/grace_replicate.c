// SPDX-License-Identifier: MIT
/* Hot-expert replication of one layer and the W' load prediction. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_gracefit.h"

double locus_gracefit_predict(const struct locus_grace_dims *d, const double *W,
			      const uint16_t *primary, const uint16_t *replica, double *pred)
{
	uint32_t N = locus_grace_n_ranks(d), R = d->max_replicas;
	double sum = 0, mx = 0;

	memset(pred, 0, N * sizeof(double));
	for (uint32_t e = 0; e < d->n_experts; e++) {
		uint32_t c = 1;

		while (replica && c - 1 < R && replica[(size_t)e * R + c - 1] != LOCUS_GRACE_NO_RANK)
			c++;
		pred[primary[e]] += W[e] / c;
		for (uint32_t i = 0; i + 1 < c; i++)
			pred[replica[(size_t)e * R + i]] += W[e] / c;
	}
	for (uint32_t r = 0; r < N; r++) {
		sum += pred[r];
		mx = fmax(mx, pred[r]);
	}
	return sum > 0 ? mx / (sum / N) : 1.0;
}

struct hot {
	uint32_t e;
	double w;
};

static int hot_cmp(const void *a, const void *b)
{
	const struct hot *x = a, *y = b;

	if (x->w != y->w)
		return x->w < y->w ? 1 : -1;
	return x->e < y->e ? -1 : (x->e > y->e);
}

/* The n GPUs with the least predicted load that may take a copy of e. */
static uint32_t pick_targets(const double *pred, uint32_t N, uint32_t primary,
			     const uint32_t *used, uint32_t budget, uint32_t n, uint16_t *out)
{
	uint32_t c = 0;

	for (uint32_t r = 0; r < N; r++) {
		uint32_t j;

		if (r == primary || used[r] >= budget)
			continue;
		/* insertion into a sorted list of at most n entries */
		for (j = c; j > 0; j--) {
			double pj = pred[out[j - 1]];

			if (pj < pred[r] || (pj == pred[r] && out[j - 1] < r))
				break;
			if (j < n)
				out[j] = out[j - 1];
		}
		if (j < n) {
			out[j] = (uint16_t)r;
			if (c < n)
				c++;
		}
	}
	return c;
}

static int u16_cmp(const void *a, const void *b)
{
	return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

int locus_gracefit_replicate_layer(const struct locus_gracefit_topo *t, uint32_t E,
				   const double *W, const uint16_t *primary, uint32_t R,
				   uint16_t *replica, float *pred_out,
				   struct locus_gracefit_layer_info *info, struct locus_error *err)
{
	uint32_t N, gmax = 0, n_rep, n_hot = 0, placed = 0;
	double *pred = NULL, sum = 0, thr, acc = 0;
	uint32_t *used = NULL;
	struct hot *hot = NULL;
	int rc = 0;

	if (!t || !W || !primary || !replica || !pred_out)
		return locus_error_set(err, EINVAL, "replication: bad arguments");
	N = t->n_nodes * t->gpus_per_node;
	if (N == 0 || N > LOCUS_GRACE_MAX_RANKS)
		return locus_error_set(err, LOCUS_ERANGE, "replication: %u GPUs", N);
	for (uint32_t e = 0; e < E; e++) {
		if (!isfinite(W[e]) || W[e] < 0)
			return locus_error_set(err, LOCUS_ENAN, "load of expert %u is %g", e, W[e]);
		if (primary[e] >= N)
			return locus_error_set(err, LOCUS_ERANGE, "expert %u on rank %u >= %u",
					       e, primary[e], N);
	}
	for (size_t i = 0; i < (size_t)E * R; i++)
		replica[i] = LOCUS_GRACE_NO_RANK;
	pred = calloc(N, sizeof(*pred));
	used = calloc(N, sizeof(*used));
	hot = calloc(E, sizeof(*hot));
	if (!pred || !used || !hot) {
		rc = locus_error_set(err, ENOMEM, "replication: out of memory");
		goto out;
	}
	for (uint32_t e = 0; e < E; e++) {
		pred[primary[e]] += W[e];
		sum += W[e];
	}
	for (uint32_t r = 1; r < N; r++)
		if (pred[r] > pred[gmax])
			gmax = r;
	if (info) {
		info->n_rep = 0;
		info->n_hot = 0;
		info->rho = sum > 0 ? pred[gmax] / (sum / N) : 1.0;
	}
	if (sum <= 0 || N == 1 || R == 0 || t->replica_budget == 0)
		goto done;
	/* rho = W_max / mean; n_rep = min(max(1, floor(rho)), N - 1) */
	n_rep = (uint32_t)floor(pred[gmax] / (sum / N));
	n_rep = LOCUS_MIN(LOCUS_MAX(1u, n_rep), N - 1);
	n_rep = LOCUS_MIN(n_rep, R);
	thr = pred[gmax] * n_rep / (1.0 + n_rep);
	for (uint32_t e = 0; e < E; e++)
		if (primary[e] == gmax && W[e] > 0)
			hot[n_hot++] = (struct hot){ .e = e, .w = W[e] };
	qsort(hot, n_hot, sizeof(*hot), hot_cmp);
	for (uint32_t i = 0; i < n_hot; i++) {
		if (acc >= thr) {
			n_hot = i;
			break;
		}
		acc += hot[i].w;
	}
	for (uint32_t i = 0; i < n_hot; i++) {
		uint32_t e = hot[i].e;
		uint16_t *rep = replica + (size_t)e * R;
		uint32_t c = pick_targets(pred, N, primary[e], used, t->replica_budget, n_rep, rep);
		double share;

		if (c == 0)
			continue;
		share = W[e] / (1.0 + c);
		pred[primary[e]] -= W[e] - share;
		for (uint32_t j = 0; j < c; j++) {
			pred[rep[j]] += share;
			used[rep[j]]++;
		}
		qsort(rep, c, sizeof(*rep), u16_cmp);
		placed += c;
	}
	if (info) {
		info->n_rep = n_rep;
		info->n_hot = n_hot;
	}
done:
	if (info) {
		double mx = 0;

		for (uint32_t r = 0; r < N; r++)
			mx = fmax(mx, pred[r]);
		info->rho_after = sum > 0 ? mx / (sum / N) : 1.0;
		info->n_replicas = placed;
	}
	for (uint32_t r = 0; r < N; r++)
		pred_out[r] = (float)fmax(pred[r], 0.0);
out:
	free(hot);
	free(used);
	free(pred);
	return rc;
}
