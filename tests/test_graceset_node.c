// SPDX-License-Identifier: MIT
/*
 * Per-group GRACE placement in a running node (engine and control on
 * threads, clients through the client library, tables pushed through the
 * control socket as locusctl does):
 *
 *  - a rank's DISPATCH is planned with its own EP group's table: two groups
 *    whose tables put the same expert on different ranks, and the rank each
 *    token's row lands on is checked against the source's group;
 *  - groups of different shapes (one rank without replicas beside three
 *    ranks with a replicated expert);
 *  - a set with a missing group, overlapping groups or dims that disagree
 *    with the node is refused, counted by reason, and the placement in use
 *    stays;
 *  - a single GRACE table pushed after a set takes over every rank again;
 *  - atomic replacement: while sets of increasing version are pushed, ranks
 *    of both groups dispatch in turn; each dispatch shows the version of its
 *    group's table, and the versions never go back (group 0 new then group
 *    1 old would).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include "graceset_util.h"
#include "locus_client.h"
#include "locus_dispatch.h"
#include "locus_engine.h"
#include "locus_shm.h"
#include "locus_tblfile.h"
#include "node_util.h"

#define INST "t-gset"
#define NL 2
#define NE 8
#define GPN 4
#define ROW 64
#define NO LOCUS_GRACE_NO_RANK

static char shm_dir[64];
static struct tu_node tn;
static struct locus_client *rk[GPN];

static int setup(void **state)
{
	static const char conf[] =
		"[locusd]\ninstance = " INST "\nclient_slots = 8\nring_size = 64\n"
		"stage_size = 65536\nclient_inbox_slots = 32\ninbox_slot_size = 4096\n"
		"moe_layers = 4\nmoe_experts = 16\nmax_decoders = 4\nmax_batch_tokens = 64\n"
		"table_slot_size = 65536\nload_timeout_ms = 60000\n"
		"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";
	(void)state;

	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-gset-test-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	if (tu_node_start(&tn, conf))
		return -1;
	for (int r = 0; r < GPN; r++)
		rk[r] = tu_attach(INST, LOCUS_ROLE_RANK, 0, (uint32_t)r);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int r = 0; r < GPN; r++)
		locus_client_detach(rk[r]);
	tu_node_stop(&tn);
	return rmdir(shm_dir);
}

static uint64_t ctr(const char *name, uint32_t elem)
{
	return tu_ctr(tn.view.ctrs, name, elem);
}

/* Push on the GRACE channel; returns whether the engine's reader refused it. */
static int push(const void *blob, size_t len)
{
	int refused;

	assert_true(tu_push(INST, tn.node, 1, blob, len, &refused) > 0);
	return refused;
}

/*
 * Rank src dispatches NE tokens at layer 1, token t to expert t (top-1);
 * where[t] gets the rank its row reached. Every token lands exactly once.
 */
static void dispatch_from(uint32_t src, int where[NE])
{
	uint8_t *stage = locus_client_stage(rk[src], NULL);
	struct locus_dispatch_req *rq = (struct locus_dispatch_req *)stage;
	uint16_t *ex = (uint16_t *)(rq + 1);
	float *gates = (float *)((uint8_t *)ex + locus_ids_bytes(NE, 1));
	static uint64_t batch = 1;
	struct locus_desc d, in;
	uint32_t rows = 0;
	int done = 0;

	*rq = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = 1, .top_k = 1,
					   .n_tokens = NE, .row_bytes = ROW, .rows_off = 32768,
					   .batch_id = ++batch };
	for (uint32_t t = 0; t < NE; t++) {
		ex[t] = (uint16_t)t;
		gates[t] = 1.0f;
		memset(stage + 32768 + t * ROW, (int)t, ROW);
		where[t] = -1;
	}
	d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = batch, .off = 0,
				 .len = (uint32_t)locus_dispatch_req_len(NE, 1) };
	assert_int_equal(locus_client_submit(rk[src], &d, 1), 1);
	for (int spins = 0; !done || rows < NE; spins++) {
		int got = 0;

		assert_true(spins < 200000); /* about 10 s of naps */
		for (uint32_t r = 0; r < GPN; r++) {
			struct locus_rows_hdr *h;
			struct locus_row_ref *refs;
			uint8_t *msg;

			if (!tu_try_desc(rk[r], &in, 1))
				continue;
			got = 1;
			if (in.op == LOCUS_OP_DISPATCH) {
				assert_int_equal(r, src);
				assert_int_equal(in.status, 0);
				assert_int_equal(in.id, batch);
				done = 1;
				continue;
			}
			assert_int_equal(in.op, LOCUS_OP_ROWS_IN);
			msg = (uint8_t *)locus_client_inbox(rk[r], &in);
			assert_non_null(msg);
			h = locus_rows_hdr_of(msg);
			refs = locus_rows_refs(msg);
			assert_int_equal(h->batch_id, batch);
			for (uint32_t j = 0; j < h->n_rows; j++) {
				uint32_t t = refs[j].token;

				assert_true(t < NE);
				assert_int_equal(where[t], -1);
				where[t] = (int)r;
				rows++;
			}
			locus_client_release_slot(rk[r], in.slot);
		}
		if (!got)
			tu_nap();
	}
}

