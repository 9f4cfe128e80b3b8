// SPDX-License-Identifier: MIT
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "trace_json.h"

void tj_init(struct tj *j, const char *buf, size_t len, const char *name, uint32_t line,
	     struct locus_error *err)
{
	j->p = buf;
	j->end = buf + len;
	j->line_start = buf;
	j->line = line;
	j->name = name ? name : "<input>";
	j->err = err;
}

int tj_fail(struct tj *j, int code, const char *fmt, ...)
{
	char msg[LOCUS_ERRMSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return locus_error_set(j->err, code, "%.100s:%u:%zu: %s", j->name, j->line,
			       (size_t)(j->p - j->line_start) + 1, msg);
}

void tj_ws(struct tj *j)
{
	while (j->p < j->end) {
		char c = *j->p;

		if (c == '\n') {
			j->line++;
			j->line_start = j->p + 1;
		} else if (c != ' ' && c != '\t' && c != '\r') {
			return;
		}
		j->p++;
	}
}

int tj_peek(struct tj *j)
{
	tj_ws(j);
	return j->p < j->end ? (unsigned char)*j->p : -1;
}

static const char *found(struct tj *j)
{
	static __thread char buf[16];
	unsigned char c;

	if (j->p >= j->end)
		return "end of line";
	c = (unsigned char)*j->p;
	if (c < 0x20 || c >= 0x7f)
		snprintf(buf, sizeof(buf), "byte 0x%02x", c);
	else
		snprintf(buf, sizeof(buf), "'%c'", c);
	return buf;
}

int tj_expect(struct tj *j, char c, const char *what)
{
	if (tj_peek(j) != (unsigned char)c)
		return tj_fail(j, LOCUS_EPARSE, "expected %s, found %s", what, found(j));
	j->p++;
	return 0;
}

int tj_next(struct tj *j, char closer)
{
	int c = tj_peek(j);

	if (c == ',') {
		j->p++;
		return 1;
	}
	if (c == (unsigned char)closer) {
		j->p++;
		return 0;
	}
	return tj_fail(j, LOCUS_EPARSE, "expected ',' or '%c', found %s", closer, found(j));
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int put(struct tj *j, char *out, size_t cap, size_t *n, const char *bytes, size_t len)
{
	if (!out)
		return 0;
	if (*n + len + 1 > cap)
		return tj_fail(j, LOCUS_ERANGE, "string longer than %zu bytes", cap - 1);
	memcpy(out + *n, bytes, len);
	*n += len;
	out[*n] = '\0';
	return 0;
}

static int read_hex4(struct tj *j, unsigned *cp)
{
	*cp = 0;
	for (int i = 0; i < 4; i++) {
		int h = (j->p < j->end) ? hexval(*j->p) : -1;

		if (h < 0)
			return tj_fail(j, LOCUS_EPARSE, "bad \\u escape");
		*cp = *cp * 16 + (unsigned)h;
		j->p++;
	}
	return 0;
}

static int escape(struct tj *j, char *out, size_t cap, size_t *n)
{
	static const char simple_in[] = "\"\\/bfnrt";
	static const char simple_out[] = "\"\\/\b\f\n\r\t";
	const char *s;
	unsigned cp, lo;
	char u[4];
	size_t len;
	int ret;

	if (j->p >= j->end)
		return tj_fail(j, LOCUS_EPARSE, "unterminated string");
	s = strchr(simple_in, *j->p);
	if (s && *j->p) {
		j->p++;
		return put(j, out, cap, n, &simple_out[s - simple_in], 1);
	}
	if (*j->p != 'u')
		return tj_fail(j, LOCUS_EPARSE, "bad escape \\%c", *j->p);
	j->p++;
	ret = read_hex4(j, &cp);
	if (ret < 0)
		return ret;
	if (cp >= 0xd800 && cp < 0xdc00) {
		if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
			return tj_fail(j, LOCUS_EPARSE, "unpaired surrogate in \\u escape");
		j->p += 2;
		ret = read_hex4(j, &lo);
		if (ret < 0)
			return ret;
		if (lo < 0xdc00 || lo >= 0xe000)
			return tj_fail(j, LOCUS_EPARSE, "unpaired surrogate in \\u escape");
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
	} else if (cp >= 0xdc00 && cp < 0xe000) {
		return tj_fail(j, LOCUS_EPARSE, "unpaired surrogate in \\u escape");
	}
	if (cp == 0 && out) /* a C string cannot hold it; a skipped string may */
		return tj_fail(j, LOCUS_EPARSE, "NUL character in string");
	if (cp < 0x80) {
		u[0] = (char)cp;
		len = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3f));
		len = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		len = 3;
	} else {
		u[0] = (char)(0xf0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		len = 4;
	}
	return put(j, out, cap, n, u, len);
}

/*
 * Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF), or 0.
 */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
	size_t n;
	uint32_t cp;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2, cp = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3, cp = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4, cp = p[0] & 0x07;
	else
		return 0;
	if ((size_t)(end - p) < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))) ||
	    (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return n;
}

