// SPDX-License-Identifier: MIT
/*
 * locusd: one per node. DPDK EAL lcores: the main lcore does control work
 * (client attachments, inter-node connections, watchdog, signals,
 * telemetry); the first worker lcore runs the engine's poll loop (client
 * rings, the completion queue, the inter-node inbox); with engine_lcores = N
 * the first N worker lcores (or the ones named) run an engine each, every
 * client slot polled by one of them. Readiness and watchdog go to systemd with
 * sd_notify; SIGTERM drains and stops, removing the segment; SIGHUP re-reads
 * the config and applies what is safe to change while running.
 *
 *   locusd [-c CONFIG] [--check-config] [--print-cpus] [--print-default]
 *
 * Without -c, locusd runs the embedded single-node default (four ranks,
 * shared-memory tiers), which is what the README's demo uses.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_memory.h>
#include <rte_pause.h>
#include <rte_telemetry.h>
#include <systemd/sd-daemon.h>

#include "locus_config.h"
#include "locus_engine.h"
#include "locus_idle.h"
#include "locus_engine_topo.h"
#include "locus_node.h"
#include "locus_shm.h"
#include "locus_relay.h"
#include "locusd_cluster.h"
#include "locusd_loop.h"
#include "locusd_net.h"

#define MAX_EAL_ARGS 64
#define CONTROL_PERIOD_US 1000
#define DRAIN_MS 500
#define DRAIN_EMPTY_POLLS 1024

/*
 * What runs without -c (make demo). Its idle policy is for a shared laptop:
 * the engine sleeps after 20000 empty polls, up to 1 ms at a time
 * (dataplane/README.md, "Idle policy"). With one lcore only
 * (eal_args -l N) the main lcore polls the engine between control passes
 * and never sleeps.
 */
static const char embedded_default[] =
	"[locusd]\n"
	"instance = default\n"
	"node = 0\n"
	"eal_args = -l 0-1 --no-huge --no-pci -m 64\n"
	"rdma_device = none\n"
	"intra_node = shm\n"
	"client_slots = 16\n"
	"client_inbox_slots = 256\n"
	"idle_spin_polls = 20000\n"
	"idle_pause_polls = 0\n"
	"idle_sleep_max_us = 1000\n"
	"[cluster]\n"
	"id = 1\n"
	"gpus_per_node = 4\n"
	"node.0 = 127.0.0.1:7471\n";

struct locusd {
	struct locus_config cfg;
	const char *config_path;
	struct locus_node *node;
	struct locusd_net *net;     /* NULL on a single node */
	struct locusd_cluster *cluster; /* membership through etcd, or NULL */
	struct locusd_loop *loop;   /* intra_node = verbs, else NULL */
	/* the engines and the network on worker lcores of their own: a relay per engine */
	struct locus_relay *relay[LOCUS_CFG_MAX_ENGINES];
	struct locus_relay_mux *mux; /* the network's one sink over the relays */
	unsigned worker_lcore;      /* RTE_MAX_LCORE: the engine runs on the main lcore */
	unsigned eng_lcore[LOCUS_CFG_MAX_ENGINES]; /* engine k's lcore; [0] = worker_lcore */
	uint32_t n_eng;
	struct engine_lcore { struct locusd *d; uint32_t k; } eng_arg[LOCUS_CFG_MAX_ENGINES];
	unsigned net_lcore;         /* RTE_MAX_LCORE: the network polls on the engine's lcore */
	int net_stop;               /* set by main once the engine's lcore is done */
	struct locus_idle_params idle; /* changed by SIGHUP (atomic per field); read by the lcores */
	uint32_t idle_seq;          /* bumped after a change of idle */
	int stop;                   /* set by the main lcore, read by the worker */
	int worker_done;
};

static struct locusd D;
static volatile sig_atomic_t got_term, got_hup;

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		got_hup = 1;
	else
		got_term = 1;
}

static uint64_t tsc_now(void)
{
	return rte_rdtsc();
}

/* Main lcore: publish a new idle policy to the poll loops. */
static void idle_publish(struct locusd *d, const struct locus_config *c)
{
	__atomic_store_n(&d->idle.spin_polls, c->idle_spin_polls, __ATOMIC_RELAXED);
	__atomic_store_n(&d->idle.pause_polls, c->idle_pause_polls, __ATOMIC_RELAXED);
	__atomic_store_n(&d->idle.sleep_max_us, c->idle_sleep_max_us, __ATOMIC_RELAXED);
	__atomic_fetch_add(&d->idle_seq, 1, __ATOMIC_RELEASE);
}

