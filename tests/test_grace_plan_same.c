// SPDX-License-Identifier: MIT
/*
 * The dispatch planner against the reference planner (tests/oracle/
 * grace_plan_ref.c: the same rules written plainly), every output bit and
 * the SWRR state after every batch:
 *
 *  - GRACE tables fitted on the ESFT sample at 1 x 4, 2 x 4 and 4 x 8 GPUs
 *    (replicas everywhere), batches of the sample's tokens and of the full
 *    ESFT data ($LOCUS_DATA_DIR, default ../shared/data) when present;
 *  - synthetic placements, 1 x 1 up to 16 x 8 GPUs (up to 64 ranks the
 *    planner keeps a token's ranks as bit sets, beyond as marks), 1 to 63
 *    replica slots, copies repeated on a GPU and on the primary's, loads
 *    from idle (the 1e-9 floor) to heavy; random batches (top-1 to top-32,
 *    ids repeated inside a token, empty batches), states seeded near the
 *    SWRR bounds so the clamps act, bad batches refused alike, a new map
 *    generation mid-run.
 *
 * Any difference fails with the batch, token and slot it appears at.
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

#define N_SIDES 2 /* 0: the planner, 1: the reference */

struct side {
	struct locus_grace_plan plan;
	void *pmem, *st;
	struct locus_error err;
	int rc;
};

struct rig {
	void *map;
	size_t ssz;
	uint32_t n_ranks, gpn, max_tok, max_k;
	struct side s[N_SIDES];
	uint64_t plans, pairs, refused;
};

static uint64_t rng_s;

static uint32_t rnd(void)
{
	rng_s ^= rng_s >> 12;
	rng_s ^= rng_s << 25;
	rng_s ^= rng_s >> 27;
	return (uint32_t)((rng_s * 2685821657736338717ull) >> 32);
}

/* A map of payload pl in memory of its own (free() it). */
static void *map_of(const void *pl, size_t plen, uint64_t generation)
{
	struct locus_error err = { 0 };
	size_t msz = locus_grace_map_size(pl);
	void *m = NULL;

	assert_true(msz > 0);
	assert_int_equal(posix_memalign(&m, 64, msz), 0);
	if (locus_grace_map_build(m, msz, pl, plen, generation, &err))
		fail_msg("map: %s", err.msg);
	return m;
}

/* Plans and states for map m (rig owns m), max_tok x max_k per batch. */
static void rig_init(struct rig *g, void *m, uint32_t max_tok, uint32_t max_k)
{
	const struct locus_grace_map *map = m;
	size_t pmsz;

	memset(g, 0, sizeof(*g));
	g->map = m;
	g->ssz = locus_grace_plan_state_size(&map->dims);
	g->n_ranks = map->n_ranks;
	g->gpn = map->dims.gpus_per_node;
	g->max_tok = max_tok;
	g->max_k = max_k;
	pmsz = locus_grace_plan_mem_size(max_tok, max_k, map->n_ranks);
	for (int i = 0; i < N_SIDES; i++) {
		g->s[i].pmem = malloc(pmsz);
		assert_non_null(g->s[i].pmem);
		assert_int_equal(locus_grace_plan_init(&g->s[i].plan, g->s[i].pmem, pmsz, max_tok,
						       max_k, map->n_ranks), 0);
		assert_int_equal(posix_memalign(&g->s[i].st, 64, g->ssz), 0);
	}
}

static void rig_free(struct rig *g)
{
	for (int i = 0; i < N_SIDES; i++) {
		free(g->s[i].pmem);
		free(g->s[i].st);
	}
	free(g->map);
}

/* Fresh states for the lcore of node on every side. */
static void rig_states(struct rig *g, uint32_t node)
{
	struct locus_error err = { 0 };

	for (int i = 0; i < N_SIDES; i++)
		assert_int_equal(locus_grace_plan_state_init(g->s[i].st, g->ssz, g->map, node,
							     &err), 0);
}

