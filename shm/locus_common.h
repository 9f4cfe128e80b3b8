/* SPDX-License-Identifier: MIT */
/*
 * Small definitions every locus module shares: cache-line alignment,
 * branch hints, static assertions. No dependencies beyond libc.
 */
#ifndef LOCUS_COMMON_H
#define LOCUS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define LOCUS_CACHE_LINE 64
#define __locus_cache_aligned __attribute__((aligned(LOCUS_CACHE_LINE)))

#ifndef likely
#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#endif

#define LOCUS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define LOCUS_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)

/* Round x up to a multiple of a (a power of two). */
#define LOCUS_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
#define LOCUS_IS_POW2(x) ((x) != 0 && (((x) & ((x) - 1)) == 0))

#define LOCUS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LOCUS_MAX(a, b) ((a) > (b) ? (a) : (b))

/*
 * splitmix64, one step from state *s: the seeded generator of the fits, the
 * tools' resampling and shuffles and the simulator (fixed seeds give the
 * same figures on every machine).
 */
static inline uint64_t locus_splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A draw in [0, n) from the top 32 bits of a step (multiply and shift, no modulo). */
static inline uint32_t locus_splitmix_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(((locus_splitmix64(s) >> 32) * n) >> 32);
}

#endif /* LOCUS_COMMON_H */