int tj_string(struct tj *j, char *out, size_t cap)
{
	size_t n = 0;
	int ret;

	ret = tj_expect(j, '"', "a string");
	if (ret < 0)
		return ret;
	if (out && cap)
		out[0] = '\0';
	while (j->p < j->end) {
		unsigned char c = (unsigned char)*j->p;

		if (c == '"') {
			j->p++;
			return 0;
		}
		if (c < 0x20)
			return tj_fail(j, LOCUS_EPARSE, "control character 0x%02x in string", c);
		if (c >= 0x80) {
			size_t u = utf8_len((const unsigned char *)j->p,
					    (const unsigned char *)j->end);

			if (!u)
				return tj_fail(j, LOCUS_EPARSE, "invalid UTF-8 in string");
			ret = put(j, out, cap, &n, j->p, u);
			j->p += u;
			if (ret < 0)
				return ret;
			continue;
		}
		j->p++;
		if (c == '\\')
			ret = escape(j, out, cap, &n);
		else
			ret = put(j, out, cap, &n, (const char *)&c, 1);
		if (ret < 0)
			return ret;
	}
	return tj_fail(j, LOCUS_EPARSE, "unterminated string");
}

static int is_digit(const struct tj *j)
{
	return j->p < j->end && *j->p >= '0' && *j->p <= '9';
}

