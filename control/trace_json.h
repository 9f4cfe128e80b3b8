/* SPDX-License-Identifier: MIT */
/*
 * A small strict JSON reader (RFC 8259) for the trace importer and the tools
 * that check ESFT data: a cursor over a buffer, one call per value kind, and
 * errors that name "<name>:<line>:<col>". No allocation; nesting is bounded.
 * Private to control/ and tools/: not a public module header.
 */
#ifndef LOCUS_TRACE_JSON_H
#define LOCUS_TRACE_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "locus_err.h"

#define TJ_MAX_DEPTH 64

struct tj {
	const char *p;          /* next byte */
	const char *end;        /* one past the last byte */
	const char *line_start; /* for column numbers */
	uint32_t line;          /* 1-based */
	const char *name;       /* file name for messages */
	struct locus_error *err;
};

void tj_init(struct tj *j, const char *buf, size_t len, const char *name, uint32_t line,
	     struct locus_error *err);

/* Record "<name>:<line>:<col>: <msg>" at the cursor; returns -code. */
int tj_fail(struct tj *j, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Write s as a JSON string: quotes, backslashes and control characters escaped; NULL as "". */
void tj_put_string(FILE *f, const char *s);

/* Skip whitespace (newlines advance the line count). */
void tj_ws(struct tj *j);

/* After whitespace: the next byte, or -1 at the end. */
int tj_peek(struct tj *j);

/* After whitespace: consume byte c or fail naming what was found. */
int tj_expect(struct tj *j, char c, const char *what);

/*
 * Inside an array or object after its first element: consume ',' and return
 * 1, or consume the closer and return 0, or fail.
 */
int tj_next(struct tj *j, char closer);

/*
 * A string into out (NUL-terminated, UTF-8; \u escapes and surrogate pairs decoded). Fails
 * with -LOCUS_ERANGE if it does not fit in cap bytes, -LOCUS_EPARSE for a \u0000 (a C
 * string cannot hold it). out NULL: validate only (\u0000 is then a character like any).
 */
int tj_string(struct tj *j, char *out, size_t cap);

/* A non-negative integer <= max (no fraction, no exponent, no sign). */
int tj_uint(struct tj *j, uint64_t max, uint64_t *v);

/*
 * Any JSON number as a double; NaN/Infinity are not JSON and are rejected by
 * name; -LOCUS_ERANGE for a number longer than 63 characters or beyond a
 * double's range.
 */
int tj_number(struct tj *j, double *v);

/* The literal null: returns 1 and consumes it, else 0. */
int tj_null(struct tj *j);

/*
 * Skip one value of any kind, validating it; a number by its grammar only
 * (any length or magnitude: it is never converted).
 */
int tj_skip(struct tj *j);

#endif /* LOCUS_TRACE_JSON_H */
