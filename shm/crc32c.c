// SPDX-License-Identifier: MIT
#include <pthread.h>
#include <string.h>

#include "locus_common.h"
#include "locus_crc32c.h"
#include "locus_crc32c_priv.h"

#define CRC32C_POLY_REFLECTED 0x82f63b78u

static uint32_t crc32c_table[8][256];
static pthread_once_t crc32c_table_once = PTHREAD_ONCE_INIT;

static void crc32c_table_init(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;

		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (CRC32C_POLY_REFLECTED & (0u - (c & 1)));
		crc32c_table[0][n] = c;
	}
	for (uint32_t n = 0; n < 256; n++)
		for (int t = 1; t < 8; t++)
			crc32c_table[t][n] = (crc32c_table[t - 1][n] >> 8) ^
					     crc32c_table[0][crc32c_table[t - 1][n] & 0xff];
}

/* Operates on the internal (pre-inverted) register value. */
static uint32_t crc32c_sw_raw(uint32_t c, const uint8_t *p, size_t len)
{
	pthread_once(&crc32c_table_once, crc32c_table_init);
	while (len && ((uintptr_t)p & 7)) {
		c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xff];
		len--;
	}
	while (len >= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		w ^= c;
		c = crc32c_table[7][w & 0xff] ^ crc32c_table[6][(w >> 8) & 0xff] ^
		    crc32c_table[5][(w >> 16) & 0xff] ^ crc32c_table[4][(w >> 24) & 0xff] ^
		    crc32c_table[3][(w >> 32) & 0xff] ^ crc32c_table[2][(w >> 40) & 0xff] ^
		    crc32c_table[1][(w >> 48) & 0xff] ^ crc32c_table[0][w >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xff];
	return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw_raw(uint32_t c, const uint8_t *p, size_t len)
{
	uint64_t c64 = c;

	while (len && ((uintptr_t)p & 7)) {
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
		len--;
	}
	while (len >= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		c64 = __builtin_ia32_crc32di(c64, w);
		p += 8;
		len -= 8;
	}
	while (len--)
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
	return (uint32_t)c64;
}
#endif

uint32_t locus_crc32c_sw_update(uint32_t crc, const void *buf, size_t len)
{
	return ~crc32c_sw_raw(~crc, buf, len);
}

uint32_t locus_crc32c_update(uint32_t crc, const void *buf, size_t len)
{
#if defined(__x86_64__)
	static int have_sse42 = -1;

	int have = __atomic_load_n(&have_sse42, __ATOMIC_RELAXED);

	if (unlikely(have < 0)) {
		have = __builtin_cpu_supports("sse4.2") ? 1 : 0;
		__atomic_store_n(&have_sse42, have, __ATOMIC_RELAXED);
	}
	if (likely(have))
		return ~crc32c_hw_raw(~crc, buf, len);
#endif
	return ~crc32c_sw_raw(~crc, buf, len);
}

uint32_t locus_crc32c(const void *buf, size_t len)
{
	return locus_crc32c_update(0, buf, len);
}
