// SPDX-License-Identifier: MIT
/*
 * bench_dataplane: the data plane through a running locusd from one pinned,
 * spinning client thread (bench_dp.h). tools/bench/bench_daemon.sh starts locusd
 * with its engine lcore on another core and runs these in turn:
 *
 *   bench_dataplane route -i INST (--table T --trace J | --layers L --experts E)
 *                   [--windows 1,8,32] [--seconds S] [--cpus 0[,2,...]] [--no-push]
 *                   [--build]
 *   bench_dataplane dispatch -i INST --trace J [--row-bytes 4096,7168]
 *                   [--tokens N] [--window W] [--seconds S] [--cpus C]
 *   bench_dataplane ep-dispatch -i INST --trace J [--ranks R] [--row-bytes B]
 *                   [--tokens N] [--seconds S] [--cpus C]
 *   bench_dataplane idle -i INST --pid P [--gaps 1,100,1000] [--repeats 20,8,3]
 *                   [--cpu-seconds S] [--cpus C]
 *   bench_dataplane table -o FILE --layers L --experts E [--decoders K]
 *   bench_dataplane internode --rank-at I0,I0,I1,I1 --send-ranks 0,1 --trace J
 *                   [--row-bytes B] [--tokens N] [--window W] [--warmup S]
 *                   [--seconds S] [--cpus C] [--region] [--nap-us U]
 *   bench_dataplane grace-table -o FILE (--layers L --experts E | --trace J)
 *                   --nodes N --gpus G --on-node K
 *
 * Figures are printed, never asserted; every delivery is counted and the
 * first ones are checked byte for byte before the timing starts.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_dp.h"
#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_eldr_router.h"
#include "locus_push.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

int bd_pin(const char *who, int cpu)
{
	cpu_set_t set;
	char list[256] = "";
	size_t n = 0;

	if (cpu >= 0) {
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set)) {
			fprintf(stderr, "bench_dataplane: %s: cannot pin to CPU %d: %s\n", who, cpu,
				strerror(errno));
			return -1;
		}
	}
	if (sched_getaffinity(0, sizeof(set), &set))
		return -1;
	for (int i = 0; i < CPU_SETSIZE && n < sizeof(list) - 8; i++)
		if (CPU_ISSET(i, &set))
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", n ? "," : "", i);
	printf("where: %s (tid %d): %s CPU %s by sched_getaffinity, running on CPU %d\n", who,
	       (int)gettid(), cpu >= 0 ? "pinned to" : "not pinned,", list, sched_getcpu());
	if (cpu >= 0 && (CPU_COUNT(&set) != 1 || !CPU_ISSET(cpu, &set))) {
		fprintf(stderr, "bench_dataplane: %s: the pinning to CPU %d did not hold\n", who,
			cpu);
		return -1;
	}
	return 0;
}

int bd_attach(struct bd_att *a, const char *instance, uint32_t roles, uint32_t id)
{
	/* generous: in the Soft-RoCE guest (TCG) three threads spin beside locusd's main lcore */
	struct locus_client_req req = { .roles = roles, .decoder_id = id, .rank = id,
					.timeout_ms = 30000 };
	struct locus_error err = { 0 };
	uint64_t until = bd_now_ns() + 3000000000ull;
	int ret;

	memset(a, 0, sizeof(*a));
	/* the same id's previous attachment may not be drained yet */
	while ((ret = locus_client_attach(instance, &req, &a->c, &err)) == -EEXIST &&
	       bd_now_ns() < until)
		usleep(10000);
	if (ret) {
		fprintf(stderr, "bench_dataplane: attach to %s (roles %u, id %u): %s\n", instance,
			roles, id, err.msg);
		return -1;
	}
	a->stage = locus_client_stage(a->c, &a->stage_size);
	a->roles = roles;
	a->id = id;
	if (roles & LOCUS_ROLE_DECODE)
		locus_client_report_load(a->c, 0);
	return 0;
}

