/* SPDX-License-Identifier: MIT */
/*
 * The EP group's state (locus_ep.h), shared by ep*.c; not installed.
 * Requests have a fixed place each: req[0] the DISPATCH, then per peer r
 * its EMPTY control row, its COMBINE of results and its ABORT. A request
 * in flight keeps its place (locusd may still read its stage range) until
 * its completion, even when the batch it served failed (abandoned).
 */
#ifndef EP_PRIV_H
#define EP_PRIV_H

#include <stdint.h>

#include "clock_priv.h"
#include "locus_ep.h"

enum ep_req_state { R_FREE, R_FLIGHT, R_AGAIN, R_DONE };
enum ep_role { ROLE_DISPATCH, ROLE_EMPTY, ROLE_COMBINE, ROLE_ABORT };
enum ep_op_state { OP_IDLE, OP_RUN, OP_READY, OP_FAILED };

#define EP_RETRY_NS   50000ull    /* before a request a full inbox refused goes again */
#define EP_SPILL_NS   2000000ull  /* idle this long holding inbox slots: copy them out */
#define EP_ABORT_NS   1000000000ull /* an ABORT goes again (inbox full) for at most this */
#define EP_KEEP_CTL   32u         /* control rows kept for batches not begun */
#define EP_NAP_NS     20000ull
#define EP_YIELD_NS   50000ull    /* after a delivery, yield (not sleep) this long */

struct ep_req {
	uint8_t state;             /* enum ep_req_state */
	uint8_t role;
	uint8_t abandoned;         /* its batch failed: freed at its completion */
	uint32_t peer;
	int32_t status;            /* final */
	int32_t last;              /* the refusal that made it go again */
	uint64_t not_before;
	uint64_t give_up;          /* ABORT: past this, not sent again */
	struct locus_desc desc;    /* as submitted (DISPATCH: written again) */
	uint64_t dests;            /* DISPATCH done: the completion's */
	uint64_t aux;
	uint32_t blocks;
};

struct ep_msg {                /* a ROWS_IN / RESULTS_IN kept for its batch */
	uint8_t op;
	uint8_t held;              /* still in the inbox: slot to release */
	uint8_t by_token;          /* our own rows in place: token t at rows + t * row_bytes */
	uint16_t src, top_k, chunk, n_chunks;
	uint32_t slot, n_rows, row_bytes;
	uint64_t span;             /* inbox bytes held */
	uint64_t batch;
	const struct locus_row_ref *refs;
	const uint16_t *experts;
	const float *gates;
	const uint8_t *rows;
	void *copy;                /* what was copied out of the inbox */
};

struct ep_ctl_rec {            /* control rows for a batch not begun here */
	uint64_t batch;
	uint64_t empty;            /* ranks that said none come */
	int32_t code;              /* an ABORT's, 0 none */
	uint32_t rank;
	char reason[LOCUS_EP_REASON];
};

struct locus_ep_handle {
	struct locus_ep *ep;       /* NULL once the group is gone */
	struct locus_ep_handle *next, *prev;
	struct locus_ep_handle_info i;
	struct locus_row_ref *refs;
	uint32_t *src_start, *src_count;
	uint8_t *masked;
	uint8_t *none;             /* [n_tokens][top_k]: no selection */
	uint64_t gone;             /* ranks that left before our rows reached them */
	int32_t fail_code;         /* refused or aborted before its combine */
	uint32_t fail_rank;
	char fail_msg[LOCUS_ERRMSG_MAX];
};

struct ep_disp {
	int state;                 /* enum ep_op_state */
	uint64_t batch, deadline;
	uint32_t timeout_ms;
	uint16_t layer, top_k;
	uint32_t n_tokens, n_send, row_bytes, n_experts;
	uint16_t *ids;             /* [n_tokens][top_k] as sent */
	float *gates;
	uint8_t *none;             /* [n_tokens][top_k]: no selection */
	uint32_t cap;              /* pairs the three hold */
	int sent_empty;
	uint64_t dests, empty_from, gone;
	uint32_t rows_sent, n_masked;
	uint16_t recv_top_k;
	uint32_t n_chunks[LOCUS_EP_MAX_RANKS], chunks[LOCUS_EP_MAX_RANKS];
	uint32_t rows[LOCUS_EP_MAX_RANKS];
	uint32_t n_recv;
	int seen_done;             /* the DISPATCH completion was read */
	int32_t fail_code;         /* a failure reported once by poll */
	int32_t late_code;         /* refused or aborted after every row was in: for the handle */
	uint32_t late_rank;
	char late_msg[LOCUS_ERRMSG_MAX];
};

