// SPDX-License-Identifier: MIT
/*
 * Reader of ESFT's expert_scores/<domain>/expert_weights_<L>.txt files
 * (github.com/deepseek-ai/ESFT, MIT). Line i of every layer file is sequence
 * i: T*k tab-separated expert ids, an empty field (two tabs), then T*k gate
 * weights. Layer 1 fixes the sequences and their token counts; every other
 * layer must agree.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_trace.h"
#include "trace_priv.h"

#define ESFT_MAX_FILE (1ull << 30)

struct esft_seq {
	size_t off;     /* arena offset of [T][L][k] */
	uint32_t tokens;
};

/* Parse the ids of one line (up to the empty field); returns count or -err. */
static long parse_ids(const char *p, const char *le, const char **weights, uint16_t *dst,
		      size_t stride_tok, uint16_t k, uint16_t n_experts, size_t cap,
		      const char *path, uint32_t line, struct locus_error *err)
{
	long n = 0;

	while (p < le && *p != '\t') {
		unsigned long v = 0;
		const char *s = p;

		while (p < le && *p >= '0' && *p <= '9' && p - s < 6)
			v = v * 10 + (unsigned long)(*p++ - '0');
		if (p == s || (p < le && *p != '\t'))
			return locus_error_set(err, LOCUS_EPARSE, "%s:%u: bad expert id field",
					       path, line);
		if (v >= n_experts)
			return locus_error_set(err, LOCUS_ERANGE, "%s:%u: expert id %lu >= %u",
					       path,
					       line, v, n_experts);
		if (dst) {
			if ((size_t)n >= cap)
				return locus_error_set(err, LOCUS_EPARSE,
						       "%s:%u: more ids than layer 1 has", path, line);
			dst[(size_t)(n / k) * stride_tok + (size_t)(n % k)] = (uint16_t)v;
		}
		n++;
		if (p < le)
			p++; /* the tab */
	}
	if (p >= le || *p != '\t')
		return locus_error_set(err, LOCUS_EPARSE,
				       "%s:%u: no empty field between ids and weights", path, line);
	*weights = p + 1;
	return n;
}

/*
 * Reorder each token's k ids (dst, tokens stride_tok apart) by descending
 * gate weight, the order a top-k kernel emits them in (ties keep the file's
 * order); weights are the n tab-separated numbers from w to le.
 */
static int order_by_gate(const char *w, const char *le, uint16_t *dst, size_t stride_tok,
			 uint16_t k, long n, const char *path, uint32_t line,
			 struct locus_error *err)
{
	double g[LOCUS_TRACE_MAX_K];

	for (long t = 0; t < n / k; t++) {
		uint16_t *ids = dst + (size_t)t * stride_tok;

		for (uint16_t j = 0; j < k; j++) {
			char *end;

			/* a number right here: strtod would skip a tab, an empty field */
			if (w >= le || !((*w >= '0' && *w <= '9') || *w == '.'))
				return locus_error_set(err, LOCUS_EPARSE,
						       "%s:%u: gate weight %ld is not a "
						       "non-negative number", path, line,
						       t * k + j + 1);
			g[j] = strtod(w, &end);
			if (end == w || (end < le && *end != '\t') || !(g[j] >= 0) ||
			    g[j] > 1e30)
				return locus_error_set(err, LOCUS_EPARSE,
						       "%s:%u: gate weight %ld is not a "
						       "non-negative number", path, line,
						       t * k + j + 1);
			w = end < le ? end + 1 : end;
		}
		for (uint16_t j = 1; j < k; j++) {
			double gj = g[j];
			uint16_t id = ids[j];
			int i = j - 1;

			for (; i >= 0 && g[i] < gj; i--) {
				g[i + 1] = g[i];
				ids[i + 1] = ids[i];
			}
			g[i + 1] = gj;
			ids[i + 1] = id;
		}
	}
	return 0;
}

static long count_fields(const char *p, const char *le)
{
	long n = p < le ? 1 : 0;

	for (; p < le; p++)
		if (*p == '\t')
			n++;
	return n;
}

static int read_layer(const char *dir, uint16_t layer, char **buf, size_t *len,
		      struct locus_error *err, char *path, size_t path_len)
{
	if ((size_t)snprintf(path, path_len, "%s/expert_weights_%u.txt", dir, layer) >= path_len)
		return locus_error_set(err, ENAMETOOLONG, "%s: path too long", dir);
	return trace_read_file(path, ESFT_MAX_FILE, buf, len, err);
}

struct esft_ctx {
	struct trace_builder b;
	struct esft_seq *seqs;
	uint32_t n_seqs, cap_seqs;
	uint16_t n_layers, k, n_experts;
	int gate_order;
	const char *path;
	struct locus_error *err;
};

