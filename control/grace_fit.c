// SPDX-License-Identifier: MIT
/* Whole GRACE fit and replication-only refit, into sealed table blobs. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

#define HDR sizeof(struct locus_tbl_hdr)

int locus_gracefit_dims(const struct locus_gracefit_topo *t, uint32_t n_layers,
			uint32_t n_experts, struct locus_grace_dims *d, struct locus_error *err)
{
	uint64_t N;

	if (!t || !d)
		return locus_error_set(err, EINVAL, "no topology");
	N = (uint64_t)t->n_nodes * t->gpus_per_node;
	memset(d, 0, sizeof(*d));
	d->n_layers = n_layers;
	d->n_experts = n_experts;
	d->n_nodes = t->n_nodes;
	d->gpus_per_node = t->gpus_per_node;
	d->capacity = t->capacity;
	if (N > 0 && N <= LOCUS_GRACE_MAX_RANKS) {
		if (d->capacity == 0)
			d->capacity = (uint32_t)((n_experts + N - 1) / N);
		d->max_replicas = (uint32_t)LOCUS_MIN(N - 1, (uint64_t)LOCUS_GRACE_MAX_REPLICAS);
	}
	d->replica_budget = t->replica_budget;
	return locus_grace_dims_check(d, err);
}

static int alloc_blob(const struct locus_grace_dims *d, void **blob, size_t *len,
		      struct locus_grace_view *v, struct locus_error *err)
{
	size_t plen = locus_grace_payload_size(d);
	uint8_t *b;

	b = calloc(1, HDR + plen);
	if (!b)
		return locus_error_set(err, ENOMEM, "table of %zu bytes: out of memory", plen);
	memcpy(b + HDR, d, sizeof(*d));
	locus_grace_view_init(v, b + HDR, plen, NULL);
	*blob = b;
	*len = HDR + plen;
	return 0;
}

/* Validate what we built (a fit bug must not reach a data plane) and seal. */
static int seal(void *blob, size_t len, const struct locus_grace_view *v,
		struct locus_error *err)
{
	int rc = locus_grace_validate(v, err);

	if (rc)
		return rc;
	return locus_tbl_seal(blob, len, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, len - HDR);
}

/*
 * Score layer l's grouped placement (pri, rep, pred, li) against EPLB's
 * packing with the same replication (into the alt_* scratch), and keep the
 * cheaper by the layer objective; ties keep the grouping.
 */
static int fall_back(const struct locus_gracefit_topo *t, const struct locus_gracefit_profile *p,
		     uint32_t l, const struct locus_gracefit_opts *o, uint32_t R, uint16_t *pri,
		     uint16_t *rep, float *pred, uint16_t *alt_pri, uint16_t *alt_rep,
		     float *alt_pred, struct locus_gracefit_layer_info *li,
		     struct locus_error *err)
{
	struct locus_gracefit_layer_info ai = *li;
	uint32_t E = p->n_experts, N = t->n_nodes * t->gpus_per_node;
	const double *W = p->W + (size_t)l * E;
	double cg, cp;
	int rc;

	locus_gracefit_pack_layer(t, E, W, alt_pri);
	rc = locus_gracefit_replicate_layer(t, E, W, p->A ? p->A + (size_t)l * E * E : NULL,
						alt_pri, R, alt_rep, alt_pred, &ai, err);
	if (rc)
		return rc;
	cg = locus_gracefit_layer_cost(t, p, l, pri, li->rho_after, o, NULL, NULL);
	cp = locus_gracefit_layer_cost(t, p, l, alt_pri, ai.rho_after, o, NULL, NULL);
	li->cost_grouped = cg;
	li->cost_packed = cp;
	li->cost = cg;
	if (!(cp < cg))
		return 0;
	memcpy(pri, alt_pri, E * sizeof(*pri));
	memcpy(rep, alt_rep, (size_t)E * R * sizeof(*rep));
	memcpy(pred, alt_pred, N * sizeof(*pred));
	ai.fallback = 1;
	ai.cost = cp;
	ai.cost_grouped = cg;
	ai.cost_packed = cp;
	ai.r = li->r;
	ai.U = li->U;
	ai.S = li->S;
	ai.U_uniform = li->U_uniform;
	*li = ai;
	return 0;
}

int locus_gracefit_fit(const struct locus_gracefit_profile *p,
		       const struct locus_gracefit_topo *topo,
		       const struct locus_gracefit_opts *opts, void **blob, size_t *blob_len,
		       struct locus_gracefit_layer_info *info, struct locus_error *err)
{
	struct locus_gracefit_opts def = { .r = -1, .seed = 1 };
	struct locus_gracefit_topo t;
	struct locus_grace_dims d;
	struct locus_grace_view v;
	uint16_t *alt_pri = NULL, *alt_rep = NULL;
	float *alt_pred = NULL;
	uint32_t E, N;
	int rc;

