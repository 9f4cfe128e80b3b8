// SPDX-License-Identifier: MIT
/*
 * Spectral clustering (normalised Laplacian, LAPACKE dsyevr, k-means++),
 * the size repair that makes a clustering capacity-feasible, and the knee
 * finder used to choose the non-uniformity ratio r.
 */
#include <errno.h>
#include <float.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_gracefit.h"

#define KMEANS_MAX_ITER 100

static uint64_t rng_next(uint64_t *s)
{
	/* xorshift64*: a fixed seed makes every fit reproducible */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static double rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

static double dist2(const double *a, const double *b, uint32_t d)
{
	double s = 0;

	for (uint32_t i = 0; i < d; i++)
		s += (a[i] - b[i]) * (a[i] - b[i]);
	return s;
}

/* k-means++ seeding then Lloyd; returns the inertia, labels in lab. */
static double kmeans_once(const double *x, uint32_t n, uint32_t d, uint32_t k, uint64_t *rs,
			  double *cent, double *best_d, uint32_t *cnt, uint32_t *lab)
{
	double inertia = 0;

	memcpy(cent, x + (size_t)(rng_next(rs) % n) * d, d * sizeof(double));
	for (uint32_t i = 0; i < n; i++)
		best_d[i] = dist2(x + (size_t)i * d, cent, d);
	for (uint32_t c = 1; c < k; c++) {
		double tot = 0, pick;
		uint32_t i = 0;

		for (uint32_t j = 0; j < n; j++)
			tot += best_d[j];
		pick = rng_unit(rs) * tot;
		if (tot > 0) {
			for (i = 0; i < n - 1; i++) {
				pick -= best_d[i];
				if (pick < 0)
					break;
			}
		} else {
			i = (uint32_t)(rng_next(rs) % n);
		}
		memcpy(cent + (size_t)c * d, x + (size_t)i * d, d * sizeof(double));
		for (uint32_t j = 0; j < n; j++)
			best_d[j] = fmin(best_d[j], dist2(x + (size_t)j * d, cent + (size_t)c * d, d));
	}
	for (uint32_t it = 0; it < KMEANS_MAX_ITER; it++) {
		int changed = 0;

		inertia = 0;
		for (uint32_t i = 0; i < n; i++) {
			uint32_t b = 0;
			double bd = DBL_MAX;

			for (uint32_t c = 0; c < k; c++) {
				double dd = dist2(x + (size_t)i * d, cent + (size_t)c * d, d);

				if (dd < bd) {
					bd = dd;
					b = c;
				}
			}
			changed |= (it == 0 || lab[i] != b);
			lab[i] = b;
			best_d[i] = bd;
			inertia += bd;
		}
		if (!changed)
			break;
		memset(cent, 0, (size_t)k * d * sizeof(double));
		memset(cnt, 0, k * sizeof(uint32_t));
		for (uint32_t i = 0; i < n; i++) {
			cnt[lab[i]]++;
			for (uint32_t j = 0; j < d; j++)
				cent[(size_t)lab[i] * d + j] += x[(size_t)i * d + j];
		}
		for (uint32_t c = 0; c < k; c++) {
			if (cnt[c] == 0) {
				/* an empty cluster takes the point farthest from its centre */
				uint32_t far = 0;

				for (uint32_t i = 1; i < n; i++)
					if (best_d[i] > best_d[far])
						far = i;
				memcpy(cent + (size_t)c * d, x + (size_t)far * d,
				       d * sizeof(double));
				best_d[far] = 0;
				continue;
			}
			for (uint32_t j = 0; j < d; j++)
				cent[(size_t)c * d + j] /= cnt[c];
		}
	}
	return inertia;
}

int locus_gracefit_spectral(const double *a, uint32_t n, uint32_t k, uint32_t dim,
			    uint64_t seed, uint32_t *label, struct locus_error *err)
{
	double *L = NULL, *Z = NULL, *w = NULL, *deg = NULL, *cent = NULL, *bd = NULL;
	uint32_t *cnt = NULL, *lab = NULL;
	lapack_int *isuppz = NULL, m = 0, info;
	uint64_t rs = seed ? seed : 1;
	double best = DBL_MAX;
	int rc = 0;

	if (!a || !label || n == 0 || k == 0)
		return locus_error_set(err, EINVAL, "spectral: bad arguments");
	if (k == 1 || k >= n) {
		for (uint32_t i = 0; i < n; i++)
			label[i] = k == 1 ? 0 : i;
		return 0;
	}
	dim = LOCUS_MIN(LOCUS_MAX(dim, k), n);
	L = malloc((size_t)n * n * sizeof(double));
	Z = malloc((size_t)n * dim * sizeof(double));
	w = malloc(n * sizeof(double));
	deg = malloc(n * sizeof(double));
	cent = malloc((size_t)k * dim * sizeof(double));
	bd = malloc(n * sizeof(double));
	cnt = malloc(k * sizeof(uint32_t));
	lab = malloc(n * sizeof(uint32_t));
	isuppz = malloc(2 * (size_t)n * sizeof(lapack_int));
	if (!L || !Z || !w || !deg || !cent || !bd || !cnt || !lab || !isuppz) {
		rc = locus_error_set(err, ENOMEM, "spectral clustering of %u items: out of memory",
				     n);
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		double s = 0;

		for (uint32_t j = 0; j < n; j++) {
			double v = a[(size_t)i * n + j];

			if (!isfinite(v) || v < 0) {
				rc = locus_error_set(err, LOCUS_ENAN,
						     "affinity[%u][%u] = %g is not a finite "
						     "non-negative number", i, j, v);
				goto out;
			}
			if (i != j)
				s += v;
		}
		deg[i] = s > 0 ? 1.0 / sqrt(s) : 0;
	}
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < n; j++)
			L[(size_t)i * n + j] = (i == j ? 1.0 : 0.0) -
				(i == j ? 0.0 : deg[i] * a[(size_t)i * n + j] * deg[j]);
	info = LAPACKE_dsyevr(LAPACK_ROW_MAJOR, 'V', 'I', 'U', (lapack_int)n, L, (lapack_int)n,
			      0, 0, 1, (lapack_int)dim, 0.0, &m, w, Z, (lapack_int)dim, isuppz);
	if (info != 0 || m != (lapack_int)dim) {
		rc = locus_error_set(err, LOCUS_ESTATE, "LAPACKE_dsyevr failed (info %d, %d of "
				     "%u eigenvectors)", (int)info, (int)m, dim);
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		double s = 0;

		for (uint32_t j = 0; j < dim; j++)
			s += Z[(size_t)i * dim + j] * Z[(size_t)i * dim + j];
		s = sqrt(s);
		if (s > 0)
			for (uint32_t j = 0; j < dim; j++)
				Z[(size_t)i * dim + j] /= s;
	}
	for (uint32_t rst = 0; rst < 4; rst++) {
		double in = kmeans_once(Z, n, dim, k, &rs, cent, bd, cnt, lab);

		if (in < best - 1e-12) {
			best = in;
			memcpy(label, lab, n * sizeof(uint32_t));
		}
	}
out:
	free(isuppz);
	free(lab);
	free(cnt);
	free(bd);
	free(cent);
	free(deg);
	free(w);
	free(Z);
	free(L);
	return rc;
}

