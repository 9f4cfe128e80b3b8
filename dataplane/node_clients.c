// SPDX-License-Identifier: MIT
/*
 * One node's client slots, the control side: attachments asked over the
 * registration socket, the engine told to serve and to stop serving a
 * slot, dead and detached clients reclaimed, and every freed slot given a
 * fresh memfd before anyone gets it again.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "locus_client_priv.h"
#include "locus_counters_priv.h"
#include "locus_shm_priv.h"
#include "node_priv.h"

/*
 * The slot holding an id is on its way out: its client detached or died and
 * the engine has yet to let go of it (or is doing so). An attach for the
 * same id is told to wait (-EAGAIN, the client retries within its time-out)
 * instead of being refused: a decoder that detaches and attaches again at
 * once must not see "attached already". A slot still being attached (claim
 * set) is a real conflict.
 */
static int owner_leaving(struct locus_node *n, int32_t slot)
{
	if (n->ticket[slot])
		return n->cmd[slot] == LOCUS_ENGINE_DETACH;
	if (n->claim[slot])
		return 0;
	return locus_clients_check(&n->clients, (uint32_t)slot) == LOCUS_CLIENTS_GONE;
}

/* What a request asks to be, checked against the cluster and the registry. */
static int check_grant(struct locus_node *n, const struct locus_engine_grant *g, char *msg,
		       size_t len)
{
	if (g->roles == 0 || (g->roles & ~(uint32_t)LOCUS_ROLE_ALL)) {
		snprintf(msg, len, "roles %#x name no valid role", g->roles);
		return -EINVAL;
	}
	if (g->roles & LOCUS_ROLE_DECODE) {
		if (g->decoder_id >= n->cfg.max_decoders) {
			snprintf(msg, len, "decoder id %u >= max_decoders %u", g->decoder_id,
				 n->cfg.max_decoders);
			return -LOCUS_ERANGE;
		}
		if (n->decoder_owner[g->decoder_id] >= 0 &&
		    owner_leaving(n, n->decoder_owner[g->decoder_id])) {
			snprintf(msg, len, "decoder id %u is being released (slot %d detached)",
				 g->decoder_id, (int)n->decoder_owner[g->decoder_id]);
			return -EAGAIN;
		}
		if (n->decoder_owner[g->decoder_id] >= 0) {
			snprintf(msg, len, "decoder id %u is attached already (slot %d)",
				 g->decoder_id, (int)n->decoder_owner[g->decoder_id]);
			return -EEXIST;
		}
	}
	if (g->roles & LOCUS_ROLE_RANK) {
		if (g->rank >= n->n_ranks || g->rank / n->cfg.gpus_per_node != n->cfg.node_id) {
			snprintf(msg, len, "rank %u is not on node %u (ranks %u..%u)", g->rank,
				 n->cfg.node_id, n->cfg.node_id * n->cfg.gpus_per_node,
				 (n->cfg.node_id + 1) * n->cfg.gpus_per_node - 1);
			return -LOCUS_ERANGE;
		}
		if (n->rank_owner[g->rank] >= 0 && owner_leaving(n, n->rank_owner[g->rank])) {
			snprintf(msg, len, "rank %u is being released (slot %d detached)", g->rank,
				 (int)n->rank_owner[g->rank]);
			return -EAGAIN;
		}
		if (n->rank_owner[g->rank] >= 0) {
			snprintf(msg, len, "rank %u is attached already (slot %d)", g->rank,
				 (int)n->rank_owner[g->rank]);
			return -EEXIST;
		}
	}
	return 0;
}

/*
 * Every engine is told of every attach and detach (the owner serves the
 * slot, the others deliver to it); the command is done once all did it.
 */
static void post_all(struct locus_node *n, uint32_t slot, enum locus_engine_cmd cmd,
		     const struct locus_engine_grant *g)
{
	n->cmd[slot] = (uint8_t)cmd;
	for (uint32_t k = 0; k < n->n_eng; k++)
		n->eng_ticket[(size_t)slot * n->n_eng + k] =
			locus_engine_command(n->engines[k], slot, cmd, g);
	n->ticket[slot] = 1;
}

static int done_all(struct locus_node *n, uint32_t slot)
{
	for (uint32_t k = 0; k < n->n_eng; k++)
		if (!locus_engine_command_done(n->engines[k], slot,
					       n->eng_ticket[(size_t)slot * n->n_eng + k]))
			return 0;
	return 1;
}

