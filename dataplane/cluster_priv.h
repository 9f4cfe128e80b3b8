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

/*
 * One prefix followed: read whole, then watched from the read's revision
 * (read again when the watch's start was compacted away).
 */
struct cluster_follow {
	struct locus_cluster *c;
	char key[300];
	struct locus_etcd_watch *w;
	int64_t rev;
	uint8_t synced, sync_busy;
	uint64_t at_ms;
	/* a key put (kv) or deleted (kv->value NULL); synced: 1 when a read resent every key */
	void (*kv)(struct locus_cluster *c, const struct locus_etcd_kv *kv, int deleted);
	void (*synced_fn)(struct locus_cluster *c);
};

/* The two-phase placement change as this node follows it (cluster_prepare.c). */
struct cluster_prepare {
	struct cluster_follow prep;  /* tables/prepare/ */
	struct cluster_follow rep;   /* reports/grace/: which generation every member plans with */
	char blob[300];              /* tables/blob/grace/ */
	char acks[300];              /* tables/acks/grace/ */
	uint64_t want;               /* the generation prepared (0: none) */
	uint64_t fetched;            /* handed to the owner */
	uint64_t fetch_gen;          /* the generation a fetch in flight asked for */
	uint8_t fetch_busy, ack_busy, ack_dirty;
	uint64_t fetch_at_ms;
	uint64_t ack_gen;
	char ack[512];
	/* reports/grace/<node>: the generation each member plans with (0: unknown) */
	uint32_t *plan_node;
	uint64_t *plan_gen;
	uint32_t n_plan, cap_plan;
	uint64_t oldest_told;
	/* values this node keeps under its lease, written again while dirty */
	struct cluster_pub {
		struct locus_cluster *c;
		char key[300];
		void *val;
		size_t len;
		uint8_t dirty, busy;
	} pub[LOCUS_CLUSTER_N_PUBS];
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
	struct cluster_prepare pr;
};


void set_state(struct locus_cluster *c, enum locus_cluster_state s, const struct locus_error *why);

/* cluster_tables.c: keys made at open, then one step per poll while a member. */
void cluster_tables_init(struct locus_cluster *c, const char *base);
void cluster_tables_poll(struct locus_cluster *c);
void cluster_tables_rejoined(struct locus_cluster *c);
void cluster_tables_close(struct locus_cluster *c);

/* s as the inside of a JSON string (quotes, backslashes, controls escaped), cut to fit len. */
void cluster_json_escape(const char *s, char *out, size_t len);

/* cluster_prepare.c: the same steps for placement changes in two phases. */
void cluster_prepare_init(struct locus_cluster *c, const char *base);
void cluster_prepare_poll(struct locus_cluster *c);
void cluster_prepare_rejoined(struct locus_cluster *c);
void cluster_prepare_close(struct locus_cluster *c);

/* Whether node is a member now (this node included). */
int cluster_is_member(const struct locus_cluster *c, uint32_t node);

#endif /* LOCUS_CLUSTER_PRIV_H */
