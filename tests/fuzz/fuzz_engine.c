// SPDX-License-Identifier: MIT
/* The two-engine harness of the engine fuzz targets (fuzz_engine.h). */
#include <errno.h>
#include <unistd.h>

#include "fuzz.h"
#include "fuzz_engine.h"
#include "fuzz_tables.h"
#include "locus_client_priv.h"
#include "locus_counters_priv.h"
#include "locus_dispatch.h"
#include "locus_eldr.h"
#include "locus_grace.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"
#include "locus_wire.h"

static uint64_t clock_ns = 1000000000ull;

uint64_t fe_now(void)
{
	return clock_ns;
}

void fe_advance(uint64_t ns)
{
	clock_ns += ns;
}

/* ---- queues -------------------------------------------------------------------------- */

static int q_push(struct fe_queue *q, struct fe_msg m)
{
	if (q->tail - q->head >= FE_QCAP)
		return -1;
	q->m[q->tail++ % FE_QCAP] = m;
	return 0;
}

static struct fe_msg *q_peek(struct fe_queue *q)
{
	return q->head == q->tail ? NULL : &q->m[q->head % FE_QCAP];
}

/* ---- the transport the engines see ------------------------------------------------------ */

static struct fe_node *peer_of(struct fe_node *n)
{
	return &n->env->n[!n->id];
}

static void *t_alloc(void *ctx, size_t len)
{
	struct fe_node *n = ctx;
	void *p;

	FUZZ_CHECK(len <= n->rt.max_msg, "engine asked for a %zu-byte buffer, max_msg %zu", len,
		   n->rt.max_msg);
	if (n->n_alloc >= FE_MAX_ALLOC || !(p = malloc(len)))
		return NULL;
	n->n_alloc++;
	return p;
}

static void t_free(void *ctx, void *buf)
{
	struct fe_node *n = ctx;

	FUZZ_CHECK(n->n_alloc > 0, "a buffer given back twice");
	n->n_alloc--;
	free(buf);
}

/* What an engine hands its transport: what the peer's receive path accepts. */
static void check_outgoing(struct fe_node *n, uint32_t node, const void *buf, size_t len)
{
	const struct locus_msg_hdr *h = buf;
	struct locus_error err = { 0 };

	FUZZ_CHECK(node == (uint32_t)!n->id, "node %d sends to node %u", n->id, node);
	FUZZ_CHECK(locus_msg_hdr_check(h, len, UINT32_MAX) == 0, "node %d sends a bad header",
		   n->id);
	switch (h->type) {
	case LOCUS_MSG_SIGNATURE:
		FUZZ_CHECK(h->src_rank == (uint32_t)n->id && h->dst_rank < FE_MAX_DEC,
			   "signature from %u to decoder %u", h->src_rank, h->dst_rank);
		FUZZ_CHECK(locus_eldr_sig_check(h + 1, h->payload_len, FE_L, FE_E, &err) == 0,
			   "node %d sends a signature its peer must refuse: %s", n->id, err.msg);
		break;
	case LOCUS_MSG_DISPATCH:
	case LOCUS_MSG_COMBINE:
		FUZZ_CHECK(locus_rows_msg_check(buf, len, FE_RANKS, 0, &err) == 0,
			   "node %d sends a rows message its peer must refuse: %s", n->id, err.msg);
		FUZZ_CHECK(!(locus_rows_hdr_of((void *)buf)->flags & LOCUS_ROWS_IN_PLACE) &&
			   h->src_rank / FE_GPN == (uint32_t)n->id && h->dst_rank / FE_GPN == node,
			   "rows message %u -> %u from node %d", h->src_rank, h->dst_rank, n->id);
		break;
	default:
		FUZZ_CHECK(0, "node %d sends message type %u", n->id, h->type);
	}
}

static int enqueue(struct fe_node *n, void *buf, size_t len, uint64_t cookie, int counted)
{
	struct fe_env *env = n->env;
	struct fe_msg m = { .buf = buf, .len = len, .cookie = cookie };

	if (n->out.tail - n->out.head >= FE_QCAP || n->done.tail - n->done.head >= FE_QCAP)
		return -LOCUS_EFULL;
	check_outgoing(n, (uint32_t)!n->id, buf, len);
	if (env->on_send)
		env->on_send(env->on_send_arg, n->id, buf, len);
	if (counted)
		n->n_alloc--; /* the transport owns it now */
	if (n->fail_sends) {
		free(buf);
		q_push(&n->done, (struct fe_msg){ .cookie = cookie, .status = -LOCUS_EPEERDOWN });
		return 0;
	}
	if (n->id == 1 && env->tamper_next) {
		/* the wire changes a byte, or loses the tail */
		env->tamper_next = 0;
		m.tampered = 1;
		((uint8_t *)buf)[env->tamper_off % len] ^= env->tamper_xor;
		m.len = len - LOCUS_MIN((size_t)env->tamper_cut, len);
	}
	q_push(&n->out, m);
	q_push(&n->done, (struct fe_msg){ .cookie = cookie, .status = 0 });
	return 0;
}

