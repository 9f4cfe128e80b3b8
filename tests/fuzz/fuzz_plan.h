/* SPDX-License-Identifier: MIT */
/*
 * Contract checks shared by the fuzz targets that build a GRACE planner map
 * or plan a batch: what locus_grace_plan.h promises about a map built from a
 * validated payload and about a plan (valid ranks, tier order, every
 * (token, k) slot served exactly once by a rank that holds its expert, and
 * the nearest copy preferred). A broken promise aborts (FUZZ_CHECK).
 */
#ifndef LOCUS_FUZZ_PLAN_H
#define LOCUS_FUZZ_PLAN_H

#include "locus_grace_plan.h"

/* The map against the validated payload it was built from. */
void fp_check_map(const struct locus_grace_map *m, const struct locus_grace_view *v);

/* A plan returned by locus_grace_plan_batch (nd = its return value). */
void fp_check_plan(const struct locus_grace_map *m, const struct locus_grace_batch *b,
		   const struct locus_grace_plan *p, int nd);

/*
 * A map, a plan state and a plan for a valid payload, all malloc'd, or
 * nonzero with nothing allocated. fp_free releases it.
 */
struct fp_planner {
	struct locus_grace_map *map;
	struct locus_grace_plan_state *st;
	size_t st_len;
	struct locus_grace_plan plan;
	void *plan_mem;
};

int fp_planner_init(struct fp_planner *pl, const void *payload, size_t len, uint32_t max_tokens,
		    uint32_t node);
void fp_planner_free(struct fp_planner *pl);

#endif /* LOCUS_FUZZ_PLAN_H */
