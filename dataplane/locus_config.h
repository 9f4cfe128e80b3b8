/* SPDX-License-Identifier: MIT */
/*
 * locusd configuration: /etc/locus/<instance>.conf.
 *
 * An INI-style text file, one `key = value` per line, `#` comments, two
 * sections. Every key is known, every value is checked; the first problem
 * is reported as "FILE:LINE: message" and the whole file is refused.
 *
 *   [locusd]
 *   instance        = default          # segment /dev/shm/locus.<instance>
 *   node            = 0                # this node's id in [cluster]
 *   eal_args        = -l 0-1 --no-huge --no-pci -m 64
 *   engine_lcores   = 1                # engine lcores: a count (the first worker
 *                                      # lcores of eal_args) or a list of them
 *                                      # (2,3 or 2-3); one node, intra_node = shm
 *   gpu_pci         = 0000:17:00.0,... # the node's GPUs in rank order (gpus_per_node of
 *                                      # them): with engine_lcores > 1 a rank's engine is
 *                                      # one on its GPU's NUMA node (sysfs numa_node)
 *   rdma_device     = auto             # a device name, "auto" or "none", or a list of
 *                                      # names, one per rail (mlx5_0,mlx5_1): this node's
 *                                      # node.<id> then lists one address per rail.
 *                                      # auto with gpu_pci: the device nearest each GPU
 *                                      # by PCIe distance, a rail per distinct device in
 *                                      # the order of the GPUs' first appearance (node.<id>
 *                                      # lists their addresses in that order; locusd
 *                                      # refuses to start on another count), and a rank's
 *                                      # home rail is its GPU's (locus_rail_devs.h)
 *   rdma_near_pci   = 0000:3b:00.0     # auto without gpu_pci: nearest to this PCI device
 *   rdma_near_numa  = 0                # auto without gpu_pci: nearest to this NUMA node
 *   rdma_port       = 1
 *   rdma_ack_timeout = 14              # RC's local ACK time-out, 4.096 us << N (14: 67 ms;
 *                                      # a link is given up after 7 of them, 470 ms); a
 *                                      # fabric that reorders or drops (no PFC) wants more
 *   rdma_stall_ms   = 0                # a connection whose sends see no completion this
 *                                      # long fails (0: twice RC's own end, >= 5 s)
 *   intra_node      = shm              # shm | verbs (loopback)
 *   secret_file     = /etc/locus/secret
 *   ring_size       = 1024             # client ring entries, power of two
 *   inbox_slots     = 256              # per-peer inbox slots, power of two
 *   inbox_slot_size = 16384            # bytes, multiple of 64
 *   client_slots    = 16               # client attachments
 *   stage_size      = 4194304          # bytes of each client's staging area
 *   client_inbox_slots = 64            # inbox slots (inbox_slot_size each) per client
 *   moe_layers      = 48               # largest table the data plane accepts
 *   moe_experts     = 128
 *   moe_top_k       = 8                # experts per token per layer (bounds cached blocks)
 *   sig_cache_bytes = 33554432         # signature cache (KV-block expert counts); 0 = off
 *   sig_cache_block_tokens = 16        # tokens per KV block (the serving engine's block size)
 *   sig_cache_checkpoint_blocks = 8    # a prefix checkpoint every N blocks (chained hashes);
 *                                      # 0 = none (a client whose hashes are not chained)
 *   max_decoders    = 64               # decoder ids 0..max_decoders-1
 *   max_batch_tokens = 4096            # tokens per dispatch batch
 *   table_slot_size = 4194304          # bytes per table slot in the segment
 *   idle_spin_polls = 1000000          # empty polls in a row that only spin, then
 *   idle_pause_polls = 1000000         # empty polls that pause the CPU once each, then
 *   idle_sleep_max_us = 50             # sleeps of 1, 2, 4 ... up to this many us while
 *                                      # idle (0: never sleep); any work starts over
 *                                      # (dataplane/locus_idle.h). idle_sleep_us = N is
 *                                      # accepted as an alias of idle_sleep_max_us
 *                                      # (not both in one file). SIGHUP applies them.
 *   tau             = 0.1              # default locality band
 *   eldr_precision  = 16               # the router's arithmetic: 16 (int16 centroids) or 8
 *                                      # (u8 centroids, scores within 2e-3 of the float
 *                                      # reference; dataplane/README.md, "The ELDR router")
 *   load_timeout_ms = 1000             # a decoder silent this long is skipped
 *   watchdog        = yes              # sd_notify WATCHDOG=1 when systemd asks
 *   ctl_group       = locus-ctl        # who may push tables (a group name or a gid)
 *
 *   [cluster]
 *   id              = 1
 *   gpus_per_node   = 4
 *   node.0          = 127.0.0.1:7471   # node.<id> = IPv4:port, ids 0..n-1; with rails
 *                                      # IPv4:port,IPv4:port,... (rail 0 first): two
 *                                      # nodes connect on every rail both list
 *   node.1          = 127.0.0.2:7471
 *
 * With etcd (dataplane/README.md, "The cluster"), [cluster] lists this
 * node's node.<id> line only and the cluster's size; the others' addresses
 * come from their records in etcd:
 *   etcd            = http://10.0.0.9:2379,...  # etcd URLs (https:// with TLS)
 *   etcd_prefix     = /locus           # keys under <prefix>/<id>/
 *   etcd_cacert     = /etc/locus/etcd-ca.pem    # TLS: the CA, this node's
 *   etcd_cert       = /etc/locus/etcd.pem       # certificate and key
 *   etcd_key        = /etc/locus/etcd.key
 *   etcd_lease_s    = 5                # a stopped node leaves within this
 *   etcd_loads_s    = 5                # expert loads published this often (0 off)
 *   nodes           = 4                # node ids 0..nodes-1
 *   group.<name>    = 0-7,12           # a group of nodes that talk (an EP group,
 *                                      # an ELDR cell); none: every node talks
 *                                      # with every other (at most 64 nodes)
 */
