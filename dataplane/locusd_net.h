/* SPDX-License-Identifier: MIT */
/*
 * locusd's inter-node transport: the verbs endpoint, its registered DPDK
 * message pool and per-peer backlogs, behind struct locus_engine_remote.
 * The data side (locusd_net_poll, the engine's calls) runs on the engine's
 * lcore; connections (locusd_net_control) on the main lcore; create, attach
 * and destroy while the engine's lcore does not run.
 */
#ifndef LOCUSD_NET_H
#define LOCUSD_NET_H

#include <stdbool.h>
#include <stdint.h>

#include "locus_config.h"
#include "locus_counters.h"
#include "locus_engine.h"
#include "locus_err.h"
#include "locus_regions.h"

struct locusd_net;

/*
 * Read the cluster secret: 64 hex characters (a trailing newline allowed).
 * A file readable by others is refused.
 */
int locusd_read_secret(const char *path, uint8_t secret[32], struct locus_error *err);

/*
 * Open the RDMA device of each rail of cfg (names, or auto: the one nearest
 * rdma_near_pci / rdma_near_numa, or with gpu_pci the device nearest each
 * GPU: locus_rail_devs.h), bind node cfg->node_id's address for each rail,
 * listen, declare every other node on every rail both have (the lower id
 * dials), create and register the message pool with every rail's device.
 * Needs an initialised EAL. cfg must outlive the transport.
 */
int locusd_net_create(const struct locus_config *cfg, bool threaded, struct locusd_net **out,
		      struct locus_error *err);

/* The transport to give the engine (locus_node_create_remote). */
const struct locus_engine_remote *locusd_net_transport(struct locusd_net *n);

/*
 * Connect the engine that receives and completes messages, and export the
 * transport's counters (prefix "verbs") into the engine lcore's block
 * (data side) and the main lcore's (connections).
 */
int locusd_net_attach(struct locusd_net *n, struct locus_engine *eng, struct locus_counters *c,
		      uint32_t engine_block, uint32_t ctl_block, struct locus_error *err);

/* How client buffer regions get MRs, one per rail's device (main lcore). */
const struct locus_regions_mr_ops *locusd_net_mr_ops(struct locusd_net *n);

struct locus_engine_sink;

/*
 * Hand arrivals and send ends to sink instead of the attached engine (a
 * relay when the engine polls on another lcore). Before the lcores start.
 */
void locusd_net_set_sink(struct locusd_net *n, const struct locus_engine_sink *sink);

/* Data lcore, every iteration: CQ burst, backlogs, hand-overs; no syscall. */
int locusd_net_poll(struct locusd_net *n, uint64_t now_tsc);

/*
 * Main lcore, every control period: rdma_cm events, redials, destroying what
 * the engine lcore let go of; logs peers going up and down.
 */
void locusd_net_control(struct locusd_net *n);

/*
 * Main lcore, with etcd: node's record appeared or changed (its rails'
 * addresses, n_rails of them: every node has this node's rails), or went
 * away (ipv4 NULL). A member is dialled (lower id) or accepted; a node that
 * left is disconnected as a dead peer. 0; 1 for a node in none of this
 * node's groups (never connected); or -LOCUS_ERANGE for a node outside the
 * cluster or with another number of rails.
 */
int locusd_net_member(struct locusd_net *n, uint32_t node, const uint32_t *ipv4,
		      const uint16_t *port, uint32_t n_rails, struct locus_error *err);

/* Tear down (in-flight messages complete with errors). NULL is a no-op. */
/* Whether a connection to node is up on some rail (any lcore). */
int locusd_net_peer_up(struct locusd_net *n, uint32_t node);

void locusd_net_destroy(struct locusd_net *n);

#endif /* LOCUSD_NET_H */
