/* SPDX-License-Identifier: MIT */
/*
 * Expert-parallel collectives over a rank client (liblocus): an EP group of
 * ranks 0..n_ranks-1, each a client attached with LOCUS_ROLE_RANK, calls
 * dispatch and combine for the same batches in the same order.
 *
 * dispatch sends each token row to the ranks serving its top-k experts
 * (locusd's GRACE planner picks the copy, locus_client_dispatch_ex) and
 * collects what every rank sent this one. A rank knows it has a batch
 * whole when, from every live rank, it holds all of that rank's rows
 * messages (each names how many the batch sent it) or a control row saying
 * none come. The receive side is bounded up front: a rank sends another at
 * most one row per token, and no rank dispatches more than max_tokens, so a
 * rank receives at most n_ranks x max_tokens rows, and it knows how many
 * before it copies one (locus_ep_dispatch_poll says how many, then
 * locus_ep_dispatch_end copies them, ordered by source rank then token).
 * combine sends each received row's expert output back to its source,
 * which sums the rows per token.
 *
 * Abort: a rank whose part of a batch fails (its combine input does not
 * fit, a refusal, a time-out) sends an ABORT control row to every other
 * live rank; each fails the same batch with the same code at once, never
 * waiting out its own time-out. A rank that had finished the batch (it
 * needed nothing of the failing rank) keeps its result; one that has not
 * begun it fails it as it begins it. Lost ranks (locus_client_ranks) are neither
 * waited for nor sent to once the group formed (every rank was live
 * together); then dispatches mask the pairs with no reachable copy
 * (LOCUS_DESC_F_MASK) and a handle says which.
 *
 * Control rows travel as one-row COMBINEs whose batch id is
 * LOCUS_EP_CTL_TAG | kind << 56 | batch; the row is a struct locus_ep_ctl.
 * Every field of one is checked before it is used (locus_ep_ctl_check).
 *
 * "No selection": a topk id of -1 (or 0xffff) selects nothing. Such a slot
 * goes with its token's first selected expert and a gate of -0.0, which
 * the receiver reads as no selection (id -1, weight 0); a real gate of
 * -0.0 is sent as +0.0. Trailing tokens with nothing selected are not sent.
 *
 * One dispatch and one combine run at a time per group handle; the rank's
 * client must not be polled elsewhere while they run unless every
 * descriptor goes through locus_ep_take first.
 */
#ifndef LOCUS_EP_H
#define LOCUS_EP_H

#include <stddef.h>
#include <stdint.h>

#include "locus_client.h"
#include "locus_common.h"
#include "locus_dispatch.h"
#include "locus_err.h"

#define LOCUS_EP_MAX_RANKS 64u
#define LOCUS_EP_CTL_TAG   (1ull << 63)  /* a COMBINE carrying a control row */
#define LOCUS_EP_CTL_MAGIC 0x4c544345u   /* "ECTL" */
#define LOCUS_EP_CTL_ROW   192u          /* bytes of a control row */
#define LOCUS_EP_BATCH_MAX ((1ull << 56) - 1)
#define LOCUS_EP_REASON    160u

enum locus_ep_ctl_kind {
	LOCUS_EP_CTL_EMPTY = 1, /* the sender's batch sends this rank no rows */
	LOCUS_EP_CTL_ABORT = 2, /* the sender failed the batch: fail it too */
};

/* A control row (little-endian, as every locus wire format). */
struct locus_ep_ctl {
	uint32_t magic;     /* LOCUS_EP_CTL_MAGIC */
	uint16_t kind;      /* enum locus_ep_ctl_kind */
	uint16_t n_ranks;   /* the sender's group size */
	uint32_t src_rank;
	int32_t  code;      /* ABORT: -errno or -LOCUS_E*; EMPTY: 0 */
	uint64_t batch;
	uint32_t n_tokens;  /* EMPTY: tokens the sender dispatched */
	uint32_t reserved;  /* 0 */
	char reason[LOCUS_EP_REASON]; /* ABORT: a sentence, NUL-terminated */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_ep_ctl) == LOCUS_EP_CTL_ROW, "control row");

/* The batch id a control row of kind for batch travels under. */
static inline uint64_t locus_ep_ctl_id(uint32_t kind, uint64_t batch)
{
	return LOCUS_EP_CTL_TAG | (uint64_t)(kind & 0x7f) << 56 | (batch & LOCUS_EP_BATCH_MAX);
}

