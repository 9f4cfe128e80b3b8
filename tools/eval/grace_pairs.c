// SPDX-License-Identifier: MIT
/* Pairing placements for grace_bound_figures (grace_pairs.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grace_pairs.h"

void gp_counts(const uint16_t *ids, uint32_t n_tok, uint32_t k, uint32_t E, double *A,
	       double *W)
{
	memset(A, 0, (size_t)E * E * sizeof(double));
	memset(W, 0, E * sizeof(double));
	for (uint32_t t = 0; t < n_tok; t++) {
		const uint16_t *x = ids + (size_t)t * k;

		for (uint32_t i = 0; i < k; i++) {
			W[x[i]] += 1;
			for (uint32_t j = 0; j < k; j++)
				if (x[j] != x[i])
					A[(size_t)x[i] * E + x[j]] += 1;
		}
	}
}

static double pw(const double *A, uint32_t E, uint32_t a, uint32_t b)
{
	return A[(size_t)a * E + b];
}

/* The load a primary keeps when its expert has ncp copies besides. */
static double keeps(const double *W, const uint32_t *ncp, uint32_t e)
{
	return W[e] / (ncp[e] + 1);
}

/* Pairs (a,b) and (c,d) both within the cap. */
static int fits(const double *W, const uint32_t *ncp, double cap, uint32_t a, uint32_t b,
		uint32_t c, uint32_t d)
{
	return keeps(W, ncp, a) + keeps(W, ncp, b) <= cap &&
	       keeps(W, ncp, c) + keeps(W, ncp, d) <= cap;
}

int gp_fit(const double *A, const double *W, uint32_t E, uint32_t N, uint32_t hot, double tol,
	   struct gp_place *out)
{
	uint32_t *mate = malloc(E * sizeof(uint32_t)), n_pair = 0, *ncp = calloc(E, sizeof(uint32_t));
	uint32_t *rank = calloc(E, sizeof(uint32_t));
	double *load = calloc(N, sizeof(double)), cap = 0;
	int better = 1;

	out->E = E;
	out->N = N;
	out->home = malloc(E * sizeof(uint16_t));
	out->copy = malloc(N * sizeof(uint16_t));
	if (!mate || !ncp || !rank || !load || !out->home || !out->copy || E != 2 * N) {
		free(mate);
		free(ncp);
		free(rank);
		free(load);
		gp_free(out);
		return E != 2 * N ? -EINVAL : -ENOMEM;
	}
	/* rank[e]: experts heavier than e; the hot ones share the N copies by load per copy */
	for (uint32_t e = 0; e < E; e++)
		for (uint32_t x = 0; x < E; x++)
			rank[e] += W[x] > W[e] || (W[x] == W[e] && x < e);
	for (uint32_t s = 0; s < N; s++) {
		uint32_t be = E;

		for (uint32_t e = 0; e < E; e++)
			if (rank[e] < hot && ncp[e] + 1 < N &&
			    (be == E || W[e] / (ncp[e] + 1) > W[be] / (ncp[be] + 1)))
				be = e;
		if (be == E)
			break;
		ncp[be]++;
	}
	for (uint32_t e = 0; e < E; e++) {
		mate[e] = E;
		cap += W[e] / N;
	}
	cap = tol >= 0 ? cap * (1 + tol) : INFINITY;
	/* greedy: the heaviest edge between unpaired experts within the cap, E/2 times */
	for (uint32_t step = 0; step < N; step++) {
		uint32_t ba = E, bb = E;
		double best = -1;

		for (uint32_t a = 0; a < E; a++)
			for (uint32_t b = a + 1; b < E && mate[a] == E; b++)
				if (mate[b] == E && pw(A, E, a, b) > best &&
				    keeps(W, ncp, a) + keeps(W, ncp, b) <= cap) {
					best = pw(A, E, a, b);
					ba = a;
					bb = b;
				}
		if (ba == E) {
			/* nothing fits: the heaviest unpaired with the lightest */
			for (uint32_t e = 0; e < E; e++)
				if (mate[e] == E && (ba == E || keeps(W, ncp, e) > keeps(W, ncp, ba)))
					ba = e;
			for (uint32_t e = 0; e < E; e++)
				if (mate[e] == E && e != ba &&
				    (bb == E || keeps(W, ncp, e) < keeps(W, ncp, bb)))
					bb = e;
		}
		mate[ba] = bb;
		mate[bb] = ba;
	}
	/* swaps: (a,b)(c,d) -> (a,c)(b,d) or (a,d)(b,c) while the sum grows */
	while (better) {
		better = 0;
		for (uint32_t a = 0; a < E; a++)
			for (uint32_t c = 0; c < E; c++) {
				uint32_t b = mate[a], d = mate[c];
				double now, s1, s2;

				if (c == a || c == b)
					continue;
				now = pw(A, E, a, b) + pw(A, E, c, d);
				s1 = fits(W, ncp, cap, a, c, b, d) ? pw(A, E, a, c) + pw(A, E, b, d) : -1;
				s2 = fits(W, ncp, cap, a, d, b, c) ? pw(A, E, a, d) + pw(A, E, b, c) : -1;
				if (s1 > now + 1e-9 && s1 >= s2) {
					mate[a] = c;
					mate[c] = a;
					mate[b] = d;
					mate[d] = b;
					better = 1;
				} else if (s2 > now + 1e-9) {
					mate[a] = d;
					mate[d] = a;
					mate[b] = c;
					mate[c] = b;
					better = 1;
				}
			}
	}
	for (uint32_t e = 0; e < E; e++)
		if (mate[e] > e) {
			out->home[e] = out->home[mate[e]] = (uint16_t)n_pair;
			load[n_pair] = keeps(W, ncp, e) + keeps(W, ncp, mate[e]);
			n_pair++;
		}
	for (uint32_t g = 0; g < N; g++)
		out->copy[g] = (uint16_t)E;
	/* copies, heaviest expert first, each on the least-loaded GPU with a free slot */
	for (uint32_t r = 0; r < E; r++)
		for (uint32_t e = 0; e < E; e++) {
			if (rank[e] != r)
				continue;
			for (uint32_t i = 0; i < ncp[e]; i++) {
				uint32_t bg = N;

				for (uint32_t g = 0; g < N; g++) {
					int has = out->home[e] == g || out->copy[g] == e;

					if (out->copy[g] == E && !has && (bg == N || load[g] < load[bg]))
						bg = g;
				}
				if (bg == N)
					break;
				out->copy[bg] = (uint16_t)e;
				load[bg] += keeps(W, ncp, e);
			}
		}
	free(load);
	free(rank);
	free(ncp);
	free(mate);
	return 0;
}

