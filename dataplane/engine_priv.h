/* SPDX-License-Identifier: MIT */
/* Engine internals shared by engine*.c. */
#ifndef LOCUS_ENGINE_PRIV_H
#define LOCUS_ENGINE_PRIV_H

#include "locus_client_priv.h"
#include "locus_counters_priv.h"
#include "locus_dispatch.h"
#include "locus_eldr_router.h"
#include "locus_engine.h"
#include "locus_grace_plan.h"
#include "locus_ring.h"
#include "locus_sigcache.h"

enum { OP_DISPATCH_IDX = 0, OP_COMBINE_IDX = 1 };

#define LOCUS_ENGINE_MAX_SGE 16 /* gather entries of one message the engine builds */

/* What the engine knows of one client slot. Engine-local memory. */
struct engine_client {
	uint8_t active;
	uint8_t broken;          /* protocol violation: no longer polled */
	uint8_t owned;           /* this engine polls it (else another engine: deliveries
				  * to it are handed over, engine_cross.c) */
	uint32_t owner;          /* the engine that polls it */
	uint32_t roles;
	uint32_t decoder_id;
	uint32_t rank;
	struct locus_ring_end sub;  /* consumer */
	struct locus_ring_end cpl;  /* producer */
	uint8_t *buf;
	struct locus_client_ctl *ctl;
	uint32_t cpl_reserved;      /* completion entries promised in this batch */
	uint32_t cpl_pending;       /* completions owed to requests waiting on remote sends */
	uint32_t epoch;             /* bumped at every attach: pending work of a
				     * previous client in this slot is dropped */
	uint32_t inbox_used;        /* inbox slots taken */
	uint64_t *inbox_free;       /* bitmap, 1 = free */
	uint16_t *inbox_span;       /* span of the message starting at a slot, else 0 */
	/* decoder load tracking */
	uint64_t load_seq;
	uint64_t load_tsc;
} __locus_cache_aligned;

struct engine_cmd {
	uint64_t ticket;         /* written by control (release) */
	uint32_t cmd;
	uint32_t pad;
	struct locus_engine_grant grant;
	uint64_t done;           /* written by the engine (release) */
	uint8_t  pad2[24];
};

/* A client's buffer region, engine-local. */
struct engine_region {
	struct locus_engine_region r;   /* r.id == 0: none */
	uint32_t inflight;              /* pending requests whose sends read it */
	uint8_t closing;                /* DEL seen: no new use; done when inflight == 0 */
	uint64_t del_ticket;
};

struct engine_region_cmd {
	uint64_t ticket;                /* written by control (release) */
	uint32_t cmd;
	uint32_t pad;
	struct locus_engine_region r;
	uint64_t done;                  /* written by the engine (release) */
	uint8_t pad2[16];
};

/* Where one destination of a batch goes, decided in phase 1. */
struct dest_plan {
	uint32_t client;         /* client slot receiving (local) */
	uint32_t node;           /* node receiving (remote) */
	uint32_t remote;
	uint32_t in_place;
	uint32_t rows_per_msg;
	uint32_t n_chunks;
	enum locus_grace_tier tier;
};

/*
 * One GRACE placement: a planner map and an SWRR state per EP group and
 * which group each rank's dispatch is planned with. A single GRACE table is
 * one group holding every rank.
 */
struct engine_placement {
	uint64_t gen;                              /* the placement generation rows carry */
	uint32_t n_groups;
	uint32_t is_set;                           /* came from a placement set */
	uint16_t *group_of_rank;                   /* [n_ranks] */
	struct locus_grace_map **map;              /* [pl_max_groups] into map_mem */
	struct locus_grace_plan_state **st;        /* [pl_max_groups] into st_mem */
	void *map_mem, *st_mem;
};

/*
 * The last refusal sent to a source rank (engine_remote.c): a batch's
 * messages to one rank arrive in order, chunk 0 first, so one refusal per
 * (batch, destination) run is enough for the source to learn of it.
 */
struct engine_refusal {
	uint64_t batch;
	uint32_t dst_rank;
	uint32_t sent;           /* a refusal went out for (batch, dst_rank) */
};

