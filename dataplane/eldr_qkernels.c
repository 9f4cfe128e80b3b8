// SPDX-License-Identifier: MIT
/*
 * Integer scoring kernels (eldr_priv.h): the signature's u16 counts times
 * the int16 quantised centroids, summed exactly. Three instruction sets,
 * chosen at run time; only the functions carry target attributes, so the
 * file builds without -march and runs on any x86-64. The batched forms
 * score up to ELDR_BATCH signatures per pass over the centroids, in
 * register blocks of (signatures x 4 centroids): every centroid vector
 * loaded serves each signature of the batch.
 */
#include <math.h>
#include <string.h>
#include <immintrin.h>

#include "eldr_simd_priv.h"

static inline const int16_t *qgroup(const struct locus_eldr_router *r, uint32_t g)
{
	return r->q + (size_t)g * r->n_qblocks * ELDR_GROUP * ELDR_QLANES;
}

/*
 * Norm^2 from the private counts (the padding of xq and idf is 0), in the
 * integer paths' float order: block b of 16 lanes accumulates with fused
 * multiply-adds into chain b % 4 (four independent chains, not one
 * latency-bound chain), lane-wise (c0 + c1) + (c2 + c3), then
 * eldr_reduce16(). Every integer path follows it: the same bits.
 */
float eldr_qnorm_scalar(const struct locus_eldr_router *r, const uint16_t *xq, uint32_t *maxc)
{
	float acc[ELDR_NCHAINS][ELDR_LANES], sum[ELDR_LANES];
	uint32_t m = 0;

	for (unsigned c = 0; c < ELDR_NCHAINS; c++)
		for (unsigned i = 0; i < ELDR_LANES; i++)
			acc[c][i] = 0.0f;
	for (uint32_t b = 0; b < r->n_blocks; b++) {
		for (unsigned i = 0; i < ELDR_LANES; i++) {
			uint16_t c = xq[b * ELDR_LANES + i];
			float t = (float)c * r->idf[b * ELDR_LANES + i];

			acc[b % ELDR_NCHAINS][i] = fmaf(t, t, acc[b % ELDR_NCHAINS][i]);
			m = c > m ? c : m;
		}
	}
	for (unsigned i = 0; i < ELDR_LANES; i++)
		sum[i] = (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]);
	*maxc = m;
	return eldr_reduce16(sum);
}

float eldr_qload_scalar(const struct locus_eldr_router *r, const uint16_t *counts, uint16_t *xq,
			uint32_t *maxc)
{
	copy_masked(r, counts, xq);
	return eldr_qnorm_scalar(r, xq, maxc);
}

/* Exact in int64 for any counts: the reference and the fallback of the SIMD kernels. */
void eldr_qdots_scalar(const struct locus_eldr_router *r, const uint16_t *const *xq, uint32_t n,
		       uint32_t maxc, int64_t *const *dots, struct eldr_prefetch *pf)
{
	const uint32_t nb = r->n_qblocks;
	(void)maxc;
	for (uint32_t g = 0; g < r->k_pad / ELDR_GROUP; g++) {
		for (uint32_t s = 0; s < n; s++) {
			const int16_t *q = qgroup(r, g);
			int64_t acc[ELDR_GROUP] = { 0 };

			for (uint32_t b = 0; b < nb; b++, q += ELDR_GROUP * ELDR_QLANES) {
				const uint16_t *x = xq[s] + (size_t)b * ELDR_QLANES;

				prefetch_step(pf);

				for (unsigned c = 0; c < ELDR_GROUP; c++) {
					int64_t sum = 0;

					for (unsigned i = 0; i < ELDR_QLANES; i++)
						sum += (int32_t)x[i] * (int32_t)q[c * ELDR_QLANES + i];
					acc[c] += sum;
				}
			}
			for (unsigned c = 0; c < ELDR_GROUP; c++)
				dots[s][g * ELDR_GROUP + c] = acc[c];
		}
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
/* Block b's 16 lanes as two halves: t^2 added into (lo, hi); the max of its counts into mx. */
__attribute__((target("avx2,fma")))
static inline void qnorm_block_avx2(const struct locus_eldr_router *r, const uint16_t *xq,
				    uint32_t b, __m256 *lo, __m256 *hi, __m128i *mx)
{
	__m128i vl = _mm_load_si128((const __m128i *)(xq + b * 16));
	__m128i vh = _mm_load_si128((const __m128i *)(xq + b * 16 + 8));
	__m256 tl = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(vl)),
				  _mm256_load_ps(r->idf + b * 16));
	__m256 th = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(vh)),
				  _mm256_load_ps(r->idf + b * 16 + 8));

	*mx = _mm_max_epu16(*mx, _mm_max_epu16(vl, vh));
	*lo = _mm256_fmadd_ps(tl, tl, *lo);
	*hi = _mm256_fmadd_ps(th, th, *hi);
}