/* Checks the JSON number grammar and returns its length. */
static int number_span(struct tj *j, size_t *len, int *is_int)
{
	const char *s = j->p, *q = j->p;

	*is_int = 1;
	if (q < j->end && *q == '-')
		q++;
	if (q >= j->end || *q < '0' || *q > '9') {
		const char *w = q;

		if ((j->end - w >= 3 && (!strncmp(w, "NaN", 3) || !strncmp(w, "nan", 3))) ||
		    (j->end - w >= 3 && (!strncmp(w, "Inf", 3) || !strncmp(w, "inf", 3))))
			return tj_fail(j, LOCUS_ENAN, "NaN/Infinity are not JSON numbers");
		return tj_fail(j, LOCUS_EPARSE, "expected a number, found %s", found(j));
	}
	if (*q == '0' && q + 1 < j->end && q[1] >= '0' && q[1] <= '9')
		return tj_fail(j, LOCUS_EPARSE, "leading zero in number");
	while (q < j->end && *q >= '0' && *q <= '9')
		q++;
	if (q < j->end && *q == '.') {
		*is_int = 0;
		q++;
		if (q >= j->end || *q < '0' || *q > '9')
			return tj_fail(j, LOCUS_EPARSE, "digit expected after '.'");
		while (q < j->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < j->end && (*q == 'e' || *q == 'E')) {
		*is_int = 0;
		q++;
		if (q < j->end && (*q == '+' || *q == '-'))
			q++;
		if (q >= j->end || *q < '0' || *q > '9')
			return tj_fail(j, LOCUS_EPARSE, "digit expected in exponent");
		while (q < j->end && *q >= '0' && *q <= '9')
			q++;
	}
	*len = (size_t)(q - s);
	return 0;
}

int tj_uint(struct tj *j, uint64_t max, uint64_t *v)
{
	uint64_t x = 0;

	tj_ws(j);
	if (j->p < j->end && *j->p == '-') {
		size_t len;
		int is_int, ret = number_span(j, &len, &is_int);

		if (ret < 0)
			return ret;
		return tj_fail(j, LOCUS_ERANGE, "negative value where a count or id is expected");
	}
	if (!is_digit(j)) {
		size_t len;
		int is_int, ret = number_span(j, &len, &is_int);

		return ret < 0 ? ret : tj_fail(j, LOCUS_EPARSE, "expected an integer");
	}
	if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
		return tj_fail(j, LOCUS_EPARSE, "leading zero in number");
	while (is_digit(j)) {
		unsigned d = (unsigned)(*j->p - '0');

		if (x > (UINT64_MAX - d) / 10 || x * 10 + d > max)
			return tj_fail(j, LOCUS_ERANGE, "integer larger than %llu",
				       (unsigned long long)max);
		x = x * 10 + d;
		j->p++;
	}
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
		return tj_fail(j, LOCUS_EPARSE,
			       "expected an integer, found a fraction or exponent");
	*v = x;
	return 0;
}

int tj_number(struct tj *j, double *v)
{
	char buf[64];
	size_t len;
	int is_int, ret;

	tj_ws(j);
	ret = number_span(j, &len, &is_int);
	if (ret < 0)
		return ret;
	if (len >= sizeof(buf))
		return tj_fail(j, LOCUS_ERANGE, "number longer than %zu characters",
			       sizeof(buf) - 1);
	memcpy(buf, j->p, len);
	buf[len] = '\0';
	errno = 0;
	*v = strtod(buf, NULL);
	if (!isfinite(*v))
		return tj_fail(j, LOCUS_ERANGE, "number out of range");
	j->p += len;
	return 0;
}

int tj_null(struct tj *j)
{
	if (tj_peek(j) == 'n' && j->end - j->p >= 4 && !strncmp(j->p, "null", 4)) {
		j->p += 4;
		return 1;
	}
	return 0;
}

static int literal(struct tj *j, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(j->end - j->p) < n || strncmp(j->p, w, n))
		return tj_fail(j, LOCUS_EPARSE, "unexpected %s", found(j));
	j->p += n;
	return 0;
}

static int skip_depth(struct tj *j, int depth)
{
	size_t len;
	int c, ret, more, is_int;

	if (depth > TJ_MAX_DEPTH)
		return tj_fail(j, LOCUS_ERANGE, "nesting deeper than %d", TJ_MAX_DEPTH);
	c = tj_peek(j);
	switch (c) {
	case '{':
		j->p++;
		if (tj_peek(j) == '}') {
			j->p++;
			return 0;
		}
		do {
			ret = tj_string(j, NULL, 0);
			if (ret < 0)
				return ret;
			ret = tj_expect(j, ':', "':'");
			if (ret < 0)
				return ret;
			ret = skip_depth(j, depth + 1);
			if (ret < 0)
				return ret;
			more = tj_next(j, '}');
			if (more < 0)
				return more;
		} while (more);
		return 0;
	case '[':
		j->p++;
		if (tj_peek(j) == ']') {
			j->p++;
			return 0;
		}
		do {
			ret = skip_depth(j, depth + 1);
			if (ret < 0)
				return ret;
			more = tj_next(j, ']');
			if (more < 0)
				return more;
		} while (more);
		return 0;
	case '"':
		return tj_string(j, NULL, 0);
	case 't':
		return literal(j, "true");
	case 'f':
		return literal(j, "false");
	case 'n':
		return literal(j, "null");
	default:
		/* any JSON number: its grammar only (a skipped value is never converted) */
		ret = number_span(j, &len, &is_int);
		if (ret == 0)
			j->p += len;
		return ret;
	}
}

int tj_skip(struct tj *j)
{
	return skip_depth(j, 0);
}

void tj_put_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}
