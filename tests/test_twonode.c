// SPDX-License-Identifier: MIT
/*
 * Two nodes of one cluster in one process (twonode_harness.c: in-memory
 * transport; the verbs transport is tested for real in the Soft-RoCE VM).
 * Checked: decoder loads reach the other node and make its decoders
 * routable (load rows in detail: test_twonode_load.c); signatures routed to
 * a remote decoder arrive byte for byte and complete once the send
 * completed; a failed send completes the request with an error exactly
 * once; a peer marked down takes its decoders out of routing; dispatch and
 * combine cross nodes with every (token, k) served once and the content
 * intact; malformed remote messages are refused and counted.
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

#include "locus_blocks.h"
#include "locus_client.h"
#include "locus_counters.h"
#include "locus_counters_priv.h"
#include "locus_crc32c.h"
#include "locus_dispatch.h"
#include "locus_eldr.h"
#include "locus_grace.h"
#include "locus_node.h"
#include "locus_shm.h"
#include "locus_table.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locus_wire.h"
#include "node_util.h"
#include "twonode_harness.h"

/* expert e on rank e / 2: ranks 0, 1 on node 0, ranks 2, 3 on node 1 */
static void *grace_table(size_t *len)
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
	*len = 64 + plen;
	return blob;
}

/* Counter name of node n, element elem, in counters block blk alone (0: engine 0, 2: engine 1). */
static uint64_t block_ctr(struct fake_node *n, const char *name, uint32_t blk, uint32_t elem)
{
	static uint64_t buf[1 << 12];
	int idx;

	locus_counters_refresh(n->ctrs, NULL);
	idx = locus_counters_find(n->ctrs, name);
	assert_true(idx >= 0);
	assert_true(locus_counters_read_block(n->ctrs, (uint32_t)idx, blk, buf, 1 << 12) >
		    (int)elem);
	return buf[elem];
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_signatures_cross_nodes(void **state)
{
	struct locus_client *pre = tn_attach(&N[0], LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *dec1 = tn_attach(&N[1], LOCUS_ROLE_DECODE, 1, 0);
	struct locus_desc d, in;
	size_t tlen;
	void *t = tn_eldr_table(&tlen);
	(void)state;

	tn_push_both(0, t, tlen);
	locus_client_report_load(dec1, 2);
	/* node 1's load reports make decoder 1 routable on node 0 */
	for (int i = 0; i < 50000 && (tn_ctr(&N[0], "decoder_up", 1) != 1 ||
				      tn_ctr(&N[0], "decoder_load", 1) != 2); i++)
		tu_nap();
	assert_int_equal(tn_ctr(&N[0], "decoder_up", 1), 1);
	assert_int_equal(tn_ctr(&N[0], "decoder_load", 1), 2);
	for (int i = 0; i < 20; i++) {
		/* leaning to decoder 0's experts: but only decoder 1 is up anywhere */
		size_t len = tn_put_signature(pre, 0, 5 + i % 3, 1);
		const struct locus_msg_hdr *m;

		locus_client_report_load(dec1, 2); /* stay up: the heartbeat */

		d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 500 + i, .off = 0,
					 .len = (uint32_t)len };
		assert_int_equal(locus_client_submit(pre, &d, 1), 1);
		tu_wait_desc(pre, &d);
		assert_int_equal(d.id, 500 + i);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.peer, 1);
		tu_wait_desc(dec1, &in);
		assert_int_equal(in.op, LOCUS_OP_SIGNATURE_IN);
		assert_int_equal(in.id, 500 + i);
		assert_int_equal(in.peer, 0x80000000u);
		m = locus_client_inbox(dec1, &in);
		assert_non_null(m);
		assert_int_equal(m->type, LOCUS_MSG_SIGNATURE);
		assert_int_equal(m->src_rank, 0);
		assert_int_equal(m->dst_rank, 1);
		assert_memory_equal(m + 1, locus_client_stage(pre, NULL), len);
		locus_client_release_slot(dec1, in.slot);
	}
	assert_int_equal(tn_ctr(&N[0], "routed", 1), 20);
	assert_true(tn_ctr(&N[0], "remote_messages_out", 1) >= 20);

	/* the wire fails a send: exactly one error completion */
	__atomic_store_n(&N[0].fail_sends, 1, __ATOMIC_RELEASE);
	d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 777, .off = 0,
				 .len = (uint32_t)tn_put_signature(pre, 0, 1, 6) };
	assert_int_equal(locus_client_submit(pre, &d, 1), 1);
	tu_wait_desc(pre, &d);
	assert_int_equal(d.id, 777);
	assert_int_equal(d.status, -LOCUS_EPEERDOWN);
	assert_false(tu_try_desc(pre, &d, 20));
	assert_false(tu_try_desc(dec1, &in, 5));
	assert_true(tn_ctr(&N[0], "remote_send_errors", 0) >= 1);
	__atomic_store_n(&N[0].fail_sends, 0, __ATOMIC_RELEASE);

	/* the peer goes down: its decoders leave routing, requests fail cleanly */
	__atomic_store_n(&N[0].peer_up, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 50000 && tn_ctr(&N[0], "decoder_up", 1) != 0; i++)
		tu_nap();
	d.id = 778;
	assert_int_equal(locus_client_submit(pre, &d, 1), 1);
	tu_wait_desc(pre, &d);
	assert_int_equal(d.status, -LOCUS_ENODEST);
	/* and come back when it returns */
	__atomic_store_n(&N[0].peer_up, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 50000 && tn_ctr(&N[0], "decoder_up", 1) != 1; i++)
		tu_nap();
	d.id = 779;
	assert_int_equal(locus_client_submit(pre, &d, 1), 1);
	tu_wait_desc(pre, &d);
	assert_int_equal(d.status, 0);
	tu_wait_desc(dec1, &in);
	locus_client_release_slot(dec1, in.slot);
	locus_client_detach(dec1);
	locus_client_detach(pre);
	free(t);
}

