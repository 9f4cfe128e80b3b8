// SPDX-License-Identifier: MIT
/* GRACE placement set: layout, validation, building (locus_graceset.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_graceset.h"
#include "locus_graceset_priv.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

#define TBL_HDR sizeof(struct locus_tbl_hdr)

static int problem(enum locus_graceset_problem *why, enum locus_graceset_problem p)
{
	if (why)
		*why = p;
	return 0;
}

const char *locus_graceset_problem_name(enum locus_graceset_problem p)
{
	switch (p) {
	case LOCUS_GRACESET_OK:
		return "none";
	case LOCUS_GRACESET_MALFORMED:
		return "malformed";
	case LOCUS_GRACESET_MISSING_GROUP:
		return "missing group";
	case LOCUS_GRACESET_OVERLAP:
		return "overlapping groups";
	case LOCUS_GRACESET_DIMS:
		return "dims disagree";
	default:
		return "unknown";
	}
}

static int check_hdr(const struct locus_graceset_hdr *h, enum locus_graceset_problem *why,
		     struct locus_error *err)
{
	uint64_t n_ranks = (uint64_t)h->n_nodes * h->gpus_per_node;

	problem(why, LOCUS_GRACESET_MALFORMED);
	if (h->n_groups == 0 || h->n_groups > LOCUS_GRACESET_MAX_GROUPS)
		return locus_error_set(err, LOCUS_ERANGE, "placement set has %u groups, not 1..%u",
				       h->n_groups, LOCUS_GRACESET_MAX_GROUPS);
	if (h->reserved[0] || h->reserved[1] || h->reserved[2])
		return locus_error_set(err, LOCUS_ERANGE, "placement set: reserved header bytes "
				       "are not zero");
	if (n_ranks == 0 || n_ranks > LOCUS_GRACE_MAX_RANKS)
		return locus_error_set(err, LOCUS_ERANGE, "placement set for %u nodes x %u GPUs: "
				       "not 1..%u ranks", h->n_nodes, h->gpus_per_node,
				       LOCUS_GRACE_MAX_RANKS);
	if (h->n_layers == 0 || h->n_layers > LOCUS_GRACE_MAX_LAYERS || h->n_experts == 0 ||
	    h->n_experts > LOCUS_GRACE_MAX_EXPERTS)
		return locus_error_set(err, LOCUS_ERANGE, "placement set shape %u layers x %u "
				       "experts out of range", h->n_layers, h->n_experts);
	if (h->n_groups > n_ranks) {
		problem(why, LOCUS_GRACESET_OVERLAP);
		return locus_error_set(err, LOCUS_ERANGE, "placement set has %u groups for %llu "
				       "ranks: groups would share ranks", h->n_groups,
				       (unsigned long long)n_ranks);
	}
	return 0;
}

/* Entry g's blob lies in the payload after the previous one, aligned. */
static int check_extent(const struct locus_graceset_entry *x, uint64_t min_off, size_t len,
			struct locus_error *err)
{
	if (x->offset % 8 || x->offset < min_off || x->offset > len ||
	    x->length > len - x->offset || x->length < TBL_HDR)
		return locus_error_set(err, LOCUS_ERANGE,
				       "placement set: group %u's table at %llu (%llu bytes) is "
				       "not an aligned range after the previous one in %zu bytes",
				       x->group_id, (unsigned long long)x->offset,
				       (unsigned long long)x->length, len);
	return 0;
}

/* A group's table: same shape as the set, everything inside its ranks. */
static int check_group_table(const struct locus_graceset_hdr *h,
			     const struct locus_graceset_entry *x, const struct locus_grace_view *v,
			     enum locus_graceset_problem *why, struct locus_error *err)
{
	const struct locus_grace_dims *d = v->dims;
	uint32_t lo = x->first_rank, hi = x->first_rank + x->n_ranks, N = locus_grace_n_ranks(d);
	uint32_t E = d->n_experts, R = d->max_replicas;

