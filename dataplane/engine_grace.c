// SPDX-License-Identifier: MIT
/*
 * The engine's GRACE placement: what the GRACE table channel carries (one
 * table for every rank, or a placement set: one table per EP group,
 * locus_graceset.h), validated on the reader before a switch and built into
 * planner maps, one per group, with a rank -> group index.
 *
 * Two placement buffers: a new table is built into the one not in use and
 * becomes current with one pointer store, so a rank's dispatch sees either
 * the old placement whole or the new one whole, never a mix of groups. Both
 * run on the engine lcore (the reader is the engine), so no dispatch runs
 * during a switch. All memory is allocated at engine creation for the
 * largest placement the dims allow; a table that needs more is refused.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_priv.h"
#include "locus_counters_priv.h"
#include "locus_err_priv.h"
#include "locus_graceset.h"
#include "locus_tblfile.h"

/*
 * Memory bounds. One table: the largest map the dims allow. A set of G
 * groups: each group's table has 1 + R_g <= n_ranks_g copy slots per
 * expert (the set's rule), so the slots of all groups sum to at most N;
 * each group adds a map header, per-expert copy counts, predicted loads and
 * alignment.
 */
static size_t set_bound(const struct locus_engine *e, const struct locus_grace_dims *one,
			size_t (*size_of)(const struct locus_grace_dims *))
{
	struct locus_grace_dims d = *one;
	size_t per_group, slots;

	d.max_replicas = 0;
	per_group = size_of(&d) + 4 * LOCUS_CACHE_LINE;
	slots = (size_t)one->n_layers * one->n_experts * e->n_ranks * 2 * sizeof(uint16_t);
	if (size_of == locus_grace_plan_state_size)
		slots = (size_t)one->n_layers * one->n_experts * e->n_ranks * sizeof(int32_t);
	return e->pl_max_groups * per_group + slots;
}

int engine_grace_alloc(struct locus_engine *e, const struct locus_grace_dims *max_dims,
		       struct locus_error *err)
{
	size_t one_map = locus_grace_map_size(max_dims);
	size_t one_st = locus_grace_plan_state_size(max_dims);

	if (!one_map || !one_st)
		return locus_error_set(err, EINVAL, "engine: table bounds out of range");
	e->pl_max_groups = LOCUS_MIN(e->n_ranks, LOCUS_GRACESET_MAX_GROUPS);
	e->pl_map_len = LOCUS_MAX(one_map, set_bound(e, max_dims, locus_grace_map_size));
	e->pl_st_len = LOCUS_MAX(one_st, set_bound(e, max_dims, locus_grace_plan_state_size));
	for (int i = 0; i < 2; i++) {
		struct engine_placement *pl = &e->pl[i];

		pl->map_mem = engine_zalloc(e->pl_map_len);
		pl->st_mem = engine_zalloc(e->pl_st_len);
		pl->group_of_rank = engine_zalloc(sizeof(*pl->group_of_rank) * e->n_ranks);
		pl->map = engine_zalloc(sizeof(*pl->map) * e->pl_max_groups);
		pl->st = engine_zalloc(sizeof(*pl->st) * e->pl_max_groups);
		if (!pl->map_mem || !pl->st_mem || !pl->group_of_rank || !pl->map || !pl->st)
			return locus_error_set(err, ENOMEM, "engine: out of memory");
	}
	return 0;
}

void engine_grace_free(struct locus_engine *e)
{
	for (int i = 0; i < 2; i++) {
		struct engine_placement *pl = &e->pl[i];

		free(pl->map_mem);
		free(pl->st_mem);
		free(pl->group_of_rank);
		free(pl->map);
		free(pl->st);
	}
}

/* Map and plan-state bytes of one table, each rounded to a cache line. */
static void table_bytes(const struct locus_grace_dims *d, size_t *map, size_t *st)
{
	*map = LOCUS_ALIGN_UP(locus_grace_map_size(d), (size_t)LOCUS_CACHE_LINE);
	*st = LOCUS_ALIGN_UP(locus_grace_plan_state_size(d), (size_t)LOCUS_CACHE_LINE);
}

/* One table's dims against this data plane's. */
static int dims_fit(const struct locus_engine *e, const struct locus_grace_dims *d,
		    struct locus_error *err)
{
	if (d->n_nodes != e->p.dims.n_nodes || d->gpus_per_node != e->p.dims.gpus_per_node)
		return locus_error_set(err, LOCUS_ERANGE,
				       "GRACE table is for %u nodes x %u GPUs, the cluster has %u x %u",
				       d->n_nodes, d->gpus_per_node, e->p.dims.n_nodes,
				       e->p.dims.gpus_per_node);
	if (d->n_layers > e->p.dims.max_layers || d->n_experts > e->p.dims.max_experts)
		return locus_error_set(err, LOCUS_ERANGE,
				       "GRACE table %ux%u exceeds this data plane's %ux%u",
				       d->n_layers, d->n_experts, e->p.dims.max_layers,
				       e->p.dims.max_experts);
	return 0;
}

