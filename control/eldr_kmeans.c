// SPDX-License-Identifier: MIT
/*
 * Balanced spherical k-means with an exact bounded assignment step.
 *
 * The assignment is a min-cost flow: source -> point (cap 1) -> cluster
 * (cost c[i][k]) -> sink, each cluster's edge to the sink of capacity lo
 * plus an "extra" edge of capacity hi - lo into a node X whose edge to the
 * sink has capacity r = n - K * lo. Total capacity is n, so a full flow
 * saturates every direct edge: every cluster gets between lo and hi points
 * (lo = floor(n / K), hi = ceil(n / K) is the exact balance). Points are
 * added one at a time along a shortest augmenting path (successive shortest
 * paths keep the flow optimal for its value because the residual graph
 * never has a negative cycle). Point nodes are contracted away: moving
 * point j from cluster a to b costs c[j][b] - c[j][a], so the search runs
 * on K + 1 nodes.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eldr_fit_priv.h"
#include "locus_common.h"
#include "locus_eldrfit.h"

#define NONE UINT32_MAX

struct bal {
	uint32_t n, K, lo, hi, r, X; /* X = node index K; r = capacity of X */
	double lambda, mean;    /* balance price: the slot making a size s costs price(s) */
	uint32_t extra;         /* points held beyond lo, over all clusters (flow into X) */
	const double *c;
	uint32_t *assign, *size;
	double *w, *dist;       /* w[(K+1)^2] move costs; dist[K+1] */
	uint32_t *wj, *prev;    /* argmin point per move; predecessor node */
};

/* k holds points through its extra edge (X -> k is a residual edge). */
static int is_big(const struct bal *b, uint32_t k)
{
	return b->size[k] > b->lo;
}

/* k's direct edge is full and its extra edge has room (k -> X). */
static int to_extra(const struct bal *b, uint32_t k)
{
	return b->size[k] >= b->lo && b->size[k] < b->hi;
}

/*
 * Price of the slot that makes a cluster's size s: lambda * (s - mean) /
 * mean above the mean n / K, 0 up to it (so every direct slot is free).
 * Non-decreasing in s: a convex cost per cluster, which successive shortest
 * paths handle as parallel unit edges of increasing cost.
 */
static double price(const struct bal *b, uint32_t s)
{
	return s > b->mean ? b->lambda * (s - b->mean) / b->mean : 0.0;
}

/* Cheapest move a -> b for every cluster pair, over assigned points. */
static void move_costs(struct bal *b)
{
	const uint32_t K = b->K;

	for (uint32_t i = 0; i < K * K; i++) {
		b->w[i] = DBL_MAX;
		b->wj[i] = NONE;
	}
	for (uint32_t j = 0; j < b->n; j++) {
		uint32_t a = b->assign[j];
		const double *cj = b->c + (size_t)j * K;
		double *wa;
		uint32_t *ja;

		if (a == NONE)
			continue;
		wa = b->w + (size_t)a * K;
		ja = b->wj + (size_t)a * K;
		for (uint32_t k = 0; k < K; k++) {
			double v = cj[k] - cj[a];

			if (k != a && v < wa[k]) {
				wa[k] = v;
				ja[k] = j;
			}
		}
	}
}

/* Shortest paths from point p over clusters and X (Bellman-Ford). */
static void shortest(struct bal *b, uint32_t p)
{
	const uint32_t K = b->K, X = b->X;
	const double *cp = b->c + (size_t)p * K;
	int changed = 1;

	for (uint32_t k = 0; k < K; k++) {
		b->dist[k] = cp[k];
		b->prev[k] = NONE; /* reached straight from p */
	}
	b->dist[X] = DBL_MAX;
	b->prev[X] = NONE;
	for (uint32_t round = 0; changed && round <= K + 1; round++) {
		changed = 0;
		for (uint32_t a = 0; a < K; a++) {
			double da = b->dist[a];

			if (da == DBL_MAX)
				continue;
			for (uint32_t k = 0; k < K; k++) {
				double w = b->w[(size_t)a * K + k];

				if (w != DBL_MAX && da + w < b->dist[k] - 1e-12) {
					b->dist[k] = da + w;
					b->prev[k] = a;
					changed = 1;
				}
			}
			/* a -> X: a's lo direct slots are full and its extra edge has room */
			if (to_extra(b, a) && da + price(b, b->size[a] + 1) < b->dist[X] - 1e-12) {
				b->dist[X] = da + price(b, b->size[a] + 1);
				b->prev[X] = a;
				changed = 1;
			}
		}
		if (b->dist[X] != DBL_MAX) {
			/* X -> k: cancel k's last extra slot; k must then move a point out */
			for (uint32_t k = 0; k < K; k++) {
				double dk = b->dist[X] - price(b, b->size[k]);

				if (is_big(b, k) && dk < b->dist[k] - 1e-12) {
					b->dist[k] = dk;
					b->prev[k] = X;
					changed = 1;
				}
			}
		}
	}
}