	if (d->n_layers != h->n_layers || d->n_experts != h->n_experts ||
	    d->n_nodes != h->n_nodes || d->gpus_per_node != h->gpus_per_node) {
		problem(why, LOCUS_GRACESET_DIMS);
		return locus_error_set(err, LOCUS_ERANGE,
				       "group %u (ranks %u..%u): table is %u layers x %u experts on "
				       "%u x %u GPUs, the set is %u x %u on %u x %u", x->group_id,
				       lo, hi - 1, d->n_layers, d->n_experts, d->n_nodes,
				       d->gpus_per_node, h->n_layers, h->n_experts, h->n_nodes,
				       h->gpus_per_node);
	}
	problem(why, LOCUS_GRACESET_MALFORMED);
	if (R >= x->n_ranks)
		return locus_error_set(err, LOCUS_ERANGE,
				       "group %u (ranks %u..%u): %u replica slots per expert, the "
				       "group has %u ranks", x->group_id, lo, hi - 1, R, x->n_ranks);
	for (uint32_t l = 0; l < d->n_layers; l++) {
		for (uint32_t e = 0; e < E; e++) {
			size_t le = (size_t)l * E + e;
			uint32_t p = v->primary[le];

			if (p < lo || p >= hi)
				return locus_error_set(err, LOCUS_ERANGE,
						       "group %u (ranks %u..%u): layer %u expert %u "
						       "on rank %u, outside the group", x->group_id,
						       lo, hi - 1, l, e, p);
			for (uint32_t i = 0; i < R; i++) {
				uint32_t r = v->replica[le * R + i];

				if (r != LOCUS_GRACE_NO_RANK && (r < lo || r >= hi))
					return locus_error_set(err, LOCUS_ERANGE,
							       "group %u (ranks %u..%u): layer %u "
							       "expert %u has a replica on rank %u, "
							       "outside the group", x->group_id, lo,
							       hi - 1, l, e, r);
			}
		}
		for (uint32_t r = 0; r < N; r++)
			if ((r < lo || r >= hi) && v->pred_load[(size_t)l * N + r] != 0)
				return locus_error_set(err, LOCUS_ERANGE,
						       "group %u (ranks %u..%u): layer %u predicts "
						       "load on rank %u, outside the group",
						       x->group_id, lo, hi - 1, l, r);
	}
	return 0;
}

/* Group ids 0..n-1 once each, ranges apart and covering every rank. */
static int check_cover(const struct locus_graceset_hdr *h, const struct locus_graceset_entry *ent,
		       enum locus_graceset_problem *why, struct locus_error *err)
{
	uint32_t N = h->n_nodes * h->gpus_per_node, n = h->n_groups;
	const struct locus_graceset_entry *by_id[LOCUS_GRACESET_MAX_GROUPS] = { 0 };
	uint16_t owner[LOCUS_GRACE_MAX_RANKS];

	for (uint32_t g = 0; g < n; g++) {
		const struct locus_graceset_entry *x = &ent[g];

		if (x->group_id >= n) {
			problem(why, LOCUS_GRACESET_MISSING_GROUP);
			return locus_error_set(err, LOCUS_ERANGE,
					       "placement set of %u groups has group id %u: ids "
					       "must be 0..%u (a group is missing)", n,
					       x->group_id, n - 1);
		}
		if (by_id[x->group_id]) {
			problem(why, LOCUS_GRACESET_OVERLAP);
			return locus_error_set(err, LOCUS_ERANGE,
					       "placement set has group %u twice", x->group_id);
		}
		by_id[x->group_id] = x;
		if (x->n_ranks == 0 || x->first_rank >= N || x->n_ranks > N - x->first_rank) {
			problem(why, LOCUS_GRACESET_DIMS);
			return locus_error_set(err, LOCUS_ERANGE,
					       "group %u: ranks %u..+%u outside the cluster's %u "
					       "ranks", x->group_id, x->first_rank, x->n_ranks, N);
		}
	}
	for (uint32_t r = 0; r < N; r++)
		owner[r] = UINT16_MAX;
	for (uint32_t g = 0; g < n; g++) {
		const struct locus_graceset_entry *x = &ent[g];

		for (uint32_t r = x->first_rank; r < x->first_rank + x->n_ranks; r++) {
			if (owner[r] != UINT16_MAX) {
				const struct locus_graceset_entry *o = by_id[owner[r]];

				problem(why, LOCUS_GRACESET_OVERLAP);
				return locus_error_set(err, LOCUS_ERANGE,
						       "groups %u (ranks %u..%u) and %u (ranks "
						       "%u..%u) overlap at rank %u", o->group_id,
						       o->first_rank, o->first_rank + o->n_ranks - 1,
						       x->group_id, x->first_rank,
						       x->first_rank + x->n_ranks - 1, r);
			}
			owner[r] = (uint16_t)x->group_id;
		}
	}
	for (uint32_t r = 0; r < N; r++) {
		if (owner[r] == UINT16_MAX) {
			uint32_t end = r;

			while (end + 1 < N && owner[end + 1] == UINT16_MAX)
				end++;
			problem(why, LOCUS_GRACESET_MISSING_GROUP);
			return locus_error_set(err, LOCUS_ERANGE,
					       "ranks %u..%u of the cluster's %u belong to no group "
					       "(a group is missing)", r, end, N);
		}
	}
	return 0;
}

