/* SPDX-License-Identifier: MIT */
/*
 * The data-plane engine of one worker lcore: polls the client slots' submit
 * rings, routes signatures (ELDR), plans and moves dispatch/combine rows
 * (GRACE) into receivers' inboxes, hot-swaps tables between iterations, and
 * counts everything. Plain C over shared memory: locusd runs it on a DPDK
 * lcore, tests run it on a thread. All memory is allocated at creation;
 * locus_engine_poll() allocates nothing, takes no lock, makes no syscall.
 *
 * The control thread (locusd's main lcore) owns attachment: it answers
 * client claims and, through locus_engine_command(), tells the engine to
 * start or stop serving a slot; the engine acknowledges between iterations.
 */
#ifndef LOCUS_ENGINE_H
#define LOCUS_ENGINE_H

#include <stdint.h>

#include "locus_client.h"
#include "locus_common.h"
#include "locus_counters.h"
#include "locus_err.h"
#include "locus_table.h"

#define LOCUS_ENGINE_BURST 32
#define LOCUS_TABLE_CH_ELDR  0u
#define LOCUS_TABLE_CH_GRACE 1u
#define LOCUS_TABLE_N_CHANNELS 2u
/*
 * Centroids per decoder the engine's router memory holds (a version 2 ELDR
 * table maps several to a decoder; locusctl fit's tuning goes up to 4).
 */
#define LOCUS_ENGINE_CENTROIDS_PER_DECODER 4u

/* Offsets of the engine's counters in every counters block. */
struct locus_engine_ctr {
	uint64_t poll_iterations, poll_busy;
	uint64_t idle_sleeps, idle_sleep_ns;       /* the poll loop's idle sleeps (locusd) */
	uint64_t clients_attached;                 /* gauge */
	uint64_t client_protocol_errors;
	uint64_t route_requests, routed;           /* routed: [max_decoders] */
	uint64_t route_band, route_ns;             /* histograms */
	uint64_t decoder_load, decoder_up;         /* gauges [max_decoders] */
	uint64_t rej_bad_signature, rej_no_decoder, rej_no_table, rej_inbox_full;
	uint64_t rej_bad_descriptor, rej_peer_down, rej_bad_release;
	uint64_t rej_placement;                    /* [enum locus_engine_placement_reject] */
	uint64_t dispatch_batches, combine_batches;
	uint64_t rows, bytes, msgs;                /* [op 2][tier 3] */
	uint64_t dispatch_ns, combine_ns;          /* histograms */
	uint64_t expert_tokens;                    /* [layers][experts] */
	uint64_t table_generation;                 /* gauge [channel] */
	uint64_t table_layers, table_experts;      /* gauges [channel]: the shape in use */
	uint64_t router_path;                      /* gauge: enum locus_eldr_path in use */
	uint64_t table_adopted, table_rejected;    /* [channel] */
	uint64_t grace_groups;                     /* gauge: EP groups of the placement in use */
	uint64_t ranks_lost;                       /* gauge: ranks this node cannot reach */
	uint64_t ranks_lost_changes;               /* times the set of lost ranks changed */
	uint64_t ranks_lost_at;                    /* gauge: CLOCK_MONOTONIC ms of the last change */
	uint64_t slots_masked;                     /* (token, slot) pairs with no live copy, masked */
	uint64_t replanned;                        /* batches planned again: a peer went down */
	uint64_t rank_answers, rank_answer_ns;     /* [n_ranks] answers timed, their ns summed */
	uint64_t rank_answer_max;                  /* gauge [n_ranks]: slowest of the last second */
	uint64_t grace_set_refused;                /* [enum locus_graceset_problem] */
	uint64_t remote_msgs_out, remote_msgs_in;  /* [node] */
	uint64_t remote_bytes_out, remote_bytes_in; /* [node] */
	uint64_t remote_send_errors;               /* sends that completed with an error */
	uint64_t remote_undeliverable;             /* received, no local receiver or no room */
	uint64_t remote_bad;                       /* received messages refused by the checks */
	uint64_t ldma_msgs, ldma_bytes;            /* intra-node rows moved by the RDMA device */
	uint64_t ldma_fallbacks;                   /* ... copied by the CPU: device queue full/down */
	uint64_t ldma_errors;                      /* DMA copies that failed (request failed) */
	uint64_t rej_bad_region;                   /* region flag naming no usable region */
	uint64_t rej_region_unmapped;              /* rows that needed a CPU copy of an unmappable region */
	uint64_t region_rows_zero_copy;            /* rows sent from a region's MR (gather) */
	uint64_t region_msgs_copied;               /* region messages copied: no MR or too many runs */
	uint64_t regions;                          /* gauge: regions in use */
	uint64_t load_rows_written, load_rows_read; /* [node] */
	uint64_t load_rows_torn, load_rows_bad;    /* [node] */
	uint64_t load_decoders_stale;              /* gauge */
	uint64_t inbox_slots_used;                 /* gauge: attached clients' inbox slots taken */
	uint64_t requests_pending;                 /* gauge: requests waiting for sends / copies */
	uint64_t engines;                          /* gauge: 1 in each engine's block */
	uint64_t x_handovers, x_dropped;           /* deliveries handed to another engine */
	/* the signature cache (engine_blocks.c) */
	uint64_t route_blocks_requests;            /* ROUTE_BLOCKS submitted */
	uint64_t route_blocks_partial;             /* ... routed with a named block missing */
	uint64_t evict_requests;                   /* EVICT submitted */
	uint64_t rej_blocks;                       /* [reason] refused ROUTE_BLOCKS / EVICT */
	uint64_t sc_hits, sc_misses;               /* named cached blocks found / not found */
	uint64_t sc_inserts, sc_refreshes, sc_replaced;
	uint64_t sc_evictions;                     /* [reason]: 0 lru, 1 explicit */
	uint64_t sc_resets;                        /* emptied for a table of another shape */
	uint64_t sc_entries, sc_bytes, sc_capacity; /* gauges */
	uint64_t sc_block_tokens;                  /* gauge: tokens per KV block, 0 = cache off */
	uint64_t sc_summed;                        /* cached blocks' counts added into a sum */
	uint64_t sc_ckpt_hits;                     /* ROUTE_BLOCKS summed from a prefix checkpoint */
	uint64_t sc_ckpt_mismatch;                 /* a checkpoint named at another depth (unused) */
	uint64_t sc_ckpt_inserts;
	uint64_t sc_ckpt_evictions;                /* [reason]: 0 lru, 1 explicit */
	uint64_t sc_ckpt_entries, sc_ckpt_capacity; /* gauges */
};

