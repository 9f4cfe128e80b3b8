/* SPDX-License-Identifier: MIT */
/*
 * Client slots: how serving workers on a node talk to their locusd.
 *
 * locusd serves n_slots fixed-size client slots. A slot is one attached
 * worker: a prefiller (submits signatures), a decoder (receives signatures,
 * reports its load) and/or an expert-parallel rank (submits dispatch/combine,
 * receives token rows). Each slot has
 *
 *   - a control line: state, owner pid + start time, what the client asked
 *     to be (roles, decoder id, rank), the daemon's answer;
 *   - a load line the decoder writes (one-sided, plain stores);
 *   - a submit ring (client -> locusd) and a completion ring (locusd ->
 *     client) of 64-byte descriptors (struct locus_desc);
 *   - the client's buffer: the rank's registered memory. The client stages
 *     what it submits in [0, stage_size); locusd writes what it delivers into
 *     the inbox, inbox_slots fixed slots after the staging area, and the
 *     client hands each inbox slot back with LOCUS_OP_RELEASE.
 *
 * Every slot is a memfd of its own (never named in a file system). locusd
 * maps them all, each at its fixed offset of one reserved range, so its view
 * is one region addressed by offsets as if the slots were contiguous; a
 * client maps only its own slot, whose fd it gets over the registration
 * socket when locusd granted the attachment. One client cannot map another's
 * slot, nor a slot it held before: when a slot is freed, locusd maps a fresh
 * memfd over it, so a process that kept the old mapping (a forked child, a
 * client that never unmapped) writes into an object nobody reads.
 *
 * Attaching (locus_client_attach): the client sends what it wants to be over
 * the registration socket; locusd's main lcore picks a free slot, fills its
 * control line with the sender's pid (SO_PEERCRED) and request, checks it,
 * has the engine serve the slot, marks it ACTIVE and only then answers with
 * the slot's fd; the client maps it and confirms. A client that gave up (it
 * closed the connection, or never confirmed within a second) is detached
 * again. The states, in the control line:
 *   FREE --daemon, for a request--> CLAIMED --engine serves it--> ACTIVE
 *   ACTIVE --client detach--> DETACHING --daemon drains, fresh memfd--> FREE
 *   ACTIVE whose owner died, or any other word --daemon--> the same
 *
 * Contract: every ROUTE, ROUTE_BLOCKS, EVICT, DISPATCH and COMBINE a client
 * submits gets exactly one completion descriptor back with the same op, id
 * and a status (0 or -LOCUS_E*). A RELEASE gets none, unless it is invalid (then one error
 * completion); a descriptor with an unknown op gets one error completion.
 */
#ifndef LOCUS_CLIENT_H
#define LOCUS_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "locus_common.h"
#include "locus_err.h"

#define LOCUS_DESC_SIZE 64u

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
	LOCUS_OP_ROUTE_BLOCKS = 5, /* route the blocks request at off/len (locus_blocks.h) */
	LOCUS_OP_EVICT    = 6,  /* drop the blocks of the evict request at off/len */
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
	uint32_t blocks;   /* ROUTE_BLOCKS done: cached blocks named and found; EVICT done: found;
			    * DISPATCH done with LOCUS_DESC_F_MASK: slots masked */
	uint64_t dests;    /* DISPATCH done: bit r set when rank r (< 64) was sent rows */
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
	LOCUS_DESC_F_REGION  = 1u << 0,
	LOCUS_DESC_F_PARTIAL = 1u << 1, /* ROUTE_BLOCKS done: a named cached block was missing */
	/*
	 * DISPATCH: a (token, slot) whose expert has no copy on a reachable
	 * rank is masked, not a failure of the batch: it is sent nowhere, its
	 * expert id in the request (in the stage) is overwritten with
	 * LOCUS_EXPERT_MASKED, and the completion's `blocks` counts the masked
	 * slots. Without it such a batch fails whole with -LOCUS_EPEERDOWN.
	 */
	LOCUS_DESC_F_MASK    = 1u << 2,
};

/* The expert id a masked slot reads in its dispatch request afterwards. */
#define LOCUS_EXPERT_MASKED 0xffffu

