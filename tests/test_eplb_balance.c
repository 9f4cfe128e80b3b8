// SPDX-License-Identifier: MIT
/*
 * DeepSeek's EPLB in C (locus_gracefit_eplb_rebalance) against the example
 * its README prints, a global-policy case worked by hand, the invariants of
 * both policies on random loads, and vLLM's choice of a copy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>
#include <cmocka.h>

#include "locus_gracefit.h"
#include "locus_tblfile.h"

/* The slots of plan p's layer l that hold expert e, ascending. */
static uint32_t slots_of(const struct locus_gracefit_eplb *p, uint32_t l, int32_t e,
			 int32_t *out)
{
	uint32_t n = 0;

	for (uint32_t s = 0; s < p->n_phys; s++)
		if (p->phy2log[(size_t)l * p->n_phys + s] == e)
			out[n++] = (int32_t)s;
	return n;
}

/* logcnt, log2phy and vllm_log2phy say what phy2log says. */
static void check_maps(const struct locus_gracefit_eplb *p)
{
	uint32_t E = p->n_experts, X = p->max_copies;

	for (uint32_t l = 0; l < p->n_layers; l++)
		for (uint32_t e = 0; e < E; e++) {
			int32_t want[4096];
			uint32_t n = slots_of(p, l, (int32_t)e, want);
			const int32_t *a = p->log2phy + ((size_t)l * E + e) * X;
			const int32_t *v = p->vllm_log2phy + ((size_t)l * E + e) * X;

			assert_true(n >= 1);
			assert_int_equal(p->logcnt[(size_t)l * E + e], n);
			for (uint32_t i = 0; i < X; i++) {
				int found = 0;

				assert_int_equal(v[i], i < n ? want[i] : -1);
				if (i >= n) {
					assert_int_equal(a[i], -1);
					continue;
				}
				for (uint32_t q = 0; q < n; q++)
					found |= a[i] == want[q];
				assert_true(found);
				for (uint32_t q = 0; q < i; q++)
					assert_int_not_equal(a[q], a[i]);
			}
		}
}

/*
 * github.com/deepseek-ai/EPLB README, "Interface and Example": 2 layers,
 * 12 experts, 4 groups, 16 physical slots, 2 nodes, 8 GPUs. Weights and the
 * printed phy2log typed from the README.
 */
