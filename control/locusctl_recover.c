// SPDX-License-Identifier: MIT
/*
 * locusctl recover --cluster: the cluster's placement follows its live ranks
 * without an operator. Run one on every node (deploy/locus-recover.service):
 * they elect a leader through etcd (a key held under the leader's lease, so
 * a leader that dies is replaced within a lease), and the leader, every
 * --interval:
 *
 *  1. reads the members and every node's ranks/<node> (locus_cluster_ranks.h:
 *     live, lost, pending, cut off) and the placement in force;
 *  2. when the placement has a copy on a lost rank, or a live rank holds
 *     nothing (a node back, or a replacement), and that stayed so for
 *     --settle-ms, fits a placement over the live ranks with the fewest moves
 *     (locus_gracefit_adapt) and says where each gained copy's weights come
 *     from (locus_placement_fetches: the nearest live holder);
 *  3. pushes it in two phases (push --cluster): every member stages it, its
 *     rank clients load what they gain and acknowledge, and it commits.
 *
 * Masking does not wait for this: every engine stops planning rows to a lost
 * rank within a load period. This puts the lost experts back.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "locus_cluster_ranks.h"
#include "locus_err_priv.h"
#include "locus_etcd.h"
#include "locus_grace.h"
#include "locus_gracefit.h"
#include "locus_placement.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locusctl.h"
#include "locusctl_cluster.h"

static volatile sig_atomic_t stop;

static int arg_given(int argc, char **argv, const char *name)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void nap_ms(uint64_t ms)
{
	struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) && errno == EINTR && !stop)
		;
}

struct recover {
	struct copts o;
	struct locus_etcd *e;
	int64_t lease;
	uint64_t lease_at_ms;        /* next keepalive */
	int leader;
	char me[128];
	/* the placement in force */
	uint64_t gen;
	void *blob;
	size_t len;
	const void *pl;              /* its GRACE payload, checked once when fetched */
	size_t plen;
	struct locus_ranks_view view;
	uint8_t *member;
	struct locus_ranks_report *reps;
	const struct locus_ranks_report **rep;
	/* a change waiting to settle: its first sighting, and what it was */
	uint64_t since_ms;
	uint64_t *sig;
	uint32_t commits;
};

/* Keep the lease; take the leader key when nobody holds it. -1 on an etcd error. */
static int campaign(struct recover *rc, struct locus_error *err)
{
	char k[300];
	struct locus_etcd_resp r;
	int ret;

	if (!rc->lease || mono_ms() >= rc->lease_at_ms) {
		ret = locus_etcd_call_lease(rc->e, rc->lease ? LOCUS_ETCD_LEASE_KEEPALIVE
							      : LOCUS_ETCD_LEASE_GRANT,
					    rc->lease ? rc->lease : (int64_t)rc->o.lease_s, &r);
		if (ret == 0 && !rc->lease)
			rc->lease = r.lease_id;
		if (ret == 0 && rc->lease && r.ttl == 0) {
			/* expired while we were away: a new one, and the leadership is gone */
			rc->lease = 0;
			rc->leader = 0;
		}
		if (ret < 0)
			*err = r.err;
		locus_etcd_resp_free(&r);
		if (ret < 0)
			return -1;
		rc->lease_at_ms = mono_ms() + rc->o.lease_s * 1000 / 3;
		if (!rc->lease)
			return 0;
	}
	if (rc->leader)
		return 0;
	cl_key(k, sizeof(k), &rc->o, "recover/leader");
	{
		struct locus_etcd_cmp cmp = { .key = k, .target = LOCUS_ETCD_CREATE_REV,
					      .result = LOCUS_ETCD_EQ, .rev = 0 };
		struct locus_etcd_op put = { .type = LOCUS_ETCD_PUT, .key = k, .value = rc->me,
					     .len = strlen(rc->me), .lease = rc->lease };
		struct locus_etcd_op get = { .type = LOCUS_ETCD_GET, .key = k };
		struct locus_etcd_txn t = { .cmp = &cmp, .n_cmp = 1, .success = &put,
					    .n_success = 1, .failure = &get, .n_failure = 1 };

		ret = locus_etcd_call_txn(rc->e, &t, &r);
		if (ret < 0) {
			*err = r.err;
			locus_etcd_resp_free(&r);
			return -1;
		}
		/* ours already (a keepalive kept it): lead on */
		rc->leader = r.succeeded || (r.n_kvs && r.kvs[0].lease == rc->lease);
		locus_etcd_resp_free(&r);
	}
	if (rc->leader) {
		printf("recover: %s leads the recovery of cluster %" PRIu64 "\n", rc->me,
		       rc->o.cluster);
		fflush(stdout);
	}
	return 0;
}

