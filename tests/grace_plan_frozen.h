/* SPDX-License-Identifier: MIT */
/* The dispatch planner frozen as of 6d5f9e0 (grace_plan_frozen.c). */
#ifndef LOCUS_GRACE_PLAN_FROZEN_H
#define LOCUS_GRACE_PLAN_FROZEN_H

#include "locus_grace_plan.h"

/*
 * locus_grace_plan_batch() as it was at 6d5f9e0: the same contract, the
 * plans and SWRR state the planner must keep. Not reentrant (its scratch
 * is static): one call at a time.
 */
int grace_plan_frozen_batch(struct locus_grace_plan_state *st, const struct locus_grace_map *m,
			    const struct locus_grace_batch *b, struct locus_grace_plan *p,
			    struct locus_error *err);

#endif /* LOCUS_GRACE_PLAN_FROZEN_H */
