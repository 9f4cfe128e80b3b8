// SPDX-License-Identifier: MIT
/* GRACE table payload: hand-built tables, every rejection path, sealing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "locus_grace_plan.h"
#include "locus_grace_priv.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

#define NR LOCUS_GRACE_NO_RANK

/* 1 layer, 8 experts, 2 nodes x 2 GPUs, 2 replica slots, capacity 3, budget 1 */
struct fixture {
	void *buf;
	size_t len;
	struct locus_grace_view v;
};

static void make_table(struct fixture *f)
{
	struct locus_grace_dims d = {
		.n_layers = 1, .n_experts = 8, .n_nodes = 2, .gpus_per_node = 2,
		.max_replicas = 2, .capacity = 3, .replica_budget = 1,
	};
	static const uint16_t pri[8] = { 0, 0, 1, 1, 2, 2, 3, 3 };
	float pl[4] = { 10, 20, 40, 10 };

	f->len = locus_grace_payload_size(&d);
	assert_true(f->len > 0);
	f->buf = calloc(1, f->len);
	assert_non_null(f->buf);
	memcpy(f->buf, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&f->v, f->buf, f->len, NULL), 0);
	memcpy(f->v.primary, pri, sizeof(pri));
	for (int i = 0; i < 16; i++)
		f->v.replica[i] = NR;
	/* expert 4 (on rank 2) also on ranks 1 and 3 */
	f->v.replica[4 * 2 + 0] = 1;
	f->v.replica[4 * 2 + 1] = 3;
	for (int e = 0; e < 8; e++)
		f->v.expert_load[e] = (float)(e + 1);
	memcpy(f->v.pred_load, pl, sizeof(pl));
}

static void expect_reject(struct fixture *f, int code, const char *needle)
{
	struct locus_error err = { 0 };

	assert_int_equal(locus_grace_validate(&f->v, &err), -code);
	if (!strstr(err.msg, needle))
		fail_msg("message \"%s\" lacks \"%s\"", err.msg, needle);
	free(f->buf);
}

static void test_valid_table_and_weights(void **state)
{
	struct fixture f;
	struct locus_error err = { 0 };
	size_t msz;
	void *mem = NULL;
	(void)state;

	make_table(&f);
	assert_int_equal(locus_grace_validate(&f.v, &err), 0);
	/* layout by hand: 32 + 8*2 + 16*2 = 80, + 8*4 + 4*4 = 128 */
	assert_int_equal(f.len, 128);
	msz = locus_grace_map_size(f.v.dims);
	assert_int_equal(posix_memalign(&mem, 64, msz), 0);
	assert_int_equal(locus_grace_map_build(mem, msz, f.buf, f.len, 7, &err), 0);

	const struct locus_grace_map *m = mem;
	const uint16_t *rk = locus_grace_map_ranks(m) + 4 * 3;
	const uint16_t *w = locus_grace_map_weights(m) + 4 * 3;

	assert_int_equal(locus_grace_map_ncopies(m)[4], 3);
	assert_int_equal(locus_grace_map_ncopies(m)[0], 1);
	assert_int_equal(rk[0], 2);
	assert_int_equal(rk[1], 1);
	assert_int_equal(rk[2], 3);
	/* W' = 40 (rank 2), 20 (rank 1), 10 (rank 3): w = 64 * 10 / W' */
	assert_int_equal(w[0], 16);
	assert_int_equal(w[1], 32);
	assert_int_equal(w[2], 64);
	assert_int_equal(m->generation, 7);
	/* too little memory is refused */
	assert_int_equal(locus_grace_map_build(mem, msz - 1, f.buf, f.len, 7, &err),
			 -LOCUS_ETRUNCATED);
	free(mem);
	free(f.buf);
}

static void test_rank_out_of_range(void **state)
{
	struct fixture f;
	(void)state;

	make_table(&f);
	f.v.primary[5] = 4;
	expect_reject(&f, LOCUS_ERANGE, "topology has 4 GPUs");
}