/* Members and their ranks/<node> reports into the view. */
static int read_ranks(struct recover *rc, uint32_t n_nodes, uint32_t gpn,
		      struct locus_error *err)
{
	uint32_t *ids = calloc(n_nodes + 1, sizeof(*ids));
	char k[300];
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = k, .prefix = true };
	struct locus_etcd_resp r;
	int n;

	if (!ids)
		return -locus_error_set(err, ENOMEM, "out of memory");
	n = cl_members_at(rc->e, &rc->o, ids, n_nodes + 1, NULL, err);
	if (n < 0) {
		free(ids);
		return n;
	}
	memset(rc->member, 0, n_nodes);
	for (int i = 0; i < n; i++)
		if (ids[i] < n_nodes)
			rc->member[ids[i]] = 1;
	free(ids);
	for (uint32_t i = 0; i < n_nodes; i++)
		rc->rep[i] = NULL;
	cl_key(k, sizeof(k), &rc->o, "ranks/");
	if (locus_etcd_call_op(rc->e, &op, &r) < 0) {
		*err = r.err;
		locus_etcd_resp_free(&r);
		return -err->code;
	}
	for (size_t i = 0; i < r.n_kvs; i++) {
		char *end;
		unsigned long node = strtoul(r.kvs[i].key + strlen(k), &end, 10);
		struct locus_error why = { 0 };

		if (*end || node >= n_nodes)
			continue;
		if (locus_ranks_report_parse(r.kvs[i].value, r.kvs[i].value_len, (uint32_t)node,
					     n_nodes, gpn, &rc->reps[node], &why) < 0) {
			fprintf(stderr, "recover: %s (ignored)\n", why.msg);
			continue;
		}
		rc->rep[node] = &rc->reps[node];
	}
	locus_etcd_resp_free(&r);
	locus_ranks_view_update(&rc->view, rc->member, rc->rep);
	return 0;
}

/* The placement in force, fetched when its generation moved. 0: have it; 1: none yet. */
static int read_placement(struct recover *rc, struct locus_error *err)
{
	uint64_t gen;
	int64_t rev;
	void *b;
	size_t len;
	const void *pl;
	size_t plen;

	if (cl_current(rc->e, &rc->o, 1, &gen, &rev, err) < 0)
		return -1;
	if (!gen)
		return 1;
	if (gen == rc->gen)
		return 0;
	if (cl_fetch_blob_mem(rc->e, &rc->o, 1, gen, &b, &len, err) < 0)
		return -1;
	if (locus_grace_blob_check(b, len, &pl, &plen, err) < 0) {
		free(b);
		return -1;
	}
	free(rc->blob);
	rc->blob = b;
	rc->len = len;
	rc->pl = pl;
	rc->plen = plen;
	rc->gen = gen;
	return 0;
}

/* Weight fetches of old -> nb: cross-node ones from the nearest holder vs the old primary. */
static void report_fetches(const struct recover *rc, const void *nb, size_t nlen,
			   const uint64_t *avoid, uint32_t gpn)
{
	struct locus_placement_fetch *f = NULL;
	struct locus_error err = { 0 };
	uint32_t n = 0, storage = 0, local = 0, cross = 0, cross_primary = 0;

	if (locus_placement_fetches(rc->blob, rc->len, nb, nlen, avoid, NULL, 0, &n, &err) < 0 ||
	    !(f = calloc(n + 1, sizeof(*f))) ||
	    locus_placement_fetches(rc->blob, rc->len, nb, nlen, avoid, f, n, &n, &err) < 0) {
		printf("recover: weight sources not planned: %s\n", err.msg[0] ? err.msg
											  : "out of memory");
		free(f);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (f[i].src == LOCUS_PLACEMENT_STORAGE)
			storage++;
		else if (f[i].src / gpn == f[i].dst / gpn)
			local++;
		else
			cross++;
		cross_primary += f[i].old_primary == LOCUS_PLACEMENT_STORAGE ||
				 f[i].old_primary / gpn != f[i].dst / gpn;
	}
	printf("recover: %u expert copies to load: %u from a holder on the same node, %u from "
	       "another node, %u from storage (no live holder); from the old primary instead, "
	       "%u would cross nodes or come from storage", n, local, cross, storage,
	       cross_primary);
	if (rc->o.expert_bytes)
		printf(" (%.3f GB across nodes from the nearest holder, %.3f GB from the old "
		       "primary)", (double)cross * (double)rc->o.expert_bytes / 1e9,
		       (double)(cross_primary - storage) * (double)rc->o.expert_bytes / 1e9);
	printf("\n");
	free(f);
}

