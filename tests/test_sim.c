// SPDX-License-Identifier: MIT
/*
 * locusctl simulate's core (control/sim.c): every expected figure is worked
 * out by hand in the comment above its test from a tiny trace (one layer,
 * four experts, top-1), or is a closed form (M/D/1), or is the router's own
 * decision replayed apart from the simulation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eldr_quality.h"
#include "locus_eldr_priv.h"
#include "locus_sim.h"
#include "data_paths.h"

/* Steps in milliseconds: 1 ms fixed, 1 ms per distinct expert, no KV read. */
static const struct locus_sim_hw ms_hw = {
	.expert_bytes = 1e6, .hbm_bytes_per_s = 1e9, .fixed_s = 1e-3, .kv_bytes_per_token = 0,
};

/* Requests with one prompt token and n gen tokens (top-1 of 4 experts, one layer). */
static struct locus_trace *tiny_trace(uint32_t n, const uint16_t *prompt,
				      const uint16_t (*gen)[2], const uint32_t *gen_len,
				      const char *const *domains)
{
	struct locus_trace_req reqs[8];
	struct locus_trace *t = NULL;
	struct locus_error e = { 0 };

	assert_true(n <= 8);
	memset(reqs, 0, sizeof(reqs));
	for (uint32_t i = 0; i < n; i++) {
		reqs[i].prompt_len = 1;
		reqs[i].prompt = &prompt[i];
		reqs[i].gen_len = gen_len ? gen_len[i] : 2;
		reqs[i].gen = reqs[i].gen_len ? gen[i] : NULL;
	}
	assert_int_equal(locus_trace_from_arrays(1, 1, 4, n, reqs, domains, &t, &e), 0);
	return t;
}

static void run(const struct locus_sim_cfg *c, struct locus_sim_result *r)
{
	struct locus_error e = { 0 };

	assert_int_equal(locus_sim_result_alloc(r, c->n, c->n_decoders), 0);
	assert_int_equal(locus_sim_run(c, r, &e), 0);
}

static const uint16_t p3[8] = { 3, 3, 3, 3, 3, 3, 3, 3 };
static const uint16_t g_ab[2][2] = { { 0, 1 }, { 0, 2 } };

/*
 * A: gen experts 0 then 1; B: 0 then 2; both at t=0, one decoder, cap 2.
 * Step 1 reads {0}: 1 + 1 = 2 ms; step 2 reads {1, 2}: 1 + 2 = 3 ms. Both
 * leave at 5 ms: TPOT 5 / 2 = 2.5 ms, no queueing, 1.5 pairs per step.
 */
static void test_two_requests_share_a_step(void **state)
{
	struct locus_trace *t = tiny_trace(2, p3, g_ab, NULL, NULL);
	struct locus_sim_arrival arr[2] = { { 0, 0, 2 }, { 0, 1, 2 } };
	struct locus_sim_cfg c = { .t = t, .arr = arr, .n = 2, .n_decoders = 1, .batch_cap = 2,
				   .hw = ms_hw, .policy = LOCUS_SIM_RR };
	struct locus_sim_result r;
	struct locus_sim_summary s;

	(void)state;
	run(&c, &r);
	assert_float_equal(r.tpot[0], 2.5e-3, 1e-12);
	assert_float_equal(r.tpot[1], 2.5e-3, 1e-12);
	assert_float_equal(r.queue[0], 0, 1e-15);
	assert_float_equal(r.queue[1], 0, 1e-15);
	assert_int_equal(r.steps, 2);
	assert_int_equal(r.pairs, 3);
	assert_int_equal(r.tokens, 4);
	assert_float_equal(r.makespan, 5e-3, 1e-12);
	assert_int_equal(locus_sim_summarize(&r, &s), 0);
	assert_float_equal(s.pairs_per_step, 1.5, 1e-12);
	assert_float_equal(s.batch_mean, 2, 1e-12);
	assert_float_equal(s.step_mean, 2.5e-3, 1e-12);
	assert_float_equal(s.tokens_per_s, 4 / 5e-3, 1e-6);
	locus_sim_result_free(&r);
	locus_trace_free(t);
}

