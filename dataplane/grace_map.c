// SPDX-License-Identifier: MIT
/* GRACE planner map: built from a validated table payload for the planner. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_grace.h"
#include "locus_grace_plan.h"

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

int locus_grace_map_of_blob(const void *blob, size_t len, void **out, struct locus_error *err)
{
	const void *pl;
	size_t plen, msz;
	void *m = NULL;
	int rc = locus_grace_blob_check(blob, len, &pl, &plen, err);

	*out = NULL;
	if (rc)
		return rc;
	msz = locus_grace_map_size(pl);
	if (!msz || posix_memalign(&m, 64, msz))
		return locus_error_set(err, ENOMEM, "planner map: out of memory");
	rc = locus_grace_map_build(m, msz, pl, plen, 1, err);
	if (rc) {
		free(m);
		return rc;
	}
	*out = m;
	return 0;
}
