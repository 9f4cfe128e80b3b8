// SPDX-License-Identifier: MIT
/*
 * The dispatch planner against the reference planner, the same rules
 * written plainly (tests/oracle/grace_plan_ref.c), on real routings: GRACE tables fitted on the
 * repo's ESFT sample (2 x 4 GPUs, and 4 x 8 with most experts replicated:
 * SWRR everywhere), batches of the sample's tokens and of the full ESFT
 * data ($LOCUS_DATA_DIR, default ../shared/data) when present, from
 * several source ranks in sequence (the SWRR state carries over). Every
 * plan (destinations, tiers, rows, masks, slots) and the state after it
 * must be identical, and a batch with a bad id refused by both alike.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "grace_plan_ref.h"
#include "locus_gracefit.h"
#include "locus_trace.h"
#include "data_paths.h"

#define MAX_TOK 512

struct side {
	struct locus_grace_plan plan;
	void *pmem, *st;
};

struct rig {
	void *blob, *map;
	size_t ssz;
	uint32_t n_ranks, gpn;
	struct side s[2]; /* 0: the planner, 1: the reference */
	const uint64_t *lost; /* unreachable ranks the batches name, or NULL */
	uint64_t plans, pairs, masked;
};

static void rig_init(struct rig *g, const struct locus_trace *fit,
		     const struct locus_gracefit_topo *topo)
{
	struct locus_gracefit_profile p;
	struct locus_error err = { 0 };
	const void *pl;
	size_t len, plen, msz, pmsz;

	memset(g, 0, sizeof(*g));
	assert_int_equal(locus_gracefit_profile_init(&p, fit->n_layers, fit->n_experts, 1, &err),
			 0);
	assert_int_equal(locus_gracefit_profile_add_trace(&p, fit, 1, &err), 0);
	if (locus_gracefit_fit(&p, topo, NULL, &g->blob, &len, NULL, &err))
		fail_msg("fit: %s", err.msg);
	locus_gracefit_profile_free(&p);
	assert_int_equal(locus_grace_blob_check(g->blob, len, &pl, &plen, &err), 0);
	msz = locus_grace_map_size(pl);
	g->ssz = locus_grace_plan_state_size(pl);
	g->n_ranks = topo->n_nodes * topo->gpus_per_node;
	g->gpn = topo->gpus_per_node;
	assert_int_equal(posix_memalign(&g->map, 64, msz), 0);
	assert_int_equal(locus_grace_map_build(g->map, msz, pl, plen, 1, &err), 0);
	pmsz = locus_grace_plan_mem_size(MAX_TOK, fit->k, g->n_ranks);
	for (int i = 0; i < 2; i++) {
		g->s[i].pmem = malloc(pmsz);
		assert_non_null(g->s[i].pmem);
		assert_int_equal(locus_grace_plan_init(&g->s[i].plan, g->s[i].pmem, pmsz, MAX_TOK,
						       fit->k, g->n_ranks), 0);
		assert_int_equal(posix_memalign(&g->s[i].st, 64, g->ssz), 0);
	}
}

static void rig_free(struct rig *g)
{
	for (int i = 0; i < 2; i++) {
		free(g->s[i].pmem);
		free(g->s[i].st);
	}
	free(g->map);
	free(g->blob);
}

/*
 * With ranks lost, from the map alone: no slot goes to a lost rank, and a
 * slot is masked exactly when its expert has no copy on a live rank.
 */