/*
 * Cap 1: A decodes alone (2 + 2 ms, leaves at 4 ms), B waits 4 ms, then
 * 2 + 2 ms, leaves at 8 ms. TPOT 2 ms each; queue {0, 4} ms: mean 2,
 * nearest-rank p50 = the 1st of 2 = 0, p99 = the 2nd = 4.
 */
static void test_cap_queues_the_second(void **state)
{
	struct locus_trace *t = tiny_trace(2, p3, g_ab, NULL, NULL);
	struct locus_sim_arrival arr[2] = { { 0, 0, 2 }, { 0, 1, 2 } };
	struct locus_sim_cfg c = { .t = t, .arr = arr, .n = 2, .n_decoders = 1, .batch_cap = 1,
				   .hw = ms_hw, .policy = LOCUS_SIM_JSQ };
	struct locus_sim_result r;
	struct locus_sim_summary s;

	(void)state;
	run(&c, &r);
	assert_float_equal(r.tpot[0], 2e-3, 1e-12);
	assert_float_equal(r.tpot[1], 2e-3, 1e-12);
	assert_float_equal(r.queue[1], 4e-3, 1e-12);
	assert_float_equal(r.makespan, 8e-3, 1e-12);
	assert_int_equal(locus_sim_summarize(&r, &s), 0);
	assert_float_equal(s.queue_mean, 2e-3, 1e-12);
	assert_float_equal(s.queue_p50, 0, 1e-15);
	assert_float_equal(s.queue_p99, 4e-3, 1e-12);
	locus_sim_result_free(&r);
	locus_trace_free(t);
}

/*
 * KV read: A alone, prompt 1 token, 1e5 B per token at 1e9 B/s: step 1 has
 * 1 context token (0.1 ms), step 2 two (0.2 ms): 2.1 + 2.2 = 4.3 ms, TPOT
 * 2.15 ms. A request arriving at 1 ms (B, cap 2) joins at A's first step
 * boundary (2.1 ms): step 2 then reads {1, 0} and 2 + 1 context tokens:
 * 1 + 2 + 0.3 = 3.3 ms.
 */
static void test_kv_read_and_join_at_boundary(void **state)
{
	struct locus_trace *t = tiny_trace(2, p3, g_ab, NULL, NULL);
	struct locus_sim_arrival one[1] = { { 0, 0, 2 } };
	struct locus_sim_arrival two[2] = { { 0, 0, 2 }, { 1e-3, 1, 2 } };
	struct locus_sim_cfg c = { .t = t, .arr = one, .n = 1, .n_decoders = 1, .batch_cap = 2,
				   .hw = ms_hw, .policy = LOCUS_SIM_RR };
	struct locus_sim_result r;

	(void)state;
	c.hw.kv_bytes_per_token = 1e5;
	run(&c, &r);
	assert_float_equal(r.tpot[0], 2.15e-3, 1e-12);
	locus_sim_result_free(&r);
	c.arr = two;
	c.n = 2;
	run(&c, &r);
	assert_float_equal(r.queue[1], 1.1e-3, 1e-12);
	/* A leaves at 2.1 + 3.3 = 5.4 ms: TPOT 2.7; B's 2nd step reads {2} over 2 ctx: 2.2 ms */
	assert_float_equal(r.tpot[0], 2.7e-3, 1e-12);
	assert_float_equal(r.tpot[1], (3.3e-3 + 2.2e-3) / 2, 1e-12);
	locus_sim_result_free(&r);
	locus_trace_free(t);
}

struct seen {
	uint32_t n, K;
	uint64_t loads[64][4];
	uint32_t d[64];
};

static void record(void *arg, uint32_t i, const uint64_t *loads, uint32_t K, uint32_t d)
{
	struct seen *s = arg;

	assert_true(i < 64 && K <= 4);
	memcpy(s->loads[i], loads, sizeof(*loads) * K);
	s->d[i] = d;
	s->n = i + 1;
	s->K = K;
}

/*
 * Three requests at t=0, two decoders. rr: 0, 1, 0. jsq sees loads {0,0},
 * {1,0}, {1,1}: 0, 1, 0 too (ties to the lower index). Assigned {2, 1}: skew
 * max/mean = 2 / 1.5. p2c with two decoders always compares both: jsq's.
 */
