// SPDX-License-Identifier: MIT
/*
 * Calibration traces (JSON Lines) through locus_trace_parse, what
 * `locusctl fit` and the ELDR/GRACE tools load. Contract, from
 * locus_trace.h: an accepted trace keeps its shape rules (ids < E, every
 * request has prompt tokens, gen NULL exactly when empty); every line it
 * accepted is strict JSON (checked with the module's own validating
 * skipper, tj_skip); written back with locus_trace_write it loads to the
 * same trace; and an unknown key of any length added to each object is
 * skipped (the same trace again).
 * LOCUS_FUZZ_SKIP names honoured: trace_json (the strict-JSON check),
 * trace_keys (the unknown-key check).
 */
#include <unistd.h>

#include "fuzz.h"
#include "fuzz_known.h"
#include "fuzz_trace_common.h"
#include "locus_trace.h"
#include "trace_json.h"

static const struct locus_trace_opts opts = { .max_requests = 4096, .max_tokens = 4096 };
static char dir[64], path[96];

static void cleanup(void)
{
	unlink(path);
	rmdir(dir);
}

/* Every non-blank line the parser accepted is one strict JSON value. */
static void check_json(const char *buf, size_t len)
{
	const char *p = buf, *end = buf + len;
	uint32_t line = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
		struct locus_error err = { 0 };
		struct tj j;

		tj_init(&j, p, (size_t)(le - p), "line", ++line, &err);
		if (tj_peek(&j) != -1) {
			FUZZ_CHECK(tj_skip(&j) == 0 && tj_peek(&j) == -1,
				   "line %u was accepted but is not one JSON value: %s", line,
				   err.msg);
		}
		p = nl ? nl + 1 : end;
	}
}

/* The input with "<40 x k>":[1,{"a":null}] added first in every object line. */
static char *with_unknown_keys(const char *buf, size_t len, size_t *out_len)
{
	static const char key[] = "\"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\":[1,{\"a\":null}],";
	char *o = malloc(len * 2 + sizeof(key) * (len + 1)), *w = o;
	const char *p = buf, *end = buf + len;

	if (!o)
		abort();
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
		const char *q = p;

		while (q < le && (*q == ' ' || *q == '\t' || *q == '\r'))
			q++;
		memcpy(w, p, (size_t)(q - p));
		w += q - p;
		if (q < le && *q == '{') {
			*w++ = '{';
			memcpy(w, key, sizeof(key) - 1);
			w += sizeof(key) - 1;
			q++;
		}
		memcpy(w, q, (size_t)(le - q));
		w += le - q;
		if (nl)
			*w++ = '\n';
		p = nl ? nl + 1 : end;
	}
	*out_len = (size_t)(w - o);
	return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct locus_trace *t = NULL, *t2 = NULL;
	struct locus_error err = { 0 };
	char *buf = fuzz_dup(data, size), *keyed;
	size_t klen;
	int ret;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/dev/shm/locus-fuzz-trace-XXXXXX");
		if (!mkdtemp(dir))
			abort();
		snprintf(path, sizeof(path), "%s/t.jsonl", dir);
		atexit(cleanup);
	}
	ret = locus_trace_parse(buf, size, "fuzz", &opts, &t, &err);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal %d without a message", ret);
		goto out;
	}
	FUZZ_CHECK(ret == 0 && t, "parse returned %d", ret);
	ftc_check_shape(t);
	if (!fuzz_skip("trace_json"))
		check_json(buf, size);
	ret = locus_trace_write(t, path, &err);
	FUZZ_CHECK(ret == 0, "write: %s", err.msg);
	ret = locus_trace_load(path, &opts, &t2, &err);
	FUZZ_CHECK(ret == 0, "the trace written back does not load: %s", err.msg);
	FUZZ_CHECK(ftc_same(t, t2), "the trace written back loads differently");
	locus_trace_free(t2);
	t2 = NULL;
	if (!fuzz_skip("trace_keys")) {
		keyed = with_unknown_keys(buf, size, &klen);
		ret = locus_trace_parse(keyed, klen, "keyed", &opts, &t2, &err);
		FUZZ_CHECK(ret == 0, "an unknown 40-byte key is not skipped: %s", err.msg);
		FUZZ_CHECK(ftc_same(t, t2), "an unknown key changed the trace");
		free(keyed);
	}
out:
	locus_trace_free(t);
	locus_trace_free(t2);
	free(buf);
	return 0;
}
