// SPDX-License-Identifier: MIT
/*
 * Cluster membership (dataplane/locus_cluster.h) against a real etcd the
 * test starts (tests/etcd_util.c), several agents in one process standing
 * for nodes:
 *  - node records: the format read back, every malformed field refused;
 *  - three nodes join and each sees the two others with their addresses;
 *  - a second node with an id in use is refused, naming the holder, and
 *    takes the id once the holder leaves;
 *  - a node that stops keeping its lease goes away for the others when the
 *    lease lapses, and joins again by itself;
 *  - a node killed (-9, in a child process) and started again with its
 *    lease file takes its record back at once; without it, it waits;
 *  - etcd killed: every node keeps its membership, says etcd is
 *    unreachable, and is a member again once etcd is back;
 *  - a record that does not parse is refused and counted, a good one after
 *    it is taken.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "etcd_util.h"
#include "locus_cluster.h"
#include "locus_etcd.h"

#define MAXN 8

static struct etcd_srv srv;
static char dir[64];

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* What one agent saw. */
struct view {
	struct locus_cluster *c;
	uint32_t node;
	int up[MAXN], gone[MAXN], bad[MAXN];
	uint64_t boot[MAXN];
	uint16_t port[MAXN];
	int state;
	char why[LOCUS_ERRMSG_MAX];
};

static void on_up(void *arg, const struct locus_node_record *r)
{
	struct view *v = arg;

	if (r->node < MAXN) {
		v->up[r->node]++;
		v->boot[r->node] = r->boot;
		v->port[r->node] = r->rail_port[0];
	}
}

static void on_gone(void *arg, uint32_t node)
{
	struct view *v = arg;

	if (node < MAXN)
		v->gone[node]++;
}

static void on_bad(void *arg, uint32_t node, const struct locus_error *why)
{
	struct view *v = arg;

	if (node < MAXN)
		v->bad[node]++;
	snprintf(v->why, sizeof(v->why), "%s", why->msg);
}

static void on_state(void *arg, int state, const struct locus_error *why)
{
	struct view *v = arg;

	v->state = state;
	if (why)
		snprintf(v->why, sizeof(v->why), "%s", why->msg);
}

static const struct locus_cluster_ops ops = { .node_up = on_up, .node_gone = on_gone,
					      .record_bad = on_bad, .state = on_state };

static void self_record(struct locus_node_record *r, uint32_t node, uint64_t boot)
{
	memset(r, 0, sizeof(*r));
	r->node = node;
	r->cluster = 7;
	r->gpus = 4;
	r->n_rails = 2;
	r->rail_ipv4[0] = htonl(0xc0000201 + node);
	r->rail_port[0] = (uint16_t)(7000 + node);
	r->rail_ipv4[1] = htonl(0xc0000301 + node);
	r->rail_port[1] = (uint16_t)(7100 + node);
	r->boot = boot;
	snprintf(r->host, sizeof(r->host), "host-%u", node);
}

static void join(struct view *v, uint32_t node, uint64_t boot, const char *lease_file)
{
	struct locus_cluster_params p = { .endpoints = srv.url, .lease_ttl_s = 2,
					  .timeout_ms = 1000, .lease_file = lease_file,
					  .prefix = "/test" };
	struct locus_error err = { 0 };

	memset(v, 0, sizeof(*v));
	v->node = node;
	self_record(&p.self, node, boot);
	if (locus_cluster_open(&p, &ops, v, &v->c, &err) < 0)
		fail_msg("open node %u: %s", node, err.msg);
}

static void leave(struct view *v)
{
	locus_cluster_close(v->c);
	v->c = NULL;
}

/* Poll every live agent of vs until cond holds or ms pass; returns cond. */
#define RUN_UNTIL(vs, n, cond, ms)                                                     \
	({                                                                             \
		uint64_t t0_ = now_ms();                                               \
		while (!(cond) && now_ms() - t0_ < (ms)) {                             \
			for (int i_ = 0; i_ < (n); i_++)                               \
				if ((vs)[i_].c)                                        \
					locus_cluster_poll((vs)[i_].c, now_ms());      \
			usleep(2000);                                                  \
		}                                                                      \
		(cond);                                                                \
	})

