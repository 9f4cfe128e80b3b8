// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_node.h"
#include "locus_pushsrv.h"
#include "locus_regions.h"
#include "locus_shm.h"
#include "locus_table.h"

#define TABLE_SLOTS 3
#define N_CTR_BLOCKS 2       /* 0: worker engine, 1: control */
#define CTL_BLOCK LOCUS_NODE_CTL_BLOCK

struct locus_node {
	struct locus_config cfg;
	struct locus_shm *shm;
	void *table_mem;      /* the table channels: private, only this process maps them */
	size_t table_len;
	struct locus_table_region *tables;
	struct locus_pushsrv *push;    /* the control socket, the channels' only writer */
	struct locus_counters *ctrs;
	struct locus_clients clients;
	struct locus_engine *engine;
	void *ctl_blk;
	uint64_t ctr_refused, ctr_reclaimed, ctr_detached;
	uint32_t n_ranks;
	uint32_t n_attached;
	/* control's registry, per client slot */
	uint64_t *ticket;     /* pending engine command, 0 none */
	uint8_t *cmd;
	uint8_t *attached;
	uint64_t *claim;      /* the client's CLAIMED word until it is told ACTIVE, else 0 */
	struct locus_engine_grant *grant;
	int32_t *decoder_owner;
	int32_t *rank_owner;
	uint8_t *draining;    /* detached, waiting for its regions' release */
	struct locus_regions *regions; /* NULL until locus_node_regions_open() */
};

static size_t counters_block_size(const struct locus_config *c)
{
	/* engine vectors, the [layers][experts] load matrix, histograms, load rows by node, slack */
	return (size_t)8 * ((size_t)c->moe_layers * c->moe_experts + 4 * c->max_decoders + 64) +
	       (size_t)8 * LOCUS_HIST_WORDS * 8 + (size_t)8 * (4 * c->n_nodes + 1) + 4096;
}

static int make_segment(struct locus_node *n, struct locus_error *err)
{
	const struct locus_config *c = &n->cfg;
	struct locus_table_params tp = { .n_channels = LOCUS_TABLE_N_CHANNELS, .n_readers = 1 };
	struct locus_ctr_params cp = { .max_entries = 128, .n_blocks = N_CTR_BLOCKS,
				       .block_size = counters_block_size(c) };
	struct locus_clients_params clp = {
		.n_slots = c->client_slots,
		.ring_size = c->ring_size,
		.stage_size = c->stage_size,
		.inbox_slots = c->client_inbox_slots,
		.inbox_slot_size = c->inbox_slot_size,
	};
	struct locus_shm_params sp = { .instance = c->instance };
	void *region;
	size_t size;
	int ret;

	for (unsigned ch = 0; ch < LOCUS_TABLE_N_CHANNELS; ch++)
		tp.channel[ch] = (struct locus_table_channel_params){ .n_slots = TABLE_SLOTS,
								      .slot_size = c->table_slot_size };
	n->table_len = locus_table_region_size(&tp);
	sp.region_size[LOCUS_REGION_COUNTERS] = locus_counters_region_size(&cp);
	sp.region_size[LOCUS_REGION_CLIENTS] = locus_clients_region_size(&clp);
	if (!n->table_len || !sp.region_size[LOCUS_REGION_COUNTERS] ||
	    !sp.region_size[LOCUS_REGION_CLIENTS])
		return locus_error_set(err, EINVAL, "segment regions out of range for this config");
	/* tables in our own memory: the control socket is the only way in */
	n->table_mem = mmap(NULL, n->table_len, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (n->table_mem == MAP_FAILED) {
		n->table_mem = NULL;
		return locus_error_set(err, errno, "table channels: %s", strerror(errno));
	}
	ret = locus_table_region_init(n->table_mem, n->table_len, &tp, err);
	if (ret == 0)
		ret = locus_table_region_attach(n->table_mem, n->table_len, &n->tables, err);
	if (ret < 0)
		return ret;
	ret = locus_shm_create(&sp, &n->shm, err);
	if (ret < 0)
		return ret;
	region = locus_shm_region(n->shm, LOCUS_REGION_COUNTERS, &size);
	ret = locus_counters_init(region, size, &cp, err);
	if (ret == 0)
		ret = locus_counters_open(region, size, 0, &n->ctrs, err);
	if (ret < 0)
		return ret;
	region = locus_shm_region(n->shm, LOCUS_REGION_CLIENTS, &size);
	ret = locus_clients_init(region, size, &clp);
	if (ret == 0)
		ret = locus_clients_open(&n->clients, region, size);
	if (ret < 0)
		return locus_error_set(err, ret, "client region: %s", locus_strerror(ret));
	return 0;
}

static int register_control_counters(struct locus_node *n, struct locus_error *err)
{
	const struct locus_ctr_desc defs[] = {
		{ .name = "clients_refused", .help = "client attachments refused",
		  .kind = LOCUS_CTR_COUNTER },
		{ .name = "clients_reclaimed", .help = "slots of clients that died, reclaimed",
		  .kind = LOCUS_CTR_COUNTER },
		{ .name = "clients_detached", .help = "clients that detached",
		  .kind = LOCUS_CTR_COUNTER },
	};
	uint64_t *offs[] = { &n->ctr_refused, &n->ctr_reclaimed, &n->ctr_detached };

	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(defs); i++) {
		int ret = locus_counters_register(n->ctrs, &defs[i], offs[i], err);

		if (ret < 0)
			return ret;
	}
	n->ctl_blk = locus_counters_block(n->ctrs, CTL_BLOCK);
	return 0;
}

