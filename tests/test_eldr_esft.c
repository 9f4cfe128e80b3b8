// SPDX-License-Identifier: MIT
/*
 * Against the full ESFT data ($LOCUS_DATA_DIR/esft, default ../shared/data;
 * skipped when absent):
 *  - the converter chain (ESFT reader -> JSONL writer -> JSONL reader)
 *    reproduces the authors' summary.json token_scores to +-5e-5;
 *  - an ELDR fit of 64-token windows is far purer by domain than random
 *    balanced clusters, and deterministic.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_eldr.h"
#include "locus_eldrfit.h"
#include "locus_err_priv.h"
#include "locus_trace.h"
#include "data_paths.h"
#include "trace_json.h"
#include "trace_priv.h"

#define L_ESFT 26
#define K_ESFT 6
#define E_ESFT 64


static const char *const domains[] = { "law", "translation", "summary", "intent" };

static char esft2jsonl[4096];

static int have_esft(void)
{
	char p[4096];

	snprintf(p, sizeof(p), "%s/esft/results/expert_scores/law/expert_weights_1.txt",
		 locus_data_dir());
	return access(p, R_OK) == 0;
}

/* summary.json["token_scores"][layer 1..26][expert] into ts[26][64]. */
static int read_token_scores(const char *path, double ts[L_ESFT][E_ESFT], struct locus_error *e)
{
	struct tj j;
	char key[32], *buf;
	size_t len;
	int ret, more, seen = 0;

	ret = trace_read_file(path, 1 << 26, &buf, &len, e);
	if (ret < 0)
		return ret;
	tj_init(&j, buf, len, path, 1, e);
	ret = tj_expect(&j, '{', "'{'");
	while (ret >= 0) {
		ret = tj_string(&j, key, sizeof(key));
		if (ret >= 0)
			ret = tj_expect(&j, ':', "':'");
		if (ret < 0)
			break;
		if (strcmp(key, "token_scores")) {
			ret = tj_skip(&j);
		} else if ((ret = tj_expect(&j, '{', "'{'")) >= 0) {
			do {
				uint64_t l;
				struct tj k;

				ret = tj_string(&j, key, sizeof(key));
				if (ret < 0)
					break;
				tj_init(&k, key, strlen(key), path, 1, e);
				if (tj_uint(&k, L_ESFT, &l) < 0 || l < 1) {
					ret = tj_fail(&j, LOCUS_EPARSE, "bad layer key %s", key);
					break;
				}
				ret = tj_expect(&j, ':', "':'");
				if (ret >= 0)
					ret = tj_expect(&j, '{', "'{'");
				while (ret >= 0) {
					uint64_t x;
					double v;

					ret = tj_string(&j, key, sizeof(key));
					if (ret < 0)
						break;
					tj_init(&k, key, strlen(key), path, 1, e);
					if (tj_uint(&k, E_ESFT - 1, &x) < 0) {
						ret = tj_fail(&j, LOCUS_EPARSE, "bad expert key %s",
							      key);
						break;
					}
					ret = tj_expect(&j, ':', "':'");
					if (ret >= 0)
						ret = tj_number(&j, &v);
					if (ret < 0)
						break;
					ts[l - 1][x] = v;
					seen++;
					more = tj_next(&j, '}');
					if (more <= 0) {
						ret = more;
						break;
					}
				}
				if (ret < 0)
					break;
				ret = more = tj_next(&j, '}');
			} while (more > 0);
		}
		if (ret < 0)
			break;
		more = tj_next(&j, '}');
		if (more <= 0) {
			ret = more;
			break;
		}
	}
	free(buf);
	if (ret >= 0 && seen != L_ESFT * E_ESFT)
		ret = locus_error_set(e, LOCUS_EPARSE, "%s: %d token scores, expected %d", path,
				      seen,
				      L_ESFT * E_ESFT);
	return ret;
}

