// SPDX-License-Identifier: MIT
/* The JSONL trace importer: shapes, the n_experts rules, and every error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_trace.h"

static int parse(const char *s, uint32_t n_experts, struct locus_trace **t,
		 struct locus_error *e)
{
	struct locus_trace_opts o = { .n_experts = n_experts };

	locus_error_clear(e);
	return locus_trace_parse(s, strlen(s), "t.jsonl", &o, t, e);
}

static void test_good_trace(void **state)
{
	const char *s =
		"{\"locus_trace\":1,\"n_layers\":2,\"k\":2,\"n_experts\":8}\n"
		"\n"
		"{\"id\":\"a\",\"domain\":\"law\",\"prompt_routed_experts\":[[[0,1],[2,3]],[[4,5],[6,7]]],"
		"\"routed_experts\":[[[7,6],[5,4]]],\"extra\":{\"x\":[1,2.5e3,null,true,\"s\\u00e9\"]}}\r\n"
		"  {\"prompt_routed_experts\":[[[1,1],[2,2]]],\"routed_experts\":[],\"id\":42}\n"
		"{\"id\":\"c\\\"q\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\"domain\":\"code\",\"prompt_routed_experts\":[[[3,3],[3,3]]],\"routed_experts\":null}";
	struct locus_trace *t;
	struct locus_error e;
	(void)state;

	assert_int_equal(parse(s, 0, &t, &e), 0);
	assert_int_equal(t->n_requests, 3);
	assert_int_equal(t->n_layers, 2);
	assert_int_equal(t->k, 2);
	assert_int_equal(t->n_experts, 8);
	assert_string_equal(t->reqs[0].id, "a");
	assert_string_equal(t->domains[t->reqs[0].domain], "law");
	assert_int_equal(t->reqs[0].prompt_len, 2);
	assert_int_equal(t->reqs[0].gen_len, 1);
	assert_int_equal(locus_trace_tok(t, t->reqs[0].prompt, 1, 1)[1], 7);
	assert_int_equal(t->reqs[0].gen[0], 7);
	assert_string_equal(t->reqs[1].id, "42");
	assert_int_equal(t->reqs[1].domain, 0); /* unlabelled */
	assert_null(t->reqs[1].gen);
	assert_string_equal(t->reqs[2].id, "c\"q\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
	assert_int_equal(t->reqs[2].gen_len, 0);
	assert_int_equal(t->n_domains, 3);
	locus_trace_free(t);
}

/*
 * Keys longer than the parser's key buffer: a valid line with such an
 * unknown key is read like the same line without it, and a line whose
 * over-long "key" never closes, so that the rest is not JSON, is refused
 * (the parser must not resume inside the string).
 */
static void test_long_keys(void **state)
{
	const char *good =
		"{\"an_unknown_key_well_over_thirty_one_bytes_long\":{\"a\":[1,2]},"
		"\"prompt_routed_experts\":[[[0,1],[2,3]]],"
		"\"another_unknown_key_of_exactly_32b\":\"x\",\"id\":\"r\"}\n";
	const char *crafted =
		"{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:1, \"prompt_routed_experts\":[[[0,1],[2,3]]]}\n";
	struct locus_trace *t;
	struct locus_error e;
	(void)state;

	assert_true(strlen("another_unknown_key_of_exactly_32b") > 31);
	if (parse(good, 8, &t, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(t->n_requests, 1);
	assert_string_equal(t->reqs[0].id, "r");
	assert_int_equal(t->reqs[0].prompt_len, 1);
	assert_int_equal(locus_trace_tok(t, t->reqs[0].prompt, 0, 1)[1], 3);
	locus_trace_free(t);
	assert_int_equal(parse(crafted, 8, &t, &e), -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "t.jsonl:1:"));
}

/*
 * Unknown keys may hold any JSON value: numbers beyond a double's range or
 * longer than any double's text are skipped like the rest (found by
 * tests/fuzz fuzz_json; the inputs are in tests/fuzz/regress/trace).
 * They were refused as "number out of range" / "number longer than 63
 * characters": skipping converted them to a double.
 */
static void test_unknown_numbers(void **state)
{
	static const char *values[] = {
		"1e400", "-1e400", "1e-400",
		"1234567890123456789012345678901234567890123456789012345678901234567890",
		"0.00000000000000000000000000000000000000000000000000000000000000000001",
	};
	struct locus_trace *t;
	struct locus_error e;
	char line[512];
	(void)state;

	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		snprintf(line, sizeof(line), "{\"score\":%s,\"x\":[%s,{\"y\":%s}],"
			 "\"prompt_routed_experts\":[[[0,1]]],\"id\":\"n\"}\n", values[i],
			 values[i], values[i]);
		if (parse(line, 8, &t, &e))
			fail_msg("%s: %s", values[i], e.msg);
		assert_int_equal(t->n_requests, 1);
		assert_string_equal(t->reqs[0].id, "n");
		assert_int_equal(t->reqs[0].prompt[1], 1);
		locus_trace_free(t);
	}
	/* still refused: what is not a JSON number */
	assert_int_equal(parse("{\"s\":1e,\"prompt_routed_experts\":[[[0]]]}", 8, &t, &e),
			 -LOCUS_EPARSE);
	assert_int_equal(parse("{\"s\":Infinity,\"prompt_routed_experts\":[[[0]]]}", 8, &t,
			       &e), -LOCUS_ENAN);
}

