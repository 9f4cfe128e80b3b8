// SPDX-License-Identifier: MIT
/*
 * locus-loadgen's expert-parallel rank: DISPATCH batches of the trace's
 * per-token top-k at one layer, answer the rows received with COMBINE (the
 * "expert output" is the row xor (rank + 1)), and check every (token, k)
 * comes back exactly once with the content the serving rank computed.
 *
 * A rank never waits while it holds inbox slots. Rows it cannot answer yet
 * (every combine slot in use) are copied out and their inbox slots released
 * at once; a combine that cannot be submitted (ring full, destination
 * inbox full) stays queued and the loop keeps polling. Otherwise ranks form
 * credit cycles: rank A's inbox full of rows it can only answer once B takes
 * A's results, while B's inbox is full of rows it answers once A takes B's —
 * and a rank combining to itself needs room in its own inbox.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <stdlib.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loadgen.h"
#include "locus_dispatch.h"
#include "locus_wire.h"

#define COMB_STRIDE  (256 * 1024 + 65536) /* a combine slot: request, then up to 256 KiB rows */
#define COMB_ROWS    (256 * 1024)
#define BACKLOG_MAX  1024                 /* rows messages copied out, waiting for a slot */
#define RETRY_NS     50000ull             /* resubmit a combine refused for a full inbox */

enum comb_state { CS_FREE = 0, CS_READY, CS_BUSY };

static uint8_t row_byte(uint32_t src, uint32_t batch, uint32_t token, uint32_t b)
{
	return (uint8_t)(src * 131 + batch * 31 + token * 7 + b);
}

/* Rows copied out of the inbox: header + refs, then the rows contiguous. */
struct rows_copy {
	uint32_t src_rank;
	struct locus_rows_hdr h;
	struct locus_row_ref *refs;
	uint8_t *rows;
};

struct rank_state {
	struct locus_client *c;
	struct proc_stats *s;
	uint32_t rank;
	uint8_t *stage;
	uint64_t stage_size;
	uint8_t comb_state[COMB_SLOTS];
	uint64_t comb_not_before[COMB_SLOTS]; /* READY: not before this (EFULL back-off) */
	uint32_t comb_held;           /* slots whose results to ourselves are handed over in
				       * place (same GPU) and not read yet */
	uint32_t held_rows[COMB_SLOTS];
	struct locus_desc comb_q[COMB_SLOTS]; /* what each slot submits */
	struct rows_copy backlog[BACKLOG_MAX]; /* FIFO */
	uint32_t bl_head, bl_n;
	uint8_t got[4096][8];         /* (token, k) results of the batch in flight */
	uint32_t want_pairs, got_pairs;
	/* --mask: who holds the batch's rows, what each sent back, who refused them */
	uint64_t dests;               /* ranks (< 64) the batch sent rows to */
	uint64_t gone;                /* ranks that refused our rows: they had left */
	uint16_t res_got[64], res_need[64]; /* results messages from rank r, of how many */
	int dispatch_done;
	uint32_t b;                   /* the batch to do next, or in flight */
	uint32_t batch;
	uint64_t t0, t_batch;         /* run start; submission of the batch in flight */
	/* where the batch's rows are: the stage, or (--dmabuf) a registered region */
	uint8_t *rows;
	uint64_t rows_off;
	int dmafd;
	size_t rlen;
	uint32_t region;
	struct lg_weights *wt;        /* --weights */
};

static uint32_t comb_outstanding(const struct rank_state *rs);

/*
 * --kill-rank: the first process of the rank dies by SIGKILL here, right
 * after a submit, noting first what it leaves in flight (never completed).
 */
static void maybe_die(struct rank_state *rs)
{
	if ((int)rs->rank != O.kill_rank || rs->s->kills)
		return;
	rs->s->killed_inflight += (rs->dispatch_done == 0) + comb_outstanding(rs);
	rs->s->killed_ns = now_ns();
	rs->s->batch_at = rs->b;
	rs->s->batch_open = rs->want_pairs != 0;
	__atomic_store_n(&rs->s->kills, 1, __ATOMIC_RELEASE);
	raise(SIGKILL);
}

static uint32_t comb_in_use(const struct rank_state *rs)
{
	uint32_t m = rs->comb_held;

	for (uint32_t i = 0; i < COMB_SLOTS; i++)
		m |= (rs->comb_state[i] != CS_FREE) << i;
	return m;
}

