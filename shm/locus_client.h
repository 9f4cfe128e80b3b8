/* SPDX-License-Identifier: MIT */
/*
 * Client slots: how serving workers on a node talk to their locusd.
 *
 * The segment's LOCUS_REGION_CLIENTS holds n_slots fixed-size client slots.
 * A slot is one attached worker: a prefiller (submits signatures), a decoder
 * (receives signatures, reports its load) and/or an expert-parallel rank
 * (submits dispatch/combine, receives token rows). Each slot has
 *
 *   - a control line: state, owner pid + start time, what the client asked
 *     to be (roles, decoder id, rank), the daemon's answer;
 *   - a load line the decoder writes (one-sided, plain stores);
 *   - a submit ring (client -> locusd) and a completion ring (locusd ->
 *     client) of 64-byte descriptors (locus_ring.h);
 *   - the client's buffer: the rank's registered memory. The client stages
 *     what it submits in [0, stage_size); locusd writes what it delivers into
 *     the inbox, inbox_slots fixed slots after the staging area, and the
 *     client hands each inbox slot back with LOCUS_OP_RELEASE.
 *
 * Attaching is a handshake with the daemon, which alone initialises rings:
 *   FREE --client CAS--> CLAIMING --request filled--> CLAIMED
 *   CLAIMED --daemon checks--> ACTIVE | REFUSED
 *   ACTIVE --client detach--> DETACHING --daemon drains--> FREE
 *   any state whose owner died --daemon--> FREE (slot reclaimed)
 *
 * Contract: every ROUTE, DISPATCH and COMBINE a client submits gets exactly
 * one completion descriptor back with the same op, id and a status (0 or
 * -LOCUS_E*). A RELEASE gets none, unless it is invalid (then one error
 * completion); a descriptor with an unknown op gets one error completion.
 */
#ifndef LOCUS_CLIENT_H
#define LOCUS_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "locus_common.h"
#include "locus_err.h"
#include "locus_ring.h"

#define LOCUS_CLIENTS_MAGIC   0x53544e45494c434cull /* "LCLIENTS" */
#define LOCUS_CLIENTS_VERSION 1u
#define LOCUS_DESC_SIZE       64u

enum locus_client_state {
	LOCUS_CLIENT_FREE      = 0,
	LOCUS_CLIENT_CLAIMED   = 1,
	LOCUS_CLIENT_ACTIVE    = 2,
	LOCUS_CLIENT_REFUSED   = 3,
	LOCUS_CLIENT_DETACHING = 4,
	LOCUS_CLIENT_CLAIMING  = 5, /* the client owns the slot, fills its request */
};

enum locus_client_role {
	LOCUS_ROLE_PREFILL = 1u << 0,
	LOCUS_ROLE_DECODE  = 1u << 1,
	LOCUS_ROLE_RANK    = 1u << 2,
	LOCUS_ROLE_ALL     = 7u,
};

enum locus_op {
	/* client -> locusd */
	LOCUS_OP_ROUTE    = 1,  /* route the signature at off/len (ELDR) */
	LOCUS_OP_DISPATCH = 2,  /* dispatch the batch at off/len (GRACE) */
	LOCUS_OP_COMBINE  = 3,  /* return expert outputs at off/len to a source rank */
	LOCUS_OP_RELEASE  = 4,  /* inbox slot `slot` is free again */
	/* locusd -> client, besides the completions of the ops above */
	LOCUS_OP_SIGNATURE_IN = 16, /* a routed signature landed in inbox slot `slot` */
	LOCUS_OP_ROWS_IN      = 17, /* dispatched token rows landed in inbox slot `slot` */
	LOCUS_OP_RESULTS_IN   = 18, /* combined expert outputs landed in inbox slot `slot` */
};

/* One ring entry, both directions. */
struct locus_desc {
	uint8_t  op;       /* enum locus_op */
	uint8_t  flags;
	uint16_t layer;    /* dispatch/combine: MoE layer */
	int32_t  status;   /* completions: 0 or -code */
	uint64_t id;       /* client's request/batch id, echoed in the completion */
	uint64_t off;      /* payload offset in the receiver's buffer */
	uint32_t len;      /* payload bytes */
	uint32_t slot;     /* inbox slot (RELEASE, *_IN) */
	uint32_t peer;     /* ROUTE done: decoder; ROWS_IN: source rank; COMBINE: destination */
	uint32_t count;    /* ROUTE done: band size; DISPATCH done: destination ranks */
	uint64_t aux;      /* ROUTE done: similarity as f32 bits; DISPATCH done: rows sent */
	uint32_t region;   /* with LOCUS_DESC_F_REGION: a registered region's id */
	uint8_t  reserved[12];
};

