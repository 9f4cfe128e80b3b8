// SPDX-License-Identifier: MIT
/*
 * Dispatch and combine: plan a rank's batch with the GRACE planner and move
 * each destination's rows by tier. Same GPU: a metadata-only message, the
 * rows stay where they are. Same node: copy into the peer rank's inbox.
 * Another node: a message through the inter-node transport, which the peer
 * node's engine copies into its rank's inbox.
 *
 * Two phases: first every message's room is reserved (inbox space and
 * completion entry on this node, a transport buffer for another node), then
 * everything is written. On one node a batch is delivered whole or not at
 * all; with remote destinations it completes when the transport finished
 * every send, with the first error if any (engine_remote.c).
 *
 * Every DISPATCH message carries the placement generation its batch was
 * planned under. A rank of this node that takes part in placement changes
 * and does not hold that generation fails the whole batch in phase 1
 * (-LOCUS_ESTALEPLACEMENT); a rank of another node is checked there.
 *
 * A request's rows may lie in a registered buffer region instead of the
 * stage (LOCUS_DESC_F_REGION): the same-GPU tier hands them over in place,
 * intra-node tiers copy from locusd's mapping of the region, and messages to
 * other nodes gather the rows straight from the region's MR (header from the
 * transport's buffer, one entry per run of consecutive rows), copying only
 * when a message has more runs than the device's gather entries.
 */
#include <errno.h>
#include <string.h>

#include "engine_priv.h"
#include "locus_counters_priv.h"

#define RES_REMOTE UINT32_MAX /* res_client of a transport buffer */

static int stage_range_ok(const struct locus_engine *e, uint64_t off, uint64_t len)
{
	return off <= e->stage_size && len <= e->stage_size - off && off % 8 == 0;
}

/*
 * Copy the len bytes of a request's body out of the client's stage into the
 * engine's own memory, where the client cannot change them between the
 * check and their use. NULL when no valid request is that long.
 */
static const uint8_t *private_body(struct locus_engine *e, const uint8_t *body, size_t len)
{
	if (len > e->req_body_max)
		return NULL;
	memcpy(e->req_body, body, len);
	return e->req_body;
}

/* Where a request's rows are: the client's stage or one of its regions. */
struct rows_src {
	const uint8_t *base;        /* CPU address of byte 0; NULL: not mappable */
	uint64_t size;
	struct engine_region *rg;   /* NULL: the stage */
};

static int rows_source(struct locus_engine *e, uint32_t slot, const struct locus_desc *d,
		       struct rows_src *src)
{
	*src = (struct rows_src){ .base = e->cl[slot].buf, .size = e->stage_size };
	if (!(d->flags & LOCUS_DESC_F_REGION))
		return 0;
	src->rg = engine_region_get(e, slot, d->region);
	if (!src->rg) {
		engine_count(e, e->c.rej_bad_region);
		return -LOCUS_ERANGE;
	}
	src->base = src->rg->r.addr;
	src->size = src->rg->r.len;
	return 0;
}

/* Zero-copy possible for a message to another node from src. */
static int src_gathers(const struct locus_engine *e, const struct rows_src *src)
{
	return src->rg && src->rg->r.lkey && e->rt && e->rt->send_sg && e->rt->max_sge;
}

/* Whether the rows of src can reach destination q at all (phase 1). */
static int src_reaches(const struct locus_engine *e, const struct rows_src *src,
		       const struct dest_plan *q)
{
	if (src->base || q->in_place)
		return 0;
	return q->remote && src_gathers(e, src) ? 0 : -EOPNOTSUPP;
}

/*
 * Gather entries for nr rows of row_bytes from a region: row j at
 * rows_off + (tok ? tok[j] : j) * row_bytes; consecutive rows merge. Returns
 * the entries used, or 0 when more than max are needed.
 */
static uint32_t row_runs(const struct locus_engine_region *r, uint64_t rows_off,
			 uint32_t row_bytes, const uint32_t *tok, uint32_t r0, uint32_t nr,
			 struct locus_engine_sge *sg, uint32_t max)
{
	uint32_t n = 0;

