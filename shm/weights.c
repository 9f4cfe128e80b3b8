// SPDX-License-Identifier: MIT
/*
 * Expert weights moved between ranks for a placement change
 * (locus_weights.h). The sender side keeps a window of COMBINEs in flight,
 * one stage slot each; a destination inbox found full sends the same piece
 * again a little later. The receiver side writes each row as it arrives
 * and counts rows per (layer, expert) under the holder that sent them, so
 * a holder that started first loses nothing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock_priv.h"
#include "locus_dispatch.h"
#include "locus_err_priv.h"
#include "locus_grace.h"
#include "locus_placement.h"
#include "locus_tblfile.h"
#include "locus_weights.h"

#define W_WINDOW   16
#define W_RETRY_NS 50000ull

struct w_cell {            /* rows of one (layer, expert) since its holder began */
	uint32_t got;
	uint16_t src;
	uint16_t gtag;
};

struct w_send {
	uint32_t id;           /* layer << 16 | expert */
	uint16_t dst;
	uint8_t failed;
	uint8_t counted;
	uint32_t pieces_done;
};

struct w_gain {
	uint32_t id;
	uint16_t src;
	uint8_t done;
};

struct w_slot {
	uint8_t state;         /* 0 free, 1 to submit, 2 in flight */
	uint32_t send, piece;
	uint64_t bid, not_before;
};

struct locus_weights {
	struct locus_client *c;
	struct locus_weights_params p;
	uint32_t row, n_rows, per, n_pieces;
	uint64_t slot_len;
	uint32_t n_slots;
	struct w_cell *cell;   /* [L][E] */
	int32_t *gain_of;      /* [L][E]: index in gains, -1 */
	struct locus_row_ref *refs;
	int busy;
	uint16_t gtag;
	uint32_t gpn;
	uint64_t deadline_ns;
	struct w_send *sends;
	uint32_t n_sends, next_send, next_piece;
	struct w_gain *gains;
	uint32_t n_gains, gains_left;
	uint64_t lost[LOCUS_CLIENT_RANK_WORDS];
	struct w_slot slot[W_WINDOW];
	struct locus_weights_stats st;
};

int locus_weights_create(struct locus_client *c, const struct locus_weights_params *p,
			 struct locus_weights **out, struct locus_error *err)
{
	struct locus_weights *w;
	size_t cells;

