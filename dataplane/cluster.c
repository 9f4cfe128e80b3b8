// SPDX-License-Identifier: MIT
/*
 * The membership agent (locus_cluster.h). One request of each kind in
 * flight at a time: the lease (grant or keepalive), the claim of the id,
 * the read of every record (at start and after a compaction), the watch.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locus_cluster.h"
#include "locus_err_priv.h"
#include "locus_etcd.h"
#include "cluster_priv.h"


const char *locus_cluster_state_name(int state)
{
	switch (state) {
	case LOCUS_CLUSTER_JOINING: return "joining";
	case LOCUS_CLUSTER_MEMBER: return "member";
	case LOCUS_CLUSTER_REFUSED: return "refused (node id in use)";
	case LOCUS_CLUSTER_UNREACHABLE: return "etcd unreachable";
	default: return "?";
	}
}

void set_state(struct locus_cluster *c, enum locus_cluster_state s,
		      const struct locus_error *why)
{
	if (c->state == s)
		return;
	c->state = s;
	if (c->ops.state)
		c->ops.state(c->arg, s, why);
}

/* A failed request: etcd unreachable (or refusing) for now; try again later. */
static void failed(struct locus_cluster *c, const struct locus_etcd_resp *r)
{
	c->st.etcd_errors++;
	c->retry_ms = c->retry_ms ? c->retry_ms * 2 : RETRY_MIN_MS;
	if (c->retry_ms > RETRY_MAX_MS)
		c->retry_ms = RETRY_MAX_MS;
	c->retry_at_ms = c->now_ms + c->retry_ms;
	/* down, or refusing us (TLS, permissions): the reason goes with the state */
	set_state(c, LOCUS_CLUSTER_UNREACHABLE, &r->err);
}

/* ---- members ---- */

static struct member *find(struct locus_cluster *c, uint32_t node, uint32_t *pos)
{
	uint32_t lo = 0, hi = c->n_m;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (c->m[mid].r.node < node)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (pos)
		*pos = lo;
	return lo < c->n_m && c->m[lo].r.node == node ? &c->m[lo] : NULL;
}

static void member_up(struct locus_cluster *c, const struct locus_node_record *r)
{
	uint32_t pos;
	struct member *m = find(c, r->node, &pos);

	if (m && !memcmp(&m->r, r, sizeof(*r))) {
		m->live = 1;
		return; /* the same record again */
	}
	if (!m) {
		if (c->n_m == c->cap_m) {
			uint32_t cap = c->cap_m ? 2 * c->cap_m : 16;
			struct member *nm = realloc(c->m, cap * sizeof(*nm));

			if (!nm)
				return; /* kept out until the next resync */
			c->m = nm;
			c->cap_m = cap;
		}
		memmove(&c->m[pos + 1], &c->m[pos], (c->n_m - pos) * sizeof(*c->m));
		c->n_m++;
		m = &c->m[pos];
	}
	m->r = *r;
	m->live = 1;
	c->st.records_up++;
	if (c->ops.node_up)
		c->ops.node_up(c->arg, r);
}

static void member_gone(struct locus_cluster *c, uint32_t node)
{
	uint32_t pos;

	if (!find(c, node, &pos))
		return;
	memmove(&c->m[pos], &c->m[pos + 1], (c->n_m - pos - 1) * sizeof(*c->m));
	c->n_m--;
	c->st.records_gone++;
	if (c->ops.node_gone)
		c->ops.node_gone(c->arg, node);
}

/* The node id a key under our prefix names; -1 for anything else. */
static int64_t key_node(const struct locus_cluster *c, const char *key)
{
	size_t n = strlen(c->prefix);
	const char *s = key + n;
	uint64_t v = 0;

	if (strncmp(key, c->prefix, n) || !*s || (*s == '0' && s[1]))
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > UINT32_MAX / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	return v > UINT32_MAX ? -1 : (int64_t)v;
}

/* A record read or watched: up, refused, or about ourselves. */
static void apply_put(struct locus_cluster *c, const struct locus_etcd_kv *kv)
{
	struct locus_node_record r;
	struct locus_error err = { 0 };
	int64_t node = key_node(c, kv->key);

	if (node < 0)
		return;
	if ((uint32_t)node == c->self.node) {
		/* someone else's lease on our id: we lost it (a lapse); claim again */
		if (c->claimed && kv->lease != c->lease) {
			c->claimed = 0;
			c->st.lease_lost++;
			set_state(c, LOCUS_CLUSTER_JOINING, NULL);
		}
		return;
	}
	if (locus_node_record_parse(kv->value, kv->value_len, (uint32_t)node, c->self.cluster, &r,
				    &err) < 0) {
		c->st.records_bad++;
		if (c->ops.record_bad)
			c->ops.record_bad(c->arg, (uint32_t)node, &err);
		return; /* the last good record stays */
	}
	member_up(c, &r);
}

