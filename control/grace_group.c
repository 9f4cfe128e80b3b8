// SPDX-License-Identifier: MIT
/*
 * Hierarchical grouping of one layer: nodes (fully non-uniform, capacity
 * bound only), then GPUs inside each node (controlled non-uniform, r at the
 * knee of U(r) against S(r)).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_gracefit.h"

#define R_GRID 17 /* r = 0, 1/16, ..., 1 */

struct node_part {
	uint32_t n;          /* experts on the node */
	uint32_t *members;   /* expert ids, ascending */
	double *sub;         /* n x n affinity */
	uint32_t *base;      /* spectral labels, before size repair */
};

static double intra_affinity(const double *A, uint32_t E, const uint16_t *rank_of)
{
	double s = 0;

	for (uint32_t i = 0; i < E; i++)
		for (uint32_t j = i + 1; j < E; j++)
			if (rank_of[i] == rank_of[j])
				s += A[(size_t)i * E + j];
	return s;
}

static void contiguous(uint32_t E, uint32_t N, uint16_t *primary)
{
	for (uint32_t e = 0; e < E; e++)
		primary[e] = (uint16_t)(((uint64_t)e * N) / E);
}

/* GPU-level labels of every node for one r, written as ranks into primary. */
static int place_gpus(const struct locus_gracefit_topo *t, uint32_t E, struct node_part *np,
		      double r, uint32_t *lab, uint16_t *primary, double *spread,
		      struct locus_error *err)
{
	uint32_t gpn = t->gpus_per_node, lo[LOCUS_GRACE_MAX_RANKS], hi[LOCUS_GRACE_MAX_RANKS];
	double s = 0;
	int rc;

	for (uint32_t nd = 0; nd < t->n_nodes; nd++) {
		struct node_part *p = &np[nd];
		double m = (double)p->n / gpn;
		uint32_t delta = (uint32_t)floor(m * r), size[LOCUS_GRACE_MAX_RANKS] = { 0 };
		uint32_t fl = (uint32_t)floor(m), cl = (uint32_t)ceil(m);

		for (uint32_t g = 0; g < gpn; g++) {
			lo[g] = fl > delta ? fl - delta : 0;
			hi[g] = LOCUS_MIN(t->capacity, cl + delta);
		}
		if (p->n)
			memcpy(lab, p->base, p->n * sizeof(uint32_t));
		rc = locus_gracefit_repair_sizes(p->sub, p->n, gpn, lo, hi, lab, err);
		if (rc)
			return rc;
		for (uint32_t i = 0; i < p->n; i++) {
			primary[p->members[i]] = (uint16_t)(nd * gpn + lab[i]);
			size[lab[i]]++;
		}
		for (uint32_t g = 0; g < gpn; g++)
			s += fabs((double)size[g] - m);
	}
	*spread = s / E;
	return 0;
}

static void free_parts(struct node_part *np, uint32_t n)
{
	for (uint32_t i = 0; np && i < n; i++) {
		free(np[i].members);
		free(np[i].sub);
		free(np[i].base);
	}
	free(np);
}

static int split_nodes(const struct locus_gracefit_topo *t, uint32_t E, const double *A,
		       uint64_t seed, struct node_part *np, struct locus_error *err)
{
	uint32_t nn = t->n_nodes, *lab, lo[LOCUS_GRACE_MAX_RANKS], hi[LOCUS_GRACE_MAX_RANKS];
	int rc;

	lab = calloc(E, sizeof(*lab));
	if (!lab)
		return locus_error_set(err, ENOMEM, "grouping: out of memory");
	rc = locus_gracefit_spectral(A, E, nn, nn * t->gpus_per_node, seed, lab, err);
	if (rc)
		goto out;
	for (uint32_t nd = 0; nd < nn; nd++) {
		lo[nd] = 0;
		hi[nd] = t->gpus_per_node * t->capacity;
	}
	rc = locus_gracefit_repair_sizes(A, E, nn, lo, hi, lab, err);
	if (rc)
		goto out;
	for (uint32_t e = 0; e < E; e++)
		np[lab[e]].n++;
	for (uint32_t nd = 0; nd < nn; nd++) {
		struct node_part *p = &np[nd];
		uint32_t c = 0;

		p->members = calloc(p->n + 1, sizeof(uint32_t));
		p->sub = calloc((size_t)p->n * p->n + 1, sizeof(double));
		p->base = calloc(p->n + 1, sizeof(uint32_t));
		if (!p->members || !p->sub || !p->base) {
			rc = locus_error_set(err, ENOMEM, "grouping: out of memory");
			goto out;
		}
		for (uint32_t e = 0; e < E; e++)
			if (lab[e] == nd)
				p->members[c++] = e;
		for (uint32_t i = 0; i < p->n; i++)
			for (uint32_t j = 0; j < p->n; j++)
				p->sub[(size_t)i * p->n + j] =
					A[(size_t)p->members[i] * E + p->members[j]];
		if (p->n) {
			rc = locus_gracefit_spectral(p->sub, p->n, t->gpus_per_node,
						     t->gpus_per_node, seed + 1 + nd,
						     p->base, err);
			if (rc)
				goto out;
		}
	}
out:
	free(lab);
	return rc;
}

