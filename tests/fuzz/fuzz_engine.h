/* SPDX-License-Identifier: MIT */
/*
 * Two engines of one cluster in one thread, without EAL or a segment file,
 * for the fuzz targets that reach the engine: each node's client, table and
 * counters regions in private memory laid out by their own modules, its
 * engine (locus_engine_create), clients attached through the control
 * thread's real sequence (claim, locus_clients_prepare, ATTACH command,
 * locus_clients_publish), tables pushed through the table channel, and an
 * in-memory transport between the two engines (sends, gathers from
 * registered regions, one-sided load rows).
 *
 * The harness plays every client and checks what the engines promise
 * (locus_client.h, locus_engine.h, locus_dispatch.h): every ROUTE, DISPATCH
 * and COMBINE gets exactly one completion with its op and id, a RELEASE
 * none unless invalid, an unknown op one error; a client left is owed
 * nothing; deliveries lie in the receiver's inbox, never in a slot it
 * still holds, and pass the receiver's own checks (signature check, rows
 * message check, addressed to it); whatever an engine sends its peer is
 * accepted by the peer (not refused as malformed); gathers read only
 * registered regions. A broken promise aborts (FUZZ_CHECK).
 *
 * Node 0: slot 0 prefill, slot 1 decoder 0, slots 2 and 3 ranks 0 and 1.
 * Node 1: slot 0 prefill, slot 1 decoder 1, slots 2 and 3 ranks 2 and 3.
 * Tables: ELDR over 2 x 8 with decoders 0..3, GRACE 2 x 8 on 2 x 2 ranks.
 * Node 0's engine copies intra-node rows with the CPU, node 1's hands them to
 * an intra-node DMA (the harness copies them a round later, or fails them
 * while the node's sends fail), which must write only into inboxes.
 */
#ifndef LOCUS_FUZZ_ENGINE_H
#define LOCUS_FUZZ_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_engine.h"
#include "locus_ring.h"
#include "locus_table.h"

#define FE_L          2
#define FE_E          8
#define FE_NODES      2
#define FE_GPN        2
#define FE_RANKS      (FE_NODES * FE_GPN)
#define FE_SLOTS      4
#define FE_RING       64
#define FE_STAGE      32768u
#define FE_INBOX      16u
#define FE_INBOX_SLOT 2048u
#define FE_MAX_DEC    8
#define FE_MAX_TOKENS 64
#define FE_AREA       128  /* load row of 8 decoders: 88 bytes */
#define FE_QCAP       256
#define FE_MAX_IDS    4096
#define FE_MAX_ALLOC  128  /* transport buffers outstanding per node */
#define FE_REGION_LEN 32768u
#define FE_MAX_MSG    65536u

struct fe_msg {
	void *buf;
	size_t len;
	uint64_t cookie;
	int status;
	int tampered;            /* changed on the wire: the peer may refuse it */
};

struct fe_queue {
	struct fe_msg m[FE_QCAP];
	unsigned head, tail;
};

struct fe_region {
	uint8_t *mem;            /* the backing memory, whether the engine may map it or not */
	uint32_t id;             /* 0: none */
	uint32_t lkey;           /* 0: no MR */
	uint64_t iova;
	int mapped;
	int deleting;
	uint64_t ticket;
};

struct fe_client {
	uint32_t roles, decoder, rank;
	int attached;
	int hold;                        /* keep deliveries instead of releasing them */
	struct locus_ring_end sub, cpl;  /* the client's ends */
	uint8_t *buf;
	uint8_t busy[FE_INBOX];          /* inbox slot covered by a delivery not released */
	uint16_t held[FE_INBOX];         /* span of the delivery starting at a slot */
	uint32_t rel[FE_INBOX];          /* releases waiting for ring room */
	uint32_t n_rel;
	uint32_t region_seq;
	struct fe_region reg[LOCUS_CLIENT_MAX_REGIONS];
};

