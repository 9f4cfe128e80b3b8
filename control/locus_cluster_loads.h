/* SPDX-License-Identifier: MIT */
/*
 * The loads record a node keeps in etcd for a rebalance of the whole
 * cluster (dataplane/locus_cluster.h has the key layout; locusctl rebalance
 * --cluster reads it). Pure C.
 */
#ifndef LOCUS_CLUSTER_LOADS_H
#define LOCUS_CLUSTER_LOADS_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

/*
 * A node's expert loads, for a rebalance of the whole cluster (locusctl
 * rebalance --cluster): its expert_tokens counter, summed over its engines,
 * under stats/expert_tokens/<node>, held by its lease. Little-endian:
 *   struct locus_cluster_loads_hdr   32 bytes
 *   u64 tokens[n_layers][n_experts]  cumulative since the node's start (boot)
 */
#define LOCUS_CLUSTER_LOADS_MAGIC 0x4b4f5445u /* "ETOK" */
#define LOCUS_CLUSTER_LOADS_MAX   (1u << 20)  /* bytes: etcd takes 1.5 MiB a request */

struct locus_cluster_loads_hdr {
	uint32_t magic;
	uint32_t node;
	uint32_t n_layers, n_experts;
	uint64_t boot;        /* the node's boot id: a new one starts its counts from 0 */
	uint64_t seq;         /* one more per publication */
};

/*
 * Check loads read under node's key: magic, the node, dims within 1..4096
 * and the exact length. *counts points into buf. 0, or -LOCUS_EPARSE with a
 * sentence.
 */
int locus_cluster_loads_parse(const void *buf, size_t len, uint32_t node,
			      const struct locus_cluster_loads_hdr **hdr, const uint64_t **counts,
			      struct locus_error *err);

#endif /* LOCUS_CLUSTER_LOADS_H */
