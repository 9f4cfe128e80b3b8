// SPDX-License-Identifier: MIT
/*
 * Online rebalancing replayed in time order (tools/eval/grace_online.h).
 *
 * The stream and the cadence, on the repository's sample trace: every
 * token of every request exactly once, in request order within a request,
 * no step above the batch; vLLM's cadence kept when the stream is long
 * enough, scaled (window = interval / 3) when not.
 *
 * On the real traces (../shared/data, or $LOCUS_DATA_DIR; skipped when
 * absent): ESFT's 4 domains one after another and gpt-oss-20b, each in
 * file order and shuffled, on 1x8 and 2x4, at grace_online_figures'
 * defaults (64 running requests, 10 windows, locus with up to
 * LOCUS_GRACEFIT_SWAPS primary swaps per layer and the first interval's
 * co-activation). What the replay measures and these bounds hold, on every
 * model, order and topology:
 *   - locus online's rows off the source GPU at most 0.9x EPLB online's
 *     (measured 0.75x-0.87x; the goal 0.8x holds on ESFT and is not met on
 *     gpt-oss-20b, 0.84x-0.87x: printed);
 *   - its busiest GPU / mean at most 0.10 above EPLB online's (measured
 *     -0.011 to +0.068: the goal "no worse" holds only on gpt-oss-20b
 *     shuffled: printed);
 *   - its busiest GPU / mean below the initial fit never rebalanced (the
 *     loop helps);
 *   - at most 0.35x the copies EPLB moves per rebalance (measured
 *     0.22x-0.31x: the swapped primaries are moved weights too; without
 *     swaps 0.16x-0.20x);
 *   - no more copies on its fullest GPU than EPLB's slots per GPU;
 *   - per model, the swaps lower busiest/mean against EPLB by at least 0.01
 *     (mean over orders and topologies; measured 0.015 on ESFT, 0.035 on
 *     gpt-oss-20b) and raise rows off the GPU by at most 0.05x EPLB's
 *     (measured 0.008x and 0.027x) against the same loop without swaps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "data_paths.h"
#include "grace_online.h"
#include "locus_gracefit.h"
#include "locus_trace.h"

#define ROWS_BOUND 0.90    /* locus rows off GPU / EPLB's, at most */
#define ROWS_GOAL 0.80
#define MM_TOL 0.10        /* locus busiest/mean - EPLB's, at most */
#define MOVES_BOUND 0.35   /* locus copies moved / EPLB's, at most */
#define SWAP_GAIN 0.01     /* the swaps' busiest/mean gain against EPLB, at least */
#define SWAP_ROWS 0.05     /* the swaps' rows off GPU / EPLB's added, at most */

static const struct gf_topo topos[] = { { 1, 8 }, { 2, 4 } };

static void test_cadence(void **state)
{
	struct go_cadence c;
	(void)state;

	go_cadence_of(40000, 10, &c);
	assert_int_equal(c.window, GO_VLLM_WINDOW);
	assert_int_equal(c.interval, GO_VLLM_INTERVAL);
	assert_int_equal(c.n_windows, 12);
	assert_true(c.scale == 1);
	go_cadence_of(33000, 10, &c);
	assert_int_equal(c.interval, GO_VLLM_INTERVAL);
	assert_int_equal(c.n_windows, 10);
	go_cadence_of(1529, 10, &c);
	assert_int_equal(c.window, 46);
	assert_int_equal(c.interval, 138);
	assert_int_equal(c.n_windows, 10);
	go_cadence_of(32, 10, &c);
	assert_int_equal(c.n_windows, 0);
}

/* Request r's token tok at layer l, as the stream must hold it. */
static const uint16_t *tok_of(const struct locus_trace *t, uint32_t r, uint32_t tok, uint32_t l)
{
	const struct locus_trace_req *q = &t->reqs[r];

	return tok < q->prompt_len ? locus_trace_tok(t, q->prompt, tok, l)
				   : locus_trace_tok(t, q->gen, tok - q->prompt_len, l);
}