/*
 * struct locus_desc flags. LOCUS_DESC_F_REGION on a DISPATCH or COMBINE: the
 * token rows are in the registered region `region` (locus_client_register_
 * dmabuf), the request's rows_off is relative to that region and checked
 * against its length. The request itself (header, expert ids, gates, refs)
 * stays at off/len in the stage: locusd reads it with the CPU, and GPU
 * memory is usually not CPU-mappable. A ROWS_IN / RESULTS_IN handed over in
 * place (same GPU) from a region carries the flag and the id back.
 */
enum locus_desc_flags {
	LOCUS_DESC_F_REGION = 1u << 0,
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_desc) == LOCUS_DESC_SIZE, "descriptor is 64 bytes");

struct locus_clients_params {
	uint32_t n_slots;         /* client attachments */
	uint32_t ring_size;       /* descriptors per ring, power of two */
	uint64_t stage_size;      /* bytes of the client's staging area, multiple of 64 */
	uint32_t inbox_slots;     /* inbox slots per client */
	uint32_t inbox_slot_size; /* bytes per inbox slot, multiple of 64 */
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
	int32_t  refusal;         /* REFUSED: -code */
	uint64_t generation;      /* bumped by the daemon at every activation */
	uint8_t  pad[LOCUS_CACHE_LINE - 40];
	/* the decoder's load report, written only by the client */
	uint64_t load_seq __locus_cache_aligned; /* bumped after each report */
	uint32_t load;            /* requests in its batch / queue */
	uint32_t reserved;
	uint8_t  pad2[LOCUS_CACHE_LINE - 16];
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_client_ctl) == 2 * LOCUS_CACHE_LINE, "ctl lines");

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

/* Process-local, validated view of the region (either side). */
struct locus_clients {
	uint8_t *base;
	uint64_t size;
	struct locus_clients_params p;
	uint64_t slot_stride;
	uint64_t slots_off;
	uint64_t ring_bytes;       /* one ring */
	uint64_t buf_off;          /* buffer offset inside a slot */
	uint64_t buf_size;         /* stage + inbox */
};

/* Bytes of a region with these params, or 0 if they are out of range. */
uint64_t locus_clients_region_size(const struct locus_clients_params *p);

/* Lay out an empty region (all slots FREE). Returns 0 or -EINVAL. */
int locus_clients_init(void *region, uint64_t size, const struct locus_clients_params *p);

/* Validate an existing region and fill the view. Returns 0 or -LOCUS_E*. */
int locus_clients_open(struct locus_clients *v, void *region, uint64_t size);

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

/* Offset of inbox slot i in the client's buffer. */
static inline uint64_t locus_clients_inbox_off(const struct locus_clients *v, uint32_t i)
{
	return v->p.stage_size + (uint64_t)i * v->p.inbox_slot_size;
}

/*
 * Daemon side. locus_clients_activate() lays out fresh rings for a CLAIMED
 * slot and makes it ACTIVE (or REFUSED with refusal < 0); the caller has
 * checked the request. locus_clients_release() returns a slot to FREE.
 */
int locus_clients_activate(struct locus_clients *v, uint32_t slot, int refusal);
/*
 * The two halves of a positive activate, for a daemon whose data plane must
 * serve the slot before the client (and through it, other nodes) may use
 * it: prepare lays out the rings of a CLAIMED slot (state unchanged),
 * publish makes it ACTIVE if its state word is still claimed (the CLAIMED
 * word read after prepare). 0, -LOCUS_ESTATE (the client gave up, or the
 * slot changed hands), -LOCUS_ERANGE.
 */
int locus_clients_prepare(struct locus_clients *v, uint32_t slot);
int locus_clients_publish(struct locus_clients *v, uint32_t slot, uint64_t claimed);
void locus_clients_release(struct locus_clients *v, uint32_t slot);