	for (uint32_t j = 0; j < nr; j++) {
		uint64_t a = r->iova + rows_off +
			     (uint64_t)(tok ? tok[r0 + j] : r0 + j) * row_bytes;

		if (n && sg[n - 1].addr + sg[n - 1].len == a &&
		    (uint64_t)sg[n - 1].len + row_bytes <= UINT32_MAX) {
			sg[n - 1].len += row_bytes;
			continue;
		}
		if (n == max)
			return 0;
		sg[n++] = (struct locus_engine_sge){ .addr = a, .len = row_bytes, .lkey = r->lkey };
	}
	return n;
}

/* Most rows of one message that fit cap bytes; 0 if not even one. */
static uint32_t rows_per_msg(uint64_t cap, uint32_t top_k, uint32_t row_bytes, int in_place,
			     uint32_t n_rows)
{
	uint64_t per_row = sizeof(struct locus_row_ref) + 6ull * top_k + (in_place ? 0 : row_bytes);
	uint64_t r = per_row ? cap / per_row : n_rows;

	if (r > n_rows)
		r = n_rows;
	while (r > 0 && locus_rows_msg_len((uint32_t)r, top_k, row_bytes, in_place) > cap)
		r--;
	return (uint32_t)r;
}

/* Who takes rank's rows and in messages of how many rows, or a negative code. */
static int target_of(struct locus_engine *e, uint32_t src_slot, uint32_t src_rank,
		     uint32_t rank, uint32_t top_k, uint32_t row_bytes, uint32_t n_rows,
		     struct dest_plan *dp)
{
	uint32_t gpn = e->p.dims.gpus_per_node;
	/* a message fits our share of the receiver's inbox (all of it: one engine) */
	uint64_t cap = (uint64_t)(e->share_hi - e->share_lo) * e->inbox_slot_size;

	dp->tier = locus_grace_tier_of(src_rank, rank, gpn);
	dp->in_place = dp->tier == LOCUS_GRACE_TIER_GPU;
	dp->remote = 0;
	if (dp->in_place) {
		dp->client = src_slot;
	} else if (rank / gpn == e->p.dims.node_id) {
		if (e->rank_slot[rank] < 0)
			return -LOCUS_EPEERDOWN;
		dp->client = (uint32_t)e->rank_slot[rank];
	} else {
		if (!engine_remote_peer_up(e, rank / gpn))
			return -LOCUS_EPEERDOWN;
		dp->remote = 1;
		dp->node = rank / gpn;
		cap = LOCUS_MIN(cap, (uint64_t)e->rt->max_msg);
	}
	dp->rows_per_msg = rows_per_msg(cap, top_k, row_bytes, (int)dp->in_place, n_rows);
	if (!dp->rows_per_msg)
		return -LOCUS_ERANGE;
	dp->n_chunks = (n_rows + dp->rows_per_msg - 1) / dp->rows_per_msg;
	return dp->n_chunks <= UINT16_MAX ? 0 : -LOCUS_ERANGE;
}

static void release_reservations(struct locus_engine *e, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (e->res_client[i] == RES_REMOTE)
			e->rt->free(e->rt->ctx, e->res_buf[i]);
		else
			engine_inbox_free(e, &e->cl[e->res_client[i]], e->res_slot[i]);
	}
}

/*
 * Reserve room for dp's n_chunks messages: inbox space and completion
 * entries on this node, transport buffers for another. Appends to the
 * reservation list; completion entries are promised only when all fit.
 */
static int reserve(struct locus_engine *e, const struct dest_plan *dp, uint32_t n_rows,
		   uint32_t top_k, uint32_t row_bytes, uint32_t *n_res)
{
	struct engine_client *dc = dp->remote ? NULL : &e->cl[dp->client];

	if ((dc && engine_room(e, dc) < dp->n_chunks) || *n_res + dp->n_chunks > e->res_max)
		return -LOCUS_EFULL;
	for (uint32_t k = 0; k < dp->n_chunks; k++) {
		uint32_t rows = LOCUS_MIN(dp->rows_per_msg, n_rows - k * dp->rows_per_msg);
		size_t len = locus_rows_msg_len(rows, top_k, row_bytes, (int)dp->in_place);

		if (dc) {
			int first = engine_inbox_alloc(e, dc, engine_span_for(e, len));

			if (first < 0)
				return first;
			e->res_client[*n_res] = dp->client;
			e->res_slot[*n_res] = (uint32_t)first;
		} else {
			void *buf = e->rt->alloc(e->rt->ctx, len);

			if (!buf)
				return -LOCUS_EFULL;
			e->res_client[*n_res] = RES_REMOTE;
			e->res_buf[*n_res] = buf;
		}
		(*n_res)++;
	}
	if (dc)
		engine_promise(e, dc, (int32_t)dp->n_chunks);
	return 0;
}

