// SPDX-License-Identifier: MIT
/*
 * The dispatch planner written plainly (the reference of
 * tests/test_grace_plan_ref and of tools/bench/grace_bench): the same contract as
 * locus_grace_plan_batch(), the plans the planner must reproduce exactly.
 * It is one loop, with no per-batch cache and a repeat found by scanning
 * the token's earlier slots, and the per-token copy choice written as
 * plainly: the token's fixed slots (one
 * copy, or a copy on the source GPU) first, then each slot with a choice, in
 * slot order, takes a copy on a rank the token's resolved slots already use,
 * else one where a later slot with a choice has a copy (unless that copy is
 * far ahead of its share), else the nearest tier's, each by SWRR charged as
 * if the nearest tier's copies had been the candidates. Do not optimise it.
 */
#include <errno.h>
#include <string.h>

#include "grace_plan_ref.h"
#include "locus_err_priv.h"

/*
 * Smooth weighted round robin (the nginx scheme) over the copies whose bit
 * is set in cand: every candidate gains its weight (up to 2^30), the
 * largest current value among those in win (a subset of cand) wins and
 * pays back the candidates' total (down to -2^30). With win = cand, over
 * any total-weight cycle each candidate is chosen exactly weight times,
 * evenly interleaved.
 */
static inline uint32_t swrr_pick(int32_t *cur, const uint16_t *w, uint32_t n, uint64_t cand,
				 uint64_t win)
{
	int32_t total = 0, best_v = INT32_MIN;
	uint32_t best = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (!(cand >> i & 1))
			continue;
		cur[i] += w[i];
		if (cur[i] > 1 << 30)
			cur[i] = 1 << 30;
		total += w[i];
		if ((win >> i & 1) && cur[i] > best_v) {
			best_v = cur[i];
			best = i;
		}
	}
	cur[best] -= total;
	if (cur[best] < -(1 << 30))
		cur[best] = -(1 << 30);
	return best;
}

/* Whether rank r is unreachable for this batch. */
static int is_lost(const uint64_t *lost, uint32_t r)
{
	return lost && (lost[r / 64] >> (r % 64) & 1);
}

/* Copy bits of the copies ranks[0..n-1] on reachable ranks. */
static uint64_t live_copies(const uint16_t *ranks, uint32_t n, const uint64_t *lost)
{
	uint64_t live = 0;

	for (uint32_t i = 0; i < n; i++)
		if (!is_lost(lost, ranks[i]))
			live |= 1ull << i;
	return live;
}

/*
 * Expert with copies ranks[0..n-1] resolves without a choice: the rank of
 * its one live copy or of its live copy on src; MASKED_REF when no copy is
 * live; else -1.
 */
#define MASKED_REF (-2)
static int fixed_rank(const uint16_t *ranks, uint32_t n, uint32_t src, const uint64_t *lost)
{
	uint32_t n_live = 0, last = 0;

	for (uint32_t i = 0; i < n; i++)
		if (!is_lost(lost, ranks[i])) {
			n_live++;
			last = i;
		}
	if (n_live == 0)
		return MASKED_REF;
	if (n_live == 1)
		return ranks[last];
	for (uint32_t i = 0; i < n; i++)
		if (ranks[i] == src && !is_lost(lost, src))
			return (int)src;
	return -1;
}

/*
 * The copy for a slot with a choice: among the copies on a rank in used[0..
 * n_used-1] (the token's slots resolved so far); else among those on a rank
 * where an expert of later[0..n_later-1] (the token's slots with a choice
 * still to resolve) has a copy, less those more than 64 x the weight scale
 * behind in SWRR current weight; else among the copies on src's node, else
 * among all. The winner by SWRR, charged over the last set and the winner's.
 */