/* Why a ROUTE_BLOCKS or EVICT was refused: the index of rejected_blocks. */
enum locus_engine_blocks_reject {
	LOCUS_ENGINE_BLOCKS_OFF       = 0, /* sig_cache_bytes = 0 */
	LOCUS_ENGINE_BLOCKS_FORMAT    = 1, /* header, shape, block size, list lengths, length */
	LOCUS_ENGINE_BLOCKS_DUPLICATE = 2, /* a hash named twice */
	LOCUS_ENGINE_BLOCKS_COUNTS    = 3, /* counts over the block's tokens or top-k bound */
	LOCUS_ENGINE_BLOCKS_SIGNATURE = 4, /* the tail signature's header */
	LOCUS_ENGINE_BLOCKS_N_REASONS
};

/*
 * Why rows were refused to a rank that takes part in placement changes: the
 * index of rejected_placement. The rank holds the experts of the generations
 * [pl_floor, pl_acked] of its control line only.
 */
enum locus_engine_placement_reject {
	LOCUS_ENGINE_PLACEMENT_OLD = 0, /* planned under a generation below its floor */
	LOCUS_ENGINE_PLACEMENT_NEW = 1, /* ... above the last one it acknowledged */
	LOCUS_ENGINE_PLACEMENT_N_REASONS
};

