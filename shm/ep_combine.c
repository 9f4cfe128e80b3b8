// SPDX-License-Identifier: MIT
/*
 * The EP group's combine (locus_ep.h): each received row's expert output
 * goes back to its source rank (one COMBINE per source, its rows 64-byte
 * aligned in the stage's y range), and the results that come back are
 * summed per token as they arrive, in float (double for F64), then written
 * out in the rows' dtype.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep_priv.h"
#include "locus_err_priv.h"

static uint32_t dtype_size(uint32_t dt)
{
	switch (dt) {
	case LOCUS_EP_F32:
		return 4;
	case LOCUS_EP_F16:
	case LOCUS_EP_BF16:
		return 2;
	case LOCUS_EP_F64:
		return 8;
	default:
		return 0;
	}
}

static float f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h >> 15) << 31, e = h >> 10 & 0x1f, m = h & 0x3ff, u;
	float f;

	if (e == 0) {
		f = (float)m / 16777216.0f; /* subnormal: m x 2^-24 */
		return s ? -f : f;
	}
	if (e == 31)
		u = s | 0x7f800000u | m << 13;
	else
		u = s | (e + 112) << 23 | m << 13;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint16_t f32_to_f16(float f)
{
	uint32_t u, s, m;
	int32_t e;

	memcpy(&u, &f, sizeof(u));
	s = u >> 16 & 0x8000;
	e = (int32_t)(u >> 23 & 0xff) - 127 + 15;
	m = u & 0x7fffff;
	if ((u & 0x7fffffff) > 0x7f800000u)
		return (uint16_t)(s | 0x7e00);            /* NaN */
	if (e >= 31)
		return (uint16_t)(s | 0x7c00);            /* overflow: infinity */
	if (e <= 0) {                                 /* subnormal or zero */
		uint32_t shift, r;

		if (e < -10)
			return (uint16_t)s;
		m |= 0x800000;
		shift = (uint32_t)(14 - e);
		r = m >> shift;
		if ((m >> (shift - 1) & 1) && ((m & ((1u << (shift - 1)) - 1)) || (r & 1)))
			r++;
		return (uint16_t)(s | r);
	}
	/* round to nearest even on the 13 bits dropped */
	if ((m & 0x1fff) > 0x1000 || ((m & 0x1fff) == 0x1000 && (m >> 13 & 1))) {
		m += 0x2000;
		if (m & 0x800000) {
			m = 0;
			e++;
			if (e >= 31)
				return (uint16_t)(s | 0x7c00);
		}
	}
	return (uint16_t)(s | (uint32_t)e << 10 | m >> 13);
}

static float bf16_to_f32(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint16_t f32_to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return (uint16_t)((u + 0x7fff + (u >> 16 & 1)) >> 16); /* nearest even */
}

/* One results message of the running combine into the sums. */
static int sum_msg(struct locus_ep *ep, uint32_t src, uint16_t chunk, uint16_t n_chunks,
		   uint32_t n_rows, uint32_t row_bytes, const struct locus_row_ref *refs,
		   const uint8_t *rows)
{
	struct ep_comb *cb = &ep->cb;
	struct locus_ep_handle *h = cb->h;
	uint32_t hid = cb->hidden, k = h->i.top_k;
	uint32_t kbits = k >= 32 ? UINT32_MAX : (1u << k) - 1;

	if (row_bytes != cb->row_bytes || !n_chunks || chunk >= n_chunks ||
	    (cb->n_chunks[src] && cb->n_chunks[src] != n_chunks) || cb->chunks[src] >= n_chunks)
		return ep_fail(ep, &cb->state, h->i.batch, -LOCUS_EPROTO, ep->p.rank, NULL,
			       "batch %llu: rank %u returned rows of %u bytes (ours %u) or message "
			       "%u of %u", (unsigned long long)h->i.batch, src, row_bytes,
			       cb->row_bytes, chunk, n_chunks);
	for (uint32_t j = 0; j < n_rows; j++)
		if (refs[j].token >= h->i.n_tokens || !refs[j].kmask || (refs[j].kmask & ~kbits))
			return ep_fail(ep, &cb->state, h->i.batch, -LOCUS_EPROTO, ep->p.rank, NULL,
				       "batch %llu: rank %u returned a row for token %u (we sent "
				       "%u) or slots 0x%x", (unsigned long long)h->i.batch, src,
				       refs[j].token, h->i.n_tokens, refs[j].kmask);
	for (uint32_t j = 0; j < n_rows; j++) {
		const uint8_t *row = rows + (size_t)j * row_bytes;
		uint32_t t = refs[j].token;

		cb->answered[t] |= refs[j].kmask;
		if (cb->dtype == LOCUS_EP_F64) {
			double *acc = (double *)cb->acc + (size_t)t * hid;
			const double *v = (const double *)row;

			for (uint32_t i = 0; i < hid; i++)
				acc[i] += v[i];
			continue;
		}
		float *acc = (float *)cb->acc + (size_t)t * hid;

		if (cb->dtype == LOCUS_EP_F32) {
			const float *v = (const float *)row;

			for (uint32_t i = 0; i < hid; i++)
				acc[i] += v[i];
		} else if (cb->dtype == LOCUS_EP_BF16) {
			const uint16_t *v = (const uint16_t *)row;

			for (uint32_t i = 0; i < hid; i++)
				acc[i] += bf16_to_f32(v[i]);
		} else {
			const uint16_t *v = (const uint16_t *)row;

			for (uint32_t i = 0; i < hid; i++)
				acc[i] += f16_to_f32(v[i]);
		}
	}
	cb->got_rows += n_rows;
	cb->n_chunks[src] = n_chunks;
	cb->chunks[src]++;
	return 0;
}

