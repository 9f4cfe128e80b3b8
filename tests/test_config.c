// SPDX-License-Identifier: MIT
/* locusd config parser: a full file, every refusal with its line number. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <errno.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_config.h"
#include "locus_idle.h"

static const char full[] =
	"# two nodes of 8 GPUs\n"
	"[locusd]\n"
	"instance = prod-a   # trailing comment\n"
	"node = 1\n"
	"eal_args = -l 2-5 --no-huge --no-pci -m 64\n"
	"rdma_device = auto   # the NIC nearest each GPU: a rail per NIC\n"
	"rdma_port = 2\n"
	"rdma_ack_timeout = 17\n"
	"rdma_stall_ms = 12000\n"
	"gpu_pci = 0000:17:00.0,0000:3b:00.0,0000:5d:00.0,0000:61:00.0,"
	"0000:97:00.0,0000:b9:00.0,0000:DC:00.0,0000:e0:00.0\n"
	"intra_node = verbs\n"
	"secret_file = /etc/locus/secret\n"
	"ring_size = 4096\n"
	"inbox_slots = 64\n"
	"inbox_slot_size = 65536\n"
	"client_slots = 32\n"
	"tau = 0.25\n"
	"eldr_precision = 8\n"
	"load_timeout_ms = 500\n"
	"watchdog = no\n"
	"\n"
	"[cluster]\n"
	"id = 0x2a\n"
	"gpus_per_node = 8\n"
	"node.1 = 10.0.0.2:7000,10.0.1.2:7000,10.0.2.2:7000,10.0.3.2:7000,"
	"10.0.4.2:7000,10.0.5.2:7000,10.0.6.2:7000,10.0.7.2:7000\n"
	"node.0 = 10.0.0.1:7000,10.0.1.1:7000,10.0.2.1:7000,10.0.3.1:7000,"
	"10.0.4.1:7000,10.0.5.1:7000,10.0.6.1:7000,10.0.7.1:7000\n";

static int parse(const char *text, struct locus_config *c, struct locus_error *e)
{
	return locus_config_parse(text, strlen(text), "t.conf", c, e);
}

static void test_full_file(void **state)
{
	struct locus_config c;
	struct locus_error e;
	char ip[INET_ADDRSTRLEN];
	(void)state;

	assert_int_equal(parse(full, &c, &e), 0);
	assert_string_equal(c.instance, "prod-a");
	assert_int_equal(c.node_id, 1);
	assert_string_equal(c.eal_args, "-l 2-5 --no-huge --no-pci -m 64");
	assert_string_equal(c.rdma_device, "auto");
	assert_string_equal(c.rdma_near_pci, "");
	assert_int_equal(c.rdma_near_numa, -1);
	assert_int_equal(c.nodes[1].n_rails, 8);
	assert_int_equal(c.nodes[0].n_rails, 8);
	inet_ntop(AF_INET, &c.nodes[1].rail[7].ipv4, ip, sizeof(ip));
	assert_string_equal(ip, "10.0.7.2");
	assert_int_equal(c.rdma_port, 2);
	assert_int_equal(c.rdma_ack_timeout, 17);
	assert_int_equal(c.rdma_stall_ms, 12000);
	assert_int_equal(c.eldr_precision, 8);
	assert_int_equal(c.n_gpu_pci, 8);
	assert_string_equal(c.gpu_pci[0], "0000:17:00.0");
	assert_string_equal(c.gpu_pci[6], "0000:DC:00.0");
	assert_string_equal(c.gpu_pci[7], "0000:e0:00.0");
	assert_int_equal(c.intra_node, LOCUS_INTRA_VERBS);
	assert_string_equal(c.secret_file, "/etc/locus/secret");
	assert_int_equal(c.ring_size, 4096);
	assert_int_equal(c.inbox_slots, 64);
	assert_int_equal(c.inbox_slot_size, 65536);
	assert_int_equal(c.client_slots, 32);
	assert_true(c.tau > 0.2499f && c.tau < 0.2501f);
	assert_int_equal(c.load_timeout_ms, 500);
	assert_int_equal(c.watchdog, 0);
	assert_int_equal(c.cluster_id, 42);
	assert_int_equal(c.gpus_per_node, 8);
	assert_int_equal(c.n_nodes, 2);
	assert_int_equal(locus_config_n_ranks(&c), 16);
	inet_ntop(AF_INET, &c.nodes[1].ipv4, ip, sizeof(ip));
	assert_string_equal(ip, "10.0.0.2");
	assert_int_equal(c.nodes[0].port, 7000);
}

static void test_defaults_alone(void **state)
{
	struct locus_config c;
	(void)state;

	/* an empty file is the embedded single-node default */
	assert_int_equal(parse("", &c, NULL), 0);
	assert_int_equal(c.n_nodes, 1);
	assert_int_equal(c.gpus_per_node, 4);
	assert_int_equal(c.intra_node, LOCUS_INTRA_SHM);
	assert_string_equal(c.instance, "default");
	assert_int_equal(c.nodes[0].ipv4, htonl(INADDR_LOOPBACK));
	assert_int_equal(c.rdma_ack_timeout, 14); /* 67 ms, verbs' own default */
	assert_int_equal(c.rdma_stall_ms, 0);     /* verbs' own default */
	assert_int_equal(c.eldr_precision, 16);   /* the 16-bit router */
	/* the signature cache: on, 32 MiB of 16-token blocks, top-8 bounds */
	assert_int_equal(c.sig_cache_bytes, 32u << 20);
	assert_int_equal(c.sig_cache_block_tokens, 16);
	assert_int_equal(c.sig_cache_checkpoint_blocks, 8);
	assert_int_equal(c.moe_top_k, 8);
	assert_int_equal(parse("[locusd]\nsig_cache_bytes = 0\nsig_cache_block_tokens = 255\n"
			       "moe_top_k = 6\n", &c, NULL), 0);
	assert_int_equal(c.sig_cache_bytes, 0);
	assert_int_equal(c.sig_cache_block_tokens, 255);
	assert_int_equal(c.moe_top_k, 6);
}