static void test_rr_jsq_p2c(void **state)
{
	const uint16_t g[3][2] = { { 0, 1 }, { 0, 2 }, { 1, 2 } };
	struct locus_trace *t = tiny_trace(3, p3, g, NULL, NULL);
	struct locus_sim_arrival arr[3] = { { 0, 0, 2 }, { 0, 1, 2 }, { 0, 2, 2 } };
	struct locus_sim_cfg c = { .t = t, .arr = arr, .n = 3, .n_decoders = 2, .batch_cap = 4,
				   .hw = ms_hw, .seed = 7, .on_route = record };
	const uint64_t want_loads[3][2] = { { 0, 0 }, { 1, 0 }, { 1, 1 } };
	const int pols[3] = { LOCUS_SIM_RR, LOCUS_SIM_JSQ, LOCUS_SIM_P2C };

	(void)state;
	for (int p = 0; p < 3; p++) {
		struct locus_sim_result r;
		struct locus_sim_summary s;
		struct seen sn = { 0 };

		c.policy = pols[p];
		c.arg = &sn;
		run(&c, &r);
		assert_int_equal(sn.n, 3);
		assert_int_equal(r.decoder[0], 0);
		assert_int_equal(r.decoder[1], 1);
		assert_int_equal(r.decoder[2], 0);
		for (int i = 0; i < 3; i++)
			assert_memory_equal(sn.loads[i], want_loads[i], sizeof(want_loads[i]));
		assert_int_equal(locus_sim_summarize(&r, &s), 0);
		assert_float_equal(s.skew_assigned, 2 / 1.5, 1e-12);
		locus_sim_result_free(&r);
	}
	locus_trace_free(t);
}

/* Domains a, b, a, b on two decoders: the oracle keeps a on 0 and b on 1. */
static void test_domain_oracle(void **state)
{
	const uint16_t g[4][2] = { { 0, 1 }, { 0, 2 }, { 1, 2 }, { 3, 3 } };
	const char *const dom[4] = { "a", "b", "a", "b" };
	struct locus_trace *t = tiny_trace(4, p3, g, NULL, dom);
	struct locus_sim_arrival arr[4] = { { 0, 0, 2 }, { 0, 1, 2 }, { 0, 2, 2 }, { 0, 3, 2 } };
	struct locus_sim_cfg c = { .t = t, .arr = arr, .n = 4, .n_decoders = 2, .batch_cap = 4,
				   .hw = ms_hw, .policy = LOCUS_SIM_DOMAIN };
	struct locus_sim_result r;

	(void)state;
	run(&c, &r);
	assert_int_equal(r.decoder[0], 0);
	assert_int_equal(r.decoder[1], 1);
	assert_int_equal(r.decoder[2], 0);
	assert_int_equal(r.decoder[3], 1);
	locus_sim_result_free(&r);
	locus_trace_free(t);
}

/* Nearest rank: of 1..10, p50 = the 5th, p90 = the 9th, p99 = the 10th, p10 = the 1st. */
static void test_percentile(void **state)
{
	double v[10] = { 10, 3, 7, 1, 9, 2, 8, 4, 6, 5 };

	(void)state;
	assert_float_equal(locus_sim_percentile(v, 10, 50), 5, 0);
	assert_float_equal(locus_sim_percentile(v, 10, 90), 9, 0);
	assert_float_equal(locus_sim_percentile(v, 10, 99), 10, 0);
	assert_float_equal(locus_sim_percentile(v, 10, 10), 1, 0);
	assert_float_equal(locus_sim_percentile(v, 1, 50), 1, 0);
}

/*
 * One decoder, cap 1, one token per request, a 1 ms step whatever it reads:
 * M/D/1. At Poisson rate 500/s (rho 0.5) the mean wait is
 * rho S / (2 (1 - rho)) = 0.5 ms (Pollaczek-Khinchine); 200,000 requests.
 */