#ifndef LOCUS_CONFIG_H
#define LOCUS_CONFIG_H

#include <stdint.h>

#include "locus_err.h"

#define LOCUS_CFG_MAX_NODES    1024 /* node ids of a cluster */
#define LOCUS_CFG_MAX_PEERS    64   /* nodes one node talks with, itself included */
#define LOCUS_CFG_MAX_GROUPS   64
#define LOCUS_CFG_GROUP_NAME   32
#define LOCUS_CFG_MAX_GPUS     16   /* per node */
#define LOCUS_CFG_NAME_MAX     64
#define LOCUS_CFG_PATH_MAX     256
#define LOCUS_CFG_EAL_MAX      512
#define LOCUS_CFG_MAX_ENGINES  8    /* engine lcores */
#define LOCUS_CFG_MAX_RAILS    8    /* RDMA devices (rails) per node */

/*
 * The compiled-in (deployment) idle policy, tuned for latency on a core of
 * its own: gaps between requests shorter than the spins and pauses are
 * never slept through; after that the engine sleeps at most 50 us at a
 * time, which bounds what the first request after a long pause waits (plus
 * the kernel's wake-up) while idle costs a fraction of a core
 * (dataplane/README.md, "Idle policy"; figures: make bench's results).
 */
#define LOCUS_CFG_IDLE_SPIN_POLLS   1000000u
#define LOCUS_CFG_IDLE_PAUSE_POLLS  1000000u
#define LOCUS_CFG_IDLE_SLEEP_MAX_US 50u

enum locus_intra_node {
	LOCUS_INTRA_SHM   = 0, /* copy into the peer rank's inbox in the segment */
	LOCUS_INTRA_VERBS = 1, /* RDMA loopback through the local device */
};

struct locus_cfg_addr {
	uint32_t ipv4;  /* network byte order */
	uint16_t port;  /* host byte order */
};

struct locus_cfg_node {
	uint32_t ipv4;  /* rail 0's: network byte order */
	uint16_t port;  /* rail 0's: host byte order */
	uint8_t  set;
	uint8_t  n_rails;                         /* addresses listed, 1..LOCUS_CFG_MAX_RAILS */
	struct locus_cfg_addr rail[LOCUS_CFG_MAX_RAILS]; /* rail[0] is ipv4:port */
};

struct locus_cfg_group {
	char     name[LOCUS_CFG_GROUP_NAME];
	uint64_t nodes[LOCUS_CFG_MAX_NODES / 64]; /* bit i: node i is in the group */
};