void gp_free(struct gp_place *p)
{
	free(p->home);
	free(p->copy);
	p->home = p->copy = NULL;
}

double gp_score(const struct gp_place *p, const uint16_t *ids, uint32_t n_tok, uint32_t k,
		double *load)
{
	uint32_t E = p->E, N = p->N;
	uint32_t *rr = calloc(E, sizeof(uint32_t));
	double rows = 0;

	memset(load, 0, N * sizeof(double));
	for (uint32_t t = 0; t < n_tok; t++) {
		const uint16_t *x = ids + (size_t)t * k;
		uint32_t src = t % N, dst[64];
		uint64_t used = 1ull << (src % 64);   /* N <= 64 */
		int repl[64];

		/* homes of experts without a copy are forced; copies looked up after */
		for (uint32_t j = 0; j < k; j++) {
			repl[j] = 0;
			for (uint32_t g = 0; g < N; g++)
				repl[j] |= p->copy[g] == x[j];
			dst[j] = p->home[x[j]];
			if (!repl[j])
				used |= 1ull << dst[j];
		}
		for (uint32_t j = 0; j < k; j++) {
			uint32_t pick = N;

			if (!repl[j])
				continue;
			for (uint32_t g = 0; g < N && pick == N; g++)
				if ((used >> g & 1) && (p->home[x[j]] == g || p->copy[g] == x[j]))
					pick = g;
			if (pick == N) {
				/* none used holds it: its copies in turn (spread the load) */
				uint32_t n = 0, want;

				for (uint32_t g = 0; g < N; g++)
					n += p->home[x[j]] == g || p->copy[g] == x[j];
				want = rr[x[j]]++ % n;
				for (uint32_t g = 0; g < N && pick == N; g++)
					if ((p->home[x[j]] == g || p->copy[g] == x[j]) && !want--)
						pick = g;
			}
			dst[j] = pick;
			used |= 1ull << pick;
		}
		for (uint32_t j = 0; j < k; j++)
			load[dst[j]] += 1;
		for (uint32_t g = 0; g < N; g++)
			rows += (used >> g & 1) && g != src;
	}
	free(rr);
	return rows;
}
