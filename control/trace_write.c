// SPDX-License-Identifier: MIT
/* Traces from caller arrays, and the JSONL writer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locus_err_priv.h"
#include "locus_trace.h"
#include "trace_json.h"
#include "trace_priv.h"

static int copy_ids(struct trace_builder *b, const uint16_t *src, size_t n, size_t *off,
		    uint32_t req, struct locus_error *err)
{
	if (n && !src)
		return locus_error_set(err, EINVAL, "request %u: token array is NULL", req);
	for (size_t i = 0; i < n; i++)
		if (src[i] >= b->n_experts)
			return locus_error_set(err, LOCUS_ERANGE,
					       "request %u: expert id %u at %zu >= n_experts=%u",
					       req, src[i], i, b->n_experts);
	if (trace_builder_reserve(b, n) < 0)
		return locus_error_set(err, ENOMEM, "out of memory");
	*off = b->priv->arena_len;
	if (n)
		memcpy(b->priv->arena + b->priv->arena_len, src, n * sizeof(*src));
	b->priv->arena_len += n;
	return 0;
}

int locus_trace_from_arrays(uint16_t n_layers, uint16_t k, uint16_t n_experts,
			    uint32_t n_requests, const struct locus_trace_req *reqs,
			    const char *const *domain_names, struct locus_trace **out,
			    struct locus_error *err)
{
	struct locus_trace_opts o = { .n_experts = n_experts };
	struct trace_builder b;
	int ret;

	if (!n_layers || n_layers > LOCUS_TRACE_MAX_LAYERS || !k || k > LOCUS_TRACE_MAX_K ||
	    !n_experts)
		return locus_error_set(err, LOCUS_ERANGE, "bad shape L=%u k=%u E=%u", n_layers, k,
				       n_experts);
	if (!n_requests || !reqs)
		return locus_error_set(err, LOCUS_EPARSE, "trace has no requests");
	ret = trace_builder_init(&b, &o);
	if (ret < 0) {
		trace_builder_abort(&b);
		return locus_error_set(err, -ret, "out of memory");
	}
	b.n_layers = n_layers;
	b.k = k;
	for (uint32_t i = 0; i < n_requests; i++) {
		struct locus_trace_req r = reqs[i];
		size_t per = (size_t)n_layers * k, po = 0, go = 0;
		const char *dn = domain_names ? domain_names[i] : NULL;

		if (!r.prompt_len) {
			ret = locus_error_set(err, LOCUS_EPARSE, "request %u has no prompt tokens",
					      i);
			goto err_abort;
		}
		ret = copy_ids(&b, reqs[i].prompt, per * r.prompt_len, &po, i, err);
		if (ret < 0)
			goto err_abort;
		ret = copy_ids(&b, reqs[i].gen, per * r.gen_len, &go, i, err);
		if (ret < 0)
			goto err_abort;
		r.id[LOCUS_TRACE_ID_MAX - 1] = '\0';
		ret = trace_builder_domain(&b, dn ? dn : "", &r.domain);
		if (ret >= 0)
			ret = trace_builder_add(&b, &r, po, go);
		if (ret < 0) {
			ret = locus_error_set(err, -ret, "request %u: %s", i, locus_strerror(ret));
			goto err_abort;
		}
	}
	return trace_builder_finish(&b, out, err, "trace");

err_abort:
	trace_builder_abort(&b);
	return ret;
}


static void put_tokens(FILE *f, const struct locus_trace *t, const uint16_t *a, uint32_t n)
{
	fputc('[', f);
	for (uint32_t tok = 0; tok < n; tok++) {
		fputs(tok ? ",[" : "[", f);
		for (uint32_t l = 0; l < t->n_layers; l++) {
			const uint16_t *ids = locus_trace_tok(t, a, tok, l);

			fputs(l ? ",[" : "[", f);
			for (uint32_t i = 0; i < t->k; i++)
				fprintf(f, i ? ",%u" : "%u", ids[i]);
			fputc(']', f);
		}
		fputc(']', f);
	}
	fputc(']', f);
}

int locus_trace_write(const struct locus_trace *t, const char *path, struct locus_error *err)
{
	char tmp[4096];
	FILE *f;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp))
		return locus_error_set(err, ENAMETOOLONG, "%s: path too long", path);
	f = fopen(tmp, "w");
	if (!f)
		return locus_error_set(err, errno, "%s: %s", tmp, strerror(errno));
	fprintf(f, "{\"locus_trace\":1,\"n_layers\":%u,\"k\":%u,\"n_experts\":%u}\n",
		t->n_layers, t->k, t->n_experts);
	for (uint32_t i = 0; i < t->n_requests; i++) {
		const struct locus_trace_req *r = &t->reqs[i];

		fputs("{\"id\":", f);
		tj_put_string(f, r->id);
		if (r->domain) {
			fputs(",\"domain\":", f);
			tj_put_string(f, t->domains[r->domain]);
		}
		fputs(",\"prompt_routed_experts\":", f);
		put_tokens(f, t, r->prompt, r->prompt_len);
		fputs(",\"routed_experts\":", f);
		put_tokens(f, t, r->gen, r->gen_len);
		fputs("}\n", f);
	}
	if (fflush(f) || ferror(f) || fsync(fileno(f))) {
		int e = errno ? errno : EIO;

		fclose(f);
		unlink(tmp);
		return locus_error_set(err, e, "%s: write: %s", tmp, strerror(e));
	}
	if (fclose(f)) {
		int e = errno;

		unlink(tmp);
		return locus_error_set(err, e, "%s: close: %s", tmp, strerror(e));
	}
	if (rename(tmp, path) < 0) {
		int e = errno;

		unlink(tmp);
		return locus_error_set(err, e, "%s: rename: %s", path, strerror(e));
	}
	return 0;
}
