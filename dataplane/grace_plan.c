// SPDX-License-Identifier: MIT
/*
 * Dispatch planner: (token, expert) -> destination rank by topology-aware
 * routing (TAR) with a per-token copy choice (a copy on a GPU the token
 * goes to anyway before the nearest tier's), then per-destination row
 * lists grouped by tier, and the inverse map combine uses. Everything
 * lives in caller memory; a batch costs no allocation and no system call.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "locus_grace_plan.h"

size_t locus_grace_plan_state_size(const struct locus_grace_dims *d)
{
	size_t n;

	if (locus_grace_dims_check(d, NULL))
		return 0;
	n = (size_t)d->n_layers * d->n_experts * (1 + d->max_replicas);
	return LOCUS_ALIGN_UP(sizeof(struct locus_grace_plan_state) + n * sizeof(int32_t),
			      (size_t)LOCUS_CACHE_LINE);
}

int locus_grace_plan_state_init(struct locus_grace_plan_state *st, size_t bytes,
				const struct locus_grace_map *m, uint32_t node,
				struct locus_error *err)
{
	size_t need;

	if (!st || !m)
		return locus_error_set(err, EINVAL, "no state or map");
	need = locus_grace_plan_state_size(&m->dims);
	if (need == 0 || bytes < need)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "plan state needs %zu bytes, got %zu", need, bytes);
	if (node >= m->dims.n_nodes)
		return locus_error_set(err, LOCUS_ERANGE, "node %u >= %u nodes", node,
				       m->dims.n_nodes);
	memset(st, 0, need);
	st->generation = m->generation;
	st->node = node;
	st->n_cur = (uint32_t)((bytes - sizeof(*st)) / sizeof(int32_t));
	st->bytes = bytes;
	return 0;
}

size_t locus_grace_plan_mem_size(uint32_t max_tokens, uint32_t max_k, uint32_t n_ranks)
{
	size_t slots = (size_t)max_tokens * max_k;

	return n_ranks * sizeof(uint16_t) + 8 + (n_ranks + 1) * sizeof(uint32_t) +
	       slots * (2 * sizeof(uint32_t) + sizeof(struct locus_grace_slot)) +
	       2 * ((size_t)n_ranks + 2) * sizeof(uint32_t) +
	       ((size_t)n_ranks + 2) * sizeof(uint64_t) +
	       LOCUS_GRACE_MAX_EXPERTS * sizeof(struct locus_grace_eroute) +
	       LOCUS_CACHE_LINE; /* the eroutes' alignment */
}

int locus_grace_plan_init(struct locus_grace_plan *p, void *mem, size_t bytes,
			  uint32_t max_tokens, uint32_t max_k, uint32_t n_ranks)
{
	size_t slots = (size_t)max_tokens * max_k;
	uint8_t *c;

	if (!p || !mem || max_k == 0 || max_k > LOCUS_GRACE_MAX_TOPK || n_ranks == 0 ||
	    n_ranks > LOCUS_GRACE_MAX_RANKS || slots > UINT32_MAX / 2)
		return -EINVAL;
	if (bytes < locus_grace_plan_mem_size(max_tokens, max_k, n_ranks))
		return -LOCUS_ETRUNCATED;
	memset(p, 0, sizeof(*p));
	p->max_tokens = max_tokens;
	p->max_k = max_k;
	p->n_ranks = n_ranks;
	/* eroutes of 32 bytes, a cache line's half each */
	c = (uint8_t *)LOCUS_ALIGN_UP((uintptr_t)mem, (uintptr_t)LOCUS_CACHE_LINE);
	p->eroute = (struct locus_grace_eroute *)c; /* stamps 0: p->seq starts at 1 */
	memset(p->eroute, 0, LOCUS_GRACE_MAX_EXPERTS * sizeof(*p->eroute));
	c += LOCUS_GRACE_MAX_EXPERTS * sizeof(*p->eroute);
	p->want = (uint64_t *)c; /* 8-byte aligned after the eroutes */
	c += (n_ranks + 2) * sizeof(uint64_t);
	p->slots = (struct locus_grace_slot *)c;
	c += slots * sizeof(struct locus_grace_slot);
	p->rows = (uint32_t *)c;
	c += slots * sizeof(uint32_t);
	p->kmask = (uint32_t *)c;
	c += slots * sizeof(uint32_t);
	p->dest_start = (uint32_t *)c;
	c += (n_ranks + 1) * sizeof(uint32_t);
	p->count = (uint32_t *)c; /* + 2: the spare ranks (plan_assign) */
	c += (n_ranks + 2) * sizeof(uint32_t);
	p->first = (uint32_t *)c;
	c += (n_ranks + 2) * sizeof(uint32_t);
	p->dest = (uint16_t *)c;
	return 0;
}

