// SPDX-License-Identifier: MIT
/*
 * The EP group's dispatch (locus_ep.h): the batch's ids and gates made
 * ready for locusd ("no selection" slots ride along with a -0.0 gate), the
 * DISPATCH, the EMPTY control rows to the ranks it sent nothing, the rows
 * messages every rank sent this one accounted per source, and the copy out
 * in (source, token) order with the batch's handle.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep_priv.h"
#include "locus_err_priv.h"

static const uint32_t NEG_ZERO = 0x80000000u;

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* Grow the batch's ids, gates and none flags to n pairs. */
static int pairs_room(struct ep_disp *d, uint32_t n)
{
	uint16_t *ids;
	float *gates;
	uint8_t *none;

	if (n <= d->cap)
		return 0;
	ids = realloc(d->ids, (size_t)n * sizeof(*ids));
	if (ids)
		d->ids = ids;
	gates = realloc(d->gates, (size_t)n * sizeof(*gates));
	if (gates)
		d->gates = gates;
	none = realloc(d->none, n);
	if (none)
		d->none = none;
	if (!ids || !gates || !none)
		return -ENOMEM;
	d->cap = n;
	return 0;
}

static int args_check(struct locus_ep *ep, const struct locus_ep_dispatch_args *a,
		      struct locus_error *err)
{
	uint64_t pairs;

	if (a->top_k < 1 || a->top_k > LOCUS_MAX_TOPK)
		return locus_error_set(err, LOCUS_ERANGE, "num_topk = %u: 1..%u experts per token",
				       a->top_k, LOCUS_MAX_TOPK);
	if (a->row_bytes < 1 || a->row_bytes > LOCUS_MAX_ROW_BYTES)
		return locus_error_set(err, LOCUS_ERANGE, "a row of %u bytes: 1..%u bytes per "
				       "token row", a->row_bytes, LOCUS_MAX_ROW_BYTES);
	if (a->n_tokens > ep->p.max_tokens)
		return locus_error_set(err, LOCUS_ERANGE, "%u tokens: the group's bound is %u per "
				       "rank per batch", a->n_tokens, ep->p.max_tokens);
	if ((uint64_t)a->n_tokens * a->row_bytes > ep->p.x_len)
		return locus_error_set(err, LOCUS_ERANGE, "x is %llu bytes, more than the group's "
				       "%llu for one dispatch",
				       (unsigned long long)a->n_tokens * a->row_bytes,
				       (unsigned long long)ep->p.x_len);
	if (a->n_experts < 1 || a->n_experts >= LOCUS_EXPERT_MASKED)
		return locus_error_set(err, LOCUS_ERANGE, "%u experts: 1..%u", a->n_experts,
				       LOCUS_EXPERT_MASKED - 1);
	if (locus_dispatch_req_len(a->n_tokens, a->top_k) > ep->disp_len)
		return locus_error_set(err, LOCUS_ERANGE, "a dispatch request of %u tokens x top-%u "
				       "does not fit the group's %llu request bytes", a->n_tokens,
				       a->top_k, (unsigned long long)ep->disp_len);
	if (a->n_tokens && (!a->x || !a->topk_idx || !a->topk_weights))
		return locus_error_set(err, EINVAL, "dispatch: x, topk_idx and topk_weights");
	pairs = (uint64_t)a->n_tokens * a->top_k;
	for (uint64_t i = 0; i < pairs; i++) {
		int64_t id = a->topk_idx[i];

		if ((id < 0 && id != -1) || (id >= a->n_experts && id != LOCUS_EXPERT_MASKED))
			return locus_error_set(err, LOCUS_ERANGE, "topk_idx: expert id %lld at token "
					       "%llu, slot %llu is out of range: ids 0..%u, or -1 "
					       "for no selection", (long long)id,
					       (unsigned long long)(i / a->top_k),
					       (unsigned long long)(i % a->top_k), a->n_experts - 1);
		if (!isfinite(a->topk_weights[i]))
			return locus_error_set(err, LOCUS_ENAN, "topk_weights: the gate at token %llu, "
					       "slot %llu is not finite",
					       (unsigned long long)(i / a->top_k),
					       (unsigned long long)(i % a->top_k));
	}
	return 0;
}

