// SPDX-License-Identifier: MIT
/*
 * GRACE placement sets: the input is a set payload, sealed here (the
 * container has its own target, tblfile) and checked by
 * locus_graceset_blob_check, the check `locusctl push` and locusd's GRACE
 * channel run. Contract (shm/locus_graceset.h): the channel's callback
 * agrees; a refusal has a reason class and a message; an accepted set has
 * every group id 0..n-1 once, ranges apart covering every rank, each
 * group's table a valid GRACE blob of the set's shape with every copy
 * inside its ranks; and a batch from a group's rank is planned onto that
 * group's ranks only (what the engine's per-group dispatch relies on).
 */
#include "fuzz.h"
#include "fuzz_plan.h"
#include "fuzz_tables.h"
#include "locus_graceset.h"
#include "locus_graceset_priv.h"
#include "locus_tblfile.h"

#define MAX_TOKENS 8

static void plan_in_group(const struct locus_graceset_group *g)
{
	const struct locus_graceset_entry *x = g->entry;
	const struct locus_grace_dims *d = g->payload;
	uint32_t src = x->first_rank, E = d->n_experts, k = LOCUS_MIN(4u, E);
	static uint16_t ex[MAX_TOKENS * 4];
	static float gt[MAX_TOKENS * 4];
	struct fp_planner pl;
	int nd;

	FUZZ_CHECK(fp_planner_init(&pl, g->payload, g->payload_len, MAX_TOKENS,
				   src / d->gpus_per_node) == 0,
		   "group %u's validated table does not build a planner", x->group_id);
	for (uint32_t t = 0; t < MAX_TOKENS; t++)
		for (uint32_t j = 0; j < k; j++) {
			ex[t * k + j] = (uint16_t)((t * k + j) % E);
			gt[t * k + j] = 1.0f;
		}
	{
		struct locus_grace_batch b = { .layer = 0, .src_rank = src, .n_tokens = MAX_TOKENS,
					       .top_k = k, .experts = ex, .gates = gt };

		nd = locus_grace_plan_batch(pl.st, pl.map, &b, &pl.plan, NULL);
		FUZZ_CHECK(nd >= 0, "a valid batch refused: %d", nd);
		fp_check_plan(pl.map, &b, &pl.plan, nd);
	}
	for (int i = 0; i < nd; i++)
		FUZZ_CHECK(pl.plan.dest[i] >= x->first_rank &&
			   pl.plan.dest[i] < x->first_rank + x->n_ranks,
			   "group %u (ranks %u..%u) planned a row onto rank %u", x->group_id,
			   x->first_rank, x->first_rank + x->n_ranks - 1, pl.plan.dest[i]);
	fp_planner_free(&pl);
}

static void check_accepted(const void *pl, const struct locus_graceset_group *g)
{
	const struct locus_graceset_hdr *h = pl;
	uint32_t N = h->n_nodes * h->gpus_per_node, covered = 0;
	static uint8_t owned[LOCUS_GRACE_MAX_RANKS];

	FUZZ_CHECK(h->n_groups >= 1 && h->n_groups <= LOCUS_GRACESET_MAX_GROUPS &&
		   N >= 1 && N <= LOCUS_GRACE_MAX_RANKS, "accepted header out of range");
	memset(owned, 0, N);
	for (uint32_t i = 0; i < h->n_groups; i++) {
		const struct locus_graceset_entry *x = g[i].entry;
		const struct locus_grace_dims *d = g[i].payload;
		struct locus_grace_view v;

		FUZZ_CHECK(x && x->group_id == i, "group %u missing from the view", i);
		FUZZ_CHECK(x->n_ranks >= 1 && x->first_rank + x->n_ranks <= N,
			   "group %u's ranks outside the cluster", i);
		for (uint32_t r = x->first_rank; r < x->first_rank + x->n_ranks; r++) {
			FUZZ_CHECK(!owned[r], "rank %u in two groups", r);
			owned[r] = 1;
			covered++;
		}
		FUZZ_CHECK(locus_grace_blob_check((const uint8_t *)g[i].payload - 64,
						  g[i].payload_len + 64, NULL, NULL, NULL) == 0,
			   "group %u's table does not pass the GRACE check", i);
		FUZZ_CHECK(d->n_layers == h->n_layers && d->n_experts == h->n_experts &&
			   d->n_nodes == h->n_nodes && d->gpus_per_node == h->gpus_per_node &&
			   d->max_replicas < x->n_ranks, "group %u's dims", i);
		locus_grace_view_init(&v, (void *)(uintptr_t)g[i].payload, g[i].payload_len, NULL);
		for (size_t j = 0; j < (size_t)d->n_layers * d->n_experts; j++)
			FUZZ_CHECK(v.primary[j] >= x->first_rank &&
				   v.primary[j] < x->first_rank + x->n_ranks,
				   "group %u: a primary outside its ranks", i);
		plan_in_group(&g[i]);
	}
	FUZZ_CHECK(covered == N, "ranks in no group were accepted");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct locus_graceset_group g[LOCUS_GRACESET_MAX_GROUPS];
	enum locus_graceset_problem why = LOCUS_GRACESET_N_PROBLEMS;
	struct locus_error err = { 0 };
	const void *pl = NULL;
	size_t blen, plen = 0;
	void *blob = ft_seal(LOCUS_TBL_GRACE_SET, LOCUS_GRACESET_KIND_VERSION, data, size, &blen);
	int ret;

	if (!blob)
		return 0; /* larger than a table may be */
	memset(g, 0, sizeof(g));
	ret = locus_graceset_blob_check(blob, blen, &pl, &plen, g, &why, &err);
	FUZZ_CHECK(ret <= 0, "blob check returned %d", ret);
	FUZZ_CHECK(locus_graceset_table_validate_cb(blob, blen, NULL, NULL) == ret,
		   "the table channel's callback disagrees with the blob check");
	FUZZ_CHECK((ret == 0) == (why == LOCUS_GRACESET_OK) && why < LOCUS_GRACESET_N_PROBLEMS,
		   "reason class %d for result %d", why, ret);
	FUZZ_CHECK(locus_grace_blob_check(blob, blen, NULL, NULL, NULL) < 0,
		   "a set passed as a single GRACE table");
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal without a message");
		goto out;
	}
	FUZZ_CHECK(plen == size && pl == (const uint8_t *)blob + 64, "payload pointer/length");
	check_accepted(pl, g);
out:
	free(blob);
	return 0;
}
