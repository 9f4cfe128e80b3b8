// SPDX-License-Identifier: MIT
/*
 * The cluster's tables (locus_cluster.h): follow tables/current/<kind>,
 * fetch the blob of each new generation, hand it to the owner, and write
 * the owner's reports under the node's lease.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_priv.h"
#include "locus_err_priv.h"

static const char *const kind_name[LOCUS_CLUSTER_TABLE_KINDS] = { "eldr", "grace" };

const char *locus_cluster_table_kind_name(unsigned kind)
{
	return kind < LOCUS_CLUSTER_TABLE_KINDS ? kind_name[kind] : "?";
}

void cluster_tables_init(struct locus_cluster *c, const char *base)
{
	struct cluster_tables *t = &c->t;

	snprintf(t->current, sizeof(t->current), "%stables/current/", base);
	snprintf(t->blob, sizeof(t->blob), "%stables/blob/", base);
	snprintf(t->reports, sizeof(t->reports), "%sreports/", base);
	for (unsigned k = 0; k < LOCUS_CLUSTER_TABLE_KINDS; k++) {
		t->fctx[k].c = c;
		t->fctx[k].kind = k;
	}
}

/* A current key and its value: which kind, which generation. 0, or -1 for anything else. */
static int parse_current(const struct cluster_tables *t, const struct locus_etcd_kv *kv,
			 unsigned *kind, uint64_t *gen)
{
	const char *name = kv->key + strlen(t->current);
	char *end;
	unsigned long long g;

	if (strncmp(kv->key, t->current, strlen(t->current)))
		return -1;
	for (*kind = 0; *kind < LOCUS_CLUSTER_TABLE_KINDS; (*kind)++)
		if (!strcmp(name, kind_name[*kind]))
			break;
	if (*kind == LOCUS_CLUSTER_TABLE_KINDS || !kv->value || kv->value_len == 0 ||
	    kv->value_len > 20 || kv->value[0] < '1' || kv->value[0] > '9')
		return -1;
	errno = 0;
	g = strtoull((const char *)kv->value, &end, 10);
	if (errno || end != (const char *)kv->value + kv->value_len || g > INT64_MAX)
		return -1;
	*gen = g;
	return 0;
}

static void want(struct locus_cluster *c, const struct locus_etcd_kv *kv)
{
	unsigned kind;
	uint64_t gen;

	if (parse_current(&c->t, kv, &kind, &gen) < 0) {
		c->st.table_fetch_errors++;
		return;
	}
	if (gen > c->t.want[kind]) {
		c->t.want[kind] = gen;
		c->st.tables_seen++;
	}
}

static void on_events(void *arg, int64_t rev, const struct locus_etcd_event *ev, size_t n)
{
	struct locus_cluster *c = arg;

	for (size_t i = 0; i < n; i++)
		if (ev[i].type == LOCUS_ETCD_EV_PUT)
			want(c, &ev[i].kv);
	c->t.rev = rev;
}

static void on_end(void *arg, int status, int64_t compact, const struct locus_error *why)
{
	struct locus_cluster *c = arg;

	(void)compact;
	(void)why;
	c->t.w = NULL;
	c->st.watch_restarts++;
	if (status == -LOCUS_ERANGE)
		c->t.synced = 0;
	else
		c->st.etcd_errors++;
	c->t.watch_at_ms = c->now_ms + (status == -LOCUS_ERANGE ? 0 : RETRY_MAX_MS);
}

static void on_sync(void *arg, const struct locus_etcd_resp *r)
{
	struct locus_cluster *c = arg;

	c->t.sync_busy = 0;
	if (r->status < 0) {
		c->st.etcd_errors++;
		c->t.watch_at_ms = c->now_ms + RETRY_MAX_MS;
		return;
	}
	for (size_t i = 0; i < r->n_kvs; i++)
		want(c, &r->kvs[i]);
	c->t.rev = r->revision;
	c->t.synced = 1;
	c->t.watch_at_ms = c->now_ms;
}

static void on_fetch(void *arg, const struct locus_etcd_resp *r)
{
	struct cluster_fetch *f = arg;
	struct locus_cluster *c = f->c;
	struct cluster_tables *t = &c->t;
	struct locus_error why = { 0 };

	t->fetch_busy[f->kind] = 0;
	if (r->status < 0) {
		/* etcd away: try again; the table in force stays */
		c->st.etcd_errors++;
		t->fetch_at_ms[f->kind] = c->now_ms + RETRY_MAX_MS;
		return;
	}
	t->fetched[f->kind] = f->gen;
	if (r->n_kvs != 1) {
		c->st.table_fetch_errors++;
		locus_error_set(&why, ENOENT, "generation %" PRIu64 " of the cluster's %s table "
				"is not in etcd (deleted or never stored whole)", f->gen,
				kind_name[f->kind]);
		if (c->ops.table)
			c->ops.table(c->arg, f->kind, f->gen, NULL, 0, &why);
		return;
	}
	if (c->ops.table)
		c->ops.table(c->arg, f->kind, f->gen, r->kvs[0].value, r->kvs[0].value_len, NULL);
}

