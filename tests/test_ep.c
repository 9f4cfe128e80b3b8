// SPDX-License-Identifier: MIT
/*
 * The expert-parallel collective (locus_ep.h). Its pure parts alone: the
 * control row's encoding and its check of every field a peer wrote, the
 * (source, token) order. Then the group on a real node, four ranks on
 * threads: dispatch with slots that select nothing, every selected pair
 * received once with its row, id and gate, the handle's slices; combine
 * summed at the source against the sums computed here; and one rank whose
 * combine input does not fit its stage range failing the batch on all four
 * within a second although each waits 30 s at most; a time-out likewise;
 * the receive bound set between batches; a rank refusing a batch failing
 * it on all four at once.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_ep.h"
#include "locus_shm.h"
#include "locus_weights.h"
#include "node_tables.h"
#include "node_util.h"

#define INST  "t-ep"
#define T     24
#define K     2
#define HID   32              /* floats per row */
#define ROW   (HID * 4)

static char shm_dir[64];
static struct tu_node N;

static const char conf[] =
	"[locusd]\ninstance = " INST "\nclient_slots = 6\nring_size = 64\n"
	"stage_size = 262144\nclient_inbox_slots = 16\ninbox_slot_size = 4096\n"
	"moe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\nmax_batch_tokens = 64\n"
	"table_slot_size = 65536\nload_timeout_ms = 60000\n"
	"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";

/* ---- pure parts -------------------------------------------------------------------- */

static void test_ctl_encoding(void **state)
{
	struct locus_ep_ctl c;
	struct locus_error e;
	uint64_t id = locus_ep_ctl_id(LOCUS_EP_CTL_ABORT, 42);
	(void)state;

	locus_ep_ctl_build(&c, LOCUS_EP_CTL_ABORT, 2, 4, 42, -LOCUS_ERANGE, 0,
			   "rank 2: y does not fit\n\x01");
	assert_true(locus_ep_ctl_is(id));
	assert_false(locus_weights_is(id));
	assert_false(locus_ep_ctl_is(42));
	assert_false(locus_ep_ctl_is(LOCUS_WEIGHTS_TAG | 42));
	assert_int_not_equal(id, locus_ep_ctl_id(LOCUS_EP_CTL_EMPTY, 42));
	/* what cannot be printed is replaced, never sent */
	assert_string_equal(c.reason, "rank 2: y does not fit??");
	assert_int_equal(locus_ep_ctl_check(&c, sizeof(c), id, 2, 4, &e), 0);
	assert_int_equal(c.batch, 42);
	locus_ep_ctl_build(&c, LOCUS_EP_CTL_EMPTY, 0, 4, 7, 0, 12, NULL);
	assert_int_equal(locus_ep_ctl_check(&c, sizeof(c), locus_ep_ctl_id(LOCUS_EP_CTL_EMPTY, 7),
					    0, 4, &e), 0);
	assert_int_equal(c.n_tokens, 12);
	assert_string_equal(c.reason, "");
}