static void expect_landing(uint32_t src, const int want[NE])
{
	int where[NE];

	dispatch_from(src, where);
	for (int t = 0; t < NE; t++)
		if (where[t] != want[t])
			fail_msg("rank %u's token for expert %d landed on rank %d, its group's "
				 "table says %d", src, t, where[t], want[t]);
}

/* Group table: expert e on first + pri_off[e] (n ranks), no replicas. */
static void *table_of(uint32_t first, uint32_t n, const int *local, size_t *len)
{
	uint16_t pri[NE], rep[NE];

	for (int e = 0; e < NE; e++) {
		pri[e] = (uint16_t)(first + (uint32_t)local[e] % n);
		rep[e] = NO;
	}
	return gs_table(NL, NE, 1, GPN, 0, pri, rep, len);
}

/* Group 0 = ranks 0,1: expert e on e % 2. Group 1 = ranks 2,3: on 2 + (e + 1) % 2. */
static void *crossed_set(size_t *len)
{
	int a[NE], b[NE];
	struct gs_group g[2] = { { .id = 0, .first = 0, .n = 2 }, { .id = 1, .first = 2, .n = 2 } };

	for (int e = 0; e < NE; e++) {
		a[e] = e % 2;
		b[e] = (e + 1) % 2;
	}
	g[0].blob = table_of(0, 2, a, &g[0].len);
	g[1].blob = table_of(2, 2, b, &g[1].len);
	return gs_set(g, 2, len);
}

static void test_rank_uses_its_group(void **state)
{
	int g0[NE], g1[NE], all[NE];
	size_t len;
	void *set, *one;
	(void)state;

	/* one table for every rank first: expert e on rank e % 4 */
	for (int e = 0; e < NE; e++)
		all[e] = e % 4;
	one = table_of(0, 4, all, &len);
	assert_false(push(one, len));
	assert_int_equal(ctr("grace_groups", 0), 1);
	expect_landing(0, all);
	expect_landing(2, all);

	free(one);
	set = crossed_set(&len);
	assert_false(push(set, len));
	assert_int_equal(ctr("grace_groups", 0), 2);
	for (int e = 0; e < NE; e++) {
		g0[e] = e % 2;
		g1[e] = 2 + (e + 1) % 2;
	}
	/* the same expert, another rank: each source follows its own group */
	for (uint32_t src = 0; src < GPN; src++)
		expect_landing(src, src < 2 ? g0 : g1);
	free(set);

	/* a single table again: every rank back on it */
	one = table_of(0, 4, all, &len);
	assert_false(push(one, len));
	assert_int_equal(ctr("grace_groups", 0), 1);
	expect_landing(1, all);
	expect_landing(3, all);
	free(one);
}

static void test_groups_of_different_shapes(void **state)
{
	struct gs_group g[2] = { { .id = 0, .first = 0, .n = 1 }, { .id = 1, .first = 1, .n = 3 } };
	uint16_t pri[NE], rep[NE * 2];
	int zero[NE] = { 0 }, want[NE];
	size_t len;
	void *set;
	(void)state;

	/* group 0: one rank holds every expert; group 1: three ranks, expert 5 on all three */
	g[0].blob = table_of(0, 1, zero, &g[0].len);
	for (int e = 0; e < NE; e++) {
		pri[e] = (uint16_t)(1 + e % 3);
		rep[e * 2] = rep[e * 2 + 1] = NO;
	}
	rep[5 * 2] = 1;  /* expert 5's primary is rank 3 */
	rep[5 * 2 + 1] = 2;
	g[1].blob = gs_table(NL, NE, 1, GPN, 2, pri, rep, &g[1].len);
	set = gs_set(g, 2, &len);
	assert_false(push(set, len));
	free(set);
	assert_int_equal(ctr("grace_groups", 0), 2);
	for (int t = 0; t < NE; t++)
		want[t] = 0;
	expect_landing(0, want); /* everything stays on the source GPU */
	for (uint32_t src = 1; src < GPN; src++) {
		for (int t = 0; t < NE; t++)
			want[t] = 1 + t % 3;
		want[5] = (int)src; /* a copy on the source GPU is used */
		expect_landing(src, want);
	}
}

