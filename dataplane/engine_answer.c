// SPDX-License-Identifier: MIT
/*
 * How long each rank takes to answer: from the moment this engine handed a
 * local rank's DISPATCH rows to rank r, to the moment r's results of that
 * batch reached the source here (the end of r's first COMBINE of it: one
 * answers a batch's rows in one COMBINE unless they came in several
 * messages). That is r's share of the
 * collective (its network, its inbox, its experts); the rank that stalls a
 * group's dispatch and combine is the one whose answers are slow
 * (rank_answer_ns{rank}, rank_answer_max_ns{rank}; locus-stat --slow).
 *
 * One record per (local source GPU, destination rank): the latest batch
 * and when it went. An answer of another batch, or one handed to another
 * engine, is not timed. No allocation after creation; a word per record.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"
#include "locus_counters_priv.h"
#include "locus_err_priv.h"

int engine_answer_init(struct locus_engine *e, struct locus_error *err)
{
	e->ans = engine_zalloc(sizeof(*e->ans) * e->p.dims.gpus_per_node * e->n_ranks);
	e->ans_max = engine_zalloc(sizeof(*e->ans_max) * e->n_ranks);
	if (!e->ans || !e->ans_max)
		return locus_error_set(err, ENOMEM, "engine: out of memory");
	return 0;
}

void engine_answer_fini(struct locus_engine *e)
{
	free(e->ans);
	free(e->ans_max);
}

static struct engine_ans *record_of(struct locus_engine *e, uint32_t src, uint32_t rank)
{
	uint32_t gpn = e->p.dims.gpus_per_node, first = e->p.dims.node_id * gpn;

	if (src < first || src - first >= gpn || rank >= e->n_ranks)
		return NULL;
	return &e->ans[(size_t)(src - first) * e->n_ranks + rank];
}

void engine_answer_sent(struct locus_engine *e, uint32_t src, uint32_t rank, uint64_t batch,
			uint64_t t0)
{
	struct engine_ans *a = record_of(e, src, rank);

	if (a) {
		a->batch = batch;
		a->t0 = t0;
	}
}

void engine_answer_back(struct locus_engine *e, uint32_t src, uint32_t rank, uint64_t batch)
{
	struct engine_ans *a = record_of(e, src, rank);
	uint64_t ns;

	if (!a || !a->t0 || a->batch != batch)
		return;
	ns = (e->p.now() - a->t0) * 1000000000ull / e->p.tsc_hz;
	a->t0 = 0;
	locus_counter_add_elem(e->blk, e->c.rank_answers, rank, 1);
	locus_counter_add_elem(e->blk, e->c.rank_answer_ns, rank, ns);
	if (ns > e->ans_max[rank])
		e->ans_max[rank] = ns;
}

void engine_answer_window(struct locus_engine *e, uint64_t now)
{
	if (now < e->ans_next)
		return;
	e->ans_next = now + e->p.tsc_hz;
	/* the slowest answer of the second that ended, per rank (0: none) */
	for (uint32_t r = 0; r < e->n_ranks; r++) {
		locus_gauge_set_elem(e->blk, e->c.rank_answer_max, r, (int64_t)e->ans_max[r]);
		e->ans_max[r] = 0;
	}
}
