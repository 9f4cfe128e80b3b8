// SPDX-License-Identifier: MIT
/*
 * Placement generations on two nodes in one process (twonode_harness.c):
 * every DISPATCH message carries the generation its batch was planned
 * under (the table header's, else the source node's channel generation),
 * and a rank that takes part in placement changes (pl_part) is never
 * handed rows of a generation outside its [pl_floor, pl_acked]. From its
 * own node the whole request fails with -LOCUS_ESTALEPLACEMENT; from
 * another node the source rank gets exactly one refusal per batch, which
 * locus_client_rows_in reports as an error, never as rows. Refusals are
 * counted by reason; a rank that takes no part gets everything.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_dispatch.h"
#include "locus_grace.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locus_wire.h"
#include "node_util.h"
#include "twonode_harness.h"

#define T        4        /* tokens of a batch, one expert each */
#define ROWS_OFF 65536

/* Expert e on rank e / 2: ranks 0, 1 on node 0, ranks 2, 3 on node 1. */
static void *grace_table(uint64_t generation, size_t *len)
{
	struct locus_grace_dims d = { .n_layers = L, .n_experts = E, .n_nodes = 2,
				      .gpus_per_node = GPN, .max_replicas = 0, .capacity = 2,
				      .replica_budget = 0 };
	struct locus_grace_view v;
	size_t plen = locus_grace_payload_size(&d);
	uint8_t *blob = calloc(1, 64 + plen);

	memcpy(blob + 64, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, blob + 64, plen, NULL), 0);
	for (int l = 0; l < L; l++) {
		for (int e = 0; e < E; e++) {
			v.primary[l * E + e] = (uint16_t)(e / 2);
			v.expert_load[l * E + e] = 10.0f;
		}
		for (int r = 0; r < 4; r++)
			v.pred_load[l * 4 + r] = 20.0f;
	}
	assert_int_equal(locus_tbl_seal(blob, 64 + plen, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION,
					plen), 0);
	assert_int_equal(locus_tbl_set_generation(blob, 64 + plen, generation), 0);
	*len = 64 + plen;
	return blob;
}

/*
 * Push a GRACE table stored under cluster generation `generation` (0: none)
 * to both nodes; node i's channel generation in gen[i] (may be NULL).
 */
static void push_placement(uint64_t generation, int64_t gen[2])
{
	size_t len;
	void *t = grace_table(generation, &len);

	for (int i = 0; i < 2; i++) {
		int refused;
		int64_t g = tu_push(N[i].inst, NULL, 1, t, len, &refused);

		assert_int_equal(refused, 0);
		assert_true(g > 0);
		if (gen)
			gen[i] = g;
	}
	free(t);
}

/* What a rank taking part in placement changes writes in its control line. */
static void hold_generations(struct locus_client *c, uint64_t floor, uint64_t acked)
{
	struct locus_client_ctl *ctl = (struct locus_client_ctl *)
		((uint8_t *)locus_client_stage(c, NULL) - locus_client_region(c)->buf_off);

	__atomic_store_n(&ctl->pl_floor, floor, __ATOMIC_RELEASE);
	__atomic_store_n(&ctl->pl_acked, acked, __ATOMIC_RELEASE);
	__atomic_store_n(&ctl->pl_part, acked ? 1u : 0u, __ATOMIC_RELEASE);
}

/* Dispatch T tokens, all on expert `expert` (rank expert / 2), as batch `batch`. */
static void dispatch_to(struct locus_client *c, uint16_t expert, uint64_t batch)
{
	uint16_t ex[T];
	float g[T];
	struct locus_client_dispatch_req r = {
		.layer = 0, .top_k = 1, .n_tokens = T, .row_bytes = ROW, .n_experts = E,
		.rows_off = ROWS_OFF, .experts = ex, .gates = g,
	};
	uint8_t *st = locus_client_stage(c, NULL);
	struct locus_error err;

	for (uint32_t t = 0; t < T; t++) {
		ex[t] = expert;
		g[t] = 1.0f;
		memset(st + ROWS_OFF + t * ROW, (int)(t + 1), ROW);
	}
	if (locus_client_dispatch(c, 0, &r, batch, &err))
		fail_msg("dispatch: %s", err.msg);
}

