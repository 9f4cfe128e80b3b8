// SPDX-License-Identifier: MIT
/*
 * The EP group (locus_ep.h): its stage layout, the pump over the client's
 * ring (completions settle requests, deliveries go to the dispatch or
 * combine they belong to or are kept for a later batch), control rows and
 * aborts, handles. Dispatch and combine are ep_dispatch.c and
 * ep_combine.c.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ep_priv.h"
#include "locus_err_priv.h"
#include "locus_weights.h"

#define CTL_SLOT 256u /* a control row's request (48 bytes) at +0, its row at +64 */

/*
 * Nothing came: give the core away. Right after progress the next
 * delivery is near (another rank of the group, maybe on this core, is
 * about to send it): yield; past EP_YIELD_NS without any, sleep.
 */
void ep_idle(struct locus_ep *ep)
{
	struct timespec ts = { 0, (long)EP_NAP_NS };
	if (locus_mono_ns() - ep->last_progress_ns < EP_YIELD_NS)
		sched_yield();
	else
		nanosleep(&ts, NULL);
}

/* Ranges [a, a + al) and [b, b + bl) overlap. */
static int overlaps(uint64_t a, uint64_t al, uint64_t b, uint64_t bl)
{
	return a < b + bl && b < a + al;
}

static int range_ok(uint64_t off, uint64_t len, uint64_t size)
{
	return off % 64 == 0 && off <= size && len <= size - off;
}

int locus_ep_create(struct locus_client *c, const struct locus_ep_params *p,
		    struct locus_ep **out, struct locus_error *err)
{
	const struct locus_clients *v;
	struct locus_ep *ep;
	uint64_t size, ctl;
	uint8_t *stage;

	if (!c || !p || !out)
		return locus_error_set(err, EINVAL, "ep: a client, params and out");
	stage = locus_client_stage(c, &size);
	v = locus_client_region(c);
	if (!stage || !v)
		return locus_error_set(err, EINVAL, "ep: the client has no stage");
	if (p->n_ranks < 1 || p->n_ranks > LOCUS_EP_MAX_RANKS || p->rank >= p->n_ranks)
		return locus_error_set(err, EINVAL, "ep: rank %u of %u ranks (groups of 1..%u)",
				       p->rank, p->n_ranks, LOCUS_EP_MAX_RANKS);
	ctl = (uint64_t)p->n_ranks * 2 * CTL_SLOT;
	if (!range_ok(p->x_off, p->x_len, size) || !range_ok(p->y_off, p->y_len, size) ||
	    !range_ok(p->req_off, p->req_len, size) ||
	    overlaps(p->x_off, p->x_len, p->y_off, p->y_len) ||
	    overlaps(p->x_off, p->x_len, p->req_off, p->req_len) ||
	    overlaps(p->y_off, p->y_len, p->req_off, p->req_len) || p->req_len < ctl + 1024)
		return locus_error_set(err, LOCUS_ERANGE, "ep: stage ranges x %llu+%llu, y %llu+%llu,"
				       " requests %llu+%llu: 64-byte aligned, inside the %llu-byte "
				       "stage, apart, the requests at least %llu bytes",
				       (unsigned long long)p->x_off, (unsigned long long)p->x_len,
				       (unsigned long long)p->y_off, (unsigned long long)p->y_len,
				       (unsigned long long)p->req_off,
				       (unsigned long long)p->req_len, (unsigned long long)size,
				       (unsigned long long)(ctl + 1024));
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return locus_error_set(err, ENOMEM, "out of memory");
	ep->c = c;
	ep->p = *p;
	if (!ep->p.max_tokens)
		ep->p.max_tokens = 1u << 24;
	if (!ep->p.timeout_ms)
		ep->p.timeout_ms = 30000;
	ep->stage = stage;
	ep->stage_size = size;
	ep->inbox_bytes = (uint64_t)v->p.inbox_slots * v->p.inbox_slot_size;
	ep->next_batch = 1;
	ep->n_req = 1 + 3 * p->n_ranks;
	ep->req = calloc(ep->n_req, sizeof(*ep->req));
	if (!ep->req) {
		free(ep);
		return locus_error_set(err, ENOMEM, "out of memory");
	}
	ep->ctl_off = p->req_off;
	ep->disp_off = p->req_off + ctl;
	ep->disp_len = (p->req_len - ctl) / 2 / 64 * 64;
	ep->comb_off = ep->disp_off + ep->disp_len;
	ep->comb_len = p->req_off + p->req_len - ep->comb_off;
	ep->req[0].role = ROLE_DISPATCH;
	for (uint32_t r = 0; r < p->n_ranks; r++) {
		ep_req_of(ep, ROLE_EMPTY, r)->role = ROLE_EMPTY;
		ep_req_of(ep, ROLE_COMBINE, r)->role = ROLE_COMBINE;
		ep_req_of(ep, ROLE_ABORT, r)->role = ROLE_ABORT;
	}
	ep->lost_seq = UINT64_MAX;
	ep_refresh(ep);
	*out = ep;
	return 0;
}

