// SPDX-License-Identifier: MIT
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_plan.h"

void fp_check_map(const struct locus_grace_map *m, const struct locus_grace_view *v)
{
	const struct locus_grace_dims *d = v->dims;
	uint32_t L = d->n_layers, E = d->n_experts, R = d->max_replicas;
	uint32_t N = locus_grace_n_ranks(d);
	const uint8_t *ncp = locus_grace_map_ncopies(m);
	const uint16_t *rk = locus_grace_map_ranks(m), *wt = locus_grace_map_weights(m);

	FUZZ_CHECK(!memcmp(&m->dims, d, sizeof(*d)), "map dims differ from the payload's");
	FUZZ_CHECK(m->n_ranks == N && m->n_slots == 1 + R, "map shape %u ranks %u slots",
		   m->n_ranks, m->n_slots);
	for (uint32_t l = 0; l < L; l++) {
		for (uint32_t e = 0; e < E; e++) {
			size_t le = (size_t)l * E + e;
			const uint16_t *rep = v->replica + le * R;
			uint32_t n = 1;

			while (n <= R && rep[n - 1] != LOCUS_GRACE_NO_RANK)
				n++;
			FUZZ_CHECK(ncp[le] == n, "layer %u expert %u: %u copies in the map, %u in "
				   "the table", l, e, ncp[le], n);
			FUZZ_CHECK(rk[le * m->n_slots] == v->primary[le],
				   "layer %u expert %u: first copy is not the primary", l, e);
			for (uint32_t i = 0; i < n; i++) {
				FUZZ_CHECK(rk[le * m->n_slots + i] < N, "copy on rank %u >= %u",
					   rk[le * m->n_slots + i], N);
				FUZZ_CHECK(wt[le * m->n_slots + i] >= 1, "copy weight 0");
				if (i)
					FUZZ_CHECK(rk[le * m->n_slots + i] == rep[i - 1],
						   "replica %u differs from the table's", i);
			}
		}
	}
}

/* Whether rank r holds a copy of expert e at layer l, per the map. */
static int holds(const struct locus_grace_map *m, uint32_t l, uint32_t e, uint32_t r)
{
	size_t le = (size_t)l * m->dims.n_experts + e;
	const uint16_t *rk = locus_grace_map_ranks(m) + le * m->n_slots;

	for (uint32_t i = 0; i < locus_grace_map_ncopies(m)[le]; i++)
		if (rk[i] == r)
			return 1;
	return 0;
}

/* Whether an expert of token t other than slot s's has a copy on rank r. */
static int other_holds(const struct locus_grace_map *m, const struct locus_grace_batch *b,
		       uint32_t t, uint32_t s, uint32_t r)
{
	for (uint32_t q = 0; q < b->top_k; q++)
		if (q != s && holds(m, b->layer, b->experts[(size_t)t * b->top_k + q], r))
			return 1;
	return 0;
}

/* The nearest tier any copy of e is in, seen from src. */
static enum locus_grace_tier nearest(const struct locus_grace_map *m, uint32_t l, uint32_t e,
				     uint32_t src)
{
	size_t le = (size_t)l * m->dims.n_experts + e;
	const uint16_t *rk = locus_grace_map_ranks(m) + le * m->n_slots;
	enum locus_grace_tier best = LOCUS_GRACE_TIER_REMOTE;

	for (uint32_t i = 0; i < locus_grace_map_ncopies(m)[le]; i++) {
		enum locus_grace_tier t = locus_grace_tier_of(src, rk[i], m->dims.gpus_per_node);

		if (t < best)
			best = t;
	}
	return best;
}