/*
 * How expert e (copies ranks[0..n-1], weights w[0..n-1]) resolves from src:
 * the copy on src, the only copy, or (dest = choice, the map's rank count
 * N) a choice per token (token_pick) whose fallback is SWRR over the copies
 * on src's node, else over all. A choice of at most LOCUS_GRACE_EROUTE_COPIES
 * copies, with a counter row (S) as wide, keeps them here, padded with the
 * spare rank N + 1 (no token goes there) and weight 0; else it is wide and
 * the planner reads the map. The same for every pair of a batch, made once
 * per batch on first use.
 */
static inline void eroute_make(struct locus_grace_eroute *er, const uint16_t *ranks,
			       const uint16_t *w, uint32_t n, uint32_t S, uint32_t src,
			       uint32_t gpn, uint32_t seq, uint32_t choice)
{
	uint64_t local = 0;
	uint32_t src_node = src / gpn;

	er->stamp = seq;
	er->cand = 0;
	er->wide = 0;
	er->all = 0;
	for (uint32_t i = 0; i < LOCUS_GRACE_EROUTE_COPIES; i++) {
		er->rank[i] = (uint16_t)(choice + 1);
		er->weight[i] = 0;
	}
	if (likely(n == 1)) {
		er->dest = ranks[0];
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (ranks[i] == src) {
			er->dest = (uint16_t)src;
			return;
		}
		if (ranks[i] / gpn == src_node)
			local |= 1ull << i;
	}
	er->dest = (uint16_t)choice;
	er->cand = local ? local : (n == 64) ? ~0ull : (1ull << n) - 1;
	if (n > LOCUS_GRACE_EROUTE_COPIES || S < LOCUS_GRACE_EROUTE_COPIES) {
		er->wide = 1;
		return;
	}
	er->all = (uint8_t)((1u << n) - 1);
	for (uint32_t i = 0; i < n; i++) {
		er->rank[i] = ranks[i];
		er->weight[i] = w[i];
	}
}

/* Largest of n ids (0 for none), four independent maxima per step. */
static uint16_t max_u16(const uint16_t *v, size_t n)
{
	uint16_t m0 = 0, m1 = 0, m2 = 0, m3 = 0;
	size_t i = 0;

	for (; i + 4 <= n; i += 4) {
		m0 = v[i] > m0 ? v[i] : m0;
		m1 = v[i + 1] > m1 ? v[i + 1] : m1;
		m2 = v[i + 2] > m2 ? v[i + 2] : m2;
		m3 = v[i + 3] > m3 ? v[i + 3] : m3;
	}
	for (; i < n; i++)
		m0 = v[i] > m0 ? v[i] : m0;
	m0 = m1 > m0 ? m1 : m0;
	m2 = m3 > m2 ? m3 : m2;
	return m2 > m0 ? m2 : m0;
}

/*
 * How far (in SWRR current weight: 64 picks of the least-loaded copy) a
 * copy may run ahead of its share by taking pairs for a row another expert
 * of the token will share, before the share it owes comes back first.
 */
#define SHARE_SLACK (64 * (int32_t)LOCUS_GRACE_WEIGHT_SCALE)

/* Bound of a SWRR value: a copy a token-aware choice always passes over stops gaining there. */
#define SWRR_BOUND (1 << 30)

/*
 * SWRR order of copy i with counter c: the larger counter, then the lower
 * index, wins; a copy outside win never does (INT64_MIN, below every key
 * of a copy in it: counters are within +-SWRR_BOUND).
 */