LOCUS_STATIC_ASSERT(sizeof(struct locus_desc) == LOCUS_DESC_SIZE, "descriptor is 64 bytes");

struct locus_clients_params {
	uint32_t n_slots;         /* client attachments */
	uint32_t ring_size;       /* descriptors per ring, power of two */
	uint64_t stage_size;      /* bytes of the client's staging area, multiple of 64 */
	uint32_t inbox_slots;     /* inbox slots per client */
	uint32_t inbox_slot_size; /* bytes per inbox slot, multiple of 64 */
};

/*
 * Process-local, validated view of the region. In locusd, base is the
 * reserved range holding the header page and every slot; a client's view
 * has the geometry only (base NULL): it maps its own slot alone.
 */
struct locus_clients {
	uint8_t *base;
	uint64_t size;
	struct locus_clients_params p;
	uint64_t slot_stride;      /* bytes of one slot (its memfd's size) */
	uint64_t slots_off;
	uint64_t ring_bytes;       /* one ring */
	uint64_t buf_off;          /* buffer offset inside a slot */
	uint64_t buf_size;         /* stage + inbox */
	int *fd;                   /* locusd: [n_slots] each slot's memfd; else NULL */
};

/* Offset of inbox slot i in the client's buffer. */
static inline uint64_t locus_clients_inbox_off(const struct locus_clients *v, uint32_t i)
{
	return v->p.stage_size + (uint64_t)i * v->p.inbox_slot_size;
}

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
 * Attach to instance's locusd: ask for a slot over the registration socket,
 * wait (bounded) for the answer and map the slot. Errors: the segment's
 * attach refusals (it is read to check the daemon runs), -LOCUS_ESTATE (no
 * running daemon), -LOCUS_EFULL (no free slot), -ETIMEDOUT, -ECONNREFUSED /
 * -ENOENT (nothing listening), -ENOTCONN (the daemon died while we waited:
 * known as soon as the kernel closes its end), -LOCUS_EVERSION (another
 * protocol or slot layout), or the daemon's refusal (e.g. -LOCUS_ERANGE for
 * a rank outside the cluster, -EEXIST for a decoder id or rank held by a
 * live client). An id still held by a slot whose client detached or died is
 * waited for (the daemon answers -EAGAIN until it reclaimed the slot, and we
 * ask again): a decoder may detach and attach again at once; -EAGAIN is
 * returned only when the time-out ends first. err says which.
 */
int locus_client_attach(const char *instance, const struct locus_client_req *req,
			struct locus_client **out, struct locus_error *err);

/* Tell the daemon we leave (DETACHING in our control line), and unmap. NULL is a no-op. */
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

/*
 * Hand inbox slot back (a RELEASE descriptor). A full submit ring does not
 * refuse it: the RELEASE waits in the client and goes out, ahead of
 * anything else, at the next submit, poll or release. 0; -LOCUS_ERANGE (no
 * such slot); -LOCUS_EFULL only when more RELEASEs wait than the inbox has
 * slots (a slot handed back twice).
 */
int locus_client_release_slot(struct locus_client *c, uint32_t slot);

/* RELEASEs waiting for room in the submit ring (see locus_client_release_slot). */
uint32_t locus_client_releases_waiting(const struct locus_client *c);

/* Decoder load report: one-sided plain stores, read by locusd. */
void locus_client_report_load(struct locus_client *c, uint32_t load);

/* ------------------------------------------------------------------ */
/* ELDR routing: a prefiller's ROUTE, a decoder's SIGNATURE_IN.          */

struct locus_eldr_sig_hdr; /* locus_eldr.h */

/* A prompt's routed experts, as vLLM / SGLang return them. */
struct locus_client_route_req {
	uint16_t n_layers;         /* MoE layers: the ELDR table's L */
	uint16_t n_experts;        /* the table's E: every id must be below it */
	uint16_t k;                /* experts per token per layer */
	uint32_t n_tokens;         /* prompt tokens */
	const uint16_t *ids;       /* [n_tokens][n_layers][k] */
	uint64_t allowed_decoders; /* bit i: decoder id i may take it; 0 = any */
};

