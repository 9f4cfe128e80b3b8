/* SPDX-License-Identifier: MIT */
/*
 * Calibration traces: per-request routed experts, as vLLM and SGLang return
 * them with --enable-return-routed-experts, stored as JSON Lines.
 *
 * File format (UTF-8, one JSON object per line, blank lines ignored):
 *
 *   {"locus_trace":1,"n_layers":26,"k":6,"n_experts":64}      optional, first line only
 *   {"id":"law-0","domain":"law",
 *    "prompt_routed_experts":[[[e,...k],...n_layers],...prompt tokens],
 *    "routed_experts":[[[e,...k],...n_layers],...generated tokens]}
 *
 *   - "id": string or non-negative integer (kept as text, at most 63 bytes).
 *     Optional; the 0-based request index is used when absent.
 *   - "domain": optional string label (at most 31 bytes), used by tests and
 *     quality tools only; the fit never reads it.
 *   - "prompt_routed_experts": required, at least one token.
 *   - "routed_experts": optional, may be [] or null (no decode data).
 *   - Other keys are skipped (any JSON value, nesting bounded).
 *   - Every token has exactly n_layers layers of exactly k integer ids; the
 *     first token of the file fixes n_layers and k unless the header line does.
 *
 * Number of experts, in order of precedence:
 *   1. locus_trace_opts.n_experts when non-zero (the caller knows the model);
 *   2. the header line's "n_experts";
 *   3. otherwise max id seen + 1 (a trace that never routes to the last
 *      experts then under-reports E: pass the model's E when you know it).
 * With 1 or 2, an id >= n_experts is an error naming its line and column; when
 * both are given and disagree, that is an error too. E is at most 65535.
 *
 * Strict JSON: no NaN/Infinity, no trailing commas, no comments, no leading
 * zeros, strings are well-formed UTF-8, ids are integers in [0, 65535]. Every
 * error sets err->msg to "<path>:<line>:<col>: <what>" and returns
 * -LOCUS_EPARSE (syntax, shape), -LOCUS_ENAN (NaN/Infinity), -LOCUS_ERANGE (id
 * or size out of bounds), -LOCUS_EVERSION (header version), -ENOMEM, or -errno
 * (I/O).
 */
#ifndef LOCUS_TRACE_H
#define LOCUS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

#define LOCUS_TRACE_ID_MAX      64   /* bytes including the NUL */
#define LOCUS_TRACE_DOMAIN_MAX  32
#define LOCUS_TRACE_MAX_LAYERS  1024
#define LOCUS_TRACE_MAX_K       64

/* Bounds on what a load accepts; zero fields take the defaults shown. */
struct locus_trace_opts {
	uint32_t n_experts;       /* 0: header line, else max id + 1 */
	uint32_t max_requests;    /* default 1,000,000 */
	uint32_t max_tokens;      /* per request, prompt and gen each; default 1,000,000 */
	uint64_t max_file_bytes;  /* default 4 GiB */
};

struct locus_trace_req {
	char id[LOCUS_TRACE_ID_MAX];
	uint32_t domain;          /* index into locus_trace.domains; 0 = unlabelled */
	uint32_t prompt_len;      /* >= 1 */
	uint32_t gen_len;         /* 0 when the line has no decode data */
	const uint16_t *prompt;   /* [prompt_len][n_layers][k] expert ids */
	const uint16_t *gen;      /* [gen_len][n_layers][k]; NULL when gen_len == 0 */
};

struct locus_trace {
	uint32_t n_requests;      /* >= 1: an empty trace is an error */
	uint16_t n_layers;        /* MoE layers */
	uint16_t k;               /* experts per token per layer */
	uint16_t n_experts;       /* E; every id is < n_experts */
	uint32_t n_domains;       /* domains[0] is "" (unlabelled) */
	char (*domains)[LOCUS_TRACE_DOMAIN_MAX];
	struct locus_trace_req *reqs;
	void *priv;               /* owned storage */
};

