// SPDX-License-Identifier: MIT
/* locusd's membership through etcd (locusd_cluster.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "locus_client_priv.h"
#include "locus_cluster.h"
#include "locus_counters_priv.h"
#include "locus_err_priv.h"
#include "locus_push.h"
#include "locus_pushsrv.h"
#include "locus_node.h"
#include "locus_shm_priv.h"
#include "locus_tblfile_priv.h"
#include "locusd_cluster.h"
#include "locusd_net.h"

enum {
	CC_STATE, CC_MEMBERS, CC_REQUESTS, CC_ERRORS, CC_JOINS, CC_REFUSALS, CC_LEASE_LOST,
	CC_UP, CC_GONE, CC_BAD, CC_WATCH, CC_RESYNCS, CC_PEER_REFUSED, CC_TABLES_SEEN,
	CC_TABLES_ADOPTED, CC_TABLES_REFUSED, CC_PREPARED, CC_PREPARE_ACKED, CC_PREPARE_REFUSED,
	CC_PREPARE_GONE, CC_PLACEMENT_STAGED, CC_PLACEMENT_GEN, CC_PLACEMENT_FREE_BELOW,
	CC_LOADS_PUBLISHED, CC_OUTSIDE, CC_N
};

static const struct {
	const char *name, *help;
	enum locus_ctr_kind kind;
} cc[CC_N] = {
	[CC_STATE] = { "cluster_state", "membership through etcd: 0 joining, 1 member, 2 node id "
		       "in use elsewhere, 3 etcd unreachable (membership kept)", LOCUS_CTR_GAUGE },
	[CC_MEMBERS] = { "cluster_members", "nodes with a record in etcd, this one included",
			 LOCUS_CTR_GAUGE },
	[CC_REQUESTS] = { "cluster_etcd_requests", "requests and watches sent to etcd",
			  LOCUS_CTR_COUNTER },
	[CC_ERRORS] = { "cluster_etcd_errors", "etcd requests and watches that failed (etcd "
			"unreachable or refusing)", LOCUS_CTR_COUNTER },
	[CC_JOINS] = { "cluster_joins", "times this node's record was written under its lease",
		       LOCUS_CTR_COUNTER },
	[CC_REFUSALS] = { "cluster_refusals", "claims of this node's id refused: another node "
			  "holds it", LOCUS_CTR_COUNTER },
	[CC_LEASE_LOST] = { "cluster_lease_lost", "times this node's lease or record was lost "
			    "(lapsed while etcd was unreachable, or deleted) and claimed again",
			    LOCUS_CTR_COUNTER },
	[CC_UP] = { "cluster_records_up", "other nodes' records that appeared or changed",
		    LOCUS_CTR_COUNTER },
	[CC_GONE] = { "cluster_records_gone", "other nodes' records that went away (stopped, "
		      "lease lapsed)", LOCUS_CTR_COUNTER },
	[CC_BAD] = { "cluster_records_bad", "records refused: not a node record, another "
		     "cluster or protocol (the last good one kept)", LOCUS_CTR_COUNTER },
	[CC_WATCH] = { "cluster_watch_restarts", "times the watch of the records ended and was "
		       "started again", LOCUS_CTR_COUNTER },
	[CC_RESYNCS] = { "cluster_resyncs", "times every record was read again (a compacted "
			 "revision)", LOCUS_CTR_COUNTER },
	[CC_PEER_REFUSED] = { "cluster_peers_refused", "records the transport refused: a node "
			      "id outside the cluster, or another number of rails",
			      LOCUS_CTR_COUNTER },
	[CC_TABLES_SEEN] = { "cluster_tables_seen", "generations of the cluster's tables (locusctl "
			     "push --cluster) this node learnt of", LOCUS_CTR_COUNTER },
	[CC_TABLES_ADOPTED] = { "cluster_tables_adopted", "cluster tables this node adopted (as "
				"a local push: the same validation)", LOCUS_CTR_COUNTER },
	[CC_TABLES_REFUSED] = { "cluster_tables_refused", "cluster tables this node refused or "
				"could not read (the table in force kept)", LOCUS_CTR_COUNTER },
	[CC_PREPARED] = { "cluster_placements_prepared", "placement changes prepared in etcd "
			  "that this node staged for its ranks", LOCUS_CTR_COUNTER },
	[CC_PREPARE_ACKED] = { "cluster_placements_acked", "prepared placements this node "
			       "acknowledged: every rank client taking part holds its experts",
			       LOCUS_CTR_COUNTER },
	[CC_PREPARE_REFUSED] = { "cluster_placements_refused", "prepared placements this node "
				 "refused (does not fit, unreadable): the change aborts",
				 LOCUS_CTR_COUNTER },
	[CC_PREPARE_GONE] = { "cluster_placements_unstaged", "prepared placements that went "
			      "away (committed or aborted)", LOCUS_CTR_COUNTER },
	[CC_PLACEMENT_STAGED] = { "cluster_placement_staged", "generation of the placement "
				  "prepared and staged here (0: none)", LOCUS_CTR_GAUGE },
	[CC_PLACEMENT_GEN] = { "cluster_placement_generation", "cluster generation of the "
			       "placement this node's engines plan with (0: none)",
			       LOCUS_CTR_GAUGE },
	[CC_PLACEMENT_FREE_BELOW] = { "cluster_placement_free_below", "every member plans with "
				      "this generation or a later one: the ranks may free older "
				      "weights", LOCUS_CTR_GAUGE },
	[CC_LOADS_PUBLISHED] = { "cluster_loads_published", "times this node's expert loads "
				 "went to etcd for a rebalance of the cluster (etcd_loads_s)",
				 LOCUS_CTR_COUNTER },
	[CC_OUTSIDE] = { "cluster_records_outside", "records of nodes in none of this node's "
			 "groups: members, never connected", LOCUS_CTR_COUNTER },
};

/* A cluster table on its way into this node's channel. */
struct pending {
	struct locusd_cluster *lc;
	unsigned kind;
	uint64_t gen;
	void *blob;             /* a copy while it waits for the push server */
	size_t len;
	uint8_t queued, in_push;
};

