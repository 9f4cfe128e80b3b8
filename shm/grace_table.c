// SPDX-License-Identifier: MIT
/* GRACE table payload: layout, validation, group maps, planner map build. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "locus_grace.h"
#include "locus_tblfile.h"

struct layout {
	size_t off_primary, off_replica, off_eload, off_pred, size;
};

static void payload_layout(const struct locus_grace_dims *d, struct layout *o)
{
	size_t le = (size_t)d->n_layers * d->n_experts;

	o->off_primary = sizeof(*d);
	o->off_replica = o->off_primary + le * sizeof(uint16_t);
	o->off_eload = LOCUS_ALIGN_UP(o->off_replica + le * d->max_replicas * sizeof(uint16_t),
				      (size_t)4);
	o->off_pred = o->off_eload + le * sizeof(float);
	o->size = o->off_pred + (size_t)d->n_layers * locus_grace_n_ranks(d) * sizeof(float);
}

int locus_grace_dims_check(const struct locus_grace_dims *d, struct locus_error *err)
{
	uint64_t n_ranks;

	if (!d)
		return locus_error_set(err, EINVAL, "no dims");
	if (d->n_layers == 0 || d->n_layers > LOCUS_GRACE_MAX_LAYERS)
		return locus_error_set(err, LOCUS_ERANGE, "n_layers %u not in 1..%u", d->n_layers,
				       LOCUS_GRACE_MAX_LAYERS);
	if (d->n_experts == 0 || d->n_experts > LOCUS_GRACE_MAX_EXPERTS)
		return locus_error_set(err, LOCUS_ERANGE, "n_experts %u not in 1..%u",
				       d->n_experts, LOCUS_GRACE_MAX_EXPERTS);
	if (d->n_nodes == 0 || d->gpus_per_node == 0)
		return locus_error_set(err, LOCUS_ERANGE, "topology %u nodes x %u GPUs is empty",
				       d->n_nodes, d->gpus_per_node);
	n_ranks = (uint64_t)d->n_nodes * d->gpus_per_node;
	if (n_ranks > LOCUS_GRACE_MAX_RANKS)
		return locus_error_set(err, LOCUS_ERANGE, "%llu ranks exceed the limit %u",
				       (unsigned long long)n_ranks, LOCUS_GRACE_MAX_RANKS);
	if (d->max_replicas > LOCUS_GRACE_MAX_REPLICAS || d->max_replicas >= n_ranks)
		return locus_error_set(err, LOCUS_ERANGE,
				       "max_replicas %u must be < ranks (%llu) and <= %u",
				       d->max_replicas, (unsigned long long)n_ranks,
				       LOCUS_GRACE_MAX_REPLICAS);
	if (d->capacity == 0 || (uint64_t)d->capacity * n_ranks < d->n_experts)
		return locus_error_set(err, LOCUS_ERANGE,
				       "capacity %u x %llu ranks cannot hold %u experts",
				       d->capacity, (unsigned long long)n_ranks, d->n_experts);
	if (d->replica_budget > d->n_experts)
		return locus_error_set(err, LOCUS_ERANGE, "replica budget %u > %u experts",
				       d->replica_budget, d->n_experts);
	if (d->reserved != 0)
		return locus_error_set(err, LOCUS_ERANGE, "reserved dims field is %u, not 0",
				       d->reserved);
	return 0;
}

size_t locus_grace_payload_size(const struct locus_grace_dims *d)
{
	struct layout o;

	if (locus_grace_dims_check(d, NULL))
		return 0;
	payload_layout(d, &o);
	return o.size;
}

int locus_grace_view_init(struct locus_grace_view *v, void *payload, size_t len,
			  struct locus_error *err)
{
	struct layout o;
	int rc;

	if (!v || !payload)
		return locus_error_set(err, EINVAL, "no payload");
	if (len < sizeof(struct locus_grace_dims))
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "grace payload is %zu bytes, shorter than its dims", len);
	if (((uintptr_t)payload & 3) != 0)
		return locus_error_set(err, EINVAL, "grace payload not 4-byte aligned");
	rc = locus_grace_dims_check(payload, err);
	if (rc)
		return rc;
	payload_layout(payload, &o);
	if (o.size != len)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "grace payload is %zu bytes, its dims need %zu", len, o.size);
	v->dims = payload;
	v->primary = (uint16_t *)((uint8_t *)payload + o.off_primary);
	v->replica = (uint16_t *)((uint8_t *)payload + o.off_replica);
	v->expert_load = (float *)((uint8_t *)payload + o.off_eload);
	v->pred_load = (float *)((uint8_t *)payload + o.off_pred);
	return 0;
}

static int check_loads(const float *x, size_t n, const char *what, uint32_t per_layer,
		       struct locus_error *err)
{
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(x[i]))
			return locus_error_set(err, LOCUS_ENAN, "%s of layer %zu index %zu is %f",
					       what, i / per_layer, i % per_layer, (double)x[i]);
		if (x[i] < 0)
			return locus_error_set(err, LOCUS_ERANGE,
					       "%s of layer %zu index %zu is negative (%g)", what,
					       i / per_layer, i % per_layer, (double)x[i]);
	}
	return 0;
}

/* One layer's primaries and replicas; cnt is scratch of 2 x N counters. */
static int validate_layer(const struct locus_grace_view *v, uint32_t l, uint32_t *cnt,
			  struct locus_error *err)
{
	const struct locus_grace_dims *d = v->dims;
	uint32_t E = d->n_experts, R = d->max_replicas, N = locus_grace_n_ranks(d);
	const uint16_t *pri = v->primary + (size_t)l * E;
	const uint16_t *rep = v->replica + (size_t)l * E * R;
	uint32_t *n_pri = cnt, *n_rep = cnt + N;