/*
 * The engine to poll a new client: with the signature cache on, a prefiller
 * (whatever its other roles) engine 0, whose cache is the node's, so every
 * prefiller finds the blocks any other inserted; a rank the one serving
 * its GPU, by the GPUs' NUMA nodes when locusd placed them (gpu_pci), else
 * by order (engine k takes GPUs k * G / N onwards: list the engine lcores
 * in the order of the GPUs they sit next to); a decoder, or a prefiller
 * without the cache, the one with fewest prefillers and decoders, then
 * fewest ranks.
 */
static uint32_t pick_engine(const struct locus_node *n, const struct locus_engine_grant *g)
{
	uint32_t best = 0;

	if (n->n_eng == 1)
		return 0;
	/* first: a prefiller's ROUTE_BLOCKS need the cache, a rank's GPU is only nearer */
	if ((g->roles & LOCUS_ROLE_PREFILL) && n->cfg.sig_cache_bytes)
		return 0;
	if (g->roles & LOCUS_ROLE_RANK)
		return node_rank_engine(n, g->rank);
	for (uint32_t k = 1; k < n->n_eng; k++)
		if (n->eng_others[k] < n->eng_others[best] ||
		    (n->eng_others[k] == n->eng_others[best] &&
		     n->eng_ranks[k] < n->eng_ranks[best]))
			best = k;
	return best;
}

/* The engine that serves rank (its GPU's); fixed once the GPUs are placed. */
uint32_t node_rank_engine(const struct locus_node *n, uint32_t rank)
{
	uint32_t gpu = rank % n->cfg.gpus_per_node;

	if (n->n_eng == 1)
		return 0;
	if (n->gpus_placed)
		return n->gpu_engine[gpu];
	return n->n_eng <= n->cfg.gpus_per_node ? gpu * n->n_eng / n->cfg.gpus_per_node
						: gpu % n->n_eng;
}

/* The registry holds what was granted, never what a slot says now. */
static void registry_set(struct locus_node *n, uint32_t slot, int on)
{
	const struct locus_engine_grant *g = &n->grant[slot];

	if (g->roles & LOCUS_ROLE_RANK)
		n->eng_ranks[g->engine] += on ? 1 : -1;
	else
		n->eng_others[g->engine] += on ? 1 : -1;

	if (g->roles & LOCUS_ROLE_DECODE) {
		n->decoder_owner[g->decoder_id] = on ? (int32_t)slot : -1;
		/* the network lcore reads it for arrivals; a stale one only costs a hand-over */
		__atomic_store_n(&n->decoder_engine[g->decoder_id], on ? (uint8_t)g->engine : 0,
				 __ATOMIC_RELAXED);
	}
	if (g->roles & LOCUS_ROLE_RANK) {
		n->rank_owner[g->rank] = on ? (int32_t)slot : -1;
		__atomic_store_n(&n->rank_engine[g->rank], on ? (uint8_t)(g->engine + 1) : 0,
				 __ATOMIC_RELAXED);
	}
	n->attached[slot] = (uint8_t)on;
	if (on)
		n->n_attached++;
	else
		n->n_attached--;
}

static int slot_free(const struct locus_node *n, uint32_t i)
{
	const struct locus_client_ctl *ctl = locus_clients_ctl(&n->clients, i);

	return !n->attached[i] && !n->ticket[i] && !n->draining[i] && !n->renew[i] &&
	       locus_client_state_of(__atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE)) ==
		       LOCUS_CLIENT_FREE;
}

/*
 * An ATTACH from pid (SO_PEERCRED): a free slot claimed for it, its rings
 * laid out and the engine asked to serve it; the answer goes out once the
 * engine does (control below). A refusal is counted and answered at once.
 */
