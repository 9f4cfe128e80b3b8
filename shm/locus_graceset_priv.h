/* SPDX-License-Identifier: MIT */
/*
 * The GRACE placement set as locusctl builds it and as locusd's table
 * channel takes it (not installed, not exported). The format and its
 * validators are locus_graceset.h.
 */
#ifndef LOCUS_GRACESET_PRIV_H
#define LOCUS_GRACESET_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"
#include "locus_graceset.h"

/* What a set is built from: per group its tag, range and sealed GRACE blob. */
struct locus_graceset_part {
	uint32_t group_id;
	uint32_t decoder_id;
	uint32_t first_rank;
	uint32_t n_ranks;
	const void *blob;             /* sealed GRACE blob */
	size_t blob_len;
};

/*
 * Build a sealed set blob (*blob malloc'd) from n parts, in the order
 * given, with the header's shape taken from the first part's table. Checks
 * the result with locus_graceset_blob_check (so a part list with a missing
 * group or overlapping ranges is refused here too; tests that need such a
 * blob use locus_graceset_build_unchecked).
 */
int locus_graceset_build(const struct locus_graceset_part *parts, uint32_t n, void **blob,
			 size_t *blob_len, struct locus_error *err);
int locus_graceset_build_unchecked(const struct locus_graceset_part *parts, uint32_t n,
				   void **blob, size_t *blob_len, struct locus_error *err);

/* locus_graceset_blob_check with the table channel's validate signature. */
int locus_graceset_table_validate_cb(const void *blob, size_t len, void *arg,
				     struct locus_error *err);

#endif /* LOCUS_GRACESET_PRIV_H */