/*
 * An unknown key's string may hold any character, \u0000 included (Python's
 * json.dumps writes a NUL that way): skipped like the rest (found by
 * tests/fuzz fuzz_json). It was refused as "NUL character in string",
 * which stays the answer where the string is decoded (an id, a domain).
 */
static void test_unknown_nul_string(void **state)
{
	const char *good = "{\"text\":\"a\\u0000b\",\"x\":[\"\\u0000\"],"
			   "\"prompt_routed_experts\":[[[2]]],\"id\":\"z\"}\n";
	const char *nul_id = "{\"prompt_routed_experts\":[[[2]]],\"id\":\"z\\u0000\"}\n";
	struct locus_trace *t;
	struct locus_error e;
	(void)state;

	if (parse(good, 8, &t, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(t->n_requests, 1);
	assert_string_equal(t->reqs[0].id, "z");
	assert_int_equal(t->reqs[0].prompt[0], 2);
	locus_trace_free(t);
	assert_int_equal(parse(nul_id, 8, &t, &e), -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "NUL"));
}

static void test_n_experts_rules(void **state)
{
	const char *noh = "{\"prompt_routed_experts\":[[[0,5]]]}\n";
	const char *hdr = "{\"locus_trace\":1,\"n_experts\":6}\n{\"prompt_routed_experts\":[[[0,5]]]}\n";
	struct locus_trace *t;
	struct locus_error e;
	(void)state;

	/* inferred from the largest id */
	assert_int_equal(parse(noh, 0, &t, &e), 0);
	assert_int_equal(t->n_experts, 6);
	assert_int_equal(t->n_layers, 1);
	locus_trace_free(t);
	/* given by the caller */
	assert_int_equal(parse(noh, 64, &t, &e), 0);
	assert_int_equal(t->n_experts, 64);
	locus_trace_free(t);
	/* caller's E too small for an id: error at its column */
	assert_int_equal(parse(noh, 5, &t, &e), -LOCUS_ERANGE);
	assert_string_equal(e.msg, "t.jsonl:1:31: expert id 5 >= n_experts=5");
	assert_int_equal(parse("{\"prompt_routed_experts\":[[[0,12]]]}", 5, &t, &e), -LOCUS_ERANGE);
	assert_string_equal(e.msg, "t.jsonl:1:31: expert id 12 >= n_experts=5");
	/* header */
	assert_int_equal(parse(hdr, 0, &t, &e), 0);
	assert_int_equal(t->n_experts, 6);
	locus_trace_free(t);
	/* E must fit the trace's u16 */
	assert_int_equal(parse("{\"locus_trace\":1,\"n_experts\":65536}\n", 0, &t, &e),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "larger than 65535"));
	assert_int_equal(parse(noh, 65536, &t, &e), -LOCUS_ERANGE);
	/* header and caller disagree */
	assert_int_equal(parse(hdr, 8, &t, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "n_experts=6 but 8"));
}

struct bad {
	const char *text;
	int code;
	const char *msg; /* expected prefix of the message (line:col included) */
};