static int attach_request(void *ctx, int conn, pid_t pid, const struct locus_reg_req *q,
			  char *msg, size_t len)
{
	struct locus_node *n = ctx;
	struct locus_engine_grant g = { .roles = q->roles, .decoder_id = q->decoder_id,
					.rank = q->rank };
	uint64_t ticks;
	uint32_t i;
	int why;

	if (locus_shm_state(n->shm) != LOCUS_SHM_RUNNING) {
		snprintf(msg, len, "locusd is not running (starting or stopping)");
		why = -LOCUS_ESTATE;
		goto refused;
	}
	if (locus_proc_start_ticks(pid, &ticks) < 0) {
		snprintf(msg, len, "pid %d is gone", (int)pid);
		why = -ESRCH;
		goto refused;
	}
	for (i = 0; i < n->cfg.client_slots; i++)
		if (slot_free(n, i))
			break;
	if (i == n->cfg.client_slots) {
		/* a slot whose client detached or died comes free: wait for it, as for an id */
		for (i = 0; i < n->cfg.client_slots; i++)
			if (n->draining[i] || n->renew[i] || (n->attached[i] && owner_leaving(n, (int32_t)i)))
				break;
		if (i < n->cfg.client_slots) {
			snprintf(msg, len, "all %u client slots are taken; slot %u is being released",
				 n->cfg.client_slots, i);
			why = -EAGAIN;
		} else {
			snprintf(msg, len, "all %u client slots are taken", n->cfg.client_slots);
			why = -LOCUS_EFULL;
		}
		goto refused;
	}
	why = check_grant(n, &g, msg, len);
	if (why < 0)
		goto refused;
	if (locus_clients_claim(&n->clients, i, pid, ticks, g.roles, g.decoder_id, g.rank) < 0 ||
	    locus_clients_prepare(&n->clients, i) < 0) {
		snprintf(msg, len, "client slot %u could not be laid out", i);
		why = -LOCUS_ESTATE;
		goto refused;
	}
	g.engine = pick_engine(n, &g);
	n->slot_engine[i] = (uint8_t)g.engine;
	n->grant[i] = g;
	n->claim[i] = __atomic_load_n(&locus_clients_ctl(&n->clients, i)->state_pid,
				      __ATOMIC_ACQUIRE);
	n->conn[i] = conn;
	registry_set(n, i, 1);
	post_all(n, i, LOCUS_ENGINE_ATTACH, &n->grant[i]);
	return 0;

refused:
	if (why != -EAGAIN) /* told to wait for a detach: it comes back, not a refusal */
		locus_counter_inc(n->ctl_blk, n->ctr_refused);
	return why;
}

/* A grant the client never confirmed: it is detaching, as far as we care. */
static void attach_unconfirmed(void *ctx, uint32_t slot, uint64_t generation)
{
	struct locus_node *n = ctx;
	struct locus_client_ctl *ctl;
	uint64_t sp;

	if (slot >= n->cfg.client_slots || !n->attached[slot])
		return;
	ctl = locus_clients_ctl(&n->clients, slot);
	sp = __atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE);
	if (__atomic_load_n(&ctl->generation, __ATOMIC_ACQUIRE) == generation &&
	    locus_client_state_of(sp) == LOCUS_CLIENT_ACTIVE)
		__atomic_compare_exchange_n(&ctl->state_pid, &sp,
					    locus_client_state_pid(LOCUS_CLIENT_DETACHING,
								   locus_client_pid_of(sp)),
					    0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

void node_clients_init(struct locus_node *n)
{
	n->attach_ops = (struct locus_regions_attach_ops){ .request = attach_request,
							   .unconfirmed = attach_unconfirmed,
							   .ctx = n };
}

void locus_node_on_renew(struct locus_node *n, int (*hook)(void *ctx, uint32_t slot), void *ctx)
{
	n->renew_hook = hook;
	n->renew_ctx = ctx;
}

/* A fresh memfd for a freed slot, then the hook; FREE once both are done (retried). */
static void renew_slot(struct locus_node *n, uint32_t i)
{
	if (n->renew[i] == RENEW_OBJECT) {
		if (locus_clients_renew(&n->clients, i) < 0)
			return;
		n->renew[i] = RENEW_HOOK;
	}
	if (n->renew_hook && n->renew_hook(n->renew_ctx, i) < 0)
		return;
	n->renew[i] = RENEW_NONE;
	locus_clients_release(&n->clients, i);
}

/* Renewed at the end of the pass: freeing a used slot's pages takes milliseconds. */
static void start_renew(struct locus_node *n, uint32_t i)
{
	n->renew[i] = RENEW_OBJECT;
}

/* The engine serves slot i: tell the client, with the slot's memfd. */
static void grant(struct locus_node *n, uint32_t i)
{
	struct locus_client_ctl *ctl = locus_clients_ctl(&n->clients, i);
	int conn = n->conn[i];

	n->conn[i] = -1;
	if (locus_clients_publish(&n->clients, i, n->claim[i]) < 0) {
		/* nobody but us writes a slot before its fd is out: not expected */
		locus_regions_attach_answer(n->regions, conn, -LOCUS_ESTATE, i, 0, -1,
					    "the slot changed under locusd");
		post_all(n, i, LOCUS_ENGINE_DETACH, NULL);
		return;
	}
	n->claim[i] = 0;
	if (!n->regions ||
	    locus_regions_attach_answer(n->regions, conn, 0, i,
					__atomic_load_n(&ctl->generation, __ATOMIC_ACQUIRE),
					n->clients.fd[i], NULL) < 0)
		/* it gave up waiting: the next look finds it detaching */
		attach_unconfirmed(n, i, __atomic_load_n(&ctl->generation, __ATOMIC_ACQUIRE));
}

/* An engine command of slot i ended. */
static void command_done(struct locus_node *n, uint32_t i)
{
	struct locus_client_ctl *ctl = locus_clients_ctl(&n->clients, i);
	int died;

	n->ticket[i] = 0;
	if (n->cmd[i] == LOCUS_ENGINE_ATTACH) {
		/*
		 * Only now may the client learn it is attached (a peer node told
		 * of it could otherwise send it rows the engine would drop).
		 */
		grant(n, i);
		return;
	}
	if (n->claim[i]) {
		/* never ACTIVE: nobody had the slot */
		n->claim[i] = 0;
		registry_set(n, i, 0);
		start_renew(n, i);
		return;
	}
	died = locus_client_state_of(__atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE)) !=
	       LOCUS_CLIENT_DETACHING;
	locus_counter_inc(n->ctl_blk, died ? n->ctr_reclaimed : n->ctr_detached);
	registry_set(n, i, 0);
	/* the slot is renewed only once the engine let go of its regions */
	if (locus_regions_slot_busy(n->regions, i))
		n->draining[i] = 1;
	else
		start_renew(n, i);
}

