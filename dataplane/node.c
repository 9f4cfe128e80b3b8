// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "locus_client_priv.h"
#include "locus_counters_priv.h"
#include "locus_eldr_router.h"
#include "locus_err_priv.h"
#include "locus_shm_priv.h"
#include "locus_sigcache.h"
#include "locus_wire.h"
#include "node_priv.h"

#define TABLE_SLOTS 3
#define CTL_BLOCK LOCUS_NODE_CTL_BLOCK

/* Blocks: 0 engine 0, 1 control, 2.. engines 1.. (one writer lcore each). */
uint32_t node_engine_block(uint32_t k)
{
	return k ? k + 1 : LOCUS_NODE_ENGINE_BLOCK;
}

uint32_t locus_node_engine_block(uint32_t k)
{
	return node_engine_block(k);
}

static size_t counters_block_size(const struct locus_config *c)
{
	/* engine vectors, the [layers][experts] load matrix, histograms, load rows by node, slack */
	return (size_t)8 * ((size_t)c->moe_layers * c->moe_experts + 4 * c->max_decoders + 64) +
	       (size_t)8 * LOCUS_HIST_WORDS * 8 + (size_t)8 * (4 * c->n_nodes + 1) + 4096 + 8 * 32 + /* + the signature cache's */
	       /* a rail past the first: its endpoint's vectors by peer and status */
	       (size_t)8 * (64 * c->n_nodes + 16) * (c->nodes[c->node_id].n_rails ?
						     c->nodes[c->node_id].n_rails - 1 : 0);
}