struct bad_case {
	const char *text;
	const char *needle; /* expected in the message, with the line number */
	int code;
};

static void test_refusals(void **state)
{
	static const struct bad_case cases[] = {
		{ "[locusd]\nnode = 0\nbogus = 1\n", "t.conf:3: unknown key 'bogus'", LOCUS_EPARSE },
		{ "node = 0\n", "t.conf:1: 'node' outside any section", LOCUS_EPARSE },
		{ "[locusd]\n[metrics]\n", "t.conf:2: unknown section [metrics]", LOCUS_EPARSE },
		{ "[locusd]\nring_size = 1000\n", "t.conf:2: ring_size: 1000 is not a power of two",
		  LOCUS_ERANGE },
		{ "[locusd]\nring_size = -4\n", "t.conf:2: ring_size: '-4' is not", LOCUS_EPARSE },
		{ "[locusd]\nring_size = 12abc\n", "t.conf:2: ring_size:", LOCUS_EPARSE },
		{ "[locusd]\nring_size = 99999999999999999999999\n", "t.conf:2:", LOCUS_EPARSE },
		{ "[locusd]\ninbox_slot_size = 1000\n", "not a multiple of 64", LOCUS_ERANGE },
		{ "[locusd]\ntau = nan\n", "t.conf:2: tau: 'nan' is not a number", LOCUS_EPARSE },
		{ "[locusd]\ntau = 3\n", "t.conf:2: tau: 3 is outside", LOCUS_ERANGE },
		{ "[locusd]\ninstance = a/b\n", "t.conf:2: instance:", LOCUS_EPARSE },
		{ "[locusd]\nintra_node = rdma\n", "t.conf:2: intra_node: 'rdma'", LOCUS_EPARSE },
		{ "[locusd]\nsecret_file = secret\n", "not an absolute path", LOCUS_EPARSE },
		{ "[locusd]\nrdma_near_pci = 3b:00.0\n", "t.conf:2: rdma_near_pci:", LOCUS_EPARSE },
		{ "[locusd]\nwatchdog = maybe\n", "t.conf:2: watchdog:", LOCUS_EPARSE },
		{ "[locusd]\ngpu_pci = 0000:17:00.0,0000:3b:00.0\n",
		  "gpu_pci names 2 GPUs, gpus_per_node is 4", LOCUS_ERANGE },
		{ "[locusd]\ngpu_pci = 0000:17:00.0,17:00.0,0000:3b:00.0,0000:3c:00.0\n",
		  "t.conf:2: gpu_pci: '0000:17:00.0,17:00.0", LOCUS_EPARSE },
		{ "[locusd]\ngpu_pci = 0000:17:00.0,0000:3b:00.0,0000:3c:00.0,\n",
		  "t.conf:2: gpu_pci:", LOCUS_EPARSE },
		{ "[locusd]\ngpu_pci = 0000:17:00.0,0000:3b:00.0,0000:17:00.0,0000:3c:00.0\n",
		  "t.conf:2: gpu_pci: 0000:17:00.0 named twice", LOCUS_ERANGE },
		{ "[locusd]\ngpu_pci = 0000:17:00.00,0000:3b:00.0,0000:3c:00.0,0000:3d:00.0\n",
		  "t.conf:2: gpu_pci:", LOCUS_EPARSE },
		{ "[locusd]\nrdma_ack_timeout = 0\n", "t.conf:2: rdma_ack_timeout: 0 is outside",
		  LOCUS_ERANGE },
		{ "[locusd]\nrdma_ack_timeout = 32\n", "t.conf:2: rdma_ack_timeout: 32 is outside",
		  LOCUS_ERANGE },
		{ "[locusd]\nrdma_stall_ms = 3600001\n", "t.conf:2: rdma_stall_ms: 3600001 is outside",
		  LOCUS_ERANGE },
		{ "[locusd]\neldr_precision = 4\n", "t.conf:2: eldr_precision: '4' is not 16 or 8",
		  LOCUS_EPARSE },
		{ "[locusd]\neldr_precision = 16bit\n",
		  "t.conf:2: eldr_precision: '16bit' is not 16 or 8", LOCUS_EPARSE },
		{ "[locusd]\nnode\n", "t.conf:2: expected 'key = value'", LOCUS_EPARSE },
		{ "[locusd]\nnode =\n", "t.conf:2: node: empty value", LOCUS_EPARSE },
		{ "[cluster]\nnode.0 = 1.2.3:80\n", "t.conf:2: node.0: '1.2.3' is not an IPv4",
		  LOCUS_EPARSE },
		{ "[cluster]\nnode.0 = 1.2.3.4:0\n", "t.conf:2: node.0: 0 is outside", LOCUS_ERANGE },
		{ "[cluster]\nnode.0 = 1.2.3.4\n", "t.conf:2: node.0: '1.2.3.4' is not IPv4:port",
		  LOCUS_EPARSE },
		{ "[cluster]\nnode.1024 = 1.2.3.4:5\n", "t.conf:2: node.1024: 1024 is outside", LOCUS_ERANGE },
		{ "[cluster]\nnode.0 = 1.2.3.4:5\nnode.0 = 1.2.3.5:5\n",
		  "t.conf:3: node.0 listed twice (first on line 2)", LOCUS_EPARSE },
		{ "[cluster]\ngpus_per_node = 0\n", "t.conf:2: gpus_per_node: 0 is outside",
		  LOCUS_ERANGE },
		/* whole-file checks name the file, not a line */
		{ "[cluster]\nnode.0 = 1.2.3.4:5\nnode.2 = 1.2.3.6:5\n",
		  "t.conf: [cluster] lists node.2 but not node.1", LOCUS_ERANGE },
		{ "[locusd]\nnode = 3\n", "t.conf: node = 3, but [cluster] has nodes 0..0",
		  LOCUS_ERANGE },
		{ "[locusd]\nrdma_device = mlx5_0\nsecret_file = /s\n[cluster]\n"
		  "node.0 = 1.2.3.4:5\nnode.1 = 1.2.3.4:5\n",
		  "node.0 and node.1 have the same address", LOCUS_ERANGE },
		{ "[cluster]\nnode.0 = 1.2.3.4:5\nnode.1 = 1.2.3.5:5\n",
		  "2 nodes need an rdma_device", LOCUS_ERANGE },
		{ "[locusd]\nrdma_device = mlx5_0\n[cluster]\nnode.0 = 1.2.3.4:5\nnode.1 = 1.2.3.5:5\n",
		  "2 nodes need a secret_file", LOCUS_ERANGE },
		{ "[locusd]\nintra_node = verbs\n", "intra_node = verbs needs an rdma_device",
		  LOCUS_ERANGE },
		{ "[locusd]\nsig_cache_block_tokens = 256\n",
		  "t.conf:2: sig_cache_block_tokens: 256 is outside", LOCUS_ERANGE },
		{ "[locusd]\nsig_cache_block_tokens = 0\n",
		  "t.conf:2: sig_cache_block_tokens: 0 is outside", LOCUS_ERANGE },
		{ "[locusd]\nsig_cache_checkpoint_blocks = 4097\n",
		  "t.conf:2: sig_cache_checkpoint_blocks: 4097 is outside", LOCUS_ERANGE },
		{ "[locusd]\nmoe_top_k = 65\n", "t.conf:2: moe_top_k: 65 is outside", LOCUS_ERANGE },
		{ "[locusd]\nsig_cache_bytes = -1\n", "t.conf:2: sig_cache_bytes:", LOCUS_EPARSE },
		/* the idle policy */
		{ "[locusd]\nidle_spin_polls = 1000000001\n",
		  "t.conf:2: idle_spin_polls: 1000000001 is outside [0, 1000000000]", LOCUS_ERANGE },
		{ "[locusd]\nidle_pause_polls = -1\n", "t.conf:2: idle_pause_polls: '-1' is not",
		  LOCUS_EPARSE },
		{ "[locusd]\nidle_pause_polls = 1e6\n", "t.conf:2: idle_pause_polls: '1e6' is not",
		  LOCUS_EPARSE },
		{ "[locusd]\nidle_sleep_max_us = 100001\n",
		  "t.conf:2: idle_sleep_max_us: 100001 is outside [0, 100000]", LOCUS_ERANGE },
		{ "[locusd]\nidle_sleep_us = 200000\n",
		  "t.conf:2: idle_sleep_us: 200000 is outside [0, 100000]", LOCUS_ERANGE },
		{ "[locusd]\nidle_sleep_us = 50\nnode = 0\nidle_sleep_max_us = 20\n",
		  "t.conf:4: idle_sleep_max_us: idle_sleep_us is already set on line 2 (idle_sleep_us "
		  "is an alias of idle_sleep_max_us: keep one)", LOCUS_EPARSE },
		{ "[locusd]\nidle_sleep_max_us = 20\nidle_sleep_us = 50\n",
		  "t.conf:3: idle_sleep_us: idle_sleep_max_us is already set on line 2",
		  LOCUS_EPARSE },
		{ "[locusd]\nidle_sleep_max_us = 20\nidle_sleep_max_us = 30\n",
		  "t.conf:3: idle_sleep_max_us listed twice (first on line 2)", LOCUS_EPARSE },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct locus_config c;
		struct locus_error e = { 0 };
		int ret = parse(cases[i].text, &c, &e);

		if (ret != -cases[i].code || !strstr(e.msg, cases[i].needle))
			fail_msg("case %zu: ret %d (want %d), message '%s' lacks '%s'", i, ret,
				 -cases[i].code, e.msg, cases[i].needle);
	}
}

