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
#include "locus_common.h"

#define MAX_NN 64

struct mask_ctx {
	uint32_t S, L, nn;
	float *G;       /* [L][S][S] per-layer Gram */
	float *T;       /* [S][S] target cosine */
	float *GM;      /* [S][S] Gram of the current mask */
	double *nM;     /* [S] squared norms under the current mask */
	float *inv;     /* [S] scratch */
};

typedef float v8f __attribute__((vector_size(32)));

/* Macros, not functions: a 32-byte vector passed by value has two ABIs. */
#define LD8(dst, p) memcpy(&(dst), (p), sizeof(v8f))
#define HSUM8(v) ((((v)[0] + (v)[4]) + ((v)[2] + (v)[6])) + \
		  (((v)[1] + (v)[5]) + ((v)[3] + (v)[7])))

/*
 * G[i][j] += sum over f in [off, off + len) of A[i][f] * A[j][f] for i, j < n
 * (rows of A padded with zero rows up to a multiple of 4; len % 8 == 0; row
 * stride ld floats; G row stride n). Blocks of 2 x 4 dot products share
 * their loads. The clones run the same operations in the same order with
 * separate multiply and add (no FMA in either target, contraction off):
 * bit-identical results on every CPU.
 */
LOCUS_FIT_KERNEL
static void gram_acc(const float *A, uint32_t n, size_t ld, size_t off, size_t len, float *G)
{
	LOCUS_FIT_NO_CONTRACT
	for (uint32_t i0 = 0; i0 < n; i0 += 2) {
		for (uint32_t j0 = i0 & ~3u; j0 < n; j0 += 4) {
			const float *a0 = A + (size_t)i0 * ld + off, *a1 = a0 + ld;
			const float *b0 = A + (size_t)j0 * ld + off;
			v8f acc[2][4] = { { { 0 } } };

			for (size_t f = 0; f < len; f += 8) {
				v8f x0, x1;

				LD8(x0, a0 + f);
				LD8(x1, a1 + f);
				for (int jj = 0; jj < 4; jj++) {
					v8f y;

					LD8(y, b0 + jj * ld + f);
					acc[0][jj] += x0 * y;
					acc[1][jj] += x1 * y;
				}
			}
			for (uint32_t ii = 0; ii < 2 && i0 + ii < n; ii++)
				for (uint32_t jj = 0; jj < 4 && j0 + jj < n; jj++)
					G[(size_t)(i0 + ii) * n + j0 + jj] += HSUM8(acc[ii][jj]);
		}
	}
	/* blocks covered j >= i (rounded down to 4): mirror the upper triangle */
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = i + 1; j < n; j++)
			G[(size_t)j * n + i] = G[(size_t)i * n + j];
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
	const size_t Ep = LOCUS_ALIGN_UP((size_t)E, 8), LEp = LOCUS_ALIGN_UP(LE, 8);
	const uint32_t Sp = LOCUS_ALIGN_UP(S, 4u);
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
	m.G = calloc(SS * L, sizeof(float));
	m.T = calloc(SS, sizeof(float));
	m.GM = calloc(SS, sizeof(float));
	m.nM = calloc(S, sizeof(double));
	m.inv = malloc(sizeof(float) * S);
	/* rows padded: S to a multiple of 4 (zero rows), lengths to multiples of 8 */
	a = calloc((size_t)Sp * L * Ep, sizeof(float));  /* [L][Sp][Ep] counts * idf */
	y = calloc((size_t)Sp * LEp, sizeof(float));     /* [Sp][LEp] unit targets */
	if (!m.G || !m.T || !m.GM || !m.nM || !m.inv || !a || !y)
		goto out;
	for (uint32_t i = 0; i < S; i++) {
		float *yi = y + (size_t)i * LEp;
		double n2 = 0;

		for (size_t f = 0; f < LE; f++) {
			a[((size_t)(f / E) * Sp + i) * Ep + f % E] = (float)pre[(size_t)i * LE + f] * idf[f];
			yi[f] = (float)target[(size_t)i * LE + f];
			n2 += (double)yi[f] * yi[f];
		}
		n2 = n2 > 0 ? 1.0 / sqrt(n2) : 0;
		for (size_t f = 0; f < LE; f++)
			yi[f] = (float)(yi[f] * n2);
	}
	/* target cosines, in feature chunks that keep all rows in L2 */
	for (size_t off = 0; off < LEp; off += 256)
		gram_acc(y, S, LEp, off, LEp - off < 256 ? LEp - off : 256, m.T);
	for (uint32_t l = 0; l < L; l++) {
		gram_acc(a + (size_t)l * Sp * Ep, S, Ep, 0, Ep, m.G + (size_t)l * SS);
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
	if (progress) /* complete the bar: the search stopped after `steps` layers */
		progress(progress_arg, "mask", steps, steps);
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
