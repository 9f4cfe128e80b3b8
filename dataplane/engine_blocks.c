// SPDX-License-Identifier: MIT
/*
 * The signature cache on the engine's lcore: ROUTE_BLOCKS sums
 * the cached blocks' counts (from the deepest prefix checkpoint named), the
 * new blocks' and the tail's into a private signature, routes it as a ROUTE would (engine_route_signature) and caches
 * the new blocks; EVICT drops blocks. The cache is the engine's alone (one
 * writer), allocated at create for the largest table the dims allow; a
 * table of another shape empties it in place.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"
#include "locus_blocks.h"
#include "locus_counters_priv.h"
#include "locus_err_priv.h"

int engine_blocks_create(struct locus_engine *e, struct locus_error *err)
{
	const struct locus_engine_dims *d = &e->p.dims;
	struct locus_sigcache_params p = {
		.n_layers = d->max_layers, .n_experts = d->max_experts, .top_k = d->top_k,
		.block_tokens = d->sig_cache_block_tokens, .capacity_bytes = d->sig_cache_bytes,
		.checkpoint_blocks = d->sig_cache_checkpoint_blocks,
	};
	struct locus_sigcache_stats st;
	size_t cells = (size_t)d->max_layers * d->max_experts;
	int ret;

	if (!d->sig_cache_bytes)
		return 0;
	ret = locus_sigcache_create(&p, &e->sc, err);
	if (ret < 0)
		return ret;
	/* what a client's ROUTE_BLOCKS must carry (it reads the segment, not our config) */
	if (engine_primary(e)) /* the node's setting, not a depth: one engine says it */
		locus_gauge_set(e->blk, e->c.sc_block_tokens, d->sig_cache_block_tokens);
	/* header, cached hashes, new blocks, and the tail's signature header */
	e->blk_req_max = locus_blocks_req_len(d->max_layers, d->max_experts,
					      LOCUS_BLOCKS_MAX_CACHED, LOCUS_BLOCKS_MAX_NEW) -
			 cells * 2;
	e->blk_req = engine_zalloc(e->blk_req_max);
	e->blk_sum = engine_zalloc(cells * 2);
	e->blk_scratch = engine_zalloc(8 * (size_t)LOCUS_MAX(LOCUS_BLOCKS_MAX_CACHED +
							     LOCUS_BLOCKS_MAX_NEW,
							     LOCUS_EVICT_MAX));
	if (!e->blk_req || !e->blk_sum || !e->blk_scratch)
		return locus_error_set(err, ENOMEM, "signature cache: out of memory");
	locus_sigcache_stats(e->sc, &st);
	locus_gauge_set(e->blk, e->c.sc_capacity, (int64_t)st.capacity);
	locus_gauge_set(e->blk, e->c.sc_ckpt_capacity, (int64_t)st.ckpt_capacity);
	return 0;
}

void engine_blocks_destroy(struct locus_engine *e)
{
	locus_sigcache_destroy(e->sc);
	free(e->blk_req);
	free(e->blk_sum);
	free(e->blk_scratch);
}