/* A poll loop's copy of the policy, taken again when SIGHUP changed it (*seq). */
static void idle_refresh(struct locusd *d, struct locus_idle *s, uint32_t *seq)
{
	uint32_t now = __atomic_load_n(&d->idle_seq, __ATOMIC_ACQUIRE);
	struct locus_idle_params p;

	if (likely(now == *seq))
		return;
	*seq = now;
	p.spin_polls = __atomic_load_n(&d->idle.spin_polls, __ATOMIC_RELAXED);
	p.pause_polls = __atomic_load_n(&d->idle.pause_polls, __ATOMIC_RELAXED);
	p.sleep_max_us = __atomic_load_n(&d->idle.sleep_max_us, __ATOMIC_RELAXED);
	locus_idle_init(s, &p);
}

/*
 * After an empty poll: spin, pause or sleep as the idle policy says
 * (locus_idle.h). Only reached when there was nothing to do: the sleep is a
 * syscall off the path of any request. e: count the sleep there (engine lcore).
 */
static void idle_step(struct locusd *d, struct locus_idle *s, uint32_t *seq,
		      struct locus_engine *e)
{
	struct timespec ts;
	uint64_t t0;
	uint32_t us = 0;

	idle_refresh(d, s, seq);
	switch (locus_idle_next(s, &us)) {
	case LOCUS_IDLE_SPIN:
		return;
	case LOCUS_IDLE_PAUSE:
		rte_pause();
		return;
	case LOCUS_IDLE_SLEEP:
		ts.tv_sec = 0;
		ts.tv_nsec = (long)us * 1000;
		t0 = rte_rdtsc();
		nanosleep(&ts, NULL);
		if (e)
			locus_engine_idle_slept(e, rte_rdtsc() - t0);
		return;
	}
}

/*
 * A poll lcore's start: its sleeps end when they say (the kernel's default
 * timer slack, 50 us, would add that much to every wake-up), and its first
 * copy of the idle policy.
 */
static void idle_start(struct locusd *d, struct locus_idle *s, uint32_t *seq)
{
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	*seq = __atomic_load_n(&d->idle_seq, __ATOMIC_ACQUIRE) - 1; /* refresh at once */
	idle_refresh(d, s, seq);
}

/*
 * An engine's poll loop: no syscalls, no locks; sleeps only when idle, as
 * configured. Engine 0 also polls the network side and the DMA loopback
 * (which exist with one engine only).
 */
static int worker_main(void *arg)
{
	const struct engine_lcore *el = arg;
	struct locusd *d = el->d;
	struct locus_engine *e = locus_node_engine_at(d->node, el->k);
	uint64_t drain_until = 0;
	struct locus_idle idle;
	unsigned empty = 0;
	uint32_t seq;

	idle_start(d, &idle, &seq);

	for (;;) {
		int n = locus_engine_poll(e);

		if (d->relay[el->k])
			n += locus_relay_poll_engine(d->relay[el->k]);
		else if (el->k == 0 && d->net)
			n += locusd_net_poll(d->net, rte_rdtsc());
		if (el->k == 0 && d->loop)
			n += locusd_loop_poll(d->loop, e);
		if (likely(n)) {
			locus_idle_busy(&idle);
			empty = 0;
			continue;
		}
		if (unlikely(__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE))) {
			/* drain: keep answering until the rings stay empty, bounded */
			if (!drain_until)
				drain_until = rte_rdtsc() + rte_get_tsc_hz() / 1000 * DRAIN_MS;
			if ((++empty > DRAIN_EMPTY_POLLS &&
			     !(d->loop && locusd_loop_inflight(d->loop)) &&
			     !(d->relay[el->k] && locus_relay_inflight(d->relay[el->k])) &&
			     !locus_node_engine_inflight(d->node)) ||
			    rte_rdtsc() > drain_until)
				break;
			continue;
		}
		idle_step(d, &idle, &seq, e);
	}
	__atomic_store_n(&d->worker_done, 1, __ATOMIC_RELEASE);
	return 0;
}