/* The control socket: table pushes from the control group only. */
static int open_push(struct locus_node *n, struct locus_error *err)
{
	struct locus_error gerr = { 0 };
	struct locus_pushsrv_params p = {
		.instance = n->cfg.instance, .tables = n->tables, .ctrs = n->ctrs,
		.ctl_blk = n->ctl_blk, .ctl_gid = locus_pushsrv_group(n->cfg.ctl_group, &gerr),
	};

	if (p.ctl_gid == LOCUS_PUSHSRV_NO_GROUP)
		fprintf(stderr, "locusd: %s\n", gerr.msg);
	return locus_pushsrv_create(&p, &n->push, err);
}

int locus_node_create(const struct locus_config *cfg, uint64_t (*now)(void), uint64_t tsc_hz,
		      struct locus_node **out, struct locus_error *err)
{
	return locus_node_create_remote(cfg, now, tsc_hz, NULL, out, err);
}

int locus_node_create_remote(const struct locus_config *cfg, uint64_t (*now)(void),
			     uint64_t tsc_hz, const struct locus_engine_remote *remote,
			     struct locus_node **out, struct locus_error *err)
{
	struct locus_engine_params ep = { 0 };
	struct locus_node *n;
	int ret;

	n = calloc(1, sizeof(*n));
	if (!n)
		return locus_error_set(err, ENOMEM, "out of memory");
	n->cfg = *cfg;
	n->n_ranks = locus_config_n_ranks(cfg);
	n->ticket = calloc(cfg->client_slots, sizeof(*n->ticket));
	n->cmd = calloc(cfg->client_slots, 1);
	n->attached = calloc(cfg->client_slots, 1);
	n->claim = calloc(cfg->client_slots, sizeof(*n->claim));
	n->grant = calloc(cfg->client_slots, sizeof(*n->grant));
	n->decoder_owner = malloc(sizeof(int32_t) * cfg->max_decoders);
	n->rank_owner = malloc(sizeof(int32_t) * n->n_ranks);
	n->draining = calloc(cfg->client_slots, 1);
	if (!n->ticket || !n->cmd || !n->attached || !n->claim || !n->grant || !n->decoder_owner ||
	    !n->rank_owner || !n->draining) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	for (uint32_t i = 0; i < cfg->max_decoders; i++)
		n->decoder_owner[i] = -1;
	for (uint32_t i = 0; i < n->n_ranks; i++)
		n->rank_owner[i] = -1;
	ret = make_segment(n, err);
	if (ret < 0)
		goto err_free;
	ep.dims = (struct locus_engine_dims){
		.node_id = cfg->node_id,
		.n_nodes = cfg->n_nodes,
		.gpus_per_node = cfg->gpus_per_node,
		.max_layers = cfg->moe_layers,
		.max_experts = cfg->moe_experts,
		.max_decoders = cfg->max_decoders,
		.max_tokens = cfg->max_batch_tokens,
		.load_timeout_ms = cfg->load_timeout_ms,
	};
	ret = locus_engine_register_counters(n->ctrs, &ep.dims, &ep.ctr, err);
	if (ret == 0)
		ret = register_control_counters(n, err);
	if (ret < 0)
		goto err_free;
	ep.clients = &n->clients;
	ep.tables = n->tables;
	ep.reader_idx = 0;
	ep.ctr_block = locus_counters_block(n->ctrs, LOCUS_NODE_ENGINE_BLOCK);
	ep.tsc_hz = tsc_hz;
	ep.now = now;
	ep.remote = remote;
	ret = locus_engine_create(&ep, &n->engine, err);
	if (ret == 0)
		ret = open_push(n, err);
	if (ret < 0)
		goto err_free;
	*out = n;
	return 0;

err_free:
	locus_node_destroy(n, 1);
	return ret;
}

