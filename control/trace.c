// SPDX-License-Identifier: MIT
/*
 * JSONL calibration trace importer (format in locus_trace.h). All expert ids
 * of a file go into one growing u16 arena; requests keep offsets into it
 * until the end, when the pointers are set (the arena may move while it grows).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "locus_trace.h"
#include "trace_json.h"
#include "locus_file.h"
#include "trace_priv.h"
#include "locus_err_priv.h"

#define DEF_MAX_REQUESTS 1000000u
#define DEF_MAX_TOKENS   1000000u
#define DEF_MAX_FILE     (4ull << 30)
#define MAX_DOMAINS      4096u

int trace_builder_init(struct trace_builder *b, const struct locus_trace_opts *opts)
{
	memset(b, 0, sizeof(*b));
	if (opts)
		b->opts = *opts;
	if (!b->opts.max_requests)
		b->opts.max_requests = DEF_MAX_REQUESTS;
	if (!b->opts.max_tokens)
		b->opts.max_tokens = DEF_MAX_TOKENS;
	if (!b->opts.max_file_bytes)
		b->opts.max_file_bytes = DEF_MAX_FILE;
	if (b->opts.n_experts > 65535) /* E is a u16 in struct locus_trace */
		return -LOCUS_ERANGE;
	b->n_experts = b->opts.n_experts;
	b->t = calloc(1, sizeof(*b->t));
	b->priv = calloc(1, sizeof(*b->priv));
	if (!b->t || !b->priv)
		return -ENOMEM;
	b->t->priv = b->priv;
	/* domains[0] is the unlabelled domain "" */
	return trace_builder_domain(b, "", NULL) < 0 ? -ENOMEM : 0;
}

void trace_builder_abort(struct trace_builder *b)
{
	if (b->t) {
		b->t->reqs = b->reqs;
		b->t->domains = b->domains;
		locus_trace_free(b->t);
	} else {
		free(b->priv);
	}
	free(b->offs);
	b->t = NULL;
	b->priv = NULL;
	b->offs = NULL;
}

int trace_builder_reserve(struct trace_builder *b, size_t n_ids)
{
	struct trace_priv *pv = b->priv;
	size_t cap;
	uint16_t *a;

	if (pv->arena_len + n_ids <= pv->arena_cap)
		return 0;
	cap = pv->arena_cap ? pv->arena_cap : 4096;
	while (cap < pv->arena_len + n_ids)
		cap *= 2;
	a = realloc(pv->arena, cap * sizeof(*a));
	if (!a)
		return -ENOMEM;
	pv->arena = a;
	pv->arena_cap = cap;
	return 0;
}

int trace_builder_domain(struct trace_builder *b, const char *name, uint32_t *idx)
{
	char (*d)[LOCUS_TRACE_DOMAIN_MAX];
	uint32_t i;

	for (i = 0; i < b->n_domains; i++)
		if (!strcmp(b->domains[i], name))
			goto out;
	if (b->n_domains >= MAX_DOMAINS)
		return -LOCUS_ERANGE;
	d = realloc(b->domains, (b->n_domains + 1) * sizeof(*d));
	if (!d)
		return -ENOMEM;
	b->domains = d;
	snprintf(d[b->n_domains], sizeof(d[0]), "%s", name);
	i = b->n_domains++;
out:
	if (idx)
		*idx = i;
	return 0;
}