static void apply_delete(struct locus_cluster *c, const char *key)
{
	int64_t node = key_node(c, key);

	if (node < 0)
		return;
	if ((uint32_t)node == c->self.node) {
		if (c->claimed && !c->leaving) { /* our record went: put it back */
			c->claimed = 0;
			c->st.lease_lost++;
			set_state(c, LOCUS_CLUSTER_JOINING, NULL);
		}
		return;
	}
	member_gone(c, (uint32_t)node);
}

/* ---- the lease ---- */

static void lease_file_write(struct locus_cluster *c)
{
	char tmp[4200], text[64];
	int fd, n;

	if (!c->lease_file)
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", c->lease_file);
	n = snprintf(text, sizeof(text), "%" PRId64 "\n", c->lease);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, text, (size_t)n) == n && !fsync(fd))
		rename(tmp, c->lease_file);
	close(fd);
	unlink(tmp);
}

static int64_t lease_file_read(const char *path)
{
	char text[64] = { 0 };
	long long v;
	int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0 || sscanf(text, "%lld", &v) != 1 || v <= 0)
		return 0;
	return v;
}

static void on_grant(void *arg, const struct locus_etcd_resp *r)
{
	struct locus_cluster *c = arg;

	c->lease_busy = 0;
	if (r->status < 0 || !r->lease_id) {
		failed(c, r);
		return;
	}
	c->lease = r->lease_id;
	c->lease_checked = 1;
	c->next_keepalive_ms = c->now_ms + c->ttl_s * 1000 / 3;
	c->retry_ms = 0;
	c->retry_at_ms = c->now_ms;
	lease_file_write(c);
}

static void on_keepalive(void *arg, const struct locus_etcd_resp *r)
{
	struct locus_cluster *c = arg;

	c->lease_busy = 0;
	if (r->status < 0) {
		failed(c, r);
		c->next_keepalive_ms = c->retry_at_ms;
		return;
	}
	c->retry_ms = 0;
	if (r->ttl <= 0) {
		/* the lease is gone: whatever it held (our record) went with it */
		if (c->claimed)
			c->st.lease_lost++;
		c->lease = 0;
		c->claimed = 0;
		set_state(c, LOCUS_CLUSTER_JOINING, NULL);
		c->retry_at_ms = c->now_ms;
		return;
	}
	c->lease_checked = 1;
	c->next_keepalive_ms = c->now_ms + c->ttl_s * 1000 / 3;
	if (c->claimed)
		set_state(c, LOCUS_CLUSTER_MEMBER, NULL);
}

/* ---- the claim ---- */

static void claim(struct locus_cluster *c);

static void on_claim(void *arg, const struct locus_etcd_resp *r)
{
	struct locus_cluster *c = arg;

	c->claim_busy = 0;
	if (r->status < 0) {
		failed(c, r);
		return;
	}
	c->retry_ms = 0;
	if (r->succeeded) {
		c->claimed = 1;
		c->st.joins++;
		cluster_tables_rejoined(c);
		cluster_prepare_rejoined(c);
		set_state(c, LOCUS_CLUSTER_MEMBER, NULL);
		return;
	}
	if (r->n_kvs && r->kvs[0].lease && r->kvs[0].lease == c->lease) {
		/* ours from before a restart: write it again under the same lease */
		c->claim_rev = r->kvs[0].mod_rev;
		c->retry_at_ms = c->now_ms;
		return;
	}
	{
		struct locus_error why = { 0 };
		struct locus_node_record holder;
		char who[128] = "another node";

		if (r->n_kvs && !locus_node_record_parse(r->kvs[0].value, r->kvs[0].value_len,
							 c->self.node, c->self.cluster, &holder,
							 NULL))
			snprintf(who, sizeof(who), "host %s (boot %" PRIx64 ")", holder.host,
				 holder.boot);
		locus_error_set(&why, EEXIST, "node id %u is in use by %s under another lease: "
				"it is free once that node stops and its lease (at most %u s) "
				"lapses", c->self.node, who, c->ttl_s);
		c->st.refusals++;
		set_state(c, LOCUS_CLUSTER_REFUSED, &why);
		c->retry_at_ms = c->now_ms + RETRY_MAX_MS;
	}
}