/*
 * A ROUTE_BLOCKS to a decoder of the other node: the message that crosses
 * is the summed signature (the cached blocks' counts + the new blocks' +
 * the tail's), byte for byte the whole prompt's, once the blocks were
 * inserted by a first request and named as cached by a second, from
 * another prefiller of the node (with two engines: the node's cache is
 * engine 0's, where both prefillers are).
 */
static void test_blocks_route_cross_nodes(void **state)
{
	struct locus_client *pre0 = tn_attach(&N[0], LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *pre1 = tn_attach(&N[0], LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *dec1 = tn_attach(&N[1], LOCUS_ROLE_DECODE, 1, 0);
	static uint8_t tail[32 + 2 * L * E] __attribute__((aligned(8)));
	static uint8_t whole[32 + 2 * L * E] __attribute__((aligned(8)));
	struct locus_eldr_sig_hdr *th = (void *)tail, *wh = (void *)whole;
	uint16_t *tc = (uint16_t *)(th + 1), *wc = (uint16_t *)(wh + 1);
	uint8_t blk[2][L * E] = { { 0 } };
	const uint64_t hash[2] = { 0xa11ce, 0xb0b };
	struct locus_error err = { 0 };
	struct locus_desc d, in;
	size_t tlen;
	void *t = tn_eldr_table(&tlen);
	(void)state;

	tn_push_both(0, t, tlen);
	/* a load the last test's decoder 1 never reported: node 0 sees this attachment, not
	 * what it kept of the last one (which the next row would take away) */
	locus_client_report_load(dec1, 3);
	for (int i = 0; i < 50000 && (tn_ctr(&N[0], "decoder_up", 1) != 1 ||
				      tn_ctr(&N[0], "decoder_load", 1) != 3); i++)
		tu_nap();
	assert_int_equal(tn_ctr(&N[0], "decoder_up", 1), 1);
	assert_int_equal(tn_ctr(&N[0], "decoder_load", 1), 3);
	*th = (struct locus_eldr_sig_hdr){ .magic = LOCUS_ELDR_SIG_MAGIC,
					   .version = LOCUS_ELDR_SIG_VERSION, .n_layers = L,
					   .n_experts = E, .prompt_tokens = 3 };
	*wh = *th;
	wh->prompt_tokens = 2 * 16 + 3;
	for (int l = 0; l < L; l++) {
		blk[0][l * E + 0] = 16;
		blk[0][l * E + 3] = 9;
		blk[1][l * E + 7] = 16;
		tc[l * E + 3] = 3;
		for (int e = 0; e < E; e++)
			wc[l * E + e] = (uint16_t)(blk[0][l * E + e] + blk[1][l * E + e] +
						   tc[l * E + e]);
	}
	for (int round = 0; round < 2; round++) {
		const struct locus_msg_hdr *m;
		struct locus_blocks_route r = {
			.block_tokens = 16, .n_cached = round ? 2 : 0, .cached = hash,
			.n_new = round ? 0 : 2, .new_hashes = hash, .new_counts = &blk[0][0],
			.tail = tail,
		};

		struct locus_client *pre = round ? pre1 : pre0;

		locus_client_report_load(dec1, 2);
		if (locus_client_route_blocks(pre, 0, &r, 900 + round, &err))
			fail_msg("%s", err.msg);
		tu_wait_desc(pre, &d);
		assert_int_equal(d.op, LOCUS_OP_ROUTE_BLOCKS);
		assert_int_equal(d.id, 900 + round);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.peer, 1);
		assert_int_equal(d.blocks, round ? 2 : 0);
		assert_false(d.flags & LOCUS_DESC_F_PARTIAL);
		tu_wait_desc(dec1, &in);
		assert_int_equal(in.op, LOCUS_OP_SIGNATURE_IN);
		assert_int_equal(in.id, 900 + round);
		m = locus_client_inbox(dec1, &in);
		assert_non_null(m);
		assert_int_equal(m->type, LOCUS_MSG_SIGNATURE);
		assert_int_equal(m->payload_len, sizeof(whole));
		assert_memory_equal(m + 1, whole, sizeof(whole));
		locus_client_release_slot(dec1, in.slot);
	}
	assert_int_equal(tn_ctr(&N[0], "sigcache_hits", 0), 2);
	assert_int_equal(tn_ctr(&N[0], "sigcache_inserts", 0), 2);
	locus_client_detach(dec1);
	locus_client_detach(pre1);
	locus_client_detach(pre0);
	free(t);
}

/*
 * A remote decoder that does not release its inbox: what does not fit waits
 * at the transport and arrives, in order and intact, once slots are freed.
 */
static void test_full_remote_inbox_waits(void **state)
{
	struct locus_client *pre = tn_attach(&N[0], LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *dec1 = tn_attach(&N[1], LOCUS_ROLE_DECODE, 1, 0);
	struct locus_desc d, in[64];
	const uint32_t total = 48; /* the decoder's inbox has 32 slots */
	/* what one engine delivers into: its share of the inbox (all of it with one engine) */
	const uint32_t cap = 32 / (uint32_t)tn_engines;
	uint64_t undeliverable = tn_ctr(&N[1], "remote_undeliverable", 0);
	uint32_t got = 0;
	(void)state;

	/*
	 * A load no earlier decoder 1 reported: node 0 routes to this one, not to
	 * what it still knew of the previous test's (gone by the next load row).
	 */
	locus_client_report_load(dec1, 1);
	for (int i = 0; i < 50000 && (tn_ctr(&N[0], "decoder_up", 1) != 1 ||
				      tn_ctr(&N[0], "decoder_load", 1) != 1); i++)
		tu_nap();
	for (uint32_t i = 0; i < total; i++) {
		uint64_t off = (uint64_t)(i % 16) * 4096;
		size_t len = tn_put_signature(pre, off, 1 + (int)(i % 7), 2);

		d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 1000 + i, .off = off,
					 .len = (uint32_t)len };
		assert_int_equal(locus_client_submit(pre, &d, 1), 1);
		tu_wait_desc(pre, &d);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.peer, 1);
		/* stay up: the heartbeat (a decoder silent for load_timeout_ms (1 s here) leaves
		 * routing, and a loaded machine can take that long for a few round trips) */
		locus_client_report_load(dec1, 1);
	}
	/* cap arrived; the rest wait at the transport until slots come back */
	for (int i = 0; i < 25000 && got < cap; i++)
		got += (uint32_t)locus_client_poll(dec1, in + got, cap - got), tu_nap();
	assert_int_equal(got, cap);
	assert_false(tu_try_desc(dec1, in, 20));
	for (uint32_t i = 0; i < total; i++) {
		struct locus_desc x = in[i % cap];
		const struct locus_msg_hdr *m;

		if (i >= cap)
			tu_wait_desc(dec1, &x);
		assert_int_equal(x.op, LOCUS_OP_SIGNATURE_IN);
		assert_int_equal(x.id, 1000 + i); /* in order, none lost */
		m = locus_client_inbox(dec1, &x);
		assert_non_null(m);
		assert_int_equal(m->payload_len, locus_eldr_sig_len(L, E));
		assert_int_equal(locus_client_release_slot(dec1, x.slot), 0);
	}
	assert_int_equal(tn_ctr(&N[1], "remote_undeliverable", 0), undeliverable);
	locus_client_detach(dec1);
	locus_client_detach(pre);
}

