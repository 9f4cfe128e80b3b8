/* SPDX-License-Identifier: MIT */
/*
 * Verbs loopback: the RDMA device as a DMA engine between buffers of one
 * node (locusd's intra_node = verbs). Two RC queue pairs on one device are
 * connected to each other directly (no rdma_cm: both ends are ours); RDMA
 * WRITEs from the first into one registered area move bytes from one place
 * of it to another without the CPU touching them.
 *
 * The area is registered on a protection domain of its own, so the queue
 * pairs that talk to other nodes (another PD) can never name it.
 *
 * Single-threaded: everything but create/destroy runs on the thread that
 * polls. A copy is a gather of source ranges into one contiguous
 * destination; its end is reported exactly once, in posting order, with 0
 * or a negative status. After an error the pair is reset and reconnected
 * once nothing is in flight.
 */
#ifndef LOCUS_VERBS_LOOP_H
#define LOCUS_VERBS_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

struct locus_verbs_loop;

struct locus_verbs_loop_src {
	uint64_t off;   /* from the start of the area */
	uint32_t len;
};

struct locus_verbs_loop_stats {
	uint64_t copies, bytes, wrs;
	uint64_t errors;       /* copies that ended with an error */
	uint64_t resets;       /* the pair reconnected after an error */
	uint64_t full;         /* copies refused: send queue full */
};

/*
 * Open device dev (a name from /sys/class/infiniband), register [addr,
 * addr + len) and connect a queue pair to another on the same port.
 * depth: send queue entries. Returns 0 or -errno with err filled.
 */
int locus_verbs_loop_create(const char *dev, void *addr, size_t len, unsigned depth,
			    struct locus_verbs_loop **out, struct locus_error *err);

void locus_verbs_loop_destroy(struct locus_verbs_loop *l);

/* Most source ranges one WR gathers (the device's max_send_sge, capped). */
unsigned locus_verbs_loop_max_sge(const struct locus_verbs_loop *l);

/*
 * Copy n source ranges, in order, to dst_off onwards. Every range must lie
 * in the area. Returns 0 (the end comes through locus_verbs_loop_poll with
 * cookie), -LOCUS_EFULL (send queue full: nothing posted), -ERANGE (a range
 * outside the area), -EIO (the pair is down: nothing posted).
 */
int locus_verbs_loop_copy(struct locus_verbs_loop *l, uint64_t dst_off,
			  const struct locus_verbs_loop_src *src, unsigned n, uint64_t cookie);

typedef void (*locus_verbs_loop_done_fn)(void *arg, uint64_t cookie, int status);

/* Poll completions (one burst); done() once per finished copy. Returns copies ended. */
int locus_verbs_loop_poll(struct locus_verbs_loop *l, locus_verbs_loop_done_fn done, void *arg);

/* Copies posted and not yet ended. */
unsigned locus_verbs_loop_inflight(const struct locus_verbs_loop *l);

const struct locus_verbs_loop_stats *locus_verbs_loop_stats(const struct locus_verbs_loop *l);

#endif /* LOCUS_VERBS_LOOP_H */
