// SPDX-License-Identifier: MIT
/*
 * grace_figures' per-sequence scoring (tools/eval/grace_heldout.c) on a hand
 * case: 2 nodes x 2 GPUs, 4 experts, top-2, 5 tokens in 2 sequences, token
 * t on GPU t mod 4. Every row count, load and metric below is worked by
 * hand from the placements, not taken from the code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "grace_heldout.h"
#include "locus_tblfile.h"

/* sequence 0: tokens {0,1} {0,2}; sequence 1: {0,3} {1,2} {2,3} */
static uint32_t tok0[3] = { 0, 2, 5 };
static uint16_t ids[5 * 2] = { 0, 1, 0, 2, 0, 3, 1, 2, 2, 3 };
static const struct gh_set set = { .L = 1, .k = 2, .n_seq = 2, .n_tok = 5, .tok0 = tok0,
				   .ids = ids };

static void check_seq(const struct gh_score *s, uint32_t q, double rows_gpu, double rows_node,
		      double tl, const double *load)
{
	assert_true(s->rows_gpu[q] == rows_gpu);
	assert_true(s->rows_node[q] == rows_node);
	assert_true(s->tl[q] == tl);
	for (uint32_t r = 0; r < 4; r++)
		assert_true(s->load[(size_t)q * 4 + r] == load[r]);
}

/*
 * EPLB placement by hand, 2 slots per GPU: GPU 0 = e0 e1, GPU 1 = e2 e3,
 * GPU 2 = e0 e0, GPU 3 = e1 e2. vLLM's copy: position mod copies over the
 * slots ascending (e0: 0 4 5, e1: 1 6, e2: 2 7, e3: 3). Batches: GPU 0
 * holds tokens 0 and 4 (positions 0..3: e0 -> slot 0, e1 -> slot 6, e2 ->
 * slot 2, e3 -> slot 3), GPU 1 token 1 (e0 -> 0, e2 -> 7), GPU 2 token 2
 * (e0 -> 0, e3 -> 3), GPU 3 token 3 (e1 -> 1, e2 -> 7).
 */
static void test_eplb_vllm(void **state)
{
	int32_t phy2log[8] = { 0, 1, 2, 3, 0, 0, 1, 2 };
	int32_t vllm[4 * 3] = { 0, 4, 5, 1, 6, -1, 2, 7, -1, 3, -1, -1 };
	int32_t logcnt[4] = { 3, 2, 2, 1 };
	struct locus_gracefit_eplb p = { .n_layers = 1, .n_experts = 4, .n_phys = 8,
					 .n_gpus = 4, .max_copies = 3, .phy2log = phy2log,
					 .log2phy = vllm, .vllm_log2phy = vllm,
					 .logcnt = logcnt };
	/* seq 0: t0 (GPU 0) -> GPUs 0, 3; t1 (GPU 1) -> 0, 3 */
	static const double l0[4] = { 2, 0, 0, 2 };
	/* seq 1: t2 (GPU 2) -> 0, 1; t3 (GPU 3) -> 0, 3; t4 (GPU 0) -> 1, 1 */
	static const double l1[4] = { 2, 3, 0, 1 };
	const uint32_t twice_first[2] = { 2, 0 };
	struct gh_score s;
	struct gh_metrics m;
	struct gh_unit u = { .sc = { &s }, .n = 1 };
	(void)state;

	gh_score_eplb(&p, 2, &set, &s);
	assert_int_equal(s.slots_max, 2);
	/* rows: t0 1 off GPU (3, other node); t1 2 (0, 3), 1 off node */
	check_seq(&s, 0, 3, 2, 2, l0);
	/* t2 2 off GPU, both off node; t3 1 (GPU 0), off node; t4 1 (GPU 1), same node */
	check_seq(&s, 1, 4, 3, 3, l1);
	/* loads 4 3 0 3: max/mean 4 / 2.5, std 1.5 */
	gh_metrics(&u, 1, &m);
	assert_true(fabs(m.rows_gpu - 7.0 / 5) < 1e-12);
	assert_true(fabs(m.rows_node - 5.0 / 5) < 1e-12);
	assert_true(fabs(m.mm - 1.6) < 1e-12);
	assert_true(fabs(m.cv - 0.6) < 1e-12);
	/* sequence 0 drawn twice, 1 never: loads 4 0 0 4 */
	u.cnt[0] = twice_first;
	gh_metrics(&u, 1, &m);
	assert_true(fabs(m.rows_gpu - 6.0 / 4) < 1e-12);
	assert_true(fabs(m.mm - 2.0) < 1e-12);
	assert_true(fabs(m.cv - 1.0) < 1e-12);
	gh_score_free(&s);
}

