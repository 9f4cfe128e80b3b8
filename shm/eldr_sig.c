// SPDX-License-Identifier: MIT
/* Expert signatures: building from routed experts, and checking payloads. */
#include <errno.h>
#include <string.h>

#include "locus_eldr.h"
#include "locus_err_priv.h"

int locus_eldr_sig_check(const void *payload, size_t len, uint16_t n_layers,
			 uint16_t n_experts, struct locus_error *err)
{
	if (unlikely(!payload || len < sizeof(struct locus_eldr_sig_hdr)))
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "signature is %zu bytes, shorter than its %zu-byte header",
				       payload ? len : 0, sizeof(struct locus_eldr_sig_hdr));
	return locus_eldr_sig_hdr_check(payload, len, n_layers, n_experts, err);
}

int locus_eldr_sig_hdr_check(const struct locus_eldr_sig_hdr *h, size_t len, uint16_t n_layers,
			     uint16_t n_experts, struct locus_error *err)
{
	uint64_t rsv;

	if (unlikely(len < sizeof(*h)))
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "signature is %zu bytes, shorter than its %zu-byte header",
				       len, sizeof(*h));
	if (unlikely(h->magic != LOCUS_ELDR_SIG_MAGIC))
		return locus_error_set(err, LOCUS_EBADMAGIC,
				       "signature magic 0x%08x, expected 0x%08x",
				       h->magic, LOCUS_ELDR_SIG_MAGIC);
	if (unlikely(h->version != LOCUS_ELDR_SIG_VERSION))
		return locus_error_set(err, LOCUS_EVERSION,
				       "signature version %u, this build reads %u",
				       h->version, LOCUS_ELDR_SIG_VERSION);
	memcpy(&rsv, h->reserved, sizeof(rsv));
	if (unlikely(h->flags || rsv))
		return locus_error_set(err, LOCUS_EPROTO,
				       "signature flags/reserved bytes not zero");
	if (unlikely(h->n_layers != n_layers || h->n_experts != n_experts))
		return locus_error_set(err, LOCUS_ERANGE,
				       "signature is %ux%u (layers x experts), the table is %ux%u",
				       h->n_layers, h->n_experts, n_layers, n_experts);
	if (unlikely(len != locus_eldr_sig_len(n_layers, n_experts)))
		return locus_error_set(err, len < locus_eldr_sig_len(n_layers, n_experts) ?
				       LOCUS_ETRUNCATED : LOCUS_ERANGE,
				       "signature payload is %zu bytes, %ux%u needs %zu", len,
				       n_layers, n_experts, locus_eldr_sig_len(n_layers,
									       n_experts));
	return 0;
}

int locus_eldr_counts_add(uint16_t *counts, uint16_t n_layers, uint16_t n_experts,
			  uint16_t k, const uint16_t *ids, uint32_t n_tokens,
			  struct locus_error *err)
{
	if (!counts || (!ids && n_tokens) || !n_layers || !n_experts || !k ||
	    k > LOCUS_ELDR_MAX_K)
		return locus_error_set(err, EINVAL, "bad shape L=%u E=%u k=%u", n_layers,
				       n_experts, k);
	for (uint32_t t = 0; t < n_tokens; t++) {
		for (uint32_t l = 0; l < n_layers; l++) {
			const uint16_t *top = ids + ((size_t)t * n_layers + l) * k;
			uint16_t *row = counts + (size_t)l * n_experts;

			for (uint32_t i = 0; i < k; i++) {
				uint32_t j;

				if (unlikely(top[i] >= n_experts))
					return locus_error_set(err, LOCUS_ERANGE,
							       "token %u layer %u: expert id %u >= E=%u",
							       t, l, top[i], n_experts);
				for (j = 0; j < i; j++)
					if (top[j] == top[i])
						break;
				if (j == i && row[top[i]] != UINT16_MAX)
					row[top[i]]++;
			}
		}
	}
	return 0;
}

long locus_eldr_sig_build(void *buf, size_t cap, uint16_t n_layers, uint16_t n_experts,
			  uint16_t k, const uint16_t *ids, uint32_t n_tokens,
			  uint64_t allowed_decoders, struct locus_error *err)
{
	struct locus_eldr_sig_hdr *h = buf;
	size_t len = locus_eldr_sig_len(n_layers, n_experts);
	int ret;

	if (!buf || !n_layers || !n_experts || n_layers > LOCUS_ELDR_MAX_LAYERS ||
	    n_experts > LOCUS_ELDR_MAX_EXPERTS)
		return locus_error_set(err, EINVAL, "bad signature shape %ux%u", n_layers,
				       n_experts);
	if (cap < len)
		return locus_error_set(err, LOCUS_ERANGE,
				       "buffer of %zu bytes, signature needs %zu",
				       cap, len);
	memset(buf, 0, len);
	h->magic = LOCUS_ELDR_SIG_MAGIC;
	h->version = LOCUS_ELDR_SIG_VERSION;
	h->n_layers = n_layers;
	h->n_experts = n_experts;
	h->prompt_tokens = n_tokens;
	h->allowed_decoders = allowed_decoders;
	ret = locus_eldr_counts_add((uint16_t *)(h + 1), n_layers, n_experts, k, ids, n_tokens,
				    err);
	return ret < 0 ? ret : (long)len;
}
