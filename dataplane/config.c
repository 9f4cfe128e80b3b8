// SPDX-License-Identifier: MIT
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "locus_common.h"
#include "locus_config.h"
#include "locus_err_priv.h"
#include "locus_file.h"
#include "locus_idle.h"

#define CFG_MAX_FILE (1u << 20)
#define CFG_LINE_MAX 1024

enum cfg_section { SEC_NONE, SEC_LOCUSD, SEC_CLUSTER };

struct cfg_parser {
	const char *origin;
	unsigned line;
	struct locus_config *cfg;
	struct locus_error *err;
	int nodes_seen;          /* the file lists its own nodes: drop the default */
	unsigned line_nodes;     /* line of nodes = N, 0: not set */
	unsigned line_sleep_max; /* line of idle_sleep_max_us, 0: not set */
	unsigned line_sleep_alias; /* line of idle_sleep_us (its alias), 0: not set */
	unsigned line_of_node[LOCUS_CFG_MAX_NODES];
};

#define CFG_FAIL(p, code, fmt, ...)                                                  \
	locus_error_set((p)->err, (code), "%s:%u: " fmt, (p)->origin, (p)->line,       \
			##__VA_ARGS__)

/* Cross-field problems belong to the whole file, not to a line. */
#define CFG_FAIL_FILE(p, code, fmt, ...)                                             \
	locus_error_set((p)->err, (code), "%s: " fmt, (p)->origin, ##__VA_ARGS__)

void locus_config_defaults(struct locus_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	strcpy(cfg->instance, "default");
	strcpy(cfg->eal_args, "-l 0-1 --no-huge --no-pci -m 64");
	cfg->engine_lcores = 1;
	strcpy(cfg->rdma_device, "none");
	strcpy(cfg->rdma_devices[0], "none");
	cfg->n_rdma_devices = 1;
	cfg->rdma_near_numa = -1;
	cfg->rdma_port = 1;
	cfg->rdma_ack_timeout = 14;
	cfg->intra_node = LOCUS_INTRA_SHM;
	cfg->ring_size = 1024;
	cfg->inbox_slots = 256;
	cfg->inbox_slot_size = 16384;
	cfg->client_slots = 16;
	cfg->stage_size = 4u << 20;
	cfg->client_inbox_slots = 64;
	cfg->moe_layers = 48;
	cfg->moe_experts = 128;
	cfg->moe_top_k = 8;
	cfg->sig_cache_bytes = 32u << 20;
	cfg->sig_cache_block_tokens = 16;
	cfg->sig_cache_checkpoint_blocks = 8;
	cfg->max_decoders = 64;
	cfg->max_batch_tokens = 4096;
	cfg->table_slot_size = 4u << 20;
	cfg->idle_spin_polls = LOCUS_CFG_IDLE_SPIN_POLLS;
	cfg->idle_pause_polls = LOCUS_CFG_IDLE_PAUSE_POLLS;
	cfg->idle_sleep_max_us = LOCUS_CFG_IDLE_SLEEP_MAX_US;
	cfg->tau = 0.1f;
	cfg->eldr_precision = 16;
	cfg->load_timeout_ms = 1000;
	cfg->watchdog = 1;
	strcpy(cfg->ctl_group, "locus-ctl");
	cfg->cluster_id = 1;
	cfg->gpus_per_node = 4;
	cfg->n_nodes = 1;
	cfg->nodes[0].ipv4 = htonl(INADDR_LOOPBACK);
	cfg->nodes[0].port = 7471;
	cfg->nodes[0].set = 1;
	cfg->nodes[0].n_rails = 1;
	cfg->nodes[0].rail[0] = (struct locus_cfg_addr){ cfg->nodes[0].ipv4, cfg->nodes[0].port };
	strcpy(cfg->etcd_prefix, "/locus");
	cfg->etcd_lease_s = 5;
	cfg->etcd_loads_s = 5;
}

static int parse_u64(struct cfg_parser *p, const char *key, const char *v, uint64_t lo,
		     uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long x;

	if (!isdigit((unsigned char)v[0]))
		return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not a non-negative integer", key, v);
	errno = 0;
	x = strtoull(v, &end, 0);
	if (errno || *end)
		return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not a non-negative integer", key, v);
	if (x < lo || x > hi)
		return CFG_FAIL(p, LOCUS_ERANGE, "%s: %llu is outside [%llu, %llu]", key, x,
				(unsigned long long)lo, (unsigned long long)hi);
	*out = x;
	return 0;
}

static int parse_u32(struct cfg_parser *p, const char *key, const char *v, uint32_t lo,
		     uint32_t hi, uint32_t *out)
{
	uint64_t x;
	int ret = parse_u64(p, key, v, lo, hi, &x);

	if (ret == 0)
		*out = (uint32_t)x;
	return ret;
}

static int parse_pow2(struct cfg_parser *p, const char *key, const char *v, uint32_t lo,
		      uint32_t hi, uint32_t *out)
{
	int ret = parse_u32(p, key, v, lo, hi, out);

	if (ret == 0 && !LOCUS_IS_POW2(*out))
		return CFG_FAIL(p, LOCUS_ERANGE, "%s: %u is not a power of two", key, *out);
	return ret;
}

/*
 * engine_lcores = N (the first N worker lcores), or a list of lcore ids:
 * "2,3", "2-5", "2,4-6"; each id once, at most LOCUS_CFG_MAX_ENGINES.
 */
static int parse_engine_lcores(struct cfg_parser *p, const char *key, const char *v,
			       struct locus_config *c)
{
	uint32_t n = 0;
	const char *s = v;

	/* a later line replaces an earlier one whole: no ids of an old list stay */
	memset(c->engine_lcore_ids, 0, sizeof(c->engine_lcore_ids));
	c->engine_lcore_list = 0;
	if (!strpbrk(v, ",-"))
		return parse_u32(p, key, v, 1, LOCUS_CFG_MAX_ENGINES, &c->engine_lcores);
	while (*s) {
		char *end;
		unsigned long a = strtoul(s, &end, 10), b;

		if (end == s || a >= 1024)
			return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not a count nor a list of "
					"lcore ids (2,3 or 2-3)", key, v);
		b = a;
		if (*end == '-') {
			s = end + 1;
			b = strtoul(s, &end, 10);
			if (end == s || b < a || b >= 1024)
				return CFG_FAIL(p, LOCUS_EPARSE, "%s: bad range in '%s'", key, v);
		}
		for (unsigned long id = a; id <= b; id++) {
			if (n == LOCUS_CFG_MAX_ENGINES)
				return CFG_FAIL(p, LOCUS_ERANGE, "%s: more than %u lcores", key,
						LOCUS_CFG_MAX_ENGINES);
			for (uint32_t j = 0; j < n; j++)
				if (c->engine_lcore_ids[j] == id)
					return CFG_FAIL(p, LOCUS_ERANGE, "%s: lcore %lu named twice",
							key, id);
			c->engine_lcore_ids[n++] = (uint32_t)id;
		}
		if (*end == ',')
			end++;
		else if (*end)
			return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not a list of lcore ids", key,
					v);
		s = end;
	}
	if (!n)
		return CFG_FAIL(p, LOCUS_EPARSE, "%s: empty list", key);
	c->engine_lcores = n;
	c->engine_lcore_list = 1;
	return 0;
}