struct locus_config {
	char     instance[LOCUS_CFG_NAME_MAX];
	uint32_t node_id;
	char     eal_args[LOCUS_CFG_EAL_MAX];
	uint32_t engine_lcores;                   /* 1..LOCUS_CFG_MAX_ENGINES */
	uint8_t  engine_lcore_list;               /* 1: the ids below were named */
	uint32_t engine_lcore_ids[LOCUS_CFG_MAX_ENGINES];
	char     gpu_pci[LOCUS_CFG_MAX_GPUS][16]; /* dddd:bb:dd.f each, n_gpu_pci of them */
	uint32_t n_gpu_pci;                       /* 0: not given */
	char     rdma_device[LOCUS_CFG_NAME_MAX]; /* name, "auto" or "none"; with a list: the first */
	char     rdma_devices[LOCUS_CFG_MAX_RAILS][LOCUS_CFG_NAME_MAX]; /* rail i's device */
	uint32_t n_rdma_devices;                  /* names listed (auto / none: 1) */
	char     rdma_near_pci[16];               /* "" or dddd:bb:dd.f */
	int32_t  rdma_near_numa;                  /* -1: not set */
	uint8_t  rdma_port;
	uint8_t  rdma_ack_timeout;                /* 1..31 */
	uint32_t rdma_stall_ms;                   /* 0 (verbs' default) or 1..3600000 */
	enum locus_intra_node intra_node;
	char     secret_file[LOCUS_CFG_PATH_MAX];
	uint32_t ring_size;
	uint32_t inbox_slots;
	uint32_t inbox_slot_size;
	uint32_t client_slots;
	uint64_t stage_size;
	uint32_t client_inbox_slots;
	uint32_t moe_layers;
	uint32_t moe_experts;
	uint32_t moe_top_k;                       /* 1..64 */
	uint64_t sig_cache_bytes;                 /* 0: no signature cache */
	uint32_t sig_cache_block_tokens;          /* 1..255 */
	uint32_t sig_cache_checkpoint_blocks;     /* 0..4096, 0: no prefix checkpoints */
	uint32_t max_decoders;
	uint32_t max_batch_tokens;
	uint64_t table_slot_size;
	uint32_t idle_spin_polls;                 /* locus_idle.h */
	uint32_t idle_pause_polls;
	uint32_t idle_sleep_max_us;               /* 0: never sleeps */
	float    tau;
	uint32_t eldr_precision;                  /* 16 or 8: the router's arithmetic */
	uint32_t load_timeout_ms;
	uint8_t  watchdog;
	char     ctl_group[LOCUS_CFG_NAME_MAX];      /* name or number; "" none */

	uint64_t cluster_id;
	uint32_t gpus_per_node;
	uint32_t n_nodes;
	struct locus_cfg_node nodes[LOCUS_CFG_MAX_NODES]; /* with etcd: this node's only */
	/* groups: a node connects to, exchanges loads with and routes to the
	 * nodes it shares a group with only; none: one group of every node */
	uint32_t n_groups;
	struct locus_cfg_group groups[LOCUS_CFG_MAX_GROUPS];
	char     etcd[LOCUS_CFG_EAL_MAX];         /* "": no etcd, the static node list */
	char     etcd_prefix[LOCUS_CFG_NAME_MAX];
	char     etcd_cacert[LOCUS_CFG_PATH_MAX];
	char     etcd_cert[LOCUS_CFG_PATH_MAX];
	char     etcd_key[LOCUS_CFG_PATH_MAX];
	uint32_t etcd_lease_s;                    /* 2..3600 */
	uint32_t etcd_loads_s;                    /* 0 (off), 1..3600 */
};

/* Fill cfg with the defaults (one node, 4 GPUs, shared-memory tiers). */
void locus_config_defaults(struct locus_config *cfg);

/*
 * Parse text (len bytes; need not be NUL-terminated) named `origin` in
 * messages, on top of the defaults. Returns 0, or a negative code with
 * err->msg "origin:LINE: what is wrong". Cross-field checks (node ids
 * contiguous, this node present, sizes) run at the end.
 */
int locus_config_parse(const char *text, size_t len, const char *origin,
		       struct locus_config *cfg, struct locus_error *err);

/* Read and parse a file. */
int locus_config_load(const char *path, struct locus_config *cfg, struct locus_error *err);

/* Total ranks: n_nodes * gpus_per_node. */
static inline uint32_t locus_config_n_ranks(const struct locus_config *cfg)
{
	return cfg->n_nodes * cfg->gpus_per_node;
}

/* Whether nodes a and b talk: no groups, or a group holds both. */
static inline int locus_config_talks(const struct locus_config *cfg, uint32_t a, uint32_t b)
{
	if (!cfg->n_groups)
		return 1;
	if (a >= LOCUS_CFG_MAX_NODES || b >= LOCUS_CFG_MAX_NODES)
		return 0;
	for (uint32_t g = 0; g < cfg->n_groups; g++)
		if ((cfg->groups[g].nodes[a / 64] >> (a % 64) & 1) &&
		    (cfg->groups[g].nodes[b / 64] >> (b % 64) & 1))
			return 1;
	return 0;
}

/* Nodes node talks with, itself included. */
uint32_t locus_config_n_talk(const struct locus_config *cfg, uint32_t node);

/*
 * Rails nodes a and b have in common: rail i of one connects to rail i of
 * the other. With etcd the others' addresses come from their records, and
 * every node has this node's rails (a record with another count is refused).
 */
static inline uint32_t locus_config_common_rails(const struct locus_config *cfg, uint32_t a,
						 uint32_t b)
{
	uint32_t na = cfg->nodes[a].n_rails, nb = cfg->nodes[b].n_rails;

	if (cfg->etcd[0] && !cfg->nodes[b].set)
		nb = na;
	if (cfg->etcd[0] && !cfg->nodes[a].set)
		na = nb;
	return na < nb ? na : nb;
}

#endif /* LOCUS_CONFIG_H */