void bd_detach(struct bd_att *a, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		locus_client_detach(a[i].c);
		a[i].c = NULL;
	}
}

void bd_report_loads(struct bd_att *a, uint32_t n, uint64_t now)
{
	for (uint32_t i = 0; i < n; i++) {
		if (!(a[i].roles & LOCUS_ROLE_DECODE) || now - a[i].last_report_ns < 100000000ull)
			continue;
		locus_client_report_load(a[i].c, 0);
		a[i].last_report_ns = now;
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

double bd_quantile(uint64_t *v, size_t n, double q)
{
	size_t i;

	if (!n)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_u64);
	i = (size_t)(q * (double)(n - 1) + 0.5);
	return (double)v[i < n ? i : n - 1];
}

int bd_push_table(const char *instance, const void *blob, size_t len)
{
	struct locus_push_result res;
	struct locus_error err = { 0 };

	if (locus_push_table(instance, LOCUS_ELDR_TABLE_CHANNEL, blob, len, 0, &res, &err) < 0) {
		fprintf(stderr, "bench_dataplane: push: %s\n", err.msg);
		return -1;
	}
	if (res.timed_out || res.wait.n_refused || res.wait.n_adopted < 1) {
		fprintf(stderr, "bench_dataplane: push: generation %llu not adopted (%s)\n",
			(unsigned long long)res.generation, res.wait.refused_msg);
		return -1;
	}
	return 0;
}

/* ---- a synthetic ELDR table --------------------------------------------------------- */

/*
 * K decoders over L x E: decoder d's centroid leans on expert block d (E/K
 * experts of every layer), the way bench_dp_route.c's synthetic signatures
 * of cluster d do, so requests spread over the decoders. Sealed blob in
 * *blob (malloc'd), or NULL.
 */
void *bd_synthetic_table(uint32_t L, uint32_t E, uint32_t K, size_t *len)
{
	struct locus_eldr_tbl_layout lay;
	uint32_t *ids;
	uint8_t *mask, *blob;
	float *idf, *cen;

	if (!K || K > E || locus_eldr_tbl_layout(L, E, K, &lay))
		return NULL;
	*len = sizeof(struct locus_tbl_hdr) + lay.len;
	blob = aligned_alloc(64, LOCUS_ALIGN_UP(*len, 64));
	if (!blob)
		return NULL;
	memset(blob, 0, *len);
	if (locus_eldr_tbl_init(blob + sizeof(struct locus_tbl_hdr), lay.len, (uint16_t)L,
				(uint16_t)E, (uint16_t)K, 0.1f, &ids, &mask, &idf, &cen))
		goto err;
	((struct locus_eldr_tbl_hdr *)(blob + sizeof(struct locus_tbl_hdr)))->n_masked =
		(uint16_t)L;
	for (uint32_t l = 0; l < L; l++)
		mask[l] = 1;
	for (uint32_t f = 0; f < L * E; f++)
		idf[f] = 1.0f;
	for (uint32_t d = 0; d < K; d++) {
		float *c = cen + (size_t)d * L * E;
		double n2 = 0;

		ids[d] = d;
		for (uint32_t f = 0; f < L * E; f++) {
			c[f] = (f % E) / (E / K) == d ? 1.0f : 0.1f;
			n2 += (double)c[f] * c[f];
		}
		for (uint32_t f = 0; f < L * E; f++)
			c[f] = (float)(c[f] / sqrt(n2));
	}
	if (locus_eldr_tbl_validate(blob + sizeof(struct locus_tbl_hdr), lay.len, NULL, NULL) ||
	    locus_tbl_seal(blob, *len, LOCUS_TBL_ELDR, LOCUS_ELDR_TBL_VERSION, lay.len))
		goto err;
	return blob;
err:
	free(blob);
	return NULL;
}

int bd_table(const struct bd_opts *o)
{
	struct locus_error err = { 0 };
	size_t len;
	void *blob = bd_synthetic_table(o->layers, o->experts, o->decoders, &len);
	int ret = 1;

	if (!blob)
		fprintf(stderr, "bench_dataplane: no table of %u x %u for %u decoders\n", o->layers,
			o->experts, o->decoders);
	else if (locus_tbl_write_file(o->out, blob, len, &err) < 0)
		fprintf(stderr, "bench_dataplane: %s\n", err.msg);
	else
		ret = 0;
	free(blob);
	return ret;
}

/* ---- command line ------------------------------------------------------------------- */

/* "a,b,c" into v[max] (each in [lo, hi]): the count, or -1. */
static int parse_list(const char *s, uint32_t *v, uint32_t max, uint32_t lo, uint32_t hi)
{
	uint32_t n = 0;
	char *end;

	for (;;) {
		unsigned long x;

		errno = 0;
		x = strtoul(s, &end, 10);
		if (errno || end == s || x < lo || x > hi || n == max)
			return -1;
		v[n++] = (uint32_t)x;
		if (*end == '\0')
			return (int)n;
		if (*end != ',')
			return -1;
		s = end + 1;
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: bench_dataplane route -i INST (--table T --trace J | --layers L --experts E)\n"
		"                 [--decoders K] [--windows 1,8,32] [--seconds S] [--cpus C[,C...]]\n"
		"                 [--no-push]   (the table is in force already)\n"
		"                 [--path auto|auto-i8]   (the baseline's: locusd's eldr_precision)\n"
		"                 [--build]   (each ROUTE built from the trace's routed experts)\n"
		"       bench_dataplane dispatch -i INST --trace J [--ranks R] [--row-bytes 4096,7168]\n"
		"                 [--tokens N] [--window W] [--seconds S] [--cpus C]\n"
		"       bench_dataplane ep-dispatch -i INST --trace J [--ranks R] [--row-bytes B]\n"
		"                 [--tokens N] [--seconds S] [--cpus C]\n"
		"       bench_dataplane idle -i INST --pid P [--worker-tid T] [--gaps 1,100,1000]\n"
		"                 [--repeats 20,8,3] [--cpu-seconds S] [--cpus C]\n"
		"       bench_dataplane table -o FILE --layers L --experts E [--decoders K]\n"
		"       bench_dataplane internode --rank-at I0,I0,I1,I1 --send-ranks 0,1 --trace J\n"
		"                 [--row-bytes B] [--tokens N] [--window W] [--warmup S]\n"
		"                 [--seconds S] [--cpus C] [--region] [--nap-us U]\n"
		"       bench_dataplane grace-table -o FILE (--layers L --experts E | --trace J)\n"
		"                 --nodes N --gpus G --on-node K\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "instance", required_argument, NULL, 'i' }, { "trace", required_argument, NULL, 'j' },
		{ "table", required_argument, NULL, 't' }, { "out", required_argument, NULL, 'o' },
		{ "layers", required_argument, NULL, 'L' }, { "experts", required_argument, NULL, 'E' },
		{ "decoders", required_argument, NULL, 'K' }, { "windows", required_argument, NULL, 'w' },
		{ "window", required_argument, NULL, 'W' }, { "row-bytes", required_argument, NULL, 'b' },
		{ "ranks", required_argument, NULL, 'r' }, { "tokens", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 's' }, { "cpus", required_argument, NULL, 'c' },
		{ "pid", required_argument, NULL, 'p' }, { "gaps", required_argument, NULL, 'g' },
		{ "repeats", required_argument, NULL, 'R' },
		{ "cpu-seconds", required_argument, NULL, 'S' },
		{ "worker-tid", required_argument, NULL, 'T' },
		{ "no-push", no_argument, NULL, 'N' },
		{ "rank-at", required_argument, NULL, 'A' },
		{ "send-ranks", required_argument, NULL, 'X' },
		{ "warmup", required_argument, NULL, 'U' },
		{ "nodes", required_argument, NULL, 'D' }, { "gpus", required_argument, NULL, 'G' },
		{ "on-node", required_argument, NULL, 'O' },
		{ "region", no_argument, NULL, 'Y' }, { "nap-us", required_argument, NULL, 'Z' },
		{ "path", required_argument, NULL, 'P' },
		{ "build", no_argument, NULL, 'B' },
		{ NULL, 0, NULL, 0 },
	};
	struct bd_opts o = {
		.instance = "default", .decoders = 4, .windows = { 1, 8, 32 }, .n_windows = 3,
		.row_bytes = { 4096, 7168 }, .n_row_bytes = 2, .ranks = 4, .tokens = 32,
		.dwindow = 4, .seconds = 1.0, .cpus = { 0 }, .n_cpus = 1,
		.gaps_ms = { 1, 100, 1000 }, .repeats = { 20, 8, 3 }, .n_gaps = 3,
		.cpu_seconds = 3.0, .warmup = 1.0,
	};
	uint32_t cpus[BD_MAX_CPUS], reps[8], one;
	const char *cmd;
	int c, n, bad = 0, n_reps = -1;

	if (argc < 2) {
		usage();
		return 2;
	}
	cmd = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "i:o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'i': o.instance = optarg; break;
		case 'j': o.trace = optarg; break;
		case 't': o.table = optarg; break;
		case 'o': o.out = optarg; break;
		case 'N': o.no_push = 1; break;
		case 'B': o.build = 1; break;
		case 'L': bad |= parse_list(optarg, &o.layers, 1, 1, 512) != 1; break;
		case 'E': bad |= parse_list(optarg, &o.experts, 1, 1, 4096) != 1; break;
		case 'K': bad |= parse_list(optarg, &o.decoders, 1, 1, BD_MAX_ATT) != 1; break;
		case 'w':
			n = parse_list(optarg, o.windows, 4, 1, 256);
			bad |= n < 1;
			o.n_windows = n > 0 ? (uint32_t)n : 0;
			break;
		case 'W': bad |= parse_list(optarg, &o.dwindow, 1, 1, 16) != 1; break;
		case 'b':
			n = parse_list(optarg, o.row_bytes, 4, 64, 65536);
			bad |= n < 1;
			o.n_row_bytes = n > 0 ? (uint32_t)n : 0;
			break;
		case 'r': bad |= parse_list(optarg, &o.ranks, 1, 1, BD_MAX_ATT) != 1; break;
		case 'n': bad |= parse_list(optarg, &o.tokens, 1, 1, 256) != 1; break;
		case 's': o.seconds = atof(optarg); bad |= !(o.seconds > 0 && o.seconds <= 60); break;
		case 'S':
			o.cpu_seconds = atof(optarg);
			bad |= !(o.cpu_seconds > 0 && o.cpu_seconds <= 60);
			break;
		case 'c':
			if (!strcmp(optarg, "none")) {
				o.cpus[0] = -1;
				o.n_cpus = 1;
				break;
			}
			n = parse_list(optarg, cpus, BD_MAX_CPUS, 0, CPU_SETSIZE - 1);
			bad |= n < 1;
			for (int i = 0; i < n; i++)
				o.cpus[i] = (int)cpus[i];
			o.n_cpus = n > 0 ? (uint32_t)n : 0;
			break;
		case 'p': bad |= parse_list(optarg, &one, 1, 1, INT32_MAX) != 1; o.pid = (int)one; break;
		case 'T':
			bad |= parse_list(optarg, &one, 1, 1, INT32_MAX) != 1;
			o.worker_tid = (int)one;
			break;
		case 'g':
			n = parse_list(optarg, o.gaps_ms, 8, 1, 10000);
			bad |= n < 1;
			o.n_gaps = n > 0 ? (uint32_t)n : 0;
			break;
		case 'R': n_reps = parse_list(optarg, reps, 8, 1, 1000); bad |= n_reps < 1; break;
		case 'A':
			o.n_rank_at = 0;
			for (char *save = NULL, *t = strtok_r(optarg, ",", &save); t;
			     t = strtok_r(NULL, ",", &save))
				if (o.n_rank_at < BD_MAX_ATT)
					o.rank_at[o.n_rank_at++] = t;
				else
					bad = 1;
			break;
		case 'X':
			n = parse_list(optarg, cpus, BD_MAX_ATT, 0, BD_MAX_ATT - 1);
			bad |= n < 1;
			for (int i = 0; i < n; i++)
				o.send_mask |= 1u << cpus[i];
			break;
		case 'U': o.warmup = atof(optarg); bad |= !(o.warmup > 0 && o.warmup <= 60); break;
		case 'D': bad |= parse_list(optarg, &o.nodes, 1, 1, 64) != 1; break;
		case 'G': bad |= parse_list(optarg, &o.gpus, 1, 1, 64) != 1; break;
		case 'O': bad |= parse_list(optarg, &o.on_node, 1, 0, 63) != 1; break;
		case 'Y': o.region = 1; break;
		case 'P': {
			enum locus_eldr_path p;

			bad |= locus_eldr_path_parse(optarg, &p) < 0 || !locus_eldr_path_supported(p);
			o.router_path = (int)p;
			break;
		}
		case 'Z': bad |= parse_list(optarg, &o.nap_us, 1, 0, 100000) != 1; break;
		default: usage(); return c == 'h' ? 0 : 2;
		}
	}
	if (n_reps > 0) {
		bad |= (uint32_t)n_reps != o.n_gaps;
		memcpy(o.repeats, reps, sizeof(reps[0]) * (size_t)n_reps);
	}
	if (bad || optind != argc) {
		fprintf(stderr, "bench_dataplane: bad arguments\n");
		usage();
		return 2;
	}
	if (!strcmp(cmd, "route")) {
		if (!(o.table && o.trace) && !(o.layers && o.experts && !o.table)) {
			fprintf(stderr, "bench_dataplane route: --table and --trace, or --layers and "
					"--experts\n");
			return 2;
		}
		return bd_route(&o);
	}
	if (!strcmp(cmd, "dispatch")) {
		if (!o.trace) {
			fprintf(stderr, "bench_dataplane dispatch: --trace\n");
			return 2;
		}
		return bd_dispatch(&o);
	}
	if (!strcmp(cmd, "ep-dispatch")) {
		if (!o.trace) {
			fprintf(stderr, "bench_dataplane ep-dispatch: --trace\n");
			return 2;
		}
		return bd_ep_dispatch(&o);
	}
	if (!strcmp(cmd, "idle")) {
		if (!o.pid) {
			fprintf(stderr, "bench_dataplane idle: --pid of locusd\n");
			return 2;
		}
		return bd_idle(&o);
	}
	if (!strcmp(cmd, "internode")) {
		if (!o.trace || o.n_rank_at < 2 || !o.send_mask ||
		    o.send_mask >> o.n_rank_at) {
			fprintf(stderr, "bench_dataplane internode: --trace, --rank-at (two ranks or "
					"more), --send-ranks among them\n");
			return 2;
		}
		return bd_internode(&o);
	}
	if (!strcmp(cmd, "grace-table")) {
		if (!o.out || !(o.trace || (o.layers && o.experts)) || !o.nodes || !o.gpus) {
			fprintf(stderr, "bench_dataplane grace-table: -o, --layers and --experts (or "
					"--trace), --nodes, --gpus\n");
			return 2;
		}
		return bd_grace_table(&o);
	}
	if (!strcmp(cmd, "table")) {
		if (!o.out || !o.layers || !o.experts) {
			fprintf(stderr, "bench_dataplane table: -o, --layers, --experts\n");
			return 2;
		}
		return bd_table(&o);
	}
	usage();
	return 2;
}
