// SPDX-License-Identifier: MIT
/* Per-decoder expert placement: a GRACE fit per EP group (locus_grace_epgroups.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_grace_epgroups.h"
#include "locus_graceset.h"
#include "locus_graceset_priv.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locus_trace.h"

#define HDR sizeof(struct locus_tbl_hdr)

int locus_epgroups_assign(const struct locus_eldr_tbl_view *v, const struct locus_trace *t,
			  uint32_t *assign, struct locus_error *err)
{
	uint32_t L, E;
	size_t le;
	uint16_t *counts;
	double *x;
	int rc = 0;

	if (!v || !v->hdr || !t || !assign)
		return locus_error_set(err, EINVAL, "assign: bad arguments");
	L = v->hdr->n_layers;
	E = v->hdr->n_experts;
	if (t->n_layers != L || t->n_experts != E)
		return locus_error_set(err, LOCUS_ERANGE, "trace is %u layers x %u experts, the "
				       "ELDR table %u x %u", t->n_layers, t->n_experts, L, E);
	le = (size_t)L * E;
	counts = malloc(le * sizeof(*counts));
	x = malloc(le * sizeof(*x));
	if (!counts || !x) {
		rc = locus_error_set(err, ENOMEM, "assign: out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < t->n_requests; i++) {
		const struct locus_trace_req *q = &t->reqs[i];
		double best = -INFINITY;

		memset(counts, 0, le * sizeof(*counts));
		rc = locus_eldr_counts_add(counts, (uint16_t)L, (uint16_t)E, t->k, q->prompt,
					   q->prompt_len, err);
		if (rc)
			goto out;
		for (size_t j = 0; j < le; j++)
			x[j] = v->layer_mask[j / E] ? (double)counts[j] * v->idf[j] : 0.0;
		assign[i] = 0;
		for (uint32_t k = 0; k < v->n_centroids; k++) {
			const float *c = v->centroids + k * le;
			double s = 0;

			for (size_t j = 0; j < le; j++)
				s += x[j] * c[j];
			if (s > best) { /* a decoder scores its best centroid */
				best = s;
				assign[i] = v->centroid_slot ? v->centroid_slot[k] : k;
			}
		}
	}
out:
	free(counts);
	free(x);
	return rc;
}

int locus_epgroups_group_topo(const struct locus_gracefit_topo *cluster, uint32_t R,
			      struct locus_gracefit_topo *group, struct locus_error *err)
{
	uint32_t G;

	if (!cluster || !group || R == 0 || cluster->gpus_per_node == 0)
		return locus_error_set(err, EINVAL, "group topology: bad arguments");
	G = cluster->gpus_per_node;
	*group = *cluster;
	if (G % R == 0) {
		group->n_nodes = 1;
		group->gpus_per_node = R;
	} else if (R % G == 0) {
		group->n_nodes = R / G;
	} else {
		return locus_error_set(err, LOCUS_ERANGE,
				       "%u EP ranks per decoder neither divide %u GPUs per node nor "
				       "are a multiple of them: a group would straddle a node",
				       R, G);
	}
	return 0;
}

int locus_epgroups_lift(const void *payload, size_t len, uint32_t first_rank,
			uint32_t n_nodes, uint32_t gpus_per_node, void **blob, size_t *blob_len,
			struct locus_error *err)
{
	struct locus_grace_view src, dst;
	struct locus_grace_dims d;
	uint32_t L, E, R, n, N;
	size_t plen;
	uint8_t *b;
	int rc;

	rc = locus_grace_view_init(&src, (void *)(uintptr_t)payload, len, err);
	if (rc)
		return rc;
	d = *src.dims;
	n = locus_grace_n_ranks(&d);
	d.n_nodes = n_nodes;
	d.gpus_per_node = gpus_per_node;
	N = locus_grace_n_ranks(&d);
	/* the group's node boundaries must be the cluster's: within one node, or whole nodes */
	if (first_rank > N || n > N - first_rank ||
	    (src.dims->n_nodes == 1 ? first_rank / gpus_per_node !=
					  (first_rank + n - 1) / gpus_per_node
				    : src.dims->gpus_per_node != gpus_per_node ||
					  first_rank % gpus_per_node))
		return locus_error_set(err, LOCUS_ERANGE,
				       "a %u x %u group at rank %u does not fit %u x %u GPUs on "
				       "their node boundaries", src.dims->n_nodes,
				       src.dims->gpus_per_node, first_rank, n_nodes, gpus_per_node);
	plen = locus_grace_payload_size(&d);
	if (!plen)
		return locus_grace_dims_check(&d, err);
	b = calloc(1, HDR + plen);
	if (!b)
		return locus_error_set(err, ENOMEM, "lift: out of memory");
	memcpy(b + HDR, &d, sizeof(d));
	locus_grace_view_init(&dst, b + HDR, plen, NULL);
	L = d.n_layers;
	E = d.n_experts;
	R = d.max_replicas;
	for (size_t i = 0; i < (size_t)L * E; i++) {
		dst.primary[i] = (uint16_t)(src.primary[i] + first_rank);
		dst.expert_load[i] = src.expert_load[i];
		for (uint32_t j = 0; j < R; j++) {
			uint16_t r = src.replica[i * R + j];

			dst.replica[i * R + j] = r == LOCUS_GRACE_NO_RANK ? r :
						 (uint16_t)(r + first_rank);
		}
	}
	for (uint32_t l = 0; l < L; l++)
		memcpy(dst.pred_load + (size_t)l * N + first_rank, src.pred_load + (size_t)l * n,
		       n * sizeof(float));
	rc = locus_grace_validate(&dst, err);
	if (!rc)
		rc = locus_tbl_seal(b, HDR + plen, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, plen);
	if (rc) {
		free(b);
		return rc;
	}
	*blob = b;
	*blob_len = HDR + plen;
	return 0;
}

