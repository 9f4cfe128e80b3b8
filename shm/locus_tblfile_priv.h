/* SPDX-License-Identifier: MIT */
/*
 * Sealing a table blob and writing it to a file: what locusctl and the
 * tests do (not installed, not exported). Checking and reading a blob is
 * locus_tblfile.h.
 */
#ifndef LOCUS_TBLFILE_PRIV_H
#define LOCUS_TBLFILE_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"
#include "locus_tblfile.h"

/*
 * Fill the header at buf for a payload already written at buf + 64 and
 * compute both checksums. buf_len must hold header + payload_len.
 * Returns 0 or -EINVAL / -LOCUS_ERANGE.
 */
int locus_tbl_seal(void *buf, size_t buf_len, unsigned kind, uint32_t kind_version,
		   size_t payload_len);

/*
 * Stamp a sealed blob of len bytes with the cluster-wide generation it was
 * stored under and reseal its header (the payload is untouched). Returns 0
 * or -LOCUS_ERANGE when len cannot hold a header.
 */
int locus_tbl_set_generation(void *buf, size_t len, uint64_t generation);

/* Write a sealed blob to path atomically (temp file, fsync, rename). */
int locus_tbl_write_file(const char *path, const void *buf, size_t len,
			 struct locus_error *err);

#endif /* LOCUS_TBLFILE_PRIV_H */
