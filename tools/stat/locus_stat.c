// SPDX-License-Identifier: MIT
/*
 * locus-stat: read a running locusd's counters straight from its segment.
 *
 * The segment is mapped PROT_READ and the counter handle is read-only, so
 * nothing here can write the data plane's memory; reading takes relaxed
 * loads only, so nothing here can block it either.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "locus_shm.h"
#include "locus_stat.h"

enum fmt { FMT_TABLE, FMT_JSON, FMT_PROM };

struct opts {
	const char *instance;
	enum fmt fmt;
	double watch_s;      /* 0: one sample */
	unsigned long count; /* samples; 0: until killed */
	char *const *pat;
	int npat;
	const char *telemetry; /* a DPDK telemetry command instead of the counters */
	int by_lcore;          /* each lcore block on its own */
	int slow;              /* the slowest ranks and rails */
};

static void usage(FILE *f)
{
	fputs("Usage: locus-stat [-i INSTANCE] [--json | --prometheus] [--watch SECONDS [--count N]]\n"
	      "                  [PATTERN...]\n"
	      "       locus-stat [-i INSTANCE] [--json] --by-lcore [PATTERN...]\n"
	      "       locus-stat [-i INSTANCE] --telemetry COMMAND\n"
	      "       locus-stat [-i INSTANCE] --slow\n"
	      "Print the counters, gauges and histograms of a locus data plane, summed over its\n"
	      "lcores, straight from its shared-memory segment. The segment is mapped read-only:\n"
	      "locus-stat never writes it and never blocks the data plane.\n"
	      "\n"
	      "  -i, --instance NAME   instance (default: $LOCUS_INSTANCE, else \"default\");\n"
	      "                        the segment is $LOCUS_SHM_DIR/locus.NAME (default /dev/shm)\n"
	      "  -j, --json            one JSON object per sample (JSON Lines with --watch)\n"
	      "  -p, --prometheus      Prometheus text exposition format\n"
	      "  -w, --watch SECONDS   sample every SECONDS (0.01 .. 86400) and add rates per second\n"
	      "  -c, --count N         with --watch: stop after N samples (default: until killed)\n"
	      "  -l, --by-lcore        each lcore's counters block on its own (engine 0, main,\n"
	      "                        engine 1, ...) instead of their sums\n"
	      "  -s, --slow            the ranks slowest to answer this node's ranks (rows sent\n"
	      "                        to results back) and the rails slowest to each peer\n"
	      "                        (post to completion), slowest first, ten of each\n"
	      "  -t, --telemetry CMD   send CMD (e.g. /locus/info, /eal/params; / lists them) to the\n"
	      "                        instance's DPDK telemetry socket and print the JSON reply\n"
	      "  -h, --help            this text\n"
	      "\n"
	      "PATTERN is an fnmatch(3) glob over entry names (e.g. 'eldr_*'); entries matching\n"
	      "any pattern are shown, all entries when none is given. Vector entries show their\n"
	      "non-zero elements in the table. Histograms show count, sum, mean and p50/p99\n"
	      "estimated by linear interpolation inside log2 buckets (at most 2x off).\n"
	      "\n"
	      "Exit codes:\n"
	      "  0  success\n"
	      "  1  usage error, or an output or memory error\n"
	      "  2  no such instance\n"
	      "  3  permission denied (access refused, segment of another user, world-writable)\n"
	      "  4  version mismatch (segment ABI or counter layout)\n"
	      "  5  corrupt segment (bad magic, truncated or shrunk, a field or entry out of range)\n"
	      "  6  no counters yet (region absent or not yet initialised by the data plane)\n", f);
}

/*
 * Another process can shrink the shm file under our mapping; touching the
 * lost pages raises SIGBUS. That is a corrupt segment, not a crash: jump
 * back to main and exit with the documented code. Only the counter and
 * header reads touch the mapping, never stdio, so nothing is left half-done.
 */
static sigjmp_buf bus_jmp;

static void on_sigbus(int sig)
{
	(void)sig;
	siglongjmp(bus_jmp, 1);
}

