// SPDX-License-Identifier: MIT
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err.h"
#include "locus_err_priv.h"

static const char *const locus_errnames[LOCUS_E_END - LOCUS_E_BASE] = {
	[LOCUS_EBADMAGIC - LOCUS_E_BASE] = "bad magic",
	[LOCUS_EVERSION - LOCUS_E_BASE] = "version mismatch",
	[LOCUS_ETRUNCATED - LOCUS_E_BASE] = "truncated or too small",
	[LOCUS_EWORLDWRITABLE - LOCUS_E_BASE] = "world-writable: refused",
	[LOCUS_EFOREIGN - LOCUS_E_BASE] = "owned by another user: refused",
	[LOCUS_ECRC - LOCUS_E_BASE] = "checksum mismatch",
	[LOCUS_ERANGE - LOCUS_E_BASE] = "value out of range",
	[LOCUS_ENAN - LOCUS_E_BASE] = "NaN or infinity in data",
	[LOCUS_EFULL - LOCUS_E_BASE] = "full",
	[LOCUS_ENODEST - LOCUS_E_BASE] = "no destination available",
	[LOCUS_EPEERDOWN - LOCUS_E_BASE] = "peer down",
	[LOCUS_EAUTH - LOCUS_E_BASE] = "authentication failed",
	[LOCUS_EPROTO - LOCUS_E_BASE] = "protocol error",
	[LOCUS_EPARSE - LOCUS_E_BASE] = "parse error",
	[LOCUS_ESTATE - LOCUS_E_BASE] = "wrong state",
	[LOCUS_ESTALEPLACEMENT - LOCUS_E_BASE] =
		"rows planned under a placement the rank does not hold",
};

const char *locus_strerror(int code)
{
	if (code < 0)
		code = -code;
	if (code > LOCUS_E_BASE && code < LOCUS_E_END)
		return locus_errnames[code - LOCUS_E_BASE];
	if (code == 0)
		return "success";
	return strerror(code);
}

int locus_error_set(struct locus_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (code < 0)
		code = -code;
	if (err) {
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return -code;
}

void locus_error_clear(struct locus_error *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}
