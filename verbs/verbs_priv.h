/* SPDX-License-Identifier: MIT */
/* Internal state of the verbs transport, shared by ep.c and data.c. */
#ifndef LOCUS_VERBS_PRIV_H
#define LOCUS_VERBS_PRIV_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "locus_verbs.h"

#define RECV_BATCH  16u   /* RECVs reposted as one list */
#define POLL_BURST  32

enum tx_kind { TX_MSG = 1, TX_CREDIT = 2, TX_RAW = 3 };

struct locus_verbs_peer {
	/* hot: data path */
	struct locus_verbs_ep *ep;
	struct ibv_qp *qp;
	enum locus_verbs_peer_state state;
	uint16_t idx, gen;
	uint16_t node_id;
	/* tx into the peer's inbox */
	struct locus_verbs_ring rring;
	uint64_t raddr;              /* peer's inbox for us */
	uint32_t rkey;
	uint64_t tx_head;            /* cumulative slots consumed there */
	volatile uint64_t *credit_in;/* peer's released count, written by the peer */
	uint64_t sq_posted, sq_done; /* WR sequence numbers */
	uint32_t unsignaled;
	uint64_t *tx_cookie;         /* [sq_depth] */
	uint8_t *tx_kind;            /* [sq_depth] */
	/* rx from our inbox */
	struct locus_verbs_ring lring;
	uint64_t rx_head;            /* cumulative slots of the next message */
	uint64_t rx_released;
	uint64_t rx_credit_sent;
	uint32_t recv_to_post;
	bool credit_pending;
	uint32_t *held;              /* [slot_count]: consumed slots | HELD_DONE */
	uint32_t held_head, held_n;
	volatile uint64_t *credit_src; /* source word for non-inline credit writes */
	/* control */
	struct rdma_cm_id *id;
	bool active;
	struct sockaddr_in remote;
	uint64_t deadline_ns;        /* next redial (BACKOFF) or give-up (CONNECTING) */
	uint32_t backoff_ms;
	struct locus_verbs_mr inbox;
	struct locus_verbs_stats stats;
} __locus_cache_aligned;

#define HELD_DONE 0x80000000u

struct locus_verbs_ep {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_comp_channel *comp;  /* for locus_verbs_wait() */
	uint32_t cq_events;             /* CQ events to acknowledge */
	uint64_t idle_since_ns;         /* first empty poll with credits pending, 0: busy */
	uint64_t credit_idle_ns;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id;
	struct locus_verbs_ep_params prm;
	uint32_t max_inline;
	uint32_t max_send_sge;          /* asked of every QP (device max, capped) */
	int numa_node;
	char dev_name[LOCUS_VERBS_NAME_MAX];
	struct locus_verbs_peer **peers;
	uint32_t n_peers;
	struct locus_verbs_ep_stats stats;
	struct locus_verbs_ctrs *ctrs; /* counter export, NULL if none */
};

uint64_t locus_verbs_now_ns(void);
/* Tear p's connection down (idempotent per connection), fail in-flight, notify. */
void locus_verbs_peer_down(struct locus_verbs_peer *p, int reason);
/* Fresh ring state + RECVs posted on p->qp; 0 or -errno. */
int locus_verbs_peer_arm(struct locus_verbs_peer *p);
/* Mark p UP (idempotent) and call on_peer_up. */
void locus_verbs_peer_up(struct locus_verbs_peer *p);
int locus_verbs_post_credit(struct locus_verbs_peer *p);
bool locus_verbs_credits_pending(const struct locus_verbs_ep *ep);
void locus_verbs_flush_all_credits(struct locus_verbs_ep *ep);

static inline uint64_t locus_verbs_wrid(const struct locus_verbs_peer *p, uint32_t seq)
{
	return ((uint64_t)p->idx << 48) | ((uint64_t)p->gen << 32) | seq;
}

#endif /* LOCUS_VERBS_PRIV_H */
