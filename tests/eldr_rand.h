/* SPDX-License-Identifier: MIT */
/*
 * Random ELDR tables and signatures for the router tests, from the tests'
 * one LCG (seed = seed * 1103515245 + 12345, the high 16 bits drawn), so a
 * test's data depends on its seed alone.
 */
#ifndef LOCUS_TEST_ELDR_RAND_H
#define LOCUS_TEST_ELDR_RAND_H

#include <stdint.h>

/* The next 16 random bits. */
static inline uint32_t er_next(uint32_t *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return *seed >> 16;
}

/*
 * A centroid c of L x E: uniform in [0, 1) on the masked layers (a draw
 * for every element, masked or not; the others left as they are), then
 * scaled to unit length.
 */
void er_unit_centroid(float *c, uint32_t L, uint32_t E, const uint8_t *mask, uint32_t *seed);

/*
 * A valid signature of L x E in buf (zeroed first, len bytes, at least
 * locus_eldr_sig_len(L, E)), every count a draw mod m; returns the counts.
 */
uint16_t *er_random_sig(void *buf, size_t len, uint16_t L, uint16_t E, uint32_t m,
			uint32_t *seed);

#endif /* LOCUS_TEST_ELDR_RAND_H */
