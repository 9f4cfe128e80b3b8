/* SPDX-License-Identifier: MIT */
/*
 * An etcd v3 client over etcd's own JSON gateway (POST /v3/kv/range, put,
 * deleterange, txn; /v3/lease/grant, keepalive, revoke; /v3/watch), on
 * libcurl and jansson: no wire protocol of our own. Keys are text, values
 * bytes (both base64 on the wire, as the gateway wants them).
 *
 * Every call is a request that completes through locus_etcd_poll(), which
 * never blocks: locusd's main lcore keeps its lease and watch this way
 * without waiting on the network. locus_etcd_call() runs one request to
 * completion for tools and tests. A request that cannot reach an endpoint
 * fails with -ENOTCONN or -ETIMEDOUT and moves the client to the next
 * endpoint; the caller decides whether to try again.
 *
 * One client belongs to one thread. Everything a callback receives is valid
 * during the callback only.
 */
#ifndef LOCUS_ETCD_H
#define LOCUS_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

#define LOCUS_ETCD_MAX_ENDPOINTS 8
#define LOCUS_ETCD_KEY_MAX       512   /* bytes of a key */
#define LOCUS_ETCD_VALUE_MAX     (64u << 20) /* a response larger than this is refused */

struct locus_etcd_params {
	const char *endpoints;  /* "http://host:port,https://host:port,...", 1..8 */
	const char *cacert;     /* PEM CA bundle for https endpoints; NULL: the system's */
	const char *cert;       /* client certificate (PEM) and its key: both or neither */
	const char *key;
	uint32_t timeout_ms;    /* bound of one request, connection included; 0: 2000 */
};

struct locus_etcd_kv {
	const char *key;        /* NUL-terminated */
	const uint8_t *value;   /* value_len bytes, followed by a NUL */
	size_t value_len;
	int64_t create_rev, mod_rev, version, lease;
};

/* What a finished request says. */
struct locus_etcd_resp {
	int status;                    /* 0, or a negative code (err says what) */
	struct locus_error err;
	int64_t revision;              /* the store's revision when it answered */
	bool succeeded;                /* txn: the compares held */
	const struct locus_etcd_kv *kvs; /* range results (a txn's, in order), deleted or previous kvs */
	size_t n_kvs;
	int64_t deleted;               /* deleterange: keys deleted */
	int64_t lease_id, ttl;         /* lease grant and keepalive; ttl 0: the lease is gone */
};

/* One compare of a transaction. */
enum locus_etcd_target {
	LOCUS_ETCD_CREATE_REV,  /* rev: 0 means the key does not exist */
	LOCUS_ETCD_MOD_REV,
	LOCUS_ETCD_VERSION,
	LOCUS_ETCD_VALUE,
};
enum locus_etcd_result { LOCUS_ETCD_EQ, LOCUS_ETCD_NE, LOCUS_ETCD_LT, LOCUS_ETCD_GT };

struct locus_etcd_cmp {
	const char *key;
	enum locus_etcd_target target;
	enum locus_etcd_result result;
	int64_t rev;             /* CREATE_REV, MOD_REV, VERSION */
	const void *value;       /* VALUE */
	size_t len;
	bool prefix;             /* the compare holds for every key starting with key
				  * (none there: it holds too) */
};

/* One operation: a request of its own, or one of a transaction's branches. */
enum locus_etcd_optype { LOCUS_ETCD_GET, LOCUS_ETCD_PUT, LOCUS_ETCD_DELETE };

struct locus_etcd_op {
	enum locus_etcd_optype type;
	const char *key;
	bool prefix;             /* GET, DELETE: every key starting with key */
	const void *value;       /* PUT */
	size_t len;
	int64_t lease;           /* PUT: 0 none */
	bool prev_kv;            /* PUT, DELETE: return what was there */
};

struct locus_etcd_txn {
	const struct locus_etcd_cmp *cmp;
	size_t n_cmp;
	const struct locus_etcd_op *success, *failure;
	size_t n_success, n_failure;
};

struct locus_etcd;
struct locus_etcd_req;

typedef void (*locus_etcd_done_fn)(void *arg, const struct locus_etcd_resp *r);

/*
 * A client for the endpoints of p (strings are copied). Checks the URLs and
 * that the TLS files are readable; connects nothing yet. 0 or -errno /
 * -LOCUS_EPARSE with err saying what is wrong.
 */
int locus_etcd_open(const struct locus_etcd_params *p, struct locus_etcd **out,
		    struct locus_error *err);

