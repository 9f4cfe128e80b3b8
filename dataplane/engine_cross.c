// SPDX-License-Identifier: MIT
/*
 * Several engines on one node (locus_engine.h, "Several engine lcores"): the
 * group's rings, our share of every client's inbox, deliveries handed over
 * to the engine that owns their client, and RELEASEs handed back to the
 * engine whose share holds the slot. Between two engines there are two
 * SPSC rings each way (locus_spsc.h, the relay's): hand-overs and releases.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"
#include "locus_err_priv.h"
#include "locus_spsc.h"

#define CROSS_BURST 64 /* hand-overs or releases taken from one ring per poll */

/* A delivery for the owner to post: the rows are in the inbox already. */
struct cross_hand {
	uint32_t slot, epoch;    /* the client, and its attachment as the sender knew it */
	uint32_t span, pad;      /* inbox slots the message takes (for its RELEASE) */
	struct locus_desc d;
};

/* A RELEASE for the engine whose share holds the slot. */
struct cross_rel {
	uint32_t slot, epoch, first, pad;
};

struct locus_engine_group {
	uint32_t n, n_slots, inbox_slots;
	struct locus_spsc *hand;  /* [from * n + to] */
	struct locus_spsc *rel;   /* [from * n + to] */
};

static uint32_t share_lo(uint32_t k, uint32_t n, uint32_t slots)
{
	return (uint32_t)((uint64_t)k * slots / n);
}

static uint32_t pow2_at_least(uint64_t v)
{
	uint32_t p = 64;

	while (p < v && p < (1u << 24))
		p <<= 1;
	return p;
}

/*
 * A ring from engine i to engine k never holds more than the messages of
 * i's share in k's clients (each holds a slot until its RELEASE), twice
 * that across a re-attach: sized for it, a full ring means a stalled peer.
 */
int locus_engine_group_create(uint32_t n_engines, uint32_t n_slots, uint32_t inbox_slots,
			      struct locus_engine_group **out)
{
	struct locus_engine_group *g;
	uint32_t ring;

	if (n_engines < 1 || n_engines > LOCUS_ENGINE_MAX_ENGINES || !n_slots ||
	    inbox_slots < n_engines)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	*g = (struct locus_engine_group){ .n = n_engines, .n_slots = n_slots,
					  .inbox_slots = inbox_slots };
	g->hand = calloc((size_t)n_engines * n_engines, sizeof(*g->hand));
	g->rel = calloc((size_t)n_engines * n_engines, sizeof(*g->rel));
	if (!g->hand || !g->rel)
		goto err_free;
	ring = pow2_at_least(2ull * n_slots * ((inbox_slots + n_engines - 1) / n_engines));
	for (uint32_t i = 0; i < n_engines; i++)
		for (uint32_t k = 0; k < n_engines; k++) {
			if (i == k)
				continue;
			if (locus_spsc_init(&g->hand[i * n_engines + k], ring,
					    sizeof(struct cross_hand)) ||
			    locus_spsc_init(&g->rel[i * n_engines + k], ring,
					    sizeof(struct cross_rel)))
				goto err_free;
		}
	*out = g;
	return 0;

err_free:
	locus_engine_group_destroy(g);
	return -ENOMEM;
}

void locus_engine_group_destroy(struct locus_engine_group *g)
{
	if (!g)
		return;
	for (uint32_t i = 0; g->hand && g->rel && i < g->n * g->n; i++) {
		locus_spsc_fini(&g->hand[i]);
		locus_spsc_fini(&g->rel[i]);
	}
	free(g->hand);
	free(g->rel);
	free(g);
}

uint32_t locus_engine_group_inflight(const struct locus_engine_group *g)
{
	uint32_t n = 0;

	for (uint32_t i = 0; g && i < g->n * g->n; i++)
		if (g->hand[i].slots)
			n += locus_spsc_count(&g->hand[i]) + locus_spsc_count(&g->rel[i]);
	return n;
}

/* ---- an engine's part ------------------------------------------------------------ */

int engine_cross_init(struct locus_engine *e, struct locus_error *err)
{
	const struct locus_engine_group *g = e->p.group;

	e->grp = e->p.group;
	e->n_eng = g ? g->n : 1;
	e->idx = g ? e->p.engine_idx : 0;
	if (g && (e->idx >= g->n || g->n_slots != e->n_slots || g->inbox_slots != e->inbox_slots))
		return locus_error_set(err, EINVAL, "engine %u does not fit its group", e->idx);
	e->share_lo = share_lo(e->idx, e->n_eng, e->inbox_slots);
	e->share_hi = share_lo(e->idx + 1, e->n_eng, e->inbox_slots);
	/* what every other share can hold: one completion entry per slot at most */
	e->foreign_reserve = e->inbox_slots - (e->share_hi - e->share_lo);
	e->x_need = engine_zalloc(sizeof(*e->x_need) * e->n_eng);
	e->share_of = engine_zalloc(e->inbox_slots);
	if (!e->x_need || !e->share_of)
		return locus_error_set(err, ENOMEM, "engine: out of memory");
	for (uint32_t k = 0; k < e->n_eng; k++)
		for (uint32_t i = share_lo(k, e->n_eng, e->inbox_slots);
		     i < share_lo(k + 1, e->n_eng, e->inbox_slots); i++)
			e->share_of[i] = (uint8_t)k;
	return 0;
}