static void unpromise(struct locus_engine *e, int n_dest)
{
	for (int j = 0; j < n_dest; j++)
		if (!e->dplan[j].remote)
			engine_promise(e, &e->cl[e->dplan[j].client],
				       -(int32_t)e->dplan[j].n_chunks);
}

/* Offset of p (inside the client region) from the region's start. */
static uint64_t region_off(const struct locus_engine *e, const void *p)
{
	return (uint64_t)((const uint8_t *)p - e->cv->base);
}

static uint8_t *msg_ptr(struct locus_engine *e, uint32_t ri)
{
	if (e->res_client[ri] == RES_REMOTE)
		return e->res_buf[ri];
	return e->cl[e->res_client[ri]].buf + locus_clients_inbox_off(e->cv, e->res_slot[ri]);
}

/*
 * Hand a written message over: a descriptor on this node, a send to another.
 * n_src > 0: its rows are still to be moved by the intra-node DMA from the
 * ranges in e->lsrc to rows_off of the message; a negative return then means
 * nothing happened, and the caller copies the rows itself and hands over
 * again with n_src = 0.
 */
static int hand_over(struct locus_engine *e, uint32_t ri, const struct dest_plan *dp, int pidx,
		     uint8_t op, uint64_t batch, uint16_t layer, uint32_t src_rank, size_t len,
		     uint16_t chunk, const struct rows_src *src, uint32_t n_src, uint64_t rows_off)
{
	struct locus_desc out;

	if (dp->remote)
		return engine_pending_send(e, pidx, dp->node, e->res_buf[ri], len);
	out = (struct locus_desc){
		.op = op, .layer = layer, .id = batch,
		.off = locus_clients_inbox_off(e->cv, e->res_slot[ri]), .len = (uint32_t)len,
		.slot = e->res_slot[ri], .peer = src_rank, .count = chunk,
	};
	if (dp->in_place && src->rg) {
		out.flags = LOCUS_DESC_F_REGION;
		out.region = src->rg->r.id;
	}
	if (n_src)
		return engine_ldma_deliver(e, pidx, dp->client,
					   region_off(e, msg_ptr(e, ri)) + rows_off, n_src, &out);
	engine_promise(e, &e->cl[dp->client], -1);
	return engine_deliver(e, dp->client, &out);
}

/*
 * Whether dp's rows go by the intra-node DMA (then the request needs a
 * pending record). Only rows in the stage: the loopback's MR is the client
 * region, a buffer region is not in it.
 */
static int by_ldma(const struct locus_engine *e, const struct dest_plan *dp,
		   const struct rows_src *src)
{
	return e->ldma && !dp->remote && !dp->in_place && !src->rg;
}

/* Ranges of the dispatch rows of message r0..r0+nr-1 in the client region, merged. */
static uint32_t dispatch_srcs(struct locus_engine *e, const uint8_t *stage,
			      const struct locus_dispatch_req *rq, const struct locus_grace_plan *p,
			      uint32_t r0, uint32_t nr)
{
	uint64_t base = region_off(e, stage) + rq->rows_off;
	uint32_t n = 0;

	for (uint32_t j = 0; j < nr; j++) {
		uint64_t off = base + (uint64_t)p->rows[r0 + j] * rq->row_bytes;

		if (n && e->lsrc[n - 1].off + e->lsrc[n - 1].len == off) {
			e->lsrc[n - 1].len += rq->row_bytes;
			continue;
		}
		e->lsrc[n++] = (struct locus_engine_ldma_src){ .off = off, .len = rq->row_bytes };
	}
	return n;
}

static void dispatch_rows_cpu(uint8_t *msg, const struct locus_dispatch_req *rq,
			      const struct locus_grace_plan *p, uint32_t r0, uint32_t nr,
			      const uint8_t *base)
{
	const struct locus_rows_hdr *h = locus_rows_hdr_of(msg);

	for (uint32_t j = 0; j < nr; j++)
		memcpy(msg + h->rows_off + (size_t)j * rq->row_bytes,
		       base + rq->rows_off + (size_t)p->rows[r0 + j] * rq->row_bytes, rq->row_bytes);
}

