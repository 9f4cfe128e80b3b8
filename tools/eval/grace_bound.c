// SPDX-License-Identifier: MIT
/* The oracle bound on rows off the source GPU (grace_bound.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grace_bound.h"

/*
 * Hungarian method (shortest augmenting paths with potentials), minimising
 * the cost -w; forbidden cells cost more than any permitted assignment.
 */
int gb_assign_max(const double *w, uint32_t n, int no_fixed, uint32_t *perm, double *best)
{
	size_t m = (size_t)n + 1;
	double *u = calloc(m, sizeof(double)), *v = calloc(m, sizeof(double));
	double *minv = calloc(m, sizeof(double)), big = 1, sum = 0;
	uint32_t *p = calloc(m, sizeof(uint32_t)), *way = calloc(m, sizeof(uint32_t));
	char *used = calloc(m, 1);
	int rc = -ENOMEM;

	if (!u || !v || !minv || !p || !way || !used)
		goto err_free;
	for (size_t i = 0; i < (size_t)n * n; i++)
		big += 2 * fabs(w[i]);
	big *= n;
	for (uint32_t i = 1; i <= n; i++) {
		uint32_t j0 = 0;

		p[0] = i;
		for (size_t j = 0; j < m; j++) {
			minv[j] = INFINITY;
			used[j] = 0;
		}
		do {
			uint32_t i0 = p[j0], j1 = 0;
			double delta = INFINITY;

			used[j0] = 1;
			for (uint32_t j = 1; j <= n; j++) {
				double c, cur;

				if (used[j])
					continue;
				c = no_fixed && i0 == j ? big : -w[(size_t)(i0 - 1) * n + j - 1];
				cur = c - u[i0] - v[j];
				if (cur < minv[j]) {
					minv[j] = cur;
					way[j] = j0;
				}
				if (minv[j] < delta) {
					delta = minv[j];
					j1 = j;
				}
			}
			for (uint32_t j = 0; j <= n; j++) {
				if (used[j]) {
					u[p[j]] += delta;
					v[j] -= delta;
				} else {
					minv[j] -= delta;
				}
			}
			j0 = j1;
		} while (p[j0] != 0);
		do {
			uint32_t j1 = way[j0];

			p[j0] = p[j1];
			j0 = j1;
		} while (j0);
	}
	for (uint32_t j = 1; j <= n; j++) {
		uint32_t i = p[j] - 1;

		if (perm)
			perm[i] = j - 1;
		sum += w[(size_t)i * n + j - 1];
	}
	*best = sum;
	rc = 0;
err_free:
	free(used);
	free(way);
	free(p);
	free(minv);
	free(v);
	free(u);
	return rc;
}

static int cmp_desc(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x > y ? -1 : x < y;
}

/* Sum of the top c of x[0..n-1] (sorted descending in place first). */
static double top_sum(double *x, uint32_t n, uint32_t c)
{
	double s = 0;

	qsort(x, n, sizeof(*x), cmp_desc);
	for (uint32_t i = 0; i < c && i < n; i++)
		s += x[i];
	return s;
}

/* Token counts: W[e] tokens holding e, A[a][b] tokens holding both, ns[s][e] per source. */
struct counts {
	uint32_t E, N, kmax;
	double *W, *A, *ns, *n_src, pairs, floor;
};

static int count(const uint16_t *ids, uint32_t n_tok, uint32_t k, const struct gb_place *p,
		 struct counts *c)
{
	uint32_t E = p->E, slots = p->group + p->reps;

	c->E = E;
	c->N = p->N;
	c->W = calloc(E, sizeof(double));
	c->A = calloc((size_t)E * E, sizeof(double));
	c->ns = calloc((size_t)p->N * E, sizeof(double));
	c->n_src = calloc(p->N, sizeof(double));
	if (!c->W || !c->A || !c->ns || !c->n_src)
		return -ENOMEM;
	for (uint32_t t = 0; t < n_tok; t++) {
		const uint16_t *x = ids + (size_t)t * k;
		uint16_t d[64];
		uint32_t nd = 0, s = t % p->N;

		for (uint32_t j = 0; j < k; j++) {
			int seen = 0;

			if (x[j] >= E)
				return -EINVAL;
			for (uint32_t i = 0; i < nd; i++)
				seen |= d[i] == x[j];
			if (!seen)
				d[nd++] = x[j];
		}
		c->kmax = nd > c->kmax ? nd : c->kmax;
		c->pairs += nd;
		c->floor += nd ? (nd + slots - 1) / slots - 1 : 0;
		c->n_src[s] += 1;
		for (uint32_t i = 0; i < nd; i++) {
			c->W[d[i]] += 1;
			c->ns[(size_t)s * E + d[i]] += 1;
			for (uint32_t j = 0; j < nd; j++)
				if (j != i)
					c->A[(size_t)d[i] * E + d[j]] += 1;
		}
	}
	return 0;
}

