/* SPDX-License-Identifier: MIT */
/* One node: the state node.c and node_clients.c share (not installed). */
#ifndef LOCUS_NODE_PRIV_H
#define LOCUS_NODE_PRIV_H

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_node.h"
#include "locus_pushsrv.h"
#include "locus_regions.h"
#include "locus_shm.h"
#include "locus_table.h"

enum node_renew {
	RENEW_NONE   = 0,
	RENEW_OBJECT = 1, /* the slot waits for a fresh memfd */
	RENEW_HOOK   = 2, /* ... and then for the renew hook (the intra-node DMA's MR) */
};

struct locus_node {
	struct locus_config cfg;
	struct locus_shm *shm;         /* counters; read-only to everyone else */
	void *table_mem;               /* the table channels: only this process maps them */
	size_t table_len;
	struct locus_table_region *tables;
	struct locus_pushsrv *push;    /* the control socket, the channels' only writer */
	struct locus_counters *ctrs;
	struct locus_clients clients;  /* every slot a memfd of its own */
	struct locus_engine *engine;   /* engines[0] */
	struct locus_engine *engines[LOCUS_CFG_MAX_ENGINES];
	uint32_t n_eng;
	struct locus_engine_group *group; /* NULL: one engine */
	uint8_t *slot_engine;          /* [n_slots] the engine polling the slot */
	uint64_t *eng_ticket;          /* [n_slots * n_eng] each engine's command ticket */
	uint32_t eng_ranks[LOCUS_CFG_MAX_ENGINES];  /* ranks attached, per engine */
	uint32_t eng_others[LOCUS_CFG_MAX_ENGINES]; /* prefillers and decoders, per engine */
	uint8_t gpu_engine[LOCUS_CFG_MAX_GPUS];     /* a rank's engine by its GPU, when placed */
	int gpus_placed;                            /* locus_node_place_gpus() was called */
	void *ctl_blk;
	void *eng_blk;               /* the engine's counters block (read for the log) */
	uint64_t sc_resets_off;      /* its sigcache_resets */
	uint64_t sc_resets_seen;
	uint64_t ctr_refused, ctr_reclaimed, ctr_detached;
	uint32_t n_ranks;
	uint32_t n_attached;
	/* control's registry, per client slot */
	uint64_t *ticket;     /* 1: an engine command pending (every engine's: eng_ticket) */
	uint8_t *cmd;
	uint8_t *attached;
	uint64_t *claim;      /* the CLAIMED word until the slot is ACTIVE, else 0 */
	int *conn;            /* the registration connection awaiting the grant, -1 */
	struct locus_engine_grant *grant;
	int32_t *decoder_owner;
	int32_t *rank_owner;
	uint8_t *decoder_engine; /* [max_decoders] its owner's engine, for the network lcore */
	uint8_t *rank_engine;    /* [n_ranks] its owner's engine + 1, 0: none (its GPU's then) */
	uint8_t *draining;    /* detached, waiting for its regions' release */
	uint8_t *renew;       /* enum node_renew */
	int (*renew_hook)(void *ctx, uint32_t slot);
	void *renew_ctx;
	struct locus_regions *regions; /* the registration socket */
	uint64_t next_liveness_ns;     /* CLOCK_MONOTONIC_COARSE: next /proc look at clients */
	struct locus_regions_attach_ops attach_ops;
};

/* A dead client (no detach) is noticed within this, plus a control period. */
#define NODE_LIVENESS_NS (20ull * 1000000ull)

/* node_clients.c: the registration socket's attach ops, for node.c to open it with. */
void node_clients_init(struct locus_node *n);

/* node.c: counters block of engine k (0 and 2.. : block 1 is the control's). */
uint32_t node_engine_block(uint32_t k);

/* The engine that serves rank (node_clients.c). */
uint32_t node_rank_engine(const struct locus_node *n, uint32_t rank);

#endif /* LOCUS_NODE_PRIV_H */