static int parse_bool(struct cfg_parser *p, const char *key, const char *v, uint8_t *out)
{
	if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1"))
		*out = 1;
	else if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0"))
		*out = 0;
	else
		return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not yes/no", key, v);
	return 0;
}

static int copy_str(struct cfg_parser *p, const char *key, const char *v, char *dst,
		    size_t cap)
{
	size_t n = strlen(v);

	if (n == 0)
		return CFG_FAIL(p, LOCUS_EPARSE, "%s: empty value", key);
	if (n >= cap)
		return CFG_FAIL(p, LOCUS_ERANGE, "%s: value longer than %zu characters", key,
				cap - 1);
	memcpy(dst, v, n + 1);
	return 0;
}

static int valid_name(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.')
			return 0;
	return 1;
}

/* A group name as useradd takes them ([a-z_][a-z0-9_-]*, a trailing $), or a gid. */
static int valid_group(const char *s)
{
	size_t n = strlen(s), digits = strspn(s, "0123456789");

	if (n == 0 || n >= 32)
		return 0;
	if (digits == n)
		return 1;
	if (!(islower((unsigned char)s[0]) || s[0] == '_'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '_' &&
		    s[i] != '-' && !(s[i] == '$' && i == n - 1))
			return 0;
	return 1;
}

static int valid_pci(const char *s)
{
	/* dddd:bb:dd.f, hex digits */
	static const char shape[] = "xxxx:xx:xx.x";

	if (strlen(s) != sizeof(shape) - 1)
		return 0;
	for (size_t i = 0; shape[i]; i++) {
		if (shape[i] == 'x' ? !isxdigit((unsigned char)s[i]) : s[i] != shape[i])
			return 0;
	}
	return 1;
}

static int parse_addr(struct cfg_parser *p, const char *key, const char *v,
		      struct locus_cfg_addr *out)
{
	char host[INET_ADDRSTRLEN];
	const char *colon = strrchr(v, ':');
	struct in_addr a;
	uint32_t port = 0;
	size_t hl;

	if (!colon)
		return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not IPv4:port", key, v);
	hl = (size_t)(colon - v);
	if (hl == 0 || hl >= sizeof(host))
		return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not IPv4:port", key, v);
	memcpy(host, v, hl);
	host[hl] = '\0';
	if (inet_pton(AF_INET, host, &a) != 1)
		return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not an IPv4 address", key, host);
	if (parse_u32(p, key, colon + 1, 1, 65535, &port) < 0)
		return -p->err->code;
	out->ipv4 = a.s_addr;
	out->port = (uint16_t)port;
	return 0;
}

/*
 * The items of a comma list v, each copied to item[] (a NUL-terminated copy
 * of at most len - 1 characters), at most max of them. Empty items, too
 * many or too long ones are refused, naming key. Returns the count or a
 * negative code.
 */
static int split_list(struct cfg_parser *p, const char *key, const char *v, char *item,
		      size_t len, unsigned max)
{
	unsigned n = 0;

	for (;;) {
		size_t k = strcspn(v, ",");

		if (k == 0)
			return CFG_FAIL(p, LOCUS_EPARSE, "%s: empty item in the list", key);
		if (n == max)
			return CFG_FAIL(p, LOCUS_ERANGE, "%s: more than %u items", key, max);
		if (k >= len)
			return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%.*s' is too long", key, (int)k, v);
		memcpy(item + n * len, v, k);
		item[n * len + k] = '\0';
		n++;
		if (!v[k])
			return (int)n;
		v += k + 1;
	}
}

/* node.<id> = IPv4:port[,IPv4:port...]: one address per rail, rail 0 first. */
static int parse_node_addrs(struct cfg_parser *p, const char *key, const char *v,
			    struct locus_cfg_node *node)
{
	char item[LOCUS_CFG_MAX_RAILS][32];
	int n = split_list(p, key, v, item[0], sizeof(item[0]), LOCUS_CFG_MAX_RAILS);

	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		if (parse_addr(p, key, item[i], &node->rail[i]) < 0)
			return -p->err->code;
		for (int j = 0; j < i; j++)
			if (node->rail[j].ipv4 == node->rail[i].ipv4 &&
			    node->rail[j].port == node->rail[i].port)
				return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' listed twice", key,
						item[i]);
	}
	node->n_rails = (uint8_t)n;
	node->ipv4 = node->rail[0].ipv4;
	node->port = node->rail[0].port;
	node->set = 1;
	return 0;
}