	if (!c || !p || !out || !p->src_off || !p->write || !p->gained)
		return locus_error_set(err, EINVAL, "weights: a client, params and three callbacks");
	if (!p->expert_bytes || !p->n_layers || !p->n_experts ||
	    p->n_layers > LOCUS_GRACE_MAX_LAYERS || p->n_experts > LOCUS_GRACE_MAX_EXPERTS)
		return locus_error_set(err, EINVAL, "weights: expert_bytes %llu, %u layers x %u "
				       "experts (1..%u x 1..%u)",
				       (unsigned long long)p->expert_bytes, p->n_layers,
				       p->n_experts, LOCUS_GRACE_MAX_LAYERS,
				       LOCUS_GRACE_MAX_EXPERTS);
	if (p->stage_off % 8)
		return locus_error_set(err, EINVAL, "weights: stage offset %llu not 8-aligned",
				       (unsigned long long)p->stage_off);
	w = calloc(1, sizeof(*w));
	if (!w)
		return locus_error_set(err, ENOMEM, "out of memory");
	w->c = c;
	w->p = *p;
	w->row = (uint32_t)(p->expert_bytes < LOCUS_WEIGHTS_ROW ? p->expert_bytes
								 : LOCUS_WEIGHTS_ROW);
	w->n_rows = (uint32_t)(locus_weights_span(p->expert_bytes) / w->row);
	w->per = p->rows_per_send ? p->rows_per_send : 16;
	if (w->per > w->n_rows)
		w->per = w->n_rows;
	w->n_pieces = (w->n_rows + w->per - 1) / w->per;
	w->slot_len = LOCUS_ALIGN_UP((uint64_t)locus_combine_req_len(w->per), 64ull);
	w->n_slots = (uint32_t)LOCUS_MIN(p->stage_len / w->slot_len,
					 LOCUS_MAX((p->max_in_flight ? p->max_in_flight : 256u << 10) /
						   ((uint64_t)w->per * w->row), 1ull));
	w->n_slots = LOCUS_MIN(w->n_slots, (uint32_t)W_WINDOW);
	if (!w->n_slots || w->n_pieces > 0xffff) {
		locus_error_set(err, EINVAL, "weights: %llu stage bytes hold no COMBINE of %u rows, "
				"or an expert needs %u pieces (at most 65535)",
				(unsigned long long)p->stage_len, w->per, w->n_pieces);
		goto err_free;
	}
	cells = (size_t)p->n_layers * p->n_experts;
	w->cell = calloc(cells, sizeof(*w->cell));
	w->gain_of = malloc(cells * sizeof(*w->gain_of));
	w->refs = calloc(w->per, sizeof(*w->refs));
	if (!w->cell || !w->gain_of || !w->refs) {
		locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	memset(w->gain_of, 0xff, cells * sizeof(*w->gain_of));
	*out = w;
	return 0;

err_free:
	free(w->refs);
	free(w->gain_of);
	free(w->cell);
	free(w);
	return -(err ? err->code : EINVAL);
}

void locus_weights_destroy(struct locus_weights *w)
{
	if (!w)
		return;
	free(w->sends);
	free(w->gains);
	free(w->refs);
	free(w->gain_of);
	free(w->cell);
	free(w);
}

int locus_weights_busy(const struct locus_weights *w)
{
	return w && w->busy;
}

void locus_weights_stats(const struct locus_weights *w, struct locus_weights_stats *st)
{
	*st = w->st;
}

/* (layer, expert)'s index in the per-expert arrays (cell, gain_of). */
static size_t expert_idx(const struct locus_weights *w, uint32_t layer, uint32_t e)
{
	return (size_t)layer * w->p.n_experts + e;
}

static struct w_cell *cell_of(struct locus_weights *w, uint32_t id)
{
	return &w->cell[expert_idx(w, id >> 16, id & 0xffff)];
}

static int tag_matches(const struct locus_weights *w, uint16_t gtag)
{
	return gtag == 0 || gtag == w->gtag;
}

/* A gained expert is complete (from src), or left to storage; once. */
static void gain_done(struct locus_weights *w, struct w_gain *g, int from_storage, uint32_t src)
{
	if (g->done)
		return;
	g->done = 1;
	w->gains_left--;
	if (from_storage) {
		w->st.from_storage++;
	} else {
		w->st.bytes_received += w->p.expert_bytes;
		if (w->gpn && src / w->gpn == w->p.rank / w->gpn)
			w->st.received_here++;
		else
			w->st.received_other++;
	}
	w->p.gained(w->p.arg, g->id >> 16, g->id & 0xffff, from_storage);
}

/*
 * Complete once every row came from one holder: the planned one, or another
 * whose view of the lost ranks chose itself (the rows of one holder count
 * alone: a cell restarts when another sends).
 */
static void gain_check(struct locus_weights *w, struct w_gain *g)
{
	const struct w_cell *x = cell_of(w, g->id);

	if (!g->done && x->got >= w->n_rows && tag_matches(w, x->gtag))
		gain_done(w, g, 0, x->src);
}

/* GPUs per node: the parameter, or a GRACE table's dims. */
static uint32_t gpus_per_node(const struct locus_weights *w, const void *blob, size_t len)
{
	const struct locus_grace_dims *d;
	const void *pl;

	if (w->p.gpus_per_node)
		return w->p.gpus_per_node;
	if (locus_grace_blob_check(blob, len, &pl, NULL, NULL) < 0)
		return 0;
	d = pl;
	return d->gpus_per_node;
}

int locus_weights_begin(struct locus_weights *w, const void *old_blob, size_t old_len,
			const void *new_blob, size_t new_len, uint64_t gen, uint32_t timeout_ms,
			struct locus_error *err)
{
	struct locus_placement_fetch *f = NULL;
	struct locus_client_ranks info;
	uint32_t n = 0;
	int ret;