static uint32_t choose(int32_t *cur, const uint16_t *ranks, const uint16_t *w, uint32_t n,
		       uint32_t src, uint32_t gpn, const uint32_t *used, uint32_t n_used,
		       const uint16_t *const *later, const uint8_t *n_later_copies, uint32_t n_later,
		       const uint64_t *lost)
{
	uint64_t hits = 0, shared = 0, local = 0, all, near, win;

	for (uint32_t i = 0; i < n; i++) {
		if (is_lost(lost, ranks[i]))
			continue; /* not there: never a candidate */
		for (uint32_t u = 0; u < n_used; u++)
			if (used[u] == ranks[i])
				hits |= 1ull << i;
		for (uint32_t f = 0; f < n_later; f++)
			for (uint32_t q = 0; q < n_later_copies[f]; q++)
				if (later[f][q] == ranks[i] && !is_lost(lost, later[f][q]) &&
				    cur[i] >= -64 * (int32_t)LOCUS_GRACE_WEIGHT_SCALE)
					shared |= 1ull << i;
		if (ranks[i] / gpn == src / gpn)
			local |= 1ull << i;
	}
	all = live_copies(ranks, n, lost);
	near = local ? local : all;
	win = hits ? hits : shared ? shared : near;
	return ranks[swrr_pick(cur, w, n, near | win, win)];
}

static int check_batch(const struct locus_grace_plan_state *st, const struct locus_grace_map *m,
		       const struct locus_grace_batch *b, const struct locus_grace_plan *p,
		       struct locus_error *err)
{
	size_t n = (size_t)b->n_tokens * b->top_k;

	if (b->layer >= m->dims.n_layers)
		return locus_error_set(err, LOCUS_ERANGE, "layer %u >= %u layers", b->layer,
				       m->dims.n_layers);
	if (b->src_rank >= m->n_ranks)
		return locus_error_set(err, LOCUS_ERANGE, "source rank %u >= %u ranks",
				       b->src_rank, m->n_ranks);
	if (b->src_rank / m->dims.gpus_per_node != st->node)
		return locus_error_set(err, LOCUS_ERANGE,
				       "source rank %u is not on this lcore's node %u",
				       b->src_rank, st->node);
	if (b->top_k == 0 || b->top_k > p->max_k || b->n_tokens > p->max_tokens)
		return locus_error_set(err, LOCUS_EFULL,
				       "batch of %u tokens x top-%u exceeds the plan (%u x %u)",
				       b->n_tokens, b->top_k, p->max_tokens, p->max_k);
	if (p->n_ranks < m->n_ranks)
		return locus_error_set(err, LOCUS_EFULL, "plan sized for %u ranks, map has %u",
				       p->n_ranks, m->n_ranks);
	if (n && !b->experts)
		return locus_error_set(err, EINVAL, "batch without expert ids");
	for (size_t i = 0; i < n; i++)
		if (unlikely(b->experts[i] >= m->dims.n_experts))
			return locus_error_set(err, LOCUS_ERANGE,
					       "token %zu slot %zu: expert id %u >= E=%u",
					       i / b->top_k, i % b->top_k, b->experts[i],
					       m->dims.n_experts);
	return 0;
}

int grace_plan_ref_batch(struct locus_grace_plan_state *st, const struct locus_grace_map *m,
			 const struct locus_grace_batch *b, struct locus_grace_plan *p,
			 struct locus_error *err)
{
	uint32_t E, S, N, gpn, k, src, nd = 0, pos = 0;
	const uint8_t *ncp;
	const uint16_t *rk, *wt;
	int32_t *cur;
	int rc;

	if (!st || !m || !b || !p)
		return locus_error_set(err, EINVAL, "null planner argument");
	p->n_dest = 0;
	p->n_rows = 0;
	p->n_masked = 0;
	memset(p->tier_start, 0, sizeof(p->tier_start));
	rc = check_batch(st, m, b, p, err);
	if (rc)
		return rc;
	E = m->dims.n_experts;
	S = m->n_slots;
	N = m->n_ranks;
	gpn = m->dims.gpus_per_node;
	k = b->top_k;
	src = b->src_rank;
	if (unlikely(st->generation != m->generation)) {
		size_t need = (size_t)m->dims.n_layers * E * S;

		if (need > st->n_cur)
			return locus_error_set(err, LOCUS_EFULL,
					       "plan state holds %u counters, map needs %zu",
					       st->n_cur, need);
		memset(st->cur, 0, need * sizeof(int32_t));
		st->generation = m->generation;
	}
	ncp = locus_grace_map_ncopies(m) + (size_t)b->layer * E;
	rk = locus_grace_map_ranks(m) + (size_t)b->layer * E * S;
	wt = locus_grace_map_weights(m) + (size_t)b->layer * E * S;
	cur = st->cur + (size_t)b->layer * E * S;
	p->gates = b->gates;
	memset(p->count, 0, N * sizeof(uint32_t));