/* ids and gates as sent; the tokens sent (trailing ones with nothing selected are not). */
static void pairs_build(struct ep_disp *d, const struct locus_ep_dispatch_args *a)
{
	uint32_t k = a->top_k;

	d->n_send = 0;
	for (uint32_t t = 0; t < a->n_tokens; t++) {
		const int64_t *id = a->topk_idx + (size_t)t * k;
		const float *w = a->topk_weights + (size_t)t * k;
		uint16_t first = 0;
		int any = 0;

		for (uint32_t j = 0; j < k; j++)
			if (id[j] >= 0 && id[j] != LOCUS_EXPERT_MASKED) {
				first = (uint16_t)id[j];
				any = 1;
				break;
			}
		for (uint32_t j = 0; j < k; j++) {
			size_t i = (size_t)t * k + j;
			int none = id[j] < 0 || id[j] == LOCUS_EXPERT_MASKED;

			d->none[i] = (uint8_t)none;
			d->ids[i] = none ? first : (uint16_t)id[j];
			if (none)
				memcpy(&d->gates[i], &NEG_ZERO, sizeof(float));
			else
				d->gates[i] = f32_bits(w[j]) == NEG_ZERO ? 0.0f : w[j];
		}
		if (any)
			d->n_send = t + 1;
	}
}

int ep_dispatch_write(struct locus_ep *ep)
{
	struct ep_disp *d = &ep->d;
	struct ep_req *r = &ep->req[0];
	struct locus_client_dispatch_req q = {
		.layer = d->layer, .top_k = d->top_k, .n_tokens = d->n_send,
		.row_bytes = d->row_bytes, .n_experts = d->n_experts, .rows_off = ep->p.x_off,
		.experts = d->ids, .gates = d->gates,
	};
	int ret;

	r->desc = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = d->batch };
	ret = locus_client_dispatch_ex(ep->c, ep->disp_off, &q, d->batch,
				       ep->formed ? LOCUS_DESC_F_MASK : 0, NULL);
	if (ret == -LOCUS_EFULL) {
		r->state = R_AGAIN;
		r->not_before = 0;
		return ret;
	}
	if (ret < 0) {
		r->state = R_FREE;
		if (d->state == OP_RUN)
			ep_fail(ep, &d->state, d->batch, ret, ep->p.rank, NULL, "dispatch of batch "
				"%llu: its request was refused (%s)", (unsigned long long)d->batch,
				locus_strerror(ret));
		return ret;
	}
	r->state = R_FLIGHT;
	return 0;
}

/* A rows message of the running batch: checked, counted under its source. */
static int account(struct locus_ep *ep, const struct ep_msg *m)
{
	struct ep_disp *d = &ep->d;
	uint32_t s = m->src;

	if (m->top_k < 1 || m->top_k > LOCUS_MAX_TOPK || (d->recv_top_k && m->top_k != d->recv_top_k))
		return ep_fail(ep, &d->state, d->batch, -LOCUS_EPROTO, ep->p.rank, NULL,
			       "batch %llu: the ranks dispatched different num_topk (%u from rank "
			       "%u, %u before)", (unsigned long long)d->batch, m->top_k, s,
			       d->recv_top_k);
	if (m->row_bytes != d->row_bytes)
		return ep_fail(ep, &d->state, d->batch, -LOCUS_EPROTO, ep->p.rank, NULL,
			       "batch %llu: rank %u sent rows of %u bytes, ours are %u",
			       (unsigned long long)d->batch, s, m->row_bytes, d->row_bytes);
	if (!m->n_chunks || m->chunk >= m->n_chunks ||
	    (d->n_chunks[s] && d->n_chunks[s] != m->n_chunks) || d->chunks[s] >= m->n_chunks ||
	    d->rows[s] + m->n_rows > ep->p.max_tokens)
		return ep_fail(ep, &d->state, d->batch, -LOCUS_EPROTO, ep->p.rank, NULL,
			       "batch %llu: rank %u sent message %u of %u, or more than %u rows",
			       (unsigned long long)d->batch, s, m->chunk, m->n_chunks,
			       ep->p.max_tokens);
	d->recv_top_k = m->top_k;
	d->n_chunks[s] = m->n_chunks;
	d->chunks[s]++;
	d->rows[s] += m->n_rows;
	return 0;
}

