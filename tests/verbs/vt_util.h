/* SPDX-License-Identifier: MIT */
/*
 * Guest-side helpers shared by the verbs tests and the benchmark: a "node"
 * (one endpoint + one peer) that streams pattern-filled messages and checks
 * every received byte against the same generator, with bounded pumping.
 */
#ifndef VT_UTIL_H
#define VT_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "locus_verbs.h"

struct vt_node {
	struct locus_verbs_ep *ep;
	struct locus_verbs_peer *peer;
	const char *name;
	/* rx: expected stream */
	const uint32_t *rx_sizes;
	unsigned rx_nsizes;
	uint32_t rx_stream;
	uint64_t rx_count, rx_bytes, rx_bad;
	bool rx_hold;               /* hold messages, release in vt_release_held */
	unsigned rx_held;           /* held now, in arrival order in held[] */
	struct { const uint8_t *d; uint32_t len; uint64_t seq; } held[64];
	uint64_t rx_kill_after;     /* raise SIGKILL after this many messages (0: never) */
	/* tx */
	struct locus_verbs_mr txmr;
	uint32_t tx_buf_size;
	unsigned tx_nbuf;
	uint32_t tx_stream;
	uint64_t tx_posted, tx_done, tx_ok, tx_err;
	int tx_last_err;
	uint8_t *done_count;        /* [done_cap] completions per cookie */
	uint64_t done_cap, done_dup;
	/* peer events */
	int ups, downs, last_down;
};

/* Pattern byte i of message seq of a stream. */
static inline uint8_t vt_pat(uint32_t stream, uint64_t seq, uint64_t i)
{
	return (uint8_t)((seq * 131u + i * 7u + (i >> 8) + stream * 29u) ^ (seq >> 3));
}

/* IPv4 of the RoCE v2 GID of dev (real sysfs): 0 or -errno. */
int vt_dev_addr(const char *dev, struct in_addr *a);

/* Endpoint on dev; port 0 = not listening; params may be tuned by tune(). */
int vt_node_init(struct vt_node *n, const char *name, const char *dev, uint16_t port,
		 uint16_t node_id, void (*tune)(struct locus_verbs_ep_params *));
/* Peer: dial dev_remote:port (active) or accept from node_id (port 0). */
int vt_node_peer(struct vt_node *n, uint16_t peer_node, const char *remote_dev, uint16_t port);
/* Registered tx buffers (nbuf x size). */
int vt_node_txbufs(struct vt_node *n, unsigned nbuf, uint32_t size, uint64_t done_cap);
void vt_node_fini(struct vt_node *n);

/*
 * Post the next messages of the stream (sizes cycle through sizes[]), up to
 * batch per call and limit in total. Returns posted count or negative.
 */
int vt_send(struct vt_node *n, const uint32_t *sizes, unsigned nsizes, unsigned batch,
	    uint64_t limit);

/* Poll + service every node until cond(arg) or timeout_ms. true if cond met. */
bool vt_pump(struct vt_node **nodes, unsigned nn, bool (*cond)(void *), void *arg,
	     unsigned timeout_ms);
bool vt_wait_up(struct vt_node **nodes, unsigned nn, unsigned timeout_ms);

uint64_t vt_now_us(void);

/*
 * Release the k oldest held messages after checking their bytes are still
 * intact (a sender that overwrote an unreleased slot is caught here).
 */
int vt_release_held(struct vt_node *n, unsigned k);

extern const uint8_t vt_secret[LOCUS_VERBS_SECRET_LEN];

#endif