/*
 * LOCUS_OP_ROUTE: build the prompt's signature (locus_eldr_sig_build) into
 * the stage at off (8-byte aligned) and submit it with id. 0, -LOCUS_ERANGE
 * (an id >= n_experts, a shape out of range, or the signature does not fit
 * the stage from off: nothing submitted), -LOCUS_EFULL (submit ring full:
 * the stage was written, nothing submitted) or -EINVAL; err says which.
 * The completion carries the decision: peer = decoder id, count = band
 * size, aux = similarity as f32 bits; status -LOCUS_ENODEST (no eligible
 * decoder up), -LOCUS_ESTATE (no table), -LOCUS_EFULL (the decoder's inbox
 * is full: submit again), or the signature check's code (a shape other
 * than the table's).
 */
int locus_client_route(struct locus_client *c, uint64_t off,
		       const struct locus_client_route_req *r, uint64_t id,
		       struct locus_error *err);

/* Element types of routed experts as a serving engine holds them (numpy, torch). */
enum locus_ids_type {
	LOCUS_IDS_U8 = 1,
	LOCUS_IDS_I8 = 2,
	LOCUS_IDS_U16 = 3,
	LOCUS_IDS_I16 = 4,
	LOCUS_IDS_U32 = 5,
	LOCUS_IDS_I32 = 6,
	LOCUS_IDS_U64 = 7,
	LOCUS_IDS_I64 = 8,
};

/* A prompt's routed experts in the engine's own integer type. */
struct locus_client_route_typed_req {
	uint16_t n_layers;         /* MoE layers: the ELDR table's L */
	uint16_t n_experts;        /* the table's E: every id must be below it */
	uint16_t k;                /* experts per token per layer, 1..LOCUS_ELDR_MAX_K */
	uint16_t ids_type;         /* enum locus_ids_type */
	uint32_t n_tokens;         /* prompt tokens, at least 1 */
	uint32_t reserved;         /* 0 */
	const void *ids;           /* [n_tokens][n_layers][k] of ids_type, C order */
	uint64_t allowed_decoders; /* bit i: decoder id i may take it; 0 = any */
};

/*
 * locus_client_route for ids of any integer type: every id is checked
 * (0 <= id < n_experts) before the signature is built, so an engine's
 * int64 array goes as it is, with no narrowed copy. 0, or -LOCUS_ERANGE
 * naming the first id out of range ("expert id X at token t, layer l,
 * slot s is out of range: ...") or the shape, -EINVAL, -ENOMEM,
 * -LOCUS_EFULL as locus_client_route; nothing is submitted on a refusal.
 */
int locus_client_route_typed(struct locus_client *c, uint64_t off,
			     const struct locus_client_route_typed_req *r, uint64_t id,
			     struct locus_error *err);

/*
 * locus_client_poll until the completion of request (op, id) comes: up to
 * max descriptors into out, that completion among them (the caller sorts
 * them all, as after a poll). Polls back to back for spin_ns, then naps
 * 20 us between empty polls, until timeout_ns. The count, 0 when nothing
 * came in time, or the poll's -ENOTCONN. It returns early with max
 * descriptors (none the awaited) when out is full.
 */
int locus_client_poll_until(struct locus_client *c, struct locus_desc *out, uint32_t max,
			    uint8_t op, uint64_t id, uint64_t spin_ns, uint64_t timeout_ns);

/* A routed signature delivered to a decoder, read in place in its inbox. */
struct locus_client_signature {
	uint64_t id;               /* the prefiller's ROUTE / ROUTE_BLOCKS id */
	uint32_t slot;             /* the inbox slot to release when done */
	uint32_t src_node;         /* the node that routed it */
	uint32_t decoder_id;       /* ours */
	uint16_t n_layers, n_experts;
	uint32_t prompt_tokens;
	uint64_t allowed_decoders;
	const struct locus_eldr_sig_hdr *sig; /* the whole signature payload */
	size_t sig_len;
	const uint16_t *counts;    /* [n_layers][n_experts] */
};

/*
 * Check a LOCUS_OP_SIGNATURE_IN descriptor d from locus_client_poll (the
 * inbox range, the message and signature headers) and describe it in out.
 * The pointers stay valid until the slot is released
 * (locus_client_release_slot(c, out->slot)). 0, or -EINVAL (another op),
 * -LOCUS_ERANGE / -LOCUS_EPROTO (not a signature in our inbox); err says.
 */