static int t_send(void *ctx, uint32_t node, void *buf, size_t len, uint64_t cookie)
{
	struct fe_node *n = ctx;

	FUZZ_CHECK(len <= n->rt.max_msg, "a %zu-byte send, max_msg %zu", len, n->rt.max_msg);
	if (!n->peer_up)
		return -LOCUS_EPEERDOWN;
	(void)node;
	return enqueue(n, buf, len, cookie, 1);
}

/* The region of this node that holds [addr, addr + len) under lkey, or NULL. */
static const uint8_t *gather_src(struct fe_node *n, uint64_t addr, uint32_t len, uint32_t lkey)
{
	for (int s = 0; s < FE_SLOTS; s++)
		for (uint32_t i = 0; i < LOCUS_CLIENT_MAX_REGIONS; i++) {
			const struct fe_region *g = &n->cl[s].reg[i];

			if (g->id && g->lkey && g->lkey == lkey && addr >= g->iova &&
			    len <= FE_REGION_LEN && addr - g->iova <= FE_REGION_LEN - len)
				return g->mem + (addr - g->iova);
		}
	return NULL;
}

static int t_send_sg(void *ctx, uint32_t node, void *buf, size_t hdr_len,
		     const struct locus_engine_sge *sg, uint32_t n_sg, uint64_t cookie)
{
	struct fe_node *n = ctx;
	size_t len = hdr_len, at;
	uint8_t *msg;
	int ret;

	FUZZ_CHECK(n_sg >= 1 && n_sg <= n->rt.max_sge, "%u gather entries, max %u", n_sg,
		   n->rt.max_sge);
	if (!n->peer_up)
		return -LOCUS_EPEERDOWN;
	for (uint32_t i = 0; i < n_sg; i++) {
		FUZZ_CHECK(gather_src(n, sg[i].addr, sg[i].len, sg[i].lkey),
			   "gather entry %u [%#llx, +%u) lkey %#x is in no registered region", i,
			   (unsigned long long)sg[i].addr, sg[i].len, sg[i].lkey);
		len += sg[i].len;
	}
	FUZZ_CHECK(len <= n->rt.max_msg, "a gathered message of %zu bytes", len);
	msg = malloc(len);
	if (!msg)
		return -LOCUS_EFULL;
	memcpy(msg, buf, hdr_len);
	at = hdr_len;
	for (uint32_t i = 0; i < n_sg; i++) {
		memcpy(msg + at, gather_src(n, sg[i].addr, sg[i].len, sg[i].lkey), sg[i].len);
		at += sg[i].len;
	}
	ret = enqueue(n, msg, len, cookie, 0);
	if (ret < 0) {
		free(msg);
		return ret;
	}
	t_free(n, buf); /* the device read the header: the buffer is ours to drop */
	(void)node;
	return 0;
}

static int t_peer_up(void *ctx, uint32_t node)
{
	struct fe_node *n = ctx;

	(void)node;
	return n->peer_up;
}

static int t_write_load(void *ctx, uint32_t node, const void *row, size_t len)
{
	struct fe_node *n = ctx;

	FUZZ_CHECK(len <= FE_AREA && len >= sizeof(struct locus_load_row),
		   "a load row of %zu bytes", len);
	FUZZ_CHECK(node == (uint32_t)!n->id, "load row to node %u", node);
	if (!n->peer_up)
		return -LOCUS_EPEERDOWN;
	memcpy(peer_of(n)->load_area, row, len);
	return 0;
}

static const volatile void *t_load_area(void *ctx, uint32_t node)
{
	struct fe_node *n = ctx;

	return node == (uint32_t)!n->id ? n->load_area : NULL;
}

/* ---- intra-node DMA (node 1) ---------------------------------------------------------------- */

/* [off, off + len) of the client region inside client slot s's inbox, for some s. */
static int in_an_inbox(const struct fe_node *n, uint64_t off, uint64_t len)
{
	const struct locus_clients *v = &n->cv;
	uint64_t s, start;

	if (off < v->slots_off)
		return 0;
	s = (off - v->slots_off) / v->slot_stride;
	start = v->slots_off + s * v->slot_stride + v->buf_off + v->p.stage_size;
	return s < v->p.n_slots && off >= start &&
	       len <= (uint64_t)v->p.inbox_slots * v->p.inbox_slot_size - (off - start);
}