/* Cancel what is in flight (no callback runs) and free. NULL is a no-op. */
void locus_etcd_close(struct locus_etcd *e);

/* The endpoint the next request goes to. */
const char *locus_etcd_endpoint(const struct locus_etcd *e);

/*
 * Start a request; done(arg, resp) runs from locus_etcd_poll() once it
 * finished (exactly once, unless the client is closed first). A NULL done
 * discards the answer. Returns 0, or a negative code if the request could
 * not be made (a key too long, out of memory); then done never runs.
 */
int locus_etcd_op(struct locus_etcd *e, const struct locus_etcd_op *op, locus_etcd_done_fn done,
		  void *arg, struct locus_error *err);
int locus_etcd_txn(struct locus_etcd *e, const struct locus_etcd_txn *t, locus_etcd_done_fn done,
		   void *arg, struct locus_error *err);
int locus_etcd_lease_grant(struct locus_etcd *e, int64_t ttl_s, locus_etcd_done_fn done,
			   void *arg, struct locus_error *err);
int locus_etcd_lease_keepalive(struct locus_etcd *e, int64_t id, locus_etcd_done_fn done,
			       void *arg, struct locus_error *err);
int locus_etcd_lease_revoke(struct locus_etcd *e, int64_t id, locus_etcd_done_fn done,
			    void *arg, struct locus_error *err);

/*
 * Move every request and watch forward without blocking; runs the callbacks
 * of what finished. Returns the number of requests and watches still open.
 */
int locus_etcd_poll(struct locus_etcd *e);

/* Wait up to timeout_ms for network activity of any open request (poll(2)). */
void locus_etcd_wait(struct locus_etcd *e, int timeout_ms);

/*
 * The blocking forms: the request run to completion, its answer in *out
 * (free with locus_etcd_resp_free). Return out->status.
 */
int locus_etcd_call_op(struct locus_etcd *e, const struct locus_etcd_op *op,
		       struct locus_etcd_resp *out);
int locus_etcd_call_txn(struct locus_etcd *e, const struct locus_etcd_txn *t,
			struct locus_etcd_resp *out);
int locus_etcd_call_lease(struct locus_etcd *e, int what, int64_t arg, struct locus_etcd_resp *out);
enum { LOCUS_ETCD_LEASE_GRANT, LOCUS_ETCD_LEASE_KEEPALIVE, LOCUS_ETCD_LEASE_REVOKE };
void locus_etcd_resp_free(struct locus_etcd_resp *r);

/* A watch on a key or a prefix, from a revision on. */
struct locus_etcd_watch;

enum locus_etcd_evtype { LOCUS_ETCD_EV_PUT, LOCUS_ETCD_EV_DELETE };

struct locus_etcd_event {
	enum locus_etcd_evtype type;
	struct locus_etcd_kv kv;       /* DELETE: key and mod_rev only */
};

/*
 * events(arg, revision, ev, n): a batch of changes in revision order.
 * end(arg, status, compact_rev): the watch is over and freed: -ENOTCONN or
 * -ETIMEDOUT (the stream broke: watch again from the last revision + 1),
 * -LOCUS_ERANGE when start_rev was compacted away (compact_rev: the oldest
 * revision left; read the keys again, then watch from that read's
 * revision + 1), or another negative code. Never runs after a cancel.
 */
typedef void (*locus_etcd_events_fn)(void *arg, int64_t revision,
				     const struct locus_etcd_event *ev, size_t n);
typedef void (*locus_etcd_end_fn)(void *arg, int status, int64_t compact_rev,
				  const struct locus_error *why);

/*
 * Watch key (every key under it with prefix) from start_rev (0: from now).
 * The connection sends TCP keepalives, so an endpoint that vanished without
 * closing it ends the watch within a few seconds (-ETIMEDOUT).
 */
int locus_etcd_watch(struct locus_etcd *e, const char *key, bool prefix, int64_t start_rev,
		     locus_etcd_events_fn events, locus_etcd_end_fn end, void *arg,
		     struct locus_etcd_watch **out, struct locus_error *err);

/* Stop a watch: no callback of it runs again. NULL is a no-op. */
void locus_etcd_watch_cancel(struct locus_etcd_watch *w);

/* The last revision the watch reported (events or progress). */
int64_t locus_etcd_watch_revision(const struct locus_etcd_watch *w);

#endif /* LOCUS_ETCD_H */
