/* SPDX-License-Identifier: MIT */
/*
 * locusctl: subcommands and the helpers they share. A subcommand is one
 * entry in the table of locusctl.c: a name, a handler that gets argv from
 * the subcommand's name on, and a one-line usage. A handler returns the
 * process exit status (0 ok, 1 failure, 2 usage).
 */
#ifndef LOCUSCTL_H
#define LOCUSCTL_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

struct locusctl_cmd {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *usage;
};

/* ELDR (control/eldr_ctl_fit.c: fit; control/eldr_ctl.c: show, push) */
int locusctl_eldr_fit(int argc, char **argv);
int locusctl_eldr_show(int argc, char **argv);
/*
 * push -i INSTANCE TABLE: any kind with a table channel (ELDR -> 0, GRACE ->
 * 1), checked locally with the kind's validator before it is published.
 */
int locusctl_push(int argc, char **argv);

/*
 * A table file read for a push: its kind and table channel, checked with its
 * kind's validator (control/eldr_ctl.c). *buf is the caller's to free.
 */
int locusctl_table_for_push(const char *path, void **buf, size_t *len, unsigned *kind,
			    unsigned *channel, struct locus_error *err);

/*
 * The cluster's tables in etcd (control/locusctl_cluster.c): push --cluster
 * stores a table once and prints each node's answer; show --cluster prints
 * the tables in force and what each node did with them.
 */
int locusctl_push_cluster(int argc, char **argv);
int locusctl_show_cluster(int argc, char **argv);
/* diff --cluster TABLE: against the cluster's table of its kind in force */
int locusctl_diff_cluster(int argc, char **argv);
/* rollback --cluster: the kind's older generation (--to, or the newest before) stored again */
int locusctl_rollback_cluster(int argc, char **argv);
/* rebalance --cluster: the cluster's placement refitted from every node's loads */
int locusctl_rebalance_cluster(int argc, char **argv);
/* recover --cluster: the placement follows the live ranks (locusctl_recover.c). */
int locusctl_recover_cluster(int argc, char **argv);

/*
 * History, diff, rollback (control/locusctl_history.c). push keeps a table
 * under the generation it gets before publishing it (a push killed after
 * the publish still leaves what runs on record; one killed before leaves an
 * entry the next push of that generation replaces) and drops the entry when
 * the data plane refuses the table.
 */
int locusctl_history_save(const char *instance, unsigned kind, uint64_t gen, const void *buf,
			  size_t len, struct locus_error *err);
void locusctl_history_drop(const char *instance, unsigned kind, uint64_t gen);
int locusctl_diff(int argc, char **argv);
int locusctl_rollback(int argc, char **argv);

/*
 * GRACE placement sets (control/locusctl_graceset.c). fit: the per-decoder
 * placement of the trace t under the ELDR table at eldr_path, R EP ranks
 * per decoder on the cluster topo, written to out; returns an exit status.
 */
struct locus_trace;
struct locus_gracefit_topo;
struct locus_gracefit_opts;
int locusctl_graceset_fit(const struct locus_trace *t, const char *eldr_path, uint32_t R,
			  const struct locus_gracefit_topo *topo,
			  const struct locus_gracefit_opts *opts, const char *out);
/* show SET [--json]: each group's tag, ranks, shape and placement. */
int locusctl_graceset_show(int argc, char **argv);
/* locusctl_history.c: differences between two sets, per group: 0 same, 1 different, 2 trouble. */
int locusctl_graceset_diff(const void *a, size_t alen, const void *b, size_t blen);
/* The same for two GRACE tables; lines start with prefix. */
int locusctl_grace_diff(const void *a, size_t alen, const void *b, size_t blen,
			const char *prefix);

/*
 * The router's replay of calibration requests for fit --tau auto, a
 * locus_eldrfit_replay_fn (locus_eldrfit.h). Defined in control/eldr_replay.c,
 * which links the data plane's pure-C router (lib eldr_router) whose header
 * the control plane does not include; the definition sees this declaration.
 */
struct locus_trace;
struct eldr_replay_cache; /* what the replays of one trace share; arg of both replays, or NULL */
int eldr_replay_cache_new(struct eldr_replay_cache **out);
void eldr_replay_cache_free(struct eldr_replay_cache *c);
int eldr_replay_router(void *arg, const struct locus_trace *t, const void *payload, size_t len,
		       const uint32_t *idx, uint32_t n, uint32_t B, uint32_t orders,
		       uint64_t seed, double *pairs, double *load, struct locus_error *err);
/* The domain oracle's replay in the same rounds, a locus_eldrfit_oracle_fn (same file). */
int eldr_replay_domain(void *arg, const struct locus_trace *t, uint32_t K, const uint32_t *idx,
		       uint32_t n, uint32_t B, uint32_t orders, uint64_t seed, double *pairs,
		       double *load, struct locus_error *err);

/*
 * locusctl simulate (control/sim_ctl.c): the trace-driven serving simulation,
 * which links the data plane's pure-C router as the replay above does.
 */
int locusctl_simulate(int argc, char **argv);

/*
 * Progress callback for long fits: a redrawn bar when stderr is a terminal,
 * otherwise one plain line per stage and per 10% step. arg is unused.
 */
void locusctl_progress(void *arg, const char *stage, uint32_t done, uint32_t total);

/* A decimal u64 <= max, the whole string (no sign): 0 or -1 (eldr_ctl.c). */
int locusctl_parse_u64(const char *s, uint64_t max, uint64_t *v);
/* A finite float in [min, max], the whole string: 0 or -1. */
int locusctl_parse_float(const char *s, float min, float max, float *v);

/* "locusctl: <msg>" on stderr from an error report; returns 1. */
int locusctl_fail(const struct locus_error *err, int code);

#endif /* LOCUSCTL_H */