static void test_errors(void **state)
{
	static const struct bad bad[] = {
		{ "", -LOCUS_EPARSE, "t.jsonl: trace has no requests" },
		{ "\n  \n", -LOCUS_EPARSE, "t.jsonl: trace has no requests" },
		{ "{\"locus_trace\":1,\"n_experts\":4}\n", -LOCUS_EPARSE, "t.jsonl: trace has no requests" },
		{ "{\"prompt_routed_experts\":[[[0,1]],[[2]]]}", -LOCUS_EPARSE,
		  "t.jsonl:1:39: layer 0 has 1 ids, expected k=2" },
		{ "{\"prompt_routed_experts\":[[[0,1]],[[2,3],[0,0]]]}", -LOCUS_EPARSE,
		  "t.jsonl:1:42: token has more than n_layers=1 layers" },
		{ "{\"prompt_routed_experts\":[[[0,NaN]]]}", -LOCUS_ENAN,
		  "t.jsonl:1:31: NaN/Infinity are not JSON numbers" },
		{ "{\"prompt_routed_experts\":[[[0,1.5]]]}", -LOCUS_EPARSE,
		  "t.jsonl:1:32: expected an integer, found a fraction" },
		{ "{\"prompt_routed_experts\":[[[0,-1]]]}", -LOCUS_ERANGE,
		  "t.jsonl:1:31: negative value" },
		{ "{\"prompt_routed_experts\":[[[0,70000]]]}", -LOCUS_ERANGE,
		  "t.jsonl:1:35: integer larger than 65535" },
		{ "{\"prompt_routed_experts\":[[[0,01]]]}", -LOCUS_EPARSE,
		  "t.jsonl:1:31: leading zero" },
		{ "{\"prompt_routed_experts\":[[[0,1],]]}", -LOCUS_EPARSE,
		  "t.jsonl:1:34: expected '[' opening a layer's expert ids, found ']'" },
		{ "{\"prompt_routed_experts\":[[[0,1]]],}", -LOCUS_EPARSE,
		  "t.jsonl:1:36: expected a string, found '}'" },
		{ "{\"prompt_routed_experts\":[[[0,1]]]", -LOCUS_EPARSE,
		  "t.jsonl:1:35: expected ',' or '}', found end of line" },
		{ "{\"prompt_routed_experts\":[[[0,1]]]} x", -LOCUS_EPARSE,
		  "t.jsonl:1:37: text after the object" },
		{ "{\"prompt_routed_experts\":[]}", -LOCUS_EPARSE,
		  "t.jsonl:1:29: request has no prompt_routed_experts tokens" },
		{ "{\"id\":\"x\"}", -LOCUS_EPARSE, "t.jsonl:1:11: request has no prompt" },
		{ "{}", -LOCUS_EPARSE, "t.jsonl:1:2: empty object" },
		{ "[1]", -LOCUS_EPARSE, "t.jsonl:1:1: expected '{'" },
		{ "{\"id\":\"a\",\"id\":\"b\",\"prompt_routed_experts\":[[[0]]]}", -LOCUS_EPARSE,
		  "t.jsonl:1:15: duplicate key \"id\"" },
		{ "{\"domain\":\"this domain label is much too long\",\"prompt_routed_experts\":[[[0]]]}",
		  -LOCUS_ERANGE, "t.jsonl:1:" },
		{ "{\"prompt_routed_experts\":[[[0]]],\"x\":\"a\\qb\"}", -LOCUS_EPARSE,
		  "t.jsonl:1:41: bad escape \\q" },
		{ "{\"prompt_routed_experts\":[[[0]]],\"x\":\"\\ud800\"}", -LOCUS_EPARSE,
		  "t.jsonl:1:" },
		{ "{\"prompt_routed_experts\":[[[0]]]}\n{\"locus_trace\":1}", -LOCUS_EPARSE,
		  "t.jsonl:2:18: header (\"locus_trace\") only allowed on the first line" },
		{ "{\"locus_trace\":2}", -LOCUS_EVERSION, "t.jsonl:1:16: trace version 2" },
		{ "{\"prompt_routed_experts\":[[[0,1]]]}\n{\"prompt_routed_experts\":[[[0,1,2]]]}",
		  -LOCUS_EPARSE, "t.jsonl:2:33: layer 0 has more than k=2 ids" },
		{ "{\"prompt_routed_experts\":[[[0]]],\"x\":tru}", -LOCUS_EPARSE,
		  "t.jsonl:1:38: unexpected 't'" },
		{ "{\"prompt_routed_experts\":[[[0]]],\"x\":\"a\tb\"}", -LOCUS_EPARSE,
		  "t.jsonl:1:40: control character" },
		{ "{\"prompt_routed_experts\":[[[0]]],\"x\":\"a\xc3(\"}", -LOCUS_EPARSE,
		  "t.jsonl:1:40: invalid UTF-8" },
		{ "{\"prompt_routed_experts\":[[[0]]],\"x\":\"\xc0\xaf\"}", -LOCUS_EPARSE,
		  "t.jsonl:1:39: invalid UTF-8" },
		{ "{\"prompt_routed_experts\":[[[0]]],\"x\":\"\xed\xa0\x80\"}", -LOCUS_EPARSE,
		  "t.jsonl:1:39: invalid UTF-8" },
	};
	struct locus_trace *t = NULL;
	struct locus_error e;
	int failed = 0;
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret = parse(bad[i].text, 0, &t, &e);

		if (ret != bad[i].code || strncmp(e.msg, bad[i].msg, strlen(bad[i].msg))) {
			print_error("case %zu: got %d '%s', want %d '%s'\n", i, ret, e.msg,
				    bad[i].code, bad[i].msg);
			failed++;
		}
	}
	assert_int_equal(failed, 0);
}