__attribute__((target("avx2,fma")))
float eldr_qnorm_avx2(const struct locus_eldr_router *r, const uint16_t *xq, uint32_t *maxc)
{
	__m256 l0 = _mm256_setzero_ps(), h0 = l0, l1 = l0, h1 = l0, l2 = l0, h2 = l0, l3 = l0,
	       h3 = l0;
	__m128i mx = _mm_setzero_si128();
	const uint32_t nb = r->n_blocks;
	uint32_t b = 0;

	for (; b + ELDR_NCHAINS <= nb; b += ELDR_NCHAINS) {
		qnorm_block_avx2(r, xq, b, &l0, &h0, &mx);
		qnorm_block_avx2(r, xq, b + 1, &l1, &h1, &mx);
		qnorm_block_avx2(r, xq, b + 2, &l2, &h2, &mx);
		qnorm_block_avx2(r, xq, b + 3, &l3, &h3, &mx);
	}
	if (b < nb)
		qnorm_block_avx2(r, xq, b, &l0, &h0, &mx);
	if (b + 1 < nb)
		qnorm_block_avx2(r, xq, b + 1, &l1, &h1, &mx);
	if (b + 2 < nb)
		qnorm_block_avx2(r, xq, b + 2, &l2, &h2, &mx);
	/* horizontal max of 8 u16: minpos on the complement */
	*maxc = 0xffffu - (uint32_t)_mm_extract_epi16(
				  _mm_minpos_epu16(_mm_xor_si128(mx, _mm_set1_epi16(-1))), 0);
	return reduce_avx2(_mm256_add_ps(_mm256_add_ps(l0, l1), _mm256_add_ps(l2, l3)),
			   _mm256_add_ps(_mm256_add_ps(h0, h1), _mm256_add_ps(h2, h3)));
}

/*
 * Copy and norm in one pass when a layer is whole groups of 4 blocks (E a
 * multiple of 64: the chains line up with layers); else copy, then norm.
 * The same arithmetic either way.
 */
__attribute__((target("avx2,fma")))
float eldr_qload_avx2(const struct locus_eldr_router *r, const uint16_t *counts, uint16_t *xq,
		      uint32_t *maxc)
{
	const uint32_t E = r->n_experts;
	__m256 l0 = _mm256_setzero_ps(), h0 = l0, l1 = l0, h1 = l0, l2 = l0, h2 = l0, l3 = l0,
	       h3 = l0;
	__m128i mx = _mm_setzero_si128();
	uint32_t b = 0;

	if (E % 64) {
		copy_masked(r, counts, xq);
		return eldr_qnorm_avx2(r, xq, maxc);
	}
	for (uint32_t m = 0; m < r->n_masked; m++) {
		const uint16_t *src = counts + (size_t)r->layers[m] * E;

		for (uint32_t e = 0; e < E; e += 64, src += 64, b += 4) {
			for (unsigned i = 0; i < 8; i++)
				_mm_store_si128((__m128i *)(xq + b * 16) + i,
						_mm_loadu_si128((const __m128i *)src + i));
			qnorm_block_avx2(r, xq, b, &l0, &h0, &mx);
			qnorm_block_avx2(r, xq, b + 1, &l1, &h1, &mx);
			qnorm_block_avx2(r, xq, b + 2, &l2, &h2, &mx);
			qnorm_block_avx2(r, xq, b + 3, &l3, &h3, &mx);
		}
	}
	*maxc = 0xffffu - (uint32_t)_mm_extract_epi16(
				  _mm_minpos_epu16(_mm_xor_si128(mx, _mm_set1_epi16(-1))), 0);
	return reduce_avx2(_mm256_add_ps(_mm256_add_ps(l0, l1), _mm256_add_ps(l2, l3)),
			   _mm256_add_ps(_mm256_add_ps(h0, h1), _mm256_add_ps(h2, h3)));
}

__attribute__((target("avx2,fma")))
static inline int64_t hsum_epi32_avx2(__m256i v)
{
	__m256i w = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)),
				     _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1)));
	__m128i a = _mm_add_epi64(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));

	return _mm_cvtsi128_si64(a) + _mm_extract_epi64(a, 1);
}

