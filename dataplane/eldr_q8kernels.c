// SPDX-License-Identifier: MIT
/*
 * The 8-bit arithmetic's kernels (eldr_priv.h): a signature's counts to
 * levels a <= ELDR_A8MAX with the exact norm^2 sum a^2 x W, and, on
 * AVX-512 VNNI, the dot products of the levels as bytes with the u8
 * centroids (vpdpbusd: 64 products per instruction, twice vpdpwssd's).
 * Scalar and AVX2 run the 16-bit kernels on the same levels: the same
 * integers, so every 8-bit path gives the same bits.
 */
#include <string.h>
#include <immintrin.h>

#include "eldr_simd_priv.h"

/*
 * Steps of 32 features whose norm products an int32 lane may sum, over
 * all chains together: a step adds two a^2 x (a byte of W) <= 2 x 127^2 x
 * 255 to a lane of one chain.
 */
#define W8_CHUNK (INT32_MAX / (2u * ELDR_A8MAX * ELDR_A8MAX * 255u))

/* Level of count c at shift s: round half up, without overflow. */
static inline uint32_t level(uint32_t c, uint32_t s)
{
	return s ? ((c >> (s - 1)) + 1) >> 1 : c;
}

/* The smallest s with every level round(c / 2^s), c <= maxc, at most ELDR_A8MAX. */
uint32_t eldr_a8shift(uint32_t maxc)
{
	uint32_t s = 0;

	while (s < 16 && level(maxc, s) > ELDR_A8MAX)
		s++;
	return s;
}

uint64_t eldr_q8load_scalar(const struct locus_eldr_router *r, const uint16_t *counts,
			    uint16_t *xq, uint8_t *a8, uint64_t *asum, struct eldr_prefetch *pf)
{
	const uint32_t nf = r->n_feat;
	uint32_t maxc = 0, s;
	uint64_t n2 = 0, sum = 0;

	(void)a8;
	(void)pf; /* the 16-bit kernel prefetches */
	copy_masked(r, counts, xq);
	for (uint32_t f = 0; f < nf; f++)
		maxc = xq[f] > maxc ? xq[f] : maxc;
	s = eldr_a8shift(maxc);
	for (uint32_t f = 0; f < nf; f++) {
		uint32_t a = level(xq[f], s);

		xq[f] = (uint16_t)a;
		sum += a;
		n2 += (uint64_t)(a * a) * r->w8[f];
	}
	*asum = sum;
	return n2;
}

/* The int32 lanes of v added into the int64 lanes of acc. */
Q512 static inline __m512i add_epi32_to_64(__m512i acc, __m512i v)
{
	return _mm512_add_epi64(acc, _mm512_add_epi64(
		_mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)),
		_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1))));
}

/* The u16 lanes of v added into the int64 lanes of acc (vpsadbw sums 8 bytes a lane). */
Q512 static inline __m512i add_epu16_to_64(__m512i acc, __m512i v)
{
	const __m512i zero = _mm512_setzero_si512();

	return _mm512_add_epi64(acc, _mm512_add_epi64(
		_mm512_sad_epu8(_mm512_and_si512(v, _mm512_set1_epi16(0xff)), zero),
		_mm512_slli_epi64(_mm512_sad_epu8(_mm512_srli_epi16(v, 8), zero), 8)));
}

/* The largest of the 32 u16 lanes of v. */
Q512 static inline uint32_t max_epu16(__m512i v)
{
	return (uint32_t)_mm512_reduce_max_epu32(
		_mm512_max_epu32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)),
				 _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1))));
}

/*
 * One step of 32 counts at src (features f..f+31): their levels at shift s
 * (vpavgw rounds half up without overflow; clamped to ELDR_A8MAX, so a
 * count rewritten since it was measured stays in range), a^2 (vpmullw),
 * into the norm's int32 lanes hi and lo against W's two bytes (vpdpwssd),
 * the levels into the u16 lanes of as, and packed to bytes into a8; mx
 * takes the largest count read.
 */
