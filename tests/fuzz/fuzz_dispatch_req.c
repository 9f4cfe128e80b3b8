// SPDX-License-Identifier: MIT
/*
 * Dispatch requests as a rank stages them: the engine's sequence, a private
 * copy of the header, locus_dispatch_req_check on it and the body, then
 * locus_grace_plan_batch against a valid map. Input: a byte picking the
 * map, a byte picking the source rank, a byte for the stage size, then the
 * request (its length is the descriptor's). Contract: what is accepted
 * keeps the header's rules and is planned within the planner's promises
 * (fuzz_plan.c); a batch the planner refuses leaves the plan empty, and the
 * planner refuses every expert id the check would.
 */
#include <math.h>

#include "fuzz.h"
#include "fuzz_grace_maps.h"
#include "locus_dispatch.h"

#define MAX_TOKENS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct locus_error err = { 0 };
	struct fuzz_in in = { data, size };
	size_t mi = fin_u8(&in) % FGM_N;
	const struct fgm_shape *s = &fgm_shapes[mi];
	uint32_t n_ranks = s->nodes * s->gpn, src = fin_u8(&in) % n_ranks;
	uint64_t stage = 4096ull << (fin_u8(&in) % 12);
	struct fp_planner *pl = fgm_planner(mi, src / s->gpn, MAX_TOKENS);
	struct locus_dispatch_req rq = { 0 };
	struct locus_grace_batch b;
	uint8_t *req = fuzz_dup(in.p, in.n);
	size_t len = in.n;
	int ret, nd;

	if (len >= sizeof(rq))
		memcpy(&rq, req, sizeof(rq));
	ret = locus_dispatch_req_check(&rq, req + sizeof(rq), len, stage, s->L, s->E, MAX_TOKENS,
				       &err);
	FUZZ_CHECK(ret <= 0, "check returned %d", ret);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal without a message");
		/* the planner on a refused request's ids, where the shape lets it read them */
		if (len < sizeof(rq) || rq.top_k == 0 || rq.top_k > LOCUS_MAX_TOPK ||
		    rq.n_tokens > MAX_TOKENS || len < locus_dispatch_req_len(rq.n_tokens, rq.top_k))
			goto out;
	} else {
		FUZZ_CHECK(rq.magic == LOCUS_DISPATCH_MAGIC && rq.top_k >= 1 &&
			   rq.top_k <= LOCUS_MAX_TOPK && rq.n_tokens >= 1 &&
			   rq.n_tokens <= MAX_TOKENS && rq.row_bytes >= 1 &&
			   rq.row_bytes <= LOCUS_MAX_ROW_BYTES && rq.layer < s->L,
			   "an accepted header breaks its rules");
		FUZZ_CHECK(len == locus_dispatch_req_len(rq.n_tokens, rq.top_k), "length");
		FUZZ_CHECK(rq.rows_off % 64 == 0 && rq.rows_off <= stage &&
			   (uint64_t)rq.n_tokens * rq.row_bytes <= stage - rq.rows_off,
			   "rows outside the stage");
		for (size_t i = 0; i < (size_t)rq.n_tokens * rq.top_k; i++) {
			FUZZ_CHECK(((const uint16_t *)(req + sizeof(rq)))[i] < s->E, "expert id");
			const float *g = (const float *)(req + sizeof(rq) +
							 locus_ids_bytes(rq.n_tokens, rq.top_k));

			FUZZ_CHECK(isfinite(g[i]), "gate not finite");
		}
	}
	b = (struct locus_grace_batch){
		.layer = rq.layer, .src_rank = src, .n_tokens = rq.n_tokens, .top_k = rq.top_k,
		.experts = (const uint16_t *)(req + sizeof(rq)),
		.gates = (const float *)(req + sizeof(rq) + locus_ids_bytes(rq.n_tokens, rq.top_k)),
	};
	nd = locus_grace_plan_batch(pl->st, pl->map, &b, &pl->plan, NULL);
	if (ret == 0) {
		FUZZ_CHECK(nd >= 0, "an accepted request is refused by the planner: %d", nd);
		fp_check_plan(pl->map, &b, &pl->plan, nd);
	} else if (nd < 0) {
		FUZZ_CHECK(pl->plan.n_dest == 0 && pl->plan.n_rows == 0,
			   "a refused batch left a plan of %u destinations", pl->plan.n_dest);
	} else {
		/* planned though refused: then the ids and layer were not the reason */
		for (size_t i = 0; i < (size_t)rq.n_tokens * rq.top_k; i++)
			FUZZ_CHECK(b.experts[i] < s->E, "the planner took expert id %u >= %u",
				   b.experts[i], s->E);
		FUZZ_CHECK(rq.layer < s->L, "the planner took layer %u", rq.layer);
		fp_check_plan(pl->map, &b, &pl->plan, nd);
	}
out:
	free(req);
	return 0;
}