/*
 * GRACE table by hand: e0 e1 on GPU 0, e2 on GPU 1, e3 on GPU 3, and a
 * replica of e0 on GPU 2. The planner takes a copy on the source GPU, else
 * one on its node: t0 (GPU 0) stays; t1 (GPU 1) -> e0 on GPU 0 (same node,
 * not GPU 2), e2 local; t2 (GPU 2) -> e0 local, e3 on GPU 3; t3 (GPU 3) ->
 * 0, 1; t4 (GPU 0) -> 1, 3.
 */
static void test_grace_planner(void **state)
{
	struct locus_grace_dims d = { .n_layers = 1, .n_experts = 4, .n_nodes = 2,
				      .gpus_per_node = 2, .max_replicas = 1, .capacity = 2,
				      .replica_budget = 1 };
	size_t plen = locus_grace_payload_size(&d), msz;
	void *pl = calloc(1, plen), *mem = NULL;
	struct locus_grace_view v;
	struct locus_error err = { 0 };
	static const uint16_t pri[4] = { 0, 0, 1, 3 };
	static const uint16_t rep[4] = { 2, LOCUS_GRACE_NO_RANK, LOCUS_GRACE_NO_RANK,
					 LOCUS_GRACE_NO_RANK };
	static const double l0[4] = { 3, 1, 0, 0 };
	static const double l1[4] = { 1, 2, 1, 2 };
	struct gh_score s;
	(void)state;

	memcpy(pl, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, pl, plen, &err), 0);
	memcpy(v.primary, pri, sizeof(pri));
	memcpy(v.replica, rep, sizeof(rep));
	for (int i = 0; i < 4; i++) {
		v.expert_load[i] = 1;
		v.pred_load[i] = 1;
	}
	msz = locus_grace_map_size(&d);
	assert_int_equal(posix_memalign(&mem, 64, msz), 0);
	if (locus_grace_map_build(mem, msz, pl, plen, 1, &err))
		fail_msg("%s", err.msg);
	gh_score_grace(mem, &set, &s);
	assert_int_equal(s.slots_max, 2);
	/* seq 0: t0 none off; t1 one (GPU 0, same node) */
	check_seq(&s, 0, 1, 0, 2, l0);
	/* seq 1: t2 one (GPU 3, same node); t3 two, both off node; t4 two, one off node */
	check_seq(&s, 1, 5, 3, 3, l1);
	gh_score_free(&s);
	free(mem);
	free(pl);
}

static void test_interval_and_draw(void **state)
{
	double x[1000];
	double lo, hi;
	uint64_t seed = 1;
	uint32_t hits[7] = { 0 };
	(void)state;

	for (int i = 0; i < 1000; i++)
		x[i] = 999 - i;
	gh_interval(x, 1000, &lo, &hi);
	assert_true(lo == 24 && hi == 975);
	for (int i = 0; i < 7000; i++)
		hits[locus_splitmix_below(&seed, 7)]++;
	for (int i = 0; i < 7; i++)
		assert_true(hits[i] > 850 && hits[i] < 1150);
}