static struct locus_ep_handle *handle_of(struct locus_ep *ep, uint64_t batch)
{
	for (struct locus_ep_handle *h = ep->handles; h; h = h->next)
		if (h->i.batch == batch && !h->i.combined)
			return h;
	return NULL;
}

void ep_combine_rows(struct locus_ep *ep, const struct locus_desc *d,
		     const struct locus_client_rows *m)
{
	struct ep_comb *cb = &ep->cb;

	if (cb->state == OP_RUN && cb->h->i.batch == m->batch_id) {
		sum_msg(ep, m->src_rank, m->chunk, m->n_chunks, m->n_rows, m->row_bytes, m->refs,
			m->rows);
		locus_client_release_slot(ep->c, m->slot);
		return;
	}
	/* another rank answered before this one began its combine */
	if (handle_of(ep, m->batch_id) || (ep->d.batch == m->batch_id && ep->d.state != OP_IDLE))
		ep_keep_msg(ep, d, m);
	else
		locus_client_release_slot(ep->c, m->slot);
}

void ep_combine_refused(struct locus_ep *ep, uint64_t batch, uint32_t src, int code,
			const char *msg)
{
	struct locus_ep_handle *h = handle_of(ep, batch);

	if (!h)
		return;
	if (code == -LOCUS_EPEERDOWN) {
		h->gone |= 1ull << src;
		return;
	}
	if (ep->cb.state == OP_RUN && ep->cb.h == h) {
		ep_fail(ep, &ep->cb.state, batch, code, ep->p.rank, NULL, "%s", msg);
	} else if (!h->fail_code) {
		h->fail_code = code;
		h->fail_rank = ep->p.rank;
		snprintf(h->fail_msg, sizeof(h->fail_msg), "%s", msg);
	}
}

static int failed(struct locus_ep *ep, struct locus_error *err)
{
	struct ep_comb *cb = &ep->cb;

	for (uint32_t r = 0; r < ep->p.n_ranks; r++)
		ep_req_abandon(ep_req_of(ep, ROLE_COMBINE, r));
	if (cb->h)
		ep_msgs_drop(ep, LOCUS_OP_RESULTS_IN, cb->h->i.batch);
	cb->state = OP_IDLE;
	cb->h = NULL;
	if (err) {
		err->code = -ep->st.fail_code;
		snprintf(err->msg, sizeof(err->msg), "%s", ep->fail_msg);
	}
	return ep->st.fail_code;
}

/* Room for the sums and the answered slots. */
static int sums_room(struct ep_comb *cb, size_t acc_bytes, size_t n_tokens)
{
	if (acc_bytes > cb->acc_cap) {
		void *p = realloc(cb->acc, acc_bytes);

		if (!p)
			return -ENOMEM;
		cb->acc = p;
		cb->acc_cap = acc_bytes;
	}
	if (n_tokens > cb->ans_cap) {
		uint32_t *p = realloc(cb->answered, n_tokens * sizeof(*p));

		if (!p)
			return -ENOMEM;
		cb->answered = p;
		cb->ans_cap = n_tokens;
	}
	memset(cb->acc, 0, acc_bytes);
	memset(cb->answered, 0, n_tokens * sizeof(uint32_t));
	return 0;
}

