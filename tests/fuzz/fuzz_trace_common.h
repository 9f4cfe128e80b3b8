/* SPDX-License-Identifier: MIT */
/* Trace checks shared by the JSONL and ESFT fuzz targets. */
#ifndef LOCUS_FUZZ_TRACE_COMMON_H
#define LOCUS_FUZZ_TRACE_COMMON_H

#include "locus_trace.h"

/* The shape rules of locus_trace.h on a loaded trace (FUZZ_CHECK). */
void ftc_check_shape(const struct locus_trace *t);

/* 1 when a and b hold the same requests, ids, domains and shape. */
int ftc_same(const struct locus_trace *a, const struct locus_trace *b);

#endif /* LOCUS_FUZZ_TRACE_COMMON_H */
