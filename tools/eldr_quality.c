// SPDX-License-Identifier: MIT
/*
 * eldr_quality: routing quality on ESFT, the figure ELDR exists for: how
 * many distinct (layer, expert) pairs a decoder's batch touches during
 * decode (fewer = less expert weight to read per step).
 *
 * Requests are 64-token windows of the ESFT sequences of all four domains:
 * 32 prompt tokens (the signature) and 32 "generated" tokens (teacher-forced
 * continuation standing in for decode; see tools/esft2jsonl.c). Windows are
 * split alternately into a calibration half (the fit) and a held-out half
 * (routed). The held-out requests arrive in a fixed pseudo-random order in
 * rounds of K * B; in each round every policy fills each of the K decoders
 * with exactly B requests (same batch sizes for all):
 *   round-robin  request i of the round -> decoder i mod K;
 *   domain       oracle label: decoders split evenly among the domains, a
 *                request goes to the least-filled decoder of its domain with
 *                room, else to the least-filled decoder with room;
 *   ELDR         the router (band tau, least loaded with the herding guard);
 *                a decoder whose batch is full is marked down for the rest
 *                of the round; once with the fitted layer mask, once with
 *                every layer (--no-mask).
 * Figures, mean over decoder batches, with their ratio to round-robin:
 *   per decode step  distinct (layer, expert) pairs of the batch's t-th
 *                    generated tokens (what one decode step must read),
 *                    averaged over steps;
 *   whole batch      distinct pairs over all its generated tokens (this
 *                    saturates towards L * E = 1664 for ESFT).
 *
 *   eldr_quality [--trace FILE]   (default: the full ESFT data under
 *                                  $LOCUS_DATA_DIR, default <repo>/../shared/data,
 *                                  else <repo>/tests/data/calib_sample.jsonl)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locus_eldr_router.h"
#include "locus_eldrfit.h"
#include "locus_trace.h"

static const char *const esft_domains[] = { "law", "translation", "summary", "intent" };

/* Windows of 64 tokens (32 + 32) of every ESFT domain; NULL if absent. */
static struct locus_trace *load_esft(const char *base)
{
	struct locus_trace *src[4] = { 0 }, *out = NULL;
	struct locus_trace_req *reqs = NULL;
	const char **names = NULL;
	struct locus_error e = { 0 };
	uint32_t n = 0, cap = 0;
	char dir[4096];

	for (int d = 0; d < 4; d++) {
		snprintf(dir, sizeof(dir), "%s/esft/results/expert_scores/%s", base,
			 esft_domains[d]);
		if (locus_trace_load_esft(dir, esft_domains[d], 26, 6, 64, &src[d], &e) < 0)
			goto out;
		for (uint32_t r = 0; r < src[d]->n_requests; r++) {
			const struct locus_trace_req *sr = &src[d]->reqs[r];

			for (uint32_t s = 0; s + 64 <= sr->prompt_len; s += 64) {
				if (n == cap) {
					void *a, *b;

					cap = cap ? cap * 2 : 256;
					a = realloc(reqs, sizeof(*reqs) * cap);
					if (a)
						reqs = a;
					b = realloc(names, sizeof(*names) * cap);
					if (b)
						names = b;
					if (!a || !b)
						goto out;
				}
				memset(&reqs[n], 0, sizeof(reqs[n]));
				snprintf(reqs[n].id, sizeof(reqs[n].id), "%.40s@%u", sr->id, s);
				reqs[n].prompt = locus_trace_tok(src[d], sr->prompt, s, 0);
				reqs[n].prompt_len = 32;
				reqs[n].gen = locus_trace_tok(src[d], sr->prompt, s + 32, 0);
				reqs[n].gen_len = 32;
				names[n++] = esft_domains[d];
			}
		}
	}
	if (locus_trace_from_arrays(26, 6, 64, n, reqs, names, &out, &e) < 0)
		out = NULL;
out:
	for (int d = 0; d < 4; d++)
		locus_trace_free(src[d]);
	free(names);
	free(reqs);
	return out;
}

/*
 * Per decode step: distinct (layer, expert) pairs of the batch's t-th
 * generated tokens (one token per request, as one decode step runs),
 * averaged over the steps every request of the batch has.
 */
static double pairs_per_step(const struct locus_trace *t, const uint32_t *batch, uint32_t n,
			     uint8_t *seen)
{
	const size_t LE = (size_t)t->n_layers * t->n_experts;
	uint32_t steps = UINT32_MAX;
	uint64_t cnt = 0;

	for (uint32_t i = 0; i < n; i++)
		if (t->reqs[batch[i]].gen_len < steps)
			steps = t->reqs[batch[i]].gen_len;
	for (uint32_t tok = 0; tok < steps; tok++) {
		memset(seen, 0, LE);
		for (uint32_t i = 0; i < n; i++) {
			const struct locus_trace_req *r = &t->reqs[batch[i]];

			for (uint32_t l = 0; l < t->n_layers; l++)
				for (uint32_t s = 0; s < t->k; s++) {
					size_t f = (size_t)l * t->n_experts +
						   locus_trace_tok(t, r->gen, tok, l)[s];

					cnt += !seen[f];
					seen[f] = 1;
				}
		}
	}
	return steps ? (double)cnt / steps : 0;
}