	if (!p || !p->W || !topo || !blob || !blob_len)
		return locus_error_set(err, EINVAL, "fit: bad arguments");
	if (!opts)
		opts = &def;
	if (!p->A && !opts->no_grouping)
		return locus_error_set(err, EINVAL, "grouping needs co-activation data (a "
				       "trace); loads alone allow --no-grouping only");
	rc = locus_gracefit_dims(topo, p->n_layers, p->n_experts, &d, err);
	if (rc)
		return rc;
	t = *topo;
	t.capacity = d.capacity;
	if (opts->no_replication)
		t.replica_budget = 0; /* replicate_layer then only fills W' */
	E = d.n_experts;
	N = locus_grace_n_ranks(&d);
	for (size_t i = 0; i < (size_t)d.n_layers * E; i++)
		if (!isfinite(p->W[i]) || p->W[i] < 0)
			return locus_error_set(err, LOCUS_ENAN, "profile load [%zu][%zu] is %g",
					       i / E, i % E, p->W[i]);
	rc = alloc_blob(&d, blob, blob_len, &v, err);
	if (rc)
		return rc;
	if (!opts->no_grouping && !opts->no_fallback && p->tok && N > 1) {
		alt_pri = calloc(E, sizeof(*alt_pri));
		alt_rep = calloc((size_t)E * (d.max_replicas + 1), sizeof(*alt_rep));
		alt_pred = calloc(N, sizeof(*alt_pred));
		if (!alt_pri || !alt_rep || !alt_pred) {
			rc = locus_error_set(err, ENOMEM, "fit: out of memory");
			goto err_free;
		}
	}
	for (uint32_t l = 0; l < d.n_layers; l++) {
		struct locus_gracefit_layer_info li = { 0 };
		const double *W = p->W + (size_t)l * E;
		uint16_t *pri = v.primary + (size_t)l * E;
		uint16_t *rep = v.replica + (size_t)l * E * d.max_replicas;
		float *pred = v.pred_load + (size_t)l * N;

		rc = locus_gracefit_group_layer(&t, E, p->A ? p->A + (size_t)l * E * E : NULL,
						opts, pri, &li, err);
		if (rc)
			goto err_free;
		if (!opts->no_grouping && N > 1) {
			rc = locus_gracefit_balance_layer(&t, E, p->A + (size_t)l * E * E, W,
							  opts, pri, &li, err);
			if (rc)
				goto err_free;
		}
		rc = locus_gracefit_replicate_layer(&t, E, W,
							p->A ? p->A + (size_t)l * E * E : NULL, pri,
							d.max_replicas, rep, pred, &li, err);
		if (rc)
			goto err_free;
		if (alt_pri) {
			rc = fall_back(&t, p, l, opts, d.max_replicas, pri, rep, pred, alt_pri,
				       alt_rep, alt_pred, &li, err);
			if (rc)
				goto err_free;
		}
		for (uint32_t e = 0; e < E; e++)
			v.expert_load[(size_t)l * E + e] = (float)W[e];
		if (info)
			info[l] = li;
	}
	rc = seal(*blob, *blob_len, &v, err);
	if (rc)
		goto err_free;
	free(alt_pred);
	free(alt_rep);
	free(alt_pri);
	return 0;

err_free:
	free(alt_pred);
	free(alt_rep);
	free(alt_pri);
	free(*blob);
	*blob = NULL;
	*blob_len = 0;
	return rc;
}

int locus_gracefit_refit_replicas(const void *payload, size_t payload_len, const double *W,
				  void **blob, size_t *blob_len, double *rho_before,
				  double *rho_after, struct locus_error *err)
{
	struct locus_grace_view cur, v;
	struct locus_gracefit_topo t;
	double *pred = NULL, before = 0, after = 0;
	uint32_t E, N, R;
	int rc;

	if (!payload || !W || !blob || !blob_len)
		return locus_error_set(err, EINVAL, "refit: bad arguments");
	rc = locus_grace_view_init(&cur, (void *)(uintptr_t)payload, payload_len, err);
	if (rc)
		return rc;
	rc = locus_grace_validate(&cur, err);
	if (rc)
		return rc;
	rc = alloc_blob(cur.dims, blob, blob_len, &v, err);
	if (rc)
		return rc;
	E = cur.dims->n_experts;
	N = locus_grace_n_ranks(cur.dims);
	R = cur.dims->max_replicas;
	t = (struct locus_gracefit_topo){ .n_nodes = cur.dims->n_nodes,
					  .gpus_per_node = cur.dims->gpus_per_node,
					  .capacity = cur.dims->capacity,
					  .replica_budget = cur.dims->replica_budget };
	pred = calloc(N, sizeof(*pred));
	if (!pred) {
		rc = locus_error_set(err, ENOMEM, "refit: out of memory");
		goto err_free;
	}
	memcpy(v.primary, cur.primary, (size_t)cur.dims->n_layers * E * sizeof(uint16_t));
	for (uint32_t l = 0; l < cur.dims->n_layers; l++) {
		struct locus_gracefit_layer_info li = { 0 };
		const double *Wl = W + (size_t)l * E;

		before += locus_gracefit_predict(cur.dims, Wl, cur.primary + (size_t)l * E,
						 cur.replica + (size_t)l * E * R, pred);
		rc = locus_gracefit_replicate_layer(&t, E, Wl, NULL, v.primary + (size_t)l * E, R,
						    v.replica + (size_t)l * E * R,
						    v.pred_load + (size_t)l * N, &li, err);
		if (rc)
			goto err_free;
		after += li.rho_after;
		for (uint32_t e = 0; e < E; e++)
			v.expert_load[(size_t)l * E + e] = (float)Wl[e];
	}
	rc = seal(*blob, *blob_len, &v, err);
	if (rc)
		goto err_free;
	if (rho_before)
		*rho_before = before / cur.dims->n_layers;
	if (rho_after)
		*rho_after = after / cur.dims->n_layers;
	free(pred);
	return 0;

err_free:
	free(pred);
	free(*blob);
	*blob = NULL;
	*blob_len = 0;
	return rc;
}
