/* SPDX-License-Identifier: MIT */
/*
 * The GRACE table as locusctl builds it and as locusd's table channel
 * takes it (not installed, not exported). The format and its validators
 * are locus_grace.h.
 */
#ifndef LOCUS_GRACE_PRIV_H
#define LOCUS_GRACE_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"
#include "locus_grace.h"

/*
 * A group map (CSR: rank r holds members[start[r] .. start[r+1]-1]) to a
 * primary[E] array. Rejects an expert id >= E, an expert placed twice, an
 * expert placed nowhere, and start[] not monotone or not ending at E.
 */
int locus_grace_groups_to_primary(uint32_t n_experts, uint32_t n_ranks, const uint32_t *start,
				  const uint16_t *members, uint16_t *primary,
				  struct locus_error *err);

/* The segment's table channel that carries GRACE tables. */
#define LOCUS_GRACE_TABLE_CHANNEL 1u

/* locus_grace_blob_check with the table channel's validate signature. */
int locus_grace_table_validate_cb(const void *blob, size_t len, void *arg,
				  struct locus_error *err);

#endif /* LOCUS_GRACE_PRIV_H */