static int t_ldma_copy(void *ctx, uint64_t dst_off, const struct locus_engine_ldma_src *src,
		       uint32_t n_src, uint64_t cookie)
{
	struct fe_node *n = ctx;
	struct fe_ldma_job *j;
	uint64_t total = 0;

	FUZZ_CHECK(n_src >= 1 && n_src <= FE_MAX_TOKENS + 1, "a DMA copy of %u ranges", n_src);
	for (uint32_t i = 0; i < n_src; i++) {
		FUZZ_CHECK(src[i].off <= n->cv.size && src[i].len <= n->cv.size - src[i].off,
			   "DMA source [%llu, +%u) outside the client region",
			   (unsigned long long)src[i].off, src[i].len);
		total += src[i].len;
	}
	FUZZ_CHECK(in_an_inbox(n, dst_off, total), "DMA writes [%llu, +%llu), not inside an inbox",
		   (unsigned long long)dst_off, (unsigned long long)total);
	if (n->n_jobs == LOCUS_ARRAY_SIZE(n->jobs))
		return -EBUSY; /* the device queue is full: the engine copies */
	j = &n->jobs[n->n_jobs++];
	j->dst_off = dst_off;
	j->cookie = cookie;
	j->n = n_src;
	memcpy(j->src, src, n_src * sizeof(*src));
	return 0;
}

/* The device finishes every copy started: the rows land, then the engine hears. */
static int ldma_run(struct fe_node *n)
{
	unsigned k = n->n_jobs;

	n->n_jobs = 0;
	for (unsigned i = 0; i < k; i++) {
		struct fe_ldma_job *j = &n->jobs[i];
		uint64_t at = j->dst_off;

		if (!n->fail_sends)
			for (uint32_t s = 0; s < j->n; s++) {
				memmove(n->cv.base + at, n->cv.base + j->src[s].off, j->src[s].len);
				at += j->src[s].len;
			}
		locus_engine_ldma_done(n->e, j->cookie, n->fail_sends ? -EIO : 0);
	}
	return (int)k;
}

/* ---- nodes --------------------------------------------------------------------------------- */

/*
 * Memory kept from one input to the next: allocating and faulting in a
 * megabyte per node for every input would cost more than the input itself.
 * Every region is laid out afresh by its module's init for each input.
 */
static struct {
	void *cmem[FE_NODES], *tmem[FE_NODES], *kmem[FE_NODES];
	uint8_t *reg[FE_NODES][FE_SLOTS][LOCUS_CLIENT_MAX_REGIONS];
	/* counters are registered once (as locusd does at start); values zeroed per input */
	struct locus_counters *ctrs[FE_NODES];
	struct locus_engine_ctr ctr[FE_NODES];
	size_t block_size;
	uint64_t start_ticks;
} pool;

static void *pooled(void **p, size_t align, size_t len)
{
	if (!*p && posix_memalign(p, align, len))
		abort();
	return *p;
}