int locus_client_signature_in(struct locus_client *c, const struct locus_desc *d,
			      struct locus_client_signature *out, struct locus_error *err);

/* ------------------------------------------------------------------ */
/* Expert parallelism: a rank's DISPATCH and COMBINE, ROWS_IN/RESULTS_IN. */

struct locus_row_ref; /* locus_dispatch.h */

/* A batch of token rows to dispatch at one MoE layer (GRACE). */
struct locus_client_dispatch_req {
	uint16_t layer;
	uint16_t top_k;            /* 1..LOCUS_MAX_TOPK */
	uint32_t n_tokens;         /* >= 1 */
	uint32_t row_bytes;        /* bytes of one token row, 1..LOCUS_MAX_ROW_BYTES */
	uint32_t n_experts;        /* the GRACE table's E: every id below it (0: not checked) */
	uint64_t rows_off;         /* the rows in the stage, 64-byte aligned: token t at
				    * rows_off + t * row_bytes */
	const uint16_t *experts;   /* [n_tokens][top_k] */
	const float *gates;        /* [n_tokens][top_k], finite: carried to the experts */
};

/*
 * LOCUS_OP_DISPATCH: write the request (locus_dispatch.h: header, expert
 * ids, gates) into the stage at off (8-byte aligned), check it as locusd
 * will (the rows inside the stage and clear of the request) and submit it
 * with id = batch_id. 0, -LOCUS_ERANGE / -LOCUS_ENAN (a shape, an id >=
 * n_experts, a gate not finite, a range outside the stage: nothing
 * submitted), -LOCUS_EFULL (submit ring full: the stage was written,
 * nothing submitted) or -EINVAL; err says which. The stage range and the
 * rows must stay untouched until the completion (status 0, count =
 * destination ranks, aux = rows sent, dests = their mask; or -LOCUS_EFULL
 * when a destination's inbox had no room: nothing was delivered, submit
 * again; -LOCUS_ESTALEPLACEMENT when a rank of this node does not hold the
 * placement generation the batch was planned under: nothing was delivered;
 * a rank of another node refuses with a RESULTS_IN, locus_client_rows_in;
 * -LOCUS_EPEERDOWN when an expert of the batch has no copy on a reachable
 * rank: nothing was delivered), and the rows until our own ROWS_IN was read
 * (same GPU: in place). Experts with copies on several ranks go only to the
 * reachable ones (locus_client_ranks()).
 */
int locus_client_dispatch(struct locus_client *c, uint64_t off,
			  const struct locus_client_dispatch_req *r, uint64_t batch_id,
			  struct locus_error *err);

/*
 * locus_client_dispatch with descriptor flags: LOCUS_DESC_F_MASK masks the
 * (token, slot) pairs whose expert has no reachable copy instead of failing
 * the batch. Masked pairs are sent nowhere; at the completion the request's
 * ids at off (locus_client_dispatch_ids()) read LOCUS_EXPERT_MASKED there
 * and `blocks` counts them, so the serving engine can renormalise the
 * token's gates or dispatch it again. Other flags: -EINVAL.
 */
int locus_client_dispatch_ex(struct locus_client *c, uint64_t off,
			     const struct locus_client_dispatch_req *r, uint64_t batch_id,
			     uint32_t flags, struct locus_error *err);

/*
 * The expert ids [n_tokens][top_k] of the dispatch request written at off
 * (what locusd reads, and after a masked dispatch's completion, where the
 * masked pairs read LOCUS_EXPERT_MASKED), or NULL when off is not in the
 * stage.
 */
const uint16_t *locus_client_dispatch_ids(struct locus_client *c, uint64_t off);

/* Expert outputs going back to the rank that dispatched their tokens. */
struct locus_client_combine_req {
	uint16_t layer;
	uint32_t dst_rank;         /* the source rank of the rows answered */
	uint32_t n_rows;           /* >= 1 */
	uint32_t row_bytes;
	uint64_t rows_off;         /* output row j at rows_off + j * row_bytes (stage, 64-aligned) */
	const struct locus_row_ref *refs; /* [n_rows]: the (token, k slots) each row answers */
};

