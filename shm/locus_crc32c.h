/* SPDX-License-Identifier: MIT */
/*
 * CRC32C (Castagnoli), as iSCSI and ext4 use it: init ~0, final xor ~0.
 * SSE4.2 instruction when the CPU has it (chosen once at run time), a
 * slicing-by-8 table otherwise; both give identical results.
 */
#ifndef LOCUS_CRC32C_H
#define LOCUS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C of buf[0..len). */
uint32_t locus_crc32c(const void *buf, size_t len);

/* Continue a CRC: crc = locus_crc32c_update(crc, ...) from crc = 0. */
uint32_t locus_crc32c_update(uint32_t crc, const void *buf, size_t len);

#endif /* LOCUS_CRC32C_H */