static void test_stream(void **state)
{
	struct locus_error err = { 0 };
	struct locus_trace *t;
	struct go_stream s;
	uint64_t total = 0;
	(void)state;

	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &err), 0);
	for (uint32_t r = 0; r < t->n_requests; r++)
		total += t->reqs[r].prompt_len + t->reqs[r].gen_len;
	/* one running request: the requests one after another, one token a step */
	go_stream_build(&t, 1, 0, 1, 1, &s);
	assert_int_equal(s.n_tok, total);
	assert_int_equal(s.n_steps, total);
	for (uint32_t r = 0, at = 0; r < t->n_requests; r++)
		for (uint32_t x = 0; x < t->reqs[r].prompt_len + t->reqs[r].gen_len; x++, at++)
			for (uint32_t l = 0; l < s.L; l++)
				assert_memory_equal(s.ids + ((size_t)l * s.n_tok + at) * s.k,
						    tok_of(t, r, x, l), s.k * sizeof(uint16_t));
	go_stream_free(&s);
	/* 4 running: no step above 4, every token once (the layer-0 ids as a multiset) */
	go_stream_build(&t, 1, 1, 7, 4, &s);
	assert_int_equal(s.n_tok, total);
	assert_true(s.n_steps >= total / 4);
	for (uint32_t q = 0; q < s.n_steps; q++) {
		assert_true(s.step0[q + 1] > s.step0[q]);
		assert_true(s.step0[q + 1] - s.step0[q] <= 4);
	}
	{
		uint64_t want[1024] = { 0 }, got[1024] = { 0 };

		assert_true(s.E <= 1024);
		for (uint32_t r = 0; r < t->n_requests; r++)
			for (uint32_t x = 0; x < t->reqs[r].prompt_len + t->reqs[r].gen_len; x++)
				for (uint32_t j = 0; j < s.k; j++)
					want[tok_of(t, r, x, 0)[j]]++;
		for (size_t i = 0; i < (size_t)s.n_tok * s.k; i++)
			got[s.ids[i]]++;
		assert_memory_equal(want, got, sizeof(want));
	}
	go_stream_free(&s);
	locus_trace_free(t);
}