void locus_node_set_running(struct locus_node *n)
{
	locus_shm_set_state(n->shm, LOCUS_SHM_RUNNING);
}

void locus_node_set_stopping(struct locus_node *n)
{
	locus_shm_set_state(n->shm, LOCUS_SHM_STOPPING);
}

struct locus_engine *locus_node_engine(struct locus_node *n)
{
	return n->engine;
}

struct locus_counters *locus_node_counters(struct locus_node *n)
{
	return n->ctrs;
}

void *locus_node_client_region(struct locus_node *n, size_t *len)
{
	*len = n->clients.size;
	return n->clients.base;
}

uint32_t locus_node_clients(const struct locus_node *n)
{
	return n->n_attached;
}

/* What the client asked to be, checked against the cluster and the registry. */
static int check_claim(struct locus_node *n, uint32_t slot, struct locus_engine_grant *g)
{
	const struct locus_client_ctl *ctl = locus_clients_ctl(&n->clients, slot);

	/* one read of each field: the client may still be writing its slot */
	g->roles = __atomic_load_n(&ctl->roles, __ATOMIC_RELAXED);
	g->decoder_id = __atomic_load_n(&ctl->decoder_id, __ATOMIC_RELAXED);
	g->rank = __atomic_load_n(&ctl->rank, __ATOMIC_RELAXED);
	if (g->roles == 0 || (g->roles & ~(uint32_t)LOCUS_ROLE_ALL))
		return -EINVAL;
	if (g->roles & LOCUS_ROLE_DECODE) {
		if (g->decoder_id >= n->cfg.max_decoders)
			return -LOCUS_ERANGE;
		if (n->decoder_owner[g->decoder_id] >= 0)
			return -EEXIST;
	}
	if (g->roles & LOCUS_ROLE_RANK) {
		if (g->rank >= n->n_ranks || g->rank / n->cfg.gpus_per_node != n->cfg.node_id)
			return -LOCUS_ERANGE;
		if (n->rank_owner[g->rank] >= 0)
			return -EEXIST;
	}
	return 0;
}

/* The registry holds what was granted, never what a slot says now. */
static void registry_set(struct locus_node *n, uint32_t slot, int on)
{
	const struct locus_engine_grant *g = &n->grant[slot];

	if (g->roles & LOCUS_ROLE_DECODE)
		n->decoder_owner[g->decoder_id] = on ? (int32_t)slot : -1;
	if (g->roles & LOCUS_ROLE_RANK)
		n->rank_owner[g->rank] = on ? (int32_t)slot : -1;
	n->attached[slot] = (uint8_t)on;
	if (on)
		n->n_attached++;
	else
		n->n_attached--;
}

int locus_node_regions_open(struct locus_node *n, const struct locus_regions_mr_ops *mr,
			    struct locus_error *err)
{
	struct locus_regions_params p = {
		.instance = n->cfg.instance, .clients = &n->clients, .engine = n->engine,
		.ctrs = n->ctrs, .ctl_blk = n->ctl_blk, .attached = n->attached, .mr = mr,
	};

	if (n->regions)
		return locus_error_set(err, EEXIST, "buffer regions already open");
	return locus_regions_create(&p, &n->regions, err);
}

void locus_node_regions_close(struct locus_node *n)
{
	locus_regions_destroy(n->regions);
	n->regions = NULL;
}

