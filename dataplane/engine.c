// SPDX-License-Identifier: MIT
/*
 * Engine core: creation, the poll loop, control commands, table hot-swap,
 * completions and the inbox allocator. Routing is in engine_route.c,
 * dispatch and combine in engine_dispatch.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"
#include "locus_client_priv.h"
#include "locus_counters_priv.h"
#include "locus_err_priv.h"
#include "locus_tblfile.h"

#define HOUSEKEEPING_US 100

/* ---- memory ---------------------------------------------------------------- */

static void *zalloc_aligned(size_t n)
{
	void *p = NULL;

	n = LOCUS_ALIGN_UP(n ? n : 1, (size_t)LOCUS_CACHE_LINE);
	if (posix_memalign(&p, LOCUS_CACHE_LINE, n))
		return NULL;
	memset(p, 0, n);
	return p;
}

void *engine_zalloc(size_t n)
{
	return zalloc_aligned(n);
}

/* Router bytes for the largest table the dims allow. */
/*
 * Router memory for the largest table this data plane takes: every layer,
 * max_decoders decoders and up to LOCUS_ENGINE_CENTROIDS_PER_DECODER
 * centroids each (a version 2 table with more is refused: "would not fit").
 */
static size_t router_max_size(const struct locus_engine_dims *d)
{
	uint32_t c = d->max_decoders * LOCUS_ENGINE_CENTROIDS_PER_DECODER;
	struct locus_eldr_tbl_hdr h = {
		.n_layers = (uint16_t)d->max_layers,
		.n_experts = (uint16_t)d->max_experts,
		.n_decoders = (uint16_t)d->max_decoders,
		.n_masked = (uint16_t)d->max_layers,
		.n_centroids = (uint16_t)(c < LOCUS_ELDR_MAX_CENTROIDS ? c : LOCUS_ELDR_MAX_CENTROIDS),
	};

	return locus_eldr_router_mem_size(&h, sizeof(h));
}

static struct locus_grace_dims grace_max_dims(const struct locus_engine_dims *d)
{
	uint32_t ranks = d->n_nodes * d->gpus_per_node;

	return (struct locus_grace_dims){
		.n_layers = d->max_layers,
		.n_experts = d->max_experts,
		.n_nodes = d->n_nodes,
		.gpus_per_node = d->gpus_per_node,
		.max_replicas = ranks > 1 ? LOCUS_MIN(ranks - 1, LOCUS_GRACE_MAX_REPLICAS) : 0,
		.capacity = d->max_experts,
		.replica_budget = d->max_experts,
	};
}

/* ---- table validation (runs on the reader, before a switch) ------------------ */

static int eldr_validate(const void *buf, size_t len, void *arg, struct locus_error *err)
{
	struct locus_engine *e = arg;
	struct locus_eldr_tbl_view v;
	const void *pl;
	size_t plen;
	int ret;

	ret = locus_tbl_check(buf, len, LOCUS_TBL_ELDR, &pl, &plen, err);
	if (ret < 0)
		return ret;
	ret = locus_eldr_tbl_validate(pl, plen, &v, err);
	if (ret < 0)
		return ret;
	if (v.hdr->n_layers > e->p.dims.max_layers || v.hdr->n_experts > e->p.dims.max_experts ||
	    v.hdr->n_decoders > e->p.dims.max_decoders)
		return locus_error_set(err, LOCUS_ERANGE,
				       "ELDR table %ux%u with %u decoders exceeds this data plane's "
				       "%ux%u and %u decoders",
				       v.hdr->n_layers, v.hdr->n_experts, v.hdr->n_decoders,
				       e->p.dims.max_layers, e->p.dims.max_experts,
				       e->p.dims.max_decoders);
	for (uint32_t k = 0; k < v.hdr->n_decoders; k++)
		if (v.decoder_ids[k] >= e->p.dims.max_decoders)
			return locus_error_set(err, LOCUS_ERANGE, "decoder id %u >= %u",
					       v.decoder_ids[k], e->p.dims.max_decoders);
	if (locus_eldr_router_mem_size(pl, plen) > e->router_mem_len)
		return locus_error_set(err, LOCUS_ERANGE, "ELDR router would not fit");
	return 0;
}

