// SPDX-License-Identifier: MIT
/*
 * What the fit's speed-ups must not change: the decode steps counted from
 * bitsets equal the stamps' count, batch by batch; and locusctl fit's
 * default (the tuning with the replays' cache, then the fit) on the
 * repository's sample gives the same tuning figures and the same table
 * bytes as the fit before the speed-ups (checksums recorded from it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "data_paths.h"
#include "eldr_quality.h"
#include "eldr_replay.h"
#include "locus_eldrfit.h"
#include "locus_trace.h"

static struct locus_trace *sample(void)
{
	struct locus_error e = { 0 };
	struct locus_trace *t = NULL;
	char path[4096];

	snprintf(path, sizeof(path), "%s/tests/data/calib_sample.jsonl", locus_data_root());
	assert_int_equal(locus_trace_load(path, NULL, &t, &e), 0);
	return t;
}

/* FNV-1a, 64 bits, continued from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

#define FNV0 0xcbf29ce484222325ull

/* The same rounds under round robin and the oracle, with and without the bitsets. */
static void test_steps_match_stamps(void **state)
{
	struct locus_trace *t = sample();
	const uint32_t K = 4, B = 4, n = t->n_requests;
	uint32_t *seq = malloc(sizeof(*seq) * n);
	struct qsteps steps;
	uint64_t rng = 7;

	(void)state;
	assert_int_equal(qsteps_build(&steps, t), 0);
	assert_non_null(steps.bits);
	for (int order = 0; order < 5; order++) {
		struct qfig f[2];

		for (uint32_t i = 0; i < n; i++)
			seq[i] = i;
		for (uint32_t i = n - 1; i > 0; i--) {
			uint32_t j = (uint32_t)(locus_splitmix64(&rng) % (i + 1)), x = seq[i];

			seq[i] = seq[j];
			seq[j] = x;
		}
		for (int with = 0; with < 2; with++) {
			struct qsim s = { .t = t, .K = K, .B = B, .steps = with ? &steps : NULL,
					  .only = 1u << QPOL_RR | 1u << QPOL_DOMAIN };

			s.seen = calloc((size_t)t->n_layers * t->n_experts, sizeof(*s.seen));
			s.batch = malloc(sizeof(*s.batch) * K * B);
			s.fill = calloc(K, sizeof(*s.fill));
			s.total = calloc((size_t)QPOL_N * K, sizeof(*s.total));
			assert_true(qsim_run(&s, seq, n, 1, &f[with]) > 0);
			free(s.total);
			free(s.fill);
			free(s.batch);
			free(s.seen);
		}
		assert_true(f[0].step[QPOL_RR] > 0);
		assert_memory_equal(f[0].step, f[1].step, sizeof(f[0].step));
		assert_memory_equal(f[0].whole, f[1].whole, sizeof(f[0].whole));
	}
	qsteps_free(&steps);
	free(seq);
	locus_trace_free(t);
}

/* The checksums of the tuning's figures and of the table payload. */
static void default_fit(uint32_t K, uint64_t seed, uint64_t *tune_sum, uint64_t *table_sum)
{
	struct locus_trace *t = sample();
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_tune_opts tu = { .replay = eldr_replay_router,
					      .oracle = eldr_replay_domain };
	struct locus_eldrfit_tune_result r;
	struct locus_eldrfit_result res;
	struct eldr_replay_cache *cache;
	struct locus_error e = { 0 };
	uint64_t h = FNV0;

	locus_eldrfit_opts_default(&o, K);
	o.seed = seed;
	assert_int_equal(eldr_replay_cache_new(&cache), 0);
	tu.replay_arg = cache;
	tu.oracle_arg = cache;
	assert_int_equal(locus_eldrfit_tune(t, NULL, 0, &o, &tu, &r, &e), 0);
	for (uint32_t g = 0; g < r.n_pt; g++) {
		h = fnv(h, r.pt[g].fold_pairs, sizeof(r.pt[g].fold_pairs));
		h = fnv(h, r.pt[g].fold_load, sizeof(r.pt[g].fold_load));
	}
	h = fnv(h, &r.chosen, sizeof(r.chosen));
	h = fnv(h, &r.ref_pairs, sizeof(r.ref_pairs));
	h = fnv(h, &r.ref_load, sizeof(r.ref_load));
	*tune_sum = h;
	locus_eldrfit_tune_apply(&r.pt[r.chosen], &o);
	assert_int_equal(locus_eldrfit_trace(t, &o, &res, &e), 0);
	/* the payload after the 64-byte sealed header (which holds the time of sealing) */
	*table_sum = fnv(FNV0, (const uint8_t *)res.blob + 64, res.blob_len - 64);
	print_message("K=%u seed %llu: tuning %016llx, table %016llx\n", K,
		      (unsigned long long)seed, (unsigned long long)*tune_sum,
		      (unsigned long long)*table_sum);
	locus_eldrfit_result_free(&res);
	locus_eldrfit_tune_result_free(&r);
	eldr_replay_cache_free(cache);
	locus_trace_free(t);
}

static void test_default_fit_unchanged(void **state)
{
	static const struct {
		uint32_t K;
		uint64_t seed, tune_sum, table_sum;
	} want[] = {
		{ 2, 1, 0x5470464c843a8cecull, 0x7c21c3fdb76691a2ull },
		{ 4, 7, 0x9c0a33dabe36bbe8ull, 0x2e60b498dfc58cafull },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		uint64_t ts, bs;

		default_fit(want[i].K, want[i].seed, &ts, &bs);
		assert_int_equal(ts, want[i].tune_sum);
		assert_int_equal(bs, want[i].table_sum);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_steps_match_stamps),
		cmocka_unit_test(test_default_fit_unchanged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
