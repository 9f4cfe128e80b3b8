// SPDX-License-Identifier: MIT
/*
 * Client side of expert parallelism (locus_client.h): a rank's DISPATCH and
 * COMBINE requests written into its stage in the format of
 * locus_dispatch.h, and the ROWS_IN / RESULTS_IN messages it reads from its
 * inbox. A binding (the Python package) calls these rather than knowing the
 * wire layout itself.
 */
#include <errno.h>
#include <string.h>

#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_dispatch.h"
#include "locus_err_priv.h"
#include "locus_wire.h"

/* [a, a + alen) and [b, b + blen) overlap. */
static int overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

/* The request's place in the stage: off aligned, len bytes inside it. */
static int place_ok(uint64_t off, size_t len, uint64_t size, const char *what,
		    struct locus_error *err)
{
	if (off % 8 || off > size || len > size - off)
		return locus_error_set(err, LOCUS_ERANGE, "%s of %zu bytes at stage offset %llu: "
				       "not 8-byte aligned or past the %llu-byte stage", what,
				       len, (unsigned long long)off, (unsigned long long)size);
	return 0;
}

int locus_client_dispatch(struct locus_client *c, uint64_t off,
			  const struct locus_client_dispatch_req *r, uint64_t batch_id,
			  struct locus_error *err)
{
	return locus_client_dispatch_ex(c, off, r, batch_id, 0, err);
}

const uint16_t *locus_client_dispatch_ids(struct locus_client *c, uint64_t off)
{
	uint64_t size;
	uint8_t *stage = locus_client_stage(c, &size);

	if (!stage || off % 8 || off > size || size - off < sizeof(struct locus_dispatch_req))
		return NULL;
	return (const uint16_t *)(stage + off + sizeof(struct locus_dispatch_req));
}

int locus_client_dispatch_ex(struct locus_client *c, uint64_t off,
			     const struct locus_client_dispatch_req *r, uint64_t batch_id,
			     uint32_t flags, struct locus_error *err)
{
	uint64_t size;
	uint8_t *stage = locus_client_stage(c, &size);
	struct locus_dispatch_req *h;
	size_t len, ids;
	uint64_t n;
	int ret;

	if (!stage || !r || !r->experts || !r->gates)
		return locus_error_set(err, EINVAL, "dispatch: no request");
	if (flags & ~(uint32_t)LOCUS_DESC_F_MASK)
		return locus_error_set(err, EINVAL, "dispatch: flags 0x%x (only LOCUS_DESC_F_MASK)",
				       flags);
	if (r->top_k == 0 || r->top_k > LOCUS_MAX_TOPK || r->n_tokens == 0 ||
	    r->n_tokens > (1u << 24))
		return locus_error_set(err, LOCUS_ERANGE, "dispatch of %u tokens x top-%u: 1..%u "
				       "tokens, top-k 1..%u", r->n_tokens, r->top_k, 1u << 24,
				       LOCUS_MAX_TOPK);
	len = locus_dispatch_req_len(r->n_tokens, r->top_k);
	ret = place_ok(off, len, size, "dispatch request", err);
	if (ret < 0)
		return ret;
	n = (uint64_t)r->n_tokens * r->row_bytes;
	if (r->row_bytes && r->rows_off <= size && n <= size - r->rows_off &&
	    overlap(off, len, r->rows_off, n))
		return locus_error_set(err, LOCUS_ERANGE, "dispatch: the token rows at %llu overlap "
				       "the request at %llu", (unsigned long long)r->rows_off,
				       (unsigned long long)off);
	h = (struct locus_dispatch_req *)(stage + off);
	*h = (struct locus_dispatch_req){
		.magic = LOCUS_DISPATCH_MAGIC, .layer = r->layer, .top_k = r->top_k,
		.n_tokens = r->n_tokens, .row_bytes = r->row_bytes, .rows_off = r->rows_off,
		.batch_id = batch_id,
	};
	ids = (size_t)r->n_tokens * r->top_k * sizeof(uint16_t);
	memcpy(h + 1, r->experts, ids);
	memset((uint8_t *)(h + 1) + ids, 0, locus_ids_bytes(r->n_tokens, r->top_k) - ids);
	memcpy((void *)locus_dispatch_gates(h), r->gates, (size_t)r->n_tokens * r->top_k * 4);
	/* locusd's own check: any layer, ids below n_experts when given */
	ret = locus_dispatch_req_check(h, h + 1, len, size, UINT16_MAX + 1u,
				       r->n_experts ? r->n_experts : UINT16_MAX + 1u, r->n_tokens,
				       err);
	if (ret < 0)
		return ret;
	return locus_client_submit(c, &(struct locus_desc){ .op = LOCUS_OP_DISPATCH,
							     .flags = (uint8_t)flags,
							     .layer = r->layer, .id = batch_id,
							     .off = off, .len = (uint32_t)len }, 1)
		       == 1 ? 0 : locus_error_set(err, LOCUS_EFULL, "submit ring full");
}