	memset(cnt, 0, 2 * N * sizeof(*cnt));
	for (uint32_t e = 0; e < E; e++) {
		uint32_t p = pri[e], prev = 0;
		int end = 0;

		if (p == LOCUS_GRACE_NO_RANK)
			return locus_error_set(err, LOCUS_ERANGE,
					       "layer %u: expert %u has no GPU (group map lost it)",
					       l, e);
		if (p >= N)
			return locus_error_set(err, LOCUS_ERANGE,
					       "layer %u: expert %u on rank %u, but the topology "
					       "has %u GPUs (%u nodes x %u)", l, e, p, N,
					       d->n_nodes, d->gpus_per_node);
		if (++n_pri[p] > d->capacity)
			return locus_error_set(err, LOCUS_ERANGE,
					       "layer %u: rank %u holds more than its capacity of "
					       "%u experts", l, p, d->capacity);
		for (uint32_t i = 0; i < R; i++) {
			uint32_t r = rep[(size_t)e * R + i];

			if (r == LOCUS_GRACE_NO_RANK) {
				end = 1;
				continue;
			}
			if (end)
				return locus_error_set(err, LOCUS_ERANGE,
						       "layer %u expert %u: replica slot %u follows "
						       "an empty slot", l, e, i);
			if (r >= N)
				return locus_error_set(err, LOCUS_ERANGE,
						       "layer %u expert %u: replica on rank %u, but "
						       "the topology has %u GPUs (%u nodes x %u)",
						       l, e, r, N, d->n_nodes, d->gpus_per_node);
			if (r == p)
				return locus_error_set(err, LOCUS_ERANGE,
						       "layer %u expert %u: replica on its own "
						       "primary rank %u", l, e, r);
			if (i > 0 && r <= prev)
				return locus_error_set(err, LOCUS_ERANGE,
						       "layer %u expert %u: replica ranks not "
						       "ascending (%u after %u)", l, e, r, prev);
			if (++n_rep[r] > d->replica_budget)
				return locus_error_set(err, LOCUS_ERANGE,
						       "layer %u: rank %u holds more than its "
						       "replica budget of %u", l, r,
						       d->replica_budget);
			prev = r;
		}
	}
	return 0;
}