static int node_create(struct fe_env *env, int id)
{
	struct fe_node *n = &env->n[id];
	struct locus_clients_params clp = { .n_slots = FE_SLOTS, .ring_size = FE_RING,
					    .stage_size = FE_STAGE, .inbox_slots = FE_INBOX,
					    .inbox_slot_size = FE_INBOX_SLOT };
	struct locus_table_params tp = { .n_channels = LOCUS_TABLE_N_CHANNELS, .n_readers = 1 };
	struct locus_ctr_params cp = { .max_entries = 128, .n_blocks = 2,
				       .block_size = 8 * (FE_L * FE_E + 4 * FE_MAX_DEC + 64) +
						     8 * LOCUS_HIST_WORDS * 8 + 8 * 9 + 4096 };
	struct locus_engine_params ep = { 0 };
	struct locus_error err = { 0 };
	size_t clen = locus_clients_region_size(&clp), tlen, klen;

	n->id = id;
	n->env = env;
	n->peer_up = 1;
	for (unsigned ch = 0; ch < LOCUS_TABLE_N_CHANNELS; ch++)
		tp.channel[ch] = (struct locus_table_channel_params){ .n_slots = 3,
								      .slot_size = 16384 };
	tlen = locus_table_region_size(&tp);
	klen = locus_counters_region_size(&cp);
	n->cmem = pooled(&pool.cmem[id], 4096, clen);
	n->tmem = pooled(&pool.tmem[id], 64, tlen);
	n->kmem = pooled(&pool.kmem[id], 64, klen);
	if (locus_clients_init(n->cmem, clen, &clp) || locus_clients_open(&n->cv, n->cmem, clen) ||
	    locus_table_region_init(n->tmem, tlen, &tp, &err) ||
	    locus_table_region_attach(n->tmem, tlen, &n->tables, &err))
		goto fail;
	ep.dims = (struct locus_engine_dims){ .node_id = (uint32_t)id, .n_nodes = FE_NODES,
					      .gpus_per_node = FE_GPN, .max_layers = FE_L,
					      .max_experts = FE_E, .max_decoders = FE_MAX_DEC,
					      .max_tokens = FE_MAX_TOKENS, .load_timeout_ms = 200,
					      /*
					       * a signature cache of 16 blocks and 8 prefix
					       * checkpoints (one per 2): ROUTE_BLOCKS, EVICT
					       */
					      .top_k = 2, .sig_cache_block_tokens = 16,
					      .sig_cache_bytes = 8 * (2 * (32 + 64) + 32 + 64),
					      .sig_cache_checkpoint_blocks = 2 };
	if (!pool.ctrs[id]) {
		if (locus_counters_init(n->kmem, klen, &cp, &err) ||
		    locus_counters_open(n->kmem, klen, 0, &pool.ctrs[id], &err) ||
		    locus_engine_register_counters(pool.ctrs[id], &ep.dims, &pool.ctr[id], &err))
			goto fail;
		pool.block_size = LOCUS_ALIGN_UP(cp.block_size, (size_t)64);
	}
	n->ctrs = pool.ctrs[id];
	n->ctr = ep.ctr = pool.ctr[id];
	for (uint32_t b = 0; b < cp.n_blocks; b++)
		memset(locus_counters_block(n->ctrs, b), 0, pool.block_size);
	n->blk = locus_counters_block(n->ctrs, 0);
	n->rt = (struct locus_engine_remote){
		.alloc = t_alloc, .free = t_free, .send = t_send, .peer_up = t_peer_up,
		.send_sg = t_send_sg, .max_sge = 4, .write_load = t_write_load,
		.load_area = t_load_area, .ctx = n, .max_msg = FE_MAX_MSG,
		.load_area_len = FE_AREA, .load_period_us = 1000,
	};
	ep.clients = &n->cv;
	ep.tables = n->tables;
	ep.reader_idx = 0;
	ep.ctr_block = n->blk;
	ep.tsc_hz = 1000000000ull;
	ep.now = fe_now;
	ep.remote = &n->rt;
	if (locus_engine_create(&ep, &n->e, &err))
		goto fail;
	if (id == 1) {
		n->ldma = (struct locus_engine_ldma){ .copy = t_ldma_copy, .ctx = n };
		locus_engine_set_ldma(n->e, &n->ldma);
	}
	return 0;
fail:
	fprintf(stderr, "fuzz engine harness: node %d: %s\n", id, err.msg);
	return -1;
}

static void node_destroy(struct fe_node *n)
{
	struct fe_msg *m;

	locus_engine_destroy(n->e);
	while ((m = q_peek(&n->out))) {
		free(m->buf);
		n->out.head++;
	}
	locus_table_region_detach(n->tables);
}

int64_t fe_push(struct fe_env *env, int node, unsigned ch, const void *blob, size_t len)
{
	return locus_table_push(env->n[node].tables, ch, blob, len, 0, NULL);
}

static const struct { uint32_t roles, decoder, rank; } roles[FE_NODES][FE_SLOTS] = {
	{ { LOCUS_ROLE_PREFILL, 0, 0 }, { LOCUS_ROLE_DECODE, 0, 0 }, { LOCUS_ROLE_RANK, 0, 0 },
	  { LOCUS_ROLE_RANK, 0, 1 } },
	{ { LOCUS_ROLE_PREFILL, 0, 0 }, { LOCUS_ROLE_DECODE, 1, 0 }, { LOCUS_ROLE_RANK, 0, 2 },
	  { LOCUS_ROLE_RANK, 0, 3 } },
};

struct fe_env *fe_create(void)
{
	struct fe_env *env = calloc(1, sizeof(*env));
	size_t el, gl;
	void *eb = ft_eldr_blob(FE_L, FE_E, 4, 0, &el);
	void *gb = ft_grace_blob(FE_L, FE_E, FE_NODES, FE_GPN, 1, &gl);

