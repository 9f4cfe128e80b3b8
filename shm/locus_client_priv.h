/* SPDX-License-Identifier: MIT */
/*
 * Client slots as locusd lays them out and serves them, and what locusd and
 * the client library share about them: the control line, the registration
 * socket's messages. Not installed, not exported: a serving worker uses
 * locus_client.h, whose top comment describes slots and attaching.
 */
#ifndef LOCUS_CLIENT_PRIV_H
#define LOCUS_CLIENT_PRIV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "locus_client.h"
#include "locus_common.h"
#include "locus_err.h"
#include "locus_ring.h"

#define LOCUS_CLIENTS_MAGIC   0x53544e45494c434cull /* "LCLIENTS" */
#define LOCUS_CLIENTS_VERSION 3u

enum locus_client_state {
	LOCUS_CLIENT_FREE      = 0,
	LOCUS_CLIENT_CLAIMED   = 1, /* locusd attaches it for a request */
	LOCUS_CLIENT_ACTIVE    = 2,
	LOCUS_CLIENT_DETACHING = 4,
};

/* Region header: geometry fixed at creation. */
struct locus_clients_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t n_slots;
	uint32_t ring_size;
	uint32_t inbox_slots;
	uint32_t inbox_slot_size;
	uint32_t reserved0;
	uint64_t stage_size;
	uint64_t slot_stride;     /* bytes from one slot to the next */
	uint64_t slots_off;       /* slot 0, from the region start */
	uint64_t region_size;
	uint8_t  reserved[8];
};

/* The control and load lines at the start of every slot. */
struct locus_client_ctl {
	uint64_t state_pid;       /* state | (u64)owner pid << 32; one atomic word
				   * so a slot is never claimed without an owner */
	uint64_t start_ticks;     /* owner's start time (pid reuse guard) */
	uint32_t roles;           /* requested: enum locus_client_role bits */
	uint32_t decoder_id;      /* with LOCUS_ROLE_DECODE */
	uint32_t rank;            /* with LOCUS_ROLE_RANK (global rank id) */
	uint32_t reserved0;       /* 0 */
	uint64_t generation;      /* bumped by the daemon at every activation */
	/* placement changes (locus_client_placement()), written by the daemon */
	uint64_t pl_staged;       /* generation prepared: load for it, then ack; 0 none */
	uint64_t pl_current;      /* generation this node's engines plan with; 0 none */
	uint64_t pl_free_below;   /* no member plans under an older one any more */
	/* the decoder's load report, written only by the client */
	uint64_t load_seq __locus_cache_aligned; /* bumped after each report */
	uint32_t load;            /* requests in its batch / queue */
	uint32_t reserved;
	/* written only by a rank client: pl_part 1 once it takes part in
	 * placement changes; from then on it holds the experts of every
	 * generation in [pl_floor, pl_acked] and gets only rows planned under
	 * one of them (none before its first ack). pl_part 0: it takes no part
	 * and its rows are not checked */
	uint64_t pl_acked;
	uint64_t pl_floor;
	uint32_t pl_part;
	uint32_t reserved1;
	uint8_t  pad2[LOCUS_CACHE_LINE - 40];
	/*
	 * The ranks the engine serving this client can reach, written by that
	 * engine when the set changes (locus_client_ranks()): ranks_seq is odd
	 * while it writes, so a reader retries until it reads the same even
	 * seq before and after the words
	 */
	uint64_t ranks_seq __locus_cache_aligned;
	uint32_t ranks_n;         /* ranks the placement's map has (bits that mean something) */
	uint32_t ranks_lost_n;    /* of them, unreachable */
	uint64_t ranks_changed_ns; /* CLOCK_MONOTONIC of the last change, 0 never */
	uint8_t  pad3[LOCUS_CACHE_LINE - 24];
	uint64_t ranks_lost[LOCUS_CLIENT_RANK_WORDS]; /* bit r of word r / 64: rank r lost */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_client_ctl) ==
		    3 * LOCUS_CACHE_LINE + LOCUS_CLIENT_RANK_WORDS * 8, "ctl lines");

static inline uint32_t locus_client_state_of(uint64_t state_pid)
{
	return (uint32_t)state_pid;
}