/*
 * LOCUS_OP_COMBINE: write the request (header, refs) into the stage at off
 * (8-byte aligned), check it and submit it with id = batch_id (the id of
 * the dispatch answered). Returns as locus_client_dispatch. The stage
 * range and rows stay untouched until the completion; -LOCUS_EFULL there
 * means the destination's inbox had no room: submit again.
 */
int locus_client_combine(struct locus_client *c, uint64_t off,
			 const struct locus_client_combine_req *r, uint64_t batch_id,
			 struct locus_error *err);

/*
 * locus_client_combine with descriptor flags: LOCUS_DESC_F_REGION takes the
 * output rows from registered region `region` (rows_off relative to it,
 * 64-byte aligned; locusd checks them against the region's length): rows
 * to another node leave from the region's MR without a copy. Other flags:
 * -EINVAL.
 */
int locus_client_combine_ex(struct locus_client *c, uint64_t off,
			    const struct locus_client_combine_req *r, uint64_t batch_id,
			    uint32_t flags, uint32_t region, struct locus_error *err);

/* Rows delivered to a rank (ROWS_IN) or back to their source (RESULTS_IN). */
struct locus_client_rows {
	uint8_t  op;               /* LOCUS_OP_ROWS_IN or LOCUS_OP_RESULTS_IN */
	uint8_t  in_place;         /* the rows stayed in our own stage (same GPU) */
	uint16_t layer;
	uint16_t top_k;            /* ROWS_IN: experts and gates per row; RESULTS_IN: 0 */
	uint16_t chunk, n_chunks;  /* this message among those the sender's batch sent us */
	uint32_t slot;             /* the inbox slot to release when done */
	uint32_t src_rank;         /* who sent it */
	uint32_t n_rows;
	uint32_t row_bytes;
	uint64_t batch_id;
	const struct locus_row_ref *refs; /* [n_rows] */
	const uint16_t *experts;   /* ROWS_IN: [n_rows][top_k] the tokens' expert ids */
	const float *gates;        /* ROWS_IN: [n_rows][top_k] their gates */
	const uint8_t *rows;       /* row j at rows + j * row_bytes, except in place ROWS_IN:
				    * row j at rows + refs[j].token * row_bytes (our batch);
				    * NULL when in place in a registered region (not mapped
				    * by the library) */
	uint64_t rows_off;         /* where the rows are: message, stage or region offset */
};

/*
 * Check a ROWS_IN / RESULTS_IN descriptor d from locus_client_poll (the
 * inbox range, the rows message: locus_rows_msg_check; rows in place must
 * lie in our stage and come from our own rank) and describe it in out.
 * The pointers stay valid until out->slot is released. 0, or -EINVAL
 * (another op), -LOCUS_ERANGE / -LOCUS_EPROTO (not a rows message in our
 * inbox); err says which. -LOCUS_ESTALEPLACEMENT: a RESULTS_IN saying rank
 * out->src_rank refused our rows of batch out->batch_id, planned under a
 * placement generation it does not hold (err names it); out has no rows,
 * and that batch's rows to that rank are lost. -LOCUS_EPEERDOWN: the same,
 * because rank out->src_rank was no longer attached when the rows reached
 * its node. The slot must be released either way.
 */
int locus_client_rows_in(struct locus_client *c, const struct locus_desc *d,
			 struct locus_client_rows *out, struct locus_error *err);

/* bindings (tools/python/locus/_lib.py) mirror these layouts */
LOCUS_STATIC_ASSERT(sizeof(struct locus_client_route_typed_req) == 32, "typed route request");
LOCUS_STATIC_ASSERT(sizeof(struct locus_client_dispatch_req) == 40, "dispatch helper request");
LOCUS_STATIC_ASSERT(sizeof(struct locus_client_combine_req) == 32, "combine helper request");
LOCUS_STATIC_ASSERT(sizeof(struct locus_client_rows) == 80, "rows description");

/* ------------------------------------------------------------------ */
/* The signature cache: a ROUTE naming KV blocks, and EVICT.            */

