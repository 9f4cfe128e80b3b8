/* SPDX-License-Identifier: MIT */
/*
 * Hand-over of one peer connection between the control thread (rdma_cm:
 * QP create / destroy, accept, dial, back-off) and the data thread (post,
 * CQ poll, credits, inbox), without a lock: one 64-bit word per peer,
 *
 *   bits 0..7 state | bits 16..31 connection generation | bits 32..63 reason
 *
 * changed only by compare-and-swap or by the side that alone may leave the
 * state it is in, always with release ordering, read with acquire. What a
 * side wrote before a release store is visible to the other after its
 * acquire load of the new state, so each state names who owns the
 * connection's memory (QP pointer, ring counters, send records, held
 * messages):
 *
 *   IDLE      control owns everything (no connection, or one being built;
 *             the data side touches nothing of the peer)
 *   ARMED     the QP exists, receives are posted (the active side's hello
 *             too): the data side waits for the peer's hello and posts
 *             nothing else (the remote inbox is not known yet)
 *   UP        the data side posts, polls, returns credits
 *   FAILING   the data side found an error (completion error, ring
 *             violation, failed post): it stopped posting and asks control
 *             to flush the QP
 *   CLOSING   control moved the QP to the error state (every outstanding
 *             work request completes, flushed): the data side drains, fails
 *             what did not complete exactly once, drops held messages, acks
 *   QUIESCED  the data side is done with this generation: control may
 *             destroy the QP and go back to IDLE
 *
 * Transitions (C: control, D: data):
 *   C  IDLE -> ARMED (gen + 1)          link_arm
 *   D  ARMED -> UP                      link_promote (the peer's hello checked out)
 *   D  ARMED | UP -> FAILING (reason)   link_fail
 *   C  ARMED | UP | FAILING -> CLOSING  link_close (a FAILING reason is kept)
 *   C  IDLE -> CLOSING (gen + 1)        link_close: an attempt that failed before
 *                                       it armed anything, so that the data side
 *                                       reports every attempt's end the same way
 *   D  CLOSING -> QUIESCED              link_quiesce
 *   C  QUIESCED -> IDLE                 link_reap
 *
 * Pure (no verbs): host-tested with two threads hammering one word.
 */
#ifndef LOCUS_VERBS_LINK_H
#define LOCUS_VERBS_LINK_H

#include <stdint.h>

#include "locus_common.h"
#include "locus_err.h"

enum locus_verbs_link_state {
	LOCUS_LINK_IDLE = 0,
	LOCUS_LINK_ARMED,
	LOCUS_LINK_UP,
	LOCUS_LINK_FAILING,
	LOCUS_LINK_CLOSING,
	LOCUS_LINK_QUIESCED,
};

struct locus_verbs_link {
	uint64_t w;
} __locus_cache_aligned;

static inline uint64_t locus_verbs_link_pack(unsigned state, uint16_t gen, int32_t reason)
{
	return (uint64_t)(state & 0xff) | (uint64_t)gen << 16 | (uint64_t)(uint32_t)reason << 32;
}

static inline unsigned locus_verbs_link_state_of(uint64_t w)
{
	return (unsigned)(w & 0xff);
}

static inline uint16_t locus_verbs_link_gen_of(uint64_t w)
{
	return (uint16_t)(w >> 16);
}

static inline int32_t locus_verbs_link_reason_of(uint64_t w)
{
	return (int32_t)(uint32_t)(w >> 32);
}

static inline uint64_t locus_verbs_link_load(const struct locus_verbs_link *l)
{
	return __atomic_load_n(&l->w, __ATOMIC_ACQUIRE);
}

