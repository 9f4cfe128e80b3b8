// SPDX-License-Identifier: MIT
/*
 * Primary swaps for a grouping whose balance drifted: the rebalance refits
 * copies on the live loads, but copies alone cannot even out a grouping
 * whose primaries heat up together. A few swaps of primaries between GPUs,
 * each the one losing the least co-activation among those that cut the
 * peak well, bring the peak back within the load tolerance before the
 * copies are refitted.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_gracefit.h"

/* a swap keeping this share of the best swap's gain may be taken for its affinity */
#define SWAP_KEEP 0.5

/* The busiest rank's load over the mean. */
static double skew(const double *P, uint32_t N, double inv_mean)
{
	double mx = 0;

	for (uint32_t r = 0; r < N; r++)
		mx = fmax(mx, P[r]);
	return mx * inv_mean;
}

/* The same with a (on g) and x (on h) swapped. */
static double swapped_skew(const double *P, uint32_t N, double inv_mean, const double *W,
			   uint32_t a, uint32_t x, uint32_t g, uint32_t h)
{
	double d = W[a] - W[x], mx = 0;

	for (uint32_t r = 0; r < N; r++)
		mx = fmax(mx, P[r] - (r == g) * d + (r == h) * d);
	return mx * inv_mean;
}

/* M[y][r]: co-activation of y with the other primaries on rank r. */
static void aff_by_rank(const double *A, const uint16_t *primary, uint32_t E, uint32_t N,
			double *M)
{
	memset(M, 0, (size_t)E * N * sizeof(double));
	for (uint32_t y = 0; y < E; y++)
		for (uint32_t z = 0; z < E; z++)
			if (z != y)
				M[(size_t)y * N + primary[z]] += A[(size_t)y * E + z];
}

/*
 * The next swap: (*ba, *bx) and the skew it leaves, or 0 when no swap lowers
 * the skew J. With A, the swap losing the least co-activation among those
 * keeping SWAP_KEEP of the best swap's gain.
 */
static int next_swap(const double *P, uint32_t N, double inv_mean, const double *W,
		     uint32_t E, const double *A, double *M, const uint16_t *primary, double J,
		     uint32_t *ba, uint32_t *bx, double *bJ)
{
	double best = J - 1e-9, keep, bc = INFINITY;

	*ba = UINT32_MAX;
	for (uint32_t a = 0; a < E; a++)
		for (uint32_t x = a + 1; x < E; x++) {
			double Jn;

			if (primary[a] == primary[x])
				continue;
			Jn = swapped_skew(P, N, inv_mean, W, a, x, primary[a], primary[x]);
			if (Jn < best) {
				best = Jn;
				*ba = a;
				*bx = x;
			}
		}
	if (*ba == UINT32_MAX)
		return 0;
	*bJ = best;
	if (!A)
		return 1;
	keep = J - SWAP_KEEP * (J - best);
	aff_by_rank(A, primary, E, N, M);
	for (uint32_t a = 0; a < E; a++)
		for (uint32_t x = a + 1; x < E; x++) {
			uint32_t g = primary[a], h = primary[x];
			double c, Jn;

			if (g == h)
				continue;
			/* a leaves g's experts for h's (x gone), x the other way */
			c = M[(size_t)a * N + g] - M[(size_t)a * N + h] + M[(size_t)x * N + h] -
			    M[(size_t)x * N + g] + 2 * A[(size_t)a * E + x];
			if (c >= bc)
				continue;
			Jn = swapped_skew(P, N, inv_mean, W, a, x, g, h);
			if (Jn <= keep) {
				bc = c;
				*ba = a;
				*bx = x;
				*bJ = Jn;
			}
		}
	return 1;
}

int locus_gracefit_swap_primaries(uint32_t N, uint32_t E, const double *W, const double *A,
				  uint16_t *primary, uint32_t max_swaps, double tol,
				  uint32_t *swaps, struct locus_error *err)
{
	double *P = NULL, *M = NULL, J, tot = 0, inv_mean;
	uint32_t done = 0;
	int rc = 0;

	if (swaps)
		*swaps = 0;
	if (!W || !primary || N == 0 || N > LOCUS_GRACE_MAX_RANKS || !(tol >= 0))
		return locus_error_set(err, EINVAL, "primary swaps: bad arguments");
	P = calloc(N, sizeof(*P));
	M = A ? calloc((size_t)E * N, sizeof(*M)) : NULL;
	if (!P || (A && !M)) {
		rc = locus_error_set(err, ENOMEM, "primary swaps: out of memory");
		goto out;
	}
	for (uint32_t e = 0; e < E; e++) {
		if (primary[e] >= N) {
			rc = locus_error_set(err, LOCUS_ERANGE, "expert %u on rank %u >= %u", e,
					     primary[e], N);
			goto out;
		}
		if (!isfinite(W[e]) || W[e] < 0) {
			rc = locus_error_set(err, LOCUS_ENAN, "load of expert %u is %g", e, W[e]);
			goto out;
		}
		P[primary[e]] += W[e];
		tot += W[e];
	}
	if (tot <= 0)
		goto out;
	inv_mean = N / tot;
	J = skew(P, N, inv_mean);
	while (done < max_swaps && J > 1 + tol) {
		uint32_t a, x;
		uint16_t g;
		double d;

		if (!next_swap(P, N, inv_mean, W, E, A, M, primary, J, &a, &x, &J))
			break;
		d = W[a] - W[x];
		P[primary[a]] -= d;
		P[primary[x]] += d;
		g = primary[a];
		primary[a] = primary[x];
		primary[x] = g;
		done++;
	}
out:
	if (swaps)
		*swaps = done;
	free(M);
	free(P);
	return rc;
}
