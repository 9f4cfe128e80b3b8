// SPDX-License-Identifier: MIT
/*
 * The placements simulate --moe times: the locus GRACE planner over a map
 * (the code locusd runs for every dispatch) and EPLB's copies as vLLM picks
 * them.
 */
#include <errno.h>
#include <stdlib.h>

#include "locus_err_priv.h"
#include "locus_grace_plan.h"
#include "locus_gracefit.h"
#include "locus_sim_moe.h"

struct locus_sim_moe_grace {
	const struct locus_grace_map *m;
	void **st;          /* [nodes] one planner state per node, as one lcore each */
	void *pmem;
	struct locus_grace_plan plan;
};

void locus_sim_moe_grace_free(struct locus_sim_moe_grace *g)
{
	if (!g)
		return;
	for (uint32_t nd = 0; g->st && nd < g->m->dims.n_nodes; nd++)
		free(g->st[nd]);
	free(g->st);
	free(g->pmem);
	free(g);
}

int locus_sim_moe_grace_init(struct locus_sim_moe_grace **out, const struct locus_grace_map *m,
			     uint32_t max_tokens, uint32_t k, struct locus_error *err)
{
	struct locus_sim_moe_grace *g = calloc(1, sizeof(*g));
	size_t pm = locus_grace_plan_mem_size(max_tokens, k, m->n_ranks);
	size_t ssz = locus_grace_plan_state_size(&m->dims);
	int rc = -ENOMEM;

	*out = NULL;
	if (!g)
		return locus_error_set(err, ENOMEM, "out of memory");
	g->m = m;
	g->pmem = calloc(1, pm);
	g->st = calloc(m->dims.n_nodes, sizeof(void *));
	if (!g->pmem || !g->st)
		goto err_free;
	rc = locus_grace_plan_init(&g->plan, g->pmem, pm, max_tokens, k, m->n_ranks);
	if (rc)
		goto err_free;
	for (uint32_t nd = 0; nd < m->dims.n_nodes; nd++) {
		if (posix_memalign(&g->st[nd], 64, ssz)) {
			rc = -ENOMEM;
			goto err_free;
		}
		rc = locus_grace_plan_state_init(g->st[nd], ssz, m, nd, err);
		if (rc)
			goto err_free;
	}
	*out = g;
	return 0;
err_free:
	locus_sim_moe_grace_free(g);
	return rc == -ENOMEM ? locus_error_set(err, ENOMEM, "out of memory") : rc;
}

int locus_sim_moe_route_grace(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids,
			      uint32_t n, uint32_t k, uint16_t *dst, struct locus_error *err)
{
	struct locus_sim_moe_grace *g = ctx;
	struct locus_grace_batch b = { .layer = layer, .src_rank = src, .n_tokens = n,
				       .top_k = k, .experts = ids };
	int rc = locus_grace_plan_batch(g->st[src / g->m->dims.gpus_per_node], g->m, &b,
					&g->plan, err);

	if (rc < 0)
		return rc;
	for (size_t i = 0; i < (size_t)n * k; i++)
		dst[i] = g->plan.slots[i].rank;
	return 0;
}

int locus_sim_moe_route_eplb(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids,
			     uint32_t n, uint32_t k, uint16_t *dst, struct locus_error *err)
{
	const struct locus_gracefit_eplb *p = ctx;

	(void)src;
	for (size_t i = 0; i < (size_t)n * k; i++)
		if (ids[i] >= p->n_experts)
			return locus_error_set(err, LOCUS_ERANGE, "expert %u of %u", ids[i],
					       p->n_experts);
	if (layer >= p->n_layers)
		return locus_error_set(err, LOCUS_ERANGE, "layer %u of %u", layer, p->n_layers);
	locus_gracefit_eplb_dispatch(p, layer, ids, n, k, dst);
	return 0;
}
