// SPDX-License-Identifier: MIT
/*
 * Decoder loads between nodes, one-sided: every load period the engine
 * writes its row (the decoders attached and reporting here, with their
 * loads) into every live peer's load area for it (struct locus_load_row,
 * locus_wire.h), and reads the rows its peers wrote into its own areas.
 * Nobody is interrupted and no credit is spent: a writer that dies simply
 * stops moving its row's seq.
 *
 * A read copies the area first and checks only the copy. A row whose
 * checksum fails was caught half written (torn): skipped, the last good
 * state stays. A row that checks out but names another node, too many
 * entries or a decoder id out of range is refused (bad). A new seq
 * refreshes the decoders listed and drops those no longer listed (they
 * left that node); a decoder whose row stops moving ages out
 * after the load timeout (stale), and a node that is down takes its
 * decoders out of routing at once (engine_route.c, decoder_up).
 *
 * The row also lists which of the writer's GPUs have a rank attached: a
 * rank that left is lost to every node within a period (engine_live.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"
#include "locus_counters_priv.h"
#include "locus_crc32c.h"
#include "locus_err_priv.h"
#include "locus_wire.h"

int engine_load_init(struct locus_engine *e, struct locus_error *err)
{
	size_t need = locus_load_row_size(e->p.dims.max_decoders);

	if (!e->rt)
		return 0;
	if (!e->rt->write_load || !e->rt->load_area || e->rt->load_area_len < need)
		return locus_error_set(err, EINVAL, "engine: the transport's load area (%zu bytes) "
				       "cannot hold a row of %u decoders (%zu bytes)",
				       e->rt->load_area_len, e->p.dims.max_decoders, need);
	e->load_row_len = need;
	e->load_tx = engine_zalloc(need);
	e->load_rx = engine_zalloc(need);
	e->row_seq = engine_zalloc(sizeof(*e->row_seq) * e->p.dims.n_nodes);
	if (!e->load_tx || !e->load_rx || !e->row_seq)
		return locus_error_set(err, ENOMEM, "engine: out of memory");
	/* a restarted writer starts elsewhere than where its predecessor stopped */
	e->load_seq = e->p.now();
	return 0;
}

void engine_load_fini(struct locus_engine *e)
{
	free(e->load_tx);
	free(e->load_rx);
	free(e->row_seq);
}

/* Our row to every live peer. */
static void load_write(struct locus_engine *e)
{
	struct locus_load_row *row = e->load_tx;
	uint32_t k = 0;
	size_t len;

	for (uint32_t d = 0; d < e->p.dims.max_decoders; d++)
		if (e->dec[d].slot >= 0 && e->dec[d].up)
			row->e[k++] = (struct locus_load_entry){
				.decoder_id = d,
				.load = __atomic_load_n(&e->cl[e->dec[d].slot].ctl->load,
							__ATOMIC_RELAXED),
			};
	len = locus_load_row_size(k);
	row->magic = LOCUS_LOAD_ROW_MAGIC;
	row->seq = ++e->load_seq;
	row->node = (uint16_t)e->p.dims.node_id;
	row->n = (uint16_t)k;
	row->ranks = engine_live_local_ranks(e);
	row->crc = locus_crc32c((const uint8_t *)row + 8, len - 8);
	for (uint32_t node = 0; node < e->p.dims.n_nodes; node++)
		if (engine_remote_peer_up(e, node) &&
		    e->rt->write_load(e->rt->ctx, node, row, len) == 0)
			locus_counter_add_elem(e->blk, e->c.load_rows_written, node, 1);
}

/*
 * Check the copy of node's row: 1 new and good, 0 unchanged or never
 * written, -LOCUS_ECRC torn, -LOCUS_EPROTO / -LOCUS_ERANGE bad.
 */
