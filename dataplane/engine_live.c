// SPDX-License-Identifier: MIT
/*
 * Which ranks the engine can reach. A rank of this node is live while its
 * rank client is attached; a rank of another node while that node is up
 * and, once it wrote a load row since it came up, while the row lists its
 * GPU as attached (before its first row: all of them, as before any loss).
 * Everything else is lost: the planner takes the lost set with every batch
 * (locus_grace_batch.lost), sends an expert's tokens to its live copies and
 * masks an expert with none.
 *
 * The set is made again every load period, at every attach and detach, and
 * when a batch found a peer down; a change goes to the control lines of the
 * rank clients this engine polls (a seqlock each), so a serving engine knows
 * who is live (locus_client_ranks()). Node-sized loops over words, no
 * allocation after creation.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_priv.h"
#include "locus_client_priv.h"
#include "locus_counters_priv.h"
#include "locus_err_priv.h"
#include "locus_wire.h"

LOCUS_STATIC_ASSERT(LOCUS_CLIENT_RANK_WORDS * 64 >= LOCUS_GRACE_MAX_RANKS,
		    "a control line holds a bit per GRACE rank");

int engine_live_init(struct locus_engine *e, struct locus_error *err)
{
	if (e->p.dims.gpus_per_node > 31)
		return locus_error_set(err, EINVAL, "engine: %u GPUs a node, a load row's ranks "
				       "word holds 31", e->p.dims.gpus_per_node);
	e->lost_words = (e->n_ranks + 63) / 64;
	e->lost = engine_zalloc(8 * (size_t)e->lost_words);
	e->lost_next = engine_zalloc(8 * (size_t)e->lost_words);
	e->node_ranks = engine_zalloc(sizeof(*e->node_ranks) * e->p.dims.n_nodes);
	if (!e->lost || !e->lost_next || !e->node_ranks)
		return locus_error_set(err, ENOMEM, "engine: out of memory");
	return 0;
}

void engine_live_fini(struct locus_engine *e)
{
	free(e->lost);
	free(e->lost_next);
	free(e->node_ranks);
}

uint32_t engine_live_local_ranks(const struct locus_engine *e)
{
	uint32_t gpn = e->p.dims.gpus_per_node, first = e->p.dims.node_id * gpn, bits = 0;

	for (uint32_t g = 0; g < gpn; g++)
		bits |= (uint32_t)(e->rank_slot[first + g] >= 0) << g;
	return LOCUS_LOAD_ROW_RANKS | bits;
}

void engine_live_row(struct locus_engine *e, uint32_t node, uint32_t ranks)
{
	if (node < e->p.dims.n_nodes)
		e->node_ranks[node] = ranks;
}

/* Mark ranks [first, first + n) of the set as lost where bits (bit g: rank first + g) is 0. */
static uint32_t mark_lost(uint64_t *set, uint32_t first, uint32_t n, uint32_t live_bits)
{
	uint32_t lost = 0;

	for (uint32_t g = 0; g < n; g++) {
		uint32_t r = first + g;

		if (live_bits >> g & 1)
			continue;
		set[r / 64] |= 1ull << (r % 64);
		lost++;
	}
	return lost;
}

/* The monotonic clock in ns: the main lcore's clock, so tests can compare. */
static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Publish the set to one rank client's control line (the engine is its one writer). */
static void publish(struct locus_engine *e, struct engine_client *c, uint64_t when)
{
	struct locus_client_ctl *ctl = c->ctl;
	/* even at rest (a new slot's line is zeroed); odd while the words change */
	uint64_t seq = __atomic_load_n(&ctl->ranks_seq, __ATOMIC_RELAXED) & ~1ull;

	__atomic_store_n(&ctl->ranks_seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&ctl->ranks_n, e->n_ranks, __ATOMIC_RELAXED);
	__atomic_store_n(&ctl->ranks_lost_n, e->n_lost, __ATOMIC_RELAXED);
	__atomic_store_n(&ctl->ranks_changed_ns, when, __ATOMIC_RELAXED);
	for (uint32_t w = 0; w < e->lost_words; w++)
		__atomic_store_n(&ctl->ranks_lost[w], e->lost[w], __ATOMIC_RELAXED);
	__atomic_store_n(&ctl->ranks_seq, seq + 2, __ATOMIC_RELEASE);
}

void engine_live_publish(struct locus_engine *e, uint32_t slot)
{
	struct engine_client *c = &e->cl[slot];

	if (c->owned && (c->roles & LOCUS_ROLE_RANK))
		publish(e, c, e->lost_changed_ns);
}

int engine_live_refresh(struct locus_engine *e)
{
	const uint32_t gpn = e->p.dims.gpus_per_node, self = e->p.dims.node_id;
	uint64_t *next = e->lost_next;
	uint32_t n_lost = 0;

	memset(next, 0, 8 * (size_t)e->lost_words);
	for (uint32_t node = 0; node < e->p.dims.n_nodes; node++) {
		uint32_t bits;

		if (node == self) {
			bits = engine_live_local_ranks(e);
		} else if (!engine_remote_peer_up(e, node)) {
			bits = 0;
			/* its ranks are known again from its first row once it is back */
			e->node_ranks[node] = 0;
		} else {
			bits = e->node_ranks[node] & LOCUS_LOAD_ROW_RANKS ? e->node_ranks[node]
									  : ~0u;
		}
		n_lost += mark_lost(next, node * gpn, gpn, bits);
	}
	if (n_lost == e->n_lost && !memcmp(next, e->lost, 8 * (size_t)e->lost_words))
		return 0;
	e->lost_next = e->lost;
	e->lost = next;
	e->n_lost = n_lost;
	e->lost_changed_ns = mono_ns();
	engine_count(e, e->c.ranks_lost_changes);
	if (engine_primary(e)) {
		locus_gauge_set(e->blk, e->c.ranks_lost, n_lost);
		locus_gauge_set(e->blk, e->c.ranks_lost_at, (int64_t)(e->lost_changed_ns / 1000000));
	}
	for (uint32_t s = 0; s < e->n_slots; s++)
		if (e->cl[s].active)
			engine_live_publish(e, s);
	return 1;
}