/*
 * rdma_device = NAME | auto | none | NAME,NAME,...: a list names one device
 * per rail, each once, neither auto nor none among them.
 */
static int parse_rdma_devices(struct cfg_parser *p, const char *k, const char *v,
			      struct locus_config *c)
{
	int n = split_list(p, k, v, c->rdma_devices[0], sizeof(c->rdma_devices[0]),
			   LOCUS_CFG_MAX_RAILS);

	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		if (!valid_name(c->rdma_devices[i]))
			return CFG_FAIL(p, LOCUS_EPARSE, "rdma_device: '%s' is not a device name",
					c->rdma_devices[i]);
		if (n > 1 && (!strcmp(c->rdma_devices[i], "auto") ||
			      !strcmp(c->rdma_devices[i], "none")))
			return CFG_FAIL(p, LOCUS_EPARSE, "rdma_device: '%s' cannot be one of a "
					"list of devices", c->rdma_devices[i]);
		for (int j = 0; j < i; j++)
			if (!strcmp(c->rdma_devices[i], c->rdma_devices[j]))
				return CFG_FAIL(p, LOCUS_EPARSE, "rdma_device: '%s' listed twice",
						c->rdma_devices[i]);
	}
	for (int i = n; i < LOCUS_CFG_MAX_RAILS; i++)
		memset(c->rdma_devices[i], 0, sizeof(c->rdma_devices[i]));
	c->n_rdma_devices = (uint32_t)n;
	return copy_str(p, k, c->rdma_devices[0], c->rdma_device, sizeof(c->rdma_device));
}

/* gpu_pci = a,b,...: the node's GPUs by PCI address, in rank order; a later line replaces. */
static int parse_gpu_pci(struct cfg_parser *p, const char *key, const char *v,
			 struct locus_config *c)
{
	const char *s = v;

	c->n_gpu_pci = 0;
	memset(c->gpu_pci, 0, sizeof(c->gpu_pci));
	for (;;) {
		size_t n = strcspn(s, ",");
		char one[16];

		if (c->n_gpu_pci == LOCUS_CFG_MAX_GPUS)
			return CFG_FAIL(p, LOCUS_ERANGE, "%s: more than %u GPUs", key,
					LOCUS_CFG_MAX_GPUS);
		if (n >= sizeof(one))
			n = sizeof(one) - 1; /* too long for an address: refused below */
		memcpy(one, s, n);
		one[n] = '\0';
		if (!valid_pci(one) || (s[n] && s[n] != ','))
			return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not a list of PCI addresses "
					"dddd:bb:dd.f", key, v);
		for (uint32_t j = 0; j < c->n_gpu_pci; j++)
			if (!strcasecmp(c->gpu_pci[j], one))
				return CFG_FAIL(p, LOCUS_ERANGE, "%s: %s named twice", key, one);
		memcpy(c->gpu_pci[c->n_gpu_pci++], one, n + 1);
		s += n;
		if (!*s)
			return 0;
		s++;
	}
}

/*
 * idle_sleep_max_us, or its alias idle_sleep_us, same meaning (the sleep
 * grows from 1 us up to N). One file sets one of them.
 */
static int set_sleep_max(struct cfg_parser *p, const char *k, const char *v)
{
	int alias = !strcmp(k, "idle_sleep_us");
	unsigned *mine = alias ? &p->line_sleep_alias : &p->line_sleep_max;
	unsigned other = alias ? p->line_sleep_max : p->line_sleep_alias;

	if (other)
		return CFG_FAIL(p, LOCUS_EPARSE,
				"%s: idle_sleep_%s is already set on line %u (idle_sleep_us is an "
				"alias of idle_sleep_max_us: keep one)",
				k, alias ? "max_us" : "us", other);
	if (*mine)
		return CFG_FAIL(p, LOCUS_EPARSE, "%s listed twice (first on line %u)", k, *mine);
	*mine = p->line;
	return parse_u32(p, k, v, 0, LOCUS_IDLE_MAX_SLEEP_US, &p->cfg->idle_sleep_max_us);
}