	if (!w)
		return locus_error_set(err, EINVAL, "no mover");
	if (w->busy)
		return locus_error_set(err, EBUSY, "a move to generation %llu is running",
				       (unsigned long long)w->st.gen);
	if (locus_client_ranks(w->c, w->lost, LOCUS_CLIENT_RANK_WORDS, &info) < 0)
		memset(w->lost, 0, sizeof(w->lost));
	ret = locus_placement_fetches(old_blob, old_len, new_blob, new_len, w->lost, NULL, 0, &n,
				      err);
	if (ret < 0)
		return ret;
	f = calloc(n ? n : 1, sizeof(*f));
	if (!f)
		return locus_error_set(err, ENOMEM, "out of memory");
	ret = locus_placement_fetches(old_blob, old_len, new_blob, new_len, w->lost, f, n, &n,
				      err);
	if (ret < 0)
		goto out;
	for (uint32_t i = 0; i < w->n_gains; i++)
		w->gain_of[expert_idx(w, w->gains[i].id >> 16, w->gains[i].id & 0xffff)] = -1;
	free(w->sends);
	free(w->gains);
	w->sends = calloc(n ? n : 1, sizeof(*w->sends));
	w->gains = calloc(n ? n : 1, sizeof(*w->gains));
	w->n_sends = w->n_gains = 0;
	if (!w->sends || !w->gains) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto out;
	}
	memset(&w->st, 0, sizeof(w->st));
	w->st.gen = gen;
	w->gtag = (uint16_t)(gen & ((1u << LOCUS_WEIGHTS_GEN_BITS) - 1));
	if (!w->gtag)
		w->gtag = 1; /* 0 reads "any generation" */
	w->gpn = gpus_per_node(w, new_blob, new_len);
	for (uint32_t i = 0; i < n; i++) {
		if ((f[i].id >> 16) >= w->p.n_layers || (f[i].id & 0xffff) >= w->p.n_experts) {
			ret = locus_error_set(err, LOCUS_ERANGE, "the placement's expert (%u, %u) is "
					      "outside the mover's %u x %u", f[i].id >> 16,
					      f[i].id & 0xffff, w->p.n_layers, w->p.n_experts);
			goto out;
		}
		if (f[i].dst == w->p.rank)
			w->gains[w->n_gains++] = (struct w_gain){ .id = f[i].id, .src = f[i].src };
		else if (f[i].src == w->p.rank && !locus_grace_rank_lost(w->lost, f[i].dst))
			w->sends[w->n_sends++] = (struct w_send){ .id = f[i].id, .dst = f[i].dst };
	}
	w->st.gains = w->n_gains;
	w->gains_left = w->n_gains;
	w->next_send = w->next_piece = 0;
	w->deadline_ns = locus_mono_ns() + (uint64_t)(timeout_ms ? timeout_ms : 30000) * 1000000ull;
	w->busy = 1;
	for (uint32_t i = 0; i < w->n_gains; i++) {
		struct w_gain *g = &w->gains[i];

		w->gain_of[expert_idx(w, g->id >> 16, g->id & 0xffff)] = (int32_t)i;
		if (g->src == LOCUS_PLACEMENT_STORAGE)
			gain_done(w, g, 1, g->src);
		else
			gain_check(w, g); /* every row may have come already */
	}
	ret = 0;
out:
	free(f);
	return ret;
}