static void test_readme_example(void **state)
{
	static const double W[2 * 12] = {
		90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86,
		20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27,
	};
	static const int32_t readme_phy2log[2 * 16] = {
		5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1,
		7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1,
	};
	struct locus_gracefit_eplb p;
	struct locus_error err = { 0 };
	(void)state;

	if (locus_gracefit_eplb_rebalance(W, 2, 12, 16, 4, 2, 8, &p, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(p.hierarchical, 1);
	assert_int_equal(p.n_phys, 16);
	assert_memory_equal(p.phy2log, readme_phy2log, sizeof(readme_phy2log));
	check_maps(&p);
	locus_gracefit_eplb_free(&p);
}

/*
 * The global policy (1 group does not divide over 2 nodes), worked by hand:
 * loads 10 4 3 1 onto 6 slots of 2 GPUs. Replication: expert 0 takes both
 * extra slots (10 > 4, then 5 > 4), copies of 10/3. Per-copy loads sorted,
 * ties by slot: 4 (e1), 10/3 (e0 r0), 10/3 (e0 r1), 10/3 (e0 r2), 3 (e2),
 * 1 (e3), each to the lighter GPU with room: GPU 0 gets e1, e0 r2, e3;
 * GPU 1 gets e0 r0, e0 r1, e2: two copies of expert 0 on GPU 1.
 */
static void test_global_by_hand(void **state)
{
	static const double W[4] = { 10, 4, 3, 1 };
	static const int32_t phy2log[6] = { 1, 0, 3, 0, 0, 2 };
	static const int32_t log2phy[4 * 3] = { 3, 4, 1, 0, -1, -1, 5, -1, -1, 2, -1, -1 };
	static const int32_t vllm[4 * 3] = { 1, 3, 4, 0, -1, -1, 5, -1, -1, 2, -1, -1 };
	static const int32_t logcnt[4] = { 3, 1, 1, 1 };
	/* vLLM: flattened position mod 3 over e0's slots 1 (GPU 0), 3, 4 (GPU 1) */
	static const uint16_t ids[5 * 2] = { 0, 1, 2, 0, 0, 3, 1, 2, 0, 3 };
	static const uint16_t gpu_want[5 * 2] = { 0, 0, 1, 0, 1, 0, 0, 1, 1, 0 };
	uint16_t gpu[10];
	struct locus_gracefit_eplb p;
	struct locus_error err = { 0 };
	(void)state;

	if (locus_gracefit_eplb_rebalance(W, 1, 4, 6, 1, 2, 2, &p, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(p.hierarchical, 0);
	assert_int_equal(p.max_copies, 3);
	assert_memory_equal(p.phy2log, phy2log, sizeof(phy2log));
	assert_memory_equal(p.log2phy, log2phy, sizeof(log2phy));
	assert_memory_equal(p.vllm_log2phy, vllm, sizeof(vllm));
	assert_memory_equal(p.logcnt, logcnt, sizeof(logcnt));
	locus_gracefit_eplb_dispatch(&p, 0, ids, 5, 2, gpu);
	assert_memory_equal(gpu, gpu_want, sizeof(gpu));
	locus_gracefit_eplb_free(&p);
}

static uint64_t rng(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 33;
}

/*
 * Random loads: every expert has a copy, every GPU the same slot count
 * (phy2log's layout), maps agree; hierarchical keeps each group of
 * consecutive experts on one node with equal group counts per node; the
 * global policy's extra copies go where the load per copy was highest, so no
 * expert with c copies is lighter per copy than another's with one more
 * removed (replication's greedy bound).
 */
static void test_invariants(void **state)
{
	static const struct {
		uint32_t E, P, G, M, gpus;
	} cfg[] = {
		{ 64, 80, 8, 2, 8 }, { 64, 80, 8, 4, 8 }, { 64, 72, 1, 1, 4 },
		{ 64, 96, 1, 4, 32 }, { 64, 80, 1, 2, 8 }, { 16, 16, 4, 2, 4 },
		{ 12, 24, 3, 2, 4 },
	};
	uint64_t x = 7;
	(void)state;

	for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
		uint32_t E = cfg[c].E, P = cfg[c].P, L = 3;
		double *W = malloc((size_t)L * E * sizeof(double));
		struct locus_gracefit_eplb p;
		struct locus_error err = { 0 };

		for (size_t i = 0; i < (size_t)L * E; i++)
			W[i] = (double)(rng(&x) % 1000) * ((rng(&x) % 8) ? 1 : 9);
		if (locus_gracefit_eplb_rebalance(W, L, E, P, cfg[c].G, cfg[c].M, cfg[c].gpus,
						  &p, &err))
			fail_msg("config %zu: %s", c, err.msg);
		assert_int_equal(p.hierarchical, cfg[c].G % cfg[c].M == 0);
		check_maps(&p);
		for (uint32_t l = 0; l < L; l++) {
			const double *w = W + (size_t)l * E;
			const int32_t *cnt = p.logcnt + (size_t)l * E;
			int32_t sum = 0;

			for (uint32_t e = 0; e < E; e++)
				sum += cnt[e];
			assert_int_equal(sum, P);
			for (uint32_t a = 0; a < E; a++)
				for (uint32_t b = 0; b < E && !p.hierarchical; b++)
					if (cnt[b] > 1)
						assert_true(w[a] / cnt[a] <=
							    w[b] / (cnt[b] - 1) + 1e-9);
			if (!p.hierarchical)
				continue;
			for (uint32_t s = 0; s < P; s++) {
				uint32_t gs = E / cfg[c].G, ppn = P / cfg[c].M;
				uint32_t g = (uint32_t)p.phy2log[(size_t)l * P + s] / gs;

				/* every slot of group g's experts is on g's node */
				for (uint32_t q = 0; q < P; q++)
					if ((uint32_t)p.phy2log[(size_t)l * P + q] / gs == g)
						assert_int_equal(q / ppn, s / ppn);
			}
		}
		locus_gracefit_eplb_free(&p);
		free(W);
	}
}

/* EPLB's plan as the JSON eplb-import reads (log2phy in EPLB's order). */
static char *plan_json(const struct locus_gracefit_eplb *p)
{
	uint32_t L = p->n_layers, E = p->n_experts, P = p->n_phys, X = p->max_copies;
	size_t cap = 64 + (size_t)L * (P + E * X + E) * 8, n = 0;
	char *j = malloc(cap);

	assert_non_null(j);
	n += (size_t)sprintf(j + n, "{\"phy2log\": [");
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t s = 0; s < P; s++)
			n += (size_t)sprintf(j + n, "%s%d%s", s ? ", " : (l ? ", [" : "["),
					     p->phy2log[(size_t)l * P + s], s + 1 == P ? "]" : "");
	n += (size_t)sprintf(j + n, "], \"log2phy\": [");
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t e = 0; e < E; e++)
			for (uint32_t i = 0; i < X; i++)
				n += (size_t)sprintf(j + n, "%s%s%d%s%s",
						     !i && !e ? (l ? ", [" : "[") : "",
						     i ? ", " : (e ? ", [" : "["),
						     p->log2phy[((size_t)l * E + e) * X + i],
						     i + 1 == X ? "]" : "",
						     i + 1 == X && e + 1 == E ? "]" : "");
	n += (size_t)sprintf(j + n, "], \"logcnt\": [");
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t e = 0; e < E; e++)
			n += (size_t)sprintf(j + n, "%s%d%s", e ? ", " : (l ? ", [" : "["),
					     p->logcnt[(size_t)l * E + e], e + 1 == E ? "]" : "");
	n += (size_t)sprintf(j + n, "]}");
	assert_true(n < cap);
	return j;
}