/* The idle keys, the compiled-in policy, and idle_sleep_us as an alias. */
static void test_idle_policy(void **state)
{
	struct locus_config c;
	struct locus_error e = { 0 };
	(void)state;

	assert_int_equal(parse("", &c, NULL), 0);
	assert_int_equal(c.idle_spin_polls, LOCUS_CFG_IDLE_SPIN_POLLS);
	assert_int_equal(c.idle_pause_polls, LOCUS_CFG_IDLE_PAUSE_POLLS);
	assert_int_equal(c.idle_sleep_max_us, LOCUS_CFG_IDLE_SLEEP_MAX_US);
	/* the deployment default sleeps (never burns a core for ever), briefly */
	assert_true(c.idle_sleep_max_us > 0 && c.idle_sleep_max_us <= 100);
	assert_int_equal(parse("[locusd]\nidle_spin_polls = 0\nidle_pause_polls = 1000000000\n"
			       "idle_sleep_max_us = 0\n", &c, &e), 0);
	assert_int_equal(c.idle_spin_polls, 0);
	assert_int_equal(c.idle_pause_polls, LOCUS_IDLE_MAX_POLLS);
	assert_int_equal(c.idle_sleep_max_us, 0);
	/* idle_sleep_us = N is idle_sleep_max_us = N; the polls keep their defaults */
	assert_int_equal(parse("[locusd]\nidle_sleep_us = 50\n", &c, &e), 0);
	assert_int_equal(c.idle_sleep_max_us, 50);
	assert_int_equal(c.idle_spin_polls, LOCUS_CFG_IDLE_SPIN_POLLS);
	assert_int_equal(parse("[locusd]\nidle_sleep_us = 0\n", &c, &e), 0);
	assert_int_equal(c.idle_sleep_max_us, 0);
	assert_int_equal(parse("[locusd]\nidle_sleep_max_us = 100000\n", &c, &e), 0);
	assert_int_equal(c.idle_sleep_max_us, LOCUS_IDLE_MAX_SLEEP_US);
	/* the deployment's example says what the compiled-in policy is */
	if (locus_config_load("deploy/default.conf", &c, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(c.idle_spin_polls, LOCUS_CFG_IDLE_SPIN_POLLS);
	assert_int_equal(c.idle_pause_polls, LOCUS_CFG_IDLE_PAUSE_POLLS);
	assert_int_equal(c.idle_sleep_max_us, LOCUS_CFG_IDLE_SLEEP_MAX_US);
}

/* engine_lcores: a count or a list of lcore ids, and what several engines need. */
static void test_engine_lcores(void **state)
{
	static const struct { const char *text, *msg; } bad[] = {
		{ "[locusd]\nengine_lcores = 0\n", "t.conf:2: engine_lcores: 0 is outside" },
		{ "[locusd]\nengine_lcores = 9\n", "t.conf:2: engine_lcores: 9 is outside" },
		{ "[locusd]\nengine_lcores = 2,2\n", "t.conf:2: engine_lcores: lcore 2 named twice" },
		{ "[locusd]\nengine_lcores = 3-1\n", "t.conf:2: engine_lcores: bad range" },
		{ "[locusd]\nengine_lcores = 1-9\n", "t.conf:2: engine_lcores: more than 8" },
		{ "[locusd]\nengine_lcores = 2,x\n", "t.conf:2: engine_lcores: '2,x' is not a" },
		{ "[locusd]\nengine_lcores = 2\nintra_node = verbs\nrdma_device = rxe0\n",
		  "t.conf: engine_lcores = 2 needs intra_node = shm" },
		{ "[locusd]\nengine_lcores = 2\nring_size = 64\nclient_inbox_slots = 64\n",
		  "t.conf: engine_lcores = 2 needs ring_size >= 2 x client_inbox_slots (64 < 2 x 64)" },
		{ "[locusd]\nengine_lcores = 4\nclient_inbox_slots = 3\n",
		  "t.conf: engine_lcores = 4 needs client_inbox_slots >= 4" },
	};
	struct locus_config c;
	struct locus_error e = { 0 };
	(void)state;

	assert_int_equal(parse("", &c, NULL), 0);
	assert_int_equal(c.engine_lcores, 1);
	assert_int_equal(c.engine_lcore_list, 0);
	assert_int_equal(parse("[locusd]\nengine_lcores = 3\n", &c, &e), 0);
	assert_int_equal(c.engine_lcores, 3);
	assert_int_equal(c.engine_lcore_list, 0);
	assert_int_equal(parse("[locusd]\nengine_lcores = 2,4-6\n", &c, &e), 0);
	assert_int_equal(c.engine_lcores, 4);
	assert_int_equal(c.engine_lcore_list, 1);
	assert_int_equal(c.engine_lcore_ids[0], 2);
	assert_int_equal(c.engine_lcore_ids[1], 4);
	assert_int_equal(c.engine_lcore_ids[3], 6);
	/* several engines on a node of a cluster: each sends through a relay of its own */
	assert_int_equal(parse("[locusd]\nengine_lcores = 2\nrdma_device = rxe0\nsecret_file = /s\n"
			       "[cluster]\nnode.0 = 10.0.0.1:1\nnode.1 = 10.0.0.2:1\n", &c, &e), 0);
	assert_int_equal(c.engine_lcores, 2);
	assert_int_equal(c.n_nodes, 2);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_true(parse(bad[i].text, &c, &e) < 0);
		if (strncmp(e.msg, bad[i].msg, strlen(bad[i].msg)))
			fail_msg("case %zu: \"%s\", want \"%s...\"", i, e.msg, bad[i].msg);
	}
}

/*
 * Rails: rdma_device lists one device per rail and this node's node.<id> one
 * address per rail; two nodes share the rails both list; single names, auto
 * and none stay one rail. Every malformed list is refused with its reason.
 */
static void test_rails(void **state)
{
	static const char two[] =
		"[locusd]\nnode = 0\nrdma_device = rxex,rxex2\nsecret_file = /s\n"
		"[cluster]\nnode.0 = 192.0.2.20:7471,192.0.3.20:7471\n"
		"node.1 = 192.0.2.21:7471,192.0.3.21:7472\nnode.2 = 192.0.2.22:7471\n";
	static const char *const addrs2 =
		"[cluster]\nnode.0 = 10.0.0.1:1,10.0.1.1:1\nnode.1 = 10.0.0.2:1,10.0.1.2:1\n";
	static const struct { const char *text, *msg; int code; } bad[] = {
		{ "[locusd]\nrdma_device = rxe0,rxe0\n", "t.conf:2: rdma_device: 'rxe0' listed twice",
		  LOCUS_EPARSE },
		{ "[locusd]\nrdma_device = a,b,c,d,e,f,g,h,i\n",
		  "t.conf:2: rdma_device: more than 8 items", LOCUS_ERANGE },
		{ "[locusd]\nrdma_device = rxe0,rx/e1\n",
		  "t.conf:2: rdma_device: 'rx/e1' is not a device name", LOCUS_EPARSE },
		{ "[locusd]\nrdma_device = rxe0,,rxe1\n", "t.conf:2: rdma_device: empty item",
		  LOCUS_EPARSE },
		{ "[locusd]\nrdma_device = rxe0,\n", "t.conf:2: rdma_device: empty item",
		  LOCUS_EPARSE },
		{ "[locusd]\nrdma_device = rxe0,auto\n",
		  "t.conf:2: rdma_device: 'auto' cannot be one of a list", LOCUS_EPARSE },
		{ "[locusd]\nrdma_device = none,rxe0\n",
		  "t.conf:2: rdma_device: 'none' cannot be one of a list", LOCUS_EPARSE },
		{ "[locusd]\nrdma_device = rxe0,rxe1\n",
		  "t.conf: rdma_device lists 2 devices (rails), but node.0 lists 1 address(es)",
		  LOCUS_ERANGE },
		{ "[locusd]\nrdma_device = rxe0\nsecret_file = /s\n[cluster]\n"
		  "node.0 = 10.0.0.1:1,10.0.1.1:1\nnode.1 = 10.0.0.2:1\n",
		  "t.conf: node.0 lists 2 addresses (rails), but rdma_device = rxe0 names one device",
		  LOCUS_ERANGE },
		{ "[locusd]\nrdma_device = auto\nsecret_file = /s\n[cluster]\n"
		  "node.0 = 10.0.0.1:1,10.0.1.1:1\nnode.1 = 10.0.0.2:1\n",
		  "rdma_device = auto names one device: list one per rail, or give gpu_pci (auto "
		  "then takes the device nearest each GPU, a rail per device)", LOCUS_ERANGE },
		/* auto with gpu_pci: at most a rail per GPU; rdma_near_* mean nothing there */
		{ "[locusd]\nrdma_device = auto\ngpu_pci = 0000:17:00.0,0000:3b:00.0\n"
		  "secret_file = /s\n[cluster]\ngpus_per_node = 2\n"
		  "node.0 = 10.0.0.1:1,10.0.1.1:1,10.0.2.1:1\nnode.1 = 10.0.0.2:1\n",
		  "t.conf: node.0 lists 3 addresses (rails), but rdma_device = auto with gpu_pci "
		  "gives at most one rail per GPU (2)", LOCUS_ERANGE },
		{ "[locusd]\nrdma_device = auto\ngpu_pci = 0000:17:00.0,0000:3b:00.0\n"
		  "rdma_near_pci = 0000:3b:00.0\n[cluster]\ngpus_per_node = 2\n",
		  "t.conf: rdma_near_pci with rdma_device = auto and gpu_pci: auto takes the device "
		  "nearest each GPU (a rail per device), rdma_near_pci chooses its one device "
		  "without gpu_pci: drop one of them", LOCUS_ERANGE },
		{ "[locusd]\nrdma_device = auto\ngpu_pci = 0000:17:00.0,0000:3b:00.0\n"
		  "rdma_near_numa = 0\n[cluster]\ngpus_per_node = 2\n",
		  "t.conf: rdma_near_numa with rdma_device = auto and gpu_pci", LOCUS_ERANGE },
		/* a named device lists no GPU map: one rail */
		{ "[locusd]\nrdma_device = mlx5_0\ngpu_pci = 0000:17:00.0,0000:3b:00.0\n"
		  "secret_file = /s\n[cluster]\ngpus_per_node = 2\n"
		  "node.0 = 10.0.0.1:1,10.0.1.1:1\nnode.1 = 10.0.0.2:1\n",
		  "t.conf: node.0 lists 2 addresses (rails), but rdma_device = mlx5_0 names one "
		  "device: list one per rail", LOCUS_ERANGE },
		{ "[cluster]\nnode.0 = 10.0.0.1:1,10.0.0.1:1\n",
		  "t.conf:2: node.0: '10.0.0.1:1' listed twice", LOCUS_EPARSE },
		{ "[cluster]\nnode.0 = 10.0.0.1:1,10.0.0.2\n",
		  "t.conf:2: node.0: '10.0.0.2' is not IPv4:port", LOCUS_EPARSE },
		{ "[cluster]\nnode.0 = 10.0.0.1:1,\n", "t.conf:2: node.0: empty item",
		  LOCUS_EPARSE },
		{ "[cluster]\nnode.0 = 1.0.0.1:1,1.0.0.2:1,1.0.0.3:1,1.0.0.4:1,1.0.0.5:1,1.0.0.6:1,"
		  "1.0.0.7:1,1.0.0.8:1,1.0.0.9:1\n", "t.conf:2: node.0: more than 8 items",
		  LOCUS_ERANGE },
		{ "[locusd]\nrdma_device = a,b\nsecret_file = /s\n[cluster]\n"
		  "node.0 = 10.0.0.1:1,10.0.1.1:1\nnode.1 = 10.0.0.2:1,10.0.1.1:1\n",
		  "t.conf: node.0 and node.1 have the same address", LOCUS_ERANGE },
	};
	struct locus_config c;
	struct locus_error e = { 0 };
	char text[512];
	(void)state;

	/* one name, auto, none: one rail, as before */
	assert_int_equal(parse("[locusd]\nrdma_device = rxe0\n", &c, &e), 0);
	assert_int_equal(c.n_rdma_devices, 1);
	assert_string_equal(c.rdma_device, "rxe0");
	assert_string_equal(c.rdma_devices[0], "rxe0");
	assert_int_equal(c.nodes[0].n_rails, 1);
	assert_int_equal(parse("[locusd]\nrdma_device = auto\n", &c, &e), 0);
	assert_int_equal(c.n_rdma_devices, 1);
	assert_string_equal(c.rdma_device, "auto");
	/* auto without gpu_pci: its one device nearest a PCI device or a NUMA node */
	assert_int_equal(parse("[locusd]\nrdma_device = auto\nrdma_near_pci = 0000:3b:00.0\n"
			       "rdma_near_numa = 1\n", &c, &e), 0);
	assert_string_equal(c.rdma_near_pci, "0000:3b:00.0");
	assert_int_equal(c.rdma_near_numa, 1);
	/* auto with gpu_pci: one address (all GPUs nearest one NIC) up to one per GPU */
	for (unsigned n = 1; n <= 4; n++) {
		static const char *const a[4] = { "10.0.0.1:1", ",10.0.1.1:1", ",10.0.2.1:1",
						  ",10.0.3.1:1" };
		char addrs[64] = "";

		for (unsigned i = 0; i < n; i++)
			strcat(addrs, a[i]);
		snprintf(text, sizeof(text), "[locusd]\nrdma_device = auto\ngpu_pci = "
			 "0000:17:00.0,0000:3b:00.0,0000:5d:00.0,0000:61:00.0\nsecret_file = /s\n"
			 "[cluster]\ngpus_per_node = 4\nnode.0 = %s\nnode.1 = 10.0.9.2:1\n", addrs);
		if (parse(text, &c, &e) < 0)
			fail_msg("%u addresses: %s", n, e.msg);
		assert_int_equal(c.nodes[0].n_rails, n);
		assert_string_equal(c.rdma_device, "auto");
	}
	assert_int_equal(parse("", &c, &e), 0);
	assert_int_equal(c.n_rdma_devices, 1);
	assert_string_equal(c.rdma_devices[0], "none");
	assert_int_equal(c.nodes[0].n_rails, 1);
	assert_int_equal(c.nodes[0].rail[0].ipv4, c.nodes[0].ipv4);
	assert_int_equal(c.nodes[0].rail[0].port, c.nodes[0].port);

	/* two rails here, two on node 1, one on node 2 */
	assert_int_equal(parse(two, &c, &e), 0);
	assert_int_equal(c.n_rdma_devices, 2);
	assert_string_equal(c.rdma_device, "rxex");
	assert_string_equal(c.rdma_devices[0], "rxex");
	assert_string_equal(c.rdma_devices[1], "rxex2");
	assert_int_equal(c.nodes[0].n_rails, 2);
	assert_int_equal(c.nodes[1].rail[1].ipv4, htonl(0xc0000315)); /* 192.0.3.21 */
	assert_int_equal(c.nodes[1].rail[1].port, 7472);
	assert_int_equal(c.nodes[1].ipv4, htonl(0xc0000215));     /* rail 0 */
	assert_int_equal(locus_config_common_rails(&c, 0, 1), 2);
	assert_int_equal(locus_config_common_rails(&c, 0, 2), 1);
	assert_int_equal(locus_config_common_rails(&c, 2, 1), 1);
	/* eight rails is the most */
	snprintf(text, sizeof(text), "[locusd]\nrdma_device = a,b,c,d,e,f,g,h\n[cluster]\n"
		 "node.0 = 1.0.0.1:1,1.0.0.2:1,1.0.0.3:1,1.0.0.4:1,1.0.0.5:1,1.0.0.6:1,1.0.0.7:1,"
		 "1.0.0.8:1\n");
	assert_int_equal(parse(text, &c, &e), 0);
	assert_int_equal(c.n_rdma_devices, 8);
	assert_string_equal(c.rdma_devices[7], "h");
	/* a later single name replaces a list */
	snprintf(text, sizeof(text), "[locusd]\nrdma_device = a,b\nrdma_device = c\n");
	assert_int_equal(parse(text, &c, &e), 0);
	assert_int_equal(c.n_rdma_devices, 1);
	assert_string_equal(c.rdma_devices[1], "");
	snprintf(text, sizeof(text), "[locusd]\nrdma_device = a,b\nsecret_file = /s\n%s",
		 addrs2);
	assert_int_equal(parse(text, &c, &e), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret = parse(bad[i].text, &c, &e);

		if (ret != -bad[i].code || !strstr(e.msg, bad[i].msg))
			fail_msg("case %zu: ret %d (want %d), message '%s' lacks '%s'", i, ret,
				 -bad[i].code, e.msg, bad[i].msg);
	}
}

/* [cluster] with etcd: this node's line, the cluster's size, the TLS files. */
static void test_etcd(void **state)
{
	static const char ok[] =
		"[locusd]\nnode = 2\nrdma_device = mlx5_0\nsecret_file = /etc/locus/secret\n"
		"[cluster]\nid = 9\nnodes = 5\nnode.2 = 10.0.0.3:7471\n"
		"etcd = https://10.0.0.9:2379,https://10.0.0.10:2379\n"
		"etcd_prefix = /prod/locus\netcd_cacert = /etc/locus/ca.pem\n"
		"etcd_cert = /etc/locus/node.pem\netcd_key = /etc/locus/node.key\n"
		"etcd_lease_s = 3\n";
	static const struct bad_case cases[] = {
		{ "[cluster]\netcd = 10.0.0.9:2379\n", "t.conf:2: etcd: '10.0.0.9:2379' is not",
		  LOCUS_EPARSE },
		{ "[cluster]\netcd_prefix = locus\n", "t.conf:2: etcd_prefix:", LOCUS_EPARSE },
		{ "[cluster]\netcd_cert = node.pem\n", "t.conf:2: etcd_cert: 'node.pem' is not an "
		  "absolute path", LOCUS_EPARSE },
		{ "[cluster]\netcd_lease_s = 1\n", "t.conf:2: etcd_lease_s: 1 is outside",
		  LOCUS_ERANGE },
		{ "[cluster]\nnodes = 1025\n", "t.conf:2: nodes: 1025 is outside", LOCUS_ERANGE },
		{ "[cluster]\netcd = http://e:2379\nnode.0 = 10.0.0.1:7471\n",
		  "etcd needs nodes = N", LOCUS_ERANGE },
		{ "[cluster]\netcd = http://e:2379\nnodes = 2\n",
		  "lists this node's node.0 line only", LOCUS_ERANGE },
		{ "[cluster]\netcd = http://e:2379\nnodes = 2\nnode.0 = 10.0.0.1:1\n"
		  "node.1 = 10.0.0.2:1\n", "2 node.<id> line(s) given", LOCUS_ERANGE },
		{ "[cluster]\netcd = http://e:2379\nnodes = 2\nnode.1 = 10.0.0.2:1\n",
		  "lists this node's node.0 line only", LOCUS_ERANGE },
		{ "[cluster]\netcd = http://e:2379\nnodes = 1\nnode.0 = 10.0.0.1:1\n"
		  "etcd_cert = /a.pem\n", "etcd_cert and etcd_key go together", LOCUS_ERANGE },
		{ "[cluster]\nnode.0 = 10.0.0.1:1\netcd_cacert = /a.pem\n",
		  "need etcd = URL", LOCUS_ERANGE },
		{ "[cluster]\nnodes = 3\nnode.0 = 10.0.0.1:1\nnode.1 = 10.0.0.2:1\n",
		  "nodes = 3, but [cluster] lists node.0..node.1", LOCUS_ERANGE },
	};
	struct locus_config c;
	struct locus_error e = { 0 };
	(void)state;

	assert_int_equal(parse(ok, &c, &e), 0);
	assert_int_equal(c.n_nodes, 5);
	assert_int_equal(c.node_id, 2);
	assert_string_equal(c.etcd, "https://10.0.0.9:2379,https://10.0.0.10:2379");
	assert_string_equal(c.etcd_prefix, "/prod/locus");
	assert_string_equal(c.etcd_cacert, "/etc/locus/ca.pem");
	assert_string_equal(c.etcd_cert, "/etc/locus/node.pem");
	assert_string_equal(c.etcd_key, "/etc/locus/node.key");
	assert_int_equal(c.etcd_lease_s, 3);
	assert_true(c.nodes[2].set);
	assert_false(c.nodes[0].set);
	/* the defaults: no etcd, prefix /locus, 5 s */
	assert_int_equal(parse("[locusd]\n", &c, &e), 0);
	assert_string_equal(c.etcd, "");
	assert_string_equal(c.etcd_prefix, "/locus");
	assert_int_equal(c.etcd_lease_s, 5);
	/* a static list may say its size too, when it agrees */
	assert_int_equal(parse("[cluster]\nnodes = 1\nnode.0 = 10.0.0.1:1\n", &c, &e), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int ret = parse(cases[i].text, &c, &e);

		if (ret != -cases[i].code || !strstr(e.msg, cases[i].needle))
			fail_msg("case %zu: ret %d (want %d), message '%s' lacks '%s'", i, ret,
				 -cases[i].code, e.msg, cases[i].needle);
	}
}

/*
 * Groups: a node talks with the nodes it shares a group with only; more
 * than 64 nodes need groups, and no node may talk with more than 64.
 */
static void test_groups(void **state)
{
	static const char head[] =
		"[locusd]\nnode = %u\nrdma_device = mlx5_0\nsecret_file = /s\n"
		"[cluster]\nnodes = %u\nnode.%u = 10.0.0.1:7471\netcd = http://e:2379\n";
	static const struct bad_case cases[] = {
		{ "group.a = 0-1\ngroup.b = 2\n", "node 3 is in no group", LOCUS_ERANGE },
		{ "group.a = 0-3\ngroup.b = 4\n", "group.b names node 4, but the cluster has "
		  "nodes 0..3", LOCUS_ERANGE },
		{ "group.a = 0-3\ngroup.a = 1\n", "group.a given twice", LOCUS_EPARSE },
		{ "group.a = 3-1\n", "'3-1' is not a node id or a range", LOCUS_EPARSE },
		{ "group.a = 0-\n", "'0-' is not a node id", LOCUS_EPARSE },
		{ "group.a = x\n", "'x' is not a node id", LOCUS_EPARSE },
		{ "group.a = 1024\n", "'1024' is not a node id", LOCUS_EPARSE },
		{ "group.a b = 1\n", "a group name is", LOCUS_EPARSE },
		{ "group. = 1\n", "a group name is", LOCUS_EPARSE },
		{ "group.a = ,\n", "group.a names no node", LOCUS_EPARSE },
	};
	struct locus_config c;
	struct locus_error e = { 0 };
	char text[2048];
	(void)state;

	/* two groups sharing node 1: 0 talks with 1, 1 with both, 2 with 1 */
	snprintf(text, sizeof(text), head, 0, 3, 0);
	strcat(text, "group.cell-a = 0,1\ngroup.cell_b = 1-2\n");
	assert_int_equal(parse(text, &c, &e), 0);
	assert_int_equal(c.n_groups, 2);
	assert_string_equal(c.groups[1].name, "cell_b");
	assert_true(locus_config_talks(&c, 0, 1));
	assert_true(locus_config_talks(&c, 2, 1));
	assert_false(locus_config_talks(&c, 0, 2));
	assert_false(locus_config_talks(&c, 2, 0));
	assert_int_equal(locus_config_n_talk(&c, 0), 2);
	assert_int_equal(locus_config_n_talk(&c, 1), 3);
	/* without groups every node talks with every other */
	snprintf(text, sizeof(text), head, 0, 3, 0);
	assert_int_equal(parse(text, &c, &e), 0);
	assert_int_equal(c.n_groups, 0);
	assert_true(locus_config_talks(&c, 0, 2));
	/* 1024 nodes in cells of 32: each node talks with its cell */
	snprintf(text, sizeof(text), head, 1000, 1024, 1000);
	for (unsigned g = 0; g < 32; g++)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "group.c%u = %u-%u\n",
			 g, 32 * g, 32 * g + 31);
	assert_int_equal(parse(text, &c, &e), 0);
	assert_int_equal(c.n_groups, 32);
	assert_int_equal(locus_config_n_talk(&c, 1000), 32);
	assert_true(locus_config_talks(&c, 1000, 1023));
	assert_false(locus_config_talks(&c, 1000, 991));
	/* 65 nodes without groups: refused, naming the way out */
	snprintf(text, sizeof(text), head, 0, 65, 0);
	assert_int_equal(parse(text, &c, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "65 nodes: without groups every node connects to every "
				      "other, at most 64; name the groups"));
	/* a node whose groups reach 65 nodes: refused */
	snprintf(text, sizeof(text), head, 64, 130, 64);
	strcat(text, "group.a = 0-64\ngroup.b = 64-129\n");
	assert_int_equal(parse(text, &c, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "node 64 talks with 130 nodes through its groups, at most 64"));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int ret;

		snprintf(text, sizeof(text), head, 0, 4, 0);
		strcat(text, cases[i].text);
		ret = parse(text, &c, &e);
		if (ret != -cases[i].code || !strstr(e.msg, cases[i].needle))
			fail_msg("case %zu: ret %d (want %d), message '%s' lacks '%s'", i, ret,
				 -cases[i].code, e.msg, cases[i].needle);
	}
}