static void test_ctl_refusals(void **state)
{
	uint64_t id = locus_ep_ctl_id(LOCUS_EP_CTL_ABORT, 9);
	struct locus_ep_ctl good, c;
	struct locus_error e;
	(void)state;

	locus_ep_ctl_build(&good, LOCUS_EP_CTL_ABORT, 1, 4, 9, -ETIMEDOUT, 0, "late");
#define REFUSED(mutate, row_bytes, id_, src, n)                                         \
	do {                                                                            \
		c = good;                                                               \
		mutate;                                                                 \
		assert_int_equal(locus_ep_ctl_check(&c, row_bytes, id_, src, n, &e),    \
				 -LOCUS_EPROTO);                                        \
	} while (0)
	REFUSED((void)0, sizeof(c) - 1, id, 1, 4);               /* size */
	REFUSED(c.magic ^= 1, sizeof(c), id, 1, 4);              /* magic */
	REFUSED(c.kind = 3, sizeof(c), id, 1, 4);                /* kind */
	REFUSED(c.batch = 10, sizeof(c), id, 1, 4);              /* batch against its id */
	REFUSED((void)0, sizeof(c), locus_ep_ctl_id(LOCUS_EP_CTL_EMPTY, 9), 1, 4); /* kind/id */
	REFUSED((void)0, sizeof(c), 9, 1, 4);                    /* not a control id */
	REFUSED((void)0, sizeof(c), id, 2, 4);                   /* another sender */
	REFUSED((void)0, sizeof(c), id, 1, 8);                   /* another group */
	REFUSED(c.reserved = 1, sizeof(c), id, 1, 4);
	REFUSED(c.code = 5, sizeof(c), id, 1, 4);                /* positive code */
	REFUSED(c.code = -(LOCUS_E_END + 5), sizeof(c), id, 1, 4); /* no such code */
	REFUSED(c.code = INT32_MIN, sizeof(c), id, 1, 4);
	REFUSED(memset(c.reason, 'a', sizeof(c.reason)), sizeof(c), id, 1, 4); /* no NUL */
	REFUSED(c.reason[0] = '\n', sizeof(c), id, 1, 4);        /* not printable */
	c = good;
	c.kind = LOCUS_EP_CTL_EMPTY;
	c.code = -EIO; /* an EMPTY carries no code */
	assert_int_equal(locus_ep_ctl_check(&c, sizeof(c), locus_ep_ctl_id(LOCUS_EP_CTL_EMPTY, 9),
					    1, 4, &e), -LOCUS_EPROTO);
	c = good;
	assert_int_equal(locus_ep_ctl_check(&c, sizeof(c), id, 1, 4, &e), 0);
}

static void test_rows_order(void **state)
{
	struct locus_ep_row r[64];
	uint32_t seed = 7;
	(void)state;

	for (uint32_t i = 0; i < 64; i++) {
		seed = seed * 1103515245u + 12345u;
		r[i] = (struct locus_ep_row){ .src = seed >> 28 & 3, .token = i, .msg = i, .j = i };
	}
	locus_ep_rows_sort(r, 64);
	for (uint32_t i = 1; i < 64; i++)
		assert_true(r[i - 1].src < r[i].src ||
			    (r[i - 1].src == r[i].src && r[i - 1].token < r[i].token));
	for (uint32_t i = 0; i < 64; i++)
		assert_int_equal(r[i].msg, r[i].token); /* the row's place travels with it */
	locus_ep_rows_sort(r, 0);
}

/* ---- the group on a node ------------------------------------------------------------ */

struct rank {
	int r;
	struct locus_client *c;
	struct locus_ep *ep;
	int64_t idx[T][K];
	float gate[T][K];
	float x[T][HID];
	float out[T][HID];
	int ret_dispatch, ret_combine;
	uint64_t batch;
	struct locus_ep_recv recv;
	struct locus_ep_handle *h;
	float *rx, *rw;
	int64_t *ri;
	uint64_t ns;
	struct locus_error err;
	uint64_t y_len;
};

static struct rank R[GPN];

static float xval(int r, int t, int i)
{
	return (float)(r * 1000 + t * 10 + i % 7) / 64.0f;
}

/* Expert e's output: its input scaled by e + 1. */
static float expert_scale(int64_t e)
{
	return (float)(e + 1);
}

static void rank_setup(struct rank *k, int r, uint64_t y_len, uint32_t timeout_ms)
{
	struct locus_ep_params p = {
		.rank = (uint32_t)r, .n_ranks = GPN, .x_off = 0, .x_len = 65536,
		.y_off = 65536, .y_len = y_len, .req_off = 131072, .req_len = 65536,
		.max_tokens = T, .timeout_ms = timeout_ms,
	};
	struct locus_error e;

	memset(k, 0, sizeof(*k));
	k->r = r;
	k->y_len = y_len;
	k->c = tu_attach(INST, LOCUS_ROLE_RANK, 0, (uint32_t)r);
	if (locus_ep_create(k->c, &p, &k->ep, &e))
		fail_msg("ep create: %s", e.msg);
	for (int t = 0; t < T; t++) {
		for (int i = 0; i < HID; i++)
			k->x[t][i] = xval(r, t, i);
		k->idx[t][0] = (t + r) % E;
		k->idx[t][1] = (t * 3 + r + 1) % E == k->idx[t][0] ? (k->idx[t][0] + 1) % E
								    : (t * 3 + r + 1) % E;
		k->gate[t][0] = 0.25f + (float)t / 100.0f;
		k->gate[t][1] = 0.75f - (float)t / 100.0f;
		if (t % 5 == 3)
			k->idx[t][1] = -1;  /* selects nothing */
		if (t == 7)
			k->idx[t][0] = k->idx[t][1] = -1;
	}
	k->idx[T - 1][0] = k->idx[T - 1][1] = -1; /* trailing padding */
}

