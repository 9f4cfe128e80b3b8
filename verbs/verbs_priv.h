/* SPDX-License-Identifier: MIT */
/*
 * Internal state of the verbs transport, shared by ep.c, cm.c and data.c.
 *
 * Every field of a peer has one owner: the control thread (locus_verbs_service:
 * "ctl"), the data thread (poll / post / release: "data"), or whoever the
 * link word (locus_verbs_link.h) says owns the connection right now ("conn":
 * control while IDLE, data from ARMED until it acks QUIESCED). Constant after
 * locus_verbs_peer_add: "const". With threaded = false both are one thread.
 */
#ifndef LOCUS_VERBS_PRIV_H
#define LOCUS_VERBS_PRIV_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "locus_verbs.h"
#include "locus_verbs_link.h"

#define RECV_BATCH  16u   /* RECVs reposted as one list */
#define POLL_BURST  32
/* a closing connection whose last send never completes is given up after this */
#define DRAIN_NS    (200ull * 1000000ull)

enum tx_kind { TX_MSG = 1, TX_CREDIT = 2, TX_RAW = 3, TX_AREA = 4, TX_HELLO = 5 };

/* The hello buffers of a peer (hs_mr, local access only): what we receive, what we send. */
#define HS_RX_OFF   0u
#define HS_TX_OFF   64u
#define HS_MR_LEN   128u

/* Control's view of a peer (what locus_verbs_peer_state() reports besides UP). */
enum ctl_phase {
	CTL_DOWN = 0,      /* passive, no connection */
	CTL_BACKOFF,       /* active, waiting to redial */
	CTL_CONNECTING,    /* rdma_cm in progress */
	CTL_CONNECTED,     /* ESTABLISHED seen */
	CTL_CLOSING,       /* waiting for the data side to quiesce */
};

struct locus_verbs_peer {
	/* const */
	struct locus_verbs_ep *ep;
	uint16_t idx;
	uint16_t node_id;
	bool active;
	bool member;                 /* ctl: dialled or accepted (locus_verbs_peer_set_member) */
	struct locus_verbs_mr inbox;
	volatile uint64_t *credit_in;/* peer's released count, written by the peer */
	volatile uint64_t *credit_src; /* source word for non-inline credit writes */
	uint64_t *tx_cookie;         /* [sq_depth] */
	uint8_t *tx_kind;            /* [sq_depth] */
	uint32_t *held;              /* [slot_count]: consumed slots | HELD_DONE */
	struct locus_verbs_mr area_tx; /* staging of our area writes to the peer */
	struct locus_verbs_mr hs_mr; /* hello buffers (HS_RX_OFF, HS_TX_OFF) */

	/* the hand-over word */
	struct locus_verbs_link link;

	/* data: its view of the link */
	uint8_t dstate;              /* enum locus_verbs_link_state last acted on */
	uint16_t dgen;
	int32_t dreason;             /* why the connection fails (FAILING / CLOSING) */
	uint64_t drain_since_ns;     /* CLOSING first seen, for the DRAIN_NS bound */
	/*
	 * conn: the MAC the peer's hello must carry, and (in hs_mr) our own
	 * hello, written by control before it arms the connection
	 */
	uint8_t hs_expect[LOCUS_VERBS_MAC_LEN];
	/* conn: tx into the peer's inbox */
	struct ibv_qp *qp;
	struct locus_verbs_ring rring;
	uint64_t raddr;              /* peer's inbox for us */
	uint32_t rkey;
	uint64_t tx_head;            /* cumulative slots consumed there */
	uint64_t sq_posted, sq_done; /* WR sequence numbers */
	uint32_t unsignaled;
	uint8_t blocked;             /* why the last post stopped: BLOCKED_*, 0: it did not */
	uint64_t blocked_released;   /* BLOCKED_CREDITS: the peer's released count then */
	uint64_t blocked_done;       /* BLOCKED_SQ: sq_done then */
	/* conn: rx from our inbox */
	struct locus_verbs_ring lring;
	uint64_t rx_head;            /* cumulative slots of the next message */
	uint64_t rx_released;
	uint64_t rx_credit_sent;
	uint32_t recv_to_post;
	bool credit_pending;
	uint32_t held_head, held_n;
	bool area_busy;              /* an area write is in flight */
	uint64_t watch_done, watch_ns; /* sq_done when last seen moving, and when */
	struct locus_verbs_stats dstats; /* data's counts */