/*
 * A message to another node whose rows come from a region: gather them from
 * the region's MR when the runs fit the device's entries, else copy them
 * from the mapping (or fail the message if there is none). hdr_len bytes of
 * the message are written in its buffer already. Returns 0 or negative.
 */
static int send_from_region(struct locus_engine *e, uint32_t ri, const struct dest_plan *q,
			    int pidx, const struct rows_src *src, uint64_t rows_off,
			    uint32_t row_bytes, const uint32_t *tok, uint32_t r0, uint32_t nr,
			    size_t hdr_len, size_t len)
{
	struct locus_engine_sge sg[LOCUS_ENGINE_MAX_SGE];
	uint32_t n = 0, max = LOCUS_MIN(e->rt->max_sge, (uint32_t)LOCUS_ENGINE_MAX_SGE);
	uint8_t *msg = e->res_buf[ri];
	int ret;

	if (src_gathers(e, src))
		n = row_runs(&src->rg->r, rows_off, row_bytes, tok, r0, nr, sg, max);
	if (n) {
		ret = engine_pending_send_sg(e, pidx, q->node, msg, hdr_len, sg, n, len);
		if (ret == 0)
			locus_counter_add(e->blk, e->c.region_rows_zero_copy, nr);
		return ret;
	}
	if (!src->base) {
		/* MR but too many runs, and nothing to copy from */
		e->rt->free(e->rt->ctx, msg);
		engine_pending_fail(e, pidx, -EOPNOTSUPP);
		engine_count(e, e->c.rej_region_unmapped);
		return -EOPNOTSUPP;
	}
	for (uint32_t j = 0; j < nr; j++)
		memcpy(msg + hdr_len + (size_t)j * row_bytes,
		       src->base + rows_off + (uint64_t)(tok ? tok[r0 + j] : r0 + j) * row_bytes,
		       row_bytes);
	engine_count(e, e->c.region_msgs_copied);
	return engine_pending_send(e, pidx, q->node, msg, len);
}

static void count_tier(struct locus_engine *e, int op, enum locus_grace_tier t, uint64_t rows,
		       uint64_t bytes)
{
	uint32_t i = (uint32_t)op * LOCUS_GRACE_N_TIERS + t;

	locus_counter_add_elem(e->blk, e->c.rows, i, rows);
	locus_counter_add_elem(e->blk, e->c.bytes, i, bytes);
	locus_counter_add_elem(e->blk, e->c.msgs, i, 1);
}

/*
 * A rank of this node that takes part in placement changes must hold the
 * placement generation gen the batch was planned under (the same GPU's
 * hand-over in place included); another node's engine checks its own
 * ranks. 0, or -LOCUS_ESTALEPLACEMENT counted by reason.
 */
static int dest_holds_placement(struct locus_engine *e, const struct dest_plan *q, uint64_t gen)
{
	int why;

	if (q->remote)
		return 0;
	why = engine_placement_refusal(&e->cl[q->client], gen);
	if (why < 0)
		return 0;
	locus_counter_add_elem(e->blk, e->c.rej_placement, (uint32_t)why, 1);
	return -LOCUS_ESTALEPLACEMENT;
}

/* Phase 1 for every destination of the plan; on failure nothing stays reserved. */
static int reserve_all(struct locus_engine *e, uint32_t slot, uint32_t src_rank, int nd,
		       uint32_t top_k, uint32_t row_bytes, const struct rows_src *src,
		       uint64_t gen, uint32_t *n_res, int *any_remote)
{
	const struct locus_grace_plan *p = &e->plan;
	int ret = 0;

	*any_remote = 0;
	for (int i = 0; i < nd; i++) {
		struct dest_plan *q = &e->dplan[i];
		uint32_t n_rows = p->dest_start[i + 1] - p->dest_start[i];

		ret = target_of(e, slot, src_rank, p->dest[i], top_k, row_bytes, n_rows, q);
		if (ret == 0)
			ret = dest_holds_placement(e, q, gen);
		if (ret == 0)
			ret = src_reaches(e, src, q);
		if (ret == 0)
			ret = reserve(e, q, n_rows, top_k, row_bytes, n_res);
		if (ret < 0) {
			release_reservations(e, *n_res);
			unpromise(e, i);
			*n_res = 0;
			return ret;
		}
		*any_remote |= (int)q->remote || by_ldma(e, q, src);
	}
	if (*any_remote && !e->n_pend_free) {
		release_reservations(e, *n_res);
		unpromise(e, nd);
		*n_res = 0;
		return -LOCUS_EFULL;
	}
	return 0;
}