int trace_builder_add(struct trace_builder *b, const struct locus_trace_req *r,
		      size_t prompt_off, size_t gen_off)
{
	struct locus_trace_req *nr;
	size_t *no;

	if (b->n_reqs >= b->opts.max_requests)
		return -LOCUS_ERANGE;
	if (b->n_reqs == b->cap_reqs) {
		uint32_t cap = b->cap_reqs ? b->cap_reqs * 2 : 256;

		nr = realloc(b->reqs, (size_t)cap * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		b->reqs = nr;
		no = realloc(b->offs, (size_t)cap * 2 * sizeof(*no));
		if (!no)
			return -ENOMEM;
		b->offs = no;
		b->cap_reqs = cap;
	}
	b->reqs[b->n_reqs] = *r;
	b->offs[2 * b->n_reqs] = prompt_off;
	b->offs[2 * b->n_reqs + 1] = gen_off;
	b->n_reqs++;
	return 0;
}

int trace_builder_finish(struct trace_builder *b, struct locus_trace **out,
			 struct locus_error *err, const char *name)
{
	struct locus_trace *t = b->t;
	uint16_t *a = b->priv->arena;

	if (b->n_reqs == 0) {
		int ret = locus_error_set(err, LOCUS_EPARSE, "%s: trace has no requests", name);

		trace_builder_abort(b);
		return ret;
	}
	if (!b->n_experts) {
		/* inferred from the largest id seen (documented in locus_trace.h) */
		if (b->max_id >= 65535) {
			trace_builder_abort(b);
			return locus_error_set(err, LOCUS_ERANGE,
					       "%s: expert id 65535 leaves no room for E", name);
		}
		b->n_experts = b->max_id + 1u;
	}
	for (uint32_t i = 0; i < b->n_reqs; i++) {
		struct locus_trace_req *r = &b->reqs[i];

		r->prompt = a + b->offs[2 * i];
		r->gen = r->gen_len ? a + b->offs[2 * i + 1] : NULL;
	}
	t->n_requests = b->n_reqs;
	t->n_layers = b->n_layers;
	t->k = b->k;
	t->n_experts = (uint16_t)b->n_experts;
	t->n_domains = b->n_domains;
	t->domains = b->domains;
	t->reqs = b->reqs;
	free(b->offs);
	memset(b, 0, sizeof(*b));
	*out = t;
	return 0;
}

void locus_trace_free(struct locus_trace *t)
{
	struct trace_priv *pv;

	if (!t)
		return;
	pv = t->priv;
	if (pv) {
		free(pv->arena);
		free(pv);
	}
	free(t->reqs);
	free(t->domains);
	free(t);
}

/* ---- JSONL parsing ---- */

struct line_state {
	struct trace_builder *b;
	struct trace_builder b_storage;
	struct tj j;
};

/* One token: '[' n_layers x '[' k ids ']' ']' appended to the arena. */
static int parse_token(struct line_state *s)
{
	struct trace_builder *b = s->b;
	struct tj *j = &s->j;
	uint32_t l = 0, kk;
	int ret, more;

	ret = tj_expect(j, '[', "'[' opening a token's layers");
	if (ret < 0)
		return ret;
	do {
		if (b->n_layers && l >= b->n_layers)
			return tj_fail(j, LOCUS_EPARSE, "token has more than n_layers=%u layers",
				       b->n_layers);
		if (l >= LOCUS_TRACE_MAX_LAYERS)
			return tj_fail(j, LOCUS_ERANGE, "more than %u layers",
				       LOCUS_TRACE_MAX_LAYERS);
		ret = tj_expect(j, '[', "'[' opening a layer's expert ids");
		if (ret < 0)
			return ret;
		kk = 0;
		do {
			const char *at;
			uint64_t v;

			if (b->k && kk >= b->k)
				return tj_fail(j, LOCUS_EPARSE, "layer %u has more than k=%u ids",
					       l, b->k);
			if (kk >= LOCUS_TRACE_MAX_K)
				return tj_fail(j, LOCUS_ERANGE, "more than %u ids per layer",
					       LOCUS_TRACE_MAX_K);
			tj_ws(j);
			at = j->p;
			ret = tj_uint(j, 65535, &v);
			if (ret < 0)
				return ret;
			if (b->n_experts && v >= b->n_experts) {
				j->p = at; /* point the column at the id */
				return tj_fail(j, LOCUS_ERANGE, "expert id %llu >= n_experts=%u",
					       (unsigned long long)v, b->n_experts);
			}
			if (v > b->max_id)
				b->max_id = (uint32_t)v;
			ret = trace_builder_reserve(b, 1);
			if (ret < 0)
				return tj_fail(j, ENOMEM, "out of memory");
			b->priv->arena[b->priv->arena_len++] = (uint16_t)v;
			kk++;
			more = tj_next(j, ']');
			if (more < 0)
				return more;
		} while (more);
		if (!b->k)
			b->k = (uint16_t)kk;
		else if (kk != b->k)
			return tj_fail(j, LOCUS_EPARSE, "layer %u has %u ids, expected k=%u", l, kk,
				       b->k);
		l++;
		more = tj_next(j, ']');
		if (more < 0)
			return more;
	} while (more);
	if (!b->n_layers)
		b->n_layers = (uint16_t)l;
	else if (l != b->n_layers)
		return tj_fail(j, LOCUS_EPARSE, "token has %u layers, expected n_layers=%u", l,
			       b->n_layers);
	return 0;
}

/* [token, ...] or [] or null; *n receives the token count. */
static int parse_tokens(struct line_state *s, uint32_t *n, const char *key)
{
	struct tj *j = &s->j;
	int ret, more;

	*n = 0;
	if (tj_null(j))
		return 0;
	ret = tj_expect(j, '[', "'[' opening a token list");
	if (ret < 0)
		return ret;
	if (tj_peek(j) == ']') {
		j->p++;
		return 0;
	}
	do {
		if (*n >= s->b->opts.max_tokens)
			return tj_fail(j, LOCUS_ERANGE, "%s has more than %u tokens", key,
				       s->b->opts.max_tokens);
		ret = parse_token(s);
		if (ret < 0)
			return ret;
		(*n)++;
		more = tj_next(j, ']');
		if (more < 0)
			return more;
	} while (more);
	return 0;
}

enum {
	K_ID = 1u << 0, K_DOMAIN = 1u << 1, K_PROMPT = 1u << 2, K_GEN = 1u << 3,
	K_MAGIC = 1u << 4, K_LAYERS = 1u << 5, K_K = 1u << 6, K_E = 1u << 7,
};

static int parse_line(struct line_state *s, int first)
{
	struct trace_builder *b = s->b;
	struct tj *j = &s->j;
	struct locus_trace_req r;
	char key[32], domain[LOCUS_TRACE_DOMAIN_MAX] = "";
	uint64_t hv[4] = { 0 };
	size_t prompt_off = 0, gen_off = 0;
	unsigned seen = 0, bit;
	const char *at;
	int ret, more;

	memset(&r, 0, sizeof(r));
	ret = tj_expect(j, '{', "'{' opening a request object");
	if (ret < 0)
		return ret;
	if (tj_peek(j) == '}')
		return tj_fail(j, LOCUS_EPARSE, "empty object: no prompt_routed_experts");
	do {
		tj_ws(j);
		at = j->p;
		ret = tj_string(j, key, sizeof(key));
		if (ret == -LOCUS_ERANGE) {
			/* longer than any key of ours: unknown; validate it whole */
			j->p = at;
			ret = tj_string(j, NULL, 0);
			key[0] = '\0';
		}
		if (ret < 0)
			return ret;
		bit = !strcmp(key, "id") ? K_ID : !strcmp(key, "domain") ? K_DOMAIN :
		      !strcmp(key, "prompt_routed_experts") ? K_PROMPT :
		      !strcmp(key, "routed_experts") ? K_GEN :
		      !strcmp(key, "locus_trace") ? K_MAGIC : !strcmp(key, "n_layers") ? K_LAYERS :
		      !strcmp(key, "k") ? K_K : !strcmp(key, "n_experts") ? K_E : 0;
		if (bit & seen)
			return tj_fail(j, LOCUS_EPARSE, "duplicate key \"%s\"", key);
		seen |= bit;
		ret = tj_expect(j, ':', "':'");
		if (ret < 0)
			return ret;
		switch (bit) {
		case K_ID:
			if (tj_peek(j) == '"') {
				ret = tj_string(j, r.id, sizeof(r.id));
			} else {
				uint64_t v;

				ret = tj_uint(j, UINT64_MAX, &v);
				if (ret >= 0)
					snprintf(r.id, sizeof(r.id), "%llu", (unsigned long long)v);
			}
			break;
		case K_DOMAIN:
			ret = tj_string(j, domain, sizeof(domain));
			break;
		case K_PROMPT:
			prompt_off = b->priv->arena_len;
			ret = parse_tokens(s, &r.prompt_len, "prompt_routed_experts");
			break;
		case K_GEN:
			gen_off = b->priv->arena_len;
			ret = parse_tokens(s, &r.gen_len, "routed_experts");
			break;
		case K_MAGIC:
			tj_ws(j);
			at = j->p;
			ret = tj_uint(j, 1000, &hv[0]);
			if (ret >= 0 && hv[0] != 1) {
				j->p = at;
				ret = tj_fail(j, LOCUS_EVERSION,
					      "trace version %llu, this build reads 1",
					      (unsigned long long)hv[0]);
			}
			break;
		case K_LAYERS:
			ret = tj_uint(j, LOCUS_TRACE_MAX_LAYERS, &hv[1]);
			break;
		case K_K:
			ret = tj_uint(j, LOCUS_TRACE_MAX_K, &hv[2]);
			break;
		case K_E:
			ret = tj_uint(j, 65535, &hv[3]);
			break;
		default:
			ret = tj_skip(j);
			break;
		}
		if (ret < 0)
			return ret;
		more = tj_next(j, '}');
		if (more < 0)
			return more;
	} while (more);
	if (tj_peek(j) != -1)
		return tj_fail(j, LOCUS_EPARSE, "text after the object: one JSON object per line");

	if (seen & K_MAGIC) {
		if (!first)
			return tj_fail(j, LOCUS_EPARSE,
				       "header (\"locus_trace\") only allowed on the first line");
		if (seen & (K_ID | K_DOMAIN | K_PROMPT | K_GEN))
			return tj_fail(j, LOCUS_EPARSE, "header line mixes request keys");
		if ((seen & K_LAYERS) && !hv[1])
			return tj_fail(j, LOCUS_ERANGE, "header n_layers is 0");
		if ((seen & K_K) && !hv[2])
			return tj_fail(j, LOCUS_ERANGE, "header k is 0");
		if (seen & K_E) {
			if (!hv[3])
				return tj_fail(j, LOCUS_ERANGE, "header n_experts is 0");
			if (b->opts.n_experts && b->opts.n_experts != hv[3])
				return tj_fail(j, LOCUS_ERANGE,
					       "header n_experts=%llu but %u was requested",
					       (unsigned long long)hv[3], b->opts.n_experts);
			b->n_experts = (uint32_t)hv[3];
		}
		b->n_layers = (uint16_t)hv[1];
		b->k = (uint16_t)hv[2];
		return 0;
	}
	if (!(seen & K_PROMPT) || r.prompt_len == 0)
		return tj_fail(j, LOCUS_EPARSE, "request has no prompt_routed_experts tokens");
	if (!(seen & K_ID))
		snprintf(r.id, sizeof(r.id), "%u", b->n_reqs);
	ret = trace_builder_domain(b, domain, &r.domain);
	if (ret < 0)
		return tj_fail(j, -ret, "too many domains");
	ret = trace_builder_add(b, &r, prompt_off, gen_off);
	if (ret == -LOCUS_ERANGE)
		return tj_fail(j, LOCUS_ERANGE, "more than %u requests", b->opts.max_requests);
	if (ret < 0)
		return tj_fail(j, -ret, "out of memory");
	return 0;
}

int locus_trace_parse(const char *buf, size_t len, const char *name,
		      const struct locus_trace_opts *opts, struct locus_trace **out,
		      struct locus_error *err)
{
	struct line_state s;
	const char *p = buf, *end = buf + len;
	uint32_t line = 0;
	int first = 1, ret;

	if (!name)
		name = "<trace>";
	if (!buf && len)
		return locus_error_set(err, EINVAL, "%s: no buffer", name);
	ret = trace_builder_init(&s.b_storage, opts);
	s.b = &s.b_storage;
	if (ret < 0) {
		trace_builder_abort(s.b);
		return locus_error_set(err, -ret, "%s: bad options", name);
	}
	if (opts && len > s.b->opts.max_file_bytes) {
		trace_builder_abort(s.b);
		return locus_error_set(err, LOCUS_ERANGE, "%s: %zu bytes exceeds the limit", name,
				       len);
	}
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;

		line++;
		tj_init(&s.j, p, (size_t)(le - p), name, line, err);
		if (memchr(p, '\0', (size_t)(le - p))) {
			ret = tj_fail(&s.j, LOCUS_EPARSE, "NUL byte in line");
			goto err_abort;
		}
		if (tj_peek(&s.j) != -1) {
			ret = parse_line(&s, first);
			if (ret < 0)
				goto err_abort;
			first = 0;
		}
		p = nl ? nl + 1 : end;
	}
	return trace_builder_finish(s.b, out, err, name);

err_abort:
	trace_builder_abort(s.b);
	return ret;
}

int trace_read_file(const char *path, uint64_t max, char **buf, size_t *len,
		    struct locus_error *err)
{
	return locus_file_read(path, max, buf, len, err);
}

int locus_trace_load(const char *path, const struct locus_trace_opts *opts,
		     struct locus_trace **out, struct locus_error *err)
{
	uint64_t max = opts && opts->max_file_bytes ? opts->max_file_bytes : DEF_MAX_FILE;
	size_t len;
	char *buf;
	int ret;

	ret = trace_read_file(path, max, &buf, &len, err);
	if (ret < 0)
		return ret;
	ret = locus_trace_parse(buf, len, path, opts, out, err);
	free(buf);
	return ret;
}
