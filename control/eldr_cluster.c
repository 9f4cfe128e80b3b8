// SPDX-License-Identifier: MIT
/*
 * The clustering step of the ELDR fit: bounded spherical k-means over the
 * calibration requests from several k-means++ seeds, optionally seeing each
 * request's decode expert use beside its prefill signature, and the table's
 * centroids from the members' prefill signatures (the router only ever sees
 * a prefill signature).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eldr_fit_priv.h"

/* sum over points of x_i . c_assign(i), fixed order */
double eldr_objective(const float *x, uint32_t n, uint32_t D, const float *cen,
			const uint32_t *assign)
{
	double obj = 0;

	for (uint32_t i = 0; i < n; i++) {
		const float *xi = x + (size_t)i * D, *c = cen + (size_t)assign[i] * D;
		double s = 0;

		for (uint32_t f = 0; f < D; f++)
			s += (double)xi[f] * c[f];
		obj += s;
	}
	return obj;
}

/* The balance penalty of assignment a (size: K counters of scratch). */
static double penalty(uint32_t n, uint32_t K, double lambda, const uint32_t *a, uint32_t *size)
{
	double p = 0;

	if (lambda <= 0)
		return 0;
	memset(size, 0, sizeof(*size) * K);
	for (uint32_t i = 0; i < n; i++)
		size[a[i]]++;
	for (uint32_t k = 0; k < K; k++)
		p += locus_eldrfit_balance_penalty(n, K, lambda, size[k]);
	return p;
}

/*
 * z_i = [x_i ; w * y_i] / sqrt(1 + w^2 |y_i|^2), y_i = the decode counts
 * weighted by their own idf and L2-normalised (0 for a request without
 * decode tokens). Returns the rows (malloc'd, n x (D + L*E)) or NULL on
 * ENOMEM; *any is set when some request has decode tokens.
 */
float *eldr_joint_rows(const float *x, uint32_t n, uint32_t D, const uint16_t *decode,
		       uint16_t L, uint16_t E, float w, int *any)
{
	const size_t LE = (size_t)L * E, DJ = D + LE;
	float *z = malloc(sizeof(float) * n * DJ), *didf = malloc(sizeof(float) * LE);
	uint8_t *all = malloc(L);

	*any = 0;
	if (!z || !didf || !all)
		goto err;
	memset(all, 1, L);
	locus_eldrfit_idf(decode, n, LE, didf);
	for (uint32_t i = 0; i < n; i++) {
		float *zi = z + (size_t)i * DJ;
		double yn, xn = 0, inv;

		memcpy(zi, x + (size_t)i * D, sizeof(float) * D);
		yn = locus_eldrfit_vector(decode + (size_t)i * LE, L, E, didf, all, zi + D);
		if (yn <= 0) {
			memset(zi + D, 0, sizeof(float) * LE);
			continue;
		}
		*any = 1;
		/* |x_i| is 1 or 0 (an empty prompt), |y_i| is 1 */
		for (size_t f = 0; f < D; f++)
			xn += (double)zi[f] * zi[f];
		inv = 1.0 / sqrt(xn + (double)w * w);
		for (size_t f = 0; f < D; f++)
			zi[f] = (float)(zi[f] * inv);
		for (size_t f = D; f < DJ; f++)
			zi[f] = (float)(zi[f] * w * inv);
	}
	free(all);
	free(didf);
	return z;
err:
	free(all);
	free(didf);
	free(z);
	return NULL;
}

/* cen[k] = normalize(sum of the members' x); a vanishing mean: uniform unit vector. */
void eldr_prefill_centroids(const float *x, uint32_t n, uint32_t D, uint32_t K,
			      const uint32_t *assign, float *cen, double *acc)
{
	for (uint32_t k = 0; k < K; k++) {
		double nn = 0;

		memset(acc, 0, sizeof(double) * D);
		for (uint32_t i = 0; i < n; i++) {
			if (assign[i] != k)
				continue;
			for (uint32_t f = 0; f < D; f++)
				acc[f] += x[(size_t)i * D + f];
		}
		for (uint32_t f = 0; f < D; f++)
			nn += acc[f] * acc[f];
		nn = sqrt(nn);
		for (uint32_t f = 0; f < D; f++)
			cen[(size_t)k * D + f] = nn > 1e-12 ? (float)(acc[f] / nn) :
					       (float)(1.0 / sqrt((double)D));
	}
}

int eldr_cluster(const struct locus_eldrfit_opts *o, const float *x, uint32_t n, uint32_t D,
		 const uint16_t *decode, uint16_t L, uint16_t E, float *cen,
		 struct locus_eldrfit_result *res)
{
	const uint32_t K = o->n_decoders, R = o->restarts ? o->restarts : 1;
	const float *v = x;
	float *z = NULL, *c = NULL;
	uint32_t *a = NULL, *size = NULL, DV = D, lo, hi;
	double *acc = NULL, best = -INFINITY;
	int ret = 0, conv, any = 0;

	locus_eldrfit_slack_bounds(n, K, o->slack, &lo, &hi);
	res->size_lo = lo;
	res->size_hi = hi;
	res->decode_clustered = 0;
	if (decode && o->decode_weight > 0) {
		z = eldr_joint_rows(x, n, D, decode, L, E, o->decode_weight, &any);
		if (!z)
			return -ENOMEM;
		if (any) {
			v = z;
			DV = D + (uint32_t)L * E;
			res->decode_clustered = 1;
		}
	}
	c = malloc(sizeof(float) * (size_t)K * DV);
	a = malloc(sizeof(uint32_t) * n);
	acc = malloc(sizeof(double) * D);
	size = malloc(sizeof(uint32_t) * K);
	if (!c || !a || !acc || !size) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t r = 0; r < R; r++) {
		double obj;

		ret = locus_eldrfit_kmeans_bounded(v, n, DV, K, lo, hi, o->balance_price,
						   o->seed + r, o->max_iter, c, a, &conv,
						   R == 1 ? o->progress : NULL, o->progress_arg);
		if (ret < 0)
			goto out;
		obj = eldr_objective(v, n, DV, c, a) - penalty(n, K, o->balance_price, a, size);
		if (obj > best) { /* strictly: the first restart wins ties */
			best = obj;
			res->iterations = (uint32_t)ret;
			res->converged = conv;
			res->seed = o->seed + r;
			memcpy(res->assign, a, sizeof(uint32_t) * n);
			if (v == x)
				memcpy(cen, c, sizeof(float) * (size_t)K * D);
		}
		if (R > 1 && o->progress)
			o->progress(o->progress_arg, "kmeans", r + 1, R);
	}
	if (v != x)
		eldr_prefill_centroids(x, n, D, K, res->assign, cen, acc);
	res->objective = eldr_objective(x, n, D, cen, res->assign);
	ret = 0;
out:
	free(size);
	free(acc);
	free(a);
	free(c);
	free(z);
	return ret;
}