static int exit_code(int rc)
{
	switch (rc < 0 ? -rc : rc) {
	case ENOENT:
		return LOCUS_STAT_EXIT_NOINSTANCE;
	case EACCES:
	case EPERM:
	case LOCUS_EFOREIGN:
	case LOCUS_EWORLDWRITABLE:
		return LOCUS_STAT_EXIT_PERM;
	case LOCUS_EVERSION:
		return LOCUS_STAT_EXIT_VERSION;
	case LOCUS_EBADMAGIC:
	case LOCUS_ETRUNCATED:
	case LOCUS_ERANGE:
		return LOCUS_STAT_EXIT_CORRUPT;
	}
	return LOCUS_STAT_EXIT_USAGE;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "instance", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' },
		{ "watch", required_argument, NULL, 'w' },
		{ "count", required_argument, NULL, 'c' },
		{ "telemetry", required_argument, NULL, 't' },
		{ "by-lcore", no_argument, NULL, 'l' },
		{ "slow", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *env = getenv("LOCUS_INSTANCE");
	int have_count = 0, ch, nfmt = 0;
	char *end;

	memset(o, 0, sizeof(*o));
	o->instance = env && env[0] ? env : "default";
	o->count = 1;
	while ((ch = getopt_long(argc, argv, "i:jpw:c:t:lsh", lo, NULL)) != -1) {
		switch (ch) {
		case 's':
			o->slow = 1;
			break;
		case 'l':
			o->by_lcore = 1;
			break;
		case 'i':
			o->instance = optarg;
			break;
		case 'j':
			o->fmt = FMT_JSON;
			nfmt++;
			break;
		case 'p':
			o->fmt = FMT_PROM;
			nfmt++;
			break;
		case 'w':
			errno = 0;
			o->watch_s = strtod(optarg, &end);
			if (errno || end == optarg || *end || !isfinite(o->watch_s) ||
			    o->watch_s < 0.01 || o->watch_s > 86400) {
				fprintf(stderr, "locus-stat: --watch \"%s\": want seconds in 0.01 .. 86400\n",
					optarg);
				return -1;
			}
			break;
		case 'c':
			errno = 0;
			o->count = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' ||
			    o->count == 0 || o->count > 1000000000ul) {
				fprintf(stderr, "locus-stat: --count \"%s\": want an integer in 1 .. 10^9\n",
					optarg);
				return -1;
			}
			have_count = 1;
			break;
		case 't':
			o->telemetry = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(LOCUS_STAT_EXIT_OK);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (o->telemetry && (nfmt || o->watch_s > 0 || have_count || optind < argc)) {
		fprintf(stderr, "locus-stat: --telemetry takes no other option but --instance\n");
		return -1;
	}
	if (nfmt > 1) {
		fprintf(stderr, "locus-stat: --json and --prometheus exclude each other\n");
		return -1;
	}
	if (o->by_lcore && (o->watch_s > 0 || o->fmt == FMT_PROM || o->telemetry)) {
		fprintf(stderr, "locus-stat: --by-lcore takes one sample, as a table or --json\n");
		return -1;
	}
	if (o->slow && (nfmt || o->watch_s > 0 || o->by_lcore || o->telemetry || optind < argc)) {
		fprintf(stderr, "locus-stat: --slow takes no other option but --instance\n");
		return -1;
	}
	if (have_count && o->watch_s == 0) {
		fprintf(stderr, "locus-stat: --count needs --watch\n");
		return -1;
	}
	if (o->watch_s > 0 && o->fmt == FMT_PROM) {
		fprintf(stderr, "locus-stat: --watch does not apply to --prometheus (a scraper computes rates from the _total counters)\n");
		return -1;
	}
	if (o->watch_s > 0 && !have_count)
		o->count = 0;
	o->pat = argv + optind;
	o->npat = argc - optind;
	return 0;
}

static const char *state_name(enum locus_shm_state st)
{
	switch (st) {
	case LOCUS_SHM_STARTING:
		return "starting";
	case LOCUS_SHM_RUNNING:
		return "running";
	case LOCUS_SHM_STOPPING:
		return "stopping";
	}
	return "unknown";
}

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Open the counter region of an attached segment; exit code on failure. */
static int open_counters(struct locus_shm *shm, const char *instance,
			 struct locus_counters **c)
{
	struct locus_error err;
	size_t size;
	void *region = locus_shm_region(shm, LOCUS_REGION_COUNTERS, &size);
	int rc;

	if (!region || size < sizeof(uint64_t)) {
		fprintf(stderr, "locus-stat: instance \"%s\" has no counters region\n", instance);
		return LOCUS_STAT_EXIT_NOCOUNTERS;
	}
	if (__atomic_load_n((const uint64_t *)region, __ATOMIC_ACQUIRE) == 0) {
		fprintf(stderr, "locus-stat: instance \"%s\" (state %s): counters not initialised yet\n",
			instance, state_name(locus_shm_state(shm)));
		return LOCUS_STAT_EXIT_NOCOUNTERS;
	}
	locus_error_clear(&err);
	rc = locus_counters_open(region, size, LOCUS_CTR_RDONLY, c, &err);
	if (rc < 0) {
		fprintf(stderr, "locus-stat: instance \"%s\": %s\n", instance,
			err.msg[0] ? err.msg : locus_strerror(rc));
		return exit_code(rc);
	}
	return 0;
}

/* --by-lcore: one sample of each block, in block order, each with what writes it. */
static int print_blocks(const struct opts *o, struct locus_shm *shm, struct locus_counters *c)
{
	for (uint32_t b = 0; b < locus_counters_n_blocks(c); b++) {
		struct locus_stat_snap s;
		struct locus_stat_view v;
		char role[32];
		int rc;

		if (locus_stat_sample(c, o->pat, o->npat, (int)b, &s) < 0) {
			fprintf(stderr, "locus-stat: out of memory\n");
			return LOCUS_STAT_EXIT_USAGE;
		}
		locus_stat_block_role(c, b, role, sizeof(role));
		v = (struct locus_stat_view){
			.instance = o->instance,
			.state = state_name(locus_shm_state(shm)),
			.owner_pid = (long)locus_shm_owner_pid(shm),
			.start_ns = locus_shm_start_time_ns(shm),
			.now_ns = now_ns(CLOCK_REALTIME),
			.n_blocks = locus_counters_n_blocks(c),
			.n_entries = locus_counters_n_entries(c),
			.block = (int)b,
			.role = role,
		};
		rc = o->fmt == FMT_JSON ? locus_stat_print_json(stdout, &v, &s)
					: locus_stat_print_table(stdout, &v, &s);
		locus_stat_snap_free(&s);
		if (rc < 0) {
			fprintf(stderr, "locus-stat: writing the output failed\n");
			return LOCUS_STAT_EXIT_USAGE;
		}
	}
	return 0;
}

/* --slow: one sample of the entries it reads. */
static int print_slow(struct locus_counters *c)
{
	static char *pat[] = { "rank_answer*", "rail_send_ns", "rail_peer_node",
			       "remote_messages_out" };
	struct locus_stat_snap s;
	uint32_t n_nodes = 1, n_ranks = 0;
	int rc;

	if (locus_stat_sample(c, pat, 4, -1, &s) < 0) {
		fprintf(stderr, "locus-stat: out of memory\n");
		return LOCUS_STAT_EXIT_USAGE;
	}
	for (uint32_t i = 0; i < s.n; i++) {
		if (!strcmp(s.e[i].info->name, "remote_messages_out"))
			n_nodes = s.e[i].info->dim[0];
		if (!strcmp(s.e[i].info->name, "rank_answers"))
			n_ranks = s.e[i].info->dim[0];
	}
	rc = locus_stat_print_slow(stdout, &s, 10, n_nodes ? n_ranks / n_nodes : 0);
	locus_stat_snap_free(&s);
	if (rc < 0) {
		fprintf(stderr, "locus-stat: writing the output failed\n");
		return LOCUS_STAT_EXIT_USAGE;
	}
	return 0;
}

static int run(const struct opts *o, struct locus_shm *shm, struct locus_counters *c)
{
	struct locus_stat_snap snap[2] = { { 0 }, { 0 } };
	struct locus_error err;
	struct timespec next;
	uint64_t step_ns = (uint64_t)(o->watch_s * 1e9);
	int cur = 0, rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &next);
	for (unsigned long n = 0; o->count == 0 || n < o->count; n++) {
		struct locus_stat_snap *s = &snap[cur], *prev = &snap[!cur];
		struct locus_stat_view v;

		if (n) {
			uint64_t t = (uint64_t)next.tv_sec * 1000000000ull + (uint64_t)next.tv_nsec +
				     step_ns;

			/* absolute deadlines: the period does not drift */
			next.tv_sec = (time_t)(t / 1000000000ull);
			next.tv_nsec = (long)(t % 1000000000ull);
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
				;
		}
		locus_error_clear(&err);
		rc = locus_counters_refresh(c, &err);
		if (rc < 0) {
			fprintf(stderr, "locus-stat: instance \"%s\": %s\n", o->instance, err.msg);
			rc = exit_code(rc);
			break;
		}
		locus_stat_snap_free(s);
		if (o->by_lcore) {
			rc = print_blocks(o, shm, c);
			break;
		}
		if (o->slow) {
			rc = print_slow(c);
			break;
		}
		if (locus_stat_sample(c, o->pat, o->npat, -1, s) < 0) {
			fprintf(stderr, "locus-stat: out of memory\n");
			rc = LOCUS_STAT_EXIT_USAGE;
			break;
		}
		locus_stat_link(s, n ? prev : NULL);
		v = (struct locus_stat_view){
			.instance = o->instance,
			.state = state_name(locus_shm_state(shm)),
			.owner_pid = (long)locus_shm_owner_pid(shm),
			.start_ns = locus_shm_start_time_ns(shm),
			.now_ns = now_ns(CLOCK_REALTIME),
			.n_blocks = locus_counters_n_blocks(c),
			.n_entries = locus_counters_n_entries(c),
			.interval_s = n ? (double)(s->mono_ns - prev->mono_ns) / 1e9 : 0,
			.block = -1,
		};
		if (o->fmt == FMT_JSON)
			rc = locus_stat_print_json(stdout, &v, s);
		else if (o->fmt == FMT_PROM)
			rc = locus_stat_print_prom(stdout, &v, s);
		else
			rc = locus_stat_print_table(stdout, &v, s);
		if (rc < 0) {
			fprintf(stderr, "locus-stat: %s\n", rc == -ENOMEM ? "out of memory" :
				"writing the output failed");
			rc = LOCUS_STAT_EXIT_USAGE;
			break;
		}
		cur = !cur;
	}
	locus_stat_snap_free(&snap[0]);
	locus_stat_snap_free(&snap[1]);
	return rc;
}

int main(int argc, char **argv)
{
	struct locus_counters *c = NULL;
	struct locus_shm *shm = NULL;
	struct locus_error err;
	struct opts o;
	int rc;

	if (parse_opts(argc, argv, &o) < 0)
		return LOCUS_STAT_EXIT_USAGE;
	if (o.telemetry)
		return locus_stat_telemetry(o.instance, o.telemetry, stdout);
	locus_error_clear(&err);
	rc = locus_shm_attach(o.instance, LOCUS_SHM_RDONLY | LOCUS_SHM_ALLOW_GROUP, &shm, &err);
	if (rc < 0) {
		fprintf(stderr, "locus-stat: %s\n", err.msg[0] ? err.msg : locus_strerror(rc));
		return exit_code(rc);
	}
	if (sigsetjmp(bus_jmp, 1)) {
		static const char msg[] = "locus-stat: the segment shrank while being read "
					  "(truncated by another process)\n";

		ssize_t w = write(2, msg, sizeof(msg) - 1);

		(void)w;
		_exit(LOCUS_STAT_EXIT_CORRUPT);
	}
	signal(SIGBUS, on_sigbus);
	rc = open_counters(shm, o.instance, &c);
	if (rc)
		goto out_detach;
	rc = run(&o, shm, c);
	locus_counters_close(c);
out_detach:
	locus_shm_detach(shm);
	return rc;
}