/* Distinct (layer, expert) pairs of all the generated tokens of a batch. */
static uint32_t distinct_pairs(const struct locus_trace *t, const uint32_t *batch, uint32_t n,
			       uint8_t *seen)
{
	const size_t LE = (size_t)t->n_layers * t->n_experts;
	uint32_t cnt = 0;

	memset(seen, 0, LE);
	for (uint32_t i = 0; i < n; i++) {
		const struct locus_trace_req *r = &t->reqs[batch[i]];

		for (uint32_t tok = 0; tok < r->gen_len; tok++)
			for (uint32_t l = 0; l < t->n_layers; l++)
				for (uint32_t s = 0; s < t->k; s++) {
					size_t f = (size_t)l * t->n_experts +
						   locus_trace_tok(t, r->gen, tok, l)[s];

					cnt += !seen[f];
					seen[f] = 1;
				}
	}
	return cnt;
}

enum { POL_RR, POL_DOMAIN, POL_ELDR, POL_ELDR_ALL, POL_N };
static const char *const pol_name[POL_N] = { "round-robin", "domain (oracle)", "ELDR",
					     "ELDR --no-mask" };

static int run(const struct locus_trace *t, uint32_t K, uint32_t B, float tau)
{
	struct locus_eldrfit_opts o = { .n_decoders = K, .tau = tau, .seed = 1 };
	struct locus_trace_req *cal = NULL;
	struct locus_trace *calt = NULL;
	struct locus_eldrfit_result res = { 0 }, res_all = { 0 };
	struct locus_eldr_router *r = NULL, *r_all = NULL, *rp;
	struct locus_error e = { 0 };
	uint32_t *test = NULL, n_test = 0, n_cal = 0, *batch = NULL, *fill = NULL;
	double sum[POL_N] = { 0 }, step[POL_N] = { 0 };
	uint32_t n_batches = 0, rounds, seed = 12345;
	const size_t slen = locus_eldr_sig_len(t->n_layers, t->n_experts);
	uint8_t *sig = NULL, *seen = NULL;
	void *mem = NULL, *mem_all = NULL;
	size_t msz;
	int ret = 1;

	cal = calloc(t->n_requests, sizeof(*cal));
	test = calloc(t->n_requests, sizeof(*test));
	sig = malloc(slen);
	seen = malloc((size_t)t->n_layers * t->n_experts);
	batch = malloc(sizeof(*batch) * K * B);
	fill = calloc(K, sizeof(*fill));
	if (!cal || !test || !sig || !seen || !batch || !fill)
		goto out;
	for (uint32_t i = 0; i < t->n_requests; i++) {
		if (i % 2 == 0)
			cal[n_cal++] = t->reqs[i];
		else
			test[n_test++] = i;
	}
	for (uint32_t i = n_test - 1; i > 0; i--) { /* fixed arrival order */
		uint32_t j, x;

		seed = seed * 1103515245u + 12345u;
		j = (seed >> 8) % (i + 1);
		x = test[i];
		test[i] = test[j];
		test[j] = x;
	}
	if (locus_trace_from_arrays(t->n_layers, t->k, t->n_experts, n_cal, cal, NULL, &calt,
				    &e) < 0 ||
	    locus_eldrfit_trace(calt, &o, &res, &e) < 0)
		goto fail;
	msz = locus_eldr_router_mem_size((uint8_t *)res.blob + 64, res.blob_len - 64);
	mem = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
	if (!mem || locus_eldr_router_build(mem, msz, (uint8_t *)res.blob + 64, res.blob_len - 64,
					    LOCUS_ELDR_PATH_AUTO, &r, &e) < 0)
		goto fail;
	o.no_mask = 1;
	if (locus_eldrfit_trace(calt, &o, &res_all, &e) < 0)
		goto fail;
	msz = locus_eldr_router_mem_size((uint8_t *)res_all.blob + 64, res_all.blob_len - 64);
	mem_all = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
	if (!mem_all || locus_eldr_router_build(mem_all, msz, (uint8_t *)res_all.blob + 64,
						res_all.blob_len - 64, LOCUS_ELDR_PATH_AUTO, &r_all,
						&e) < 0)
		goto fail;
	rounds = n_test / (K * B);
	for (uint32_t rd = 0; rd < rounds; rd++) {
		const uint32_t *req = test + (size_t)rd * K * B;

		for (int p = 0; p < POL_N; p++) {
			rp = p == POL_ELDR_ALL ? r_all : r;
			memset(fill, 0, sizeof(*fill) * K);
			for (uint32_t d = 0; d < K; d++) {
				locus_eldr_router_set_load(rp, d, 0);
				locus_eldr_router_set_up(rp, d, 1);
			}
			for (uint32_t i = 0; i < K * B; i++) {
				uint32_t dst = 0;

				if (p == POL_RR) {
					dst = i % K;
				} else if (p == POL_DOMAIN) {
					uint32_t dom = t->reqs[req[i]].domain - 1; /* 0 = unlabelled */
					uint32_t nd = t->n_domains - 1, best = UINT32_MAX;

					for (uint32_t d = 0; d < K; d++) {
						int mine = nd && d % nd == dom % nd;
						uint32_t key = fill[d] + (mine ? 0 : 1000000);

						if (fill[d] < B && key < best) {
							best = key;
							dst = d;
						}
					}
				} else {
					struct locus_eldr_decision dec;

					if (locus_eldr_sig_build(sig, slen, t->n_layers,
								 t->n_experts, t->k,
								 t->reqs[req[i]].prompt,
								 t->reqs[req[i]].prompt_len, 0, &e) < 0 ||
					    locus_eldr_route(rp, sig, slen, &dec) < 0)
						goto fail;
					dst = dec.slot;
				}
				batch[dst * B + fill[dst]++] = req[i];
				if (p >= POL_ELDR && fill[dst] == B)
					locus_eldr_router_set_up(rp, dst, 0);
			}
			for (uint32_t d = 0; d < K; d++) {
				sum[p] += distinct_pairs(t, batch + d * B, B, seen);
				step[p] += pairs_per_step(t, batch + d * B, B, seen);
			}
		}
		n_batches += K;
	}
	printf("K=%-2u decoders, batch B=%u, tau=%.2f: %u calibration / %u held-out requests, "
	       "%u rounds\n", K, B, (double)tau, n_cal, n_test, rounds);
	printf("  %-16s %-24s %s\n", "policy", "per decode step", "whole batch (all steps)");
	for (int p = 0; p < POL_N; p++)
		printf("  %-16s %7.1f = %.3fx RR      %7.1f = %.3fx RR\n", pol_name[p],
		       step[p] / n_batches, step[p] / step[POL_RR], sum[p] / n_batches,
		       sum[p] / sum[POL_RR]);
	ret = 0;
	goto out;
fail:
	fprintf(stderr, "eldr_quality: %s (%s)\n", e.msg, locus_strerror(e.code));
out:
	free(mem_all);
	free(mem);
	locus_eldrfit_result_free(&res_all);
	locus_eldrfit_result_free(&res);
	locus_trace_free(calt);
	free(fill);
	free(batch);
	free(seen);
	free(sig);
	free(test);
	free(cal);
	return ret;
}