static void test_bad_sets_refused(void **state)
{
	struct gs_group g[2];
	int a[NE], b[NE], g0[NE], g1[NE];
	uint64_t rej0 = ctr("table_rejected", 1);
	size_t len;
	void *set;
	(void)state;

	for (int e = 0; e < NE; e++) {
		a[e] = e % 2;
		b[e] = (e + 1) % 2;
		g0[e] = e % 2;
		g1[e] = 2 + (e + 1) % 2;
	}
	set = crossed_set(&len);
	assert_false(push(set, len));
	free(set);

	/* missing group: ranks 2..3 in none */
	g[0] = (struct gs_group){ .id = 0, .first = 0, .n = 2 };
	g[0].blob = table_of(0, 2, b, &g[0].len);
	set = gs_set(g, 1, &len);
	assert_true(push(set, len));
	free(set);
	assert_int_equal(ctr("grace_set_refused", LOCUS_GRACESET_MISSING_GROUP - 1), 1);

	/* overlapping groups: ranks 0..2 and 2..3 */
	g[0] = (struct gs_group){ .id = 0, .first = 0, .n = 3 };
	g[1] = (struct gs_group){ .id = 1, .first = 2, .n = 2 };
	g[0].blob = table_of(0, 3, b, &g[0].len);
	g[1].blob = table_of(2, 2, a, &g[1].len);
	set = gs_set(g, 2, &len);
	assert_true(push(set, len));
	free(set);
	assert_int_equal(ctr("grace_set_refused", LOCUS_GRACESET_OVERLAP - 1), 1);

	/* a set for 2 nodes x 2 GPUs: valid in itself, not this node's dims */
	{
		uint16_t pri[NE], rep[NE];

		for (int e = 0; e < NE; e++) {
			pri[e] = (uint16_t)(e % 2);
			rep[e] = NO;
		}
		g[0] = (struct gs_group){ .id = 0, .first = 0, .n = 2 };
		g[0].blob = gs_table(NL, NE, 2, 2, 0, pri, rep, &g[0].len);
		for (int e = 0; e < NE; e++)
			pri[e] = (uint16_t)(2 + e % 2);
		g[1] = (struct gs_group){ .id = 1, .first = 2, .n = 2 };
		g[1].blob = gs_table(NL, NE, 2, 2, 0, pri, rep, &g[1].len);
	}
	set = gs_set(g, 2, &len);
	assert_true(push(set, len));
	free(set);
	assert_int_equal(ctr("grace_set_refused", LOCUS_GRACESET_DIMS - 1), 1);
	assert_int_equal(ctr("table_rejected", 1), rej0 + 3);
	assert_int_equal(ctr("grace_set_refused", LOCUS_GRACESET_MALFORMED - 1), 0);

	/* the set in use before the refusals still plans every rank */
	assert_int_equal(ctr("grace_groups", 0), 2);
	expect_landing(1, g0);
	expect_landing(3, g1);
}

/* ---- atomic replacement ------------------------------------------------------------ */

#define VERSIONS 120

/*
 * Version v: group 0 (ranks 0,1) puts expert x on rank (v >> x) & 1, group 1
 * (ranks 2,3) on 2 + ((v >> (7 - x)) & 1): one dispatch from a rank reads its
 * group's version back from where the rows land.
 */
static void *versioned_set(uint32_t v, size_t *len)
{
	int a[NE], b[NE];
	struct gs_group g[2] = { { .id = 0, .first = 0, .n = 2 }, { .id = 1, .first = 2, .n = 2 } };

	for (int x = 0; x < NE; x++) {
		a[x] = (int)(v >> x) & 1;
		b[x] = (int)(v >> (7 - x)) & 1;
	}
	g[0].blob = table_of(0, 2, a, &g[0].len);
	g[1].blob = table_of(2, 2, b, &g[1].len);
	return gs_set(g, 2, len);
}

static uint32_t version_seen(uint32_t src)
{
	int where[NE];
	uint32_t v = 0;

	dispatch_from(src, where);
	for (int x = 0; x < NE; x++) {
		if (src < 2) {
			assert_true(where[x] == 0 || where[x] == 1);
			v |= (uint32_t)where[x] << x;
		} else {
			assert_true(where[x] == 2 || where[x] == 3);
			v |= (uint32_t)(where[x] - 2) << (7 - x);
		}
	}
	return v;
}

static volatile int pusher_done;

static void *pusher(void *arg)
{
	(void)arg;
	for (uint32_t v = 1; v <= VERSIONS; v++) {
		size_t len;
		void *set = versioned_set(v, &len);
		int refused;

		tu_push(INST, tn.node, 1, set, len, &refused);
		free(set);
		if (refused)
			break;
	}
	__atomic_store_n(&pusher_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_atomic_replacement(void **state)
{
	uint32_t last = 0, n = 0, changes = 0;
	pthread_t th;
	size_t len;
	void *set = versioned_set(0, &len);
	(void)state;

	assert_false(push(set, len));
	free(set);
	pusher_done = 0;
	pthread_create(&th, NULL, pusher, NULL);
	for (;;) {
		int finished = __atomic_load_n(&pusher_done, __ATOMIC_ACQUIRE);
		uint32_t src = (n++ % 2) ? 2 + n % 2 : n % 2, v = version_seen(src);

		if (v < last)
			fail_msg("dispatch %u from rank %u planned with version %u after "
				 "version %u was seen: a mixed set", n, src, v, last);
		assert_true(v <= VERSIONS);
		changes += v != last;
		last = v;
		if (finished && v == VERSIONS)
			break;
		assert_true(!finished || n < 1000000);
	}
	pthread_join(th, NULL);
	fprintf(stderr, "atomic replacement: %u dispatches saw %u version changes up to %u\n",
		n, changes, last);
	assert_int_equal(last, VERSIONS);
	assert_int_equal(ctr("grace_groups", 0), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rank_uses_its_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_groups_of_different_shapes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_sets_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_atomic_replacement, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