static int set_locusd(struct cfg_parser *p, const char *k, const char *v)
{
	struct locus_config *c = p->cfg;
	uint32_t u = 0;
	int ret;

	if (!strcmp(k, "instance")) {
		if (!valid_name(v) || strlen(v) >= LOCUS_CFG_NAME_MAX)
			return CFG_FAIL(p, LOCUS_EPARSE,
					"instance: '%s' must be 1-63 of [A-Za-z0-9_.-]", v);
		return copy_str(p, k, v, c->instance, sizeof(c->instance));
	}
	if (!strcmp(k, "node"))
		return parse_u32(p, k, v, 0, LOCUS_CFG_MAX_NODES - 1, &c->node_id);
	if (!strcmp(k, "eal_args"))
		return copy_str(p, k, v, c->eal_args, sizeof(c->eal_args));
	if (!strcmp(k, "engine_lcores"))
		return parse_engine_lcores(p, k, v, c);
	if (!strcmp(k, "rdma_device"))
		return parse_rdma_devices(p, k, v, c);
	if (!strcmp(k, "gpu_pci"))
		return parse_gpu_pci(p, k, v, c);
	if (!strcmp(k, "rdma_near_pci")) {
		if (!valid_pci(v))
			return CFG_FAIL(p, LOCUS_EPARSE,
					"rdma_near_pci: '%s' is not a PCI address dddd:bb:dd.f", v);
		return copy_str(p, k, v, c->rdma_near_pci, sizeof(c->rdma_near_pci));
	}
	if (!strcmp(k, "rdma_near_numa")) {
		ret = parse_u32(p, k, v, 0, 1023, &u);
		c->rdma_near_numa = (int32_t)u;
		return ret;
	}
	if (!strcmp(k, "rdma_port")) {
		ret = parse_u32(p, k, v, 1, 255, &u);
		c->rdma_port = (uint8_t)u;
		return ret;
	}
	if (!strcmp(k, "rdma_ack_timeout")) {
		ret = parse_u32(p, k, v, 1, 31, &u);
		c->rdma_ack_timeout = (uint8_t)u;
		return ret;
	}
	if (!strcmp(k, "rdma_stall_ms")) /* 0: the verbs default (RC's own end, x2, >= 5 s) */
		return parse_u32(p, k, v, 0, 3600000, &c->rdma_stall_ms);
	if (!strcmp(k, "intra_node")) {
		if (!strcmp(v, "shm"))
			c->intra_node = LOCUS_INTRA_SHM;
		else if (!strcmp(v, "verbs"))
			c->intra_node = LOCUS_INTRA_VERBS;
		else
			return CFG_FAIL(p, LOCUS_EPARSE, "intra_node: '%s' is not shm or verbs", v);
		return 0;
	}
	if (!strcmp(k, "secret_file")) {
		if (v[0] != '/')
			return CFG_FAIL(p, LOCUS_EPARSE, "secret_file: '%s' is not an absolute path",
					v);
		return copy_str(p, k, v, c->secret_file, sizeof(c->secret_file));
	}
	if (!strcmp(k, "ring_size"))
		return parse_pow2(p, k, v, 16, 1u << 20, &c->ring_size);
	if (!strcmp(k, "inbox_slots"))
		return parse_pow2(p, k, v, 4, 1u << 16, &c->inbox_slots);
	if (!strcmp(k, "inbox_slot_size")) {
		ret = parse_u32(p, k, v, 256, 16u << 20, &c->inbox_slot_size);
		if (ret == 0 && c->inbox_slot_size % LOCUS_CACHE_LINE)
			return CFG_FAIL(p, LOCUS_ERANGE, "inbox_slot_size: %u is not a multiple of %d",
					c->inbox_slot_size, LOCUS_CACHE_LINE);
		return ret;
	}
	if (!strcmp(k, "client_slots"))
		return parse_u32(p, k, v, 1, 1024, &c->client_slots);
	if (!strcmp(k, "stage_size")) {
		ret = parse_u64(p, k, v, 4096, 1ull << 32, &c->stage_size);
		if (ret == 0 && c->stage_size % LOCUS_CACHE_LINE)
			return CFG_FAIL(p, LOCUS_ERANGE, "stage_size: %llu is not a multiple of %d",
					(unsigned long long)c->stage_size, LOCUS_CACHE_LINE);
		return ret;
	}
	if (!strcmp(k, "client_inbox_slots"))
		return parse_u32(p, k, v, 1, 4096, &c->client_inbox_slots);
	if (!strcmp(k, "moe_layers"))
		return parse_u32(p, k, v, 1, 512, &c->moe_layers);
	if (!strcmp(k, "moe_experts"))
		return parse_u32(p, k, v, 1, 4096, &c->moe_experts);
	if (!strcmp(k, "moe_top_k"))
		return parse_u32(p, k, v, 1, 64, &c->moe_top_k);
	if (!strcmp(k, "sig_cache_bytes"))
		return parse_u64(p, k, v, 0, 1ull << 40, &c->sig_cache_bytes);
	if (!strcmp(k, "sig_cache_block_tokens"))
		return parse_u32(p, k, v, 1, 255, &c->sig_cache_block_tokens);
	if (!strcmp(k, "sig_cache_checkpoint_blocks"))
		return parse_u32(p, k, v, 0, 4096, &c->sig_cache_checkpoint_blocks);
	if (!strcmp(k, "max_decoders"))
		return parse_u32(p, k, v, 1, 1024, &c->max_decoders);
	if (!strcmp(k, "max_batch_tokens"))
		return parse_u32(p, k, v, 1, 1u << 20, &c->max_batch_tokens);
	if (!strcmp(k, "table_slot_size"))
		return parse_u64(p, k, v, 4096, 1ull << 30, &c->table_slot_size);
	if (!strcmp(k, "idle_spin_polls"))
		return parse_u32(p, k, v, 0, LOCUS_IDLE_MAX_POLLS, &c->idle_spin_polls);
	if (!strcmp(k, "idle_pause_polls"))
		return parse_u32(p, k, v, 0, LOCUS_IDLE_MAX_POLLS, &c->idle_pause_polls);
	if (!strcmp(k, "idle_sleep_max_us") || !strcmp(k, "idle_sleep_us"))
		return set_sleep_max(p, k, v);
	if (!strcmp(k, "tau")) {
		char *end;
		double t;

		errno = 0;
		t = strtod(v, &end);
		if (errno || *end || end == v || !isfinite(t))
			return CFG_FAIL(p, LOCUS_EPARSE, "tau: '%s' is not a number", v);
		if (t < 0.0 || t > 2.0)
			return CFG_FAIL(p, LOCUS_ERANGE, "tau: %g is outside [0, 2]", t);
		c->tau = (float)t;
		return 0;
	}
	if (!strcmp(k, "eldr_precision")) {
		if (strcmp(v, "16") && strcmp(v, "8"))
			return CFG_FAIL(p, LOCUS_EPARSE, "eldr_precision: '%s' is not 16 or 8", v);
		c->eldr_precision = (uint32_t)atoi(v);
		return 0;
	}
	if (!strcmp(k, "load_timeout_ms"))
		return parse_u32(p, k, v, 1, 3600u * 1000u, &c->load_timeout_ms);
	if (!strcmp(k, "watchdog"))
		return parse_bool(p, k, v, &c->watchdog);
	if (!strcmp(k, "ctl_group")) {
		if (!valid_group(v))
			return CFG_FAIL(p, LOCUS_EPARSE,
					"ctl_group: '%s' is neither a group name nor a gid", v);
		return copy_str(p, k, v, c->ctl_group, sizeof(c->ctl_group));
	}
	return CFG_FAIL(p, LOCUS_EPARSE, "unknown key '%s' in [locusd]", k);
}

