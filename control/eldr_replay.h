/* SPDX-License-Identifier: MIT */
/*
 * The router's replay of calibration requests (control/eldr_replay.c): what
 * locusctl fit --tau auto and eldr_quality hand to
 * locus_eldrfit_tau_choose(). It links the data plane's pure-C router
 * (lib eldr_router) and eldr_quality's batch simulation; control/ declares
 * the same function in locusctl.h without seeing either header.
 */
#ifndef ELDR_REPLAY_H
#define ELDR_REPLAY_H

#include "locus_eldrfit.h"

/*
 * What the replays of one trace share: its requests' prompt signatures and
 * decode steps, built on first use. A cache serves one trace (a call with
 * another trace rebuilds it) and is freed before that trace is.
 */
struct eldr_replay_cache;
int eldr_replay_cache_new(struct eldr_replay_cache **out); /* 0 or -ENOMEM */
void eldr_replay_cache_free(struct eldr_replay_cache *c);  /* NULL: no-op */

/*
 * A locus_eldrfit_replay_fn (its contract in locus_eldrfit.h); arg: a
 * struct eldr_replay_cache, or NULL (one built for the call).
 */
int eldr_replay_router(void *arg, const struct locus_trace *t, const void *payload, size_t len,
		       const uint32_t *idx, uint32_t n, uint32_t B, uint32_t orders,
		       uint64_t seed, double *pairs, double *load, struct locus_error *err);

/* A locus_eldrfit_oracle_fn: eldr_quality's domain oracle in the same rounds; arg as above. */
int eldr_replay_domain(void *arg, const struct locus_trace *t, uint32_t K, const uint32_t *idx,
		       uint32_t n, uint32_t B, uint32_t orders, uint64_t seed, double *pairs,
		       double *load, struct locus_error *err);

#endif /* ELDR_REPLAY_H */
