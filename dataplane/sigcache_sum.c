// SPDX-License-Identifier: MIT
/*
 * The signature cache's one hot loop: a block's uint8 counts added into a
 * uint16 signature, saturating. A ROUTE_BLOCKS of a long cached prefix runs
 * it once per cached block (6,144 cells for 48 x 128), so it has an AVX2
 * path (16 counts widened and added with unsigned saturation per step),
 * chosen at run time; only the function carries the target attribute.
 * The same for uint16 into uint16 (a tail signature into a sum).
 */
#include <immintrin.h>

#include "locus_sigcache.h"

static void sum_scalar(uint16_t *sig, const uint8_t *cnt, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t v = (uint32_t)sig[i] + cnt[i];

		sig[i] = (uint16_t)(v > UINT16_MAX ? UINT16_MAX : v);
	}
}

__attribute__((target("avx2")))
static void sum_avx2(uint16_t *sig, const uint8_t *cnt, size_t n)
{
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(cnt + i)));
		__m256i s = _mm256_loadu_si256((const __m256i *)(sig + i));

		_mm256_storeu_si256((__m256i *)(sig + i), _mm256_adds_epu16(s, c));
	}
	sum_scalar(sig + i, cnt + i, n - i);
}

static void sum16_scalar(uint16_t *sig, const uint16_t *add, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t v = (uint32_t)sig[i] + add[i];

		sig[i] = (uint16_t)(v > UINT16_MAX ? UINT16_MAX : v);
	}
}

__attribute__((target("avx2")))
static void sum16_avx2(uint16_t *sig, const uint16_t *add, size_t n)
{
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(add + i));
		__m256i s = _mm256_loadu_si256((const __m256i *)(sig + i));

		_mm256_storeu_si256((__m256i *)(sig + i), _mm256_adds_epu16(s, a));
	}
	sum16_scalar(sig + i, add + i, n - i);
}

locus_sigcache_sum16_fn locus_sigcache_sum16_pick(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") ? sum16_avx2 : sum16_scalar;
}

locus_sigcache_sum_fn locus_sigcache_sum_pick(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") ? sum_avx2 : sum_scalar;
}
