/* SPDX-License-Identifier: MIT */
/*
 * Client buffer regions on every rail: one memory registration per rail's
 * device, and what a message gathered from a region needs to leave on
 * whichever rail carries it. Pure: the registrations themselves are the
 * caller's callbacks (locusd_net.c: verbs), so the host tests drive it
 * with fakes.
 *
 * A region is known by a key (>= 1), which the engine puts in its gather
 * entries where an lkey would go (struct locus_engine_sge: the engine does
 * not know rails). When the transport has picked the rail of a message
 * (and again when a failover moves it to another rail before it was
 * posted), locus_rail_mrs_resolve() gives the entries that rail's lkey, or,
 * on a rail whose device did not register the region, copies their bytes
 * into the message after its header: zero-copy where the rail can, a copy
 * on that rail only where it cannot. Every rail's MR of a region has the
 * same addresses (iova), so the entries need no other change.
 *
 * Threads: reg / dereg on the control thread; resolve on the data lcore. A
 * key reaches the data lcore only through the engine, after the region's
 * ADD command was published (release / acquire), and is deregistered only
 * once the engine acknowledged its DEL, i.e. once no message of it is left
 * with the transport: the entries the data lcore reads never change under
 * it.
 *
 * A rail whose device goes away (locus_verbs_dev.h) drops its MRs of every
 * region (locus_rail_mrs_drop_rail, control, once the data lcore let go of
 * the rail: none of its messages is left) and registers them again when the
 * device is back (locus_rail_mrs_restore_rail, before any connection of the
 * new device): in between resolve refuses the rail, so no message is ever
 * given the key of a freed MR, and regions registered meanwhile get their
 * MR on it at the restore. The data lcore resolves only for rails it has a
 * connection up on, which it can have only after the restore (published by
 * the endpoint's device word, then the connection's link word); the gone
 * flag it checks first says the same with an acquire of its own.
 */
#ifndef LOCUS_RAIL_MR_H
#define LOCUS_RAIL_MR_H

#include <stddef.h>
#include <stdint.h>

#include "locus_config.h"
#include "locus_err.h"
#include "locus_verbs.h"

enum locus_rail_mr_path {
	LOCUS_RAIL_MR_NONE   = 0, /* no MR on that rail: its rows are copied there */
	LOCUS_RAIL_MR_DMABUF = 1, /* from the dma-buf (ibv_reg_dmabuf_mr) */
	LOCUS_RAIL_MR_MAPPED = 2, /* on locusd's mapping (ibv_reg_mr) */
};

/* How memory is registered with rail r's device. */
struct locus_rail_mr_dev {
	/*
	 * A dma-buf MR of fd's [offset, offset + len) at address iova: 0 with
	 * *lkey and *mr, or negative (-EOPNOTSUPP: the device takes none;
	 * -ENODEV, from either call: the rail's device is gone, the region is
	 * registered there when it is back).
	 */
	int (*reg_dmabuf)(void *ctx, uint32_t rail, int fd, uint64_t offset, uint64_t len,
			  uint64_t iova, uint32_t *lkey, void **mr, struct locus_error *err);
	/* An MR of [addr, addr + len): 0 with *lkey and *mr, or negative. */
	int (*reg_mapped)(void *ctx, uint32_t rail, void *addr, uint64_t len, uint32_t *lkey,
			  void **mr, struct locus_error *err);
	void (*dereg)(void *ctx, uint32_t rail, void *mr);
	void *ctx;
};

/* One region on every rail. */
struct locus_rail_mr {
	uint64_t iova;                      /* address of byte 0 in every rail's MR */
	const uint8_t *addr;                /* locusd's mapping, NULL: none */
	uint64_t len;
	int fd;                             /* the caller's dma-buf (-1: none), open until dereg:
					     * a rail whose device comes back registers it again */
	uint64_t offset;                    /* of the region in fd */
	uint32_t lkey[LOCUS_CFG_MAX_RAILS]; /* 0: no MR on that rail */
	void *mr[LOCUS_CFG_MAX_RAILS];
	uint8_t path[LOCUS_CFG_MAX_RAILS];  /* enum locus_rail_mr_path */
	uint8_t used;
};

