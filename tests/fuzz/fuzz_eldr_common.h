/* SPDX-License-Identifier: MIT */
/*
 * Routing checks shared by the ELDR fuzz targets: a decision against the
 * promises of locus_eldr_router.h (a decoder of the table, allowed by the
 * signature's mask, inside the band, or with the table's overflow spread
 * any eligible decoder when the band has none up, or inside the table's
 * spill band), and the same signatures routed one by one and as a batch.
 */
#ifndef LOCUS_FUZZ_ELDR_COMMON_H
#define LOCUS_FUZZ_ELDR_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "locus_eldr_router.h"

/* A router for payload on path, in 64-byte aligned malloc'd memory (*mem), or NULL. */
struct locus_eldr_router *fe_router(const void *payload, size_t len, enum locus_eldr_path path,
				    void **mem);

/*
 * Check decision d (route returned rc) for sig against the router's table
 * view v (its tau, spill and flags). scores: the router's decoder scores
 * for sig; up: each slot's state.
 */
void fe_check_decision(const struct locus_eldr_tbl_view *v, const void *sig, int rc,
		       const struct locus_eldr_decision *d, const float *scores, const uint8_t *up);

/* Write a signature of L x E at buf: weight on expert e (and e + 1); returns its length. */
size_t fe_sig(void *buf, uint16_t L, uint16_t E, uint32_t e, uint64_t allowed);

#endif /* LOCUS_FUZZ_ELDR_COMMON_H */