/*
 * The engine lcores: engine_lcores = N takes the first N worker lcores, a
 * list takes those (each an enabled worker lcore). 0, or -1 with the reason
 * printed.
 */
static int pick_engine_lcores(struct locusd *d)
{
	unsigned l = (unsigned)-1;

	d->n_eng = d->cfg.engine_lcores;
	for (uint32_t k = 0; k < d->n_eng; k++) {
		if (d->cfg.engine_lcore_list) {
			l = d->cfg.engine_lcore_ids[k];
			if (l >= RTE_MAX_LCORE || !rte_lcore_is_enabled(l) ||
			    l == rte_get_main_lcore()) {
				fprintf(stderr, "locusd: engine_lcores names lcore %u, which is not "
					"a worker lcore of eal_args '%s'\n", l, d->cfg.eal_args);
				return -1;
			}
		} else {
			l = rte_get_next_lcore(l, 1, 0);
		}
		d->eng_lcore[k] = l;
		d->eng_arg[k] = (struct engine_lcore){ .d = d, .k = k };
	}
	if (d->n_eng > 1 && d->eng_lcore[d->n_eng - 1] >= RTE_MAX_LCORE) {
		fprintf(stderr, "locusd: engine_lcores = %u needs %u worker lcores; eal_args '%s' "
			"has %u (e.g. -l 0-%u)\n", d->n_eng, d->n_eng, d->cfg.eal_args,
			rte_lcore_count() - 1, d->n_eng);
		return -1;
	}
	d->worker_lcore = d->eng_lcore[0];
	return 0;
}

/*
 * On a cluster with a worker lcore, the network polls on the first worker
 * lcore no engine has (none: on engine 0's, which needs a single engine).
 * 0, or -1 with the reason printed.
 */
static int pick_net_lcore(struct locusd *d)
{
	d->net_lcore = RTE_MAX_LCORE;
	if (d->cfg.n_nodes < 2 || d->worker_lcore >= RTE_MAX_LCORE)
		return 0;
	for (unsigned l = rte_get_next_lcore(-1, 1, 0); l < RTE_MAX_LCORE;
	     l = rte_get_next_lcore(l, 1, 0)) {
		uint32_t k = 0;

		while (k < d->n_eng && d->eng_lcore[k] != l)
			k++;
		if (k == d->n_eng) {
			d->net_lcore = l;
			return 0;
		}
	}
	if (d->n_eng > 1) {
		fprintf(stderr, "locusd: engine_lcores = %u on a cluster needs a worker lcore for "
			"the network beside the engines'; eal_args '%s' has %u worker lcores\n",
			d->n_eng, d->cfg.eal_args, rte_lcore_count() - 1);
		return -1;
	}
	return 0;
}

/*
 * A relay per engine between its lcore and the network's, and the mux the
 * network hands arrivals and send ends to. 0, or -1 with the reason printed.
 */
static int make_relays(struct locusd *d)
{
	int ret;

	for (uint32_t k = 0; k < d->n_eng; k++) {
		ret = locus_relay_create(locusd_net_transport(d->net), 1024, &d->relay[k]);
		if (ret < 0) {
			fprintf(stderr, "locusd: relay of engine %u to the network lcore: %s\n", k,
				strerror(-ret));
			return -1;
		}
	}
	ret = locus_relay_mux_create(d->relay, d->n_eng, &d->mux);
	if (ret < 0) {
		fprintf(stderr, "locusd: relays to the network lcore: %s\n", strerror(-ret));
		return -1;
	}
	locusd_net_set_sink(d->net, locus_relay_mux_sink(d->mux));
	return 0;
}

/* The mux's pick: the engine owning an arrival's receiver. */
static uint32_t arrival_engine(void *ctx, const void *msg, size_t len)
{
	return locus_node_arrival_engine(ctx, msg, len);
}

static void free_relays(struct locusd *d)
{
	for (uint32_t k = 0; k < LOCUS_CFG_MAX_ENGINES; k++) {
		locus_relay_destroy(d->relay[k]);
		d->relay[k] = NULL;
	}
	locus_relay_mux_destroy(d->mux);
	d->mux = NULL;
}