/* Whether a COMBINE / RESULTS_IN batch id carries a control row. */
static inline int locus_ep_ctl_is(uint64_t id)
{
	return (id >> 62) == 2;
}

/* Fill a control row (reason may be NULL; it is cut to fit). */
void locus_ep_ctl_build(struct locus_ep_ctl *c, uint32_t kind, uint32_t src_rank,
			uint32_t n_ranks, uint64_t batch, int32_t code, uint32_t n_tokens,
			const char *reason);

/*
 * Check a control row that came in a RESULTS_IN: id the message's batch id,
 * src the rank the message header names, row its row_bytes bytes (a copy:
 * the checked row is the one used). Magic, size, kind, the id's kind and
 * batch match the row's, the sender is src and in a group of n_ranks, an
 * ABORT's code negative and known as an errno or LOCUS_E*, an EMPTY's code
 * 0, the reason NUL-terminated and printable. 0 or -LOCUS_EPROTO with err.
 */
int locus_ep_ctl_check(const struct locus_ep_ctl *c, uint32_t row_bytes, uint64_t id,
		       uint32_t src, uint32_t n_ranks, struct locus_error *err);

/* A received row, for the ordering: its source, token and where it is. */
struct locus_ep_row {
	uint32_t src, token;
	uint32_t msg, j;    /* message index, row in it */
};

/* Sort rows by (source rank, token): the order dispatch hands them over in. */
void locus_ep_rows_sort(struct locus_ep_row *rows, size_t n);

/* ------------------------------------------------------------------ */

struct locus_ep_params {
	uint32_t rank;
	uint32_t n_ranks;          /* 1..LOCUS_EP_MAX_RANKS */
	uint64_t x_off, x_len;     /* stage: the token rows a dispatch sends (64-aligned) */
	uint64_t y_off, y_len;     /* stage: the expert outputs a combine sends (64-aligned) */
	uint64_t req_off, req_len; /* stage: the requests and control rows (64-aligned) */
	uint32_t max_tokens;       /* the receive bound: tokens per rank per batch (0: 1 << 24) */
	uint32_t timeout_ms;       /* a collective's bound when its call gives none (0: 30000) */
};

struct locus_ep;
struct locus_ep_handle;

/*
 * A group handle for client c (attached as rank p->rank). The stage ranges
 * are the group's alone from now on. 0, or -EINVAL / -LOCUS_ERANGE (ranges
 * outside the stage, overlapping, too small for the control rows) /
 * -ENOMEM, with err.
 */
int locus_ep_create(struct locus_client *c, const struct locus_ep_params *p,
		    struct locus_ep **out, struct locus_error *err);

/*
 * Frees the group; inbox slots held go back. Handles still live stay
 * valid for locus_ep_handle_info and locus_ep_handle_free only.
 */
void locus_ep_destroy(struct locus_ep *ep);

struct locus_ep_dispatch_args {
	uint16_t layer;
	uint16_t top_k;              /* 1..LOCUS_MAX_TOPK */
	uint32_t n_tokens;           /* 0..max_tokens: a rank with none still takes part */
	uint32_t row_bytes;          /* 1..LOCUS_MAX_ROW_BYTES */
	uint32_t n_experts;          /* the GRACE table's E: ids below it */
	const void *x;               /* [n_tokens][row_bytes]: copied into the stage unless
				      * it is at x_off there already */
	const int64_t *topk_idx;     /* [n_tokens][top_k]: -1 or 0xffff select nothing */
	const float *topk_weights;   /* [n_tokens][top_k], finite */
	uint32_t timeout_ms;         /* 0: the group's */
};

/*
 * Begin the next batch's dispatch: the batch id (1, 2, ...) every rank
 * gives its n-th dispatch, or a refusal with nothing sent and no batch
 * taken: -EINVAL / -LOCUS_ERANGE / -LOCUS_ENAN (an argument), -EBUSY (a
 * dispatch runs). A batch another rank aborted already fails here (its id
 * taken), as locus_ep_dispatch_poll would.
 */
int64_t locus_ep_dispatch_begin(struct locus_ep *ep, const struct locus_ep_dispatch_args *a,
				struct locus_error *err);