/* Profile of the requests of slot k (every request when k is UINT32_MAX). */
static int group_profile(const struct locus_trace *t, const uint32_t *assign, uint32_t k,
			 struct locus_gracefit_profile *p, struct locus_epgroups_info *in,
			 struct locus_error *err)
{
	int rc = locus_gracefit_profile_init(p, t->n_layers, t->n_experts, 1, err);

	for (uint32_t i = 0; !rc && i < t->n_requests; i++) {
		if (k != UINT32_MAX && assign[i] != k)
			continue;
		rc = locus_gracefit_profile_add_request(p, t, i, err);
		in->n_requests++;
		in->n_decode += t->reqs[i].gen_len > 0;
	}
	if (rc)
		locus_gracefit_profile_free(p);
	return rc;
}

/* Fit group k on its local topology and lift it onto its cluster ranks. */
static int fit_group(const struct locus_trace *t, const uint32_t *assign, uint32_t k,
		     const struct locus_epgroups_opts *o, const struct locus_gracefit_topo *gt,
		     void **blob, size_t *len, struct locus_epgroups_info *in,
		     struct locus_error *err)
{
	struct locus_gracefit_layer_info *li = NULL;
	struct locus_gracefit_profile p;
	void *local = NULL;
	size_t llen;
	int rc;

	rc = group_profile(t, assign, o->one_profile ? UINT32_MAX : k, &p, in, err);
	if (rc)
		return rc;
	if (in->n_requests == 0) {
		locus_gracefit_profile_free(&p);
		in->fallback = 1;
		rc = group_profile(t, assign, UINT32_MAX, &p, in, err);
		if (rc)
			return rc;
	}
	in->n_tokens = p.n_tokens;
	li = calloc(t->n_layers, sizeof(*li));
	rc = li ? locus_gracefit_fit(&p, gt, &o->fit, &local, &llen, li, err)
		: locus_error_set(err, ENOMEM, "fit: out of memory");
	if (!rc) {
		for (uint32_t l = 0; l < t->n_layers; l++) {
			in->rho += li[l].rho / t->n_layers;
			in->rho_after += li[l].rho_after / t->n_layers;
		}
		rc = locus_epgroups_lift((uint8_t *)local + HDR, llen - HDR, in->first_rank,
					 o->topo.n_nodes, o->topo.gpus_per_node, blob, len, err);
	}
	free(local);
	free(li);
	locus_gracefit_profile_free(&p);
	return rc;
}

int locus_epgroups_fit(const struct locus_trace *t, const struct locus_eldr_tbl_view *v,
		       const uint32_t *assign, const struct locus_epgroups_opts *o, void **blob,
		       size_t *blob_len, struct locus_epgroups_info *info,
		       struct locus_error *err)
{
	struct locus_graceset_part *parts = NULL;
	struct locus_epgroups_info *in = NULL;
	struct locus_gracefit_topo gt;
	uint32_t *own = NULL, K, R, N;
	int rc;

	if (!t || !v || !v->hdr || !o || !blob || !blob_len)
		return locus_error_set(err, EINVAL, "epgroups fit: bad arguments");
	K = v->hdr->n_decoders;
	R = o->ranks_per_decoder;
	N = o->topo.n_nodes * o->topo.gpus_per_node;
	if (R == 0 || (uint64_t)K * R != N)
		return locus_error_set(err, LOCUS_ERANGE,
				       "%u decoders x %u EP ranks each = %llu ranks, the cluster "
				       "has %u (%u nodes x %u GPUs)", K, R,
				       (unsigned long long)K * R, N, o->topo.n_nodes,
				       o->topo.gpus_per_node);
	if (K > LOCUS_GRACESET_MAX_GROUPS)
		return locus_error_set(err, LOCUS_ERANGE, "%u decoders: a set holds at most %u "
				       "groups", K, LOCUS_GRACESET_MAX_GROUPS);
	rc = locus_epgroups_group_topo(&o->topo, R, &gt, err);
	if (rc)
		return rc;
	parts = calloc(K, sizeof(*parts));
	in = calloc(K, sizeof(*in));
	if (!assign)
		own = calloc(t->n_requests, sizeof(*own));
	if (!parts || !in || (!assign && !own)) {
		rc = locus_error_set(err, ENOMEM, "epgroups fit: out of memory");
		goto out;
	}
	if (!assign) {
		rc = locus_epgroups_assign(v, t, own, err);
		if (rc)
			goto out;
		assign = own;
	}
	for (uint32_t k = 0; k < K; k++) {
		in[k].decoder_id = v->decoder_ids[k];
		in[k].first_rank = k * R;
		in[k].n_ranks = R;
		rc = fit_group(t, assign, k, o, &gt, (void **)&parts[k].blob, &parts[k].blob_len,
			       &in[k], err);
		if (rc)
			goto out;
		parts[k].group_id = k;
		parts[k].decoder_id = in[k].decoder_id;
		parts[k].first_rank = k * R;
		parts[k].n_ranks = R;
	}
	rc = locus_graceset_build(parts, K, blob, blob_len, err);
	if (!rc && info)
		memcpy(info, in, K * sizeof(*in));
out:
	for (uint32_t k = 0; parts && k < K; k++)
		free((void *)parts[k].blob);
	free(parts);
	free(in);
	free(own);
	return rc;
}
