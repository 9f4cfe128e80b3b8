/* SPDX-License-Identifier: MIT */
/* The reference dispatch planner (grace_plan_ref.c). */
#ifndef LOCUS_GRACE_PLAN_REF_H
#define LOCUS_GRACE_PLAN_REF_H

#include "locus_grace_plan.h"

/* locus_grace_plan_batch() written plainly: the same contract and plans. */
int grace_plan_ref_batch(struct locus_grace_plan_state *st, const struct locus_grace_map *m,
			 const struct locus_grace_batch *b, struct locus_grace_plan *p,
			 struct locus_error *err);

#endif /* LOCUS_GRACE_PLAN_REF_H */