static void test_record(void **state)
{
	struct locus_node_record r, back;
	struct locus_error err = { 0 };
	char buf[LOCUS_CLUSTER_RECORD_MAX];
	int n;
	(void)state;

	self_record(&r, 3, 0x1234abcd5678ull);
	r.proto = LOCUS_CLUSTER_PROTO;
	snprintf(r.host, sizeof(r.host), "a \"quoted\" host\\");
	n = locus_node_record_format(&r, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(locus_node_record_parse(buf, (size_t)n, 3, 7, &back, &err), 0);
	assert_memory_equal(&r, &back, sizeof(r));
	assert_int_equal(locus_node_record_format(&r, buf, 40), -LOCUS_ERANGE);

	static const struct {
		const char *json;
		int code;
		const char *says;
	} bad[] = {
		{ "[1]", -LOCUS_EPARSE, "not a JSON object" },
		{ "{\"node\":3", -LOCUS_EPARSE, "not a JSON object" },
		{ "{\"node\":4,\"cluster\":\"7\"}", -LOCUS_EPARSE, "names another node" },
		{ "{\"node\":3,\"cluster\":\"8\"}", -LOCUS_EPARSE, "of cluster another one" },
		{ "{\"node\":3,\"cluster\":\"7\",\"proto\":1}", -LOCUS_EVERSION, "protocol 1" },
		{ "{\"node\":3,\"cluster\":\"7\",\"proto\":4,\"gpus\":0}", -LOCUS_EPARSE, "gpus" },
		{ "{\"node\":3,\"cluster\":\"7\",\"proto\":4,\"gpus\":4,\"rails\":[]}", -LOCUS_EPARSE,
		  "rails" },
		{ "{\"node\":3,\"cluster\":\"7\",\"proto\":4,\"gpus\":4,\"rails\":[\"1.2.3.4\"]}",
		  -LOCUS_EPARSE, "rail 0" },
		{ "{\"node\":3,\"cluster\":\"7\",\"proto\":4,\"gpus\":4,\"rails\":[\"1.2.3.4:0\"]}",
		  -LOCUS_EPARSE, "rail 0" },
		{ "{\"node\":3,\"cluster\":\"7\",\"proto\":4,\"gpus\":4,\"rails\":[\"h:1\"]}",
		  -LOCUS_EPARSE, "rail 0" },
		{ "{\"node\":3,\"cluster\":\"7\",\"proto\":4,\"gpus\":4,\"rails\":[\"1.2.3.4:1\"],"
		  "\"state\":\"gone\"}", -LOCUS_EPARSE, "state" },
		{ "{\"node\":3,\"cluster\":\"7\",\"proto\":4,\"gpus\":4,\"rails\":[\"1.2.3.4:1\"],"
		  "\"state\":\"up\",\"boot\":\"0\"}", -LOCUS_EPARSE, "boot" },
		{ "{\"node\":3,\"node\":3}", -LOCUS_EPARSE, "not a JSON object" },
		{ "{\"node\":\"-3\"}", -LOCUS_EPARSE, "names another node" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&err, 0, sizeof(err));
		if (locus_node_record_parse(bad[i].json, strlen(bad[i].json), 3, 7, &back, &err) !=
			    bad[i].code ||
		    !strstr(err.msg, bad[i].says))
			fail_msg("record %zu (%s): %d '%s'", i, bad[i].json, err.code, err.msg);
	}
	memset(buf, ' ', sizeof(buf));
	assert_int_equal(locus_node_record_parse(buf, sizeof(buf) + 1, 3, 7, &back, &err),
			 -LOCUS_ERANGE);
}

static bool all_see(struct view *v, int n, int expect)
{
	for (int i = 0; i < n; i++)
		if (!v[i].c || locus_cluster_state(v[i].c) != LOCUS_CLUSTER_MEMBER ||
		    (int)locus_cluster_n_members(v[i].c) != expect)
			return false;
	return true;
}

static void test_join_refuse_lapse(void **state)
{
	struct view v[4];
	(void)state;

	for (uint32_t i = 0; i < 3; i++)
		join(&v[i], i, 100 + i, NULL);
	assert_true(RUN_UNTIL(v, 3, all_see(v, 3, 3), 10000));
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++) {
			const struct locus_node_record *r = locus_cluster_node(v[i].c, (uint32_t)j);

			if (i == j) {
				assert_null(r);
				continue;
			}
			assert_non_null(r);
			assert_int_equal(v[i].up[j], 1);
			assert_int_equal(r->rail_port[1], 7100 + j);
			assert_int_equal(r->n_rails, 2);
			assert_string_equal(r->host, j == 0 ? "host-0" : j == 1 ? "host-1" : "host-2");
		}

	/* a second node 1: refused, naming the holder, while node 1 lives */
	join(&v[3], 1, 999, NULL);
	assert_true(RUN_UNTIL(v, 4, v[3].state == LOCUS_CLUSTER_REFUSED, 5000));
	assert_non_null(strstr(v[3].why, "node id 1 is in use by host host-1"));
	assert_true(locus_cluster_stats(v[3].c)->refusals >= 1);
	RUN_UNTIL(v, 4, false, 1500); /* it stays refused */
	assert_int_equal(locus_cluster_state(v[3].c), LOCUS_CLUSTER_REFUSED);
	assert_int_equal(v[0].up[1], 1);
	/* node 1 leaves (its lease revoked): the others see it go, the newcomer takes the id */
	leave(&v[1]);
	assert_true(RUN_UNTIL(v, 4, v[0].gone[1] == 1 && v[2].gone[1] == 1 &&
					    locus_cluster_state(v[3].c) == LOCUS_CLUSTER_MEMBER &&
					    v[0].boot[1] == 999 && v[2].boot[1] == 999,
			      5000));
	assert_int_equal(v[0].up[1], 2);

	/* node 2 stops keeping its lease: gone for the others after the TTL, then back */
	{
		uint64_t t0 = now_ms();
		struct locus_cluster *hung = v[2].c;

		v[2].c = NULL; /* not polled: it neither keeps its lease nor hears of it */
		assert_true(RUN_UNTIL(v, 4, v[0].gone[2] == 1 && v[3].gone[2] == 1, 8000));
		assert_true(now_ms() - t0 >= 1000); /* not before the lease could lapse */
		v[2].c = hung;
	}
	assert_true(RUN_UNTIL(v, 4, v[0].up[2] == 2 && v[3].up[2] >= 1 &&
					    locus_cluster_state(v[2].c) == LOCUS_CLUSTER_MEMBER,
			      8000));
	assert_true(locus_cluster_stats(v[2].c)->lease_lost >= 1);
	for (int i = 0; i < 4; i++)
		if (v[i].c)
			leave(&v[i]);
}