/* The DISPATCH completion of batch at c (nothing else may come first). */
static int32_t dispatch_status(struct locus_client *c, uint64_t batch)
{
	struct locus_desc d;

	tu_wait_desc(c, &d);
	assert_int_equal(d.op, LOCUS_OP_DISPATCH);
	assert_int_equal(d.id, batch);
	return d.status;
}

/* The next delivery at c is batch's ROWS_IN: its placement generation (slot released). */
static uint64_t rows_generation(struct locus_client *c, uint64_t batch)
{
	struct locus_client_rows m;
	struct locus_error err;
	struct locus_desc d;
	uint64_t gen;

	tu_wait_desc(c, &d);
	assert_int_equal(d.op, LOCUS_OP_ROWS_IN);
	if (locus_client_rows_in(c, &d, &m, &err))
		fail_msg("rows_in: %s", err.msg);
	assert_int_equal(m.batch_id, batch);
	assert_int_equal(m.n_rows, T);
	gen = locus_rows_hdr_of((void *)locus_client_inbox(c, &d))->placement_gen;
	locus_client_release_slot(c, d.slot);
	return gen;
}

/* Wait (bounded) until node n's counter reaches want: another thread counts it. */
static void wait_ctr(struct fake_node *n, const char *name, uint32_t elem, uint64_t want)
{
	for (int i = 0; i < 20000 && tn_ctr(n, name, elem) < want; i++)
		tu_nap();
	assert_int_equal(tn_ctr(n, name, elem), want);
}

static struct locus_client *rk[4];

static void attach_ranks(void)
{
	for (int r = 0; r < 4; r++)
		rk[r] = tn_attach(&N[r / GPN], LOCUS_ROLE_RANK, 0, (uint32_t)r);
	/* each node knows the other's ranks from its next load row */
	for (int r = 0; r < 4; r++)
		tn_wait_ranks(rk[r], 0);
}

static void detach_ranks(void)
{
	for (int r = 0; r < 4; r++)
		locus_client_detach(rk[r]);
}

/* ---- tests -------------------------------------------------------------------------- */

/*
 * A table stored under cluster generation 42 makes every tier's rows carry
 * 42; one stored under none, the source node's channel generation.
 */
static void test_rows_carry_the_generation(void **state)
{
	int64_t chan[2];
	uint64_t b = 1;
	(void)state;

	attach_ranks();
	push_placement(42, NULL);
	dispatch_to(rk[0], 0, b);      /* rank 0 itself: in place, before the completion */
	assert_int_equal(rows_generation(rk[0], b), 42);
	assert_int_equal(dispatch_status(rk[0], b), 0);
	dispatch_to(rk[0], 2, ++b);    /* rank 1: the same node */
	assert_int_equal(dispatch_status(rk[0], b), 0);
	assert_int_equal(rows_generation(rk[1], b), 42);
	dispatch_to(rk[0], 6, ++b);    /* rank 3: the other node */
	assert_int_equal(dispatch_status(rk[0], b), 0);
	assert_int_equal(rows_generation(rk[3], b), 42);
	dispatch_to(rk[2], 2, ++b);    /* and back: node 1's rank 2 to node 0's rank 1 */
	assert_int_equal(dispatch_status(rk[2], b), 0);
	assert_int_equal(rows_generation(rk[1], b), 42);

	push_placement(0, chan);
	dispatch_to(rk[0], 2, ++b);
	assert_int_equal(dispatch_status(rk[0], b), 0);
	assert_int_equal(rows_generation(rk[1], b), (uint64_t)chan[0]);
	dispatch_to(rk[0], 6, ++b);
	assert_int_equal(dispatch_status(rk[0], b), 0);
	assert_int_equal(rows_generation(rk[3], b), (uint64_t)chan[0]);
	dispatch_to(rk[2], 2, ++b);
	assert_int_equal(dispatch_status(rk[2], b), 0);
	assert_int_equal(rows_generation(rk[1], b), (uint64_t)chan[1]);
	detach_ranks();
}

/*
 * Ranks of the source's node holding [4, 5]: rows of 4 and 5 delivered,
 * of 3 and 6 the whole request refused (-LOCUS_ESTALEPLACEMENT), counted
 * by reason, nothing delivered. Rank 1 is on another engine than rank 0
 * with two engines a node; rank 0 dispatching to itself is the same GPU's
 * hand-over in place. A rank that takes no part takes everything.
 */
