/* SPDX-License-Identifier: MIT */
/*
 * Which ranks of the cluster are lost, as a recovery sees them through etcd
 * (control/cluster_ranks.c). Every node keeps ranks/<node> under its lease:
 * its GPUs with a rank client attached and the members it talks with but
 * cannot reach. From those and the member records:
 *
 *  - a rank is live while its node is a member and lists it attached;
 *  - it is lost once it was seen live and is not any more (its node's
 *    record went away, its rank client left, or its node is cut off);
 *  - a rank never seen live is pending: a node still starting, whose rank
 *    clients load their weights, is neither lost nor waited for;
 *  - a member is cut off when more than half of the other members that
 *    report list it as unreachable (it still has its lease: etcd sees it,
 *    its peers do not).
 *
 * Pure C over jansson; no etcd here.
 */
#ifndef LOCUS_CLUSTER_RANKS_H
#define LOCUS_CLUSTER_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

#define LOCUS_RANKS_MAX_GPUS 32u   /* GPUs of one node a report may list */
#define LOCUS_RANKS_MAX_DOWN 1024u /* members one report may list as unreachable */

/* What one node says (ranks/<node>). */
struct locus_ranks_report {
	uint32_t node;
	uint32_t attached;         /* bit g: its GPU g has a rank client attached */
	uint32_t n_down;
	uint16_t down[LOCUS_RANKS_MAX_DOWN]; /* members it talks with but cannot reach */
};

/*
 * Parse ranks/<node>'s value: {"node": N, "attached": [g, ...], "down": [n,
 * ...]} with N == node, every g < gpus_per_node, every n < n_nodes and not
 * N. 0, or -LOCUS_EPARSE / -LOCUS_ERANGE with a sentence.
 */
int locus_ranks_report_parse(const void *buf, size_t len, uint32_t node, uint32_t n_nodes,
			     uint32_t gpus_per_node, struct locus_ranks_report *out,
			     struct locus_error *err);

/* The view a recovery keeps across rounds. */
struct locus_ranks_view {
	uint32_t n_nodes, gpus_per_node, words;
	uint64_t *seen;            /* ranks ever seen live */
	uint64_t *live;            /* live now */
	uint64_t *lost;            /* seen and not live now */
	uint8_t *cut_off;          /* [n_nodes] members most reporting peers cannot reach */
	uint32_t n_live, n_lost;
};

int locus_ranks_view_init(struct locus_ranks_view *v, uint32_t n_nodes, uint32_t gpus_per_node,
			  struct locus_error *err);
void locus_ranks_view_free(struct locus_ranks_view *v);

/*
 * One round: member[n] says node n has a record; rep[n] its report or NULL
 * (none yet). Updates live, seen, lost and cut_off.
 */
void locus_ranks_view_update(struct locus_ranks_view *v, const uint8_t *member,
			     const struct locus_ranks_report *const *rep);

#endif /* LOCUS_CLUSTER_RANKS_H */