	/* pass 1: destination of every slot, row position per (token, dest) */
	for (uint32_t t = 0; t < b->n_tokens; t++) {
		const uint16_t *ex = b->experts + (size_t)t * k;
		struct locus_grace_slot *sl = p->slots + (size_t)t * k;
		uint32_t dst[LOCUS_GRACE_MAX_TOPK], used[LOCUS_GRACE_MAX_TOPK], n_used = 0;
		int choice[LOCUS_GRACE_MAX_TOPK];

		for (uint32_t j = 0; j < k; j++) {
			int f = fixed_rank(rk + (size_t)ex[j] * S, ncp[ex[j]], src, b->lost);

			choice[j] = f == -1;
			if (f == MASKED_REF)
				dst[j] = LOCUS_GRACE_MASKED;
			else if (f >= 0)
				dst[j] = used[n_used++] = (uint32_t)f;
		}
		for (uint32_t j = 0; j < k; j++) {
			const uint16_t *later[LOCUS_GRACE_MAX_TOPK];
			uint8_t later_n[LOCUS_GRACE_MAX_TOPK];
			uint32_t e = ex[j], n_later = 0;

			if (!choice[j])
				continue;
			for (uint32_t f = j + 1; f < k; f++) {
				if (!choice[f])
					continue;
				later[n_later] = rk + (size_t)ex[f] * S;
				later_n[n_later++] = ncp[ex[f]];
			}
			dst[j] = choose(cur + (size_t)e * S, rk + (size_t)e * S, wt + (size_t)e * S,
					ncp[e], src, gpn, used, n_used, later, later_n, n_later,
					b->lost);
			used[n_used++] = dst[j];
		}
		for (uint32_t j = 0; j < k; j++) {
			uint32_t d = dst[j], prev;

			sl[j].rank = (uint16_t)d;
			sl[j].pad = 0;
			if (d == LOCUS_GRACE_MASKED) {
				sl[j].row = UINT32_MAX;
				p->n_masked++;
				continue;
			}
			for (prev = 0; prev < j; prev++)
				if (sl[prev].rank == d)
					break;
			if (prev < j) {
				sl[j].row = sl[prev].row;
				sl[j].pad = 1; /* marks a repeat during planning */
			} else {
				sl[j].row = p->count[d]++;
			}
		}
	}

	/* destinations in tier order: own GPU, own node, other nodes */
	for (uint32_t tier = 0; tier < LOCUS_GRACE_N_TIERS; tier++) {
		p->tier_start[tier] = nd;
		for (uint32_t r = 0; r < N; r++) {
			if (!p->count[r] || locus_grace_tier_of(src, r, gpn) != tier)
				continue;
			p->dest[nd] = (uint16_t)r;
			p->dest_start[nd] = pos;
			p->first[r] = pos;
			pos += p->count[r];
			nd++;
		}
	}
	p->tier_start[LOCUS_GRACE_N_TIERS] = nd;
	p->dest_start[nd] = pos;

	/* pass 2: fill rows and masks; rows of a destination stay in token order */
	for (uint32_t t = 0; t < b->n_tokens; t++) {
		struct locus_grace_slot *sl = p->slots + (size_t)t * k;

		for (uint32_t j = 0; j < k; j++) {
			uint32_t at;

			if (sl[j].rank == LOCUS_GRACE_MASKED)
				continue;
			at = p->first[sl[j].rank] + sl[j].row;
			if (sl[j].pad) {
				sl[j].pad = 0;
				p->kmask[at] |= 1u << j;
				continue;
			}
			p->rows[at] = t;
			p->kmask[at] = 1u << j;
		}
	}
	p->n_dest = nd;
	p->n_rows = pos;
	return (int)nd;
}
