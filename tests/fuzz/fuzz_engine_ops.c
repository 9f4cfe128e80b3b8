// SPDX-License-Identifier: MIT
/* The engine fuzz targets' operations (fuzz_engine_ops.h). */
#include "fuzz_engine_ops.h"
#include "fuzz_tables.h"
#include "locus_client_priv.h"
#include "locus_crc32c.h"
#include "locus_dispatch.h"
#include "locus_eldr.h"
#include "locus_tblfile.h"
#include "locus_wire.h"

#define MAX_OPS 256

/* A node and one of its client slots from one byte. */
static void who(struct fuzz_in *in, int *node, int *slot)
{
	uint8_t b = fin_u8(in);

	*node = b & 1;
	*slot = (b >> 1) % FE_SLOTS;
}

/* The region id a request names: one the client holds (flag bit 0), or any. */
static uint32_t region_of(struct fe_client *c, uint8_t f, uint32_t raw)
{
	const struct fe_region *g = &c->reg[(f >> 1) % LOCUS_CLIENT_MAX_REGIONS];

	return f & 0x10 ? raw : g->id;
}

static int fits(uint64_t off, uint64_t len)
{
	return off <= FE_STAGE && len <= FE_STAGE - off;
}

static void op_dispatch(struct fe_env *env, struct fuzz_in *in)
{
	int node, slot;
	struct fe_client *c;
	struct locus_dispatch_req rq;
	uint8_t f, seed;
	uint64_t off;
	size_t len;
	uint16_t *ex;
	float *g;
	struct locus_desc d;

	who(in, &node, &slot);
	c = &env->n[node].cl[slot];
	rq = (struct locus_dispatch_req){
		.magic = LOCUS_DISPATCH_MAGIC, .layer = fin_u8(in) % (FE_L + 1),
		.top_k = (uint16_t)(1 + fin_u8(in) % LOCUS_MAX_TOPK),
		.n_tokens = 1 + fin_u8(in) % (FE_MAX_TOKENS + 4),
		.row_bytes = 1 + fin_u16(in) % 2048,
		.rows_off = (fin_u16(in) % (FE_STAGE / 64)) * 64,
		.batch_id = fin_u32(in),
	};
	off = (fin_u16(in) % (FE_STAGE / 8)) * 8;
	f = fin_u8(in);
	seed = fin_u8(in);
	len = locus_dispatch_req_len(rq.n_tokens, rq.top_k);
	if (!fits(off, len))
		off = len <= FE_STAGE ? (FE_STAGE - len) & ~7ull : 0;
	if (!fits(off, len) || !c->buf)
		return;
	memcpy(c->buf + off, &rq, sizeof(rq));
	ex = (uint16_t *)(c->buf + off + sizeof(rq));
	g = (float *)((uint8_t *)ex + locus_ids_bytes(rq.n_tokens, rq.top_k));
	for (uint32_t i = 0; i < rq.n_tokens * rq.top_k; i++) {
		ex[i] = (uint16_t)((seed + i * (1 + seed % 5)) % FE_E);
		g[i] = 1.0f / (float)rq.top_k;
	}
	d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .layer = rq.layer, .off = off,
				 .len = (uint32_t)len, .flags = f & 1 ? LOCUS_DESC_F_REGION : 0,
				 .region = region_of(c, f, seed) };
	fe_submit(env, node, slot, &d);
}

static void op_combine(struct fe_env *env, struct fuzz_in *in)
{
	int node, slot;
	struct fe_client *c;
	struct locus_combine_req rq;
	struct locus_row_ref *refs;
	struct locus_desc d;
	uint64_t off;
	size_t len;
	uint8_t f;

	who(in, &node, &slot);
	c = &env->n[node].cl[slot];
	rq = (struct locus_combine_req){
		.magic = LOCUS_COMBINE_MAGIC, .layer = fin_u8(in) % (FE_L + 1),
		.dst_rank = fin_u8(in) % (FE_RANKS + 1), .n_rows = 1 + fin_u8(in) % 80,
		.row_bytes = 1 + fin_u16(in) % 2048,
		.rows_off = (fin_u16(in) % (FE_STAGE / 64)) * 64,
		.batch_id = fin_u32(in),
	};
	off = (fin_u16(in) % (FE_STAGE / 8)) * 8;
	f = fin_u8(in);
	len = locus_combine_req_len(rq.n_rows);
	if (!fits(off, len))
		off = (FE_STAGE - len) & ~7ull;
	if (!c->buf)
		return;
	memcpy(c->buf + off, &rq, sizeof(rq));
	refs = (struct locus_row_ref *)(c->buf + off + sizeof(rq));
	for (uint32_t j = 0; j < rq.n_rows; j++)
		refs[j] = (struct locus_row_ref){ .token = j, .kmask = 1u << (j % 4) };
	d = (struct locus_desc){ .op = LOCUS_OP_COMBINE, .layer = rq.layer, .off = off,
				 .len = (uint32_t)len, .flags = f & 1 ? LOCUS_DESC_F_REGION : 0,
				 .region = region_of(c, f, rq.batch_id) };
	fe_submit(env, node, slot, &d);
}