static void test_converter_matches_token_scores(void **state)
{
	char dir[2048], path[4096], tmp[] = "/tmp/test_eldr_esft.XXXXXX";
	struct locus_error e = { 0 };
	double worst = 0;
	int fd;
	(void)state;

	if (!have_esft())
		skip();
	fd = mkstemp(tmp);
	assert_true(fd >= 0);
	close(fd);
	for (size_t d = 0; d < 4; d++) {
		static double ts[L_ESFT][E_ESFT];
		static uint64_t cnt[L_ESFT][E_ESFT];
		struct locus_trace *t, *u;
		uint64_t tokens = 0;

		snprintf(dir, sizeof(dir), "%s/esft/results/expert_scores/%s", locus_data_dir(),
			 domains[d]);
		snprintf(path, sizeof(path), "%s/summary.json", dir);
		assert_int_equal(read_token_scores(path, ts, &e), 0);
		assert_int_equal(locus_trace_load_esft(dir, domains[d], L_ESFT, K_ESFT, E_ESFT, &t,
						       &e), 0);
		/* the converter's output format, read back by the importer */
		assert_int_equal(locus_trace_write(t, tmp, &e), 0);
		assert_int_equal(locus_trace_load(tmp, NULL, &u, &e), 0);
		assert_int_equal(u->n_requests, t->n_requests);
		memset(cnt, 0, sizeof(cnt));
		for (uint32_t i = 0; i < u->n_requests; i++) {
			const struct locus_trace_req *r = &u->reqs[i];

			tokens += r->prompt_len;
			for (uint32_t tok = 0; tok < r->prompt_len; tok++)
				for (uint32_t l = 0; l < L_ESFT; l++)
					for (uint32_t s = 0; s < K_ESFT; s++)
						cnt[l][locus_trace_tok(u, r->prompt, tok, l)[s]]++;
		}
		for (uint32_t l = 0; l < L_ESFT; l++) {
			for (uint32_t x = 0; x < E_ESFT; x++) {
				double share = (double)cnt[l][x] / (double)(tokens * K_ESFT);

				worst = fmax(worst, fabs(share - ts[l][x]));
				assert_float_equal(share, ts[l][x], 5e-5);
			}
		}
		print_message("%s: %u sequences, %llu tokens match token_scores\n", domains[d],
			      u->n_requests, (unsigned long long)tokens);
		locus_trace_free(u);
		locus_trace_free(t);
	}
	print_message("largest |recount - token_scores| = %.2e\n", worst);
	unlink(tmp);
}

/* All four domains in windows of 64 tokens: 32 prompt, 32 "generated". */
static struct locus_trace *esft_windows(void)
{
	struct locus_trace *src[4], *out;
	struct locus_trace_req *reqs = NULL;
	const char **names = NULL;
	struct locus_error e = { 0 };
	uint32_t n = 0;
	char dir[4096];

	for (size_t d = 0; d < 4; d++) {
		snprintf(dir, sizeof(dir), "%s/esft/results/expert_scores/%s", locus_data_dir(),
			 domains[d]);
		assert_int_equal(locus_trace_load_esft(dir, domains[d], L_ESFT, K_ESFT, E_ESFT,
						       &src[d], &e), 0);
		for (uint32_t r = 0; r < src[d]->n_requests; r++) {
			const struct locus_trace_req *sr = &src[d]->reqs[r];

			for (uint32_t s = 0; s + 64 <= sr->prompt_len; s += 64) {
				reqs = realloc(reqs, sizeof(*reqs) * (n + 1));
				names = realloc(names, sizeof(*names) * (n + 1));
				assert_non_null(reqs);
				assert_non_null(names);
				memset(&reqs[n], 0, sizeof(reqs[n]));
				snprintf(reqs[n].id, sizeof(reqs[n].id), "%.40s@%u", sr->id, s);
				reqs[n].prompt = locus_trace_tok(src[d], sr->prompt, s, 0);
				reqs[n].prompt_len = 32;
				reqs[n].gen = locus_trace_tok(src[d], sr->prompt, s + 32, 0);
				reqs[n].gen_len = 32;
				names[n++] = domains[d];
			}
		}
	}
	assert_int_equal(locus_trace_from_arrays(L_ESFT, K_ESFT, E_ESFT, n, reqs, names, &out, &e),
			 0);
	for (size_t d = 0; d < 4; d++)
		locus_trace_free(src[d]);
	free(names);
	free(reqs);
	return out;
}

static double purity_of(const struct locus_trace *t, const uint32_t *assign, uint32_t K)
{
	uint32_t cnt[16][8] = { { 0 } }, agree = 0;

	for (uint32_t i = 0; i < t->n_requests; i++)
		cnt[assign[i]][t->reqs[i].domain]++;
	for (uint32_t k = 0; k < K; k++) {
		uint32_t best = 0;

		for (uint32_t d = 0; d < t->n_domains; d++)
			best = cnt[k][d] > best ? cnt[k][d] : best;
		agree += best;
	}
	return (double)agree / t->n_requests;
}

