// SPDX-License-Identifier: MIT
/* Hot-expert replication of one layer and the W' load prediction. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
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

/* Copies of e so far (primary included) and whether rank r holds one. */
static uint32_t n_copies(const uint16_t *rep, uint32_t R)
{
	uint32_t c = 1;

	while (c - 1 < R && rep[c - 1] != LOCUS_GRACE_NO_RANK)
		c++;
	return c;
}

static int holds(const uint16_t *rep, uint32_t R, uint32_t primary, uint32_t r)
{
	if (r == primary)
		return 1;
	for (uint32_t i = 0; i < R && rep[i] != LOCUS_GRACE_NO_RANK; i++)
		if (rep[i] == r)
			return 1;
	return 0;
}

/*
 * Among the ranks with a free slot that do not hold e and end below lim:
 * the one with the most co-activation aff[r] with e (aff may be NULL),
 * else the least-loaded, the primary's node first; UINT32_MAX if none.
 */
static uint32_t pick_target(const struct locus_gracefit_topo *t, const double *pred,
			    const uint32_t *used, const uint16_t *rep, uint32_t R,
			    uint32_t primary, double share, double lim, const double *aff)
{
	uint32_t N = t->n_nodes * t->gpus_per_node, gpn = t->gpus_per_node;
	uint32_t best[2] = { UINT32_MAX, UINT32_MAX }, ba = UINT32_MAX;

	for (uint32_t r = 0; r < N; r++) {
		int tier = r / gpn != primary / gpn;

		if (used[r] >= t->replica_budget || holds(rep, R, primary, r) ||
		    pred[r] + share >= lim)
			continue;
		if (aff && aff[r] > 0 && (ba == UINT32_MAX || aff[r] > aff[ba]))
			ba = r;
		if (best[tier] == UINT32_MAX || pred[r] < pred[best[tier]])
			best[tier] = r;
	}
	if (ba != UINT32_MAX)
		return ba;
	return best[0] != UINT32_MAX ? best[0] : best[1];
}

static int u16_cmp(const void *a, const void *b)
{
	return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

/*
 * One copy that lowers a rank at the top: the heaviest rank that can shed
 * load gives its expert with the most load per copy a copy on a rank that
 * stays below it. Returns 0 when no copy lowers any rank's load.
 */
static int add_copy(const struct locus_gracefit_topo *t, uint32_t E, const double *W,
		    const double *A, const uint16_t *primary, uint32_t R, uint16_t *replica,
		    double *pred, uint32_t *used)
{
	double aff[LOCUS_GRACE_MAX_RANKS];

	uint32_t N = t->n_nodes * t->gpus_per_node, order[LOCUS_GRACE_MAX_RANKS];

	for (uint32_t r = 0; r < N; r++)
		order[r] = r;
	for (uint32_t i = 1; i < N; i++) {
		uint32_t v = order[i], j = i;

		while (j > 0 && pred[order[j - 1]] < pred[v]) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = v;
	}
	for (uint32_t k = 0; k < N; k++) {
		uint32_t g = order[k], be = UINT32_MAX, bt = 0;
		double bw = 0;

		for (uint32_t e = 0; e < E; e++) {
			uint16_t *rep = replica + (size_t)e * R;
			uint32_t c = n_copies(rep, R), h;
			double per = W[e] / c;

			if (c > R || per <= bw || !holds(rep, R, primary[e], g))
				continue;
			if (A) {
				memset(aff, 0, N * sizeof(double));
				for (uint32_t f = 0; f < E; f++)
					if (f != e)
						aff[primary[f]] += A[(size_t)e * E + f];
			}
			h = pick_target(t, pred, used, rep, R, primary[e], W[e] / (c + 1),
					pred[g], A ? aff : NULL);
			if (h == UINT32_MAX)
				continue;
			be = e;
			bw = per;
			bt = h;
		}
		if (be != UINT32_MAX) {
			uint16_t *rep = replica + (size_t)be * R;
			uint32_t c = n_copies(rep, R);
			double d = W[be] / c - W[be] / (c + 1);

			pred[primary[be]] -= d;
			for (uint32_t i = 0; i + 1 < c; i++)
				pred[rep[i]] -= d;
			rep[c - 1] = (uint16_t)bt;
			pred[bt] += W[be] / (c + 1);
			used[bt]++;
			qsort(rep, c, sizeof(*rep), u16_cmp);
			return 1;
		}
	}
	return 0;
}

int locus_gracefit_replicate_layer(const struct locus_gracefit_topo *t, uint32_t E,
				   const double *W, const double *A, const uint16_t *primary,
				   uint32_t R, uint16_t *replica, float *pred_out,
				   struct locus_gracefit_layer_info *info, struct locus_error *err)
{
	uint32_t N, gmax = 0, placed = 0;
	double *pred = NULL, sum = 0;
	uint32_t *used = NULL;
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
	if (!pred || !used) {
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
	while (add_copy(t, E, W, A, primary, R, replica, pred, used))
		placed++;
	if (info) {
		for (uint32_t e = 0; e < E; e++) {
			uint32_t c = n_copies(replica + (size_t)e * R, R);

			info->n_rep = LOCUS_MAX(info->n_rep, c - 1);
			info->n_hot += c > 1;
		}
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
	free(used);
	free(pred);
	return rc;
}