struct locusd_cluster {
	const struct locus_config *cfg;
	struct locus_cluster *c;
	struct locusd_net *net;
	void *block;
	uint64_t off[CC_N];
	uint64_t peer_refused;
	uint64_t outside;            /* records of nodes in none of this node's groups */
	uint64_t log_at_ms;          /* one "etcd unreachable" line per 10 s at most */
	struct locus_pushsrv *push;  /* the channels' writer */
	struct pending pend[LOCUS_CLUSTER_TABLE_KINDS];
	uint64_t adopted, refused;
	/* placement changes in two phases: the rank slots are told, their acks read */
	struct locus_node *node;     /* NULL: no slots (tests) */
	uint64_t staged;             /* generation staged for the ranks (0: none) */
	uint64_t acked;              /* the staged generation, once acknowledged */
	uint64_t staged_ms;
	uint64_t plan_gen;           /* cluster generation of the placement in force */
	uint64_t free_below;
	uint64_t files[4];           /* placement files written beside the sockets */
	uint64_t prepared, prep_acked, prep_refused, prep_gone;
	/* this node's expert loads, published for a rebalance of the cluster */
	int tok_idx;                 /* expert_tokens, -1: not found yet */
	uint64_t *tok, *tok_sent;
	struct locus_cluster_loads_hdr *loads;
	uint64_t loads_at_ms, loads_seq, loads_boot;
	uint64_t loads_published;
	/* the ranks attached here and the members this node cannot reach (ranks/<node>) */
	uint8_t member[LOCUS_CFG_MAX_NODES];
	char ranks_sent[2048];
	uint64_t ranks_at_ms;
	uint64_t ranks_published;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_up(void *arg, const struct locus_node_record *r)
{
	struct locusd_cluster *lc = arg;
	struct locus_error err = { 0 };

	int ret = lc->net ? locusd_net_member(lc->net, r->node, r->rail_ipv4, r->rail_port,
					      r->n_rails, &err) : 0;

	if (r->node < LOCUS_CFG_MAX_NODES)
		lc->member[r->node] = 1;
	fprintf(stderr, "locusd: cluster: node %u is up (host %s, %u rail(s)%s)%s\n", r->node,
		r->host, r->n_rails, r->draining ? ", draining" : "",
		ret == 1 ? ": in none of this node's groups, not connected" : "");
	if (ret == 1)
		lc->outside++;
	if (ret < 0) {
		lc->peer_refused++;
		fprintf(stderr, "locusd: cluster: node %u refused: %s\n", r->node, err.msg);
	}
}

static void on_gone(void *arg, uint32_t node)
{
	struct locusd_cluster *lc = arg;

	if (node < LOCUS_CFG_MAX_NODES)
		lc->member[node] = 0;
	fprintf(stderr, "locusd: cluster: node %u left (its record is gone)\n", node);
	if (lc->net)
		locusd_net_member(lc->net, node, NULL, NULL, 0, NULL);
}

static void on_bad(void *arg, uint32_t node, const struct locus_error *why)
{
	(void)arg;
	fprintf(stderr, "locusd: cluster: node %u's record refused: %s\n", node, why->msg);
}

static void on_state(void *arg, int state, const struct locus_error *why)
{
	struct locusd_cluster *lc = arg;
	uint64_t now = mono_ms();

	if (state == LOCUS_CLUSTER_UNREACHABLE) {
		if (now < lc->log_at_ms)
			return;
		lc->log_at_ms = now + 10000;
	}
	fprintf(stderr, "locusd: cluster: %s%s%s%s\n", locus_cluster_state_name(state),
		state == LOCUS_CLUSTER_UNREACHABLE ? " (running on the membership it has; joins "
						     "and table changes wait)" : "",
		why && why->msg[0] ? ": " : "", why ? why->msg : "");
}

static void refused(struct locusd_cluster *lc, unsigned kind, uint64_t gen, int status,
		    const char *why)
{
	lc->refused++;
	locus_cluster_report(lc->c, kind, gen, status, 0, why);
	fprintf(stderr, "locusd: cluster: %s table generation %llu refused: %s\n",
		locus_cluster_table_kind_name(kind), (unsigned long long)gen, why);
}

/* The push server's verdict on a cluster table: adopted or refused, reported in etcd. */
static void on_pushed(void *arg, const struct locus_push_rep *rep)
{
	struct pending *p = arg;
	struct locusd_cluster *lc = p->lc;
	char why[LOCUS_TABLE_REJECT_MSG + 64];

	p->in_push = 0;
	if (rep->status < 0) {
		refused(lc, p->kind, p->gen, rep->status, rep->msg);
	} else if (rep->n_refused) {
		snprintf(why, sizeof(why), "%s", rep->refused_msg);
		refused(lc, p->kind, p->gen, rep->refused_code ? rep->refused_code : -LOCUS_ESTATE,
			why);
	} else if (rep->timed_out) {
		refused(lc, p->kind, p->gen, -ETIMEDOUT, "the engines did not decide in time");
	} else {
		lc->adopted++;
		if (p->kind == LOCUS_TABLE_CH_GRACE)
			lc->plan_gen = p->gen;
		locus_cluster_report(lc->c, p->kind, p->gen, 0, rep->generation, "");
		fprintf(stderr, "locusd: cluster: %s table generation %llu adopted (channel %u "
			"generation %llu)\n", locus_cluster_table_kind_name(p->kind),
			(unsigned long long)p->gen, p->kind, (unsigned long long)rep->generation);
	}
}

/* Hand waiting tables to the push server (one per kind; a busy server: next pass). */
static void push_pending(struct locusd_cluster *lc)
{
	for (unsigned k = 0; k < LOCUS_CLUSTER_TABLE_KINDS; k++) {
		struct pending *p = &lc->pend[k];
		int ret;

		if (!p->queued || p->in_push)
			continue;
		ret = locus_pushsrv_submit(lc->push, k, p->blob, p->len, 5000, on_pushed, p);
		if (ret == -EBUSY)
			continue;
		p->queued = 0;
		free(p->blob);
		p->blob = NULL;
		if (ret < 0)
			refused(lc, k, p->gen, ret, strerror(-ret));
		else
			p->in_push = 1; /* on_pushed may have run already: it clears this */
	}
}

static void unlink_placement(struct locusd_cluster *lc, unsigned i)
{
	char path[256], sfx[40];

	snprintf(sfx, sizeof(sfx), ".placement.%" PRIu64, lc->files[i]);
	if (locus_shm_run_path(lc->cfg->instance, sfx, path, sizeof(path)) == 0)
		unlink(path);
	lc->files[i] = 0;
}

/*
 * Keep the blob of placement gen beside the sockets, where rank clients read
 * it (locus_client_placement_table). A file goes once a newer generation is
 * in force here; with every slot taken by newer ones (aborted changes), the
 * oldest that is neither staged, in force nor on its way in makes room.
 */
static void placement_file(struct locusd_cluster *lc, uint64_t gen, const void *blob, size_t len)
{
	char path[256], sfx[40];
	struct locus_error err = { 0 };
	uint64_t busy = lc->pend[LOCUS_TABLE_CH_GRACE].gen;
	int slot = -1, old = -1;

	for (unsigned i = 0; i < 4; i++) {
		if (lc->files[i] == gen)
			return;
		if (lc->files[i] && lc->files[i] < lc->plan_gen && lc->files[i] != busy)
			unlink_placement(lc, i);
		if (!lc->files[i])
			slot = (int)i;
		else if (lc->files[i] != lc->staged && lc->files[i] != lc->plan_gen &&
			 lc->files[i] != busy && (old < 0 || lc->files[i] < lc->files[old]))
			old = (int)i;
	}
	if (slot < 0 && old >= 0) {
		unlink_placement(lc, (unsigned)old);
		slot = old;
	}
	snprintf(sfx, sizeof(sfx), ".placement.%" PRIu64, gen);
	if (slot < 0 || locus_shm_run_path(lc->cfg->instance, sfx, path, sizeof(path)) < 0 ||
	    locus_tbl_write_file(path, blob, len, &err) < 0) {
		fprintf(stderr, "locusd: cluster: placement generation %" PRIu64 " not written "
			"for the ranks: %s\n", gen, err.msg[0] ? err.msg : path);
		return;
	}
	lc->files[slot] = gen;
}

static void unlink_placement_files(struct locusd_cluster *lc)
{
	for (unsigned i = 0; i < 4; i++)
		if (lc->files[i])
			unlink_placement(lc, i);
}

static void prepare_refused(struct locusd_cluster *lc, uint64_t gen, int status,
			    const char *why)
{
	lc->prep_refused++;
	locus_cluster_prepare_ack(lc->c, gen, status, 0, why);
	fprintf(stderr, "locusd: cluster: placement generation %" PRIu64 " refused at "
		"prepare: %s\n", gen, why);
}

/* Phase one: stage the prepared placement for the ranks, or refuse it. */
static void on_prepare(void *arg, uint64_t gen, const void *blob, size_t len,
		       const struct locus_error *why)
{
	struct locusd_cluster *lc = arg;
	struct locus_error err = { 0 };
	void *copy;

	if (!gen) {
		if (lc->staged) {
			lc->prep_gone++;
			fprintf(stderr, "locusd: cluster: placement generation %" PRIu64 " no "
				"longer prepared (committed or aborted)\n", lc->staged);
		}
		lc->staged = lc->acked = 0;
		return;
	}
	if (why) {
		prepare_refused(lc, gen, -why->code, why->msg);
		return;
	}
	copy = malloc(len ? len : 1);
	if (!copy) {
		prepare_refused(lc, gen, -ENOMEM, "out of memory for the placement");
		return;
	}
	memcpy(copy, blob, len);
	locus_tbl_set_generation(copy, len, gen);
	if (lc->node && locus_node_grace_check(lc->node, copy, len, &err) < 0) {
		free(copy);
		prepare_refused(lc, gen, -err.code, err.msg);
		return;
	}
	lc->staged = gen;
	lc->acked = 0;
	lc->staged_ms = mono_ms();
	lc->prepared++;
	placement_file(lc, gen, copy, len);
	free(copy);
	fprintf(stderr, "locusd: cluster: placement generation %" PRIu64 " (%zu bytes) prepared: "
		"staged for the ranks\n", gen, len);
}

static void on_plans_from(void *arg, uint64_t oldest)
{
	struct locusd_cluster *lc = arg;

	lc->free_below = oldest;
}

/*
 * Tell every slot the staged and planned generations, and acknowledge the
 * staged one once every rank client that takes part holds it.
 */
static void placement_slots(struct locusd_cluster *lc)
{
	size_t len, first, stride;
	unsigned count, taking = 0, holding = 0;
	uint8_t *base;

	if (!lc->node) {
		if (lc->staged && lc->acked != lc->staged)
			goto ack;
		return;
	}
	base = locus_node_client_region(lc->node, &len);
	locus_node_client_slots(lc->node, &first, &stride, &count);
	for (unsigned i = 0; i < count; i++) {
		struct locus_client_ctl *ctl = (void *)(base + first + (size_t)i * stride);
		uint64_t sp = __atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE);
		uint64_t acked;

		__atomic_store_n(&ctl->pl_current, lc->plan_gen, __ATOMIC_RELAXED);
		__atomic_store_n(&ctl->pl_free_below, lc->free_below, __ATOMIC_RELAXED);
		__atomic_store_n(&ctl->pl_staged, lc->staged, __ATOMIC_RELEASE);
		if (locus_client_state_of(sp) != LOCUS_CLIENT_ACTIVE ||
		    !(ctl->roles & LOCUS_ROLE_RANK))
			continue;
		if (!__atomic_load_n(&ctl->pl_part, __ATOMIC_ACQUIRE))
			continue; /* takes no part: its rows are not checked */
		acked = __atomic_load_n(&ctl->pl_acked, __ATOMIC_ACQUIRE);
		taking++;
		holding += acked >= lc->staged;
	}
	if (!lc->staged || lc->acked == lc->staged || holding < taking)
		return;
ack:
	lc->acked = lc->staged;
	lc->prep_acked++;
	locus_cluster_prepare_ack(lc->c, lc->staged, 0, taking, "");
	fprintf(stderr, "locusd: cluster: placement generation %" PRIu64 " acknowledged: %u "
		"rank client(s) hold it, %" PRIu64 " ms after it was staged\n", lc->staged, taking,
		mono_ms() - lc->staged_ms);
}

