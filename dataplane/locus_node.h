/* SPDX-License-Identifier: MIT */
/*
 * One node's data plane, independent of how its threads are run: the
 * segment (counters, read-only to every other process), the table channels
 * in this process's memory behind the control socket, the client slots (a
 * memfd each) behind the registration socket, the engine of the worker
 * lcore, and the control work of the main lcore (table pushes, attachments,
 * reclaiming dead clients). locusd runs these on DPDK lcores; tests run
 * them on threads.
 */
#ifndef LOCUS_NODE_H
#define LOCUS_NODE_H

#include <stdint.h>

#include "locus_config.h"
#include "locus_counters.h"
#include "locus_engine.h"
#include "locus_err.h"

struct locus_node;

/*
 * Counter blocks: the worker lcore's (engine 0) and the main lcore's
 * (control); engine k > 0 writes block k + 1.
 */
#define LOCUS_NODE_ENGINE_BLOCK 0u
#define LOCUS_NODE_CTL_BLOCK    1u

/*
 * Create the segment /dev/shm/locus.<cfg->instance> (state STARTING, mode
 * 0640), the table channels, the client slots, register counters, build
 * the engine and open the control and registration sockets. now() is the
 * clock of tsc_hz ticks the engine uses for timers and latencies.
 */
int locus_node_create(const struct locus_config *cfg, uint64_t (*now)(void), uint64_t tsc_hz,
		      struct locus_node **out, struct locus_error *err);

/* The same, for a node of a cluster: remote is the inter-node transport. */
int locus_node_create_remote(const struct locus_config *cfg, uint64_t (*now)(void),
			     uint64_t tsc_hz, const struct locus_engine_remote *remote,
			     struct locus_node **out, struct locus_error *err);

/*
 * The same with several engine lcores: remotes[k] is engine k's transport
 * (n_remotes = engine_lcores; 0: a single node). Each engine sends on its
 * own transport; arrivals go where locus_node_arrival_engine() says (a
 * struct locus_relay_mux routes them so); engine 0 writes the node's
 * decoder load row.
 */
/*
 * Several engine lcores: the engine owning the receiver of an arriving
 * message, from its header alone (bytes nobody checked yet: a bad or
 * unknown one gives 0, whose engine checks it and refuses it); the
 * network lcore's choice of relay (locus_relay_mux_set_pick): a decoder's
 * or a rank's the engine it was granted (a rank that also prefills sits on
 * engine 0 with the signature cache on), a rank nobody holds its GPU's.
 * Any engine delivers to any client, so a stale answer (a client that
 * moved) costs only a hand-over.
 */
uint32_t locus_node_arrival_engine(const struct locus_node *n, const void *msg, size_t len);

int locus_node_create_remotes(const struct locus_config *cfg, uint64_t (*now)(void),
			      uint64_t tsc_hz, const struct locus_engine_remote *const *remotes,
			      uint32_t n_remotes, struct locus_node **out,
			      struct locus_error *err);

/* The segment accepts clients from now on (state RUNNING). */
void locus_node_set_running(struct locus_node *n);

/* The segment says the daemon is going away (state STOPPING). */
void locus_node_set_stopping(struct locus_node *n);

struct locus_regions_mr_ops;

/*
 * Register client buffer regions (locus_regions.h) with the RDMA device
 * through mr from now on (NULL on a single node: mapped regions only).
 * Returns 0 or negative (err says).
 */
int locus_node_regions_open(struct locus_node *n, const struct locus_regions_mr_ops *mr,
			    struct locus_error *err);

/*
 * Release every region now, without the engine (which must no longer run):
 * before the RDMA device whose MRs they hold goes away.
 */
void locus_node_regions_close(struct locus_node *n);

/*
 * Called on the control thread whenever a freed client slot got its fresh
 * memfd, before anyone may have the slot again (locusd: re-register the
 * intra-node DMA's MR over the new pages); a negative return retries on
 * the next pass, the slot staying out of use meanwhile.
 */
void locus_node_on_renew(struct locus_node *n, int (*hook)(void *ctx, uint32_t slot), void *ctx);

/*
 * One pass of control work: the control socket (table pushes), the
 * registration socket (attachments, buffer regions), and every client slot
 * (engine commands, reclaim, renewal). Control thread only.
 */
void locus_node_control(struct locus_node *n);

/* The worker lcore's engine (engine 0 with several engine lcores). */
struct locus_engine *locus_node_engine(struct locus_node *n);

/*
 * Which engine polls the ranks of each of the node's gpus_per_node GPUs
 * (locus_engine_topo_map), instead of the order of the engine lcores: for
 * the attachments after it, so before the control loop runs (or from it).
 * 0, or -LOCUS_ERANGE (a count or an engine out of range).
 */
int locus_node_place_gpus(struct locus_node *n, const uint8_t *gpu_engine, uint32_t n_gpus);

/* The engine that polls client slot `slot` as granted at its attach (0 with one engine). */
uint32_t locus_node_slot_engine(const struct locus_node *n, uint32_t slot);

/* Engines (engine_lcores), engine k (NULL past the last), and k's counters block. */
uint32_t locus_node_n_engines(const struct locus_node *n);
struct locus_engine *locus_node_engine_at(struct locus_node *n, uint32_t k);
uint32_t locus_node_engine_block(uint32_t k);

/* Table generation every engine uses on channel ch (the lowest of theirs). */
uint64_t locus_node_table_generation(struct locus_node *n, unsigned ch);

/* Whether every engine would take this placement (locus_engine_grace_check). */
int locus_node_grace_check(struct locus_node *n, const void *buf, size_t len,
			   struct locus_error *err);

/* Hand-overs and releases in flight between the engines (drain before stopping). */
uint32_t locus_node_engine_inflight(const struct locus_node *n);

/* The segment's counters (read-write handle: register more entries). */
struct locus_counters *locus_node_counters(struct locus_node *n);

struct locus_pushsrv;
/* The control socket's server: the channels' one writer (locus_pushsrv.h). */
struct locus_pushsrv *locus_node_pushsrv(struct locus_node *n);

/*
 * The client region as mapped here: every client's rings and buffer. The
 * intra-node DMA registers it and names places by offsets from its start.
 */
void *locus_node_client_region(struct locus_node *n, size_t *len);

/*
 * Where the client slots lie in that region: slot i at first + i * stride,
 * count of them, each a memfd of its own (renewed when freed: on_renew).
 */
void locus_node_client_slots(const struct locus_node *n, size_t *first, size_t *stride,
			     unsigned *count);

/* Clients attached right now (control's view). */
uint32_t locus_node_clients(const struct locus_node *n);
/* Bit g: this node's GPU g has a rank client attached (the main lcore's view). */
uint32_t locus_node_ranks_attached(const struct locus_node *n);

/* Tear down; remove the segment too when remove_segment is set. */
void locus_node_destroy(struct locus_node *n, int remove_segment);

#endif /* LOCUS_NODE_H */