/* Mean purity of random balanced assignments (seeded shuffles). */
static double chance_purity(const struct locus_trace *t, uint32_t K)
{
	uint32_t *a = malloc(sizeof(*a) * t->n_requests), seed = 1;
	double sum = 0;

	assert_non_null(a);
	for (int rep = 0; rep < 50; rep++) {
		for (uint32_t i = 0; i < t->n_requests; i++)
			a[i] = i % K;
		for (uint32_t i = t->n_requests - 1; i > 0; i--) {
			uint32_t j, x;

			seed = seed * 1103515245u + 12345u;
			j = (seed >> 8) % (i + 1);
			x = a[i];
			a[i] = a[j];
			a[j] = x;
		}
		sum += purity_of(t, a, K);
	}
	free(a);
	return sum / 50;
}

static void test_fit_purity_and_determinism(void **state)
{
	static const uint32_t Ks[] = { 4, 8, 16 };
	struct locus_trace *t;
	struct locus_error e = { 0 };
	(void)state;

	if (!have_esft())
		skip();
	t = esft_windows();
	for (size_t i = 0; i < 3; i++) {
		struct locus_eldrfit_opts o = { .n_decoders = Ks[i], .tau = 0.1f, .seed = 11 };
		struct locus_eldrfit_result a, b, nm;
		double pa, pn, pc;

		assert_int_equal(locus_eldrfit_trace(t, &o, &a, &e), 0);
		assert_int_equal(locus_eldrfit_trace(t, &o, &b, &e), 0);
		assert_int_equal(a.blob_len, b.blob_len);
		assert_memory_equal((uint8_t *)a.blob + 64, (uint8_t *)b.blob + 64,
				    a.blob_len - 64);
		o.no_mask = 1;
		assert_int_equal(locus_eldrfit_trace(t, &o, &nm, &e), 0);
		pa = purity_of(t, a.assign, Ks[i]);
		pn = purity_of(t, nm.assign, Ks[i]);
		pc = chance_purity(t, Ks[i]);
		print_message("ESFT %u windows, K=%u: purity %.3f (mask %u layers, score %.4f vs "
			      "%.4f all), %.3f every layer, chance %.3f\n", t->n_requests, Ks[i], pa,
			      a.n_masked, a.mask_score, a.full_score, pn, pc);
		assert_true(pa > pc + 0.25);
		assert_true(pn > pc + 0.25);
		locus_eldrfit_result_free(&nm);
		locus_eldrfit_result_free(&b);
		locus_eldrfit_result_free(&a);
	}
	locus_trace_free(t);
}

/* The ids of line `line` (1-based) of a layer file, read with plain stdio. */
static uint32_t read_ids(const char *path, uint32_t line, uint16_t *ids, uint32_t cap)
{
	FILE *f = fopen(path, "r");
	uint32_t n = 0, cur = 1;
	int c;

	assert_non_null(f);
	while (cur < line && (c = fgetc(f)) != EOF)
		cur += c == '\n';
	for (;;) {
		unsigned v;

		if (fscanf(f, "%u", &v) != 1)
			break;
		if (n < cap)
			ids[n] = (uint16_t)v;
		n++;
		c = fgetc(f);         /* the tab after the id */
		c = fgetc(f);         /* a second tab ends the ids */
		if (c == '\t' || c == EOF)
			break;
		ungetc(c, f);
	}
	fclose(f);
	return n;
}

