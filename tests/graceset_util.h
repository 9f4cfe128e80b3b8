/* SPDX-License-Identifier: MIT */
/* GRACE tables and placement sets built by hand for the placement-set tests. */
#ifndef GRACESET_UTIL_H
#define GRACESET_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "locus_grace.h"
#include "locus_graceset.h"

/*
 * A sealed GRACE table (malloc'd, *len bytes) on n_nodes x gpn: every
 * layer puts expert e on primary[e] with replicas replica[e][0..R-1]
 * (LOCUS_GRACE_NO_RANK padded; R = d->max_replicas); each expert's load 10
 * split evenly over its copies gives the predicted loads. Capacity and
 * budget are the largest per-rank counts. Fails the test if it does not
 * validate.
 */
void *gs_table(uint32_t n_layers, uint32_t n_experts, uint32_t n_nodes, uint32_t gpn,
	       uint32_t R, const uint16_t *primary, const uint16_t *replica, size_t *len);

/* One part of a set: a group's tag and range with its table. */
struct gs_group {
	uint32_t id, first, n;
	void *blob;
	size_t len;
};

/* A set from n groups (no checks: locus_graceset_build_unchecked); frees the tables. */
void *gs_set(struct gs_group *g, uint32_t n, size_t *len);

#endif /* GRACESET_UTIL_H */