enum locus_clients_event {
	LOCUS_CLIENTS_IDLE  = 0, /* nothing for the daemon to do */
	LOCUS_CLIENTS_CLAIM = 1, /* a live client waits for an answer */
	LOCUS_CLIENTS_GONE  = 2, /* an ACTIVE client detached or died: stop using
				  * the slot, then locus_clients_release() it */
};

/*
 * The daemon's periodic look at one slot (control thread only: it reads
 * /proc). Slots that never became ACTIVE and whose owner died are freed
 * here directly. Returns an enum locus_clients_event.
 */
int locus_clients_check(struct locus_clients *v, uint32_t slot);

/* ------------------------------------------------------------------ */
/* Client side: the library a serving worker links.                     */

struct locus_client; /* opaque */

struct locus_client_req {
	uint32_t roles;       /* enum locus_client_role bits, at least one */
	uint32_t decoder_id;  /* with LOCUS_ROLE_DECODE */
	uint32_t rank;        /* with LOCUS_ROLE_RANK */
	uint32_t timeout_ms;  /* bound on the handshake; 0 = 2000 */
};

/*
 * Attach to instance's locusd: claim a free slot, wait (bounded) for the
 * daemon's answer. Errors: the segment's attach refusals, -LOCUS_ESTATE (no
 * running daemon), -LOCUS_EFULL (no free slot), -ETIMEDOUT, -ENOTCONN (the
 * daemon died while we waited: noticed within 50 ms), or the daemon's
 * refusal (e.g. -LOCUS_ERANGE for a rank outside the cluster, -EEXIST for a
 * decoder id or rank already attached). err says which.
 */
int locus_client_attach(const char *instance, const struct locus_client_req *req,
			struct locus_client **out, struct locus_error *err);

/* Tell the daemon we leave, and unmap. NULL is a no-op. */
void locus_client_detach(struct locus_client *c);

/* The staging area (the client writes what it submits here). */
uint8_t *locus_client_stage(struct locus_client *c, uint64_t *size);

/*
 * A delivered payload: validates desc->off/len against the inbox (a message
 * may span consecutive slots; RELEASE its first slot) and returns a pointer
 * to it, or NULL for a descriptor that names no inbox data.
 */
const void *locus_client_inbox(struct locus_client *c, const struct locus_desc *d);

/* Submit up to n descriptors; returns how many went in, -LOCUS_EFULL if none did. */
int locus_client_submit(struct locus_client *c, const struct locus_desc *d, uint32_t n);

/*
 * Up to max completions/deliveries into out; returns the count (0: none
 * yet), or -ENOTCONN once locusd is gone (see locus_client_check), which
 * an empty poll looks at every LOCUS_CLIENT_CHECK_MS: every completion the
 * daemon posted before it died is still returned first. A client that
 * polls learns of a killed locusd within that period; it may then detach
 * and attach again (a restarted locusd serves a new segment).
 */
int locus_client_poll(struct locus_client *c, struct locus_desc *out, uint32_t max);

#define LOCUS_CLIENT_CHECK_MS 100u

/*
 * Whether our locusd still serves this attachment: 0, or -ENOTCONN (for
 * good) once the process that created the segment is dead (pid and start
 * time as at attach: a restarted locusd is another process, with a new
 * segment), or our slot is no longer ACTIVE in our name. Reads /proc: a
 * few syscalls, never on a hot path (poll calls it when idle, rate-bound).
 */
int locus_client_check(struct locus_client *c);

/* Hand inbox slot back (a RELEASE descriptor). */
int locus_client_release_slot(struct locus_client *c, uint32_t slot);

/* Decoder load report: one-sided plain stores, read by locusd. */
void locus_client_report_load(struct locus_client *c, uint32_t load);

/* ------------------------------------------------------------------ */
/* Buffer regions: a rank's (GPU) memory given to locusd as a dma-buf.  */

#define LOCUS_CLIENT_MAX_REGIONS 8u          /* per client */
#define LOCUS_REGION_MAX_LEN     (1ull << 36) /* 64 GiB */
#define LOCUS_REGION_ALIGN       4096u       /* offset and length */
#define LOCUS_REG_MAGIC          0x47455244u /* "DREG" */
#define LOCUS_REG_VERSION        1u
#define LOCUS_REG_SOCK_SUFFIX    ".reg"
#define LOCUS_REG_RUN_DIR        "/run/locus"