static void test_local_ranks_refuse(void **state)
{
	static const struct { uint64_t gen; int32_t status; int reason; } cases[] = {
		{ 3, -LOCUS_ESTALEPLACEMENT, LOCUS_ENGINE_PLACEMENT_OLD },
		{ 4, 0, -1 },
		{ 5, 0, -1 },
		{ 6, -LOCUS_ESTALEPLACEMENT, LOCUS_ENGINE_PLACEMENT_NEW },
	};
	uint64_t old0 = tn_ctr(&N[0], "rejected_placement", LOCUS_ENGINE_PLACEMENT_OLD);
	uint64_t new0 = tn_ctr(&N[0], "rejected_placement", LOCUS_ENGINE_PLACEMENT_NEW);
	uint64_t b = 100;
	struct locus_desc d;
	(void)state;

	attach_ranks();
	hold_generations(rk[0], 4, 5);
	hold_generations(rk[1], 4, 5);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		push_placement(cases[i].gen, NULL);
		for (uint16_t expert = 0; expert <= 2; expert += 2) {
			struct locus_client *to = rk[expert / 2];

			dispatch_to(rk[0], expert, ++b);
			/* rows in place come before the completion, on the same ring */
			if (!cases[i].status && to == rk[0])
				assert_int_equal(rows_generation(to, b), cases[i].gen);
			assert_int_equal(dispatch_status(rk[0], b), cases[i].status);
			if (cases[i].status) {
				old0 += cases[i].reason == LOCUS_ENGINE_PLACEMENT_OLD;
				new0 += cases[i].reason == LOCUS_ENGINE_PLACEMENT_NEW;
				continue;
			}
			if (to != rk[0])
				assert_int_equal(rows_generation(to, b), cases[i].gen);
		}
		assert_int_equal(tn_ctr(&N[0], "rejected_placement", LOCUS_ENGINE_PLACEMENT_OLD),
				 old0);
		assert_int_equal(tn_ctr(&N[0], "rejected_placement", LOCUS_ENGINE_PLACEMENT_NEW),
				 new0);
	}
	/* nothing of a refused batch reached either rank */
	assert_int_equal(tu_try_desc(rk[0], &d, 50), 0);
	assert_int_equal(tu_try_desc(rk[1], &d, 50), 0);

	/* taking no part: every generation is delivered */
	hold_generations(rk[0], 0, 0);
	hold_generations(rk[1], 0, 0);
	for (uint64_t gen = 3; gen <= 6; gen += 3) {
		push_placement(gen, NULL);
		dispatch_to(rk[0], 2, ++b);
		assert_int_equal(dispatch_status(rk[0], b), 0);
		assert_int_equal(rows_generation(rk[1], b), gen);
	}
	assert_int_equal(tn_ctr(&N[0], "rejected_placement", LOCUS_ENGINE_PLACEMENT_OLD), old0);
	assert_int_equal(tn_ctr(&N[0], "rejected_placement", LOCUS_ENGINE_PLACEMENT_NEW), new0);
	detach_ranks();
}

/*
 * d, polled at c, is the refusal of c's rows of batch by rank of another
 * node: a RESULTS_IN that locus_client_rows_in reports as
 * -LOCUS_ESTALEPLACEMENT naming the rank and the generation, with no rows.
 */
static void check_refusal(struct locus_client *c, const struct locus_desc *dp, uint64_t batch,
			  uint32_t rank, uint64_t gen)
{
	struct locus_desc d = *dp;
	struct locus_client_rows m;
	struct locus_error err;
	char want[64];

	assert_int_equal(d.op, LOCUS_OP_RESULTS_IN);
	assert_int_equal(d.id, batch);
	assert_int_equal(locus_client_rows_in(c, &d, &m, &err), -LOCUS_ESTALEPLACEMENT);
	assert_int_equal(err.code, LOCUS_ESTALEPLACEMENT);
	assert_int_equal(m.batch_id, batch);
	assert_int_equal(m.src_rank, rank);
	assert_int_equal(m.n_rows, 0);
	assert_null(m.rows);
	assert_int_equal(m.slot, d.slot);
	snprintf(want, sizeof(want), "rank %u refused", rank);
	assert_non_null(strstr(err.msg, want));
	snprintf(want, sizeof(want), "generation %llu", (unsigned long long)gen);
	assert_non_null(strstr(err.msg, want));
	locus_client_release_slot(c, d.slot);
}