static struct w_send *send_of(struct locus_weights *w, uint32_t id, uint32_t dst)
{
	for (uint32_t i = 0; i < w->n_sends; i++)
		if (w->sends[i].id == id && w->sends[i].dst == dst)
			return &w->sends[i];
	return NULL;
}

static void send_failed(struct locus_weights *w, struct w_send *s)
{
	if (!s || s->failed)
		return;
	s->failed = 1;
	w->st.send_failed++;
}

static void send_piece_done(struct locus_weights *w, struct w_send *s)
{
	if (++s->pieces_done == w->n_pieces && !s->failed && !s->counted) {
		s->counted = 1;
		w->st.sent++;
		w->st.bytes_sent += w->p.expert_bytes;
	}
}

/* Rows of weights from src (or its refusal of ours). */
static void rows_in(struct locus_weights *w, const struct locus_client_rows *r, int refused)
{
	uint32_t id = (uint32_t)r->batch_id, layer = id >> 16, e = id & 0xffff;
	uint16_t gtag = (uint16_t)(r->batch_id >> 48 & ((1u << LOCUS_WEIGHTS_GEN_BITS) - 1));
	struct w_cell *x;
	int32_t gi;

	if (refused) {
		if (w->busy)
			send_failed(w, send_of(w, id, r->src_rank));
		return;
	}
	if (layer >= w->p.n_layers || e >= w->p.n_experts || r->row_bytes != w->row ||
	    r->src_rank > 0xffff) {
		w->st.rows_stray += r->n_rows;
		return;
	}
	x = cell_of(w, id);
	if (x->src != r->src_rank || x->gtag != gtag)
		*x = (struct w_cell){ .src = (uint16_t)r->src_rank, .gtag = gtag };
	for (uint32_t j = 0; j < r->n_rows; j++) {
		uint64_t at = (uint64_t)r->refs[j].token * w->row;

		if (r->refs[j].token >= w->n_rows || r->refs[j].kmask != w->n_rows) {
			w->st.rows_stray++;
			continue;
		}
		w->p.write(w->p.arg, layer, e, at, r->rows + (size_t)j * r->row_bytes,
			   (uint32_t)LOCUS_MIN((uint64_t)w->row, w->p.expert_bytes - at));
		x->got++;
	}
	gi = w->gain_of[expert_idx(w, layer, e)];
	if (!w->busy)
		w->st.rows_early += r->n_rows;
	else if (gi < 0 || !tag_matches(w, gtag))
		w->st.rows_stray += r->n_rows;
	else
		gain_check(w, &w->gains[gi]);
}

int locus_weights_take(struct locus_weights *w, const struct locus_desc *d)
{
	struct locus_client_rows r;
	int ret;

	if (!w || !d || !locus_weights_is(d->id))
		return 0;
	if (d->op == LOCUS_OP_COMBINE) {
		for (uint32_t k = 0; k < w->n_slots; k++) {
			struct w_slot *s = &w->slot[k];
			struct w_send *snd;

			if (s->state != 2 || s->bid != d->id || !w->busy)
				continue;
			snd = &w->sends[s->send];
			if (snd->dst != d->peer)
				continue;
			if (d->status == -LOCUS_EFULL) {
				s->state = 1;
				s->not_before = locus_mono_ns() + W_RETRY_NS;
				w->st.retries++;
				return 1;
			}
			s->state = 0;
			if (d->status)
				send_failed(w, snd);
			send_piece_done(w, snd);
			return 1;
		}
		return 1; /* a move given up: nothing waits for it */
	}
	if (d->op != LOCUS_OP_RESULTS_IN)
		return 0;
	ret = locus_client_rows_in(w->c, d, &r, NULL);
	if (ret == 0 || ret == -LOCUS_EPEERDOWN || ret == -LOCUS_ESTALEPLACEMENT) {
		if (!locus_weights_is(r.batch_id))
			return 0;
		rows_in(w, &r, ret < 0);
		locus_client_release_slot(w->c, r.slot);
		return 1;
	}
	return 0;
}