static void fill_row(uint8_t *row, uint32_t token)
{
	for (int i = 0; i < ROW; i++)
		row[i] = (uint8_t)(token * 13 + i);
}

static void test_dispatch_combine_cross_nodes(void **state)
{
	struct locus_client *rk[4];
	struct locus_dispatch_req *rq;
	struct locus_desc d, in;
	uint8_t hits[32][2] = { { 0 } }, back[32][2] = { { 0 } };
	uint16_t ex[32][2];
	const uint32_t T = 32, K = 2;
	size_t glen;
	void *g = grace_table(&glen);
	uint8_t *st0;
	float *gates;
	(void)state;

	uint64_t in0[2] = { 0 }, out0[2] = { 0 }, in1[2] = { 0 }, out1[2] = { 0 };

	for (uint32_t b = 0; tn_engines == 2 && b <= 2; b += 2) {
		in0[b / 2] = block_ctr(&N[0], "remote_messages_in", b, 1);
		out0[b / 2] = block_ctr(&N[0], "remote_messages_out", b, 1);
		in1[b / 2] = block_ctr(&N[1], "remote_messages_in", b, 0);
		out1[b / 2] = block_ctr(&N[1], "remote_messages_out", b, 0);
	}
	for (int r = 0; r < 4; r++)
		rk[r] = tn_attach(&N[r / GPN], LOCUS_ROLE_RANK, 0, (uint32_t)r);
	for (int r = 0; r < 4; r++)
		tn_wait_ranks(rk[r], 0);
	tn_push_both(1, g, glen);
	st0 = locus_client_stage(rk[0], NULL);
	rq = (struct locus_dispatch_req *)st0;
	*rq = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = 0, .top_k = K,
					   .n_tokens = T, .row_bytes = ROW, .rows_off = 65536,
					   .batch_id = 99 };
	for (uint32_t t = 0; t < T; t++) {
		ex[t][0] = (uint16_t)(t % 8);
		ex[t][1] = (uint16_t)((t + 3) % 8);
		fill_row(st0 + 65536 + t * ROW, t);
	}
	memcpy(rq + 1, ex, sizeof(ex));
	gates = (float *)((uint8_t *)(rq + 1) + locus_ids_bytes(T, K));
	for (uint32_t i = 0; i < T * K; i++)
		gates[i] = 0.25f;
	d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = 1, .off = 0,
				 .len = (uint32_t)locus_dispatch_req_len(T, K) };
	assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);

	/*
	 * One event loop over the four ranks (as four serving processes would
	 * run): rows are answered with COMBINE, results gathered at rank 0. With
	 * remote destinations rank 0's DISPATCH completion comes once the sends
	 * completed, so any of these may arrive in any order.
	 */
	{
		int dispatch_done = 0, combines_done = 0, combines_sent = 0;
		uint32_t pairs_back = 0;

		for (int guard = 0; guard < 200000 && (!dispatch_done || pairs_back < T * K ||
						       combines_done < combines_sent); guard++) {
			for (int r = 0; r < 4; r++) {
				struct locus_combine_req *cq;
				uint8_t *msg, *st = locus_client_stage(rk[r], NULL);
				struct locus_msg_hdr *m;
				struct locus_rows_hdr *h;
				struct locus_row_ref *refs;

				if (locus_client_poll(rk[r], &in, 1) != 1)
					continue;
				if (in.op == LOCUS_OP_DISPATCH) {
					assert_int_equal(r, 0);
					assert_int_equal(in.status, 0);
					assert_int_equal(in.count, 4);
					dispatch_done++;
					continue;
				}
				if (in.op == LOCUS_OP_COMBINE) {
					assert_int_equal(in.status, 0);
					combines_done++;
					continue;
				}
				msg = (uint8_t *)locus_client_inbox(rk[r], &in);
				assert_non_null(msg);
				assert_int_equal(locus_rows_msg_check(msg, in.len, 4, 262144, NULL), 0);
				m = (struct locus_msg_hdr *)msg;
				h = locus_rows_hdr_of(msg);
				refs = locus_rows_refs(msg);
				if (in.op == LOCUS_OP_RESULTS_IN) {
					assert_int_equal(r, 0);
					for (uint32_t j = 0; j < h->n_rows; j++) {
						const uint8_t *row = (h->flags & LOCUS_ROWS_IN_PLACE)
							? st0 + h->rows_off + (size_t)j * ROW
							: msg + h->rows_off + (size_t)j * ROW;
						uint8_t want[ROW];

						fill_row(want, refs[j].token);
						for (int b = 0; b < ROW; b++)
							want[b] = (uint8_t)(want[b] + m->src_rank + 1);
						assert_memory_equal(row, want, ROW);
						for (uint32_t k = 0; k < K; k++)
							if (refs[j].kmask & (1u << k)) {
								assert_int_equal(back[refs[j].token][k]++, 0);
								pairs_back++;
							}
					}
					locus_client_release_slot(rk[0], in.slot);
					continue;
				}
				assert_int_equal(in.op, LOCUS_OP_ROWS_IN);
				cq = (struct locus_combine_req *)(st + 131072 + 16384 * (combines_sent % 4));
				*cq = (struct locus_combine_req){ .magic = LOCUS_COMBINE_MAGIC,
								  .dst_rank = 0, .n_rows = h->n_rows,
								  .row_bytes = ROW,
								  .rows_off = 196608 + 16384 * (combines_sent % 4),
								  .batch_id = 99 };
				for (uint32_t j = 0; j < h->n_rows; j++) {
					uint32_t t = refs[j].token;
					const uint8_t *row = (h->flags & LOCUS_ROWS_IN_PLACE)
						? st + h->rows_off + (size_t)t * ROW
						: msg + h->rows_off + (size_t)j * ROW;
					uint8_t want[ROW];

					assert_true(t < T);
					fill_row(want, t);
					assert_memory_equal(row, want, ROW);
					for (uint32_t k = 0; k < K; k++)
						if (refs[j].kmask & (1u << k)) {
							assert_int_equal(ex[t][k] / 2, r);
							assert_int_equal(hits[t][k]++, 0);
						}
					((struct locus_row_ref *)(cq + 1))[j] = refs[j];
					for (int b = 0; b < ROW; b++)
						st[cq->rows_off + j * ROW + b] = (uint8_t)(row[b] + r + 1);
				}
				locus_client_release_slot(rk[r], in.slot);
				d = (struct locus_desc){ .op = LOCUS_OP_COMBINE, .id = 60 + r,
							 .off = 131072 + 16384 * (combines_sent % 4),
							 .len = (uint32_t)locus_combine_req_len(h->n_rows) };
				assert_int_equal(locus_client_submit(rk[r], &d, 1), 1);
				combines_sent++;
			}
			if (guard % 64 == 63)
				tu_nap();
		}
		assert_int_equal(dispatch_done, 1);
		assert_int_equal(combines_done, combines_sent);
		assert_int_equal(pairs_back, T * K);
	}
	if (tn_engines == 2) {
		/*
		 * Two engines a node, rank r on engine r % 2 (blocks 0 and 2): on
		 * node 1, ranks 2 and 3 each took their rows in on their own engine
		 * (the mux's pick) and sent their results to node 0 through their
		 * own relays; node 0 sent from engine 0 (rank 0) and took the results
		 * in there; its engine 1 (rank 1, local traffic only) did neither.
		 */
		for (uint32_t b = 0; b <= 2; b += 2) {
			assert_true(block_ctr(&N[1], "remote_messages_in", b, 0) > in1[b / 2]);
			assert_true(block_ctr(&N[1], "remote_messages_out", b, 0) > out1[b / 2]);
		}
		assert_true(block_ctr(&N[0], "remote_messages_out", 0, 1) > out0[0]);
		assert_true(block_ctr(&N[0], "remote_messages_in", 0, 1) > in0[0]);
		assert_int_equal(block_ctr(&N[0], "remote_messages_out", 2, 1), out0[1]);
		assert_int_equal(block_ctr(&N[0], "remote_messages_in", 2, 1), in0[1]);
	}
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t k = 0; k < K; k++) {
			assert_int_equal(hits[t][k], 1);
			assert_int_equal(back[t][k], 1);
		}
	/*
	 * rank 0 timed every other rank's answer: 2 and 3's across, rank 1's on this
	 * node when one engine serves both (with two, rank 1's engine hands its
	 * results over and the time stays untaken)
	 */
	for (uint32_t r = tn_engines == 2 ? 2 : 1; r < 4; r++) {
		assert_int_equal(tn_ctr(&N[0], "rank_answers", r), 1);
		assert_true(tn_ctr(&N[0], "rank_answer_ns", r) > 0);
	}
	if (tn_engines == 2)
		assert_int_equal(tn_ctr(&N[0], "rank_answers", 1), 0);
	assert_int_equal(tn_ctr(&N[0], "rank_answers", 0), 0); /* its own rows stay in place */
	/* the remote tier carried ranks 2 and 3's rows, both ways */
	assert_true(tn_ctr(&N[0], "rows", 0 * 3 + 2) > 0);
	assert_true(tn_ctr(&N[1], "rows", 1 * 3 + 2) > 0);
	assert_int_equal(tn_ctr(&N[1], "remote_undeliverable", 0), 0);
	for (int r = 0; r < 4; r++)
		locus_client_detach(rk[r]);
	free(g);
}