/* Mirror the cache's statistics into the counters (what moved since last time). */
static void sync_counters(struct locus_engine *e)
{
	struct locus_sigcache_stats st, *o = &e->sc_seen;

	locus_sigcache_stats(e->sc, &st);
	locus_counter_add(e->blk, e->c.sc_hits, st.hits - o->hits);
	locus_counter_add(e->blk, e->c.sc_misses, st.misses - o->misses);
	locus_counter_add(e->blk, e->c.sc_inserts, st.inserts - o->inserts);
	locus_counter_add(e->blk, e->c.sc_refreshes, st.refreshes - o->refreshes);
	locus_counter_add(e->blk, e->c.sc_replaced, st.replaced - o->replaced);
	for (uint32_t r = 0; r < LOCUS_SIGCACHE_EVICT_N; r++)
		locus_counter_add_elem(e->blk, e->c.sc_evictions, r,
				       st.evictions[r] - o->evictions[r]);
	locus_counter_add(e->blk, e->c.sc_resets, st.resets - o->resets);
	locus_counter_add(e->blk, e->c.sc_summed, st.summed - o->summed);
	locus_counter_add(e->blk, e->c.sc_ckpt_hits, st.ckpt_hits - o->ckpt_hits);
	locus_counter_add(e->blk, e->c.sc_ckpt_mismatch, st.ckpt_mismatch - o->ckpt_mismatch);
	locus_counter_add(e->blk, e->c.sc_ckpt_inserts, st.ckpt_inserts - o->ckpt_inserts);
	for (uint32_t r = 0; r < LOCUS_SIGCACHE_EVICT_N; r++)
		locus_counter_add_elem(e->blk, e->c.sc_ckpt_evictions, r,
				       st.ckpt_evictions[r] - o->ckpt_evictions[r]);
	locus_gauge_set(e->blk, e->c.sc_ckpt_entries, (int64_t)st.ckpt_entries);
	locus_gauge_set(e->blk, e->c.sc_entries, (int64_t)st.entries);
	locus_gauge_set(e->blk, e->c.sc_bytes, (int64_t)st.bytes_used);
	*o = st;
}

void engine_blocks_table(struct locus_engine *e, uint16_t n_layers, uint16_t n_experts)
{
	struct locus_sigcache_params p;

	if (!e->sc)
		return;
	locus_sigcache_shape(e->sc, &p);
	if (p.n_layers == n_layers && p.n_experts == n_experts)
		return;
	/* the table was validated against the dims the cache was made for: this fits */
	if (locus_sigcache_reshape(e->sc, n_layers, n_experts, NULL) == 0)
		sync_counters(e);
}

static void refuse(struct locus_engine *e, struct locus_desc *d, int status, uint32_t reason)
{
	d->status = status;
	locus_counter_add_elem(e->blk, e->c.rej_blocks, reason, 1);
}

static const uint32_t fault_reason[LOCUS_BLOCKS_N_FAULTS] = {
	[LOCUS_BLOCKS_FORMAT] = LOCUS_ENGINE_BLOCKS_FORMAT,
	[LOCUS_BLOCKS_DUPLICATE] = LOCUS_ENGINE_BLOCKS_DUPLICATE,
	[LOCUS_BLOCKS_COUNTS] = LOCUS_ENGINE_BLOCKS_COUNTS,
	[LOCUS_BLOCKS_SIGNATURE] = LOCUS_ENGINE_BLOCKS_SIGNATURE,
};

/*
 * Check a ROUTE_BLOCKS from its private copy, sum its signature into
 * e->blk_sum, route it, then cache its new blocks. The client may rewrite
 * its stage at any time: the header, hash lists, new blocks and the tail's
 * signature header are copied before they are checked and used from the
 * copy only; the tail's counts are read once, into the sum (any value is
 * valid).
 */