static void counts_free(struct counts *c)
{
	free(c->W);
	free(c->A);
	free(c->ns);
	free(c->n_src);
}

/* Co-counts of e with every other expert, descending, in row[0..E-2]. */
static void partners(const struct counts *c, uint32_t e, double *row)
{
	uint32_t n = 0;

	for (uint32_t x = 0; x < c->E; x++)
		if (x != e)
			row[n++] = c->A[(size_t)e * c->E + x];
	qsort(row, n, sizeof(*row), cmp_desc);
}

static int group_term(const struct counts *c, const struct gb_place *p, double *out)
{
	uint32_t E = c->E, cmax = c->kmax < p->group ? c->kmax : p->group;
	double *row = malloc(E * sizeof(double)), s = 0, a;
	int rc = 0;

	if (!row)
		return -ENOMEM;
	for (uint32_t e = 0; e < E && cmax >= 2; e++) {
		partners(c, e, row);
		s += fmin(c->W[e], top_sum(row, E - 1, p->group - 1));
	}
	*out = cmax >= 2 ? s * (cmax - 1) / cmax : 0;
	if (p->group == 2 && E >= 2) {
		rc = gb_assign_max(c->A, E, 1, NULL, &a);
		if (!rc)
			*out = fmin(*out, a / 2);
	}
	free(row);
	return rc;
}

/* T[a][b][r]: tokens holding all three distinct experts (every order). */
static float *triple_counts(const uint16_t *ids, uint32_t n_tok, uint32_t k, uint32_t E)
{
	float *T = calloc((size_t)E * E * E, sizeof(float));

	for (uint32_t t = 0; T && t < n_tok; t++) {
		const uint16_t *x = ids + (size_t)t * k;

		/* ordered triples of distinct positions; a repeated id counts at its first */
		for (uint32_t i = 0; i < k; i++)
			for (uint32_t j = 0; j < k; j++)
				for (uint32_t l = 0; l < k; l++) {
					int dup = 0;

					if (x[i] == x[j] || x[i] == x[l] || x[j] == x[l])
						continue;
					for (uint32_t q = 0; q < i; q++)
						dup |= x[q] == x[i];
					for (uint32_t q = 0; q < j; q++)
						dup |= x[q] == x[j];
					for (uint32_t q = 0; q < l; q++)
						dup |= x[q] == x[l];
					if (!dup)
						T[((size_t)x[i] * E + x[j]) * E + x[l]] += 1;
				}
	}
	return T;
}

/* tokens holding a and at least one of b, r (distinct) */
static double cover2(const struct counts *c, const float *T, uint32_t a, uint32_t b, uint32_t r)
{
	uint32_t E = c->E;

	return c->A[(size_t)a * E + b] + c->A[(size_t)a * E + r] - T[((size_t)a * E + b) * E + r];
}

/* w_ab = A_ab + the best copy's (1 - lambda_r) x cov(r | a, b), its r in arg[ab] (E: none). */
static void triple_weights(const struct counts *c, const float *T, const double *lambda,
			   double *w, uint32_t *arg)
{
	uint32_t E = c->E;

	for (uint32_t a = 0; a < E; a++)
		for (uint32_t b = 0; b < E; b++) {
			double best = 0;
			uint32_t at = E;

			for (uint32_t r = 0; r < E && a != b; r++) {
				double h;

				if (r == a || r == b)
					continue;
				h = (1 - lambda[r]) * cover2(c, T, r, a, b);
				if (h > best) {
					best = h;
					at = r;
				}
			}
			w[(size_t)a * E + b] = c->A[(size_t)a * E + b] + best;
			arg[(size_t)a * E + b] = at;
		}
}

/*
 * 2 primaries + 1 copy per GPU. The savings are at most the pairs' A_ab
 * plus, per copied expert r, min(W_r, sum over its GPUs g of cov(r | pair
 * of g)) (the second inequality: r gains once per token at most), and for
 * any lambda in [0,1]^E, min(W, S) <= lambda W + (1 - lambda) S; so they
 * are at most sum_r lambda_r W_r + a maximum-weight perfect matching on
 * w_ab = A_ab + max_r (1 - lambda_r) cov(r | a, b), itself at most half the
 * best assignment on w without fixed points. lambda = 0 is the plain
 * triple bound (a GPU {a,b,r} saves A_ab + A_ar + A_br - T_abr); a
 * projected subgradient descent on lambda keeps the least value found,
 * every one of which is a bound.
 */