static void claim(struct locus_cluster *c)
{
	struct locus_etcd_cmp cmp = { .key = c->key, .target = LOCUS_ETCD_CREATE_REV,
				      .result = LOCUS_ETCD_EQ, .rev = 0 };
	struct locus_etcd_op put = { .type = LOCUS_ETCD_PUT, .key = c->key, .value = c->record,
				     .len = c->record_len, .lease = c->lease };
	struct locus_etcd_op get = { .type = LOCUS_ETCD_GET, .key = c->key };
	struct locus_etcd_txn t = { &cmp, 1, &put, &get, 1, 1 };

	if (c->claim_rev) {
		/* taking back our own record: only if nobody wrote it since we read it */
		cmp.target = LOCUS_ETCD_MOD_REV;
		cmp.rev = c->claim_rev;
		c->claim_rev = 0;
	}
	c->st.etcd_requests++;
	if (locus_etcd_txn(c->e, &t, on_claim, c, NULL) == 0)
		c->claim_busy = 1;
}

/* ---- reading every record, and the watch ---- */

static void watch_start(struct locus_cluster *c);

static void on_events(void *arg, int64_t rev, const struct locus_etcd_event *ev, size_t n)
{
	struct locus_cluster *c = arg;

	for (size_t i = 0; i < n; i++) {
		if (ev[i].type == LOCUS_ETCD_EV_PUT)
			apply_put(c, &ev[i].kv);
		else
			apply_delete(c, ev[i].kv.key);
	}
	c->rev = rev;
	c->watch_retry_ms = 0;
}

static void on_watch_end(void *arg, int status, int64_t compact, const struct locus_error *why)
{
	struct locus_cluster *c = arg;

	(void)compact;
	c->w = NULL;
	c->st.watch_restarts++;
	if (status == -LOCUS_ERANGE) {
		c->synced = 0; /* compacted: read every record again */
		c->st.resyncs++;
	} else {
		struct locus_etcd_resp r = { .status = status };

		if (why)
			r.err = *why;
		failed(c, &r);
	}
	c->watch_retry_ms = c->watch_retry_ms ? c->watch_retry_ms * 2 : RETRY_MIN_MS;
	if (c->watch_retry_ms > RETRY_MAX_MS)
		c->watch_retry_ms = RETRY_MAX_MS;
	c->watch_at_ms = c->now_ms + (status == -LOCUS_ERANGE ? 0 : c->watch_retry_ms);
}

static void on_sync(void *arg, const struct locus_etcd_resp *r)
{
	struct locus_cluster *c = arg;

	c->sync_busy = 0;
	if (r->status < 0) {
		failed(c, r);
		c->watch_at_ms = c->retry_at_ms;
		return;
	}
	/* the read is the truth: members it does not hold are gone */
	for (uint32_t i = 0; i < c->n_m; i++)
		c->m[i].live = 0;
	for (size_t i = 0; i < r->n_kvs; i++)
		apply_put(c, &r->kvs[i]);
	for (uint32_t i = c->n_m; i-- > 0;)
		if (!c->m[i].live)
			member_gone(c, c->m[i].r.node);
	c->rev = r->revision;
	c->synced = 1;
	c->watch_at_ms = c->now_ms;
}

static void watch_start(struct locus_cluster *c)
{
	c->st.etcd_requests++;
	if (locus_etcd_watch(c->e, c->prefix, true, c->rev + 1, on_events, on_watch_end, c,
			     &c->w, NULL) < 0)
		c->watch_at_ms = c->now_ms + RETRY_MAX_MS;
}

static void sync_start(struct locus_cluster *c)
{
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = c->prefix, .prefix = true };

	c->st.etcd_requests++;
	if (locus_etcd_op(c->e, &op, on_sync, c, NULL) == 0)
		c->sync_busy = 1;
}

/* ---- the agent ---- */

void locus_cluster_poll(struct locus_cluster *c, uint64_t now_ms)
{
	c->now_ms = now_ms;
	locus_etcd_poll(c->e);
	if (c->leaving)
		return;
	if (!c->lease_busy && now_ms >= c->retry_at_ms) {
		if (!c->lease) {
			c->st.etcd_requests++;
			if (!locus_etcd_lease_grant(c->e, c->ttl_s, on_grant, c, NULL))
				c->lease_busy = 1;
		} else if (!c->lease_checked || now_ms >= c->next_keepalive_ms) {
			c->st.etcd_requests++;
			if (!locus_etcd_lease_keepalive(c->e, c->lease, on_keepalive, c, NULL))
				c->lease_busy = 1;
		}
	}
	if (c->lease && c->lease_checked && !c->claimed && !c->claim_busy && !c->lease_busy &&
	    now_ms >= c->retry_at_ms)
		claim(c);
	/* the others' records: read them all once, then follow the watch */
	if (c->claimed && !c->w && !c->sync_busy && now_ms >= c->watch_at_ms) {
		if (!c->synced)
			sync_start(c);
		else
			watch_start(c);
	}
	if (c->claimed && c->synced) {
		cluster_tables_poll(c);
		cluster_prepare_poll(c);
	}
	locus_etcd_poll(c->e);
}