static void test_bad_remote_messages(void **state)
{
	struct locus_engine *e = locus_node_engine(N[1].node);
	uint8_t junk[256];
	struct locus_msg_hdr *h = (struct locus_msg_hdr *)junk;
	uint64_t before = tn_ctr(&N[1], "remote_bad", 0);
	(void)state;

	/* these are the engine lcore's calls: borrow node 1's lcore meanwhile */
	memset(junk, 0, sizeof(junk));
	__atomic_store_n(&N[1].hold, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&N[1].held, __ATOMIC_ACQUIRE))
		tu_nap();
	assert_int_equal(locus_engine_remote_recv(e, 0, junk, 10), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_engine_remote_recv(e, 0, junk, sizeof(junk)), -LOCUS_EBADMAGIC);
	/* loads come as load rows, never as messages: a LOAD message is refused */
	locus_msg_hdr_init(h, LOCUS_MSG_LOAD, 8, 0, 0, 1, 0);
	assert_int_equal(locus_engine_remote_recv(e, 0, junk, 40), -LOCUS_EPROTO);
	locus_msg_hdr_init(h, LOCUS_MSG_DISPATCH, 32, 0, 0, 2, 0);
	assert_true(locus_engine_remote_recv(e, 0, junk, 64) < 0);
	locus_msg_hdr_init(h, LOCUS_MSG_SIGNATURE, 16, 0, 0, 1, 0);
	assert_int_equal(locus_engine_remote_recv(e, 0, junk, 48), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_engine_remote_recv(e, 1, junk, 48), -LOCUS_ERANGE); /* itself */
	assert_int_equal(locus_engine_remote_recv(e, 5, junk, 48), -LOCUS_ERANGE);
	assert_int_equal(tn_ctr(&N[1], "remote_bad", 0), before + 7);
	__atomic_store_n(&N[1].hold, 0, __ATOMIC_RELEASE);
}