static uint32_t comb_outstanding(const struct rank_state *rs)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < COMB_SLOTS; i++)
		n += rs->comb_state[i] != CS_FREE;
	return n;
}

/*
 * Hand an inbox slot back; a full submit ring does not lose it (liblocus
 * keeps the RELEASE for the next submit or poll). Refused only for a slot
 * out of range or handed back twice: a loadgen bug, reported as corrupt.
 */
static void release(struct rank_state *rs, uint32_t slot)
{
	int ret = locus_client_release_slot(rs->c, slot);

	if (ret < 0)
		corrupt(rs->s, "rank %u: RELEASE of inbox slot %u refused: %s", rs->rank, slot,
			locus_strerror(ret));
}

/* Submit the queued combines whose back-off passed; never waits. */
static void combine_kick(struct rank_state *rs)
{
	uint64_t now = 0;

	for (uint32_t i = 0; i < COMB_SLOTS; i++) {
		if (rs->comb_state[i] != CS_READY)
			continue;
		if (rs->comb_not_before[i] && (now ? now : (now = now_ns())) < rs->comb_not_before[i])
			continue;
		if (locus_client_submit(rs->c, &rs->comb_q[i], 1) != 1)
			return; /* ring full: the engine answers what it took first */
		rs->comb_state[i] = CS_BUSY;
		if (++rs->s->combines == O.kill_n && O.kill_combine)
			maybe_die(rs);
	}
}

/*
 * A COMBINE completed. A full inbox at the destination is back-pressure:
 * the slot still holds the results, send them again a little later.
 */
static void combine_done(struct rank_state *rs, struct proc_stats *s, const struct locus_desc *d)
{
	if (d->id >= COMB_SLOTS || rs->comb_state[d->id] != CS_BUSY) {
		s->duplicate++;
		return;
	}
	if (d->status == -LOCUS_EFULL) {
		s->retries++;
		rs->comb_state[d->id] = CS_READY;
		rs->comb_not_before[d->id] = now_ns() + RETRY_NS;
		return;
	}
	rs->comb_state[d->id] = CS_FREE;
	if (d->status) {
		/* nothing was delivered: no results of ours will come out of this slot */
		rs->comb_held &= ~(1u << d->id);
		rs->held_rows[d->id] = 0;
		err_record(s, d->status);
	}
}

/*
 * Answer rows from src_rank into combine slot `slot` and queue the COMBINE.
 * Row j is at rows + j * row_bytes, or (by_token) rows + token * row_bytes.
 */
static void combine_build(struct rank_state *rs, struct proc_stats *s, uint32_t slot,
			  uint32_t src_rank, const struct locus_rows_hdr *h,
			  const struct locus_row_ref *refs, const uint8_t *rows, int by_token)
{
	uint64_t base = COMB_OFF + (uint64_t)slot * COMB_STRIDE;
	struct locus_combine_req *cq = (struct locus_combine_req *)(rs->stage + base);

	*cq = (struct locus_combine_req){ .magic = LOCUS_COMBINE_MAGIC, .layer = h->layer,
					  .dst_rank = src_rank, .n_rows = h->n_rows,
					  .row_bytes = h->row_bytes, .rows_off = base + 65536,
					  .batch_id = h->batch_id };
	for (uint32_t j = 0; j < h->n_rows; j++) {
		const uint8_t *row = rows + (size_t)(by_token ? refs[j].token : j) * h->row_bytes;
		uint8_t *out = rs->stage + base + 65536 + (size_t)j * h->row_bytes;
		int bad = 0;

		for (uint32_t b = 0; b < h->row_bytes; b++) {
			if (!bad && row[b] != row_byte(src_rank, (uint32_t)h->batch_id,
						       refs[j].token, b))
				bad = (int)b + 1;
			out[b] = row[b] ^ (uint8_t)(rs->rank + 1);
		}
		if (bad)
			corrupt(s, "rank %u: row %u of %u (token %u) from rank %u, batch %llu: byte "
				"%d differs", rs->rank, j, h->n_rows, refs[j].token, src_rank,
				(unsigned long long)h->batch_id, bad - 1);
		else
			s->verified++;
		((struct locus_row_ref *)(cq + 1))[j] = refs[j];
	}
	rs->comb_q[slot] = (struct locus_desc){ .op = LOCUS_OP_COMBINE, .id = slot, .off = base,
						.len = (uint32_t)locus_combine_req_len(h->n_rows),
						.slot = slot };
	rs->comb_state[slot] = CS_READY;
	rs->comb_not_before[slot] = 0;
	if (src_rank == rs->rank) {
		/* to ourselves: the results are handed over in place, out of this slot */
		rs->comb_held |= 1u << slot;
		rs->held_rows[slot] = h->n_rows;
	}
	s->rows_back += h->n_rows;
}