void engine_cross_fini(struct locus_engine *e)
{
	free(e->x_need);
	free(e->share_of);
}

static struct locus_spsc *hand_ring(struct locus_engine *e, uint32_t from, uint32_t to)
{
	return &e->grp->hand[from * e->n_eng + to];
}

static struct locus_spsc *rel_ring(struct locus_engine *e, uint32_t from, uint32_t to)
{
	return &e->grp->rel[from * e->n_eng + to];
}

void engine_promise(struct locus_engine *e, struct engine_client *c, int32_t n)
{
	if (c->owned)
		c->cpl_reserved += (uint32_t)n;
	else
		e->x_need[c->owner] += (uint32_t)n;
}

uint32_t engine_cross_room(struct locus_engine *e, const struct engine_client *c)
{
	uint32_t room = locus_spsc_room(hand_ring(e, e->idx, c->owner));

	return room > e->x_need[c->owner] ? room - e->x_need[c->owner] : 0;
}

int engine_cross_deliver(struct locus_engine *e, uint32_t slot, const struct locus_desc *d)
{
	struct engine_client *c = &e->cl[slot];
	struct cross_hand h = { .slot = slot, .epoch = c->epoch, .d = *d };

	if (d->slot < e->inbox_slots)
		h.span = c->inbox_span[d->slot];
	if (locus_spsc_put(hand_ring(e, e->idx, c->owner), &h) < 0)
		return -LOCUS_EFULL; /* room was checked: not reached */
	engine_count(e, e->c.x_handovers);
	return 0;
}

int engine_cross_release(struct locus_engine *e, struct engine_client *c, uint32_t first)
{
	struct cross_rel r = { .slot = (uint32_t)(c - e->cl), .epoch = c->epoch, .first = first };

	return locus_spsc_put(rel_ring(e, e->idx, e->share_of[first]), &r) < 0 ? -LOCUS_EFULL : 0;
}

/*
 * Hand-overs from engine k, in order. One for an attachment we have not
 * seen yet (the control thread told every engine; k was quicker) waits,
 * with what follows it, for our next iteration; one for a client that left
 * is dropped: its rows sit in a share the sender emptied when it left.
 */
static int take_handovers(struct locus_engine *e, uint32_t k)
{
	struct locus_spsc *q = hand_ring(e, k, e->idx);
	const struct cross_hand *h;
	int work = 0;

	while (work < CROSS_BURST && (h = locus_spsc_peek(q))) {
		struct engine_client *c = &e->cl[h->slot < e->n_slots ? h->slot : 0];
		int32_t ahead = (int32_t)(h->epoch - c->epoch);

		if (ahead > 0)
			break;
		if (ahead == 0 && h->slot < e->n_slots && c->active && c->owned && !c->broken &&
		    h->d.slot < e->inbox_slots && e->share_of[h->d.slot] == k) {
			/* its RELEASE is checked against this, and forwarded to k */
			c->inbox_span[h->d.slot] = (uint16_t)h->span;
			engine_deliver(e, h->slot, &h->d);
		} else {
			engine_count(e, e->c.x_dropped);
		}
		locus_spsc_pop(q);
		work++;
	}
	return work;
}

/* RELEASEs of slots in our share, from the engine owning the client. */
static int take_releases(struct locus_engine *e, uint32_t k)
{
	struct locus_spsc *q = rel_ring(e, k, e->idx);
	struct cross_rel r;
	int work = 0;

	while (work < CROSS_BURST && locus_spsc_get(q, &r) == 0) {
		struct engine_client *c = r.slot < e->n_slots ? &e->cl[r.slot] : NULL;

		work++;
		/* a release of a client that left since: its share was emptied then */
		if (!c || c->epoch != r.epoch || !c->active || r.first >= e->inbox_slots ||
		    e->share_of[r.first] != e->idx || !c->inbox_span[r.first])
			continue;
		engine_inbox_free(e, c, r.first);
	}
	return work;
}

int engine_cross_poll(struct locus_engine *e)
{
	int work = 0;

	for (uint32_t k = 0; k < e->n_eng; k++) {
		if (k == e->idx)
			continue;
		work += take_handovers(e, k);
		work += take_releases(e, k);
	}
	return work;
}