	if (!env || !eb || !gb)
		abort();
	for (int i = 0; i < FE_NODES; i++) {
		if (node_create(env, i))
			abort();
		if (fe_push(env, i, LOCUS_TABLE_CH_ELDR, eb, el) <= 0 ||
		    fe_push(env, i, LOCUS_TABLE_CH_GRACE, gb, gl) <= 0)
			abort();
	}
	free(eb);
	free(gb);
	for (int i = 0; i < FE_NODES; i++)
		for (int s = 0; s < FE_SLOTS; s++)
			fe_attach(env, i, s);
	for (int i = 0; i < FE_NODES; i++)
		if (!locus_engine_table_generation(env->n[i].e, LOCUS_TABLE_CH_ELDR) ||
		    !locus_engine_table_generation(env->n[i].e, LOCUS_TABLE_CH_GRACE))
			abort();
	/* a load period and a bit: each node knows the other's decoders */
	for (int r = 0; r < 12; r++) {
		fe_advance(100000);
		fe_round(env);
	}
	return env;
}

void fe_destroy(struct fe_env *env)
{
	if (!env)
		return;
	for (int i = 0; i < FE_NODES; i++)
		node_destroy(&env->n[i]);
	free(env);
}

/* ---- clients ------------------------------------------------------------------------------- */

void fe_attach(struct fe_env *env, int node, int slot)
{
	struct fe_node *n = &env->n[node];
	struct fe_client *c = &n->cl[slot];
	struct locus_client_ctl *ctl = locus_clients_ctl(&n->cv, (uint32_t)slot);
	struct locus_engine_grant g = { .roles = roles[node][slot].roles,
					.decoder_id = roles[node][slot].decoder,
					.rank = roles[node][slot].rank };
	uint64_t claimed = locus_client_state_pid(LOCUS_CLIENT_CLAIMED, getpid()), ticket;

	if (c->attached)
		return;
	if (!pool.start_ticks)
		locus_proc_start_ticks(getpid(), &pool.start_ticks);
	ctl->start_ticks = pool.start_ticks;
	ctl->roles = g.roles;
	ctl->decoder_id = g.decoder_id;
	ctl->rank = g.rank;
	__atomic_store_n(&ctl->state_pid, claimed, __ATOMIC_RELEASE);
	if (locus_clients_prepare(&n->cv, (uint32_t)slot))
		abort();
	ticket = locus_engine_command(n->e, (uint32_t)slot, LOCUS_ENGINE_ATTACH, &g);
	locus_engine_poll(n->e);
	if (!locus_engine_command_done(n->e, (uint32_t)slot, ticket) ||
	    locus_clients_publish(&n->cv, (uint32_t)slot, claimed))
		abort();
	c->roles = g.roles;
	c->decoder = g.decoder_id;
	c->rank = g.rank;
	c->buf = locus_clients_buf(&n->cv, (uint32_t)slot);
	if (locus_ring_attach(&c->sub, locus_clients_submit_ring(&n->cv, (uint32_t)slot),
			      n->cv.ring_bytes, FE_RING, LOCUS_DESC_SIZE, 1) ||
	    locus_ring_attach(&c->cpl, locus_clients_completion_ring(&n->cv, (uint32_t)slot),
			      n->cv.ring_bytes, FE_RING, LOCUS_DESC_SIZE, 0))
		abort();
	memset(c->busy, 0, sizeof(c->busy));
	memset(c->held, 0, sizeof(c->held));
	c->n_rel = 0;
	c->attached = 1;
}

void fe_detach(struct fe_env *env, int node, int slot)
{
	struct fe_node *n = &env->n[node];
	struct fe_client *c = &n->cl[slot];
	uint64_t ticket;

	if (!c->attached)
		return;
	ticket = locus_engine_command(n->e, (uint32_t)slot, LOCUS_ENGINE_DETACH, NULL);
	locus_engine_poll(n->e);
	FUZZ_CHECK(locus_engine_command_done(n->e, (uint32_t)slot, ticket),
		   "a detach not carried out in one poll");
	/* a client that left is owed nothing */
	for (uint32_t i = 1; i <= env->n_ids; i++)
		if (env->req[i].state == FE_REQ_LIVE && env->req[i].node == node &&
		    env->req[i].slot == slot)
			env->req[i].state = FE_REQ_FORGIVEN;
	c->attached = 0;
	/* as control does for a client gone: its regions go before the slot is reused */
	for (uint32_t i = 0; i < LOCUS_CLIENT_MAX_REGIONS; i++)
		fe_region_del(env, node, slot, i);
	locus_clients_release(&n->cv, (uint32_t)slot);
}