int locus_grace_validate(const struct locus_grace_view *v, struct locus_error *err)
{
	uint32_t cnt[2 * LOCUS_GRACE_MAX_RANKS];
	const struct locus_grace_dims *d;
	int rc;

	if (!v || !v->dims)
		return locus_error_set(err, EINVAL, "no view");
	d = v->dims;
	rc = locus_grace_dims_check(d, err);
	if (rc)
		return rc;
	for (uint32_t l = 0; l < d->n_layers; l++) {
		rc = validate_layer(v, l, cnt, err);
		if (rc)
			return rc;
	}
	rc = check_loads(v->expert_load, (size_t)d->n_layers * d->n_experts, "expert load",
			 d->n_experts, err);
	if (rc)
		return rc;
	return check_loads(v->pred_load, (size_t)d->n_layers * locus_grace_n_ranks(d),
			   "predicted rank load", locus_grace_n_ranks(d), err);
}

int locus_grace_groups_to_primary(uint32_t n_experts, uint32_t n_ranks, const uint32_t *start,
				  const uint16_t *members, uint16_t *primary,
				  struct locus_error *err)
{
	if (!start || !members || !primary || n_ranks == 0 || n_ranks >= LOCUS_GRACE_NO_RANK)
		return locus_error_set(err, EINVAL, "bad group map arguments");
	if (start[0] != 0 || start[n_ranks] != n_experts)
		return locus_error_set(err, LOCUS_ERANGE,
				       "group map holds %u entries for %u experts",
				       start[n_ranks] - start[0], n_experts);
	for (uint32_t e = 0; e < n_experts; e++)
		primary[e] = LOCUS_GRACE_NO_RANK;
	for (uint32_t r = 0; r < n_ranks; r++) {
		if (start[r + 1] < start[r] || start[r + 1] > n_experts)
			return locus_error_set(err, LOCUS_ERANGE,
					       "group map: group %u bounds %u..%u are invalid", r,
					       start[r], start[r + 1]);
		for (uint32_t i = start[r]; i < start[r + 1]; i++) {
			uint32_t e = members[i];

			if (e >= n_experts)
				return locus_error_set(err, LOCUS_ERANGE,
						       "group map: expert id %u in group %u >= "
						       "E=%u", e, r, n_experts);
			if (primary[e] != LOCUS_GRACE_NO_RANK)
				return locus_error_set(err, LOCUS_ERANGE,
						       "group map places expert %u twice (groups "
						       "%u and %u)", e, primary[e], r);
			primary[e] = (uint16_t)r;
		}
	}
	/* the count matched, so a duplicate above implies a loss; check anyway */
	for (uint32_t e = 0; e < n_experts; e++)
		if (primary[e] == LOCUS_GRACE_NO_RANK)
			return locus_error_set(err, LOCUS_ERANGE,
					       "group map loses expert %u (in no group)", e);
	return 0;
}

/* ------------------------------------------------------------------------ */

struct map_layout {
	size_t off_ncopies, off_rank, off_weight, off_pred, size;
};

static void map_layout(const struct locus_grace_dims *d, struct map_layout *o)
{
	size_t le = (size_t)d->n_layers * d->n_experts;
	size_t slots = le * (1 + d->max_replicas);

	o->off_ncopies = LOCUS_ALIGN_UP(sizeof(struct locus_grace_map), (size_t)64);
	o->off_rank = LOCUS_ALIGN_UP(o->off_ncopies + le, (size_t)64);
	o->off_weight = LOCUS_ALIGN_UP(o->off_rank + slots * 2, (size_t)64);
	o->off_pred = LOCUS_ALIGN_UP(o->off_weight + slots * 2, (size_t)64);
	o->size = o->off_pred + (size_t)d->n_layers * locus_grace_n_ranks(d) * sizeof(float);
}

size_t locus_grace_map_size(const struct locus_grace_dims *d)
{
	struct map_layout o;

	if (locus_grace_dims_check(d, NULL))
		return 0;
	map_layout(d, &o);
	return o.size;
}

static uint16_t swrr_weight(double wmin, double w)
{
	double x = LOCUS_GRACE_WEIGHT_SCALE * wmin / w;
	long r = lround(x);

	return (uint16_t)(r < 1 ? 1 : (r > 65535 ? 65535 : r));
}