static int validate_one(struct locus_engine *e, const void *buf, size_t len,
			struct locus_error *err)
{
	struct locus_grace_view v;
	const void *pl;
	size_t plen, map, st;
	int ret;

	ret = locus_grace_blob_check(buf, len, &pl, &plen, err);
	if (ret < 0)
		return ret;
	locus_grace_view_init(&v, (void *)(uintptr_t)pl, plen, NULL);
	ret = dims_fit(e, v.dims, err);
	if (ret < 0)
		return ret;
	table_bytes(v.dims, &map, &st);
	if (map > e->pl_map_len || st > e->pl_st_len)
		return locus_error_set(err, LOCUS_ERANGE, "GRACE map would not fit");
	return 0;
}

/* A set refused: counted by problem when count (an engine's own check), the code returned. */
static int refuse_set(struct locus_engine *e, enum locus_graceset_problem why, int ret, int count)
{
	if (count && why > LOCUS_GRACESET_OK && why < LOCUS_GRACESET_N_PROBLEMS)
		locus_counter_add_elem(e->blk, e->c.grace_set_refused, (uint32_t)why - 1, 1);
	return ret;
}

static int validate_set(struct locus_engine *e, const void *buf, size_t len,
			struct locus_error *err, int count)
{
	struct locus_graceset_group g[LOCUS_GRACESET_MAX_GROUPS];
	enum locus_graceset_problem why = LOCUS_GRACESET_MALFORMED;
	const struct locus_graceset_hdr *h;
	size_t map_sum = 0, st_sum = 0;
	const void *pl;
	int ret;

	ret = locus_graceset_blob_check(buf, len, &pl, NULL, g, &why, err);
	if (ret < 0)
		return refuse_set(e, why, ret, count);
	h = pl;
	if (h->n_nodes != e->p.dims.n_nodes || h->gpus_per_node != e->p.dims.gpus_per_node ||
	    h->n_layers > e->p.dims.max_layers || h->n_experts > e->p.dims.max_experts)
		return refuse_set(e, LOCUS_GRACESET_DIMS,
				  locus_error_set(err, LOCUS_ERANGE,
						  "placement set is %u layers x %u experts on %u x "
						  "%u GPUs; this node runs %u x %u GPUs, at most %u "
						  "layers x %u experts", h->n_layers, h->n_experts,
						  h->n_nodes, h->gpus_per_node, e->p.dims.n_nodes,
						  e->p.dims.gpus_per_node, e->p.dims.max_layers,
						  e->p.dims.max_experts), count);
	if (h->n_groups > e->pl_max_groups)
		return refuse_set(e, LOCUS_GRACESET_DIMS,
				  locus_error_set(err, LOCUS_ERANGE,
						  "placement set of %u groups, this node holds %u",
						  h->n_groups, e->pl_max_groups), count);
	for (uint32_t i = 0; i < h->n_groups; i++) {
		size_t m, s;

		table_bytes(g[i].payload, &m, &s);
		map_sum += m;
		st_sum += s;
	}
	if (map_sum > e->pl_map_len || st_sum > e->pl_st_len)
		return refuse_set(e, LOCUS_GRACESET_DIMS,
				  locus_error_set(err, LOCUS_ERANGE,
						  "placement set needs %zu + %zu bytes of maps, this "
						  "node holds %zu + %zu", map_sum, st_sum,
						  e->pl_map_len, e->pl_st_len), count);
	return 0;
}

int engine_grace_validate(const void *buf, size_t len, void *arg, struct locus_error *err)
{
	struct locus_engine *e = arg;
	const struct locus_tbl_hdr *h = buf;
	int ret;

	ret = locus_tbl_check(buf, len, 0, NULL, NULL, err);
	if (ret < 0)
		return ret;
	if (e->p.cluster_placements && !h->generation &&
	    (h->kind == LOCUS_TBL_GRACE || h->kind == LOCUS_TBL_GRACE_SET))
		return locus_error_set(err, LOCUS_ESTATE, "this node follows the cluster's "
				       "placement through etcd: change it with locusctl push "
				       "--cluster, which every rank acknowledges first");
	if (h->kind == LOCUS_TBL_GRACE)
		return validate_one(e, buf, len, err);
	if (h->kind == LOCUS_TBL_GRACE_SET)
		return validate_set(e, buf, len, err, 1);
	return locus_error_set(err, LOCUS_ERANGE, "table kind %s on the GRACE channel",
			       locus_tbl_kind_name(h->kind));
}