/*
 * gpu_pci with several engines: the ranks of each GPU to an engine on the
 * GPU's NUMA node (read from sysfs; $LOCUS_SYSFS_ROOT stands for /sys in the
 * tests), the placement said in the log. 0, or -1 (a GPU named that the
 * machine does not have).
 */
static int place_gpus(struct locusd *d)
{
	const char *root = locusd_sysfs_root();
	int gpu_numa[LOCUS_CFG_MAX_GPUS], eng_numa[LOCUS_CFG_MAX_ENGINES];
	uint8_t map[LOCUS_CFG_MAX_GPUS];
	uint32_t G = d->cfg.n_gpu_pci;

	if (!G || d->n_eng < 2)
		return 0;
	for (uint32_t g = 0; g < G; g++) {
		gpu_numa[g] = locus_engine_topo_pci_numa(root, d->cfg.gpu_pci[g]);
		if (gpu_numa[g] < -1) {
			fprintf(stderr, "locusd: gpu_pci: GPU %u, %s: %s\n", g, d->cfg.gpu_pci[g],
				gpu_numa[g] == -ENOENT ? "no such PCI device" : strerror(-gpu_numa[g]));
			return -1;
		}
	}
	for (uint32_t k = 0; k < d->n_eng; k++) {
		unsigned sock = rte_lcore_to_socket_id(d->eng_lcore[k]);

		eng_numa[k] = sock == (unsigned)SOCKET_ID_ANY ? -1 : (int)sock;
	}
	locus_engine_topo_map(gpu_numa, G, eng_numa, d->n_eng, map);
	if (locus_node_place_gpus(d->node, map, G) < 0)
		return -1;
	for (uint32_t k = 0; k < d->n_eng; k++) {
		char list[LOCUS_CFG_MAX_GPUS * 24] = "";
		size_t at = 0;

		for (uint32_t g = 0; g < G; g++)
			if (map[g] == k && at < sizeof(list))
				at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%u (%s, node %d)",
						       at ? ", " : "", g, d->cfg.gpu_pci[g],
						       gpu_numa[g]);
		fprintf(stderr, "locusd: engine %u (lcore %u, NUMA node %d) polls the ranks of "
			"GPU%s %s\n", k, d->eng_lcore[k], eng_numa[k], strchr(list, ',') ? "s" : "",
			at ? list : "none");
	}
	return 0;
}

/*
 * The network's poll loop when it has a worker lcore of its own: completion
 * queue, inbox, backlogs, and the engine's sends from the relay. Runs until
 * main says the engine's lcore is done, so that lcore can drain through it.
 */
static int net_main(void *arg)
{
	struct locusd *d = arg;
	struct locus_idle idle;
	uint32_t seq;

	idle_start(d, &idle, &seq);
	for (;;) {
		/* the engines' sends first: this iteration's poll posts them, in one list */
		int n = 0;

		for (uint32_t k = 0; k < d->n_eng; k++)
			n += locus_relay_poll_net(d->relay[k]);
		n += locusd_net_poll(d->net, rte_rdtsc());

		if (likely(n)) {
			locus_idle_busy(&idle);
			continue;
		}
		if (unlikely(__atomic_load_n(&d->net_stop, __ATOMIC_ACQUIRE)))
			break;
		idle_step(d, &idle, &seq, NULL);
	}
	return 0;
}

/* ---- telemetry: /locus/info ------------------------------------------------------ */

static int tel_info(const char *cmd, const char *params, struct rte_tel_data *out)
{
	struct locus_engine *e = locus_node_engine(D.node);

	(void)cmd;
	(void)params;
	rte_tel_data_start_dict(out);
	rte_tel_data_add_dict_string(out, "instance", D.cfg.instance);
	rte_tel_data_add_dict_int(out, "node", (int)D.cfg.node_id);
	rte_tel_data_add_dict_int(out, "nodes", (int)D.cfg.n_nodes);
	rte_tel_data_add_dict_int(out, "gpus_per_node", (int)D.cfg.gpus_per_node);
	rte_tel_data_add_dict_u64(out, "clients", locus_node_clients(D.node));
	rte_tel_data_add_dict_u64(out, "engine_lcores", locus_node_n_engines(D.node));
	rte_tel_data_add_dict_u64(out, "eldr_generation",
				  locus_engine_table_generation(e, LOCUS_TABLE_CH_ELDR));
	rte_tel_data_add_dict_u64(out, "grace_generation",
				  locus_engine_table_generation(e, LOCUS_TABLE_CH_GRACE));
	return 0;
}

