// SPDX-License-Identifier: MIT
/* A node's loads record (locus_cluster_loads.h). */
#include <stdint.h>

#include "locus_cluster_loads.h"
#include "locus_err_priv.h"

int locus_cluster_loads_parse(const void *buf, size_t len, uint32_t node,
			      const struct locus_cluster_loads_hdr **hdr, const uint64_t **counts,
			      struct locus_error *err)
{
	const struct locus_cluster_loads_hdr *h = buf;

	if (!buf || len < sizeof(*h) || (uintptr_t)buf % 8)
		return locus_error_set(err, LOCUS_EPARSE, "node %u's loads: %zu bytes, not a "
				       "loads record", node, len);
	if (h->magic != LOCUS_CLUSTER_LOADS_MAGIC || h->node != node)
		return locus_error_set(err, LOCUS_EPARSE, "node %u's loads: magic %#x, node %u",
				       node, h->magic, h->node);
	if (!h->n_layers || !h->n_experts || h->n_layers > 4096 || h->n_experts > 4096 ||
	    len != sizeof(*h) + (size_t)h->n_layers * h->n_experts * sizeof(uint64_t))
		return locus_error_set(err, LOCUS_EPARSE, "node %u's loads: %u x %u counts in %zu "
				       "bytes", node, h->n_layers, h->n_experts, len);
	*hdr = h;
	*counts = (const uint64_t *)(h + 1);
	return 0;
}
