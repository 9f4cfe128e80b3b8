/* SPDX-License-Identifier: MIT */
/*
 * Cluster membership through etcd (dataplane/README.md, "The cluster"): a
 * node keeps its record under <prefix>/<cluster id>/nodes/<node id>, held
 * by a lease it keeps alive, and watches the other records. A record that
 * appears or changes is a peer to dial or accept; one that goes away (its
 * node stopped, or its lease lapsed) is a dead peer.
 *
 * The node id is claimed create-if-absent in one transaction: a second node
 * with an id in use is refused for as long as the first one's lease lives.
 * The lease id is kept in a file, so a node that restarts on the same host
 * takes its own record back at once instead of waiting for the lease.
 *
 * When etcd cannot be reached the agent keeps the membership it has (no
 * peer is dropped for it), retries with a growing pause, counts and says
 * so, and catches up from the last revision it saw once etcd answers.
 *
 * The cluster's tables live there too: locusctl push --cluster stores a
 * table under <prefix>/<cluster id>/tables/blob/<kind>/<generation> and
 * moves tables/current/<kind> to that generation in one transaction; every
 * member fetches it, hands it to its owner (who adopts it as a local push,
 * through the same validation) and writes what it did under
 * reports/<kind>/<node>, held by its lease. A node that joins or comes back
 * reads the current tables first.
 *
 * A GRACE placement changes in two phases, so that no row reaches a rank
 * without its expert's weights. locusctl stores the blob and names its
 * generation in tables/prepare/grace; every member stages it, its rank
 * clients load the experts they gain and acknowledge, and the member writes
 * tables/acks/grace/<generation>/<node> under its lease. Once every member
 * acknowledged, one transaction (its compares: the prepared generation and
 * every member's acknowledgement) moves tables/current/grace and deletes
 * the prepared key; a missing acknowledgement past the bound deletes the
 * prepared key alone (aborted: nothing switches). Generations come from
 * tables/next/<kind> and are never given twice, so an aborted generation's
 * acknowledgements can never stand for another placement.
 *
 * Plain C over the etcd client (control/locus_etcd.h): no EAL, verbs or
 * segment. locus_cluster_poll() never blocks; it belongs to one thread
 * (locusd's main lcore), as do the callbacks it runs.
 */
#ifndef LOCUS_CLUSTER_H
#define LOCUS_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "locus_cluster_loads.h"
#include "locus_err.h"

#define LOCUS_CLUSTER_MAX_RAILS   8
#define LOCUS_CLUSTER_TABLE_KINDS 2     /* 0 ELDR (table channel 0), 1 GRACE (channel 1) */
#define LOCUS_CLUSTER_PROTO       4     /* the inter-node protocol (verbs handshake) */
#define LOCUS_CLUSTER_RECORD_MAX  4096  /* bytes of a node record */

/* What a node says of itself. */
struct locus_node_record {
	uint32_t node;
	uint64_t cluster;
	uint32_t proto;
	uint32_t gpus;                    /* GPUs (ranks) on the node */
	uint32_t n_rails;
	uint32_t rail_ipv4[LOCUS_CLUSTER_MAX_RAILS]; /* network byte order */
	uint16_t rail_port[LOCUS_CLUSTER_MAX_RAILS];
	bool draining;                    /* "state": "draining": leaving, take no new work */
	uint64_t boot;                    /* random per start of its locusd */
	char host[64];                    /* informative */
};

/*
 * Parse and check a record read from etcd for node `node` of cluster
 * `cluster`: JSON with the fields above, ids that match the key and the
 * cluster, 1..8 rails of IPv4:port, a non-zero boot. Anything else is
 * refused with a sentence.
 */
int locus_node_record_parse(const void *buf, size_t len, uint32_t node, uint64_t cluster,
			    struct locus_node_record *out, struct locus_error *err);

/* The record as JSON into buf (NUL-terminated). Returns its length, or -LOCUS_ERANGE. */
int locus_node_record_format(const struct locus_node_record *r, char *buf, size_t len);

struct locus_cluster_params {
	const char *endpoints;        /* etcd URLs, comma-separated */
	const char *cacert, *cert, *key; /* TLS files, or NULL */
	const char *prefix;           /* key prefix; NULL: "/locus" */
	const char *lease_file;       /* where the lease id survives a restart; NULL: none */
	uint32_t lease_ttl_s;         /* 0: 5 */
	uint32_t timeout_ms;          /* one request's bound; 0: 2000 */
	struct locus_node_record self;
};

