// SPDX-License-Identifier: MIT
/*
 * locus-loadgen --prefix-blocks N: prefills of a prefix-cached serving
 * engine. Every request's prompt is its domain's head (N blocks of
 * --block-tokens tokens: the domain's prompts of the trace one after the
 * other, cycled) followed by its own prompt. A prefill process sends the
 * head as new blocks the first time it meets the domain, and names them as
 * cached ever after (LOCUS_OP_ROUTE_BLOCKS); its own full blocks are new,
 * the rest is the tail. The decoder checks the delivered signature against
 * the whole prompt's, byte for byte: what locusd summed must be that.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"
#include "locus_blocks.h"

#define LG_MAX_DOM 64

static struct {
	uint16_t *head[LG_MAX_DOM]; /* [N * bt][L][k] */
	uint64_t *head_hash[LG_MAX_DOM]; /* [N]: the head's block hashes, computed once */
	uint16_t *head_sig[LG_MAX_DOM];  /* the head's signature: the decoders' check adds to it */
	uint32_t head_len, max_tokens;
	uint16_t *ids;              /* one prompt, this process's scratch */
	uint8_t *counts;            /* its full blocks' counts */
	uint8_t *tail;              /* a tail signature */
	uint64_t *hash;
} H;

static size_t tok_ids(void)
{
	return (size_t)T->n_layers * T->k;
}

/* A block's hash, chained over the parent's hash and the block's tokens (as vLLM's). */
static uint64_t block_hash(uint64_t parent, const uint16_t *ids)
{
	const uint8_t *x = (const uint8_t *)ids;
	uint64_t h = parent ^ 0xcbf29ce484222325ull;

	for (size_t i = 0; i < O.block_tokens * tok_ids() * 2; i++)
		h = (h ^ x[i]) * 0x100000001b3ull;
	return h;
}

static uint32_t dom_of(const struct locus_trace_req *r)
{
	return r->domain % LG_MAX_DOM;
}

int lg_blocks_init(char *why, size_t len)
{
	const size_t cells = (size_t)T->n_layers * T->n_experts;
	uint32_t max_prompt = 0, full;

	H.head_len = O.prefix_blocks * O.block_tokens;
	for (uint32_t r = 0; r < T->n_requests; r++)
		max_prompt = T->reqs[r].prompt_len > max_prompt ? T->reqs[r].prompt_len : max_prompt;
	H.max_tokens = H.head_len + max_prompt;
	full = H.max_tokens / O.block_tokens;
	if (locus_blocks_req_len(T->n_layers, T->n_experts, O.prefix_blocks, full) > SIG_SLOT ||
	    full > LOCUS_BLOCKS_MAX_NEW) {
		snprintf(why, len, "--prefix-blocks %u: a request of up to %u blocks of %ux%u "
			 "does not fit a %u-byte staging slot", O.prefix_blocks, full, T->n_layers,
			 T->n_experts, SIG_SLOT);
		return -1;
	}
	H.ids = malloc((size_t)H.max_tokens * tok_ids() * 2);
	H.counts = malloc(cells * full);
	H.tail = aligned_alloc(8, LOCUS_ALIGN_UP(locus_eldr_sig_len(T->n_layers, T->n_experts), 8));
	H.hash = malloc(8 * (size_t)full);
	if (!H.ids || !H.counts || !H.tail || !H.hash) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	for (uint32_t d = 0; d < T->n_domains && d < LG_MAX_DOM; d++) {
		uint32_t got = 0, seen = 0;

		H.head[d] = calloc((size_t)H.head_len * tok_ids(), 2);
		if (!H.head[d]) {
			snprintf(why, len, "out of memory");
			return -1;
		}
		/* the domain's prompts one after the other, cycled */
		for (uint32_t r = 0; got < H.head_len; r = (r + 1) % T->n_requests) {
			const struct locus_trace_req *q = &T->reqs[r];
			uint32_t n;

			if (r == 0 && seen++ > 1)
				break; /* no request of this domain */
			if (dom_of(q) != d)
				continue;
			n = LOCUS_MIN(q->prompt_len, H.head_len - got);
			memcpy(H.head[d] + (size_t)got * tok_ids(), q->prompt, n * tok_ids() * 2);
			got += n;
		}
		H.head_hash[d] = malloc(8 * (size_t)(O.prefix_blocks + 1));
		H.head_sig[d] = calloc(locus_eldr_sig_len(T->n_layers, T->n_experts), 1);
		if (!H.head_hash[d] || !H.head_sig[d] ||
		    locus_eldr_sig_build(H.head_sig[d], locus_eldr_sig_len(T->n_layers, T->n_experts),
					 T->n_layers, T->n_experts, T->k, H.head[d], H.head_len, 0,
					 NULL) < 0) {
			snprintf(why, len, "out of memory");
			return -1;
		}
		for (uint32_t b = 0; b < O.prefix_blocks; b++)
			H.head_hash[d][b] = block_hash(b ? H.head_hash[d][b - 1] : 0,
						       H.head[d] + (size_t)b * O.block_tokens * tok_ids());
	}
	return 0;
}