static int make_segment(struct locus_node *n, struct locus_error *err)
{
	const struct locus_config *c = &n->cfg;
	/* a reader per engine lcore: a push is decided once every engine switched */
	struct locus_table_params tp = { .n_channels = LOCUS_TABLE_N_CHANNELS,
					 .n_readers = c->engine_lcores };
	/* each rail past the first exports its own endpoint's counters (verbs_r<N>_*) */
	uint32_t extra_rails = c->nodes[c->node_id].n_rails ? c->nodes[c->node_id].n_rails - 1 : 0;
	struct locus_ctr_params cp = { .max_entries = 200 + 32 * extra_rails,
				       .n_blocks = 1 + c->engine_lcores,
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
	if (!n->table_len || !sp.region_size[LOCUS_REGION_COUNTERS] ||
	    !locus_clients_region_size(&clp))
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
	/* the client slots: one memfd each, a client gets its own at attach */
	return locus_clients_create(&n->clients, &clp, err);
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

/* The registration socket: attachments from the start, dma-buf regions too. */
static int open_regions(struct locus_node *n, struct locus_error *err)
{
	struct locus_regions_params p = {
		.instance = n->cfg.instance, .clients = &n->clients, .engine = n->engine,
		.engines = n->engines, .slot_engine = n->slot_engine, .ctrs = n->ctrs,
		.ctl_blk = n->ctl_blk, .attached = n->attached,
		.attach = &n->attach_ops,
	};

	node_clients_init(n);
	return locus_regions_create(&p, &n->regions, err);
}

/*
 * The engines: one per engine lcore, each with its table reader, counters
 * block (engine 0 has the signature cache, all of its bytes); several share a
 * group (their hand-over rings). Engine k sends to other nodes through
 * remotes[k] (a relay of its own to the network lcore); an arrival comes to
 * the engine locus_node_arrival_engine() names.
 */
static int create_engines(struct locus_node *n, struct locus_engine_params *ep,
			  uint64_t (*now)(void), uint64_t tsc_hz,
			  const struct locus_engine_remote *const *remotes, uint32_t n_remotes,
			  struct locus_error *err)
{
	int ret;

	if (n_remotes && n_remotes != n->n_eng)
		return locus_error_set(err, EINVAL, "%u inter-node transports for %u engines",
				       n_remotes, n->n_eng);

	if (n->n_eng > 1) {
		ret = locus_engine_group_create(n->n_eng, n->cfg.client_slots,
						n->cfg.client_inbox_slots, &n->group);
		if (ret < 0)
			return locus_error_set(err, -ret, "engine group of %u: %s", n->n_eng,
					       strerror(-ret));
	}
	ep->clients = &n->clients;
	ep->tables = n->tables;
	ep->tsc_hz = tsc_hz;
	ep->now = now;
	ep->group = n->group;
	ep->cluster_placements = n->cfg.etcd[0] != 0;
	ep->router_path = n->cfg.eldr_precision == 8 ? LOCUS_ELDR_PATH_AUTO_I8 : LOCUS_ELDR_PATH_AUTO;
	for (uint32_t k = 0; k < n->n_eng; k++) {
		/* the node's signature cache is engine 0's, where every prefiller is */
		ep->dims.sig_cache_bytes = k == 0 ? n->cfg.sig_cache_bytes : 0;
		ep->reader_idx = k;
		ep->engine_idx = k;
		ep->ctr_block = locus_counters_block(n->ctrs, node_engine_block(k));
		ep->remote = n_remotes ? remotes[k] : NULL;
		ret = locus_engine_create(ep, &n->engines[k], err);
		if (ret < 0)
			return ret;
	}
	n->engine = n->engines[0];
	n->eng_blk = locus_counters_block(n->ctrs, node_engine_block(0));
	n->sc_resets_off = ep->ctr.sc_resets;
	return 0;
}

int locus_node_create(const struct locus_config *cfg, uint64_t (*now)(void), uint64_t tsc_hz,
		      struct locus_node **out, struct locus_error *err)
{
	return locus_node_create_remotes(cfg, now, tsc_hz, NULL, 0, out, err);
}

int locus_node_create_remote(const struct locus_config *cfg, uint64_t (*now)(void),
			     uint64_t tsc_hz, const struct locus_engine_remote *remote,
			     struct locus_node **out, struct locus_error *err)
{
	return locus_node_create_remotes(cfg, now, tsc_hz, &remote, remote ? 1 : 0, out, err);
}

int locus_node_create_remotes(const struct locus_config *cfg, uint64_t (*now)(void),
			      uint64_t tsc_hz, const struct locus_engine_remote *const *remotes,
			      uint32_t n_remotes, struct locus_node **out, struct locus_error *err)
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
	n->conn = malloc(sizeof(int) * cfg->client_slots);
	n->renew = calloc(cfg->client_slots, 1);
	n->grant = calloc(cfg->client_slots, sizeof(*n->grant));
	n->decoder_owner = malloc(sizeof(int32_t) * cfg->max_decoders);
	n->rank_owner = malloc(sizeof(int32_t) * n->n_ranks);
	n->decoder_engine = calloc(cfg->max_decoders, 1);
	n->rank_engine = calloc(n->n_ranks, 1);
	n->draining = calloc(cfg->client_slots, 1);
	n->n_eng = cfg->engine_lcores ? cfg->engine_lcores : 1;
	n->slot_engine = calloc(cfg->client_slots, 1);
	n->eng_ticket = calloc((size_t)cfg->client_slots * n->n_eng, sizeof(*n->eng_ticket));
	if (!n->ticket || !n->cmd || !n->attached || !n->claim || !n->grant || !n->decoder_owner ||
	    !n->rank_owner || !n->decoder_engine || !n->rank_engine || !n->draining || !n->conn ||
	    !n->renew || !n->slot_engine || !n->eng_ticket) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	for (uint32_t i = 0; i < cfg->max_decoders; i++)
		n->decoder_owner[i] = -1;
	for (uint32_t i = 0; i < n->n_ranks; i++)
		n->rank_owner[i] = -1;
	for (uint32_t i = 0; i < cfg->client_slots; i++)
		n->conn[i] = -1;
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
		.top_k = cfg->moe_top_k,
		.sig_cache_block_tokens = cfg->sig_cache_block_tokens,
		.sig_cache_bytes = cfg->sig_cache_bytes,
		.sig_cache_checkpoint_blocks = cfg->sig_cache_checkpoint_blocks,
	};
	ret = locus_engine_register_counters(n->ctrs, &ep.dims, &ep.ctr, err);
	if (ret == 0)
		ret = register_control_counters(n, err);
	if (ret < 0)
		goto err_free;
	ret = create_engines(n, &ep, now, tsc_hz, remotes, n_remotes, err);
	if (ret == 0 && cfg->sig_cache_bytes) {
		struct locus_sigcache_params sp = {
			.n_layers = cfg->moe_layers, .n_experts = cfg->moe_experts,
			.top_k = cfg->moe_top_k, .block_tokens = cfg->sig_cache_block_tokens,
			.capacity_bytes = cfg->sig_cache_bytes,
			.checkpoint_blocks = cfg->sig_cache_checkpoint_blocks,
		};
		uint64_t nb, nc;

		locus_sigcache_split(&sp, &nb, &nc);
		fprintf(stderr, "locusd: signature cache: %llu bytes, blocks of %u tokens, "
			"top-%u: %llu blocks of %ux%u, %llu prefix checkpoints (one per %u "
			"blocks)\n", (unsigned long long)cfg->sig_cache_bytes, sp.block_tokens,
			sp.top_k, (unsigned long long)nb, sp.n_layers, sp.n_experts,
			(unsigned long long)nc, sp.checkpoint_blocks);
	}
	if (ret == 0)
		ret = open_push(n, err);
	if (ret == 0)
		ret = open_regions(n, err);
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

int locus_node_place_gpus(struct locus_node *n, const uint8_t *gpu_engine, uint32_t n_gpus)
{
	if (n_gpus != n->cfg.gpus_per_node || n_gpus > LOCUS_CFG_MAX_GPUS)
		return -LOCUS_ERANGE;
	for (uint32_t g = 0; g < n_gpus; g++)
		if (gpu_engine[g] >= n->n_eng)
			return -LOCUS_ERANGE;
	memcpy(n->gpu_engine, gpu_engine, n_gpus);
	n->gpus_placed = 1;
	return 0;
}

uint32_t locus_node_slot_engine(const struct locus_node *n, uint32_t slot)
{
	return slot < n->cfg.client_slots ? n->grant[slot].engine : 0;
}

uint32_t locus_node_arrival_engine(const struct locus_node *n, const void *msg, size_t len)
{
	struct locus_msg_hdr h;
	uint32_t gpn = n->cfg.gpus_per_node;
	uint8_t e;

	if (n->n_eng == 1 || len < sizeof(h))
		return 0;
	memcpy(&h, msg, sizeof(h));
	switch (h.type) {
	case LOCUS_MSG_SIGNATURE:
		return h.dst_rank < n->cfg.max_decoders
			       ? __atomic_load_n(&n->decoder_engine[h.dst_rank], __ATOMIC_RELAXED)
			       : 0;
	case LOCUS_MSG_DISPATCH:
	case LOCUS_MSG_COMBINE:
		if (h.dst_rank / gpn != n->cfg.node_id || h.dst_rank >= n->n_ranks)
			return 0;
		/* the engine it was granted (a rank that prefills too may sit on engine 0) */
		e = __atomic_load_n(&n->rank_engine[h.dst_rank], __ATOMIC_RELAXED);
		return e ? e - 1u : node_rank_engine(n, h.dst_rank);
	default:
		return 0;
	}
}

uint32_t locus_node_n_engines(const struct locus_node *n)
{
	return n->n_eng;
}

struct locus_engine *locus_node_engine_at(struct locus_node *n, uint32_t k)
{
	return k < n->n_eng ? n->engines[k] : NULL;
}

uint64_t locus_node_table_generation(struct locus_node *n, unsigned ch)
{
	uint64_t g = locus_engine_table_generation(n->engines[0], ch);

	for (uint32_t k = 1; k < n->n_eng; k++)
		g = LOCUS_MIN(g, locus_engine_table_generation(n->engines[k], ch));
	return g;
}

int locus_node_grace_check(struct locus_node *n, const void *buf, size_t len,
			   struct locus_error *err)
{
	for (uint32_t k = 0; k < n->n_eng; k++) {
		int ret = locus_engine_grace_check(n->engines[k], buf, len, err);

		if (ret < 0)
			return ret;
	}
	return 0;
}

uint32_t locus_node_engine_inflight(const struct locus_node *n)
{
	return locus_engine_group_inflight(n->group);
}

struct locus_counters *locus_node_counters(struct locus_node *n)
{
	return n->ctrs;
}

struct locus_pushsrv *locus_node_pushsrv(struct locus_node *n)
{
	return n->push;
}

int locus_node_regions_open(struct locus_node *n, const struct locus_regions_mr_ops *mr,
			    struct locus_error *err)
{
	if (!n->regions)
		return locus_error_set(err, LOCUS_ESTATE, "the registration socket is closed");
	locus_regions_set_mr(n->regions, mr);
	return 0;
}

void locus_node_regions_close(struct locus_node *n)
{
	locus_regions_destroy(n->regions);
	n->regions = NULL;
}

void *locus_node_client_region(struct locus_node *n, size_t *len)
{
	*len = n->clients.size;
	return n->clients.base;
}

void locus_node_client_slots(const struct locus_node *n, size_t *first, size_t *stride,
			     unsigned *count)
{
	*first = n->clients.slots_off;
	*stride = n->clients.slot_stride;
	*count = n->clients.p.n_slots;
}

uint32_t locus_node_clients(const struct locus_node *n)
{
	return n->n_attached;
}

uint32_t locus_node_ranks_attached(const struct locus_node *n)
{
	uint32_t gpn = n->cfg.gpus_per_node, first = n->cfg.node_id * gpn, bits = 0;

	for (uint32_t g = 0; g < gpn && first + g < n->n_ranks; g++)
		bits |= (uint32_t)(n->rank_owner[first + g] >= 0) << g;
	return bits;
}

void locus_node_destroy(struct locus_node *n, int remove_segment)
{
	if (!n)
		return;
	/* the engine is stopped: its regions go without a DEL */
	locus_regions_destroy(n->regions);
	locus_pushsrv_destroy(n->push);
	for (uint32_t k = 0; k < n->n_eng; k++)
		locus_engine_destroy(n->engines[k]);
	locus_engine_group_destroy(n->group);
	locus_clients_destroy(&n->clients);
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
	free(n->conn);
	free(n->renew);
	free(n->grant);
	free(n->decoder_owner);
	free(n->rank_owner);
	free(n->decoder_engine);
	free(n->rank_engine);
	free(n->draining);
	free(n->slot_engine);
	free(n->eng_ticket);
	free(n);
}