struct locus_rail_mrs {
	struct locus_rail_mr_dev dev;
	uint32_t n_rails, cap;
	struct locus_rail_mr *e;            /* cap entries: key k is e[k - 1] */
	/* registrations another rail took but rail r did not (its rows copied there) */
	uint64_t no_mr[LOCUS_CFG_MAX_RAILS];
	/* 1: rail r's device is gone (drop_rail .. restore_rail): resolve refuses it */
	uint8_t gone[LOCUS_CFG_MAX_RAILS];
};

/* What one registration got (the caller's counters and log line). */
struct locus_rail_mr_how {
	uint32_t dmabuf, mapped, none;      /* rails by path */
	uint32_t gone;                      /* rails whose device is gone: an MR when it is back */
	uint32_t dmabuf_refused;            /* rails whose device took no dma-buf MR (-EOPNOTSUPP) */
	char why[512];                      /* each rail's path and why not a better one */
};

/* An empty table of cap regions over n_rails (1..LOCUS_CFG_MAX_RAILS). 0 or -errno. */
int locus_rail_mrs_init(struct locus_rail_mrs *t, uint32_t n_rails, uint32_t cap,
			const struct locus_rail_mr_dev *dev);

/* Deregister what is left and free the table (control thread, data lcore stopped). */
void locus_rail_mrs_fini(struct locus_rail_mrs *t);

/*
 * Register a region with every rail: with fd >= 0 a dma-buf MR where the
 * rail's device takes one, else (and for host memory, fd < 0) an MR on map
 * when there is one. *iova: map's address when there is a mapping (every
 * rail's MR is made at it), else offset. Returns the region's key (>= 1)
 * with *how; -EOPNOTSUPP when no rail has an MR (how->why says why; a rail
 * whose device is gone has none), -ENOSPC when the table is full. A rail
 * without an MR while another has one is counted in no_mr[rail]; one whose
 * device is gone is not (how->gone): it registers the region when it is
 * back. fd (when >= 0) must stay open until locus_rail_mrs_dereg.
 */
int locus_rail_mrs_reg(struct locus_rail_mrs *t, int fd, uint64_t offset, uint64_t len,
		       void *map, uint64_t *iova, struct locus_rail_mr_how *how);

/* Deregister key's MRs on every rail (no message of it left with the transport). */
void locus_rail_mrs_dereg(struct locus_rail_mrs *t, uint32_t key);

/*
 * Make a message sendable on rail: buf holds *len bytes (the header), sg[0,
 * *n_sg) are segments of region key (addresses from its iova). With an MR
 * on rail each segment takes the rail's lkey and 0 is returned; without,
 * their bytes are copied from the region's mapping after the header (*len
 * grows by them, *n_sg becomes 0) and 1 is returned. Negative: an unknown
 * key or a segment outside the region (-EINVAL), no mapping to copy from
 * (-EOPNOTSUPP), more than cap bytes in all (-EMSGSIZE), a rail whose
 * device is gone (-ENODEV); nothing changed then. Data lcore: no syscall,
 * no allocation, no lock.
 */
int locus_rail_mrs_resolve(const struct locus_rail_mrs *t, uint32_t key, uint32_t rail,
			   void *buf, uint32_t *len, size_t cap, struct locus_verbs_sge *sg,
			   uint32_t *n_sg);

/*
 * Rail's device went away (control, once the data lcore let go of the rail:
 * no message of it is left there): deregister every region's MR on it and
 * forget their keys; until locus_rail_mrs_restore_rail, resolve refuses the
 * rail (-ENODEV) and registrations skip it.
 */
void locus_rail_mrs_drop_rail(struct locus_rail_mrs *t, uint32_t rail);

/*
 * Rail's device is back (control, before any connection on it): every
 * region registered on it again as at its registration (a dma-buf MR where
 * the device takes one, else on the mapping); one it does not take is
 * copied on that rail, counted in no_mr[rail]. Then resolve takes the rail
 * again. Returns the regions that got an MR there; *none: those that did
 * not (NULL: not wanted).
 */
uint32_t locus_rail_mrs_restore_rail(struct locus_rail_mrs *t, uint32_t rail, uint32_t *none);

/* no_mr[rail], read on the data lcore while the control thread may add to it. */
static inline uint64_t locus_rail_mrs_no_mr(const struct locus_rail_mrs *t, uint32_t rail)
{
	return __atomic_load_n(&t->no_mr[rail], __ATOMIC_RELAXED);
}

#endif /* LOCUS_RAIL_MR_H */
