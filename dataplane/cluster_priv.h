/* SPDX-License-Identifier: MIT */
/* What cluster.c and cluster_tables.c share (dataplane/ only). */
#ifndef LOCUS_CLUSTER_PRIV_H
#define LOCUS_CLUSTER_PRIV_H

#include "locus_cluster.h"
#include "locus_etcd.h"

#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 1000

struct locus_cluster;

/* What a fetch or a report is about (a callback's arg). */
struct cluster_fetch {
	struct locus_cluster *c;
	unsigned kind;
	uint64_t gen;
};

/* The cluster's tables as this node follows them (cluster_tables.c). */
struct cluster_tables {
	struct cluster_fetch fctx[LOCUS_CLUSTER_TABLE_KINDS];
	char current[300];           /* <prefix>/<cluster>/tables/current/ */
	char blob[300];              /* <prefix>/<cluster>/tables/blob/ */
	char reports[300];           /* <prefix>/<cluster>/reports/ */
	struct locus_etcd_watch *w;
	int64_t rev;
	uint8_t synced, sync_busy;
	uint64_t watch_at_ms;
	uint64_t want[LOCUS_CLUSTER_TABLE_KINDS];    /* the current generation etcd names */
	uint64_t fetched[LOCUS_CLUSTER_TABLE_KINDS]; /* handed to the owner */
	uint8_t fetch_busy[LOCUS_CLUSTER_TABLE_KINDS];
	uint64_t fetch_at_ms[LOCUS_CLUSTER_TABLE_KINDS];
	/* the last report per kind, written (again after a rejoin) while it is dirty */
	char report[LOCUS_CLUSTER_TABLE_KINDS][512];
	uint8_t report_dirty[LOCUS_CLUSTER_TABLE_KINDS], report_busy[LOCUS_CLUSTER_TABLE_KINDS];
};

struct member {
	struct locus_node_record r;
	uint8_t live;
};

struct locus_cluster {
	struct locus_etcd *e;
	struct locus_cluster_ops ops;
	void *arg;
	struct locus_node_record self;
	char prefix[256];            /* <prefix>/<cluster>/nodes/ */
	char key[300];               /* our record's key */
	char record[LOCUS_CLUSTER_RECORD_MAX];
	size_t record_len;
	char *lease_file;
	uint32_t ttl_s;
	enum locus_cluster_state state;
	struct locus_cluster_stats st;

	int64_t lease;               /* 0: none yet */
	uint64_t next_keepalive_ms;
	uint8_t lease_busy, claim_busy, sync_busy, leaving;
	uint8_t claimed, synced, lease_checked;
	int64_t claim_rev;           /* our own record from before a restart, to write again */
	uint64_t retry_at_ms, retry_ms;
	uint64_t now_ms;

	struct locus_etcd_watch *w;
	int64_t rev;                 /* every change up to it applied */
	uint64_t watch_at_ms, watch_retry_ms;

	struct member *m;            /* sorted by node id */
	uint32_t n_m, cap_m;

	struct cluster_tables t;
};


void set_state(struct locus_cluster *c, enum locus_cluster_state s, const struct locus_error *why);

/* cluster_tables.c: keys made at open, then one step per poll while a member. */
void cluster_tables_init(struct locus_cluster *c, const char *base);
void cluster_tables_poll(struct locus_cluster *c);
void cluster_tables_rejoined(struct locus_cluster *c);
void cluster_tables_close(struct locus_cluster *c);

#endif /* LOCUS_CLUSTER_PRIV_H */