static int triple_term(const struct counts *c, const float *T, double *out)
{
	uint32_t E = c->E, *arg = malloc((size_t)E * E * sizeof(uint32_t));
	uint32_t *perm = malloc(E * sizeof(uint32_t));
	double *w = calloc((size_t)E * E, sizeof(double));
	double *lambda = calloc(E, sizeof(double)), *g = malloc(E * sizeof(double));
	int rc = -ENOMEM;

	*out = INFINITY;
	if (!arg || !perm || !w || !lambda || !g)
		goto err_free;
	for (uint32_t it = 0; it < GB_LAMBDA_STEPS; it++) {
		double val = 0, gmax = 0;

		triple_weights(c, T, lambda, w, arg);
		rc = gb_assign_max(w, E, 1, perm, &val);
		if (rc)
			goto err_free;
		val /= 2;
		for (uint32_t r = 0; r < E; r++) {
			val += lambda[r] * c->W[r];
			g[r] = c->W[r];
		}
		*out = fmin(*out, val);
		/* d/d lambda_r: W_r minus what the chosen edges credit r with */
		for (uint32_t i = 0; i < E; i++) {
			uint32_t r = arg[(size_t)i * E + perm[i]];

			if (r < E)
				g[r] -= cover2(c, T, r, i, perm[i]) / 2;
		}
		for (uint32_t r = 0; r < E; r++)
			gmax = fmax(gmax, fabs(g[r]));
		if (gmax == 0)
			break;
		for (uint32_t r = 0; r < E; r++)
			lambda[r] = fmin(1, fmax(0, lambda[r] - 0.5 / (1 + it / 4.0) * g[r] / gmax));
	}
	rc = 0;
err_free:
	free(g);
	free(lambda);
	free(w);
	free(perm);
	free(arg);
	return rc;
}

/* An expert's c copies: at most its tokens, its co-counts met, c x cov. */
static double copies_gain(double W, double met, double cov, uint32_t c)
{
	double g = fmin(W, met);

	return isinf(cov) ? g : fmin(g, c * cov);
}

/*
 * The copies' savings; with T (2 others beside each copy) an expert's c
 * copies also gain at most c x the most tokens any 2 others cover with it
 * (coverage is subadditive).
 */
static int replica_term(const struct counts *c, const struct gb_place *p, const float *T,
			double *out)
{
	uint32_t E = c->E, meet = p->group + p->reps - 1;
	double *pre = calloc((size_t)E * E, sizeof(double)), *row = malloc(E * sizeof(double));
	double *cov = calloc(E, sizeof(double));
	uint32_t *cp = calloc(E, sizeof(uint32_t));
	double total = 0;
	int rc = -ENOMEM;

	if (!pre || !row || !cov || !cp)
		goto err_free;
	for (uint32_t e = 0; e < E; e++) {
		cov[e] = T && meet == 2 ? 0 : INFINITY;
		for (uint32_t x = 0; T && meet == 2 && x < E; x++)
			for (uint32_t y = x + 1; y < E; y++)
				if (x != e && y != e)
					cov[e] = fmax(cov[e], cover2(c, T, e, x, y));
	}
	/* pre[e][i]: the i largest co-counts of e, i = 0 .. E-1 */
	for (uint32_t e = 0; e < E; e++) {
		partners(c, e, row);
		for (uint32_t i = 1; i < E; i++)
			pre[(size_t)e * E + i] = pre[(size_t)e * E + i - 1] + row[i - 1];
	}
	for (uint32_t slot = 0; slot < p->reps * p->N; slot++) {
		double best = 0;
		uint32_t at = E;

		for (uint32_t e = 0; e < E; e++) {
			uint32_t i0 = cp[e] * meet, i1 = (cp[e] + 1) * meet;
			double g;

			if (cp[e] >= p->N)
				continue;
			i0 = i0 < E - 1 ? i0 : E - 1;
			i1 = i1 < E - 1 ? i1 : E - 1;
			g = copies_gain(c->W[e], pre[(size_t)e * E + i1], cov[e], cp[e] + 1) -
			    copies_gain(c->W[e], pre[(size_t)e * E + i0], cov[e], cp[e]);
			if (g > best) {
				best = g;
				at = e;
			}
		}
		if (at == E)
			break;
		cp[at]++;
		total += best;
	}
	*out = total;
	rc = 0;
err_free:
	free(cp);
	free(cov);
	free(row);
	free(pre);
	return rc;
}