/* The first slot where side a's plan differs from side 0's, as text. */
static void slot_diff(const struct rig *g, const struct locus_grace_batch *b, int a,
		      char *out, size_t len)
{
	const struct locus_grace_slot *x = g->s[0].plan.slots, *y = g->s[a].plan.slots;

	snprintf(out, len, "no slot differs");
	for (size_t i = 0; i < (size_t)b->n_tokens * b->top_k; i++) {
		if (x[i].rank != y[i].rank || x[i].row != y[i].row || x[i].pad != y[i].pad) {
			snprintf(out, len, "token %zu slot %zu (expert %u): rank %u row %u, "
				 "side %d rank %u row %u", i / b->top_k, i % b->top_k,
				 b->experts[i], x[i].rank, x[i].row, a, y[i].rank, y[i].row);
			return;
		}
	}
}

/* Every side on batch b; plans, errors and states must be the same bits. */
static void plan_all(struct rig *g, const struct locus_grace_batch *b)
{
	const struct locus_grace_plan *p0 = &g->s[0].plan;
	size_t slots = (size_t)b->n_tokens * b->top_k;
	char why[200];

	for (int i = 0; i < N_SIDES; i++) {
		struct side *s = &g->s[i];

		memset(&s->err, 0, sizeof(s->err));
		s->rc = i == 0 ? locus_grace_plan_batch(s->st, g->map, b, &s->plan, &s->err) :
				 grace_plan_ref_batch(s->st, g->map, b, &s->plan, &s->err);
	}
	for (int i = 1; i < N_SIDES; i++) {
		const struct locus_grace_plan *p = &g->s[i].plan;
		int same;

		slot_diff(g, b, i, why, sizeof(why));
		same = g->s[0].rc == g->s[i].rc && !strcmp(g->s[0].err.msg, g->s[i].err.msg) &&
		       p0->n_dest == p->n_dest && p0->n_rows == p->n_rows &&
		       !memcmp(p0->tier_start, p->tier_start, sizeof(p->tier_start));
		if (same && g->s[0].rc >= 0)
			same = !memcmp(p0->dest, p->dest, sizeof(*p->dest) * p->n_dest) &&
			       !memcmp(p0->dest_start, p->dest_start,
				       sizeof(*p->dest_start) * (p->n_dest + 1)) &&
			       !memcmp(p0->rows, p->rows, sizeof(*p->rows) * p->n_rows) &&
			       !memcmp(p0->kmask, p->kmask, sizeof(*p->kmask) * p->n_rows) &&
			       !memcmp(p0->slots, p->slots, sizeof(*p->slots) * slots) &&
			       p0->gates == p->gates;
		if (!same)
			fail_msg("plan %llu (layer %u, source %u, %u x top-%u): side %d differs "
				 "(rc %d/%d, %u/%u dests, %u/%u rows): %s",
				 (unsigned long long)g->plans, b->layer, b->src_rank, b->n_tokens,
				 b->top_k, i, g->s[0].rc, g->s[i].rc, p0->n_dest, p->n_dest,
				 p0->n_rows, p->n_rows, why);
		if (memcmp(g->s[0].st, g->s[i].st, g->ssz))
			fail_msg("plan %llu (layer %u, source %u): side %d's SWRR state differs "
				 "after it (%s)", (unsigned long long)g->plans, b->layer,
				 b->src_rank, i, why);
	}
	g->plans++;
	g->pairs += g->s[0].rc >= 0 ? slots : 0;
	g->refused += g->s[0].rc < 0;
}

/*
 * The trace's tokens (prompt, then decoded) in batches of up to g->max_tok,
 * every layer, from source rank src with a fresh state carried across them.
 */
