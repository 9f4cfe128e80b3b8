// SPDX-License-Identifier: MIT
/* GRACE table payload: layout, validation, group maps, sealed-blob check. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_grace.h"
#include "locus_grace_priv.h"
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
	/* R may reach the ranks: a GPU may hold several copies of one expert */
	if (d->max_replicas > LOCUS_GRACE_MAX_REPLICAS)
		return locus_error_set(err, LOCUS_ERANGE, "max_replicas %u must be <= %u",
				       d->max_replicas, LOCUS_GRACE_MAX_REPLICAS);
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
			/* a rank again, or the primary's: one more copy on that GPU */
			if (i > 0 && r < prev)
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
