/* SPDX-License-Identifier: MIT */
/* Filling a struct locus_error: locus's own code only (not installed, not exported). */
#ifndef LOCUS_ERR_PRIV_H
#define LOCUS_ERR_PRIV_H

#include "locus_err.h"

/*
 * Record an error with a printf-style detail; returns -code so validators can
 * `return locus_error_set(err, LOCUS_ERANGE, "...", ...);`. err may be NULL.
 */
int locus_error_set(struct locus_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif /* LOCUS_ERR_PRIV_H */
