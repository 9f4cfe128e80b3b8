// SPDX-License-Identifier: MIT
/*
 * Two nodes in one process (twonode_harness.c): the one-sided decoder load
 * rows between them (a row that stops moving makes its decoders stale,
 * torn and malformed rows are skipped and counted with the last good state
 * kept, a decoder no longer listed leaves at once), and attachment order (a
 * client is told attached only once its engine serves it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_crc32c.h"
#include "locus_dispatch.h"
#include "locus_eldr.h"
#include "locus_grace.h"
#include "locus_node.h"
#include "locus_shm.h"
#include "locus_table.h"
#include "locus_tblfile.h"
#include "locus_wire.h"
#include "node_util.h"
#include "twonode_harness.h"

struct attach_arg {
	struct fake_node *n;
	struct locus_client *c;
	int done;
};

static void *attach_thread(void *arg)
{
	struct attach_arg *a = arg;

	a->c = tn_attach(a->n, LOCUS_ROLE_RANK, 0, 2);
	__atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * A client is told it is attached only once the engine serves its slot:
 * otherwise rows a peer node sends it at once would find no receiver (and
 * be dropped after the sender was told OK).
 */
static void test_attach_waits_for_engine(void **state)
{
	struct attach_arg a = { .n = &N[1] };
	pthread_t th;
	(void)state;

	__atomic_store_n(&N[1].hold, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&N[1].held, __ATOMIC_ACQUIRE))
		tu_nap();
	assert_int_equal(pthread_create(&th, NULL, attach_thread, &a), 0);
	for (int i = 0; i < 500; i++)
		tu_nap(); /* 100 ms: control has long answered the claim */
	assert_int_equal(__atomic_load_n(&a.done, __ATOMIC_ACQUIRE), 0);
	__atomic_store_n(&N[1].hold, 0, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	assert_non_null(a.c);
	locus_client_detach(a.c);
}

/* Write row (n entries) from node `from` into node 0's area for node 1, sealed. */
static void put_row(uint64_t seq, uint16_t from, uint16_t n, const struct locus_load_entry *ent,
		    int tear)
{
	uint8_t buf[AREA] = { 0 };
	struct locus_load_row *row = (struct locus_load_row *)buf;
	size_t len = locus_load_row_size(n);

	assert_true(len <= AREA);
	row->magic = LOCUS_LOAD_ROW_MAGIC;
	row->seq = seq;
	row->node = from;
	row->n = n;
	row->ranks = LOCUS_LOAD_ROW_RANKS;
	memcpy(row->e, ent, n * sizeof(*ent));
	row->crc = locus_crc32c(buf + 8, len - 8);
	if (tear)
		buf[len - 1] ^= 0x5a; /* the end of the row not written yet */
	memcpy(N[0].load_area, buf, len);
}

/*
 * Node 1's load row in node 0's area: it makes decoder 1 routable on node 0;
 * when it stops moving (node 1 still up) decoder 1 goes stale; torn and
 * malformed rows are counted and change nothing; a good row brings it back.
 */
