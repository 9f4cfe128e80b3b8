// SPDX-License-Identifier: MIT
/*
 * The dispatch planner as it was before issue 15's second round of
 * optimisation (dataplane/grace_plan.c at 6d5f9e0), frozen: the plans and
 * SWRR state evolution locus_grace_plan_batch() must keep reproducing bit
 * for bit (tests/test_grace_plan_same). Its per-batch scratch (eroute
 * cache, want[] marks, per-rank counts and first rows) is its own, so the
 * planner's may change; it writes only the plan's output fields. Do not
 * optimise it, do not fix it: it is the specification by example.
 */
#include <errno.h>
#include <string.h>

#include "grace_plan_frozen.h"
#include "locus_err_priv.h"

/* How an expert resolves from one batch's source (this copy's scratch). */
struct frozen_eroute {
	uint64_t cand;   /* SWRR candidates (copy bits) when fixed < 0 */
	uint32_t stamp;  /* plan seq this entry was made for */
	int32_t fixed;   /* the rank every pair goes to, or -1 */
};

/*
 * Scratch of the frozen planner: one planner at a time (tests only), sized
 * for the format's limits.
 */
static struct frozen_eroute frozen_eroute[LOCUS_GRACE_MAX_EXPERTS];
static uint64_t frozen_want[LOCUS_GRACE_MAX_RANKS];
static uint32_t frozen_count[LOCUS_GRACE_MAX_RANKS], frozen_first[LOCUS_GRACE_MAX_RANKS];
static uint32_t frozen_seq;

/*
 * How expert e (copies ranks[0..n-1]) resolves from src: the copy on src,
 * the only copy, or a choice per token (token_pick) whose fallback is SWRR
 * over the copies on src's node, else over all. The same for every pair of
 * a batch, made once per batch on first use.
 */
