// SPDX-License-Identifier: MIT
/*
 * locus-loadgen --weights BYTES: a rank holds real expert weights and moves
 * them for every placement change before it acknowledges, as a serving
 * rank would. Its weights live in a registered region of host memory (a
 * sealed memfd: what an RDMA device registers, as it would a GPU's dma-buf),
 * one slot per (layer, expert) at (layer * E + expert) * span; a slot's
 * bytes are a pattern of (layer, expert), so every gained expert is checked
 * byte for byte, whoever sent it. A slot is "held" while a generation the
 * rank holds places the expert on it; a row arriving for an expert it does
 * not hold is counted (rows without weights) and fails the run.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loadgen.h"
#include "locus_dispatch.h"
#include "locus_placement.h"
#include "locus_weights.h"

#define W_STAGE_OFF (COMB_OFF + COMB_SLOTS * (256 * 1024 + 65536))
#define W_STAGE_LEN (64 * 1024)

struct lg_weights {
	struct locus_client *c;
	struct proc_stats *s;
	uint32_t rank, L, E;
	uint64_t span;
	int fd;
	uint8_t *base;
	size_t len;
	uint32_t region;
	uint8_t *held;         /* [L*E]: weights loaded and in use */
	uint8_t *bits;         /* scratch: locus_placement_rank_experts */
	size_t bits_len;
	struct locus_weights *mv;
	uint64_t moving_to;    /* generation of the move running, 0: none */
	uint64_t t_begin;
	void *old_blob, *new_blob;
	size_t old_len, new_len;
};

static uint8_t w_byte(uint32_t layer, uint32_t e, uint64_t i)
{
	return (uint8_t)(layer * 97 + e * 13 + i * 7 + (i >> 12));
}

/* Where (layer, e)'s weights sit in the region: its offset. */
static uint64_t slot_off(const struct lg_weights *w, uint32_t layer, uint32_t e)
{
	return ((uint64_t)layer * w->E + e) * w->span;
}

static uint8_t *slot_of(struct lg_weights *w, uint32_t layer, uint32_t e)
{
	return w->base + slot_off(w, layer, e);
}

/* An expert loaded from "storage": its pattern. */
static void load(struct lg_weights *w, uint32_t layer, uint32_t e)
{
	uint8_t *p = slot_of(w, layer, e);

	for (uint64_t i = 0; i < O.weights; i++)
		p[i] = w_byte(layer, e, i);
}

static uint64_t src_off(void *arg, uint32_t layer, uint32_t e)
{
	return slot_off(arg, layer, e);
}

static void w_write(void *arg, uint32_t layer, uint32_t e, uint64_t at, const void *data,
		    uint32_t len)
{
	struct lg_weights *w = arg;

	uint8_t *p = slot_of(w, layer, e) + at;

	if (w->held[(size_t)layer * w->E + e]) {
		/* weights in use change only by a stray sender; the same bytes again come
		 * to a rank whose generation fell behind the cluster's (a fetch plan from
		 * the one in force) */
		if (memcmp(p, data, len))
			w->s->w_stray++;
		return;
	}
	memcpy(p, data, len);
}

static void gained(void *arg, uint32_t layer, uint32_t e, int from_storage)
{
	struct lg_weights *w = arg;
	const uint8_t *p = slot_of(w, layer, e);

	if (from_storage) {
		load(w, layer, e);
	} else {
		for (uint64_t i = 0; i < O.weights; i++)
			if (p[i] != w_byte(layer, e, i)) {
				corrupt(w->s, "rank %u: weights of expert (%u, %u) differ at byte "
					"%llu", w->rank, layer, e, (unsigned long long)i);
				load(w, layer, e);
				break;
			}
	}
	w->held[(size_t)layer * w->E + e] = 1;
}