/*
 * Every etcd_loads_s: this node's expert_tokens (summed over its engines),
 * cut to the smallest box of layers and experts that holds every count,
 * published under its lease when it changed.
 */
static void publish_loads(struct locusd_cluster *lc)
{
	struct locus_counters *ctr = locus_node_counters(lc->node);
	const struct locus_ctr_info *in;
	uint32_t L = 0, E = 0, stride;
	uint64_t now = mono_ms();
	size_t len;

	if (!lc->cfg->etcd_loads_s || now < lc->loads_at_ms)
		return;
	lc->loads_at_ms = now + (uint64_t)lc->cfg->etcd_loads_s * 1000;
	if (lc->tok_idx < 0 && (lc->tok_idx = locus_counters_find(ctr, "expert_tokens")) < 0)
		return;
	in = locus_counters_info(ctr, (uint32_t)lc->tok_idx);
	if (!in || in->ndims != 2)
		return;
	stride = in->dim[1];
	if (!lc->tok) {
		lc->tok = calloc(in->n_elems, sizeof(*lc->tok));
		lc->tok_sent = calloc(in->n_elems, sizeof(*lc->tok_sent));
		lc->loads = malloc(sizeof(*lc->loads) + (size_t)in->n_elems * sizeof(uint64_t));
		if (!lc->tok || !lc->tok_sent || !lc->loads)
			return;
	}
	if (locus_counters_sum(ctr, (uint32_t)lc->tok_idx, lc->tok, in->n_elems) < 0 ||
	    !memcmp(lc->tok, lc->tok_sent, in->n_elems * sizeof(*lc->tok)))
		return;
	for (uint32_t l = 0; l < in->dim[0]; l++)
		for (uint32_t e = 0; e < stride; e++)
			if (lc->tok[(size_t)l * stride + e]) {
				L = l + 1;
				E = e + 1 > E ? e + 1 : E;
			}
	if (!L)
		return;
	*lc->loads = (struct locus_cluster_loads_hdr){
		.magic = LOCUS_CLUSTER_LOADS_MAGIC, .node = lc->cfg->node_id, .n_layers = L,
		.n_experts = E, .boot = lc->loads_boot, .seq = ++lc->loads_seq,
	};
	for (uint32_t l = 0; l < L; l++)
		memcpy((uint64_t *)(lc->loads + 1) + (size_t)l * E, lc->tok + (size_t)l * stride,
		       E * sizeof(uint64_t));
	len = sizeof(*lc->loads) + (size_t)L * E * sizeof(uint64_t);
	if (locus_cluster_publish_loads(lc->c, lc->loads, len) == 0) {
		memcpy(lc->tok_sent, lc->tok, in->n_elems * sizeof(*lc->tok));
		lc->loads_published++;
	}
}