/* A validated table became current on channel ch: rebuild what reads it. */
static void adopt_table(struct locus_engine *e, unsigned ch)
{
	struct locus_table_reader *r = &e->rd[ch];
	const void *pl;
	size_t len, plen;
	const void *t = locus_table_reader_table(r, &len);
	int nb;

	if (!t || locus_tbl_check(t, len, 0, &pl, &plen, NULL) < 0)
		return;
	if (ch == LOCUS_TABLE_CH_ELDR) {
		struct locus_eldr_router *nr;

		nb = e->router_buf ^ 1;
		if (locus_eldr_router_build(e->router_mem[nb], e->router_mem_len, pl, plen,
					    (enum locus_eldr_path)e->p.router_path, &nr, NULL) < 0)
			return;
		e->router = nr;
		e->router_buf = nb;
		engine_router_refresh(e);
		{
			uint16_t tl, te;

			locus_eldr_router_shape(nr, &tl, &te);
			engine_blocks_table(e, tl, te);
			if (engine_primary(e)) {
				locus_gauge_set_elem(e->blk, e->c.table_layers, ch, tl);
				locus_gauge_set_elem(e->blk, e->c.table_experts, ch, te);
				locus_gauge_set(e->blk, e->c.router_path,
						(int64_t)locus_eldr_router_path(nr));
			}
		}
	} else if (engine_grace_adopt(e, t, len, r->cur_gen) < 0) {
		return;
	}
	__atomic_store_n(&e->gen[ch], r->cur_gen, __ATOMIC_RELEASE);
	/* the node's table: engine 0 speaks for every engine (they check alike) */
	if (!engine_primary(e))
		return;
	locus_gauge_set_elem(e->blk, e->c.table_generation, ch, (int64_t)r->cur_gen);
	locus_counter_add_elem(e->blk, e->c.table_adopted, ch, 1);
}

static void poll_tables(struct locus_engine *e)
{
	for (unsigned ch = 0; ch < LOCUS_TABLE_N_CHANNELS; ch++) {
		int ret;

		if (!e->rd_ok[ch])
			continue;
		ret = locus_table_reader_poll(&e->rd[ch]);
		if (likely(ret == 0))
			continue;
		if (ret > 0)
			adopt_table(e, ch);
		else if (engine_primary(e))
			locus_counter_add_elem(e->blk, e->c.table_rejected, ch, 1);
	}
}

/* ---- creation ---------------------------------------------------------------- */

static int dims_ok(const struct locus_engine_dims *d)
{
	return d->n_nodes >= 1 && d->gpus_per_node >= 1 && d->node_id < d->n_nodes &&
	       d->n_nodes * d->gpus_per_node <= LOCUS_GRACE_MAX_RANKS && d->max_layers >= 1 &&
	       d->max_layers <= LOCUS_GRACE_MAX_LAYERS && d->max_experts >= 1 &&
	       d->max_experts <= LOCUS_GRACE_MAX_EXPERTS && d->max_decoders >= 1 &&
	       d->max_decoders <= LOCUS_ELDR_MAX_DECODERS && d->max_tokens >= 1 &&
	       d->max_tokens <= (1u << 20) && d->load_timeout_ms >= 1;
}

int locus_engine_create(const struct locus_engine_params *p, struct locus_engine **out,
			struct locus_error *err)
{
	struct locus_grace_dims gd;
	struct locus_engine *e;
	size_t plan_bytes;
	int ret = -ENOMEM;

	if (!p || !p->clients || !p->tables || !p->ctr_block || !p->now || !p->tsc_hz ||
	    !dims_ok(&p->dims))
		return locus_error_set(err, EINVAL, "engine parameters out of range");
	e = zalloc_aligned(sizeof(*e));
	if (!e)
		return locus_error_set(err, ENOMEM, "engine: out of memory");
	e->p = *p;
	e->cv = p->clients;
	e->blk = p->ctr_block;
	e->c = p->ctr;
	e->n_slots = p->clients->p.n_slots;
	e->n_ranks = p->dims.n_nodes * p->dims.gpus_per_node;
	e->stage_size = p->clients->p.stage_size;
	e->inbox_slots = p->clients->p.inbox_slots;
	e->inbox_slot_size = p->clients->p.inbox_slot_size;
	e->inbox_words = (e->inbox_slots + 63) / 64;
	e->housekeeping_period = p->tsc_hz / (1000000 / HOUSEKEEPING_US);
	e->load_timeout_tsc = p->tsc_hz / 1000 * p->dims.load_timeout_ms;
	e->router_buf = 1;
	e->rt = p->remote;
	if (e->rt && (!e->rt->alloc || !e->rt->free || !e->rt->send || !e->rt->peer_up ||
		      e->rt->max_msg < 4096)) {
		free(e);
		return locus_error_set(err, EINVAL, "engine: incomplete remote transport");
	}