struct locus_blocks_route; /* locus_blocks.h */

/*
 * LOCUS_OP_ROUTE_BLOCKS (a prefiller of a prefix-cached serving engine):
 * the request (locus_blocks.h) names the prompt's blocks that hit the KV
 * cache, carries the new full blocks (hash + counts) and the tail's
 * signature. locusd routes the sum of the cached blocks' counts (those it
 * holds), the new blocks' and the tail's, exactly as a ROUTE of that
 * signature, forwards that summed signature to the decoder (a
 * SIGNATURE_IN like a ROUTE's: with every named block found, the bytes a
 * ROUTE of the whole prompt delivers), and then caches the new blocks. The
 * completion: status, peer, count and aux as a ROUTE's; `blocks` the
 * cached blocks found; LOCUS_DESC_F_PARTIAL in flags when one or more
 * named blocks were not cached (evicted, never inserted, a restarted
 * locusd): the request was routed on what was known. Refusals, each
 * counted: -EOPNOTSUPP (sig_cache_bytes = 0: no cache), -LOCUS_ESTATE (no
 * table), the format's codes (magic, version, lengths, a block size or
 * shape other than locusd's), -EEXIST (a hash named twice), -LOCUS_ERANGE
 * (a count over the block's tokens, a layer over block_tokens x top-k),
 * and a ROUTE's (no decoder, inbox full).
 *
 * LOCUS_OP_EVICT: the serving engine evicted these KV blocks; one
 * completion, `blocks` = how many were cached (and are now dropped).
 *
 * Both helpers write the request into the stage at off (8-byte aligned)
 * and submit it with id: 0, -LOCUS_EFULL (submit ring full: nothing
 * submitted, the stage was written), -LOCUS_ERANGE (does not fit the stage
 * or a list is over its cap) or -EINVAL; err says which.
 */
int locus_client_route_blocks(struct locus_client *c, uint64_t off,
			      const struct locus_blocks_route *r, uint64_t id,
			      struct locus_error *err);
int locus_client_evict(struct locus_client *c, uint64_t off, const uint64_t *hashes, uint32_t n,
		       uint64_t id, struct locus_error *err);

/* ------------------------------------------------------------------ */
/* Buffer regions: a rank's (GPU) memory given to locusd as a dma-buf.  */

#define LOCUS_CLIENT_MAX_REGIONS 8u          /* per client */
#define LOCUS_REGION_MAX_LEN     (1ull << 36) /* 64 GiB */
#define LOCUS_REGION_ALIGN       4096u       /* offset and length */

/*
 * How locusd holds a region (reply flags). A region may be CPU-mapped by
 * locusd (intra-node tiers copy from the mapping) and registered with each
 * rail's RDMA device straight from the dma-buf (ibv_reg_dmabuf_mr) or
 * through the mapping (ibv_reg_mr); then rows leave the node zero-copy on
 * that rail. Without an MR on a rail, inter-node rows leaving on it are
 * copied out of the mapping; without a mapping, only the same-GPU tier and
 * zero-copy sends can use the region.
 */
enum locus_region_flags {
	LOCUS_REGION_MAPPED    = 1u << 0,
	LOCUS_REGION_MR_DMABUF = 1u << 1, /* a dma-buf MR (on at least one rail) */
	LOCUS_REGION_MR_MAPPED = 1u << 2, /* MRs on the mapping only */
	LOCUS_REGION_HOST      = 1u << 3, /* host memory: a memfd sealed against shrinking */
};