/*
 * Every 20 ms: the GPUs of this node with a rank attached and the members
 * it talks with but cannot reach, published under its lease when they
 * changed: what a recovery (locusctl recover) fits the survivors from.
 */
static void publish_ranks(struct locusd_cluster *lc)
{
	uint32_t attached = locus_node_ranks_attached(lc->node);
	uint64_t now = mono_ms();
	char buf[sizeof(lc->ranks_sent)];
	size_t n;
	int first = 1;

	if (now < lc->ranks_at_ms)
		return;
	lc->ranks_at_ms = now + 20;
	n = (size_t)snprintf(buf, sizeof(buf), "{\"node\":%u,\"attached\":[", lc->cfg->node_id);
	for (uint32_t g = 0; g < lc->cfg->gpus_per_node && n < sizeof(buf); g++)
		if (attached >> g & 1) {
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%u", first ? "" : ",", g);
			first = 0;
		}
	n += (size_t)snprintf(buf + n, n < sizeof(buf) ? sizeof(buf) - n : 0, "],\"down\":[");
	first = 1;
	for (uint32_t node = 0; lc->net && node < LOCUS_CFG_MAX_NODES && n < sizeof(buf); node++)
		if (lc->member[node] && node != lc->cfg->node_id &&
		    locus_config_talks(lc->cfg, lc->cfg->node_id, node) && !locusd_net_peer_up(lc->net, node)) {
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%u", first ? "" : ",",
					      node);
			first = 0;
		}
	n += (size_t)snprintf(buf + n, n < sizeof(buf) ? sizeof(buf) - n : 0, "]}");
	if (n >= sizeof(buf) || !strcmp(buf, lc->ranks_sent))
		return;
	if (locus_cluster_publish(lc->c, LOCUS_CLUSTER_PUB_RANKS, buf, n) == 0) {
		memcpy(lc->ranks_sent, buf, n + 1);
		lc->ranks_published++;
	}
}