static int add_seq(struct esft_ctx *c, long n, uint32_t line)
{
	if ((uint64_t)n / c->k > UINT32_MAX)
		return locus_error_set(c->err, LOCUS_ERANGE, "%s:%u: too long", c->path, line);
	if (c->n_seqs == c->cap_seqs) {
		uint32_t nc = c->cap_seqs ? c->cap_seqs * 2 : 64;
		struct esft_seq *ns = realloc(c->seqs, nc * sizeof(*ns));

		if (!ns)
			return locus_error_set(c->err, ENOMEM, "out of memory");
		c->seqs = ns;
		c->cap_seqs = nc;
	}
	c->seqs[c->n_seqs].tokens = (uint32_t)(n / c->k);
	c->seqs[c->n_seqs].off = 0;
	c->n_seqs++;
	return 0;
}

/*
 * One pass over a layer file: fill == 0 counts sequences (layer 1 only),
 * fill == 1 writes layer l's ids into the arena and checks the shape.
 */
static int scan_layer(struct esft_ctx *c, const char *buf, size_t len, uint16_t l, int fill)
{
	const char *p = buf, *end = buf + len;
	size_t per_tok = (size_t)c->n_layers * c->k;
	uint32_t line = 0;
	int ret;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *ls = p, *le = nl ? nl : end, *w = NULL;
		uint16_t *dst = NULL;
		size_t cap = 0;
		long n;

		p = nl ? nl + 1 : end;
		if (le > ls && le[-1] == '\r')
			le--;
		if (le == ls) /* blank line: the file's trailing newline */
			continue;
		line++;
		if (fill) {
			if (line > c->n_seqs)
				return locus_error_set(c->err, LOCUS_EPARSE,
						       "%s: more sequences than layer 1 (%u)",
						       c->path, c->n_seqs);
			dst = c->b.priv->arena + c->seqs[line - 1].off + (size_t)l * c->k;
			cap = (size_t)c->seqs[line - 1].tokens * c->k;
		}
		n = parse_ids(ls, le, &w, dst, per_tok, c->k, c->n_experts, cap, c->path, line,
			      c->err);
		if (n < 0)
			return (int)n;
		if (n == 0 || n % c->k)
			return locus_error_set(c->err, LOCUS_EPARSE,
					       "%s:%u: %ld ids is not a positive multiple of k=%u",
					       c->path, line, n, c->k);
		if (count_fields(w, le) != n)
			return locus_error_set(c->err, LOCUS_EPARSE,
					       "%s:%u: %ld ids but %ld weights",
					       c->path, line, n, count_fields(w, le));
		if (!fill) {
			ret = add_seq(c, n, line);
			if (ret < 0)
				return ret;
		} else if ((size_t)n != cap) {
			return locus_error_set(c->err, LOCUS_EPARSE,
					       "%s:%u: %ld tokens, layer 1 has %u",
					       c->path, line, n / c->k, c->seqs[line - 1].tokens);
		} else if (c->gate_order) {
			ret = order_by_gate(w, le, dst, per_tok, c->k, n, c->path, line, c->err);
			if (ret < 0)
				return ret;
		}
	}
	if (fill && line != c->n_seqs)
		return locus_error_set(c->err, LOCUS_EPARSE, "%s: %u sequences, layer 1 has %u",
				       c->path, line, c->n_seqs);
	if (!fill && !line)
		return locus_error_set(c->err, LOCUS_EPARSE, "%s: no sequences", c->path);
	return 0;
}

int locus_trace_load_esft(const char *dir, const char *domain, uint16_t n_layers,
			  uint16_t k, uint16_t n_experts, struct locus_trace **out,
			  struct locus_error *err)
{
	return locus_trace_load_esft_flags(dir, domain, n_layers, k, n_experts, 0, out, err);
}

int locus_trace_load_esft_flags(const char *dir, const char *domain, uint16_t n_layers,
				uint16_t k, uint16_t n_experts, unsigned flags,
				struct locus_trace **out, struct locus_error *err)
{
	struct locus_trace_opts o = { .n_experts = n_experts };
	struct esft_ctx c;
	char path[4096];
	size_t len;
	char *buf;
	int ret;

