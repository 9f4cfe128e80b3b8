/* SPDX-License-Identifier: MIT */
/*
 * Which rail (RDMA device) a message to a peer node goes out on. Pure: no
 * verbs, no EAL; the transport (dataplane/locusd_net.c) calls it on its
 * data lcore for every message and tells it when each one ended.
 *
 * A source rank's home rail is its local rank (src_rank mod gpus_per_node)
 * mod the rails the two nodes have in common, so a node's ranks spread over
 * its rails and one rank's traffic to a peer stays on one rail; with a GPU
 * map (rdma_device = auto with gpu_pci: locus_rails_map) it is the rail of
 * the device nearest the rank's GPU where the peer has that rail too, the
 * mod rule otherwise. Order: the
 * rail's backlog is FIFO and an RC connection delivers in posting order, so
 * what one source rank sends to one node arrives in the order it was handed
 * over as long as it all uses one rail. A source therefore leaves its
 * current rail for a peer only when nothing of it is outstanding there (or
 * the rail is down: then everything on it has ended, delivered or failed,
 * before the transport reports it down), and comes back home the same way.
 * Between two source ranks of a node there is no order (a receiving
 * engine interleaves them anyway).
 */
#ifndef LOCUS_RAILS_H
#define LOCUS_RAILS_H

#include <stdint.h>

#include "locus_config.h"

struct locus_rails {
	uint32_t n_nodes, gpus;
	uint8_t common[LOCUS_CFG_MAX_NODES];                        /* rails shared with node */
	uint8_t home[LOCUS_CFG_MAX_NODES][LOCUS_CFG_MAX_GPUS];      /* (node, source)'s home rail */
	uint8_t cur[LOCUS_CFG_MAX_NODES][LOCUS_CFG_MAX_GPUS];       /* rail in use by (node, source) */
	uint32_t pending[LOCUS_CFG_MAX_NODES][LOCUS_CFG_MAX_GPUS];  /* handed over, not ended */
	uint64_t moves;                                             /* a source changed rails */
};

/*
 * Rails of this node (cfg->node_id) with every other node, home rails by
 * the mod rule; each source starts home.
 */
void locus_rails_init(struct locus_rails *r, const struct locus_config *cfg);

/*
 * Home rails by GPU: local rank g (g < n) goes home to rail gpu_rail[g] on
 * every node that shares that rail, by the mod rule elsewhere. gpu_rail:
 * rdma_device = auto's map (the rail of the device nearest each GPU of
 * gpu_pci). Before the first pick; each source starts at its new home.
 */
void locus_rails_map(struct locus_rails *r, const uint8_t *gpu_rail, uint32_t n);

/* The state slot of a source rank (its local rank). */
static inline uint32_t locus_rails_src(const struct locus_rails *r, uint32_t src_rank)
{
	return src_rank % r->gpus;
}

/* A source's home rail towards node. */
static inline uint32_t locus_rails_home(const struct locus_rails *r, uint32_t node, uint32_t src)
{
	return r->home[node][src];
}

/*
 * The rail for the next message of source slot src to node, given the
 * rails up now (bit i: rail i), or -1 when none is. Keeps the current rail
 * while the source has messages outstanding on it and it is up; otherwise
 * home if up, else the next rail up after it. Call locus_rails_sent() once
 * the message was handed to that rail.
 */
int locus_rails_pick(struct locus_rails *r, uint32_t node, uint32_t src, uint32_t up_mask);

static inline void locus_rails_sent(struct locus_rails *r, uint32_t node, uint32_t src)
{
	r->pending[node][src]++;
}

/* A message of (node, src) ended: completed, failed or dropped. */
static inline void locus_rails_ended(struct locus_rails *r, uint32_t node, uint32_t src)
{
	if (r->pending[node][src])
		r->pending[node][src]--;
}

#endif /* LOCUS_RAILS_H */