/* The engine emptied its signature cache for a table of another shape: say so once. */
static void log_sigcache_resets(struct locus_node *n)
{
	uint64_t v = __atomic_load_n(locus_ctr_word(n->eng_blk, n->sc_resets_off),
				     __ATOMIC_RELAXED);

	if (v == n->sc_resets_seen)
		return;
	n->sc_resets_seen = v;
	fprintf(stderr, "locusd: signature cache emptied and laid out anew for an ELDR table of "
		"another shape (sigcache_resets %llu)\n", (unsigned long long)v);
}

/*
 * Whether this pass also asks /proc whether attached clients still live: an
 * open and a read per client every 1 ms control period costs CPU the
 * lcores beside the control thread need, so it runs every
 * NODE_LIVENESS_NS. The state word (a client that detached) is looked at
 * every pass.
 */
static int liveness_due(struct locus_node *n)
{
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO, no clock device read */
	now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (now < n->next_liveness_ns)
		return 0;
	n->next_liveness_ns = now + NODE_LIVENESS_NS;
	return 1;
}

void locus_node_control(struct locus_node *n)
{
	int live = liveness_due(n);

	locus_pushsrv_poll(n->push);
	log_sigcache_resets(n);
	locus_regions_poll(n->regions);
	for (uint32_t i = 0; i < n->cfg.client_slots; i++) {
		if (n->renew[i])
			continue;
		if (n->draining[i]) {
			if (locus_regions_slot_busy(n->regions, i))
				continue;
			n->draining[i] = 0;
			start_renew(n, i);
			continue;
		}
		if (n->ticket[i]) {
			if (done_all(n, i))
				command_done(n, i);
			continue;
		}
		if (n->attached[i] &&
		    (live ? locus_clients_check(&n->clients, i)
			  : locus_clients_check_state(&n->clients, i)) == LOCUS_CLIENTS_GONE) {
			post_all(n, i, LOCUS_ENGINE_DETACH, NULL);
			locus_regions_slot_gone(n->regions, i);
		}
	}
	/* the slow work last: attachments and reclaimed ids were answered already */
	locus_regions_setup(n->regions);
	for (uint32_t i = 0; i < n->cfg.client_slots; i++)
		if (n->renew[i])
			renew_slot(n, i);
}