static inline pid_t locus_client_pid_of(uint64_t state_pid)
{
	return (pid_t)(state_pid >> 32);
}

static inline uint64_t locus_client_state_pid(uint32_t state, pid_t pid)
{
	return (uint64_t)state | ((uint64_t)(uint32_t)pid << 32);
}

/* A client's own control lines (client_attach.c). */
struct locus_client;
struct locus_client_ctl *locus_client_ctl_of(const struct locus_client *c);

/* Bytes of a region with these params, or 0 if they are out of range. */
uint64_t locus_clients_region_size(const struct locus_clients_params *p);

/* Lay out an empty region in memory of one piece (all slots FREE). Returns 0 or -EINVAL. */
int locus_clients_init(void *region, uint64_t size, const struct locus_clients_params *p);

/* Validate an existing region and fill the view. Returns 0 or -LOCUS_E*. */
int locus_clients_open(struct locus_clients *v, void *region, uint64_t size);

/* The geometry of p into v (base NULL, no fds): a client's view. -EINVAL if p is bad. */
int locus_clients_geometry(struct locus_clients *v, const struct locus_clients_params *p);

/*
 * Daemon side: reserve the region's range in this process, the header page
 * in private memory and every slot a memfd of its own ("locus-slot-<i>",
 * sealed against shrinking and growing, so no holder can make locusd's
 * accesses fault) mapped at its offset. Returns 0 with v open, or a
 * negative code (err says).
 */
int locus_clients_create(struct locus_clients *v, const struct locus_clients_params *p,
			 struct locus_error *err);

/* Unmap the range and close the memfds (v from locus_clients_create). */
void locus_clients_destroy(struct locus_clients *v);

/*
 * Give slot a fresh memfd, mapped over the old one at the same address:
 * whoever still maps the old object keeps an orphan nobody reads. Only while
 * no thread of this process touches the slot (the engine let go of it). 0,
 * or -errno with the old object left in place.
 */
int locus_clients_renew(struct locus_clients *v, uint32_t slot);

static inline struct locus_client_ctl *locus_clients_ctl(const struct locus_clients *v,
							 uint32_t slot)
{
	return (struct locus_client_ctl *)(v->base + v->slots_off + (uint64_t)slot * v->slot_stride);
}

static inline void *locus_clients_submit_ring(const struct locus_clients *v, uint32_t slot)
{
	return (uint8_t *)locus_clients_ctl(v, slot) + sizeof(struct locus_client_ctl);
}

static inline void *locus_clients_completion_ring(const struct locus_clients *v, uint32_t slot)
{
	return (uint8_t *)locus_clients_submit_ring(v, slot) + v->ring_bytes;
}

static inline uint8_t *locus_clients_buf(const struct locus_clients *v, uint32_t slot)
{
	return (uint8_t *)locus_clients_ctl(v, slot) + v->buf_off;
}

/*
 * Daemon side, for a FREE slot a request is granted: claim writes the
 * request and its sender into the control line (state CLAIMED), prepare
 * lays out fresh rings (state unchanged), publish makes it ACTIVE if its
 * state word is still the claimed one (read after prepare) and bumps the
 * generation. 0, -LOCUS_ESTATE (the slot is not in that state), -LOCUS_ERANGE.
 * release returns a slot to FREE (the caller renewed its memfd first).
 */
int locus_clients_claim(struct locus_clients *v, uint32_t slot, pid_t pid, uint64_t start_ticks,
			uint32_t roles, uint32_t decoder_id, uint32_t rank);
int locus_clients_prepare(struct locus_clients *v, uint32_t slot);
int locus_clients_publish(struct locus_clients *v, uint32_t slot, uint64_t claimed);
void locus_clients_release(struct locus_clients *v, uint32_t slot);

enum locus_clients_event {
	LOCUS_CLIENTS_IDLE  = 0, /* nothing for the daemon to do */
	LOCUS_CLIENTS_GONE  = 2, /* the client detached, died or broke its state
				  * word: stop using the slot, then release it */
};

/*
 * The daemon's periodic look at an attached slot (control thread only: it
 * reads /proc): IDLE while it is ACTIVE and its owner lives, else GONE.
 */