static void plan_trace(struct rig *g, const struct locus_trace *t, uint32_t src, uint16_t *ex)
{
	const uint32_t L = t->n_layers, k = t->k;

	rig_states(g, src / g->gpn);
	for (uint32_t l = 0; l < L; l++) {
		uint32_t n = 0;

		for (uint32_t q = 0; q <= t->n_requests; q++) {
			const struct locus_trace_req *rq = q < t->n_requests ? &t->reqs[q] : NULL;
			uint32_t len = rq ? rq->prompt_len + rq->gen_len : 0;

			for (uint32_t tok = 0; tok <= len; tok++) {
				struct locus_grace_batch b = { .layer = l, .src_rank = src,
							       .top_k = k, .experts = ex };

				if (tok < len) {
					const uint16_t *ids = tok < rq->prompt_len ?
						locus_trace_tok(t, rq->prompt, tok, l) :
						locus_trace_tok(t, rq->gen, tok - rq->prompt_len, l);

					memcpy(ex + (size_t)n * k, ids, sizeof(*ids) * k);
					n++;
				}
				if (n == g->max_tok || (!rq && tok == len && n)) {
					b.n_tokens = n;
					plan_all(g, &b);
					n = 0;
				}
			}
		}
	}
}

/* Tables fitted on fit at 1 x 4, 2 x 4 and 4 x 8; t's tokens planned on each. */
static void check_fitted(const struct locus_trace *fit, const struct locus_trace *t,
			 const char *what, uint32_t src_step)
{
	static const struct locus_gracefit_topo topos[] = {
		{ 1, 4, 0, 4 }, { 2, 4, 0, 2 }, { 4, 8, 0, 4 },
	};
	const uint32_t max_tok = 512;
	uint16_t *ex = malloc((size_t)max_tok * t->k * sizeof(*ex));

	assert_non_null(ex);
	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(topos); i++) {
		struct locus_gracefit_profile p;
		struct locus_error err = { 0 };
		const void *pl;
		void *blob;
		size_t len, plen;
		uint32_t replicated = 0;
		const struct locus_grace_map *m;
		struct rig g;

		assert_int_equal(locus_gracefit_profile_init(&p, fit->n_layers, fit->n_experts, 1,
							     &err), 0);
		assert_int_equal(locus_gracefit_profile_add_trace(&p, fit, 1, &err), 0);
		if (locus_gracefit_fit(&p, &topos[i], NULL, &blob, &len, NULL, &err))
			fail_msg("fit: %s", err.msg);
		locus_gracefit_profile_free(&p);
		assert_int_equal(locus_grace_blob_check(blob, len, &pl, &plen, &err), 0);
		rig_init(&g, map_of(pl, plen, 1), max_tok, t->k);
		free(blob);
		m = g.map;
		for (uint32_t le = 0; le < (uint32_t)fit->n_layers * fit->n_experts; le++)
			replicated += locus_grace_map_ncopies(m)[le] > 1;
		assert_true(replicated > 0);
		for (uint32_t src = 0; src < g.n_ranks; src += src_step)
			plan_trace(&g, t, src, ex);
		print_message("%s, %ux%u GPUs (%u of %u experts replicated): %llu plans, %llu "
			      "pairs, identical\n", what, topos[i].n_nodes, topos[i].gpus_per_node,
			      replicated, fit->n_layers * fit->n_experts,
			      (unsigned long long)g.plans, (unsigned long long)g.pairs);
		rig_free(&g);
	}
	free(ex);
}

static void test_esft_sample(void **state)
{
	struct locus_error e = { 0 };
	struct locus_trace *t;
	(void)state;

	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &e), 0);
	check_fitted(t, t, "ESFT sample", 3);
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
	check_fitted(fit, t, "ESFT, 64-token windows", 7);
	locus_trace_free(fit);
	locus_trace_free(t);
}

struct synth {
	uint32_t nodes, gpn, R, E, L;
};

/*
 * A random placement of s's shape: primaries anywhere, a third of the
 * experts without replicas, the rest with 1 to R copies more (ascending,
 * ranks repeated and the primary's allowed) within the replica budget,
 * with R = 63 on several nodes a few experts with all 64 copies on the last
 * node; rank loads from idle to 1000x the lightest.
 */
