// SPDX-License-Identifier: MIT
/*
 * The cluster's tables in etcd (dataplane/locus_cluster.h has the layout):
 *   push --cluster  store a table once under the next cluster-wide
 *                   generation (blob and current pointer in one
 *                   transaction), then wait for every member's report and
 *                   print it
 *   show --cluster  the generation in force per kind and each member's report
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "locus_cluster_loads.h"
#include "locus_err_priv.h"
#include "locus_etcd.h"
#include "locus_grace.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locusctl.h"
#include "locusctl_cluster.h"

#define N_KINDS 2
#define ETCD_REQUEST_MAX (3u << 19) /* etcd's default --max-request-bytes, 1.5 MiB */
static const char *const kind_name[N_KINDS] = { "eldr", "grace" }; /* by table channel */

static double now_s(void);


static int parse_dbl(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return -1;
	*out = v;
	return 0;
}

int cl_parse(int argc, char **argv, struct copts *o, int want_path)
{
	*o = (struct copts){ .prefix = "/locus", .cluster = 1, .timeout_ms = 10000,
			     .prepare_ms = 30000, .interval = -1, .threshold = 0.05, .decay = 1,
			     .window = 1, .every = 1, .max_moves = UINT32_MAX, .settle_ms = 1000,
			     .lease_s = 3, .skew = 0, .expert_bytes = 0 };
	o->etcd = getenv("LOCUS_ETCD");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--cluster"))
			continue;
		if (i + 1 >= argc && a[0] == '-')
			return -1;
		if (!strcmp(a, "--etcd"))
			o->etcd = argv[++i];
		else if (!strcmp(a, "--etcd-prefix"))
			o->prefix = argv[++i];
		else if (!strcmp(a, "--etcd-cacert"))
			o->cacert = argv[++i];
		else if (!strcmp(a, "--etcd-cert"))
			o->cert = argv[++i];
		else if (!strcmp(a, "--etcd-key"))
			o->key = argv[++i];
		else if (!strcmp(a, "--cluster-id")) {
			if (locusctl_parse_u64(argv[++i], UINT64_MAX, &o->cluster) < 0)
				return -1;
		} else if (!strcmp(a, "--timeout-ms")) {
			if (locusctl_parse_u64(argv[++i], 3600000, &o->timeout_ms) < 0)
				return -1;
		} else if (!strcmp(a, "--prepare-timeout-ms")) {
			if (locusctl_parse_u64(argv[++i], 3600000, &o->prepare_ms) < 0 ||
			    !o->prepare_ms)
				return -1;
		} else if (!strcmp(a, "--interval")) {
			if (parse_dbl(argv[++i], 0.001, 86400, &o->interval) < 0)
				return -1;
		} else if (!strcmp(a, "--threshold")) {
			if (parse_dbl(argv[++i], 0, 1, &o->threshold) < 0)
				return -1;
		} else if (!strcmp(a, "--decay")) {
			if (parse_dbl(argv[++i], 1e-9, 1, &o->decay) < 0)
				return -1;
		} else if (!strcmp(a, "--count")) {
			if (locusctl_parse_u64(argv[++i], UINT32_MAX, &o->count) < 0)
				return -1;
		} else if (!strcmp(a, "--window")) {
			if (locusctl_parse_u64(argv[++i], 65536, &o->window) < 0 || !o->window)
				return -1;
		} else if (!strcmp(a, "--every")) {
			if (locusctl_parse_u64(argv[++i], 1000000, &o->every) < 0 || !o->every)
				return -1;
		} else if (!strcmp(a, "--max-moves")) {
			if (locusctl_parse_u64(argv[++i], UINT32_MAX - 1, &o->max_moves) < 0)
				return -1;
		} else if (!strcmp(a, "--settle-ms")) {
			if (locusctl_parse_u64(argv[++i], 600000, &o->settle_ms) < 0)
				return -1;
		} else if (!strcmp(a, "--lease-s")) {
			if (locusctl_parse_u64(argv[++i], 3600, &o->lease_s) < 0 || o->lease_s < 1)
				return -1;
		} else if (!strcmp(a, "--skew")) {
			/* auto (0): each layer's balance as placed, plus 2 % */
			if (i + 1 < argc && !strcmp(argv[i + 1], "auto")) {
				o->skew = 0;
				i++;
			} else if (parse_dbl(argv[++i], 1, 100, &o->skew) < 0) {
				return -1;
			}
		} else if (!strcmp(a, "--expert-bytes")) {
			if (locusctl_parse_u64(argv[++i], UINT64_MAX / 65536, &o->expert_bytes) < 0)
				return -1;
		} else if (!strcmp(a, "-o")) {
			o->out = argv[++i];
		} else if (!strcmp(a, "--to")) {
			if (locusctl_parse_u64(argv[++i], INT64_MAX, &o->to) < 0 || !o->to)
				return -1;
		} else if (!strcmp(a, "--kind")) {
			i++;
			o->kind = !strcmp(argv[i], "eldr") ? 0 :
				  !strcmp(argv[i], "grace") || !strcmp(argv[i], "graceset") ? 1 : -1;
			if (o->kind < 0)
				return -1;
		} else if (want_path && !o->path && a[0] != '-') {
			o->path = a;
		} else {
			return -1;
		}
	}
	if (!o->etcd || (want_path && !o->path) || o->prefix[0] != '/')
		return -1;
	return 0;
}

struct locus_etcd *cl_open_etcd(const struct copts *o, struct locus_error *err)
{
	struct locus_etcd_params p = { .endpoints = o->etcd, .cacert = o->cacert, .cert = o->cert,
				       .key = o->key };
	struct locus_etcd *e;

	return locus_etcd_open(&p, &e, err) < 0 ? NULL : e;
}

/* <prefix>/<cluster>/<rest> */
void cl_key(char *buf, size_t len, const struct copts *o, const char *fmt, ...)
{
	size_t n = (size_t)snprintf(buf, len, "%s%s%" PRIu64 "/", o->prefix,
				    o->prefix[strlen(o->prefix) - 1] == '/' ? "" : "/", o->cluster);
	va_list ap;

	va_start(ap, fmt);
	if (n < len)
		vsnprintf(buf + n, len - n, fmt, ap);
	va_end(ap);
}