/*
 * This rank cannot take part in the next batch (its dispatch arguments
 * were refused, say): the next batch id is taken and failed here and on
 * every other live rank (an ABORT with code and reason), so none waits out
 * its time-out for this rank's rows. The batch id, or -EINVAL (code not
 * negative), -EBUSY (a dispatch runs).
 */
int64_t locus_ep_dispatch_refuse(struct locus_ep *ep, int code, const char *reason);

/* What a dispatch received, known before a row is copied. */
struct locus_ep_recv {
	uint64_t batch;
	uint32_t n_recv;      /* rows, each one of a source's tokens */
	uint16_t top_k;       /* the group's (every rank dispatched this top-k) */
	uint16_t layer;
	uint32_t row_bytes;
	uint32_t n_masked;    /* our (token, slot) pairs sent nowhere */
	uint64_t dests;       /* bit r: rank r was sent our rows */
	uint32_t rows_sent;   /* rows our tokens made */
	uint32_t reserved;
};

/*
 * One pump of the client's ring for the running dispatch: 1 when every
 * live rank's rows are in (recv filled), 0 while not, or the batch's
 * failure (its code; err says which rank failed it and why). A failure
 * here, or a time-out, is sent to every rank of the group.
 */
int locus_ep_dispatch_poll(struct locus_ep *ep, struct locus_ep_recv *recv,
			   struct locus_error *err);

/* locus_ep_dispatch_poll until it is not 0, napping when idle (no spinning). */
int locus_ep_dispatch_wait(struct locus_ep *ep, struct locus_ep_recv *recv,
			   struct locus_error *err);

/* Where dispatch_end copies what was received (any pointer but recv_x may be NULL). */
struct locus_ep_recv_out {
	void *recv_x;                /* [n_recv][row_bytes] */
	int64_t *recv_idx;           /* [n_recv][top_k]: the ids we serve, -1 elsewhere */
	float *recv_weights;         /* [n_recv][top_k]: their gates, 0 elsewhere */
	uint32_t *per_expert;        /* [n_experts]: rows received per expert */
	uint32_t n_experts;
	uint32_t reserved;           /* 0 */
	struct locus_row_ref *refs;  /* [n_recv]: the handle's refs */
	uint32_t *src_count;         /* [n_ranks]: rows from each rank (they come in rank order) */
};

/*
 * Copy the received rows out (ordered by source rank, then token), hand
 * the inbox slots back and return the batch's handle (for combine; free
 * it with locus_ep_handle_free). 0, -EINVAL (no dispatch ready), -ENOMEM.
 */
int locus_ep_dispatch_end(struct locus_ep *ep, const struct locus_ep_recv_out *out,
			  struct locus_ep_handle **h, struct locus_error *err);

/* What a handle says: where every received row came from, what was masked. */
struct locus_ep_handle_info {
	uint64_t batch;
	uint16_t layer, top_k;
	uint32_t n_tokens;          /* ours dispatched */
	uint32_t n_recv;
	uint32_t rows_sent;
	uint64_t dests;
	uint64_t lost;              /* ranks lost (or gone) while they held our rows */
	uint32_t n_masked;          /* pairs in masked[] */
	uint32_t combined;          /* 1 once its combine ended well */
	const struct locus_row_ref *refs; /* [n_recv]: (token, slots) at its source */
	const uint32_t *src_start;  /* [n_ranks]: rank r's rows are [start, start + count) */
	const uint32_t *src_count;
	const uint8_t *masked;      /* [n_tokens][top_k]: sent nowhere, or never answered */
};

void locus_ep_handle_info(const struct locus_ep_handle *h, struct locus_ep_handle_info *out);

/* Drops a handle (its combine, if running, fails first). NULL is a no-op. */
void locus_ep_handle_free(struct locus_ep_handle *h);

enum locus_ep_dtype {
	LOCUS_EP_F32 = 1,
	LOCUS_EP_F16 = 2,
	LOCUS_EP_BF16 = 3,
	LOCUS_EP_F64 = 4,
};

struct locus_ep_combine_args {
	uint32_t dtype;             /* enum locus_ep_dtype */
	uint32_t hidden;            /* elements per row */
	const void *y;              /* [n_recv][hidden]: row i answers received row i; copied
				     * into the stage unless it is at y_off there already */
	void *out;                  /* [n_tokens][hidden] of dtype: the sums */
	uint32_t timeout_ms;        /* 0: the group's */
};