static void test_nesting_bounded(void **state)
{
	char buf[400];
	struct locus_trace *t;
	struct locus_error e;
	size_t n;
	(void)state;

	n = (size_t)snprintf(buf, sizeof(buf), "{\"prompt_routed_experts\":[[[0]]],\"x\":");
	for (int i = 0; i < 100; i++)
		buf[n++] = '[';
	buf[n] = '\0';
	assert_int_equal(parse(buf, 0, &t, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "nesting deeper"));
}

static void test_limits(void **state)
{
	struct locus_trace_opts o = { .max_requests = 1 };
	const char *two = "{\"prompt_routed_experts\":[[[0]]]}\n{\"prompt_routed_experts\":[[[0]]]}";
	const char *three_tok = "{\"prompt_routed_experts\":[[[0]],[[0]],[[0]]]}";
	struct locus_trace *t;
	struct locus_error e;
	(void)state;

	assert_int_equal(locus_trace_parse(two, strlen(two), "t", &o, &t, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "t:2:"));
	o.max_requests = 0;
	o.max_tokens = 2;
	assert_int_equal(locus_trace_parse(three_tok, strlen(three_tok), "t", &o, &t, &e),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "more than 2 tokens"));
	o.max_tokens = 0;
	o.max_file_bytes = 10;
	assert_int_equal(locus_trace_parse(two, strlen(two), "t", &o, &t, &e), -LOCUS_ERANGE);
	/* NUL byte inside a line */
	assert_int_equal(locus_trace_parse("{\0}", 3, "t", NULL, &t, &e), -LOCUS_EPARSE);
	/* missing file */
	assert_int_equal(locus_trace_load("/nonexistent/x.jsonl", NULL, &t, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "/nonexistent/x.jsonl"));
}

static void test_write_then_read(void **state)
{
	const uint16_t p0[] = { 0, 1, 2, 3, 4, 5, 6, 7 }, g0[] = { 1, 1, 2, 2 };
	struct locus_trace_req reqs[2];
	const char *names[2] = { "law", NULL };
	char path[] = "/tmp/test_eldr_trace.XXXXXX";
	struct locus_trace *t, *u;
	struct locus_error e;
	int fd;
	(void)state;

	memset(reqs, 0, sizeof(reqs));
	snprintf(reqs[0].id, sizeof(reqs[0].id), "r\\0");
	reqs[0].prompt = p0;
	reqs[0].prompt_len = 2; /* L=2, k=2 */
	reqs[0].gen = g0;
	reqs[0].gen_len = 1;
	snprintf(reqs[1].id, sizeof(reqs[1].id), "r1");
	reqs[1].prompt = p0 + 4;
	reqs[1].prompt_len = 1;
	assert_int_equal(locus_trace_from_arrays(2, 2, 8, 2, reqs, names, &t, &e), 0);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(locus_trace_write(t, path, &e), 0);
	assert_int_equal(locus_trace_load(path, NULL, &u, &e), 0);
	unlink(path);
	assert_int_equal(u->n_requests, 2);
	assert_int_equal(u->n_experts, 8);
	assert_string_equal(u->reqs[0].id, "r\\0");
	assert_string_equal(u->domains[u->reqs[0].domain], "law");
	assert_int_equal(u->reqs[1].domain, 0);
	assert_memory_equal(u->reqs[0].prompt, p0, sizeof(uint16_t) * 8);
	assert_memory_equal(u->reqs[0].gen, g0, sizeof(g0));
	assert_memory_equal(u->reqs[1].prompt, p0 + 4, sizeof(uint16_t) * 4);
	locus_trace_free(u);
	locus_trace_free(t);
	/* from_arrays validates ids and shapes */
	assert_int_equal(locus_trace_from_arrays(2, 2, 4, 2, reqs, names, &t, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, ">= n_experts=4"));
	assert_int_equal(locus_trace_from_arrays(2, 2, 8, 0, reqs, names, &t, &e), -LOCUS_EPARSE);
}