/* held := the experts of generation gen's placement on our rank (loaded if new). */
static int hold(struct lg_weights *w, uint64_t gen, int load_new)
{
	struct locus_error e = { 0 };
	uint32_t L, E;
	void *blob;
	size_t len;

	if (locus_client_placement_table(w->c, gen, &blob, &len, &e) < 0)
		return -1;
	if (locus_placement_rank_experts(blob, len, w->rank, w->bits, w->bits_len, &L, &E,
					 &e) < 0 || L != w->L || E != w->E) {
		free(blob);
		return -1;
	}
	free(blob);
	for (uint32_t i = 0; i < L * E; i++) {
		int h = w->bits[i / 8] >> (i % 8) & 1;

		if (h && !w->held[i] && load_new)
			load(w, i / E, i % E);
		w->held[i] = (uint8_t)(h && (w->held[i] || load_new));
	}
	return 0;
}

struct lg_weights *lg_weights_open(struct locus_client *c, uint32_t rank, struct proc_stats *s)
{
	struct lg_weights *w = calloc(1, sizeof(*w));
	struct locus_weights_params p;
	struct locus_error e = { 0 };
	const char *how = "none";
	uint64_t stage_size;
	uint32_t fl;

	if (!w)
		return NULL;
	w->c = c;
	w->s = s;
	w->rank = rank;
	w->L = T->n_layers;
	w->E = T->n_experts;
	w->span = LOCUS_ALIGN_UP(locus_weights_span(O.weights), 64ull);
	w->len = LOCUS_ALIGN_UP((size_t)(w->span * w->L * w->E), (size_t)LOCUS_REGION_ALIGN);
	w->bits_len = ((size_t)w->L * w->E + 7) / 8;
	w->fd = -1;
	locus_client_stage(c, &stage_size);
	if (stage_size < W_STAGE_OFF + W_STAGE_LEN) {
		snprintf(s->why, sizeof(s->why), "rank %u: --weights needs a stage of %u bytes",
			 rank, W_STAGE_OFF + W_STAGE_LEN);
		goto err_free;
	}
	w->held = calloc((size_t)w->L * w->E, 1);
	w->bits = calloc(w->bits_len, 1);
	if (!w->held || !w->bits)
		goto err_free;
	w->fd = lg_hostmem_create(w->len, &how);
	w->base = w->fd < 0 ? NULL : lg_dmabuf_map(w->fd, w->len);
	if (!w->base) {
		snprintf(s->why, sizeof(s->why), "rank %u: no weights region of %zu bytes", rank,
			 w->len);
		goto err_free;
	}
	if (locus_client_register_dmabuf(c, w->fd, 0, w->len, 30000, &w->region, &fl, &e) < 0) {
		snprintf(s->why, sizeof(s->why), "rank %u: registering the weights: %.150s", rank,
			 e.msg);
		goto err_unmap;
	}
	p = (struct locus_weights_params){
		.rank = rank, .expert_bytes = O.weights, .n_layers = w->L, .n_experts = w->E,
		.region = w->region, .src_off = src_off, .write = w_write, .gained = gained,
		.arg = w, .stage_off = W_STAGE_OFF, .stage_len = W_STAGE_LEN,
	};
	if (locus_weights_create(c, &p, &w->mv, &e) < 0) {
		snprintf(s->why, sizeof(s->why), "rank %u: the weight mover: %.150s", rank, e.msg);
		goto err_unreg;
	}
	return w;

err_unreg:
	locus_client_unregister_region(c, w->region, 30000, NULL);
err_unmap:
	munmap(w->base, w->len);
err_free:
	if (w->fd >= 0)
		close(w->fd);
	free(w->bits);
	free(w->held);
	free(w);
	return NULL;
}

void lg_weights_close(struct lg_weights *w)
{
	if (!w)
		return;
	locus_weights_destroy(w->mv);
	if (!w->s->gone)
		locus_client_unregister_region(w->c, w->region, 30000, NULL);
	munmap(w->base, w->len);
	close(w->fd);
	free(w->old_blob);
	free(w->new_blob);
	free(w->bits);
	free(w->held);
	free(w);
}

int lg_weights_take(struct lg_weights *w, const struct locus_desc *d)
{
	return w ? locus_weights_take(w->mv, d) : 0;
}