/* control/esft2jsonl on the law domain, checked against the raw text files. */
static void test_esft2jsonl_cli(void **state)
{
	char dir[2048], l1[4096], l26[4096], cmd[8192], out[] = "/tmp/test_esft2jsonl.XXXXXX";
	static uint16_t ids1[60000], ids26[60000];
	struct locus_error e = { 0 };
	struct locus_trace *t;
	uint32_t windows = 0, seqs = 0;
	int fd;
	(void)state;

	if (!have_esft())
		skip();
	snprintf(dir, sizeof(dir), "%s/esft/results/expert_scores", locus_data_dir());
	snprintf(l1, sizeof(l1), "%s/law/expert_weights_1.txt", dir);
	snprintf(l26, sizeof(l26), "%s/law/expert_weights_26.txt", dir);
	for (uint32_t line = 1;; line++) {
		uint32_t n = read_ids(l1, line, ids1, 0);

		if (!n)
			break;
		assert_int_equal(n % 6, 0);
		windows += n / 6 / 64;
		seqs++;
	}
	assert_int_equal(seqs, 33);
	fd = mkstemp(out);
	assert_true(fd >= 0);
	close(fd);
	snprintf(cmd, sizeof(cmd),
		 "'%s' --esft '%s' --domains law --window 64 --prompt-frac 0.5 -o %s"
		 " 2>/dev/null", esft2jsonl, dir, out);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(locus_trace_load(out, NULL, &t, &e), 0);
	assert_int_equal(t->n_requests, windows);
	assert_int_equal(t->n_layers, 26);
	assert_int_equal(t->n_experts, 64);
	assert_string_equal(t->domains[t->reqs[0].domain], "law");
	assert_int_equal(t->reqs[0].prompt_len, 32);
	assert_int_equal(t->reqs[0].gen_len, 32);
	/* window 0 of sequence 0: token 0 layer 1, and token 33 (gen 1) layer 26 */
	read_ids(l1, 1, ids1, 60000);
	read_ids(l26, 1, ids26, 60000);
	assert_memory_equal(locus_trace_tok(t, t->reqs[0].prompt, 0, 0), ids1, 6 * 2);
	assert_memory_equal(locus_trace_tok(t, t->reqs[0].gen, 1, 25), ids26 + 33 * 6, 6 * 2);
	locus_trace_free(t);
	/* whole sequences of all four domains: the converter's own output file
	 * against the authors' token_scores */
	snprintf(cmd, sizeof(cmd), "'%s' --esft '%s' -o %s 2>/dev/null", esft2jsonl, dir, out);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(locus_trace_load(out, NULL, &t, &e), 0);
	assert_int_equal(t->n_requests, 33 + 40 + 13 + 127);
	for (uint32_t d = 1; d < t->n_domains; d++) {
		static double ts[L_ESFT][E_ESFT];
		static uint64_t cnt[L_ESFT][E_ESFT];
		char path[4096];
		uint64_t tokens = 0;

		snprintf(path, sizeof(path), "%s/%s/summary.json", dir, t->domains[d]);
		assert_int_equal(read_token_scores(path, ts, &e), 0);
		memset(cnt, 0, sizeof(cnt));
		for (uint32_t i = 0; i < t->n_requests; i++) {
			const struct locus_trace_req *r = &t->reqs[i];

			if (r->domain != d)
				continue;
			tokens += r->prompt_len;
			for (uint32_t tok = 0; tok < r->prompt_len; tok++)
				for (uint32_t l = 0; l < L_ESFT; l++)
					for (uint32_t k = 0; k < K_ESFT; k++)
						cnt[l][locus_trace_tok(t, r->prompt, tok, l)[k]]++;
		}
		for (uint32_t l = 0; l < L_ESFT; l++)
			for (uint32_t x = 0; x < E_ESFT; x++)
				assert_float_equal((double)cnt[l][x] / (double)(tokens * K_ESFT),
						   ts[l][x],
						   5e-5);
	}
	locus_trace_free(t);
	/* --per-domain keeps that many */
	snprintf(cmd, sizeof(cmd),
		 "'%s' --esft '%s' --domains law,intent --window 16 --per-domain 5 "
		 "-o %s 2>/dev/null", esft2jsonl, dir, out);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(locus_trace_load(out, NULL, &t, &e), 0);
	assert_int_equal(t->n_requests, 10);
	assert_int_equal(t->reqs[0].gen_len, 0);
	locus_trace_free(t);
	/* a domain that does not exist */
	snprintf(cmd, sizeof(cmd), "'%s' --esft '%s' --domains nope -o %s 2>/dev/null", esft2jsonl,
		 dir, out);
	assert_int_not_equal(system(cmd), 0);
	unlink(out);
}

int main(int argc, char **argv)
{
	char self[4096];
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_converter_matches_token_scores),
		cmocka_unit_test(test_esft2jsonl_cli),
		cmocka_unit_test(test_fit_purity_and_determinism),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	snprintf(self, sizeof(self), "%s", argv[0]);
	snprintf(esft2jsonl, sizeof(esft2jsonl), "%s/../bin/esft2jsonl", dirname(self));
	if (!have_esft())
		printf("ESFT data not found under %s: tests skipped\n", locus_data_dir());
	return cmocka_run_group_tests(tests, NULL, NULL);
}