/* ---- configuration ------------------------------------------------------------------ */

static int load_config(const char *path, struct locus_config *cfg)
{
	struct locus_error err = { 0 };
	int ret = path ? locus_config_load(path, cfg, &err)
		       : locus_config_parse(embedded_default, sizeof(embedded_default) - 1,
					    "<embedded default>", cfg, &err);

	if (ret < 0)
		fprintf(stderr, "locusd: %s\n", err.msg);
	return ret;
}

/* Split eal_args on blanks into argv (the config forbids quoting). */
static int eal_argv(const struct locus_config *cfg, char *buf, size_t len, char **argv)
{
	char prefix[96];
	int argc = 0;
	char *save, *tok;

	snprintf(buf, len, "%s", cfg->eal_args);
	argv[argc++] = (char *)"locusd";
	for (tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		if (argc >= MAX_EAL_ARGS - 3)
			return -E2BIG;
		argv[argc++] = tok;
	}
	/* one DPDK runtime directory per instance: several locusd per host */
	snprintf(prefix, sizeof(prefix), "--file-prefix=locus-%s", cfg->instance);
	argv[argc++] = strdup(prefix);
	argv[argc] = NULL;
	return argv[argc - 1] ? argc : -ENOMEM;
}

/*
 * The CPU list of eal_args' -l / --lcores, for a systemd CPUAffinity= drop-in
 * (deploy/locusd-cpus). Prints nothing when eal_args names none.
 */
static int print_cpus(const struct locus_config *cfg)
{
	char buf[LOCUS_CFG_EAL_MAX];
	char *save, *tok, *prev = NULL;

	snprintf(buf, sizeof(buf), "%s", cfg->eal_args);
	for (tok = strtok_r(buf, " \t", &save); tok; prev = tok, tok = strtok_r(NULL, " \t", &save)) {
		if (prev && (!strcmp(prev, "-l") || !strcmp(prev, "--lcores"))) {
			for (char *p = tok; *p; p++)
				if (*p == ',')
					*p = ' ';
			printf("%s\n", tok);
			return 0;
		}
		if (!strncmp(tok, "-l", 2) && tok[2]) {
			printf("%s\n", tok + 2);
			return 0;
		}
	}
	return 0;
}

/* SIGHUP: take what is safe to change under traffic, name the rest. */
static void reload(struct locusd *d)
{
	struct locus_config n;

	if (!d->config_path) {
		fprintf(stderr, "locusd: SIGHUP: running the embedded default, nothing to re-read\n");
		return;
	}
	if (load_config(d->config_path, &n) < 0) {
		fprintf(stderr, "locusd: SIGHUP: keeping the running configuration\n");
		return;
	}
	idle_publish(d, &n);
	d->cfg.idle_spin_polls = n.idle_spin_polls;
	d->cfg.idle_pause_polls = n.idle_pause_polls;
	d->cfg.idle_sleep_max_us = n.idle_sleep_max_us;
	d->cfg.watchdog = n.watchdog;
	if (memcmp(&n, &d->cfg, sizeof(n)))
		fprintf(stderr, "locusd: SIGHUP: applied the idle policy (idle_spin_polls %u, "
				"idle_pause_polls %u, idle_sleep_max_us %u) and watchdog; other changes "
				"need a restart\n", n.idle_spin_polls, n.idle_pause_polls,
			n.idle_sleep_max_us);
	else
		fprintf(stderr, "locusd: SIGHUP: configuration re-read (idle_spin_polls %u, "
				"idle_pause_polls %u, idle_sleep_max_us %u)\n", n.idle_spin_polls,
			n.idle_pause_polls, n.idle_sleep_max_us);
	sd_notify(0, "READY=1");
}

/* ---- main ------------------------------------------------------------------------- */