static void check_lost(struct rig *g, const struct locus_grace_batch *b,
		       const struct locus_grace_plan *p)
{
	const struct locus_grace_map *m = g->map;
	const uint32_t E = m->dims.n_experts, S = m->n_slots;
	uint32_t masked = 0;

	for (size_t i = 0; i < (size_t)b->n_tokens * b->top_k; i++) {
		size_t le = (size_t)b->layer * E + b->experts[i];
		const uint16_t *rk = locus_grace_map_ranks(m) + le * S;
		uint32_t live = 0, d = p->slots[i].rank;

		for (uint32_t c = 0; c < locus_grace_map_ncopies(m)[le]; c++)
			live += !(g->lost && (g->lost[rk[c] / 64] >> (rk[c] % 64) & 1));
		if (!live) {
			assert_int_equal(d, LOCUS_GRACE_MASKED);
			masked++;
			continue;
		}
		assert_true(d < g->n_ranks);
		assert_false(g->lost && (g->lost[d / 64] >> (d % 64) & 1));
	}
	assert_int_equal(p->n_masked, masked);
	g->masked += masked;
}

/* Both planners on batch b; plans and states must be the same bits. */
static void plan_both(struct rig *g, const struct locus_grace_batch *b)
{
	const struct locus_grace_plan *a = &g->s[0].plan, *r = &g->s[1].plan;
	struct locus_error e0 = { 0 }, e1 = { 0 };
	int ra = locus_grace_plan_batch(g->s[0].st, g->map, b, &g->s[0].plan, &e0);
	int rr = grace_plan_ref_batch(g->s[1].st, g->map, b, &g->s[1].plan, &e1);
	size_t slots = (size_t)b->n_tokens * b->top_k;

	assert_int_equal(ra, rr);
	assert_string_equal(e0.msg, e1.msg);
	assert_int_equal(a->n_dest, r->n_dest);
	assert_int_equal(a->n_rows, r->n_rows);
	assert_memory_equal(a->tier_start, r->tier_start, sizeof(a->tier_start));
	if (ra >= 0) {
		assert_memory_equal(a->dest, r->dest, sizeof(*a->dest) * a->n_dest);
		assert_memory_equal(a->dest_start, r->dest_start,
				    sizeof(*a->dest_start) * (a->n_dest + 1));
		assert_memory_equal(a->rows, r->rows, sizeof(*a->rows) * a->n_rows);
		assert_memory_equal(a->kmask, r->kmask, sizeof(*a->kmask) * a->n_rows);
		assert_memory_equal(a->slots, r->slots, sizeof(*a->slots) * slots);
	}
	assert_memory_equal(g->s[0].st, g->s[1].st, g->ssz);
	assert_int_equal(a->n_masked, r->n_masked);
	if (ra >= 0)
		check_lost(g, b, a);
	g->plans++;
	g->pairs += slots;
}

/*
 * The trace's tokens (prompt, then decoded) in batches of up to MAX_TOK,
 * every layer, from source rank src (a fresh state per source, carried
 * across its batches); one batch with an id out of range.
 */
static void plan_trace(struct rig *g, const struct locus_trace *t, uint32_t src)
{
	static uint16_t ex[MAX_TOK * LOCUS_GRACE_MAX_TOPK];
	const uint32_t L = t->n_layers, k = t->k;
	struct locus_error err = { 0 };

	for (int i = 0; i < 2; i++)
		assert_int_equal(locus_grace_plan_state_init(g->s[i].st, g->ssz, g->map,
							     src / g->gpn, &err), 0);
	for (uint32_t l = 0; l < L; l++) {
		uint32_t n = 0;

		for (uint32_t q = 0; q <= t->n_requests; q++) {
			const struct locus_trace_req *rq = q < t->n_requests ? &t->reqs[q] : NULL;
			uint32_t len = rq ? rq->prompt_len + rq->gen_len : 0;

			for (uint32_t tok = 0; tok <= len; tok++) {
				int last = !rq && tok == len;
				struct locus_grace_batch b = { .layer = l, .src_rank = src,
							       .top_k = k, .experts = ex,
							       .lost = g->lost };

				if (tok < len) {
					const uint16_t *ids = tok < rq->prompt_len ?
						locus_trace_tok(t, rq->prompt, tok, l) :
						locus_trace_tok(t, rq->gen, tok - rq->prompt_len, l);

					memcpy(ex + (size_t)n * k, ids, sizeof(*ids) * k);
					n++;
				}
				if (n == MAX_TOK || (last && n)) {
					b.n_tokens = n;
					plan_both(g, &b);
					n = 0;
				}
			}
		}
	}
	/* refused alike, the states untouched */
	ex[0] = t->n_experts;
	{
		struct locus_grace_batch b = { .layer = 0, .src_rank = src, .n_tokens = 1,
					       .top_k = k, .experts = ex };

		plan_both(g, &b);
	}
}