	/* ctl */
	struct rdma_cm_id *id;
	uint8_t phase;               /* enum ctl_phase; relaxed stores (read by accessors) */
	struct sockaddr_in remote;
	uint64_t deadline_ns;        /* next redial (BACKOFF) or give-up (CONNECTING) */
	uint32_t backoff_ms;
	struct rdma_cm_id *pend_id;  /* a returning peer's request, waiting for the old
				      * connection to quiesce */
	struct locus_verbs_pdata pend_pd;
	uint32_t pend_qpn;           /* the QP number it came from */
	struct locus_verbs_transcript hs; /* the handshake of the attempt under way */
	bool proving;                /* our proof is out: a time-out is the peer's failure */
	struct locus_verbs_replay seen; /* passive: request nonces accepted from this peer */
	struct locus_verbs_stats cstats; /* ctl's counts */
	struct locus_verbs_stats sum;    /* locus_verbs_peer_stats() snapshot */
} __locus_cache_aligned;

#define HELD_DONE 0x80000000u
enum { BLOCKED_CREDITS = 1, BLOCKED_SQ = 2 };

struct locus_verbs_ep {
	/*
	 * The device's objects: ctl's (set at creation, freed and made again
	 * when the device goes away and comes back: dev.c); the data side
	 * reads cq only while dev allows it (LIVE or LOST), which orders its
	 * reads after control's writes (locus_verbs_dev.h). NULL while DEAD.
	 */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_comp_channel *comp;  /* for locus_verbs_wait() */
	struct rdma_cm_id *listen_id;
	/* const */
	struct rdma_event_channel *ch;
	struct locus_verbs_ep_params prm;
	uint32_t max_send_sge;          /* asked of every QP (device max, capped; a device
					 * that comes back with fewer is not reopened) */
	int numa_node;
	char dev_name[LOCUS_VERBS_NAME_MAX];
	struct locus_verbs_peer **peers;
	uint32_t n_peers;
	uint64_t credit_idle_ns;
	uint64_t stall_ns;              /* prm.stall_ms */
	uint64_t tsc_mult;              /* ns per TSC tick << 32 (0: no TSC), for data_now_ns */
	uint32_t max_inline;            /* set by ctl at the first QP, relaxed atomics */
	/* data */
	uint32_t cq_events;             /* CQ events to acknowledge */
	uint64_t idle_since_ns;         /* first empty poll with credits pending, 0: busy */
	uint32_t n_draining;            /* peers in CLOSING not yet drained */
	uint64_t cq_bursts;             /* polls that found completions */
	/* ctl, but stats.stale_cqes: data */
	struct locus_verbs_ep_stats stats;
	uint64_t hello_refused;         /* data: hellos refused (auth_refused[HELLO]) */
	struct locus_verbs_ep_stats stats_sum; /* locus_verbs_ep_stats() snapshot */
	struct locus_verbs_ctrs *ctrs;  /* counter export, NULL if none */
	/* the device's life: ctl writes the word, the data side acks (locus_verbs_dev.h) */
	struct locus_verbs_dev dev;
	/* ctl */
	uint64_t dev_probe_ns;          /* prm.dev_probe_ms */
	uint64_t dev_next_probe_ns;     /* DEAD: when to look for the device next */
	char dev_note[320];             /* locus_verbs_ep_device_note() */
};

uint64_t locus_verbs_now_ns(void);

/* ns per TSC tick << 32, calibrated against CLOCK_MONOTONIC (2 ms); 0 without a TSC. */
uint64_t locus_verbs_tsc_mult(void);

/*
 * The data path's clock: the TSC scaled to ns, so that an empty poll makes
 * no system call (clock_gettime is one wherever the kernel's clocksource has
 * no vDSO read: HPET, as in a TCG guest, where every empty poll would pay
 * for one). Its values are compared only with each other (the
 * stall, drain and credit-idle bounds of the data side), never with
 * locus_verbs_now_ns().
 */
static inline uint64_t locus_verbs_data_now_ns(const struct locus_verbs_ep *ep)
{
#if defined(__x86_64__)
	if (likely(ep->tsc_mult))
		return (uint64_t)(((unsigned __int128)__builtin_ia32_rdtsc() * ep->tsc_mult) >> 32);
#endif
	return locus_verbs_now_ns();
}

/* ---- data side (data.c) ---- */
/* Fresh ring state + RECVs posted on p->qp for connection gen (ctl, link IDLE). */
int locus_verbs_peer_arm(struct locus_verbs_peer *p, uint16_t gen);
/* Act on the link word of every peer (up / closing hand-overs). */
void locus_verbs_data_sync(struct locus_verbs_ep *ep);
/*
 * Give up draining p now (control destroys the QP next, so nothing is
 * DMA'd afterwards): fail what is in flight and quiesce. Only when no data
 * thread runs (endpoint teardown).
 */