static void on_table(void *arg, unsigned kind, uint64_t gen, const void *blob, size_t len,
		     const struct locus_error *why)
{
	struct locusd_cluster *lc = arg;
	struct pending *p = &lc->pend[kind];

	if (why) {
		refused(lc, kind, gen, -why->code, why->msg);
		return;
	}
	if (!lc->push) {
		refused(lc, kind, gen, -ENOTSUP, "this node takes no pushes");
		return;
	}
	free(p->blob);
	p->blob = malloc(len ? len : 1);
	if (!p->blob) {
		refused(lc, kind, gen, -ENOMEM, "out of memory for the table");
		return;
	}
	memcpy(p->blob, blob, len);
	/* rows planned with it carry the cluster's generation (locus_dispatch.h) */
	if (kind == LOCUS_TABLE_CH_GRACE) {
		locus_tbl_set_generation(p->blob, len, gen);
		placement_file(lc, gen, p->blob, len);
	}
	p->len = len;
	p->gen = gen;
	p->kind = kind;
	p->lc = lc;
	p->queued = 1;
	fprintf(stderr, "locusd: cluster: %s table generation %llu (%zu bytes) read from etcd\n",
		locus_cluster_table_kind_name(kind), (unsigned long long)gen, len);
	push_pending(lc);
}