static void usage(void)
{
	fprintf(stderr,
		"usage: locusd [-c CONFIG] [--check-config] [--print-cpus] [--print-default]\n"
		"  -c CONFIG        /etc/locus/<instance>.conf (default: the embedded single-node\n"
		"                   config: instance 'default', 4 ranks, shared-memory tiers)\n"
		"  --check-config   parse and check the config, print 'ok' or the error, exit\n"
		"  --print-cpus     print the lcore CPU list of eal_args (systemd CPUAffinity)\n"
		"  --print-default  print the embedded default config (what runs without -c)\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", no_argument, NULL, 'k' },
		{ "print-cpus", no_argument, NULL, 'p' },
		{ "print-default", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char eal_buf[LOCUS_CFG_EAL_MAX], *eal[MAX_EAL_ARGS];
	struct locus_error err = { 0 };
	uint64_t watchdog_usec = 0, next_watchdog = 0, hz;
	const struct locus_engine_remote *remotes[LOCUS_CFG_MAX_ENGINES];
	int check = 0, cpus = 0, c, n, ret = 1;
	struct sigaction sa = { .sa_handler = on_signal };

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			D.config_path = optarg;
			break;
		case 'k':
			check = 1;
			break;
		case 'p':
			cpus = 1;
			break;
		case 'd':
			fputs(embedded_default, stdout);
			return 0;
		default:
			usage();
			return c == 'h' ? 0 : 2;
		}
	}
	if (optind != argc) {
		usage();
		return 2;
	}
	if (load_config(D.config_path, &D.cfg) < 0)
		return 1;
	if (check) {
		printf("ok\n");
		return 0;
	}
	if (cpus)
		return print_cpus(&D.cfg);

	/*
	 * Say who holds the instance before EAL's own lock says it less clearly.
	 * Alive is the clients' rule (pid and start time): a killed owner not yet
	 * reaped, or its pid reused by another process, leaves a stale segment
	 * that locus_shm_create replaces.
	 */
	{
		struct locus_shm *old;

		if (locus_shm_attach(D.cfg.instance, LOCUS_SHM_RDONLY, &old, NULL) == 0) {
			pid_t owner = locus_shm_owner_pid(old);
			int alive = locus_shm_owner_alive(old);

			locus_shm_detach(old);
			if (alive) {
				fprintf(stderr, "locusd: instance %s is already served by pid %d\n",
					D.cfg.instance, (int)owner);
				return 1;
			}
		}
	}
	n = eal_argv(&D.cfg, eal_buf, sizeof(eal_buf), eal);
	if (n < 0) {
		fprintf(stderr, "locusd: eal_args: %s\n", strerror(-n));
		return 1;
	}
	if (rte_eal_init(n, eal) < 0) {
		fprintf(stderr, "locusd: EAL init failed (eal_args '%s'): %s\n", D.cfg.eal_args,
			rte_strerror(rte_errno));
		return 1;
	}
	hz = rte_get_tsc_hz();
	if (pick_engine_lcores(&D) < 0)
		goto err_eal;
	if (pick_net_lcore(&D) < 0)
		goto err_eal;
	/* with a worker lcore, connections stay on main and the worker only polls */
	if (D.cfg.n_nodes > 1 &&
	    locusd_net_create(&D.cfg, D.worker_lcore < RTE_MAX_LCORE, &D.net, &err) < 0) {
		fprintf(stderr, "locusd: %s\n", err.msg);
		goto err_eal;
	}
	if (D.net && D.net_lcore < RTE_MAX_LCORE && make_relays(&D) < 0) {
		ret = 1;
		goto err_net;
	}
	for (uint32_t k = 0; D.net && k < D.n_eng; k++)
		remotes[k] = D.relay[k] ? locus_relay_transport(D.relay[k])
					: locusd_net_transport(D.net);
	if (locus_node_create_remotes(&D.cfg, tsc_now, hz, remotes, D.net ? D.n_eng : 0, &D.node,
				      &err) < 0) {
		fprintf(stderr, "locusd: %s\n", err.msg);
		goto err_net;
	}
	if (place_gpus(&D) < 0)
		goto err_node;
	if (D.net && locusd_net_attach(D.net, locus_node_engine(D.node), locus_node_counters(D.node),
				       LOCUS_NODE_ENGINE_BLOCK, LOCUS_NODE_CTL_BLOCK, &err) < 0) {
		fprintf(stderr, "locusd: %s\n", err.msg);
		goto err_node;
	}
	for (uint32_t k = 0; k < D.n_eng && D.relay[k]; k++) {
		struct locus_engine_sink es;

		locus_engine_sink_of(locus_node_engine_at(D.node, k), &es);
		locus_relay_attach(D.relay[k], &es);
	}
	if (D.mux)
		locus_relay_mux_set_pick(D.mux, arrival_engine, D.node);
	if (D.cfg.intra_node == LOCUS_INTRA_VERBS) {
		size_t len, first, stride;
		void *region = locus_node_client_region(D.node, &len);
		unsigned count;

		/* one MR per client slot: a freed slot's fresh memfd is registered again */
		locus_node_client_slots(D.node, &first, &stride, &count);
		if (locusd_loop_create(&D.cfg, region, len, first, stride, count, &D.loop,
				       &err) < 0) {
			fprintf(stderr, "locusd: intra_node = verbs: %s\n", err.msg);
			goto err_node;
		}
		locus_engine_set_ldma(locus_node_engine(D.node), locusd_loop_ops(D.loop));
		locus_node_on_renew(D.node, locusd_loop_renew, D.loop);
	}
	if (locus_node_regions_open(D.node, D.net ? locusd_net_mr_ops(D.net) : NULL, &err) < 0) {
		fprintf(stderr, "locusd: buffer regions: %s\n", err.msg);
		goto err_node;
	}
	/* membership through etcd: this node's record, the others' as peers */
	if (D.cfg.etcd[0]) {
		if (locusd_cluster_create(&D.cfg, D.net, locus_node_pushsrv(D.node),
					  locus_node_counters(D.node), LOCUS_NODE_CTL_BLOCK, &D.cluster,
					  &err) < 0 ||
		    (locusd_cluster_set_node(D.cluster, D.node), 0) ||
		    locusd_cluster_join(D.cluster, 3000, &err) < 0) {
			fprintf(stderr, "locusd: %s\n", err.msg);
			goto err_node;
		}
	}
	idle_publish(&D, &D.cfg);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	rte_telemetry_register_cmd("/locus/info", tel_info,
				   "locus instance, clients and table generations in use");

	if (D.net_lcore < RTE_MAX_LCORE && rte_eal_remote_launch(net_main, &D, D.net_lcore) < 0) {
		fprintf(stderr, "locusd: cannot launch the network lcore %u\n", D.net_lcore);
		goto err_node;
	}
	for (uint32_t k = 0; k < D.n_eng && D.eng_lcore[k] < RTE_MAX_LCORE; k++) {
		if (rte_eal_remote_launch(worker_main, &D.eng_arg[k], D.eng_lcore[k]) < 0) {
			fprintf(stderr, "locusd: cannot launch the engine lcore %u\n",
				D.eng_lcore[k]);
			D.n_eng = k; /* wait for those launched */
			__atomic_store_n(&D.stop, 1, __ATOMIC_RELEASE);
			goto err_engines;
		}
	}
	if (D.n_eng > 1)
		fprintf(stderr, "locusd: %u engine lcores (%u .. %u), client slots spread over "
			"them\n", D.n_eng, D.eng_lcore[0], D.eng_lcore[D.n_eng - 1]);
	if (D.net_lcore < RTE_MAX_LCORE && D.n_eng == 1)
		fprintf(stderr, "locusd: engine on lcore %u, network (completion queues, inboxes) "
			"on lcore %u, connections on the main lcore\n", D.worker_lcore, D.net_lcore);
	else if (D.net_lcore < RTE_MAX_LCORE)
		fprintf(stderr, "locusd: %u engines, each with a relay to the network (completion "
			"queues, inboxes) on lcore %u, connections on the main lcore\n", D.n_eng,
			D.net_lcore);
	if (D.worker_lcore >= RTE_MAX_LCORE)
		fprintf(stderr, "locusd: one lcore only: the engine shares the main lcore\n");
	locus_node_set_running(D.node);
	/* systemd's interval; the config's watchdog key (SIGHUP may change it) says whether to ping */
	if (sd_watchdog_enabled(0, &watchdog_usec) <= 0)
		watchdog_usec = 0;
	sd_notifyf(0, "READY=1\nSTATUS=instance %s: %u node(s) x %u ranks, worker lcore %d\n"
		      "MAINPID=%lu", D.cfg.instance, D.cfg.n_nodes, D.cfg.gpus_per_node,
		   D.worker_lcore < RTE_MAX_LCORE ? (int)D.worker_lcore : -1,
		   (unsigned long)getpid());
	fprintf(stderr, "locusd: instance %s running (segment locus.%s, pid %d)\n",
		D.cfg.instance, D.cfg.instance, (int)getpid());

	while (!got_term) {
		uint64_t now = rte_rdtsc();

		locus_node_control(D.node);
		locusd_loop_reap(D.loop);
		if (D.net)
			locusd_net_control(D.net);
		if (D.cluster)
			locusd_cluster_poll(D.cluster);
		if (D.worker_lcore >= RTE_MAX_LCORE) {
			/*
			 * One lcore: poll for a control period between control passes
			 * (each makes system calls: the sockets, rdma_cm), not for a
			 * fixed 64 polls, which made them the poll loop's own
			 */
			uint64_t until = rte_rdtsc() + hz / 1000000 * CONTROL_PERIOD_US;

			do {
				locus_engine_poll(locus_node_engine(D.node));
				if (D.net)
					locusd_net_poll(D.net, rte_rdtsc());
				if (D.loop)
					locusd_loop_poll(D.loop, locus_node_engine(D.node));
			} while (rte_rdtsc() < until && !got_term);
		} else if (__atomic_load_n(&D.worker_done, __ATOMIC_ACQUIRE)) {
			fprintf(stderr, "locusd: worker lcore stopped\n");
			break;
		}
		if (D.cfg.watchdog && watchdog_usec && now >= next_watchdog) {
			sd_notify(0, "WATCHDOG=1");
			next_watchdog = now + hz / 1000000 * (watchdog_usec / 2);
		}
		if (got_hup) {
			got_hup = 0;
			sd_notify(0, "RELOADING=1");
			reload(&D);
		}
		if (D.worker_lcore < RTE_MAX_LCORE)
			rte_delay_us_sleep(CONTROL_PERIOD_US);
	}
	ret = 0;
	sd_notify(0, "STOPPING=1");
	/* leave first: the others stop sending here while the rings drain */
	locusd_cluster_destroy(D.cluster);
	D.cluster = NULL;
	fprintf(stderr, "locusd: stopping: draining client rings\n");
	/* clients see STOPPING and attach no more; the worker drains, then leaves */
	locus_node_set_stopping(D.node);
	__atomic_store_n(&D.stop, 1, __ATOMIC_RELEASE);
