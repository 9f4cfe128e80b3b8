/* SPDX-License-Identifier: MIT */
/*
 * Scoring placements of EP groups on routed requests (the epgroups_figures
 * tool): per request its decoder's rank loads and the token rows that leave
 * the source GPU, under the planner's resolution (a copy on the source GPU,
 * else the node's copies, else all, split by the map's round-robin weights:
 * the long-run shares of the data plane's smooth weighted round robin), so
 * that requests add up and can be resampled (bootstrap).
 */
#ifndef EPGROUPS_SCORE_H
#define EPGROUPS_SCORE_H

#include <stddef.h>
#include <stdint.h>

#include "locus_grace_plan.h"
#include "locus_graceset.h"
#include "locus_trace.h"

/* A placement set's planner maps, one per group (malloc'd). */
struct es_placement {
	uint32_t n_groups, n_layers;
	uint32_t first[LOCUS_GRACESET_MAX_GROUPS], n[LOCUS_GRACESET_MAX_GROUPS];
	struct locus_grace_map *map[LOCUS_GRACESET_MAX_GROUPS];
};

/* Maps of a sealed set; exits with a message on error. */
void es_placement_load(struct es_placement *p, const void *blob, size_t len);
void es_placement_free(struct es_placement *p);

/* Per-request contributions under one placement. */
struct es_contrib {
	uint32_t n_req, L, R;
	uint32_t *decoder;   /* [n_req] group of each request */
	double *load;        /* [n_req][L][R] (token, expert) pairs each rank serves */
	double *leave;       /* [n_req] token rows sent off the source GPU */
	double *tok_layers;  /* [n_req] token-layers */
};

/*
 * Contributions of requests req[0..n-1] of t, routed to decoder[i], under p.
 * Each request's decode tokens (prompt tokens without decode data); token j
 * of request i sits on rank j mod R of its group (data-parallel attention).
 */
void es_contrib(const struct es_placement *p, const struct locus_trace *t, const uint32_t *req,
		const uint32_t *decoder, uint32_t n, struct es_contrib *c);
void es_contrib_free(struct es_contrib *c);

/*
 * The two figures over the requests of w (weights: how often each request
 * is drawn; NULL = each once): mm = max/mean load over each decoder's ranks,
 * averaged over layers and decoders with load; leave = rows leaving the GPU
 * per token-layer.
 */
void es_figures(const struct es_contrib *c, const uint32_t *w, uint32_t K, double *mm,
		double *leave);

/*
 * EPLB-style placement of one layer on n ranks of slots each (n x slots >= E):
 * the n x slots - E extra slots go one at a time to the expert of highest
 * load per copy; copies are packed hottest first onto the rank of least load
 * with a free slot and no copy of that expert. primary[E] gets each expert's
 * first copy, replica[E][R] the others ascending (NO_RANK padded), pred[n]
 * the ranks' loads (each copy W / copies). Returns 0, or -1 when a copy has
 * nowhere to go.
 */
int es_eplb_layer(const double *W, uint32_t E, uint32_t n, uint32_t slots, uint32_t R,
		  uint16_t *primary, uint16_t *replica, float *pred);

#endif /* EPGROUPS_SCORE_H */
