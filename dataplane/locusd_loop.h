/* SPDX-License-Identifier: MIT */
/*
 * locusd's intra-node DMA for intra_node = verbs: the verbs loopback
 * (verbs/locus_verbs_loop.h) over the client region, behind the engine's
 * struct locus_engine_ldma. Everything but create/destroy runs on the
 * engine's lcore.
 */
#ifndef LOCUSD_LOOP_H
#define LOCUSD_LOOP_H

#include <stddef.h>

#include "locus_config.h"
#include "locus_engine.h"
#include "locus_err.h"

struct locusd_loop;

/* The sysfs root device choices read: $LOCUS_SYSFS_ROOT (tests' fake trees), else /sys. */
const char *locusd_sysfs_root(void);

/*
 * The RDMA device of cfg's first rail (dataplane/locus_rail_devs.h): its
 * rdma_device, or for auto the nearest one (with gpu_pci: GPU 0's).
 */
int locusd_rdma_device(const struct locus_config *cfg, char *name, size_t len,
		       struct locus_error *err);

/*
 * Register the client region [region, region + len) with cfg's device, one
 * MR per client slot (slot i at first + i * stride, count slots), and
 * connect the loop.
 */
int locusd_loop_create(const struct locus_config *cfg, void *region, size_t len, size_t first,
		       size_t stride, unsigned count, struct locusd_loop **out,
		       struct locus_error *err);

/*
 * The node's renew hook (locus_node_on_renew, ctx the loop): slot got a
 * fresh memfd, register its pages again. Main lcore; 0 or negative (retried).
 */
int locusd_loop_renew(void *ctx, uint32_t slot);

/* Main lcore, now and then: drop the registrations of replaced slots no copy uses. */
void locusd_loop_reap(struct locusd_loop *l);

/* What to give locus_engine_set_ldma(). */
const struct locus_engine_ldma *locusd_loop_ops(struct locusd_loop *l);

/* Engine lcore, every iteration: end finished copies. Returns how many ended. */
int locusd_loop_poll(struct locusd_loop *l, struct locus_engine *e);

/* Copies still in flight (drain before destroy). */
unsigned locusd_loop_inflight(const struct locusd_loop *l);

void locusd_loop_destroy(struct locusd_loop *l);

#endif /* LOCUSD_LOOP_H */