static void augment(struct bal *b, uint32_t p)
{
	const uint32_t K = b->K, X = b->X;
	uint32_t end = NONE, node;
	double best = DBL_MAX;
	int x_open = b->extra < b->r;
	const double *cp = b->c + (size_t)p * K;
	uint32_t fav = 0;

	/*
	 * Fast path: the point's cheapest cluster can take it. No path through
	 * moves is cheaper: a chain of moves ending at a cluster with room is a
	 * flow of the current value, and the current flow is optimal for it, so
	 * the chain costs >= 0, while the first hop costs >= c[p][fav]. Only for
	 * a free slot: a priced one may lose to a path ending in a cheaper one.
	 */
	for (uint32_t k = 1; k < K; k++)
		if (cp[k] < cp[fav])
			fav = k;
	if (b->size[fav] < b->lo ||
	    (to_extra(b, fav) && x_open && price(b, b->size[fav] + 1) == 0.0)) {
		b->extra += b->size[fav] >= b->lo;
		b->assign[p] = fav;
		b->size[fav]++;
		return;
	}
	move_costs(b);
	shortest(b, p);
	for (uint32_t k = 0; k < K; k++) {
		if (b->size[k] < b->lo && b->dist[k] < best - 1e-12) {
			best = b->dist[k];
			end = k;
		}
	}
	if (x_open && b->dist[X] < best - 1e-12)
		end = X;
	/* walk back applying moves; a node reached from X sheds a point next */
	node = end;
	if (node != X)
		b->size[node]++;
	while (node != NONE) {
		uint32_t from = b->prev[node];

		if (from == NONE) {
			b->assign[p] = node;
			break;
		}
		if (from != X && node != X) {
			uint32_t j = b->wj[(size_t)from * K + node];

			b->assign[j] = node;
			/* from gains the previous hop's point and loses j: net 0 */
		} else if (from == X) {
			/* node loses its extra point (moved further along the path) */
			b->size[node]--;
			b->extra--;
		} else {
			/* from -> X: from keeps the point it received: one larger */
			b->size[from]++;
			b->extra++;
		}
		node = from;
	}
}

int locus_eldrfit_bounded_assign(const double *cost, uint32_t n, uint32_t K, uint32_t lo,
				 uint32_t hi, double lambda, uint32_t *assign)
{
	struct bal b;
	int ret = 0;

	if (!cost || !assign || !n || !K || K > 65536 || lo > hi ||
	    (uint64_t)K * lo > n || (uint64_t)K * hi < n || !(lambda >= 0) || lambda > 1e6)
		return -EINVAL;
	memset(&b, 0, sizeof(b));
	b.n = n;
	b.K = K;
	b.lambda = lambda;
	b.mean = (double)n / K;
	b.lo = lo;
	b.hi = hi;
	b.r = n - K * lo;
	b.X = K;
	b.c = cost;
	b.assign = assign;
	b.size = calloc(K + 1, sizeof(*b.size));
	b.w = malloc(sizeof(*b.w) * K * K);
	b.wj = malloc(sizeof(*b.wj) * K * K);
	b.dist = malloc(sizeof(*b.dist) * (K + 1));
	b.prev = malloc(sizeof(*b.prev) * (K + 1));
	if (!b.size || !b.w || !b.wj || !b.dist || !b.prev) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		assign[i] = NONE;
	for (uint32_t i = 0; i < n; i++)
		augment(&b, i);
out:
	free(b.prev);
	free(b.dist);
	free(b.wj);
	free(b.w);
	free(b.size);
	return ret;
}

int locus_eldrfit_balanced_assign(const double *cost, uint32_t n, uint32_t K,
				  uint32_t *assign)
{
	if (!K)
		return -EINVAL;
	return locus_eldrfit_bounded_assign(cost, n, K, n / K, (n + K - 1) / K, 0.0, assign);
}

void locus_eldrfit_slack_bounds(uint32_t n, uint32_t K, float slack, uint32_t *lo,
				uint32_t *hi)
{
	double mean = (double)n / K, s = slack > 0 ? slack : 0;
	double l = ceil((1.0 - s) * mean - 1e-9), h = floor((1.0 + s) * mean + 1e-9);

	*lo = l < 0 ? 0 : l > n / K ? n / K : (uint32_t)l;
	*hi = h < (n + K - 1) / K ? (n + K - 1) / K : h > n ? n : (uint32_t)h;
}

