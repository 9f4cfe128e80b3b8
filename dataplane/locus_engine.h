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

/* Offsets of the engine's counters in every counters block. */
struct locus_engine_ctr {
	uint64_t poll_iterations, poll_busy;
	uint64_t clients_attached;                 /* gauge */
	uint64_t client_protocol_errors;
	uint64_t route_requests, routed;           /* routed: [max_decoders] */
	uint64_t route_band, route_ns;             /* histograms */
	uint64_t decoder_load, decoder_up;         /* gauges [max_decoders] */
	uint64_t rej_bad_signature, rej_no_decoder, rej_no_table, rej_inbox_full;
	uint64_t rej_bad_descriptor, rej_peer_down, rej_bad_release;
	uint64_t dispatch_batches, combine_batches;
	uint64_t rows, bytes, msgs;                /* [op 2][tier 3] */
	uint64_t dispatch_ns, combine_ns;          /* histograms */
	uint64_t expert_tokens;                    /* [layers][experts] */
	uint64_t table_generation;                 /* gauge [channel] */
	uint64_t table_adopted, table_rejected;    /* [channel] */
	uint64_t remote_msgs_out, remote_msgs_in;  /* [node] */
	uint64_t remote_bytes_out, remote_bytes_in; /* [node] */
	uint64_t remote_send_errors;               /* sends that completed with an error */
	uint64_t remote_undeliverable;             /* received, no local receiver or no room */
	uint64_t remote_bad;                       /* received messages refused by the checks */
	uint64_t load_rows_written, load_rows_read; /* [node] */
	uint64_t load_rows_torn, load_rows_bad;    /* [node] */
	uint64_t load_decoders_stale;              /* gauge */
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
};

struct locus_engine;

/* Allocate and set up an engine; registers its table readers. */
int locus_engine_create(const struct locus_engine_params *p, struct locus_engine **out,
			struct locus_error *err);

/* Unregister the readers and free. NULL is a no-op. */
void locus_engine_destroy(struct locus_engine *e);

/* One poll iteration. Returns the number of descriptors handled. */
int locus_engine_poll(struct locus_engine *e);

enum locus_engine_cmd {
	LOCUS_ENGINE_ATTACH = 1, /* serve the slot (state ACTIVE, request checked) */
	LOCUS_ENGINE_DETACH = 2, /* stop serving it and forget its inbox */
};

/* What the control thread granted a client: the engine trusts only this. */
struct locus_engine_grant {
	uint32_t roles;
	uint32_t decoder_id;
	uint32_t rank;
};

/*
 * Control thread: ask the engine to attach (with what was granted) or detach
 * a client slot. Returns a ticket; locus_engine_command_done(e, slot, ticket)
 * turns 1 once the engine carried it out. One control thread only.
 */
uint64_t locus_engine_command(struct locus_engine *e, uint32_t slot, enum locus_engine_cmd cmd,
			      const struct locus_engine_grant *grant);
int locus_engine_command_done(struct locus_engine *e, uint32_t slot, uint64_t ticket);

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

/* Table generation in use on a channel (0: none yet). */
uint64_t locus_engine_table_generation(const struct locus_engine *e, unsigned ch);

#endif /* LOCUS_ENGINE_H */
