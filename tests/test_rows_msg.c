// SPDX-License-Identifier: MIT
/*
 * The rows message (locus_dispatch.h) as bytes: the 48-byte rows header
 * with its placement generation at byte 40, a DISPATCH message written
 * field by field and read back through the checks, and the rules of a
 * refusal (COMBINE, LOCUS_ROWS_REFUSED alone, no rows): accepted only so,
 * and no other message without rows. Messages of the previous version are
 * refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "locus_dispatch.h"
#include "locus_wire.h"

#define N_RANKS 8
#define STAGE   65536
#define ROW     64

static uint8_t msg[8192] __attribute__((aligned(64)));

/* A copied rows message of n rows (DISPATCH when top_k, else COMBINE): its length. */
static size_t rows_msg(uint8_t type, uint32_t n, uint16_t top_k, uint64_t gen)
{
	size_t len = locus_rows_msg_len(n, top_k, ROW, 0);
	struct locus_rows_hdr *h = locus_rows_hdr_of(msg);

	memset(msg, 0, sizeof(msg));
	locus_msg_hdr_init((struct locus_msg_hdr *)msg, type,
			   (uint32_t)(len - sizeof(struct locus_msg_hdr)), 9, 1, 2, 0);
	*h = (struct locus_rows_hdr){
		.magic = LOCUS_ROWS_MAGIC, .layer = 3, .top_k = top_k, .n_rows = n,
		.row_bytes = ROW, .n_chunks = 1, .rows_off = locus_rows_msg_rows_off(n, top_k),
		.batch_id = 9, .placement_gen = gen,
	};
	for (uint32_t j = 0; j < n; j++)
		locus_rows_refs(msg)[j] = (struct locus_row_ref){ .token = j, .kmask = 1 };
	return len;
}

/* What a receiving node sends back when a rank refused batch 9's rows of gen. */
static size_t refusal(uint64_t gen)
{
	size_t len = locus_rows_msg_len(0, 0, 0, 0);
	struct locus_rows_hdr *h = locus_rows_hdr_of(msg);

	memset(msg, 0, sizeof(msg));
	locus_msg_hdr_init((struct locus_msg_hdr *)msg, LOCUS_MSG_COMBINE,
			   (uint32_t)(len - sizeof(struct locus_msg_hdr)), 9, 2, 1, 0);
	*h = (struct locus_rows_hdr){
		.magic = LOCUS_ROWS_MAGIC, .layer = 3, .flags = LOCUS_ROWS_REFUSED, .n_chunks = 1,
		.rows_off = locus_rows_msg_rows_off(0, 0), .batch_id = 9, .placement_gen = gen,
	};
	return len;
}

static uint64_t le64_at(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void test_layout(void **state)
{
	(void)state;
	assert_int_equal(sizeof(struct locus_rows_hdr), 48);
	assert_int_equal(offsetof(struct locus_rows_hdr, batch_id), 32);
	assert_int_equal(offsetof(struct locus_rows_hdr, placement_gen), 40);
	assert_int_equal(LOCUS_MSG_VERSION, 2);
	/* header 32 + rows header 48 + one ref 8, experts 4, gates 4: one cache line and a bit */
	assert_int_equal(locus_rows_msg_rows_off(1, 1), 128);
	assert_int_equal(locus_rows_msg_rows_off(0, 0), 128);
	assert_int_equal(locus_rows_msg_len(3, 0, ROW, 0), 128 + 3 * ROW);
}

/* A DISPATCH message's generation lies at byte 72, little-endian, and passes the checks. */
static void test_round_trip(void **state)
{
	uint64_t gen = 0x0102030405060708ull;
	size_t len = rows_msg(LOCUS_MSG_DISPATCH, 3, 2, gen);
	struct locus_msg_hdr m;
	struct locus_rows_hdr h;
	struct locus_error err;
	(void)state;

	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), 0);
	assert_int_equal(le64_at(msg + sizeof(struct locus_msg_hdr) + 40), gen);
	assert_int_equal(msg[4], LOCUS_MSG_VERSION);
	/* read back from private copies, as a receiver does */
	memcpy(&m, msg, sizeof(m));
	memcpy(&h, msg + sizeof(m), sizeof(h));
	assert_int_equal(locus_rows_hdrs_check(&m, &h, len, N_RANKS, STAGE, &err), 0);
	assert_int_equal(h.placement_gen, gen);
	assert_int_equal(h.batch_id, 9);
	assert_int_equal(h.n_rows, 3);
	assert_int_equal(locus_rows_refs_check(&m, &h, locus_rows_refs(msg), STAGE, &err), 0);

	/* a COMBINE carries no generation */
	len = rows_msg(LOCUS_MSG_COMBINE, 3, 0, 0);
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), 0);
	len = rows_msg(LOCUS_MSG_COMBINE, 3, 0, 7);
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), -LOCUS_EPROTO);

	/* the previous layout's version is refused before its header is read */
	len = rows_msg(LOCUS_MSG_DISPATCH, 3, 2, 1);
	msg[4] = 1;
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), -LOCUS_EVERSION);
	/* a message of the 40-byte header's length is short by 8 bytes somewhere */
	len = rows_msg(LOCUS_MSG_DISPATCH, 1, 1, 1);
	assert_true(locus_rows_msg_check(msg, len - 8, N_RANKS, STAGE, &err) < 0);
}

static void test_refusal(void **state)
{
	size_t len = refusal(6);
	struct locus_rows_hdr *h = locus_rows_hdr_of(msg);
	struct locus_msg_hdr *m = (struct locus_msg_hdr *)msg;
	struct locus_error err;
	(void)state;

	assert_int_equal(len, 128);
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), 0);
	assert_int_equal(le64_at(msg + sizeof(*m) + 40), 6);

	/* no rows without the flag */
	h->flags = 0;
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), -LOCUS_ERANGE);
	h->flags = 0;
	h->row_bytes = ROW;
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), -LOCUS_ERANGE);

	/* the flag on a DISPATCH */
	len = refusal(6);
	m->type = LOCUS_MSG_DISPATCH;
	h->top_k = 1;
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), -LOCUS_EPROTO);

	/* the flag with another */
	len = refusal(6);
	h->flags |= LOCUS_ROWS_IN_PLACE;
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), -LOCUS_EPROTO);

	/* a refusal with rows, a row size, or as one chunk of several */
	len = rows_msg(LOCUS_MSG_COMBINE, 1, 0, 6);
	h->flags = LOCUS_ROWS_REFUSED;
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), -LOCUS_ERANGE);
	len = refusal(6);
	h->row_bytes = ROW;
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), -LOCUS_ERANGE);
	len = refusal(6);
	h->n_chunks = 2;
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), -LOCUS_ERANGE);

	/* exactly its length, its rows offset */
	len = refusal(6);
	assert_int_equal(locus_rows_msg_check(msg, len - 64, N_RANKS, STAGE, &err),
			 -LOCUS_ETRUNCATED);
	h->rows_off = 80;
	assert_int_equal(locus_rows_msg_check(msg, len, N_RANKS, STAGE, &err), -LOCUS_ERANGE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_refusal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