/* ---- regions ------------------------------------------------------------------------------- */

void fe_region_add(struct fe_env *env, int node, int slot, uint32_t idx, int mapped, int mr)
{
	struct fe_node *n = &env->n[node];
	struct fe_client *c = &n->cl[slot];
	struct fe_region *g = &c->reg[idx % LOCUS_CLIENT_MAX_REGIONS];
	struct locus_engine_region er;

	idx %= LOCUS_CLIENT_MAX_REGIONS;
	if (g->id || (!mapped && !mr))
		return; /* held already; neither mapped nor registered is refused by regions.c */
	g->mem = pooled((void **)&pool.reg[node][slot][idx], 4096, FE_REGION_LEN);
	memset(g->mem, 0x5a, FE_REGION_LEN);
	g->id = (++c->region_seq << 3) | idx;
	g->lkey = mr ? 0x1000u + (uint32_t)(node * 64 + slot * 8) + idx : 0;
	g->iova = mr ? (0x100000000ull << node) + ((uint64_t)slot << 24) + ((uint64_t)idx << 20)
		     : 0;
	g->mapped = mapped;
	g->deleting = 0;
	er = (struct locus_engine_region){ .id = g->id, .lkey = g->lkey,
					   .addr = mapped ? g->mem : NULL, .iova = g->iova,
					   .len = FE_REGION_LEN };
	g->ticket = locus_engine_region_command(n->e, (uint32_t)slot, idx, LOCUS_ENGINE_REGION_ADD,
						&er);
	locus_engine_poll(n->e);
	FUZZ_CHECK(locus_engine_region_done(n->e, (uint32_t)slot, idx, g->ticket),
		   "a region ADD not carried out in one poll");
}

void fe_region_del(struct fe_env *env, int node, int slot, uint32_t idx)
{
	struct fe_node *n = &env->n[node];
	struct fe_region *g = &n->cl[slot].reg[idx % LOCUS_CLIENT_MAX_REGIONS];

	idx %= LOCUS_CLIENT_MAX_REGIONS;
	if (!g->id || g->deleting)
		return;
	g->deleting = 1;
	g->ticket = locus_engine_region_command(n->e, (uint32_t)slot, idx, LOCUS_ENGINE_REGION_DEL,
						NULL);
	/* done once no send reading it is in flight: the sends end within a few rounds */
	for (int r = 0; r < 8 && !locus_engine_region_done(n->e, (uint32_t)slot, idx, g->ticket);
	     r++)
		fe_round(env);
	FUZZ_CHECK(locus_engine_region_done(n->e, (uint32_t)slot, idx, g->ticket),
		   "a region DEL still not done after its sends ended");
	g->id = 0;
}

/* ---- requests and completions ----------------------------------------------------------- */

int fe_submit(struct fe_env *env, int node, int slot, struct locus_desc *d)
{
	struct fe_client *c = &env->n[node].cl[slot];
	uint32_t id;

	if (!c->attached || env->n_ids + 1 >= FE_MAX_IDS)
		return -1;
	id = env->n_ids + 1;
	d->id = id;
	if (locus_ring_enqueue_burst(&c->sub, d, 1) != 1)
		return -1;
	env->n_ids = id;
	env->req[id] = (struct fe_req){ .op = d->op, .node = (uint8_t)node, .slot = (uint8_t)slot,
					.state = FE_REQ_LIVE };
	return 0;
}

static void check_completion(struct fe_env *env, int node, int slot, const struct locus_desc *d)
{
	struct fe_req *r = d->id < FE_MAX_IDS ? &env->req[d->id] : NULL;

	FUZZ_CHECK(d->id != 0, "the harness's own RELEASE of node %d slot %d was refused (%d)",
		   node, slot, d->status);
	FUZZ_CHECK(r && r->state != FE_REQ_NONE, "completion of id %llu never submitted",
		   (unsigned long long)d->id);
	FUZZ_CHECK(r->state != FE_REQ_DONE, "request %llu (op %u) completed twice",
		   (unsigned long long)d->id, r->op);
	FUZZ_CHECK(r->state != FE_REQ_FORGIVEN, "request %llu completed to a client that left",
		   (unsigned long long)d->id);
	FUZZ_CHECK(r->state != FE_REQ_SILENT, "a valid RELEASE (id %llu) got a completion",
		   (unsigned long long)d->id);
	FUZZ_CHECK(r->node == node && r->slot == slot && r->op == d->op,
		   "completion of id %llu op %u at node %d slot %d, submitted op %u at %d/%d",
		   (unsigned long long)d->id, d->op, node, slot, r->op, r->node, r->slot);
	FUZZ_CHECK(d->status <= 0, "completion status %d", d->status);
	if (d->op != LOCUS_OP_ROUTE && d->op != LOCUS_OP_DISPATCH && d->op != LOCUS_OP_COMBINE)
		FUZZ_CHECK(d->status < 0, "op %u completed without an error", d->op);
	if (d->op == LOCUS_OP_ROUTE && d->status == 0)
		FUZZ_CHECK(d->peer < 4, "routed to decoder %u, the table has 0..3", d->peer);
	if (d->op == LOCUS_OP_DISPATCH && d->status == 0)
		FUZZ_CHECK(d->count <= FE_RANKS, "dispatched to %u ranks", d->count);
	r->state = FE_REQ_DONE;
	env->completions++;

}