int locus_grace_map_build(void *mem, size_t len, const void *payload, size_t payload_len,
			  uint64_t generation, struct locus_error *err)
{
	struct locus_grace_map *m = mem;
	struct locus_grace_view v;
	struct map_layout o;
	uint32_t E, R, N, S;
	uint16_t *rk, *wt;
	uint8_t *ncp;
	float *pred;
	int rc;

	if (!mem || ((uintptr_t)mem & 7))
		return locus_error_set(err, EINVAL, "map memory missing or not 8-byte aligned");
	/* the view wants a mutable pointer; nothing here writes through it */
	rc = locus_grace_view_init(&v, (void *)(uintptr_t)payload, payload_len, err);
	if (rc)
		return rc;
	rc = locus_grace_validate(&v, err);
	if (rc)
		return rc;
	map_layout(v.dims, &o);
	if (len < o.size)
		return locus_error_set(err, LOCUS_ETRUNCATED, "map needs %zu bytes, got %zu",
				       o.size, len);
	memset(m, 0, sizeof(*m));
	m->dims = *v.dims;
	E = v.dims->n_experts;
	R = v.dims->max_replicas;
	N = locus_grace_n_ranks(v.dims);
	S = 1 + R;
	m->n_ranks = N;
	m->n_slots = S;
	m->generation = generation;
	m->off_ncopies = o.off_ncopies;
	m->off_rank = o.off_rank;
	m->off_weight = o.off_weight;
	m->off_pred = o.off_pred;
	m->size = o.size;

	ncp = (uint8_t *)m + o.off_ncopies;
	rk = (uint16_t *)((uint8_t *)m + o.off_rank);
	wt = (uint16_t *)((uint8_t *)m + o.off_weight);
	pred = (float *)((uint8_t *)m + o.off_pred);

	memcpy(pred, v.pred_load, (size_t)v.dims->n_layers * N * sizeof(float));
	for (uint32_t l = 0; l < v.dims->n_layers; l++) {
		const float *wp = v.pred_load + (size_t)l * N;
		double total = 0, floor_w;

		for (uint32_t r = 0; r < N; r++)
			total += wp[r];
		floor_w = total > 0 ? total * 1e-9 : 1.0;
		for (uint32_t e = 0; e < E; e++) {
			size_t le = (size_t)l * E + e;
			uint16_t *ranks = rk + le * S;
			uint16_t *w = wt + le * S;
			double wmin = INFINITY;
			uint32_t n = 0;

			ranks[n++] = v.primary[le];
			for (uint32_t i = 0; i < R; i++) {
				uint16_t r = v.replica[le * R + i];

				if (r != LOCUS_GRACE_NO_RANK)
					ranks[n++] = r;
			}
			for (uint32_t i = n; i < S; i++) {
				ranks[i] = LOCUS_GRACE_NO_RANK;
				w[i] = 0;
			}
			for (uint32_t i = 0; i < n; i++)
				wmin = LOCUS_MIN(wmin, LOCUS_MAX((double)wp[ranks[i]], floor_w));
			for (uint32_t i = 0; i < n; i++)
				w[i] = swrr_weight(wmin, LOCUS_MAX((double)wp[ranks[i]], floor_w));
			ncp[le] = (uint8_t)n;
		}
	}
	return 0;
}

int locus_grace_blob_check(const void *blob, size_t len, const void **payload,
			   size_t *payload_len, struct locus_error *err)
{
	const struct locus_tbl_hdr *h = blob;
	struct locus_grace_view v;
	const void *pl;
	size_t plen;
	int rc;

	rc = locus_tbl_check(blob, len, LOCUS_TBL_GRACE, &pl, &plen, err);
	if (rc)
		return rc;
	if (h->kind_version != LOCUS_GRACE_KIND_VERSION)
		return locus_error_set(err, LOCUS_EVERSION,
				       "GRACE table layout version %u, this build reads %u",
				       h->kind_version, LOCUS_GRACE_KIND_VERSION);
	rc = locus_grace_view_init(&v, (void *)(uintptr_t)pl, plen, err);
	if (!rc)
		rc = locus_grace_validate(&v, err);
	if (rc)
		return rc;
	if (payload)
		*payload = pl;
	if (payload_len)
		*payload_len = plen;
	return 0;
}

int locus_grace_table_validate_cb(const void *blob, size_t len, void *arg,
				  struct locus_error *err)
{
	(void)arg;
	return locus_grace_blob_check(blob, len, NULL, NULL, err);
}