/* Stage y's rows, each source's 64-byte aligned; submit one COMBINE per source. */
static int send_back(struct locus_ep *ep, const void *y)
{
	struct ep_comb *cb = &ep->cb;
	struct locus_ep_handle *h = cb->h;
	uint8_t *ys = ep->stage + ep->p.y_off;
	uint64_t at = 0, req = 0;
	uint32_t rb = cb->row_bytes;

	for (uint32_t s = 0; s < ep->p.n_ranks; s++) {
		cb->pos[s] = (uint32_t)at;
		at += LOCUS_ALIGN_UP((uint64_t)h->src_count[s] * rb, 64ull);
		if (h->src_count[s])
			req += LOCUS_ALIGN_UP(locus_combine_req_len(h->src_count[s]), (size_t)64);
	}
	if (at > ep->p.y_len)
		return ep_fail(ep, &cb->state, h->i.batch, -LOCUS_ERANGE, ep->p.rank, NULL,
			       "rank %u: the combine input of batch %llu (%u rows of %u bytes, "
			       "%llu bytes staged) does not fit its %llu-byte combine range",
			       ep->p.rank, (unsigned long long)h->i.batch, h->i.n_recv, rb,
			       (unsigned long long)at, (unsigned long long)ep->p.y_len);
	if (req > ep->comb_len)
		return ep_fail(ep, &cb->state, h->i.batch, -LOCUS_ERANGE, ep->p.rank, NULL,
			       "rank %u: the combine requests of batch %llu (%llu bytes) do not fit "
			       "its %llu request bytes", ep->p.rank, (unsigned long long)h->i.batch,
			       (unsigned long long)req, (unsigned long long)ep->comb_len);
	/* from the last source back: a source's aligned place is at or past its packed one */
	for (uint32_t s = ep->p.n_ranks; s-- > 0;) {
		size_t n = (size_t)h->src_count[s] * rb;

		if (!n)
			continue;
		if ((const uint8_t *)y == ys)
			memmove(ys + cb->pos[s], ys + (size_t)h->src_start[s] * rb, n);
		else
			memcpy(ys + cb->pos[s], (const uint8_t *)y + (size_t)h->src_start[s] * rb, n);
	}
	req = ep->comb_off;
	for (uint32_t s = 0; s < ep->p.n_ranks; s++) {
		struct ep_req *q = ep_req_of(ep, ROLE_COMBINE, s);
		struct locus_client_combine_req cr = {
			.layer = h->i.layer, .dst_rank = s, .n_rows = h->src_count[s],
			.row_bytes = rb, .rows_off = ep->p.y_off + cb->pos[s],
			.refs = h->refs + h->src_start[s],
		};
		int ret;

		q->state = R_FREE;
		if (!h->src_count[s] || ep_lost(ep, s))
			continue; /* a lost source's tokens have nobody to go to */
		q->peer = s;
		q->abandoned = 0;
		q->last = 0;
		q->desc = (struct locus_desc){
			.op = LOCUS_OP_COMBINE, .layer = h->i.layer, .id = h->i.batch, .off = req,
			.len = (uint32_t)locus_combine_req_len(h->src_count[s]), .peer = s,
		};
		ret = locus_client_combine(ep->c, req, &cr, h->i.batch, NULL);
		req += LOCUS_ALIGN_UP(locus_combine_req_len(h->src_count[s]), (size_t)64);
		if (ret == -LOCUS_EFULL) {
			q->state = R_AGAIN;
			q->not_before = 0;
		} else if (ret < 0) {
			return ep_fail(ep, &cb->state, h->i.batch, ret, ep->p.rank, NULL,
				       "combine of batch %llu to rank %u was refused (%s)",
				       (unsigned long long)h->i.batch, s, locus_strerror(ret));
		} else {
			q->state = R_FLIGHT;
		}
	}
	return 0;
}

