/* SPDX-License-Identifier: MIT */
/*
 * The engine lcore's idle policy: what a poll loop does after a poll that
 * found no work. Pure logic (no EAL, no clock, no syscall): the caller
 * carries the step out (locusd: nothing, rte_pause(), nanosleep()).
 *
 *   empty polls 1 .. spin_polls                      SPIN: poll again at once
 *   the next pause_polls empty polls                 PAUSE: one CPU pause, poll again
 *   every empty poll after those (sleep_max_us > 0)  SLEEP: 1 us, then 2, 4, ...
 *                                                    doubling up to sleep_max_us
 *   ... (sleep_max_us = 0)                           PAUSE for ever: never sleeps
 *
 * Any poll that found work resets it (locus_idle_busy): the next empty poll
 * spins again and the next sleep is 1 us. A request that arrives while the
 * loop sleeps waits for the rest of that sleep, at most sleep_max_us (plus
 * the kernel's wake-up); one that arrives while it spins or pauses waits for
 * one poll.
 */
#ifndef LOCUS_IDLE_H
#define LOCUS_IDLE_H

#include <stdint.h>

#define LOCUS_IDLE_MAX_POLLS    1000000000u /* spin_polls, pause_polls */
#define LOCUS_IDLE_MAX_SLEEP_US 100000u     /* sleep_max_us: 100 ms */

struct locus_idle_params {
	uint32_t spin_polls;   /* empty polls that only spin */
	uint32_t pause_polls;  /* then empty polls that pause the CPU once each */
	uint32_t sleep_max_us; /* then sleep, the bound doubling from 1 us to this; 0: never */
};

enum locus_idle_step {
	LOCUS_IDLE_SPIN  = 0,
	LOCUS_IDLE_PAUSE = 1,
	LOCUS_IDLE_SLEEP = 2,
};

struct locus_idle {
	struct locus_idle_params p;
	uint64_t empty;    /* empty polls in a row, saturating at spin + pause polls + 1 */
	uint32_t sleep_us; /* the last sleep's bound; 0: none since the last work */
};

/* Start s with params p (copied), as after work. */
void locus_idle_init(struct locus_idle *s, const struct locus_idle_params *p);

/* The poll found work: spin again from the next empty poll on. */
static inline void locus_idle_busy(struct locus_idle *s)
{
	s->empty = 0;
	s->sleep_us = 0;
}

/*
 * The poll found nothing: the step to take now. For LOCUS_IDLE_SLEEP,
 * *sleep_us is how long (1 .. sleep_max_us); otherwise it is left alone.
 */
enum locus_idle_step locus_idle_next(struct locus_idle *s, uint32_t *sleep_us);

#endif /* LOCUS_IDLE_H */