	e->cmds = zalloc_aligned(sizeof(*e->cmds) * e->n_slots);
	e->cl = zalloc_aligned(sizeof(*e->cl) * e->n_slots);
	e->dec = zalloc_aligned(sizeof(*e->dec) * p->dims.max_decoders);
	e->rank_slot = zalloc_aligned(sizeof(*e->rank_slot) * e->n_ranks);
	e->seq = zalloc_aligned(sizeof(*e->seq) * e->n_ranks);
	e->refused = zalloc_aligned(sizeof(*e->refused) * e->n_ranks);
	if (!e->cmds || !e->cl || !e->dec || !e->rank_slot || !e->seq || !e->refused ||
	    engine_regions_alloc(e))
		goto err_free;
	ret = engine_cross_init(e, err);
	if (ret < 0)
		goto err_free;
	ret = -ENOMEM;
	for (uint32_t i = 0; i < e->n_slots; i++) {
		e->cl[i].inbox_free = zalloc_aligned(8 * e->inbox_words);
		e->cl[i].inbox_span = zalloc_aligned(2 * e->inbox_slots);
		if (!e->cl[i].inbox_free || !e->cl[i].inbox_span)
			goto err_free;
	}
	for (uint32_t d = 0; d < p->dims.max_decoders; d++)
		e->dec[d] = (struct engine_decoder){ .slot = -1, .router_slot = -1, .node = -1 };
	for (uint32_t r = 0; r < e->n_ranks; r++)
		e->rank_slot[r] = -1;

	e->router_mem_len = router_max_size(&p->dims);
	gd = grace_max_dims(&p->dims);
	plan_bytes = locus_grace_plan_mem_size(p->dims.max_tokens, LOCUS_MAX_TOPK, e->n_ranks);
	if (!e->router_mem_len || !plan_bytes) {
		ret = locus_error_set(err, EINVAL, "engine: table bounds out of range");
		goto err_free;
	}
	ret = engine_grace_alloc(e, &gd, err);
	if (ret < 0)
		goto err_free;
	ret = -ENOMEM;
	for (int i = 0; i < 2; i++) {
		e->router_mem[i] = zalloc_aligned(e->router_mem_len);
		if (!e->router_mem[i])
			goto err_free;
	}
	e->plan_mem = zalloc_aligned(plan_bytes);
	e->req_body_max = LOCUS_MAX(
		locus_dispatch_req_len(p->dims.max_tokens, LOCUS_MAX_TOPK) -
			sizeof(struct locus_dispatch_req),
		locus_combine_req_len(p->dims.max_tokens * LOCUS_MAX_TOPK) -
			sizeof(struct locus_combine_req));
	e->req_body = zalloc_aligned(e->req_body_max);
	/* one message per destination and chunk: at most one per row planned,
	 * and each takes an inbox slot */
	e->res_max = LOCUS_MIN(p->dims.max_tokens * LOCUS_MAX_TOPK, e->n_slots * e->inbox_slots);
	e->res_slot = zalloc_aligned(sizeof(uint32_t) * e->res_max);
	e->res_client = zalloc_aligned(sizeof(uint32_t) * e->res_max);
	e->dplan = zalloc_aligned(sizeof(*e->dplan) * e->n_ranks);
	e->res_buf = zalloc_aligned(sizeof(void *) * e->res_max);
	/* one pending request per completion entry the clients can hold */
	e->n_pend = LOCUS_MIN(e->n_slots * p->clients->p.ring_size, 65536u);
	e->pend = zalloc_aligned(sizeof(*e->pend) * e->n_pend);
	e->pend_free = zalloc_aligned(sizeof(uint32_t) * e->n_pend);
	if (!e->plan_mem || !e->req_body || !e->res_slot || !e->res_client ||
	    !e->dplan || !e->res_buf || !e->pend || !e->pend_free)
		goto err_free;
	for (uint32_t i = 0; i < e->n_pend; i++)
		e->pend_free[e->n_pend_free++] = e->n_pend - 1 - i;
	if (engine_ldma_create(e) < 0)
		goto err_free;
	ret = engine_blocks_create(e, err);
	if (ret < 0)
		goto err_free;
	e->load_period = p->tsc_hz / 1000000 *
			 (e->rt && e->rt->load_period_us ? e->rt->load_period_us : 1000);
	ret = engine_load_init(e, err);
	if (ret < 0)
		goto err_free;
	ret = engine_live_init(e, err);
	if (ret < 0)
		goto err_free;
	ret = engine_answer_init(e, err);
	if (ret < 0)
		goto err_free;
	ret = locus_grace_plan_init(&e->plan, e->plan_mem, plan_bytes, p->dims.max_tokens,
				    LOCUS_MAX_TOPK, e->n_ranks);
	if (ret < 0) {
		locus_error_set(err, ret, "engine: plan memory");
		goto err_free;
	}

