// SPDX-License-Identifier: MIT
/*
 * GRACE table payloads: the input is a payload, sealed here (the container
 * has its own target, tblfile) and checked by locus_grace_blob_check, the
 * check locusd's table channel and `locusctl show` run. What validates
 * must agree with view_init + validate, build a planner map (the engine's
 * adopt path: locus_grace_map_build, plan_state_init for every node) that
 * keeps the table's copies, and plan batches of every expert from every
 * rank within the planner's promises (fuzz_plan.c).
 */
#include "fuzz.h"
#include "fuzz_plan.h"
#include "fuzz_tables.h"
#include "locus_grace_priv.h"
#include "locus_tblfile.h"

#define MAX_TOKENS 16

static void plan_all(const void *payload, size_t len, const struct locus_grace_view *v)
{
	const struct locus_grace_dims *d = v->dims;
	uint32_t N = locus_grace_n_ranks(d), E = d->n_experts;
	static uint16_t ex[MAX_TOKENS * LOCUS_GRACE_MAX_TOPK];
	static float g[MAX_TOKENS * LOCUS_GRACE_MAX_TOPK];
	struct fp_planner pl;

	for (uint32_t node = 0; node < d->n_nodes && node < 4; node++) {
		FUZZ_CHECK(fp_planner_init(&pl, payload, len, MAX_TOKENS, node) == 0,
			   "a validated payload does not build a planner for node %u", node);
		if (node == 0)
			fp_check_map(pl.map, v);
		for (uint32_t src = node * d->gpus_per_node;
		     src < (node + 1) * d->gpus_per_node && src < N; src += 1 + src / 8) {
			for (uint32_t l = 0; l < d->n_layers; l += 1 + d->n_layers / 4) {
				/* every expert, top-4 per token, twice (the SWRR state moves) */
				uint32_t k = 4, n = 0;

				for (uint32_t t = 0; t < MAX_TOKENS; t++) {
					for (uint32_t j = 0; j < k; j++) {
						ex[t * k + j] = (uint16_t)((t * k + j + src) % E);
						g[t * k + j] = 1.0f / (float)k;
					}
					n++;
				}
				for (int rep = 0; rep < 2; rep++) {
					struct locus_grace_batch b = {
						.layer = l, .src_rank = src, .n_tokens = n,
						.top_k = k, .experts = ex, .gates = g,
					};
					int nd = locus_grace_plan_batch(pl.st, pl.map, &b,
									&pl.plan, NULL);

					FUZZ_CHECK(nd >= 0, "a valid batch refused: %d", nd);
					fp_check_plan(pl.map, &b, &pl.plan, nd);
				}
			}
		}
		fp_planner_free(&pl);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct locus_error err = { 0 };
	struct locus_grace_view v;
	const void *pl = NULL;
	size_t blen, plen = 0;
	void *payload = fuzz_dup(data, size);
	void *blob = ft_seal(LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, data, size, &blen);
	int ret, ret2;

	if (!blob)
		goto out; /* larger than a table may be */
	ret = locus_grace_blob_check(blob, blen, &pl, &plen, &err);
	FUZZ_CHECK(ret <= 0, "blob check returned %d", ret);
	FUZZ_CHECK(locus_grace_table_validate_cb(blob, blen, NULL, NULL) == ret,
		   "the table channel's callback disagrees with the blob check");
	ret2 = locus_grace_view_init(&v, payload, size, NULL);
	if (ret2 == 0)
		ret2 = locus_grace_validate(&v, NULL);
	FUZZ_CHECK(ret == ret2, "blob check %d, view + validate %d", ret, ret2);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal %d without a message", ret);
		goto out;
	}
	FUZZ_CHECK(pl == (uint8_t *)blob + sizeof(struct locus_tbl_hdr) && plen == size,
		   "payload pointer/length");
	FUZZ_CHECK(locus_grace_payload_size(v.dims) == size, "payload size");
	FUZZ_CHECK(locus_grace_map_size(v.dims) > 0 && locus_grace_plan_state_size(v.dims) > 0,
		   "no map size for valid dims");
	plan_all(payload, size, &v);
out:
	free(blob);
	free(payload);
	return 0;
}