/* Per source: the most of its tokens any 3 experts touch (bitsets over its tokens). */
static int source_exact3(const uint16_t *ids, uint32_t n_tok, uint32_t k,
			 const struct gb_place *p, double *out)
{
	uint32_t E = p->E, N = p->N, per = n_tok / N + 1, words = (per + 63) / 64;
	uint64_t *bs = malloc((size_t)E * words * sizeof(uint64_t));
	double total = 0;

	if (!bs)
		return -ENOMEM;
	for (uint32_t s = 0; s < N; s++) {
		uint32_t best = 0;

		memset(bs, 0, (size_t)E * words * sizeof(uint64_t));
		for (uint32_t t = s, i = 0; t < n_tok; t += N, i++)
			for (uint32_t j = 0; j < k; j++)
				bs[(size_t)ids[(size_t)t * k + j] * words + i / 64] |= 1ull
										 << (i % 64);
		for (uint32_t a = 0; a < E; a++)
			for (uint32_t b = a + 1; b < E; b++)
				for (uint32_t x = b + 1; x < E; x++) {
					uint32_t n = 0;

					for (uint32_t w = 0; w < words; w++)
						n += (uint32_t)__builtin_popcountll(
							bs[(size_t)a * words + w] |
							bs[(size_t)b * words + w] |
							bs[(size_t)x * words + w]);
					best = n > best ? n : best;
				}
		total += best;
	}
	free(bs);
	*out = total;
	return 0;
}

static int source_term(const uint16_t *ids, uint32_t n_tok, uint32_t k, const struct counts *c,
		       const struct gb_place *p, double *out)
{
	uint32_t E = c->E, N = c->N, slots = p->group + p->reps;
	double *w = malloc((size_t)E * E * sizeof(double)), *row = malloc(E * sizeof(double));
	double dec = 0, cpl = 0;
	int rc = -ENOMEM;

	if (!w || !row)
		goto err_free;
	/* decoupled: each source its own best slots experts */
	if (slots == 3 && E >= 3) {
		rc = source_exact3(ids, n_tok, k, p, &dec);
		if (rc)
			goto err_free;
	} else {
		for (uint32_t s = 0; s < N; s++) {
			memcpy(row, c->ns + (size_t)s * E, E * sizeof(double));
			dec += fmin(c->n_src[s], top_sum(row, E, slots));
		}
	}
	/* coupled: primaries assigned to sources (group columns each) + best replicas */
	for (uint32_t e = 0; e < E; e++)
		for (uint32_t col = 0; col < E; col++)
			w[(size_t)e * E + col] = c->ns[(size_t)(col / p->group) * E + e];
	rc = gb_assign_max(w, E, 0, NULL, &cpl);
	if (rc)
		goto err_free;
	for (uint32_t s = 0; s < N; s++) {
		memcpy(row, c->ns + (size_t)s * E, E * sizeof(double));
		cpl += top_sum(row, E, p->reps);
	}
	*out = fmin(dec, cpl);
	rc = 0;
err_free:
	free(row);
	free(w);
	return rc;
}

int gb_layer_bound(const uint16_t *ids, uint32_t n_tok, uint32_t k, const struct gb_place *p,
		   struct gb_terms *out)
{
	struct counts c = { 0 };
	float *T = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!p->N || !p->group || p->E != p->N * p->group || k > 64)
		return -EINVAL;
	rc = count(ids, n_tok, k, p, &c);
	if (!rc)
		rc = group_term(&c, p, &out->group);
	if (!rc && p->group == 2 && p->reps == 1 && p->E >= 3 && p->E <= GB_TRIPLE_MAX_E) {
		T = triple_counts(ids, n_tok, k, p->E);
		rc = T ? 0 : -ENOMEM;
	}
	if (!rc)
		rc = replica_term(&c, p, T, &out->replica);
	out->shared = out->group + out->replica;
	if (!rc && T) {
		double tri = INFINITY;

		rc = triple_term(&c, T, &tri);
		out->shared = fmin(out->shared, tri);
	}
	if (!rc)
		rc = source_term(ids, n_tok, k, &c, p, &out->source);
	if (!rc) {
		out->tokens = n_tok;
		out->pairs = c.pairs;
		out->floor = c.floor;
		out->rows_lb = fmax(c.floor, fmax(0, c.pairs - out->shared - out->source));
	}
	free(T);
	counts_free(&c);
	return rc;
}