	ret = locus_table_reader_register(p->tables, LOCUS_TABLE_CH_ELDR, p->reader_idx,
					  eldr_validate, e, &e->rd[0], err);
	if (ret < 0)
		goto err_free;
	e->rd_ok[0] = 1;
	ret = locus_table_reader_register(p->tables, LOCUS_TABLE_CH_GRACE, p->reader_idx,
					  engine_grace_validate, e, &e->rd[1], err);
	if (ret < 0)
		goto err_unreg;
	e->rd_ok[1] = 1;
	e->next_housekeeping = p->now();
	locus_gauge_set(e->blk, e->c.engines, 1);
	*out = e;
	return 0;

err_unreg:
	locus_table_reader_unregister(&e->rd[0]);
err_free:
	locus_engine_destroy(e);
	if (ret == -ENOMEM)
		locus_error_set(err, ENOMEM, "engine: out of memory");
	return ret;
}

void locus_engine_destroy(struct locus_engine *e)
{
	if (!e)
		return;
	for (unsigned ch = 0; ch < LOCUS_TABLE_N_CHANNELS; ch++)
		if (e->rd_ok[ch])
			locus_table_reader_unregister(&e->rd[ch]);
	if (e->cl)
		for (uint32_t i = 0; i < e->n_slots; i++) {
			free(e->cl[i].inbox_free);
			free(e->cl[i].inbox_span);
		}
	for (int i = 0; i < 2; i++)
		free(e->router_mem[i]);
	engine_grace_free(e);
	free(e->plan_mem);
	free(e->req_body);
	free(e->res_slot);
	free(e->res_client);
	free(e->dplan);
	free(e->res_buf);
	free(e->pend);
	free(e->pend_free);
	engine_ldma_destroy(e);
	engine_blocks_destroy(e);
	engine_load_fini(e);
	engine_live_fini(e);
	engine_answer_fini(e);
	free(e->cmds);
	engine_regions_free(e);
	free(e->cl);
	free(e->dec);
	free(e->rank_slot);
	free(e->seq);
	free(e->refused);
	engine_cross_fini(e);
	free(e);
}

/* ---- inbox allocator: first fit of `span` consecutive free slots ---------------- */

uint32_t engine_span_for(const struct locus_engine *e, size_t len)
{
	return (uint32_t)((len + e->inbox_slot_size - 1) / e->inbox_slot_size);
}

static int slot_free(const struct engine_client *c, uint32_t i)
{
	return (c->inbox_free[i / 64] >> (i % 64)) & 1;
}

/* Only in our share of the inbox (all of it for the only engine). */
int engine_inbox_alloc(struct locus_engine *e, struct engine_client *c, uint32_t span)
{
	uint32_t run = 0, size = e->share_hi - e->share_lo;

	if (span == 0 || span > size || size - c->inbox_used < span)
		return -LOCUS_EFULL;
	for (uint32_t i = e->share_lo; i < e->share_hi; i++) {
		if (!slot_free(c, i)) {
			run = 0;
			/* skip whole taken words quickly */
			if (i % 64 == 0 && c->inbox_free[i / 64] == 0 && i + 64 <= e->share_hi)
				i += 63;
			continue;
		}
		if (++run == span) {
			uint32_t first = i + 1 - span;

			for (uint32_t j = first; j <= i; j++)
				c->inbox_free[j / 64] &= ~(1ull << (j % 64));
			c->inbox_span[first] = (uint16_t)span;
			c->inbox_used += span;
			e->inbox_used += span;
			return (int)first;
		}
	}
	return -LOCUS_EFULL;
}

