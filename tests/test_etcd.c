// SPDX-License-Identifier: MIT
/*
 * The etcd client (control/locus_etcd.h) against a real etcd started for
 * the test (tests/etcd_util.c): keys, binary values and prefixes; the
 * create-if-absent and compare-and-swap transactions; leases that are kept
 * and leases that lapse; watches from now and from a revision, cancelled
 * from their own callback, broken by a killed etcd, refused for a compacted
 * revision; a dead endpoint before a live one; an endpoint that never
 * answers while locus_etcd_poll() keeps returning at once; TLS with client
 * certificates, refused without them and with a stranger CA.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "etcd_util.h"
#include "locus_etcd.h"

static struct etcd_srv srv;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct locus_etcd *client(const char *endpoints, uint32_t timeout_ms)
{
	struct locus_etcd_params p = { .endpoints = endpoints, .timeout_ms = timeout_ms };
	struct locus_error err = { 0 };
	struct locus_etcd *e;

	if (locus_etcd_open(&p, &e, &err) < 0)
		fail_msg("open %s: %s", endpoints, err.msg);
	return e;
}

static int put(struct locus_etcd *e, const char *k, const void *v, size_t len, int64_t lease)
{
	struct locus_etcd_op op = { .type = LOCUS_ETCD_PUT, .key = k, .value = v, .len = len,
				    .lease = lease };
	struct locus_etcd_resp r;
	int ret = locus_etcd_call_op(e, &op, &r);

	if (ret < 0)
		print_error("put %s: %s\n", k, r.err.msg);
	locus_etcd_resp_free(&r);
	return ret;
}

/* The keys under prefix (or the key), in r. */
static int get(struct locus_etcd *e, const char *k, bool prefix, struct locus_etcd_resp *r)
{
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = k, .prefix = prefix };

	return locus_etcd_call_op(e, &op, r);
}

static void test_kv(void **state)
{
	static const uint8_t bin[] = { 0, 1, 2, 0xff, 0, '\n', '"', '\\' };
	struct locus_etcd *e = client(srv.url, 2000);
	struct locus_etcd_resp r;
	struct locus_etcd_op del = { .type = LOCUS_ETCD_DELETE, .key = "/t/kv/", .prefix = true };
	char big[LOCUS_ETCD_KEY_MAX + 1];
	struct locus_error err = { 0 };
	(void)state;

	assert_int_equal(put(e, "/t/kv/a", "one", 3, 0), 0);
	assert_int_equal(put(e, "/t/kv/b", bin, sizeof(bin), 0), 0);
	assert_int_equal(put(e, "/t/kvz", "outside", 7, 0), 0);
	assert_int_equal(get(e, "/t/kv/", true, &r), 0);
	assert_int_equal(r.n_kvs, 2);
	assert_string_equal(r.kvs[0].key, "/t/kv/a");
	assert_int_equal(r.kvs[0].value_len, 3);
	assert_memory_equal(r.kvs[0].value, "one", 3);
	assert_int_equal(r.kvs[1].value_len, sizeof(bin));
	assert_memory_equal(r.kvs[1].value, bin, sizeof(bin));
	assert_true(r.kvs[1].mod_rev > r.kvs[0].mod_rev);
	assert_true(r.revision >= r.kvs[1].mod_rev);
	locus_etcd_resp_free(&r);
	assert_int_equal(get(e, "/t/kv/a", false, &r), 0);
	assert_int_equal(r.n_kvs, 1);
	locus_etcd_resp_free(&r);
	assert_int_equal(get(e, "/t/nothing", false, &r), 0);
	assert_int_equal(r.n_kvs, 0);
	locus_etcd_resp_free(&r);
	/* an empty value is a value */
	assert_int_equal(put(e, "/t/kv/empty", "", 0, 0), 0);
	assert_int_equal(get(e, "/t/kv/empty", false, &r), 0);
	assert_int_equal(r.n_kvs, 1);
	assert_int_equal(r.kvs[0].value_len, 0);
	locus_etcd_resp_free(&r);
	assert_int_equal(locus_etcd_call_op(e, &del, &r), 0);
	assert_int_equal(r.deleted, 3);
	locus_etcd_resp_free(&r);
	assert_int_equal(get(e, "/t/kv", true, &r), 0);
	assert_int_equal(r.n_kvs, 1); /* /t/kvz is not under /t/kv/ */
	locus_etcd_resp_free(&r);
	/* a key too long is refused before anything is sent */
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	struct locus_etcd_op op = { .type = LOCUS_ETCD_PUT, .key = big, .value = "v", .len = 1 };
	assert_int_equal(locus_etcd_op(e, &op, NULL, NULL, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "key of"));
	assert_int_equal(locus_etcd_poll(e), 0);
	locus_etcd_close(e);
}