/* Request r's whole prompt (head ++ its own) into H.ids: its tokens. */
static uint32_t prompt_of(const struct locus_trace_req *r)
{
	memcpy(H.ids, H.head[dom_of(r)], (size_t)H.head_len * tok_ids() * 2);
	memcpy(H.ids + (size_t)H.head_len * tok_ids(), r->prompt, r->prompt_len * tok_ids() * 2);
	return H.head_len + r->prompt_len;
}

long lg_whole_sig(const struct locus_trace_req *r, void *buf, size_t cap)
{
	const size_t cells = (size_t)T->n_layers * T->n_experts;
	const uint16_t *hs = H.head_sig[dom_of(r)];
	struct locus_eldr_sig_hdr *h = buf;
	uint16_t *c = (uint16_t *)(h + 1);
	long len;

	/* the head's counts + the own prompt's: the whole prompt's signature */
	len = locus_eldr_sig_build(buf, cap, T->n_layers, T->n_experts, T->k, r->prompt,
				   r->prompt_len, 0, NULL);
	if (len < 0)
		return len;
	memcpy(c, hs + sizeof(*h) / 2, cells * 2);
	if (locus_eldr_counts_add(c, T->n_layers, T->n_experts, T->k, r->prompt, r->prompt_len,
				  NULL) < 0)
		return -1;
	h->prompt_tokens += H.head_len;
	return len;
}

long lg_blocks_req(const struct locus_trace_req *r, uint8_t *inserted, void *buf, size_t cap,
		   uint32_t *n_cached)
{
	const size_t cells = (size_t)T->n_layers * T->n_experts, ti = tok_ids();
	const uint32_t bt = O.block_tokens, d = dom_of(r);
	uint32_t n = prompt_of(r), full = n / bt, cached = inserted[d] ? O.prefix_blocks : 0;

	for (uint32_t b = 0; b < full; b++) {
		H.hash[b] = b < O.prefix_blocks ? H.head_hash[d][b]
						: block_hash(H.hash[b - 1], H.ids + (size_t)b * bt * ti);
		if (b >= cached &&
		    locus_blocks_counts_build(H.counts + (size_t)(b - cached) * cells, T->n_layers,
					      T->n_experts, T->k, H.ids + (size_t)b * bt * ti, bt,
					      NULL) < 0)
			return -1;
	}
	if (locus_eldr_sig_build(H.tail, locus_eldr_sig_len(T->n_layers, T->n_experts),
				 T->n_layers, T->n_experts, T->k, H.ids + (size_t)full * bt * ti,
				 n - full * bt, 0, NULL) < 0)
		return -1;
	inserted[d] = 1;
	*n_cached = cached;
	return locus_blocks_build(buf, cap, &(struct locus_blocks_route){
		.block_tokens = (uint16_t)bt, .n_cached = cached, .cached = H.hash,
		.n_new = full - cached, .new_hashes = H.hash + cached, .new_counts = H.counts,
		.tail = H.tail }, NULL);
}