static void test_replica_on_missing_gpu(void **state)
{
	struct fixture f;
	(void)state;

	make_table(&f);
	f.v.replica[4 * 2 + 1] = 9;
	expect_reject(&f, LOCUS_ERANGE, "replica on rank 9, but the topology has 4 GPUs");
}

/* The planner map of f's expert 4: copies, their ranks and SWRR weights. */
static void map_expert4(struct fixture *f, uint32_t n, const uint16_t *ranks,
			const uint16_t *weights)
{
	struct locus_error err = { 0 };
	size_t msz = locus_grace_map_size(f->v.dims);
	void *mem = NULL;
	const struct locus_grace_map *m;
	uint32_t S = 1 + f->v.dims->max_replicas;

	assert_int_equal(posix_memalign(&mem, 64, msz), 0);
	if (locus_grace_map_build(mem, msz, f->buf, f->len, 1, &err))
		fail_msg("%s", err.msg);
	m = mem;
	assert_int_equal(locus_grace_map_ncopies(m)[4], n);
	assert_memory_equal(locus_grace_map_ranks(m) + 4 * S, ranks, n * sizeof(uint16_t));
	assert_memory_equal(locus_grace_map_weights(m) + 4 * S, weights, n * sizeof(uint16_t));
	free(mem);
}

/*
 * A second copy on the primary's GPU, or a rank listed twice, is one more
 * copy there (EPLB places two copies of one expert on one GPU): accepted,
 * within the replica budget, and the map gives that GPU one slot per copy.
 */
static void test_replica_on_primary_and_order(void **state)
{
	static const uint16_t on_primary[3] = { 2, 2, 3 }, w_on_primary[3] = { 16, 16, 64 };
	static const uint16_t twice[3] = { 2, 3, 3 }, w_twice[3] = { 16, 64, 64 };
	struct locus_error err = { 0 };
	struct fixture f;
	(void)state;

	make_table(&f);
	f.v.replica[4 * 2 + 0] = 2;
	assert_int_equal(locus_grace_validate(&f.v, &err), 0);
	map_expert4(&f, 3, on_primary, w_on_primary);
	free(f.buf);
	make_table(&f);
	f.v.replica[4 * 2 + 0] = 3;
	f.v.replica[4 * 2 + 1] = 3;
	expect_reject(&f, LOCUS_ERANGE, "rank 3 holds more than its replica budget of 1");
	make_table(&f);
	f.v.dims->replica_budget = 2;
	f.v.replica[4 * 2 + 0] = 3;
	f.v.replica[4 * 2 + 1] = 3;
	assert_int_equal(locus_grace_validate(&f.v, &err), 0);
	map_expert4(&f, 3, twice, w_twice);
	free(f.buf);
	make_table(&f);
	f.v.replica[4 * 2 + 0] = 3;
	f.v.replica[4 * 2 + 1] = 1;
	expect_reject(&f, LOCUS_ERANGE, "not ascending");
	make_table(&f);
	f.v.replica[4 * 2 + 0] = NR;
	f.v.replica[4 * 2 + 1] = 1;
	expect_reject(&f, LOCUS_ERANGE, "follows an empty slot");
}

static void test_capacity_and_budget(void **state)
{
	struct fixture f;
	(void)state;

	make_table(&f);
	f.v.primary[2] = 0; /* rank 0: experts 0, 1, 2 = capacity 3, fine */
	assert_int_equal(locus_grace_validate(&f.v, NULL), 0);
	f.v.primary[3] = 0; /* a fourth */
	expect_reject(&f, LOCUS_ERANGE, "rank 0 holds more than its capacity of 3");
	make_table(&f);
	f.v.replica[0 * 2 + 0] = 1; /* rank 1 already holds a replica of expert 4 */
	expect_reject(&f, LOCUS_ERANGE, "rank 1 holds more than its replica budget of 1");
}