void ep_dispatch_rows(struct locus_ep *ep, const struct locus_desc *desc,
		      const struct locus_client_rows *m)
{
	struct ep_disp *d = &ep->d;
	int now = d->state == OP_RUN && m->batch_id == d->batch;

	if (!now && m->batch_id < ep->next_batch) {
		locus_client_release_slot(ep->c, m->slot); /* a batch given up: nobody reads it */
		return;
	}
	if (ep_keep_msg(ep, desc, m) < 0) {
		if (now)
			ep_fail(ep, &d->state, d->batch, -ENOMEM, ep->p.rank, NULL,
				"batch %llu: out of memory for rank %u's rows",
				(unsigned long long)d->batch, m->src_rank);
		return;
	}
	if (now && account(ep, &ep->msgs[ep->n_msgs - 1]) < 0)
		ep_msgs_drop(ep, LOCUS_OP_ROWS_IN, d->batch);
}

void ep_dispatch_refused(struct locus_ep *ep, uint64_t batch, uint32_t src, int code,
			 const char *msg)
{
	struct ep_disp *d = &ep->d;

	if (d->state != OP_RUN && d->state != OP_READY) {
		ep_combine_refused(ep, batch, src, code, msg);
		return;
	}
	if (code == -LOCUS_EPEERDOWN) {
		d->gone |= 1ull << src;
		return;
	}
	if (d->state == OP_RUN) {
		ep_fail(ep, &d->state, batch, code, ep->p.rank, NULL, "%s", msg);
	} else if (!d->late_code) {
		d->late_code = code;
		d->late_rank = ep->p.rank;
		snprintf(d->late_msg, sizeof(d->late_msg), "%s", msg);
	}
}

static int failed(struct locus_ep *ep, struct locus_error *err);

int64_t locus_ep_dispatch_begin(struct locus_ep *ep, const struct locus_ep_dispatch_args *a,
				struct locus_error *err)
{
	struct ep_disp *d;
	struct ep_ctl_rec *k;
	uint64_t until;
	int ret;