static int row_check(struct locus_engine *e, uint32_t node, const struct locus_load_row *row)
{
	size_t len;

	if (row->magic == 0 && row->seq == 0)
		return 0; /* nothing written yet */
	if (row->seq == e->row_seq[node] && e->row_seq[node])
		return 0; /* no news; a half-rewritten row keeps its old seq until done */
	if (row->n > e->p.dims.max_decoders)
		return -LOCUS_ERANGE; /* also what a torn n may look like: either way, not taken */
	len = locus_load_row_size(row->n);
	if (locus_crc32c((const uint8_t *)row + 8, len - 8) != row->crc)
		return -LOCUS_ECRC;
	if (row->magic != LOCUS_LOAD_ROW_MAGIC || row->node != node ||
	    !(row->ranks & LOCUS_LOAD_ROW_RANKS) ||
	    (row->ranks & ~LOCUS_LOAD_ROW_RANKS) >> e->p.dims.gpus_per_node)
		return -LOCUS_EPROTO;
	for (uint32_t i = 0; i < row->n; i++)
		if (row->e[i].decoder_id >= e->p.dims.max_decoders)
			return -LOCUS_ERANGE;
	return 1;
}

/* Take in every peer's row that moved. */
static void load_read(struct locus_engine *e, uint64_t now)
{
	struct locus_load_row *row = e->load_rx;
	uint32_t stale = 0;

	for (uint32_t node = 0; node < e->p.dims.n_nodes; node++) {
		const volatile void *area;
		int ret;

		if (node == e->p.dims.node_id || !(area = e->rt->load_area(e->rt->ctx, node)))
			continue;
		/* the peer may be writing right now: check and use only the copy */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		memcpy(row, (const void *)area, e->load_row_len);
		ret = row_check(e, node, row);
		if (ret == 0)
			continue;
		if (ret < 0) {
			locus_counter_add_elem(e->blk, ret == -LOCUS_ECRC ? e->c.load_rows_torn
									 : e->c.load_rows_bad,
					       node, 1);
			continue;
		}
		e->row_seq[node] = row->seq;
		engine_live_row(e, node, row->ranks);
		locus_counter_add_elem(e->blk, e->c.load_rows_read, node, 1);
		for (uint32_t i = 0; i < row->n; i++) {
			struct engine_decoder *d = &e->dec[row->e[i].decoder_id];

			if (d->slot >= 0)
				continue; /* served here: our own view wins */
			d->node = (int32_t)node;
			d->rload = row->e[i].load;
			d->rtsc = now;
			d->rseq = row->seq;
			if (e->router && d->router_slot >= 0)
				locus_eldr_router_set_load(e->router, (uint32_t)d->router_slot, d->rload);
		}
		/* a decoder its node no longer lists left it (or stopped reporting there) */
		for (uint32_t d = 0; d < e->p.dims.max_decoders; d++) {
			struct engine_decoder *dec = &e->dec[d];

			if (dec->slot >= 0 || dec->node != (int32_t)node || dec->rseq == row->seq)
				continue;
			dec->node = -1;
			if (e->router && dec->router_slot >= 0)
				locus_eldr_router_set_up(e->router, (uint32_t)dec->router_slot, 0);
			locus_gauge_set_elem(e->blk, e->c.decoder_up, d, 0);
		}
	}
	for (uint32_t d = 0; d < e->p.dims.max_decoders; d++) {
		const struct engine_decoder *dec = &e->dec[d];

		stale += dec->slot < 0 && dec->node >= 0 && now - dec->rtsc > e->load_timeout_tsc &&
			 engine_remote_peer_up(e, (uint32_t)dec->node);
	}
	locus_gauge_set(e->blk, e->c.load_decoders_stale, stale);
}

void engine_load_exchange(struct locus_engine *e, uint64_t now)
{
	if (!e->rt || now < e->next_load)
		return;
	e->next_load = now + e->load_period;
	/*
	 * One row per node: engine 0 writes it, listing every decoder of the
	 * node (each engine knows them all); with several engines each reads
	 * the peers' rows for its own router.
	 */
	if (e->p.engine_idx == 0)
		load_write(e);
	load_read(e, now);
	engine_live_refresh(e);
}