static void *synth_payload(const struct synth *s, size_t *plen)
{
	struct locus_grace_dims d = {
		.n_layers = s->L, .n_experts = s->E, .n_nodes = s->nodes,
		.gpus_per_node = s->gpn, .max_replicas = s->R, .capacity = s->E,
		.replica_budget = s->E,
	};
	uint32_t N = s->nodes * s->gpn, *n_rep = calloc(N, sizeof(uint32_t));
	struct locus_grace_view v;
	void *pl;

	*plen = locus_grace_payload_size(&d);
	pl = calloc(1, *plen);
	assert_true(pl && n_rep && *plen);
	memcpy(pl, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, pl, *plen, NULL), 0);
	for (uint32_t l = 0; l < s->L; l++) {
		memset(n_rep, 0, N * sizeof(uint32_t));
		for (uint32_t e = 0; e < s->E; e++) {
			size_t le = (size_t)l * s->E + e;
			uint16_t *rep = v.replica + le * s->R;
			uint32_t want = rnd() % 3 == 0 ? 0 : 1 + rnd() % s->R, n = 0;
			uint32_t full = s->R == LOCUS_GRACE_MAX_REPLICAS && s->nodes > 1 &&
					e % 32 == 1;

			if (rnd() % 4 && want > 4)
				want = 1 + want % 4; /* mostly few copies, as fitted tables */
			if (full) /* 64 copies on the last node: all of them the fallback */
				want = s->R;
			v.primary[le] = (uint16_t)(full ? N - 1 : rnd() % N);
			v.expert_load[le] = (float)(rnd() % 1000);
			for (uint32_t i = 0; i < want; i++) {
				uint32_t r = full ? N - s->gpn + rnd() % s->gpn :
					     rnd() % 5 == 0 ? v.primary[le] : rnd() % N;

				if (n_rep[r] < s->E) {
					n_rep[r]++;
					rep[n++] = (uint16_t)r;
				}
			}
			for (uint32_t i = 1; i < n; i++) /* ascending */
				for (uint32_t j = i; j > 0 && rep[j - 1] > rep[j]; j--) {
					uint16_t x = rep[j];

					rep[j] = rep[j - 1];
					rep[j - 1] = x;
				}
			for (uint32_t i = n; i < s->R; i++)
				rep[i] = LOCUS_GRACE_NO_RANK;
		}
		for (uint32_t r = 0; r < N; r++) {
			uint32_t c = rnd() % 8;

			v.pred_load[(size_t)l * N + r] = c == 0 ? 0.0f :
				c == 1 ? 1000.0f * (float)(1 + rnd() % 1000) :
					 (float)(1 + rnd() % 1000);
		}
	}
	free(n_rep);
	assert_int_equal(locus_grace_validate(&v, NULL), 0);
	return pl;
}

/* SWRR counters of every side set alike: a few near the bounds, the clamps' range. */
static void seed_states(struct rig *g)
{
	const struct locus_grace_plan_state *st = g->s[0].st;

	for (uint32_t i = 0; i < st->n_cur; i++) {
		uint32_t c = rnd() % 16;
		int32_t v = c == 0 ? (1 << 30) - (int32_t)(rnd() % 200) :
			    c == 1 ? -(1 << 30) + (int32_t)(rnd() % 200) :
			    c == 2 ? -64 * 64 - 100 + (int32_t)(rnd() % 200) : 0;

		for (int s = 0; s < N_SIDES; s++)
			((struct locus_grace_plan_state *)g->s[s].st)->cur[i] = v;
	}
}

/* A random batch on g's map into ex: skewed ids, repeats inside a token now and then. */
static void synth_batch(const struct rig *g, struct locus_grace_batch *b, uint16_t *ex,
			uint32_t node)
{
	const struct locus_grace_map *m = g->map;
	uint32_t E = m->dims.n_experts, hot = 1 + rnd() % E, rep = rnd() % 4 == 0;

	b->layer = rnd() % m->dims.n_layers;
	b->src_rank = node * g->gpn + rnd() % g->gpn;
	b->top_k = 1 + rnd() % g->max_k;
	b->n_tokens = rnd() % 16 == 0 ? 0 : 1 + rnd() % g->max_tok;
	b->experts = ex;
	b->gates = (const float *)ex;
	for (uint32_t t = 0; t < b->n_tokens; t++)
		for (uint32_t j = 0; j < b->top_k; j++) {
			uint16_t *id = &ex[(size_t)t * b->top_k + j];

			*id = (uint16_t)(rnd() % 2 ? rnd() % hot : rnd() % E);
			if (j && rep && rnd() % 8 == 0)
				*id = id[-1 - (int)(rnd() % j)];
		}
}