/*
 * The knee wants x ascending; S(r) usually grows with r but the greedy
 * repair does not promise it, so order the points by (S, r) first.
 */
static size_t knee_pick(const double *S, const double *U, uint32_t n)
{
	uint32_t idx[R_GRID];
	double xs[R_GRID], ys[R_GRID];

	for (uint32_t i = 0; i < n; i++)
		idx[i] = i;
	for (uint32_t i = 1; i < n; i++) {
		uint32_t v = idx[i], j = i;

		while (j > 0 && S[idx[j - 1]] > S[v]) {
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = v;
	}
	for (uint32_t i = 0; i < n; i++) {
		xs[i] = S[idx[i]];
		ys[i] = U[idx[i]];
	}
	return n ? idx[locus_gracefit_knee(xs, ys, n)] : 0;
}

int locus_gracefit_group_layer(const struct locus_gracefit_topo *t, uint32_t E, const double *A,
			       const struct locus_gracefit_opts *o, uint16_t *primary,
			       struct locus_gracefit_layer_info *info, struct locus_error *err)
{
	struct locus_gracefit_opts def = { .r = -1, .seed = 1 };
	uint32_t N, n_r, *lab = NULL;
	double rs[R_GRID], U[R_GRID], S[R_GRID], total = 0;
	uint16_t *cand = NULL;
	struct node_part *np = NULL;
	size_t pick;
	int rc = 0;

	if (!o)
		o = &def;
	if (!t || !primary || t->n_nodes == 0 || t->gpus_per_node == 0 || t->capacity == 0)
		return locus_error_set(err, EINVAL, "grouping: bad topology");
	N = t->n_nodes * t->gpus_per_node;
	if (N > LOCUS_GRACE_MAX_RANKS || (uint64_t)N * t->capacity < E)
		return locus_error_set(err, LOCUS_ERANGE, "%u GPUs x capacity %u cannot hold %u "
				       "experts", N, t->capacity, E);
	if (o->no_grouping || N == 1) {
		contiguous(E, N, primary);
		if (info)
			info->r = 0;
		return 0;
	}
	if (!A)
		return locus_error_set(err, EINVAL, "grouping needs a co-activation matrix");
	if (o->r > 1 || isnan(o->r))
		return locus_error_set(err, LOCUS_ERANGE, "non-uniformity r = %g not in [0, 1]",
				       o->r);
	np = calloc(t->n_nodes, sizeof(*np));
	lab = calloc(E, sizeof(*lab));
	cand = calloc((size_t)R_GRID * E, sizeof(*cand));
	if (!np || !lab || !cand) {
		rc = locus_error_set(err, ENOMEM, "grouping: out of memory");
		goto out;
	}
	rc = split_nodes(t, E, A, o->seed ? o->seed : 1, np, err);
	if (rc)
		goto out;
	for (uint32_t i = 0; i < E; i++)
		for (uint32_t j = i + 1; j < E; j++)
			total += A[(size_t)i * E + j];
	n_r = o->r >= 0 ? 1 : R_GRID;
	for (uint32_t i = 0; i < n_r; i++) {
		uint16_t *pr = cand + (size_t)i * E;

		rs[i] = o->r >= 0 ? o->r : (double)i / (R_GRID - 1);
		rc = place_gpus(t, E, np, rs[i], lab, pr, &S[i], err);
		if (rc)
			goto out;
		U[i] = total > 0 ? intra_affinity(A, E, pr) / total : 0;
	}
	pick = knee_pick(S, U, n_r);
	memcpy(primary, cand + pick * E, E * sizeof(uint16_t));
	if (info) {
		info->r = rs[pick];
		info->U = U[pick];
		info->S = S[pick];
		info->U_uniform = U[0];
	}
out:
	free(cand);
	free(lab);
	free_parts(np, t->n_nodes);
	return rc;
}