int locus_engine_grace_check(struct locus_engine *e, const void *buf, size_t len,
			     struct locus_error *err)
{
	const struct locus_tbl_hdr *h = buf;
	int ret;

	ret = locus_tbl_check(buf, len, 0, NULL, NULL, err);
	if (ret < 0)
		return ret;
	if (h->kind == LOCUS_TBL_GRACE)
		return validate_one(e, buf, len, err);
	if (h->kind == LOCUS_TBL_GRACE_SET)
		return validate_set(e, buf, len, err, 0);
	return locus_error_set(err, LOCUS_ERANGE, "table kind %s is not a placement",
			       locus_tbl_kind_name(h->kind));
}

/* Build group gi's map and state at the buffers' cursors. */
static int build_group(struct locus_engine *e, struct engine_placement *pl, uint32_t gi,
		       const void *payload, size_t plen, uint64_t gen, size_t *map_off,
		       size_t *st_off)
{
	size_t m, s;

	table_bytes(payload, &m, &s);
	if (*map_off + m > e->pl_map_len || *st_off + s > e->pl_st_len)
		return -LOCUS_ERANGE;
	pl->map[gi] = (struct locus_grace_map *)((uint8_t *)pl->map_mem + *map_off);
	pl->st[gi] = (struct locus_grace_plan_state *)((uint8_t *)pl->st_mem + *st_off);
	if (locus_grace_map_build(pl->map[gi], m, payload, plen, gen, NULL) < 0 ||
	    locus_grace_plan_state_init(pl->st[gi], s, pl->map[gi], e->p.dims.node_id, NULL) < 0)
		return -LOCUS_ERANGE;
	*map_off += m;
	*st_off += s;
	return 0;
}

int engine_grace_adopt(struct locus_engine *e, const void *t, size_t len, uint64_t gen)
{
	struct engine_placement *pl = &e->pl[e->pl_buf ^ 1];
	const struct locus_tbl_hdr *h = t;
	size_t map_off = 0, st_off = 0;
	struct locus_grace_dims dims;
	const void *payload, *first_group = NULL;
	size_t plen;

	if (locus_tbl_check(t, len, 0, &payload, &plen, NULL) < 0)
		return -LOCUS_ERANGE;
	/* a table stored under a cluster generation is known by it on every
	 * node, so ranks compare the rows' generation with what they loaded;
	 * a table pushed to this node alone has only the channel's */
	if (h->generation)
		gen = h->generation;
	if (h->kind == LOCUS_TBL_GRACE) {
		if (build_group(e, pl, 0, payload, plen, gen, &map_off, &st_off) < 0)
			return -LOCUS_ERANGE;
		memset(pl->group_of_rank, 0, sizeof(*pl->group_of_rank) * e->n_ranks);
		pl->n_groups = 1;
		pl->is_set = 0;
	} else {
		struct locus_graceset_group g[LOCUS_GRACESET_MAX_GROUPS];
		const struct locus_graceset_hdr *sh = payload;

		if (locus_graceset_check(payload, plen, g, NULL, NULL) < 0)
			return -LOCUS_ERANGE;
		for (uint32_t i = 0; i < sh->n_groups; i++) {
			const struct locus_graceset_entry *x = g[i].entry;

			if (build_group(e, pl, i, g[i].payload, g[i].payload_len, gen, &map_off,
					&st_off) < 0)
				return -LOCUS_ERANGE;
			if (i == 0)
				first_group = g[i].payload;
			for (uint32_t r = x->first_rank; r < x->first_rank + x->n_ranks; r++)
				pl->group_of_rank[r] = (uint16_t)i;
		}
		pl->n_groups = sh->n_groups;
		pl->is_set = 1;
	}
	pl->gen = gen;
	e->pl_buf ^= 1;
	e->place = pl;
	if (!engine_primary(e)) /* the node's table: one engine's gauges say it */
		return 0;
	locus_gauge_set(e->blk, e->c.grace_groups, (int64_t)pl->n_groups);
	/* every group has the node's shape (validate_set): group 0's dims say it */
	memcpy(&dims, pl->is_set ? first_group : payload, sizeof(dims));
	locus_gauge_set_elem(e->blk, e->c.table_layers, LOCUS_TABLE_CH_GRACE, dims.n_layers);
	locus_gauge_set_elem(e->blk, e->c.table_experts, LOCUS_TABLE_CH_GRACE, dims.n_experts);
	return 0;
}