static int parse_group(struct cfg_parser *p, const char *k, const char *value);
static char *trim(char *s);

static int set_cluster(struct cfg_parser *p, const char *k, const char *v)
{
	struct locus_config *c = p->cfg;

	if (!strcmp(k, "id"))
		return parse_u64(p, k, v, 0, UINT64_MAX, &c->cluster_id);
	if (!strcmp(k, "gpus_per_node"))
		return parse_u32(p, k, v, 1, LOCUS_CFG_MAX_GPUS, &c->gpus_per_node);
	if (!strcmp(k, "etcd")) {
		if (strncmp(v, "http://", 7) && strncmp(v, "https://", 8))
			return CFG_FAIL(p, LOCUS_EPARSE, "etcd: '%s' is not a list of http:// or "
					"https:// URLs", v);
		return copy_str(p, k, v, c->etcd, sizeof(c->etcd));
	}
	if (!strcmp(k, "etcd_prefix")) {
		if (v[0] != '/' || strchr(v, ' '))
			return CFG_FAIL(p, LOCUS_EPARSE, "etcd_prefix: '%s' is not a key starting "
					"with /", v);
		return copy_str(p, k, v, c->etcd_prefix, sizeof(c->etcd_prefix));
	}
	if (!strcmp(k, "etcd_cacert") || !strcmp(k, "etcd_cert") || !strcmp(k, "etcd_key")) {
		char *dst = !strcmp(k, "etcd_cacert") ? c->etcd_cacert :
			    !strcmp(k, "etcd_cert") ? c->etcd_cert : c->etcd_key;

		if (v[0] != '/')
			return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not an absolute path", k, v);
		return copy_str(p, k, v, dst, LOCUS_CFG_PATH_MAX);
	}
	if (!strcmp(k, "etcd_lease_s"))
		return parse_u32(p, k, v, 2, 3600, &c->etcd_lease_s);
	if (!strcmp(k, "etcd_loads_s"))
		return parse_u32(p, k, v, 0, 3600, &c->etcd_loads_s);
	if (!strcmp(k, "nodes")) {
		p->line_nodes = p->line;
		return parse_u32(p, k, v, 1, LOCUS_CFG_MAX_NODES, &c->n_nodes);
	}
	if (!strncmp(k, "group.", 6))
		return parse_group(p, k, v);
	/* nodes = N given after node.<id> lines: N rules (checked against them at the end) */
	if (!strncmp(k, "node.", 5)) {
		uint32_t id = 0;

		if (parse_u32(p, k, k + 5, 0, LOCUS_CFG_MAX_NODES - 1, &id) < 0)
			return -p->err->code;
		if (!p->nodes_seen) {
			memset(c->nodes, 0, sizeof(c->nodes));
			if (!p->line_nodes)
				c->n_nodes = 0;
			p->nodes_seen = 1;
		}
		if (c->nodes[id].set)
			return CFG_FAIL(p, LOCUS_EPARSE, "%s listed twice (first on line %u)", k,
					p->line_of_node[id]);
		p->line_of_node[id] = p->line;
		if (parse_node_addrs(p, k, v, &c->nodes[id]) < 0)
			return -p->err->code;
		if (id + 1 > c->n_nodes && !p->line_nodes)
			c->n_nodes = id + 1;
		return 0;
	}
	return CFG_FAIL(p, LOCUS_EPARSE, "unknown key '%s' in [cluster]", k);
}