void locus_ep_destroy(struct locus_ep *ep)
{
	struct locus_ep_handle *h;

	if (!ep)
		return;
	while (ep->n_msgs)
		ep_msg_release(ep, ep->n_msgs - 1);
	for (h = ep->handles; h; h = h->next)
		h->ep = NULL;
	free(ep->d.ids);
	free(ep->d.gates);
	free(ep->d.none);
	free(ep->cb.acc);
	free(ep->cb.answered);
	free(ep->msgs);
	free(ep->others);
	free(ep->req);
	free(ep);
}

struct ep_req *ep_req_of(struct locus_ep *ep, uint32_t role, uint32_t peer)
{
	switch (role) {
	case ROLE_DISPATCH:
		return &ep->req[0];
	case ROLE_EMPTY:
		return &ep->req[1 + peer];
	case ROLE_COMBINE:
		return &ep->req[1 + ep->p.n_ranks + peer];
	default:
		return &ep->req[1 + 2 * ep->p.n_ranks + peer];
	}
}

/* ---- who is live ---------------------------------------------------------------- */

void ep_refresh(struct locus_ep *ep)
{
	struct locus_client_ranks info;
	uint64_t lost = 0, group;

	if (locus_client_ranks(ep->c, &lost, 1, &info) < 0 || !info.n_ranks ||
	    info.seq == ep->lost_seq)
		return;
	group = ep->p.n_ranks == 64 ? UINT64_MAX : (1ull << ep->p.n_ranks) - 1;
	ep->lost = lost & group;
	ep->lost_seq = info.seq;
	if (!ep->formed && !ep->lost)
		ep->formed = 1;
}

int ep_lost(const struct locus_ep *ep, uint32_t r)
{
	return ep->formed && (ep->lost >> r & 1);
}

uint64_t locus_ep_active(struct locus_ep *ep)
{
	uint64_t group = ep->p.n_ranks == 64 ? UINT64_MAX : (1ull << ep->p.n_ranks) - 1;

	ep_refresh(ep);
	return ep->lost_seq == UINT64_MAX ? group : group & ~ep->lost;
}

/* ---- requests ------------------------------------------------------------------- */

int ep_req_submit(struct locus_ep *ep, struct ep_req *r)
{
	if (r->role == ROLE_DISPATCH)
		return ep_dispatch_write(ep);
	if (locus_client_submit(ep->c, &r->desc, 1) != 1) {
		r->state = R_AGAIN;
		r->not_before = 0;
		return -LOCUS_EFULL;
	}
	r->state = R_FLIGHT;
	return 0;
}

void ep_req_abandon(struct ep_req *r)
{
	if (r->state == R_FLIGHT)
		r->abandoned = 1;
	else
		r->state = R_FREE;
}

static void req_done(struct locus_ep *ep, struct ep_req *r, const struct locus_desc *d)
{
	int32_t st = d->status;

	if (st == -LOCUS_EPEERDOWN && r->role != ROLE_DISPATCH && ep_lost(ep, r->peer))
		st = 0; /* a lost rank needs neither results nor control rows */
	if ((st == -LOCUS_EFULL || st == -LOCUS_EPEERDOWN) && !r->abandoned &&
	    !(r->role == ROLE_ABORT && (st == -LOCUS_EPEERDOWN || locus_mono_ns() > r->give_up))) {
		/* nothing was delivered: the request is still staged; it goes again
		 * until its batch's deadline, which then reports the status */
		r->state = R_AGAIN;
		r->last = st;
		r->not_before = locus_mono_ns() + EP_RETRY_NS * (st == -LOCUS_EPEERDOWN ? 20 : 1);
		return;
	}
	if (r->abandoned || r->role == ROLE_ABORT) {
		r->abandoned = 0;
		r->state = R_FREE;
		return;
	}
	r->state = R_DONE;
	r->status = st;
	r->dests = d->dests;
	r->aux = d->aux;
	r->blocks = d->blocks;
}

