// SPDX-License-Identifier: MIT
/* The idle policy's state machine (locus_idle.h). */
#include "locus_idle.h"

void locus_idle_init(struct locus_idle *s, const struct locus_idle_params *p)
{
	s->p = *p;
	locus_idle_busy(s);
}

enum locus_idle_step locus_idle_next(struct locus_idle *s, uint32_t *sleep_us)
{
	uint64_t spin = s->p.spin_polls, pause = spin + s->p.pause_polls;

	if (s->empty <= pause)
		s->empty++; /* saturates at pause + 1: every later poll is past the pauses */
	if (s->empty <= spin)
		return LOCUS_IDLE_SPIN;
	if (s->empty <= pause || !s->p.sleep_max_us)
		return LOCUS_IDLE_PAUSE;
	/* past the pauses: each sleep twice the last, up to the bound */
	if (!s->sleep_us)
		s->sleep_us = 1;
	else if (s->sleep_us < s->p.sleep_max_us)
		s->sleep_us = s->sleep_us > s->p.sleep_max_us / 2 ? s->p.sleep_max_us
								  : s->sleep_us * 2;
	*sleep_us = s->sleep_us;
	return LOCUS_IDLE_SLEEP;
}