/* One leader round: 1 when a placement was committed, 0 nothing to do, -1 an error. */
static int round_once(struct recover *rc, struct locus_error *err)
{
	const struct locus_grace_dims *d;
	struct locus_gracefit_adapt rep;
	struct locus_grace_view v;
	size_t nlen;
	uint32_t N, gpn, uses = 0, n_idle = 0;
	uint64_t *avoid = NULL, *idle = NULL, now = mono_ms(), t0;
	void *nb = NULL;
	int ret;

	ret = read_placement(rc, err);
	if (ret)
		return ret < 0 ? -1 : 0;
	locus_grace_view_init(&v, (void *)(uintptr_t)rc->pl, rc->plen, NULL);
	d = v.dims;
	N = locus_grace_n_ranks(d);
	gpn = d->gpus_per_node;
	if (rc->view.n_nodes != d->n_nodes || rc->view.gpus_per_node != gpn) {
		locus_ranks_view_free(&rc->view);
		free(rc->member);
		free(rc->reps);
		free(rc->rep);
		free(rc->sig);
		rc->member = calloc(d->n_nodes, 1);
		rc->reps = calloc(d->n_nodes, sizeof(*rc->reps));
		rc->rep = calloc(d->n_nodes, sizeof(*rc->rep));
		rc->sig = calloc(2 * ((N + 63) / 64) + 1, 8);
		if (!rc->member || !rc->reps || !rc->rep || !rc->sig ||
		    locus_ranks_view_init(&rc->view, d->n_nodes, gpn, err) < 0) {
			if (!err->msg[0])
				locus_error_set(err, ENOMEM, "out of memory");
			return -1;
		}
	}
	if (read_ranks(rc, d->n_nodes, gpn, err) < 0)
		return -1;
	avoid = calloc(rc->view.words, 8);
	idle = calloc(rc->view.words, 8);
	if (!avoid || !idle) {
		free(avoid);
		free(idle);
		locus_error_set(err, ENOMEM, "out of memory");
		return -1;
	}
	/* the placement goes over the live ranks only: lost and pending ones hold nothing */
	for (uint32_t w = 0; w < rc->view.words; w++)
		avoid[w] = ~rc->view.live[w];
	if (N % 64)
		avoid[N / 64] &= (1ull << (N % 64)) - 1;
	uses = locus_gracefit_uses_lost(&v, rc->view.lost, idle);
	for (uint32_t w = 0; w < rc->view.words; w++) {
		idle[w] &= rc->view.live[w];
		n_idle += (uint32_t)__builtin_popcountll(idle[w]);
	}
	ret = 0;
	if ((!uses && !n_idle) || !rc->view.n_live) {
		rc->since_ms = 0;
		goto out;
	}
	/* the same change for --settle-ms before acting: a rank restarting in place is not lost */
	if (!rc->since_ms || memcmp(rc->sig, rc->view.lost, 8 * rc->view.words) ||
	    memcmp(rc->sig + rc->view.words, idle, 8 * rc->view.words) ||
	    rc->sig[2 * rc->view.words] != rc->gen) {
		rc->since_ms = now;
		memcpy(rc->sig, rc->view.lost, 8 * rc->view.words);
		memcpy(rc->sig + rc->view.words, idle, 8 * rc->view.words);
		rc->sig[2 * rc->view.words] = rc->gen;
		printf("recover: placement generation %" PRIu64 " has %u copies on %u lost "
		       "rank(s); %u live rank(s) hold nothing; %u live, %u pending\n", rc->gen,
		       uses, rc->view.n_lost, n_idle, rc->view.n_live,
		       N - rc->view.n_live - rc->view.n_lost);
		fflush(stdout);
	}
	if (now - rc->since_ms < rc->o.settle_ms)
		goto out;
	t0 = mono_ms();
	if (locus_gracefit_adapt(rc->pl, rc->plen, avoid, rc->o.skew, (uint32_t)rc->o.max_moves, &nb,
				 &nlen, &rep, err) < 0) {
		ret = -1;
		goto out;
	}
	printf("recover: a placement over the %u live rank(s): %u copies dropped, %u replicas "
	       "promoted, %u experts from storage, %u copies moved to even the load; skew %.3f, "
	       "capacity %u, replica budget %u (%" PRIu64 " ms to fit)\n", rc->view.n_live,
	       rep.dropped, rep.promoted, rep.orphans, rep.moved, rep.skew_after, rep.capacity,
	       rep.replica_budget, mono_ms() - t0);
	report_fetches(rc, nb, nlen, avoid, gpn);
	fflush(stdout);
	if (cl_push_blob(&rc->o, nb, nlen, err) != 0) {
		if (err->msg[0]) {
			fprintf(stderr, "recover: the push failed: %s\n", err->msg);
			locus_error_clear(err);
		}
		printf("recover: not committed; trying again in %" PRIu64 " ms\n",
		       rc->o.settle_ms);
		rc->since_ms = mono_ms(); /* wait a settle period before the next try */
		goto out;
	}
	if (rc->o.out && locus_tbl_write_file(rc->o.out, nb, nlen, err) < 0) {
		ret = -1;
		goto out;
	}
	printf("recover: committed %" PRIu64 " ms after the change was first seen\n",
	       mono_ms() - rc->since_ms);
	fflush(stdout);
	rc->since_ms = 0;
	rc->commits++;
	ret = 1;
out:
	free(nb);
	free(avoid);
	free(idle);
	return ret;
}