/*
 * EPLB's own plans through eplb-import: every GPU keeps exactly its P/N
 * slots (two copies of one expert on a GPU stay two), and the table's
 * predicted loads are EPLB's GPU sums with each copy taking W / copies.
 * Hot experts on 4 GPUs get more copies than there are GPUs.
 */
static void test_plan_through_import(void **state)
{
	static const struct {
		uint32_t E, P, G, M, gpus;
	} cfg[] = { { 64, 80, 1, 1, 4 }, { 64, 80, 8, 2, 4 }, { 64, 80, 1, 2, 8 },
		    { 64, 96, 8, 4, 32 } };
	uint64_t x = 11;
	(void)state;

	for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
		uint32_t E = cfg[c].E, P = cfg[c].P, L = 2, N = cfg[c].gpus, S = P / N;
		struct locus_gracefit_topo topo = { cfg[c].M, N / cfg[c].M, 0, 0 };
		double *W = malloc((size_t)L * E * sizeof(double));
		struct locus_gracefit_eplb p;
		struct locus_error err = { 0 };
		struct locus_grace_view v;
		const void *pl;
		size_t len, plen;
		void *blob = NULL;
		char *j;
		int dup = 0;

		for (size_t i = 0; i < (size_t)L * E; i++)
			W[i] = 1 + (double)(rng(&x) % 100) + (i % E == 3 ? 4000 : 0);
		if (locus_gracefit_eplb_rebalance(W, L, E, P, cfg[c].G, cfg[c].M, N, &p, &err))
			fail_msg("%s", err.msg);
		j = plan_json(&p);
		if (locus_gracefit_eplb_import(j, strlen(j), &topo, W, &blob, &len, &err))
			fail_msg("config %zu: %s", c, err.msg);
		assert_int_equal(locus_grace_blob_check(blob, len, &pl, &plen, &err), 0);
		assert_int_equal(locus_grace_view_init(&v, (void *)pl, plen, &err), 0);
		for (uint32_t l = 0; l < L; l++) {
			uint32_t R = v.dims->max_replicas, slots[LOCUS_GRACE_MAX_RANKS] = { 0 };
			double want[LOCUS_GRACE_MAX_RANKS] = { 0 };

			for (uint32_t s = 0; s < P; s++) {
				size_t le = (size_t)l * E + (uint32_t)p.phy2log[(size_t)l * P + s];

				want[s / S] += W[le] / p.logcnt[le];
			}
			for (uint32_t e = 0; e < E; e++) {
				const uint16_t *rep = v.replica + ((size_t)l * E + e) * R;

				slots[v.primary[(size_t)l * E + e]]++;
				for (uint32_t i = 0; i < R && rep[i] != LOCUS_GRACE_NO_RANK; i++) {
					slots[rep[i]]++;
					dup |= rep[i] == v.primary[(size_t)l * E + e] ||
					       (i && rep[i] == rep[i - 1]);
				}
			}
			for (uint32_t r = 0; r < N; r++) {
				assert_int_equal(slots[r], S);
				assert_true(fabs(v.pred_load[(size_t)l * N + r] - want[r]) <
					    1e-3 * want[r]);
			}
		}
		/* the 1-node configurations put expert 3's copies twice on a GPU */
		if (cfg[c].gpus == 4)
			assert_true(dup);
		free(blob);
		free(j);
		locus_gracefit_eplb_free(&p);
		free(W);
	}
}

static void test_rejects(void **state)
{
	double W[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
	struct locus_gracefit_eplb p = { 0 };
	struct locus_error err = { 0 };
	static const struct {
		uint32_t P, G, M, gpus;
		const char *msg;
	} bad[] = {
		{ 18, 4, 2, 8, "18 physical slots do not divide over 8 GPUs" },
		{ 16, 4, 3, 8, "8 GPUs do not divide over 3 nodes" },
		{ 16, 5, 1, 8, "12 experts do not divide into 5 groups" },
		{ 8, 4, 2, 8, "8 physical slots for 12 experts" },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(locus_gracefit_eplb_rebalance(W, 1, 12, bad[i].P, bad[i].G,
							       bad[i].M, bad[i].gpus, &p, &err),
				 -LOCUS_ERANGE);
		if (!strstr(err.msg, bad[i].msg))
			fail_msg("\"%s\" lacks \"%s\"", err.msg, bad[i].msg);
		assert_null(p.phy2log);
	}
	W[3] = NAN;
	assert_int_equal(locus_gracefit_eplb_rebalance(W, 1, 12, 16, 4, 2, 8, &p, &err),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "layer 0 expert 3"));
	W[3] = -1;
	assert_int_equal(locus_gracefit_eplb_rebalance(W, 1, 12, 16, 4, 2, 8, &p, &err),
			 -LOCUS_ERANGE);
	assert_int_equal(locus_gracefit_eplb_rebalance(NULL, 1, 12, 16, 4, 2, 8, &p, &err),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_readme_example),
		cmocka_unit_test(test_global_by_hand),
		cmocka_unit_test(test_invariants),
		cmocka_unit_test(test_plan_through_import),
		cmocka_unit_test(test_rejects),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
