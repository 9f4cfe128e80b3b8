/* SPDX-License-Identifier: MIT */
/* Reading a whole small file (tables, traces, configs), with a bound. */
#ifndef LOCUS_FILE_H
#define LOCUS_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

/*
 * Read the regular file at path (at most max bytes, else -LOCUS_ERANGE) into
 * a malloc'd buffer with a NUL after the data; the caller frees *buf.
 * Errors name the path in err.
 */
int locus_file_read(const char *path, uint64_t max, char **buf, size_t *len,
		    struct locus_error *err);

#endif /* LOCUS_FILE_H */