int locus_graceset_check(const void *payload, size_t len,
			 struct locus_graceset_group groups[LOCUS_GRACESET_MAX_GROUPS],
			 enum locus_graceset_problem *why, struct locus_error *err)
{
	const struct locus_graceset_hdr *h = payload;
	const struct locus_graceset_entry *ent;
	uint64_t min_off, end = 0;
	int rc;

	problem(why, LOCUS_GRACESET_MALFORMED);
	if (!payload || ((uintptr_t)payload & 7))
		return locus_error_set(err, EINVAL, "placement set missing or not 8-byte aligned");
	if (len < sizeof(*h))
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "placement set is %zu bytes, shorter than its header", len);
	rc = check_hdr(h, why, err);
	if (rc)
		return rc;
	min_off = sizeof(*h) + (uint64_t)h->n_groups * sizeof(*ent);
	if (min_off > len)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "placement set of %u groups needs %llu bytes of entries, "
				       "has %zu", h->n_groups, (unsigned long long)min_off, len);
	ent = (const struct locus_graceset_entry *)(h + 1);
	rc = check_cover(h, ent, why, err);
	if (rc)
		return rc;
	for (uint32_t g = 0; g < h->n_groups; g++) {
		const struct locus_graceset_entry *x = &ent[g];
		struct locus_grace_view v;
		const void *pl;
		size_t plen;
		char msg[LOCUS_ERRMSG_MAX];

		problem(why, LOCUS_GRACESET_MALFORMED);
		rc = check_extent(x, min_off, len, err);
		if (rc)
			return rc;
		/* the offset is inside the payload only now: no pointer past it is formed */
		rc = locus_grace_blob_check((const uint8_t *)payload + x->offset, (size_t)x->length,
					    &pl, &plen, err);
		if (rc) {
			if (err) {
				memcpy(msg, err->msg, sizeof(msg));
				locus_error_set(err, -rc, "group %u (ranks %u..%u): %.200s",
						x->group_id, x->first_rank,
						x->first_rank + x->n_ranks - 1, msg);
			}
			return rc;
		}
		locus_grace_view_init(&v, (void *)(uintptr_t)pl, plen, NULL);
		rc = check_group_table(h, x, &v, why, err);
		if (rc)
			return rc;
		for (uint64_t i = min_off; i < x->offset; i++)
			if (((const uint8_t *)payload)[i])
				return locus_error_set(err, LOCUS_ERANGE,
						       "placement set: padding before group %u's "
						       "table is not zero", x->group_id);
		end = x->offset + x->length;
		min_off = end;
		if (groups)
			groups[x->group_id] = (struct locus_graceset_group){
				.entry = x, .payload = pl, .payload_len = plen,
			};
	}
	if (end != len)
		return locus_error_set(err, LOCUS_ERANGE,
				       "placement set has %llu bytes after its last table",
				       (unsigned long long)(len - end));
	return problem(why, LOCUS_GRACESET_OK);
}

int locus_graceset_blob_check(const void *blob, size_t len, const void **payload,
			      size_t *payload_len,
			      struct locus_graceset_group groups[LOCUS_GRACESET_MAX_GROUPS],
			      enum locus_graceset_problem *why, struct locus_error *err)
{
	const struct locus_tbl_hdr *h = blob;
	const void *pl;
	size_t plen;
	int rc;