/* Shapes the engine and its counters are sized for. */
struct locus_engine_dims {
	uint32_t node_id;
	uint32_t n_nodes;
	uint32_t gpus_per_node;
	uint32_t max_layers;     /* MoE layers a table may have */
	uint32_t max_experts;
	uint32_t max_decoders;   /* decoder ids 0..max_decoders-1 */
	uint32_t max_tokens;     /* tokens per dispatch batch */
	uint32_t load_timeout_ms;
	uint32_t top_k;          /* experts per token per layer: bounds a cached block's layers */
	uint32_t sig_cache_block_tokens;
	uint64_t sig_cache_bytes; /* 0: no signature cache (ROUTE_BLOCKS refused -EOPNOTSUPP) */
	uint32_t sig_cache_checkpoint_blocks; /* a prefix checkpoint every N blocks; 0 = none */
};

/*
 * Register the engine's counters (once per segment) and return their
 * offsets. Returns 0 or the registration's error.
 */
int locus_engine_register_counters(struct locus_counters *c, const struct locus_engine_dims *d,
				   struct locus_engine_ctr *out, struct locus_error *err);

/*
 * The inter-node transport as the engine sees it (locusd: a network lcore
 * behind DPDK rings, buffers from a registered mempool; tests: queues).
 * All calls are made on the engine's lcore and must not block.
 */
/* One gather entry of a message (locus_engine_remote.send_sg). */
struct locus_engine_sge {
	uint64_t addr;
	uint32_t len;
	uint32_t lkey;
};

struct locus_engine_remote {
	/* A buffer of at least len (<= max_msg) bytes for a message, or NULL. */
	void *(*alloc)(void *ctx, size_t len);
	/* Give back a buffer that was not sent. */
	void (*free)(void *ctx, void *buf);
	/*
	 * Hand a message to node over; the transport owns buf from here and
	 * reports the send's end with locus_engine_remote_done(cookie, status)
	 * exactly once. Returns 0, or -LOCUS_EFULL / -LOCUS_EPEERDOWN (buf
	 * stays the caller's).
	 */
	int (*send)(void *ctx, uint32_t node, void *buf, size_t len, uint64_t cookie);
	/* Whether node's connection is up (cheap, no syscall). */
	int (*peer_up)(void *ctx, uint32_t node);
	/*
	 * Optional (NULL: the engine copies): like send, but the message is the
	 * first hdr_len bytes of buf followed by the n_sg segments of sg, all of
	 * one region the transport registered, their lkey the region's key from
	 * that registration (locusd: a key the transport turns into the lkey of
	 * the rail that carries the message, locus_rail_mr.h). The transport
	 * copies the list; the segments must stay untouched until the send is
	 * done.
	 */
	int (*send_sg)(void *ctx, uint32_t node, void *buf, size_t hdr_len,
		       const struct locus_engine_sge *sg, uint32_t n_sg, uint64_t cookie);
	uint32_t max_sge;              /* segments send_sg takes after the header */
	/*
	 * One-sided write of our decoder load row (len <= load_area_len bytes)
	 * into node's load area for us: no work for node's CPU, no credits, no
	 * completion to report; row may be reused on return. Returns 0,
	 * -EBUSY (the previous write is still in flight: skip this period) or
	 * -LOCUS_EPEERDOWN.
	 */
	int (*write_load)(void *ctx, uint32_t node, const void *row, size_t len);
	/*
	 * Our load area for node's row (load_area_len bytes), which node
	 * rewrites at any time; NULL if none.
	 */
	const volatile void *(*load_area)(void *ctx, uint32_t node);
	void *ctx;
	size_t max_msg;
	size_t load_area_len;          /* >= locus_load_row_size(max_decoders) */
	uint32_t load_period_us;       /* load row write (and read) period */
};

/*
 * Intra-node DMA (intra_node = verbs): the RDMA device moves rows between
 * client buffers, the CPU writes only headers. Called on the engine's lcore,
 * never blocks. copy() gathers n ranges (offsets in the client region) to
 * dst_off onwards and reports the end with locus_engine_ldma_done(cookie,
 * status) exactly once; it returns 0, or negative with nothing started (the
 * engine then copies with the CPU).
 */
