// SPDX-License-Identifier: MIT
/*
 * Placement changes in two phases (locus_cluster.h): follow
 * tables/prepare/grace, fetch the prepared blob, hand it to the owner to
 * stage, and write the owner's acknowledgement under
 * tables/acks/grace/<generation>/<node>, held by the node's lease. Follow
 * reports/grace/ too: the oldest generation any member still plans with
 * tells the ranks which weights may go.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_priv.h"
#include "locus_err_priv.h"

/* A decimal generation, 1..INT64_MAX, as the whole of (buf, len). 0 for anything else. */
static uint64_t parse_gen(const uint8_t *buf, size_t len)
{
	uint64_t g = 0;

	if (!buf || len == 0 || len > 19 || buf[0] < '1' || buf[0] > '9')
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return 0;
		g = g * 10 + (uint64_t)(buf[i] - '0');
	}
	return g;
}

/* ---- following a prefix ---- */

static void follow_events(void *arg, int64_t rev, const struct locus_etcd_event *ev, size_t n)
{
	struct cluster_follow *f = arg;

	for (size_t i = 0; i < n; i++)
		f->kv(f->c, &ev[i].kv, ev[i].type != LOCUS_ETCD_EV_PUT);
	f->rev = rev;
}

static void follow_end(void *arg, int status, int64_t compact, const struct locus_error *why)
{
	struct cluster_follow *f = arg;

	(void)compact;
	(void)why;
	f->w = NULL;
	f->c->st.watch_restarts++;
	if (status == -LOCUS_ERANGE)
		f->synced = 0;
	else
		f->c->st.etcd_errors++;
	f->at_ms = f->c->now_ms + (status == -LOCUS_ERANGE ? 0 : RETRY_MAX_MS);
}

static void follow_read(void *arg, const struct locus_etcd_resp *r)
{
	struct cluster_follow *f = arg;

	f->sync_busy = 0;
	if (r->status < 0) {
		f->c->st.etcd_errors++;
		f->at_ms = f->c->now_ms + RETRY_MAX_MS;
		return;
	}
	if (f->synced_fn)
		f->synced_fn(f->c); /* forget what the read does not say again */
	for (size_t i = 0; i < r->n_kvs; i++)
		f->kv(f->c, &r->kvs[i], 0);
	f->rev = r->revision;
	f->synced = 1;
	f->at_ms = f->c->now_ms;
}

static void follow_poll(struct cluster_follow *f)
{
	struct locus_cluster *c = f->c;

	if (f->w || f->sync_busy || c->now_ms < f->at_ms)
		return;
	c->st.etcd_requests++;
	if (!f->synced) {
		struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = f->key, .prefix = true };

		if (locus_etcd_op(c->e, &op, follow_read, f, NULL) == 0)
			f->sync_busy = 1;
		else
			f->at_ms = c->now_ms + RETRY_MAX_MS;
	} else if (locus_etcd_watch(c->e, f->key, true, f->rev + 1, follow_events, follow_end, f,
				    &f->w, NULL) < 0) {
		f->at_ms = c->now_ms + RETRY_MAX_MS;
	}
}

/* ---- the prepared generation ---- */

static void on_prepare_kv(struct locus_cluster *c, const struct locus_etcd_kv *kv, int deleted)
{
	struct cluster_prepare *p = &c->pr;
	uint64_t g;

	if (strcmp(kv->key + strlen(p->prep.key), "grace"))
		return; /* only placements change in two phases */
	g = deleted ? 0 : parse_gen(kv->value, kv->value_len);
	if (!deleted && !g) {
		c->st.table_fetch_errors++;
		return;
	}
	if (g == p->want)
		return;
	p->want = g;
	p->fetched = 0;
	if (!g && c->ops.prepare)
		c->ops.prepare(c->arg, 0, NULL, 0, NULL); /* committed or aborted */
}

static void on_prepare_synced(struct locus_cluster *c)
{
	struct cluster_prepare *p = &c->pr;

	/* a read that names no prepared generation means none is (deleted meanwhile) */
	if (p->want && c->ops.prepare)
		c->ops.prepare(c->arg, 0, NULL, 0, NULL);
	p->want = 0;
	p->fetched = 0;
}

static void on_fetch(void *arg, const struct locus_etcd_resp *r)
{
	struct locus_cluster *c = arg;
	struct cluster_prepare *p = &c->pr;
	struct locus_error why = { 0 };
	uint64_t g = p->fetch_gen;

	p->fetch_busy = 0;
	if (r->status < 0) {
		c->st.etcd_errors++;
		p->fetch_at_ms = c->now_ms + RETRY_MAX_MS;
		return;
	}
	if (!g || g != p->want)
		return; /* moved on meanwhile: the next pass fetches the new one */
	p->fetched = g;
	if (r->n_kvs != 1) {
		c->st.table_fetch_errors++;
		locus_error_set(&why, ENOENT, "the prepared placement generation %" PRIu64
				" is not in etcd", g);
		if (c->ops.prepare)
			c->ops.prepare(c->arg, g, NULL, 0, &why);
		return;
	}
	if (c->ops.prepare)
		c->ops.prepare(c->arg, g, r->kvs[0].value, r->kvs[0].value_len, NULL);
}

