// SPDX-License-Identifier: MIT
/*
 * esft2jsonl: ESFT expert_scores (github.com/deepseek-ai/ESFT, MIT; 26 MoE
 * layers, 64 experts, top-6, teacher-forced prefill over prompt + answer)
 * into the calibration trace format of control/locus_trace.h.
 *
 * Each sequence, or each window of W consecutive tokens of it, becomes one
 * request labelled with its domain. ESFT has no decode tokens; with
 * --prompt-frac F < 1 the first ceil(F * tokens) tokens of a request are its
 * prompt and the rest its "generated" tokens: a teacher-forced continuation
 * standing in for decode (a proxy: real decode routes one token at a time
 * from the model's own samples, here the tokens are the dataset's).
 *
 *   esft2jsonl [--esft DIR] [--domains law,translation,summary,intent]
 *              [--window W] [--prompt-frac F] [--per-domain N] -o OUT.jsonl
 *
 * --per-domain N keeps N requests per domain, evenly spaced over all of the
 * domain's windows (sequence order), so a small sample still spans the data.
 * DIR defaults to $LOCUS_DATA_DIR/esft/results/expert_scores, with
 * LOCUS_DATA_DIR defaulting to ../shared/data.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_trace.h"

#define ESFT_LAYERS  26
#define ESFT_K       6
#define ESFT_EXPERTS 64
#define MAX_DOMAINS  16

struct window {
	const struct locus_trace *src;
	uint32_t req, start, len;
};

static int usage(void)
{
	fprintf(stderr, "usage: esft2jsonl [--esft DIR] [--domains a,b,..] [--window W] "
		"[--prompt-frac F] [--per-domain N] -o OUT.jsonl\n");
	return 2;
}

static int parse_u32(const char *s, uint32_t *v)
{
	char *end;
	unsigned long x;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	x = strtoul(s, &end, 10);
	if (errno || *end || x > UINT32_MAX)
		return -1;
	*v = (uint32_t)x;
	return 0;
}

int main(int argc, char **argv)
{
	const char *esft = NULL, *out = NULL, *env;
	char domains_buf[256] = "law,translation,summary,intent", dir[4096], defdir[4096];
	char *dom[MAX_DOMAINS], *save = NULL;
	struct locus_trace *src[MAX_DOMAINS] = { 0 }, *t = NULL;
	struct locus_trace_req *reqs = NULL;
	const char **names = NULL;
	struct window *win = NULL;
	uint32_t window = 0, per_domain = 0, n_dom = 0, n_out = 0;
	double frac = 1.0;
	struct locus_error err = { 0 };
	int ret = 1;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--esft") && v)
			esft = argv[++i];
		else if (!strcmp(a, "--domains") && v && strlen(v) < sizeof(domains_buf))
			snprintf(domains_buf, sizeof(domains_buf), "%s", argv[++i]);
		else if (!strcmp(a, "--window") && v && !parse_u32(v, &window))
			i++;
		else if (!strcmp(a, "--per-domain") && v && !parse_u32(v, &per_domain))
			i++;
		else if (!strcmp(a, "--prompt-frac") && v) {
			char *end;

			frac = strtod(argv[++i], &end);
			if (*end || !(frac > 0.0 && frac <= 1.0))
				return usage();
		} else if (!strcmp(a, "-o") && v)
			out = argv[++i];
		else
			return usage();
	}
	if (!out)
		return usage();
	if (!esft) {
		env = getenv("LOCUS_DATA_DIR");
		snprintf(defdir, sizeof(defdir), "%s/esft/results/expert_scores",
			 env && *env ? env : "../shared/data");
		esft = defdir;
	}
	for (char *d = strtok_r(domains_buf, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
		if (n_dom == MAX_DOMAINS || !*d || strchr(d,
							  '/') || strlen(d) >= LOCUS_TRACE_DOMAIN_MAX)
			return usage();
		dom[n_dom++] = d;
	}
	if (!n_dom)
		return usage();
	for (uint32_t d = 0; d < n_dom; d++) {
		uint32_t n_win = 0, first = n_out, keep;
		struct window *nw;

		if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", esft, dom[d]) >= sizeof(dir))
			return usage();
		if (locus_trace_load_esft(dir, dom[d], ESFT_LAYERS, ESFT_K, ESFT_EXPERTS, &src[d],
					  &err) < 0)
			goto fail;
		for (uint32_t r = 0; r < src[d]->n_requests; r++) {
			uint32_t T = src[d]->reqs[r].prompt_len, w = window ? window : T;

			n_win += window ? T / w : 1;
		}
		nw = realloc(win, sizeof(*win) * (n_out + n_win));
		if (!nw) {
			locus_error_set(&err, ENOMEM, "out of memory");
			goto fail;
		}
		win = nw;
		for (uint32_t r = 0; r < src[d]->n_requests; r++) {
			uint32_t T = src[d]->reqs[r].prompt_len, w = window ? window : T;

			for (uint32_t s = 0; s + w <= T; s += w)
				win[n_out++] = (struct window){ src[d], r, s, w };
		}
		keep = per_domain && per_domain < n_win ? per_domain : n_win;
		for (uint32_t i = 0; i < keep; i++)
			win[first + i] = win[first + (uint32_t)((uint64_t)i * n_win / keep)];
		n_out = first + keep;
	}
	if (!n_out) {
		locus_error_set(&err, LOCUS_EPARSE,
				"no window fits: sequences shorter than --window");
		goto fail;
	}
	reqs = calloc(n_out, sizeof(*reqs));
	names = calloc(n_out, sizeof(*names));
	if (!reqs || !names) {
		locus_error_set(&err, ENOMEM, "out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < n_out; i++) {
		const struct window *w = &win[i];
		const struct locus_trace_req *sr = &w->src->reqs[w->req];
		uint32_t p = (uint32_t)ceil(frac * w->len);

		if (p < 1)
			p = 1;
		if (p > w->len)
			p = w->len;
		snprintf(reqs[i].id, sizeof(reqs[i].id), "%.40s@%u", sr->id, w->start);
		reqs[i].prompt = locus_trace_tok(w->src, sr->prompt, w->start, 0);
		reqs[i].prompt_len = p;
		reqs[i].gen = p < w->len ? locus_trace_tok(w->src, sr->prompt, w->start + p,
							   0) : NULL;
		reqs[i].gen_len = w->len - p;
		names[i] = w->src->domains[sr->domain];
	}
	if (locus_trace_from_arrays(ESFT_LAYERS, ESFT_K, ESFT_EXPERTS, n_out, reqs, names, &t,
				    &err) < 0)
		goto fail;
	if (locus_trace_write(t, out, &err) < 0)
		goto fail;
	fprintf(stderr, "esft2jsonl: wrote %u requests to %s\n", n_out, out);
	ret = 0;
	goto out;
fail:
	fprintf(stderr, "esft2jsonl: %s (%s)\n", err.msg, locus_strerror(err.code));
out:
	locus_trace_free(t);
	for (uint32_t d = 0; d < n_dom; d++)
		locus_trace_free(src[d]);
	free(names);
	free(reqs);
	free(win);
	return ret;
}