/*
 * NS signatures x 4 centroids of group g in int32 lanes (vpmaddwd: 4
 * products per lane per 32-feature block), flushed every chunk blocks.
 */
__attribute__((target("avx2,fma"), always_inline))
static inline void qdots_avx2_ns(const struct locus_eldr_router *r, const uint16_t *const *xq,
				 uint32_t g, uint32_t chunk, int64_t *const *dots,
				 struct eldr_prefetch *pf, const int NS)
{
	const uint32_t nb = r->n_qblocks;
	const int16_t *q = qgroup(r, g);
	int64_t tot[2][ELDR_GROUP] = { { 0 } };

	for (uint32_t b0 = 0; b0 < nb; b0 += chunk) {
		uint32_t b1 = nb - b0 < chunk ? nb : b0 + chunk;
		__m256i acc[2][ELDR_GROUP];

		for (int s = 0; s < NS; s++)
			for (unsigned c = 0; c < ELDR_GROUP; c++)
				acc[s][c] = _mm256_setzero_si256();
		for (uint32_t b = b0; b < b1; b++) {
			const int16_t *qb = q + (size_t)b * ELDR_GROUP * ELDR_QLANES;
			__m256i xl[2], xh[2];

			prefetch_step(pf);
			for (int s = 0; s < NS; s++) {
				xl[s] = _mm256_load_si256((const __m256i *)(xq[s] + b * 32));
				xh[s] = _mm256_load_si256((const __m256i *)(xq[s] + b * 32 + 16));
			}
			for (unsigned c = 0; c < ELDR_GROUP; c++) {
				__m256i ql = _mm256_load_si256((const __m256i *)(qb + c * 32));
				__m256i qh = _mm256_load_si256((const __m256i *)(qb + c * 32 + 16));

				for (int s = 0; s < NS; s++)
					acc[s][c] = _mm256_add_epi32(
						acc[s][c],
						_mm256_add_epi32(_mm256_madd_epi16(xl[s], ql),
								 _mm256_madd_epi16(xh[s], qh)));
			}
		}
		for (int s = 0; s < NS; s++)
			for (unsigned c = 0; c < ELDR_GROUP; c++)
				tot[s][c] += hsum_epi32_avx2(acc[s][c]);
	}
	for (int s = 0; s < NS; s++)
		for (unsigned c = 0; c < ELDR_GROUP; c++)
			dots[s][g * ELDR_GROUP + c] = tot[s][c];
}

__attribute__((target("avx2,fma")))
void eldr_qdots_avx2(const struct locus_eldr_router *r, const uint16_t *const *xq, uint32_t n,
		     uint32_t maxc, int64_t *const *dots, struct eldr_prefetch *pf)
{
	uint32_t chunk = eldr_qchunk(maxc, 4);

	/* counts are signed 16-bit for vpmaddwd */
	if (maxc > INT16_MAX || chunk == 0) {
		eldr_qdots_scalar(r, xq, n, maxc, dots, pf);
		return;
	}
	for (uint32_t s = 0; s < n; s += 2)
		for (uint32_t g = 0; g < r->k_pad / ELDR_GROUP; g++) {
			if (n - s >= 2)
				qdots_avx2_ns(r, xq + s, g, chunk, dots + s, pf, 2);
			else
				qdots_avx2_ns(r, xq + s, g, chunk, dots + s, pf, 1);
		}
}

__attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma")))
/* Block b: t^2 added into n, the max of its counts into mx. */
__attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma")))
static inline void qnorm_block_avx512(const struct locus_eldr_router *r, const uint16_t *xq,
				      uint32_t b, __m512 *n, __m256i *mx)
{
	__m256i v = _mm256_load_si256((const __m256i *)(xq + b * 16));
	__m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(v)),
				 _mm512_load_ps(r->idf + b * 16));

	*mx = _mm256_max_epu16(*mx, v);
	*n = _mm512_fmadd_ps(t, t, *n);
}

__attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma")))
float eldr_qnorm_avx512(const struct locus_eldr_router *r, const uint16_t *xq, uint32_t *maxc)
{
	__m512 n0 = _mm512_setzero_ps(), n1 = n0, n2 = n0, n3 = n0, n;
	__m256i mx = _mm256_setzero_si256();
	const uint32_t nb = r->n_blocks;
	uint32_t b = 0;

	for (; b + ELDR_NCHAINS <= nb; b += ELDR_NCHAINS) {
		qnorm_block_avx512(r, xq, b, &n0, &mx);
		qnorm_block_avx512(r, xq, b + 1, &n1, &mx);
		qnorm_block_avx512(r, xq, b + 2, &n2, &mx);
		qnorm_block_avx512(r, xq, b + 3, &n3, &mx);
	}
	if (b < nb)
		qnorm_block_avx512(r, xq, b, &n0, &mx);
	if (b + 1 < nb)
		qnorm_block_avx512(r, xq, b + 1, &n1, &mx);
	if (b + 2 < nb)
		qnorm_block_avx512(r, xq, b + 2, &n2, &mx);
	*maxc = _mm512_reduce_max_epu32(_mm512_cvtepu16_epi32(mx));
	n = _mm512_add_ps(_mm512_add_ps(n0, n1), _mm512_add_ps(n2, n3));
	return reduce_avx2(_mm512_castps512_ps256(n),
			   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(n), 1)));
}

/* Copy and norm in one pass, as eldr_qload_avx2(). */
__attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma")))
float eldr_qload_avx512(const struct locus_eldr_router *r, const uint16_t *counts, uint16_t *xq,
			uint32_t *maxc)
{
	const uint32_t E = r->n_experts;
	__m512 n0 = _mm512_setzero_ps(), n1 = n0, n2 = n0, n3 = n0, n;
	__m256i mx = _mm256_setzero_si256();
	uint32_t b = 0;

	if (E % 64) {
		copy_masked(r, counts, xq);
		return eldr_qnorm_avx512(r, xq, maxc);
	}
	for (uint32_t m = 0; m < r->n_masked; m++) {
		const uint16_t *src = counts + (size_t)r->layers[m] * E;

		for (uint32_t e = 0; e < E; e += 64, src += 64, b += 4) {
			_mm512_store_si512(xq + b * 16, _mm512_loadu_si512(src));
			_mm512_store_si512(xq + b * 16 + 32, _mm512_loadu_si512(src + 32));
			qnorm_block_avx512(r, xq, b, &n0, &mx);
			qnorm_block_avx512(r, xq, b + 1, &n1, &mx);
			qnorm_block_avx512(r, xq, b + 2, &n2, &mx);
			qnorm_block_avx512(r, xq, b + 3, &n3, &mx);
		}
	}
	*maxc = _mm512_reduce_max_epu32(_mm512_cvtepu16_epi32(mx));
	n = _mm512_add_ps(_mm512_add_ps(n0, n1), _mm512_add_ps(n2, n3));
	return reduce_avx2(_mm512_castps512_ps256(n),
			   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(n), 1)));
}

#define ELDR_L1_BLOCKS 64u /* 32-feature blocks of a span (4 KiB of counts a signature) */

/*
 * Blocks [b0, b1) of group g for 4 signatures: 16 accumulators in
 * registers (4 signatures x 4 centroids), each centroid vector loaded once
 * for the 4; vpdpwssd puts 2 products per int32 lane per block.
 */
Q512 static void qdots512_x4(const struct locus_eldr_router *r, const uint16_t *const *xq,
			     uint32_t g, uint32_t b0, uint32_t b1, int64_t *const *dots,
			     struct eldr_prefetch *pf)
{
	const int16_t *q = qgroup(r, g) + (size_t)b0 * ELDR_GROUP * ELDR_QLANES;
	const uint16_t *x0 = xq[0], *x1 = xq[1], *x2 = xq[2], *x3 = xq[3];
	__m512i a00 = _mm512_setzero_si512(), a01 = a00, a02 = a00, a03 = a00;
	__m512i a10 = a00, a11 = a00, a12 = a00, a13 = a00;
	__m512i a20 = a00, a21 = a00, a22 = a00, a23 = a00;
	__m512i a30 = a00, a31 = a00, a32 = a00, a33 = a00;