static int free_slot(const struct rank_state *rs)
{
	uint32_t used = comb_in_use(rs);

	return used == (1u << COMB_SLOTS) - 1 ? -1 : __builtin_ctz(~used);
}

/* Answer copied-out rows while combine slots are free, oldest first. */
static void backlog_drain(struct rank_state *rs, struct proc_stats *s)
{
	int slot;

	while (rs->bl_n && (slot = free_slot(rs)) >= 0) {
		struct rows_copy *rc = &rs->backlog[rs->bl_head];

		combine_build(rs, s, (uint32_t)slot, rc->src_rank, &rc->h, rc->refs, rc->rows, 0);
		free(rc->refs);
		free(rc->rows);
		rs->bl_head = (rs->bl_head + 1) % BACKLOG_MAX;
		rs->bl_n--;
	}
}

static void backlog_free(struct rank_state *rs)
{
	for (; rs->bl_n; rs->bl_n--, rs->bl_head = (rs->bl_head + 1) % BACKLOG_MAX) {
		free(rs->backlog[rs->bl_head].refs);
		free(rs->backlog[rs->bl_head].rows);
	}
}

/* Copy rows out of the inbox for later; 0, or -1 when they were dropped. */
static int backlog_add(struct rank_state *rs, struct proc_stats *s, uint32_t src_rank,
		       const struct locus_rows_hdr *h, const struct locus_row_ref *refs,
		       const uint8_t *rows, int by_token)
{
	struct rows_copy *rc = &rs->backlog[(rs->bl_head + rs->bl_n) % BACKLOG_MAX];

	if (rs->bl_n == BACKLOG_MAX) {
		/*
		 * Only batches given up at their source (--allow-errors) let more
		 * rows arrive than every rank's batch in flight: those are dropped.
		 */
		if (O.allow_errors)
			s->dropped++;
		else
			corrupt(s, "rank %u: more than %u rows messages waiting for a combine slot",
				rs->rank, BACKLOG_MAX);
		return -1;
	}
	rc->refs = malloc(sizeof(*refs) * (h->n_rows ? h->n_rows : 1));
	rc->rows = malloc((size_t)h->row_bytes * h->n_rows + 1);
	if (!rc->refs || !rc->rows) {
		free(rc->refs);
		free(rc->rows);
		corrupt(s, "rank %u: out of memory copying rows", rs->rank);
		return -1;
	}
	rc->src_rank = src_rank;
	rc->h = *h;
	memcpy(rc->refs, refs, sizeof(*refs) * h->n_rows);
	for (uint32_t j = 0; j < h->n_rows; j++)
		memcpy(rc->rows + (size_t)j * h->row_bytes,
		       rows + (size_t)(by_token ? refs[j].token : j) * h->row_bytes, h->row_bytes);
	rs->bl_n++;
	return 0;
}

/*
 * Rows handed over in place (our own batch): where they are, the stage or
 * our registered region, or NULL if a referenced row lies outside it.
 */
static const uint8_t *in_place_rows(const struct rank_state *rs, const struct locus_desc *d,
				    const struct locus_rows_hdr *h,
				    const struct locus_row_ref *refs)
{
	const uint8_t *base = rs->stage;
	uint64_t size = rs->stage_size, lo = ROWS_OFF;

	if (d->flags & LOCUS_DESC_F_REGION) {
		if (!rs->region || d->region != rs->region || rs->dmafd < 0)
			return NULL;
		base = rs->rows - rs->rows_off;
		size = rs->rlen;
		lo = 0;
	}
	for (uint32_t j = 0; j < h->n_rows; j++)
		if (refs[j].token >= O.tokens ||
		    h->rows_off + (uint64_t)(refs[j].token + 1) * h->row_bytes > size)
			return NULL;
	return h->rows_off >= lo ? base + h->rows_off : NULL;
}