static void test_lost_expert_and_nan(void **state)
{
	struct fixture f;
	(void)state;

	make_table(&f);
	f.v.primary[6] = NR;
	expect_reject(&f, LOCUS_ERANGE, "expert 6 has no GPU");
	make_table(&f);
	f.v.pred_load[2] = NAN;
	expect_reject(&f, LOCUS_ENAN, "predicted rank load of layer 0 index 2");
	make_table(&f);
	f.v.expert_load[3] = INFINITY;
	expect_reject(&f, LOCUS_ENAN, "expert load");
	make_table(&f);
	f.v.expert_load[3] = -1;
	expect_reject(&f, LOCUS_ERANGE, "negative");
}

static void test_dims_and_size(void **state)
{
	struct fixture f;
	struct locus_grace_view v;
	struct locus_error err = { 0 };
	struct locus_grace_dims *d;
	(void)state;

	make_table(&f);
	assert_int_equal(locus_grace_view_init(&v, f.buf, f.len - 4, &err), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_grace_view_init(&v, f.buf, 16, &err), -LOCUS_ETRUNCATED);
	d = f.buf;
	d->capacity = 1; /* 1 x 4 ranks < 8 experts */
	assert_int_equal(locus_grace_view_init(&v, f.buf, f.len, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "cannot hold 8 experts"));
	d->capacity = 3;
	d->max_replicas = 64; /* a primary and 63 copies at most */
	assert_int_equal(locus_grace_view_init(&v, f.buf, f.len, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "max_replicas 64 must be <= 63"));
	d->max_replicas = 4; /* as many as the ranks: several copies on one GPU */
	assert_int_equal(locus_grace_dims_check(d, &err), 0);
	d->max_replicas = 2;
	d->reserved = 1;
	assert_int_equal(locus_grace_view_init(&v, f.buf, f.len, &err), -LOCUS_ERANGE);
	d->reserved = 0;
	d->n_experts = 0;
	assert_int_equal(locus_grace_view_init(&v, f.buf, f.len, &err), -LOCUS_ERANGE);
	d->n_experts = 8;
	d->gpus_per_node = 0;
	assert_int_equal(locus_grace_view_init(&v, f.buf, f.len, &err), -LOCUS_ERANGE);
	d->gpus_per_node = 2;
	assert_int_equal(locus_grace_view_init(&v, f.buf, f.len, &err), 0);
	free(f.buf);
}

static void test_group_map(void **state)
{
	uint16_t pri[6];
	struct locus_error err = { 0 };
	uint32_t start[4] = { 0, 2, 4, 6 };
	uint16_t ok[6] = { 5, 0, 1, 2, 3, 4 };
	uint16_t twice[6] = { 5, 0, 1, 2, 3, 0 };
	uint16_t big[6] = { 5, 0, 1, 2, 3, 6 };
	uint32_t short_start[4] = { 0, 2, 4, 5 };
	(void)state;

	assert_int_equal(locus_grace_groups_to_primary(6, 3, start, ok, pri, &err), 0);
	assert_int_equal(pri[5], 0);
	assert_int_equal(pri[0], 0);
	assert_int_equal(pri[1], 1);
	assert_int_equal(pri[4], 2);
	assert_int_equal(locus_grace_groups_to_primary(6, 3, start, twice, pri, &err),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "places expert 0 twice"));
	assert_int_equal(locus_grace_groups_to_primary(6, 3, start, big, pri, &err),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "expert id 6"));
	assert_int_equal(locus_grace_groups_to_primary(6, 3, short_start, ok, pri, &err),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "5 entries for 6 experts"));
}

