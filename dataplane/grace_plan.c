// SPDX-License-Identifier: MIT
/*
 * Dispatch planner: (token, expert) -> destination rank by topology-aware
 * routing (TAR) with a per-token copy choice (a copy on a GPU the token
 * goes to anyway before the nearest tier's), then per-destination row
 * lists grouped by tier, and the inverse map combine uses. Everything
 * lives in caller memory; a batch costs no allocation and no system call.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_grace_plan.h"

/* Pass 1's helpers: inlined whatever the compiler's size heuristics say. */
#define PLAN_INLINE inline __attribute__((always_inline))

/* Pass 1's rare paths (an eroute made, a wide choice): out of the loop's way. */
#define PLAN_RARE __attribute__((noinline, cold))

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
	/* the eroutes, a cache line each */
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
	p->count = (uint32_t *)c; /* + 2: the spare ranks (eroute_make) */
	c += (n_ranks + 2) * sizeof(uint32_t);
	p->first = (uint32_t *)c;
	c += (n_ranks + 2) * sizeof(uint32_t);
	p->dest = (uint16_t *)c;
	return 0;
}

/*
 * How expert e (copies ranks[0..n-1]) resolves from src on a map of N
 * ranks, counting only the copies on ranks lost does not name (live): the
 * copy on src, the only live copy, none (dest N, not a choice: masked), or
 * (dest N, a spare rank no copy is on) a choice per token whose fallback is
 * SWRR over the live copies on src's node, else over all live (cand). A
 * choice of at most LOCUS_GRACE_EROUTE_COPIES copies, with a counter row
 * (S) as wide, keeps them here (all: the live ones; a lost copy keeps its
 * place with weight 0, so the SWRR counters stay the map's), padded with
 * the spare rank N + 1 (no token goes there) and weight 0; else it is wide
 * (all 0) and the planner reads the map. With N <= 64, bit is the set of
 * the fixed rank (0 for a choice), ranks that of a choice's live copies.
 * The same for every pair of a batch, made once per batch on first use.
 */
static PLAN_RARE void eroute_make(struct locus_grace_eroute *er, const uint16_t *ranks,
				  const uint16_t *w, uint32_t n, uint32_t S, uint32_t N,
				  uint32_t src, uint32_t gpn, uint32_t seq, const uint64_t *lost)
{
	uint64_t local = 0, live = 0;
	uint32_t src_node = src / gpn, dest = N;

	er->stamp = seq;
	er->cand = 0;
	er->ranks = 0;
	er->choice = 0;
	er->all = 0;
	for (uint32_t i = 0; i < LOCUS_GRACE_EROUTE_COPIES; i++) {
		er->rank[i] = (uint16_t)(N + 1);
		er->weight[i] = 0;
	}
	for (uint32_t i = 0; i < n; i++)
		live |= (uint64_t)!locus_grace_rank_lost(lost, ranks[i]) << i;
	er->live = live;
	if (likely(live && !(live & (live - 1))))
		dest = ranks[__builtin_ctzll(live)];
	for (uint32_t i = 0; live & (live - 1) && i < n; i++) {
		if (!(live >> i & 1))
			continue;
		if (ranks[i] == src) {
			dest = src;
			break;
		}
		if (ranks[i] / gpn == src_node)
			local |= 1ull << i;
	}
	er->dest = (uint16_t)dest;
	er->bit = dest < N && N <= 64 ? 1ull << dest : 0;
	if (dest < N || !live)
		return; /* fixed, or masked: dest N and no choice */
	er->choice = 1;
	er->cand = local ? local : live;
	for (uint32_t i = 0; N <= 64 && i < n; i++)
		if (live >> i & 1)
			er->ranks |= 1ull << ranks[i];
	if (n > LOCUS_GRACE_EROUTE_COPIES || S < LOCUS_GRACE_EROUTE_COPIES)
		return;
	er->all = (uint8_t)live;
	for (uint32_t i = 0; i < n; i++) {
		er->rank[i] = ranks[i];
		er->weight[i] = live >> i & 1 ? w[i] : 0;
	}
}

