// SPDX-License-Identifier: MIT
/*
 * The client library's expert-parallel helpers against a real node on
 * threads: locus_client_dispatch / locus_client_combine write requests
 * locusd accepts, locus_client_rows_in reads what it delivers (ROWS_IN from
 * every rank, in place on our own, RESULTS_IN back), the DISPATCH
 * completion names its destinations (dests), and bad requests are refused
 * with nothing submitted.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_dispatch.h"
#include "locus_grace.h"
#include "locus_shm.h"
#include "locus_table.h"
#include "node_tables.h"
#include "node_util.h"

#define INST "t-cdisp"
#define ROW  128
#define T    40
#define K    2
#define ROWS_OFF  65536
#define COMB_OFF  131072
#define COMB_ROWS 196608

static char shm_dir[64];
static struct tu_node N;

static const char conf[] =
	"[locusd]\ninstance = " INST "\nclient_slots = 6\nring_size = 64\n"
	"stage_size = 262144\nclient_inbox_slots = 16\ninbox_slot_size = 4096\n"
	"moe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\nmax_batch_tokens = 64\n"
	"table_slot_size = 65536\nload_timeout_ms = 60000\n"
	"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";

#define ctr(name, elem) tu_ctr(N.view.ctrs, name, elem)

static uint8_t row_byte(uint32_t token, uint32_t b)
{
	return (uint8_t)(token * 29 + b * 3 + 1);
}

/* Token t's experts: (t % 8, (t * 3 + 1) % 8), never twice the same. */
static void batch(uint16_t ex[T][K], float g[T][K])
{
	for (uint32_t t = 0; t < T; t++) {
		ex[t][0] = (uint16_t)(t % E);
		ex[t][1] = (uint16_t)((t * 3 + 1) % E);
		if (ex[t][1] == ex[t][0])
			ex[t][1] = (uint16_t)((ex[t][0] + 1) % E);
		g[t][0] = 0.25f + (float)t / 100.0f;
		g[t][1] = 1.0f - g[t][0];
	}
}

static void push_grace(void)
{
	size_t len;
	void *g = grace_table(&len);
	int refused;

	assert_true(tu_push(INST, N.node, 1, g, len, &refused) > 0);
	assert_false(refused);
	free(g);
}

static struct locus_client_dispatch_req dreq(uint16_t ex[T][K], float g[T][K])
{
	return (struct locus_client_dispatch_req){
		.layer = 1, .top_k = K, .n_tokens = T, .row_bytes = ROW, .n_experts = E,
		.rows_off = ROWS_OFF, .experts = &ex[0][0], .gates = &g[0][0],
	};
}