/* Claim key with value unless it exists: the node-id transaction. */
static int claim(struct locus_etcd *e, const char *key, const char *v, int64_t lease,
		 struct locus_etcd_resp *r)
{
	struct locus_etcd_cmp c = { .key = key, .target = LOCUS_ETCD_CREATE_REV,
				    .result = LOCUS_ETCD_EQ, .rev = 0 };
	struct locus_etcd_op ok = { .type = LOCUS_ETCD_PUT, .key = key, .value = v,
				    .len = strlen(v), .lease = lease };
	struct locus_etcd_op ko = { .type = LOCUS_ETCD_GET, .key = key };
	struct locus_etcd_txn t = { &c, 1, &ok, &ko, 1, 1 };

	return locus_etcd_call_txn(e, &t, r);
}

static void test_txn(void **state)
{
	struct locus_etcd *e = client(srv.url, 2000);
	struct locus_etcd_resp r;
	int64_t rev;
	(void)state;

	assert_int_equal(claim(e, "/t/txn/node/1", "first", 0, &r), 0);
	assert_true(r.succeeded);
	assert_int_equal(r.n_kvs, 0);
	locus_etcd_resp_free(&r);
	assert_int_equal(claim(e, "/t/txn/node/1", "second", 0, &r), 0);
	assert_false(r.succeeded);
	assert_int_equal(r.n_kvs, 1);
	assert_memory_equal(r.kvs[0].value, "first", 5);
	rev = r.kvs[0].mod_rev;
	locus_etcd_resp_free(&r);

	/* compare-and-swap on the mod revision: the first writer wins, the stale one loses */
	struct locus_etcd_cmp c = { .key = "/t/txn/node/1", .target = LOCUS_ETCD_MOD_REV,
				    .result = LOCUS_ETCD_EQ, .rev = rev };
	struct locus_etcd_op ok = { .type = LOCUS_ETCD_PUT, .key = "/t/txn/node/1",
				    .value = "third", .len = 5 };
	struct locus_etcd_txn t = { &c, 1, &ok, NULL, 1, 0 };
	assert_int_equal(locus_etcd_call_txn(e, &t, &r), 0);
	assert_true(r.succeeded);
	locus_etcd_resp_free(&r);
	assert_int_equal(locus_etcd_call_txn(e, &t, &r), 0);
	assert_false(r.succeeded);
	locus_etcd_resp_free(&r);
	/* compare on the value */
	struct locus_etcd_cmp cv = { .key = "/t/txn/node/1", .target = LOCUS_ETCD_VALUE,
				     .result = LOCUS_ETCD_EQ, .value = "third", .len = 5 };
	t.cmp = &cv;
	assert_int_equal(locus_etcd_call_txn(e, &t, &r), 0);
	assert_true(r.succeeded);
	locus_etcd_resp_free(&r);

	/*
	 * a compare over a prefix holds only if it holds for every key there:
	 * "no key under /t/txn/node/ created after rev" fails once one is
	 * created later, and holds over an empty prefix
	 */
	struct locus_etcd_op get = { .type = LOCUS_ETCD_GET, .key = "/t/txn/node/", .prefix = true };
	assert_int_equal(locus_etcd_call_op(e, &get, &r), 0);
	rev = r.revision;
	locus_etcd_resp_free(&r);
	struct locus_etcd_cmp cp = { .key = "/t/txn/node/", .prefix = true,
				     .target = LOCUS_ETCD_CREATE_REV, .result = LOCUS_ETCD_LT,
				     .rev = rev + 1 };
	struct locus_etcd_op noop = { .type = LOCUS_ETCD_GET, .key = "/t/txn/none" };
	struct locus_etcd_txn tp = { &cp, 1, &noop, NULL, 1, 0 };
	assert_int_equal(locus_etcd_call_txn(e, &tp, &r), 0);
	assert_true(r.succeeded);
	locus_etcd_resp_free(&r);
	assert_int_equal(claim(e, "/t/txn/node/2", "later", 0, &r), 0);
	locus_etcd_resp_free(&r);
	assert_int_equal(locus_etcd_call_txn(e, &tp, &r), 0);
	assert_false(r.succeeded);
	locus_etcd_resp_free(&r);
	cp.key = "/t/txn/empty/";
	assert_int_equal(locus_etcd_call_txn(e, &tp, &r), 0);
	assert_true(r.succeeded);
	locus_etcd_resp_free(&r);
	locus_etcd_close(e);
}