/* Rows arrived: answer them now, or copy them out; the inbox slot goes back at once. */
static void answer_rows(struct rank_state *rs, struct proc_stats *s, const struct locus_desc *d)
{
	uint8_t *msg = (uint8_t *)locus_client_inbox(rs->c, d);
	const struct locus_msg_hdr *m = (const struct locus_msg_hdr *)msg;
	const struct locus_rows_hdr *h;
	const struct locus_row_ref *refs;
	const uint8_t *rows;
	int by_token, slot;

	s->delivered++;
	if (!msg || locus_rows_msg_check(msg, d->len, O.ranks, 4u << 20, NULL) < 0) {
		corrupt(s, "rank %u: rows message of %u bytes fails the checks", rs->rank, d->len);
		if (msg)
			release(rs, d->slot);
		return;
	}
	h = locus_rows_hdr_of(msg);
	refs = locus_rows_refs(msg);
	by_token = !!(h->flags & LOCUS_ROWS_IN_PLACE);
	if (rs->wt && h->top_k)
		lg_weights_check_rows(rs->wt, h->layer, locus_rows_experts(msg, h->n_rows), refs,
				      h->n_rows, h->top_k);
	rows = by_token ? in_place_rows(rs, d, h, refs) : msg + h->rows_off;
	if ((uint64_t)h->n_rows * h->row_bytes > COMB_ROWS) {
		corrupt(s, "rank %u: %u rows of %u bytes exceed a combine slot", rs->rank,
			h->n_rows, h->row_bytes);
	} else if (by_token && (m->src_rank != rs->rank || !rows)) {
		corrupt(s, "rank %u: rows in place from rank %u at %llu outside our batch",
			rs->rank, m->src_rank, (unsigned long long)h->rows_off);
	} else if (!rs->bl_n && (slot = free_slot(rs)) >= 0) {
		combine_build(rs, s, (uint32_t)slot, m->src_rank, h, refs, rows, by_token);
	} else {
		backlog_add(rs, s, m->src_rank, h, refs, rows, by_token);
	}
	release(rs, d->slot);
}

/* The combines waiting (liblocus sends waiting RELEASEs ahead of them). */
static void kick(struct rank_state *rs)
{
	combine_kick(rs);
}

static void take_results(struct rank_state *rs, struct proc_stats *s, const struct locus_desc *d)
{
	uint8_t *msg = (uint8_t *)locus_client_inbox(rs->c, d);
	const struct locus_msg_hdr *m = (const struct locus_msg_hdr *)msg;
	struct locus_rows_hdr *h;
	struct locus_row_ref *refs;
	uint32_t held = COMB_SLOTS;
	int late;

	if (!msg || locus_rows_msg_check(msg, d->len, O.ranks, 4u << 20, NULL) < 0) {
		corrupt(s, "rank %u: results message of %u bytes fails the checks", rs->rank,
			d->len);
		goto out;
	}
	h = locus_rows_hdr_of(msg);
	refs = locus_rows_refs(msg);
	if (O.mask && (h->flags & LOCUS_ROWS_GONE)) {
		/* the rank had left when our rows reached its node: none of its results come */
		s->gone_refusals++;
		if (h->batch_id == rs->batch && m->src_rank < 64)
			rs->gone |= 1ull << m->src_rank;
		goto out;
	}
	if (O.mask && h->batch_id == rs->batch && m->src_rank < 64) {
		rs->res_got[m->src_rank]++;
		rs->res_need[m->src_rank] = h->n_chunks;
	}
	if (h->flags & LOCUS_ROWS_IN_PLACE) {
		/* our own results, read out of the combine slot that holds them */
		uint64_t rel = h->rows_off - COMB_OFF - 65536;

		held = h->rows_off >= COMB_OFF + 65536 ? (uint32_t)(rel / COMB_STRIDE) : COMB_SLOTS;
		if (m->src_rank != rs->rank || held >= COMB_SLOTS ||
		    !(rs->comb_held & (1u << held)) || h->n_rows > rs->held_rows[held] ||
		    rel % COMB_STRIDE + (uint64_t)h->n_rows * h->row_bytes > 256 * 1024) {
			corrupt(s, "rank %u: in-place results at %llu outside a held combine slot",
				rs->rank, (unsigned long long)h->rows_off);
			held = COMB_SLOTS;
			goto out;
		}
	}
	/* results of a batch given up (--allow-errors) or ended without a lost rank (--mask)
	 * may still come: checked, not counted */
	late = (O.allow_errors || O.mask) && h->batch_id < rs->batch;
	if (h->batch_id != rs->batch && !late) {
		corrupt(s, "rank %u: results of batch %llu from rank %u while at batch %u",
			rs->rank, (unsigned long long)h->batch_id, m->src_rank, rs->batch);
		goto out;
	}
	for (uint32_t j = 0; j < h->n_rows; j++) {
		const uint8_t *row = (h->flags & LOCUS_ROWS_IN_PLACE)
			? rs->stage + h->rows_off + (size_t)j * h->row_bytes
			: msg + h->rows_off + (size_t)j * h->row_bytes;
		int bad = refs[j].token >= O.tokens ? -1 : 0;

		for (uint32_t b = 0; !bad && b < h->row_bytes; b++)
			if (row[b] != (uint8_t)(row_byte(rs->rank, (uint32_t)h->batch_id,
							 refs[j].token, b) ^ (uint8_t)(m->src_rank + 1)))
				bad = (int)b + 1;
		if (bad) {
			corrupt(s, "rank %u: result row %u of %u (token %u) from rank %u, batch "
				"%llu: %s %d", rs->rank, j, h->n_rows, refs[j].token, m->src_rank,
				(unsigned long long)h->batch_id, bad < 0 ? "token out of range" :
				"byte differs at", bad < 0 ? (int)refs[j].token : bad - 1);
			continue;
		}
		if (late) {
			s->late++;
			continue;
		}
		for (uint32_t k = 0; k < T->k; k++) {
			if (!(refs[j].kmask & (1u << k)))
				continue;
			if (rs->got[refs[j].token][k]++)
				s->duplicate++;
			else
				rs->got_pairs++;
		}
	}
out:
	if (held < COMB_SLOTS) {
		rs->held_rows[held] -= h->n_rows;
		if (!rs->held_rows[held])
			rs->comb_held &= ~(1u << held);
	}
	if (msg)
		release(rs, d->slot);
}