/* A decoder id's local state. */
struct engine_decoder {
	int32_t slot;            /* local client slot serving it, -1 none */
	int32_t router_slot;     /* index in the current router, -1 not in table */
	uint8_t up;
	int32_t node;            /* node of a remote decoder (from its load reports), -1 */
	uint32_t rload;          /* its last reported load */
	uint64_t rtsc;           /* when that report came */
	uint64_t rseq;           /* seq of the load row that listed it last */
};

/* A delivery whose rows the intra-node DMA is still moving. */
struct engine_ldma_msg {
	uint32_t gen;            /* cookie check: bumped at each use */
	uint32_t slot;           /* receiving client */
	uint32_t epoch;          /* its attachment */
	int32_t pidx;            /* the sender's pending request */
	uint64_t bytes;
	struct locus_desc d;     /* what to deliver */
};

/* A client request waiting for the transport to finish its remote sends. */
struct engine_pending {
	uint32_t gen;            /* cookie check: bumped at each use */
	uint32_t epoch;          /* the client's attachment it belongs to */
	uint32_t slot;           /* client slot to complete */
	uint32_t outstanding;    /* sends not yet done */
	int32_t status;          /* first error, or 0 */
	int32_t region;          /* index in e->regs the sends read, -1 none */
	uint64_t t0;
	uint64_t hist;           /* latency histogram offset */
	struct locus_desc d;     /* the completion to post */
};

struct locus_engine {
	struct locus_engine_params p;
	struct locus_clients *cv;
	uint32_t n_slots;
	uint32_t n_ranks;
	uint64_t stage_size;
	uint32_t inbox_slots;
	uint32_t inbox_slot_size;
	uint32_t inbox_words;

	/* control -> engine commands */
	uint64_t cmd_posted __locus_cache_aligned; /* control: tickets issued */
	uint64_t cmd_seen __locus_cache_aligned;   /* engine: tickets handled */
	struct engine_cmd *cmds;                   /* [n_slots] */

	/* control -> engine region commands, and the regions */
	uint64_t rcmd_posted __locus_cache_aligned;
	uint64_t rcmd_seen __locus_cache_aligned;
	struct engine_region_cmd *rcmds;           /* [n_slots * LOCUS_CLIENT_MAX_REGIONS] */
	struct engine_region *regs;                /* [n_slots * LOCUS_CLIENT_MAX_REGIONS] */
	uint32_t n_closing;                        /* regions waiting for their sends */

	struct engine_client *cl;                  /* [n_slots] */
	struct engine_decoder *dec;                /* [max_decoders] */
	int32_t *rank_slot;                        /* [n_ranks] local client, -1 */
	uint32_t *seq;                             /* [n_ranks] per destination */
	struct engine_refusal *refused;            /* [n_ranks] by source rank */

	/* tables */
	struct locus_table_reader rd[LOCUS_TABLE_N_CHANNELS];
	int rd_ok[LOCUS_TABLE_N_CHANNELS];
	uint64_t gen[LOCUS_TABLE_N_CHANNELS];

	void *router_mem[2];
	size_t router_mem_len;
	struct locus_eldr_router *router;
	int router_buf;

	/* GRACE placement (engine_grace.c): two buffers, place is the current one */
	struct engine_placement pl[2];
	const struct engine_placement *place;      /* NULL: no GRACE table yet */
	int pl_buf;
	uint32_t pl_max_groups;
	size_t pl_map_len, pl_st_len;              /* bytes of each buffer's arenas */
	struct locus_grace_plan plan;
	void *plan_mem;

	/*
	 * The request being handled, copied out of the client's stage before it
	 * is checked (dispatch: expert ids and gates; combine: row refs): the
	 * client may rewrite its stage at any time, so what was checked is what
	 * the planner, the messages and the counters use.
	 */
	uint8_t *req_body;
	size_t req_body_max;

	/*
	 * The signature cache (engine_blocks.c), NULL when sig_cache_bytes is 0,
	 * and the private memory a ROUTE_BLOCKS or EVICT is copied into before
	 * it is checked: the header, hash lists and new blocks; the summed
	 * signature routed and forwarded; the duplicate check's scratch.
	 */
	struct locus_sigcache *sc;
	struct locus_sigcache_stats sc_seen;       /* stats as last mirrored into counters */
	uint8_t *blk_req;
	size_t blk_req_max;
	uint16_t *blk_sum;                         /* [max_layers * max_experts] */
	uint64_t *blk_scratch;                     /* [MAX_CACHED + MAX_NEW] (EVICT: MAX) */

