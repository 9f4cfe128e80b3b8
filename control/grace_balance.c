// SPDX-License-Identifier: MIT
/*
 * Load-aware repair of one layer's grouping: equal primaries per GPU (the
 * slots EPLB has), then swaps that lower the peak GPU load at the least
 * co-activation lost, GPU and node tiers weighted by their costs.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_gracefit.h"

struct bal {
	uint32_t E, N, gpn;
	const double *A, *W;
	uint16_t *pri;
	double *load;
	uint32_t *size;
	double w_gpu, w_node, w_peak;
};

/* Co-activation of x with the experts on rank g (x itself and skip excluded). */
static double aff_gpu(const struct bal *b, uint32_t x, uint32_t g, uint32_t skip)
{
	double s = 0;

	for (uint32_t y = 0; y < b->E; y++)
		if (y != x && y != skip && b->pri[y] == g)
			s += b->A[(size_t)x * b->E + y];
	return s;
}

static double aff_node(const struct bal *b, uint32_t x, uint32_t nd, uint32_t skip)
{
	double s = 0;

	for (uint32_t y = 0; y < b->E; y++)
		if (y != x && y != skip && b->pri[y] / b->gpn == nd)
			s += b->A[(size_t)x * b->E + y];
	return s;
}

/* Affinity cost (tier-weighted) of moving x from its rank to h, b leaving h. */
static double move_cost(const struct bal *b, uint32_t x, uint32_t h, uint32_t other)
{
	uint32_t g = b->pri[x];
	double c = b->w_gpu * (aff_gpu(b, x, g, other) - aff_gpu(b, x, h, other));

	if (g / b->gpn != h / b->gpn)
		c += b->w_node * (aff_node(b, x, g / b->gpn, other) -
				  aff_node(b, x, h / b->gpn, other));
	return c;
}

static void set_rank(struct bal *b, uint32_t x, uint32_t h)
{
	b->load[b->pri[x]] -= b->W[x];
	b->size[b->pri[x]]--;
	b->pri[x] = (uint16_t)h;
	b->load[h] += b->W[x];
	b->size[h]++;
}

/* Move experts off ranks above the size cap, cheapest move first. */
static void equalize(struct bal *b, uint32_t cap)
{
	for (;;) {
		double best = INFINITY;
		uint32_t bx = UINT32_MAX, bh = 0;

		for (uint32_t x = 0; x < b->E; x++) {
			if (b->size[b->pri[x]] <= cap)
				continue;
			for (uint32_t h = 0; h < b->N; h++) {
				double c;

				if (b->size[h] >= cap)
					continue;
				c = move_cost(b, x, h, UINT32_MAX) + 1e-9 * b->load[h];
				if (c < best) {
					best = c;
					bx = x;
					bh = h;
				}
			}
		}
		if (bx == UINT32_MAX)
			return;
		set_rank(b, bx, bh);
	}
}

static uint32_t peak_rank(const struct bal *b)
{
	uint32_t g = 0;

	for (uint32_t r = 1; r < b->N; r++)
		if (b->load[r] > b->load[g])
			g = r;
	return g;
}

/*
 * Swap one expert of the peak rank with a lighter one elsewhere while the
 * peak is above (1 + tol) x mean; each step takes the swap with the least
 * affinity cost per unit of peak removed, and only while that cost is below
 * w_peak (the price of a unit of peak load in rows). Returns the swaps made.
 */
static uint32_t swap_down(struct bal *b, double mean, double tol)
{
	uint32_t swaps = 0;

	for (uint32_t it = 0; it < 4 * b->E; it++) {
		uint32_t g = peak_rank(b), ba = 0, bb = 0;
		double lg = b->load[g], best = INFINITY;

		if (lg <= (1 + tol) * mean)
			break;
		for (uint32_t a = 0; a < b->E; a++) {
			if (b->pri[a] != g)
				continue;
			for (uint32_t x = 0; x < b->E; x++) {
				uint32_t h = b->pri[x];
				double d = b->W[a] - b->W[x], lh, gain, c;

				if (h == g || d <= 0)
					continue;
				lh = b->load[h] + d;
				gain = lg - fmax(lg - d, lh);
				if (gain <= 1e-12 * mean)
					continue;
				c = move_cost(b, a, h, x) + move_cost(b, x, g, a);
				c = c / gain;
				if (c < best) {
					best = c;
					ba = a;
					bb = x;
				}
			}
		}
		if (best == INFINITY || best > b->w_peak)
			break;
		{
			uint32_t h = b->pri[bb];

			set_rank(b, ba, h);
			set_rank(b, bb, g);
		}
		swaps++;
	}
	return swaps;
}

/*
 * Pairwise swaps that gain tier-weighted co-activation while no GPU ends
 * above lim (the peak the load swaps left) and the sum of squared GPU
 * loads does not grow (a swap moving d from g to h changes it by
 * 2 d (L_h + d - L_g)): the
 * spectral embedding followed by the size repair leaves pairs that a
 * direct look at A improves (at 2 experts per GPU most of the grouping's
 * gain). M[x][g] = co-activation of x with rank g's experts, kept up to date.
 * Returns the swaps made.
 */
