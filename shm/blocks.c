// SPDX-License-Identifier: MIT
/* The blocks ROUTE and EVICT requests (locus_blocks.h): writers and checks. */
#include <errno.h>
#include <string.h>

#include "locus_blocks.h"
#include "locus_err_priv.h"

static size_t new_stride(uint32_t n_layers, uint32_t n_experts)
{
	return 8 + LOCUS_ALIGN_UP((size_t)n_layers * n_experts, (size_t)8);
}

size_t locus_blocks_req_len(uint32_t n_layers, uint32_t n_experts, uint32_t n_cached,
			    uint32_t n_new)
{
	if (!n_layers || n_layers > LOCUS_ELDR_MAX_LAYERS || !n_experts ||
	    n_experts > LOCUS_ELDR_MAX_EXPERTS || n_cached > LOCUS_BLOCKS_MAX_CACHED ||
	    n_new > LOCUS_BLOCKS_MAX_NEW)
		return 0;
	return sizeof(struct locus_blocks_hdr) + (size_t)n_cached * 8 +
	       (size_t)n_new * new_stride(n_layers, n_experts) +
	       locus_eldr_sig_len(n_layers, n_experts);
}

int locus_blocks_hdr_check(const struct locus_blocks_hdr *h, size_t len,
			   const struct locus_blocks_shape *s, struct locus_blocks_layout *lay,
			   struct locus_error *err)
{
	uint64_t rsv;
	size_t want;

	if (h->magic != LOCUS_BLOCKS_MAGIC)
		return locus_error_set(err, LOCUS_EBADMAGIC, "blocks request magic 0x%08x, "
				       "expected 0x%08x", h->magic, LOCUS_BLOCKS_MAGIC);
	if (h->version != LOCUS_BLOCKS_VERSION)
		return locus_error_set(err, LOCUS_EVERSION, "blocks request version %u, this "
				       "build reads %u", h->version, LOCUS_BLOCKS_VERSION);
	memcpy(&rsv, h->reserved, sizeof(rsv));
	if (h->flags || h->reserved0 || rsv)
		return locus_error_set(err, LOCUS_EPROTO, "blocks request flags/reserved bytes "
				       "not zero");
	if (h->block_tokens != s->block_tokens)
		return locus_error_set(err, LOCUS_ERANGE, "blocks of %u tokens, this cache keeps "
				       "blocks of %u", h->block_tokens, s->block_tokens);
	if (h->n_layers != s->n_layers || h->n_experts != s->n_experts)
		return locus_error_set(err, LOCUS_ERANGE, "blocks request is %ux%u (layers x "
				       "experts), the table is %ux%u", h->n_layers, h->n_experts,
				       s->n_layers, s->n_experts);
	if (h->n_cached > LOCUS_BLOCKS_MAX_CACHED || h->n_new > LOCUS_BLOCKS_MAX_NEW)
		return locus_error_set(err, LOCUS_ERANGE, "blocks request names %u cached and %u "
				       "new blocks, at most %u and %u", h->n_cached, h->n_new,
				       LOCUS_BLOCKS_MAX_CACHED, LOCUS_BLOCKS_MAX_NEW);
	want = locus_blocks_req_len(h->n_layers, h->n_experts, h->n_cached, h->n_new);
	if (!want)
		return locus_error_set(err, LOCUS_ERANGE, "blocks request shape %ux%u out of "
				       "range", h->n_layers, h->n_experts);
	if (len != want)
		return locus_error_set(err, len < want ? LOCUS_ETRUNCATED : LOCUS_ERANGE,
				       "blocks request is %zu bytes, %u cached and %u new blocks "
				       "of %ux%u need %zu", len, h->n_cached, h->n_new,
				       h->n_layers, h->n_experts, want);
	lay->n_cached = h->n_cached;
	lay->n_new = h->n_new;
	lay->off_cached = sizeof(*h);
	lay->off_new = lay->off_cached + (size_t)h->n_cached * 8;
	lay->new_stride = new_stride(h->n_layers, h->n_experts);
	lay->off_sig = lay->off_new + (size_t)h->n_new * lay->new_stride;
	lay->sig_len = locus_eldr_sig_len(h->n_layers, h->n_experts);
	lay->len = want;
	return 0;
}

int locus_blocks_counts_check(const uint8_t *counts, uint32_t n_layers, uint32_t n_experts,
			      uint32_t block_tokens, uint32_t top_k, struct locus_error *err)
{
	const uint64_t layer_bound = (uint64_t)block_tokens * top_k;

	for (uint32_t l = 0; l < n_layers; l++) {
		const uint8_t *row = counts + (size_t)l * n_experts;
		uint64_t sum = 0;

		for (uint32_t e = 0; e < n_experts; e++) {
			if (row[e] > block_tokens)
				return locus_error_set(err, LOCUS_ERANGE, "block counts: layer %u "
						       "expert %u counts %u tokens, the block "
						       "has %u", l, e, row[e], block_tokens);
			sum += row[e];
		}
		if (sum > layer_bound)
			return locus_error_set(err, LOCUS_ERANGE, "block counts: layer %u sums to "
					       "%llu, more than %u tokens x top-%u", l,
					       (unsigned long long)sum, block_tokens, top_k);
	}
	return 0;
}