/* A child that joins as node 5 with the lease file, then waits to be killed. */
static pid_t child_node(const char *lease_file)
{
	pid_t pid = fork();

	if (pid == 0) {
		struct view v;

		join(&v, 5, 555, lease_file);
		for (;;) {
			locus_cluster_poll(v.c, now_ms());
			usleep(2000);
		}
	}
	return pid;
}

static void test_restart_with_lease_file(void **state)
{
	char lease_file[128];
	struct view v[2];
	pid_t pid;
	(void)state;

	snprintf(lease_file, sizeof(lease_file), "%s/node5.lease", dir);
	join(&v[0], 0, 10, NULL);
	v[1].c = NULL;
	pid = child_node(lease_file);
	assert_true(RUN_UNTIL(v, 1, v[0].up[5] == 1, 10000));
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* started again with the lease file: a member at once, long before the lease lapses */
	{
		uint64_t t0 = now_ms();

		join(&v[1], 5, 556, lease_file);
		assert_true(RUN_UNTIL(v, 2, locus_cluster_state(v[1].c) == LOCUS_CLUSTER_MEMBER &&
						    v[0].boot[5] == 556,
				      5000));
		assert_true(now_ms() - t0 < 1500);
		assert_int_equal(v[0].gone[5], 0); /* the others never saw it go */
	}
	leave(&v[1]);
	assert_true(RUN_UNTIL(v, 1, v[0].gone[5] == 1, 5000));

	/* killed again, started again without the file: refused until the lease lapses */
	pid = child_node(lease_file);
	assert_true(RUN_UNTIL(v, 1, v[0].up[5] == 3, 10000));
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	join(&v[1], 5, 557, NULL);
	assert_true(RUN_UNTIL(v, 2, v[1].state == LOCUS_CLUSTER_REFUSED, 3000));
	assert_true(RUN_UNTIL(v, 2, locus_cluster_state(v[1].c) == LOCUS_CLUSTER_MEMBER, 8000));
	assert_int_equal(v[0].gone[5], 2);
	leave(&v[1]);
	leave(&v[0]);
	unlink(lease_file);
}