static void test_md1_mean_wait(void **state)
{
	const uint16_t g[1][2] = { { 0, 0 } };
	const uint32_t gl[1] = { 1 };
	struct locus_trace *t = tiny_trace(1, p3, g, gl, NULL);
	const uint32_t n = 200000;
	struct locus_sim_arrival *arr = malloc(sizeof(*arr) * n);
	struct locus_sim_cfg c = { .t = t, .arr = arr, .n = n, .n_decoders = 1, .batch_cap = 1,
				   .hw = { .expert_bytes = 0, .hbm_bytes_per_s = 1, .fixed_s = 1e-3 },
				   .policy = LOCUS_SIM_JSQ };
	struct locus_error e = { 0 };
	struct locus_sim_result r;
	struct locus_sim_summary s;

	(void)state;
	assert_non_null(arr);
	assert_int_equal(locus_sim_arrivals(t, n, 500, 0, 0, 42, arr, &e), 0);
	/* the arrivals themselves: n / last time ~ 500/s */
	assert_true(fabs(n / arr[n - 1].t - 500) < 500 * 0.02);
	run(&c, &r);
	assert_int_equal(locus_sim_summarize(&r, &s), 0);
	assert_float_equal(s.queue_mean, 0.5e-3, 0.5e-3 * 0.05);
	assert_float_equal(s.tpot_p99, 1e-3, 1e-12);
	locus_sim_result_free(&r);
	free(arr);
	locus_trace_free(t);
}

/* Same seed, same arrivals and decisions; another seed, other arrivals. */
static void test_seeded(void **state)
{
	const uint16_t g[3][2] = { { 0, 1 }, { 0, 2 }, { 1, 2 } };
	struct locus_trace *t = tiny_trace(3, p3, g, NULL, NULL);
	struct locus_sim_arrival a1[300], a2[300], a3[300];
	struct locus_error e = { 0 };
	struct locus_sim_cfg c = { .t = t, .arr = a1, .n = 300, .n_decoders = 3, .batch_cap = 2,
				   .hw = ms_hw, .policy = LOCUS_SIM_RANDOM, .seed = 5 };
	struct locus_sim_result r1, r2;

	(void)state;
	assert_int_equal(locus_sim_arrivals(t, 300, 800, 1, 0, 9, a1, &e), 0);
	assert_int_equal(locus_sim_arrivals(t, 300, 800, 1, 0, 9, a2, &e), 0);
	assert_int_equal(locus_sim_arrivals(t, 300, 800, 1, 0, 10, a3, &e), 0);
	assert_memory_equal(a1, a2, sizeof(a1));
	assert_memory_not_equal(a1, a3, sizeof(a1));
	/* shuffled per pass: each pass over the trace holds every request once */
	for (int p = 0; p < 100; p++)
		assert_int_equal((1u << a1[3 * p].req) | (1u << a1[3 * p + 1].req) |
				 (1u << a1[3 * p + 2].req), 7);
	run(&c, &r1);
	c.arr = a2;
	run(&c, &r2);
	assert_memory_equal(r1.tpot, r2.tpot, sizeof(double) * 300);
	assert_memory_equal(r1.decoder, r2.decoder, sizeof(uint32_t) * 300);
	locus_sim_result_free(&r1);
	locus_sim_result_free(&r2);
	locus_trace_free(t);
}

/* Configurations the run refuses, each with its reason. */
static void test_refusals(void **state)
{
	const uint16_t g[2][2] = { { 0, 1 }, { 0, 2 } };
	const uint32_t gl[2] = { 2, 0 };
	struct locus_trace *t = tiny_trace(2, p3, g, gl, NULL);
	struct locus_sim_arrival arr[2] = { { 1e-3, 0, 2 }, { 0, 0, 2 } };
	struct locus_sim_cfg c = { .t = t, .arr = arr, .n = 1, .n_decoders = 1, .batch_cap = 1,
				   .hw = ms_hw, .policy = LOCUS_SIM_RR };
	struct locus_sim_result r;
	struct locus_error e = { 0 };
	struct locus_sim_cfg bad;

	(void)state;
	assert_int_equal(locus_sim_result_alloc(&r, 2, 1), 0);
	bad = c;
	bad.n = 2; /* out of order */
	assert_int_equal(locus_sim_run(&bad, &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "in order"));
	bad = c;
	bad.hw.hbm_bytes_per_s = 0;
	assert_int_equal(locus_sim_run(&bad, &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "bandwidth"));
	bad = c;
	bad.batch_cap = 0;
	assert_int_equal(locus_sim_run(&bad, &r, &e), -LOCUS_ERANGE);
	bad = c;
	bad.policy = LOCUS_SIM_ELDR;
	assert_int_equal(locus_sim_run(&bad, &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "router"));
	bad = c;
	bad.hw.fixed_s = NAN;
	assert_int_equal(locus_sim_run(&bad, &r, &e), -LOCUS_ERANGE);
	arr[0].req = 1; /* no routed_experts */
	assert_int_equal(locus_sim_run(&c, &r, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "routed_experts"));
	assert_int_equal(locus_sim_arrivals(t, 2, -1, 0, 0, 1, arr, &e), -LOCUS_ERANGE);
	assert_int_equal(locus_sim_arrivals(t, 2, INFINITY, 0, 0, 1, arr, &e), -LOCUS_ERANGE);
	locus_sim_result_free(&r);
	locus_trace_free(t);
}

