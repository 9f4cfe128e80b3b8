// SPDX-License-Identifier: MIT
#include <errno.h>
#include <math.h>

#include "locus_dispatch.h"
#include "locus_err_priv.h"

/* [off, off + len) inside [0, size), without overflow. */
static int inside(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

int locus_dispatch_req_check(const struct locus_dispatch_req *r, const void *body, size_t len,
			     uint64_t stage_size, uint32_t n_layers, uint32_t n_experts,
			     uint32_t max_tokens, struct locus_error *err)
{
	const uint16_t *ids;
	const float *gates;
	uint64_t n;

	if (len < sizeof(*r))
		return locus_error_set(err, LOCUS_ETRUNCATED, "dispatch request of %zu bytes", len);
	if (r->magic != LOCUS_DISPATCH_MAGIC)
		return locus_error_set(err, LOCUS_EBADMAGIC, "dispatch request magic 0x%08x",
				       r->magic);
	if (r->top_k == 0 || r->top_k > LOCUS_MAX_TOPK)
		return locus_error_set(err, LOCUS_ERANGE, "top_k %u outside 1..%u", r->top_k,
				       LOCUS_MAX_TOPK);
	if (r->n_tokens == 0 || r->n_tokens > max_tokens)
		return locus_error_set(err, LOCUS_ERANGE, "%u tokens outside 1..%u", r->n_tokens,
				       max_tokens);
	if (r->row_bytes == 0 || r->row_bytes > LOCUS_MAX_ROW_BYTES)
		return locus_error_set(err, LOCUS_ERANGE, "row of %u bytes", r->row_bytes);
	if (r->layer >= n_layers)
		return locus_error_set(err, LOCUS_ERANGE, "layer %u >= %u", r->layer, n_layers);
	if (len != locus_dispatch_req_len(r->n_tokens, r->top_k))
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "dispatch request is %zu bytes, %u x top-%u needs %zu", len,
				       r->n_tokens, r->top_k,
				       locus_dispatch_req_len(r->n_tokens, r->top_k));
	if (r->rows_off % LOCUS_CACHE_LINE ||
	    !inside(r->rows_off, (uint64_t)r->n_tokens * r->row_bytes, stage_size))
		return locus_error_set(err, LOCUS_ERANGE, "token rows at %llu outside the stage",
				       (unsigned long long)r->rows_off);
	ids = body;
	gates = (const float *)((const uint8_t *)body + locus_ids_bytes(r->n_tokens, r->top_k));
	n = (uint64_t)r->n_tokens * r->top_k;
	for (uint64_t i = 0; i < n; i++) {
		if (ids[i] >= n_experts)
			return locus_error_set(err, LOCUS_ERANGE,
					       "token %llu: expert id %u >= %u",
					       (unsigned long long)(i / r->top_k), ids[i], n_experts);
		if (!isfinite(gates[i]))
			return locus_error_set(err, LOCUS_ENAN, "token %llu: gate weight not finite",
					       (unsigned long long)(i / r->top_k));
	}
	return 0;
}

int locus_combine_req_check(const struct locus_combine_req *r, const struct locus_row_ref *refs,
			    size_t len, uint64_t stage_size, uint32_t n_ranks, uint32_t max_rows,
			    struct locus_error *err)
{
	if (len < sizeof(*r))
		return locus_error_set(err, LOCUS_ETRUNCATED, "combine request of %zu bytes", len);
	if (r->magic != LOCUS_COMBINE_MAGIC)
		return locus_error_set(err, LOCUS_EBADMAGIC, "combine request magic 0x%08x",
				       r->magic);
	if (r->reserved || r->reserved2)
		return locus_error_set(err, LOCUS_EPROTO, "combine request reserved bytes set");
	if (r->n_rows == 0 || r->n_rows > max_rows)
		return locus_error_set(err, LOCUS_ERANGE, "%u rows outside 1..%u", r->n_rows,
				       max_rows);
	if (r->row_bytes == 0 || r->row_bytes > LOCUS_MAX_ROW_BYTES)
		return locus_error_set(err, LOCUS_ERANGE, "row of %u bytes", r->row_bytes);
	if (r->dst_rank >= n_ranks)
		return locus_error_set(err, LOCUS_ERANGE, "destination rank %u >= %u", r->dst_rank,
				       n_ranks);
	if (len != locus_combine_req_len(r->n_rows))
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "combine request is %zu bytes, %u rows need %zu", len,
				       r->n_rows, locus_combine_req_len(r->n_rows));
	if (r->rows_off % LOCUS_CACHE_LINE ||
	    !inside(r->rows_off, (uint64_t)r->n_rows * r->row_bytes, stage_size))
		return locus_error_set(err, LOCUS_ERANGE, "output rows at %llu outside the stage",
				       (unsigned long long)r->rows_off);
	for (uint32_t i = 0; i < r->n_rows; i++)
		if (refs[i].kmask == 0)
			return locus_error_set(err, LOCUS_ERANGE, "row %u: k-slot mask 0x%x", i,
					       refs[i].kmask);
	return 0;
}

int locus_rows_hdrs_check(const struct locus_msg_hdr *m, const struct locus_rows_hdr *h,
			  size_t len, uint32_t n_ranks, uint64_t stage_size,
			  struct locus_error *err)
{
	int in_place, ret;