#define Q8STEP(src, f, hi, lo)                                                              \
	do {                                                                                \
		__m512i v_ = _mm512_loadu_si512(src), w_ = _mm512_load_si512(w8 + (f)), sq_; \
		mx = _mm512_max_epu16(mx, v_);                                              \
		if (s)                                                                      \
			v_ = _mm512_min_epu16(_mm512_avg_epu16(_mm512_srl_epi16(v_, sh), zero), \
					      amax);                                        \
		sq_ = _mm512_mullo_epi16(v_, v_);                                           \
		as = _mm512_add_epi16(as, v_);                                              \
		DPW(hi, sq_, _mm512_srli_epi16(w_, 8));                                     \
		DPW(lo, sq_, _mm512_and_si512(w_, lo8));                                    \
		_mm256_storeu_si256((__m256i *)(a8 + (f)), _mm512_cvtepi16_epi8(v_));       \
	} while (0)

/*
 * One pass over the masked counts at shift s, whole layers of 32-count
 * steps (E a multiple of 32), or xq when it holds a copy (in segments of
 * W8_CHUNK steps); returns the largest count read and *n2 the norm^2. Four
 * chains of int32 lanes for each byte of W (one would wait on vpdpwssd's
 * latency every step), summed and flushed into int64 lanes before the
 * steps since the last flush could overflow their sum (and the levels'
 * u16 lanes, which take at most 127 a step, theirs). pf steps once every
 * four steps. *asum = the levels' sum. With stop (at shift 0), the pass
 * ends at the first layer with a count above ELDR_A8MAX, returning
 * UINT32_MAX: its levels would be wrong, and the rest of the pass wasted.
 */
Q512 static uint32_t q8pass(const struct locus_eldr_router *r, const uint16_t *counts,
			    const uint16_t *xq, uint32_t s, uint8_t *a8, uint64_t *n2,
			    uint64_t *asum, struct eldr_prefetch *pf, int stop)
{
	const __m512i zero = _mm512_setzero_si512(), lo8 = _mm512_set1_epi16(0xff);
	const __m512i amax = _mm512_set1_epi16(ELDR_A8MAX);
	const __m128i sh = _mm_cvtsi32_si128(s ? (int)s - 1 : 0);
	const uint16_t *w8 = r->w8;
	const uint32_t nf = r->n_q8blocks * ELDR_Q8LANES, seg = W8_CHUNK * 32;
	const uint32_t E = xq ? seg : r->n_experts;
	const uint32_t layers = xq ? (nf + seg - 1) / seg : r->n_masked;
	__m512i h0 = zero, h1 = zero, h2 = zero, h3 = zero, l0 = zero, l1 = zero, l2 = zero;
	__m512i l3 = zero, h64 = zero, l64 = zero, mx = zero, as = zero, as64 = zero;
	uint32_t since = 0; /* steps since the last flush */

	for (uint32_t l = 0; l < layers; l++) {
		const uint32_t f0 = l * E;
		const uint16_t *src = xq ? xq + f0 : counts + (size_t)r->layers[l] * E;
		const uint32_t n = (xq ? LOCUS_MIN(seg, nf - f0) : E) / 32;
		uint32_t i = 0;

		if (since + n > W8_CHUNK) {
			h64 = add_epi32_to_64(h64, _mm512_add_epi32(_mm512_add_epi32(h0, h1),
								    _mm512_add_epi32(h2, h3)));
			l64 = add_epi32_to_64(l64, _mm512_add_epi32(_mm512_add_epi32(l0, l1),
								    _mm512_add_epi32(l2, l3)));
			as64 = add_epu16_to_64(as64, as);
			h0 = h1 = h2 = h3 = l0 = l1 = l2 = l3 = as = zero;
			since = 0;
		}
		since += n;
		for (; i + 4 <= n; i += 4) {
			prefetch_step(pf);
			Q8STEP(src + i * 32, f0 + i * 32, h0, l0);
			Q8STEP(src + i * 32 + 32, f0 + i * 32 + 32, h1, l1);
			Q8STEP(src + i * 32 + 64, f0 + i * 32 + 64, h2, l2);
			Q8STEP(src + i * 32 + 96, f0 + i * 32 + 96, h3, l3);
		}
		if (i < n)
			Q8STEP(src + i * 32, f0 + i * 32, h0, l0);
		if (i + 1 < n)
			Q8STEP(src + i * 32 + 32, f0 + i * 32 + 32, h1, l1);
		if (i + 2 < n)
			Q8STEP(src + i * 32 + 64, f0 + i * 32 + 64, h2, l2);
		if (stop && _mm512_cmpgt_epu16_mask(mx, amax))
			return UINT32_MAX;
	}
	h64 = add_epi32_to_64(h64, _mm512_add_epi32(_mm512_add_epi32(h0, h1),
						    _mm512_add_epi32(h2, h3)));
	l64 = add_epi32_to_64(l64, _mm512_add_epi32(_mm512_add_epi32(l0, l1),
						    _mm512_add_epi32(l2, l3)));
	*n2 = (uint64_t)_mm512_reduce_add_epi64(h64) * 256 + (uint64_t)_mm512_reduce_add_epi64(l64);
	*asum = (uint64_t)_mm512_reduce_add_epi64(add_epu16_to_64(as64, as));
	return max_epu16(mx);
}