static void test_dispatch_combine_helpers(void **state)
{
	struct locus_client *rk[GPN];
	static uint16_t ex[T][K];
	static float g[T][K];
	static int hits[T][K], back[T][K];
	struct locus_client_dispatch_req r;
	struct locus_error e;
	struct locus_desc d;
	uint64_t got_mask = 0, dests = 0, rows_sent = 0, rows_got = 0;
	uint8_t *st0;
	(void)state;

	memset(hits, 0, sizeof(hits));
	memset(back, 0, sizeof(back));
	for (int i = 0; i < GPN; i++)
		rk[i] = tu_attach(INST, LOCUS_ROLE_RANK, 0, (uint32_t)i);
	push_grace();
	batch(ex, g);
	st0 = locus_client_stage(rk[0], NULL);
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t b = 0; b < ROW; b++)
			st0[ROWS_OFF + t * ROW + b] = row_byte(t, b);
	r = dreq(ex, g);
	if (locus_client_dispatch(rk[0], 0, &r, 77, &e))
		fail_msg("dispatch: %s", e.msg);

	/* rank 0 reads until its completion (posted after every delivery), the others after */
	for (int i = 0; i < GPN; i++) {
		struct locus_client_rows m;
		struct locus_row_ref refs[T];
		uint8_t *st = locus_client_stage(rk[i], NULL);
		uint32_t n = 0;

		for (;;) {
			if (i == 0)
				tu_wait_desc(rk[0], &d);
			else if (!tu_try_desc(rk[i], &d, 50))
				break;
			if (d.op == LOCUS_OP_DISPATCH) {
				assert_int_equal(d.status, 0);
				assert_int_equal(d.id, 77);
				dests = d.dests;
				rows_sent = d.aux;
				assert_int_equal(__builtin_popcountll(dests), d.count);
				break;
			}
			if (locus_client_rows_in(rk[i], &d, &m, &e))
				fail_msg("rank %d: %s", i, e.msg);
			assert_int_equal(m.op, LOCUS_OP_ROWS_IN);
			assert_int_equal(m.src_rank, 0);
			assert_int_equal(m.batch_id, 77);
			assert_int_equal(m.layer, 1);
			assert_int_equal(m.top_k, K);
			assert_int_equal(m.in_place, i == 0);
			assert_int_equal(m.row_bytes, ROW);
			got_mask |= 1ull << i;
			for (uint32_t j = 0; j < m.n_rows; j++) {
				uint32_t t = m.refs[j].token;
				const uint8_t *row = m.rows + (size_t)(m.in_place ? t : j) * ROW;

				assert_true(t < T);
				for (uint32_t b = 0; b < ROW; b++)
					assert_int_equal(row[b], row_byte(t, b));
				for (uint32_t k = 0; k < K; k++) {
					assert_int_equal(m.experts[j * K + k], ex[t][k]);
					assert_true(m.gates[j * K + k] == g[t][k]);
					if (m.refs[j].kmask & (1u << k))
						hits[t][k]++;
				}
				/* the "expert output": the row plus the rank */
				for (uint32_t b = 0; b < ROW; b++)
					st[COMB_ROWS + (n + j) * ROW + b] = (uint8_t)(row[b] + i + 1);
				refs[n + j] = m.refs[j];
			}
			n += m.n_rows;
			rows_got += m.n_rows;
			locus_client_release_slot(rk[i], m.slot);
		}
		if (!n)
			continue;
		struct locus_client_combine_req cq = {
			.layer = 1, .dst_rank = 0, .n_rows = n, .row_bytes = ROW,
			.rows_off = COMB_ROWS, .refs = refs,
		};
		if (locus_client_combine(rk[i], COMB_OFF, &cq, 77, &e))
			fail_msg("rank %d combine: %s", i, e.msg);
		if (i) {
			tu_wait_desc(rk[i], &d);
			assert_int_equal(d.op, LOCUS_OP_COMBINE);
			assert_int_equal(d.status, 0);
		}
	}
	/* the completion's mask is exactly the ranks that got rows */
	assert_int_not_equal(dests, 0);
	assert_int_equal(dests, got_mask);
	assert_int_equal(rows_sent, rows_got);
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t k = 0; k < K; k++)
			assert_int_equal(hits[t][k], 1);

	/* rank 0 takes every result back */
	uint64_t from = 0, rows_back = 0;

	while (rows_back < rows_sent) {
		struct locus_client_rows m;

		tu_wait_desc(rk[0], &d);
		if (d.op == LOCUS_OP_COMBINE) {
			assert_int_equal(d.status, 0);
			continue;
		}
		if (locus_client_rows_in(rk[0], &d, &m, &e))
			fail_msg("results: %s", e.msg);
		assert_int_equal(m.op, LOCUS_OP_RESULTS_IN);
		assert_int_equal(m.batch_id, 77);
		assert_null(m.experts);
		from |= 1ull << m.src_rank;
		for (uint32_t j = 0; j < m.n_rows; j++) {
			uint32_t t = m.refs[j].token;

			for (uint32_t b = 0; b < ROW; b++)
				assert_int_equal(m.rows[j * ROW + b],
						 (uint8_t)(row_byte(t, b) + m.src_rank + 1));
			for (uint32_t k = 0; k < K; k++)
				if (m.refs[j].kmask & (1u << k))
					back[t][k]++;
		}
		rows_back += m.n_rows;
		locus_client_release_slot(rk[0], m.slot);
	}
	assert_int_equal(from, dests);
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t k = 0; k < K; k++)
			assert_int_equal(back[t][k], 1);
	for (int i = 0; i < GPN; i++)
		locus_client_detach(rk[i]);
}