static void check_maps(const struct locus_trace *fit, const struct locus_trace *t,
		       const char *what)
{
	static const struct locus_gracefit_topo topos[] = { { 2, 4, 0, 2 }, { 4, 8, 0, 4 } };

	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(topos); i++) {
		struct rig g;
		uint32_t replicated = 0;
		const struct locus_grace_map *m;

		rig_init(&g, fit, &topos[i]);
		m = g.map;
		for (uint32_t le = 0; le < (uint32_t)fit->n_layers * fit->n_experts; le++)
			replicated += locus_grace_map_ncopies(m)[le] > 1;
		for (uint32_t src = 0; src < g.n_ranks; src += (g.n_ranks > 8 ? 5 : 1))
			plan_trace(&g, t, src);
		print_message("%s, %ux%u GPUs (%u of %u experts replicated): %llu plans, %llu "
			      "pairs, identical\n", what, topos[i].n_nodes, topos[i].gpus_per_node,
			      replicated, fit->n_layers * fit->n_experts,
			      (unsigned long long)g.plans, (unsigned long long)g.pairs);
		assert_true(replicated > 0);
		rig_free(&g);
	}
}

static void test_sample_trace(void **state)
{
	struct locus_error e = { 0 };
	struct locus_trace *t;
	(void)state;

	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &e), 0);
	check_maps(t, t, "ESFT sample");
	locus_trace_free(t);
}

/*
 * Ranks lost: one GPU, a whole other node, and every rank of the other
 * nodes but one GPU (experts with no live copy masked). The planner and
 * the reference agree bit for bit; no row goes to a lost rank; a slot is
 * masked exactly when its expert has no live copy.
 */
static void test_lost_ranks(void **state)
{
	static const struct locus_gracefit_topo topo = { 4, 8, 0, 4 };
	struct locus_error e = { 0 };
	struct locus_trace *t;
	uint64_t lost[3][1] = { { 1ull << 9 }, { 0xffull << 16 }, { ~0xffull & ~(1ull << 31) } };
	uint64_t masked_sets = 0;
	(void)state;

	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &e), 0);
	for (int i = 0; i < 3; i++) {
		struct rig g;

		rig_init(&g, t, &topo);
		g.lost = lost[i];
		for (uint32_t src = 0; src < 8; src += 3)
			plan_trace(&g, t, src);
		print_message("lost set %d (%d ranks): %llu plans, %llu pairs, %llu masked, "
			      "identical\n", i, __builtin_popcountll(lost[i][0]),
			      (unsigned long long)g.plans, (unsigned long long)g.pairs,
			      (unsigned long long)g.masked);
		if (i < 2) /* one GPU or one node of four: most pairs still go somewhere */
			assert_true(g.masked < g.pairs / 4);
		else
			masked_sets += g.masked;
		rig_free(&g);
	}
	assert_true(masked_sets > 0);
	locus_trace_free(t);
}

static void test_esft_windows(void **state)
{
	struct locus_error e = { 0 };
	struct locus_trace *t, *fit;
	(void)state;

	if (locus_trace_esft_windows(locus_data_dir(), 32, 32, &t, &e) < 0) {
		print_message("skipped: no ESFT data under %s (%s)\n", locus_data_dir(), e.msg);
		skip();
	}
	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &fit, &e), 0);
	check_maps(fit, t, "ESFT, 64-token windows");
	locus_trace_free(fit);
	locus_trace_free(t);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sample_trace),
		cmocka_unit_test(test_lost_ranks),
		cmocka_unit_test(test_esft_windows),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