/* An ELDR table, one layer of 4 experts, 2 decoders: centroids e0 and e1. */
struct eldr {
	uint8_t *payload;
	size_t len;
	void *mem[2];
	struct locus_eldr_router *r[2];
};

static void eldr_build(struct eldr *x, float tau)
{
	struct locus_eldr_tbl_layout lay;
	struct locus_error e = { 0 };
	uint32_t *ids;
	uint8_t *mask;
	float *idf, *cen;
	size_t msz;

	assert_int_equal(locus_eldr_tbl_layout(1, 4, 2, &lay), 0);
	x->len = lay.len;
	x->payload = aligned_alloc(64, LOCUS_ALIGN_UP(lay.len, 64));
	assert_non_null(x->payload);
	memset(x->payload, 0, lay.len);
	assert_int_equal(locus_eldr_tbl_init(x->payload, lay.len, 1, 4, 2, tau, &ids, &mask, &idf,
					     &cen), 0);
	((struct locus_eldr_tbl_hdr *)(void *)x->payload)->n_masked = 1;
	mask[0] = 1;
	for (int i = 0; i < 4; i++)
		idf[i] = 1;
	ids[0] = 0;
	ids[1] = 1;
	cen[0] = 1;     /* decoder 0: expert 0 */
	cen[4 + 1] = 1; /* decoder 1: expert 1 */
	assert_int_equal(locus_eldr_tbl_validate(x->payload, x->len, NULL, &e), 0);
	msz = locus_eldr_router_mem_size(x->payload, x->len);
	for (int i = 0; i < 2; i++) {
		x->mem[i] = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
		assert_non_null(x->mem[i]);
		assert_int_equal(locus_eldr_router_build(x->mem[i], msz, x->payload, x->len,
							 LOCUS_ELDR_PATH_AUTO, &x->r[i], &e), 0);
	}
}

static void eldr_free(struct eldr *x)
{
	free(x->mem[0]);
	free(x->mem[1]);
	free(x->payload);
}

static uint8_t *prompt_sigs(const struct locus_trace *t, size_t *slen)
{
	struct locus_error e = { 0 };
	uint8_t *sigs;

	*slen = locus_eldr_sig_len(t->n_layers, t->n_experts);
	sigs = malloc(*slen * t->n_requests);
	assert_non_null(sigs);
	for (uint32_t i = 0; i < t->n_requests; i++)
		assert_true(locus_eldr_sig_build(sigs + *slen * i, *slen, 1, 4, 1, t->reqs[i].prompt,
						 1, 0, &e) > 0);
	return sigs;
}

/*
 * An ELDR run on the 8-request trace whose prompts sit on the experts of
 * prompt[] (generation as in both cases below): n Poisson arrivals at rate
 * (seed), 2 decoders of batch_cap, a router at tau; the loads each decision
 * saw in sn, a second router of the same table in x.r[1].
 */
struct eldr_case {
	struct locus_trace *t;
	struct locus_sim_arrival arr[40];
	struct eldr x;
	uint8_t *sigs;
	size_t slen;
	struct seen sn;
	struct locus_sim_result r;
};