void engine_inbox_free(struct locus_engine *e, struct engine_client *c, uint32_t first)
{
	uint32_t span = c->inbox_span[first];

	for (uint32_t j = first; j < first + span; j++)
		c->inbox_free[j / 64] |= 1ull << (j % 64);
	c->inbox_span[first] = 0;
	c->inbox_used -= span;
	e->inbox_used -= span;
}

/*
 * Every inbox slot of our share of c free (a new attachment, or one that
 * ended); what the other shares' messages were is forgotten too.
 */
static void inbox_reset(struct locus_engine *e, struct engine_client *c)
{
	e->inbox_used -= c->inbox_used;
	memset(c->inbox_free, 0, 8 * e->inbox_words);
	for (uint32_t i = e->share_lo; i < e->share_hi; i++)
		c->inbox_free[i / 64] |= 1ull << (i % 64);
	memset(c->inbox_span, 0, 2 * e->inbox_slots);
	c->inbox_used = 0;
}

/* ---- completions -------------------------------------------------------------- */

/*
 * Completion entries a client can still take beyond those owed to its own
 * burst and kept for the other engines' shares of its inbox; for a client
 * another engine owns, the hand-overs our ring to it still takes.
 */
uint32_t engine_room(struct locus_engine *e, struct engine_client *c)
{
	uint32_t free_n, owed;

	if (!c->owned)
		return engine_cross_room(e, c);
	free_n = locus_ring_free_count(&c->cpl);
	owed = c->cpl_reserved + c->cpl_pending + e->foreign_reserve;
	return free_n > owed ? free_n - owed : 0;
}

static int put_completion(struct engine_client *c, const struct locus_desc *d)
{
	if (unlikely(locus_ring_enqueue_burst(&c->cpl, d, 1) != 1)) {
		/* room was checked: only a client corrupting its ring gets here */
		c->broken = 1;
		return -LOCUS_EPROTO;
	}
	return 0;
}

/* The submitter's completion: room was reserved when its descriptor was taken. */
int engine_complete(struct locus_engine *e, struct engine_client *c, const struct locus_desc *d)
{
	(void)e;
	if (c->cpl_reserved)
		c->cpl_reserved--;
	return put_completion(c, d);
}

/*
 * A delivery to a client (the caller checked engine_room() first): on its
 * completion ring, or handed to the engine that owns it.
 */
int engine_deliver(struct locus_engine *e, uint32_t slot, const struct locus_desc *d)
{
	if (!e->cl[slot].owned)
		return engine_cross_deliver(e, slot, d);
	return put_completion(&e->cl[slot], d);
}

static void complete_error(struct locus_engine *e, struct engine_client *c,
			   const struct locus_desc *in, int status, uint64_t ctr)
{
	struct locus_desc d = *in;

	d.status = status;
	engine_count(e, ctr);
	engine_complete(e, c, &d);
}

/* ---- control commands ---------------------------------------------------------- */

uint64_t locus_engine_command(struct locus_engine *e, uint32_t slot, enum locus_engine_cmd cmd,
			      const struct locus_engine_grant *grant)
{
	struct engine_cmd *c = &e->cmds[slot];
	uint64_t ticket = c->ticket + 1;

	c->cmd = cmd;
	if (grant)
		c->grant = *grant;
	__atomic_store_n(&c->ticket, ticket, __ATOMIC_RELEASE);
	__atomic_add_fetch(&e->cmd_posted, 1, __ATOMIC_RELEASE);
	return ticket;
}

int locus_engine_command_done(struct locus_engine *e, uint32_t slot, uint64_t ticket)
{
	return __atomic_load_n(&e->cmds[slot].done, __ATOMIC_ACQUIRE) >= ticket;
}