/*
 * A signature from a peer gets the local path's whole check, not only its
 * magic and a self-consistent length. Each defect is refused and counted;
 * the valid signature beside them arrives.
 */
static void test_remote_signature_checked(void **state)
{
	struct locus_client *dec1 = tn_attach(&N[1], LOCUS_ROLE_DECODE, 1, 0);
	struct locus_engine *e = locus_node_engine(N[1].node);
	static uint8_t msg[64 + 2 * 2 * L * E * sizeof(uint16_t)];
	struct locus_msg_hdr *h = (struct locus_msg_hdr *)msg;
	struct locus_eldr_sig_hdr *sh = (struct locus_eldr_sig_hdr *)(h + 1);
	uint64_t bad0 = tn_ctr(&N[1], "remote_bad", 0);
	struct locus_desc in;
	size_t tlen;
	void *t = tn_eldr_table(&tlen);
	struct {
		const char *what;
		uint16_t version, flags, layers, experts;
		uint8_t reserved;
		int want;
	} cases[] = {
		{ "wrong version", LOCUS_ELDR_SIG_VERSION + 1, 0, L, E, 0, -LOCUS_EVERSION },
		{ "flags set", LOCUS_ELDR_SIG_VERSION, 1, L, E, 0, -LOCUS_EPROTO },
		{ "reserved byte set", LOCUS_ELDR_SIG_VERSION, 0, L, E, 1, -LOCUS_EPROTO },
		{ "layers not the table's", LOCUS_ELDR_SIG_VERSION, 0, 2 * L, E, 0, -LOCUS_ERANGE },
		{ "experts not the table's", LOCUS_ELDR_SIG_VERSION, 0, L, 2 * E, 0, -LOCUS_ERANGE },
		{ "valid", LOCUS_ELDR_SIG_VERSION, 0, L, E, 0, 0 },
	};
	(void)state;

	tn_push_both(0, t, tlen);
	free(t);
	__atomic_store_n(&N[1].hold, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&N[1].held, __ATOMIC_ACQUIRE))
		tu_nap();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		/* self-consistent: the length always matches the shape it claims */
		size_t plen = locus_eldr_sig_len(cases[i].layers, cases[i].experts);

		memset(msg, 0, sizeof(msg));
		locus_msg_hdr_init(h, LOCUS_MSG_SIGNATURE, (uint32_t)plen, 700 + i, 0, 1, 0);
		*sh = (struct locus_eldr_sig_hdr){ .magic = LOCUS_ELDR_SIG_MAGIC,
						   .version = cases[i].version,
						   .flags = cases[i].flags,
						   .n_layers = cases[i].layers,
						   .n_experts = cases[i].experts };
		sh->reserved[5] = cases[i].reserved;
		if (locus_engine_remote_recv(e, 0, msg, sizeof(*h) + plen) != cases[i].want)
			fail_msg("%s: refused with %d, expected %d", cases[i].what,
				 locus_engine_remote_recv(e, 0, msg, sizeof(*h) + plen),
				 cases[i].want);
	}
	__atomic_store_n(&N[1].hold, 0, __ATOMIC_RELEASE);
	assert_int_equal(tn_ctr(&N[1], "remote_bad", 0), bad0 + 5);
	tu_wait_desc(dec1, &in);
	assert_int_equal(in.op, LOCUS_OP_SIGNATURE_IN);
	assert_int_equal(in.id, 705);
	assert_false(tu_try_desc(dec1, &in, 5));
	locus_client_detach(dec1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_signatures_cross_nodes),
		cmocka_unit_test(test_blocks_route_cross_nodes),
		cmocka_unit_test(test_full_remote_inbox_waits),
		cmocka_unit_test(test_dispatch_combine_cross_nodes),
		cmocka_unit_test(test_bad_remote_messages),
		cmocka_unit_test(test_remote_signature_checked),
	};
	int failed = cmocka_run_group_tests_name("one engine a node", tests, tn_setup, tn_teardown);

	/* the same with two engines a node: relays, the mux, hand-overs between the engines */
	tn_engines = 2;
	return failed + cmocka_run_group_tests_name("two engines a node", tests, tn_setup,
						    tn_teardown);
}