/*
 * Read a JSONL trace file. opts may be NULL (defaults). On success returns 0
 * and *out, which the caller releases with locus_trace_free().
 */
int locus_trace_load(const char *path, const struct locus_trace_opts *opts,
		     struct locus_trace **out, struct locus_error *err);

/* Same, from a buffer of len bytes; name is used in error messages. */
int locus_trace_parse(const char *buf, size_t len, const char *name,
		      const struct locus_trace_opts *opts, struct locus_trace **out,
		      struct locus_error *err);

/* Release a trace (NULL is a no-op). */
void locus_trace_free(struct locus_trace *t);

/*
 * Request i's routing as one array per phase: the pointer to token t's layer
 * l's k ids is base + ((size_t)t * n_layers + l) * k.
 */
static inline const uint16_t *locus_trace_tok(const struct locus_trace *t,
					      const uint16_t *base, uint32_t tok,
					      uint32_t layer)
{
	return base + ((size_t)tok * t->n_layers + layer) * t->k;
}

/*
 * Build a trace from arrays the caller already holds (the ESFT reader, tests,
 * generators): copies everything. Each req's prompt/gen point at the caller's
 * arrays; ids and domains are copied; domain names are given per request
 * (NULL or "" = unlabelled). Validates shapes and ids as the parser does.
 */
int locus_trace_from_arrays(uint16_t n_layers, uint16_t k, uint16_t n_experts,
			    uint32_t n_requests, const struct locus_trace_req *reqs,
			    const char *const *domain_names, struct locus_trace **out,
			    struct locus_error *err);

/*
 * Write t as JSON Lines (header line first) to path, atomically (temp file
 * then rename). Returns 0 or a negative code with err set.
 */
int locus_trace_write(const struct locus_trace *t, const char *path, struct locus_error *err);

/*
 * ESFT expert_scores reader (github.com/deepseek-ai/ESFT, MIT): dir is
 * <...>/expert_scores/<domain>; files expert_weights_1..n_layers.txt hold one
 * sequence per line: T*k tab-separated ids, two tabs, T*k gate weights. Every
 * sequence becomes one request with prompt = all its tokens, gen empty, id
 * "<domain>-<line>", domain label = domain. Layer files must agree on the
 * number of sequences and per-sequence token counts.
 */
int locus_trace_load_esft(const char *dir, const char *domain, uint16_t n_layers,
			  uint16_t k, uint16_t n_experts, struct locus_trace **out,
			  struct locus_error *err);

/*
 * The same with flags: LOCUS_TRACE_ESFT_GATE_ORDER puts each token's k ids
 * in descending order of their gate weights (ties keep the file's order),
 * as a top-k kernel such as vLLM's emits them; the release stores them in
 * another order. Without it, the file's order.
 */
#define LOCUS_TRACE_ESFT_GATE_ORDER 1u
int locus_trace_load_esft_flags(const char *dir, const char *domain, uint16_t n_layers,
				uint16_t k, uint16_t n_experts, unsigned flags,
				struct locus_trace **out, struct locus_error *err);

/* The ESFT release's four domains, as its expert_scores directories name them. */
#define LOCUS_TRACE_ESFT_DOMAINS 4
extern const char *const locus_trace_esft_domains[LOCUS_TRACE_ESFT_DOMAINS];

/*
 * Every ESFT domain under data (<data>/esft/results/expert_scores/<domain>,
 * 26 layers, top-6 of 64 experts) cut into windows of prompt_len + gen_len
 * tokens: each window is one request whose first prompt_len tokens are its
 * prompt and the rest its decoded tokens ("<sequence id>@<first token>",
 * labelled with its domain). 0, or negative with err set (-ENOENT and the
 * like when the data is absent).
 */
int locus_trace_esft_windows(const char *data, uint32_t prompt_len, uint32_t gen_len,
			     struct locus_trace **out, struct locus_error *err);

#endif /* LOCUS_TRACE_H */