int locus_cluster_open(const struct locus_cluster_params *p, const struct locus_cluster_ops *ops,
		       void *arg, struct locus_cluster **out, struct locus_error *err)
{
	struct locus_etcd_params ep = { .endpoints = p->endpoints, .cacert = p->cacert,
					.cert = p->cert, .key = p->key,
					.timeout_ms = p->timeout_ms };
	struct locus_cluster *c = calloc(1, sizeof(*c));
	const char *prefix = p->prefix ? p->prefix : "/locus";
	int ret;

	*out = NULL;
	if (!c)
		return locus_error_set(err, ENOMEM, "cluster: out of memory");
	if (strlen(prefix) > 200 || prefix[0] != '/') {
		ret = locus_error_set(err, LOCUS_EPARSE, "cluster: the etcd key prefix '%s' is not "
				      "an absolute key of at most 200 bytes", prefix);
		goto err_free;
	}
	c->self = p->self;
	c->self.proto = LOCUS_CLUSTER_PROTO;
	c->ttl_s = p->lease_ttl_s ? p->lease_ttl_s : 5;
	if (c->ttl_s < 2 || c->ttl_s > 3600) {
		ret = locus_error_set(err, LOCUS_ERANGE, "cluster: lease TTL %u s (2..3600)",
				      c->ttl_s);
		goto err_free;
	}
	snprintf(c->prefix, sizeof(c->prefix), "%s%s%" PRIu64 "/nodes/", prefix,
		 prefix[strlen(prefix) - 1] == '/' ? "" : "/", c->self.cluster);
	snprintf(c->key, sizeof(c->key), "%s%u", c->prefix, c->self.node);
	{
		char base[256];

		snprintf(base, sizeof(base), "%s%s%" PRIu64 "/", prefix,
			 prefix[strlen(prefix) - 1] == '/' ? "" : "/", c->self.cluster);
		cluster_tables_init(c, base);
		cluster_prepare_init(c, base);
	}
	ret = locus_node_record_format(&c->self, c->record, sizeof(c->record));
	if (ret < 0) {
		locus_error_set(err, LOCUS_ERANGE, "cluster: this node's record is too long");
		goto err_free;
	}
	c->record_len = (size_t)ret;
	if (locus_node_record_parse(c->record, c->record_len, c->self.node, c->self.cluster,
				    &c->self, err) < 0) {
		ret = -LOCUS_EPARSE;
		goto err_free; /* our own record must pass the others' check */
	}
	if (p->lease_file && !(c->lease_file = strdup(p->lease_file))) {
		ret = locus_error_set(err, ENOMEM, "cluster: out of memory");
		goto err_free;
	}
	c->lease = lease_file_read(c->lease_file); /* checked with a keepalive first */
	if (ops)
		c->ops = *ops;
	c->arg = arg;
	c->state = LOCUS_CLUSTER_JOINING;
	ret = locus_etcd_open(&ep, &c->e, err);
	if (ret < 0)
		goto err_free;
	*out = c;
	return 0;

err_free:
	free(c->lease_file);
	free(c);
	return ret;
}

void locus_cluster_close(struct locus_cluster *c)
{
	if (!c)
		return;
	c->leaving = 1;
	locus_etcd_watch_cancel(c->w);
	c->w = NULL;
	cluster_tables_close(c);
	cluster_prepare_close(c);
	if (c->lease && c->claimed) {
		struct locus_etcd_resp r;

		/* bounded by the client's request time-out */
		locus_etcd_call_lease(c->e, LOCUS_ETCD_LEASE_REVOKE, c->lease, &r);
		locus_etcd_resp_free(&r);
	}
	if (c->lease_file)
		unlink(c->lease_file);
	locus_etcd_close(c->e);
	free(c->lease_file);
	free(c->m);
	free(c);
}

enum locus_cluster_state locus_cluster_state(const struct locus_cluster *c)
{
	return c->state;
}

const struct locus_cluster_stats *locus_cluster_stats(const struct locus_cluster *c)
{
	return &c->st;
}

const struct locus_node_record *locus_cluster_node(const struct locus_cluster *c, uint32_t node)
{
	struct member *m = find((struct locus_cluster *)c, node, NULL);

	return m ? &m->r : NULL;
}

int cluster_is_member(const struct locus_cluster *c, uint32_t node)
{
	if (node == c->self.node)
		return c->claimed;
	return find((struct locus_cluster *)c, node, NULL) != NULL;
}

uint32_t locus_cluster_n_members(const struct locus_cluster *c)
{
	return c->n_m + (c->claimed ? 1 : 0);
}