/* ---- messages kept for their batch ------------------------------------------------ */

void ep_msg_release(struct locus_ep *ep, uint32_t i)
{
	struct ep_msg *m = &ep->msgs[i];

	if (m->held) {
		locus_client_release_slot(ep->c, m->slot);
		ep->held_bytes -= m->span;
	}
	free(m->copy);
	ep->msgs[i] = ep->msgs[--ep->n_msgs];
}

void ep_msgs_drop(struct locus_ep *ep, uint8_t op, uint64_t batch)
{
	for (uint32_t i = ep->n_msgs; i-- > 0;)
		if (ep->msgs[i].op == op && ep->msgs[i].batch == batch)
			ep_msg_release(ep, i);
}

/* Copy a held message out of the inbox and hand its slot back. */
static int msg_copy_out(struct locus_ep *ep, struct ep_msg *m)
{
	size_t refs = (size_t)m->n_rows * sizeof(*m->refs);
	size_t pairs = (size_t)m->n_rows * m->top_k;
	size_t rows = (size_t)m->n_rows * m->row_bytes;
	uint8_t *p = malloc(refs + pairs * 6 + rows + 8);

	if (!p)
		return -ENOMEM;
	memcpy(p, m->refs, refs);
	memcpy(p + refs, m->gates, pairs * 4);
	memcpy(p + refs + pairs * 4, m->experts, pairs * 2);
	for (uint32_t j = 0; j < m->n_rows; j++)
		memcpy(p + refs + pairs * 6 + (size_t)j * m->row_bytes,
		       m->rows + (size_t)(m->by_token ? m->refs[j].token : j) * m->row_bytes,
		       m->row_bytes);
	m->refs = (const struct locus_row_ref *)p;
	m->gates = (const float *)(p + refs);
	m->experts = (const uint16_t *)(p + refs + pairs * 4);
	m->rows = p + refs + pairs * 6;
	m->by_token = 0;
	m->copy = p;
	locus_client_release_slot(ep->c, m->slot);
	ep->held_bytes -= m->span;
	m->held = 0;
	return 0;
}

void ep_spill(struct locus_ep *ep)
{
	for (uint32_t i = 0; i < ep->n_msgs; i++)
		if (ep->msgs[i].held)
			msg_copy_out(ep, &ep->msgs[i]);
}

/*
 * Keep a rows message for its batch: in the inbox while that leaves half of
 * it free (the other ranks' messages need room too), else copied out. 0,
 * or -ENOMEM (the slot was released, the message lost).
 */
int ep_keep_msg(struct locus_ep *ep, const struct locus_desc *d,
		const struct locus_client_rows *m)
{
	const struct locus_clients *v = locus_client_region(ep->c);
	uint64_t span = ((uint64_t)d->len + v->p.inbox_slot_size - 1) / v->p.inbox_slot_size *
			v->p.inbox_slot_size;
	struct ep_msg *k;

	if (ep->n_msgs == ep->cap_msgs) {
		uint32_t cap = ep->cap_msgs ? ep->cap_msgs * 2 : 64;
		struct ep_msg *n = realloc(ep->msgs, cap * sizeof(*n));

		if (!n) {
			locus_client_release_slot(ep->c, m->slot);
			return -ENOMEM;
		}
		ep->msgs = n;
		ep->cap_msgs = cap;
	}
	k = &ep->msgs[ep->n_msgs++];
	*k = (struct ep_msg){
		.op = m->op, .held = 1, .by_token = m->in_place && m->op == LOCUS_OP_ROWS_IN,
		.src = (uint16_t)m->src_rank, .top_k = m->top_k, .chunk = m->chunk,
		.n_chunks = m->n_chunks, .slot = m->slot, .n_rows = m->n_rows,
		.row_bytes = m->row_bytes, .span = span, .batch = m->batch_id, .refs = m->refs,
		.experts = m->experts, .gates = m->gates, .rows = m->rows,
	};
	ep->held_bytes += span;
	if (ep->held_bytes > ep->inbox_bytes / 2 && msg_copy_out(ep, k) < 0) {
		ep_msg_release(ep, ep->n_msgs - 1);
		return -ENOMEM;
	}
	return 0;
}