int locus_ep_combine_begin(struct locus_ep *ep, struct locus_ep_handle *h,
			   const struct locus_ep_combine_args *a, struct locus_error *err)
{
	struct ep_comb *cb;
	uint64_t until;
	uint32_t es;
	size_t acc;

	if (!ep || !h || !a || h->ep != ep)
		return locus_error_set(err, EINVAL, "combine: a handle of this group's dispatch");
	cb = &ep->cb;
	if (cb->state == OP_RUN)
		return locus_error_set(err, EBUSY, "combine of batch %llu is running",
				       (unsigned long long)cb->h->i.batch);
	if (h->i.combined)
		return locus_error_set(err, EALREADY, "batch %llu was combined already",
				       (unsigned long long)h->i.batch);
	cb->h = h;
	cb->state = OP_RUN;
	ep->last_progress_ns = locus_mono_ns();
	cb->timeout_ms = a->timeout_ms ? a->timeout_ms : ep->p.timeout_ms;
	cb->deadline = locus_mono_ns() + (uint64_t)cb->timeout_ms * 1000000ull;
	if (h->fail_code) {
		ep_fail(ep, &cb->state, h->i.batch, h->fail_code, h->fail_rank, NULL, "%s",
			h->fail_msg);
		return failed(ep, err);
	}
	es = dtype_size(a->dtype);
	if (!es || !a->hidden || (uint64_t)a->hidden * es > LOCUS_MAX_ROW_BYTES || !a->out ||
	    (h->i.n_recv && !a->y)) {
		ep_fail(ep, &cb->state, h->i.batch, -EINVAL, ep->p.rank, NULL,
			"rank %u: the combine of batch %llu has dtype %u, %u per row (1..%u bytes),"
			" or no rows or output", ep->p.rank, (unsigned long long)h->i.batch,
			a->dtype, a->hidden, LOCUS_MAX_ROW_BYTES);
		return failed(ep, err);
	}
	cb->dtype = a->dtype;
	cb->hidden = a->hidden;
	cb->esize = es;
	cb->row_bytes = a->hidden * es;
	cb->out = a->out;
	cb->got_rows = 0;
	memset(cb->n_chunks, 0, sizeof(cb->n_chunks));
	memset(cb->chunks, 0, sizeof(cb->chunks));
	acc = (size_t)h->i.n_tokens * a->hidden * (a->dtype == LOCUS_EP_F64 ? 8 : 4);
	if (sums_room(cb, acc ? acc : 1, h->i.n_tokens ? h->i.n_tokens : 1) < 0) {
		ep_fail(ep, &cb->state, h->i.batch, -ENOMEM, ep->p.rank, NULL,
			"rank %u: out of memory for the sums of batch %llu", ep->p.rank,
			(unsigned long long)h->i.batch);
		return failed(ep, err);
	}
	/* combines of a batch given up may still be at locusd: their stage is theirs */
	until = locus_mono_ns() + (uint64_t)cb->timeout_ms * 1000000ull;
	for (;;) {
		int busy = 0;

		for (uint32_t r = 0; r < ep->p.n_ranks; r++)
			busy |= ep_req_of(ep, ROLE_COMBINE, r)->state == R_FLIGHT;
		if (!busy || cb->state != OP_RUN)
			break;
		if (locus_mono_ns() > until) {
			ep_fail(ep, &cb->state, h->i.batch, -ETIMEDOUT, ep->p.rank, NULL,
				"rank %u: an earlier batch's combines never completed", ep->p.rank);
			break;
		}
		if (ep_pump(ep) == 0)
			ep_idle(ep);
	}
	if (cb->state == OP_RUN)
		send_back(ep, a->y);
	/* what came before this rank began */
	for (uint32_t i = ep->n_msgs; i-- > 0 && cb->state == OP_RUN;) {
		struct ep_msg *m = &ep->msgs[i];

		if (m->op != LOCUS_OP_RESULTS_IN || m->batch != h->i.batch)
			continue;
		sum_msg(ep, m->src, m->chunk, m->n_chunks, m->n_rows, m->row_bytes, m->refs,
			m->rows);
		ep_msg_release(ep, i);
	}
	if (cb->state != OP_RUN)
		return failed(ep, err);
	return 0;
}

static int down(struct locus_ep *ep, uint32_t r)
{
	return ep_lost(ep, r) || (ep->cb.h->gone >> r & 1);
}