/* CAS from exactly *w to nw; on failure *w holds what is there now. */
static inline int locus_verbs_link_cas(struct locus_verbs_link *l, uint64_t *w, uint64_t nw)
{
	return __atomic_compare_exchange_n(&l->w, w, nw, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Generation the next link_arm (or failed-attempt link_close) will use. */
static inline uint16_t locus_verbs_link_next_gen(const struct locus_verbs_link *l)
{
	return (uint16_t)(locus_verbs_link_gen_of(locus_verbs_link_load(l)) + 1);
}

/*
 * Control: publish a connection whose QP exists and whose receives are
 * posted (everything written before is the data side's from here on).
 * Returns the new generation, or -LOCUS_ESTATE unless IDLE.
 */
static inline int locus_verbs_link_arm(struct locus_verbs_link *l)
{
	uint64_t w = locus_verbs_link_load(l);
	uint16_t gen = (uint16_t)(locus_verbs_link_gen_of(w) + 1);

	if (locus_verbs_link_state_of(w) != LOCUS_LINK_IDLE)
		return -LOCUS_ESTATE;
	/* only control leaves IDLE: a plain release store */
	__atomic_store_n(&l->w, locus_verbs_link_pack(LOCUS_LINK_ARMED, gen, 0), __ATOMIC_RELEASE);
	return gen;
}

/*
 * Data: the peer's hello checked out, its inbox is known: the connection
 * is up (only the data side leaves ARMED for UP; control learns it from
 * the word). CAS, because control may be closing it. Returns 1 if the link
 * is UP now, 0 otherwise.
 */
static inline int locus_verbs_link_promote(struct locus_verbs_link *l, uint16_t gen)
{
	uint64_t w = locus_verbs_link_pack(LOCUS_LINK_ARMED, gen, 0);

	if (locus_verbs_link_cas(l, &w, locus_verbs_link_pack(LOCUS_LINK_UP, gen, 0)))
		return 1;
	return locus_verbs_link_state_of(w) == LOCUS_LINK_UP && locus_verbs_link_gen_of(w) == gen;
}

/*
 * Data: the connection of gen failed (reason < 0). Returns the word now in
 * place: FAILING with our reason, or the CLOSING control set meanwhile.
 */
static inline uint64_t locus_verbs_link_fail(struct locus_verbs_link *l, uint16_t gen,
					     int32_t reason)
{
	uint64_t w = locus_verbs_link_load(l);

	for (;;) {
		unsigned st = locus_verbs_link_state_of(w);
		uint64_t nw = locus_verbs_link_pack(LOCUS_LINK_FAILING, gen, reason);

		if (locus_verbs_link_gen_of(w) != gen ||
		    (st != LOCUS_LINK_ARMED && st != LOCUS_LINK_UP))
			return w;
		if (locus_verbs_link_cas(l, &w, nw))
			return nw;
	}
}

/*
 * Control: ask the data side to let go of the connection (after moving its
 * QP to the error state, so that everything outstanding completes). From
 * IDLE this reports a failed attempt under a new generation. A FAILING
 * link keeps the data side's reason, unless that is -LOCUS_EPEERDOWN: the
 * data side saw only flushes (the kernel moves a QP to the error state on
 * a reject or a disconnect before control reads the event), so control's
 * reason is the better one. Returns the word now in place
 * (CLOSING, or QUIESCED / CLOSING already).
 */
static inline uint64_t locus_verbs_link_close(struct locus_verbs_link *l, int32_t reason)
{
	uint64_t w = locus_verbs_link_load(l);

	for (;;) {
		unsigned st = locus_verbs_link_state_of(w);
		uint16_t gen = locus_verbs_link_gen_of(w);
		uint64_t nw;

		switch (st) {
		case LOCUS_LINK_IDLE:
			nw = locus_verbs_link_pack(LOCUS_LINK_CLOSING, (uint16_t)(gen + 1), reason);
			break;
		case LOCUS_LINK_ARMED:
		case LOCUS_LINK_UP:
			nw = locus_verbs_link_pack(LOCUS_LINK_CLOSING, gen, reason);
			break;
		case LOCUS_LINK_FAILING:
			/* a flush only says the QP is in error: control knows why */
			nw = locus_verbs_link_pack(LOCUS_LINK_CLOSING, gen,
						   locus_verbs_link_reason_of(w) == -LOCUS_EPEERDOWN
						   ? reason : locus_verbs_link_reason_of(w));
			break;
		default:
			return w;
		}
		if (locus_verbs_link_cas(l, &w, nw))
			return nw;
	}
}

/* Data: done with the closing connection of gen (only data leaves CLOSING). */
static inline void locus_verbs_link_quiesce(struct locus_verbs_link *l, uint64_t closing)
{
	__atomic_store_n(&l->w,
			 locus_verbs_link_pack(LOCUS_LINK_QUIESCED, locus_verbs_link_gen_of(closing),
					       locus_verbs_link_reason_of(closing)),
			 __ATOMIC_RELEASE);
}

/*
 * Control: take a quiesced connection back (the data side no longer touches
 * it: its QP may be destroyed). Returns 1 and *reason, or 0 when the link is
 * not QUIESCED (nothing changed).
 */
static inline int locus_verbs_link_reap(struct locus_verbs_link *l, int32_t *reason)
{
	uint64_t w = locus_verbs_link_load(l);

	if (locus_verbs_link_state_of(w) != LOCUS_LINK_QUIESCED)
		return 0;
	*reason = locus_verbs_link_reason_of(w);
	/* only control leaves QUIESCED */
	__atomic_store_n(&l->w, locus_verbs_link_pack(LOCUS_LINK_IDLE, locus_verbs_link_gen_of(w), 0),
			 __ATOMIC_RELEASE);
	return 1;
}

#endif /* LOCUS_VERBS_LINK_H */
