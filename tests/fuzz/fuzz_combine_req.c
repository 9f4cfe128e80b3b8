// SPDX-License-Identifier: MIT
/*
 * Combine requests as a rank stages them: a private copy of the header,
 * then locus_combine_req_check (the engine's sequence). Input: a byte for
 * the cluster's rank count, a byte for the stage size, then the request.
 * Contract: an accepted request keeps the header's rules, and the rows
 * message locus_dispatch.h defines for it (copied rows, or handed over in
 * place) passes the receiver's locus_rows_msg_check: what a sender may send
 * the receiver accepts.
 */
#include "fuzz.h"
#include "locus_dispatch.h"

#define MAX_ROWS (64 * LOCUS_MAX_TOPK)

static void receiver_accepts(const struct locus_combine_req *rq, const struct locus_row_ref *refs,
			     uint32_t n_ranks, uint64_t stage, int in_place)
{
	size_t len = locus_rows_msg_len(rq->n_rows, 0, rq->row_bytes, in_place);
	uint8_t *msg = calloc(1, len);
	struct locus_rows_hdr *h = locus_rows_hdr_of(msg);
	struct locus_error err = { 0 };
	int ret;

	if (!msg)
		abort();
	locus_msg_hdr_init((struct locus_msg_hdr *)msg, LOCUS_MSG_COMBINE,
			   (uint32_t)(len - sizeof(struct locus_msg_hdr)), rq->batch_id,
			   n_ranks - 1, rq->dst_rank, 0);
	*h = (struct locus_rows_hdr){
		.magic = LOCUS_ROWS_MAGIC, .layer = rq->layer, .n_rows = rq->n_rows,
		.row_bytes = rq->row_bytes, .flags = in_place ? LOCUS_ROWS_IN_PLACE : 0,
		.chunk = 0, .n_chunks = 1,
		.rows_off = in_place ? rq->rows_off : locus_rows_msg_rows_off(rq->n_rows, 0),
		.batch_id = rq->batch_id,
	};
	memcpy(locus_rows_refs(msg), refs, (size_t)rq->n_rows * sizeof(*refs));
	ret = locus_rows_msg_check(msg, len, n_ranks, stage, &err);
	FUZZ_CHECK(ret == 0, "the %s rows message of an accepted combine request is refused: %s",
		   in_place ? "in-place" : "copied", err.msg);
	free(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct locus_error err = { 0 };
	struct fuzz_in in = { data, size };
	uint32_t n_ranks = 1 + fin_u8(&in) % 16;
	uint64_t stage = 4096ull << (fin_u8(&in) % 9);
	struct locus_combine_req rq = { 0 };
	uint8_t *req = fuzz_dup(in.p, in.n);
	const struct locus_row_ref *refs = (const void *)(req + sizeof(rq));
	size_t len = in.n;
	int ret;

	if (len >= sizeof(rq))
		memcpy(&rq, req, sizeof(rq));
	ret = locus_combine_req_check(&rq, refs, len, stage, n_ranks, MAX_ROWS, &err);
	FUZZ_CHECK(ret <= 0, "check returned %d", ret);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal without a message");
		goto out;
	}
	FUZZ_CHECK(rq.magic == LOCUS_COMBINE_MAGIC && !rq.reserved && !rq.reserved2 &&
		   rq.n_rows >= 1 && rq.n_rows <= MAX_ROWS && rq.row_bytes >= 1 &&
		   rq.row_bytes <= LOCUS_MAX_ROW_BYTES && rq.dst_rank < n_ranks,
		   "an accepted header breaks its rules");
	FUZZ_CHECK(len == locus_combine_req_len(rq.n_rows), "length");
	FUZZ_CHECK(rq.rows_off % 64 == 0 && rq.rows_off <= stage &&
		   (uint64_t)rq.n_rows * rq.row_bytes <= stage - rq.rows_off,
		   "rows outside the stage");
	for (uint32_t i = 0; i < rq.n_rows; i++)
		FUZZ_CHECK(refs[i].kmask, "row %u: empty k-slot mask", i);
	receiver_accepts(&rq, refs, n_ranks, stage, 1);
	receiver_accepts(&rq, refs, n_ranks, stage, 0);
out:
	free(req);
	return 0;
}