/* A new rank's weights: those of the generation in force, from storage; then ack it. */
void lg_weights_start(struct lg_weights *w, uint64_t current)
{
	if (current && hold(w, current, 1) == 0)
		locus_client_placement_ack(w->c, current);
}

static void move_done(struct lg_weights *w, int ret)
{
	struct locus_weights_stats st;
	struct proc_stats *s = w->s;
	uint64_t ms = (now_ns() - w->t_begin) / 1000000;

	locus_weights_stats(w->mv, &st);
	s->w_moves++;
	s->w_sent += st.sent;
	s->w_here += st.received_here;
	s->w_other += st.received_other;
	s->w_storage += st.from_storage;
	s->w_bytes_in += st.bytes_received;
	s->w_timeouts += ret < 0;
	s->w_ms_max = ms > s->w_ms_max ? ms : s->w_ms_max;
	/* everything gained is in held now; the old generation's stay until released */
	if (locus_client_placement_ack(w->c, w->moving_to) == 0)
		s->pl_acked++;
	w->moving_to = 0;
}

/*
 * --placements with --weights: a staged generation's weights moved (from
 * the generation we hold), then acknowledged; older ones released as
 * free_below passes them, their experts no longer held.
 */
void lg_weights_follow(struct lg_weights *w)
{
	struct locus_client_placement p;
	struct locus_error e = { 0 };
	int ret;

	locus_client_placement(w->c, &p);
	if (!w->moving_to && p.staged > p.acked) {
		free(w->old_blob);
		free(w->new_blob);
		w->old_blob = w->new_blob = NULL;
		if (!p.acked) {
			/* nothing held yet: everything from storage */
			if (hold(w, p.staged, 1) == 0 &&
			    locus_client_placement_ack(w->c, p.staged) == 0)
				w->s->pl_acked++;
			return;
		}
		/* from what we hold: the generation acknowledged, else the one in force */
		if ((locus_client_placement_table(w->c, p.acked, &w->old_blob, &w->old_len,
						  &e) < 0 &&
		     locus_client_placement_table(w->c, p.current, &w->old_blob, &w->old_len,
						  &e) < 0) ||
		    locus_client_placement_table(w->c, p.staged, &w->new_blob, &w->new_len,
						 &e) < 0 ||
		    locus_weights_begin(w->mv, w->old_blob, w->old_len, w->new_blob, w->new_len,
					p.staged, 20000, &e) < 0) {
			/* no plan: what the staged one places here, from storage */
			w->s->w_unplanned++;
			if (hold(w, p.staged, 1) == 0 &&
			    locus_client_placement_ack(w->c, p.staged) == 0)
				w->s->pl_acked++;
			return;
		}
		w->moving_to = p.staged;
		w->t_begin = now_ns();
	}
	if (w->moving_to) {
		ret = locus_weights_step(w->mv);
		if (ret != 0)
			move_done(w, ret);
	}
	if (p.free_below > p.floor && p.acked >= p.free_below && !w->moving_to &&
	    locus_client_placement_release(w->c, p.free_below) == 0) {
		w->s->pl_released++;
		hold(w, p.acked, 0);
	}
}

/* Rows for our experts: each (row, slot) we serve must be an expert we hold. */
void lg_weights_check_rows(struct lg_weights *w, uint32_t layer, const uint16_t *experts,
			   const struct locus_row_ref *refs, uint32_t n_rows, uint32_t top_k)
{
	if (!w || !experts || layer >= w->L)
		return;
	for (uint32_t j = 0; j < n_rows; j++)
		for (uint32_t k = 0; k < top_k; k++) {
			uint16_t x = experts[(size_t)j * top_k + k];

			if (!(refs[j].kmask >> k & 1) || x >= w->E ||
			    w->held[(size_t)layer * w->E + x])
				continue;
			if (!w->s->w_unheld++)
				snprintf(w->s->w_first, sizeof(w->s->w_first),
					 "rank %u: a row for expert (%u, %u), not held", w->rank,
					 layer, x);
		}
}