/* Nothing the helpers refuse reaches locusd: dispatch_batches stays where it was. */
static void test_refusals(void **state)
{
	struct locus_client *c;
	static uint16_t ex[T][K];
	static float g[T][K];
	struct locus_client_dispatch_req r;
	struct locus_client_combine_req cq;
	struct locus_client_rows m;
	struct locus_row_ref ref = { .token = 0, .kmask = 0 };
	struct locus_error e;
	struct locus_desc d;
	uint64_t before;
	(void)state;

	c = tu_attach(INST, LOCUS_ROLE_RANK, 0, 1);
	push_grace();
	batch(ex, g);
	before = ctr("dispatch_batches", 0) + ctr("combine_batches", 0);

	r = dreq(ex, g);
	r.top_k = 0;
	assert_int_equal(locus_client_dispatch(c, 0, &r, 1, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "top-k"));
	r = dreq(ex, g);
	ex[3][1] = E; /* one id past the table's experts */
	assert_int_equal(locus_client_dispatch(c, 0, &r, 1, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "token 3: expert id 8 >= 8"));
	batch(ex, g);
	g[5][0] = NAN;
	assert_int_equal(locus_client_dispatch(c, 0, &r, 1, &e), -LOCUS_ENAN);
	batch(ex, g);
	r.rows_off = 0; /* over the request itself */
	assert_int_equal(locus_client_dispatch(c, 64, &r, 1, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "overlap"));
	r = dreq(ex, g);
	r.rows_off = 262144 - 64; /* past the stage */
	assert_int_equal(locus_client_dispatch(c, 0, &r, 1, &e), -LOCUS_ERANGE);
	r = dreq(ex, g);
	assert_int_equal(locus_client_dispatch(c, 4, &r, 1, &e), -LOCUS_ERANGE);
	assert_int_equal(locus_client_dispatch(c, 262144 - 8, &r, 1, &e), -LOCUS_ERANGE);

	cq = (struct locus_client_combine_req){ .layer = 1, .dst_rank = 0, .n_rows = 1,
						.row_bytes = ROW, .rows_off = COMB_ROWS,
						.refs = &ref };
	assert_int_equal(locus_client_combine(c, COMB_OFF, &cq, 1, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "k-slot mask"));
	ref.kmask = 1;
	cq.n_rows = 0;
	assert_int_equal(locus_client_combine(c, COMB_OFF, &cq, 1, &e), -LOCUS_ERANGE);
	cq.n_rows = 1;
	cq.rows_off = COMB_OFF;
	assert_int_equal(locus_client_combine(c, COMB_OFF, &cq, 1, &e), -LOCUS_ERANGE);

	/* nothing came back, nothing was counted */
	assert_int_equal(tu_try_desc(c, &d, 20), 0);
	assert_int_equal(ctr("dispatch_batches", 0) + ctr("combine_batches", 0), before);

	/* a descriptor that names no rows message */
	d = (struct locus_desc){ .op = LOCUS_OP_SIGNATURE_IN };
	assert_int_equal(locus_client_rows_in(c, &d, &m, &e), -EINVAL);
	d = (struct locus_desc){ .op = LOCUS_OP_ROWS_IN, .slot = 99, .off = 0, .len = 64 };
	assert_int_equal(locus_client_rows_in(c, &d, &m, &e), -LOCUS_ERANGE);
	/* an inbox slot holding no rows message (zeroes) */
	d = (struct locus_desc){ .op = LOCUS_OP_ROWS_IN, .slot = 0, .off = 262144, .len = 128 };
	assert_int_equal(locus_client_rows_in(c, &d, &m, &e), -LOCUS_EPROTO);

	/* and a good request still goes through afterwards */
	r = dreq(ex, g);
	assert_int_equal(locus_client_dispatch(c, 0, &r, 5, &e), 0);
	tu_wait_desc(c, &d);
	assert_int_equal(d.op, LOCUS_OP_DISPATCH);
	assert_int_equal(d.id, 5);
	/* ranks 0, 2, 3 are not attached: refused by locusd, and counted */
	assert_int_equal(d.status, -LOCUS_EPEERDOWN);
	assert_int_equal(ctr("dispatch_batches", 0), before + 1);
	locus_client_detach(c);
}

static int setup(void **state)
{
	(void)state;
	return tu_node_start(&N, conf);
}

static int teardown(void **state)
{
	(void)state;
	tu_node_stop(&N);
	return 0;
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-cdisp-test-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	return rmdir(shm_dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dispatch_combine_helpers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