static void client_attach(struct locus_engine *e, uint32_t slot, const struct locus_engine_grant *g)
{
	struct engine_client *c = &e->cl[slot];
	struct locus_client_ctl *ctl = locus_clients_ctl(e->cv, slot);
	struct locus_clients *v = e->cv;

	c->active = 0;
	c->broken = 0;
	c->epoch++;
	c->cpl_pending = 0;
	c->ctl = ctl;
	c->roles = g->roles;
	c->decoder_id = g->decoder_id;
	c->rank = g->rank;
	c->owner = g->engine < e->n_eng ? g->engine : 0;
	c->owned = c->owner == e->idx;
	c->buf = locus_clients_buf(v, slot);
	inbox_reset(e, c);
	/* another engine's client: we only deliver to it, its rings are not ours */
	if (c->owned &&
	    (locus_ring_attach(&c->sub, locus_clients_submit_ring(v, slot), v->ring_bytes,
			       v->p.ring_size, LOCUS_DESC_SIZE, 0) < 0 ||
	     locus_ring_attach(&c->cpl, locus_clients_completion_ring(v, slot), v->ring_bytes,
			       v->p.ring_size, LOCUS_DESC_SIZE, 1) < 0)) {
		engine_count(e, e->c.client_protocol_errors);
		return;
	}
	/* The control thread checked ids against the cluster before activating. */
	if ((c->roles & LOCUS_ROLE_DECODE) && c->decoder_id < e->p.dims.max_decoders) {
		e->dec[c->decoder_id].slot = (int32_t)slot;
		e->dec[c->decoder_id].up = 1;
		c->load_seq = __atomic_load_n(&ctl->load_seq, __ATOMIC_ACQUIRE);
		c->load_tsc = e->p.now();
	}
	if ((c->roles & LOCUS_ROLE_RANK) && c->rank < e->n_ranks)
		e->rank_slot[c->rank] = (int32_t)slot;
	c->active = 1;
	if (c->owned)
		locus_gauge_add(e->blk, e->c.clients_attached, 1);
	engine_router_refresh(e);
	/* a rank that attaches is live at once; it learns who else is */
	if (!engine_live_refresh(e))
		engine_live_publish(e, slot);
}

static void client_detach(struct locus_engine *e, uint32_t slot)
{
	struct engine_client *c = &e->cl[slot];

	if (!c->active)
		return;
	if ((c->roles & LOCUS_ROLE_DECODE) && c->decoder_id < e->p.dims.max_decoders &&
	    e->dec[c->decoder_id].slot == (int32_t)slot) {
		e->dec[c->decoder_id].slot = -1;
		e->dec[c->decoder_id].up = 0;
		/* housekeeping skips a decoder nobody serves: say it is down here */
		if (c->owned)
			locus_gauge_set_elem(e->blk, e->c.decoder_up, c->decoder_id, 0);
	}
	if ((c->roles & LOCUS_ROLE_RANK) && c->rank < e->n_ranks &&
	    e->rank_slot[c->rank] == (int32_t)slot)
		e->rank_slot[c->rank] = -1;
	c->active = 0;
	/* what it never released is nobody's now: the next attachment starts empty */
	inbox_reset(e, c);
	if (c->owned)
		locus_gauge_add(e->blk, e->c.clients_attached, -1);
	engine_router_refresh(e);
	engine_live_refresh(e); /* its rank is lost at once */
}

static void run_commands(struct locus_engine *e)
{
	uint64_t posted = __atomic_load_n(&e->cmd_posted, __ATOMIC_ACQUIRE);

	if (likely(posted == e->cmd_seen))
		return;
	for (uint32_t i = 0; i < e->n_slots; i++) {
		struct engine_cmd *c = &e->cmds[i];
		uint64_t t = __atomic_load_n(&c->ticket, __ATOMIC_ACQUIRE);

		if (t == c->done)
			continue;
		if (c->cmd == LOCUS_ENGINE_ATTACH)
			client_attach(e, i, &c->grant);
		else
			client_detach(e, i);
		__atomic_store_n(&c->done, t, __ATOMIC_RELEASE);
	}
	e->cmd_seen = posted;
}

/* ---- the poll loop ----------------------------------------------------------------- */

/*
 * A slot of another engine's share goes back to that engine (the span we
 * recorded when we posted the message says it is one); ours is freed here.
 */