/*
 * --mask: the pairs locusd masked read LOCUS_EXPERT_MASKED in our request, as
 * many as the completion says; no result of theirs may come.
 */
static void masked_pairs(struct rank_state *rs, struct proc_stats *s, const struct locus_desc *d)
{
	const uint16_t *ids = locus_client_dispatch_ids(rs->c, 0);
	uint32_t n = 0;

	rs->dests = d->dests;
	if (!d->blocks)
		return;
	for (uint32_t t = 0; ids && t < O.tokens; t++)
		for (uint32_t k = 0; k < T->k; k++)
			if (ids[(size_t)t * T->k + k] == LOCUS_EXPERT_MASKED) {
				rs->got[t][k] = 2; /* a result for it would be a duplicate */
				n++;
			}
	if (n != d->blocks) {
		corrupt(s, "rank %u: batch %u: %u pairs read masked, the completion says %u",
			rs->rank, rs->batch, n, d->blocks);
		return;
	}
	rs->want_pairs -= n;
	s->masked += n;
}

/*
 * --mask: the batch is over without every result when a rank it sent rows to
 * was lost (locusd says so, or it refused them as gone) and every other
 * such rank sent all its results messages. What the lost ones held is
 * counted as unanswered, once.
 */
static int lost_rank_done(struct rank_state *rs, struct proc_stats *s)
{
	struct locus_client_ranks info;
	uint64_t lost = 0, down;

	if (!O.mask || rs->dispatch_done != 1)
		return 0;
	if (locus_client_ranks(rs->c, &lost, 1, &info) < 0)
		lost = 0;
	down = rs->dests & (lost | rs->gone);
	if (!down)
		return 0;
	for (uint32_t r = 0; r < 64 && r < O.ranks; r++)
		if ((rs->dests >> r & 1) && !(down >> r & 1) &&
		    (!rs->res_need[r] || rs->res_got[r] < rs->res_need[r]))
			return 0;
	s->unanswered += rs->want_pairs - rs->got_pairs;
	s->lost_batches++;
	return 1;
}

static void handle(struct rank_state *rs, struct proc_stats *s, const struct locus_desc *d)
{
	switch (d->op) {
	case LOCUS_OP_ROWS_IN:
		answer_rows(rs, s, d);
		break;
	case LOCUS_OP_RESULTS_IN:
		take_results(rs, s, d);
		break;
	case LOCUS_OP_COMBINE:
		combine_done(rs, s, d);
		break;
	case LOCUS_OP_DISPATCH:
		if (rs->dispatch_done != 0 || d->id != rs->batch) {
			s->duplicate++;
			break;
		}
		s->completed++;
		if (d->status == -LOCUS_EFULL) {
			s->retries++;
			rs->dispatch_done = -1; /* resubmit */
		} else if (d->status) {
			err_record(s, d->status);
			rs->dispatch_done = 2;
		} else {
			s->ok++;
			s->rows_out += d->aux;
			rs->dispatch_done = 1;
			if (O.mask)
				masked_pairs(rs, s, d);
		}
		break;
	default:
		corrupt(s, "rank %u: unexpected op %u", rs->rank, d->op);
	}
}