/* group.<name> = ids and ranges ("0-7,12"): a group of nodes that talk. */
static int parse_group(struct cfg_parser *p, const char *k, const char *value)
{
	struct locus_config *c = p->cfg;
	const char *name = k + 6;
	struct locus_cfg_group *g;
	char v[CFG_LINE_MAX], *tok, *save = NULL;
	size_t nlen = strlen(name);
	int named = 0;

	if (!nlen || nlen >= LOCUS_CFG_GROUP_NAME ||
	    strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != nlen)
		return CFG_FAIL(p, LOCUS_EPARSE, "%s: a group name is 1..%u letters, digits, '_' "
				"or '-'", k, LOCUS_CFG_GROUP_NAME - 1);
	for (uint32_t i = 0; i < c->n_groups; i++)
		if (!strcmp(c->groups[i].name, name))
			return CFG_FAIL(p, LOCUS_EPARSE, "%s given twice", k);
	if (c->n_groups == LOCUS_CFG_MAX_GROUPS)
		return CFG_FAIL(p, LOCUS_ERANGE, "%s: more than %u groups", k,
				LOCUS_CFG_MAX_GROUPS);
	snprintf(v, sizeof(v), "%s", value);
	g = &c->groups[c->n_groups];
	memset(g, 0, sizeof(*g));
	memcpy(g->name, name, nlen + 1);
	for (tok = strtok_r(v, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned long lo, hi;
		char *end;

		tok = trim(tok);
		errno = 0;
		lo = strtoul(tok, &end, 10);
		hi = lo;
		if (end != tok && *end == '-') {
			char *h = end + 1;

			hi = strtoul(h, &end, 10);
			if (end == h)
				end = h - 1; /* "3-": refused below */
		}
		if (errno || end == tok || *end || !isdigit((unsigned char)tok[0]) || lo > hi ||
		    hi >= LOCUS_CFG_MAX_NODES)
			return CFG_FAIL(p, LOCUS_EPARSE, "%s: '%s' is not a node id or a range of "
					"them (0..%u)", k, tok, LOCUS_CFG_MAX_NODES - 1);
		for (unsigned long i = lo; i <= hi; i++)
			g->nodes[i / 64] |= 1ull << (i % 64);
		named = 1;
	}
	if (!named)
		return CFG_FAIL(p, LOCUS_EPARSE, "%s names no node", k);
	c->n_groups++;
	return 0;
}

uint32_t locus_config_n_talk(const struct locus_config *cfg, uint32_t node)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < cfg->n_nodes; i++)
		n += i == node || locus_config_talks(cfg, node, i);
	return n;
}

/*
 * Groups: every id inside the cluster and in a group, and no node talking
 * with more than LOCUS_CFG_MAX_PEERS (without groups: every node talks with
 * every other, so the cluster is that small).
 */
static int check_groups(struct cfg_parser *p)
{
	struct locus_config *c = p->cfg;

	if (!c->n_groups) {
		if (c->n_nodes > LOCUS_CFG_MAX_PEERS)
			return CFG_FAIL_FILE(p, LOCUS_ERANGE, "%u nodes: without groups every node "
					     "connects to every other, at most %u; name the groups "
					     "that talk ([cluster] group.<name> = ids)", c->n_nodes,
					     LOCUS_CFG_MAX_PEERS);
		return 0;
	}
	for (uint32_t g = 0; g < c->n_groups; g++)
		for (uint32_t i = c->n_nodes; i < LOCUS_CFG_MAX_NODES; i++)
			if (c->groups[g].nodes[i / 64] >> (i % 64) & 1)
				return CFG_FAIL_FILE(p, LOCUS_ERANGE, "group.%s names node %u, but "
						     "the cluster has nodes 0..%u", c->groups[g].name,
						     i, c->n_nodes - 1);
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		uint32_t in = 0;

		for (uint32_t g = 0; g < c->n_groups; g++)
			in |= (uint32_t)(c->groups[g].nodes[i / 64] >> (i % 64) & 1);
		if (!in)
			return CFG_FAIL_FILE(p, LOCUS_ERANGE, "node %u is in no group: it would talk "
					     "to nobody", i);
	}
	if (locus_config_n_talk(c, c->node_id) > LOCUS_CFG_MAX_PEERS)
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "node %u talks with %u nodes through its "
				     "groups, at most %u", c->node_id,
				     locus_config_n_talk(c, c->node_id), LOCUS_CFG_MAX_PEERS);
	return 0;
}