static void test_binary_and_long_lines(void **state)
{
	struct locus_config c;
	struct locus_error e;
	char big[2048];
	static const char nul[] = "[locusd]\nnode = 0\0\n";
	(void)state;

	assert_int_equal(locus_config_parse(nul, sizeof(nul) - 1, "t.conf", &c, &e), -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "t.conf:2: NUL byte"));
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(parse(big, &c, &e), -LOCUS_EPARSE);
	assert_non_null(strstr(e.msg, "t.conf:1: line longer"));
	/* a value just too long for its field */
	snprintf(big, sizeof(big), "[locusd]\nsecret_file = /%0300d\n", 0);
	assert_int_equal(parse(big, &c, &e), -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "t.conf:2: secret_file: value longer"));
}

static void test_load_file(void **state)
{
	char path[] = "/tmp/locus-cfg-XXXXXX";
	struct locus_config c;
	struct locus_error e;
	int fd = mkstemp(path);
	(void)state;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, full, strlen(full)), (ssize_t)strlen(full));
	close(fd);
	assert_int_equal(locus_config_load(path, &c, &e), 0);
	assert_int_equal(c.n_nodes, 2);
	unlink(path);
	assert_int_equal(locus_config_load(path, &c, &e), -ENOENT);
	assert_non_null(strstr(e.msg, path));
}

/* The shipped example configs are valid (make test runs from the repo root). */
static void test_shipped_examples(void **state)
{
	static const char *const files[] = { "deploy/default.conf", "deploy/two-node.conf",
					      "deploy/rails.conf", "deploy/rails-auto.conf" };
	(void)state;

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		struct locus_config c;
		struct locus_error e = { 0 };

		if (locus_config_load(files[i], &c, &e) != 0)
			fail_msg("%s", e.msg);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_file),
		cmocka_unit_test(test_defaults_alone),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_idle_policy),
		cmocka_unit_test(test_engine_lcores),
		cmocka_unit_test(test_rails),
		cmocka_unit_test(test_etcd),
		cmocka_unit_test(test_groups),
		cmocka_unit_test(test_binary_and_long_lines),
		cmocka_unit_test(test_load_file),
		cmocka_unit_test(test_shipped_examples),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
