// SPDX-License-Identifier: MIT
/*
 * Scoring kernels. One arithmetic (eldr_priv.h), three instruction sets,
 * chosen at run time; only the functions carry target attributes, so the
 * file builds without -march and runs on any x86-64.
 */
#include <math.h>
#include <immintrin.h>

#include "eldr_priv.h"

void eldr_kernel_scalar(const struct locus_eldr_router *r, const float *x, float *dots,
			float *norm2)
{
	const uint32_t nb = r->n_blocks;
	float acc[ELDR_GROUP][ELDR_LANES];

	for (unsigned i = 0; i < ELDR_LANES; i++)
		acc[0][i] = 0.0f;
	for (uint32_t b = 0; b < nb; b++) {
		for (unsigned i = 0; i < ELDR_LANES; i++) {
			float t = x[b * ELDR_LANES + i] * r->idf[b * ELDR_LANES + i];

			acc[0][i] = fmaf(t, t, acc[0][i]);
		}
	}
	*norm2 = eldr_reduce16(acc[0]);
	for (uint32_t g = 0; g < r->k_pad / ELDR_GROUP; g++) {
		const float *cw = r->cw + (size_t)g * nb * ELDR_GROUP * ELDR_LANES;

		for (unsigned c = 0; c < ELDR_GROUP; c++)
			for (unsigned i = 0; i < ELDR_LANES; i++)
				acc[c][i] = 0.0f;
		for (uint32_t b = 0; b < nb; b++, cw += ELDR_GROUP * ELDR_LANES)
			for (unsigned c = 0; c < ELDR_GROUP; c++)
				for (unsigned i = 0; i < ELDR_LANES; i++)
					acc[c][i] = fmaf(x[b * ELDR_LANES + i],
							 cw[c * ELDR_LANES + i], acc[c][i]);
		for (unsigned c = 0; c < ELDR_GROUP; c++)
			dots[g * ELDR_GROUP + c] = eldr_reduce16(acc[c]);
	}
}

__attribute__((target("avx2,fma")))
static inline float reduce_avx2(__m256 lo, __m256 hi)
{
	__m256 v = _mm256_add_ps(lo, hi);                      /* i += i + 8 */
	__m128 a = _mm_add_ps(_mm256_castps256_ps128(v),
			      _mm256_extractf128_ps(v, 1));   /* i += i + 4 */
	__m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));        /* i += i + 2 */
	__m128 c = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));    /* 0 += 1 */

	return _mm_cvtss_f32(c);
}

__attribute__((target("avx2,fma")))
void eldr_kernel_avx2(const struct locus_eldr_router *r, const float *x, float *dots,
		      float *norm2)
{
	const uint32_t nb = r->n_blocks;
	__m256 nlo = _mm256_setzero_ps(), nhi = _mm256_setzero_ps();

	for (uint32_t b = 0; b < nb; b++) {
		__m256 tl = _mm256_mul_ps(_mm256_load_ps(x + b * 16), _mm256_load_ps(r->idf + b * 16));
		__m256 th = _mm256_mul_ps(_mm256_load_ps(x + b * 16 + 8),
					  _mm256_load_ps(r->idf + b * 16 + 8));

		nlo = _mm256_fmadd_ps(tl, tl, nlo);
		nhi = _mm256_fmadd_ps(th, th, nhi);
	}
	*norm2 = reduce_avx2(nlo, nhi);
	for (uint32_t g = 0; g < r->k_pad / ELDR_GROUP; g++) {
		const float *cw = r->cw + (size_t)g * nb * ELDR_GROUP * ELDR_LANES;
		__m256 l0 = _mm256_setzero_ps(), h0 = _mm256_setzero_ps();
		__m256 l1 = _mm256_setzero_ps(), h1 = _mm256_setzero_ps();
		__m256 l2 = _mm256_setzero_ps(), h2 = _mm256_setzero_ps();
		__m256 l3 = _mm256_setzero_ps(), h3 = _mm256_setzero_ps();

		for (uint32_t b = 0; b < nb; b++, cw += ELDR_GROUP * ELDR_LANES) {
			__m256 xl = _mm256_load_ps(x + b * 16);
			__m256 xh = _mm256_load_ps(x + b * 16 + 8);

			l0 = _mm256_fmadd_ps(xl, _mm256_load_ps(cw + 0), l0);
			h0 = _mm256_fmadd_ps(xh, _mm256_load_ps(cw + 8), h0);
			l1 = _mm256_fmadd_ps(xl, _mm256_load_ps(cw + 16), l1);
			h1 = _mm256_fmadd_ps(xh, _mm256_load_ps(cw + 24), h1);
			l2 = _mm256_fmadd_ps(xl, _mm256_load_ps(cw + 32), l2);
			h2 = _mm256_fmadd_ps(xh, _mm256_load_ps(cw + 40), h2);
			l3 = _mm256_fmadd_ps(xl, _mm256_load_ps(cw + 48), l3);
			h3 = _mm256_fmadd_ps(xh, _mm256_load_ps(cw + 56), h3);
		}
		dots[g * 4 + 0] = reduce_avx2(l0, h0);
		dots[g * 4 + 1] = reduce_avx2(l1, h1);
		dots[g * 4 + 2] = reduce_avx2(l2, h2);
		dots[g * 4 + 3] = reduce_avx2(l3, h3);
	}
}

__attribute__((target("avx512f,avx2,fma")))
static inline float reduce_avx512(__m512 v)
{
	__m256 lo = _mm512_castps512_ps256(v);
	__m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));

	return reduce_avx2(lo, hi);
}

__attribute__((target("avx512f,avx2,fma")))
void eldr_kernel_avx512(const struct locus_eldr_router *r, const float *x, float *dots,
			float *norm2)
{
	const uint32_t nb = r->n_blocks;
	__m512 n = _mm512_setzero_ps();

	for (uint32_t b = 0; b < nb; b++) {
		__m512 t = _mm512_mul_ps(_mm512_load_ps(x + b * 16), _mm512_load_ps(r->idf + b * 16));

		n = _mm512_fmadd_ps(t, t, n);
	}
	*norm2 = reduce_avx512(n);
	for (uint32_t g = 0; g < r->k_pad / ELDR_GROUP; g++) {
		const float *cw = r->cw + (size_t)g * nb * ELDR_GROUP * ELDR_LANES;
		__m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
		__m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();

		for (uint32_t b = 0; b < nb; b++, cw += ELDR_GROUP * ELDR_LANES) {
			__m512 xv = _mm512_load_ps(x + b * 16);

			a0 = _mm512_fmadd_ps(xv, _mm512_load_ps(cw + 0), a0);
			a1 = _mm512_fmadd_ps(xv, _mm512_load_ps(cw + 16), a1);
			a2 = _mm512_fmadd_ps(xv, _mm512_load_ps(cw + 32), a2);
			a3 = _mm512_fmadd_ps(xv, _mm512_load_ps(cw + 48), a3);
		}
		dots[g * 4 + 0] = reduce_avx512(a0);
		dots[g * 4 + 1] = reduce_avx512(a1);
		dots[g * 4 + 2] = reduce_avx512(a2);
		dots[g * 4 + 3] = reduce_avx512(a3);
	}
}