int locusd_cluster_create(const struct locus_config *cfg, struct locusd_net *net,
			  struct locus_pushsrv *push, struct locus_counters *c, uint32_t block,
			  struct locusd_cluster **out, struct locus_error *err)
{
	static const struct locus_cluster_ops ops = { .node_up = on_up, .node_gone = on_gone,
						      .record_bad = on_bad, .state = on_state,
						      .table = on_table, .prepare = on_prepare,
						      .plans_from = on_plans_from };
	const struct locus_cfg_node *me = &cfg->nodes[cfg->node_id];
	struct locus_cluster_params p = {
		.endpoints = cfg->etcd, .prefix = cfg->etcd_prefix,
		.cacert = cfg->etcd_cacert[0] ? cfg->etcd_cacert : NULL,
		.cert = cfg->etcd_cert[0] ? cfg->etcd_cert : NULL,
		.key = cfg->etcd_key[0] ? cfg->etcd_key : NULL,
		.lease_ttl_s = cfg->etcd_lease_s,
	};
	char lease_file[256];
	struct locusd_cluster *lc = calloc(1, sizeof(*lc));
	int ret;

	*out = NULL;
	if (!lc)
		return locus_error_set(err, ENOMEM, "cluster: out of memory");
	lc->cfg = cfg;
	lc->net = net;
	lc->push = push;
	lc->tok_idx = -1;
	p.self.node = cfg->node_id;
	p.self.cluster = cfg->cluster_id;
	p.self.gpus = cfg->gpus_per_node;
	p.self.n_rails = me->n_rails;
	for (uint32_t r = 0; r < me->n_rails; r++) {
		p.self.rail_ipv4[r] = me->rail[r].ipv4;
		p.self.rail_port[r] = me->rail[r].port;
	}
	while (!p.self.boot)
		if (getrandom(&p.self.boot, sizeof(p.self.boot), 0) != sizeof(p.self.boot))
			p.self.boot = (uint64_t)getpid() << 32 ^ (uint64_t)mono_ms();
	lc->loads_boot = p.self.boot;
	if (gethostname(p.self.host, sizeof(p.self.host)) < 0)
		snprintf(p.self.host, sizeof(p.self.host), "?");
	p.self.host[sizeof(p.self.host) - 1] = 0;
	if (locus_shm_run_path(cfg->instance, ".lease", lease_file, sizeof(lease_file)) == 0)
		p.lease_file = lease_file;
	lc->block = locus_counters_block(c, block);
	if (!lc->block) {
		ret = locus_error_set(err, LOCUS_ERANGE, "cluster: no counter block %u", block);
		goto err_free;
	}
	for (unsigned i = 0; i < CC_N; i++) {
		struct locus_ctr_desc d = { .name = cc[i].name, .help = cc[i].help,
					    .kind = cc[i].kind };

		ret = locus_counters_register(c, &d, &lc->off[i], err);
		if (ret < 0)
			goto err_free;
	}
	ret = locus_cluster_open(&p, &ops, lc, &lc->c, err);
	if (ret < 0)
		goto err_free;
	fprintf(stderr, "locusd: cluster: node %u of %u, etcd %s, keys under %s/%" PRIu64
		"/, lease %u s\n", cfg->node_id, cfg->n_nodes, cfg->etcd, cfg->etcd_prefix,
		cfg->cluster_id, cfg->etcd_lease_s);
	*out = lc;
	return 0;

err_free:
	free(lc);
	return ret;
}

