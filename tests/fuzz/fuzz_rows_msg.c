// SPDX-License-Identifier: MIT
/*
 * Rows messages as a receiver gets them (a peer node's DISPATCH / COMBINE,
 * or a client reading its inbox): locus_rows_msg_check. Input: a byte for
 * the rank count, a byte for the stage size (0: none, as the engine checks
 * arrivals from peers), then the message. Contract: an accepted message
 * keeps its headers' rules (rows, or a COMBINE refusal of none; a COMBINE
 * with rows carries no placement generation), and everything a receiver
 * then reads (refs,
 * expert ids, gates, rows in the message or in place in its stage) lies
 * inside the message or the stage; the reads themselves run here on an
 * exact-sized copy, so ASan sees any byte past it.
 */
#include "fuzz.h"
#include "locus_dispatch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct locus_error err = { 0 };
	struct fuzz_in in = { data, size };
	uint32_t n_ranks = 1 + fin_u8(&in) % 64;
	uint8_t sb = fin_u8(&in);
	uint64_t stage = sb % 10 == 0 ? 0 : 4096ull << (sb % 10);
	uint8_t *msg = fuzz_dup(in.p, in.n);
	const struct locus_msg_hdr *m = (const void *)msg;
	const struct locus_rows_hdr *h;
	const struct locus_row_ref *refs;
	size_t len = in.n;
	volatile uint64_t sink = 0;
	int ret, in_place;

	ret = locus_rows_msg_check(msg, len, n_ranks, stage, &err);
	FUZZ_CHECK(ret <= 0, "check returned %d", ret);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal without a message");
		goto out;
	}
	h = locus_rows_hdr_of(msg);
	refs = locus_rows_refs(msg);
	in_place = !!(h->flags & LOCUS_ROWS_IN_PLACE);
	FUZZ_CHECK(locus_msg_hdr_check(m, len, n_ranks) == 0, "message header");
	FUZZ_CHECK(m->type == LOCUS_MSG_DISPATCH || m->type == LOCUS_MSG_COMBINE, "type %u",
		   m->type);
	FUZZ_CHECK(h->magic == LOCUS_ROWS_MAGIC && h->chunk < h->n_chunks &&
		   (m->type == LOCUS_MSG_DISPATCH) == (h->top_k != 0) && h->top_k <= LOCUS_MAX_TOPK,
		   "an accepted rows header breaks its rules");
	if (h->flags & LOCUS_ROWS_REFUSED)
		FUZZ_CHECK(m->type == LOCUS_MSG_COMBINE &&
			   (h->flags & ~(uint32_t)LOCUS_ROWS_GONE) == LOCUS_ROWS_REFUSED &&
			   !h->n_rows && !h->row_bytes && h->n_chunks == 1,
			   "an accepted refusal breaks its rules");
	else
		FUZZ_CHECK(!(h->flags & LOCUS_ROWS_GONE) && h->n_rows >= 1 && h->row_bytes >= 1 &&
			   h->row_bytes <= LOCUS_MAX_ROW_BYTES &&
			   (m->type == LOCUS_MSG_DISPATCH || !h->placement_gen),
			   "accepted rows break their rules");
	FUZZ_CHECK(len == locus_rows_msg_len(h->n_rows, h->top_k, h->row_bytes, in_place),
		   "length");
	for (uint32_t i = 0; i < h->n_rows; i++) {
		sink += refs[i].token + refs[i].kmask;
		FUZZ_CHECK(refs[i].kmask &&
			   (h->top_k == 0 || h->top_k == 32 || !(refs[i].kmask >> h->top_k)),
			   "row %u: k-slot mask", i);
	}
	if (h->top_k) {
		const uint16_t *ex = locus_rows_experts(msg, h->n_rows);
		const float *g = locus_rows_gates(msg, h->n_rows, h->top_k);

		for (size_t i = 0; i < (size_t)h->n_rows * h->top_k; i++) {
			uint32_t gb;

			memcpy(&gb, &g[i], sizeof(gb));
			sink += ex[i] + gb;
		}
	}
	if (!in_place) {
		FUZZ_CHECK(h->rows_off == locus_rows_msg_rows_off(h->n_rows, h->top_k) &&
			   h->rows_off + (uint64_t)h->n_rows * h->row_bytes == len,
			   "rows not where the message ends");
		for (uint32_t i = 0; i < h->n_rows; i++)
			sink += msg[h->rows_off + (size_t)i * h->row_bytes + h->row_bytes - 1];
	} else {
		for (uint32_t i = 0; i < h->n_rows; i++) {
			uint64_t at = h->rows_off + (uint64_t)(m->type == LOCUS_MSG_DISPATCH ?
							       refs[i].token : i) * h->row_bytes;

			FUZZ_CHECK(at <= stage && h->row_bytes <= stage - at,
				   "row %u in place at %llu outside a stage of %llu", i,
				   (unsigned long long)at, (unsigned long long)stage);
		}
	}
	(void)sink;
out:
	free(msg);
	return 0;
}