/* Build batch b: tokens of a trace request's prompt at one layer. */
static void build_batch(struct rank_state *rs, uint32_t b)
{
	const struct locus_trace_req *r = &T->reqs[(b * O.ranks + rs->rank) % T->n_requests];
	struct locus_dispatch_req *q = (struct locus_dispatch_req *)rs->stage;
	uint16_t *ex = (uint16_t *)(q + 1);
	float *g;
	uint32_t layer = b % T->n_layers;

	*q = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = (uint16_t)layer,
					  .top_k = T->k, .n_tokens = O.tokens,
					  .row_bytes = O.row_bytes, .rows_off = rs->rows_off,
					  .batch_id = b };
	if (rs->dmafd >= 0 && !O.host_region)
		lg_dmabuf_sync(rs->dmafd, 1);
	for (uint32_t t = 0; t < O.tokens; t++) {
		const uint16_t *ids = locus_trace_tok(T, r->prompt, t % r->prompt_len, layer);

		memcpy(ex + (size_t)t * T->k, ids, 2u * T->k);
		for (uint32_t x = 0; x < O.row_bytes; x++)
			rs->rows[(size_t)t * O.row_bytes + x] = row_byte(rs->rank, b, t, x);
	}
	if (rs->dmafd >= 0 && !O.host_region)
		lg_dmabuf_sync(rs->dmafd, 0);
	g = (float *)((uint8_t *)ex + locus_ids_bytes(O.tokens, T->k));
	for (uint32_t i = 0; i < O.tokens * T->k; i++)
		g[i] = 1.0f / T->k;
}

/* --dmabuf / --host-region: the batch's rows go to a region registered with our locusd. */
static int region_setup(struct rank_state *rs, struct proc_stats *s)
{
	struct locus_error e = { 0 };
	const char *how = "none";
	int ret;

	rs->rlen = LOCUS_ALIGN_UP((size_t)O.tokens * O.row_bytes, (size_t)LOCUS_REGION_ALIGN);
	rs->dmafd = O.host_region ? lg_hostmem_create(rs->rlen, &how)
				  : lg_dmabuf_create(rs->rlen, &how);
	snprintf(s->region_how, sizeof(s->region_how), "%s", how);
	if (rs->dmafd < 0) {
		snprintf(s->why, sizeof(s->why), "rank %u: no %s: %s", rs->rank,
			 O.host_region ? "sealed memfd" : "dma-buf (udmabuf or vgem)",
			 strerror(-rs->dmafd));
		return -1;
	}
	rs->rows = lg_dmabuf_map(rs->dmafd, rs->rlen);
	if (!rs->rows) {
		snprintf(s->why, sizeof(s->why), "rank %u: cannot map our %s dma-buf", rs->rank,
			 how);
		return -1;
	}
	ret = locus_client_register_dmabuf(rs->c, rs->dmafd, 0, rs->rlen, 30000, &rs->region,
					   &s->region_flags, &e);
	if (ret < 0) {
		snprintf(s->why, sizeof(s->why), "rank %u: registering the %s dma-buf: %.150s",
			 rs->rank, how, e.msg);
		return -1;
	}
	rs->rows_off = 0;
	s->region_registered = 1;
	return 0;
}

static void region_teardown(struct rank_state *rs, struct proc_stats *s)
{
	if (rs->region && !s->gone &&
	    locus_client_unregister_region(rs->c, rs->region, 30000, NULL) == 0)
		s->region_released = 1;
	if (rs->rows && rs->dmafd >= 0)
		munmap(rs->rows, rs->rlen);
	if (rs->dmafd >= 0)
		close(rs->dmafd);
}

/*
 * A new process for a rank whose process was killed: its locusd refuses the
 * rank (-EEXIST) until it reclaimed the dead one's slot, so try again for up
 * to 20 s.
 */