static inline int64_t swrr_key(int32_t c, uint32_t i, uint64_t win)
{
	int64_t key = (int64_t)((uint64_t)(int64_t)c << 6) | (int64_t)(63 - i);
	int64_t in = -(int64_t)(win >> i & 1);

	/* branch-free: whether the copy is in win is data */
	return (key & in) | (INT64_MIN & ~in);
}

/* The copy whose key (swrr_key) this is. */
static inline uint32_t swrr_key_copy(int64_t key)
{
	return 63 - (uint32_t)(key & 63);
}

/*
 * The copy of a multi-copy expert (copies ranks[0..n-1], none on src) for
 * a token: a copy on a GPU the token already goes to (hit), which costs no
 * row; else one on a GPU where a later choice of the token has a copy
 * (shared), which then costs that expert no row, unless the copy is
 * SHARE_SLACK ahead of its share; else one of the nearest tier's copies
 * (cand). The winner among those by smooth weighted round robin (the nginx
 * scheme): every copy of the nearest tier and of the winner's set gains its
 * weight, the largest value in the winner's set wins (the first of equals)
 * and pays back the total gained. With no token-aware choice, over a
 * total-weight cycle each copy is chosen weight times, evenly interleaved;
 * a copy such a choice took owes the others the turns, so the shares stay
 * the weights while the round robin can pay them back. Branch-free: which
 * set wins and which copy is data.
 */
static inline uint32_t swrr_take(int32_t *cur, const uint16_t *w, const uint16_t *ranks,
				 uint32_t n, uint64_t hit, uint64_t shared, uint64_t cand)
{
	uint64_t win, charge;
	int64_t best = INT64_MIN;
	int32_t total = 0;
	uint32_t i;

	win = shared | (cand & -(uint64_t)(shared == 0));
	win = hit | (win & -(uint64_t)(hit == 0));
	charge = cand | win;
	for (i = 0; i < n; i++) {
		int32_t add = (int32_t)w[i] & -(int32_t)(charge >> i & 1);
		int64_t key;

		cur[i] = cur[i] + add > SWRR_BOUND ? SWRR_BOUND : cur[i] + add;
		total += add;
		key = swrr_key(cur[i], i, win);
		best = key > best ? key : best;
	}
	i = swrr_key_copy(best);
	cur[i] = cur[i] - total < -SWRR_BOUND ? -SWRR_BOUND : cur[i] - total;
	return ranks[i];
}

/*
 * token_pick for a choice among the copies held in er (n ranks, weights and
 * counters cur[0..LOCUS_GRACE_EROUTE_COPIES-1], the spares never hit, never
 * shared, never charged): token t1 - 1 already goes to r when last[r] == t1,
 * a later choice of it has a copy on r when want[r] > tag (this slot's own).
 */
static inline uint32_t token_pick_held(const struct locus_grace_eroute *er, int32_t *cur,
				       const uint32_t *last, const uint64_t *want, uint32_t t1,
				       uint64_t tag)
{
	uint64_t hit = 0, shared = 0, win, charge, cand = er->cand;
	int64_t key[LOCUS_GRACE_EROUTE_COPIES], k01, k23, best;
	int32_t total = 0;
	uint32_t i;

#pragma GCC unroll 4
	for (i = 0; i < LOCUS_GRACE_EROUTE_COPIES; i++) {
		hit |= (uint64_t)(last[er->rank[i]] == t1) << i;
		shared |= (uint64_t)((want[er->rank[i]] > tag) & (cur[i] >= -SHARE_SLACK)) << i;
	}
	shared &= er->all;
	win = shared | (cand & -(uint64_t)(shared == 0));
	win = hit | (win & -(uint64_t)(hit == 0));
	charge = cand | win;
#pragma GCC unroll 4
	for (i = 0; i < LOCUS_GRACE_EROUTE_COPIES; i++) {
		int32_t add = (int32_t)er->weight[i] & -(int32_t)(charge >> i & 1);

		cur[i] = cur[i] + add > SWRR_BOUND ? SWRR_BOUND : cur[i] + add;
		total += add;
		key[i] = swrr_key(cur[i], i, win);
	}
	/* the largest key, as a tree: the picks of a token wait on each other */
	k01 = key[0] > key[1] ? key[0] : key[1];
	k23 = key[2] > key[3] ? key[2] : key[3];
	best = k01 > k23 ? k01 : k23;
	i = swrr_key_copy(best);
	cur[i] = cur[i] - total < -SWRR_BOUND ? -SWRR_BOUND : cur[i] - total;
	return er->rank[i];
}

