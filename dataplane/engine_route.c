// SPDX-License-Identifier: MIT
/*
 * Signature path: route a prefill client's signature with the ELDR router,
 * copy header + signature into the chosen decoder's inbox, tell both.
 */
#include <string.h>

#include "engine_priv.h"
#include "locus_counters_priv.h"
#include "locus_wire.h"

/* A decoder is routable when attached here and reporting, or reported by a live peer. */
static int decoder_up(struct locus_engine *e, const struct engine_decoder *d, uint64_t now)
{
	if (d->slot >= 0)
		return d->up;
	return d->node >= 0 && now - d->rtsc <= e->load_timeout_tsc &&
	       engine_remote_peer_up(e, (uint32_t)d->node);
}

static uint32_t decoder_load(struct locus_engine *e, const struct engine_decoder *d)
{
	return d->slot >= 0 ? __atomic_load_n(&e->cl[d->slot].ctl->load, __ATOMIC_RELAXED)
			    : d->rload;
}

/* Re-apply what the engine knows of each decoder to the current router. */
void engine_router_refresh(struct locus_engine *e)
{
	struct locus_eldr_router *r = e->router;
	uint64_t now = e->p.now();

	for (uint32_t d = 0; d < e->p.dims.max_decoders; d++)
		e->dec[d].router_slot = -1;
	if (!r)
		return;
	for (uint32_t s = 0; s < locus_eldr_router_n_decoders(r); s++) {
		/* walk the router's slots: decoder ids come from the table */
		for (uint32_t d = 0; d < e->p.dims.max_decoders; d++) {
			if (locus_eldr_router_slot(r, d) != (int)s)
				continue;
			e->dec[d].router_slot = (int32_t)s;
			locus_eldr_router_set_up(r, s, decoder_up(e, &e->dec[d], now));
			locus_eldr_router_set_load(r, s, decoder_load(e, &e->dec[d]));
			break;
		}
	}
}

/*
 * Every HOUSEKEEPING_US: pick up decoder load reports (one-sided stores in
 * the client's load line; load rows for remote decoders: engine_load.c) and take
 * decoders that went silent, or whose node went down, out of routing.
 */
void engine_decoders_housekeeping(struct locus_engine *e, uint64_t now)
{
	for (uint32_t d = 0; d < e->p.dims.max_decoders; d++) {
		struct engine_decoder *dec = &e->dec[d];
		int up, was, mine;

		if (dec->slot >= 0) {
			struct engine_client *c = &e->cl[dec->slot];
			uint64_t seq = __atomic_load_n(&c->ctl->load_seq, __ATOMIC_ACQUIRE);
			uint32_t load = __atomic_load_n(&c->ctl->load, __ATOMIC_RELAXED);

			if (seq != c->load_seq) {
				c->load_seq = seq;
				c->load_tsc = now;
				if (c->owned)
					locus_gauge_set_elem(e->blk, e->c.decoder_load, d, load);
				if (e->router && dec->router_slot >= 0)
					locus_eldr_router_set_load(e->router,
								   (uint32_t)dec->router_slot, load);
			}
			was = dec->up;
			dec->up = (uint8_t)(now - c->load_tsc <= e->load_timeout_tsc);
			up = dec->up;
			mine = c->owned;
		} else if (dec->node >= 0) {
			was = -1; /* remote: re-evaluated every time */
			up = decoder_up(e, dec, now);
			mine = engine_primary(e);
			if (mine)
				locus_gauge_set_elem(e->blk, e->c.decoder_load, d, dec->rload);
		} else {
			continue;
		}
		if (up != was && e->router && dec->router_slot >= 0)
			locus_eldr_router_set_up(e->router, (uint32_t)dec->router_slot, up);
		/* one engine's gauge per decoder: its owner's (a remote one: engine 0's) */
		if (mine)
			locus_gauge_set_elem(e->blk, e->c.decoder_up, d, up);
	}
}

int engine_prefill_desc_check(struct locus_engine *e, const struct engine_client *c,
			      struct locus_desc *d)
{
	if ((c->roles & LOCUS_ROLE_PREFILL) && d->off <= e->stage_size &&
	    d->len <= e->stage_size - d->off && d->off % 8 == 0)
		return 0;
	d->status = -LOCUS_EPROTO;
	engine_count(e, e->c.rej_bad_descriptor);
	return -1;
}