static void test_lease(void **state)
{
	/* generous bounds: etcd on a loaded 2-core machine can stall for a second */
	struct locus_etcd *e = client(srv.url, 5000);
	struct locus_etcd_resp r;
	int64_t id;
	double t0;
	(void)state;

	assert_int_equal(locus_etcd_call_lease(e, LOCUS_ETCD_LEASE_GRANT, 3, &r), 0);
	id = r.lease_id;
	assert_true(id != 0);
	assert_true(r.ttl >= 3);
	locus_etcd_resp_free(&r);
	assert_int_equal(claim(e, "/t/lease/node", "me", id, &r), 0);
	assert_true(r.succeeded);
	locus_etcd_resp_free(&r);
	/* kept alive for 5 s, past its TTL: still there */
	t0 = now_s();
	while (now_s() - t0 < 5) {
		assert_int_equal(locus_etcd_call_lease(e, LOCUS_ETCD_LEASE_KEEPALIVE, id, &r), 0);
		assert_true(r.ttl > 0);
		locus_etcd_resp_free(&r);
		usleep(300000);
	}
	assert_int_equal(get(e, "/t/lease/node", false, &r), 0);
	assert_int_equal(r.n_kvs, 1);
	assert_int_equal(r.kvs[0].lease, id);
	locus_etcd_resp_free(&r);
	/* left alone: the key goes with the lease, and a keepalive then says TTL 0 */
	t0 = now_s();
	for (;;) {
		assert_int_equal(get(e, "/t/lease/node", false, &r), 0);
		if (!r.n_kvs)
			break;
		locus_etcd_resp_free(&r);
		assert_true(now_s() - t0 < 15);
		usleep(100000);
	}
	locus_etcd_resp_free(&r);
	assert_int_equal(locus_etcd_call_lease(e, LOCUS_ETCD_LEASE_KEEPALIVE, id, &r), 0);
	assert_int_equal(r.ttl, 0);
	locus_etcd_resp_free(&r);
	/* a revoked lease takes its keys at once */
	assert_int_equal(locus_etcd_call_lease(e, LOCUS_ETCD_LEASE_GRANT, 30, &r), 0);
	id = r.lease_id;
	locus_etcd_resp_free(&r);
	assert_int_equal(put(e, "/t/lease/node2", "x", 1, id), 0);
	assert_int_equal(locus_etcd_call_lease(e, LOCUS_ETCD_LEASE_REVOKE, id, &r), 0);
	locus_etcd_resp_free(&r);
	assert_int_equal(get(e, "/t/lease/node2", false, &r), 0);
	assert_int_equal(r.n_kvs, 0);
	locus_etcd_resp_free(&r);
	locus_etcd_close(e);
}

struct seen {
	int n_put, n_del, ends, status;
	int64_t revs[64], compact;
	char keys[64][32];
	struct locus_etcd_watch *w;
	int cancel_at; /* cancel from the callback once this many events were seen */
};

static void on_events(void *arg, int64_t rev, const struct locus_etcd_event *ev, size_t n)
{
	struct seen *s = arg;

	(void)rev;
	for (size_t i = 0; i < n; i++) {
		int k = s->n_put + s->n_del;

		if (k < 64) {
			s->revs[k] = ev[i].kv.mod_rev;
			snprintf(s->keys[k], sizeof(s->keys[k]), "%c%s",
				 ev[i].type == LOCUS_ETCD_EV_PUT ? '+' : '-', ev[i].kv.key);
		}
		if (ev[i].type == LOCUS_ETCD_EV_PUT)
			s->n_put++;
		else
			s->n_del++;
	}
	if (s->cancel_at && s->n_put + s->n_del >= s->cancel_at) {
		locus_etcd_watch_cancel(s->w);
		s->w = NULL;
	}
}

static void on_end(void *arg, int status, int64_t compact, const struct locus_error *why)
{
	struct seen *s = arg;

	(void)why;
	s->ends++;
	s->status = status;
	s->compact = compact;
	s->w = NULL;
}

/* Poll e until cond holds or seconds pass. */
#define POLL_UNTIL(e, cond, seconds)                                                   \
	do {                                                                           \
		double t0_ = now_s();                                                  \
		while (!(cond) && now_s() - t0_ < (seconds)) {                         \
			locus_etcd_poll(e);                                            \
			locus_etcd_wait(e, 20);                                        \
		}                                                                      \
	} while (0)