/* Write a rows message; the rows themselves only when copy_rows (else gathered). */
static void fill_dispatch_msg(uint8_t *msg, size_t len, const struct locus_dispatch_req *rq,
			      const struct dest_plan *q, uint32_t k, uint32_t nr, uint32_t r0,
			      const struct locus_grace_plan *p, const uint16_t *experts,
			      const float *gates, const struct rows_src *src, int copy_rows,
			      uint32_t src_rank, uint32_t rank, uint32_t seq, uint64_t gen)
{
	struct locus_rows_hdr *h = locus_rows_hdr_of(msg);
	struct locus_row_ref *refs = locus_rows_refs(msg);
	uint16_t *mx = locus_rows_experts(msg, nr);
	float *mg = locus_rows_gates(msg, nr, rq->top_k);

	locus_msg_hdr_init((struct locus_msg_hdr *)msg, LOCUS_MSG_DISPATCH,
			   (uint32_t)(len - sizeof(struct locus_msg_hdr)), rq->batch_id, src_rank,
			   rank, seq);
	*h = (struct locus_rows_hdr){
		.magic = LOCUS_ROWS_MAGIC, .layer = rq->layer, .top_k = rq->top_k,
		.n_rows = nr, .row_bytes = rq->row_bytes,
		.flags = q->in_place ? LOCUS_ROWS_IN_PLACE | (src->rg ? LOCUS_ROWS_IN_REGION : 0)
				     : 0,
		.chunk = (uint16_t)k, .n_chunks = (uint16_t)q->n_chunks,
		.rows_off = q->in_place ? rq->rows_off : locus_rows_msg_rows_off(nr, rq->top_k),
		.batch_id = rq->batch_id, .placement_gen = gen,
	};
	memset((uint8_t *)mx, 0, locus_ids_bytes(nr, rq->top_k));
	for (uint32_t j = 0; j < nr; j++) {
		uint32_t t = p->rows[r0 + j];

		refs[j] = (struct locus_row_ref){ .token = t, .kmask = p->kmask[r0 + j] };
		memcpy(mx + (size_t)j * rq->top_k, experts + (size_t)t * rq->top_k,
		       2u * rq->top_k);
		memcpy(mg + (size_t)j * rq->top_k, gates + (size_t)t * rq->top_k, 4u * rq->top_k);
		if (!q->in_place && copy_rows)
			memcpy(msg + h->rows_off + (size_t)j * rq->row_bytes,
			       src->base + rq->rows_off + (size_t)t * rq->row_bytes, rq->row_bytes);
	}
}

/*
 * The batch's masked slots (no live copy of their expert): their ids in the
 * client's request read LOCUS_EXPERT_MASKED, the completion counts them.
 * Written before the completion is posted, which publishes them.
 */
static void mask_slots(struct locus_engine *e, struct engine_client *c, struct locus_desc *d,
		       const struct locus_dispatch_req *rq, const struct locus_grace_plan *p)
{
	uint16_t *ids = (uint16_t *)(c->buf + d->off + sizeof(*rq));
	const uint16_t masked = LOCUS_EXPERT_MASKED;

	for (size_t i = 0; i < (size_t)rq->n_tokens * rq->top_k; i++)
		if (p->slots[i].rank == LOCUS_GRACE_MASKED)
			memcpy(&ids[i], &masked, sizeof(masked)); /* 2-byte aligned in the stage */
	d->blocks = p->n_masked;
	locus_counter_add(e->blk, e->c.slots_masked, p->n_masked);
}

