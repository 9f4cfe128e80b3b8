/* SPDX-License-Identifier: MIT */
/*
 * Verbs loopback: the RDMA device as a DMA engine between buffers of one
 * node (locusd's intra_node = verbs). Two RC queue pairs on one device are
 * connected to each other directly (no rdma_cm: both ends are ours); RDMA
 * WRITEs from the first into one registered area move bytes from one place
 * of it to another without the CPU touching them.
 *
 * The area is registered on a protection domain of its own, so the queue
 * pairs that talk to other nodes (another PD) can never name it, one MR per
 * chunk (locusd: one per client slot, each a memfd of its own), and a chunk
 * whose memory was replaced is registered again (locus_verbs_loop_rereg)
 * while copies posted before keep the old registration until they end.
 *
 * Single-threaded: everything but create/destroy, rereg and reap runs on
 * the thread that polls; rereg and reap run on one other thread. A copy is a gather of source ranges into one contiguous
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

/*
 * An area registered in chunks: [addr + chunk_off + i * chunk_len, +chunk_len)
 * for i < n_chunks (n_chunks 0: the whole area is one chunk). Offsets stay
 * relative to addr; every range a copy names must lie inside one chunk.
 */
struct locus_verbs_loop_area {
	void *addr;
	size_t len;
	size_t chunk_off;
	size_t chunk_len;
	unsigned n_chunks;
};

int locus_verbs_loop_create_area(const char *dev, const struct locus_verbs_loop_area *a,
				 unsigned depth, struct locus_verbs_loop **out,
				 struct locus_error *err);

/*
 * Register chunk again, over the pages mapped there now (the caller mapped
 * new memory over it, and posts no copy naming the chunk until this
 * returns). The old MR is deregistered once every copy posted before has
 * ended (reap). 0, -EBUSY (the previous replacement is still in use: try
 * again later), -ERANGE, or -errno of ibv_reg_mr.
 */
int locus_verbs_loop_rereg(struct locus_verbs_loop *l, unsigned chunk, struct locus_error *err);

/* Deregister the replaced MRs no copy can use any more (the rereg thread). */
void locus_verbs_loop_reap(struct locus_verbs_loop *l);

void locus_verbs_loop_destroy(struct locus_verbs_loop *l);

/* Most source ranges one WR gathers (the device's max_send_sge, capped). */
unsigned locus_verbs_loop_max_sge(const struct locus_verbs_loop *l);

/*
 * Copy n source ranges, in order, to dst_off onwards. Every range (and the
 * destination) must lie in one chunk of the area. Returns 0 (the end comes through locus_verbs_loop_poll with
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