static inline void eroute_make(struct frozen_eroute *er, const uint16_t *ranks, uint32_t n,
			       uint32_t src, uint32_t gpn, uint32_t seq)
{
	uint64_t local = 0;
	uint32_t src_node = src / gpn;

	er->stamp = seq;
	er->cand = 0;
	if (likely(n == 1)) {
		er->fixed = ranks[0];
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (ranks[i] == src) {
			er->fixed = (int32_t)src;
			return;
		}
		if (ranks[i] / gpn == src_node)
			local |= 1ull << i;
	}
	er->fixed = -1;
	er->cand = local ? local : (n == 64) ? ~0ull : (1ull << n) - 1;
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
 * The copy of a multi-copy expert (copies ranks[0..n-1], none on src) for
 * token t: a copy on a GPU the token already goes to (last[r] == t + 1),
 * which costs no row; else one on a GPU where a later choice of the token
 * (want[r] > tag, this slot's own tag) has a copy, which then costs that
 * expert no row, unless the copy is SHARE_SLACK ahead of its share; else
 * one of the nearest tier's copies (er->cand). The winner among those by
 * smooth weighted round robin (the nginx scheme): every copy of the nearest
 * tier and of the winner's set gains its weight, the largest value in the
 * winner's set wins and pays back the total gained. With no token-aware
 * choice, over a total-weight cycle each copy is chosen weight times,
 * evenly interleaved; a copy such a choice took owes the others the turns,
 * so the shares stay the weights while the round robin can pay them back.
 */
static inline uint32_t token_pick(const struct frozen_eroute *er, const uint16_t *ranks,
				  const uint16_t *w, int32_t *cur, uint32_t n,
				  const uint32_t *last, const uint64_t *want, uint32_t t,
				  uint64_t tag)
{
	uint64_t hit = 0, shared = 0, win, charge;
	int32_t total = 0, best_v = INT32_MIN;
	uint32_t best = 0;

	/* branch-free: which copies qualify is data */
	for (uint32_t i = 0; i < n; i++) {
		hit |= (uint64_t)(last[ranks[i]] == t + 1) << i;
		shared |= (uint64_t)((want[ranks[i]] > tag) & (cur[i] >= -SHARE_SLACK)) << i;
	}
	win = hit ? hit : shared ? shared : er->cand;
	charge = er->cand | win;
	for (uint32_t i = 0; i < n; i++) {
		int32_t add = (int32_t)w[i] & -(int32_t)(charge >> i & 1);
		int take;

		cur[i] = cur[i] + add > SWRR_BOUND ? SWRR_BOUND : cur[i] + add;
		total += add;
		take = (int)(win >> i & 1) & (cur[i] > best_v);
		best = take ? i : best;
		best_v = take ? cur[i] : best_v;
	}
	cur[best] = cur[best] - total < -SWRR_BOUND ? -SWRR_BOUND : cur[best] - total;
	return ranks[best];
}

/* Slot sl of token t goes to d: its row is d's latest if t already uses d. */
static inline void slot_assign(struct locus_grace_slot *sl, uint32_t d, uint32_t t,
			       uint32_t *last, uint32_t *count)
{
	uint32_t rep = last[d] == t + 1;

	sl->rank = (uint16_t)d;
	sl->row = count[d] - rep;
	sl->pad = 0;
	count[d] += !rep;
	last[d] = t + 1;
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
			uint32_t S, uint32_t src, uint32_t gpn)
{
	struct frozen_eroute *const eroute = frozen_eroute;
	uint32_t *const last = frozen_first; /* last token (+1) sent to each rank */
	uint32_t *const count = frozen_count;
	uint64_t *const want = frozen_want; /* the token's last choice slot per rank */
	const uint32_t seq = frozen_seq, k = b->top_k, n_tokens = b->n_tokens;
	const uint16_t *ex = b->experts;
	struct locus_grace_slot *sl = p->slots;

	for (uint32_t t = 0; t < n_tokens; t++, ex += k, sl += k) {
		uint32_t choice = 0; /* slots whose expert has a choice of copies */

		for (uint32_t j = 0; j < k; j++) {
			uint32_t e = ex[j];
			struct frozen_eroute *er = &eroute[e];

			if (unlikely(er->stamp != seq))
				eroute_make(er, rk + (size_t)e * S, ncp[e], src, gpn, seq);
			if (likely(er->fixed >= 0)) {
				slot_assign(&sl[j], (uint32_t)er->fixed, t, last, count);
				continue;
			}
			choice |= 1u << j;
		}
		/*
		 * want[r]: (t + 1) << 8 | the last choice slot with a copy on r,
		 * so a choice at slot j sees a later one's copy as want[r] > its
		 * own tag (older tokens' marks are smaller); the first choice
		 * needs no mark
		 */
		if (unlikely(choice & (choice - 1)))
			for (uint32_t c = choice & (choice - 1); c; c &= c - 1) {
				uint32_t f = (uint32_t)__builtin_ctz(c), e = ex[f];
				uint64_t tag = (uint64_t)(t + 1) << 8 | f;

				for (uint32_t q = 0; q < ncp[e]; q++)
					want[rk[(size_t)e * S + q]] = tag;
			}
		while (unlikely(choice)) {
			uint32_t j = (uint32_t)__builtin_ctz(choice), e = ex[j];
			size_t o = (size_t)e * S;

			choice &= choice - 1;
			slot_assign(&sl[j],
				    token_pick(&eroute[e], rk + o, wt + o, cur + o, ncp[e], last, want,
					       t, (uint64_t)(t + 1) << 8 | j),
				    t, last, count);
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
	const uint32_t *const first = frozen_first;
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

int grace_plan_frozen_batch(struct locus_grace_plan_state *st, const struct locus_grace_map *m,
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
	memset(frozen_count, 0, N * sizeof(uint32_t));
	memset(frozen_first, 0, N * sizeof(uint32_t)); /* pass 1: last token (+1) sent to r */
	memset(frozen_want, 0, N * sizeof(uint64_t)); /* pass 1: no later choice anywhere */
	if (unlikely(++frozen_seq == 0)) {
		memset(frozen_eroute, 0, sizeof(frozen_eroute));
		frozen_seq = 1;
	}

	/* pass 1: destination of every slot, row position per (token, dest) */
	plan_assign(p, b, ncp, rk, wt, cur, S, src, gpn);

	/* destinations in tier order: own GPU, own node, other nodes */
	for (uint32_t tier = 0; tier < LOCUS_GRACE_N_TIERS; tier++) {
		p->tier_start[tier] = nd;
		for (uint32_t r = 0; r < N; r++) {
			if (!frozen_count[r] || locus_grace_tier_of(src, r, gpn) != tier)
				continue;
			p->dest[nd] = (uint16_t)r;
			p->dest_start[nd] = pos;
			frozen_first[r] = pos;
			pos += frozen_count[r];
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