/*
 * Static: node.<id> for every id 0..n-1 (nodes = N, if given, must agree).
 * With etcd: this node's line only, and nodes = N for the cluster's size;
 * the others' addresses come from their records.
 */
static int check_membership(struct cfg_parser *p)
{
	struct locus_config *c = p->cfg;
	uint32_t listed = 0, top = 0;

	for (uint32_t i = 0; i < LOCUS_CFG_MAX_NODES; i++)
		if (c->nodes[i].set) {
			listed++;
			top = i + 1;
		}
	if (c->etcd[0]) {
		if (!p->line_nodes)
			return CFG_FAIL_FILE(p, LOCUS_ERANGE, "etcd needs nodes = N in [cluster] "
					     "(the cluster's node ids are 0..N-1)");
		if (!p->nodes_seen || listed != 1 || !c->nodes[c->node_id].set)
			return CFG_FAIL_FILE(p, LOCUS_ERANGE, "with etcd, [cluster] lists this "
					     "node's node.%u line only (the others' addresses come "
					     "from etcd): %u node.<id> line(s) given", c->node_id,
					     listed);
		if (!!c->etcd_cert[0] != !!c->etcd_key[0])
			return CFG_FAIL_FILE(p, LOCUS_ERANGE, "etcd_cert and etcd_key go together");
		return 0;
	}
	if (c->etcd_cacert[0] || c->etcd_cert[0] || c->etcd_key[0])
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "etcd_cacert, etcd_cert and etcd_key need "
				     "etcd = URL,...");
	if (p->line_nodes && top && c->n_nodes != top)
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "nodes = %u, but [cluster] lists node.0.."
				     "node.%u", c->n_nodes, top - 1);
	for (uint32_t i = 0; i < c->n_nodes; i++)
		if (!c->nodes[i].set)
			return CFG_FAIL_FILE(p, LOCUS_ERANGE,
					"[cluster] lists node.%u but not node.%u: ids must be 0..n-1",
					c->n_nodes - 1, i);
	return 0;
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

static int parse_line(struct cfg_parser *p, char *line, enum cfg_section *sec)
{
	char *s, *eq, *k, *v, *hash;

	/* A '#' starts a comment anywhere: no value here needs one. */
	hash = strchr(line, '#');
	if (hash)
		*hash = '\0';
	s = trim(line);
	if (!*s)
		return 0;
	if (*s == '[') {
		if (!strcmp(s, "[locusd]"))
			*sec = SEC_LOCUSD;
		else if (!strcmp(s, "[cluster]"))
			*sec = SEC_CLUSTER;
		else
			return CFG_FAIL(p, LOCUS_EPARSE, "unknown section %s", s);
		return 0;
	}
	eq = strchr(s, '=');
	if (!eq)
		return CFG_FAIL(p, LOCUS_EPARSE, "expected 'key = value', got '%.64s'", s);
	*eq = '\0';
	k = trim(s);
	v = trim(eq + 1);
	if (!*k)
		return CFG_FAIL(p, LOCUS_EPARSE, "missing key before '='");
	if (!*v)
		return CFG_FAIL(p, LOCUS_EPARSE, "%s: empty value", k);
	switch (*sec) {
	case SEC_LOCUSD:
		return set_locusd(p, k, v);
	case SEC_CLUSTER:
		return set_cluster(p, k, v);
	default:
		return CFG_FAIL(p, LOCUS_EPARSE, "'%s' outside any section", k);
	}
}

/*
 * Several engine lcores: one node, CPU copies (the inter-node relay and the
 * DMA loopback serve one engine), and a completion ring that holds what the
 * other engines' shares of an inbox can hold plus a burst of the client's.
 */
static int check_engines(struct cfg_parser *p)
{
	struct locus_config *c = p->cfg;

	if (c->engine_lcores == 1)
		return 0;
	if (c->intra_node == LOCUS_INTRA_VERBS)
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "engine_lcores = %u needs intra_node = shm",
				c->engine_lcores);
	if (c->client_inbox_slots < c->engine_lcores)
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "engine_lcores = %u needs client_inbox_slots "
				">= %u (one share per engine)", c->engine_lcores, c->engine_lcores);
	if (c->ring_size < 2 * c->client_inbox_slots)
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "engine_lcores = %u needs ring_size >= 2 x "
				"client_inbox_slots (%u < 2 x %u)", c->engine_lcores, c->ring_size,
				c->client_inbox_slots);
	return 0;
}

/* Whether two nodes list one address (any rail of either). */
static int shared_addr(const struct locus_cfg_node *a, const struct locus_cfg_node *b)
{
	for (unsigned i = 0; i < a->n_rails; i++)
		for (unsigned j = 0; j < b->n_rails; j++)
			if (a->rail[i].ipv4 == b->rail[j].ipv4 && a->rail[i].port == b->rail[j].port)
				return 1;
	return 0;
}

