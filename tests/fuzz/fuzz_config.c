// SPDX-License-Identifier: MIT
/*
 * The locusd config parser (locus_config_parse, what `locusd -c` and
 * SIGHUP read) on arbitrary text. Contract: what is accepted satisfies the
 * header's documented ranges and cross-field rules, and printed back as
 * `key = value` lines it parses to the same config (nothing the parser
 * accepts is lost or changed by its own syntax).
 */
#include <arpa/inet.h>
#include <math.h>

#include "fuzz.h"
#include "locus_common.h"
#include "locus_config.h"

static int is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

static void check_ranges(const struct locus_config *c)
{
	FUZZ_CHECK(memchr(c->instance, 0, sizeof(c->instance)) && c->instance[0],
		   "instance not a C string");
	FUZZ_CHECK(memchr(c->eal_args, 0, sizeof(c->eal_args)), "eal_args not terminated");
	FUZZ_CHECK(memchr(c->rdma_device, 0, sizeof(c->rdma_device)) && c->rdma_device[0],
		   "rdma_device empty");
	FUZZ_CHECK(memchr(c->secret_file, 0, sizeof(c->secret_file)), "secret_file");
	FUZZ_CHECK(!c->secret_file[0] || c->secret_file[0] == '/', "relative secret_file");
	FUZZ_CHECK(memchr(c->ctl_group, 0, sizeof(c->ctl_group)), "ctl_group not terminated");
	FUZZ_CHECK(is_pow2(c->ring_size) && c->ring_size >= 16, "ring_size %u", c->ring_size);
	FUZZ_CHECK(c->engine_lcores >= 1 && c->engine_lcores <= LOCUS_CFG_MAX_ENGINES &&
		   (c->engine_lcores == 1 ||
		    (c->intra_node == LOCUS_INTRA_SHM &&
		     c->ring_size >= 2 * c->client_inbox_slots &&
		     c->client_inbox_slots >= c->engine_lcores)),
		   "engine_lcores %u with what several engines need", c->engine_lcores);
	FUZZ_CHECK(is_pow2(c->inbox_slots), "inbox_slots %u", c->inbox_slots);
	FUZZ_CHECK(c->inbox_slot_size % LOCUS_CACHE_LINE == 0 && c->inbox_slot_size,
		   "inbox_slot_size %u", c->inbox_slot_size);
	FUZZ_CHECK(c->stage_size % LOCUS_CACHE_LINE == 0 && c->stage_size, "stage_size");
	FUZZ_CHECK(c->client_slots >= 1 && c->moe_layers >= 1 && c->moe_experts >= 1 &&
		   c->max_decoders >= 1 && c->max_batch_tokens >= 1 && c->load_timeout_ms >= 1,
		   "a count is 0");
	FUZZ_CHECK(isfinite(c->tau) && c->tau >= 0 && c->tau <= 2, "tau %g", (double)c->tau);
	FUZZ_CHECK(c->eldr_precision == 16 || c->eldr_precision == 8, "eldr_precision %u",
		   c->eldr_precision);
	FUZZ_CHECK(c->moe_top_k >= 1 && c->moe_top_k <= 64 && c->sig_cache_block_tokens >= 1 &&
		   c->sig_cache_block_tokens <= 255 && c->sig_cache_bytes <= (1ull << 40) &&
		   c->sig_cache_checkpoint_blocks <= 4096,
		   "signature cache keys out of range");
	FUZZ_CHECK(c->gpus_per_node >= 1 && c->gpus_per_node <= LOCUS_CFG_MAX_GPUS,
		   "gpus_per_node %u", c->gpus_per_node);
	FUZZ_CHECK(c->n_nodes >= 1 && c->n_nodes <= LOCUS_CFG_MAX_NODES, "n_nodes %u", c->n_nodes);
	FUZZ_CHECK(c->node_id < c->n_nodes, "node %u of %u", c->node_id, c->n_nodes);
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		FUZZ_CHECK(c->nodes[i].set && c->nodes[i].port, "node.%u not set", i);
		for (uint32_t j = i + 1; j < c->n_nodes; j++)
			FUZZ_CHECK(c->nodes[i].ipv4 != c->nodes[j].ipv4 ||
				   c->nodes[i].port != c->nodes[j].port, "same address");
	}
	for (uint32_t i = c->n_nodes; i < LOCUS_CFG_MAX_NODES; i++)
		FUZZ_CHECK(!c->nodes[i].set, "node.%u set beyond n_nodes", i);
	if (c->n_nodes > 1)
		FUZZ_CHECK(strcmp(c->rdma_device, "none") && c->secret_file[0],
			   "a cluster without device or secret");
	if (c->intra_node == LOCUS_INTRA_VERBS)
		FUZZ_CHECK(strcmp(c->rdma_device, "none"), "verbs loopback without a device");
	/* a rail per device listed, or per GPU at most with auto and gpu_pci */
	if (!strcmp(c->rdma_device, "auto") && c->n_gpu_pci)
		FUZZ_CHECK(c->nodes[c->node_id].n_rails <= c->n_gpu_pci && !c->rdma_near_pci[0] &&
			   c->rdma_near_numa < 0, "auto with gpu_pci: %u rails, near_* set",
			   c->nodes[c->node_id].n_rails);
	else
		FUZZ_CHECK(c->nodes[c->node_id].n_rails == c->n_rdma_devices,
			   "%u rails for %u devices", c->nodes[c->node_id].n_rails,
			   c->n_rdma_devices);
}