static void fetch(struct locus_cluster *c)
{
	struct cluster_prepare *p = &c->pr;
	char key[340];
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = key };

	snprintf(key, sizeof(key), "%s%" PRIu64, p->blob, p->want);
	p->fetch_gen = p->want;
	c->st.etcd_requests++;
	if (locus_etcd_op(c->e, &op, on_fetch, c, NULL) == 0)
		p->fetch_busy = 1;
	else
		p->fetch_at_ms = c->now_ms + RETRY_MAX_MS;
}

static void on_acked(void *arg, const struct locus_etcd_resp *r)
{
	struct locus_cluster *c = arg;

	c->pr.ack_busy = 0;
	if (r->status < 0) {
		c->st.etcd_errors++;
		return; /* still dirty: written again at the next pass */
	}
	c->pr.ack_dirty = 0;
	c->st.reports++;
}

static void put_ack(struct locus_cluster *c)
{
	struct cluster_prepare *p = &c->pr;
	char key[360];
	struct locus_etcd_op op = { .type = LOCUS_ETCD_PUT, .key = key, .value = p->ack,
				    .len = strlen(p->ack), .lease = c->lease };

	snprintf(key, sizeof(key), "%s%" PRIu64 "/%u", p->acks, p->ack_gen, c->self.node);
	c->st.etcd_requests++;
	if (locus_etcd_op(c->e, &op, on_acked, c, NULL) == 0)
		p->ack_busy = 1;
}

int locus_cluster_prepare_ack(struct locus_cluster *c, uint64_t generation, int status,
			      uint32_t ranks, const char *reason)
{
	struct cluster_prepare *p = &c->pr;
	char esc[300];

	if (!generation)
		return -LOCUS_ERANGE;
	cluster_json_escape(reason, esc, sizeof(esc));
	snprintf(p->ack, sizeof(p->ack), "{\"node\":%u,\"generation\":%" PRIu64 ",\"status\":%d,"
		 "\"ranks\":%u,\"reason\":\"%s\"}", c->self.node, generation, status, ranks, esc);
	p->ack_gen = generation;
	p->ack_dirty = 1;
	return 0;
}

/* ---- values this node keeps under its lease (loads, ranks) ---- */

static void on_pub_put(void *arg, const struct locus_etcd_resp *r)
{
	struct cluster_pub *pb = arg;

	pb->busy = 0;
	if (r->status < 0) {
		pb->c->st.etcd_errors++;
		pb->dirty = 1; /* the next poll writes it again */
		return;
	}
	pb->c->st.reports++;
}

int locus_cluster_publish(struct locus_cluster *c, unsigned what, const void *buf, size_t len)
{
	struct cluster_pub *pb;
	void *copy;

	if (what >= LOCUS_CLUSTER_N_PUBS || len > LOCUS_CLUSTER_LOADS_MAX)
		return -LOCUS_ERANGE;
	pb = &c->pr.pub[what];
	if (pb->busy)
		return -EBUSY; /* the last one is still on its way: the next period's goes */
	copy = malloc(len ? len : 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, buf, len);
	free(pb->val);
	pb->val = copy;
	pb->len = len;
	pb->dirty = 1;
	return 0;
}

int locus_cluster_publish_loads(struct locus_cluster *c, const void *buf, size_t len)
{
	return locus_cluster_publish(c, LOCUS_CLUSTER_PUB_LOADS, buf, len);
}

static void put_pub(struct locus_cluster *c, struct cluster_pub *pb)
{
	struct locus_etcd_op op = { .type = LOCUS_ETCD_PUT, .key = pb->key, .value = pb->val,
				    .len = pb->len, .lease = c->lease };

	c->st.etcd_requests++;
	if (locus_etcd_op(c->e, &op, on_pub_put, pb, NULL) == 0) {
		pb->busy = 1;
		pb->dirty = 0;
	}
}

/* ---- which generation every member plans with ---- */