static void decision_into(struct locus_desc *d, const struct locus_eldr_decision *dec)
{
	float sim = dec->similarity;

	d->status = 0;
	d->peer = dec->decoder_id;
	d->count = dec->n_candidates;
	memcpy(&d->aux, &sim, sizeof(sim));
}

/*
 * The signature message to decoder dec: our header, the signature header
 * that was checked (the private copy sh, never the client's bytes again),
 * then the counts (the client's stage for a ROUTE, the engine's sum for a
 * ROUTE_BLOCKS).
 */
static void write_signature(struct locus_engine *e, struct locus_msg_hdr *m,
			    const struct locus_desc *d, uint32_t decoder,
			    const struct locus_eldr_sig_hdr *sh, const uint16_t *counts,
			    size_t sig_len)
{
	/* For signatures the header's ranks name the source node and the decoder. */
	locus_msg_hdr_init(m, LOCUS_MSG_SIGNATURE, (uint32_t)sig_len, d->id, e->p.dims.node_id,
			   decoder, e->seq[0]++);
	memcpy(m + 1, sh, sizeof(*sh));
	memcpy((uint8_t *)(m + 1) + sizeof(*sh), counts, sig_len - sizeof(*sh));
}

/*
 * Send header + signature to the remote decoder's node; the prefill client
 * gets its completion when the RDMA write completed (or failed).
 */
static void route_remote(struct locus_engine *e, uint32_t slot, struct locus_desc *d,
			 const struct locus_eldr_decision *dec,
			 const struct locus_eldr_sig_hdr *sh, const uint16_t *counts,
			 size_t sig_len, uint64_t t0)
{
	struct engine_client *c = &e->cl[slot];
	int32_t node = e->dec[dec->decoder_id].node;
	size_t len = sizeof(struct locus_msg_hdr) + sig_len;
	struct locus_msg_hdr *m;
	int idx;

	if (node < 0 || !engine_remote_peer_up(e, (uint32_t)node)) {
		d->status = -LOCUS_EPEERDOWN;
		engine_count(e, e->c.rej_peer_down);
		goto fail;
	}
	if (len > e->rt->max_msg || !(m = e->rt->alloc(e->rt->ctx, len))) {
		d->status = -LOCUS_EFULL;
		engine_count(e, e->c.rej_inbox_full);
		goto fail;
	}
	decision_into(d, dec);
	idx = engine_pending_get(e, slot, d, t0, e->c.route_ns);
	if (idx < 0) {
		e->rt->free(e->rt->ctx, m);
		d->status = idx;
		engine_count(e, e->c.rej_inbox_full);
		goto fail;
	}
	write_signature(e, m, d, dec->decoder_id, sh, counts, sig_len);
	if (engine_pending_send(e, idx, (uint32_t)node, m, len) == 0) {
		locus_counter_add_elem(e->blk, e->c.routed, dec->decoder_id, 1);
		locus_hist_record(e->blk, e->c.route_band, dec->n_candidates);
	} else {
		engine_count(e, e->c.rej_peer_down);
	}
	engine_pending_arm(e, idx, 0);
	return;
fail:
	engine_complete(e, c, d);
	locus_hist_record(e->blk, e->c.route_ns, (e->p.now() - t0) * 1000000000ull / e->p.tsc_hz);
}

/*
 * Deliver a routed signature (ret: the router's result, dec its decision)
 * to its decoder and post d's one completion (a remote decoder's when its
 * send ends).
 */
static void route_deliver(struct locus_engine *e, uint32_t slot, struct locus_desc *d,
			  const struct locus_eldr_sig_hdr *sh, const uint16_t *counts,
			  size_t sig_len, int ret, const struct locus_eldr_decision *decision,
			  uint64_t t0)
{
	struct engine_client *c = &e->cl[slot], *dc;
	const struct locus_eldr_decision dec = *decision;
	struct locus_msg_hdr *m;
	struct locus_desc out;
	size_t msg_len;
	int32_t dslot;
	int first;

	if (ret < 0) {
		d->status = ret;
		engine_count(e, ret == -LOCUS_ENODEST ? e->c.rej_no_decoder : e->c.rej_bad_signature);
		goto complete;
	}
	dslot = dec.decoder_id < e->p.dims.max_decoders ? e->dec[dec.decoder_id].slot : -1;
	if (dslot < 0) {
		/* a decoder of another node: the inter-node transport carries it */
		route_remote(e, slot, d, &dec, sh, counts, sig_len, t0);
		return;
	}
	dc = &e->cl[dslot];
	msg_len = sizeof(*m) + sig_len;
	if (engine_room(e, dc) == 0 ||
	    (first = engine_inbox_alloc(e, dc, engine_span_for(e, msg_len))) < 0) {
		d->status = -LOCUS_EFULL;
		engine_count(e, e->c.rej_inbox_full);
		goto complete;
	}
	m = (struct locus_msg_hdr *)(dc->buf + locus_clients_inbox_off(e->cv, (uint32_t)first));
	write_signature(e, m, d, dec.decoder_id, sh, counts, sig_len);
	out = (struct locus_desc){
		.op = LOCUS_OP_SIGNATURE_IN,
		.id = d->id,
		.off = locus_clients_inbox_off(e->cv, (uint32_t)first),
		.len = (uint32_t)msg_len,
		.slot = (uint32_t)first,
		.peer = slot,
	};
	engine_deliver(e, (uint32_t)dslot, &out);
	locus_counter_add_elem(e->blk, e->c.routed, dec.decoder_id, 1);
	locus_hist_record(e->blk, e->c.route_band, dec.n_candidates);
	decision_into(d, &dec);
complete:
	engine_route_complete(e, c, d, t0);
}