static void *rank_dispatch(void *arg)
{
	struct rank *k = arg;
	struct locus_ep_dispatch_args a = {
		.layer = 1, .top_k = K, .n_tokens = T, .row_bytes = ROW, .n_experts = E,
		.x = k->x, .topk_idx = &k->idx[0][0], .topk_weights = &k->gate[0][0],
	};
	struct locus_ep_recv_out o;
	int64_t b = locus_ep_dispatch_begin(k->ep, &a, &k->err);

	if (b < 0) {
		k->ret_dispatch = (int)b;
		return NULL;
	}
	k->batch = (uint64_t)b;
	k->ret_dispatch = locus_ep_dispatch_wait(k->ep, &k->recv, &k->err);
	if (k->ret_dispatch < 0)
		return NULL;
	k->ret_dispatch = 0;
	k->rx = malloc((size_t)(k->recv.n_recv + 1) * ROW);
	k->ri = malloc((size_t)(k->recv.n_recv + 1) * K * sizeof(int64_t));
	k->rw = malloc((size_t)(k->recv.n_recv + 1) * K * sizeof(float));
	o = (struct locus_ep_recv_out){ .recv_x = k->rx, .recv_idx = k->ri, .recv_weights = k->rw };
	if (locus_ep_dispatch_end(k->ep, &o, &k->h, &k->err) < 0)
		k->ret_dispatch = -1;
	return NULL;
}

static void *rank_combine(void *arg)
{
	struct rank *k = arg;
	struct locus_ep_handle_info hi;
	struct locus_ep_combine_args a = { .dtype = LOCUS_EP_F32, .hidden = HID, .out = k->out };
	float *y;
	uint64_t t0;

	locus_ep_handle_info(k->h, &hi);
	y = calloc((size_t)hi.n_recv + 1, ROW);
	for (uint32_t i = 0; i < hi.n_recv; i++)
		for (int j = 0; j < K; j++)
			if (k->ri[i * K + j] >= 0)
				for (int q = 0; q < HID; q++)
					y[i * HID + q] += k->rw[i * K + j] *
							  expert_scale(k->ri[i * K + j]) *
							  k->rx[i * HID + q];
	a.y = y;
	t0 = tu_now_ns();
	k->ret_combine = locus_ep_combine(k->ep, k->h, &a, &k->err);
	if (k->ret_combine > 0)
		k->ret_combine = 0;
	k->ns = tu_now_ns() - t0;
	free(y);
	return NULL;
}