	ret = locus_msg_hdr_check(m, len, n_ranks);
	if (ret < 0)
		return locus_error_set(err, -ret, "rows message header: %s", locus_strerror(ret));
	if (m->type != LOCUS_MSG_DISPATCH && m->type != LOCUS_MSG_COMBINE)
		return locus_error_set(err, LOCUS_EPROTO, "message type %u is not rows", m->type);
	if (len < sizeof(*m) + sizeof(*h))
		return locus_error_set(err, LOCUS_ETRUNCATED, "rows message of %zu bytes", len);
	if (h->magic != LOCUS_ROWS_MAGIC)
		return locus_error_set(err, LOCUS_EBADMAGIC, "rows header magic 0x%08x", h->magic);
	if ((h->flags & ~(uint32_t)(LOCUS_ROWS_IN_PLACE | LOCUS_ROWS_IN_REGION |
				    LOCUS_ROWS_REFUSED | LOCUS_ROWS_GONE)) ||
	    (h->flags & (LOCUS_ROWS_IN_PLACE | LOCUS_ROWS_IN_REGION)) == LOCUS_ROWS_IN_REGION ||
	    ((h->flags & LOCUS_ROWS_GONE) && !(h->flags & LOCUS_ROWS_REFUSED)) ||
	    ((h->flags & LOCUS_ROWS_REFUSED) &&
	     ((h->flags & ~(uint32_t)LOCUS_ROWS_GONE) != LOCUS_ROWS_REFUSED ||
	      m->type != LOCUS_MSG_COMBINE)))
		return locus_error_set(err, LOCUS_EPROTO, "rows flags 0x%x for message type %u",
				       h->flags, m->type);
	if ((m->type == LOCUS_MSG_DISPATCH) != (h->top_k != 0) || h->top_k > LOCUS_MAX_TOPK)
		return locus_error_set(err, LOCUS_ERANGE, "top_k %u for message type %u", h->top_k,
				       m->type);
	if (h->flags & LOCUS_ROWS_REFUSED) {
		/* a refusal carries the batch and the generation, never a row */
		if (h->n_rows || h->row_bytes || h->chunk || h->n_chunks != 1)
			return locus_error_set(err, LOCUS_ERANGE, "refusal with %u rows of %u "
					       "bytes, chunk %u/%u", h->n_rows, h->row_bytes,
					       h->chunk, h->n_chunks);
	} else if (h->n_rows == 0 || h->row_bytes == 0 || h->row_bytes > LOCUS_MAX_ROW_BYTES ||
		   h->chunk >= h->n_chunks) {
		return locus_error_set(err, LOCUS_ERANGE, "rows header: %u rows of %u bytes, chunk %u/%u",
				       h->n_rows, h->row_bytes, h->chunk, h->n_chunks);
	} else if (m->type == LOCUS_MSG_COMBINE && h->placement_gen) {
		return locus_error_set(err, LOCUS_EPROTO, "combine rows with placement generation "
				       "%llu", (unsigned long long)h->placement_gen);
	}
	in_place = !!(h->flags & LOCUS_ROWS_IN_PLACE);
	if ((uint64_t)h->n_rows * sizeof(struct locus_row_ref) > len ||
	    len != locus_rows_msg_len(h->n_rows, h->top_k, h->row_bytes, in_place))
		return locus_error_set(err, LOCUS_ETRUNCATED, "rows message is %zu bytes for %u rows",
				       len, h->n_rows);
	if (in_place ? (h->rows_off % LOCUS_CACHE_LINE || h->rows_off > stage_size)
		     : h->rows_off != locus_rows_msg_rows_off(h->n_rows, h->top_k))
		return locus_error_set(err, LOCUS_ERANGE, "rows at %llu out of place",
				       (unsigned long long)h->rows_off);
	/* in place, COMBINE rows are contiguous; DISPATCH rows are indexed by token */
	if (in_place && m->type == LOCUS_MSG_COMBINE &&
	    !inside(h->rows_off, (uint64_t)h->n_rows * h->row_bytes, stage_size))
		return locus_error_set(err, LOCUS_ERANGE, "rows in place outside the stage");
	return 0;
}

int locus_rows_refs_check(const struct locus_msg_hdr *m, const struct locus_rows_hdr *h,
			  const struct locus_row_ref *refs, uint64_t stage_size,
			  struct locus_error *err)
{
	int in_place = !!(h->flags & LOCUS_ROWS_IN_PLACE);

	for (uint32_t i = 0; i < h->n_rows; i++) {
		uint32_t km = refs[i].kmask;

		if (km == 0 || (h->top_k && h->top_k < 32 && (km >> h->top_k)))
			return locus_error_set(err, LOCUS_ERANGE, "row %u: k-slot mask 0x%x", i, km);
		if (in_place && m->type == LOCUS_MSG_DISPATCH &&
		    !inside(h->rows_off + (uint64_t)refs[i].token * h->row_bytes, h->row_bytes,
			    stage_size))
			return locus_error_set(err, LOCUS_ERANGE, "row %u: token %u outside the stage",
					       i, refs[i].token);
	}
	return 0;
}

int locus_rows_msg_check(const void *msg, size_t len, uint32_t n_ranks, uint64_t stage_size,
			 struct locus_error *err)
{
	const struct locus_msg_hdr *m = msg;
	const struct locus_rows_hdr *h = locus_rows_hdr_of((void *)msg);
	/* hdrs_check reads *h only once len shows the message holds one */
	int ret = locus_rows_hdrs_check(m, h, len, n_ranks, stage_size, err);

	if (ret < 0)
		return ret;
	return locus_rows_refs_check(m, h, locus_rows_refs((void *)msg), stage_size, err);
}