/* The member node ids (records under nodes/), sorted by etcd. */
int cl_members_at(struct locus_etcd *e, const struct copts *o, uint32_t *ids,
		      uint32_t max, int64_t *rev, struct locus_error *err)
{
	char k[300];
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = k, .prefix = true };
	struct locus_etcd_resp r;
	uint32_t n = 0;

	cl_key(k, sizeof(k), o, "nodes/");
	if (locus_etcd_call_op(e, &op, &r) < 0) {
		*err = r.err;
		locus_etcd_resp_free(&r);
		return -err->code;
	}
	for (size_t i = 0; i < r.n_kvs && n < max; i++) {
		const char *id = r.kvs[i].key + strlen(k);
		char *end;
		unsigned long v = strtoul(id, &end, 10);

		if (*id && !*end && v <= UINT32_MAX)
			ids[n++] = (uint32_t)v;
	}
	if (rev)
		*rev = r.revision;
	locus_etcd_resp_free(&r);
	return (int)n;
}

static int members(struct locus_etcd *e, const struct copts *o, uint32_t *ids, uint32_t max,
		   struct locus_error *err)
{
	return cl_members_at(e, o, ids, max, NULL, err);
}

struct report {
	uint64_t generation, local;
	int status, seen;
	char reason[300];
};

/* Node node's report for kind, if any. */
static void read_report(const struct locus_etcd_kv *kv, struct report *rp)
{
	json_error_t je;
	json_t *doc = json_loadb((const char *)kv->value, kv->value_len, 0, &je);
	const char *why;

	memset(rp, 0, sizeof(*rp));
	if (!json_is_object(doc)) {
		json_decref(doc);
		return;
	}
	rp->seen = 1;
	rp->generation = (uint64_t)json_integer_value(json_object_get(doc, "generation"));
	rp->local = (uint64_t)json_integer_value(json_object_get(doc, "local_generation"));
	rp->status = (int)json_integer_value(json_object_get(doc, "status"));
	why = json_string_value(json_object_get(doc, "reason"));
	snprintf(rp->reason, sizeof(rp->reason), "%s", why ? why : "");
	json_decref(doc);
}

/* Every member's report for kind, into rp[i] for ids[i]. */
static int reports(struct locus_etcd *e, const struct copts *o, unsigned kind,
		   const uint32_t *ids, uint32_t n, struct report *rp, struct locus_error *err)
{
	char k[300];
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = k, .prefix = true };
	struct locus_etcd_resp r;

	cl_key(k, sizeof(k), o, "reports/%s/", kind_name[kind]);
	if (locus_etcd_call_op(e, &op, &r) < 0) {
		*err = r.err;
		locus_etcd_resp_free(&r);
		return -err->code;
	}
	memset(rp, 0, n * sizeof(*rp));
	for (size_t i = 0; i < r.n_kvs; i++) {
		char *end;
		unsigned long v = strtoul(r.kvs[i].key + strlen(k), &end, 10);

		for (uint32_t j = 0; j < n && !*end; j++)
			if (ids[j] == v)
				read_report(&r.kvs[i], &rp[j]);
	}
	locus_etcd_resp_free(&r);
	return 0;
}

/*
 * A generation key's value: a decimal 1..INT64_MAX and nothing else. 0, or
 * -LOCUS_EPARSE naming the key (etcd is input like any other).
 */
static int parse_gen_kv(const struct locus_etcd_kv *kv, uint64_t *gen, struct locus_error *err)
{
	uint64_t g = 0;

	for (size_t i = 0; i < kv->value_len && i < 20; i++) {
		if (kv->value[i] < '0' || kv->value[i] > '9')
			break;
		g = g * 10 + (uint64_t)(kv->value[i] - '0');
		if (i + 1 == kv->value_len && g && g <= INT64_MAX && kv->value[0] != '0') {
			*gen = g;
			return 0;
		}
	}
	return locus_error_set(err, LOCUS_EPARSE, "etcd key %s holds '%.*s', not a generation",
			       kv->key, (int)(kv->value_len < 40 ? kv->value_len : 40),
			       (const char *)kv->value);
}

/* The generation in force for kind (0: none) and the key's mod revision. */
static int get_gen(struct locus_etcd *e, const char *k, uint64_t *gen, int64_t *mod_rev,
		   struct locus_error *err);

int cl_current(struct locus_etcd *e, const struct copts *o, unsigned kind, uint64_t *gen,
		   int64_t *mod_rev, struct locus_error *err)
{
	char k[300];

	cl_key(k, sizeof(k), o, "tables/current/%s", kind_name[kind]);
	return get_gen(e, k, gen, mod_rev, err);
}

/* One key's value as a generation (0: absent) and its mod revision (0: absent). */
static int get_gen(struct locus_etcd *e, const char *k, uint64_t *gen, int64_t *mod_rev,
		   struct locus_error *err)
{
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = k };
	struct locus_etcd_resp r;

	if (locus_etcd_call_op(e, &op, &r) < 0) {
		*err = r.err;
		locus_etcd_resp_free(&r);
		return -err->code;
	}
	*gen = 0;
	*mod_rev = 0;
	if (r.n_kvs && parse_gen_kv(&r.kvs[0], gen, err) < 0) {
		locus_etcd_resp_free(&r);
		return -LOCUS_EPARSE;
	}
	if (r.n_kvs)
		*mod_rev = r.kvs[0].mod_rev;
	locus_etcd_resp_free(&r);
	return 0;
}

struct ack {
	int seen, status;
	uint32_t ranks;
	char reason[300];
};