enum locus_reg_op {
	LOCUS_REG_DMABUF     = 1, /* the message carries one fd (SCM_RIGHTS) */
	LOCUS_REG_UNREGISTER = 2,
};

/*
 * How locusd holds a region (reply flags). A region may be CPU-mapped by
 * locusd (intra-node tiers copy from the mapping) and registered with the
 * RDMA device straight from the dma-buf (ibv_reg_dmabuf_mr) or through the
 * mapping (ibv_reg_mr); then rows leave the node zero-copy. Without an MR,
 * inter-node rows are copied out of the mapping; without a mapping, only
 * the same-GPU tier and zero-copy sends can use the region.
 */
enum locus_region_flags {
	LOCUS_REGION_MAPPED    = 1u << 0,
	LOCUS_REGION_MR_DMABUF = 1u << 1,
	LOCUS_REGION_MR_MAPPED = 1u << 2,
};

/*
 * The registration socket's messages (SOCK_SEQPACKET, one request and one
 * reply per connection). The daemon checks the sender with SO_PEERCRED:
 * its pid must own slot, in generation.
 */
struct locus_reg_req {
	uint32_t magic;       /* LOCUS_REG_MAGIC */
	uint32_t version;     /* LOCUS_REG_VERSION */
	uint32_t op;          /* enum locus_reg_op */
	uint32_t slot;        /* the sender's client slot */
	uint64_t generation;  /* the slot's activation generation */
	uint64_t offset;      /* REG_DMABUF: region start in the dma-buf */
	uint64_t len;         /* REG_DMABUF: region bytes */
	uint32_t region;      /* UNREGISTER: the id */
	uint32_t reserved;    /* 0 */
};

struct locus_reg_rep {
	uint32_t magic;
	uint32_t version;
	int32_t  status;      /* 0 or -code */
	uint32_t region;      /* REG_DMABUF: the new region's id (never 0) */
	uint32_t flags;       /* enum locus_region_flags */
	uint32_t reserved;
	char     msg[168];    /* why, when status < 0 (NUL-terminated) */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_reg_req) == 48, "registration request");
LOCUS_STATIC_ASSERT(sizeof(struct locus_reg_rep) == 192, "registration reply");

/*
 * Register [offset, offset + len) of the dma-buf fd as a buffer region of
 * this client: the fd is passed to locusd (we keep ours), which checks it
 * (a dma-buf, large enough, offset and len multiples of 4096, our slot,
 * LOCUS_CLIENT_MAX_REGIONS), maps it where the exporter allows and
 * registers it with its RDMA device. Returns 0 with *region_id (and the
 * enum locus_region_flags in *flags, may be NULL), or the refusal:
 * -EBADF, -EINVAL / -LOCUS_ERANGE (offsets), -ENOTSUP (not a dma-buf),
 * -LOCUS_EFULL, -EACCES (not our slot), -ETIMEDOUT (timeout_ms, 0 = 2000),
 * -ECONNREFUSED / -ENOENT (no locusd listening); err says which.
 */
int locus_client_register_dmabuf(struct locus_client *c, int fd, uint64_t offset, uint64_t len,
				 uint32_t timeout_ms, uint32_t *region_id, uint32_t *flags,
				 struct locus_error *err);

/*
 * Give a region back. Returns once locusd's engine no longer uses it (its
 * in-flight sends are done) and locusd dropped the mapping and the MR.
 * Detaching (or dying) releases every region of the client too.
 */
int locus_client_unregister_region(struct locus_client *c, uint32_t region_id,
				   uint32_t timeout_ms, struct locus_error *err);

/*
 * The registration socket of instance into buf: <dir>/locus.<instance>.reg,
 * dir $LOCUS_SHM_DIR when set (next to the segment), else /run/locus when it
 * exists (the deployment's tmpfiles.d), else /dev/shm. 0, -EINVAL,
 * -ENAMETOOLONG.
 */
int locus_client_reg_sock_path(const char *instance, char *buf, size_t len);

/* Index of our slot and the daemon's activation generation. */
uint32_t locus_client_slot(const struct locus_client *c);
uint64_t locus_client_generation(const struct locus_client *c);
const char *locus_client_instance(const struct locus_client *c);
const struct locus_clients *locus_client_region(const struct locus_client *c);

#endif /* LOCUS_CLIENT_H */