/* The largest of the masked counts (whole layers of 32, or the copy in xq). */
Q512 static uint32_t max_counts(const struct locus_eldr_router *r, const uint16_t *counts,
				const uint16_t *xq)
{
	const uint32_t E = xq ? r->n_q8blocks * ELDR_Q8LANES : r->n_experts;
	const uint32_t layers = xq ? 1 : r->n_masked;
	__m512i mx = _mm512_setzero_si512();

	for (uint32_t l = 0; l < layers; l++) {
		const uint16_t *src = xq ? xq : counts + (size_t)r->layers[l] * E;

		for (uint32_t i = 0; i < E; i += 32)
			mx = _mm512_max_epu16(mx, _mm512_loadu_si512(src + i));
	}
	return max_epu16(mx);
}

/*
 * The counts' levels at shift 0 in one pass, which holds whenever no count
 * exceeds ELDR_A8MAX (a prompt shorter than that many tokens always); else,
 * from the first layer with a larger count, the largest count, then the
 * pass again at the shift it needs. Counts in place when E is a multiple of
 * 32 (read once, or again for the maximum and the second pass), else
 * copied to xq once.
 */
Q512 uint64_t eldr_q8load_avx512(const struct locus_eldr_router *r, const uint16_t *counts,
				 uint16_t *xq, uint8_t *a8, uint64_t *asum, struct eldr_prefetch *pf)
{
	const uint16_t *copy = NULL;
	uint64_t n2;
	uint32_t maxc;

	if (r->n_experts % 32) {
		copy_masked(r, counts, xq);
		copy = xq;
	}
	maxc = q8pass(r, counts, copy, 0, a8, &n2, asum, pf, 1);
	if (maxc > ELDR_A8MAX)
		q8pass(r, counts, copy, eldr_a8shift(max_counts(r, counts, copy)), a8, &n2, asum, pf,
		       0);
	return n2;
}

/*
 * a += u x s, u bytes unsigned (a centroid's), s signed (a signature's
 * levels), four products per int32 lane, in place (see DPW in
 * eldr_simd_priv.h)
 */
#define DPB(a, u, s) __asm__("vpdpbusd %2, %1, %0" : "+v"(a) : "v"(u), "v"(s))

static inline const uint8_t *q8group(const struct locus_eldr_router *r, uint32_t g)
{
	return r->q8 + (size_t)g * r->n_q8blocks * ELDR_GROUP * ELDR_Q8LANES;
}

/*
 * Blocks [b0, b1) of group g for 4 signatures: 16 accumulators (4
 * signatures x 4 centroids), each centroid vector loaded once for the 4.
 */
Q512 static void q8dots_x4(const struct locus_eldr_router *r, const uint8_t *const *a8,
			   uint32_t g, uint32_t b0, uint32_t b1, int64_t *const *dots,
			   struct eldr_prefetch *pf)
{
	const uint8_t *q = q8group(r, g) + (size_t)b0 * ELDR_GROUP * ELDR_Q8LANES;
	const uint8_t *x0 = a8[0], *x1 = a8[1], *x2 = a8[2], *x3 = a8[3];
	__m512i a00 = _mm512_setzero_si512(), a01 = a00, a02 = a00, a03 = a00;
	__m512i a10 = a00, a11 = a00, a12 = a00, a13 = a00;
	__m512i a20 = a00, a21 = a00, a22 = a00, a23 = a00;
	__m512i a30 = a00, a31 = a00, a32 = a00, a33 = a00;