/* The config in the documented syntax. */
static size_t print_config(const struct locus_config *c, char *buf, size_t cap)
{
	size_t n = 0;

#define P(...) (n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__))
	P("[locusd]\ninstance = %s\nnode = %u\neal_args = %s\nrdma_device = %s", c->instance,
	  c->node_id, c->eal_args, c->rdma_devices[0]);
	for (uint32_t r = 1; r < c->n_rdma_devices; r++)
		P(",%s", c->rdma_devices[r]);
	P("\n");
	if (c->engine_lcore_list && c->engine_lcores == 1) {
		/* a list of one id: "N" alone would be a count */
		P("engine_lcores = %u-%u\n", c->engine_lcore_ids[0], c->engine_lcore_ids[0]);
	} else if (c->engine_lcore_list) {
		P("engine_lcores = ");
		for (uint32_t i = 0; i < c->engine_lcores; i++)
			P("%s%u", i ? "," : "", c->engine_lcore_ids[i]);
		P("\n");
	} else {
		P("engine_lcores = %u\n", c->engine_lcores);
	}
	if (c->rdma_near_pci[0])
		P("rdma_near_pci = %s\n", c->rdma_near_pci);
	for (uint32_t g = 0; g < c->n_gpu_pci; g++)
		P("%s%s%s", g ? "," : "gpu_pci = ", c->gpu_pci[g], g + 1 == c->n_gpu_pci ? "\n" : "");
	if (c->rdma_near_numa >= 0)
		P("rdma_near_numa = %d\n", c->rdma_near_numa);
	P("rdma_port = %u\nrdma_ack_timeout = %u\nrdma_stall_ms = %u\nintra_node = %s\n",
	  c->rdma_port, c->rdma_ack_timeout, c->rdma_stall_ms,
	  c->intra_node == LOCUS_INTRA_VERBS ? "verbs" : "shm");
	if (c->secret_file[0])
		P("secret_file = %s\n", c->secret_file);
	if (c->ctl_group[0])
		P("ctl_group = %s\n", c->ctl_group);
	P("ring_size = %u\ninbox_slots = %u\ninbox_slot_size = %u\nclient_slots = %u\n",
	  c->ring_size, c->inbox_slots, c->inbox_slot_size, c->client_slots);
	P("stage_size = %llu\nclient_inbox_slots = %u\nmoe_layers = %u\nmoe_experts = %u\n",
	  (unsigned long long)c->stage_size, c->client_inbox_slots, c->moe_layers,
	  c->moe_experts);
	P("moe_top_k = %u\nsig_cache_bytes = %llu\nsig_cache_block_tokens = %u\n", c->moe_top_k,
	  (unsigned long long)c->sig_cache_bytes, c->sig_cache_block_tokens);
	P("sig_cache_checkpoint_blocks = %u\n", c->sig_cache_checkpoint_blocks);
	P("max_decoders = %u\nmax_batch_tokens = %u\ntable_slot_size = %llu\n", c->max_decoders,
	  c->max_batch_tokens, (unsigned long long)c->table_slot_size);
	P("idle_spin_polls = %u\nidle_pause_polls = %u\nidle_sleep_max_us = %u\n",
	  c->idle_spin_polls, c->idle_pause_polls, c->idle_sleep_max_us);
	P("tau = %.9g\neldr_precision = %u\nload_timeout_ms = %u\nwatchdog = %s\n",
	  (double)c->tau, c->eldr_precision, c->load_timeout_ms, c->watchdog ? "yes" : "no");
	P("[cluster]\nid = %llu\ngpus_per_node = %u\n", (unsigned long long)c->cluster_id,
	  c->gpus_per_node);
	P("etcd_prefix = %s\netcd_lease_s = %u\netcd_loads_s = %u\n", c->etcd_prefix,
	  c->etcd_lease_s, c->etcd_loads_s);
	if (c->etcd[0]) {
		P("etcd = %s\nnodes = %u\n", c->etcd, c->n_nodes);
		if (c->etcd_cacert[0])
			P("etcd_cacert = %s\n", c->etcd_cacert);
		if (c->etcd_cert[0])
			P("etcd_cert = %s\netcd_key = %s\n", c->etcd_cert, c->etcd_key);
	}
	for (uint32_t g = 0; g < c->n_groups; g++) {
		const char *sep = "";

		P("group.%s = ", c->groups[g].name);
		for (uint32_t i = 0; i < LOCUS_CFG_MAX_NODES; i++) {
			uint32_t j = i;

			if (!(c->groups[g].nodes[i / 64] >> (i % 64) & 1))
				continue;
			while (j + 1 < LOCUS_CFG_MAX_NODES &&
			       (c->groups[g].nodes[(j + 1) / 64] >> ((j + 1) % 64) & 1))
				j++;
			P("%s%u-%u", sep, i, j);
			sep = ",";
			i = j;
		}
		P("\n");
	}
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		char a[INET_ADDRSTRLEN];
		struct in_addr in = { .s_addr = c->nodes[i].ipv4 };

		if (!c->nodes[i].set)
			continue;
		inet_ntop(AF_INET, &in, a, sizeof(a));
		P("node.%u = %s:%u", i, a, c->nodes[i].port);
		for (uint32_t r = 1; r < c->nodes[i].n_rails; r++) {
			in.s_addr = c->nodes[i].rail[r].ipv4;
			inet_ntop(AF_INET, &in, a, sizeof(a));
			P(",%s:%u", a, c->nodes[i].rail[r].port);
		}
		P("\n");
	}