err_engines:
	for (uint32_t k = 0; k < D.n_eng && D.eng_lcore[k] < RTE_MAX_LCORE; k++)
		rte_eal_wait_lcore(D.eng_lcore[k]);
	/* the network lcore last: the engine's lcore drained through it */
	__atomic_store_n(&D.net_stop, 1, __ATOMIC_RELEASE);
	if (D.net_lcore < RTE_MAX_LCORE)
		rte_eal_wait_lcore(D.net_lcore);
	for (uint32_t k = 0; k < D.n_eng && D.relay[k]; k++) {
		struct locus_relay_stats rs;

		locus_relay_stats(D.relay[k], &rs);
		fprintf(stderr, "locusd: relay of engine %u: %llu sends passed to the network lcore (%llu refused "
			"there), %llu send ends, %llu arrivals (%llu handed again later, %llu left "
			"in the inbox for lack of room, %llu refused as too long)\n", k,
			(unsigned long long)rs.tx,
			(unsigned long long)rs.tx_refused, (unsigned long long)rs.done,
			(unsigned long long)rs.rx, (unsigned long long)rs.rx_held,
			(unsigned long long)rs.rx_no_room, (unsigned long long)rs.rx_refused);
	}
err_node:
	locusd_cluster_destroy(D.cluster);
	D.cluster = NULL;
	locus_node_on_renew(D.node, NULL, NULL);
	locusd_loop_destroy(D.loop);
	D.loop = NULL;
	/* regions' MRs belong to the transport's PD: deregistered while it exists */
	locus_node_regions_close(D.node);
	/* the transport first: its in-flight messages complete into the engine */
	locusd_net_destroy(D.net);
	D.net = NULL;
	free_relays(&D); /* after the transport: it ends what it held into the relays */
	locus_node_destroy(D.node, 1);
err_net:
	locusd_net_destroy(D.net);
	free_relays(&D);
err_eal:
	rte_eal_cleanup();
	return ret;
}
