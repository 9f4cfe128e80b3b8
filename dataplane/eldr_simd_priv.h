/* SPDX-License-Identifier: MIT */
/*
 * Helpers both integer kernel files use (eldr_qkernels.c: 16-bit,
 * eldr_q8kernels.c: 8-bit): the next batch's prefetch, the AVX-512 target,
 * vpdpwssd in place and horizontal sums. Only the functions carry target
 * attributes, so the files build without -march.
 */
#ifndef LOCUS_ELDR_SIMD_PRIV_H
#define LOCUS_ELDR_SIMD_PRIV_H

#include <immintrin.h>

#include "eldr_priv.h"

#define Q512 __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma")))

/*
 * a += x . q pairwise (vpdpwssd), in place: GCC 12 copies the accumulator
 * around the intrinsic (a register move per product and spills with 16
 * accumulators), so the kernels state the instruction themselves.
 */
#define DPW(a, x, q) __asm__("vpdpwssd %2, %1, %0" : "+v"(a) : "v"(x), "v"(q))

/* Prefetch the next lines of pf (NULL: none) and move its cursor on. */
static inline void prefetch_step(struct eldr_prefetch *pf)
{
	if (!pf)
		return;
	for (uint32_t k = 0; k < pf->per_step && pf->sig < pf->n_sigs; k++) {
		__builtin_prefetch(pf->base[pf->sig] + pf->off[pf->line], 0, 2);
		if (++pf->line == pf->n_lines) {
			pf->line = 0;
			pf->sig++;
		}
	}
}

/* The 16 int32 lanes of v summed exactly in int64. */
Q512 static inline int64_t hsum_epi32_avx512(__m512i v)
{
	return _mm512_reduce_add_epi64(
		_mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)),
				 _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1))));
}

/*
 * A 4 signatures x 4 centroids register block's int32 lanes (acc[s * 4 +
 * c]) summed into dots[s][g * 4 + c], exactly.
 */
Q512 static inline void add_block4x4(int64_t *const *dots, uint32_t g, const __m512i acc[16])
{
	for (unsigned s = 0; s < 4; s++)
		for (unsigned c = 0; c < ELDR_GROUP; c++)
			dots[s][g * ELDR_GROUP + c] += hsum_epi32_avx512(acc[s * 4 + c]);
}

/* The masked layers of counts into xq (read once each); padding stays 0. */
static inline void copy_masked(const struct locus_eldr_router *r, const uint16_t *counts,
			       uint16_t *xq)
{
	const uint32_t E = r->n_experts;

	for (uint32_t m = 0; m < r->n_masked; m++)
		__builtin_memcpy(xq + (size_t)m * E, counts + (size_t)r->layers[m] * E,
				 2 * (size_t)E);
}

#endif /* LOCUS_ELDR_SIMD_PRIV_H */