static void release(struct fe_client *c, uint32_t s)
{
	struct locus_desc d = { .op = LOCUS_OP_RELEASE, .slot = s };

	if (locus_ring_enqueue_burst(&c->sub, &d, 1) != 1) {
		c->rel[c->n_rel++] = s;
		return;
	}
	for (uint32_t j = s; j < s + c->held[s]; j++)
		c->busy[j] = 0;
	c->held[s] = 0;
}

void fe_check_delivery(struct fe_env *env, int node, int slot, const struct locus_desc *d)
{
	struct fe_client *c = &env->n[node].cl[slot];
	const uint8_t *msg = c->buf + d->off;
	const struct locus_msg_hdr *h = (const void *)msg;
	struct locus_error err = { 0 };
	uint32_t s = d->slot, span;

	FUZZ_CHECK(d->off >= FE_STAGE && d->len >= sizeof(*h) &&
		   d->off + d->len <= FE_STAGE + (uint64_t)FE_INBOX * FE_INBOX_SLOT &&
		   (d->off - FE_STAGE) % FE_INBOX_SLOT == 0 &&
		   s == (d->off - FE_STAGE) / FE_INBOX_SLOT,
		   "op %u delivered at [%llu, +%u) slot %u, outside node %d slot %d's inbox", d->op,
		   (unsigned long long)d->off, d->len, s, node, slot);
	span = (d->len + FE_INBOX_SLOT - 1) / FE_INBOX_SLOT;
	for (uint32_t j = s; j < s + span; j++)
		FUZZ_CHECK(!c->busy[j], "node %d slot %d: delivery into inbox slot %u, which it "
			   "still holds", node, slot, j);
	FUZZ_CHECK(locus_msg_hdr_check(h, d->len, UINT32_MAX) == 0, "delivered message header");
	switch (d->op) {
	case LOCUS_OP_SIGNATURE_IN:
		FUZZ_CHECK(c->roles & LOCUS_ROLE_DECODE, "a signature for a client not decoding");
		FUZZ_CHECK(h->type == LOCUS_MSG_SIGNATURE && h->dst_rank == c->decoder,
			   "signature type %u for decoder %u at decoder %u", h->type, h->dst_rank,
			   c->decoder);
		if (!env->skip_peer_sig)
			FUZZ_CHECK(locus_eldr_sig_check(h + 1, h->payload_len, FE_L, FE_E, &err) ==
				   0,
				   "decoder %u got a signature its table refuses: %s", c->decoder,
				   err.msg);
		break;
	case LOCUS_OP_ROWS_IN:
	case LOCUS_OP_RESULTS_IN: {
		uint64_t size = FE_STAGE;

		FUZZ_CHECK(c->roles & LOCUS_ROLE_RANK, "rows for a client without a rank");
		FUZZ_CHECK(h->type == (d->op == LOCUS_OP_ROWS_IN ? LOCUS_MSG_DISPATCH
								: LOCUS_MSG_COMBINE),
			   "op %u carries message type %u", d->op, h->type);
		FUZZ_CHECK(h->dst_rank == c->rank, "rows for rank %u delivered to rank %u",
			   h->dst_rank, c->rank);
		if (d->flags & LOCUS_DESC_F_REGION) {
			const struct fe_region *g = &c->reg[d->region % LOCUS_CLIENT_MAX_REGIONS];

			FUZZ_CHECK(g->id == d->region, "rows in place in region %#x the client "
				   "does not hold", d->region);
			size = FE_REGION_LEN;
		}
		FUZZ_CHECK(locus_rows_msg_check(msg, d->len, FE_RANKS, size, &err) == 0,
			   "rank %u got a rows message it must refuse: %s", c->rank, err.msg);
		FUZZ_CHECK(!(d->flags & LOCUS_DESC_F_REGION) ||
			   (locus_rows_hdr_of((void *)msg)->flags & LOCUS_ROWS_IN_REGION),
			   "region flag on the descriptor, not in the message");
		break;
	}
	default:
		FUZZ_CHECK(0, "delivery op %u", d->op);
	}
	for (uint32_t j = s; j < s + span; j++)
		c->busy[j] = 1;
	c->held[s] = (uint16_t)span;
	env->deliveries++;
	if (!c->hold)
		release(c, s);
}