int locus_client_combine(struct locus_client *c, uint64_t off,
			 const struct locus_client_combine_req *r, uint64_t batch_id,
			 struct locus_error *err)
{
	return locus_client_combine_ex(c, off, r, batch_id, 0, 0, err);
}

int locus_client_combine_ex(struct locus_client *c, uint64_t off,
			    const struct locus_client_combine_req *r, uint64_t batch_id,
			    uint32_t flags, uint32_t region, struct locus_error *err)
{
	uint64_t size;
	uint8_t *stage = locus_client_stage(c, &size);
	struct locus_combine_req *h;
	size_t len;
	int ret;

	if (!stage || !r || !r->refs)
		return locus_error_set(err, EINVAL, "combine: no request");
	if (flags & ~(uint32_t)LOCUS_DESC_F_REGION)
		return locus_error_set(err, EINVAL, "combine: flags 0x%x (only LOCUS_DESC_F_REGION)",
				       flags);
	if (!(flags & LOCUS_DESC_F_REGION))
		region = 0;
	if (r->n_rows == 0 || r->n_rows > (1u << 24))
		return locus_error_set(err, LOCUS_ERANGE, "combine of %u rows: 1..%u", r->n_rows,
				       1u << 24);
	len = locus_combine_req_len(r->n_rows);
	ret = place_ok(off, len, size, "combine request", err);
	if (ret < 0)
		return ret;
	if (!region && r->row_bytes && r->rows_off <= size &&
	    (uint64_t)r->n_rows * r->row_bytes <= size - r->rows_off &&
	    overlap(off, len, r->rows_off, (uint64_t)r->n_rows * r->row_bytes))
		return locus_error_set(err, LOCUS_ERANGE, "combine: the output rows at %llu overlap "
				       "the request at %llu", (unsigned long long)r->rows_off,
				       (unsigned long long)off);
	h = (struct locus_combine_req *)(stage + off);
	*h = (struct locus_combine_req){
		.magic = LOCUS_COMBINE_MAGIC, .layer = r->layer, .dst_rank = r->dst_rank,
		.n_rows = r->n_rows, .row_bytes = r->row_bytes, .rows_off = r->rows_off,
		.batch_id = batch_id,
	};
	memcpy(h + 1, r->refs, (size_t)r->n_rows * sizeof(struct locus_row_ref));
	/* rows in a region are bounded by its length, which locusd checks */
	ret = locus_combine_req_check(h, (const struct locus_row_ref *)(h + 1), len,
				      region ? UINT64_MAX : size, UINT32_MAX, r->n_rows, err);
	if (ret < 0)
		return ret;
	return locus_client_submit(c, &(struct locus_desc){ .op = LOCUS_OP_COMBINE,
							     .flags = (uint8_t)flags,
							     .layer = r->layer, .id = batch_id,
							     .off = off, .len = (uint32_t)len,
							     .peer = r->dst_rank, .region = region }, 1)
		       == 1 ? 0 : locus_error_set(err, LOCUS_EFULL, "submit ring full");
}