/* Returns the failed checks on one model, every case printed. */
static uint32_t check_model(const char *name, struct locus_trace *const *tr, uint32_t n_tr)
{
	double gain = 0, rows_added = 0;
	uint32_t failed = 0, n_cases = 0;

	for (int shuffle = 0; shuffle < 2; shuffle++) {
		struct go_stream s;
		struct go_cadence c;

		go_stream_build(tr, n_tr, shuffle, 20261207u, 64, &s);
		go_cadence_of(s.n_steps, 10, &c);
		if (!c.n_windows) {
			print_message("%s: too short for 10 windows\n", name);
			failed++;
			go_stream_free(&s);
			continue;
		}
		for (size_t ti = 0; ti < sizeof(topos) / sizeof(topos[0]); ti++) {
			struct go_metrics m[GO_N_METHODS], m0[GO_N_METHODS];
			struct go_run r, r0;
			double rows, dmm, mv;
			int bad;

			go_replay(&s, &topos[ti], &c, 0, &r);
			c.swaps = 0;
			go_replay(&s, &topos[ti], &c, 0, &r0);
			c.swaps = LOCUS_GRACEFIT_SWAPS;
			for (int x = 0; x < GO_N_METHODS; x++) {
				go_metrics_of(r.w[x], NULL, r.n_windows, &m[x]);
				go_metrics_of(r0.w[x], NULL, r0.n_windows, &m0[x]);
			}
			rows = m[GO_LOCUS].rows_gpu / m[GO_EPLB].rows_gpu;
			dmm = m[GO_LOCUS].mm - m[GO_EPLB].mm;
			mv = m[GO_LOCUS].moves / m[GO_EPLB].moves;
			gain += m0[GO_LOCUS].mm - m[GO_LOCUS].mm;
			rows_added += rows - m0[GO_LOCUS].rows_gpu / m0[GO_EPLB].rows_gpu;
			n_cases++;
			bad = (rows > ROWS_BOUND) + (dmm > MM_TOL) +
			      (m[GO_LOCUS].mm >= m[GO_GRACE_STATIC].mm) + (mv > MOVES_BOUND) +
			      (r.slots[GO_LOCUS] > r.slots[GO_EPLB]);
			print_message("%s %s %ux%u (%u windows): rows off GPU %.3fx EPLB's (goal "
				      "%.1fx %s), busiest/mean %.3f vs EPLB %.3f (%+.3f; goal <= 0 "
				      "%s; no swaps %.3f), static fit %.3f, copies moved %.2fx, "
				      "slots %u/%u%s\n",
				      name, shuffle ? "shuffled" : "file order", topos[ti].nodes,
				      topos[ti].gpus, r.n_windows, rows, ROWS_GOAL,
				      rows <= ROWS_GOAL ? "met" : "NOT met", m[GO_LOCUS].mm,
				      m[GO_EPLB].mm, dmm, dmm <= 0 ? "met" : "NOT met",
				      m0[GO_LOCUS].mm, m[GO_GRACE_STATIC].mm, mv, r.slots[GO_LOCUS],
				      r.slots[GO_EPLB], bad ? "  FAILED" : "");
			failed += bad;
			go_run_free(&r0);
			go_run_free(&r);
		}
		go_stream_free(&s);
	}
	if (n_cases) {
		gain /= n_cases;
		rows_added /= n_cases;
		print_message("%s: the swaps lower busiest/mean by %.3f (at least %.2f) and add "
			      "%.3fx EPLB's rows off GPU (at most %.2fx), mean of %u cases%s\n",
			      name, gain, SWAP_GAIN, rows_added, SWAP_ROWS, n_cases,
			      gain < SWAP_GAIN || rows_added > SWAP_ROWS ? "  FAILED" : "");
		failed += (gain < SWAP_GAIN) + (rows_added > SWAP_ROWS);
	}
	return failed;
}

static void test_esft(void **state)
{
	struct locus_trace *tr[LOCUS_TRACE_ESFT_DOMAINS];
	struct locus_error err = { 0 };
	char path[4200];
	uint32_t failed;
	(void)state;

	snprintf(path, sizeof(path), "%s/esft/results/expert_scores", locus_data_dir());
	if (access(path, F_OK) < 0) {
		print_message("ESFT traces absent (%s): skipped\n", path);
		skip();
	}
	for (uint32_t d = 0; d < LOCUS_TRACE_ESFT_DOMAINS; d++) {
		char dir[4300];

		snprintf(dir, sizeof(dir), "%s/%s", path, locus_trace_esft_domains[d]);
		if (locus_trace_load_esft_flags(dir, locus_trace_esft_domains[d], 26, 6, 64,
						LOCUS_TRACE_ESFT_GATE_ORDER, &tr[d], &err))
			fail_msg("%s: %s", dir, err.msg);
	}
	failed = check_model("ESFT", tr, LOCUS_TRACE_ESFT_DOMAINS);
	for (uint32_t d = 0; d < LOCUS_TRACE_ESFT_DOMAINS; d++)
		locus_trace_free(tr[d]);
	assert_int_equal(failed, 0);
}

static void test_gptoss(void **state)
{
	struct locus_error err = { 0 };
	struct locus_trace *t;
	const char *path = locus_data_gptoss_path();
	uint32_t failed;
	(void)state;

	if (access(path, F_OK) < 0) {
		print_message("gpt-oss-20b trace absent (%s): skipped\n", path);
		skip();
	}
	if (locus_trace_load(path, NULL, &t, &err))
		fail_msg("%s: %s", path, err.msg);
	failed = check_model("gpt-oss-20b", &t, 1);
	locus_trace_free(t);
	assert_int_equal(failed, 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cadence),
		cmocka_unit_test(test_stream),
		cmocka_unit_test(test_esft),
		cmocka_unit_test(test_gptoss),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