double locus_eldrfit_balance_penalty(uint32_t n, uint32_t K, double lambda, uint32_t size)
{
	const double mean = (double)n / K;
	double p = 0;

	for (uint32_t s = 1; s <= size; s++)
		p += s > mean ? lambda * (s - mean) / mean : 0.0;
	return p;
}

/* ---- k-means ---- */

/* Uniform in [0, 1) with 53 bits. */
static double uniform(uint64_t *s)
{
	return (double)(locus_splitmix64(s) >> 11) * 0x1.0p-53;
}

/*
 * Fixed-order dot product: 8 partial sums, then a fixed tree. The clones run
 * the same operations in the same order (separate multiply and add: neither
 * target has FMA and contraction is off): bit-identical results on every
 * CPU, only wider registers.
 */
LOCUS_FIT_KERNEL
static float dotf(const float *a, const float *b, uint32_t D)
{
	LOCUS_FIT_NO_CONTRACT
	float s[8] = { 0 };
	uint32_t i = 0;

	for (; i + 8 <= D; i += 8)
		for (unsigned l = 0; l < 8; l++)
			s[l] += a[i + l] * b[i + l];
	for (unsigned l = 0; i < D; i++, l++)
		s[l] += a[i] * b[i];
	return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

typedef float v8f __attribute__((vector_size(32)));

#define LD8(dst, p) memcpy(&(dst), (p), sizeof(v8f))
#define HSUM8(v) ((((v)[0] + (v)[4]) + ((v)[2] + (v)[6])) + \
		  (((v)[1] + (v)[5]) + ((v)[3] + (v)[7])))

/*
 * cost[i][k] = -x_i . c_k for all points and centroids, 2 x 4 dot products
 * per block sharing their loads; the same lane order as dotf() (edges use
 * dotf itself), so a pair's value does not depend on the path taken.
 */
LOCUS_FIT_KERNEL
static void cost_matrix(const float *x, uint32_t n, uint32_t D, const float *c, uint32_t K,
			double *cost)
{
	LOCUS_FIT_NO_CONTRACT
	const uint32_t D8 = D & ~7u;
	uint32_t i0 = 0;

	for (; i0 + 2 <= n; i0 += 2) {
		const float *a0 = x + (size_t)i0 * D, *a1 = a0 + D;
		uint32_t k0 = 0;

		for (; k0 + 4 <= K; k0 += 4) {
			const float *b0 = c + (size_t)k0 * D;
			v8f acc[2][4] = { { { 0 } } };

			for (uint32_t f = 0; f < D8; f += 8) {
				v8f x0, x1;

				LD8(x0, a0 + f);
				LD8(x1, a1 + f);
				for (int kk = 0; kk < 4; kk++) {
					v8f y;

					LD8(y, b0 + (size_t)kk * D + f);
					acc[0][kk] += x0 * y;
					acc[1][kk] += x1 * y;
				}
			}
			for (int ii = 0; ii < 2; ii++) {
				for (int kk = 0; kk < 4; kk++) {
					const float *p = ii ? a1 : a0, *q = b0 + (size_t)kk * D;

					/* tail lanes continue the same partial sums */
					for (uint32_t f = D8; f < D; f++)
						acc[ii][kk][f - D8] += p[f] * q[f];
					cost[(size_t)(i0 + ii) * K + k0 + kk] = -(double)HSUM8(acc[ii][kk]);
				}
			}
		}
		for (; k0 < K; k0++) {
			cost[(size_t)i0 * K + k0] = -(double)dotf(a0, c + (size_t)k0 * D, D);
			cost[(size_t)(i0 + 1) * K + k0] = -(double)dotf(a1, c + (size_t)k0 * D, D);
		}
	}
	for (; i0 < n; i0++)
		for (uint32_t k = 0; k < K; k++)
			cost[(size_t)i0 * K + k] = -(double)dotf(x + (size_t)i0 * D,
								 c + (size_t)k * D, D);
}