/*
 * A paired bootstrap of max/mean must cover its own point estimate.
 * Placement A serves sequence q wholly on GPU q mod 2: balanced on the
 * sample (max/mean 1), and a resample of n sequences draws c ~ Bin(n, 1/2)
 * of them on GPU 0, max/mean max(c, n-c)/(n/2) > 1 unless c = n/2 (a
 * chance of about 1.8 % at n = 2000, below the 2.5 % of the lower end).
 * Placement B puts 3 of every sequence's 4 pairs on GPU 0: 1.5 on any
 * resample. A - B is -0.5 on the sample; every resample's difference is
 * above it but about 1 in 50, so the plain percentiles exclude -0.5.
 */
static void test_interval_covers_point(void **state)
{
	enum { NS = 2000, NB = 1000 };
	static double rows[NS], tl[NS], la[NS * 2], lb[NS * 2], d[NB], tmp[NB];
	static uint32_t cnt[NS];
	struct gh_score a = { .n_seq = NS, .L = 1, .N = 2, .rows_gpu = rows, .rows_node = rows,
			      .tl = tl, .load = la };
	struct gh_score b = a;
	struct gh_unit ua = { .sc = { &a }, .n = 1 }, ub = { .sc = { &b }, .n = 1 };
	struct gh_metrics ma, mb;
	uint64_t seed = 7;
	double point, lo, hi, above = 0;
	(void)state;

	b.load = lb;
	for (uint32_t q = 0; q < NS; q++) {
		tl[q] = 1;
		la[q * 2 + q % 2] = 4;
		lb[q * 2] = 3;
		lb[q * 2 + 1] = 1;
	}
	gh_metrics(&ua, 1, &ma);
	gh_metrics(&ub, 1, &mb);
	point = ma.mm - mb.mm;
	assert_true(fabs(point + 0.5) < 1e-12);
	ua.cnt[0] = ub.cnt[0] = cnt;
	for (uint32_t i = 0; i < NB; i++) {
		memset(cnt, 0, sizeof(cnt));
		for (uint32_t q = 0; q < NS; q++)
			cnt[locus_splitmix_below(&seed, NS)]++;
		gh_metrics(&ua, 1, &ma);
		gh_metrics(&ub, 1, &mb);
		d[i] = ma.mm - mb.mm;
		above += d[i] > point + 1e-12;
	}
	/* the case is what it says: resamples sit above the point */
	assert_true(above > 0.95 * NB);
	memcpy(tmp, d, sizeof(d));
	gh_interval(tmp, NB, &lo, &hi);
	assert_true(lo > point);
	memcpy(tmp, d, sizeof(d));
	gh_interval_bc(point, tmp, NB, &lo, &hi);
	assert_true(lo < point && point < hi);
	/* and about as wide as the percentiles: the same spread, shifted */
	memcpy(tmp, d, sizeof(d));
	{
		double plo, phi;

		gh_interval(tmp, NB, &plo, &phi);
		assert_true(fabs((hi - lo) - (phi - plo)) < 1e-12);
	}
}

/* Replicates centred on the point: the bias is 0, the interval the percentiles. */
static void test_interval_no_bias(void **state)
{
	double x[1001], y[1001], lo, hi, plo, phi;
	(void)state;

	for (int i = 0; i <= 1000; i++)
		x[i] = y[i] = (i - 500) * 0.001 + 2.0;
	gh_interval(y, 1001, &plo, &phi);
	gh_interval_bc(2.0, x, 1001, &lo, &hi);
	assert_true(fabs(lo - plo) < 1e-9 && fabs(hi - phi) < 1e-9);
	assert_true(fabs(lo - 1.525) < 1e-9 && fabs(hi - 2.475) < 1e-9);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_eplb_vllm),
		cmocka_unit_test(test_grace_planner),
		cmocka_unit_test(test_interval_and_draw),
		cmocka_unit_test(test_interval_covers_point),
		cmocka_unit_test(test_interval_no_bias),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