static void on_ranks(void *(*fn)(void *))
{
	pthread_t th[GPN];

	for (int r = 0; r < GPN; r++)
		assert_int_equal(pthread_create(&th[r], NULL, fn, &R[r]), 0);
	for (int r = 0; r < GPN; r++)
		pthread_join(th[r], NULL);
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

static void ranks_free(void)
{
	for (int r = 0; r < GPN; r++) {
		locus_ep_handle_free(R[r].h);
		locus_ep_destroy(R[r].ep);
		locus_client_detach(R[r].c);
		free(R[r].rx);
		free(R[r].ri);
		free(R[r].rw);
	}
}

static void test_group(void **state)
{
	static int seen[GPN][T][K];
	(void)state;

	for (int r = 0; r < GPN; r++)
		rank_setup(&R[r], r, 65536, 10000);
	push_grace();
	memset(seen, 0, sizeof(seen));
	on_ranks(rank_dispatch);
	for (int r = 0; r < GPN; r++) {
		struct rank *k = &R[r];
		struct locus_ep_handle_info hi;

		if (k->ret_dispatch)
			fail_msg("rank %d dispatch: %d %s", r, k->ret_dispatch, k->err.msg);
		assert_int_equal(k->batch, 1);
		locus_ep_handle_info(k->h, &hi);
		assert_int_equal(hi.n_recv, k->recv.n_recv);
		for (uint32_t s = 0, at = 0; s < GPN; s++) {
			assert_int_equal(hi.src_start[s] * !!hi.src_count[s], at * !!hi.src_count[s]);
			at += hi.src_count[s];
			for (uint32_t i = hi.src_start[s]; i < hi.src_start[s] + hi.src_count[s]; i++) {
				uint32_t t = hi.refs[i].token;

				if (i > hi.src_start[s])
					assert_true(hi.refs[i - 1].token < t); /* by token */
				assert_true(t < T);
				assert_memory_equal(k->rx + (size_t)i * HID, R[s].x[t], ROW);
				for (int j = 0; j < K; j++) {
					if (k->ri[i * K + j] < 0) {
						assert_true(k->rw[i * K + j] == 0.0f);
						continue;
					}
					assert_int_equal(k->ri[i * K + j], R[s].idx[t][j]);
					assert_true(k->rw[i * K + j] == R[s].gate[t][j]);
					assert_int_equal(primary_of((int)R[s].idx[t][j]) == (uint16_t)r ||
							 R[s].idx[t][j] == 5, 1);
					seen[s][t][j]++;
				}
			}
		}
	}
	for (int s = 0; s < GPN; s++)
		for (int t = 0; t < T; t++)
			for (int j = 0; j < K; j++)
				assert_int_equal(seen[s][t][j], R[s].idx[t][j] >= 0);
	on_ranks(rank_combine);
	for (int r = 0; r < GPN; r++) {
		struct rank *k = &R[r];

		if (k->ret_combine)
			fail_msg("rank %d combine: %d %s", r, k->ret_combine, k->err.msg);
		for (int t = 0; t < T; t++)
			for (int i = 0; i < HID; i++) {
				float want = 0;

				for (int j = 0; j < K; j++)
					if (k->idx[t][j] >= 0)
						want += k->gate[t][j] * expert_scale(k->idx[t][j]) *
							k->x[t][i];
				assert_float_equal(k->out[t][i], want, 1e-3);
			}
	}
	ranks_free();
}

static void test_abort(void **state)
{
	struct locus_ep_status st;
	(void)state;

	/* rank 2's combine range holds 4 rows: what it received does not fit */
	for (int r = 0; r < GPN; r++)
		rank_setup(&R[r], r, r == 2 ? 4 * ROW : 65536, 30000);
	push_grace();
	on_ranks(rank_dispatch);
	for (int r = 0; r < GPN; r++)
		if (R[r].ret_dispatch)
			fail_msg("rank %d dispatch: %s", r, R[r].err.msg);
	assert_true(R[2].recv.n_recv > 4);
	on_ranks(rank_combine);
	assert_int_equal(R[2].ret_combine, -LOCUS_ERANGE);
	assert_non_null(strstr(R[2].err.msg, "does not fit"));
	for (int r = 0; r < GPN; r++) {
		print_message("rank %d: combine %s after %.2f ms: %s\n", r,
			      R[r].ret_combine ? "failed" : "done", R[r].ns / 1e6, R[r].err.msg);
		locus_ep_status(R[r].ep, &st);
		assert_int_equal(st.fail_batch, 1);
		assert_int_equal(st.fail_rank, 2);
		if (r == 2 || !(R[r].recv.dests >> 2 & 1))
			continue;
		assert_int_equal(R[r].ret_combine, -LOCUS_ERANGE);
		assert_non_null(strstr(R[r].err.msg, "rank 2 aborted batch 1"));
		assert_true(R[r].ns < 1000000000ull);
	}
	/* the group goes on: batch 2 whole on every rank */
	for (int r = 0; r < GPN; r++) {
		locus_ep_handle_free(R[r].h);
		R[r].h = NULL;
		free(R[r].rx);
		free(R[r].ri);
		free(R[r].rw);
		R[r].rx = NULL;
		R[r].ri = NULL;
		R[r].rw = NULL;
		for (int t = 0; t < T; t++)
			R[r].idx[t][0] = R[r].idx[t][1] = r == 2 ? -1 : R[r].idx[t][0];
	}
	on_ranks(rank_dispatch);
	for (int r = 0; r < GPN; r++) {
		if (R[r].ret_dispatch)
			fail_msg("rank %d dispatch: %s", r, R[r].err.msg);
		assert_int_equal(R[r].batch, 2);
	}
	ranks_free();
}

/*
 * Rank 3 is late: rank 0 (a 200 ms bound) times out on batch 1 and fails
 * it on ranks 1 and 2 (30 s bounds) at once; rank 3, coming later, fails
 * batch 1 as it begins it, having sent nothing.
 */
static void test_timeout_aborts(void **state)
{
	pthread_t th[GPN - 1];
	(void)state;

	for (int r = 0; r < GPN; r++)
		rank_setup(&R[r], r, 65536, r == 0 ? 200 : 30000);
	push_grace();
	for (int r = 0; r < GPN - 1; r++)
		assert_int_equal(pthread_create(&th[r], NULL, rank_dispatch, &R[r]), 0);
	for (int r = 0; r < GPN - 1; r++)
		pthread_join(th[r], NULL);
	for (int r = 0; r < GPN - 1; r++) {
		print_message("rank %d: %s\n", r, R[r].err.msg);
		assert_int_equal(R[r].ret_dispatch, -ETIMEDOUT);
		if (r)
			assert_non_null(strstr(R[r].err.msg, "rank 0 aborted batch 1"));
	}
	assert_non_null(strstr(R[0].err.msg, "did not complete within 0.2 s"));
	tu_nap();
	rank_dispatch(&R[3]);
	print_message("rank 3: %s\n", R[3].err.msg);
	assert_int_equal(R[3].ret_dispatch, -ETIMEDOUT);
	assert_non_null(strstr(R[3].err.msg, "rank 0 aborted batch 1"));
	ranks_free();
}

/*
 * The receive bound set between batches (the low-latency mode's): a bound
 * below a rank's tokens refuses its dispatch before anything is sent and
 * takes no batch; the bound cannot change while a dispatch runs; raised
 * again, the group dispatches batch 1 whole.
 */
static void *rank_dispatch_rest(void *arg)
{
	struct rank *k = arg;
	struct locus_ep_recv_out o;

	k->ret_dispatch = locus_ep_dispatch_wait(k->ep, &k->recv, &k->err);
	if (k->ret_dispatch < 0)
		return NULL;
	k->ret_dispatch = 0;
	k->rx = malloc((size_t)(k->recv.n_recv + 1) * ROW);
	o = (struct locus_ep_recv_out){ .recv_x = k->rx };
	if (locus_ep_dispatch_end(k->ep, &o, &k->h, &k->err) < 0)
		k->ret_dispatch = -1;
	return NULL;
}

static void test_set_max_tokens(void **state)
{
	struct locus_ep_dispatch_args a = {
		.layer = 1, .top_k = K, .n_tokens = T, .row_bytes = ROW, .n_experts = E,
	};
	struct locus_ep_status st;
	pthread_t th[GPN];
	int64_t b;
	(void)state;

	for (int r = 0; r < GPN; r++)
		rank_setup(&R[r], r, 65536, 10000);
	push_grace();
	assert_int_equal(locus_ep_set_max_tokens(NULL, 4), -EINVAL);
	assert_int_equal(locus_ep_set_max_tokens(R[0].ep, (1u << 24) + 1), -EINVAL);
	for (int r = 0; r < GPN; r++)
		assert_int_equal(locus_ep_set_max_tokens(R[r].ep, T - 1), 0);
	a.x = R[0].x;
	a.topk_idx = &R[0].idx[0][0];
	a.topk_weights = &R[0].gate[0][0];
	assert_int_equal(locus_ep_dispatch_begin(R[0].ep, &a, &R[0].err), -LOCUS_ERANGE);
	assert_non_null(strstr(R[0].err.msg, "the group's bound is 23 per rank"));
	locus_ep_status(R[0].ep, &st);
	assert_int_equal(st.next_batch, 1);
	for (int r = 0; r < GPN; r++)
		assert_int_equal(locus_ep_set_max_tokens(R[r].ep, T), 0);
	b = locus_ep_dispatch_begin(R[0].ep, &a, &R[0].err);
	assert_int_equal(b, 1);
	assert_int_equal(locus_ep_set_max_tokens(R[0].ep, 0), -EBUSY);
	R[0].batch = 1;
	assert_int_equal(pthread_create(&th[0], NULL, rank_dispatch_rest, &R[0]), 0);
	for (int r = 1; r < GPN; r++)
		assert_int_equal(pthread_create(&th[r], NULL, rank_dispatch, &R[r]), 0);
	for (int r = 0; r < GPN; r++)
		pthread_join(th[r], NULL);
	for (int r = 0; r < GPN; r++) {
		if (R[r].ret_dispatch)
			fail_msg("rank %d dispatch: %d %s", r, R[r].ret_dispatch, R[r].err.msg);
		assert_int_equal(R[r].batch, 1);
		assert_true(R[r].recv.n_recv <= GPN * T);
	}
	assert_int_equal(locus_ep_set_max_tokens(R[0].ep, 0), 0);
	ranks_free();
}

/*
 * Rank 0 refuses batch 1 (its arguments did not fit): ranks 1..3, each
 * waiting 30 s at most, fail batch 1 within a second with rank 0's
 * reason, and the four dispatch batch 2 whole.
 */
static void test_refuse(void **state)
{
	pthread_t th[GPN];
	uint64_t t0;
	(void)state;

	for (int r = 0; r < GPN; r++)
		rank_setup(&R[r], r, 65536, 30000);
	push_grace();
	assert_int_equal(locus_ep_dispatch_refuse(R[0].ep, 0, "no"), -EINVAL);
	assert_int_equal(locus_ep_dispatch_refuse(NULL, -EINVAL, "no"), -EINVAL);
	for (int r = 1; r < GPN; r++)
		assert_int_equal(pthread_create(&th[r], NULL, rank_dispatch, &R[r]), 0);
	usleep(200000); /* they wait for rank 0's rows */
	t0 = tu_now_ns();
	assert_int_equal(locus_ep_dispatch_refuse(R[0].ep, -LOCUS_ERANGE, "x too large"), 1);
	for (int r = 1; r < GPN; r++)
		pthread_join(th[r], NULL);
	print_message("ranks 1..3 failed batch 1 %.2f ms after rank 0 refused it\n",
		      (tu_now_ns() - t0) / 1e6);
	assert_true(tu_now_ns() - t0 < 1000000000ull);
	for (int r = 1; r < GPN; r++) {
		assert_int_equal(R[r].ret_dispatch, -LOCUS_ERANGE);
		assert_non_null(strstr(R[r].err.msg, "rank 0 aborted batch 1: x too large"));
	}
	on_ranks(rank_dispatch);
	for (int r = 0; r < GPN; r++) {
		if (R[r].ret_dispatch)
			fail_msg("rank %d dispatch: %d %s", r, R[r].ret_dispatch, R[r].err.msg);
		assert_int_equal(R[r].batch, 2);
	}
	ranks_free();
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
	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-ep-test-XXXXXX");
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
		cmocka_unit_test(test_ctl_encoding),
		cmocka_unit_test(test_ctl_refusals),
		cmocka_unit_test(test_rows_order),
		cmocka_unit_test_setup_teardown(test_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout_aborts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_set_max_tokens, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refuse, setup, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