static int is_delivery(const struct locus_desc *d)
{
	return d->status == 0 && (d->op == LOCUS_OP_SIGNATURE_IN || d->op == LOCUS_OP_ROWS_IN ||
				  d->op == LOCUS_OP_RESULTS_IN);
}

/* Read every client's completion ring; returns how many entries. */
static int drain(struct fe_env *env)
{
	int got = 0;

	for (int i = 0; i < FE_NODES; i++) {
		for (int s = 0; s < FE_SLOTS; s++) {
			struct fe_client *c = &env->n[i].cl[s];
			struct locus_desc d[16];
			int64_t n;

			if (!c->attached)
				continue;
			/* releases that found the ring full, first */
			for (uint32_t k = c->n_rel; k > 0; k--) {
				uint32_t slot = c->rel[--c->n_rel];

				release(c, slot);
			}
			while ((n = locus_ring_dequeue_burst(&c->cpl, d, 16)) > 0) {
				for (int64_t k = 0; k < n; k++) {
					if (is_delivery(&d[k]))
						fe_check_delivery(env, i, s, &d[k]);
					else
						check_completion(env, i, s, &d[k]);
				}
				got += (int)n;
			}
			FUZZ_CHECK(n == 0, "completion ring of node %d slot %d broken (%lld)", i, s,
				   (long long)n);
		}
	}
	return got;
}

/* Hand each node's messages to its peer, then report the sends' ends. */
static int network(struct fe_env *env)
{
	int moved = 0;

	for (int i = 0; i < FE_NODES; i++) {
		struct fe_node *n = &env->n[i], *p = peer_of(n);
		struct fe_msg *m;

		while ((m = q_peek(&n->out))) {
			int ret = locus_engine_remote_recv(p->e, (uint32_t)i, m->buf, m->len);

			if (ret == -LOCUS_EFULL)
				break;
			FUZZ_CHECK(m->tampered || ret == 0 || ret == -LOCUS_EPEERDOWN,
				   "node %d refused a message node %d's engine built: %d (%s)",
				   p->id, i, ret, locus_strerror(ret));
			free(m->buf);
			n->out.head++;
			moved++;
		}
		while ((m = q_peek(&n->done))) {
			struct fe_msg c = *m;

			n->done.head++;
			locus_engine_remote_done(n->e, c.cookie, c.status);
			moved++;
		}
		moved += ldma_run(n);
	}
	return moved;
}

void fe_round(struct fe_env *env)
{
	for (int i = 0; i < FE_NODES; i++)
		locus_engine_poll(env->n[i].e);
	network(env);
	drain(env);
	fe_advance(10000);
}

void fe_quiesce(struct fe_env *env)
{
	int idle = 0;

	for (int r = 0; r < 200 && idle < 3; r++) {
		int work = 0;

		for (int i = 0; i < FE_NODES; i++)
			work += locus_engine_poll(env->n[i].e);
		work += network(env);
		work += drain(env);
		fe_advance(10000);
		idle = work ? 0 : idle + 1;
	}
	for (uint32_t i = 1; i <= env->n_ids; i++)
		FUZZ_CHECK(env->req[i].state != FE_REQ_LIVE,
			   "request %u (op %u, node %u slot %u) never completed", i, env->req[i].op,
			   env->req[i].node, env->req[i].slot);
}

void fe_release_raw(struct fe_env *env, int node, int slot, uint32_t s)
{
	struct fe_client *c = &env->n[node].cl[slot];
	struct locus_desc d = { .op = LOCUS_OP_RELEASE, .slot = s };
	int valid;

	if (!c->attached)
		return;
	fe_quiesce(env);
	valid = s < FE_INBOX && c->held[s] && !c->n_rel;
	if (fe_submit(env, node, slot, &d) < 0)
		return;
	if (valid) {
		env->req[d.id].state = FE_REQ_SILENT;
		for (uint32_t j = s; j < s + c->held[s]; j++)
			c->busy[j] = 0;
		c->held[s] = 0;
	}
	fe_quiesce(env);
}