struct locus_engine_ldma_src {
	uint64_t off;
	uint32_t len;
	uint32_t reserved;
};

struct locus_engine_ldma {
	int (*copy)(void *ctx, uint64_t dst_off, const struct locus_engine_ldma_src *src,
		    uint32_t n, uint64_t cookie);
	void *ctx;
};

struct locus_engine_params {
	struct locus_engine_dims dims;
	struct locus_clients *clients;     /* validated view of the client region */
	struct locus_table_region *tables; /* channels LOCUS_TABLE_CH_* */
	unsigned reader_idx;               /* this lcore's reader record */
	void *ctr_block;                   /* this lcore's counters block */
	struct locus_engine_ctr ctr;
	uint64_t tsc_hz;
	uint64_t (*now)(void);             /* a TSC-like clock in tsc_hz ticks */
	const struct locus_engine_remote *remote; /* NULL: a single node */
	/*
	 * Several engines on one node: the group they share and this one's
	 * index in it (reader_idx and ctr_block are its own too). NULL: the
	 * only engine.
	 */
	struct locus_engine_group *group;
	uint32_t engine_idx;
	/* the router's arithmetic: LOCUS_ELDR_PATH_AUTO (16-bit, 0) or LOCUS_ELDR_PATH_AUTO_I8 */
	uint32_t router_path;
	/*
	 * 1: the node follows the cluster's placements through etcd: a GRACE
	 * table must carry the cluster generation it was committed under (its
	 * header's generation), so rows never name a node-local one
	 */
	uint32_t cluster_placements;
};

struct locus_engine;

/*
 * Several engine lcores on one node (engine_lcores = N). Every engine knows
 * every client slot, but polls only the slots it owns (the grant's engine).
 * Each client's inbox is split into N shares, share k written by engine k
 * only (its own allocator, no sharing); a delivery to a slot another engine
 * owns is written straight into our share of its inbox and its descriptor
 * handed to the owner through a lock-free SPSC ring (locus_spsc.h), which
 * posts it on the client's completion ring: its only producer. A RELEASE of
 * an inbox slot goes back the same way to the engine whose share holds it.
 * The owner keeps completion entries for everything the other shares can
 * hold, so a hand-over always finds room: room is checked where the message
 * is written, before anything is, and a dispatch stays all-or-nothing.
 */
struct locus_engine_group;

/*
 * A group of n_engines (1..LOCUS_ENGINE_MAX_ENGINES) over the client
 * region's n_slots slots of inbox_slots each (>= n_engines). Returns 0,
 * -EINVAL or -ENOMEM.
 */
#define LOCUS_ENGINE_MAX_ENGINES 8u
int locus_engine_group_create(uint32_t n_engines, uint32_t n_slots, uint32_t inbox_slots,
			      struct locus_engine_group **out);

/* After every engine of the group is destroyed. NULL is a no-op. */
void locus_engine_group_destroy(struct locus_engine_group *g);

/* Hand-overs and releases waiting between the group's engines (a snapshot). */
uint32_t locus_engine_group_inflight(const struct locus_engine_group *g);

/* Allocate and set up an engine; registers its table readers. */
int locus_engine_create(const struct locus_engine_params *p, struct locus_engine **out,
			struct locus_error *err);

/* Unregister the readers and free. NULL is a no-op. */
void locus_engine_destroy(struct locus_engine *e);

/*
 * Move intra-node rows with ldma from now on (before the engine's lcore
 * starts; ldma must outlive the engine). NULL: the CPU copies.
 */
void locus_engine_set_ldma(struct locus_engine *e, const struct locus_engine_ldma *ldma);

/* The end of an ldma copy (engine lcore). */
void locus_engine_ldma_done(struct locus_engine *e, uint64_t cookie, int status);

/* One poll iteration. Returns the number of descriptors handled. */
int locus_engine_poll(struct locus_engine *e);

/*
 * The poll loop slept while idle for `ticks` of the engine's clock (as
 * measured around the sleep): counted in idle_sleeps and idle_sleep_ns.
 * Engine lcore only.
 */