static void op_route(struct fe_env *env, struct fuzz_in *in)
{
	int node, slot;
	struct fe_client *c;
	struct locus_eldr_sig_hdr *h;
	uint16_t *counts;
	struct locus_desc d;
	uint64_t off;

	who(in, &node, &slot);
	c = &env->n[node].cl[slot];
	off = (fin_u16(in) % (FE_STAGE / 8)) * 8;
	if (!c->buf || !fits(off, locus_eldr_sig_len(FE_L, FE_E)))
		off = 0;
	if (!c->buf)
		return;
	h = (struct locus_eldr_sig_hdr *)(c->buf + off);
	*h = (struct locus_eldr_sig_hdr){ .magic = LOCUS_ELDR_SIG_MAGIC,
					  .version = LOCUS_ELDR_SIG_VERSION, .n_layers = FE_L,
					  .n_experts = FE_E, .prompt_tokens = 1,
					  .allowed_decoders = fin_u8(in) & 0x0f };
	counts = (uint16_t *)(h + 1);
	for (int i = 0; i < FE_L * FE_E; i++)
		counts[i] = fin_u8(in) % 4;
	d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .off = off,
				 .len = (uint32_t)locus_eldr_sig_len(FE_L, FE_E) };
	fe_submit(env, node, slot, &d);
}

static void op_table(struct fe_env *env, struct fuzz_in *in)
{
	int node = fin_u8(in) & 1;
	uint8_t which = fin_u8(in) % 6;
	size_t len = 0;
	uint8_t *b;

	switch (which) {
	case 0:
		b = ft_eldr_blob(FE_L, FE_E, 4, 0, &len);
		break;
	case 1:
		b = ft_eldr_blob(FE_L, FE_E, 2, 1, &len);
		break;
	case 2:
		b = ft_grace_blob(FE_L, FE_E, FE_NODES, FE_GPN, 0, &len);
		break;
	case 3:
		b = ft_grace_blob(FE_L, FE_E, FE_NODES, FE_GPN, 3, &len);
		break;
	case 4: /* a torn push: the checksum fails */
		b = ft_eldr_blob(FE_L, FE_E, 4, 0, &len);
		if (b)
			b[len - 1] ^= 1;
		break;
	default: /* larger than this data plane takes */
		b = ft_grace_blob(FE_L + 1, FE_E, FE_NODES, FE_GPN, 1, &len);
		break;
	}
	if (!b)
		abort();
	fe_push(env, node, which == 0 || which == 1 || which == 4 ? LOCUS_TABLE_CH_ELDR
								  : LOCUS_TABLE_CH_GRACE, b, len);
	free(b);
	fe_round(env);
}

static void op_area_row(struct fe_env *env, struct fuzz_in *in)
{
	uint8_t raw[FE_AREA] = { 0 };
	struct locus_load_row *row = (struct locus_load_row *)raw;
	uint32_t n = fin_u8(in) % 10, k = 0;
	uint8_t f = fin_u8(in);

	row->magic = LOCUS_LOAD_ROW_MAGIC;
	row->seq = fin_u32(in);
	row->node = f & 0x80 ? fin_u8(in) % 3 : 1;
	row->n = (uint16_t)n;
	/* the writer's ranks attached: bits of f, or a word the reader must refuse */
	row->ranks = f & 0x40 ? f : LOCUS_LOAD_ROW_RANKS | (f >> 1 & 3);
	for (; k < n && locus_load_row_size(k + 1) <= FE_AREA; k++)
		row->e[k] = (struct locus_load_entry){ .decoder_id = fin_u8(in) % 12,
						       .load = fin_u16(in) };
	row->crc = locus_crc32c(raw + 8, locus_load_row_size(k) - 8);
	if (f & 1)
		row->crc ^= 1; /* torn */
	memcpy(env->n[0].load_area, raw, sizeof(raw));
}

static void op_inject(struct fe_env *env, struct fuzz_in *in)
{
	size_t len = fin_u16(in) % 8192;
	uint8_t node = fin_u8(in) % 4 == 0 ? 0 : 1;
	uint8_t *m;
	int ret;

	len = len < in->n ? len : in->n;
	m = fuzz_dup(in->p, len);
	in->p += len;
	in->n -= len;
	ret = locus_engine_remote_recv(env->n[0].e, node, m, len);
	FUZZ_CHECK(ret <= 0, "receive returned %d", ret);
	free(m);
}

