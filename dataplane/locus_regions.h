/* SPDX-License-Identifier: MIT */
/*
 * The registration socket (locusd's main lcore; tests: the control thread):
 * client attachments and client buffer regions.
 *
 * Attachments: an ATTACH request is handed to the node (attach ops), which
 * picks a slot, has the engine serve it and answers with the slot's memfd
 * (locus_regions_attach_answer); the client's confirmation is then awaited
 * on the same connection, and a slot it never confirms (it closed, died or
 * let its timeout pass) goes back to the node (unconfirmed).
 *
 * Buffer regions: clients pass a dma-buf fd over the registration socket
 * (locus_client.h); this module authenticates the sender (SO_PEERCRED pid =
 * the slot's owner, the slot's generation), checks the fd (a dma-buf per
 * /proc/self/fdinfo's exp_name, or host memory: a memfd sealed against
 * shrinking; its size, the alignment, the per-client limits), maps it where
 * the exporter allows, registers it with every rail's RDMA device through mr
 * ops (a dma-buf MR first, else an MR on the mapping), and
 * hands it to the engine with a region command. A region is released (DEL
 * acknowledged by the engine, then unmap, deregister, close) when the client
 * unregisters it, detaches or dies.
 *
 * Nothing here blocks: the socket is non-blocking, a connection that has
 * not sent its request within a second is dropped, and answers that wait on
 * the engine are sent from a later pass.
 */
#ifndef LOCUS_REGIONS_H
#define LOCUS_REGIONS_H

#include <stdint.h>

#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_counters.h"
#include "locus_engine.h"
#include "locus_err.h"
#include "locus_rail_mr.h"

/* How locusd registers a region with its RDMA devices, one per rail (locusd_net.c). */
struct locus_regions_mr_ops {
	/*
	 * Register [offset, offset + len) of fd (a dma-buf; -1 for host memory,
	 * which only map can register) with every rail's device: a dma-buf MR
	 * where the device takes one, else an MR on map (locusd's mapping, NULL:
	 * none). 0 with *lkey (the key the engine's gather entries carry: the
	 * transport gives each rail its own lkey, locus_rail_mr.h), *iova (the
	 * address of the region's byte 0 in the entries) and *handle;
	 * -EOPNOTSUPP when no rail has an MR. *how (rails by path, the reasons)
	 * either way.
	 */
	int (*reg)(void *ctx, int fd, uint64_t offset, uint64_t len, void *map, uint32_t *lkey,
		   uint64_t *iova, void **handle, struct locus_rail_mr_how *how);
	void (*dereg)(void *ctx, void *handle);
	void *ctx;
};

/* Why a request was refused: the index of regions_refused. */
enum locus_regions_refusal {
	LOCUS_REGREF_MALFORMED = 0, /* size, magic, version, op, fd count */
	LOCUS_REGREF_PEER      = 1, /* slot, generation, pid not the owner's */
	LOCUS_REGREF_NOT_DMABUF = 2,
	LOCUS_REGREF_RANGE     = 3, /* offset, length, alignment, dma-buf size */
	LOCUS_REGREF_LIMIT     = 4, /* regions or bytes per client */
	LOCUS_REGREF_REGISTER  = 5, /* mapping and MR both impossible */
	LOCUS_REGREF_UNKNOWN   = 6, /* UNREGISTER of an id the client does not hold */
	LOCUS_REGREF_N
};

/* How the node takes attachments (dataplane/node.c). */
struct locus_regions_attach_ops {
	/*
	 * An ATTACH from pid on connection conn: 0 when the node took it (it
	 * answers later with locus_regions_attach_answer), or a refusal code
	 * with msg (msg_len bytes) saying why; it is answered at once.
	 */
	int (*request)(void *ctx, int conn, pid_t pid, const struct locus_reg_req *q, char *msg,
		       size_t msg_len);
	/* The client never confirmed slot of generation: take it back. */
	void (*unconfirmed)(void *ctx, uint32_t slot, uint64_t generation);
	void *ctx;
};

struct locus_regions_params {
	const char *instance;                /* socket locus_client_reg_sock_path(instance) */
	struct locus_clients *clients;
	struct locus_engine *engine;
	/*
	 * Several engines: engines[slot_engine[slot]] polls the slot and takes
	 * its region commands (NULL: engine takes them all).
	 */
	struct locus_engine *const *engines;
	const uint8_t *slot_engine;          /* [n_slots] */
	struct locus_counters *ctrs;         /* counters are registered here ... */
	void *ctl_blk;                       /* ... and counted in this block */
	const uint8_t *attached;             /* [n_slots]: 1 = granted and handed to the engine */
	const struct locus_regions_mr_ops *mr; /* NULL: no RDMA device (one node) */
	const struct locus_regions_attach_ops *attach; /* NULL: attachments refused */
	uint64_t max_bytes;                  /* per client, all its regions; 0: LOCUS_REGION_MAX_LEN */
};

struct locus_regions;

/* Register counters, bind and listen. Returns 0 or negative (err says). */
int locus_regions_create(const struct locus_regions_params *p, struct locus_regions **out,
			 struct locus_error *err);

/*
 * One pass: accept, serve requests, finish what the engine acknowledged.
 * Quick: dma-buf registrations (mapping, MR) are only parked here.
 */
void locus_regions_poll(struct locus_regions *rs);

/*
 * The slow half: set up one dma-buf registration parked in an earlier
 * pass, and none while an attachment waits for its grant. Called after the
 * node answered its attachments, so a registration that takes long (seconds
 * for an MR on a loaded Soft-RoCE guest) holds up no attachment.
 */
void locus_regions_setup(struct locus_regions *rs);

/* From now on, register regions with the RDMA device through mr (NULL: none). */
void locus_regions_set_mr(struct locus_regions *rs, const struct locus_regions_mr_ops *mr);

/*
 * Answer the ATTACH the node took on conn: status 0 with slot, its
 * generation and its memfd fd (a copy travels; ours stays open), or a
 * refusal with msg. Returns 0 when the client got a grant (its confirmation
 * is awaited from now on), negative when it is gone (the node takes the
 * slot back itself) or for a refusal.
 */
int locus_regions_attach_answer(struct locus_regions *rs, int conn, int status, uint32_t slot,
				uint64_t generation, int fd, const char *msg);

/* Slot's client is gone: release all its regions (engine DEL first). */
void locus_regions_slot_gone(struct locus_regions *rs, uint32_t slot);

/* 1 while a region of slot is still held (the slot must not be reused). */
int locus_regions_slot_busy(const struct locus_regions *rs, uint32_t slot);

/*
 * Close the socket, unlink it, release every region without asking the
 * engine (call only once the engine no longer runs). NULL is a no-op.
 */
void locus_regions_destroy(struct locus_regions *rs);

#endif /* LOCUS_REGIONS_H */
