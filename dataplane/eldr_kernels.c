// SPDX-License-Identifier: MIT
/*
 * The float scoring kernels: path LOCUS_ELDR_PATH_F32, the float
 * reference router of tests and benchmarks (the routing paths are
 * eldr_qkernels.c's). One arithmetic (eldr_priv.h),
 * three instruction sets, the widest the CPU runs; only the functions
 * carry target attributes, so the file builds without -march and runs on
 * any x86-64.
 */
#include <math.h>
#include <immintrin.h>

#include "eldr_priv.h"

float eldr_norm_scalar(const struct locus_eldr_router *r, const float *x)
{
	float acc[ELDR_LANES];

	for (unsigned i = 0; i < ELDR_LANES; i++)
		acc[i] = 0.0f;
	for (uint32_t b = 0; b < r->n_blocks; b++) {
		for (unsigned i = 0; i < ELDR_LANES; i++) {
			float t = x[b * ELDR_LANES + i] * r->idf[b * ELDR_LANES + i];

			acc[i] = fmaf(t, t, acc[i]);
		}
	}
	return eldr_reduce16(acc);
}

void eldr_dots_scalar(const struct locus_eldr_router *r, const float *x, float *dots)
{
	const uint32_t nb = r->n_blocks;
	float acc[ELDR_GROUP][ELDR_LANES];

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
float eldr_norm_avx2(const struct locus_eldr_router *r, const float *x)
{
	__m256 nlo = _mm256_setzero_ps(), nhi = _mm256_setzero_ps();

	for (uint32_t b = 0; b < r->n_blocks; b++) {
		__m256 tl = _mm256_mul_ps(_mm256_load_ps(x + b * 16),
					  _mm256_load_ps(r->idf + b * 16));
		__m256 th = _mm256_mul_ps(_mm256_load_ps(x + b * 16 + 8),
					  _mm256_load_ps(r->idf + b * 16 + 8));

		nlo = _mm256_fmadd_ps(tl, tl, nlo);
		nhi = _mm256_fmadd_ps(th, th, nhi);
	}
	return reduce_avx2(nlo, nhi);
}

__attribute__((target("avx2,fma")))
void eldr_dots_avx2(const struct locus_eldr_router *r, const float *x, float *dots)
{
	const uint32_t nb = r->n_blocks;

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
float eldr_norm_avx512(const struct locus_eldr_router *r, const float *x)
{
	__m512 n = _mm512_setzero_ps();

	for (uint32_t b = 0; b < r->n_blocks; b++) {
		__m512 t = _mm512_mul_ps(_mm512_load_ps(x + b * 16),
					 _mm512_load_ps(r->idf + b * 16));

		n = _mm512_fmadd_ps(t, t, n);
	}
	return reduce_avx512(n);
}

__attribute__((target("avx512f,avx2,fma")))
void eldr_dots_avx512(const struct locus_eldr_router *r, const float *x, float *dots)
{
	const uint32_t nb = r->n_blocks;

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

/*
 * Batched kernels: the same arithmetic per (signature, centroid, lane), so
 * scores are bit-identical to the single kernels, but every centroid block
 * is loaded once for several signatures (centroids stream from L2/L3; the
 * signatures' features stay in L1).
 */
__attribute__((target("avx512f,avx2,fma")))
void eldr_dots_avx512_x4(const struct locus_eldr_router *r, const float *const x[4],
			   float *dots[4])
{
	const uint32_t nb = r->n_blocks;

	for (uint32_t g = 0; g < r->k_pad / ELDR_GROUP; g++) {
		const float *cw = r->cw + (size_t)g * nb * ELDR_GROUP * ELDR_LANES;
		__m512 a[4][4];

		for (int s = 0; s < 4; s++)
			for (int c = 0; c < 4; c++)
				a[s][c] = _mm512_setzero_ps();
		for (uint32_t b = 0; b < nb; b++, cw += ELDR_GROUP * ELDR_LANES) {
			__m512 c0 = _mm512_load_ps(cw + 0), c1 = _mm512_load_ps(cw + 16);
			__m512 c2 = _mm512_load_ps(cw + 32), c3 = _mm512_load_ps(cw + 48);

			for (int s = 0; s < 4; s++) {
				__m512 xv = _mm512_load_ps(x[s] + b * 16);

				a[s][0] = _mm512_fmadd_ps(xv, c0, a[s][0]);
				a[s][1] = _mm512_fmadd_ps(xv, c1, a[s][1]);
				a[s][2] = _mm512_fmadd_ps(xv, c2, a[s][2]);
				a[s][3] = _mm512_fmadd_ps(xv, c3, a[s][3]);
			}
		}
		for (int s = 0; s < 4; s++)
			for (int c = 0; c < 4; c++)
				dots[s][g * 4 + c] = reduce_avx512(a[s][c]);
	}
}

__attribute__((target("avx2,fma")))
void eldr_dots_avx2_x2(const struct locus_eldr_router *r, const float *const x[2],
			 float *dots[2])
{
	const uint32_t nb = r->n_blocks;

	for (uint32_t g = 0; g < r->k_pad / ELDR_GROUP; g++) {
		for (uint32_t pair = 0; pair < 2; pair++) {
			const float *cw = r->cw + (size_t)g * nb * ELDR_GROUP * ELDR_LANES +
					  pair * 2 * ELDR_LANES;
			__m256 l00 = _mm256_setzero_ps(), h00 = _mm256_setzero_ps();
			__m256 l01 = _mm256_setzero_ps(), h01 = _mm256_setzero_ps();
			__m256 l10 = _mm256_setzero_ps(), h10 = _mm256_setzero_ps();
			__m256 l11 = _mm256_setzero_ps(), h11 = _mm256_setzero_ps();

			for (uint32_t b = 0; b < nb; b++, cw += ELDR_GROUP * ELDR_LANES) {
				__m256 cl0 = _mm256_load_ps(cw), ch0 = _mm256_load_ps(cw + 8);
				__m256 cl1 = _mm256_load_ps(cw + 16), ch1 = _mm256_load_ps(cw + 24);
				__m256 xl = _mm256_load_ps(x[0] + b * 16);
				__m256 xh = _mm256_load_ps(x[0] + b * 16 + 8);

				l00 = _mm256_fmadd_ps(xl, cl0, l00);
				h00 = _mm256_fmadd_ps(xh, ch0, h00);
				l01 = _mm256_fmadd_ps(xl, cl1, l01);
				h01 = _mm256_fmadd_ps(xh, ch1, h01);
				xl = _mm256_load_ps(x[1] + b * 16);
				xh = _mm256_load_ps(x[1] + b * 16 + 8);
				l10 = _mm256_fmadd_ps(xl, cl0, l10);
				h10 = _mm256_fmadd_ps(xh, ch0, h10);
				l11 = _mm256_fmadd_ps(xl, cl1, l11);
				h11 = _mm256_fmadd_ps(xh, ch1, h11);
			}
			dots[0][g * 4 + pair * 2 + 0] = reduce_avx2(l00, h00);
			dots[0][g * 4 + pair * 2 + 1] = reduce_avx2(l01, h01);
			dots[1][g * 4 + pair * 2 + 0] = reduce_avx2(l10, h10);
			dots[1][g * 4 + pair * 2 + 1] = reduce_avx2(l11, h11);
		}
	}
}

/* Masked counts (u16) into float features: exact conversions, any path. */
void eldr_load_scalar(const struct locus_eldr_router *r, const uint16_t *counts, float *x)
{
	const uint32_t E = r->n_experts;

	for (uint32_t m = 0; m < r->n_masked; m++) {
		const uint16_t *src = counts + (size_t)r->layers[m] * E;
		float *dst = x + (size_t)m * E;

		for (uint32_t e = 0; e < E; e++)
			dst[e] = (float)src[e];
	}
}

__attribute__((target("avx2,fma")))
void eldr_load_avx2(const struct locus_eldr_router *r, const uint16_t *counts, float *x)
{
	const uint32_t E = r->n_experts;

	for (uint32_t m = 0; m < r->n_masked; m++) {
		const uint16_t *src = counts + (size_t)r->layers[m] * E;
		float *dst = x + (size_t)m * E;
		uint32_t e = 0;

		for (; e + 8 <= E; e += 8) {
			__m128i v = _mm_loadu_si128((const __m128i *)(src + e));

			_mm256_storeu_ps(dst + e, _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(v)));
		}
		for (; e < E; e++)
			dst[e] = (float)src[e];
	}
}

__attribute__((target("avx512f,avx2,fma")))
void eldr_load_avx512(const struct locus_eldr_router *r, const uint16_t *counts, float *x)
{
	const uint32_t E = r->n_experts;

	for (uint32_t m = 0; m < r->n_masked; m++) {
		const uint16_t *src = counts + (size_t)r->layers[m] * E;
		float *dst = x + (size_t)m * E;
		uint32_t e = 0;

		for (; e + 16 <= E; e += 16) {
			__m256i v = _mm256_loadu_si256((const __m256i *)(src + e));

			_mm512_storeu_ps(dst + e, _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(v)));
		}
		for (; e < E; e++)
			dst[e] = (float)src[e];
	}
}

/*
 * Load and norm in one pass (the features stay in registers): when E is a
 * multiple of 16 a layer's features fill whole blocks, visited in block
 * order, so the norm's arithmetic is exactly eldr_norm_*()'s.
 */
float eldr_loadnorm_scalar(const struct locus_eldr_router *r, const uint16_t *counts, float *x)
{
	eldr_load_scalar(r, counts, x);
	return eldr_norm_scalar(r, x);
}

__attribute__((target("avx2,fma")))
float eldr_loadnorm_avx2(const struct locus_eldr_router *r, const uint16_t *counts, float *x)
{
	const uint32_t E = r->n_experts;
	__m256 nlo = _mm256_setzero_ps(), nhi = _mm256_setzero_ps();
	const float *idf = r->idf;

	if (E % 16) {
		eldr_load_avx2(r, counts, x);
		return eldr_norm_avx2(r, x);
	}
	for (uint32_t m = 0; m < r->n_masked; m++) {
		const uint16_t *src = counts + (size_t)r->layers[m] * E;

		for (uint32_t e = 0; e < E; e += 16, x += 16, idf += 16) {
			__m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(
				_mm_loadu_si128((const __m128i *)(src + e))));
			__m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(
				_mm_loadu_si128((const __m128i *)(src + e + 8))));
			__m256 tl = _mm256_mul_ps(lo, _mm256_load_ps(idf));
			__m256 th = _mm256_mul_ps(hi, _mm256_load_ps(idf + 8));

			_mm256_store_ps(x, lo);
			_mm256_store_ps(x + 8, hi);
			nlo = _mm256_fmadd_ps(tl, tl, nlo);
			nhi = _mm256_fmadd_ps(th, th, nhi);
		}
	}
	return reduce_avx2(nlo, nhi);
}

__attribute__((target("avx512f,avx2,fma")))
float eldr_loadnorm_avx512(const struct locus_eldr_router *r, const uint16_t *counts, float *x)
{
	const uint32_t E = r->n_experts;
	__m512 n = _mm512_setzero_ps();
	const float *idf = r->idf;

	if (E % 16) {
		eldr_load_avx512(r, counts, x);
		return eldr_norm_avx512(r, x);
	}
	for (uint32_t m = 0; m < r->n_masked; m++) {
		const uint16_t *src = counts + (size_t)r->layers[m] * E;

		for (uint32_t e = 0; e < E; e += 16, x += 16, idf += 16) {
			__m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(
				_mm256_loadu_si256((const __m256i *)(src + e))));
			__m512 t = _mm512_mul_ps(v, _mm512_load_ps(idf));

			_mm512_store_ps(x, v);
			n = _mm512_fmadd_ps(t, t, n);
		}
	}
	return reduce_avx512(n);
}
