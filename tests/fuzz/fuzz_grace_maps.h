/* SPDX-License-Identifier: MIT */
/* A few valid GRACE placements the request fuzz targets plan against. */
#ifndef LOCUS_FUZZ_GRACE_MAPS_H
#define LOCUS_FUZZ_GRACE_MAPS_H

#include "fuzz_plan.h"
#include "fuzz_tables.h"

struct fgm_shape {
	uint32_t L, E, nodes, gpn, R;
};

static const struct fgm_shape fgm_shapes[] = {
	{ 2, 8, 1, 4, 1 }, { 2, 8, 2, 2, 2 }, { 4, 16, 4, 1, 3 }, { 1, 64, 2, 4, 7 },
};

#define FGM_N LOCUS_ARRAY_SIZE(fgm_shapes)

/* Planner i for node (built once, kept): NULL if the shape has no such node. */
static inline struct fp_planner *fgm_planner(size_t i, uint32_t node, uint32_t max_tokens)
{
	static struct fp_planner pl[FGM_N][4];
	static int ready[FGM_N][4];
	const struct fgm_shape *s = &fgm_shapes[i % FGM_N];

	i %= FGM_N;
	if (node >= s->nodes || node >= 4)
		return NULL;
	if (!ready[i][node]) {
		size_t len;
		void *p = ft_grace_payload(s->L, s->E, s->nodes, s->gpn, s->R, &len);

		if (!p || fp_planner_init(&pl[i][node], p, len, max_tokens, node))
			abort();
		free(p);
		ready[i][node] = 1;
	}
	return &pl[i][node];
}

#endif /* LOCUS_FUZZ_GRACE_MAPS_H */