int locus_gracefit_repair_sizes(const double *a, uint32_t n, uint32_t k, const uint32_t *lo,
				const uint32_t *hi, uint32_t *label, struct locus_error *err)
{
	uint64_t sum_lo = 0, sum_hi = 0;
	uint32_t *size;
	double *S;

	for (uint32_t c = 0; c < k; c++) {
		if (lo[c] > hi[c])
			return locus_error_set(err, LOCUS_ERANGE, "cluster %u: bounds %u > %u", c,
					       lo[c], hi[c]);
		sum_lo += lo[c];
		sum_hi += hi[c];
	}
	if (sum_lo > n || sum_hi < n)
		return locus_error_set(err, LOCUS_ERANGE,
				       "%u items cannot fit clusters bounded by [%llu, %llu] in "
				       "total", n, (unsigned long long)sum_lo,
				       (unsigned long long)sum_hi);
	size = calloc(k, sizeof(*size));
	S = calloc((size_t)n * k, sizeof(*S));
	if (!size || !S) {
		free(size);
		free(S);
		return locus_error_set(err, ENOMEM, "size repair: out of memory");
	}
	for (uint32_t i = 0; i < n; i++) {
		if (label[i] >= k) {
			free(size);
			free(S);
			return locus_error_set(err, LOCUS_ERANGE, "label %u of item %u >= %u",
					       label[i], i, k);
		}
		size[label[i]]++;
	}
	/* S[i][c]: affinity of i to the members of c other than itself */
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < n; j++)
			if (i != j)
				S[(size_t)i * k + label[j]] += a[(size_t)i * n + j];
	for (;;) {
		int over = 0, under = 0;
		uint32_t bi = n, bg = k;
		double bc = DBL_MAX;

		for (uint32_t c = 0; c < k; c++) {
			over |= size[c] > hi[c];
			under |= size[c] < lo[c];
		}
		if (!over && !under)
			break;
		for (uint32_t i = 0; i < n; i++) {
			uint32_t c = label[i];

			/* overflow first; then fill deficits from clusters above lo */
			if (over ? size[c] <= hi[c] : size[c] <= lo[c])
				continue;
			for (uint32_t g = 0; g < k; g++) {
				double cost;

				if (g == c || (over ? size[g] >= hi[g] : size[g] >= lo[g]))
					continue;
				cost = S[(size_t)i * k + c] - S[(size_t)i * k + g];
				if (cost < bc) {
					bc = cost;
					bi = i;
					bg = g;
				}
			}
		}
		if (bi == n)
			break; /* cannot happen given the sums checked above */
		for (uint32_t j = 0; j < n; j++) {
			if (j == bi)
				continue;
			S[(size_t)j * k + label[bi]] -= a[(size_t)j * n + bi];
			S[(size_t)j * k + bg] += a[(size_t)j * n + bi];
		}
		size[label[bi]]--;
		size[bg]++;
		label[bi] = bg;
	}
	free(size);
	free(S);
	return 0;
}

size_t locus_gracefit_knee(const double *x, const double *y, size_t n)
{
	double x0, x1, y0, y1, best = -DBL_MAX;
	size_t bi = 0;

	if (!x || !y || n < 3)
		return 0;
	x0 = x1 = x[0];
	y0 = y1 = y[0];
	for (size_t i = 1; i < n; i++) {
		x0 = fmin(x0, x[i]);
		x1 = fmax(x1, x[i]);
		y0 = fmin(y0, y[i]);
		y1 = fmax(y1, y[i]);
	}
	if (!(x1 > x0) || !(y1 > y0))
		return 0;
	for (size_t i = 0; i < n; i++) {
		double d = (y[i] - y0) / (y1 - y0) - (x[i] - x0) / (x1 - x0);

		if (d > best + 1e-12) {
			best = d;
			bi = i;
		}
	}
	return bi;
}