static void eldr_case_run(struct eldr_case *k, const uint16_t prompt[8], uint32_t n,
			  uint32_t batch_cap, float tau, double rate, uint64_t seed)
{
	static const uint16_t g[8][2] = { { 0, 0 }, { 1, 1 }, { 0, 0 }, { 0, 0 },
					  { 1, 1 }, { 1, 1 }, { 0, 0 }, { 2, 2 } };
	struct locus_error e = { 0 };
	struct locus_sim_cfg c;

	memset(k, 0, sizeof(*k));
	assert_true(n <= LOCUS_ARRAY_SIZE(k->arr));
	k->t = tiny_trace(8, prompt, g, NULL, NULL);
	k->sigs = prompt_sigs(k->t, &k->slen);
	eldr_build(&k->x, tau);
	c = (struct locus_sim_cfg){ .t = k->t, .arr = k->arr, .n = n, .n_decoders = 2,
				    .batch_cap = batch_cap, .hw = ms_hw,
				    .policy = LOCUS_SIM_ELDR, .router = k->x.r[0],
				    .sigs = k->sigs, .slen = k->slen, .on_route = record,
				    .arg = &k->sn };
	assert_int_equal(locus_sim_arrivals(k->t, n, rate, 0, 0, seed, k->arr, &e), 0);
	run(&c, &k->r);
}

static void eldr_case_free(struct eldr_case *k)
{
	locus_sim_result_free(&k->r);
	eldr_free(&k->x);
	free(k->sigs);
	locus_trace_free(k->t);
}

/*
 * The ELDR policy's decisions are the router's: each arrival's loads and
 * signature handed to a second router built from the same table give the
 * same decoder. At tau 0.1 prompts on expert 0 go to decoder 0 and on
 * expert 1 to decoder 1 (similarity 1 against 0: outside the band).
 */
static void test_eldr_is_the_router(void **state)
{
	static const uint16_t prompt[8] = { 0, 1, 0, 0, 1, 1, 0, 2 };
	static struct eldr_case k;

	(void)state;
	eldr_case_run(&k, prompt, 24, 2, 0.1f, 600, 3);
	assert_int_equal(k.sn.n, 24);
	for (uint32_t i = 0; i < 24; i++) {
		struct locus_eldr_decision d;
		uint32_t req = k.arr[i].req;

		for (uint32_t j = 0; j < 2; j++)
			locus_eldr_router_set_load(k.x.r[1], j, k.sn.loads[i][j]);
		assert_int_equal(locus_eldr_route(k.x.r[1], k.sigs + k.slen * req, k.slen, &d), 0);
		assert_int_equal(k.r.decoder[i], d.slot);
		if (prompt[req] < 2)
			assert_int_equal(k.r.decoder[i], prompt[req]);
	}
	eldr_case_free(&k);
}

/* At tau 1 every decoder is in the band (similarities in [0, 1]): each pick is a least loaded one. */
static void test_eldr_tau_one_is_least_loaded(void **state)
{
	static const uint16_t prompt[8] = { 0, 0, 0, 0, 0, 1, 0, 0 };
	static struct eldr_case k;
	uint32_t moved = 0;

	(void)state;
	eldr_case_run(&k, prompt, 40, 3, 1.0f, 900, 4);
	for (uint32_t i = 0; i < 40; i++) {
		uint64_t lo = LOCUS_MIN(k.sn.loads[i][0], k.sn.loads[i][1]);

		assert_int_equal(k.sn.loads[i][k.r.decoder[i]], lo);
		moved += k.r.decoder[i] == 1;
	}
	/* almost every prompt is on expert 0, yet decoder 1 takes its share */
	assert_true(moved >= 10);
	eldr_case_free(&k);
}