	for (uint32_t b = b0; b < b1; b++, q += ELDR_GROUP * ELDR_QLANES) {
		__m512i q0 = _mm512_load_si512(q), q1 = _mm512_load_si512(q + 32);
		__m512i q2 = _mm512_load_si512(q + 64), q3 = _mm512_load_si512(q + 96);
		__m512i v;

		prefetch_step(pf);
		v = _mm512_load_si512(x0 + b * 32);
		DPW(a00, v, q0); DPW(a01, v, q1); DPW(a02, v, q2); DPW(a03, v, q3);
		v = _mm512_load_si512(x1 + b * 32);
		DPW(a10, v, q0); DPW(a11, v, q1); DPW(a12, v, q2); DPW(a13, v, q3);
		v = _mm512_load_si512(x2 + b * 32);
		DPW(a20, v, q0); DPW(a21, v, q1); DPW(a22, v, q2); DPW(a23, v, q3);
		v = _mm512_load_si512(x3 + b * 32);
		DPW(a30, v, q0); DPW(a31, v, q1); DPW(a32, v, q2); DPW(a33, v, q3);
	}
	{
		const __m512i acc[16] = { a00, a01, a02, a03, a10, a11, a12, a13,
					  a20, a21, a22, a23, a30, a31, a32, a33 };

		add_block4x4(dots, g, acc);
	}
}

/*
 * The same for one signature: two blocks per step into separate
 * accumulators (8 independent chains hide vpdpwssd's latency); a lane
 * still takes 2 products per block, so the chunk bound holds.
 */
Q512 static void qdots512_x1(const struct locus_eldr_router *r, const uint16_t *x, uint32_t g,
			     uint32_t b0, uint32_t b1, int64_t tot[ELDR_GROUP])
{
	const int16_t *q = qgroup(r, g) + (size_t)b0 * ELDR_GROUP * ELDR_QLANES;
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
	__m512i e0 = a0, e1 = a0, e2 = a0, e3 = a0;
	uint32_t b = b0;

	for (; b + 2 <= b1; b += 2, q += 2 * ELDR_GROUP * ELDR_QLANES) {
		__m512i v = _mm512_load_si512(x + b * 32), w = _mm512_load_si512(x + b * 32 + 32);

		DPW(a0, v, _mm512_load_si512(q));
		DPW(a1, v, _mm512_load_si512(q + 32));
		DPW(a2, v, _mm512_load_si512(q + 64));
		DPW(a3, v, _mm512_load_si512(q + 96));
		DPW(e0, w, _mm512_load_si512(q + 128));
		DPW(e1, w, _mm512_load_si512(q + 160));
		DPW(e2, w, _mm512_load_si512(q + 192));
		DPW(e3, w, _mm512_load_si512(q + 224));
	}
	if (b < b1) {
		__m512i v = _mm512_load_si512(x + b * 32);

		DPW(a0, v, _mm512_load_si512(q));
		DPW(a1, v, _mm512_load_si512(q + 32));
		DPW(a2, v, _mm512_load_si512(q + 64));
		DPW(a3, v, _mm512_load_si512(q + 96));
	}
	tot[0] += hsum_epi32_avx512(a0) + hsum_epi32_avx512(e0);
	tot[1] += hsum_epi32_avx512(a1) + hsum_epi32_avx512(e1);
	tot[2] += hsum_epi32_avx512(a2) + hsum_epi32_avx512(e2);
	tot[3] += hsum_epi32_avx512(a3) + hsum_epi32_avx512(e3);
}

__attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma")))
void eldr_qdots_avx512(const struct locus_eldr_router *r, const uint16_t *const *xq, uint32_t n,
		       uint32_t maxc, int64_t *const *dots, struct eldr_prefetch *pf)
{
	const uint32_t nb = r->n_qblocks, chunk = eldr_qchunk(maxc, 2);
	const uint32_t span = LOCUS_MIN(chunk, ELDR_L1_BLOCKS);

	/* counts are signed 16-bit for vpdpwssd */
	if (maxc > INT16_MAX || chunk == 0) {
		eldr_qdots_scalar(r, xq, n, maxc, dots, pf);
		return;
	}
	for (uint32_t s = 0; s < n; s++)
		memset(dots[s], 0, sizeof(int64_t) * r->k_pad);
	/*
	 * Feature spans of at most ELDR_L1_BLOCKS blocks (16 KiB of 4
	 * signatures' counts stay in L1 while every centroid group streams
	 * past), and of at most chunk blocks (the int32 bound).
	 */
	for (uint32_t b0 = 0; b0 < nb; b0 += span) {
		uint32_t b1 = nb - b0 < span ? nb : b0 + span;

		for (uint32_t g = 0; g < r->k_pad / ELDR_GROUP; g++) {
			if (n == 4)
				qdots512_x4(r, xq, g, b0, b1, dots, pf);
			else
				for (uint32_t s = 0; s < n; s++)
					qdots512_x1(r, xq[s], g, b0, b1, dots[s] + g * ELDR_GROUP);
		}
	}
}