int locusctl_recover_cluster(int argc, char **argv)
{
	struct recover rc = { 0 };
	struct locus_error err = { 0 };
	char host[64] = "?";
	int ret = 1;

	if (cl_parse(argc, argv, &rc.o, 0) < 0) {
		fprintf(stderr, "usage: locusctl recover --cluster --etcd URL[,URL] [--interval S] "
				"[--settle-ms N] [--lease-s N] [--skew X] [--max-moves M] "
				"[--expert-bytes B] [--count N] [--cluster-id N] [--etcd-prefix P] "
				"[--etcd-cacert F --etcd-cert F --etcd-key F] [--timeout-ms N] "
				"[--prepare-timeout-ms N] [-o TABLE]\n");
		return 2;
	}
	if (rc.o.interval <= 0)
		rc.o.interval = 0.1;
	/* the leader keeps its lease between rounds only: a push outlasting it lets another
	 * node lead meanwhile, so the phases are bounded well inside it */
	if (!arg_given(argc, argv, "--lease-s"))
		rc.o.lease_s = 10;
	if (!arg_given(argc, argv, "--prepare-timeout-ms"))
		rc.o.prepare_ms = rc.o.lease_s * 1000 / 2;
	gethostname(host, sizeof(host) - 1);
	snprintf(rc.me, sizeof(rc.me), "%s pid %d", host, (int)getpid());
	rc.e = cl_open_etcd(&rc.o, &err);
	if (!rc.e)
		goto out;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("recover: %s watches cluster %" PRIu64 " (settle %" PRIu64 " ms, lease %" PRIu64
	       " s)\n", rc.me, rc.o.cluster, rc.o.settle_ms, rc.o.lease_s);
	fflush(stdout);
	while (!stop && (!rc.o.count || rc.commits < rc.o.count)) {
		if (campaign(&rc, &err) < 0 || (rc.leader && round_once(&rc, &err) < 0)) {
			/* etcd away or a bad value: say it, keep trying (leadership may be lost) */
			fprintf(stderr, "recover: %s\n", err.msg);
			locus_error_clear(&err);
			rc.leader = 0;
			nap_ms(1000);
			continue;
		}
		nap_ms((uint64_t)(rc.o.interval * 1000));
	}
	ret = 0;
out:
	if (err.msg[0])
		fprintf(stderr, "locusctl: %s\n", err.msg);
	if (rc.e && rc.lease) {
		struct locus_etcd_resp r;

		/* step down at once: another node takes over without waiting for the lease */
		locus_etcd_call_lease(rc.e, LOCUS_ETCD_LEASE_REVOKE, rc.lease, &r);
		locus_etcd_resp_free(&r);
	}
	locus_ranks_view_free(&rc.view);
	free(rc.member);
	free(rc.reps);
	free(rc.rep);
	free(rc.sig);
	free(rc.blob);
	locus_etcd_close(rc.e);
	return ret;
}