static void fetch(struct locus_cluster *c, unsigned kind)
{
	struct cluster_tables *t = &c->t;
	char key[340];
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = key };

	snprintf(key, sizeof(key), "%s%s/%" PRIu64, t->blob, kind_name[kind], t->want[kind]);
	t->fctx[kind].gen = t->want[kind];
	c->st.etcd_requests++;
	if (locus_etcd_op(c->e, &op, on_fetch, &t->fctx[kind], NULL) == 0)
		t->fetch_busy[kind] = 1;
}

static void on_reported(void *arg, const struct locus_etcd_resp *r)
{
	struct cluster_fetch *f = arg;
	struct locus_cluster *c = f->c;

	c->t.report_busy[f->kind] = 0;
	if (r->status < 0) {
		c->st.etcd_errors++;
		return; /* still dirty: written again at the next pass */
	}
	c->t.report_dirty[f->kind] = 0;
	c->st.reports++;
}

static void put_report(struct locus_cluster *c, unsigned kind)
{
	struct cluster_tables *t = &c->t;
	char key[340];
	struct locus_etcd_op op = { .type = LOCUS_ETCD_PUT, .key = key, .value = t->report[kind],
				    .len = strlen(t->report[kind]), .lease = c->lease };

	snprintf(key, sizeof(key), "%s%s/%u", t->reports, kind_name[kind], c->self.node);
	c->st.etcd_requests++;
	if (locus_etcd_op(c->e, &op, on_reported, &t->fctx[kind], NULL) == 0)
		t->report_busy[kind] = 1;
}

void cluster_tables_poll(struct locus_cluster *c)
{
	struct cluster_tables *t = &c->t;

	if (!t->w && !t->sync_busy && c->now_ms >= t->watch_at_ms) {
		c->st.etcd_requests++;
		if (!t->synced) {
			struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = t->current,
						    .prefix = true };

			if (locus_etcd_op(c->e, &op, on_sync, c, NULL) == 0)
				t->sync_busy = 1;
		} else if (locus_etcd_watch(c->e, t->current, true, t->rev + 1, on_events, on_end,
					    c, &t->w, NULL) < 0) {
			t->watch_at_ms = c->now_ms + RETRY_MAX_MS;
		}
	}
	for (unsigned k = 0; k < LOCUS_CLUSTER_TABLE_KINDS; k++) {
		if (t->want[k] > t->fetched[k] && !t->fetch_busy[k] && c->now_ms >= t->fetch_at_ms[k])
			fetch(c, k);
		if (t->report_dirty[k] && !t->report_busy[k] && c->lease)
			put_report(c, k);
	}
}

void cluster_tables_rejoined(struct locus_cluster *c)
{
	/* the reports went with the old lease: write them again under the new one */
	for (unsigned k = 0; k < LOCUS_CLUSTER_TABLE_KINDS; k++)
		if (c->t.report[k][0])
			c->t.report_dirty[k] = 1;
}

void cluster_tables_close(struct locus_cluster *c)
{
	locus_etcd_watch_cancel(c->t.w);
	c->t.w = NULL;
}

void cluster_json_escape(const char *s, char *out, size_t len)
{
	size_t o = 0;

	for (s = s ? s : ""; *s && o + 7 < len; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\') {
			out[o++] = '\\';
			out[o++] = (char)ch;
		} else if (ch < 0x20) {
			o += (size_t)snprintf(out + o, len - o, "\\u%04x", ch);
		} else {
			out[o++] = (char)ch;
		}
	}
	out[o] = 0;
}

int locus_cluster_report(struct locus_cluster *c, unsigned kind, uint64_t generation,
			 int status, uint64_t local_gen, const char *reason)
{
	struct cluster_tables *t = &c->t;
	char esc[300];

	if (kind >= LOCUS_CLUSTER_TABLE_KINDS)
		return -LOCUS_ERANGE;
	cluster_json_escape(reason, esc, sizeof(esc));
	snprintf(t->report[kind], sizeof(t->report[kind]),
		 "{\"node\":%u,\"generation\":%" PRIu64 ",\"status\":%d,\"local_generation\":%"
		 PRIu64 ",\"reason\":\"%s\"}", c->self.node, generation, status, local_gen, esc);
	t->report_dirty[kind] = 1;
	return 0;
}