	if (!ep || !a)
		return locus_error_set(err, EINVAL, "dispatch: no group or arguments");
	d = &ep->d;
	if (d->state == OP_RUN)
		return locus_error_set(err, EBUSY, "dispatch of batch %llu is running",
				       (unsigned long long)d->batch);
	ret = args_check(ep, a, err);
	if (ret < 0)
		return ret;
	if (pairs_room(d, (uint32_t)((uint64_t)a->n_tokens * a->top_k)) < 0)
		return locus_error_set(err, ENOMEM, "out of memory");
	if (d->state == OP_READY)
		ep_msgs_drop(ep, LOCUS_OP_ROWS_IN, d->batch); /* never collected */
	if (d->state == OP_FAILED)
		failed(ep, NULL); /* its failure was never polled for */
	/* requests of a batch given up may still be at locusd: their stage is theirs */
	until = locus_mono_ns() + (uint64_t)ep->p.timeout_ms * 1000000ull;
	for (;;) {
		int busy = ep->req[0].state == R_FLIGHT;

		for (uint32_t r = 0; r < ep->p.n_ranks; r++)
			busy |= ep_req_of(ep, ROLE_EMPTY, r)->state == R_FLIGHT;
		if (!busy)
			break;
		if (locus_mono_ns() > until)
			return locus_error_set(err, ETIMEDOUT, "the requests of batch %llu never "
					       "completed", (unsigned long long)d->batch);
		if (ep_pump(ep) == 0)
			ep_idle(ep);
	}
	ep->req[0].state = R_FREE;
	for (uint32_t r = 0; r < ep->p.n_ranks; r++)
		ep_req_of(ep, ROLE_EMPTY, r)->state = R_FREE;
	d->state = OP_RUN;
	d->batch = ep->next_batch++;
	ep->last_progress_ns = locus_mono_ns();
	d->timeout_ms = a->timeout_ms ? a->timeout_ms : ep->p.timeout_ms;
	d->deadline = locus_mono_ns() + (uint64_t)d->timeout_ms * 1000000ull;
	d->layer = a->layer;
	d->top_k = a->top_k;
	d->n_tokens = a->n_tokens;
	d->row_bytes = a->row_bytes;
	d->n_experts = a->n_experts;
	d->sent_empty = d->seen_done = 0;
	d->dests = d->empty_from = d->gone = 0;
	d->rows_sent = d->n_masked = d->n_recv = 0;
	d->recv_top_k = 0;
	d->fail_code = d->late_code = 0;
	memset(d->n_chunks, 0, sizeof(d->n_chunks));
	memset(d->chunks, 0, sizeof(d->chunks));
	memset(d->rows, 0, sizeof(d->rows));
	k = ep_keep_rec(ep, d->batch, 0);
	if (k) {
		d->empty_from = k->empty;
		if (k->code) {
			ep_fail(ep, &d->state, d->batch, k->code, k->rank, err,
				"rank %u aborted batch %llu: %s", k->rank,
				(unsigned long long)d->batch, k->reason);
			d->state = OP_IDLE;
			return k->code;
		}
	}
	pairs_build(d, a);
	if (a->n_tokens && (const uint8_t *)a->x != ep->stage + ep->p.x_off)
		memcpy(ep->stage + ep->p.x_off, a->x, (size_t)a->n_tokens * a->row_bytes);
	/* rows other ranks sent before this rank got here */
	for (uint32_t i = 0; i < ep->n_msgs && d->state == OP_RUN; i++)
		if (ep->msgs[i].op == LOCUS_OP_ROWS_IN && ep->msgs[i].batch == d->batch)
			account(ep, &ep->msgs[i]);
	if (d->state == OP_RUN && d->n_send)
		ep_dispatch_write(ep);
	if (d->state == OP_FAILED) {
		ep_msgs_drop(ep, LOCUS_OP_ROWS_IN, d->batch);
		d->state = OP_IDLE;
		if (err) {
			err->code = -ep->st.fail_code;
			snprintf(err->msg, sizeof(err->msg), "%s", ep->fail_msg);
		}
		return ep->st.fail_code;
	}
	return (int64_t)d->batch;
}

int64_t locus_ep_dispatch_refuse(struct locus_ep *ep, int code, const char *reason)
{
	uint64_t batch;

	if (!ep || code >= 0)
		return -EINVAL;
	if (ep->d.state == OP_RUN)
		return -EBUSY;
	if (ep->d.state == OP_READY)
		ep_msgs_drop(ep, LOCUS_OP_ROWS_IN, ep->d.batch); /* never collected */
	if (ep->d.state == OP_FAILED)
		failed(ep, NULL); /* its failure was never polled for */
	batch = ep->next_batch++;
	ep_fail(ep, NULL, batch, code, ep->p.rank, NULL, "%s", reason ? reason : "");
	ep_msgs_drop(ep, LOCUS_OP_ROWS_IN, batch); /* rows sent before the abort reached them */
	return (int64_t)batch;
}

