/* SPDX-License-Identifier: MIT */
/*
 * locusd's membership through etcd (locus_cluster.h): the agent on the main
 * lcore, its counters (cluster_* in the main lcore's block) and its log
 * lines, and the peers it makes members of the transport (locusd_net.h).
 * Main lcore only.
 */
#ifndef LOCUSD_CLUSTER_H
#define LOCUSD_CLUSTER_H

#include <stdint.h>

#include "locus_config.h"
#include "locus_counters.h"
#include "locus_err.h"

struct locusd_cluster;
struct locusd_net;

/*
 * The agent for cfg (cfg->etcd set), this node's record from cfg, peers
 * made members of net (NULL on a single node), the cluster's tables pushed
 * through push (the channels' writer) and reported, counters registered in
 * block of c. Nothing is sent yet.
 */
struct locus_pushsrv;
int locusd_cluster_create(const struct locus_config *cfg, struct locusd_net *net,
			  struct locus_pushsrv *push, struct locus_counters *c, uint32_t block,
			  struct locusd_cluster **out, struct locus_error *err);

/*
 * The node whose rank slots take part in placement changes: told the staged
 * and planned generations, their acknowledgements read (locus_client_priv.h).
 */
struct locus_node;
void locusd_cluster_set_node(struct locusd_cluster *lc, struct locus_node *node);

/*
 * At start: run the agent until this node is a member, its id is refused
 * (-EEXIST, err names the holder), or wait_ms passed (0: etcd did not
 * answer in time; joins go on in the background).
 */
int locusd_cluster_join(struct locusd_cluster *lc, uint32_t wait_ms, struct locus_error *err);

/* Every control pass: move the agent on, copy its counts into the counters. */
void locusd_cluster_poll(struct locusd_cluster *lc);

/* Leave (the lease revoked: the others see this node go at once) and free. NULL: no-op. */
void locusd_cluster_destroy(struct locusd_cluster *lc);

#endif /* LOCUSD_CLUSTER_H */