/*
 * rdma_device = auto with gpu_pci takes the device nearest each GPU, one
 * rail per distinct device (dataplane/locus_rail_devs.h): node.<id> lists
 * one address per rail, so never more than GPUs; which devices the GPUs
 * find, and so how many rails, only the machine can say (locusd checks the
 * count at start). rdma_near_pci / rdma_near_numa choose auto's one device
 * without gpu_pci and mean nothing with it.
 */
static int rails_by_gpu(const struct locus_config *c)
{
	return !strcmp(c->rdma_device, "auto") && c->n_gpu_pci;
}

static int check_auto_rails(struct cfg_parser *p)
{
	struct locus_config *c = p->cfg;
	uint32_t rails = c->nodes[c->node_id].n_rails;
	const char *near = c->rdma_near_pci[0] ? "rdma_near_pci" : "rdma_near_numa";

	if (!rails_by_gpu(c))
		return 0;
	if (c->rdma_near_pci[0] || c->rdma_near_numa >= 0)
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "%s with rdma_device = auto and gpu_pci: "
				"auto takes the device nearest each GPU (a rail per device), "
				"%s chooses its one device without gpu_pci: drop one of them",
				near, near);
	if (rails > c->n_gpu_pci)
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "node.%u lists %u addresses (rails), but "
				"rdma_device = auto with gpu_pci gives at most one rail per GPU (%u)",
				c->node_id, rails, c->n_gpu_pci);
	return 0;
}

static int check_whole(struct cfg_parser *p)
{
	struct locus_config *c = p->cfg;
	int ret;

	if (c->n_gpu_pci && c->n_gpu_pci != c->gpus_per_node)
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "gpu_pci names %u GPUs, gpus_per_node is %u",
				     c->n_gpu_pci, c->gpus_per_node);

	ret = check_membership(p);
	if (ret < 0)
		return ret;
	ret = check_groups(p);
	if (ret < 0)
		return ret;
	if (c->node_id >= c->n_nodes)
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "node = %u, but [cluster] has nodes 0..%u",
				c->node_id, c->n_nodes - 1);
	for (uint32_t i = 0; i < c->n_nodes; i++)
		for (uint32_t j = i + 1; j < c->n_nodes; j++)
			if (c->nodes[i].set && c->nodes[j].set &&
			    shared_addr(&c->nodes[i], &c->nodes[j]))
				return CFG_FAIL_FILE(p, LOCUS_ERANGE,
						"node.%u and node.%u have the same address", i, j);
	if (c->n_rdma_devices > 1 && c->n_rdma_devices != c->nodes[c->node_id].n_rails)
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "rdma_device lists %u devices (rails), but "
				"node.%u lists %u address(es): one per rail", c->n_rdma_devices,
				c->node_id, c->nodes[c->node_id].n_rails);
	ret = check_auto_rails(p);
	if (ret < 0)
		return ret;
	if (c->n_rdma_devices == 1 && c->nodes[c->node_id].n_rails > 1 && !rails_by_gpu(c))
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "node.%u lists %u addresses (rails), but "
				"rdma_device = %s names one device: list one per rail%s", c->node_id,
				c->nodes[c->node_id].n_rails, c->rdma_device,
				strcmp(c->rdma_device, "auto") ? "" :
				", or give gpu_pci (auto then takes the device nearest each GPU, a "
				"rail per device)");
	if (c->intra_node == LOCUS_INTRA_VERBS && !strcmp(c->rdma_device, "none"))
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "intra_node = verbs needs an rdma_device");
	if (c->n_nodes > 1 && !strcmp(c->rdma_device, "none"))
		return CFG_FAIL_FILE(p, LOCUS_ERANGE,
				"%u nodes need an rdma_device (name or auto) for inter-node traffic",
				c->n_nodes);
	if (c->n_nodes > 1 && !c->secret_file[0])
		return CFG_FAIL_FILE(p, LOCUS_ERANGE, "%u nodes need a secret_file", c->n_nodes);
	return check_engines(p);
}

int locus_config_parse(const char *text, size_t len, const char *origin,
		       struct locus_config *cfg, struct locus_error *err)
{
	struct cfg_parser p = { .origin = origin, .cfg = cfg, .err = err };
	struct locus_error local;
	enum cfg_section sec = SEC_NONE;
	char line[CFG_LINE_MAX];
	size_t pos = 0;
	int ret;

	if (!p.err)
		p.err = &local;
	locus_config_defaults(cfg);
	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;

		p.line++;
		if (n >= sizeof(line))
			return CFG_FAIL(&p, LOCUS_EPARSE, "line longer than %zu characters",
					sizeof(line) - 1);
		if (memchr(text + pos, '\0', n))
			return CFG_FAIL(&p, LOCUS_EPARSE, "NUL byte in line");
		memcpy(line, text + pos, n);
		line[n] = '\0';
		ret = parse_line(&p, line, &sec);
		if (ret < 0)
			return ret;
		pos += n + 1;
	}
	return check_whole(&p);
}

int locus_config_load(const char *path, struct locus_config *cfg, struct locus_error *err)
{
	size_t len;
	char *buf;
	int ret;

	ret = locus_file_read(path, CFG_MAX_FILE, &buf, &len, err);
	if (ret < 0)
		return ret;
	ret = locus_config_parse(buf, len, path, cfg, err);
	free(buf);
	return ret;
}