/* Every member's acknowledgement of the placement prepared at gen, into ak[i] for ids[i]. */
static int acks(struct locus_etcd *e, const struct copts *o, uint64_t gen, const uint32_t *ids,
		uint32_t n, struct ack *ak, struct locus_error *err)
{
	char k[300];
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = k, .prefix = true };
	struct locus_etcd_resp r;

	cl_key(k, sizeof(k), o, "tables/acks/grace/%" PRIu64 "/", gen);
	if (locus_etcd_call_op(e, &op, &r) < 0) {
		*err = r.err;
		locus_etcd_resp_free(&r);
		return -err->code;
	}
	memset(ak, 0, n * sizeof(*ak));
	for (size_t i = 0; i < r.n_kvs; i++) {
		char *end;
		unsigned long v = strtoul(r.kvs[i].key + strlen(k), &end, 10);
		json_t *doc = json_loadb((const char *)r.kvs[i].value, r.kvs[i].value_len, 0, NULL);
		const char *why = json_string_value(json_object_get(doc, "reason"));

		for (uint32_t j = 0; j < n && !*end && json_is_object(doc); j++) {
			if (ids[j] != v)
				continue;
			ak[j].seen = 1;
			ak[j].status = (int)json_integer_value(json_object_get(doc, "status"));
			ak[j].ranks = (uint32_t)json_integer_value(json_object_get(doc, "ranks"));
			snprintf(ak[j].reason, sizeof(ak[j].reason), "%s", why ? why : "");
		}
		json_decref(doc);
	}
	locus_etcd_resp_free(&r);
	return 0;
}

/*
 * Phase two for the placement prepared at gen, once every member read at
 * revision members_rev acknowledged it: one transaction that holds only
 * while gen is still the one prepared and no member record was created
 * since members_rev (a node that joined, or left and came back, has not
 * acknowledged). Two compares whatever the cluster's size, within etcd's
 * bound on a transaction's operations. A member that left since takes no
 * rows. Moves current/grace to gen and deletes the prepared key. 1
 * committed, 0 a compare failed, or -code.
 */
static int commit(struct locus_etcd *e, const struct copts *o, uint64_t gen, int64_t members_rev,
		  struct locus_error *err)
{
	char kprep[300], kcur[300], knodes[300], text[24];
	struct locus_etcd_cmp cmp[2] = {
		{ .key = kprep, .target = LOCUS_ETCD_VALUE, .result = LOCUS_ETCD_EQ,
		  .value = text },
		{ .key = knodes, .prefix = true, .target = LOCUS_ETCD_CREATE_REV,
		  .result = LOCUS_ETCD_LT, .rev = members_rev + 1 },
	};
	struct locus_etcd_op ok[2] = {
		{ .type = LOCUS_ETCD_PUT, .key = kcur, .value = text },
		{ .type = LOCUS_ETCD_DELETE, .key = kprep },
	};
	struct locus_etcd_txn t = { cmp, 2, ok, NULL, 2, 0 };
	struct locus_etcd_resp r;
	int ret;

	cl_key(kprep, sizeof(kprep), o, "tables/prepare/grace");
	cl_key(kcur, sizeof(kcur), o, "tables/current/grace");
	cl_key(knodes, sizeof(knodes), o, "nodes/");
	ok[0].len = cmp[0].len = (size_t)snprintf(text, sizeof(text), "%" PRIu64, gen);
	ret = locus_etcd_call_txn(e, &t, &r);
	if (ret < 0)
		*err = r.err;
	else
		ret = r.succeeded ? 1 : 0;
	locus_etcd_resp_free(&r);
	return ret;
}

/* Abort the placement prepared at gen (if it still is): nothing switches. 1, 0 or -code. */
static int abort_prepared(struct locus_etcd *e, const struct copts *o, uint64_t gen,
			  struct locus_error *err)
{
	char kprep[300], text[24];
	struct locus_etcd_cmp cmp = { .key = kprep, .target = LOCUS_ETCD_VALUE,
				      .result = LOCUS_ETCD_EQ, .value = text };
	struct locus_etcd_op del = { .type = LOCUS_ETCD_DELETE, .key = kprep };
	struct locus_etcd_txn t = { &cmp, 1, &del, NULL, 1, 0 };
	struct locus_etcd_resp r;
	int ret;

	cl_key(kprep, sizeof(kprep), o, "tables/prepare/grace");
	cmp.len = (size_t)snprintf(text, sizeof(text), "%" PRIu64, gen);
	ret = locus_etcd_call_txn(e, &t, &r);
	if (ret < 0)
		*err = r.err;
	else
		ret = r.succeeded ? 1 : 0;
	locus_etcd_resp_free(&r);
	return ret;
}

/* How many of the n members acknowledged (status 0) and refused, from ak. */
static void count_acks(const struct ack *ak, int n, int *ok, int *refused)
{
	*ok = *refused = 0;
	for (int i = 0; i < n; i++) {
		*ok += ak[i].seen && ak[i].status == 0;
		*refused += ak[i].seen && ak[i].status != 0;
	}
}

/*
 * A placement change an earlier push left prepared (it was killed, or lost
 * etcd): complete it when every member acknowledged it, else abort it, so
 * the cluster is on one placement before the next change starts.
 */
static int settle_prepared(struct locus_etcd *e, const struct copts *o, struct locus_error *err)
{
	char k[300];
	uint64_t p;
	int64_t rev, mrev;
	uint32_t ids[1024];
	struct ack ak[1024];
	int n, ok, refused, ret;

	cl_key(k, sizeof(k), o, "tables/prepare/grace");
	if (get_gen(e, k, &p, &rev, err) < 0)
		return -err->code;
	if (!p)
		return 0;
	n = cl_members_at(e, o, ids, 1024, &mrev, err);
	if (n < 0 || acks(e, o, p, ids, (uint32_t)n, ak, err) < 0)
		return -err->code;
	count_acks(ak, n, &ok, &refused);
	if (n && ok == n) {
		ret = commit(e, o, p, mrev, err);
		if (ret < 0)
			return ret;
		if (ret) {
			printf("completed placement generation %" PRIu64 ", left prepared by an "
			       "earlier push: all %d node(s) had acknowledged it\n", p, n);
			return 0;
		}
	}
	ret = abort_prepared(e, o, p, err);
	if (ret < 0)
		return ret;
	printf("aborted placement generation %" PRIu64 ", left prepared by an earlier push: %d "
	       "of %d node(s) had acknowledged it; the cluster stays on its placement\n", p, ok,
	       n);
	return 0;
}

/*
 * Phase two of a push: wait until every member acknowledged the placement
 * prepared at gen, then commit it; a refusal, or no answer from some member
 * within o->prepare_ms, aborts it. 0 committed, 1 aborted, or -code.
 */