/* An intra-node DMA copy the engine started (node 1 moves rows that way). */
struct fe_ldma_job {
	uint64_t dst_off;
	uint64_t cookie;
	uint32_t n;
	struct locus_engine_ldma_src src[FE_MAX_TOKENS + 1];
};

struct fe_env;

struct fe_node {
	int id;
	struct fe_env *env;
	void *cmem, *tmem, *kmem;
	struct locus_clients cv;
	struct locus_table_region *tables;
	struct locus_counters *ctrs;
	struct locus_engine_ctr ctr;
	void *blk;
	struct locus_engine *e;
	struct locus_engine_remote rt;
	uint8_t load_area[FE_AREA] __attribute__((aligned(64))); /* the peer's row lands here */
	int peer_up;
	int fail_sends;
	unsigned n_alloc;
	struct fe_queue out;     /* messages to the peer */
	struct fe_queue done;    /* send completions to report */
	struct locus_engine_ldma ldma;
	struct fe_ldma_job jobs[16];
	unsigned n_jobs;
	struct fe_client cl[FE_SLOTS];
};

/* A request submitted by a client, waiting for its one completion. */
struct fe_req {
	uint8_t op;
	uint8_t node, slot;
	uint8_t state;           /* enum fe_req_state */
};

enum fe_req_state { FE_REQ_NONE = 0, FE_REQ_LIVE, FE_REQ_DONE, FE_REQ_SILENT, FE_REQ_FORGIVEN };

struct fe_env {
	struct fe_node n[FE_NODES];
	struct fe_req req[FE_MAX_IDS];
	uint32_t n_ids;
	int tamper_next;         /* the next message node 1 sends is changed at ... */
	uint32_t tamper_off;
	uint8_t tamper_xor;
	uint32_t tamper_cut;     /* ... and cut by this many bytes */
	uint64_t deliveries, completions;
	const char *skip_peer_sig; /* non-NULL: a known defect's check is off */
	/* the seed generator records what the engines send (NULL: nobody) */
	void (*on_send)(void *arg, int node, const void *buf, size_t len);
	void *on_send_arg;
};

/* Current time of the harness clock (ns; the engines' tsc_hz is 1e9). */
uint64_t fe_now(void);
void fe_advance(uint64_t ns);

/* Both nodes up, tables adopted, every client attached and decoders known across. */
struct fe_env *fe_create(void);
/* Engines first, then the memory they used. NULL is a no-op. */
void fe_destroy(struct fe_env *env);

/* One round: poll both engines, move messages and completions, play the clients. */
void fe_round(struct fe_env *env);
/* Rounds until nothing moves; then every request still owed a completion fails. */
void fe_quiesce(struct fe_env *env);

/* Submit d from client slot of node (its id replaced by a fresh one); 0 or -1 (not now). */
int fe_submit(struct fe_env *env, int node, int slot, struct locus_desc *d);
/*
 * A RELEASE of inbox slot s by the client, when nothing else moves, so the
 * harness knows whether it is valid: a valid one gets no completion, an
 * invalid one exactly one error.
 */
void fe_release_raw(struct fe_env *env, int node, int slot, uint32_t s);

void fe_attach(struct fe_env *env, int node, int slot);
void fe_detach(struct fe_env *env, int node, int slot);
/* Register (mapped and/or with an MR) or drop region idx of a client. */
void fe_region_add(struct fe_env *env, int node, int slot, uint32_t idx, int mapped, int mr);
void fe_region_del(struct fe_env *env, int node, int slot, uint32_t idx);
/* Push a sealed table on channel ch of node; returns the generation or < 0. */
int64_t fe_push(struct fe_env *env, int node, unsigned ch, const void *blob, size_t len);

/* Check a delivery d to client slot of node as that client would (called by fe_round). */
void fe_check_delivery(struct fe_env *env, int node, int slot, const struct locus_desc *d);

#endif /* LOCUS_FUZZ_ENGINE_H */
