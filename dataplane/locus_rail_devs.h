/* SPDX-License-Identifier: MIT */
/*
 * Which RDMA device each rail of this node uses, from its config and a sysfs
 * root (production: /sys). Pure: file reading only (verbs/devmap.c,
 * verbs/sysfs.c), no device is opened, so the host tests run it on fake
 * trees.
 *
 *   rdma_device = a,b,...      rail i is the i-th name;
 *   rdma_device = NAME         one rail;
 *   rdma_device = auto         one rail: the device nearest rdma_near_pci /
 *                              rdma_near_numa (locus_verbs_dev_pick);
 *   auto with gpu_pci          the device nearest each GPU by PCIe distance
 *                              (locus_verbs_dev_near_gpus), one rail per
 *                              distinct device, numbered in the order of
 *                              the GPUs' first appearance (the device of
 *                              GPU 0 is rail 0, the next device another GPU
 *                              names rail 1, ...); node.<id> lists one
 *                              address per rail in that order, and the
 *                              devices found must be exactly as many.
 */
#ifndef LOCUS_RAIL_DEVS_H
#define LOCUS_RAIL_DEVS_H

#include <stdint.h>

#include "locus_config.h"
#include "locus_err.h"
#include "locus_verbs.h"

struct locus_rail_devs {
	uint32_t n;                                           /* rails */
	char name[LOCUS_CFG_MAX_RAILS][LOCUS_VERBS_NAME_MAX]; /* rail i's device */
	uint32_t n_gpus;                                      /* 0: no GPU map */
	uint8_t gpu_rail[LOCUS_CFG_MAX_GPUS];                 /* GPU g's rail (auto + gpu_pci) */
};

/*
 * Resolve cfg's devices into out. With rails (the node connects to other
 * nodes) an auto map must give exactly as many rails as node.<node_id>
 * lists addresses; without (one node: only rail 0's device is used, by the
 * verbs loopback) any count is taken. rdma_device = none gives no rail.
 * Returns 0, or negative with err saying what is wrong and what to change.
 */
int locus_rail_devs_resolve(const struct locus_config *cfg, const char *sysfs_root, int rails,
			    struct locus_rail_devs *out, struct locus_error *err);

#endif /* LOCUS_RAIL_DEVS_H */