static int prepare_wait(struct locus_etcd *e, const struct copts *o, uint64_t gen,
			struct locus_error *err)
{
	uint32_t ids[1024];
	struct ack ak[1024];
	double t0 = now_s(), waited;
	int64_t mrev;
	int n = 0, ok = 0, refused = 0, ret;

	for (;;) {
		n = cl_members_at(e, o, ids, 1024, &mrev, err);
		if (n < 0 || acks(e, o, gen, ids, (uint32_t)n, ak, err) < 0)
			return -err->code;
		count_acks(ak, n, &ok, &refused);
		if (refused)
			break;
		if (n && ok == n) {
			ret = commit(e, o, gen, mrev, err);
			if (ret < 0)
				return ret;
			if (ret) {
				uint32_t ranks = 0;

				for (int i = 0; i < n; i++)
					ranks += ak[i].ranks;
				printf("committed placement generation %" PRIu64 ": %d node(s) and "
				       "%u rank client(s) acknowledged it, %.0f ms from prepared "
				       "to committed\n", gen, n, ranks, (now_s() - t0) * 1000);
				return 0;
			}
			/* a member came or went meanwhile, or another push took over */
			{
				char k[300];
				uint64_t p;
				int64_t rev;

				cl_key(k, sizeof(k), o, "tables/prepare/grace");
				if (get_gen(e, k, &p, &rev, err) < 0)
					return -err->code;
				if (p != gen) {
					printf("placement generation %" PRIu64 " is no longer "
					       "prepared: another push settled it\n", gen);
					return 1;
				}
			}
		}
		if ((now_s() - t0) * 1000 > (double)o->prepare_ms)
			break;
		usleep(20000);
	}
	waited = (now_s() - t0) * 1000;
	for (int i = 0; i < n; i++) {
		if (!ak[i].seen)
			printf("node %u: did not acknowledge placement generation %" PRIu64 " within "
			       "%" PRIu64 " ms\n", ids[i], gen, o->prepare_ms);
		else if (ak[i].status)
			printf("node %u: refused placement generation %" PRIu64 ": %s (%s)\n", ids[i],
			       gen, ak[i].reason, locus_strerror(ak[i].status));
	}
	if (!n)
		printf("no member of cluster %" PRIu64 " in etcd to acknowledge it\n", o->cluster);
	ret = abort_prepared(e, o, gen, err);
	if (ret < 0)
		return ret;
	printf("aborted placement generation %" PRIu64 " after %.0f ms: %d of %d node(s) "
	       "acknowledged it%s; nothing switched\n", gen, waited, ok, n,
	       ret ? "" : " (it was no longer prepared)");
	return 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int usage_push(void)
{
	fprintf(stderr, "usage: locusctl push --cluster --etcd URL[,URL] [--cluster-id N] "
			"[--etcd-prefix P] [--etcd-cacert F --etcd-cert F --etcd-key F] "
			"[--timeout-ms N] [--prepare-timeout-ms N] TABLE\n");
	return 2;
}

int locusctl_push_cluster(int argc, char **argv)
{
	struct locus_error err = { 0 };
	struct locus_etcd *e = NULL;
	struct copts o;
	void *buf = NULL;
	size_t len;
	unsigned kind, ch;
	uint64_t cur = 0, gen = 0;
	int64_t rev;
	uint32_t ids[1024];
	struct report rp[1024];
	int n = 0, status = 1, ret, adopted = 0;
	double t0, waited;

	if (cl_parse(argc, argv, &o, 1) < 0)
		return usage_push();
	ret = locusctl_table_for_push(o.path, &buf, &len, &kind, &ch, &err);
	if (ret < 0 || ch >= N_KINDS)
		goto out;
	/* etcd takes 1.5 MiB per request by default (--max-request-bytes): say so up front */
	if (len > ETCD_REQUEST_MAX - 4096) {
		locus_error_set(&err, LOCUS_ERANGE, "%s is %zu bytes: etcd takes at most %u in one "
				"request unless its --max-request-bytes is raised, and a table is "
				"stored whole", o.path, len, ETCD_REQUEST_MAX);
		goto out;
	}
	e = cl_open_etcd(&o, &err);
	if (!e)
		goto out;
	/* a change an earlier push left half done is settled first */
	if (ch == 1 && settle_prepared(e, &o, &err) < 0)
		goto out;
	/*
	 * The next cluster-wide generation, from tables/next/<kind> (never given
	 * twice, aborted ones included), with the blob and, in the same
	 * transaction, the pointer: current/<kind>, or prepare/grace for a
	 * placement, which changes in two phases.
	 */
	for (int tries = 0; tries < 8; tries++) {
		char knext[300], kptr[300], kblob[340], text[24];
		uint64_t next;
		int64_t next_rev;
		struct locus_etcd_cmp cmp[2] = {
			{ .key = knext, .result = LOCUS_ETCD_EQ },
			{ .key = kptr, .target = LOCUS_ETCD_CREATE_REV, .result = LOCUS_ETCD_EQ },
		};
		struct locus_etcd_op ok[3] = {
			{ .type = LOCUS_ETCD_PUT, .key = kblob, .value = buf, .len = len },
			{ .type = LOCUS_ETCD_PUT, .key = kptr, .value = text },
			{ .type = LOCUS_ETCD_PUT, .key = knext, .value = text },
		};
		struct locus_etcd_txn t = { cmp, ch == 1 ? 2 : 1, ok, NULL, 3, 0 };
		struct locus_etcd_resp r;

		ret = cl_current(e, &o, ch, &cur, &rev, &err);
		cl_key(knext, sizeof(knext), &o, "tables/next/%s", kind_name[ch]);
		if (ret < 0 || get_gen(e, knext, &next, &next_rev, &err) < 0)
			goto out;
		gen = (next > cur ? next : cur) + 1;
		if (ch == 1)
			cl_key(kptr, sizeof(kptr), &o, "tables/prepare/grace");
		else
			cl_key(kptr, sizeof(kptr), &o, "tables/current/%s", kind_name[ch]);
		cl_key(kblob, sizeof(kblob), &o, "tables/blob/%s/%" PRIu64, kind_name[ch], gen);
		ok[1].len = ok[2].len = (size_t)snprintf(text, sizeof(text), "%" PRIu64, gen);
		cmp[0].target = next_rev ? LOCUS_ETCD_MOD_REV : LOCUS_ETCD_CREATE_REV;
		cmp[0].rev = next_rev;
		ret = locus_etcd_call_txn(e, &t, &r);
		locus_etcd_resp_free(&r);
		if (ret < 0) {
			err = r.err;
			goto out;
		}
		if (r.succeeded)
			break;
		gen = 0; /* another push took that generation, or prepared one: read again */
		if (ch == 1 && settle_prepared(e, &o, &err) < 0)
			goto out;
	}
	if (!gen) {
		locus_error_set(&err, EBUSY, "other pushes kept taking the next generation");
		goto out;
	}
	if (ch == 1) {
		printf("prepared %s table %s as the cluster's placement generation %" PRIu64
		       " (%zu bytes): waiting for every node's ranks to hold it (at most %" PRIu64
		       " ms)\n", locus_tbl_kind_name(kind), o.path, gen, len, o.prepare_ms);
		fflush(stdout);
		ret = prepare_wait(e, &o, gen, &err);
		if (ret != 0)
			goto out; /* aborted (1, said) or failed (err says) */
	}
	if (ch != 1)
		printf("stored %s table %s as the cluster's %s generation %" PRIu64 " (%zu bytes)\n",
		       locus_tbl_kind_name(kind), o.path, kind_name[ch], gen, len);
	/* every member answers under reports/: wait for them all, or the time-out */
	n = members(e, &o, ids, 1024, &err);
	if (n < 0)
		goto out;
	t0 = now_s();
	for (;;) {
		int done = 0;

		if (reports(e, &o, ch, ids, (uint32_t)n, rp, &err) < 0)
			goto out;
		for (int i = 0; i < n; i++)
			done += rp[i].seen && rp[i].generation >= gen;
		if (done == n || (now_s() - t0) * 1000 > (double)o.timeout_ms)
			break;
		usleep(50000);
	}
	waited = (now_s() - t0) * 1000;
	status = n ? 0 : 1;
	for (int i = 0; i < n; i++) {
		if (!rp[i].seen || rp[i].generation < gen) {
			printf("node %u: no answer for generation %" PRIu64 " within %" PRIu64 " ms\n",
			       ids[i], gen, o.timeout_ms);
			status = 1;
		} else if (rp[i].generation > gen) {
			printf("node %u: already on a later generation %" PRIu64 "\n", ids[i],
			       rp[i].generation);
		} else if (rp[i].status) {
			printf("node %u: refused generation %" PRIu64 ": %s (%s)\n", ids[i], gen,
			       rp[i].reason, locus_strerror(rp[i].status));
			status = 1;
		} else {
			printf("node %u: adopted generation %" PRIu64 " (its channel %u, generation "
			       "%" PRIu64 ")\n", ids[i], gen, ch, rp[i].local);
			adopted++;
		}
	}
	if (!n)
		printf("no member of cluster %" PRIu64 " in etcd: the table waits for them\n",
		       o.cluster);
	printf("%d of %d node(s) adopted it; %.0f ms from stored to the last answer\n", adopted, n,
	       waited);
out:
	if (err.msg[0]) {
		fprintf(stderr, "locusctl: %s\n", err.msg);
		status = 1;
	}
	locus_etcd_close(e);
	free(buf);
	return status;
}

int locusctl_show_cluster(int argc, char **argv)
{
	struct locus_error err = { 0 };
	struct locus_etcd *e;
	struct copts o;
	uint32_t ids[1024];
	struct report rp[1024];
	int n, status = 0;

	if (cl_parse(argc, argv, &o, 0) < 0) {
		fprintf(stderr, "usage: locusctl show --cluster --etcd URL[,URL] [--cluster-id N] "
				"[--etcd-prefix P] [--etcd-cacert F --etcd-cert F --etcd-key F]\n");
		return 2;
	}
	e = cl_open_etcd(&o, &err);
	if (!e || (n = members(e, &o, ids, 1024, &err)) < 0) {
		fprintf(stderr, "locusctl: %s\n", err.msg);
		locus_etcd_close(e);
		return 1;
	}
	printf("cluster %" PRIu64 ": %d member(s)\n", o.cluster, n);
	for (unsigned k = 0; k < N_KINDS; k++) {
		uint64_t gen;
		int64_t rev;

		if (cl_current(e, &o, k, &gen, &rev, &err) < 0 ||
		    reports(e, &o, k, ids, (uint32_t)n, rp, &err) < 0) {
			fprintf(stderr, "locusctl: %s\n", err.msg);
			status = 1;
			break;
		}
		printf("%s: generation %" PRIu64 "%s\n", kind_name[k], gen,
		       gen ? "" : " (none stored)");
		if (k == 1) {
			char kp[300];
			uint64_t p;
			int64_t prev;
			struct ack ak[1024];
			int ok, refused;

			cl_key(kp, sizeof(kp), &o, "tables/prepare/grace");
			if (get_gen(e, kp, &p, &prev, &err) == 0 && p &&
			    acks(e, &o, p, ids, (uint32_t)n, ak, &err) == 0) {
				count_acks(ak, n, &ok, &refused);
				printf("  generation %" PRIu64 " prepared: %d of %d node(s) "
				       "acknowledged it, %d refused\n", p, ok, n, refused);
			}
		}
		for (int i = 0; i < n; i++) {
			if (!rp[i].seen)
				printf("  node %u: no report\n", ids[i]);
			else if (rp[i].status)
				printf("  node %u: refused generation %" PRIu64 ": %s\n", ids[i],
				       rp[i].generation, rp[i].reason);
			else
				printf("  node %u: generation %" PRIu64 " in force (its channel "
				       "generation %" PRIu64 ")\n", ids[i], rp[i].generation,
				       rp[i].local);
		}
	}
	locus_etcd_close(e);
	return status;
}

/* The blob of the cluster's kind ch at generation gen, in a malloc'd *buf. */
int cl_fetch_blob_mem(struct locus_etcd *e, const struct copts *o, unsigned ch, uint64_t gen,
			  void **buf, size_t *len, struct locus_error *err)
{
	char k[340];
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = k };
	struct locus_etcd_resp r;
	int ret = 0;