/* ---- control rows ------------------------------------------------------------------- */

struct ep_ctl_rec *ep_keep_rec(struct locus_ep *ep, uint64_t batch, int make)
{
	struct ep_ctl_rec *old = &ep->keep[0];

	for (uint32_t i = 0; i < EP_KEEP_CTL; i++) {
		if (ep->keep[i].batch == batch)
			return &ep->keep[i];
		if (ep->keep[i].batch < old->batch)
			old = &ep->keep[i];
	}
	if (!make)
		return NULL;
	memset(old, 0, sizeof(*old));
	old->batch = batch;
	return old;
}

void ep_send_aborts(struct locus_ep *ep, uint64_t batch, int code, const char *reason)
{
	if (batch == ep->abort_sent_batch)
		return;
	ep->abort_sent_batch = batch;
	for (uint32_t r = 0; r < ep->p.n_ranks; r++) {
		struct ep_req *q = ep_req_of(ep, ROLE_ABORT, r);
		uint64_t off = ep->ctl_off + ((uint64_t)r * 2 + 1) * CTL_SLOT;
		struct locus_ep_ctl row;
		struct locus_row_ref ref = { .token = 0, .kmask = 1 };
		struct locus_client_combine_req cr = {
			.dst_rank = r, .n_rows = 1, .row_bytes = LOCUS_EP_CTL_ROW,
			.rows_off = off + 64, .refs = &ref,
		};

		if (r == ep->p.rank || ep_lost(ep, r) || q->state == R_FLIGHT)
			continue;
		locus_ep_ctl_build(&row, LOCUS_EP_CTL_ABORT, ep->p.rank, ep->p.n_ranks, batch, code,
				   0, reason);
		memcpy(ep->stage + off + 64, &row, sizeof(row));
		q->peer = r;
		q->abandoned = 0;
		q->give_up = locus_mono_ns() + EP_ABORT_NS;
		q->desc = (struct locus_desc){
			.op = LOCUS_OP_COMBINE, .id = locus_ep_ctl_id(LOCUS_EP_CTL_ABORT, batch),
			.off = off, .len = (uint32_t)locus_combine_req_len(1), .peer = r,
		};
		if (locus_client_combine(ep->c, off, &cr, q->desc.id, NULL) == 0) {
			q->state = R_FLIGHT;
		} else {
			q->state = R_AGAIN;
			q->not_before = 0;
		}
		ep->st.aborts_sent++;
	}
}

int ep_send_empty(struct locus_ep *ep, uint32_t r, uint64_t batch, uint32_t n_tokens)
{
	struct ep_req *q = ep_req_of(ep, ROLE_EMPTY, r);
	uint64_t off = ep->ctl_off + (uint64_t)r * 2 * CTL_SLOT;
	struct locus_row_ref ref = { .token = 0, .kmask = 1 };
	struct locus_client_combine_req cr = {
		.dst_rank = r, .n_rows = 1, .row_bytes = LOCUS_EP_CTL_ROW, .rows_off = off + 64,
		.refs = &ref,
	};
	struct locus_ep_ctl row;
	int ret;

	if (q->state == R_FLIGHT)
		return -EBUSY; /* an abandoned one still at locusd */
	locus_ep_ctl_build(&row, LOCUS_EP_CTL_EMPTY, ep->p.rank, ep->p.n_ranks, batch, 0,
			   n_tokens, NULL);
	memcpy(ep->stage + off + 64, &row, sizeof(row));
	q->peer = r;
	q->abandoned = 0;
	q->last = 0;
	q->desc = (struct locus_desc){
		.op = LOCUS_OP_COMBINE, .id = locus_ep_ctl_id(LOCUS_EP_CTL_EMPTY, batch), .off = off,
		.len = (uint32_t)locus_combine_req_len(1), .peer = r,
	};
	ret = locus_client_combine(ep->c, off, &cr, q->desc.id, NULL);
	if (ret == -LOCUS_EFULL) {
		q->state = R_AGAIN;
		q->not_before = 0;
		return 0;
	}
	if (ret < 0)
		return ret;
	q->state = R_FLIGHT;
	return 0;
}