#undef P
	return n;
}

/* Field by field: strings compare as strings (bytes after the NUL are not the config). */
static int same_config(const struct locus_config *a, const struct locus_config *b)
{
	struct locus_config x = *a, y = *b;

#define CLEAR_TAIL(s) memset((s) + strlen(s), 0, sizeof(s) - strlen(s))
	CLEAR_TAIL(x.instance), CLEAR_TAIL(y.instance);
	CLEAR_TAIL(x.eal_args), CLEAR_TAIL(y.eal_args);
	CLEAR_TAIL(x.rdma_device), CLEAR_TAIL(y.rdma_device);
	CLEAR_TAIL(x.rdma_near_pci), CLEAR_TAIL(y.rdma_near_pci);
	CLEAR_TAIL(x.secret_file), CLEAR_TAIL(y.secret_file);
	CLEAR_TAIL(x.ctl_group), CLEAR_TAIL(y.ctl_group);
	CLEAR_TAIL(x.etcd), CLEAR_TAIL(y.etcd);
	CLEAR_TAIL(x.etcd_prefix), CLEAR_TAIL(y.etcd_prefix);
	CLEAR_TAIL(x.etcd_cacert), CLEAR_TAIL(y.etcd_cacert);
	CLEAR_TAIL(x.etcd_cert), CLEAR_TAIL(y.etcd_cert);
	CLEAR_TAIL(x.etcd_key), CLEAR_TAIL(y.etcd_key);
	for (uint32_t g = 0; g < LOCUS_CFG_MAX_GPUS; g++)
		CLEAR_TAIL(x.gpu_pci[g]), CLEAR_TAIL(y.gpu_pci[g]);
	for (uint32_t r = 0; r < LOCUS_CFG_MAX_RAILS; r++)
		CLEAR_TAIL(x.rdma_devices[r]), CLEAR_TAIL(y.rdma_devices[r]);
#undef CLEAR_TAIL
	return !memcmp(&x, &y, sizeof(x));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct locus_config c, c2;
	static char text[8192];
	struct locus_error err = { 0 };
	char *buf = fuzz_dup(data, size);
	size_t n;
	int ret;

	ret = locus_config_parse(buf, size, "fuzz.conf", &c, &err);
	free(buf);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0] && !strncmp(err.msg, "fuzz.conf", 9),
			   "refusal without a FILE:LINE message: '%s'", err.msg);
		return 0;
	}
	FUZZ_CHECK(ret == 0, "parse returned %d", ret);
	check_ranges(&c);
	n = print_config(&c, text, sizeof(text));
	FUZZ_CHECK(n < sizeof(text), "printed config too long");
	ret = locus_config_parse(text, n, "reprint", &c2, &err);
	FUZZ_CHECK(ret == 0, "the config printed back is refused: %s\n%s", err.msg, text);
	FUZZ_CHECK(same_config(&c, &c2), "the config printed back parses differently\n%s",
		   text);
	return 0;
}
