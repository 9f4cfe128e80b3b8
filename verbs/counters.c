// SPDX-License-Identifier: MIT
/*
 * Export of the transport's per-peer statistics to the segment's counter
 * directory. Each side keeps counting in its own structs (no extra stores
 * on the hot path) and copies them into its own counter block, where it is
 * the only writer, so a relaxed store of the running total is a counter
 * update; readers sum the blocks. Not threaded, one block may serve both.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_counters.h"
#include "locus_counters_priv.h"
#include "locus_err_priv.h"
#include "verbs_priv.h"

enum {
	C_TX_MSGS, C_TX_BYTES, C_RX_MSGS, C_RX_BYTES, C_CREDIT_STALLS, C_SQ_STALLS,
	C_CREDIT_WRITES, C_TX_DOORBELLS, C_TX_SIGNALED, C_CQES, C_TX_FAILED, C_CONNECTS, C_RECONNECTS, C_DISCONNECTS, C_REJECTS_RX,
	C_PROTO_ERRORS, C_STALLS, C_RX_DROPPED, C_PEER_NODE, C_PEER_UP, C_CQ_ERRORS,
	C_AUTH_REFUSED, C_VERSION_REJECTS, C_PEER_REJECTS, C_CQ_BURSTS, C_PORT_ERRORS, C_PORT_UPS,
	C_DEV_LOST, C_DEV_BACK, C_DEV_REOPEN_FAILED,
	C_N
};

static const struct {
	const char *name, *help;
	enum locus_ctr_kind kind;
	unsigned shape; /* 0 scalar, 1 by peer, 2 by peer and status, 3 by auth reason */
} ctr_def[C_N] = {
	[C_TX_MSGS] = { "tx_msgs", "messages posted to the peer", LOCUS_CTR_COUNTER, 1 },
	[C_TX_BYTES] = { "tx_bytes", "message bytes posted to the peer", LOCUS_CTR_COUNTER, 1 },
	[C_RX_MSGS] = { "rx_msgs", "messages received from the peer", LOCUS_CTR_COUNTER, 1 },
	[C_RX_BYTES] = { "rx_bytes", "message bytes received from the peer", LOCUS_CTR_COUNTER, 1 },
	[C_CREDIT_STALLS] = { "credit_stalls", "posts held back for lack of inbox credits",
			      LOCUS_CTR_COUNTER, 1 },
	[C_SQ_STALLS] = { "sq_stalls", "posts held back for lack of send queue room",
			  LOCUS_CTR_COUNTER, 1 },
	[C_CREDIT_WRITES] = { "credit_writes", "credit returns written to the peer",
			      LOCUS_CTR_COUNTER, 1 },
	[C_TX_DOORBELLS] = { "tx_doorbells", "send queue doorbells (ibv_post_send) that carried "
			     "messages", LOCUS_CTR_COUNTER, 1 },
	[C_TX_SIGNALED] = { "tx_signaled", "messages posted with a completion asked for",
			    LOCUS_CTR_COUNTER, 1 },
	[C_CQES] = { "cqes", "completions of the peer's sends and receives polled",
		     LOCUS_CTR_COUNTER, 1 },
	[C_TX_FAILED] = { "tx_failed", "messages completed with an error", LOCUS_CTR_COUNTER, 1 },
	[C_CONNECTS] = { "connects", "connections established", LOCUS_CTR_COUNTER, 1 },
	[C_RECONNECTS] = { "reconnects", "connections re-established after a loss",
			   LOCUS_CTR_COUNTER, 1 },
	[C_DISCONNECTS] = { "disconnects", "established connections lost", LOCUS_CTR_COUNTER, 1 },
	[C_REJECTS_RX] = { "rejects_received", "our connection attempts the peer refused",
			   LOCUS_CTR_COUNTER, 1 },
	[C_PROTO_ERRORS] = { "proto_errors", "ring or handshake violations by the peer",
			     LOCUS_CTR_COUNTER, 1 },
	[C_STALLS] = { "stalls", "connections failed because their sends stopped completing",
		       LOCUS_CTR_COUNTER, 1 },
	[C_RX_DROPPED] = { "rx_dropped", "messages that arrived but died with their connection "
			   "(held, not yet taken, or landed as it failed): the sender saw them "
			   "acked", LOCUS_CTR_COUNTER, 1 },
	[C_PEER_NODE] = { "peer_node", "node id of the peer at this index", LOCUS_CTR_GAUGE, 1 },
	[C_PEER_UP] = { "peer_up", "1 while the connection is up", LOCUS_CTR_GAUGE, 1 },
	[C_CQ_ERRORS] = { "cq_errors", "completion errors by ibv_wc_status", LOCUS_CTR_COUNTER, 2 },
	[C_AUTH_REFUSED] = { "auth_refused", "handshakes refused by reason: 0 cluster, 1 replayed "
			     "request, 2 request MAC, 3 accept MAC, 4 hello, 5 no proof in time",
			     LOCUS_CTR_COUNTER, 3 },
	[C_VERSION_REJECTS] = { "version_rejects", "connection requests refused: version",
				LOCUS_CTR_COUNTER, 0 },
	[C_PEER_REJECTS] = { "peer_rejects", "connection requests refused: unknown node or bad data",
			     LOCUS_CTR_COUNTER, 0 },
	[C_CQ_BURSTS] = { "cq_bursts", "completion queue polls that found completions",
			  LOCUS_CTR_COUNTER, 0 },
	[C_PORT_ERRORS] = { "port_errors", "the device's port went down (async event): every "
			    "connection closed", LOCUS_CTR_COUNTER, 0 },
	[C_PORT_UPS] = { "port_ups", "the device's port came back (async event)",
			 LOCUS_CTR_COUNTER, 0 },
	[C_DEV_LOST] = { "device_lost", "the device went away (removed, reset, fatal error): "
			 "every connection closed, its verbs objects freed", LOCUS_CTR_COUNTER, 0 },
	[C_DEV_BACK] = { "device_back", "the device was listed again under its name and "
			 "reopened", LOCUS_CTR_COUNTER, 0 },
	[C_DEV_REOPEN_FAILED] = { "device_reopen_failed", "attempts to reopen the device, "
				  "listed again, that failed (retried at the next probe)",
				  LOCUS_CTR_COUNTER, 0 },
};