static void on_report_kv(struct locus_cluster *c, const struct locus_etcd_kv *kv, int deleted)
{
	struct cluster_prepare *p = &c->pr;
	const char *id = kv->key + strlen(p->rep.key);
	char *end;
	unsigned long node = strtoul(id, &end, 10);
	uint64_t gen = 0;
	uint32_t i;

	if (!*id || *end || node > UINT32_MAX)
		return;
	if (!deleted) {
		json_t *doc = json_loadb((const char *)kv->value, kv->value_len, 0, NULL);
		json_t *g = json_object_get(doc, "generation");
		json_t *st = json_object_get(doc, "status");

		/* a refusal keeps the member on its older table: it says nothing new */
		if (json_is_integer(g) && json_is_integer(st) && json_integer_value(st) == 0 &&
		    json_integer_value(g) > 0)
			gen = (uint64_t)json_integer_value(g);
		json_decref(doc);
		if (!gen)
			return;
	}
	for (i = 0; i < p->n_plan && p->plan_node[i] != node; i++)
		;
	if (i == p->n_plan) {
		if (deleted)
			return;
		if (p->n_plan == p->cap_plan) {
			uint32_t cap = p->cap_plan ? 2 * p->cap_plan : 16;
			uint32_t *nn = realloc(p->plan_node, cap * sizeof(*nn));
			uint64_t *ng;

			if (!nn)
				return;
			p->plan_node = nn;
			ng = realloc(p->plan_gen, cap * sizeof(*ng));
			if (!ng)
				return;
			p->plan_gen = ng;
			p->cap_plan = cap;
		}
		p->plan_node[p->n_plan] = (uint32_t)node;
		p->n_plan++;
	}
	if (deleted) {
		p->plan_node[i] = p->plan_node[p->n_plan - 1];
		p->plan_gen[i] = p->plan_gen[p->n_plan - 1];
		p->n_plan--;
	} else {
		p->plan_gen[i] = gen;
	}
}

static void on_report_synced(struct locus_cluster *c)
{
	c->pr.n_plan = 0;
}

/* The oldest generation a member plans with (members without a report count as 0). */
static uint64_t oldest_planned(const struct locus_cluster *c)
{
	const struct cluster_prepare *p = &c->pr;
	uint64_t oldest = UINT64_MAX;
	uint32_t counted = 0;

	for (uint32_t i = 0; i < p->n_plan; i++) {
		if (!cluster_is_member(c, p->plan_node[i]))
			continue;
		counted++;
		if (p->plan_gen[i] < oldest)
			oldest = p->plan_gen[i];
	}
	if (counted < locus_cluster_n_members(c) || oldest == UINT64_MAX)
		return 0;
	return oldest;
}

/* ---- the agent's steps ---- */

void cluster_prepare_init(struct locus_cluster *c, const char *base)
{
	struct cluster_prepare *p = &c->pr;

	p->prep = (struct cluster_follow){ .c = c, .kv = on_prepare_kv,
					   .synced_fn = on_prepare_synced };
	snprintf(p->prep.key, sizeof(p->prep.key), "%stables/prepare/", base);
	p->rep = (struct cluster_follow){ .c = c, .kv = on_report_kv,
					  .synced_fn = on_report_synced };
	snprintf(p->rep.key, sizeof(p->rep.key), "%sreports/grace/", base);
	snprintf(p->blob, sizeof(p->blob), "%stables/blob/grace/", base);
	snprintf(p->acks, sizeof(p->acks), "%stables/acks/grace/", base);
	for (unsigned i = 0; i < LOCUS_CLUSTER_N_PUBS; i++)
		p->pub[i].c = c;
	snprintf(p->pub[LOCUS_CLUSTER_PUB_LOADS].key, sizeof(p->pub[0].key),
		 "%sstats/expert_tokens/%u", base, c->self.node);
	snprintf(p->pub[LOCUS_CLUSTER_PUB_RANKS].key, sizeof(p->pub[0].key), "%sranks/%u",
		 base, c->self.node);
}

void cluster_prepare_poll(struct locus_cluster *c)
{
	struct cluster_prepare *p = &c->pr;
	uint64_t oldest;

	follow_poll(&p->prep);
	follow_poll(&p->rep);
	if (p->want && p->want != p->fetched && !p->fetch_busy && c->now_ms >= p->fetch_at_ms)
		fetch(c);
	if (p->ack_dirty && !p->ack_busy && c->lease)
		put_ack(c);
	for (unsigned i = 0; i < LOCUS_CLUSTER_N_PUBS; i++)
		if (p->pub[i].dirty && !p->pub[i].busy && c->lease)
			put_pub(c, &p->pub[i]);
	oldest = oldest_planned(c);
	if (oldest > p->oldest_told) {
		p->oldest_told = oldest;
		if (c->ops.plans_from)
			c->ops.plans_from(c->arg, oldest);
	}
}

void cluster_prepare_rejoined(struct locus_cluster *c)
{
	/* an acknowledgement went with the old lease: write it again under the new one */
	if (c->pr.ack_gen)
		c->pr.ack_dirty = 1;
	for (unsigned i = 0; i < LOCUS_CLUSTER_N_PUBS; i++)
		if (c->pr.pub[i].val)
			c->pr.pub[i].dirty = 1;
}

void cluster_prepare_close(struct locus_cluster *c)
{
	struct cluster_prepare *p = &c->pr;

	locus_etcd_watch_cancel(p->prep.w);
	locus_etcd_watch_cancel(p->rep.w);
	p->prep.w = p->rep.w = NULL;
	for (unsigned i = 0; i < LOCUS_CLUSTER_N_PUBS; i++) {
		free(p->pub[i].val);
		p->pub[i].val = NULL;
	}
	free(p->plan_node);
	free(p->plan_gen);
	p->plan_node = NULL;
	p->plan_gen = NULL;
	p->n_plan = p->cap_plan = 0;
}