void engine_route_blocks(struct locus_engine *e, uint32_t slot, struct locus_desc *d)
{
	struct engine_client *c = &e->cl[slot];
	struct locus_blocks_shape shape;
	struct locus_blocks_layout lay;
	struct locus_blocks_hdr *h = (struct locus_blocks_hdr *)e->blk_req;
	struct locus_eldr_sig_hdr sh;
	enum locus_blocks_fault fault;
	struct locus_sigcache_prompt_sum ps;
	uint64_t t0 = e->p.now();
	uint64_t tokens;
	int ret;

	engine_count(e, e->c.route_requests);
	engine_count(e, e->c.route_blocks_requests);
	d->blocks = 0;
	d->flags &= (uint8_t)~LOCUS_DESC_F_PARTIAL;
	if (engine_prefill_desc_check(e, c, d) < 0)
		goto complete;
	if (!e->sc) {
		refuse(e, d, -EOPNOTSUPP, LOCUS_ENGINE_BLOCKS_OFF);
		goto complete;
	}
	if (!e->router) {
		d->status = -LOCUS_ESTATE;
		engine_count(e, e->c.rej_no_table);
		goto complete;
	}
	locus_eldr_router_shape(e->router, &shape.n_layers, &shape.n_experts);
	shape.block_tokens = (uint16_t)e->p.dims.sig_cache_block_tokens;
	shape.top_k = (uint16_t)e->p.dims.top_k;
	if (d->len < sizeof(*h)) {
		refuse(e, d, -LOCUS_ETRUNCATED, LOCUS_ENGINE_BLOCKS_FORMAT);
		goto complete;
	}
	memcpy(h, c->buf + d->off, sizeof(*h));
	ret = locus_blocks_hdr_check(h, d->len, &shape, &lay, NULL);
	if (ret < 0) {
		refuse(e, d, ret, LOCUS_ENGINE_BLOCKS_FORMAT);
		goto complete;
	}
	/* the table fits the dims, the lists their caps: the prefix fits blk_req */
	memcpy(e->blk_req + sizeof(*h), c->buf + d->off + sizeof(*h),
	       lay.off_sig + sizeof(sh) - sizeof(*h));
	ret = locus_blocks_body_check(e->blk_req, &lay, &shape, e->blk_scratch, &fault, NULL);
	if (ret < 0) {
		refuse(e, d, ret, fault_reason[fault]);
		goto complete;
	}
	/*
	 * The sum: the prefix's known blocks (from the deepest checkpoint named),
	 * the new blocks (then cached), and the tail's counts, read once.
	 */
	memcpy(&sh, e->blk_req + lay.off_sig, sizeof(sh));
	locus_sigcache_prompt_sum(e->sc, &(struct locus_sigcache_prompt){
		.cached = locus_blocks_cached(e->blk_req, &lay), .n_cached = lay.n_cached,
		.new_blocks = e->blk_req + lay.off_new, .new_stride = lay.new_stride,
		.n_new = lay.n_new }, e->blk_sum, &ps);
	locus_sigcache_sum_sig(e->sc, e->blk_sum,
			       (const uint16_t *)(c->buf + d->off + lay.off_sig + sizeof(sh)));
	tokens = (uint64_t)(ps.known + lay.n_new) * shape.block_tokens + sh.prompt_tokens;
	sh.prompt_tokens = (uint32_t)LOCUS_MIN(tokens, (uint64_t)UINT32_MAX);
	d->blocks = ps.known;
	if (ps.known < lay.n_cached) {
		d->flags |= LOCUS_DESC_F_PARTIAL;
		engine_count(e, e->c.route_blocks_partial);
	}
	sync_counters(e);
	engine_route_signature(e, slot, d, &sh, e->blk_sum, lay.sig_len, t0);
	return;
complete:
	if (e->sc)
		sync_counters(e);
	engine_route_complete(e, c, d, t0);
}

void engine_evict(struct locus_engine *e, uint32_t slot, struct locus_desc *d)
{
	struct engine_client *c = &e->cl[slot];
	struct locus_evict_hdr h;
	uint32_t found = 0;
	int ret;

	engine_count(e, e->c.evict_requests);
	d->blocks = 0;
	if (engine_prefill_desc_check(e, c, d) < 0)
		goto complete;
	if (!e->sc) {
		refuse(e, d, -EOPNOTSUPP, LOCUS_ENGINE_BLOCKS_OFF);
		goto complete;
	}
	if (d->len < sizeof(h)) {
		refuse(e, d, -LOCUS_ETRUNCATED, LOCUS_ENGINE_BLOCKS_FORMAT);
		goto complete;
	}
	memcpy(&h, c->buf + d->off, sizeof(h));
	ret = locus_evict_hdr_check(&h, d->len, NULL);
	if (ret < 0) {
		refuse(e, d, ret, LOCUS_ENGINE_BLOCKS_FORMAT);
		goto complete;
	}
	memcpy(e->blk_scratch, c->buf + d->off + sizeof(h), (size_t)h.n_hashes * 8);
	for (uint32_t i = 0; i < h.n_hashes; i++)
		found += (uint32_t)locus_sigcache_evict(e->sc, e->blk_scratch[i]);
	d->status = 0;
	d->blocks = found;
	sync_counters(e);
complete:
	engine_complete(e, c, d);
}