void locus_node_control(struct locus_node *n)
{
	locus_pushsrv_poll(n->push);
	locus_regions_poll(n->regions);
	for (uint32_t i = 0; i < n->cfg.client_slots; i++) {
		struct locus_client_ctl *ctl = locus_clients_ctl(&n->clients, i);
		int ev, why;

		if (n->draining[i]) {
			/* the slot is reused only once the engine let go of its regions */
			if (locus_regions_slot_busy(n->regions, i))
				continue;
			n->draining[i] = 0;
			locus_clients_release(&n->clients, i);
			continue;
		}
		if (n->ticket[i]) {
			if (!locus_engine_command_done(n->engine, i, n->ticket[i]))
				continue;
			n->ticket[i] = 0;
			if (n->cmd[i] == LOCUS_ENGINE_ATTACH) {
				/*
				 * The engine serves the slot: only now may the client
				 * learn it is attached (a peer node told of it could
				 * otherwise send it rows the engine would drop). A
				 * client that gave up meanwhile is detached again.
				 */
				if (locus_clients_publish(&n->clients, i, n->claim[i]) == 0) {
					n->claim[i] = 0;
				} else {
					n->cmd[i] = LOCUS_ENGINE_DETACH;
					n->ticket[i] = locus_engine_command(n->engine, i,
									    LOCUS_ENGINE_DETACH,
									    NULL);
				}
				continue;
			}
			if (n->cmd[i] == LOCUS_ENGINE_DETACH && n->claim[i]) {
				/* never told ACTIVE: the client left the slot itself */
				registry_set(n, i, 0);
				n->claim[i] = 0;
				continue;
			}
			if (n->cmd[i] == LOCUS_ENGINE_DETACH) {
				int died = locus_client_state_of(__atomic_load_n(
						   &ctl->state_pid, __ATOMIC_ACQUIRE)) !=
					   LOCUS_CLIENT_DETACHING;

				locus_counter_inc(n->ctl_blk, died ? n->ctr_reclaimed
								   : n->ctr_detached);
				registry_set(n, i, 0);
				if (locus_regions_slot_busy(n->regions, i))
					n->draining[i] = 1;
				else
					locus_clients_release(&n->clients, i);
			}
			continue;
		}
		ev = locus_clients_check(&n->clients, i);
		if (ev == LOCUS_CLIENTS_CLAIM) {
			why = check_claim(n, i, &n->grant[i]);
			if (why < 0) {
				locus_counter_inc(n->ctl_blk, n->ctr_refused);
				locus_clients_activate(&n->clients, i, why);
				continue;
			}
			if (locus_clients_prepare(&n->clients, i) < 0)
				continue;
			n->claim[i] = __atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE);
			registry_set(n, i, 1);
			n->cmd[i] = LOCUS_ENGINE_ATTACH;
			n->ticket[i] = locus_engine_command(n->engine, i, LOCUS_ENGINE_ATTACH,
							    &n->grant[i]);
		} else if (ev == LOCUS_CLIENTS_GONE) {
			if (!n->attached[i]) {
				locus_clients_release(&n->clients, i);
				continue;
			}
			n->cmd[i] = LOCUS_ENGINE_DETACH;
			n->ticket[i] = locus_engine_command(n->engine, i, LOCUS_ENGINE_DETACH, NULL);
			locus_regions_slot_gone(n->regions, i);
		}
	}
}

void locus_node_destroy(struct locus_node *n, int remove_segment)
{
	if (!n)
		return;
	/* the engine is stopped: its regions go without a DEL */
	locus_regions_destroy(n->regions);
	locus_pushsrv_destroy(n->push);
	locus_engine_destroy(n->engine);
	locus_counters_close(n->ctrs);
	locus_table_region_detach(n->tables);
	if (n->table_mem)
		munmap(n->table_mem, n->table_len);
	if (n->shm) {
		locus_shm_detach(n->shm);
		if (remove_segment)
			locus_shm_remove(n->cfg.instance);
	}
	free(n->ticket);
	free(n->cmd);
	free(n->attached);
	free(n->claim);
	free(n->grant);
	free(n->decoder_owner);
	free(n->rank_owner);
	free(n->draining);
	free(n);
}