/* One batch made bad one way; every side must refuse it alike. */
static void synth_bad(const struct rig *g, struct locus_grace_batch *b, uint16_t *ex)
{
	const struct locus_grace_map *m = g->map;

	if (b->n_tokens == 0)
		b->n_tokens = 1;
	switch (rnd() % 5) {
	case 0: { /* an id just past E, or far: every 16-bit id is checked */
		static const uint16_t far[] = { 0x7fff, 0x8000, 0x8000 + 5, 0xffff };
		uint16_t id = rnd() % 2 ? (uint16_t)(m->dims.n_experts + rnd() % 3) :
					  far[rnd() % LOCUS_ARRAY_SIZE(far)];

		ex[rnd() % ((size_t)b->n_tokens * b->top_k)] = id;
		break;
	}
	case 1:
		b->layer = m->dims.n_layers;
		break;
	case 2:
		b->src_rank = (b->src_rank + g->gpn) % (g->n_ranks + 1);
		if (b->src_rank / g->gpn == ((struct locus_grace_plan_state *)g->s[0].st)->node)
			b->src_rank = g->n_ranks;
		break;
	case 3:
		b->top_k = g->max_k + 1;
		break;
	default:
		b->n_tokens = g->max_tok + 1;
		break;
	}
}

static void test_synthetic(void **state)
{
	static const struct synth shapes[] = {
		{ 1, 1, 2, 16, 2 },  { 1, 4, 1, 32, 2 },  { 1, 4, 3, 64, 3 },
		{ 2, 4, 2, 64, 2 },  { 2, 4, 7, 128, 2 }, { 4, 8, 6, 128, 3 },
		{ 4, 8, 31, 128, 2 }, { 3, 5, 4, 60, 2 }, { 9, 8, 5, 256, 2 },
		{ 1, 4, 63, 256, 1 }, { 2, 2, 63, 64, 1 }, { 4, 8, 1, 16, 2 },
		{ 16, 8, 7, 512, 2 }, { 2, 33, 3, 128, 2 },
	};
	static uint16_t ex[512 * LOCUS_GRACE_MAX_TOPK];
	uint64_t plans = 0, pairs = 0, refused = 0;
	(void)state;

	rng_s = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(shapes); i++) {
		const struct synth *s = &shapes[i];
		uint32_t max_k = i % 3 == 0 ? LOCUS_GRACE_MAX_TOPK : 8, max_tok = 32 + rnd() % 481;
		size_t plen;
		void *pl = synth_payload(s, &plen);
		struct rig g;

		rig_init(&g, map_of(pl, plen, 1), max_tok, max_k);
		for (uint32_t node = 0; node < s->nodes; node += 1 + s->nodes / 3) {
			rig_states(&g, node);
			if (node % 2)
				seed_states(&g);
			for (int n = 0; n < 300; n++) {
				struct locus_grace_batch b;

				synth_batch(&g, &b, ex, node);
				if (rnd() % 50 == 0)
					synth_bad(&g, &b, ex);
				plan_all(&g, &b);
				if (n == 150) { /* a new table: every side resets its counters */
					void *again = synth_payload(s, &plen);

					free(g.map);
					g.map = map_of(again, plen, 2 + node);
					free(again);
				}
			}
		}
		print_message("synthetic %ux%u GPUs, R %u, E %u, top-%u: %llu plans, %llu "
			      "pairs, %llu refused, identical\n", s->nodes, s->gpn, s->R, s->E,
			      max_k, (unsigned long long)g.plans, (unsigned long long)g.pairs,
			      (unsigned long long)g.refused);
		plans += g.plans;
		pairs += g.pairs;
		refused += g.refused;
		rig_free(&g);
		free(pl);
	}
	assert_true(refused > 0);
	print_message("synthetic: %llu plans, %llu pairs identical\n",
		      (unsigned long long)plans, (unsigned long long)pairs);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_synthetic),
		cmocka_unit_test(test_esft_sample),
		cmocka_unit_test(test_esft_windows),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