/* Sift a[i] down the max-heap a[0, n). */
static void sift_down(uint64_t *a, size_t i, size_t n)
{
	for (;;) {
		size_t c = 2 * i + 1;
		uint64_t t;

		if (c >= n)
			return;
		if (c + 1 < n && a[c + 1] > a[c])
			c++;
		if (a[i] >= a[c])
			return;
		t = a[i];
		a[i] = a[c];
		a[c] = t;
		i = c;
	}
}

/*
 * Heapsort: in place, O(n log n) whatever the input (a client chooses the
 * hashes), no allocation (libc's qsort may allocate).
 */
static void sort_u64(uint64_t *a, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		sift_down(a, i, n);
	for (size_t end = n; end > 1; end--) {
		uint64_t t = a[0];

		a[0] = a[end - 1];
		a[end - 1] = t;
		sift_down(a, 0, end - 1);
	}
}

static int set_fault(enum locus_blocks_fault *fault, enum locus_blocks_fault f, int ret)
{
	if (fault)
		*fault = f;
	return ret;
}

int locus_blocks_body_check(const void *req, const struct locus_blocks_layout *lay,
			    const struct locus_blocks_shape *s, uint64_t *scratch,
			    enum locus_blocks_fault *fault, struct locus_error *err)
{
	const uint32_t n = lay->n_cached + lay->n_new;
	struct locus_eldr_sig_hdr sh;
	int ret;

	memcpy(scratch, locus_blocks_cached(req, lay), (size_t)lay->n_cached * 8);
	for (uint32_t i = 0; i < lay->n_new; i++)
		scratch[lay->n_cached + i] = locus_blocks_new_hash(req, lay, i);
	sort_u64(scratch, n);
	for (uint32_t i = 1; i < n; i++)
		if (scratch[i] == scratch[i - 1])
			return set_fault(fault, LOCUS_BLOCKS_DUPLICATE,
					 locus_error_set(err, EEXIST, "blocks request names block "
							 "0x%016llx twice",
							 (unsigned long long)scratch[i]));
	for (uint32_t i = 0; i < lay->n_new; i++) {
		ret = locus_blocks_counts_check(locus_blocks_new_counts(req, lay, i), s->n_layers,
						s->n_experts, s->block_tokens, s->top_k, err);
		if (ret < 0)
			return set_fault(fault, LOCUS_BLOCKS_COUNTS, ret);
	}
	memcpy(&sh, (const uint8_t *)req + lay->off_sig, sizeof(sh));
	ret = locus_eldr_sig_hdr_check(&sh, lay->sig_len, s->n_layers, s->n_experts, err);
	if (ret < 0)
		return set_fault(fault, LOCUS_BLOCKS_SIGNATURE, ret);
	return set_fault(fault, LOCUS_BLOCKS_OK, 0);
}

int locus_blocks_check(const void *req, size_t len, const struct locus_blocks_shape *s,
		       uint64_t *scratch, struct locus_blocks_layout *lay,
		       enum locus_blocks_fault *fault, struct locus_error *err)
{
	struct locus_blocks_hdr h;
	int ret;

	if (!req || len < sizeof(h))
		return set_fault(fault, LOCUS_BLOCKS_FORMAT,
				 locus_error_set(err, LOCUS_ETRUNCATED, "blocks request is %zu "
						 "bytes, shorter than its %zu-byte header",
						 req ? len : 0, sizeof(h)));
	memcpy(&h, req, sizeof(h));
	ret = locus_blocks_hdr_check(&h, len, s, lay, err);
	if (ret < 0)
		return set_fault(fault, LOCUS_BLOCKS_FORMAT, ret);
	return locus_blocks_body_check(req, lay, s, scratch, fault, err);
}

long locus_blocks_build(void *buf, size_t cap, const struct locus_blocks_route *r,
			struct locus_error *err)
{
	const struct locus_eldr_sig_hdr *t;
	struct locus_blocks_hdr h = { 0 };
	struct locus_blocks_layout lay;
	uint8_t *p = buf;
	size_t len, cells;

