// SPDX-License-Identifier: MIT
/*
 * Greedy forward layer-mask selection on the signature quality score
 * (definition in locus_eldrfit.h). Per-layer Gram matrices of the score's
 * prefill vectors (counts * idf, not normalised) make the cosine under any
 * mask a sum of layer terms: sim_M(i, j) = sum_{l in M} G_l(i, j) /
 * sqrt(sum_{l in M} G_l(i, i) * sum_{l in M} G_l(j, j)).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eldr_fit_priv.h"

#define MAX_NN 64

struct mask_ctx {
	uint32_t S, L, nn;
	float *G;       /* [L][S][S] per-layer Gram */
	float *T;       /* [S][S] target cosine */
	float *GM;      /* [S][S] Gram of the current mask */
	double *nM;     /* [S] squared norms under the current mask */
	float *inv;     /* [S] scratch */
};

/*
 * The clones run the same operations in the same order (separate multiply
 * and add: neither target has FMA, so nothing is contracted): bit-identical
 * results on every CPU, only wider registers.
 */
__attribute__((target_clones("avx2", "default")))
static float dot8(const float *a, const float *b, uint32_t n)
{
	float s[8] = { 0 };
	uint32_t i = 0;

	for (; i + 8 <= n; i += 8)
		for (unsigned l = 0; l < 8; l++)
			s[l] += a[i + l] * b[i + l];
	for (unsigned l = 0; i < n; i++, l++)
		s[l] += a[i] * b[i];
	return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/*
 * Score of (current mask + layer add), add == UINT32_MAX for the current
 * mask alone: mean over i of mean target cosine to its nn nearest.
 */
static double score_with(struct mask_ctx *m, uint32_t add)
{
	const uint32_t S = m->S;
	const float *Gl = add == UINT32_MAX ? NULL : m->G + (size_t)add * S * S;
	double total = 0;

	for (uint32_t j = 0; j < S; j++) {
		double n2 = m->nM[j] + (Gl ? Gl[(size_t)j * S + j] : 0);

		m->inv[j] = n2 > 0 ? (float)(1.0 / sqrt(n2)) : 0.0f;
	}
	for (uint32_t i = 0; i < S; i++) {
		const float *gm = m->GM + (size_t)i * S;
		const float *gl = Gl ? Gl + (size_t)i * S : NULL;
		float best[MAX_NN];
		uint32_t who[MAX_NN], have = 0;
		double row = 0;

		for (uint32_t j = 0; j < S; j++) {
			float s;
			uint32_t p;

			if (j == i)
				continue;
			s = (gm[j] + (gl ? gl[j] : 0.0f)) * m->inv[j];
			if (have == m->nn && s <= best[have - 1])
				continue;
			p = have < m->nn ? have++ : have - 1;
			while (p > 0 && best[p - 1] < s) {
				best[p] = best[p - 1];
				who[p] = who[p - 1];
				p--;
			}
			best[p] = s;
			who[p] = j;
		}
		for (uint32_t q = 0; q < have; q++)
			row += m->T[(size_t)i * S + who[q]];
		total += have ? row / have : 0;
	}
	return total / S;
}

static void add_layer(struct mask_ctx *m, uint32_t l)
{
	const size_t SS = (size_t)m->S * m->S;
	const float *Gl = m->G + (size_t)l * SS;

	for (size_t i = 0; i < SS; i++)
		m->GM[i] += Gl[i];
	for (uint32_t j = 0; j < m->S; j++)
		m->nM[j] += Gl[(size_t)j * m->S + j];
}

int eldr_select_mask(const uint16_t *pre, const uint16_t *target, uint32_t S, uint16_t L,
		     uint16_t E, const float *idf, uint32_t nn, uint8_t *mask, float *mask_score,
		     float *full_score, locus_eldrfit_progress_fn progress, void *progress_arg)
{
	const size_t LE = (size_t)L * E, SS = (size_t)S * S;
	struct mask_ctx m;
	float *a = NULL, *y = NULL;
	double cur = 0, full;
	uint32_t steps = 0;
	int ret = -ENOMEM;

	if (S < 2 || !nn)
		return -EINVAL;
	memset(&m, 0, sizeof(m));
	m.S = S;
	m.L = L;
	m.nn = nn < S - 1 ? nn : S - 1;
	if (m.nn > MAX_NN)
		m.nn = MAX_NN;
	m.G = malloc(sizeof(float) * SS * L);
	m.T = malloc(sizeof(float) * SS);
	m.GM = calloc(SS, sizeof(float));
	m.nM = calloc(S, sizeof(double));
	m.inv = malloc(sizeof(float) * S);
	a = malloc(sizeof(float) * S * LE);
	y = malloc(sizeof(float) * S * LE);
	if (!m.G || !m.T || !m.GM || !m.nM || !m.inv || !a || !y)
		goto out;
	/* prefill terms (counts * idf) and unit target vectors (raw counts) */
	for (uint32_t i = 0; i < S; i++) {
		double n2 = 0;

		for (size_t f = 0; f < LE; f++) {
			a[(size_t)i * LE + f] = (float)pre[(size_t)i * LE + f] * idf[f];
			y[(size_t)i * LE + f] = (float)target[(size_t)i * LE + f];
			n2 += (double)y[(size_t)i * LE + f] * y[(size_t)i * LE + f];
		}
		n2 = n2 > 0 ? 1.0 / sqrt(n2) : 0;
		for (size_t f = 0; f < LE; f++)
			y[(size_t)i * LE + f] = (float)(y[(size_t)i * LE + f] * n2);
	}
	for (uint32_t i = 0; i < S; i++) {
		for (uint32_t j = i; j < S; j++) {
			float t = dot8(y + (size_t)i * LE, y + (size_t)j * LE, (uint32_t)LE);

			m.T[(size_t)i * S + j] = m.T[(size_t)j * S + i] = t;
		}
	}
	for (uint32_t l = 0; l < L; l++) {
		float *Gl = m.G + (size_t)l * SS;

		for (uint32_t i = 0; i < S; i++) {
			const float *ai = a + (size_t)i * LE + (size_t)l * E;

			for (uint32_t j = i; j < S; j++) {
				float g = dot8(ai, a + (size_t)j * LE + (size_t)l * E, E);

				Gl[(size_t)i * S + j] = Gl[(size_t)j * S + i] = g;
			}
		}
		if (progress)
			progress(progress_arg, "gram", l + 1, L);
	}
	/* every layer */
	for (uint32_t l = 0; l < L; l++)
		add_layer(&m, l);
	full = score_with(&m, UINT32_MAX);
	memset(m.GM, 0, sizeof(float) * SS);
	memset(m.nM, 0, sizeof(double) * S);
	memset(mask, 0, L);
	/* greedy forward selection */
	for (;;) {
		double best = -INFINITY;
		uint32_t pick = UINT32_MAX;

		for (uint32_t l = 0; l < L; l++) {
			double s;

			if (mask[l])
				continue;
			s = score_with(&m, l);
			if (s > best) {
				best = s;
				pick = l;
			}
		}
		if (pick == UINT32_MAX || (steps && best <= cur + 1e-4))
			break;
		mask[pick] = 1;
		add_layer(&m, pick);
		cur = best;
		steps++;
		if (progress)
			progress(progress_arg, "mask", steps, L);
	}
	if (full >= cur) {
		memset(mask, 1, L);
		cur = full;
	}
	*mask_score = (float)cur;
	*full_score = (float)full;
	ret = 0;
out:
	free(y);
	free(a);
	free(m.inv);
	free(m.nM);
	free(m.GM);
	free(m.T);
	free(m.G);
	return ret;
}
