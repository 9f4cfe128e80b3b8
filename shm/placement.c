// SPDX-License-Identifier: MIT
/* What a rank holds under a placement and what a change moves (locus_placement.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_grace.h"
#include "locus_graceset.h"
#include "locus_placement.h"
#include "locus_tblfile.h"

/* The GRACE payload that places rank's experts: the table, or its group's in a set. */
static int rank_payload(const void *blob, size_t len, uint32_t rank, const void **pl,
			size_t *plen, struct locus_error *err)
{
	const struct locus_tbl_hdr *h = blob;
	int ret;

	ret = locus_tbl_check(blob, len, 0, NULL, NULL, err);
	if (ret < 0)
		return ret;
	if (h->kind == LOCUS_TBL_GRACE)
		return locus_grace_blob_check(blob, len, pl, plen, err);
	if (h->kind == LOCUS_TBL_GRACE_SET) {
		struct locus_graceset_group *g = calloc(LOCUS_GRACESET_MAX_GROUPS, sizeof(*g));
		const struct locus_graceset_hdr *sh;
		const void *set;

		if (!g)
			return locus_error_set(err, ENOMEM, "out of memory");
		ret = locus_graceset_blob_check(blob, len, &set, NULL, g, NULL, err);
		if (ret < 0)
			goto out;
		sh = set;
		ret = locus_error_set(err, LOCUS_ERANGE, "rank %u is in no group of the placement "
				      "set", rank);
		for (uint32_t i = 0; i < sh->n_groups; i++) {
			if (rank < g[i].entry->first_rank ||
			    rank - g[i].entry->first_rank >= g[i].entry->n_ranks)
				continue;
			*pl = g[i].payload;
			*plen = g[i].payload_len;
			locus_error_clear(err);
			ret = 0;
			break;
		}
out:
		free(g);
		return ret;
	}
	return locus_error_set(err, LOCUS_ERANGE, "a %s table is not a placement",
			       locus_tbl_kind_name(h->kind));
}

int locus_placement_rank_experts(const void *blob, size_t len, uint32_t rank, uint8_t *held,
				 size_t held_len, uint32_t *n_layers, uint32_t *n_experts,
				 struct locus_error *err)
{
	struct locus_grace_view v;
	const void *pl = NULL;
	size_t plen = 0;
	uint32_t L, E, R;
	int ret;

	if (!blob || !held)
		return locus_error_set(err, EINVAL, "no placement or no room for its experts");
	ret = rank_payload(blob, len, rank, &pl, &plen, err);
	if (ret < 0)
		return ret;
	ret = locus_grace_view_init(&v, (void *)(uintptr_t)pl, plen, err);
	if (ret < 0)
		return ret;
	L = v.dims->n_layers;
	E = v.dims->n_experts;
	R = v.dims->max_replicas;
	if (rank >= locus_grace_n_ranks(v.dims))
		return locus_error_set(err, LOCUS_ERANGE, "rank %u is outside the placement's %u "
				       "ranks", rank, locus_grace_n_ranks(v.dims));
	if (held_len < ((size_t)L * E + 7) / 8)
		return locus_error_set(err, LOCUS_ERANGE, "%zu bytes cannot hold %u x %u experts",
				       held_len, L, E);
	memset(held, 0, ((size_t)L * E + 7) / 8);
	for (size_t i = 0; i < (size_t)L * E; i++) {
		int has = v.primary[i] == rank;

		for (uint32_t j = 0; j < R && !has; j++)
			has = v.replica[i * R + j] == rank;
		if (has)
			held[i / 8] |= (uint8_t)(1u << (i % 8));
	}
	if (n_layers)
		*n_layers = L;
	if (n_experts)
		*n_experts = E;
	return 0;
}

int locus_placement_rank_moves(const void *old_blob, size_t old_len, const void *new_blob,
			       size_t new_len, uint32_t rank, uint32_t *gains, uint32_t *n_gains,
			       uint32_t *losses, uint32_t *n_losses, uint32_t cap,
			       struct locus_error *err)
{
	uint8_t *a = NULL, *b = NULL;
	uint32_t L, E, L0 = 0, E0 = 0, ng = 0, nl = 0;
	size_t bytes;
	int ret;

	*n_gains = *n_losses = 0;
	bytes = (size_t)LOCUS_GRACE_MAX_LAYERS * LOCUS_GRACE_MAX_EXPERTS / 8;
	b = malloc(bytes);
	a = calloc(1, bytes);
	if (!a || !b) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto out;
	}
	ret = locus_placement_rank_experts(new_blob, new_len, rank, b, bytes, &L, &E, err);
	if (ret < 0)
		goto out;
	if (old_blob) {
		ret = locus_placement_rank_experts(old_blob, old_len, rank, a, bytes, &L0, &E0,
						   err);
		if (ret < 0)
			goto out;
		if (L0 != L || E0 != E) {
			ret = locus_error_set(err, LOCUS_ERANGE, "the placements have other shapes "
					      "(%u x %u and %u x %u experts)", L0, E0, L, E);
			goto out;
		}
	}
	for (uint32_t l = 0; l < L; l++) {
		for (uint32_t e = 0; e < E; e++) {
			size_t i = (size_t)l * E + e;
			int was = a[i / 8] >> (i % 8) & 1, is = b[i / 8] >> (i % 8) & 1;

			if (is && !was && ng++ < cap && gains)
				gains[ng - 1] = locus_placement_id(l, e);
			if (was && !is && nl++ < cap && losses)
				losses[nl - 1] = locus_placement_id(l, e);
		}
	}
	*n_gains = ng;
	*n_losses = nl;