	*buf = NULL;
	cl_key(k, sizeof(k), o, "tables/blob/%s/%" PRIu64, kind_name[ch], gen);
	if (locus_etcd_call_op(e, &op, &r) < 0) {
		*err = r.err;
		locus_etcd_resp_free(&r);
		return -err->code;
	}
	if (r.n_kvs != 1)
		ret = locus_error_set(err, ENOENT, "the cluster's %s generation %" PRIu64 " is not "
				      "in etcd", kind_name[ch], gen);
	else if (!(*buf = malloc(r.kvs[0].value_len ? r.kvs[0].value_len : 1)))
		ret = locus_error_set(err, ENOMEM, "out of memory");
	else
		memcpy(*buf, r.kvs[0].value, *len = r.kvs[0].value_len);
	locus_etcd_resp_free(&r);
	return ret;
}

/* The blob of the cluster's kind ch at generation gen into a temporary file (path). */
static int fetch_blob(struct locus_etcd *e, const struct copts *o, unsigned ch, uint64_t gen,
		      char *path, size_t plen, struct locus_error *err)
{
	void *buf;
	size_t len = 0;
	int fd, ret;

	ret = cl_fetch_blob_mem(e, o, ch, gen, &buf, &len, err);
	if (ret < 0)
		return ret;
	snprintf(path, plen, "/tmp/locusctl-cluster-XXXXXX");
	fd = mkstemp(path);
	ret = 0;
	if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
		ret = locus_error_set(err, errno ? errno : EIO, "a temporary copy of the table: %s",
				      strerror(errno ? errno : EIO));
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

int locusctl_diff_cluster(int argc, char **argv)
{
	struct locus_error err = { 0 };
	struct locus_etcd *e = NULL;
	struct copts o;
	char tmp[64] = "";
	void *buf = NULL;
	size_t len;
	unsigned kind, ch;
	uint64_t gen;
	int64_t rev;
	int ret = 2;

	if (cl_parse(argc, argv, &o, 1) < 0) {
		fprintf(stderr, "usage: locusctl diff --cluster --etcd URL[,URL] [--cluster-id N] "
				"[--etcd-prefix P] [--etcd-cacert F --etcd-cert F --etcd-key F] "
				"TABLE\n");
		return 2;
	}
	if (locusctl_table_for_push(o.path, &buf, &len, &kind, &ch, &err) < 0 || ch >= N_KINDS ||
	    !(e = cl_open_etcd(&o, &err)) || cl_current(e, &o, ch, &gen, &rev, &err) < 0)
		goto out;
	if (!gen) {
		printf("the cluster has no %s table yet\n", kind_name[ch]);
		ret = 1;
		goto out;
	}
	if (fetch_blob(e, &o, ch, gen, tmp, sizeof(tmp), &err) < 0)
		goto out;
	printf("--- the cluster's %s generation %" PRIu64 "\n+++ %s\n", kind_name[ch], gen, o.path);
	{
		char *dargv[] = { "diff", tmp, (char *)o.path, NULL };

		ret = locusctl_diff(3, dargv);
	}
out:
	if (err.msg[0])
		fprintf(stderr, "locusctl: %s\n", err.msg);
	if (tmp[0])
		unlink(tmp);
	locus_etcd_close(e);
	free(buf);
	return ret;
}

int locusctl_rollback_cluster(int argc, char **argv)
{
	struct locus_error err = { 0 };
	struct locus_etcd *e = NULL;
	struct copts o;
	char tmp[64] = "";
	uint64_t gen, to;
	int64_t rev;
	int ret = 1;

	if (cl_parse(argc, argv, &o, 0) < 0) {
		fprintf(stderr, "usage: locusctl rollback --cluster --etcd URL[,URL] [--kind "
				"eldr|grace] [--to GEN] [--cluster-id N] [--etcd-prefix P] "
				"[--etcd-cacert F --etcd-cert F --etcd-key F] [--timeout-ms N]\n");
		return 2;
	}
	e = cl_open_etcd(&o, &err);
	if (!e || cl_current(e, &o, (unsigned)o.kind, &gen, &rev, &err) < 0)
		goto out;
	to = o.to ? o.to : gen - 1;
	if (!gen || !to || to >= gen) {
		locus_error_set(&err, LOCUS_ERANGE, "the cluster's %s is at generation %" PRIu64
				": nothing older to go back to%s", kind_name[o.kind], gen,
				o.to ? " (--to names the current one or a later one)" : "");
		goto out;
	}
	/* the newest stored generation at or below the target */
	while (to && fetch_blob(e, &o, (unsigned)o.kind, to, tmp, sizeof(tmp), &err) < 0) {
		if (err.code != ENOENT || o.to)
			goto out;
		memset(&err, 0, sizeof(err));
		to--;
	}
	if (!to) {
		locus_error_set(&err, ENOENT, "no older %s generation is stored in etcd",
				kind_name[o.kind]);
		goto out;
	}
	printf("the cluster's %s goes back to generation %" PRIu64 ", stored again as the "
	       "next generation\n", kind_name[o.kind], to);
	locus_etcd_close(e);
	e = NULL;
	{
		char *pargv[argc + 2];
		int n = 0;

		pargv[n++] = "push";
		for (int i = 1; i < argc; i++) {
			if (!strcmp(argv[i], "--kind") || !strcmp(argv[i], "--to")) {
				i++;
				continue;
			}
			pargv[n++] = argv[i];
		}
		pargv[n++] = tmp;
		pargv[n] = NULL;
		ret = locusctl_push_cluster(n, pargv);
	}
out:
	if (err.msg[0])
		fprintf(stderr, "locusctl: %s\n", err.msg);
	if (tmp[0])
		unlink(tmp);
	locus_etcd_close(e);
	return ret;
}

/* ---- rebalance --cluster ------------------------------------------------------------------ */

/* What was last read of one node's loads: its boot and counts, to take deltas from. */
struct node_loads {
	uint32_t node;
	uint64_t boot;
	uint64_t *prev;          /* [L][E] */
};

struct cluster_loads {
	struct node_loads *n;
	uint32_t count, cap;
	uint64_t *tmp;           /* an aligned copy of one value */
	size_t tmp_len;
	uint32_t nodes_read, nodes_bad;
};

static struct node_loads *node_loads_of(struct cluster_loads *cl, uint32_t node, uint32_t LE,
					int *fresh)
{
	*fresh = 0;
	for (uint32_t i = 0; i < cl->count; i++)
		if (cl->n[i].node == node)
			return &cl->n[i];
	if (cl->count == cl->cap) {
		uint32_t cap = cl->cap ? 2 * cl->cap : 16;
		struct node_loads *nn = realloc(cl->n, cap * sizeof(*nn));

		if (!nn)
			return NULL;
		cl->n = nn;
		cl->cap = cap;
	}
	cl->n[cl->count] = (struct node_loads){ .node = node,
						.prev = calloc(LE ? LE : 1, sizeof(uint64_t)) };
	if (!cl->n[cl->count].prev)
		return NULL;
	*fresh = 1;
	return &cl->n[cl->count++];
}

/*
 * Every member's published loads (stats/expert_tokens/), as the tokens per
 * (layer, expert) since the last read, summed into W[L][E]. baseline: only
 * note where each node stands. A node seen for the first time after that, or
 * with a new boot, counts from 0. Returns the total, or < 0 (err).
 */
static double cluster_loads_read(struct locus_etcd *e, const struct copts *o,
				 struct cluster_loads *cl, uint32_t L, uint32_t E, double *W,
				 int baseline, struct locus_error *err)
{
	char k[300];
	struct locus_etcd_op op = { .type = LOCUS_ETCD_GET, .key = k, .prefix = true };
	struct locus_etcd_resp r;
	double tot = 0;

	cl_key(k, sizeof(k), o, "stats/expert_tokens/");
	if (locus_etcd_call_op(e, &op, &r) < 0) {
		*err = r.err;
		locus_etcd_resp_free(&r);
		return -1;
	}
	memset(W, 0, (size_t)L * E * sizeof(*W));
	cl->nodes_read = cl->nodes_bad = 0;
	for (size_t i = 0; i < r.n_kvs; i++) {
		const struct locus_cluster_loads_hdr *h;
		const uint64_t *cnt;
		struct node_loads *nl;
		char *end;
		unsigned long node = strtoul(r.kvs[i].key + strlen(k), &end, 10);
		int fresh;

		if (*end || node > UINT32_MAX)
			continue;
		if (r.kvs[i].value_len > cl->tmp_len) {
			free(cl->tmp);
			cl->tmp_len = r.kvs[i].value_len;
			if (!(cl->tmp = malloc(cl->tmp_len))) {
				cl->tmp_len = 0;
				continue;
			}
		}
		memcpy(cl->tmp, r.kvs[i].value, r.kvs[i].value_len);
		if (locus_cluster_loads_parse(cl->tmp, r.kvs[i].value_len, (uint32_t)node, &h, &cnt,
					      NULL) < 0) {
			cl->nodes_bad++;
			continue;
		}
		nl = node_loads_of(cl, (uint32_t)node, L * E, &fresh);
		if (!nl)
			continue;
		cl->nodes_read++;
		if (!fresh && nl->boot != h->boot) /* restarted: its counts began again at 0 */
			memset(nl->prev, 0, (size_t)L * E * sizeof(uint64_t));
		nl->boot = h->boot;
		for (uint32_t l = 0; l < L; l++) {
			for (uint32_t x = 0; x < E; x++) {
				uint64_t now = l < h->n_layers && x < h->n_experts ?
					       cnt[(size_t)l * h->n_experts + x] : 0;
				uint64_t *prev = &nl->prev[(size_t)l * E + x];
				double d = now >= *prev ? (double)(now - *prev) : (double)now;

				if (!baseline) {
					W[(size_t)l * E + x] += d;
					tot += d;
				}
				*prev = now;
			}
		}
	}
	locus_etcd_resp_free(&r);
	return tot;
}

static void cluster_loads_free(struct cluster_loads *cl)
{
	for (uint32_t i = 0; i < cl->count; i++)
		free(cl->n[i].prev);
	free(cl->n);
	free(cl->tmp);
}

static volatile sig_atomic_t rb_stop;

static void rb_on_signal(int sig)
{
	(void)sig;
	rb_stop = 1;
}

/* Push blob to the cluster as push --cluster would, with o's etcd options. 0 committed. */
int cl_push_blob(const struct copts *o, const void *blob, size_t len, struct locus_error *err)
{
	char path[64] = "/tmp/locusctl-rebalance-XXXXXX", cid[24], tmo[24], pmo[24];
	char *pargv[24];
	int n = 0, fd, ret;

	fd = mkstemp(path);
	if (fd < 0 || write(fd, blob, len) != (ssize_t)len) {
		ret = locus_error_set(err, errno ? errno : EIO, "a temporary copy of the plan: %s",
				      strerror(errno ? errno : EIO));
		if (fd >= 0) {
			close(fd);
			unlink(path);
		}
		return -ret;
	}
	close(fd);
	snprintf(cid, sizeof(cid), "%" PRIu64, o->cluster);
	snprintf(tmo, sizeof(tmo), "%" PRIu64, o->timeout_ms);
	snprintf(pmo, sizeof(pmo), "%" PRIu64, o->prepare_ms);
	pargv[n++] = "push";
	pargv[n++] = "--cluster";
	pargv[n++] = "--etcd";
	pargv[n++] = (char *)o->etcd;
	pargv[n++] = "--cluster-id";
	pargv[n++] = cid;
	pargv[n++] = "--etcd-prefix";
	pargv[n++] = (char *)o->prefix;
	if (o->cacert) {
		pargv[n++] = "--etcd-cacert";
		pargv[n++] = (char *)o->cacert;
	}
	if (o->cert) {
		pargv[n++] = "--etcd-cert";
		pargv[n++] = (char *)o->cert;
	}
	if (o->key) {
		pargv[n++] = "--etcd-key";
		pargv[n++] = (char *)o->key;
	}
	pargv[n++] = "--timeout-ms";
	pargv[n++] = tmo;
	pargv[n++] = "--prepare-timeout-ms";
	pargv[n++] = pmo;
	pargv[n++] = path;
	pargv[n] = NULL;
	ret = locusctl_push_cluster(n, pargv);
	unlink(path);
	return ret;
}

int locusctl_rebalance_cluster(int argc, char **argv)
{
	struct locus_gracefit_window win = { 0 };
	struct locus_error err = { 0 };
	struct cluster_loads cl = { 0 };
	struct locus_etcd *e = NULL;
	struct copts o;
	void *cur = NULL;
	const void *pl;
	size_t plen, cur_len = 0;
	double *W = NULL;
	uint64_t gen = 0, g;
	int64_t rev;
	uint32_t L, E;
	int ret = 1;

	if (cl_parse(argc, argv, &o, 0) < 0 || o.interval <= 0) {
		fprintf(stderr, "usage: locusctl rebalance --cluster --etcd URL[,URL] --interval S "
				"[--count N] [--threshold 0.05] [--window N] [--decay D] [--every N] "
				"[--max-moves M] [--cluster-id N] [--etcd-prefix P] [--etcd-cacert F "
				"--etcd-cert F --etcd-key F] [--timeout-ms N] [--prepare-timeout-ms N] "
				"[-o TABLE]\n");
		return 2;
	}
	e = cl_open_etcd(&o, &err);
	if (!e || cl_current(e, &o, 1, &gen, &rev, &err) < 0)
		goto out;
	if (!gen) {
		locus_error_set(&err, ENOENT, "the cluster has no placement yet: push one with "
				"push --cluster first");
		goto out;
	}
	if (cl_fetch_blob_mem(e, &o, 1, gen, &cur, &cur_len, &err) < 0 ||
	    locus_grace_blob_check(cur, cur_len, &pl, &plen, &err) < 0)
		goto out;
	L = ((const struct locus_grace_dims *)pl)->n_layers;
	E = ((const struct locus_grace_dims *)pl)->n_experts;
	W = calloc((size_t)L * E, sizeof(*W));
	if (!W || locus_gracefit_window_init(&win, L, E, (uint32_t)o.window, o.decay, &err) < 0) {
		if (!W)
			locus_error_set(&err, ENOMEM, "out of memory");
		goto out;
	}
	if (cluster_loads_read(e, &o, &cl, L, E, W, 1, &err) < 0)
		goto out;
	printf("rebalancing the cluster's placement generation %" PRIu64 " (%u layers x %u "
	       "experts) from the loads of %u node(s), every %.3g s\n", gen, L, E, cl.nodes_read,
	       o.interval);
	fflush(stdout);
	signal(SIGINT, rb_on_signal);
	signal(SIGTERM, rb_on_signal);
	rb_stop = 0;
	for (uint32_t round = 1; !rb_stop && (o.count == 0 || round <= o.count); round++) {
		struct locus_gracefit_rebalance rp;
		struct timespec ts = { .tv_sec = (time_t)o.interval,
				       .tv_nsec = (long)((o.interval - (double)(time_t)o.interval) *
							 1e9) };
		void *blob = NULL;
		size_t len;
		double tot;
		int rc;

		while (nanosleep(&ts, &ts) && errno == EINTR && !rb_stop)
			;
		/* another push moved the placement: plan from the one in force */
		if (cl_current(e, &o, 1, &g, &rev, &err) < 0)
			goto out;
		if (g != gen) {
			void *nb;
			size_t nlen;
			const void *npl;
			size_t nplen;

			if (cl_fetch_blob_mem(e, &o, 1, g, &nb, &nlen, &err) < 0)
				goto out;
			if (locus_grace_blob_check(nb, nlen, &npl, &nplen, &err) < 0 ||
			    ((const struct locus_grace_dims *)npl)->n_layers != L ||
			    ((const struct locus_grace_dims *)npl)->n_experts != E) {
				free(nb);
				if (!err.msg[0])
					locus_error_set(&err, LOCUS_ERANGE, "the cluster's placement "
							"changed shape (generation %" PRIu64 ")", g);
				goto out;
			}
			printf("rebalance %u: the cluster moved to placement generation %" PRIu64
			       ": planning from it\n", round, g);
			free(cur);
			cur = nb;
			cur_len = nlen;
			pl = npl;
			plen = nplen;
			gen = g;
		}
		tot = cluster_loads_read(e, &o, &cl, L, E, W, 0, &err);
		if (tot < 0)
			goto out;
		locus_gracefit_window_add(&win, W);
		if (round % o.every)
			continue;
		tot = locus_gracefit_window_loads(&win, W);
		if (tot == 0) {
			printf("rebalance %u: no tokens counted in the window (%u node(s) publish "
			       "loads)\n", round, cl.nodes_read);
			fflush(stdout);
			continue;
		}
		rc = locus_gracefit_rebalance_plan(pl, plen, W, (uint32_t)o.max_moves, &blob, &len,
						   &rp, &err);
		if (rc < 0)
			goto out;
		printf("rebalance %u: %.0f tokens from %u node(s) in the window (%u intervals), "
		       "skew %.3f, refit %.3f (%.3f with every layer, %u moves): gain %.3f for %u "
		       "moves, %u layers", round, tot, cl.nodes_read, win.n, rp.rho_now,
		       rp.rho_after, rp.rho_full, rp.moves_full, rp.rho_now - rp.rho_after,
		       rp.moves, rp.layers_changed);
		if (!locus_gracefit_should_push(rp.rho_now, rp.rho_after, o.threshold)) {
			printf(": below the %.1f%% threshold, kept\n", o.threshold * 100);
			fflush(stdout);
			free(blob);
			continue;
		}
		printf(": pushing to the cluster\n");
		fflush(stdout);
		if (cl_push_blob(&o, blob, len, &err) != 0) {
			if (err.msg[0])
				goto out;
			printf("rebalance %u: not committed; the placement in force stays the base\n",
			       round);
			fflush(stdout);
			free(blob);
			continue;
		}
		if (o.out && locus_tbl_write_file(o.out, blob, len, &err) < 0) {
			free(blob);
			goto out;
		}
		free(blob); /* the next round reads the committed one from etcd */
	}
	ret = 0;
out:
	if (err.msg[0])
		fprintf(stderr, "locusctl: %s\n", err.msg);
	free(W);
	free(cur);
	cluster_loads_free(&cl);
	locus_gracefit_window_free(&win);
	locus_etcd_close(e);
	return ret;
}
