// SPDX-License-Identifier: MIT
/*
 * Blocks ROUTE and EVICT requests as a prefill client stages them
 * (shm/locus_blocks.h), through the engine's sequence: the header checked
 * from a private copy (locus_blocks_hdr_check), then only the prefix
 * [0, off_sig + 32) copied and checked (locus_blocks_body_check). The
 * first input byte picks a receiver's shape (bit 7: an EVICT instead); the
 * rest is the request. Contract: the engine's two-step check agrees with
 * locus_blocks_check on the whole request, code and fault; an accepted
 * request keeps the header's promises (shape, caps, exact length, every
 * new block's counts within the block's tokens and top-k bound, no hash
 * twice: checked by brute force, the tail's header valid); a refusal
 * names a fault. An accepted EVICT has exactly 16 + 8 n bytes.
 */
#include "fuzz.h"
#include "locus_blocks.h"

static const struct locus_blocks_shape shapes[] = {
	{ 2, 8, 16, 2 }, { 1, 4, 4, 1 }, { 3, 16, 255, 8 }, { 4, 64, 1, 6 },
};

#define N_SHAPES (sizeof(shapes) / sizeof(shapes[0]))

static uint64_t scratch[LOCUS_BLOCKS_MAX_CACHED + LOCUS_BLOCKS_MAX_NEW];

static void check_accepted(const uint8_t *req, size_t len, const struct locus_blocks_shape *s,
			   const struct locus_blocks_layout *lay)
{
	const struct locus_blocks_hdr *h = (const void *)req;
	uint32_t n = lay->n_cached + lay->n_new;

	FUZZ_CHECK(h->block_tokens == s->block_tokens && h->n_layers == s->n_layers &&
		   h->n_experts == s->n_experts, "accepted a request of another shape");
	FUZZ_CHECK(lay->n_cached <= LOCUS_BLOCKS_MAX_CACHED && lay->n_new <= LOCUS_BLOCKS_MAX_NEW,
		   "accepted %u cached, %u new", lay->n_cached, lay->n_new);
	FUZZ_CHECK(len == lay->len && len == locus_blocks_req_len(s->n_layers, s->n_experts,
								   lay->n_cached, lay->n_new) &&
		   lay->off_sig + lay->sig_len == len, "accepted length %zu, layout %zu", len,
		   lay->len);
	for (uint32_t i = 0; i < lay->n_new; i++) {
		const uint8_t *c = locus_blocks_new_counts(req, lay, i);

		for (uint32_t l = 0; l < s->n_layers; l++) {
			uint32_t sum = 0;

			for (uint32_t e = 0; e < s->n_experts; e++) {
				FUZZ_CHECK(c[l * s->n_experts + e] <= s->block_tokens,
					   "block %u: count over the block's tokens", i);
				sum += c[l * s->n_experts + e];
			}
			FUZZ_CHECK(sum <= (uint32_t)s->block_tokens * s->top_k,
				   "block %u layer %u sums to %u", i, l, sum);
		}
	}
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < i; j++) {
			uint64_t a = i < lay->n_cached ? locus_blocks_cached(req, lay)[i]
						       : locus_blocks_new_hash(req, lay, i - lay->n_cached);
			uint64_t b = j < lay->n_cached ? locus_blocks_cached(req, lay)[j]
						       : locus_blocks_new_hash(req, lay, j - lay->n_cached);

			FUZZ_CHECK(a != b, "accepted hash 0x%llx twice", (unsigned long long)a);
		}
	FUZZ_CHECK(locus_eldr_sig_check(req + lay->off_sig, lay->sig_len, s->n_layers,
					s->n_experts, NULL) == 0, "accepted a bad tail signature");
}

static void blocks(const uint8_t *req, size_t len, const struct locus_blocks_shape *s)
{
	struct locus_blocks_layout lay, lay2;
	enum locus_blocks_fault f = LOCUS_BLOCKS_OK, f2 = LOCUS_BLOCKS_OK;
	struct locus_blocks_hdr h;
	int rc, rc2;

	rc = locus_blocks_check(req, len, s, scratch, &lay, &f, NULL);
	FUZZ_CHECK(rc <= 0, "check returned %d", rc);
	FUZZ_CHECK((rc == 0) == (f == LOCUS_BLOCKS_OK), "rc %d with fault %d", rc, f);
	/* the engine's way: header copy, then the prefix alone (the rest garbage) */
	if (len < sizeof(h)) {
		FUZZ_CHECK(rc < 0 && f == LOCUS_BLOCKS_FORMAT, "a short request accepted");
		return;
	}
	memcpy(&h, req, sizeof(h));
	rc2 = locus_blocks_hdr_check(&h, len, s, &lay2, NULL);
	if (rc2 == 0) {
		size_t pre = lay2.off_sig + sizeof(struct locus_eldr_sig_hdr);
		uint8_t *copy = malloc(len);

		memset(copy, 0xa5, len);
		memcpy(copy, req, pre);
		rc2 = locus_blocks_body_check(copy, &lay2, s, scratch, &f2, NULL);
		free(copy);
	} else {
		f2 = LOCUS_BLOCKS_FORMAT;
	}
	FUZZ_CHECK(rc == rc2 && f == f2, "whole check %d/%d, engine's %d/%d", rc, f, rc2, f2);
	if (rc == 0)
		check_accepted(req, len, s, &lay);
}

static void evict(const uint8_t *req, size_t len)
{
	struct locus_evict_hdr h;
	int rc;

	if (len < sizeof(h))
		return;
	memcpy(&h, req, sizeof(h));
	rc = locus_evict_hdr_check(&h, len, NULL);
	FUZZ_CHECK(rc <= 0, "evict check returned %d", rc);
	if (rc == 0)
		FUZZ_CHECK(len == 16 + 8 * (size_t)h.n_hashes && h.n_hashes <= LOCUS_EVICT_MAX &&
			   h.magic == LOCUS_EVICT_MAGIC && !h.flags && !h.reserved,
			   "accepted an evict of %zu bytes naming %u", len, h.n_hashes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *req;

	if (size < 1)
		return 0;
	/* the request as the engine sees it: 8-byte aligned */
	req = fuzz_dup(data + 1, size - 1);
	if (data[0] & 0x80)
		evict(req, size - 1);
	else
		blocks(req, size - 1, &shapes[data[0] % N_SHAPES]);
	free(req);
	return 0;
}