void ep_ctl_in(struct locus_ep *ep, const struct locus_ep_ctl *c)
{
	struct locus_ep_handle *h;
	struct ep_ctl_rec *k;

	if (c->kind == LOCUS_EP_CTL_ABORT)
		ep->st.aborts_in++;
	if (ep->d.state == OP_RUN && ep->d.batch == c->batch) {
		if (c->kind == LOCUS_EP_CTL_EMPTY)
			ep->d.empty_from |= 1ull << c->src_rank;
		else
			ep_fail(ep, &ep->d.state, c->batch, c->code, c->src_rank, NULL,
				"rank %u aborted batch %llu: %s", c->src_rank,
				(unsigned long long)c->batch, c->reason);
		return;
	}
	if (ep->d.state == OP_READY && ep->d.batch == c->batch) {
		/* every row is in, not yet collected: its handle is born failed */
		if (c->kind == LOCUS_EP_CTL_ABORT && !ep->d.late_code) {
			ep->d.late_code = c->code;
			ep->d.late_rank = c->src_rank;
			snprintf(ep->d.late_msg, sizeof(ep->d.late_msg),
				 "rank %u aborted batch %llu: %s", c->src_rank,
				 (unsigned long long)c->batch, c->reason);
		}
		return;
	}
	if (c->kind == LOCUS_EP_CTL_EMPTY) {
		if (c->batch >= ep->next_batch) {
			k = ep_keep_rec(ep, c->batch, 1);
			k->empty |= 1ull << c->src_rank;
		}
		return;
	}
	for (h = ep->handles; h; h = h->next) {
		if (h->i.batch != c->batch || h->i.combined)
			continue;
		if (ep->cb.state == OP_RUN && ep->cb.h == h) {
			ep_fail(ep, &ep->cb.state, c->batch, c->code, c->src_rank, NULL,
				"rank %u aborted batch %llu: %s", c->src_rank,
				(unsigned long long)c->batch, c->reason);
		} else if (!h->fail_code) {
			h->fail_code = c->code;
			h->fail_rank = c->src_rank;
			snprintf(h->fail_msg, sizeof(h->fail_msg), "rank %u aborted batch %llu: %s",
				 c->src_rank, (unsigned long long)c->batch, c->reason);
		}
		return;
	}
	if (c->batch >= ep->next_batch) {
		k = ep_keep_rec(ep, c->batch, 1);
		if (!k->code) {
			k->code = c->code;
			k->rank = c->src_rank;
			memcpy(k->reason, c->reason, sizeof(k->reason));
		}
	}
}

/*
 * The batch fails here: *state FAILED, the sentence kept (and in err), and
 * when the failure is ours (rank == ours) every other live rank is told.
 * Returns code.
 */
int ep_fail(struct locus_ep *ep, int *state, uint64_t batch, int code, uint32_t rank,
	    struct locus_error *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ep->fail_msg, sizeof(ep->fail_msg), fmt, ap);
	va_end(ap);
	if (state)
		*state = OP_FAILED;
	ep->st.fail_batch = batch;
	ep->st.fail_code = code;
	ep->st.fail_rank = rank;
	if (rank == ep->p.rank)
		ep_send_aborts(ep, batch, code, ep->fail_msg);
	if (err) {
		err->code = -code;
		snprintf(err->msg, sizeof(err->msg), "%s", ep->fail_msg);
	}
	return code;
}

/* ---- the pump ------------------------------------------------------------------------ */

static void delivery(struct locus_ep *ep, const struct locus_desc *d)
{
	struct locus_client_rows m;
	struct locus_error e = { 0 };
	int ret = locus_client_rows_in(ep->c, d, &m, &e);

	if (ret == -LOCUS_ESTALEPLACEMENT || ret == -LOCUS_EPEERDOWN) {
		locus_client_release_slot(ep->c, m.slot);
		if (m.src_rank >= ep->p.n_ranks)
			return;
		if (ep->d.batch == m.batch_id)
			ep_dispatch_refused(ep, m.batch_id, m.src_rank, ret, e.msg);
		else
			ep_combine_refused(ep, m.batch_id, m.src_rank, ret, e.msg);
		return;
	}
	if (ret < 0) {
		locus_client_release_slot(ep->c, d->slot);
		ep->st.ctl_refused++;
		return;
	}
	if (m.src_rank >= ep->p.n_ranks) {
		locus_client_release_slot(ep->c, m.slot);
		ep->st.ctl_refused++;
		return;
	}
	if (m.op == LOCUS_OP_RESULTS_IN && locus_ep_ctl_is(m.batch_id)) {
		struct locus_ep_ctl c;

		memset(&c, 0, sizeof(c));
		if (m.n_rows == 1 && m.row_bytes == sizeof(c) && m.rows)
			memcpy(&c, m.rows, sizeof(c));
		locus_client_release_slot(ep->c, m.slot);
		if (m.n_rows != 1 || locus_ep_ctl_check(&c, m.row_bytes, m.batch_id, m.src_rank,
							ep->p.n_ranks, NULL) < 0) {
			ep->st.ctl_refused++;
			return;
		}
		ep_ctl_in(ep, &c);
		return;
	}
	if (!m.rows) { /* in place in a registered region: not ours to read */
		locus_client_release_slot(ep->c, m.slot);
		ep->st.ctl_refused++;
		return;
	}
	if (m.op == LOCUS_OP_ROWS_IN)
		ep_dispatch_rows(ep, d, &m);
	else
		ep_combine_rows(ep, d, &m);
}

