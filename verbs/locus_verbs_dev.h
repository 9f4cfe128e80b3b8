/* SPDX-License-Identifier: MIT */
/*
 * The life of an endpoint's RDMA device, handed between the control thread
 * (which sees the device go, frees its verbs objects, probes for it and
 * reopens it) and the data thread (which polls its completion queue),
 * without a lock: one word only control writes,
 *
 *   bits 0..7 state | bits 32..63 epoch
 *
 * and one word only the data side writes, its acknowledgement: the last
 * control word it read while it touched nothing of the device. This is a
 * quiescent-state handshake (as the tables' QSBR readers do it): once the
 * data side acked a word that forbids the device, every call it made into
 * the device before has returned (its release store comes after them in
 * its program order, control's acquire load of the ack after that), and it
 * makes no new one until it reads a word that allows the device again.
 *
 *   LIVE       the device is open: the data side polls its CQ and posts on
 *              the QPs of the connections it holds (locus_verbs_link.h)
 *   LOST       control learnt that the device is gone (rdma_cm's device
 *              removal, a fatal async event, a verbs call failing with
 *              ENODEV / EIO that a query of the device confirms) and closes
 *              every connection: the data side still polls the CQ, to drain
 *              their flushes (bounded: DRAIN_NS), fails what was posted,
 *              reports each connection down and lets go of it
 *   GONE       no connection is left (every QP destroyed): the data side
 *              must stop polling the CQ and ack; control waits for the ack
 *   DEAD       acked: control freed the CQ, the MRs (the caller's too), the
 *              PD and the context, and probes for the device by name
 *   REOPENING  the device is back: control is opening the context, PD, CQ
 *              and registering the memory again (the caller's too)
 *
 * Transitions (all by control; the data side only acks):
 *   LIVE -> LOST                 locus_verbs_dev_lose
 *   LOST -> GONE (epoch + 1)     locus_verbs_dev_park   (no connection left)
 *   GONE -> DEAD                 locus_verbs_dev_bury   (only once the data side acked)
 *   DEAD -> REOPENING            locus_verbs_dev_reopen (the device is listed again)
 *   REOPENING -> DEAD            locus_verbs_dev_bury   (the reopening failed)
 *   REOPENING -> LIVE (epoch+1)  locus_verbs_dev_revive (everything written before is
 *                                the data side's to read once it reads LIVE)
 *
 * The epoch makes each GONE a word of its own: an ack of an earlier death
 * never passes for this one. Pure (no verbs): host-tested with two threads.
 */
#ifndef LOCUS_VERBS_DEV_H
#define LOCUS_VERBS_DEV_H

#include <stdbool.h>
#include <stdint.h>

#include "locus_common.h"

enum locus_verbs_dev_state {
	LOCUS_DEV_LIVE = 0,
	LOCUS_DEV_LOST,
	LOCUS_DEV_GONE,
	LOCUS_DEV_DEAD,
	LOCUS_DEV_REOPENING,
};

struct locus_verbs_dev {
	uint64_t w;     /* control's */
	uint64_t ack;   /* the data side's: the last forbidding word it read */
} __locus_cache_aligned;

static inline uint64_t locus_verbs_dev_pack(unsigned state, uint32_t epoch)
{
	return (uint64_t)(state & 0xff) | (uint64_t)epoch << 32;
}

static inline unsigned locus_verbs_dev_state_of(uint64_t w)
{
	return (unsigned)(w & 0xff);
}

static inline uint32_t locus_verbs_dev_epoch_of(uint64_t w)
{
	return (uint32_t)(w >> 32);
}

/* Control's read of its own word (it is the only writer: relaxed). */
static inline unsigned locus_verbs_dev_state(const struct locus_verbs_dev *d)
{
	return locus_verbs_dev_state_of(__atomic_load_n(&d->w, __ATOMIC_RELAXED));
}