static void test_sealed_round_trip(void **state)
{
	struct fixture f;
	struct locus_error err = { 0 };
	const void *pl;
	size_t plen;
	uint8_t *blob;
	(void)state;

	make_table(&f);
	blob = malloc(64 + f.len);
	assert_non_null(blob);
	memcpy(blob + 64, f.buf, f.len);
	assert_int_equal(locus_tbl_seal(blob, 64 + f.len, LOCUS_TBL_GRACE,
					LOCUS_GRACE_KIND_VERSION, f.len), 0);
	assert_int_equal(locus_tbl_check(blob, 64 + f.len, LOCUS_TBL_GRACE, &pl, &plen, &err), 0);
	assert_int_equal(plen, f.len);
	assert_memory_equal(pl, f.buf, f.len);
	assert_int_equal(locus_grace_blob_check(blob, 64 + f.len, &pl, &plen, &err), 0);
	assert_int_equal(locus_grace_table_validate_cb(blob, 64 + f.len, NULL, &err), 0);
	/* a well-sealed blob whose contents are wrong is still refused */
	f.v.primary[0] = 7;
	memcpy(blob + 64, f.buf, f.len);
	assert_int_equal(locus_tbl_seal(blob, 64 + f.len, LOCUS_TBL_GRACE,
					LOCUS_GRACE_KIND_VERSION, f.len), 0);
	assert_int_equal(locus_grace_table_validate_cb(blob, 64 + f.len, NULL, &err),
			 -LOCUS_ERANGE);
	f.v.primary[0] = 0;
	memcpy(blob + 64, f.buf, f.len);
	assert_int_equal(locus_tbl_seal(blob, 64 + f.len, LOCUS_TBL_GRACE, 2, f.len), 0);
	assert_int_equal(locus_grace_blob_check(blob, 64 + f.len, NULL, NULL, &err),
			 -LOCUS_EVERSION);
	assert_int_equal(locus_tbl_seal(blob, 64 + f.len, LOCUS_TBL_GRACE,
					LOCUS_GRACE_KIND_VERSION, f.len), 0);
	blob[64 + 40] ^= 1;
	assert_int_equal(locus_tbl_check(blob, 64 + f.len, LOCUS_TBL_GRACE, &pl, &plen, &err),
			 -LOCUS_ECRC);
	free(blob);
	free(f.buf);
}

/*
 * Random corruption of a valid payload: validation either refuses it or the
 * table it accepts builds a map whose every copy is a real rank.
 */
static void test_corruption_never_crashes(void **state)
{
	uint64_t x = 0x1234567887654321ull;
	int accepted = 0;
	(void)state;

	for (int round = 0; round < 3000; round++) {
		struct fixture f;
		struct locus_error err = { 0 };
		uint8_t *b;
		int n;

		make_table(&f);
		b = f.buf;
		n = 1 + round % 4;
		for (int i = 0; i < n; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			/* mostly the arrays; sometimes the dims too */
			size_t at = (round % 10 == 0) ? x % f.len : 32 + x % (f.len - 32);

			b[at] = (uint8_t)(x >> 32);
		}
		if (locus_grace_view_init(&f.v, f.buf, f.len, &err) == 0 &&
		    locus_grace_validate(&f.v, &err) == 0) {
			size_t msz = locus_grace_map_size(f.v.dims);
			void *mem = NULL;

			accepted++;
			assert_int_equal(posix_memalign(&mem, 64, msz), 0);
			assert_int_equal(locus_grace_map_build(mem, msz, f.buf, f.len, 1, &err), 0);
			const struct locus_grace_map *m = mem;
			size_t le = (size_t)m->dims.n_layers * m->dims.n_experts;

			for (size_t i = 0; i < le; i++) {
				uint32_t c = locus_grace_map_ncopies(m)[i];

				assert_true(c >= 1 && c <= m->n_slots);
				for (uint32_t j = 0; j < c; j++) {
					assert_true(locus_grace_map_ranks(m)[i * m->n_slots + j] <
						    m->n_ranks);
					assert_true(locus_grace_map_weights(m)[i * m->n_slots + j] >=
						    1);
				}
			}
			free(mem);
		} else {
			assert_true(err.msg[0] != '\0');
		}
		free(f.buf);
	}
	/* some mutations (a load changed, a replica moved) are still valid */
	assert_true(accepted > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_table_and_weights),
		cmocka_unit_test(test_rank_out_of_range),
		cmocka_unit_test(test_replica_on_missing_gpu),
		cmocka_unit_test(test_replica_on_primary_and_order),
		cmocka_unit_test(test_capacity_and_budget),
		cmocka_unit_test(test_lost_expert_and_nan),
		cmocka_unit_test(test_dims_and_size),
		cmocka_unit_test(test_group_map),
		cmocka_unit_test(test_sealed_round_trip),
		cmocka_unit_test(test_corruption_never_crashes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