int locus_ep_take(struct locus_ep *ep, const struct locus_desc *d)
{
	struct ep_req *r = NULL;

	if (!ep || !d)
		return 0;
	switch (d->op) {
	case LOCUS_OP_DISPATCH:
		r = &ep->req[0];
		break;
	case LOCUS_OP_COMBINE:
		if (locus_weights_is(d->id) || d->peer >= ep->p.n_ranks)
			return 0;
		if (!locus_ep_ctl_is(d->id))
			r = ep_req_of(ep, ROLE_COMBINE, d->peer);
		else if ((d->id >> 56 & 0x7f) == LOCUS_EP_CTL_ABORT)
			r = ep_req_of(ep, ROLE_ABORT, d->peer);
		else
			r = ep_req_of(ep, ROLE_EMPTY, d->peer);
		break;
	case LOCUS_OP_ROWS_IN:
		ep->last_in_ns = locus_mono_ns();
		delivery(ep, d);
		return 1;
	case LOCUS_OP_RESULTS_IN:
		if (locus_weights_is(d->id))
			return 0;
		ep->last_in_ns = locus_mono_ns();
		delivery(ep, d);
		return 1;
	default:
		return 0;
	}
	if (r->state != R_FLIGHT || r->desc.id != d->id)
		return 0;
	req_done(ep, r, d);
	return 1;
}

static void other(struct locus_ep *ep, const struct locus_desc *d)
{
	if (ep->n_others == ep->cap_others) {
		uint32_t cap = ep->cap_others ? ep->cap_others * 2 : 64;
		struct locus_desc *n = realloc(ep->others, cap * sizeof(*n));

		if (!n)
			return; /* out of memory: the descriptor is lost to its owner */
		ep->others = n;
		ep->cap_others = cap;
	}
	ep->others[ep->n_others++] = *d;
}

uint32_t locus_ep_others(struct locus_ep *ep, struct locus_desc *out, uint32_t max)
{
	uint32_t n = ep->n_others < max ? ep->n_others : max;

	memcpy(out, ep->others, n * sizeof(*out));
	memmove(ep->others, ep->others + n, (ep->n_others - n) * sizeof(*out));
	ep->n_others -= n;
	return n;
}

/*
 * One pump: requests due go again, one poll of the ring. The count of
 * descriptors polled, or -ENOTCONN (locusd is gone).
 */
int ep_pump(struct locus_ep *ep)
{
	uint64_t now = locus_mono_ns();
	int n;

	ep_refresh(ep);
	for (uint32_t i = 0; i < ep->n_req; i++) {
		struct ep_req *r = &ep->req[i];

		if (r->state == R_AGAIN && r->not_before <= now &&
		    ep_req_submit(ep, r) == -LOCUS_EFULL)
			break; /* the ring is full: the engine takes what it has first */
	}
	n = locus_client_poll(ep->c, ep->poll, 32);
	if (n < 0)
		return n;
	if (n)
		ep->last_progress_ns = now;
	ep->polled += (uint64_t)n;
	for (int i = 0; i < n; i++)
		if (!locus_ep_take(ep, &ep->poll[i]))
			other(ep, &ep->poll[i]);
	if (n == 0 && ep->held_bytes && now - ep->last_in_ns > EP_SPILL_NS)
		ep_spill(ep); /* the message another rank waits to deliver may need them */
	return n;
}