static struct locus_client *attach_again(uint32_t rank, struct proc_stats *s)
{
	struct locus_client_req req = { .roles = LOCUS_ROLE_RANK, .rank = rank,
					.timeout_ms = 2000 };
	const char *inst = O.n_rank_at ? O.rank_at[rank] : O.instance;
	uint64_t t0 = now_ns();
	struct locus_client *c;
	struct locus_error e;
	int ret;

	do {
		ret = locus_client_attach(inst, &req, &c, &e);
		if (ret == 0)
			return c;
		nap_us(20000);
	} while (now_ns() - t0 < 20000000000ull && (ret == -EEXIST || ret == -ETIMEDOUT));
	snprintf(s->why, sizeof(s->why), "rank %u: attach again to %.32s: %.80s", rank, inst, e.msg);
	s->failed = 1;
	return NULL;
}

/*
 * --placements: the rank's part in placement changes, as a serving engine's
 * would be with its weights loaded at once: acknowledge a staged generation,
 * release older ones once every node plans with a newer one.
 */
static void follow_placement(struct rank_state *rs, struct proc_stats *s)
{
	struct locus_client_placement p;

	locus_client_placement(rs->c, &p);
	if (p.staged > p.acked && locus_client_placement_ack(rs->c, p.staged) == 0)
		s->pl_acked++;
	if (p.free_below > p.floor && p.acked >= p.free_below &&
	    locus_client_placement_release(rs->c, p.free_below) == 0)
		s->pl_released++;
}

/* Whether our engine sees ranks 0..O.ranks-1 all live, waiting for it (bounded). */
static int ranks_known(struct rank_state *rs, uint64_t t0)
{
	while (!expired(t0)) {
		if (lg_ranks_live(rs->c, O.ranks))
			return 1;
		nap_us(1000);
	}
	return 0;
}