static void one_op(struct fe_env *env, struct fuzz_in *in, enum fe_op op)
{
	int node, slot;
	struct locus_desc d;

	switch (op) {
	case FE_OP_DESC:
		who(in, &node, &slot);
		fin_copy(in, &d, sizeof(d));
		if (d.op == LOCUS_OP_RELEASE)
			fe_release_raw(env, node, slot, d.slot);
		else
			fe_submit(env, node, slot, &d);
		break;
	case FE_OP_STAGE: {
		uint64_t off, n;

		who(in, &node, &slot);
		off = fin_u16(in) % FE_STAGE;
		n = fin_u8(in);
		n = LOCUS_MIN(n, FE_STAGE - off);
		if (env->n[node].cl[slot].buf)
			fin_copy(in, env->n[node].cl[slot].buf + off, n);
		break;
	}
	case FE_OP_DISPATCH:
		op_dispatch(env, in);
		break;
	case FE_OP_COMBINE:
		op_combine(env, in);
		break;
	case FE_OP_ROUTE:
		op_route(env, in);
		break;
	case FE_OP_ROUNDS:
		for (int r = 1 + fin_u8(in) % 8; r > 0; r--)
			fe_round(env);
		break;
	case FE_OP_CLOCK:
		fe_advance((uint64_t)fin_u16(in) * 10000);
		break;
	case FE_OP_LOAD: {
		struct locus_client_ctl *ctl;

		who(in, &node, &slot);
		ctl = locus_clients_ctl(&env->n[node].cv, (uint32_t)slot);
		ctl->load = fin_u16(in);
		__atomic_store_n(&ctl->load_seq, ctl->load_seq + 1, __ATOMIC_RELEASE);
		break;
	}
	case FE_OP_PEER:
		node = fin_u8(in) & 1;
		env->n[node].peer_up = !env->n[node].peer_up;
		break;
	case FE_OP_FAIL:
		node = fin_u8(in) & 1;
		env->n[node].fail_sends = !env->n[node].fail_sends;
		break;
	case FE_OP_ATTACH:
		who(in, &node, &slot);
		if (env->n[node].cl[slot].attached)
			fe_detach(env, node, slot);
		else
			fe_attach(env, node, slot);
		break;
	case FE_OP_REGION: {
		uint8_t b;

		who(in, &node, &slot);
		b = fin_u8(in);
		if (env->n[node].cl[slot].reg[b & 7].id)
			fe_region_del(env, node, slot, b & 7);
		else
			fe_region_add(env, node, slot, b & 7, b & 8 || !(b & 16), b & 16);
		break;
	}
	case FE_OP_HOLD: {
		struct fe_client *c;

		who(in, &node, &slot);
		c = &env->n[node].cl[slot];
		c->hold = !c->hold;
		if (!c->hold)
			for (uint32_t s = 0; s < FE_INBOX; s++)
				if (c->held[s]) {
					struct locus_desc r = { .op = LOCUS_OP_RELEASE, .slot = s };

					if (!c->attached ||
					    locus_ring_enqueue_burst(&c->sub, &r, 1) != 1)
						continue;
					memset(c->busy + s, 0, c->held[s]);
					c->held[s] = 0;
				}
		break;
	}
	case FE_OP_TABLE:
		op_table(env, in);
		break;
	case FE_OP_INJECT:
		op_inject(env, in);
		break;
	case FE_OP_TAMPER:
		env->tamper_next = 1;
		env->tamper_off = fin_u16(in);
		env->tamper_xor = fin_u8(in) | 1;
		env->tamper_cut = fin_u8(in) % 4 == 0 ? fin_u8(in) : 0;
		break;
	case FE_OP_AREA_RAW: {
		uint32_t off = fin_u8(in) % FE_AREA, n = fin_u8(in);

		n = LOCUS_MIN(n, FE_AREA - off);
		fin_copy(in, env->n[0].load_area + off, n);
		break;
	}
	case FE_OP_AREA_ROW:
		op_area_row(env, in);
		break;
	default:
		break;
	}
}

void fe_run(struct fe_env *env, struct fuzz_in *in, const enum fe_op *allowed, size_t n_allowed,
	    void (*after)(const struct fe_env *env))
{
	for (int i = 0; i < MAX_OPS && in->n; i++) {
		one_op(env, in, allowed[fin_u8(in) % n_allowed]);
		fe_round(env);
		if (after)
			after(env);
	}
	fe_quiesce(env);
	if (after)
		after(env);
}