/*
 * Whether any of the n ids is >= E (1 <= E <= LOCUS_GRACE_MAX_EXPERTS <
 * 2^15), four 16-bit ids a 64-bit word: an id of 2^15 or more has its top
 * bit set; below that, adding 2^15 - E sets the top bit exactly when the
 * id is >= E, and carries nothing into the next id.
 */
static bool any_id_from(const uint16_t *v, size_t n, uint32_t E)
{
	const uint64_t top = 0x8000800080008000ull;
	const uint64_t add = (0x8000ull - E) * 0x0001000100010001ull;
	uint64_t bad = 0;
	size_t i = 0;

	LOCUS_STATIC_ASSERT(LOCUS_GRACE_MAX_EXPERTS < 0x8000, "ids below 2^15");
	for (; i + 4 <= n; i += 4) {
		uint64_t x;

		memcpy(&x, v + i, sizeof(x));
		bad |= x | ((x & ~top) + add);
	}
	bad &= top;
	for (; i < n; i++)
		bad |= v[i] >= E;
	return bad != 0;
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
 * index, wins; a copy outside win never does (0, below every key of a copy
 * in it: counters are within +-SWRR_BOUND, so c + SWRR_BOUND >= 0, and
 * 64 - i >= 1).
 */
static PLAN_INLINE uint64_t swrr_key(int32_t c, uint32_t i, uint64_t win)
{
	uint64_t key = (uint64_t)((uint32_t)c + (uint32_t)SWRR_BOUND) << 7 | (64 - i);

	/* branch-free: whether the copy is in win is data */
	return key & -(win >> i & 1);
}

/* The copy whose key (swrr_key) this is. */
static PLAN_INLINE uint32_t swrr_key_copy(uint64_t key)
{
	return 64 - (uint32_t)(key & 127);
}

/*
 * The set a multi-copy expert's copy is chosen from (copy bits), for a
 * token: the copies on a GPU the token already goes to (hit), which cost
 * no row; else those on a GPU where a later choice of the token has a copy
 * (shared, less any copy SHARE_SLACK ahead of its share), which then costs
 * that expert no row; else the nearest tier's copies (cand). Branch-free:
 * which set it is is data.
 */
static PLAN_INLINE uint64_t swrr_win(uint64_t hit, uint64_t shared, uint64_t cand)
{
	uint64_t win = shared | (cand & -(uint64_t)(shared == 0));

	return hit | (win & -(uint64_t)(hit == 0));
}

/*
 * The copy of a multi-copy expert (copies ranks[0..n-1], none on src,
 * weights w[], counters cur[]) for a token, from the sets of swrr_win, by
 * smooth weighted round robin (the nginx scheme): every copy of the nearest
 * tier and of the winner's set gains its weight, the largest value in the
 * winner's set wins (the first of equals) and pays back the total gained.
 * With no token-aware choice, over a total-weight cycle each copy is chosen
 * weight times, evenly interleaved; a copy such a choice took owes the
 * others the turns, so the shares stay the weights while the round robin
 * can pay them back. Returns the copy's rank.
 */
static PLAN_RARE uint32_t pick_wide(const uint16_t *ranks, const uint16_t *w, int32_t *cur,
				    uint32_t n, uint64_t hit, uint64_t shared, uint64_t cand)
{
	uint64_t win = swrr_win(hit, shared, cand), charge = cand | win, best = 0;
	int32_t total = 0;
	uint32_t i;

	for (i = 0; i < n; i++) {
		int32_t add = (int32_t)w[i] & -(int32_t)(charge >> i & 1);
		uint64_t key;

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
 * pick_wide for a choice among the copies er holds (counters
 * cur[0..LOCUS_GRACE_EROUTE_COPIES-1]: a spare is never in hit or shared,
 * whatever the bits say, never charged, so its counter stays), unrolled
 * and branch-free.
 */
static PLAN_INLINE uint32_t pick_held(const struct locus_grace_eroute *er, int32_t *cur,
				      uint64_t hit, uint64_t shared)
{
	uint64_t cand = er->cand, win = swrr_win(hit & er->all, shared & er->all, cand);
	uint64_t charge = cand | win;
	uint64_t key[LOCUS_GRACE_EROUTE_COPIES], k01, k23, best;
	int32_t total = 0;
	uint32_t i;

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

/*
 * Which of the copies ranks[0..n-1] (counters cur[]) the token already goes
 * to (*hit: bit r of used) and which a later choice of it has a copy on
 * (*shared: bit r of later, unless the copy is SHARE_SLACK ahead of its
 * share), for maps of at most 64 ranks (a spare's rank wraps: pick_held
 * masks it).
 */
static PLAN_INLINE void copies_in_sets(const uint16_t *ranks, const int32_t *cur, uint32_t n,
				       uint64_t used, uint64_t later, uint64_t *hit,
				       uint64_t *shared)
{
	uint64_t h = 0, s = 0;

#pragma GCC unroll 4
	for (uint32_t i = 0; i < n; i++) {
		uint32_t r = ranks[i] & 63;

		h |= (used >> r & 1) << i;
		s |= (later >> r & (uint64_t)(cur[i] >= -SHARE_SLACK)) << i;
	}
	*hit = h;
	*shared = s;
}

/*
 * copies_in_sets for any map: the token t1 - 1 goes to r when last[r] ==
 * t1, a later choice of it has a copy on r when want[r] > tag (this
 * slot's own).
 */
static PLAN_INLINE void copies_marked(const uint16_t *ranks, const int32_t *cur, uint32_t n,
				      const uint32_t *last, const uint64_t *want, uint32_t t1,
				      uint64_t tag, uint64_t *hit, uint64_t *shared)
{
	uint64_t h = 0, s = 0;

#pragma GCC unroll 4
	for (uint32_t i = 0; i < n; i++) {
		h |= (uint64_t)(last[ranks[i]] == t1) << i;
		s |= (uint64_t)((want[ranks[i]] > tag) & (cur[i] >= -SHARE_SLACK)) << i;
	}
	*hit = h;
	*shared = s;
}

/*
 * Slot sl goes to d: its row is d's latest if the token already uses d
 * (rep), else d's next. Branch-free: whether a slot repeats a rank is data.
 * The slot { rank, pad 0, row } as one store.
 */
static PLAN_INLINE void slot_row(struct locus_grace_slot *sl, uint32_t d, uint32_t rep,
				 uint32_t *count)
{
	uint32_t row = count[d] - rep;
	uint64_t v;

	LOCUS_STATIC_ASSERT(sizeof(*sl) == 8 && offsetof(struct locus_grace_slot, row) == 4,
			    "a slot is rank, pad, row");
	if (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
		v = (uint64_t)row << 32 | d;
	else
		v = (uint64_t)d << 48 | row;
	memcpy(sl, &v, sizeof(v));
	count[d] = row + 1;
}

/* Where pass 1 reads the batch and the map's layer, and writes the slots. */
struct pass1 {
	struct locus_grace_eroute *eroute;
	uint32_t *count;         /* rows per rank so far */
	struct locus_grace_slot *sl;
	const uint16_t *ex;      /* the batch's ids */
	const uint8_t *ncp;      /* the layer's copies per expert */
	const uint16_t *rk, *wt; /* the layer's ranks and weights, S per expert */
	int32_t *cur;            /* the layer's SWRR counters, S per expert */
	const uint64_t *lost;    /* the batch's unreachable ranks, or NULL */
	uint32_t S, N, src, gpn, seq, k, n_tokens;
};

/* Expert e's eroute, made for this batch on first use. */
static PLAN_INLINE const struct locus_grace_eroute *pass1_eroute(const struct pass1 *a,
								 uint32_t e)
{
	struct locus_grace_eroute *er = &a->eroute[e];

	if (unlikely(er->stamp != a->seq))
		eroute_make(er, a->rk + (size_t)e * a->S, a->wt + (size_t)e * a->S, a->ncp[e],
			    a->S, a->N, a->src, a->gpn, a->seq, a->lost);
	return er;
}

/* The copy a choice of expert e takes, from hit and shared (copy bits). */
static PLAN_INLINE uint32_t pass1_pick(const struct pass1 *a,
				       const struct locus_grace_eroute *er, uint32_t e, uint64_t hit,
				       uint64_t shared)
{
	size_t o = (size_t)e * a->S;

	if (likely(er->all))
		return pick_held(er, a->cur + o, hit, shared);
	return pick_wide(a->rk + o, a->wt + o, a->cur + o, a->ncp[e], hit & er->live,
			 shared & er->live, er->cand);
}

/*
 * Pass 1 for a map of at most 64 ranks: destination of every slot, row
 * position per (token, dest), a token's ranks as bit sets. The token's
 * experts with a fixed destination (one copy, or a copy on the source GPU)
 * go first; those with a choice then, in slot order, take a copy the token
 * already uses (used), or one a later slot with a choice can share (later,
 * the union of those slots' copies' ranks), else the nearest tier's round
 * robin. Rows of a destination are handed out in token order, so a token
 * sending a second slot to d finds its row as d's latest.
 */
static void plan_assign_sets(const struct pass1 *arg)
{
	const struct pass1 a = *arg; /* a copy: stores through the arrays cannot change it */
	const uint16_t *ex = a.ex;
	struct locus_grace_slot *sl = a.sl;
	const uint32_t k = a.k;

	for (uint32_t t = 0; t < a.n_tokens; t++, ex += k, sl += k) {
		uint64_t used = 0, rest = 0, later[LOCUS_GRACE_MAX_TOPK];
		uint32_t choice = 0; /* slots whose expert has a choice of copies */

		/*
		 * branch-free: a slot with a choice goes to the spare rank N
		 * for now (its row is never read, its bit is 0) and is
		 * assigned again below. Last slot first, so that choice gets
		 * slot j's bit at j and later[j] the copies of the slots after
		 * j; the rows do not depend on the order
		 */
		for (uint32_t j = k; j-- > 0;) {
			const struct locus_grace_eroute *er = pass1_eroute(&a, ex[j]);

			choice = choice << 1 | er->choice;
			slot_row(&sl[j], er->dest, (used & er->bit) != 0, a.count);
			used |= er->bit;
			later[j] = rest;
			rest |= er->ranks;
		}
		while (unlikely(choice)) {
			uint32_t j = (uint32_t)__builtin_ctz(choice), e = ex[j], d;
			const struct locus_grace_eroute *er = &a.eroute[e];
			uint64_t hit, shared;

			choice &= choice - 1;
			if (likely(er->all))
				copies_in_sets(er->rank, a.cur + (size_t)e * a.S,
					       LOCUS_GRACE_EROUTE_COPIES, used, later[j], &hit,
					       &shared);
			else
				copies_in_sets(a.rk + (size_t)e * a.S, a.cur + (size_t)e * a.S,
					       a.ncp[e], used, later[j], &hit, &shared);
			d = pass1_pick(&a, er, e, hit, shared);
			slot_row(&sl[j], d, (uint32_t)(used >> d & 1), a.count);
			used |= 1ull << d;
		}
	}
}

/*
 * plan_assign_sets for any map, the token's ranks as marks per rank: last[r]
 * the last token (+ 1) sent to r, want[r] the last slot with a choice (its
 * token + 1, << 8 | slot) with a copy on r, so that a choice at slot j sees
 * a later one's copy as want[r] > its own tag (older tokens' marks are
 * smaller; the first choice needs no mark). Both N + 2 long, as count.
 */
static void plan_assign_marks(const struct pass1 *arg, uint32_t *last, uint64_t *want)
{
	const struct pass1 a = *arg; /* a copy: stores through the arrays cannot change it */
	const uint16_t *ex = a.ex;
	struct locus_grace_slot *sl = a.sl;
	const uint32_t k = a.k, S = a.S;

	memset(last, 0, (a.N + 2) * sizeof(*last)); /* no token sent anywhere yet */
	memset(want, 0, (a.N + 2) * sizeof(*want)); /* no later choice anywhere */
	for (uint32_t t1 = 1; t1 <= a.n_tokens; t1++, ex += k, sl += k) {
		uint32_t choice = 0; /* slots whose expert has a choice of copies */

		/* branch-free, as plan_assign_sets */
		for (uint32_t j = 0; j < k; j++) {
			const struct locus_grace_eroute *er = pass1_eroute(&a, ex[j]);
			uint32_t d = er->dest;

			choice |= (uint32_t)er->choice << j;
			slot_row(&sl[j], d, last[d] == t1, a.count);
			last[d] = t1;
		}
		if (unlikely(choice & (choice - 1)))
			for (uint32_t c = choice & (choice - 1); c; c &= c - 1) {
				uint32_t f = (uint32_t)__builtin_ctz(c), e = ex[f];
				const struct locus_grace_eroute *er = &a.eroute[e];
				uint64_t tag = (uint64_t)t1 << 8 | f;

				if (likely(er->all)) {
#pragma GCC unroll 4
					for (uint32_t q = 0; q < LOCUS_GRACE_EROUTE_COPIES; q++)
						want[er->rank[q]] = tag;
					continue;
				}
				for (uint32_t q = 0; q < a.ncp[e]; q++)
					want[a.rk[(size_t)e * S + q]] = tag;
			}
		while (unlikely(choice)) {
			uint32_t j = (uint32_t)__builtin_ctz(choice), e = ex[j], d;
			const struct locus_grace_eroute *er = &a.eroute[e];
			uint64_t tag = (uint64_t)t1 << 8 | j, hit, shared;

			choice &= choice - 1;
			if (likely(er->all))
				copies_marked(er->rank, a.cur + (size_t)e * S,
					      LOCUS_GRACE_EROUTE_COPIES, last, want, t1, tag, &hit,
					      &shared);
			else
				copies_marked(a.rk + (size_t)e * S, a.cur + (size_t)e * S,
					      a.ncp[e], last, want, t1, tag, &hit, &shared);
			d = pass1_pick(&a, er, e, hit, shared);
			slot_row(&sl[j], d, last[d] == t1, a.count);
			last[d] = t1;
		}
	}
}

/*
 * Pass 2: rows and masks at first[rank] + row, from the slots of pass 1,
 * branch-free: every slot of a token at one destination writes the same row
 * t and ORs its bit into the row's mask (cleared by the caller). A slot
 * pass 1 left on the spare rank N was masked: marked, counted, sent nowhere.
 */
static void plan_fill(struct locus_grace_plan *p, uint32_t n_tokens, uint32_t k, uint32_t N)
{
	const uint32_t *const first = p->first;
	uint32_t *const rows = p->rows, *const kmask = p->kmask;
	struct locus_grace_slot *sl = p->slots;
	uint32_t masked = 0;

	for (uint32_t t = 0; t < n_tokens; t++, sl += k) {
		for (uint32_t j = 0; j < k; j++) {
			uint32_t at;

			if (unlikely(sl[j].rank >= N)) {
				sl[j] = (struct locus_grace_slot){ .rank = LOCUS_GRACE_MASKED,
								   .row = UINT32_MAX };
				masked++;
				continue;
			}
			at = first[sl[j].rank] + sl[j].row;
			kmask[at] |= 1u << j;
			rows[at] = t;
		}
	}
	p->n_masked = masked;
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
	if (likely(!any_id_from(b->experts, n, m->dims.n_experts)))
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
	struct pass1 a;
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
	/* N + 2: the spare ranks of a choice (N) and of a held copy's padding (N + 1) */
	memset(p->count, 0, (N + 2) * sizeof(uint32_t));
	if (unlikely(++p->seq == 0)) {
		memset(p->eroute, 0, LOCUS_GRACE_MAX_EXPERTS * sizeof(*p->eroute));
		p->seq = 1;
	}

	/* pass 1: destination of every slot, row position per (token, dest) */
	a = (struct pass1){ .eroute = p->eroute, .count = p->count, .sl = p->slots,
			    .ex = b->experts, .ncp = ncp, .rk = rk, .wt = wt, .cur = cur, .S = S,
			    .N = N, .src = src, .gpn = gpn, .seq = p->seq, .k = k,
			    .n_tokens = b->n_tokens, .lost = b->lost };
	if (N <= 64)
		plan_assign_sets(&a);
	else /* first[] serves as last[] until the tier loop below */
		plan_assign_marks(&a, p->first, p->want);

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
	plan_fill(p, b->n_tokens, k, N);
	p->n_dest = nd;
	p->n_rows = pos;
	return (int)nd;
}
