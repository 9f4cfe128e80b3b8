/* SPDX-License-Identifier: MIT */
/*
 * A relay between the engine's lcore and a network lcore: with two worker
 * lcores, one polls the client rings (the engine), the other the completion
 * queues and inboxes (the transport). The relay is a transport to the engine
 * (struct locus_engine_remote) and a sink to the real transport below it;
 * between the two sides there are only single-producer single-consumer
 * rings, no lock, no allocation after create.
 *
 *   engine lcore: send / send_sg / write_load  -> tx ring  -> net lcore
 *   net lcore:    send ends (cookie, status)   -> done ring -> engine lcore
 *   net lcore:    arrivals, copied into a buffer of the transport's pool
 *                 (the inbox slot goes back at once) -> rx ring -> engine
 *
 * Every send the engine hands over ends exactly once through the done ring,
 * also when the transport below refuses it (then with its error). An
 * arrival that finds no buffer or a full rx ring is left to the transport
 * (-LOCUS_EFULL: it holds the message in its inbox and hands it again). The
 * engine side keeps arrivals a local receiver has no room for, per node and
 * in order, and hands them again on later polls.
 *
 * Pure C (no EAL, no verbs): the transport below is any struct
 * locus_engine_remote whose alloc/free may be called from both lcores.
 */
#ifndef LOCUS_RELAY_H
#define LOCUS_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "locus_engine.h"

/* Where a transport reports arrivals and the ends of sends. */
struct locus_engine_sink {
	/* Like locus_engine_remote_recv(): 0, -LOCUS_EFULL (hold and hand again) or refusal. */
	int (*recv)(void *ctx, uint32_t node, const void *msg, size_t len);
	/* Like locus_engine_remote_done(): exactly once per accepted send. */
	void (*done)(void *ctx, uint64_t cookie, int status);
	void *ctx;
};

/* The engine itself as a sink (one lcore does both sides). */
void locus_engine_sink_of(struct locus_engine *e, struct locus_engine_sink *out);

struct locus_relay;

struct locus_relay_stats {
	uint64_t tx, tx_refused;        /* sends passed down; refused below (ended with error) */
	uint64_t rx, rx_held;           /* arrivals relayed; handed again later (receiver full) */
	uint64_t rx_no_room;            /* arrivals left to the transport: no buffer or ring room */
	uint64_t rx_refused;            /* arrivals longer than any message a peer sends, or
					 * from more nodes than a node talks with */
	uint64_t done;
};

/*
 * down: the transport below (its alloc/free are called from both lcores).
 * ring: entries per ring, a power of two >= 16. Returns 0, -EINVAL, -ENOMEM.
 */
int locus_relay_create(const struct locus_engine_remote *down, uint32_t ring,
		       struct locus_relay **out);

void locus_relay_destroy(struct locus_relay *r);

/* The transport to give the engine. */
const struct locus_engine_remote *locus_relay_transport(struct locus_relay *r);

/* The sink to give the transport below. */
const struct locus_engine_sink *locus_relay_sink(struct locus_relay *r);

/* Where the engine side hands arrivals and send ends (before either lcore polls). */
void locus_relay_attach(struct locus_relay *r, const struct locus_engine_sink *engine);

/* Engine lcore, every iteration: send ends, then arrivals. Returns work done. */
int locus_relay_poll_engine(struct locus_relay *r);

/* Net lcore, every iteration: pass the engine's sends down. Returns work done. */
int locus_relay_poll_net(struct locus_relay *r);

/* Entries in the rings or held on the engine side (drain before stopping). */
uint32_t locus_relay_inflight(const struct locus_relay *r);

/* Engine lcore's view (plain reads of counters each side writes). */
void locus_relay_stats(const struct locus_relay *r, struct locus_relay_stats *out);

/*
 * Several engine lcores over one network lcore: a relay per engine, and a
 * mux as the one sink of the transport below. An arrival goes to the relay
 * a pick function names (the engine owning its receiver; without one, or
 * out of range, relay 0: any engine delivers to a client of any engine,
 * handing it over); a send's end goes back to the relay that passed the
 * send down: relay i
 * puts i in the top byte of each cookie on the way down and takes it off
 * on the way up, so the cookies an engine sends must leave that byte 0
 * (a send with a cookie above LOCUS_RELAY_COOKIE_MASK is refused,
 * -LOCUS_ERANGE). The network lcore polls every relay's net side.
 */
#define LOCUS_RELAY_COOKIE_BITS 56
#define LOCUS_RELAY_COOKIE_MASK ((1ull << LOCUS_RELAY_COOKIE_BITS) - 1)
#define LOCUS_RELAY_MUX_MAX     16u

struct locus_relay_mux;

/* relays[n] (1..LOCUS_RELAY_MUX_MAX), none in a mux yet. 0, -EINVAL, -ENOMEM. */
int locus_relay_mux_create(struct locus_relay *const *relays, uint32_t n,
			   struct locus_relay_mux **out);

/*
 * Which relay an arrival goes to: pick(ctx, msg, len), called on the net
 * lcore with the transport's bytes (unchecked: it must read within len and
 * may answer anything; >= n means relay 0). Set before the net lcore polls.
 */
void locus_relay_mux_set_pick(struct locus_relay_mux *m,
			      uint32_t (*pick)(void *ctx, const void *msg, size_t len), void *ctx);

/* The sink to give the transport below (instead of each relay's). */
const struct locus_engine_sink *locus_relay_mux_sink(struct locus_relay_mux *m);

/* After the relays' transport is gone (it ends what it held through the mux). */
void locus_relay_mux_destroy(struct locus_relay_mux *m);

#endif /* LOCUS_RELAY_H */