void engine_dispatch(struct locus_engine *e, uint32_t slot, struct locus_desc *d)
{
	struct engine_client *c = &e->cl[slot];
	struct locus_grace_plan *p = &e->plan;
	struct locus_dispatch_req rq;
	struct locus_grace_batch b;
	struct locus_grace_plan_state *plan_st;
	const struct engine_placement *pl = e->place;
	const struct locus_grace_map *map;
	struct rows_src src;
	const uint16_t *experts;
	const float *gates;
	const uint8_t *body;
	uint64_t t0 = e->p.now(), rows_sent = 0;
	uint32_t n_res = 0, ri = 0;
	int nd, ret, any_remote, pidx = -1;

	engine_count(e, e->c.dispatch_batches);
	if (!(c->roles & LOCUS_ROLE_RANK) || !stage_range_ok(e, d->off, d->len) ||
	    d->len < sizeof(rq)) {
		ret = -LOCUS_EPROTO;
		engine_count(e, e->c.rej_bad_descriptor);
		goto out;
	}
	ret = rows_source(e, slot, d, &src);
	if (ret < 0)
		goto out;
	if (!pl) {
		ret = -LOCUS_ESTATE;
		engine_count(e, e->c.rej_no_table);
		goto out;
	}
	/* the placement of the rank's EP group (the only group of a single table) */
	map = pl->map[pl->group_of_rank[c->rank]];
	plan_st = pl->st[pl->group_of_rank[c->rank]];
	memcpy(&rq, c->buf + d->off, sizeof(rq));
	body = private_body(e, c->buf + d->off + sizeof(rq), d->len - sizeof(rq));
	ret = body ? locus_dispatch_req_check(&rq, body, d->len, src.size, map->dims.n_layers,
					      map->dims.n_experts, e->p.dims.max_tokens, NULL)
		   : -LOCUS_ERANGE;
	if (ret < 0) {
		engine_count(e, e->c.rej_bad_descriptor);
		goto out;
	}
	experts = (const uint16_t *)body;
	gates = (const float *)(body + locus_ids_bytes(rq.n_tokens, rq.top_k));
	b = (struct locus_grace_batch){
		.layer = rq.layer, .src_rank = c->rank, .n_tokens = rq.n_tokens,
		.top_k = rq.top_k, .experts = experts, .gates = gates,
		.lost = e->n_lost ? e->lost : NULL,
	};
	/* planned again, once, when a destination's node went down since the
	 * lost set was last made: its ranks are lost from then on */
	for (int again = 0;; again = 1) {
		nd = locus_grace_plan_batch(plan_st, map, &b, p, NULL);
		if (nd < 0) {
			ret = nd;
			engine_count(e, e->c.rej_bad_descriptor);
			goto out;
		}
		if (p->n_masked && !(d->flags & LOCUS_DESC_F_MASK)) {
			ret = -LOCUS_EPEERDOWN;
			engine_count(e, e->c.rej_peer_down);
			goto out;
		}
		ret = reserve_all(e, slot, c->rank, nd, rq.top_k, rq.row_bytes, &src, pl->gen,
				  &n_res, &any_remote);
		if (ret != -LOCUS_EPEERDOWN || again || !engine_live_refresh(e))
			break;
		engine_count(e, e->c.replanned);
		b.lost = e->n_lost ? e->lost : NULL;
	}
	if (ret == -LOCUS_ESTALEPLACEMENT)
		goto out; /* counted with its reason */
	if (ret < 0) {
		engine_count(e, ret == -LOCUS_EPEERDOWN ? e->c.rej_peer_down
			     : ret == -EOPNOTSUPP ? e->c.rej_region_unmapped : e->c.rej_inbox_full);
		goto out;
	}
	d->blocks = 0;
	if (p->n_masked)
		mask_slots(e, c, d, &rq, p);
	d->count = (uint32_t)nd;
	d->dests = 0;
	for (int i = 0; i < nd; i++)
		if (p->dest[i] < 64)
			d->dests |= 1ull << p->dest[i];
	if (any_remote) {
		pidx = engine_pending_get(e, slot, d, t0, e->c.dispatch_ns);
		if (src.rg)
			engine_pending_hold_region(e, pidx, src.rg);
	}

	/* phase 2: write and hand over */
	for (int i = 0; i < nd; i++) {
		const struct dest_plan *q = &e->dplan[i];
		uint32_t rank = p->dest[i], first_row = p->dest_start[i];
		uint32_t n_rows = p->dest_start[i + 1] - first_row;

		for (uint32_t k = 0; k < q->n_chunks; k++, ri++) {
			uint32_t r0 = first_row + k * q->rows_per_msg;
			uint32_t nr = LOCUS_MIN(q->rows_per_msg, n_rows - k * q->rows_per_msg);
			size_t len = locus_rows_msg_len(nr, rq.top_k, rq.row_bytes, (int)q->in_place);

			int gather = q->remote && src.rg, dma = by_ldma(e, q, &src), ret2;
			uint8_t *msg = msg_ptr(e, ri);

			fill_dispatch_msg(msg, len, &rq, q, k, nr, r0, p, experts, gates,
					  &src, !gather && !dma, c->rank, rank, e->seq[rank]++,
					  pl->gen);
			if (gather) {
				ret2 = send_from_region(e, ri, q, pidx, &src, rq.rows_off, rq.row_bytes,
							p->rows, r0, nr,
							locus_rows_msg_rows_off(nr, rq.top_k), len);
			} else {
				ret2 = dma ? hand_over(e, ri, q, pidx, LOCUS_OP_ROWS_IN, rq.batch_id,
						       rq.layer, c->rank, len, (uint16_t)k, &src,
						       dispatch_srcs(e, c->buf, &rq, p, r0, nr),
						       locus_rows_hdr_of(msg)->rows_off) : -1;
				if (ret2 < 0) {
					if (dma)
						dispatch_rows_cpu(msg, &rq, p, r0, nr, src.base);
					ret2 = hand_over(e, ri, q, pidx, LOCUS_OP_ROWS_IN, rq.batch_id,
							 rq.layer, c->rank, len, (uint16_t)k, &src, 0, 0);
				}
			}
			if (ret2 < 0)
				continue;
			if (k == 0 && !q->in_place)
				engine_answer_sent(e, c->rank, rank, rq.batch_id, t0);
			count_tier(e, OP_DISPATCH_IDX, q->tier, nr,
				   q->in_place ? 0 : (uint64_t)nr * rq.row_bytes);
			rows_sent += nr;
		}
	}
	/* the live per-(layer, expert) load that locusctl rebalance reads */
	for (uint64_t i = 0; i < (uint64_t)rq.n_tokens * rq.top_k; i++)
		locus_counter_add_elem(e->blk, e->c.expert_tokens,
				       (uint32_t)(rq.layer * e->p.dims.max_experts + experts[i]), 1);
	if (pidx >= 0) {
		e->pend[pidx].d.aux = rows_sent;
		engine_pending_arm(e, pidx, 0);
		return;
	}
	ret = 0;
	d->aux = rows_sent;
out:
	d->status = ret;
	engine_complete(e, c, d);
	locus_hist_record(e->blk, e->c.dispatch_ns, (e->p.now() - t0) * 1000000000ull / e->p.tsc_hz);
}