static void sync_counters(struct locusd_cluster *lc)
{
	const struct locus_cluster_stats *s = locus_cluster_stats(lc->c);
	const uint64_t v[CC_N] = {
		[CC_STATE] = (uint64_t)locus_cluster_state(lc->c),
		[CC_MEMBERS] = locus_cluster_n_members(lc->c),
		[CC_REQUESTS] = s->etcd_requests, [CC_ERRORS] = s->etcd_errors,
		[CC_JOINS] = s->joins, [CC_REFUSALS] = s->refusals,
		[CC_LEASE_LOST] = s->lease_lost, [CC_UP] = s->records_up,
		[CC_GONE] = s->records_gone, [CC_BAD] = s->records_bad,
		[CC_WATCH] = s->watch_restarts, [CC_RESYNCS] = s->resyncs,
		[CC_PEER_REFUSED] = lc->peer_refused, [CC_TABLES_SEEN] = s->tables_seen,
		[CC_TABLES_ADOPTED] = lc->adopted, [CC_TABLES_REFUSED] = lc->refused,
		[CC_PREPARED] = lc->prepared, [CC_PREPARE_ACKED] = lc->prep_acked,
		[CC_PREPARE_REFUSED] = lc->prep_refused, [CC_PREPARE_GONE] = lc->prep_gone,
		[CC_PLACEMENT_STAGED] = lc->staged, [CC_PLACEMENT_GEN] = lc->plan_gen,
		[CC_PLACEMENT_FREE_BELOW] = lc->free_below,
		[CC_LOADS_PUBLISHED] = lc->loads_published,
		[CC_OUTSIDE] = lc->outside,
	};

	for (unsigned i = 0; i < CC_N; i++)
		locus_gauge_set(lc->block, lc->off[i], (int64_t)v[i]);
}