/* Presets: expert bytes = hidden x moe_intermediate x 3 x 2 (bf16), by hand. */
static void test_presets(void **state)
{
	const struct locus_sim_model *q = locus_sim_model_find("qwen3-30b-a3b");
	const struct locus_sim_model *d = locus_sim_model_find("deepseek-v2-lite");

	(void)state;
	assert_non_null(q);
	assert_non_null(d);
	assert_null(locus_sim_model_find("qwen3"));
	assert_float_equal(locus_sim_expert_bytes(q), 9437184.0, 0);  /* 2048 x 768 x 6 */
	assert_float_equal(locus_sim_expert_bytes(d), 17301504.0, 0); /* 2048 x 1408 x 6 */
	assert_float_equal(q->kv_bytes_per_token, 98304.0, 0);         /* 2 x 48 x 4 x 128 x 2 */
	assert_float_equal(d->kv_bytes_per_token, 31104.0, 0);         /* 576 x 27 x 2 */
	assert_int_equal(d->moe_layers, 26);
	assert_int_equal(d->n_experts, 64);
	assert_true(q->dense_bytes > 1e9 && q->dense_bytes < 4e9);
	assert_true(d->dense_bytes > 1e9 && d->dense_bytes < 4e9);
	assert_float_equal(locus_sim_gpu_find("h100-sxm")->hbm_bytes_per_s, 3.35e12, 0);
	assert_float_equal(locus_sim_gpu_find("mi300x")->hbm_bytes_per_s, 5.3e12, 0);
}

/*
 * On the repository's sample (96 requests, 7 generated tokens each), K=4
 * decoders of B=24 all at t=0 under rr hold the batches eldr_quality's rr
 * forms from one round of K x B (decoder d: requests d, d+4, ..), and
 * every batch decodes its 7 steps together: the distinct pairs per step
 * are eldr_quality's (control/eldr_quality_sim.c, its own counting).
 */
static void test_pairs_equal_eldr_quality(void **state)
{
	struct locus_trace *t = NULL;
	struct locus_error e = { 0 };
	struct locus_sim_arrival *arr;
	struct locus_sim_result r;
	struct qsim q = { 0 };
	struct qfig f;
	struct locus_sim_cfg c;
	uint32_t *seq;

	(void)state;
	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &e), 0);
	assert_int_equal(t->n_requests, 96);
	arr = calloc(96, sizeof(*arr));
	seq = calloc(96, sizeof(*seq));
	assert_non_null(arr);
	assert_non_null(seq);
	for (uint32_t i = 0; i < 96; i++) {
		assert_int_equal(t->reqs[i].gen_len, 7);
		arr[i] = (struct locus_sim_arrival){ .t = 0, .req = i, .gen_len = 7 };
		seq[i] = i;
	}
	c = (struct locus_sim_cfg){ .t = t, .arr = arr, .n = 96, .n_decoders = 4, .batch_cap = 24,
				    .hw = ms_hw, .policy = LOCUS_SIM_RR };
	run(&c, &r);
	assert_int_equal(r.steps, 4 * 7);
	q = (struct qsim){ .t = t, .K = 4, .B = 24, .only = 1u << QPOL_RR };
	q.seen = calloc((size_t)t->n_layers * t->n_experts, sizeof(*q.seen));
	q.batch = calloc(4 * 24, sizeof(*q.batch));
	q.fill = calloc(4, sizeof(*q.fill));
	q.total = calloc((size_t)QPOL_N * 4, sizeof(*q.total));
	assert_true(q.seen && q.batch && q.fill && q.total);
	assert_int_equal(qsim_run(&q, seq, 96, 0, &f), 1);
	assert_true(f.step[QPOL_RR] > 0);
	assert_float_equal((double)r.pairs / r.steps, f.step[QPOL_RR], 1e-9);
	free(q.total);
	free(q.fill);
	free(q.batch);
	free(q.seen);
	locus_sim_result_free(&r);
	free(seq);
	free(arr);
	locus_trace_free(t);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_requests_share_a_step),
		cmocka_unit_test(test_cap_queues_the_second),
		cmocka_unit_test(test_kv_read_and_join_at_boundary),
		cmocka_unit_test(test_rr_jsq_p2c),
		cmocka_unit_test(test_domain_oracle),
		cmocka_unit_test(test_percentile),
		cmocka_unit_test(test_md1_mean_wait),
		cmocka_unit_test(test_seeded),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_eldr_is_the_router),
		cmocka_unit_test(test_eldr_tau_one_is_least_loaded),
		cmocka_unit_test(test_presets),
		cmocka_unit_test(test_pairs_equal_eldr_quality),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