static void test_watch(void **state)
{
	struct locus_etcd *e = client(srv.url, 2000), *w2 = client(srv.url, 2000);
	struct seen s = { 0 }, from = { 0 }, cut = { 0 };
	struct locus_error err = { 0 };
	struct locus_etcd_resp r;
	int64_t first;
	(void)state;

	assert_int_equal(locus_etcd_watch(e, "/t/w/", true, 0, on_events, on_end, &s, &s.w, &err),
			 0);
	/* the watch is created once its first answer is read; give it that */
	POLL_UNTIL(e, locus_etcd_watch_revision(s.w) > 0, 5);
	assert_int_equal(put(w2, "/t/w/a", "1", 1, 0), 0);
	assert_int_equal(put(w2, "/t/w/b", "2", 1, 0), 0);
	assert_int_equal(put(w2, "/t/other", "3", 1, 0), 0);
	{
		struct locus_etcd_op d = { .type = LOCUS_ETCD_DELETE, .key = "/t/w/a" };

		assert_int_equal(locus_etcd_call_op(w2, &d, &r), 0);
		locus_etcd_resp_free(&r);
	}
	POLL_UNTIL(e, s.n_put + s.n_del == 3, 5);
	assert_int_equal(s.n_put, 2);
	assert_int_equal(s.n_del, 1);
	assert_string_equal(s.keys[0], "+/t/w/a");
	assert_string_equal(s.keys[1], "+/t/w/b");
	assert_string_equal(s.keys[2], "-/t/w/a");
	assert_true(s.revs[0] < s.revs[1] && s.revs[1] < s.revs[2]);
	assert_int_equal(locus_etcd_watch_revision(s.w), s.revs[2]);
	first = s.revs[0];

	/* from a revision: the same history again, and it cancels itself on the second event */
	from.cancel_at = 2;
	assert_int_equal(locus_etcd_watch(e, "/t/w/", true, first, on_events, on_end, &from,
					  &from.w, &err), 0);
	POLL_UNTIL(e, from.w == NULL, 5);
	assert_null(from.w);
	assert_int_equal(from.n_put, 2);
	assert_int_equal(from.revs[0], first);
	assert_int_equal(from.ends, 0); /* a cancelled watch never ends by callback */

	/* compacted: the watch is refused with the oldest revision left */
	{
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "ETCDCTL_API=3 etcdctl --endpoints=%s compact %lld "
			 ">/dev/null", srv.url, (long long)s.revs[2]);
		assert_int_equal(system(cmd), 0);
	}
	assert_int_equal(locus_etcd_watch(e, "/t/w/", true, first, on_events, on_end, &cut,
					  &cut.w, &err), 0);
	POLL_UNTIL(e, cut.ends, 5);
	assert_int_equal(cut.ends, 1);
	assert_int_equal(cut.status, -LOCUS_ERANGE);
	assert_int_equal(cut.compact, s.revs[2]);

	/* etcd killed under the first watch: it ends once, with -ENOTCONN */
	etcd_srv_kill(&srv);
	POLL_UNTIL(e, s.ends, 10);
	assert_int_equal(s.ends, 1);
	assert_int_equal(s.status, -ENOTCONN);
	assert_int_equal(etcd_srv_restart(&srv), 0);
	/* and watching again from the last revision + 1 sees what happened since */
	memset(&s, 0, sizeof(s));
	assert_int_equal(put(w2, "/t/w/c", "4", 1, 0), 0);
	assert_int_equal(locus_etcd_watch(e, "/t/w/", true, cut.compact + 1, on_events, on_end,
					  &s, &s.w, &err), 0);
	POLL_UNTIL(e, s.n_put == 1, 5);
	assert_int_equal(s.n_put, 1);
	assert_string_equal(s.keys[0], "+/t/w/c");
	locus_etcd_watch_cancel(s.w);
	assert_int_equal(locus_etcd_poll(e), 0);
	locus_etcd_close(e);
	locus_etcd_close(w2);
}

static void on_done_count(void *arg, const struct locus_etcd_resp *r)
{
	int *st = arg;

	*st = r->status ? r->status : 1;
}