void locusd_cluster_poll(struct locusd_cluster *lc)
{
	push_pending(lc);
	locus_cluster_poll(lc->c, mono_ms());
	placement_slots(lc);
	if (lc->node) {
		publish_loads(lc);
		publish_ranks(lc);
	}
	sync_counters(lc);
}

void locusd_cluster_set_node(struct locusd_cluster *lc, struct locus_node *node)
{
	lc->node = node;
}

int locusd_cluster_join(struct locusd_cluster *lc, uint32_t wait_ms, struct locus_error *err)
{
	uint64_t until = mono_ms() + wait_ms;

	for (;;) {
		enum locus_cluster_state s;

		locusd_cluster_poll(lc);
		s = locus_cluster_state(lc->c);
		if (s == LOCUS_CLUSTER_MEMBER)
			return 0;
		if (s == LOCUS_CLUSTER_REFUSED)
			return locus_error_set(err, EEXIST, "node id %u is in use in cluster %" PRIu64
					       " (etcd %s): another locusd runs with it",
					       lc->cfg->node_id, lc->cfg->cluster_id, lc->cfg->etcd);
		if (mono_ms() >= until)
			return 0;
		usleep(2000);
	}
}

void locusd_cluster_destroy(struct locusd_cluster *lc)
{
	if (!lc)
		return;
	locus_cluster_close(lc->c);
	fprintf(stderr, "locusd: cluster: left (lease revoked)\n");
	for (unsigned k = 0; k < LOCUS_CLUSTER_TABLE_KINDS; k++)
		free(lc->pend[k].blob);
	unlink_placement_files(lc);
	free(lc->tok);
	free(lc->tok_sent);
	free(lc->loads);
	free(lc);
}