void locus_engine_idle_slept(struct locus_engine *e, uint64_t ticks);

enum locus_engine_cmd {
	LOCUS_ENGINE_ATTACH = 1, /* serve the slot (state ACTIVE, request checked) */
	LOCUS_ENGINE_DETACH = 2, /* stop serving it and forget its inbox */
};

/* What the control thread granted a client: the engine trusts only this. */
struct locus_engine_grant {
	uint32_t roles;
	uint32_t decoder_id;
	uint32_t rank;
	uint32_t engine;      /* the group's engine that polls the slot (0: the only one) */
};

/*
 * Control thread: ask the engine to attach (with what was granted) or detach
 * a client slot. In a group every engine is told of every attach and detach
 * (the owner serves the slot, the others deliver to it). Returns a ticket;
 * locus_engine_command_done(e, slot, ticket) turns 1 once the engine carried
 * it out. One control thread only.
 */
uint64_t locus_engine_command(struct locus_engine *e, uint32_t slot, enum locus_engine_cmd cmd,
			      const struct locus_engine_grant *grant);
int locus_engine_command_done(struct locus_engine *e, uint32_t slot, uint64_t ticket);

/*
 * A client's buffer region as the control thread granted it (checked,
 * mapped, registered). The engine trusts only this, and only between the
 * ADD's and the DEL's acknowledgement.
 */
struct locus_engine_region {
	uint32_t id;      /* the client's id; id % LOCUS_CLIENT_MAX_REGIONS is its index */
	uint32_t lkey;    /* MR of the region, 0: none (rows leaving the node are copied) */
	uint8_t *addr;    /* CPU mapping, NULL: none (intra-node copies fail) */
	uint64_t iova;    /* MR address of the region's byte 0 (with lkey) */
	uint64_t len;
};

enum locus_engine_region_cmd {
	LOCUS_ENGINE_REGION_ADD = 1,
	LOCUS_ENGINE_REGION_DEL = 2, /* done once no request in flight reads it */
};

/*
 * Control thread: add or remove region index idx (< LOCUS_CLIENT_MAX_REGIONS)
 * of client slot. Returns a ticket; locus_engine_region_done() turns 1 once
 * the engine carried it out. For DEL that is when the last in-flight send
 * from the region has completed: only then may the mapping and the MR go.
 * A detached client's regions are no longer used for new requests, but stay
 * until DEL. One control thread only.
 */
uint64_t locus_engine_region_command(struct locus_engine *e, uint32_t slot, uint32_t idx,
				     enum locus_engine_region_cmd cmd,
				     const struct locus_engine_region *r);
int locus_engine_region_done(struct locus_engine *e, uint32_t slot, uint32_t idx,
			     uint64_t ticket);

/*
 * Engine lcore: the transport finished sending the message of cookie
 * (status 0 or -code). Completes the client request it belongs to once all
 * of its messages are done.
 */
void locus_engine_remote_done(struct locus_engine *e, uint64_t cookie, int status);

/*
 * Engine lcore: a message arrived from node (len bytes, header first). Every
 * byte is checked; signatures go to the local decoder, rows to the local
 * rank (loads do not come as messages: load rows). The engine copies what it keeps: msg
 * may be reused when this returns. Returns 0, -LOCUS_EFULL when the local
 * receiver has no room now (nothing happened: the transport must keep the
 * message and hand it again, in order, later), or the refusal's code
 * (counted, the message is dropped).
 */
int locus_engine_remote_recv(struct locus_engine *e, uint32_t node, const void *msg, size_t len);

/*
 * Whether this engine would take a placement (a GRACE table or a placement
 * set): the checks of the GRACE channel, without counting. Reads only what
 * is fixed at creation, so the main lcore may call it while the engine
 * runs. 0, or the refusal's code with err saying why.
 */
int locus_engine_grace_check(struct locus_engine *e, const void *buf, size_t len,
			     struct locus_error *err);

/* Table generation in use on a channel (0: none yet). */
uint64_t locus_engine_table_generation(const struct locus_engine *e, unsigned ch);

#endif /* LOCUS_ENGINE_H */