/* Random damage to a valid trace: every outcome is success or a reported error. */
static void test_mutations(void **state)
{
	const char *good =
		"{\"locus_trace\":1,\"n_layers\":2,\"k\":2,\"n_experts\":8}\n"
		"{\"id\":\"a\",\"domain\":\"law\",\"prompt_routed_experts\":[[[0,1],[2,3]],[[4,5],[6,7]]],"
		"\"routed_experts\":[[[7,6],[5,4]]]}\n"
		"{\"id\":7,\"prompt_routed_experts\":[[[1,1],[2,2]]],\"x\":[{\"y\":\"\\u00e9\"},1e-3]}\n";
	const char alphabet[] = "{}[]\",:0123456789-.eE \n\\unlNaIf";
	size_t len = strlen(good);
	char *buf = malloc(len + 1);
	uint32_t seed = 99, ok = 0, bad = 0;
	(void)state;

	assert_non_null(buf);
	for (int it = 0; it < 20000; it++) {
		struct locus_trace *t = NULL;
		struct locus_error e = { 0 };
		size_t n = len;
		int ret;

		memcpy(buf, good, len + 1);
		for (int m = 0; m < 1 + it % 4; m++) {
			seed = seed * 1103515245u + 12345u;
			switch ((seed >> 16) % 3) {
			case 0: /* replace a byte */
				buf[(seed >> 4) % n] = alphabet[(seed >> 20) % (sizeof(alphabet) - 1)];
				break;
			case 1: /* truncate */
				n = (seed >> 4) % n + 1;
				break;
			default: /* raw byte */
				buf[(seed >> 4) % n] = (char)(seed >> 24);
				break;
			}
		}
		ret = locus_trace_parse(buf, n, "m", NULL, &t, &e);
		if (ret == 0) {
			assert_true(t->n_requests >= 1);
			assert_true(t->n_layers >= 1 && t->k >= 1);
			locus_trace_free(t);
			ok++;
		} else {
			assert_true(ret < 0);
			assert_true(e.msg[0] != '\0');
			bad++;
		}
	}
	print_message("mutations: %u parsed, %u rejected with a message\n", ok, bad);
	assert_true(bad > 0);
	free(buf);
}

