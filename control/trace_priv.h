/* SPDX-License-Identifier: MIT */
/*
 * Internals shared by the trace reader, writer and the ESFT importer: a
 * builder that accumulates requests and one u16 arena of expert ids.
 */
#ifndef LOCUS_TRACE_PRIV_H
#define LOCUS_TRACE_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "locus_trace.h"

struct trace_priv {
	uint16_t *arena;
	size_t arena_len;
	size_t arena_cap;
};

struct trace_builder {
	struct locus_trace_opts opts;
	struct locus_trace *t;
	struct trace_priv *priv;
	struct locus_trace_req *reqs;
	size_t *offs;           /* [2 * i]: prompt offset, [2 * i + 1]: gen offset */
	uint32_t n_reqs, cap_reqs;
	char (*domains)[LOCUS_TRACE_DOMAIN_MAX];
	uint32_t n_domains;
	uint16_t n_layers, k;   /* 0 until known */
	uint32_t n_experts;     /* 0 until known (then ids are checked) */
	uint32_t max_id;
};

int trace_builder_init(struct trace_builder *b, const struct locus_trace_opts *opts);
void trace_builder_abort(struct trace_builder *b);
int trace_builder_reserve(struct trace_builder *b, size_t n_ids);
int trace_builder_domain(struct trace_builder *b, const char *name, uint32_t *idx);
int trace_builder_add(struct trace_builder *b, const struct locus_trace_req *r,
		      size_t prompt_off, size_t gen_off);
int trace_builder_finish(struct trace_builder *b, struct locus_trace **out,
			 struct locus_error *err, const char *name);

/* Whole file into a NUL-terminated malloc'd buffer, at most max bytes. */
int trace_read_file(const char *path, uint64_t max, char **buf, size_t *len,
		    struct locus_error *err);

#endif /* LOCUS_TRACE_PRIV_H */