/* The DISPATCH's completion: what was sent, masked; EMPTY to the ranks sent nothing. */
static void sent(struct locus_ep *ep)
{
	struct ep_disp *d = &ep->d;
	struct ep_req *r = &ep->req[0];

	if (d->n_send) {
		if (r->state != R_DONE)
			return;
		if (r->status) {
			ep_fail(ep, &d->state, d->batch, r->status, ep->p.rank, NULL,
				"dispatch of batch %llu: %s%s", (unsigned long long)d->batch,
				locus_strerror(r->status), r->status == -LOCUS_ESTALEPLACEMENT ?
				" (a rank does not hold the placement generation its rows were "
				"planned under)" : "");
			return;
		}
		d->dests = r->dests;
		d->rows_sent = (uint32_t)r->aux;
		if (r->blocks) {
			const uint16_t *ids = locus_client_dispatch_ids(ep->c, ep->disp_off);

			for (size_t i = 0; ids && i < (size_t)d->n_send * d->top_k; i++)
				if (ids[i] == LOCUS_EXPERT_MASKED && !d->none[i]) {
					d->ids[i] = LOCUS_EXPERT_MASKED;
					d->n_masked++;
				}
		}
	}
	d->seen_done = 1;
	for (uint32_t s = 0; s < ep->p.n_ranks; s++) {
		if (d->dests >> s & 1 || ep_lost(ep, s))
			continue;
		if (s == ep->p.rank) {
			d->empty_from |= 1ull << s;
			continue;
		}
		if (ep_send_empty(ep, s, d->batch, d->n_tokens) < 0)
			ep_fail(ep, &d->state, d->batch, -EIO, ep->p.rank, NULL,
				"batch %llu: the control row to rank %u could not be staged",
				(unsigned long long)d->batch, s);
	}
}

static int all_in(struct locus_ep *ep)
{
	struct ep_disp *d = &ep->d;

	if (!d->seen_done)
		return 0;
	for (uint32_t s = 0; s < ep->p.n_ranks; s++) {
		struct ep_req *q = ep_req_of(ep, ROLE_EMPTY, s);

		if (q->state == R_FLIGHT || q->state == R_AGAIN)
			return 0;
		if (q->state == R_DONE && q->status) {
			ep_fail(ep, &d->state, d->batch, q->status, ep->p.rank, NULL,
				"batch %llu: the control row to rank %u: %s",
				(unsigned long long)d->batch, s, locus_strerror(q->status));
			return 0;
		}
		if (ep_lost(ep, s) || d->empty_from >> s & 1)
			continue;
		if (d->chunks[s] < (d->n_chunks[s] ? d->n_chunks[s] : 1))
			return 0;
	}
	return 1;
}

static void timed_out(struct locus_ep *ep)
{
	struct ep_disp *d = &ep->d;
	char who[256] = "", lack[256], got[160] = "", miss[160] = "";
	size_t at = 0, g = 0, w = 0;
	uint32_t n = 0;
	int down = ep->req[0].last == -LOCUS_EPEERDOWN &&
		   (ep->req[0].state == R_AGAIN || ep->req[0].state == R_FLIGHT);

	for (uint32_t s = 0; s < ep->p.n_ranks; s++) {
		struct ep_req *q = ep_req_of(ep, ROLE_EMPTY, s);

		if ((q->state == R_AGAIN || q->state == R_FLIGHT) && q->last == -LOCUS_EPEERDOWN) {
			at += (size_t)snprintf(who + at, sizeof(who) - at, "%s%u", at ? ", " : "", s);
			if (at >= sizeof(who))
				at = sizeof(who) - 1;
		}
		n += d->rows[s];
		if (!ep_lost(ep, s) && !(d->empty_from >> s & 1) &&
		    d->chunks[s] < (d->n_chunks[s] ? d->n_chunks[s] : 1)) {
			w += (size_t)snprintf(miss + w, sizeof(miss) - w, "%s%u", w ? ", " : "", s);
			if (w >= sizeof(miss))
				w = sizeof(miss) - 1;
		}
		if (d->chunks[s]) {
			g += (size_t)snprintf(got + g, sizeof(got) - g, "%s%u", g ? ", " : "", s);
			if (g >= sizeof(got))
				g = sizeof(got) - 1;
		}
	}
	if (down || at) {
		ep_fail(ep, &d->state, d->batch, -LOCUS_EPEERDOWN, ep->p.rank, NULL,
			"%s%s did not attach within %g s", at ? "rank " : "a rank the batch needs",
			at ? who : "", d->timeout_ms / 1000.0);
		return;
	}
	ep_wait_text(ep, ROLE_DISPATCH, lack, sizeof(lack));
	ep_fail(ep, &d->state, d->batch, -ETIMEDOUT, ep->p.rank, NULL,
		"dispatch of batch %llu did not complete within %g s (waiting for ranks [%s]; "
		"received: rows of batch %llu: %u rows from ranks [%s]; requests %s)",
		(unsigned long long)d->batch, d->timeout_ms / 1000.0, miss,
		(unsigned long long)d->batch, n, got, lack);
}