int locus_clients_check(struct locus_clients *v, uint32_t slot);

/*
 * The same look without /proc (no system call): GONE only when the slot's
 * state word says the client left (detached, or broke it). A daemon calls it
 * every pass and locus_clients_check(), which also sees a client that died,
 * less often.
 */
int locus_clients_check_state(struct locus_clients *v, uint32_t slot);

/* ------------------------------------------------------------------ */
/* The registration socket (locus_client_reg_sock_path).               */

#define LOCUS_REG_MAGIC          0x47455244u /* "DREG" */
#define LOCUS_REG_VERSION        2u
#define LOCUS_REG_SOCK_SUFFIX    ".reg"

enum locus_reg_op {
	LOCUS_REG_DMABUF     = 1, /* the message carries one fd (SCM_RIGHTS) */
	LOCUS_REG_UNREGISTER = 2,
	LOCUS_REG_ATTACH     = 3, /* a slot, please: the answer carries its memfd */
	LOCUS_REG_ATTACHED   = 4, /* on the same connection: the slot is mapped, keep it */
};

/*
 * The registration socket's messages (SOCK_SEQPACKET, one request and one
 * reply per connection; ATTACH adds the client's ATTACHED). The daemon
 * checks the sender with SO_PEERCRED: for DMABUF and UNREGISTER its pid
 * must own slot, in generation; an ATTACH makes it the owner of the slot
 * granted.
 */
struct locus_reg_req {
	uint32_t magic;       /* LOCUS_REG_MAGIC */
	uint32_t version;     /* LOCUS_REG_VERSION */
	uint32_t op;          /* enum locus_reg_op */
	uint32_t slot;        /* the sender's client slot (ATTACH: 0) */
	uint64_t generation;  /* the slot's activation generation (ATTACH: 0) */
	union {
		struct {
			uint64_t offset; /* REG_DMABUF: region start in the dma-buf */
			uint64_t len;    /* REG_DMABUF: region bytes */
		};
		struct {
			uint32_t roles;      /* ATTACH: enum locus_client_role bits */
			uint32_t decoder_id; /* ATTACH: with LOCUS_ROLE_DECODE */
			uint32_t rank;       /* ATTACH: with LOCUS_ROLE_RANK */
			uint32_t attach_reserved; /* 0 */
		};
	};
	uint32_t region;      /* UNREGISTER: the id */
	uint32_t reserved;    /* 0 */
};

struct locus_reg_rep {
	uint32_t magic;
	uint32_t version;
	int32_t  status;      /* 0 or -code */
	uint32_t region;      /* REG_DMABUF: the new region's id (never 0) */
	uint32_t flags;       /* enum locus_region_flags */
	uint32_t slot;        /* ATTACH: the slot granted; its memfd comes with SCM_RIGHTS */
	uint64_t generation;  /* ATTACH: its activation generation */
	/* ATTACH: the slot's geometry (struct locus_clients_params but n_slots) */
	uint32_t ring_size;
	uint32_t inbox_slots;
	uint32_t inbox_slot_size;
	uint32_t clients_version; /* LOCUS_CLIENTS_VERSION: the slot's layout */
	uint64_t stage_size;
	uint64_t slot_size;   /* bytes of the memfd */
	char     msg[128];    /* why, when status < 0 (NUL-terminated) */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_reg_req) == 48, "registration request");
LOCUS_STATIC_ASSERT(sizeof(struct locus_reg_rep) == 192, "registration reply");

/* The client library's side of the exchange (shm/client_*.c). */

/* A non-blocking connection to instance's registration socket, or -code (err says). */
int locus_client_reg_connect(const char *instance, struct locus_error *err);

/*
 * Send req on sock (with fd, if >= 0) and wait up to timeout_ms for the
 * reply; the fd the reply carried goes to *fd_in (-1 none; closed if fd_in
 * is NULL). 0 with rep checked for magic and version, or -code (err says);
 * rep->status is the caller's to judge.
 */
int locus_client_reg_transact(int sock, const struct locus_reg_req *req, int fd,
			      struct locus_reg_rep *rep, int *fd_in, uint32_t timeout_ms,
			      struct locus_error *err);

#endif /* LOCUS_CLIENT_PRIV_H */