/* What the agent tells its owner. Every callback may be NULL. */
struct locus_cluster_ops {
	/* a node's record appeared or changed (new addresses, a new boot) */
	void (*node_up)(void *arg, const struct locus_node_record *r);
	/* a node's record went away: its node stopped or its lease lapsed */
	void (*node_gone)(void *arg, uint32_t node);
	/* a record that does not parse: refused, the last good one kept */
	void (*record_bad)(void *arg, uint32_t node, const struct locus_error *why);
	/* the agent's own state changed (logging) */
	void (*state)(void *arg, int state, const struct locus_error *why);
	/*
	 * the cluster's table of kind moved to generation: its sealed blob
	 * (valid during the call); the owner adopts it and answers with
	 * locus_cluster_report. why non-NULL: the blob could not be read
	 * (blob NULL): the owner reports the refusal.
	 */
	void (*table)(void *arg, unsigned kind, uint64_t generation, const void *blob, size_t len,
		      const struct locus_error *why);
	/*
	 * a placement change was prepared at generation (phase one): its
	 * sealed blob (valid during the call), for the owner to stage and
	 * answer with locus_cluster_prepare_ack; why non-NULL: the blob could
	 * not be read. generation 0: the prepared change is gone (committed:
	 * table() follows; or aborted): unstage it.
	 */
	void (*prepare)(void *arg, uint64_t generation, const void *blob, size_t len,
			const struct locus_error *why);
	/* every member now plans with generation oldest or a later one */
	void (*plans_from)(void *arg, uint64_t oldest);
};

enum locus_cluster_state {
	LOCUS_CLUSTER_JOINING,     /* getting a lease and claiming the id */
	LOCUS_CLUSTER_MEMBER,      /* the record is ours, the watch runs */
	LOCUS_CLUSTER_REFUSED,     /* the id is held by another node's lease; trying again */
	LOCUS_CLUSTER_UNREACHABLE, /* etcd did not answer; keeping the membership we have */
};

/* Counters the owner exports. */
struct locus_cluster_stats {
	uint64_t etcd_requests, etcd_errors;
	uint64_t joins, refusals, lease_lost;
	uint64_t records_up, records_gone, records_bad;
	uint64_t watch_restarts, resyncs;
	uint64_t tables_seen, table_fetch_errors, reports;
};

struct locus_cluster;

/* Start joining (nothing blocks: the requests go out from locus_cluster_poll). */
int locus_cluster_open(const struct locus_cluster_params *p, const struct locus_cluster_ops *ops,
		       void *arg, struct locus_cluster **out, struct locus_error *err);

/* Move the agent on; now_ms is a monotonic clock. Never blocks. */
void locus_cluster_poll(struct locus_cluster *c, uint64_t now_ms);

/*
 * Leave: revoke the lease so the others see this node go at once (bounded
 * by the request time-out), forget the lease file, free. NULL is a no-op.
 */
void locus_cluster_close(struct locus_cluster *c);

enum locus_cluster_state locus_cluster_state(const struct locus_cluster *c);
const char *locus_cluster_state_name(int state);
const struct locus_cluster_stats *locus_cluster_stats(const struct locus_cluster *c);

/* The record the agent holds for node (a member, not this node), or NULL. */
const struct locus_node_record *locus_cluster_node(const struct locus_cluster *c, uint32_t node);

/* "eldr" or "grace". */
const char *locus_cluster_table_kind_name(unsigned kind);

/*
 * What this node did with the cluster's table of kind at generation:
 * status 0, adopted as local generation local_gen; or -code and reason.
 * Written under reports/<kind>/<node> with the node's lease (again after a
 * rejoin); a later report replaces it. 0, or -LOCUS_ERANGE for a bad kind.
 */
int locus_cluster_report(struct locus_cluster *c, unsigned kind, uint64_t generation,
			 int status, uint64_t local_gen, const char *reason);

/*
 * This node's answer to the placement prepared at generation: status 0,
 * its ranks (the number that took part) hold the new placement's experts;
 * or -code and reason: it cannot take it, and the change is aborted. Written
 * under tables/acks/grace/<generation>/<node> with the node's lease (again
 * after a rejoin). 0, or -LOCUS_ERANGE for generation 0.
 */
int locus_cluster_prepare_ack(struct locus_cluster *c, uint64_t generation, int status,
			      uint32_t ranks, const char *reason);

/* What a node keeps under its lease besides its record. */
enum locus_cluster_pub {
	LOCUS_CLUSTER_PUB_LOADS,  /* stats/expert_tokens/<node>: its expert loads */
	LOCUS_CLUSTER_PUB_RANKS,  /* ranks/<node>: its ranks attached, the peers it lost */
	LOCUS_CLUSTER_N_PUBS
};

/*
 * Keep buf (len bytes, copied; at most LOCUS_CLUSTER_LOADS_MAX) under this
 * node's key for what, under its lease: written when the agent can and
 * again after a rejoin. 0, -EBUSY (the last value is still being written:
 * give it again later), -LOCUS_ERANGE or -ENOMEM.
 */
int locus_cluster_publish(struct locus_cluster *c, unsigned what, const void *buf, size_t len);

/*
 * Publish this node's loads (a sealed buffer as above, copied) under its
 * lease; written from the agent's next pass, again after a rejoin. 0, or
 * -ENOMEM / -LOCUS_ERANGE (too large).
 */
int locus_cluster_publish_loads(struct locus_cluster *c, const void *buf, size_t len);

/* Nodes with a record now, this one included when it is a member. */
uint32_t locus_cluster_n_members(const struct locus_cluster *c);

#endif /* LOCUS_CLUSTER_H */