	problem(why, LOCUS_GRACESET_MALFORMED);
	rc = locus_tbl_check(blob, len, LOCUS_TBL_GRACE_SET, &pl, &plen, err);
	if (rc)
		return rc;
	if (h->kind_version != LOCUS_GRACESET_KIND_VERSION)
		return locus_error_set(err, LOCUS_EVERSION,
				       "GRACE placement set layout version %u, this build reads %u",
				       h->kind_version, LOCUS_GRACESET_KIND_VERSION);
	rc = locus_graceset_check(pl, plen, groups, why, err);
	if (rc)
		return rc;
	if (payload)
		*payload = pl;
	if (payload_len)
		*payload_len = plen;
	return 0;
}

int locus_graceset_table_validate_cb(const void *blob, size_t len, void *arg,
				     struct locus_error *err)
{
	(void)arg;
	return locus_graceset_blob_check(blob, len, NULL, NULL, NULL, NULL, err);
}

int locus_graceset_build_unchecked(const struct locus_graceset_part *parts, uint32_t n,
				   void **blob, size_t *blob_len, struct locus_error *err)
{
	struct locus_graceset_hdr *h;
	struct locus_graceset_entry *ent;
	const struct locus_grace_dims *d0;
	const void *pl;
	size_t plen, off, total;
	uint8_t *b;
	int rc;

	if (!parts || !blob || !blob_len || n == 0 || n > LOCUS_GRACESET_MAX_GROUPS)
		return locus_error_set(err, EINVAL, "placement set of %u parts: not 1..%u", n,
				       LOCUS_GRACESET_MAX_GROUPS);
	rc = locus_grace_blob_check(parts[0].blob, parts[0].blob_len, &pl, &plen, err);
	if (rc)
		return rc;
	d0 = pl;
	off = sizeof(*h) + (size_t)n * sizeof(*ent);
	total = off;
	for (uint32_t g = 0; g < n; g++)
		total = LOCUS_ALIGN_UP(total, (size_t)8) + parts[g].blob_len;
	b = calloc(1, TBL_HDR + total);
	if (!b)
		return locus_error_set(err, ENOMEM, "placement set: out of memory");
	h = (struct locus_graceset_hdr *)(b + TBL_HDR);
	*h = (struct locus_graceset_hdr){
		.n_groups = n, .n_nodes = d0->n_nodes, .gpus_per_node = d0->gpus_per_node,
		.n_layers = d0->n_layers, .n_experts = d0->n_experts,
	};
	ent = (struct locus_graceset_entry *)(h + 1);
	for (uint32_t g = 0; g < n; g++) {
		off = LOCUS_ALIGN_UP(off, (size_t)8);
		ent[g] = (struct locus_graceset_entry){
			.group_id = parts[g].group_id, .decoder_id = parts[g].decoder_id,
			.first_rank = parts[g].first_rank, .n_ranks = parts[g].n_ranks,
			.offset = off, .length = parts[g].blob_len,
		};
		memcpy((uint8_t *)h + off, parts[g].blob, parts[g].blob_len);
		off += parts[g].blob_len;
	}
	rc = locus_tbl_seal(b, TBL_HDR + total, LOCUS_TBL_GRACE_SET, LOCUS_GRACESET_KIND_VERSION,
			    total);
	if (rc) {
		free(b);
		return locus_error_set(err, -rc, "placement set: cannot seal %zu bytes", total);
	}
	*blob = b;
	*blob_len = TBL_HDR + total;
	return 0;
}

int locus_graceset_build(const struct locus_graceset_part *parts, uint32_t n, void **blob,
			 size_t *blob_len, struct locus_error *err)
{
	int rc = locus_graceset_build_unchecked(parts, n, blob, blob_len, err);

	if (rc)
		return rc;
	rc = locus_graceset_blob_check(*blob, *blob_len, NULL, NULL, NULL, NULL, err);
	if (rc) {
		free(*blob);
		*blob = NULL;
	}
	return rc;
}
