/* SPDX-License-Identifier: MIT */
/* CRC32C's portable path alone (not installed, not exported). */
#ifndef LOCUS_CRC32C_PRIV_H
#define LOCUS_CRC32C_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "locus_crc32c.h"

/* The portable path alone, for tests and benchmarks. */
uint32_t locus_crc32c_sw_update(uint32_t crc, const void *buf, size_t len);

#endif /* LOCUS_CRC32C_PRIV_H */