struct ep_comb {
	int state;
	struct locus_ep_handle *h;
	uint64_t deadline;
	uint32_t timeout_ms;
	uint32_t dtype, hidden, esize, row_bytes;
	void *out;
	void *acc;                 /* [n_tokens][hidden] float (double for F64) */
	size_t acc_cap;
	uint32_t *answered;        /* [n_tokens]: slots answered */
	size_t ans_cap;
	uint32_t got_rows;
	uint32_t pos[LOCUS_EP_MAX_RANKS]; /* source r's rows at y_off + pos[r] */
	int32_t fail_code;
	uint32_t n_chunks[LOCUS_EP_MAX_RANKS], chunks[LOCUS_EP_MAX_RANKS];
};

struct locus_ep {
	struct locus_client *c;
	struct locus_ep_params p;
	uint8_t *stage;
	uint64_t stage_size, inbox_bytes;
	uint64_t next_batch;
	uint64_t lost, lost_seq;
	int formed;
	struct ep_req *req;        /* [1 + 3 n_ranks] */
	uint32_t n_req;
	uint64_t ctl_off, disp_off, disp_len, comb_off, comb_len;
	struct ep_msg *msgs;
	uint32_t n_msgs, cap_msgs;
	uint64_t held_bytes, last_in_ns, last_progress_ns;
	uint64_t polled;           /* descriptors polled, ever */
	struct locus_desc *others;
	uint32_t n_others, cap_others;
	struct ep_ctl_rec keep[EP_KEEP_CTL];
	uint64_t abort_sent_batch;
	struct locus_ep_handle *handles;
	struct ep_disp d;
	struct ep_comb cb;
	struct locus_ep_status st;
	char fail_msg[LOCUS_ERRMSG_MAX]; /* the last failure's sentence */
	struct locus_desc poll[32];
};

int ep_lost(const struct locus_ep *ep, uint32_t r);
void ep_refresh(struct locus_ep *ep);
int ep_pump(struct locus_ep *ep);
void ep_idle(struct locus_ep *ep);
struct ep_req *ep_req_of(struct locus_ep *ep, uint32_t role, uint32_t peer);
int ep_req_submit(struct locus_ep *ep, struct ep_req *r);
void ep_req_abandon(struct ep_req *r);
void ep_msg_release(struct locus_ep *ep, uint32_t i);
void ep_msgs_drop(struct locus_ep *ep, uint8_t op, uint64_t batch);
void ep_spill(struct locus_ep *ep);
struct ep_ctl_rec *ep_keep_rec(struct locus_ep *ep, uint64_t batch, int make);
int ep_send_empty(struct locus_ep *ep, uint32_t r, uint64_t batch, uint32_t n_tokens);
void ep_send_aborts(struct locus_ep *ep, uint64_t batch, int code, const char *reason);
int ep_fail(struct locus_ep *ep, int *state, uint64_t batch, int code, uint32_t rank,
	    struct locus_error *err, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
void ep_wait_text(struct locus_ep *ep, int role_lo, char *buf, size_t len);

/* ep_dispatch.c / ep_combine.c: what the pump hands them */
int ep_dispatch_write(struct locus_ep *ep);
void ep_dispatch_rows(struct locus_ep *ep, const struct locus_desc *d,
		      const struct locus_client_rows *m);
void ep_dispatch_refused(struct locus_ep *ep, uint64_t batch, uint32_t src, int code,
			 const char *msg);
void ep_combine_rows(struct locus_ep *ep, const struct locus_desc *d,
		     const struct locus_client_rows *m);
void ep_combine_refused(struct locus_ep *ep, uint64_t batch, uint32_t src, int code,
			const char *msg);
void ep_ctl_in(struct locus_ep *ep, const struct locus_ep_ctl *c);
int ep_keep_msg(struct locus_ep *ep, const struct locus_desc *d,
		const struct locus_client_rows *m);

#endif /* EP_PRIV_H */