/* token_pick_held for a wide choice: its copies ranks[0..n-1], weights w[]. */
static uint32_t token_pick_wide(const struct locus_grace_eroute *er, const uint16_t *ranks,
				const uint16_t *w, int32_t *cur, uint32_t n, const uint32_t *last,
				const uint64_t *want, uint32_t t1, uint64_t tag)
{
	uint64_t hit = 0, shared = 0;

	for (uint32_t i = 0; i < n; i++) {
		hit |= (uint64_t)(last[ranks[i]] == t1) << i;
		shared |= (uint64_t)((want[ranks[i]] > tag) & (cur[i] >= -SHARE_SLACK)) << i;
	}
	return swrr_take(cur, w, ranks, n, hit, shared, er->cand);
}

/* *sl = { rank d, pad 0, row }, as one store. */
static inline void slot_store(struct locus_grace_slot *sl, uint32_t d, uint32_t row)
{
	uint64_t v = (uint64_t)row << 32 | d;

	LOCUS_STATIC_ASSERT(sizeof(*sl) == 8 && offsetof(struct locus_grace_slot, row) == 4,
			    "a slot is rank, pad, row");
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
	v = (uint64_t)d << 48 | row; /* rank, pad 0, row in big-endian order */
#endif
	memcpy(sl, &v, sizeof(v));
}

/* Slot sl of token t1 - 1 goes to d: its row is d's latest if the token already uses d. */
static inline void slot_assign(struct locus_grace_slot *sl, uint32_t d, uint32_t t1,
			       uint32_t *last, uint32_t *count)
{
	/* branch-free: whether a slot repeats a rank is data */
	uint32_t rep = last[d] == t1;

	*sl = (struct locus_grace_slot){ .rank = (uint16_t)d, .row = count[d] - rep };
	count[d] += !rep;
	last[d] = t1;
}

/*
 * Pass 1: destination of every slot, row position per (token, dest). A
 * token's experts with a fixed destination (one copy, or a copy on the
 * source GPU) go first; those with a choice then, in slot order, take a
 * copy the token already uses or one a later slot can share (token_pick),
 * else the nearest tier's round robin. Rows of a
 * destination are handed out in token order, so a token sending a second
 * slot to d finds its row as d's latest. The arrays are locals so the
 * stores through them do not make the compiler reload p's fields.
 */