void locus_verbs_data_force_quiesce(struct locus_verbs_peer *p);
int locus_verbs_post_credit(struct locus_verbs_peer *p);
/*
 * Post our hello (hs_mr at HS_TX_OFF) as a signalled SEND under connection
 * gen: by control on the active side while the link is IDLE (it owns the
 * ring then), by the data side on the passive side right after it promoted
 * the link, before anything else goes out. 0 or -errno.
 */
int locus_verbs_post_hello(struct locus_verbs_peer *p, uint16_t gen);
bool locus_verbs_credits_pending(const struct locus_verbs_ep *ep);
void locus_verbs_flush_all_credits(struct locus_verbs_ep *ep);

/* ---- control side (cm.c) ---- */
/* Take p's connection down (QP to error, then hand-over): ctl only. */
void locus_verbs_ctl_close(struct locus_verbs_peer *p, int reason);
/* Act on the data side's hand-overs (FAILING: flush; QUIESCED: destroy, redial). */
void locus_verbs_ctl_handover(struct locus_verbs_ep *ep);

/*
 * The device's async events (port.c, control thread), drained every service
 * (port down closes every connection, port up redials now, a fatal error
 * loses the device). Returns the events handled.
 */
int locus_verbs_port_events(struct locus_verbs_ep *ep);
/*
 * The dialling peers redial at the next service, their back-off reset (a
 * port up, a device reopened: dev.c).
 */
void locus_verbs_redial_now(struct locus_verbs_ep *ep);

/* ---- the device's life (dev.c, control thread) ---- */
/*
 * Open the device ep->prm.local_addr is on: the listener's rdma_cm id bound
 * to it (its context is the device's), async queue non-blocking, PD,
 * completion channel, CQ, the peers' memory registered with the PD, the
 * listener listening. At creation (reopen false) the device's name becomes
 * ep->dev_name (and must be prm.dev_name if set); reopening, it must be
 * ep->dev_name again and offer ep->max_send_sge gather entries. 0, or
 * negative with err (everything it made undone).
 */
int locus_verbs_dev_open(struct locus_verbs_ep *ep, bool reopen, struct locus_error *err);
/*
 * Free what locus_verbs_dev_open made, in order: the CQ and its channel, the
 * caller's MRs (dev_cb.release, told lost), the peers' MRs (their memory
 * stays: the inboxes keep their addresses), the PD, the listener (the
 * context goes with the last rdma_cm id on it). No QP may be left; the data
 * side must touch nothing of the device (parked, or stopped).
 */
void locus_verbs_dev_close(struct locus_verbs_ep *ep, bool lost);
/*
 * The device went away (why: for the log): LIVE -> LOST, counted; every
 * connection closes with -ENODEV, waiting requests are refused. Nothing
 * when it was known already.
 */
void locus_verbs_dev_lost(struct locus_verbs_ep *ep, const char *why);
/*
 * A control-side verbs call failed with rc: when rc is -ENODEV or -EIO and
 * a query of the device fails too, the device is lost. Returns rc.
 */
int locus_verbs_dev_check(struct locus_verbs_ep *ep, int rc);
/*
 * One step of the device's life, every service: LOST with no connection
 * left -> GONE; GONE acked -> everything freed, DEAD; DEAD -> probe by name
 * every dev_probe_ms, reopen, dev_cb.restore, LIVE, redial now.
 */
void locus_verbs_dev_step(struct locus_verbs_ep *ep);

/* ---- memory kept across a device's death (mem.c, control thread) ---- */
/* Deregister mr, keeping its memory (owned or not) and its access flags. */
void locus_verbs_mr_unreg(struct locus_verbs_mr *mr);
/* Register mr's memory again with ep's PD, with its access flags. 0 or negative (err). */
int locus_verbs_mr_rereg(struct locus_verbs_ep *ep, struct locus_verbs_mr *mr,
			 struct locus_error *err);

static inline void ctl_set_phase(struct locus_verbs_peer *p, enum ctl_phase ph)
{
	__atomic_store_n(&p->phase, (uint8_t)ph, __ATOMIC_RELAXED);
}

/*
 * wr_id: peer index (16 bits) | RECV flag | generation (15 bits) | send
 * sequence (32 bits). The flag tells a failed receive from a failed send:
 * an error completion's opcode is undefined.
 */
#define WRID_RECV (1ull << 47)
#define WRID_GEN_MASK 0x7fffu

static inline uint64_t locus_verbs_wrid(const struct locus_verbs_peer *p, uint16_t gen,
					uint32_t seq)
{
	return ((uint64_t)p->idx << 48) | ((uint64_t)(gen & WRID_GEN_MASK) << 32) | seq;
}

#endif /* LOCUS_VERBS_PRIV_H */
