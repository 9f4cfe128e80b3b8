/* SPDX-License-Identifier: MIT */
/* Internals of the ELDR fit shared between its files. */
#ifndef LOCUS_ELDR_FIT_PRIV_H
#define LOCUS_ELDR_FIT_PRIV_H

#include <stdint.h>

#include "locus_eldrfit.h"

/*
 * Greedy layer mask over S requests: pre/target [S][L][E] counts, idf
 * [L][E]. Writes mask[L] (0/1) and the scores (definition in
 * locus_eldrfit.h). Returns 0, -EINVAL (S < 2), -ENOMEM.
 */
int eldr_select_mask(const uint16_t *pre, const uint16_t *target, uint32_t S, uint16_t L,
		     uint16_t E, const float *idf, uint32_t nn, uint8_t *mask, float *mask_score,
		     float *full_score, locus_eldrfit_progress_fn progress, void *progress_arg);

#endif /* LOCUS_ELDR_FIT_PRIV_H */