void engine_combine(struct locus_engine *e, uint32_t slot, struct locus_desc *d)
{
	struct engine_client *c = &e->cl[slot];
	const struct locus_row_ref *refs;
	struct locus_combine_req rq;
	struct dest_plan *dp = &e->dplan[0];
	struct rows_src src;
	uint64_t t0 = e->p.now();
	uint32_t n_res = 0;
	int ret, pidx = -1;

	engine_count(e, e->c.combine_batches);
	if (!(c->roles & LOCUS_ROLE_RANK) || !stage_range_ok(e, d->off, d->len) ||
	    d->len < sizeof(rq)) {
		ret = -LOCUS_EPROTO;
		engine_count(e, e->c.rej_bad_descriptor);
		goto out;
	}
	ret = rows_source(e, slot, d, &src);
	if (ret < 0)
		goto out;
	memcpy(&rq, c->buf + d->off, sizeof(rq));
	refs = (const struct locus_row_ref *)private_body(e, c->buf + d->off + sizeof(rq),
							  d->len - sizeof(rq));
	ret = refs ? locus_combine_req_check(&rq, refs, d->len, src.size, e->n_ranks,
					     e->p.dims.max_tokens * LOCUS_MAX_TOPK, NULL)
		   : -LOCUS_ERANGE;
	if (ret < 0) {
		engine_count(e, e->c.rej_bad_descriptor);
		goto out;
	}
	ret = target_of(e, slot, c->rank, rq.dst_rank, 0, rq.row_bytes, rq.n_rows, dp);
	if (ret == 0)
		ret = src_reaches(e, &src, dp);
	if (ret == 0)
		ret = reserve(e, dp, rq.n_rows, 0, rq.row_bytes, &n_res);
	if (ret == 0 && (dp->remote || by_ldma(e, dp, &src)) && !e->n_pend_free)
		ret = -LOCUS_EFULL;
	if (ret < 0) {
		/* reserve() promises completion entries only when it succeeds, and
		 * only the remote case can still fail after it */
		release_reservations(e, n_res);
		engine_count(e, ret == -LOCUS_EPEERDOWN ? e->c.rej_peer_down
			     : ret == -EOPNOTSUPP ? e->c.rej_region_unmapped : e->c.rej_inbox_full);
		goto out;
	}
	d->count = dp->n_chunks;
	d->aux = rq.n_rows;
	if (dp->remote || by_ldma(e, dp, &src)) {
		pidx = engine_pending_get(e, slot, d, t0, e->c.combine_ns);
		if (src.rg)
			engine_pending_hold_region(e, pidx, src.rg);
	}
	for (uint32_t k = 0; k < dp->n_chunks; k++) {
		uint32_t r0 = k * dp->rows_per_msg;
		uint32_t nr = LOCUS_MIN(dp->rows_per_msg, rq.n_rows - r0);
		size_t len = locus_rows_msg_len(nr, 0, rq.row_bytes, (int)dp->in_place);
		uint8_t *msg = msg_ptr(e, k);
		struct locus_rows_hdr *h = locus_rows_hdr_of(msg);

		locus_msg_hdr_init((struct locus_msg_hdr *)msg, LOCUS_MSG_COMBINE,
				   (uint32_t)(len - sizeof(struct locus_msg_hdr)), rq.batch_id,
				   c->rank, rq.dst_rank, e->seq[rq.dst_rank]++);
		*h = (struct locus_rows_hdr){
			.magic = LOCUS_ROWS_MAGIC, .layer = rq.layer, .n_rows = nr,
			.row_bytes = rq.row_bytes,
			.flags = dp->in_place ? LOCUS_ROWS_IN_PLACE |
						(src.rg ? LOCUS_ROWS_IN_REGION : 0) : 0,
			.chunk = (uint16_t)k, .n_chunks = (uint16_t)dp->n_chunks,
			.rows_off = dp->in_place ? rq.rows_off + (uint64_t)r0 * rq.row_bytes
						 : locus_rows_msg_rows_off(nr, 0),
			.batch_id = rq.batch_id,
		};
		memcpy(locus_rows_refs(msg), refs + r0, (size_t)nr * sizeof(*refs));
		if (dp->remote && src.rg) {
			if (send_from_region(e, k, dp, pidx, &src, rq.rows_off, rq.row_bytes, NULL, r0,
					     nr, h->rows_off, len) < 0)
				continue;
		} else {
			e->lsrc[0] = (struct locus_engine_ldma_src){
				.off = region_off(e, c->buf) + rq.rows_off + (uint64_t)r0 * rq.row_bytes,
				.len = nr * rq.row_bytes,
			};
			if (!by_ldma(e, dp, &src) || !nr ||
			    hand_over(e, k, dp, pidx, LOCUS_OP_RESULTS_IN, rq.batch_id, rq.layer,
				      c->rank, len, (uint16_t)k, &src, 1, h->rows_off) < 0) {
				if (!dp->in_place)
					memcpy(msg + h->rows_off,
					       src.base + rq.rows_off + (uint64_t)r0 * rq.row_bytes,
					       (size_t)nr * rq.row_bytes);
				if (hand_over(e, k, dp, pidx, LOCUS_OP_RESULTS_IN, rq.batch_id,
					      rq.layer, c->rank, len, (uint16_t)k, &src, 0, 0) < 0)
					continue;
			}
		}
		count_tier(e, OP_COMBINE_IDX, dp->tier, nr,
			   dp->in_place ? 0 : (uint64_t)nr * rq.row_bytes);
		if (k + 1 == dp->n_chunks && !dp->remote)
			engine_answer_back(e, rq.dst_rank, c->rank, rq.batch_id);
	}
	if (pidx >= 0) {
		engine_pending_arm(e, pidx, 0);
		return;
	}
out:
	d->status = ret;
	engine_complete(e, c, d);
	locus_hist_record(e->blk, e->c.combine_ns, (e->p.now() - t0) * 1000000000ull / e->p.tsc_hz);
}
