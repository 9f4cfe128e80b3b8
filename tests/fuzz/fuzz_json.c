// SPDX-License-Identifier: MIT
/*
 * The strict JSON reader under the trace importer and the ESFT tools
 * (control/trace_json.h: tj_skip, tj_string, tj_number), against the
 * independent strict parser of the tests (tests/mini_json.c) on the same
 * text. Contract: what tj accepts is one RFC 8259 value that the other
 * parser accepts too, ending at the same byte; a top-level number reads as
 * the same double (or is refused as out of a double's range, which only
 * tj_number may do) and a top-level string of ASCII as the same bytes; what
 * the other parser accepts tj accepts too, unless it is what locus_trace.h
 * refuses on purpose (ill-formed UTF-8, an unpaired surrogate escape,
 * nesting deeper than TJ_MAX_DEPTH).
 */
#include <math.h>

#include "fuzz.h"
#include "../mini_json.h"
#include "trace_json.h"

/* Whether s (n bytes) is well-formed UTF-8 (RFC 3629). */
static int utf8_ok(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 :
			   (c >> 3) == 30 ? 4 : 0;
		uint32_t cp;

		if (!k || i + k > n)
			return 0;
		cp = k == 1 ? c : c & (0x7f >> k);
		for (size_t j = 1; j < k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i + j] & 0x3f);
		}
		if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
			return 0;
		i += k;
	}
	return 1;
}

/* Refused on purpose by tj: any \u escape of a surrogate, or deep nesting. */
static int tj_may_refuse(const char *s, size_t n)
{
	size_t open = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '[' || s[i] == '{')
			open++;
		if (s[i] == '\\' && i + 2 < n && s[i + 1] == 'u' &&
		    (s[i + 2] == 'd' || s[i + 2] == 'D'))
			return 1;
	}
	return open >= TJ_MAX_DEPTH || !utf8_ok((const unsigned char *)s, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t n = size;
	const char *nul = memchr(data, 0, size), *end = NULL;
	struct locus_error err = { 0 };
	struct mj_val v = { 0 };
	char *text;
	struct tj j;
	int tj_ok, mj_ok;

	if (nul)
		n = (size_t)(nul - (const char *)data);
	text = malloc(n + 1);
	if (!text)
		abort();
	memcpy(text, data, n);
	text[n] = 0;
	tj_init(&j, text, n, "json", 1, &err);
	tj_ok = tj_skip(&j);
	if (tj_ok < 0)
		FUZZ_CHECK(err.msg[0], "refusal without a message");
	tj_ok = tj_ok == 0 && tj_peek(&j) == -1;
	mj_ok = mj_parse(text, &v, &end) == 0;
	if (mj_ok) {
		while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')
			end++;
		mj_ok = *end == 0;
	}
	FUZZ_CHECK(!tj_ok || mj_ok, "tj accepts what the reference parser refuses: %.200s", text);
	if (mj_ok && !tj_may_refuse(text, n))
		FUZZ_CHECK(tj_ok, "tj refuses a valid value (%s): %.200s", err.msg, text);
	if (tj_ok && v.t == MJ_NUM) {
		double d;

		int r;

		tj_init(&j, text, n, "json", 1, &err);
		r = tj_number(&j, &d);
		if (r == -LOCUS_ERANGE)
			FUZZ_CHECK(!isfinite(v.num) || strlen(v.s) >= 64,
				   "number %s refused as out of range", v.s);
		else
			FUZZ_CHECK(r == 0 && d == v.num, "number %s reads %g, the reference %g",
				   v.s, d, v.num);
	}
	if (tj_ok && v.t == MJ_STR) {
		static char out[1 << 16];
		int ascii = 1;

		for (const char *p = v.s; *p; p++)
			ascii &= *p != '?' && (unsigned char)*p < 0x80;
		tj_init(&j, text, n, "json", 1, &err);
		if (tj_string(&j, out, sizeof(out)) == 0 && ascii)
			FUZZ_CHECK(!strcmp(out, v.s), "string decodes as '%.100s', the reference "
				   "'%.100s'", out, v.s);
	}
	mj_free(&v);
	free(text);
	return 0;
}
