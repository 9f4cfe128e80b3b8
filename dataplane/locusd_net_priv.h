/* SPDX-License-Identifier: MIT */
/*
 * locusd_net's state, shared by its files (locusd_net.c: endpoints, rails,
 * sending and receiving; locusd_net_ctr.c: the rails' failover counters).
 * Not a public header: everything outside goes through locusd_net.h.
 */
#ifndef LOCUSD_NET_PRIV_H
#define LOCUSD_NET_PRIV_H

#include <stdint.h>

#include "locus_config.h"
#include "locus_counters.h"
#include "locus_engine.h"
#include "locus_rails.h"
#include "locus_rail_devs.h"
#include "locus_rail_mr.h"
#include "locus_regions.h"
#include "locus_relay.h"
#include "locus_verbs.h"

#define POOL_OBJ      (64 * 1024)   /* largest message the engine hands over */
#define POOL_N        255           /* power of two minus one: mempool's best size */
#define BACKLOG       512           /* queued messages per peer, power of two */
#define MAX_CHUNKS    16
#define POST_BURST    32
#define SYNC_US       1000          /* data-side counter export period */

struct tx_rec {
	void *buf;
	uint32_t len;        /* bytes at buf (with n_sg: the header) */
	uint32_t node;
	uint64_t cookie;     /* the engine's */
	uint32_t n_sg;       /* rows gathered from a client region after buf */
	uint32_t src;        /* the source's rail slot (locus_rails_src) */
	uint32_t key;        /* the region of sg (locus_rail_mr.h), 0: none */
	uint32_t rows;       /* rows of a client region in the message (counted per rail) */
	uint64_t t_post;     /* TSC when it was posted: its send time ends at its completion */
	struct locus_verbs_sge sg[LOCUS_VERBS_MAX_SGE]; /* lkeys: the rail's it is queued on */
};

struct backlog {
	uint32_t idx[BACKLOG]; /* tx record indices, FIFO */
	uint32_t head, tail;
};

/*
 * Received messages a local client had no room for yet, held in the verbs
 * inbox: at most one per inbox slot, so cap = the peer's slot count.
 */
struct held {
	const void **data;
	uint32_t *len;
	uint32_t cap, head, tail;
};

struct locusd_net;

/* One RDMA device and its connections, one per peer that shares the rail. */
struct rail {
	struct locusd_net *n;
	uint32_t idx;
	char dev[LOCUS_VERBS_NAME_MAX];
	struct locus_verbs_ep *ep;
	struct locus_verbs_peer *peer[LOCUS_CFG_MAX_NODES];
	int up[LOCUS_CFG_MAX_NODES];
	struct backlog bl[LOCUS_CFG_MAX_NODES];
	struct held rx_held[LOCUS_CFG_MAX_NODES];
	struct locus_verbs_mr mr[MAX_CHUNKS]; /* the message pool on this device */
	unsigned n_mr;
	int mr_err;
	/* peer events: counted by the worker (release), logged by main */
	uint32_t n_up[LOCUS_CFG_MAX_NODES], n_down[LOCUS_CFG_MAX_NODES];
	int32_t down_reason[LOCUS_CFG_MAX_NODES];
	uint32_t seen_up[LOCUS_CFG_MAX_NODES], seen_down[LOCUS_CFG_MAX_NODES]; /* main's */
	/* failover (data lcore): exported as rail_*{rail} */
	uint64_t down_since[LOCUS_CFG_MAX_NODES]; /* TSC when an up connection went down, 0 */
	uint64_t down_tsc;   /* time without this rail to a peer, closed intervals, summed */
	uint64_t failovers;  /* connections of this rail lost while up */
	uint64_t resent;     /* queued messages moved to another rail when this one failed */
	uint64_t failed;     /* messages that ended with an error on this rail */
	uint64_t away;       /* messages sent here whose source's home is another rail */
	uint64_t failed_tsc; /* TSC of the last failover */
	uint64_t moved_tsc;  /* TSC of the first message of this rail's sources on another
			      * rail after it (0: none yet) */
	uint64_t rows_zc;    /* region rows posted here gathered from the region's MR */
	uint64_t rows_copied; /* region rows posted here copied (no MR on this device) */
	uint64_t up_msg_tsc; /* TSC of the first message posted here after a connection of the
			      * rail last came up (0: none yet) */
	/*
	 * The device's life (main lcore; the data lcore exports them, relaxed):
	 * times it went away and came back, and when (CLOCK_REALTIME ms)
	 */
	uint64_t dev_lost, dev_back;
	int64_t dev_lost_ms, dev_back_ms;
	/* main's: what locusd_net_control logged of the endpoint's device */
	uint64_t seen_dev_lost, seen_dev_back, seen_reopen_failed;
	uint32_t restored_regions, restored_no_mr; /* the last restore's, for its log line */
	char failed_note[128];           /* the last reopening failure logged */
};

enum { RC_FAILOVERS, RC_RESENT, RC_FAILED, RC_AWAY, RC_DOWN_MS, RC_UP, RC_FAILED_AT, RC_MOVED_AT,
       RC_ROWS_ZC, RC_ROWS_COPIED, RC_NO_MR, RC_DEV_LOST, RC_DEV_BACK, RC_DEV_LOST_AT,
       RC_DEV_BACK_AT, RC_UP_MSG_AT, RC_N };

struct locusd_net {
	const struct locus_config *cfg;
	uint32_t n_rails;                    /* this node's */
	/* the nodes this one talks with (locus_config_talks), ascending: what
	 * the loops over peers walk, however large the cluster */
	uint32_t peer_ids[LOCUS_CFG_MAX_PEERS];
	uint32_t n_peer_ids;
	struct locus_rail_devs devs;         /* each rail's device, auto's GPU map */
	struct rail rail[LOCUS_CFG_MAX_RAILS];
	uint32_t up_mask[LOCUS_CFG_MAX_NODES]; /* bit r: rail r's connection to node is up */
	struct locus_rails pick;             /* the data lcore's */
	struct rte_mempool *pool;
	struct tx_rec rec[POOL_N];
	uint32_t rec_free[POOL_N];
	uint32_t n_rec_free;
	struct locus_engine *eng;
	struct locus_engine_sink sink;      /* the engine, or a relay to the engine's lcore */
	struct locus_engine_remote rt;
	struct locus_regions_mr_ops mr_ops;
	struct locus_rail_mrs mrs;          /* clients' regions, an MR per rail */
	uint64_t next_sync, sync_period;
	void *ctr_block;                    /* the data lcore's, for the rail_* counters */
	uint64_t base_tsc, base_ms;         /* one TSC reading and CLOCK_REALTIME ms at create */
	uint32_t dev_probe_ms;              /* how often a rail's gone device is looked for */
	uint64_t ctr_off[RC_N];
	uint64_t ctr_send_ns;               /* rail_send_ns{rail,peer}: post to completion */
	uint64_t ctr_peer_node;             /* rail_peer_node{peer}: a peer index's node id */
	uint8_t peer_idx[LOCUS_CFG_MAX_NODES]; /* node -> index in peer_ids, 0xff none */
};

/* rail_*{rail} counters (locusd_net_ctr.c): registered at attach, written by the data lcore. */
int locusd_net_attach_rail_counters(struct locusd_net *n, struct locus_counters *c,
				    uint32_t block, struct locus_error *err);
void locusd_net_sync_rail_counters(struct locusd_net *n, uint64_t now_tsc);

#endif /* LOCUSD_NET_PRIV_H */