static void plan_assign(struct locus_grace_plan *p, const struct locus_grace_batch *b,
			const uint8_t *ncp, const uint16_t *rk, const uint16_t *wt, int32_t *cur,
			uint32_t S, uint32_t N, uint32_t src, uint32_t gpn)
{
	struct locus_grace_eroute *const eroute = p->eroute;
	uint32_t *const last = p->first; /* last token (+1) sent to each rank */
	uint32_t *const count = p->count;
	uint64_t *const want = p->want; /* the token's last choice slot per rank */
	const uint32_t seq = p->seq, k = b->top_k, n_tokens = b->n_tokens;
	const uint16_t *ex = b->experts;
	struct locus_grace_slot *sl = p->slots;

	for (uint32_t t1 = 1; t1 <= n_tokens; t1++, ex += k, sl += k) {
		uint32_t choice = 0; /* slots whose expert has a choice of copies */

		/*
		 * branch-free: a slot with a choice goes to the spare rank N
		 * for now (its row is never read) and is assigned again below.
		 * Last slot first, so that choice gets slot j's bit at j; the
		 * rows do not depend on the order
		 */
		for (uint32_t j = 0; j < k; j++) {
			uint32_t e = ex[j], d;
			struct locus_grace_eroute *er = &eroute[e];

			if (unlikely(er->stamp != seq))
				eroute_make(er, rk + (size_t)e * S, wt + (size_t)e * S, ncp[e], S,
					    src, gpn, seq, N);
			d = er->dest;
			choice |= (uint32_t)(d == N) << j;
			slot_assign(&sl[j], d, t1, last, count);
		}
		/*
		 * want[r]: t1 << 8 | the last choice slot with a copy on r, so a
		 * choice at slot j sees a later one's copy as want[r] > its own
		 * tag (older tokens' marks are smaller); the first choice needs
		 * no mark
		 */
		if (unlikely(choice & (choice - 1)))
			for (uint32_t c = choice & (choice - 1); c; c &= c - 1) {
				uint32_t f = (uint32_t)__builtin_ctz(c), e = ex[f];
				const struct locus_grace_eroute *er = &eroute[e];
				uint64_t tag = (uint64_t)t1 << 8 | f;

				if (likely(!er->wide)) {
#pragma GCC unroll 4
					for (uint32_t q = 0; q < LOCUS_GRACE_EROUTE_COPIES; q++)
						want[er->rank[q]] = tag;
					continue;
				}
				for (uint32_t q = 0; q < ncp[e]; q++)
					want[rk[(size_t)e * S + q]] = tag;
			}
		while (unlikely(choice)) {
			uint32_t j = (uint32_t)__builtin_ctz(choice), e = ex[j], d;
			const struct locus_grace_eroute *er = &eroute[e];
			uint64_t tag = (uint64_t)t1 << 8 | j;
			size_t o = (size_t)e * S;

			choice &= choice - 1;
			if (likely(!er->wide))
				d = token_pick_held(er, cur + o, last, want, t1, tag);
			else
				d = token_pick_wide(er, rk + o, wt + o, cur + o, ncp[e], last, want,
						    t1, tag);
			slot_assign(&sl[j], d, t1, last, count);
		}
	}
}

/*
 * Pass 2: rows and masks at first[rank] + row, from the slots of pass 1,
 * branch-free: every slot of a token at one destination writes the same row
 * t and ORs its bit into the row's mask (cleared by the caller).
 */
static void plan_fill(struct locus_grace_plan *p, uint32_t n_tokens, uint32_t k)
{
	const uint32_t *const first = p->first;
	uint32_t *const rows = p->rows, *const kmask = p->kmask;
	const struct locus_grace_slot *sl = p->slots;

	for (uint32_t t = 0; t < n_tokens; t++, sl += k) {
		for (uint32_t j = 0; j < k; j++) {
			uint32_t at = first[sl[j].rank] + sl[j].row;

			kmask[at] |= 1u << j;
			rows[at] = t;
		}
	}
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
	if (likely(max_u16(b->experts, n) < m->dims.n_experts))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (b->experts[i] >= m->dims.n_experts)
			return locus_error_set(err, LOCUS_ERANGE,
					       "token %zu slot %zu: expert id %u >= E=%u",
					       i / b->top_k, i % b->top_k, b->experts[i],
					       m->dims.n_experts);
	return 0;
}

int locus_grace_plan_batch(struct locus_grace_plan_state *st, const struct locus_grace_map *m,
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
	/* N + 2: the spare ranks of a choice (N) and of a held copy's padding (N + 1) */
	memset(p->count, 0, (N + 2) * sizeof(uint32_t));
	memset(p->first, 0, (N + 2) * sizeof(uint32_t)); /* pass 1: last token (+1) sent to r */
	memset(p->want, 0, (N + 2) * sizeof(uint64_t));  /* pass 1: no later choice anywhere */
	if (unlikely(++p->seq == 0)) {
		memset(p->eroute, 0, LOCUS_GRACE_MAX_EXPERTS * sizeof(*p->eroute));
		p->seq = 1;
	}

	/* pass 1: destination of every slot, row position per (token, dest) */
	plan_assign(p, b, ncp, rk, wt, cur, S, N, src, gpn);

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
	memset(p->kmask, 0, pos * sizeof(uint32_t));
	plan_fill(p, b->n_tokens, k);
	p->n_dest = nd;
	p->n_rows = pos;
	return (int)nd;
}
