/* SPDX-License-Identifier: MIT */
/*
 * What the cluster subcommands of locusctl share (locusctl_cluster.c):
 * their options, the etcd keys, the members, the placement in force and a
 * two-phase push. Private to control/.
 */
#ifndef LOCUSCTL_CLUSTER_H
#define LOCUSCTL_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"
#include "locus_etcd.h"

struct copts {
	const char *etcd, *prefix, *cacert, *cert, *key, *path, *out;
	uint64_t cluster, timeout_ms, to, prepare_ms;
	int kind;                /* rollback: 0 eldr, 1 grace */
	/* rebalance */
	double interval, threshold, decay;
	uint64_t count, window, every, max_moves;
	/* recover */
	uint64_t settle_ms, lease_s, expert_bytes;
	double skew;
};

/* Parse the cluster options of argv (want_path: one positional path). 0 or -1. */
int cl_parse(int argc, char **argv, struct copts *o, int want_path);
struct locus_etcd *cl_open_etcd(const struct copts *o, struct locus_error *err);
/* <prefix>/<cluster>/<rest> into buf. */
void cl_key(char *buf, size_t len, const struct copts *o, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The member node ids (records under nodes/), at most max, and the revision read at. */
int cl_members_at(struct locus_etcd *e, const struct copts *o, uint32_t *ids, uint32_t max,
		  int64_t *rev, struct locus_error *err);
/* The generation in force of table kind (0 eldr, 1 grace; 0: none) and its mod revision. */
int cl_current(struct locus_etcd *e, const struct copts *o, unsigned kind, uint64_t *gen,
	       int64_t *mod_rev, struct locus_error *err);
/* The sealed blob of kind's generation gen, in *blob (free() it). */
int cl_fetch_blob_mem(struct locus_etcd *e, const struct copts *o, unsigned ch, uint64_t gen,
		      void **blob, size_t *len, struct locus_error *err);
/* Push blob to the cluster as push --cluster does (two phases). 0: committed. */
int cl_push_blob(const struct copts *o, const void *blob, size_t len, struct locus_error *err);

#endif /* LOCUSCTL_CLUSTER_H */