/* The failure poll reports once: the group is ready for the next batch. */
static int failed(struct locus_ep *ep, struct locus_error *err)
{
	ep_msgs_drop(ep, LOCUS_OP_ROWS_IN, ep->d.batch);
	ep_req_abandon(&ep->req[0]);
	for (uint32_t s = 0; s < ep->p.n_ranks; s++)
		ep_req_abandon(ep_req_of(ep, ROLE_EMPTY, s));
	ep->d.state = OP_IDLE;
	if (err) {
		err->code = -ep->st.fail_code;
		snprintf(err->msg, sizeof(err->msg), "%s", ep->fail_msg);
	}
	return ep->st.fail_code;
}

static void recv_fill(struct locus_ep *ep, struct locus_ep_recv *recv)
{
	struct ep_disp *d = &ep->d;

	d->n_recv = 0;
	for (uint32_t s = 0; s < ep->p.n_ranks; s++)
		d->n_recv += d->rows[s];
	if (!recv)
		return;
	*recv = (struct locus_ep_recv){
		.batch = d->batch, .n_recv = d->n_recv,
		.top_k = d->recv_top_k ? d->recv_top_k : d->top_k, .layer = d->layer,
		.row_bytes = d->row_bytes, .n_masked = d->n_masked, .dests = d->dests,
		.rows_sent = d->rows_sent,
	};
}

int locus_ep_dispatch_poll(struct locus_ep *ep, struct locus_ep_recv *recv,
			   struct locus_error *err)
{
	struct ep_disp *d;
	int n;

	if (!ep)
		return locus_error_set(err, EINVAL, "no group");
	d = &ep->d;
	if (d->state == OP_READY) {
		recv_fill(ep, recv);
		return 1;
	}
	if (d->state == OP_FAILED)
		return failed(ep, err);
	if (d->state != OP_RUN)
		return locus_error_set(err, EINVAL, "no dispatch runs");
	n = ep_pump(ep);
	if (n < 0 && d->state == OP_RUN)
		ep_fail(ep, &d->state, d->batch, n, ep->p.rank, NULL, "locusd is gone (killed or "
			"stopped): attach again to a restarted one");
	if (d->state == OP_RUN && !d->seen_done)
		sent(ep);
	if (d->state == OP_RUN && all_in(ep)) {
		d->state = OP_READY;
		recv_fill(ep, recv);
		return 1;
	}
	if (d->state == OP_RUN && locus_mono_ns() > d->deadline)
		timed_out(ep);
	if (d->state == OP_FAILED)
		return failed(ep, err);
	return 0;
}

int locus_ep_dispatch_wait(struct locus_ep *ep, struct locus_ep_recv *recv,
			   struct locus_error *err)
{
	for (;;) {
		uint64_t before = ep ? ep->polled : 0;
		int ret = locus_ep_dispatch_poll(ep, recv, err);

		if (ret != 0)
			return ret;
		/* no spinning: the ranks of a group may share a core, and the
		 * rank that holds this one up would be starved */
		if (ep->polled == before)
			ep_idle(ep);
	}
}

static int row_gate_none(const float *g)
{
	return f32_bits(*g) == NEG_ZERO;
}

int locus_ep_dispatch_end(struct locus_ep *ep, const struct locus_ep_recv_out *out,
			  struct locus_ep_handle **hp, struct locus_error *err)
{
	struct ep_disp *d;
	struct locus_ep_handle *h = NULL;
	struct locus_ep_row *rows = NULL;
	uint32_t n = 0, k, n_ranks;
	size_t pairs;