LOCUS_STATIC_ASSERT(C_N <= LOCUS_VERBS_COUNTER_ENTRIES, "the directory room locusd keeps");

struct locus_verbs_ctrs {
	void *dblock, *cblock; /* the data thread's, the control thread's */
	uint64_t off[C_N];
};

int locus_verbs_counters_attach(struct locus_verbs_ep *ep, struct locus_counters *c,
				uint32_t data_lcore, uint32_t ctl_lcore, const char *prefix,
				struct locus_error *err)
{
	struct locus_verbs_ctrs *x;
	char name[LOCUS_CTR_NAME_MAX];
	unsigned i;
	int rc;

	if (ep->ctrs)
		return locus_error_set(err, LOCUS_ESTATE, "endpoint already exports its counters");
	if (ep->prm.threaded && data_lcore == ctl_lcore)
		return locus_error_set(err, EINVAL, "threaded endpoint: the data and the control "
				       "thread need their own counter blocks");
	x = calloc(1, sizeof(*x));
	if (!x)
		return locus_error_set(err, ENOMEM, "out of memory");
	x->dblock = locus_counters_block(c, data_lcore);
	x->cblock = locus_counters_block(c, ctl_lcore);
	if (!x->dblock || !x->cblock) {
		rc = locus_error_set(err, LOCUS_ERANGE, "no writable counter block %u / %u",
				     data_lcore, ctl_lcore);
		goto err_free;
	}
	for (i = 0; i < C_N; i++) {
		struct locus_ctr_desc d = {
			.name = name, .help = ctr_def[i].help, .kind = ctr_def[i].kind,
			.ndims = ctr_def[i].shape,
			.dim = { ep->prm.max_peers, 32 },
			.label = { "peer", "status" },
		};

		if (ctr_def[i].shape == 3)
			d = (struct locus_ctr_desc){ .name = name, .help = ctr_def[i].help,
						     .kind = ctr_def[i].kind, .ndims = 1,
						     .dim = { LOCUS_VERBS_AUTH_N },
						     .label = { "reason" } };

		if (snprintf(name, sizeof(name), "%s_%s", prefix, ctr_def[i].name) >= (int)sizeof(name)) {
			rc = locus_error_set(err, EINVAL, "counter prefix '%s' too long", prefix);
			goto err_free;
		}
		if (d.ndims == 0) {
			d.dim[0] = 0;
			d.label[0] = NULL;
		}
		if (d.ndims < 2) {
			d.dim[1] = 0;
			d.label[1] = NULL;
		}
		rc = locus_counters_register(c, &d, &x->off[i], err);
		if (rc < 0)
			goto err_free;
	}
	ep->ctrs = x;
	locus_verbs_counters_sync(ep);
	return 0;

err_free:
	free(x);
	return rc;
}

static inline void put(void *blk, const struct locus_verbs_ctrs *x, unsigned c, uint32_t i,
		       uint64_t v)
{
	__atomic_store_n(locus_ctr_word(blk, x->off[c] + (uint64_t)i * 8), v, __ATOMIC_RELAXED);
}