static void expect_refusal(struct locus_client *c, uint64_t batch, uint32_t rank, uint64_t gen)
{
	struct locus_desc d;

	tu_wait_desc(c, &d);
	check_refusal(c, &d, batch, rank, gen);
}

/*
 * Rank 3 (node 1) holding [4, 5], rows from rank 0 (node 0) through both
 * engines and the transport: 4 and 5 delivered; 3 and 6 dropped at node 1,
 * counted there by reason, and rank 0 gets its DISPATCH completion (the
 * send went) and exactly one refusal. A rank that takes no part takes everything.
 */
static void test_remote_rank_refuses(void **state)
{
	static const struct { uint64_t gen; int reason; } cases[] = {
		{ 3, LOCUS_ENGINE_PLACEMENT_OLD },
		{ 4, -1 },
		{ 5, -1 },
		{ 6, LOCUS_ENGINE_PLACEMENT_NEW },
	};
	uint64_t old1 = tn_ctr(&N[1], "rejected_placement", LOCUS_ENGINE_PLACEMENT_OLD);
	uint64_t new1 = tn_ctr(&N[1], "rejected_placement", LOCUS_ENGINE_PLACEMENT_NEW);
	uint64_t undeliverable = tn_ctr(&N[1], "remote_undeliverable", 0);
	uint64_t b = 200;
	struct locus_desc d;
	(void)state;

	attach_ranks();
	hold_generations(rk[3], 4, 5);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		push_placement(cases[i].gen, NULL);
		dispatch_to(rk[0], 6, ++b);
		if (cases[i].reason < 0) {
			assert_int_equal(dispatch_status(rk[0], b), 0);
			assert_int_equal(rows_generation(rk[3], b), cases[i].gen);
			continue;
		}
		/* the completion and the refusal, in either order */
		tu_wait_desc(rk[0], &d);
		if (d.op == LOCUS_OP_DISPATCH) {
			assert_int_equal(d.status, 0);
			expect_refusal(rk[0], b, 3, cases[i].gen);
		} else {
			check_refusal(rk[0], &d, b, 3, cases[i].gen);
			assert_int_equal(dispatch_status(rk[0], b), 0);
		}
		old1 += cases[i].reason == LOCUS_ENGINE_PLACEMENT_OLD;
		new1 += cases[i].reason == LOCUS_ENGINE_PLACEMENT_NEW;
		wait_ctr(&N[1], "rejected_placement", LOCUS_ENGINE_PLACEMENT_OLD, old1);
		wait_ctr(&N[1], "rejected_placement", LOCUS_ENGINE_PLACEMENT_NEW, new1);
		assert_int_equal(tu_try_desc(rk[0], &d, 50), 0); /* one refusal, no more */
		assert_int_equal(tu_try_desc(rk[3], &d, 5), 0);  /* and no rows */
	}
	assert_int_equal(tn_ctr(&N[1], "remote_undeliverable", 0), undeliverable);

	hold_generations(rk[3], 0, 0);
	for (uint64_t gen = 3; gen <= 6; gen += 3) {
		push_placement(gen, NULL);
		dispatch_to(rk[0], 6, ++b);
		assert_int_equal(dispatch_status(rk[0], b), 0);
		assert_int_equal(rows_generation(rk[3], b), gen);
	}
	assert_int_equal(tn_ctr(&N[1], "rejected_placement", LOCUS_ENGINE_PLACEMENT_OLD), old1);
	assert_int_equal(tn_ctr(&N[1], "rejected_placement", LOCUS_ENGINE_PLACEMENT_NEW), new1);
	detach_ranks();
}