/* Control: move from exactly state from to state to (epoch + bump); 1, or 0 when not in from. */
static inline int locus_verbs_dev_move(struct locus_verbs_dev *d, unsigned from, unsigned to,
				       uint32_t bump)
{
	uint64_t w = __atomic_load_n(&d->w, __ATOMIC_RELAXED);

	if (locus_verbs_dev_state_of(w) != from)
		return 0;
	/* release: what control wrote before is the data side's after its acquire */
	__atomic_store_n(&d->w, locus_verbs_dev_pack(to, locus_verbs_dev_epoch_of(w) + bump),
			 __ATOMIC_RELEASE);
	return 1;
}

/* Control: the device is gone (1), or was known to be already (0). */
static inline int locus_verbs_dev_lose(struct locus_verbs_dev *d)
{
	return locus_verbs_dev_move(d, LOCUS_DEV_LIVE, LOCUS_DEV_LOST, 0);
}

/* Control: no connection is left on the lost device: ask the data side to let go of it. */
static inline int locus_verbs_dev_park(struct locus_verbs_dev *d)
{
	return locus_verbs_dev_move(d, LOCUS_DEV_LOST, LOCUS_DEV_GONE, 1);
}

/*
 * Control: has the data side let go of the device (it acked the GONE word
 * now in place)? Only then may the device's objects be freed.
 */
static inline bool locus_verbs_dev_parked(const struct locus_verbs_dev *d)
{
	uint64_t w = __atomic_load_n(&d->w, __ATOMIC_RELAXED);

	return locus_verbs_dev_state_of(w) == LOCUS_DEV_GONE &&
	       __atomic_load_n(&d->ack, __ATOMIC_ACQUIRE) == w;
}

/*
 * Control: the device's objects are freed (GONE, once parked) or its
 * reopening failed (REOPENING). 1, or 0 when neither (GONE not yet acked).
 */
static inline int locus_verbs_dev_bury(struct locus_verbs_dev *d)
{
	if (locus_verbs_dev_state(d) == LOCUS_DEV_GONE)
		return locus_verbs_dev_parked(d) &&
		       locus_verbs_dev_move(d, LOCUS_DEV_GONE, LOCUS_DEV_DEAD, 0);
	return locus_verbs_dev_move(d, LOCUS_DEV_REOPENING, LOCUS_DEV_DEAD, 0);
}

/* Control: the device is listed again: reopening it. */
static inline int locus_verbs_dev_reopen(struct locus_verbs_dev *d)
{
	return locus_verbs_dev_move(d, LOCUS_DEV_DEAD, LOCUS_DEV_REOPENING, 0);
}

/* Control: the reopened device is the data side's again (a new epoch). */
static inline int locus_verbs_dev_revive(struct locus_verbs_dev *d)
{
	return locus_verbs_dev_move(d, LOCUS_DEV_REOPENING, LOCUS_DEV_LIVE, 1);
}

/*
 * Data, before it touches the device (every poll): true while LIVE or LOST
 * (what control wrote before that word is visible: acquire). Otherwise it
 * acks the word it read, once per word, and must touch nothing of the
 * device until a later call returns true. One relaxed-cheap acquire load
 * per poll; the ack is stored only when the word changed.
 */
static inline bool locus_verbs_dev_use(struct locus_verbs_dev *d)
{
	uint64_t w = __atomic_load_n(&d->w, __ATOMIC_ACQUIRE);
	unsigned s = locus_verbs_dev_state_of(w);

	if (likely(s == LOCUS_DEV_LIVE || s == LOCUS_DEV_LOST))
		return true;
	/* the data side is the only writer of ack: its own read needs no ordering */
	if (__atomic_load_n(&d->ack, __ATOMIC_RELAXED) != w)
		__atomic_store_n(&d->ack, w, __ATOMIC_RELEASE);
	return false;
}

#endif /* LOCUS_VERBS_DEV_H */