	/* per-destination message reservations of one batch */
	uint32_t *res_slot;                        /* [max messages] inbox slot */
	uint32_t *res_client;                      /* [max messages] client slot */
	uint32_t res_max;
	struct dest_plan *dplan;                   /* [n_ranks] */
	void **res_buf;                            /* [res_max] remote message buffers */

	/* intra-node DMA (intra_node = verbs) */
	const struct locus_engine_ldma *ldma;      /* NULL: the CPU copies */
	struct engine_ldma_msg *lmsg;              /* [n_lmsg] deliveries waiting for a copy */
	uint32_t *lmsg_free;
	uint32_t n_lmsg, n_lmsg_free;
	struct locus_engine_ldma_src *lsrc;        /* [max_tokens] ranges of one message */

	/* inter-node */
	const struct locus_engine_remote *rt;      /* NULL: single node */
	struct engine_pending *pend;               /* [n_pend] */
	uint32_t *pend_free;                       /* stack of free indices */
	uint32_t n_pend, n_pend_free;
	uint64_t next_load;
	uint64_t load_period;
	/* one-sided decoder load rows (engine_load.c) */
	void *load_tx, *load_rx;                   /* our row; a copy of a peer's */
	size_t load_row_len;                       /* bytes of the largest row */
	uint64_t load_seq;                         /* our row's seq */
	uint64_t *row_seq;                         /* [n_nodes] last good seq taken */

	/* the ranks this engine can reach (engine_live.c) */
	uint64_t *lost, *lost_next;                /* [lost_words] bit r: rank r lost; spare */
	uint32_t lost_words;
	uint32_t n_lost;
	uint32_t *node_ranks;                      /* [n_nodes] a peer's row's ranks word, 0 none */
	uint64_t lost_changed_ns;                  /* CLOCK_MONOTONIC of the last change */

	/* how long each rank takes to answer (engine_answer.c) */
	struct engine_ans { uint64_t batch, t0; } *ans; /* [local GPU][n_ranks] the last sent */
	uint64_t *ans_max;                         /* [n_ranks] slowest answer this second, ns */
	uint64_t ans_next;                         /* TSC of the next window */

	/* several engines on the node (engine_cross.c); n_eng 1: none */
	struct locus_engine_group *grp;
	uint32_t idx, n_eng;
	uint32_t share_lo, share_hi;               /* our share of every client's inbox */
	uint32_t foreign_reserve;                  /* completion entries kept for the others */
	uint32_t *x_need;                          /* [n_eng] hand-overs promised in this request */
	uint8_t *share_of;                         /* [inbox_slots] engine whose share holds it */

	uint64_t inbox_used;                       /* inbox slots taken, every client */
	uint64_t next_housekeeping;
	uint64_t housekeeping_period;
	uint64_t load_timeout_tsc;
	void *blk;                                 /* counters block */
	struct locus_engine_ctr c;
};

/* engine.c */
int engine_complete(struct locus_engine *e, struct engine_client *c, const struct locus_desc *d);
int engine_deliver(struct locus_engine *e, uint32_t slot, const struct locus_desc *d);
uint32_t engine_room(struct locus_engine *e, struct engine_client *c);
int engine_inbox_alloc(struct locus_engine *e, struct engine_client *c, uint32_t span);
void engine_inbox_free(struct locus_engine *e, struct engine_client *c, uint32_t first);
uint32_t engine_span_for(const struct locus_engine *e, size_t len);

/* engine_ldma.c */
int engine_ldma_create(struct locus_engine *e);
void engine_ldma_destroy(struct locus_engine *e);
int engine_ldma_deliver(struct locus_engine *e, int pidx, uint32_t dst_slot, uint64_t dst_off,
			uint32_t n_src, const struct locus_desc *d);

/* engine_route.c */
/*
 * n (<= LOCUS_ENGINE_BURST) consecutive ROUTE descriptors of one client:
 * checked, scored together (locus_eldr_route_split_batch: the decisions of
 * one call each, in order), delivered and completed in submission order.
 */