void fp_check_plan(const struct locus_grace_map *m, const struct locus_grace_batch *b,
		   const struct locus_grace_plan *p, int nd)
{
	uint32_t N = m->n_ranks, k = b->top_k, gpn = m->dims.gpus_per_node;
	uint64_t bits = 0;
	static uint8_t seen[LOCUS_GRACE_MAX_RANKS];

	FUZZ_CHECK(nd >= 0 && (uint32_t)nd == p->n_dest && p->n_dest <= N, "%d destinations", nd);
	FUZZ_CHECK(p->tier_start[0] == 0 && p->tier_start[LOCUS_GRACE_N_TIERS] == p->n_dest,
		   "tier bounds");
	FUZZ_CHECK(p->dest_start[0] == 0 && p->dest_start[p->n_dest] == p->n_rows, "row bounds");
	FUZZ_CHECK(p->gates == b->gates, "gates not carried");
	memset(seen, 0, N);
	for (uint32_t t = 0; t < LOCUS_GRACE_N_TIERS; t++) {
		FUZZ_CHECK(p->tier_start[t] <= p->tier_start[t + 1], "tiers not ordered");
		for (uint32_t i = p->tier_start[t]; i < p->tier_start[t + 1]; i++) {
			uint32_t r = p->dest[i];

			FUZZ_CHECK(r < N, "destination rank %u >= %u ranks", r, N);
			FUZZ_CHECK(!seen[r]++, "rank %u is a destination twice", r);
			FUZZ_CHECK(locus_grace_tier_of(b->src_rank, r, gpn) == t,
				   "rank %u listed in tier %u", r, t);
		}
	}
	for (uint32_t i = 0; i < p->n_dest; i++) {
		FUZZ_CHECK(p->dest_start[i] < p->dest_start[i + 1], "destination %u has no rows",
			   i);
		for (uint32_t j = p->dest_start[i]; j < p->dest_start[i + 1]; j++) {
			uint32_t t = p->rows[j], km = p->kmask[j];

			FUZZ_CHECK(t < b->n_tokens, "row of token %u >= %u", t, b->n_tokens);
			FUZZ_CHECK(j == p->dest_start[i] || p->rows[j - 1] < t,
				   "rows of a destination not in token order");
			FUZZ_CHECK(km && (k == 32 || !(km >> k)), "k-slot mask 0x%x for top-%u", km,
				   k);
			for (uint32_t s = 0; s < k; s++) {
				if (!(km >> s & 1))
					continue;
				FUZZ_CHECK(holds(m, b->layer, b->experts[(size_t)t * k + s],
						 p->dest[i]),
					   "token %u slot %u sent to rank %u, which holds no copy "
					   "of expert %u", t, s, p->dest[i],
					   b->experts[(size_t)t * k + s]);
				bits++;
			}
		}
	}
	FUZZ_CHECK(bits == (uint64_t)b->n_tokens * k,
		   "%llu (token, k) slots served, the batch has %llu", (unsigned long long)bits,
		   (unsigned long long)b->n_tokens * k);
	/*
	 * each slot exactly once, at the nearest tier that has a copy, or (no
	 * copy on the source GPU) on a GPU where another expert of the token
	 * has a copy: the planner's per-token choice
	 */
	for (uint32_t t = 0; t < b->n_tokens; t++) {
		for (uint32_t s = 0; s < k; s++) {
			const struct locus_grace_slot *sl = &p->slots[(size_t)t * k + s];
			uint32_t e = b->experts[(size_t)t * k + s], at = 0, found = 0;

			FUZZ_CHECK(sl->rank < N, "slot rank %u", sl->rank);
			for (uint32_t i = 0; i < p->n_dest; i++)
				if (p->dest[i] == sl->rank) {
					at = p->dest_start[i] + sl->row;
					found = at < p->dest_start[i + 1];
				}
			FUZZ_CHECK(found && p->rows[at] == t && (p->kmask[at] >> s & 1),
				   "token %u slot %u: its slot names no row that serves it", t, s);
			FUZZ_CHECK(locus_grace_tier_of(b->src_rank, sl->rank, gpn) ==
					   nearest(m, b->layer, e, b->src_rank) ||
				   (nearest(m, b->layer, e, b->src_rank) != LOCUS_GRACE_TIER_GPU &&
				    other_holds(m, b, t, s, sl->rank)),
				   "token %u slot %u: expert %u served from tier %u, a copy is "
				   "nearer and no other expert of the token has one there",
				   t, s, e, locus_grace_tier_of(b->src_rank, sl->rank, gpn));
		}
	}
}

int fp_planner_init(struct fp_planner *pl, const void *payload, size_t len, uint32_t max_tokens,
		    uint32_t node)
{
	const struct locus_grace_dims *d = payload;
	size_t mlen, plen;

	memset(pl, 0, sizeof(*pl));
	mlen = locus_grace_map_size(d);
	pl->st_len = locus_grace_plan_state_size(d);
	plen = locus_grace_plan_mem_size(max_tokens, LOCUS_GRACE_MAX_TOPK, locus_grace_n_ranks(d));
	if (!mlen || !pl->st_len)
		return -1;
	if (posix_memalign((void **)&pl->map, 64, mlen) ||
	    posix_memalign((void **)&pl->st, 64, pl->st_len) || !(pl->plan_mem = malloc(plen)))
		goto err_free;
	if (locus_grace_map_build(pl->map, mlen, payload, len, 1, NULL) < 0 ||
	    locus_grace_plan_state_init(pl->st, pl->st_len, pl->map, node, NULL) < 0 ||
	    locus_grace_plan_init(&pl->plan, pl->plan_mem, plen, max_tokens, LOCUS_GRACE_MAX_TOPK,
				  locus_grace_n_ranks(d)) < 0)
		goto err_free;
	return 0;

err_free:
	fp_planner_free(pl);
	return -1;
}

void fp_planner_free(struct fp_planner *pl)
{
	free(pl->map);
	free(pl->st);
	free(pl->plan_mem);
	memset(pl, 0, sizeof(*pl));
}
