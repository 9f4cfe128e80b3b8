/* SPDX-License-Identifier: MIT */
/*
 * Error codes and error reports.
 *
 * Functions return 0 (or a count) on success and a negative code on failure:
 * either -errno or -LOCUS_E*. locus_strerror() names both.
 *
 * Validation code that can say *what* is wrong also fills a struct
 * locus_error (optional: callers may pass NULL) with a message such as
 * "decoder id 17 at index 3 >= K=16".
 */
#ifndef LOCUS_ERR_H
#define LOCUS_ERR_H

#include <stddef.h>

enum locus_errcode {
	LOCUS_E_BASE = 1000,
	LOCUS_EBADMAGIC,      /* object does not start with the expected magic */
	LOCUS_EVERSION,       /* ABI / format / protocol version mismatch */
	LOCUS_ETRUNCATED,     /* object shorter than its header says or needs */
	LOCUS_EWORLDWRITABLE, /* shared object writable by anyone: refused */
	LOCUS_EFOREIGN,       /* shared object owned by another user */
	LOCUS_ECRC,           /* checksum mismatch */
	LOCUS_ERANGE,         /* a value (id, size, count) out of its range */
	LOCUS_ENAN,           /* NaN or infinity in float data */
	LOCUS_EFULL,          /* ring or table full */
	LOCUS_ENODEST,        /* no destination available (all decoders down) */
	LOCUS_EPEERDOWN,      /* peer is down */
	LOCUS_EAUTH,          /* cluster secret mismatch */
	LOCUS_EPROTO,         /* protocol violation by a peer or client */
	LOCUS_EPARSE,         /* malformed text input (JSON, config) */
	LOCUS_ESTATE,         /* object in the wrong state for the operation */
	LOCUS_ESTALEPLACEMENT, /* rows planned under a placement the rank does not hold */
	LOCUS_E_END
};

#define LOCUS_ERRMSG_MAX 256

struct locus_error {
	int code;                     /* positive: errno or LOCUS_E* */
	char msg[LOCUS_ERRMSG_MAX];
};

/* Name of -code or code (errno or LOCUS_E*). Never NULL. */
const char *locus_strerror(int code);

/* Reset err (may be NULL). */
void locus_error_clear(struct locus_error *err);

#endif /* LOCUS_ERR_H */