static uint32_t refine(struct bal *b, double lim)
{
	uint32_t E = b->E, N = b->N, swaps = 0;
	double *M = calloc((size_t)E * N, sizeof(double));

	if (!M)
		return 0;
	for (uint32_t x = 0; x < E; x++)
		for (uint32_t y = 0; y < E; y++)
			if (y != x)
				M[(size_t)x * N + b->pri[y]] += b->A[(size_t)x * E + y];
	for (uint32_t it = 0; it < 8 * E; it++) {
		double best = 1e-9;
		uint32_t ba = UINT32_MAX, bx = 0;

		for (uint32_t a = 0; a < E; a++) {
			uint32_t g = b->pri[a];

			for (uint32_t x = a + 1; x < E; x++) {
				uint32_t h = b->pri[x];
				double axy = b->A[(size_t)a * E + x], gain;
				double d = b->W[a] - b->W[x];

				/* no GPU above lim, and the loads' spread not wider */
				if (h == g || b->load[g] - d > lim || b->load[h] + d > lim ||
				    d * (b->load[h] + d - b->load[g]) > 1e-12 * lim * lim)
					continue;
				gain = b->w_gpu * (M[(size_t)a * N + h] - axy - M[(size_t)a * N + g] +
						   M[(size_t)x * N + g] - axy - M[(size_t)x * N + h]);
				if (g / b->gpn != h / b->gpn) {
					double na = 0, nx = 0;

					for (uint32_t r = 0; r < b->gpn; r++) {
						uint32_t rg = g / b->gpn * b->gpn + r;
						uint32_t rh = h / b->gpn * b->gpn + r;

						na += M[(size_t)a * N + rh] - M[(size_t)a * N + rg];
						nx += M[(size_t)x * N + rg] - M[(size_t)x * N + rh];
					}
					gain += b->w_node * (na - axy + nx - axy);
				}
				if (gain > best) {
					best = gain;
					ba = a;
					bx = x;
				}
			}
		}
		if (ba == UINT32_MAX)
			break;
		{
			uint32_t g = b->pri[ba], h = b->pri[bx];

			for (uint32_t y = 0; y < E; y++) {
				M[(size_t)y * N + g] += b->A[(size_t)y * E + bx] -
							b->A[(size_t)y * E + ba];
				M[(size_t)y * N + h] += b->A[(size_t)y * E + ba] -
							b->A[(size_t)y * E + bx];
			}
			set_rank(b, ba, h);
			set_rank(b, bx, g);
		}
		swaps++;
	}
	free(M);
	return swaps;
}

int locus_gracefit_balance_layer(const struct locus_gracefit_topo *t, uint32_t E,
				 const double *A, const double *W,
				 const struct locus_gracefit_opts *o, uint16_t *primary,
				 struct locus_gracefit_layer_info *info, struct locus_error *err)
{
	struct bal b = { .E = E, .A = A, .W = W, .pri = primary };
	double sum = 0, tol;
	uint32_t cap;
	int rc = 0;

	if (!t || !A || !W || !primary || t->n_nodes == 0 || t->gpus_per_node == 0)
		return locus_error_set(err, EINVAL, "balance: bad arguments");
	b.N = t->n_nodes * t->gpus_per_node;
	b.gpn = t->gpus_per_node;
	if (b.N > LOCUS_GRACE_MAX_RANKS)
		return locus_error_set(err, LOCUS_ERANGE, "balance: %u GPUs", b.N);
	b.w_gpu = o && o->cost_gpu > 0 ? o->cost_gpu : 1.0;
	b.w_node = o && o->cost_node > 0 ? o->cost_node : 1.0;
	b.w_peak = o && o->cost_peak > 0 ? o->cost_peak : INFINITY;
	cap = LOCUS_MIN(t->capacity, (E + b.N - 1) / b.N);
	tol = o && o->load_tol > 0 ? o->load_tol : 0.1;
	b.load = calloc(b.N, sizeof(*b.load));
	b.size = calloc(b.N, sizeof(*b.size));
	if (!b.load || !b.size) {
		rc = locus_error_set(err, ENOMEM, "balance: out of memory");
		goto out;
	}
	for (uint32_t e = 0; e < E; e++) {
		if (primary[e] >= b.N) {
			rc = locus_error_set(err, LOCUS_ERANGE, "expert %u on rank %u", e,
					     primary[e]);
			goto out;
		}
		b.load[primary[e]] += W[e];
		b.size[primary[e]]++;
		sum += W[e];
	}
	if (!o || !o->uneven)
		equalize(&b, cap);
	if (sum > 0) {
		uint32_t n = swap_down(&b, sum / b.N, tol);

		n += refine(&b, b.load[peak_rank(&b)]);
		if (info)
			info->n_swaps = n;
	} else if (info) {
		info->n_swaps = 0;
	}
out:
	free(b.size);
	free(b.load);
	return rc;
}