static void write_layer(const char *dir, int layer, const char *text)
{
	char path[4200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/expert_weights_%d.txt", dir, layer);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* The ESFT reader on small hand-made layer files (L=2, k=2, E=8). */
static void test_esft_reader(void **state)
{
	char dir[] = "/tmp/test_eldr_esft_files.XXXXXX", cmd[200];
	struct locus_trace *t;
	struct locus_error e;
	(void)state;

	assert_non_null(mkdtemp(dir));
	/* two sequences: 2 tokens and 1 token */
	write_layer(dir, 1, "1\t2\t3\t4\t\t0.5\t0.5\t0.5\t0.5\n5\t6\t\t0.5\t0.5\n");
	write_layer(dir, 2, "7\t0\t1\t2\t\t0.5\t0.5\t0.5\t0.5\n3\t4\t\t0.5\t0.5\n");
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), 0);
	assert_int_equal(t->n_requests, 2);
	assert_int_equal(t->reqs[0].prompt_len, 2);
	assert_int_equal(t->reqs[1].prompt_len, 1);
	assert_string_equal(t->reqs[1].id, "law-1");
	/* token 1 of sequence 0: layer 0 {3,4}, layer 1 {1,2} */
	assert_int_equal(locus_trace_tok(t, t->reqs[0].prompt, 1, 0)[0], 3);
	assert_int_equal(locus_trace_tok(t, t->reqs[0].prompt, 1, 1)[1], 2);
	assert_int_equal(locus_trace_tok(t, t->reqs[1].prompt, 0, 1)[0], 3);
	locus_trace_free(t);
	/* layer 2 disagrees on a sequence's length */
	write_layer(dir, 2, "7\t0\t\t0.5\t0.5\n3\t4\t\t0.5\t0.5\n");
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "expert_weights_2.txt:1"));
	/* layer 2 has fewer sequences */
	write_layer(dir, 2, "7\t0\t1\t2\t\t0.5\t0.5\t0.5\t0.5\n");
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "1 sequences, layer 1 has 2"));
	/* id out of range, odd id count, no separator, weights missing */
	write_layer(dir, 2, "7\t0\t1\t9\t\t0.5\t0.5\t0.5\t0.5\n3\t4\t\t0.5\t0.5\n");
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "expert id 9 >= 8"));
	write_layer(dir, 1, "1\t2\t3\t\t0.5\t0.5\t0.5\n5\t6\t\t0.5\t0.5\n");
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "multiple of k=2"));
	write_layer(dir, 1, "1\t2\n");
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "no empty field"));
	write_layer(dir, 1, "1\t2\t\t0.5\n");
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "2 ids but 1 weights"));
	write_layer(dir, 1, "1\tx\t\t0.5\t0.5\n");
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), -LOCUS_EPARSE);
	write_layer(dir, 1, "");
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "no sequences"));
	/* gate order: each token's ids by descending weight, ties in file order */
	write_layer(dir, 1, "1\t2\t3\t4\t\t0.2\t0.8\t0.5\t0.5\n5\t6\t\t0.25\t0.75\n");
	write_layer(dir, 2, "7\t0\t1\t2\t\t0.9\t0.1\t0.5\t0.5\n3\t4\t\t0.5\t0.5\n");
	assert_int_equal(locus_trace_load_esft_flags(dir, "law", 2, 2, 8,
						     LOCUS_TRACE_ESFT_GATE_ORDER, &t, &e), 0);
	assert_int_equal(locus_trace_tok(t, t->reqs[0].prompt, 0, 0)[0], 2);
	assert_int_equal(locus_trace_tok(t, t->reqs[0].prompt, 0, 0)[1], 1);
	assert_int_equal(locus_trace_tok(t, t->reqs[0].prompt, 1, 0)[0], 3);
	assert_int_equal(locus_trace_tok(t, t->reqs[0].prompt, 1, 0)[1], 4);
	assert_int_equal(locus_trace_tok(t, t->reqs[1].prompt, 0, 0)[0], 6);
	assert_int_equal(locus_trace_tok(t, t->reqs[0].prompt, 0, 1)[0], 7);
	assert_int_equal(locus_trace_tok(t, t->reqs[1].prompt, 0, 1)[0], 3);
	locus_trace_free(t);
	/* the file's order without the flag */
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), 0);
	assert_int_equal(locus_trace_tok(t, t->reqs[0].prompt, 0, 0)[0], 1);
	locus_trace_free(t);
	write_layer(dir, 2, "7\t0\t1\t2\t\t0.9\tx\t0.5\t0.5\n3\t4\t\t0.5\t0.5\n");
	assert_int_equal(locus_trace_load_esft_flags(dir, "law", 2, 2, 8,
						     LOCUS_TRACE_ESFT_GATE_ORDER, &t, &e),
			 -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "expert_weights_2.txt:1: gate weight 2 is not"));
	/* a missing layer file */
	write_layer(dir, 1, "1\t2\t3\t4\t\t0.5\t0.5\t0.5\t0.5\n5\t6\t\t0.5\t0.5\n");
	write_layer(dir, 2, "7\t0\t1\t2\t\t0.5\t0.5\t0.5\t0.5\n3\t4\t\t0.5\t0.5\n");
	assert_int_equal(locus_trace_load_esft(dir, "law", 3, 2, 8, &t, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "expert_weights_3.txt"));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(locus_trace_load_esft(dir, "law", 2, 2, 8, &t, &e), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_trace),
		cmocka_unit_test(test_long_keys),
		cmocka_unit_test(test_unknown_numbers),
		cmocka_unit_test(test_unknown_nul_string),
		cmocka_unit_test(test_n_experts_rules),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_nesting_bounded),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_write_then_read),
		cmocka_unit_test(test_mutations),
		cmocka_unit_test(test_esft_reader),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