void engine_route_signature(struct locus_engine *e, uint32_t slot, struct locus_desc *d,
			    const struct locus_eldr_sig_hdr *sh, const uint16_t *counts,
			    size_t sig_len, uint64_t t0)
{
	struct locus_eldr_decision dec;
	int ret = locus_eldr_route_split(e->router, sh, counts, sig_len, &dec);

	route_deliver(e, slot, d, sh, counts, sig_len, ret, &dec, t0);
}

void engine_route_complete(struct locus_engine *e, struct engine_client *c,
			   const struct locus_desc *d, uint64_t t0)
{
	engine_complete(e, c, d);
	locus_hist_record(e->blk, e->c.route_ns,
			  (e->p.now() - t0) * 1000000000ull / e->p.tsc_hz);
}

/*
 * A ROUTE descriptor's checks before the router: prefill role and stage
 * bounds, a table, room for a signature header. 0, or -1 with d->status
 * set and the refusal counted.
 */
static int route_precheck(struct locus_engine *e, const struct engine_client *c,
			  struct locus_desc *d)
{
	engine_count(e, e->c.route_requests);
	if (engine_prefill_desc_check(e, c, d) < 0)
		return -1;
	if (!e->router) {
		d->status = -LOCUS_ESTATE;
		engine_count(e, e->c.rej_no_table);
		return -1;
	}
	if (d->len < sizeof(struct locus_eldr_sig_hdr)) {
		d->status = -LOCUS_ETRUNCATED;
		engine_count(e, e->c.rej_bad_signature);
		return -1;
	}
	return 0;
}

void engine_route_burst(struct locus_engine *e, uint32_t slot, struct locus_desc *d, uint32_t n)
{
	struct engine_client *c = &e->cl[slot];
	struct locus_eldr_sig_hdr sh[LOCUS_ENGINE_BURST];
	const uint16_t *counts[LOCUS_ENGINE_BURST];
	struct locus_eldr_decision dec[LOCUS_ENGINE_BURST];
	size_t lens[LOCUS_ENGINE_BURST];
	int rc[LOCUS_ENGINE_BURST];
	int8_t ok[LOCUS_ENGINE_BURST];
	uint64_t t0 = e->p.now();
	uint32_t m = 0, j = 0;

	n = LOCUS_MIN(n, (uint32_t)LOCUS_ENGINE_BURST);
	/*
	 * The client may rewrite its stage at any time: each header is checked
	 * and used from a private copy; the counts are read in place (any value
	 * is valid) when scored and when copied to the decoder.
	 */
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *sig;

		ok[i] = route_precheck(e, c, &d[i]) == 0;
		if (!ok[i])
			continue;
		sig = c->buf + d[i].off;
		memcpy(&sh[m], sig, sizeof(sh[m]));
		counts[m] = (const uint16_t *)(sig + sizeof(sh[m]));
		lens[m++] = d[i].len;
	}
	if (m)
		locus_eldr_route_split_batch(e->router, sh, counts, lens, m, dec, rc);
	/* completions in submission order */
	for (uint32_t i = 0; i < n; i++) {
		if (!ok[i]) {
			engine_route_complete(e, c, &d[i], t0);
			continue;
		}
		route_deliver(e, slot, &d[i], &sh[j], counts[j], lens[j], rc[j], &dec[j], t0);
		j++;
	}
}