	for (uint32_t b = b0; b < b1; b++, q += ELDR_GROUP * ELDR_Q8LANES) {
		__m512i q0 = _mm512_load_si512(q), q1 = _mm512_load_si512(q + 64);
		__m512i q2 = _mm512_load_si512(q + 128), q3 = _mm512_load_si512(q + 192);
		__m512i v;

		prefetch_step(pf);
		v = _mm512_load_si512(x0 + (size_t)b * 64);
		DPB(a00, q0, v); DPB(a01, q1, v); DPB(a02, q2, v); DPB(a03, q3, v);
		v = _mm512_load_si512(x1 + (size_t)b * 64);
		DPB(a10, q0, v); DPB(a11, q1, v); DPB(a12, q2, v); DPB(a13, q3, v);
		v = _mm512_load_si512(x2 + (size_t)b * 64);
		DPB(a20, q0, v); DPB(a21, q1, v); DPB(a22, q2, v); DPB(a23, q3, v);
		v = _mm512_load_si512(x3 + (size_t)b * 64);
		DPB(a30, q0, v); DPB(a31, q1, v); DPB(a32, q2, v); DPB(a33, q3, v);
	}
	{
		const __m512i acc[16] = { a00, a01, a02, a03, a10, a11, a12, a13,
					  a20, a21, a22, a23, a30, a31, a32, a33 };

		add_block4x4(dots, g, acc);
	}
}

/* The same for one signature, two blocks per step (8 independent chains). */
Q512 static void q8dots_x1(const struct locus_eldr_router *r, const uint8_t *x, uint32_t g,
			   uint32_t b0, uint32_t b1, int64_t tot[ELDR_GROUP])
{
	const uint8_t *q = q8group(r, g) + (size_t)b0 * ELDR_GROUP * ELDR_Q8LANES;
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
	__m512i e0 = a0, e1 = a0, e2 = a0, e3 = a0;
	uint32_t b = b0;

	for (; b + 2 <= b1; b += 2, q += 2 * ELDR_GROUP * ELDR_Q8LANES) {
		__m512i v = _mm512_load_si512(x + (size_t)b * 64);
		__m512i w = _mm512_load_si512(x + (size_t)b * 64 + 64);

		DPB(a0, _mm512_load_si512(q), v);
		DPB(a1, _mm512_load_si512(q + 64), v);
		DPB(a2, _mm512_load_si512(q + 128), v);
		DPB(a3, _mm512_load_si512(q + 192), v);
		DPB(e0, _mm512_load_si512(q + 256), w);
		DPB(e1, _mm512_load_si512(q + 320), w);
		DPB(e2, _mm512_load_si512(q + 384), w);
		DPB(e3, _mm512_load_si512(q + 448), w);
	}
	if (b < b1) {
		__m512i v = _mm512_load_si512(x + (size_t)b * 64);

		DPB(a0, _mm512_load_si512(q), v);
		DPB(a1, _mm512_load_si512(q + 64), v);
		DPB(a2, _mm512_load_si512(q + 128), v);
		DPB(a3, _mm512_load_si512(q + 192), v);
	}
	tot[0] += hsum_epi32_avx512(a0) + hsum_epi32_avx512(e0);
	tot[1] += hsum_epi32_avx512(a1) + hsum_epi32_avx512(e1);
	tot[2] += hsum_epi32_avx512(a2) + hsum_epi32_avx512(e2);
	tot[3] += hsum_epi32_avx512(a3) + hsum_epi32_avx512(e3);
}

/*
 * Blocks of a span: 32 (2 KiB of levels a signature, 8 KiB for four stay
 * in L1 while every centroid group streams past), and within the int32
 * bound: a lane takes 4 products <= 255 x 127 per block.
 */
#define Q8_SPAN 32u
#define Q8_CHUNK (INT32_MAX / (4u * ELDR_A8MAX * ELDR_Q8MAX))

Q512 void eldr_q8dots_avx512(const struct locus_eldr_router *r, const uint8_t *const *a8,
			     uint32_t n, int64_t *const *dots, struct eldr_prefetch *pf)
{
	const uint32_t nb = r->n_q8blocks, span = LOCUS_MIN(Q8_SPAN, Q8_CHUNK);

	for (uint32_t s = 0; s < n; s++)
		memset(dots[s], 0, sizeof(int64_t) * r->k_pad);
	for (uint32_t b0 = 0; b0 < nb; b0 += span) {
		uint32_t b1 = nb - b0 < span ? nb : b0 + span;

		for (uint32_t g = 0; g < r->k_pad / ELDR_GROUP; g++) {
			if (n == 4)
				q8dots_x4(r, a8, g, b0, b1, dots, pf);
			else
				for (uint32_t s = 0; s < n; s++)
					q8dots_x1(r, a8[s], g, b0, b1, dots[s] + g * ELDR_GROUP);
		}
	}
}