/*
 * Begin the combine of h's batch: y's rows go back to their sources. 0, or
 * the batch's failure (sent to every rank): -LOCUS_ERANGE (y does not fit
 * the stage's y range), -EINVAL, -EALREADY (combined already), or the
 * abort another rank sent.
 */
int locus_ep_combine_begin(struct locus_ep *ep, struct locus_ep_handle *h,
			   const struct locus_ep_combine_args *a, struct locus_error *err);

/*
 * One pump for the running combine: 1 once out holds every token's sum
 * (pairs a lost rank never answered are added to the handle's masked), 0
 * while not, or the batch's failure.
 */
int locus_ep_combine_poll(struct locus_ep *ep, struct locus_error *err);
int locus_ep_combine_wait(struct locus_ep *ep, struct locus_error *err);

/* combine_begin, then combine_wait. */
int locus_ep_combine(struct locus_ep *ep, struct locus_ep_handle *h,
		     const struct locus_ep_combine_args *a, struct locus_error *err);

/*
 * Fail batch here and on every other live rank with code (negative) and
 * reason: a dispatch or combine of it running here fails; once per batch.
 * 0, -EINVAL.
 */
int locus_ep_abort(struct locus_ep *ep, uint64_t batch, int code, const char *reason);

/*
 * A descriptor polled from the client elsewhere: 1 when it was the
 * group's (taken), 0 when not (the caller handles it).
 */
int locus_ep_take(struct locus_ep *ep, const struct locus_desc *d);

/* Up to max descriptors the group polled that were not its own, oldest first. */
uint32_t locus_ep_others(struct locus_ep *ep, struct locus_desc *out, uint32_t max);

struct locus_ep_status {
	uint64_t next_batch;        /* the id the next dispatch takes */
	uint64_t fail_batch;        /* the last batch that failed here (0 none) */
	int32_t fail_code;
	uint32_t fail_rank;         /* the rank whose failure it was (ours: a local one) */
	uint32_t in_flight;         /* requests without their final completion */
	uint32_t kept;              /* messages kept for later batches */
	uint64_t held_bytes;        /* inbox bytes those hold */
	uint64_t aborts_sent, aborts_in, ctl_refused;
	uint32_t formed;            /* every rank was live at once: lost ranks are masked */
	uint32_t others;            /* descriptors waiting for locus_ep_others */
};

void locus_ep_status(const struct locus_ep *ep, struct locus_ep_status *st);

/* The ranks of the group locusd can reach now (bit r), per locus_client_ranks. */
uint64_t locus_ep_active(struct locus_ep *ep);

/*
 * One pump of the ring with no collective to wait for: completions of
 * requests a failed batch left in flight settle, control rows are read.
 * The descriptors polled, or -ENOTCONN.
 */
int locus_ep_pump(struct locus_ep *ep);

/*
 * Set the receive bound (locus_ep_params.max_tokens; 0: 1 << 24) from the
 * next dispatch on: the low-latency mode's tokens per rank per batch. Every
 * rank of the group sets the same bound before the same batch (a rank
 * refuses rows beyond its own bound, failing that batch on every rank).
 * 0, -EINVAL (above 1 << 24), -EBUSY (a dispatch runs).
 */
int locus_ep_set_max_tokens(struct locus_ep *ep, uint32_t max_tokens);

/* bindings (tools/python/locus/_lib.py) mirror these layouts */
LOCUS_STATIC_ASSERT(sizeof(struct locus_ep_params) == 64, "ep params");
LOCUS_STATIC_ASSERT(sizeof(struct locus_ep_dispatch_args) == 48, "ep dispatch args");
LOCUS_STATIC_ASSERT(sizeof(struct locus_ep_recv) == 40, "ep recv");
LOCUS_STATIC_ASSERT(sizeof(struct locus_ep_recv_out) == 56, "ep recv out");
LOCUS_STATIC_ASSERT(sizeof(struct locus_ep_handle_info) == 80, "ep handle info");
LOCUS_STATIC_ASSERT(sizeof(struct locus_ep_combine_args) == 32, "ep combine args");
LOCUS_STATIC_ASSERT(sizeof(struct locus_ep_status) == 72, "ep status");

#endif /* LOCUS_EP_H */