/* Submit slot k's piece; 0, or -1 when the ring is full (try again). */
static int submit(struct locus_weights *w, uint32_t k)
{
	struct w_slot *s = &w->slot[k];
	struct w_send *snd = &w->sends[s->send];
	uint32_t layer = snd->id >> 16, e = snd->id & 0xffff;
	uint32_t r0 = s->piece * w->per, nr = LOCUS_MIN(w->per, w->n_rows - r0);
	struct locus_client_combine_req q = {
		.layer = (uint16_t)layer, .dst_rank = snd->dst, .n_rows = nr, .row_bytes = w->row,
		.rows_off = w->p.src_off(w->p.arg, layer, e) + (uint64_t)r0 * w->row,
		.refs = w->refs,
	};
	int ret;

	for (uint32_t j = 0; j < nr; j++)
		w->refs[j] = (struct locus_row_ref){ .token = r0 + j, .kmask = w->n_rows };
	ret = locus_client_combine_ex(w->c, w->p.stage_off + k * w->slot_len, &q, s->bid,
				      w->p.region ? LOCUS_DESC_F_REGION : 0, w->p.region, NULL);
	if (ret == -LOCUS_EFULL)
		return -1;
	if (ret < 0) {
		/* refused before it left: the gaining rank loads it from storage */
		send_failed(w, snd);
		send_piece_done(w, snd);
		s->state = 0;
		return 0;
	}
	s->state = 2;
	return 0;
}

/* The next piece to send, into free slot k; 0 when every piece went out. */
static int next_piece(struct locus_weights *w, uint32_t k, int past)
{
	while (w->next_send < w->n_sends) {
		struct w_send *snd = &w->sends[w->next_send];

		if (snd->failed || past || locus_grace_rank_lost(w->lost, snd->dst)) {
			/* what is left of it never goes */
			send_failed(w, snd);
			snd->pieces_done = w->n_pieces;
			w->next_send++;
			w->next_piece = 0;
			continue;
		}
		w->slot[k] = (struct w_slot){
			.state = 1, .send = w->next_send, .piece = w->next_piece,
			.bid = LOCUS_WEIGHTS_TAG | (uint64_t)w->gtag << 48 |
			       (uint64_t)w->next_piece << 32 | snd->id,
		};
		if (++w->next_piece == w->n_pieces) {
			w->next_send++;
			w->next_piece = 0;
		}
		return 1;
	}
	return 0;
}

int locus_weights_step(struct locus_weights *w)
{
	struct locus_client_ranks info;
	uint64_t now;
	int in_flight = 0, past;

	if (!w || !w->busy)
		return 0;
	now = locus_mono_ns();
	past = now > w->deadline_ns;
	if (locus_client_ranks(w->c, w->lost, LOCUS_CLIENT_RANK_WORDS, &info) < 0)
		memset(w->lost, 0, sizeof(w->lost));
	for (uint32_t i = 0; w->gains_left && i < w->n_gains; i++)
		if (!w->gains[i].done && (past || locus_grace_rank_lost(w->lost, w->gains[i].src)))
			gain_done(w, &w->gains[i], 1, w->gains[i].src);
	for (uint32_t k = 0; k < w->n_slots; k++) {
		struct w_slot *s = &w->slot[k];

		if (s->state == 0 && !next_piece(w, k, past))
			continue;
		if (s->state == 1 && s->not_before <= now && submit(w, k) < 0) {
			in_flight = 1;
			break; /* ring full: the engine takes what it has first */
		}
		in_flight |= s->state != 0;
	}
	for (uint32_t k = 0; !in_flight && k < w->n_slots; k++)
		in_flight = w->slot[k].state != 0;
	if (in_flight || w->next_send < w->n_sends || w->gains_left)
		return 0;
	w->busy = 0;
	return past ? -ETIMEDOUT : 1;
}