/* A DISPATCH rows message of one row from rank 0 (node 0) to rank 3 (node 1). */
static size_t peer_rows(uint8_t *msg, uint64_t batch, uint64_t gen, uint16_t chunk,
			uint16_t n_chunks)
{
	size_t len = locus_rows_msg_len(1, 1, ROW, 0);
	struct locus_rows_hdr *h = locus_rows_hdr_of(msg);

	memset(msg, 0, len);
	locus_msg_hdr_init((struct locus_msg_hdr *)msg, LOCUS_MSG_DISPATCH,
			   (uint32_t)(len - sizeof(struct locus_msg_hdr)), batch, 0, 3, chunk);
	*h = (struct locus_rows_hdr){
		.magic = LOCUS_ROWS_MAGIC, .layer = 0, .top_k = 1, .n_rows = 1, .row_bytes = ROW,
		.chunk = chunk, .n_chunks = n_chunks, .rows_off = locus_rows_msg_rows_off(1, 1),
		.batch_id = batch, .placement_gen = gen,
	};
	locus_rows_refs(msg)[0] = (struct locus_row_ref){ .token = 0, .kmask = 1 };
	locus_rows_experts(msg, 1)[0] = 6;
	locus_rows_gates(msg, 1, 1)[0] = 1.0f;
	return len;
}

/*
 * locus_engine_remote_recv itself, on node 1's lcore: the two chunks of a
 * batch of generation 6 for rank 3 holding [4, 5] are both refused and
 * counted, and rank 0 hears of it once; the same batch id sent again is a
 * new batch and is refused again, once. Generation 5 is delivered.
 */
static void test_remote_recv_refuses_once(void **state)
{
	struct locus_engine *e;
	static uint8_t msg[4096];
	uint64_t new1 = tn_ctr(&N[1], "rejected_placement", LOCUS_ENGINE_PLACEMENT_NEW);
	uint64_t bad1 = tn_ctr(&N[1], "remote_bad", 0);
	struct locus_desc d;
	size_t len;
	(void)state;

	attach_ranks();
	/* arrivals for rank 3: the engine that owns it (2 engines: engine 1) */
	e = locus_node_engine_at(N[1].node, tn_engines == 2 ? 1 : 0);
	hold_generations(rk[3], 4, 5);
	for (int round = 0; round < 2; round++) {
		__atomic_store_n(&N[1].hold, 1, __ATOMIC_RELEASE);
		while (!__atomic_load_n(&N[1].held, __ATOMIC_ACQUIRE))
			tu_nap();
		for (uint16_t k = 0; k < 2; k++) {
			len = peer_rows(msg, 77, 6, k, 2);
			assert_int_equal(locus_engine_remote_recv(e, 0, msg, len),
					 -LOCUS_ESTALEPLACEMENT);
		}
		__atomic_store_n(&N[1].hold, 0, __ATOMIC_RELEASE);
		new1 += 2;
		assert_int_equal(tn_ctr(&N[1], "rejected_placement", LOCUS_ENGINE_PLACEMENT_NEW),
				 new1);
		expect_refusal(rk[0], 77, 3, 6);
		assert_int_equal(tu_try_desc(rk[0], &d, 50), 0);
		assert_int_equal(tu_try_desc(rk[3], &d, 5), 0);
	}

	__atomic_store_n(&N[1].hold, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&N[1].held, __ATOMIC_ACQUIRE))
		tu_nap();
	len = peer_rows(msg, 78, 5, 0, 1);
	assert_int_equal(locus_engine_remote_recv(e, 0, msg, len), 0);
	__atomic_store_n(&N[1].hold, 0, __ATOMIC_RELEASE);
	tu_wait_desc(rk[3], &d);
	assert_int_equal(d.op, LOCUS_OP_ROWS_IN);
	assert_int_equal(d.id, 78);
	locus_client_release_slot(rk[3], d.slot);
	assert_int_equal(tu_try_desc(rk[0], &d, 20), 0);
	assert_int_equal(tn_ctr(&N[1], "remote_bad", 0), bad1);
	detach_ranks();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows_carry_the_generation),
		cmocka_unit_test(test_local_ranks_refuse),
		cmocka_unit_test(test_remote_rank_refuses),
		cmocka_unit_test(test_remote_recv_refuses_once),
	};
	int failed = cmocka_run_group_tests_name("one engine a node", tests, tn_setup, tn_teardown);

	/* with two engines a node: hand-overs between them, relays, the mux */
	tn_engines = 2;
	return failed + cmocka_run_group_tests_name("two engines a node", tests, tn_setup,
						    tn_teardown);
}
