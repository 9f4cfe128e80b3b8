// SPDX-License-Identifier: MIT
/*
 * Several centroids per decoder (locusctl fit --centroids-per-decoder M):
 * each decoder's calibration cluster split into sub-clusters, so that the
 * router scores a request against the part of the cluster it resembles
 * (a decoder's score is the best of its centroids') instead of the
 * cluster's one mean: a domain that is not one round blob keeps its shape.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eldr_fit_priv.h"

/* Members of cluster k: their rows copied into rows[m][DV], x into xs[m][D]. */
static uint32_t gather(const float *v, uint32_t DV, const float *x, uint32_t D, uint32_t n,
		       const uint32_t *assign, uint32_t k, float *rows, float *xs)
{
	uint32_t m = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (assign[i] != k)
			continue;
		memcpy(rows + (size_t)m * DV, v + (size_t)i * DV, sizeof(float) * DV);
		memcpy(xs + (size_t)m * D, x + (size_t)i * D, sizeof(float) * D);
		m++;
	}
	return m;
}

/*
 * Split rows[nk] into mm sub-clusters from o->restarts seeds, the highest
 * objective kept (the first on ties): best[nk] the assignment.
 */
static int split(const struct locus_eldrfit_opts *o, const float *rows, uint32_t nk,
		 uint32_t DV, uint32_t mm, float *c, uint32_t *a, uint32_t *best)
{
	const uint32_t R = o->restarts ? o->restarts : 1;
	double top = -INFINITY;
	uint32_t lo, hi;
	int conv;

	locus_eldrfit_slack_bounds(nk, mm, LOCUS_ELDRFIT_SUB_SLACK, &lo, &hi);
	for (uint32_t r = 0; r < R; r++) {
		int ret = locus_eldrfit_kmeans_bounded(rows, nk, DV, mm, lo, hi, 0.0, o->seed + r,
						       o->max_iter, c, a, &conv, NULL, NULL);
		double obj;

		if (ret < 0)
			return ret;
		obj = eldr_objective(rows, nk, DV, c, a);
		if (obj > top) {
			top = obj;
			memcpy(best, a, sizeof(*best) * nk);
		}
	}
	return 0;
}

int eldr_subcentroids(const struct locus_eldrfit_opts *o, const float *x, uint32_t n, uint32_t D,
		      const uint16_t *decode, uint16_t L, uint16_t E, const uint32_t *assign,
		      const float *cen_k, float *cen, uint16_t *slot, uint32_t *C)
{
	const uint32_t K = o->n_decoders, m = o->centroids_per_decoder;
	const float *v = x;
	float *z = NULL, *rows = NULL, *xs = NULL, *c = NULL;
	uint32_t *a = NULL, *best = NULL, DV = D, nc = 0;
	double *acc = NULL;
	int ret = 0, any = 0;

	if (!m || !K || !n)
		return -EINVAL;
	if (decode && o->decode_weight > 0) {
		z = eldr_joint_rows(x, n, D, decode, L, E, o->decode_weight, &any);
		if (!z)
			return -ENOMEM;
		if (any) {
			v = z;
			DV = D + (uint32_t)L * E;
		}
	}
	rows = malloc(sizeof(float) * (size_t)n * DV);
	xs = malloc(sizeof(float) * (size_t)n * D);
	c = malloc(sizeof(float) * (size_t)m * DV);
	a = malloc(sizeof(uint32_t) * n);
	best = malloc(sizeof(uint32_t) * n);
	acc = malloc(sizeof(double) * D);
	if (!rows || !xs || !c || !a || !best || !acc) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t k = 0; k < K; k++) {
		uint32_t nk = gather(v, DV, x, D, n, assign, k, rows, xs);
		uint32_t mm = nk < m ? nk : m;

		if (mm < 2) {
			memcpy(cen + (size_t)nc * D, cen_k + (size_t)k * D, sizeof(float) * D);
			slot[nc++] = (uint16_t)k;
			continue;
		}
		ret = split(o, rows, nk, DV, mm, c, a, best);
		if (ret < 0)
			goto out;
		eldr_prefill_centroids(xs, nk, D, mm, best, cen + (size_t)nc * D, acc);
		for (uint32_t j = 0; j < mm; j++)
			slot[nc++] = (uint16_t)k;
	}
	*C = nc;
out:
	free(acc);
	free(best);
	free(a);
	free(c);
	free(xs);
	free(rows);
	free(z);
	return ret;
}