/*
 * Register [offset, offset + len) of the dma-buf fd as a buffer region of
 * this client: the fd is passed to locusd (we keep ours), which checks it
 * (a dma-buf, or host memory: a memfd sealed against shrinking with
 * F_SEAL_SHRINK; large enough, offset and len multiples of 4096, our slot,
 * LOCUS_CLIENT_MAX_REGIONS), maps it where the exporter allows and
 * registers it with the RDMA device of every rail. Returns 0 with *region_id (and the
 * enum locus_region_flags in *flags, may be NULL), or the refusal:
 * -EBADF, -EINVAL / -LOCUS_ERANGE (offsets), -ENOTSUP (neither a dma-buf nor a sealed memfd),
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

/* ------------------------------------------------------------------ */
/* Placement changes: a rank client's part in the two phases.          */
/*
 * A cluster changes its GRACE placement in two phases (locusctl push
 * --cluster). Prepare: locusd stages the new generation and tells its rank
 * clients (staged); each loads the experts it gains
 * (locus_placement_rank_moves between the tables of current and staged)
 * and acknowledges it. Commit: once every rank of every node acknowledged,
 * the cluster switches; rows then carry the new generation. A rank client
 * that takes part (acknowledged once) gets only rows planned under a
 * generation in [floor, acked]; others are refused at its node and its
 * source is told. It frees the weights of older generations once
 * free_below passed them, and says so with release. A rank client takes
 * part from its join (or first ack) on, and gets no rows before its first
 * ack; one that never joins takes no part and its rows are not checked.
 */
struct locus_client_placement {
	uint64_t staged;     /* prepared: load its experts, then ack it; 0 none */
	uint64_t current;    /* the generation this node plans with; 0 none */
	uint64_t free_below; /* every node plans with this one or a later one */
	uint64_t acked;      /* what we acknowledged (0: nothing yet) */
	uint64_t floor;      /* the oldest generation whose experts we still hold */
	uint32_t part;       /* 1: we take part (join or ack) */
	uint32_t reserved;
};

/* The slot's placement state (plain loads). 0. */
int locus_client_placement(const struct locus_client *c, struct locus_client_placement *p);

/*
 * From now on we take part in placement changes: every change waits for our
 * ack, and we get only rows planned under a generation we acknowledged
 * (none until the first). Join before the first placement is pushed, or ack
 * the one in force once its experts are loaded. 0.
 */
int locus_client_placement_join(struct locus_client *c);

/*
 * We hold the experts of generation gen (and keep those of every
 * generation from floor on): rows planned under gen are delivered to us.
 * The first ack sets floor to gen too, and joins. gen below floor:
 * -LOCUS_ERANGE.
 */
int locus_client_placement_ack(struct locus_client *c, uint64_t gen);

/*
 * We no longer hold the experts only generations below floor used: rows
 * planned under them are refused from now on. floor above acked:
 * -LOCUS_ERANGE.
 */
int locus_client_placement_release(struct locus_client *c, uint64_t floor);

/*
 * The sealed placement blob of generation gen (staged or current) that
 * locusd keeps beside its sockets, in a malloc'd *blob of *len bytes (free
 * it). 0, -ENOENT (not kept: neither staged nor current), or a table check's
 * code; err says which.
 */
int locus_client_placement_table(const struct locus_client *c, uint64_t gen, void **blob,
				 size_t *len, struct locus_error *err);

/*
 * Which ranks are reachable (a rank client): the engine serving us writes
 * the set into our control line whenever it changes. A rank is lost while
 * its node is down or cut off, or its rank client is not attached. Copies
 * bit r of lost[r / 64] (set: rank r lost) for the first n_words words
 * (ranks past them are not reported), and fills info. 0, or -EAGAIN when
 * the set kept changing while it was read (read again), -EINVAL (no
 * client). Before the first set is written, info->n_ranks is 0.
 */
/* Words of the lost-ranks bitmap: a bit for every GRACE rank (4096). */
#define LOCUS_CLIENT_RANK_WORDS 64u

struct locus_client_ranks {
	uint64_t seq;              /* moves at every change */
	uint64_t changed_ns;       /* CLOCK_MONOTONIC of the last change, 0 never */
	uint32_t n_ranks;          /* ranks the set covers: every GRACE rank of the cluster */
	uint32_t n_lost;           /* of them, lost */
};

int locus_client_ranks(const struct locus_client *c, uint64_t *lost, uint32_t n_words,
		       struct locus_client_ranks *info);

/* Index of our slot and the daemon's activation generation. */
uint32_t locus_client_slot(const struct locus_client *c);
uint64_t locus_client_generation(const struct locus_client *c);
const char *locus_client_instance(const struct locus_client *c);
/* The slot geometry (base NULL: a client maps its own slot only). */
const struct locus_clients *locus_client_region(const struct locus_client *c);

#endif /* LOCUS_CLIENT_H */