static void test_etcd_down(void **state)
{
	struct view v[2];
	struct locus_etcd_params ep = { .timeout_ms = 1000 };
	struct locus_etcd *raw;
	struct locus_etcd_op op = { .type = LOCUS_ETCD_PUT, .key = "/test/7/nodes/6",
				    .value = "{not json", .len = 9 };
	struct locus_etcd_resp r;
	struct locus_node_record good;
	char json[512];
	(void)state;

	join(&v[0], 0, 20, NULL);
	join(&v[1], 1, 21, NULL);
	assert_true(RUN_UNTIL(v, 2, all_see(v, 2, 2), 10000));
	etcd_srv_kill(&srv);
	assert_true(RUN_UNTIL(v, 2, v[0].state == LOCUS_CLUSTER_UNREACHABLE &&
					    v[1].state == LOCUS_CLUSTER_UNREACHABLE,
			      10000));
	RUN_UNTIL(v, 2, false, 3000); /* longer than the lease: nothing is dropped for it */
	assert_int_equal(v[0].gone[1], 0);
	assert_int_equal(v[1].gone[0], 0);
	assert_non_null(locus_cluster_node(v[0].c, 1));
	assert_true(locus_cluster_stats(v[0].c)->etcd_errors > 0);
	assert_int_equal(etcd_srv_restart(&srv), 0);
	assert_true(RUN_UNTIL(v, 2, all_see(v, 2, 2), 10000));

	/* a malformed record: refused and counted; a good one for the same node is taken */
	ep.endpoints = srv.url;
	assert_int_equal(locus_etcd_open(&ep, &raw, NULL), 0);
	assert_int_equal(locus_etcd_call_op(raw, &op, &r), 0);
	locus_etcd_resp_free(&r);
	assert_true(RUN_UNTIL(v, 2, v[0].bad[6] == 1 && v[1].bad[6] == 1, 5000));
	assert_non_null(strstr(v[0].why, "node 6's record is not a JSON object"));
	assert_null(locus_cluster_node(v[0].c, 6));
	self_record(&good, 6, 66);
	good.proto = LOCUS_CLUSTER_PROTO;
	op.len = (size_t)locus_node_record_format(&good, json, sizeof(json));
	op.value = json;
	assert_int_equal(locus_etcd_call_op(raw, &op, &r), 0);
	locus_etcd_resp_free(&r);
	assert_true(RUN_UNTIL(v, 2, v[0].up[6] == 1 && v[1].up[6] == 1, 5000));
	/* its key deleted: gone */
	op.type = LOCUS_ETCD_DELETE;
	assert_int_equal(locus_etcd_call_op(raw, &op, &r), 0);
	locus_etcd_resp_free(&r);
	assert_true(RUN_UNTIL(v, 2, v[0].gone[6] == 1 && v[1].gone[6] == 1, 5000));
	locus_etcd_close(raw);
	leave(&v[0]);
	leave(&v[1]);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/locus-cluster-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	return etcd_srv_start(&srv, false);
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	etcd_srv_destroy(&srv);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_record),
		cmocka_unit_test(test_join_refuse_lapse),
		cmocka_unit_test(test_restart_with_lease_file),
		cmocka_unit_test(test_etcd_down),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