void engine_route_burst(struct locus_engine *e, uint32_t slot, struct locus_desc *d, uint32_t n);
/*
 * Route a signature whose header sh the caller copied privately (it is
 * checked here) and whose counts are at counts (any value is valid), and
 * deliver it: the one completion of d is posted (a remote decoder's when
 * its send ends).
 */
void engine_route_signature(struct locus_engine *e, uint32_t slot, struct locus_desc *d,
			    const struct locus_eldr_sig_hdr *sh, const uint16_t *counts,
			    size_t sig_len, uint64_t t0);
/* Post a route's completion now and record its handling time from t0. */
void engine_route_complete(struct locus_engine *e, struct engine_client *c,
			   const struct locus_desc *d, uint64_t t0);
/*
 * A prefill request's descriptor (ROUTE, ROUTE_BLOCKS, EVICT): the client
 * holds the prefill role and off/len lie in its stage, 8-byte aligned. 0, or
 * -1 with d->status = -LOCUS_EPROTO and the refusal counted.
 */
int engine_prefill_desc_check(struct locus_engine *e, const struct engine_client *c,
			      struct locus_desc *d);

/* engine_blocks.c: the signature cache */
int engine_blocks_create(struct locus_engine *e, struct locus_error *err);
void engine_blocks_destroy(struct locus_engine *e);
/* An ELDR table of shape L x E became current: a cache of another shape is emptied. */
void engine_blocks_table(struct locus_engine *e, uint16_t n_layers, uint16_t n_experts);
void engine_route_blocks(struct locus_engine *e, uint32_t slot, struct locus_desc *d);
void engine_evict(struct locus_engine *e, uint32_t slot, struct locus_desc *d);
void engine_router_refresh(struct locus_engine *e);
void engine_decoders_housekeeping(struct locus_engine *e, uint64_t now);

/* engine_remote.c */
int engine_pending_get(struct locus_engine *e, uint32_t slot, const struct locus_desc *d,
		       uint64_t t0, uint64_t hist);
void engine_pending_arm(struct locus_engine *e, int idx, int status);
int engine_pending_send(struct locus_engine *e, int idx, uint32_t node, void *buf, size_t len);
void engine_pending_end(struct locus_engine *e, int idx, int status);
int engine_pending_send_sg(struct locus_engine *e, int idx, uint32_t node, void *buf,
			   size_t hdr_len, const struct locus_engine_sge *sg, uint32_t n_sg,
			   size_t len);
void engine_pending_fail(struct locus_engine *e, int idx, int status);
void engine_pending_hold_region(struct locus_engine *e, int idx, struct engine_region *g);
uint64_t engine_cookie(const struct locus_engine *e, int idx);
int engine_remote_peer_up(struct locus_engine *e, uint32_t node);

/* engine_region.c */
int engine_regions_alloc(struct locus_engine *e);
void engine_regions_free(struct locus_engine *e);
void engine_region_commands(struct locus_engine *e);
void engine_regions_retire(struct locus_engine *e);
/* The usable region id of client slot, or NULL. */
struct engine_region *engine_region_get(struct locus_engine *e, uint32_t slot, uint32_t id);
void engine_region_put(struct locus_engine *e, int32_t idx);
/* engine_load.c */
/* Row buffers for a transport with load areas: 0, or -EINVAL (area too small) / -ENOMEM. */
int engine_load_init(struct locus_engine *e, struct locus_error *err);
void engine_load_fini(struct locus_engine *e);
/* Every load period: write our row to each live peer, take in the rows that moved. */
void engine_load_exchange(struct locus_engine *e, uint64_t now);

/* engine.c */
void *engine_zalloc(size_t n);

/* engine_live.c: the ranks this engine can reach */
int engine_live_init(struct locus_engine *e, struct locus_error *err);
void engine_live_fini(struct locus_engine *e);
/* Make the lost set again; a change goes to our rank clients' control lines. 1 if it changed. */
int engine_live_refresh(struct locus_engine *e);
/* The ranks word of our load row: LOCUS_LOAD_ROW_RANKS | our GPUs with a rank attached. */
uint32_t engine_live_local_ranks(const struct locus_engine *e);
/* A peer's load row said ranks (its ranks word). */
void engine_live_row(struct locus_engine *e, uint32_t node, uint32_t ranks);
/* Write the lost set into client slot's control line when we poll it and it is a rank. */
void engine_live_publish(struct locus_engine *e, uint32_t slot);