static void kmeanspp(const float *x, uint32_t n, uint32_t D, uint32_t K, uint64_t seed,
		     float *cen, double *dmin)
{
	uint64_t rng = seed;
	uint32_t first = (uint32_t)(uniform(&rng) * n);

	memcpy(cen, x + (size_t)first * D, sizeof(float) * D);
	for (uint32_t i = 0; i < n; i++)
		dmin[i] = DBL_MAX;
	for (uint32_t k = 1; k < K; k++) {
		const float *last = cen + (size_t)(k - 1) * D;
		double total = 0, pick;
		uint32_t chosen = NONE;

		for (uint32_t i = 0; i < n; i++) {
			double d = 2.0 - 2.0 * dotf(x + (size_t)i * D, last, D);

			if (d < 0)
				d = 0;
			if (d < dmin[i])
				dmin[i] = d;
			total += dmin[i];
		}
		pick = uniform(&rng) * total;
		for (uint32_t i = 0; i < n && total > 0; i++) {
			if (dmin[i] > 0) {
				chosen = i;
				if (pick < dmin[i])
					break;
				pick -= dmin[i];
			}
		}
		if (chosen == NONE) /* every point sits on a centroid: take any */
			chosen = (uint32_t)(uniform(&rng) * n);
		memcpy(cen + (size_t)k * D, x + (size_t)chosen * D, sizeof(float) * D);
	}
}

static void update(const float *x, uint32_t n, uint32_t D, uint32_t K, const uint32_t *assign,
		   float *cen, double *acc)
{
	for (uint32_t k = 0; k < K; k++) {
		double nn = 0;
		uint32_t any = NONE;

		memset(acc, 0, sizeof(double) * D);
		for (uint32_t i = 0; i < n; i++) {
			if (assign[i] != k)
				continue;
			if (any == NONE)
				any = i;
			for (uint32_t d = 0; d < D; d++)
				acc[d] += x[(size_t)i * D + d];
		}
		for (uint32_t d = 0; d < D; d++)
			nn += acc[d] * acc[d];
		nn = sqrt(nn);
		if (nn > 1e-12) {
			for (uint32_t d = 0; d < D; d++)
				cen[(size_t)k * D + d] = (float)(acc[d] / nn);
		} else if (any != NONE) {
			memcpy(cen + (size_t)k * D, x + (size_t)any * D, sizeof(float) * D);
		}
	}
}

int locus_eldrfit_kmeans(const float *x, uint32_t n, uint32_t D, uint32_t K, uint64_t seed,
			 uint32_t max_iter, float *centroids, uint32_t *assign, int *converged,
			 locus_eldrfit_progress_fn progress, void *progress_arg)
{
	if (!K)
		return -EINVAL;
	return locus_eldrfit_kmeans_bounded(x, n, D, K, n / K, (n + K - 1) / K, 0.0, seed,
					    max_iter, centroids, assign, converged, progress,
					    progress_arg);
}

int locus_eldrfit_kmeans_bounded(const float *x, uint32_t n, uint32_t D, uint32_t K,
				 uint32_t lo, uint32_t hi, double lambda, uint64_t seed,
				 uint32_t max_iter, float *centroids, uint32_t *assign,
				 int *converged, locus_eldrfit_progress_fn progress,
				 void *progress_arg)
{
	double *cost = NULL, *scratch = NULL;
	uint32_t *prev = NULL, it;
	int ret;

	if (!x || !centroids || !assign || !n || !D || !K || K > n || lo > hi ||
	    (uint64_t)K * lo > n || (uint64_t)K * hi < n || !(lambda >= 0) || lambda > 1e6)
		return -EINVAL;
	if (!max_iter)
		max_iter = 100;
	cost = malloc(sizeof(*cost) * (size_t)n * K);
	scratch = malloc(sizeof(*scratch) * (D > n ? D : n));
	prev = malloc(sizeof(*prev) * n);
	if (!cost || !scratch || !prev) {
		ret = -ENOMEM;
		goto out;
	}
	kmeanspp(x, n, D, K, seed, centroids, scratch);
	*converged = 0;
	for (it = 1; it <= max_iter; it++) {
		cost_matrix(x, n, D, centroids, K, cost);
		if (it > 1)
			memcpy(prev, assign, sizeof(*prev) * n);
		ret = locus_eldrfit_bounded_assign(cost, n, K, lo, hi, lambda, assign);
		if (ret < 0)
			goto out;
		if (progress)
			progress(progress_arg, "kmeans", it, max_iter);
		if (it > 1 && !memcmp(prev, assign, sizeof(*prev) * n)) {
			*converged = 1;
			if (progress) /* complete the bar: it - 1 iterations were needed */
				progress(progress_arg, "kmeans", it, it);
			break;
		}
		update(x, n, D, K, assign, centroids, scratch);
	}
	ret = (int)(it > max_iter ? max_iter : it);
out:
	free(prev);
	free(scratch);
	free(cost);
	return ret;
}