	if (!buf || !r || !r->tail || (r->n_cached && !r->cached) ||
	    (r->n_new && (!r->new_hashes || !r->new_counts)))
		return locus_error_set(err, EINVAL, "blocks request: missing input");
	t = r->tail;
	len = locus_blocks_req_len(t->n_layers, t->n_experts, r->n_cached, r->n_new);
	if (!len || len > cap)
		return locus_error_set(err, LOCUS_ERANGE, "blocks request of %u cached and %u "
				       "new %ux%u blocks: %zu bytes, room for %zu", r->n_cached,
				       r->n_new, t->n_layers, t->n_experts, len, cap);
	h = (struct locus_blocks_hdr){ .magic = LOCUS_BLOCKS_MAGIC,
				       .version = LOCUS_BLOCKS_VERSION,
				       .block_tokens = r->block_tokens, .n_layers = t->n_layers,
				       .n_experts = t->n_experts, .n_cached = r->n_cached,
				       .n_new = r->n_new };
	lay.off_cached = sizeof(h);
	lay.off_new = lay.off_cached + (size_t)r->n_cached * 8;
	lay.new_stride = new_stride(t->n_layers, t->n_experts);
	lay.off_sig = lay.off_new + (size_t)r->n_new * lay.new_stride;
	cells = (size_t)t->n_layers * t->n_experts;
	memcpy(p, &h, sizeof(h));
	if (r->n_cached)
		memcpy(p + lay.off_cached, r->cached, (size_t)r->n_cached * 8);
	for (uint32_t i = 0; i < r->n_new; i++) {
		uint8_t *b = p + lay.off_new + i * lay.new_stride;

		memcpy(b, &r->new_hashes[i], 8);
		memcpy(b + 8, r->new_counts + i * cells, cells);
		memset(b + 8 + cells, 0, lay.new_stride - 8 - cells);
	}
	memcpy(p + lay.off_sig, t, locus_eldr_sig_len(t->n_layers, t->n_experts));
	return (long)len;
}

int locus_evict_hdr_check(const struct locus_evict_hdr *h, size_t len, struct locus_error *err)
{
	if (h->magic != LOCUS_EVICT_MAGIC)
		return locus_error_set(err, LOCUS_EBADMAGIC, "evict request magic 0x%08x, "
				       "expected 0x%08x", h->magic, LOCUS_EVICT_MAGIC);
	if (h->version != LOCUS_EVICT_VERSION)
		return locus_error_set(err, LOCUS_EVERSION, "evict request version %u, this "
				       "build reads %u", h->version, LOCUS_EVICT_VERSION);
	if (h->flags || h->reserved)
		return locus_error_set(err, LOCUS_EPROTO, "evict request flags/reserved not zero");
	if (h->n_hashes > LOCUS_EVICT_MAX)
		return locus_error_set(err, LOCUS_ERANGE, "evict request names %u blocks, at "
				       "most %u", h->n_hashes, LOCUS_EVICT_MAX);
	if (len != locus_evict_req_len(h->n_hashes))
		return locus_error_set(err, len < locus_evict_req_len(h->n_hashes) ?
				       LOCUS_ETRUNCATED : LOCUS_ERANGE,
				       "evict request is %zu bytes, %u hashes need %zu", len,
				       h->n_hashes, locus_evict_req_len(h->n_hashes));
	return 0;
}

long locus_evict_build(void *buf, size_t cap, const uint64_t *hashes, uint32_t n,
		       struct locus_error *err)
{
	struct locus_evict_hdr h = { .magic = LOCUS_EVICT_MAGIC, .version = LOCUS_EVICT_VERSION,
				     .n_hashes = n };

	if (!buf || (n && !hashes))
		return locus_error_set(err, EINVAL, "evict request: missing input");
	if (n > LOCUS_EVICT_MAX || locus_evict_req_len(n) > cap)
		return locus_error_set(err, LOCUS_ERANGE, "evict request of %u hashes: %zu "
				       "bytes, room for %zu (at most %u hashes)", n,
				       locus_evict_req_len(n), cap, LOCUS_EVICT_MAX);
	memcpy(buf, &h, sizeof(h));
	if (n)
		memcpy((uint8_t *)buf + sizeof(h), hashes, (size_t)n * 8);
	return (long)locus_evict_req_len(n);
}

int locus_blocks_counts_build(uint8_t *counts, uint16_t n_layers, uint16_t n_experts, uint16_t k,
			      const uint16_t *ids, uint32_t n_tokens, struct locus_error *err)
{
	if (!counts || (!ids && n_tokens) || !n_layers || !n_experts || !k ||
	    k > LOCUS_ELDR_MAX_K)
		return locus_error_set(err, EINVAL, "bad shape L=%u E=%u k=%u", n_layers,
				       n_experts, k);
	if (n_tokens > LOCUS_BLOCKS_MAX_BLOCK_TOKENS)
		return locus_error_set(err, LOCUS_ERANGE, "a block of %u tokens: a count must "
				       "fit a byte (%u)", n_tokens, LOCUS_BLOCKS_MAX_BLOCK_TOKENS);
	memset(counts, 0, (size_t)n_layers * n_experts);
	for (uint32_t t = 0; t < n_tokens; t++)
		for (uint32_t l = 0; l < n_layers; l++) {
			const uint16_t *top = ids + ((size_t)t * n_layers + l) * k;

			for (uint32_t i = 0; i < k; i++) {
				uint32_t j;

				if (top[i] >= n_experts)
					return locus_error_set(err, LOCUS_ERANGE, "token %u layer "
							       "%u: expert id %u >= E=%u", t, l,
							       top[i], n_experts);
				for (j = 0; j < i; j++)
					if (top[j] == top[i])
						break;
				if (j == i)
					counts[(size_t)l * n_experts + top[i]]++;
			}
		}
	return 0;
}