static void test_endpoints(void **state)
{
	char list[256];
	struct locus_etcd *e;
	struct locus_etcd_resp r;
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = "/" };
	double t0, worst = 0;
	int st = 0;
	(void)state;

	/* a dead endpoint first: its request fails, the next goes to the live one */
	snprintf(list, sizeof(list), "http://127.0.0.1:%d,%s", etcd_free_port(), srv.url);
	e = client(list, 1000);
	assert_int_equal(locus_etcd_call_op(e, &op, &r), -ENOTCONN);
	assert_non_null(strstr(r.err.msg, "127.0.0.1"));
	locus_etcd_resp_free(&r);
	assert_string_equal(locus_etcd_endpoint(e), srv.url);
	assert_int_equal(locus_etcd_call_op(e, &op, &r), 0);
	locus_etcd_resp_free(&r);
	locus_etcd_close(e);

	/* an endpoint that never answers (a blackholed address): poll never waits on it */
	e = client("http://192.0.2.1:2379", 500);
	assert_int_equal(locus_etcd_op(e, &op, on_done_count, &st, NULL), 0);
	t0 = now_s();
	while (!st && now_s() - t0 < 5) {
		double a = now_s();

		locus_etcd_poll(e);
		if (now_s() - a > worst)
			worst = now_s() - a;
		usleep(1000);
	}
	assert_true(st == -ETIMEDOUT || st == -ENOTCONN);
	assert_true(now_s() - t0 < 2); /* the request's bound */
	if (worst > 0.05)
		fail_msg("locus_etcd_poll took %.3f s: it must not block", worst);
	locus_etcd_close(e);

	/* etcd stopped: a request fails at once; started again, it answers */
	etcd_srv_stop(&srv);
	e = client(srv.url, 1000);
	assert_int_equal(locus_etcd_call_op(e, &op, &r), -ENOTCONN);
	locus_etcd_resp_free(&r);
	assert_int_equal(etcd_srv_restart(&srv), 0);
	assert_int_equal(locus_etcd_call_op(e, &op, &r), 0);
	locus_etcd_resp_free(&r);
	locus_etcd_close(e);
}

static void test_refusals(void **state)
{
	struct locus_etcd_params p = { 0 };
	struct locus_error err = { 0 };
	struct locus_etcd *e;
	(void)state;

	p.endpoints = "127.0.0.1:2379";
	assert_int_equal(locus_etcd_open(&p, &e, &err), -LOCUS_EPARSE);
	assert_non_null(strstr(err.msg, "not an http:// or https:// URL"));
	p.endpoints = "http://h:1,,http://h:2";
	assert_int_equal(locus_etcd_open(&p, &e, &err), -LOCUS_EPARSE);
	assert_non_null(strstr(err.msg, "empty"));
	p.endpoints = "http://nohostport";
	assert_int_equal(locus_etcd_open(&p, &e, &err), -LOCUS_EPARSE);
	p.endpoints = "http://127.0.0.1:1";
	p.cert = "/etc/hostname";
	assert_int_equal(locus_etcd_open(&p, &e, &err), -LOCUS_EPARSE);
	assert_non_null(strstr(err.msg, "needs its key"));
	p.key = "/nonexistent/client.key";
	assert_int_equal(locus_etcd_open(&p, &e, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "/nonexistent/client.key"));
}

static void test_tls(void **state)
{
	struct etcd_srv t;
	struct locus_etcd_params p = { 0 };
	struct locus_etcd_op op = { .type = LOCUS_ETCD_PUT, .key = "/t/tls", .value = "s",
				    .len = 1 };
	struct locus_error err = { 0 };
	struct locus_etcd_resp r;
	struct locus_etcd *e;
	(void)state;

	assert_int_equal(etcd_srv_start(&t, true), 0);
	p.endpoints = t.url;
	p.timeout_ms = 2000;
	/* our CA and a client certificate: in */
	p.cacert = t.ca;
	p.cert = t.cert;
	p.key = t.key;
	assert_int_equal(locus_etcd_open(&p, &e, &err), 0);
	assert_int_equal(locus_etcd_call_op(e, &op, &r), 0);
	locus_etcd_resp_free(&r);
	locus_etcd_close(e);
	/* no client certificate: refused */
	p.cert = p.key = NULL;
	assert_int_equal(locus_etcd_open(&p, &e, &err), 0);
	assert_true(locus_etcd_call_op(e, &op, &r) < 0);
	locus_etcd_resp_free(&r);
	locus_etcd_close(e);
	/* a CA that did not sign the server: refused, as access */
	p.cacert = t.other_ca;
	p.cert = t.cert;
	p.key = t.key;
	assert_int_equal(locus_etcd_open(&p, &e, &err), 0);
	assert_int_equal(locus_etcd_call_op(e, &op, &r), -EACCES);
	locus_etcd_resp_free(&r);
	locus_etcd_close(e);
	etcd_srv_destroy(&t);
}

static int setup(void **state)
{
	(void)state;
	return etcd_srv_start(&srv, false);
}

static int teardown(void **state)
{
	(void)state;
	etcd_srv_destroy(&srv);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_kv),
		cmocka_unit_test(test_txn),
		cmocka_unit_test(test_lease),
		cmocka_unit_test(test_watch),
		cmocka_unit_test(test_endpoints),
		cmocka_unit_test(test_tls),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