static void test_load_rows(void **state)
{
	struct locus_client *dec1 = tn_attach(&N[1], LOCUS_ROLE_DECODE, 1, 0);
	struct locus_load_entry ent[2] = { { 1, 9 }, { 0, 0 } };
	uint64_t read0 = tn_ctr(&N[0], "load_rows_read", 1), seq;
	(void)state;

	locus_client_report_load(dec1, 5);
	for (int i = 0; i < 50000 && (tn_ctr(&N[0], "decoder_up", 1) != 1 ||
				      tn_ctr(&N[0], "decoder_load", 1) != 5); i++)
		tu_nap();
	assert_int_equal(tn_ctr(&N[0], "decoder_up", 1), 1);
	assert_int_equal(tn_ctr(&N[0], "decoder_load", 1), 5);
	assert_true(tn_ctr(&N[1], "load_rows_written", 0) > 0);
	assert_true(tn_ctr(&N[0], "load_rows_read", 1) > read0);

	/* the writer stops: its row stops moving, node 1 stays up */
	__atomic_store_n(&N[1].freeze_loads, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 50000 && (tn_ctr(&N[0], "decoder_up", 1) != 0 ||
				      tn_ctr(&N[0], "load_decoders_stale", 0) != 1); i++) {
		locus_client_report_load(dec1, 5); /* the decoder itself is fine */
		tu_nap();
	}
	assert_int_equal(tn_ctr(&N[0], "decoder_up", 1), 0);
	assert_int_equal(tn_ctr(&N[0], "load_decoders_stale", 0), 1);
	assert_int_equal(tn_ctr(&N[0], "decoder_load", 1), 5);
	seq = ((const struct locus_load_row *)N[0].load_area)->seq;

	/* torn: counted, nothing taken */
	read0 = tn_ctr(&N[0], "load_rows_read", 1);
	put_row(seq + 1, 1, 1, ent, 1);
	for (int i = 0; i < 50000 && tn_ctr(&N[0], "load_rows_torn", 1) == 0; i++)
		tu_nap();
	assert_true(tn_ctr(&N[0], "load_rows_torn", 1) > 0);
	/* malformed, each sealed correctly: wrong writer, decoder id out of range, n too big */
	put_row(seq + 2, 0, 1, ent, 0);
	for (int i = 0; i < 50000 && tn_ctr(&N[0], "load_rows_bad", 1) < 1; i++)
		tu_nap();
	ent[1] = (struct locus_load_entry){ 8, 1 }; /* max_decoders is 8 */
	put_row(seq + 3, 1, 2, ent, 0);
	for (int i = 0; i < 50000 && tn_ctr(&N[0], "load_rows_bad", 1) < 2; i++)
		tu_nap();
	assert_true(tn_ctr(&N[0], "load_rows_bad", 1) >= 2);
	put_row(seq + 4, 1, 1, ent, 0);
	((struct locus_load_row *)N[0].load_area)->n = 9; /* more than max_decoders */
	for (int i = 0; i < 50000 && tn_ctr(&N[0], "load_rows_bad", 1) < 3; i++)
		tu_nap();
	assert_true(tn_ctr(&N[0], "load_rows_bad", 1) >= 3);
	assert_int_equal(tn_ctr(&N[0], "load_rows_read", 1), read0);
	assert_int_equal(tn_ctr(&N[0], "decoder_load", 1), 5); /* the last good state */
	assert_int_equal(tn_ctr(&N[0], "decoder_up", 1), 0);

	/* a good row with a new seq: taken, decoder 1 routable with its new load */
	put_row(seq + 5, 1, 1, ent, 0);
	for (int i = 0; i < 50000 && tn_ctr(&N[0], "decoder_load", 1) != 9; i++)
		tu_nap();
	assert_int_equal(tn_ctr(&N[0], "decoder_load", 1), 9);
	assert_int_equal(tn_ctr(&N[0], "load_rows_read", 1), read0 + 1);

	/* the writer resumes: up for good */
	__atomic_store_n(&N[1].freeze_loads, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 50000 && (tn_ctr(&N[0], "decoder_up", 1) != 1 ||
				      tn_ctr(&N[0], "decoder_load", 1) != 5); i++) {
		locus_client_report_load(dec1, 5);
		tu_nap();
	}
	assert_int_equal(tn_ctr(&N[0], "decoder_up", 1), 1);
	assert_int_equal(tn_ctr(&N[0], "load_decoders_stale", 0), 0);

	/* the decoder leaves node 1: the next row no longer lists it; gone, not stale */
	locus_client_detach(dec1);
	for (int i = 0; i < 50000 && tn_ctr(&N[0], "decoder_up", 1) != 0; i++)
		tu_nap();
	assert_int_equal(tn_ctr(&N[0], "decoder_up", 1), 0);
	for (int i = 0; i < 10000; i++) /* 2 s: twice the load timeout */
		tu_nap();
	assert_int_equal(tn_ctr(&N[0], "load_decoders_stale", 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attach_waits_for_engine),
		cmocka_unit_test(test_load_rows),
	};
	return cmocka_run_group_tests(tests, tn_setup, tn_teardown);
}