int locus_client_rows_in(struct locus_client *c, const struct locus_desc *d,
			 struct locus_client_rows *out, struct locus_error *err)
{
	const struct locus_clients *v = locus_client_region(c);
	const struct locus_client_ctl *ctl;
	const struct locus_msg_hdr *m;
	const struct locus_rows_hdr *h;
	uint8_t *stage, *msg;
	uint64_t size;
	int in_place;

	if (!d || !out || (d->op != LOCUS_OP_ROWS_IN && d->op != LOCUS_OP_RESULTS_IN))
		return locus_error_set(err, EINVAL, "not a ROWS_IN / RESULTS_IN delivery");
	stage = locus_client_stage(c, &size);
	msg = (uint8_t *)locus_client_inbox(c, d);
	m = (const struct locus_msg_hdr *)msg;
	if (!msg || !stage)
		return locus_error_set(err, LOCUS_ERANGE, "rows of inbox slot %u: %u bytes at %llu "
				       "are not in the inbox", d->slot, d->len,
				       (unsigned long long)d->off);
	/* rows in place in a registered region are bounded by it, which locusd checked */
	h = locus_rows_hdr_of(msg);
	if (d->len >= sizeof(*m) + sizeof(*h) && (h->flags & LOCUS_ROWS_IN_REGION))
		size = UINT64_MAX;
	if (locus_rows_msg_check(msg, d->len, UINT32_MAX, size, err) < 0)
		return -LOCUS_EPROTO;
	if ((m->type == LOCUS_MSG_DISPATCH) != (d->op == LOCUS_OP_ROWS_IN))
		return locus_error_set(err, LOCUS_EPROTO, "inbox slot %u: a message of type %u "
				       "delivered as op %u", d->slot, m->type, d->op);
	/* a refusal is an error for the batch, never rows: a caller that only
	 * looks at n_rows must not take it for an empty answer */
	if (h->flags & LOCUS_ROWS_REFUSED) {
		*out = (struct locus_client_rows){
			.op = d->op, .layer = h->layer, .n_chunks = 1, .slot = d->slot,
			.src_rank = m->src_rank, .batch_id = h->batch_id,
		};
		if (h->flags & LOCUS_ROWS_GONE)
			return locus_error_set(err, LOCUS_EPEERDOWN, "rank %u is gone: it left its "
					       "node before our rows of batch %llu reached it",
					       m->src_rank, (unsigned long long)h->batch_id);
		return locus_error_set(err, LOCUS_ESTALEPLACEMENT, "rank %u refused our rows of "
				       "batch %llu: they were planned under placement generation "
				       "%llu, which it does not hold", m->src_rank,
				       (unsigned long long)h->batch_id,
				       (unsigned long long)h->placement_gen);
	}
	/* the control line leads our slot, the buffer (stage first) follows it */
	ctl = (const struct locus_client_ctl *)(stage - v->buf_off);
	in_place = !!(h->flags & LOCUS_ROWS_IN_PLACE);
	if (in_place && m->src_rank != ctl->rank)
		return locus_error_set(err, LOCUS_EPROTO, "inbox slot %u: rows in place from rank "
				       "%u, we are rank %u", d->slot, m->src_rank, ctl->rank);
	*out = (struct locus_client_rows){
		.op = d->op, .in_place = (uint8_t)in_place, .layer = h->layer, .top_k = h->top_k,
		.chunk = h->chunk, .n_chunks = h->n_chunks, .slot = d->slot,
		.src_rank = m->src_rank, .n_rows = h->n_rows, .row_bytes = h->row_bytes,
		.batch_id = h->batch_id, .refs = locus_rows_refs(msg), .rows_off = h->rows_off,
	};
	if (h->top_k) {
		out->experts = locus_rows_experts(msg, h->n_rows);
		out->gates = locus_rows_gates(msg, h->n_rows, h->top_k);
	}
	if (!in_place)
		out->rows = msg + h->rows_off;
	else if (!(h->flags & LOCUS_ROWS_IN_REGION))
		out->rows = stage + h->rows_off;
	return 0;
}
