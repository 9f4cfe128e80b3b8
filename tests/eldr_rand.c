// SPDX-License-Identifier: MIT
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "eldr_rand.h"
#include "locus_eldr.h"

void er_unit_centroid(float *c, uint32_t L, uint32_t E, const uint8_t *mask, uint32_t *seed)
{
	double n2 = 0;

	for (uint32_t f = 0; f < L * E; f++) {
		uint32_t r = er_next(seed);

		if (mask[f / E])
			c[f] = (float)r / 65536.0f;
		n2 += (double)c[f] * c[f];
	}
	for (uint32_t f = 0; f < L * E; f++)
		c[f] = (float)(c[f] / sqrt(n2));
}

uint16_t *er_random_sig(void *buf, size_t len, uint16_t L, uint16_t E, uint32_t m,
			uint32_t *seed)
{
	struct locus_eldr_sig_hdr *h = buf;
	uint16_t *cnt = (uint16_t *)(h + 1);

	memset(buf, 0, len);
	h->magic = LOCUS_ELDR_SIG_MAGIC;
	h->version = LOCUS_ELDR_SIG_VERSION;
	h->n_layers = L;
	h->n_experts = E;
	for (uint32_t f = 0; f < (uint32_t)L * E; f++)
		cnt[f] = (uint16_t)(er_next(seed) % m);
	return cnt;
}