int locus_ep_pump(struct locus_ep *ep)
{
	return ep ? ep_pump(ep) : -EINVAL;
}

int locus_ep_set_max_tokens(struct locus_ep *ep, uint32_t max_tokens)
{
	if (!ep || max_tokens > 1u << 24)
		return -EINVAL;
	if (ep->d.state == OP_RUN)
		return -EBUSY;
	ep->p.max_tokens = max_tokens ? max_tokens : 1u << 24;
	return 0;
}

/* What a timed-out wait still lacked (requests of roles from role_lo on). */
void ep_wait_text(struct locus_ep *ep, int role_lo, char *buf, size_t len)
{
	static const char *names[] = { "dispatch", "empty", "combine", "abort" };
	size_t at = 0, n = 0;

	at += (size_t)snprintf(buf + at, len - at, "in flight:");
	for (uint32_t i = 0; i < ep->n_req && at < len; i++) {
		struct ep_req *r = &ep->req[i];

		if ((r->state != R_FLIGHT && r->state != R_AGAIN) || r->role < role_lo ||
		    r->role == ROLE_ABORT)
			continue;
		n++;
		if (r->last)
			at += (size_t)snprintf(buf + at, len - at, " %s to %u (last %s)",
					       names[r->role], r->peer, locus_strerror(r->last));
		else
			at += (size_t)snprintf(buf + at, len - at, " %s to %u", names[r->role],
					       r->peer);
	}
	if (!n && at < len)
		snprintf(buf + at, len - at, " none");
}

void locus_ep_status(const struct locus_ep *ep, struct locus_ep_status *st)
{
	*st = ep->st;
	st->next_batch = ep->next_batch;
	st->in_flight = 0;
	for (uint32_t i = 0; i < ep->n_req; i++)
		st->in_flight += ep->req[i].state == R_FLIGHT || ep->req[i].state == R_AGAIN;
	st->kept = ep->n_msgs;
	st->held_bytes = ep->held_bytes;
	st->formed = (uint32_t)ep->formed;
	st->others = ep->n_others;
}

int locus_ep_abort(struct locus_ep *ep, uint64_t batch, int code, const char *reason)
{
	struct locus_ep_handle *h;

	if (!ep || code >= 0 || !batch || batch > LOCUS_EP_BATCH_MAX)
		return -EINVAL;
	if (ep->d.state == OP_RUN && ep->d.batch == batch)
		ep_fail(ep, &ep->d.state, batch, code, ep->p.rank, NULL, "%s", reason ? reason : "");
	else if (ep->cb.state == OP_RUN && ep->cb.h && ep->cb.h->i.batch == batch)
		ep_fail(ep, &ep->cb.state, batch, code, ep->p.rank, NULL, "%s", reason ? reason : "");
	else
		ep_send_aborts(ep, batch, code, reason);
	for (h = ep->handles; h; h = h->next)
		if (h->i.batch == batch && !h->fail_code) {
			h->fail_code = code;
			h->fail_rank = ep->p.rank;
			snprintf(h->fail_msg, sizeof(h->fail_msg), "%s", reason ? reason : "");
		}
	return 0;
}

/* ---- handles --------------------------------------------------------------------------- */

void locus_ep_handle_info(const struct locus_ep_handle *h, struct locus_ep_handle_info *out)
{
	*out = h->i;
}

void locus_ep_handle_free(struct locus_ep_handle *h)
{
	struct locus_ep *ep;

	if (!h)
		return;
	ep = h->ep;
	if (ep) {
		if (ep->cb.h == h) {
			if (ep->cb.state == OP_RUN)
				ep_fail(ep, &ep->cb.state, h->i.batch, -ECANCELED, ep->p.rank, NULL,
					"the handle of batch %llu was freed during its combine",
					(unsigned long long)h->i.batch);
			ep->cb.h = NULL;
			ep->cb.state = OP_IDLE;
			for (uint32_t r = 0; r < ep->p.n_ranks; r++)
				ep_req_abandon(ep_req_of(ep, ROLE_COMBINE, r));
		}
		ep_msgs_drop(ep, LOCUS_OP_RESULTS_IN, h->i.batch);
		if (h->prev)
			h->prev->next = h->next;
		else
			ep->handles = h->next;
		if (h->next)
			h->next->prev = h->prev;
	}
	free(h->refs);
	free(h->src_start);
	free(h->masked);
	free(h);
}