/* engine_answer.c: how long each rank takes to answer a local rank's rows */
int engine_answer_init(struct locus_engine *e, struct locus_error *err);
void engine_answer_fini(struct locus_engine *e);
/* Local rank src handed rows of batch to rank at TSC t0. */
void engine_answer_sent(struct locus_engine *e, uint32_t src, uint32_t rank, uint64_t batch,
			uint64_t t0);
/* Rank's results of batch reached local rank src: timed once, if we sent it rows. */
void engine_answer_back(struct locus_engine *e, uint32_t src, uint32_t rank, uint64_t batch);
/* Every second: the slowest answers of the last one into rank_answer_max_ns. */
void engine_answer_window(struct locus_engine *e, uint64_t now);

/* engine_cross.c: several engines on one node */
int engine_cross_init(struct locus_engine *e, struct locus_error *err);
void engine_cross_fini(struct locus_engine *e);
/* Entries the owner keeps for c's hand-overs (a foreign client); 0 when full. */
uint32_t engine_cross_room(struct locus_engine *e, const struct engine_client *c);
/* Hand a delivery to a foreign client over to its owner: 0 or -LOCUS_EFULL. */
int engine_cross_deliver(struct locus_engine *e, uint32_t slot, const struct locus_desc *d);
/* A RELEASE of an inbox slot of another engine's share, forwarded: 0 or < 0. */
int engine_cross_release(struct locus_engine *e, struct engine_client *c, uint32_t first);
/* Every iteration: hand-overs to our clients, releases of our shares. Work done. */
int engine_cross_poll(struct locus_engine *e);
/* Promise (n > 0) or take back (n < 0) n completion entries of client c. */
void engine_promise(struct locus_engine *e, struct engine_client *c, int32_t n);
/* The gauges of the whole node (tables, signature cache shape) are engine 0's. */
static inline int engine_primary(const struct locus_engine *e)
{
	return e->idx == 0;
}

/* engine_grace.c */
/* The placement buffers for tables up to max_dims: 0 or -ENOMEM / -EINVAL. */
int engine_grace_alloc(struct locus_engine *e, const struct locus_grace_dims *max_dims,
		       struct locus_error *err);
void engine_grace_free(struct locus_engine *e);
/* The GRACE channel's validator: a GRACE table or a placement set this node can hold. */
int engine_grace_validate(const void *buf, size_t len, void *arg, struct locus_error *err);
/*
 * Build a validated table of channel generation gen into the spare buffer
 * and switch: 0 or < 0. Its rows carry the table header's generation when
 * it has one, else gen.
 */
int engine_grace_adopt(struct locus_engine *e, const void *t, size_t len, uint64_t gen);

/* engine_dispatch.c */
void engine_dispatch(struct locus_engine *e, uint32_t slot, struct locus_desc *d);
void engine_combine(struct locus_engine *e, uint32_t slot, struct locus_desc *d);

static inline void engine_count(struct locus_engine *e, uint64_t off)
{
	locus_counter_inc(e->blk, off);
}

/*
 * Whether client c may be handed rows planned under placement generation
 * gen: a rank that takes part in placement changes (pl_part) holds the
 * experts of [pl_floor, pl_acked] only, none before its first ack; any other
 * client takes every row. -1 to deliver, else the refusal's enum
 * locus_engine_placement_reject. Three loads of words the client writes:
 * the poll loop's price.
 */
static inline int engine_placement_refusal(const struct engine_client *c, uint64_t gen)
{
	uint64_t acked;

	if (!__atomic_load_n(&c->ctl->pl_part, __ATOMIC_ACQUIRE))
		return -1;
	acked = __atomic_load_n(&c->ctl->pl_acked, __ATOMIC_ACQUIRE);
	if (gen < __atomic_load_n(&c->ctl->pl_floor, __ATOMIC_ACQUIRE))
		return LOCUS_ENGINE_PLACEMENT_OLD;
	return gen > acked ? LOCUS_ENGINE_PLACEMENT_NEW : -1;
}

#endif /* LOCUS_ENGINE_PRIV_H */