	if (!ep || !out || !hp || ep->d.state != OP_READY)
		return locus_error_set(err, EINVAL, "no dispatch is ready to be collected");
	d = &ep->d;
	n_ranks = ep->p.n_ranks;
	k = d->recv_top_k ? d->recv_top_k : d->top_k;
	pairs = (size_t)d->n_tokens * d->top_k;
	h = calloc(1, sizeof(*h));
	rows = malloc((d->n_recv ? d->n_recv : 1) * sizeof(*rows));
	if (h) {
		h->refs = malloc((d->n_recv ? d->n_recv : 1) * sizeof(*h->refs));
		h->src_start = calloc(2 * n_ranks, sizeof(uint32_t));
		h->masked = calloc(2 * (pairs ? pairs : 1), 1);
	}
	if (!h || !rows || !h->refs || !h->src_start || !h->masked) {
		locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	h->src_count = h->src_start + n_ranks;
	h->none = h->masked + (pairs ? pairs : 1);
	for (uint32_t i = 0; i < ep->n_msgs; i++) {
		const struct ep_msg *m = &ep->msgs[i];

		if (m->op != LOCUS_OP_ROWS_IN || m->batch != d->batch)
			continue;
		for (uint32_t j = 0; j < m->n_rows && n < d->n_recv; j++)
			rows[n++] = (struct locus_ep_row){ .src = m->src, .token = m->refs[j].token,
							   .msg = i, .j = j };
	}
	locus_ep_rows_sort(rows, n);
	if (out->per_expert)
		memset(out->per_expert, 0, (size_t)out->n_experts * sizeof(uint32_t));
	for (uint32_t i = 0; i < n; i++) {
		const struct ep_msg *m = &ep->msgs[rows[i].msg];
		uint32_t j = rows[i].j, kmask = m->refs[j].kmask;
		size_t at = m->by_token ? m->refs[j].token : j;

		if (out->recv_x)
			memcpy((uint8_t *)out->recv_x + (size_t)i * d->row_bytes,
			       m->rows + at * m->row_bytes, d->row_bytes);
		for (uint32_t q = 0; q < k; q++) {
			const float *g = &m->gates[(size_t)j * k + q];
			int mine = (kmask >> q & 1) && !row_gate_none(g);
			uint16_t e = m->experts[(size_t)j * k + q];

			if (out->recv_idx)
				out->recv_idx[(size_t)i * k + q] = mine ? e : -1;
			if (out->recv_weights)
				out->recv_weights[(size_t)i * k + q] = mine ? *g : 0.0f;
			if (mine && out->per_expert && e < out->n_experts)
				out->per_expert[e]++;
		}
		h->refs[i] = m->refs[j];
		if (!h->src_count[rows[i].src])
			h->src_start[rows[i].src] = i;
		h->src_count[rows[i].src]++;
	}
	for (size_t i = 0; i < pairs; i++) {
		h->none[i] = d->none[i];
		h->masked[i] = i < (size_t)d->n_send * d->top_k &&
			       d->ids[i] == LOCUS_EXPERT_MASKED && !d->none[i];
	}
	if (out->refs)
		memcpy(out->refs, h->refs, (size_t)n * sizeof(*h->refs));
	if (out->src_count)
		memcpy(out->src_count, h->src_count, n_ranks * sizeof(uint32_t));
	h->ep = ep;
	h->gone = d->gone;
	h->fail_code = d->late_code;
	h->fail_rank = d->late_rank;
	snprintf(h->fail_msg, sizeof(h->fail_msg), "%s", d->late_msg);
	h->i = (struct locus_ep_handle_info){
		.batch = d->batch, .layer = d->layer, .top_k = d->top_k, .n_tokens = d->n_tokens,
		.n_recv = n, .rows_sent = d->rows_sent, .dests = d->dests, .n_masked = d->n_masked,
		.refs = h->refs, .src_start = h->src_start, .src_count = h->src_count,
		.masked = h->masked,
	};
	h->next = ep->handles;
	if (h->next)
		h->next->prev = h;
	ep->handles = h;
	free(rows);
	ep_msgs_drop(ep, LOCUS_OP_ROWS_IN, d->batch);
	d->state = OP_IDLE;
	*hp = h;
	return 0;

err_free:
	if (h) {
		free(h->refs);
		free(h->src_start);
		free(h->masked);
	}
	free(h);
	free(rows);
	return -ENOMEM;
}