/* <root> of <root>/<build>/tools/eldr_quality, or "." */
static void repo_root(const char *argv0, char *out, size_t len)
{
	char path[4096];

	snprintf(out, len, ".");
	if (!realpath(argv0, path))
		return;
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(path, '/');

		if (!slash)
			return;
		*slash = '\0';
	}
	if (path[0] && strlen(path) < len)
		memcpy(out, path, strlen(path) + 1);
}

int main(int argc, char **argv)
{
	const char *data = getenv("LOCUS_DATA_DIR"), *trace = NULL;
	char root[1024], dir[1100], sample[1100];
	struct locus_error e = { 0 };
	struct locus_trace *t = NULL;
	int ret = 0;

	if (argc == 3 && !strcmp(argv[1], "--trace"))
		trace = argv[2];
	else if (argc != 1) {
		fprintf(stderr, "usage: eldr_quality [--trace FILE.jsonl]\n");
		return 2;
	}
	repo_root(argv[0], root, sizeof(root));
	if (!trace) {
		snprintf(dir, sizeof(dir), "%s/../shared/data", root);
		t = load_esft(data && *data ? data : dir);
		if (t) {
			printf("ESFT (full data): %u windows of 64 tokens, 4 domains\n",
			       t->n_requests);
		} else {
			snprintf(sample, sizeof(sample), "%s/tests/data/calib_sample.jsonl", root);
			trace = sample;
		}
	}
	if (trace) {
		if (locus_trace_load(trace, NULL, &t, &e) < 0) {
			fprintf(stderr, "eldr_quality: %s\n", e.msg);
			return 1;
		}
		printf("%s (full ESFT data absent: the repo sample): %u requests\n", trace,
		       t->n_requests);
	}
	ret |= run(t, 4, 4, 0.1f);
	ret |= run(t, 8, 4, 0.1f);
	ret |= run(t, 4, 8, 0.1f);
	ret |= run(t, 8, 2, 0.1f);
	locus_trace_free(t);
	return ret;
}