static void handle_release(struct locus_engine *e, struct engine_client *c, struct locus_desc *d)
{
	if (d->slot >= e->inbox_slots || c->inbox_span[d->slot] == 0) {
		complete_error(e, c, d, -LOCUS_ERANGE, e->c.rej_bad_release);
		return;
	}
	if (e->share_of[d->slot] != e->idx) {
		if (engine_cross_release(e, c, d->slot) < 0) {
			complete_error(e, c, d, -LOCUS_EFULL, e->c.rej_inbox_full);
			return;
		}
		c->inbox_span[d->slot] = 0;
	} else {
		engine_inbox_free(e, c, d->slot);
	}
	c->cpl_reserved--; /* a valid RELEASE is not answered */
}

static int poll_client(struct locus_engine *e, uint32_t slot)
{
	struct engine_client *c = &e->cl[slot];
	struct locus_desc in[LOCUS_ENGINE_BURST];
	uint32_t room;
	int64_t n;

	/* Take no more than we can answer: one completion per descriptor. */
	room = locus_ring_free_count(&c->cpl);
	room = room > c->cpl_pending + e->foreign_reserve ?
		       room - c->cpl_pending - e->foreign_reserve : 0;
	if (room == 0)
		return 0;
	n = locus_ring_dequeue_burst(&c->sub, in, LOCUS_MIN(room, (uint32_t)LOCUS_ENGINE_BURST));
	if (unlikely(n <= 0)) {
		if (n < 0) {
			c->broken = 1;
			engine_count(e, e->c.client_protocol_errors);
		}
		return 0;
	}
	c->cpl_reserved = (uint32_t)n;
	for (int64_t i = 0; i < n; i++) {
		struct locus_desc *d = &in[i];
		int64_t run;

		switch (d->op) {
		case LOCUS_OP_ROUTE:
			/* a run of ROUTEs is scored in one pass over the centroids */
			for (run = 1; i + run < n && in[i + run].op == LOCUS_OP_ROUTE; run++)
				;
			engine_route_burst(e, slot, d, (uint32_t)run);
			i += run - 1;
			break;
		case LOCUS_OP_DISPATCH:
			engine_dispatch(e, slot, d);
			break;
		case LOCUS_OP_COMBINE:
			engine_combine(e, slot, d);
			break;
		case LOCUS_OP_RELEASE:
			handle_release(e, c, d);
			break;
		case LOCUS_OP_ROUTE_BLOCKS:
			engine_route_blocks(e, slot, d);
			break;
		case LOCUS_OP_EVICT:
			engine_evict(e, slot, d);
			break;
		default:
			complete_error(e, c, d, -LOCUS_EPROTO, e->c.rej_bad_descriptor);
			break;
		}
	}
	return (int)n;
}

int locus_engine_poll(struct locus_engine *e)
{
	uint64_t now;
	int work = 0;

	run_commands(e);
	engine_region_commands(e);
	engine_regions_retire(e);
	poll_tables(e);
	if (e->n_eng > 1)
		work += engine_cross_poll(e);
	for (uint32_t i = 0; i < e->n_slots; i++)
		if (e->cl[i].active && e->cl[i].owned && !e->cl[i].broken)
			work += poll_client(e, i);
	now = e->p.now();
	if (unlikely(now >= e->next_housekeeping)) {
		engine_decoders_housekeeping(e, now);
		engine_load_exchange(e, now);
		engine_answer_window(e, now);
		locus_gauge_set(e->blk, e->c.inbox_slots_used, (int64_t)e->inbox_used);
		locus_gauge_set(e->blk, e->c.requests_pending, (int64_t)(e->n_pend - e->n_pend_free));
		e->next_housekeeping = now + e->housekeeping_period;
	}
	engine_count(e, e->c.poll_iterations);
	if (work)
		engine_count(e, e->c.poll_busy);
	return work;
}

void locus_engine_idle_slept(struct locus_engine *e, uint64_t ticks)
{
	engine_count(e, e->c.idle_sleeps);
	/* whole seconds apart: a sleep stretched by preemption must not overflow */
	locus_counter_add(e->blk, e->c.idle_sleep_ns,
			  ticks / e->p.tsc_hz * 1000000000ull +
				  ticks % e->p.tsc_hz * 1000000000ull / e->p.tsc_hz);
}

uint64_t locus_engine_table_generation(const struct locus_engine *e, unsigned ch)
{
	return ch < LOCUS_TABLE_N_CHANNELS ? __atomic_load_n(&e->gen[ch], __ATOMIC_ACQUIRE) : 0;
}