static int all_back(struct locus_ep *ep)
{
	struct ep_comb *cb = &ep->cb;
	struct locus_ep_handle *h = cb->h;
	int any_down = 0;

	for (uint32_t s = 0; s < ep->p.n_ranks; s++) {
		struct ep_req *q = ep_req_of(ep, ROLE_COMBINE, s);

		if (q->state == R_FLIGHT || q->state == R_AGAIN)
			return 0;
		if (q->state == R_DONE && q->status) {
			ep_fail(ep, &cb->state, h->i.batch, q->status, ep->p.rank, NULL,
				"combine of batch %llu to rank %u: %s", (unsigned long long)h->i.batch,
				s, locus_strerror(q->status));
			return 0;
		}
		any_down |= (h->i.dests >> s & 1) && down(ep, s);
	}
	if (cb->got_rows >= h->i.rows_sent)
		return 1;
	if (!any_down)
		return 0;
	/* a rank that held our rows was lost: every other one answered all of them */
	for (uint32_t s = 0; s < ep->p.n_ranks; s++)
		if ((h->i.dests >> s & 1) && !down(ep, s) &&
		    cb->chunks[s] < (cb->n_chunks[s] ? cb->n_chunks[s] : 1))
			return 0;
	return 1;
}

static void finish(struct locus_ep *ep)
{
	struct ep_comb *cb = &ep->cb;
	struct locus_ep_handle *h = cb->h;
	size_t n = (size_t)h->i.n_tokens * cb->hidden;
	uint32_t k = h->i.top_k;

	switch (cb->dtype) {
	case LOCUS_EP_F64:
		memcpy(cb->out, cb->acc, n * 8);
		break;
	case LOCUS_EP_F32:
		memcpy(cb->out, cb->acc, n * 4);
		break;
	case LOCUS_EP_BF16:
		for (size_t i = 0; i < n; i++)
			((uint16_t *)cb->out)[i] = f32_to_bf16(((float *)cb->acc)[i]);
		break;
	default:
		for (size_t i = 0; i < n; i++)
			((uint16_t *)cb->out)[i] = f32_to_f16(((float *)cb->acc)[i]);
		break;
	}
	if (cb->got_rows < h->i.rows_sent) {
		/* pairs sent to a rank lost before it answered */
		for (uint32_t t = 0; t < h->i.n_tokens; t++)
			for (uint32_t j = 0; j < k; j++) {
				size_t i = (size_t)t * k + j;

				if (!(cb->answered[t] >> j & 1) && !h->masked[i] && !h->none[i]) {
					h->masked[i] = 1;
					h->i.n_masked++;
				}
			}
		for (uint32_t s = 0; s < ep->p.n_ranks; s++)
			if ((h->i.dests >> s & 1) && down(ep, s))
				h->i.lost |= 1ull << s;
	}
	h->i.combined = 1;
	cb->state = OP_IDLE;
	cb->h = NULL;
}

int locus_ep_combine_poll(struct locus_ep *ep, struct locus_error *err)
{
	struct ep_comb *cb;
	int n;

	if (!ep)
		return locus_error_set(err, EINVAL, "no group");
	cb = &ep->cb;
	if (cb->state == OP_FAILED)
		return failed(ep, err);
	if (cb->state != OP_RUN)
		return locus_error_set(err, EINVAL, "no combine runs");
	n = ep_pump(ep);
	if (n < 0 && cb->state == OP_RUN)
		ep_fail(ep, &cb->state, cb->h->i.batch, n, ep->p.rank, NULL, "locusd is gone "
			"(killed or stopped): attach again to a restarted one");
	if (cb->state == OP_RUN && all_back(ep)) {
		finish(ep);
		return 1;
	}
	if (cb->state == OP_RUN && locus_mono_ns() > cb->deadline) {
		char lack[256];

		ep_wait_text(ep, ROLE_COMBINE, lack, sizeof(lack));
		ep_fail(ep, &cb->state, cb->h->i.batch, -ETIMEDOUT, ep->p.rank, NULL,
			"combine of batch %llu did not complete within %g s (%s; %u of %u rows "
			"back)", (unsigned long long)cb->h->i.batch, cb->timeout_ms / 1000.0, lack,
			cb->got_rows, cb->h->i.rows_sent);
	}
	if (cb->state == OP_FAILED)
		return failed(ep, err);
	return 0;
}

int locus_ep_combine_wait(struct locus_ep *ep, struct locus_error *err)
{
	for (;;) {
		uint64_t before = ep ? ep->polled : 0;
		int ret = locus_ep_combine_poll(ep, err);

		if (ret != 0)
			return ret;
		if (ep->polled == before)
			ep_idle(ep); /* no spinning: the group's ranks may share a core */
	}
}

int locus_ep_combine(struct locus_ep *ep, struct locus_ep_handle *h,
		     const struct locus_ep_combine_args *a, struct locus_error *err)
{
	int ret = locus_ep_combine_begin(ep, h, a, err);

	return ret < 0 ? ret : locus_ep_combine_wait(ep, err);
}