/* One thread's own counts into its own block (the reader sums the blocks). */
static void put_stats(void *blk, const struct locus_verbs_ctrs *x, uint32_t i,
		      const struct locus_verbs_stats *a, const struct locus_verbs_stats *b)
{
	struct locus_verbs_stats sum, *st = &sum;
	const uint64_t *wa = (const uint64_t *)a, *wb = (const uint64_t *)b;
	uint64_t *ws = (uint64_t *)&sum;

	/* one block for both sides (not threaded): the sum, written by the one thread */
	for (size_t k = 0; k < sizeof(sum) / 8; k++)
		ws[k] = wa[k] + (b ? wb[k] : 0);
	put(blk, x, C_TX_MSGS, i, st->tx_msgs);
	put(blk, x, C_TX_BYTES, i, st->tx_bytes);
	put(blk, x, C_RX_MSGS, i, st->rx_msgs);
	put(blk, x, C_RX_BYTES, i, st->rx_bytes);
	put(blk, x, C_CREDIT_STALLS, i, st->credit_stalls);
	put(blk, x, C_SQ_STALLS, i, st->sq_stalls);
	put(blk, x, C_CREDIT_WRITES, i, st->credit_writes);
	put(blk, x, C_TX_DOORBELLS, i, st->tx_doorbells);
	put(blk, x, C_TX_SIGNALED, i, st->tx_signaled);
	put(blk, x, C_CQES, i, st->cqes);
	put(blk, x, C_TX_FAILED, i, st->tx_failed);
	put(blk, x, C_CONNECTS, i, st->connects);
	put(blk, x, C_RECONNECTS, i, st->reconnects);
	put(blk, x, C_DISCONNECTS, i, st->disconnects);
	put(blk, x, C_REJECTS_RX, i, st->rejects_received);
	put(blk, x, C_PROTO_ERRORS, i, st->proto_errors);
	put(blk, x, C_STALLS, i, st->stalls);
	put(blk, x, C_RX_DROPPED, i, st->rx_dropped);
	for (uint32_t s = 0; s < 32; s++)
		put(blk, x, C_CQ_ERRORS, i * 32 + s, st->cq_errors[s]);
}

void locus_verbs_counters_sync_data(struct locus_verbs_ep *ep)
{
	struct locus_verbs_ctrs *x = ep->ctrs;

	if (!x || x->dblock == x->cblock)
		return; /* the control sync writes both sides' sum */
	for (uint32_t i = 0; i < ep->n_peers; i++)
		put_stats(x->dblock, x, i, &ep->peers[i]->dstats, NULL);
	put(x->dblock, x, C_AUTH_REFUSED, LOCUS_VERBS_AUTH_HELLO, ep->hello_refused);
	put(x->dblock, x, C_CQ_BURSTS, 0, ep->cq_bursts);
}

void locus_verbs_counters_sync_ctl(struct locus_verbs_ep *ep)
{
	struct locus_verbs_ctrs *x = ep->ctrs;

	if (!x)
		return;
	for (uint32_t i = 0; i < ep->n_peers; i++) {
		const struct locus_verbs_peer *p = ep->peers[i];

		put_stats(x->cblock, x, i, &p->cstats, x->dblock == x->cblock ? &p->dstats : NULL);
		put(x->cblock, x, C_PEER_NODE, i, p->node_id);
		put(x->cblock, x, C_PEER_UP, i,
		    locus_verbs_link_state_of(locus_verbs_link_load(&p->link)) == LOCUS_LINK_UP);
	}
	for (uint32_t r = 0; r < LOCUS_VERBS_AUTH_N; r++)
		put(x->cblock, x, C_AUTH_REFUSED, r, ep->stats.auth_refused[r] +
		    (r == LOCUS_VERBS_AUTH_HELLO && x->dblock == x->cblock ? ep->hello_refused : 0));
	put(x->cblock, x, C_VERSION_REJECTS, 0, ep->stats.version_rejects);
	put(x->cblock, x, C_PEER_REJECTS, 0, ep->stats.peer_rejects);
	put(x->cblock, x, C_PORT_ERRORS, 0, ep->stats.port_errors);
	put(x->cblock, x, C_PORT_UPS, 0, ep->stats.port_ups);
	put(x->cblock, x, C_DEV_LOST, 0, ep->stats.dev_lost);
	put(x->cblock, x, C_DEV_BACK, 0, ep->stats.dev_back);
	put(x->cblock, x, C_DEV_REOPEN_FAILED, 0, ep->stats.dev_reopen_failed);
	if (x->dblock == x->cblock)
		put(x->cblock, x, C_CQ_BURSTS, 0, ep->cq_bursts);
}

void locus_verbs_counters_sync(struct locus_verbs_ep *ep)
{
	locus_verbs_counters_sync_data(ep);
	locus_verbs_counters_sync_ctl(ep);
}