int run_rank(uint32_t rank, struct proc_stats *s)
{
	struct rank_state *rs = calloc(1, sizeof(*rs));
	uint64_t t0 = now_ns();
	uint32_t b = 0, last = O.batches; /* batches to do: all, or until told to stop */

	if (!rs)
		return 1;
	rs->s = s;
	rs->c = s->kills ? attach_again(rank, s) : attach(O.n_rank_at ? O.rank_at[rank] : O.instance,
							   LOCUS_ROLE_RANK, rank, s);
	if (!rs->c) {
		__atomic_add_fetch(&S->ranks_failed, 1, __ATOMIC_ACQ_REL);
		free(rs);
		return 1;
	}
	rs->rank = rank;
	if (O.placements) {
		struct locus_client_placement p;

		locus_client_placement_join(rs->c);
		locus_client_placement(rs->c, &p);
		if (O.weights) {
			rs->wt = lg_weights_open(rs->c, rank, s);
			if (!rs->wt) {
				s->failed = 1;
				__atomic_add_fetch(&S->ranks_failed, 1, __ATOMIC_ACQ_REL);
				locus_client_detach(rs->c);
				free(rs);
				return 1;
			}
			lg_weights_start(rs->wt, p.current);
		} else if (p.current) {
			locus_client_placement_ack(rs->c, p.current);
		}
	}
	rs->stage = locus_client_stage(rs->c, &rs->stage_size);
	rs->rows = rs->stage + ROWS_OFF;
	rs->rows_off = ROWS_OFF;
	rs->dmafd = -1;
	if (O.dmabuf && region_setup(rs, s) < 0) {
		s->failed = 1;
		__atomic_add_fetch(&S->ranks_failed, 1, __ATOMIC_ACQ_REL);
		goto out;
	}
	/* a batch may need every rank, wherever attached: start once all are */
	if (s->kills) {
		/* taking a killed process's place: a batch it had sent is given up */
		b = s->batch_at + s->batch_open;
		s->abandoned += s->batch_open;
	} else {
		__atomic_add_fetch(&S->ranks_up, 1, __ATOMIC_ACQ_REL);
	}
	while (__atomic_load_n(&S->ranks_up, __ATOMIC_ACQUIRE) < O.ranks &&
	       !__atomic_load_n(&S->ranks_failed, __ATOMIC_ACQUIRE) && !expired(t0))
		nap_us(100);
	if (__atomic_load_n(&S->ranks_up, __ATOMIC_ACQUIRE) < O.ranks) {
		snprintf(s->why, sizeof(s->why), "rank %u: not every rank attached", rank);
		s->failed = 1;
		goto out;
	}
	/* and our locusd knows they are: another node's ranks from its next load row */
	if (!s->kills && !ranks_known(rs, t0)) {
		snprintf(s->why, sizeof(s->why), "rank %u: our locusd does not see every rank "
			 "attached", rank);
		s->failed = 1;
		goto out;
	}
	t0 = now_ns();
	rs->t0 = t0;
	if (!s->t_start_ns)
		s->t_start_ns = t0;
	rs->dispatch_done = b < last ? -1 : 3;
	while (!expired(t0)) {
		struct locus_desc d[32];
		int n;

		rs->b = b;
		if (last > b && stopping() && rs->dispatch_done == -1 && !rs->want_pairs) {
			/* told to stop: no new batch */
			last = b;
			rs->dispatch_done = 3;
		}
		if (b < last && rs->dispatch_done == -1) {
			struct locus_desc q = { .op = LOCUS_OP_DISPATCH, .id = b, .off = 0,
						.len = (uint32_t)locus_dispatch_req_len(O.tokens,
											T->k),
						.flags = (rs->region ? LOCUS_DESC_F_REGION : 0) |
							 (O.mask ? LOCUS_DESC_F_MASK : 0),
						.region = rs->region };

			if (rs->got_pairs == 0 && rs->want_pairs == 0) {
				build_batch(rs, b);
				memset(rs->got, 0, sizeof(rs->got));
				rs->batch = b;
				rs->want_pairs = O.tokens * T->k;
				rs->dests = rs->gone = 0;
				memset(rs->res_got, 0, sizeof(rs->res_got));
				memset(rs->res_need, 0, sizeof(rs->res_need));
			}
			if (locus_client_submit(rs->c, &q, 1) == 1) {
				rs->dispatch_done = 0;
				rs->t_batch = now_ns();
				s->submitted++;
				if (!O.kill_combine && b == O.kill_n)
					maybe_die(rs);
			}
		}
		n = locus_client_poll(rs->c, d, 32);
		if (n < 0) {
			/* what our locusd owed us: completions, and the results of a sent batch */
			own_daemon_lost(s, n);
			s->orphaned += (rs->dispatch_done == 0) + comb_outstanding(rs);
			s->abandoned += rs->dispatch_done == 1;
			break;
		}
		for (int i = 0; i < n; i++)
			if (!lg_weights_take(rs->wt, &d[i]))
				handle(rs, s, &d[i]);
		if (rs->wt)
			lg_weights_follow(rs->wt);
		else if (O.placements)
			follow_placement(rs, s);
		backlog_drain(rs, s);
		kick(rs);
		if (rs->dispatch_done == 1 &&
		    (rs->got_pairs == rs->want_pairs || lost_rank_done(rs, s))) {
			if (O.mask && rs->want_pairs < O.tokens * T->k && !s->first_mask_ns)
				s->first_mask_ns = now_ns();
			b++;
			rs->got_pairs = rs->want_pairs = 0;
			rs->dispatch_done = b < last ? -1 : 3;
		} else if (rs->dispatch_done == 1 && O.allow_errors &&
			   now_ns() - rs->t_batch > (uint64_t)O.batch_ms * 1000000ull) {
			/* sent, but results stopped coming (their rank's node died) */
			s->abandoned++;
			rs->dispatch_done = 2;
		}
		if (rs->dispatch_done == 2) {
			rs->got_pairs = rs->want_pairs = 0;
			b++;
			rs->dispatch_done = b < last ? -1 : 3;
		}
		if (b >= last && !s->t_end_ns)
			s->t_end_ns = now_ns();
		/* after our own batches, keep answering the others until told to stop */
		if (b >= last && __atomic_load_n(&S->done, __ATOMIC_ACQUIRE) &&
		    !comb_outstanding(rs))
			break;
		if (!n)
			nap_us(20);
	}
	if (!s->t_end_ns)
		s->t_end_ns = now_ns();
	if (b < last && !s->gone) {
		snprintf(s->why, sizeof(s->why), "rank %u finished %u of %u batches; batch %u: %s, "
			 "%u of %u results; combines in flight %#x", rank, b, O.batches, b,
			 rs->dispatch_done == 0 ? "dispatch not completed" :
			 rs->dispatch_done == 1 ? "dispatched" : "not submitted",
			 rs->got_pairs, rs->want_pairs, comb_in_use(rs));
		s->failed = 1;
	}
out:
	lg_weights_close(rs->wt);
	region_teardown(rs, s);
	locus_client_detach(rs->c);
	backlog_free(rs);
	free(rs);
	return s->failed;
}