out:
	free(a);
	free(b);
	return ret;
}

/* The live holders under v of expert i (flat index), as ranks; n of them. */
static uint32_t live_holders(const struct locus_grace_view *v, size_t i, const uint64_t *lost,
			     uint16_t *out)
{
	uint32_t R = v->dims->max_replicas, n = 0;

	if (!locus_grace_rank_lost(lost, v->primary[i]))
		out[n++] = v->primary[i];
	for (uint32_t j = 0; j < R; j++) {
		uint16_t r = v->replica[i * R + j];

		if (r == LOCUS_GRACE_NO_RANK)
			break;
		if (!locus_grace_rank_lost(lost, r))
			out[n++] = r;
	}
	return n;
}

int locus_placement_fetches(const void *old_blob, size_t old_len, const void *new_blob,
			    size_t new_len, const uint64_t *lost,
			    struct locus_placement_fetch *out, uint32_t cap, uint32_t *n,
			    struct locus_error *err)
{
	const struct locus_tbl_hdr *ho = old_blob, *hn = new_blob;
	struct locus_grace_view a, b;
	const void *pa, *pb;
	size_t la, lb;
	uint32_t L, E, R, N, gpn, count = 0, *sends = NULL;
	uint16_t hold[LOCUS_GRACE_MAX_REPLICAS + 1];
	int ret;

	*n = 0;
	if (!old_blob || !new_blob)
		return locus_error_set(err, EINVAL, "two placements are needed");
	if (old_len < sizeof(*ho) || new_len < sizeof(*hn) || ho->kind != LOCUS_TBL_GRACE ||
	    hn->kind != LOCUS_TBL_GRACE)
		return locus_error_set(err, LOCUS_ERANGE, "weight fetches are planned between two "
				       "GRACE tables (not placement sets)");
	ret = locus_grace_blob_check(old_blob, old_len, &pa, &la, err);
	if (ret == 0)
		ret = locus_grace_blob_check(new_blob, new_len, &pb, &lb, err);
	if (ret == 0)
		ret = locus_grace_view_init(&a, (void *)(uintptr_t)pa, la, err);
	if (ret == 0)
		ret = locus_grace_view_init(&b, (void *)(uintptr_t)pb, lb, err);
	if (ret < 0)
		return ret;
	if (memcmp(a.dims, b.dims, offsetof(struct locus_grace_dims, max_replicas)))
		return locus_error_set(err, LOCUS_ERANGE, "the placements have other shapes");
	L = a.dims->n_layers;
	E = a.dims->n_experts;
	R = b.dims->max_replicas;
	N = locus_grace_n_ranks(a.dims);
	gpn = a.dims->gpus_per_node;
	sends = calloc(N, sizeof(*sends));
	if (!sends)
		return locus_error_set(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < (size_t)L * E; i++) {
		uint32_t nh = live_holders(&a, i, lost, hold);

		for (uint32_t j = 0; j <= R; j++) {
			uint16_t dst = j == 0 ? b.primary[i] : b.replica[i * R + j - 1];
			uint32_t best = UINT32_MAX, k;
			int near = 0, had = 0;

			if (dst == LOCUS_GRACE_NO_RANK)
				break;
			/* a rank gains it unless it held a copy (a second copy there moves nothing) */
			for (k = 0; k < j; k++)
				had |= (k == 0 ? b.primary[i] : b.replica[i * R + k - 1]) == dst;
			for (k = 0; k < nh && !had; k++)
				had = hold[k] == dst;
			if (had)
				continue;
			/* the holder on dst's node first, then any; the least used of those */
			for (k = 0; k < nh; k++) {
				int same = hold[k] / gpn == dst / gpn;

				if (best == UINT32_MAX || same > near ||
				    (same == near && sends[hold[k]] < sends[hold[best]])) {
					best = k;
					near = same;
				}
			}
			if (count < cap && out) {
				uint16_t p = a.primary[i];

				out[count] = (struct locus_placement_fetch){
					.id = locus_placement_id((uint32_t)(i / E), (uint32_t)(i % E)),
					.dst = dst,
					.src = best == UINT32_MAX ? LOCUS_PLACEMENT_STORAGE : hold[best],
					.old_primary = locus_grace_rank_lost(lost, p)
							       ? LOCUS_PLACEMENT_STORAGE : p,
				};
			}
			if (best != UINT32_MAX)
				sends[hold[best]]++;
			count++;
		}
	}
	free(sends);
	*n = count;
	return 0;
}