	if (!n_layers || n_layers > LOCUS_TRACE_MAX_LAYERS || !k || k > LOCUS_TRACE_MAX_K ||
	    !n_experts)
		return locus_error_set(err, LOCUS_ERANGE, "bad shape L=%u k=%u E=%u", n_layers, k,
				       n_experts);
	memset(&c, 0, sizeof(c));
	c.n_layers = n_layers;
	c.k = k;
	c.n_experts = n_experts;
	c.gate_order = !!(flags & LOCUS_TRACE_ESFT_GATE_ORDER);
	c.path = path;
	c.err = err;
	ret = trace_builder_init(&c.b, &o);
	if (ret < 0) {
		ret = locus_error_set(err, -ret, "out of memory");
		goto err_abort;
	}
	c.b.n_layers = n_layers;
	c.b.k = k;
	for (uint16_t l = 0; l < n_layers; l++) {
		ret = read_layer(dir, (uint16_t)(l + 1), &buf, &len, err, path, sizeof(path));
		if (ret < 0)
			goto err_abort;
		if (l == 0) {
			size_t total = 0;

			ret = scan_layer(&c, buf, len, 0, 0);
			for (uint32_t i = 0; ret >= 0 && i < c.n_seqs; i++) {
				c.seqs[i].off = total;
				total += (size_t)c.seqs[i].tokens * n_layers * k;
			}
			if (ret >= 0 && trace_builder_reserve(&c.b, total) < 0)
				ret = locus_error_set(err, ENOMEM, "out of memory");
			if (ret >= 0)
				c.b.priv->arena_len = total;
		}
		if (ret >= 0)
			ret = scan_layer(&c, buf, len, l, 1);
		free(buf);
		if (ret < 0)
			goto err_abort;
	}
	for (uint32_t i = 0; i < c.n_seqs; i++) {
		struct locus_trace_req r;

		memset(&r, 0, sizeof(r));
		snprintf(r.id, sizeof(r.id), "%.40s-%u", domain, i);
		r.prompt_len = c.seqs[i].tokens;
		ret = trace_builder_domain(&c.b, domain, &r.domain);
		if (ret >= 0)
			ret = trace_builder_add(&c.b, &r, c.seqs[i].off, 0);
		if (ret < 0) {
			ret = locus_error_set(err, -ret, "%s", locus_strerror(ret));
			goto err_abort;
		}
	}
	free(c.seqs);
	return trace_builder_finish(&c.b, out, err, dir);

err_abort:
	free(c.seqs);
	trace_builder_abort(&c.b);
	return ret;
}

const char *const locus_trace_esft_domains[LOCUS_TRACE_ESFT_DOMAINS] = {
	"law", "translation", "summary", "intent",
};

/* Append window w of sr (from src) to reqs/names, growing them; 0 or -ENOMEM. */
static int add_window(struct locus_trace_req **reqs, const char ***names, uint32_t *n,
		      uint32_t *cap, const struct locus_trace *src,
		      const struct locus_trace_req *sr, uint32_t w, uint32_t prompt_len,
		      uint32_t gen_len, const char *domain)
{
	struct locus_trace_req *r;

	if (*n == *cap) {
		uint32_t ncap = *cap ? *cap * 2 : 256;
		void *a = realloc(*reqs, sizeof(**reqs) * ncap), *b;

		if (!a)
			return -ENOMEM;
		*reqs = a;
		b = realloc(*names, sizeof(**names) * ncap);
		if (!b)
			return -ENOMEM;
		*names = b;
		*cap = ncap;
	}
	r = &(*reqs)[*n];
	memset(r, 0, sizeof(*r));
	snprintf(r->id, sizeof(r->id), "%.40s@%u", sr->id, w);
	r->prompt = locus_trace_tok(src, sr->prompt, w, 0);
	r->prompt_len = prompt_len;
	r->gen = locus_trace_tok(src, sr->prompt, w + prompt_len, 0);
	r->gen_len = gen_len;
	(*names)[(*n)++] = domain;
	return 0;
}

int locus_trace_esft_windows(const char *data, uint32_t prompt_len, uint32_t gen_len,
			     struct locus_trace **out, struct locus_error *err)
{
	struct locus_trace *src[LOCUS_TRACE_ESFT_DOMAINS] = { 0 };
	uint32_t n = 0, cap = 0, win = prompt_len + gen_len;
	struct locus_trace_req *reqs = NULL;
	const char **names = NULL;
	char dir[4096];
	int ret = 0;

	*out = NULL;
	if (!prompt_len || win < prompt_len)
		return locus_error_set(err, EINVAL, "ESFT windows: a prompt of %u and %u "
				       "decoded tokens", prompt_len, gen_len);
	for (int d = 0; d < LOCUS_TRACE_ESFT_DOMAINS && !ret; d++) {
		const char *dom = locus_trace_esft_domains[d];

		snprintf(dir, sizeof(dir), "%s/esft/results/expert_scores/%s", data, dom);
		ret = locus_trace_load_esft(dir, dom, 26, 6, 64, &src[d], err);
		for (uint32_t r = 0; !ret && r < src[d]->n_requests; r++) {
			const struct locus_trace_req *sr = &src[d]->reqs[r];

			for (uint32_t w = 0; !ret && w + win <= sr->prompt_len; w += win)
				ret = add_window(&reqs, &names, &n, &cap, src[d], sr, w,
						 prompt_len, gen_len, dom);
			if (ret)
				locus_error_set(err, -ret, "ESFT windows: out of memory");
		}
	}
	if (!ret)
		ret = locus_trace_from_arrays(26, 6, 64, n, reqs, names, out, err);
	for (int d = 0; d < LOCUS_TRACE_ESFT_DOMAINS; d++)
		locus_trace_free(src[d]);
	free(names);
	free(reqs);
	return ret;
}
