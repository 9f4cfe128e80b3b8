// SPDX-License-Identifier: MIT
/*
 * locus message path vs perftest on the same rxe device in the same guest
 * run (make bench-verbs). Both sides are two processes on rxe0 (loopback),
 * as ib_write_bw / ib_write_lat run them. ib_send_bw is shown too: like
 * locus's WRITE_WITH_IMM it costs the receiver a RECV and a completion per
 * message, which a plain RDMA WRITE does not. Prints figures and ratios, never
 * asserts: absolute Soft-RoCE numbers under TCG mean nothing, ratios do.
 *   bandwidth: N messages of S bytes, time until the last completes
 *   latency:   ping-pong of S bytes, half the round trip (median and mean)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "vt_util.h"

#define DEV   "rxe0"
#define PORT  7490

static int gid_index(void)
{
	struct in_addr a;

	return locus_verbs_gid_ipv4("/sys", DEV, 1, NULL, &a);
}

/* One perftest pair; the column col (1-based) of its result line, or -1. */
static double perftest_once(const char *tool, uint32_t size, unsigned iters, int col)
{
	char srv[256], cli[300], line[512];
	double v = -1;
	pid_t pid;
	FILE *f;

	snprintf(srv, sizeof(srv), "%s -d %s -x %d -F -s %u -n %u %s", tool, DEV, gid_index(), size,
		 iters, strstr(tool, "_bw") ? "--report_gbits" : "");
	pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);

		dup2(fd, 1);
		dup2(fd, 2);
		execl("/usr/bin/timeout", "timeout", "120", "/bin/sh", "-c", srv, (char *)NULL);
		_exit(127);
	}
	usleep(1500000); /* the server must be listening before the client dials */
	snprintf(cli, sizeof(cli), "timeout 120 %s 127.0.0.1 2>&1", srv);
	f = popen(cli, "r");
	while (f && fgets(line, sizeof(line), f)) {
		double c[9];
		unsigned sz;
		int n = sscanf(line, " %u %lf %lf %lf %lf %lf %lf %lf", &sz, &c[1], &c[2], &c[3],
			       &c[4], &c[5], &c[6], &c[7]);

		if (n >= col && sz == size && c[1] == iters)
			v = c[col - 1];
	}
	if (f)
		pclose(f);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	return v;
}

static double perftest(const char *tool, uint32_t size, unsigned iters, int col)
{
	double v = -1;
	int t;

	for (t = 0; t < 3 && v < 0; t++)
		v = perftest_once(tool, size, iters, col);
	return v;
}

/* Peer process: receives; with echo, answers each message with one of the same size. */
static int peer_main(uint32_t size, int echo, uint64_t count)
{
	struct vt_node c;
	uint64_t end = vt_now_us() + 120000000ull, sent = 0;

	alarm(150);
	if (vt_node_init(&c, "bench-peer", DEV, PORT, 2, NULL) < 0 || vt_node_peer(&c, 1, NULL, 0) < 0)
		return 2;
	if (vt_node_txbufs(&c, 4, size, 0) < 0)
		return 2;
	while (vt_now_us() < end && (c.rx_count < count || c.tx_done < sent)) {
		/*
		 * The bandwidth receiver sleeps on the completion channel when
		 * its CQ is empty: under Soft-RoCE the "NIC" runs on the same
		 * vCPUs, and ib_write_bw's server does not spin either. The
		 * echo side spins, as both sides of ib_write_lat do.
		 */
		if (locus_verbs_poll(c.ep) == 0 && !echo)
			locus_verbs_wait(c.ep, 1);
		if (echo && sent < c.rx_count) {
			struct locus_verbs_msg m = { .buf = c.txmr.addr, .len = size,
						     .lkey = c.txmr.lkey, .cookie = sent };

			if (locus_verbs_post(c.peer, &m, 1) == 1)
				sent++;
		}
		if (locus_verbs_peer_state(c.peer) != LOCUS_VERBS_UP)
			locus_verbs_service(c.ep, 1);
	}
	end = vt_now_us() + 200000;
	while (vt_now_us() < end) {
		locus_verbs_poll(c.ep);
		locus_verbs_service(c.ep, 1);
	}
	vt_node_fini(&c);
	return 0;
}

static pid_t spawn_peer(uint32_t size, int echo, uint64_t count)
{
	char a[3][24];
	pid_t pid;

	snprintf(a[0], sizeof(a[0]), "%u", size);
	snprintf(a[1], sizeof(a[1]), "%d", echo);
	snprintf(a[2], sizeof(a[2]), "%llu", (unsigned long long)count);
	pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", "bench_verbs", "--peer", a[0], a[1], a[2], (char *)NULL);
		_exit(127);
	}
	return pid;
}

static bool pump_up(struct vt_node *n)
{
	uint64_t end = vt_now_us() + 20000000ull;

	while (vt_now_us() < end && locus_verbs_peer_state(n->peer) != LOCUS_VERBS_UP) {
		locus_verbs_poll(n->ep);
		locus_verbs_service(n->ep, 5);
	}
	return locus_verbs_peer_state(n->peer) == LOCUS_VERBS_UP;
}

/* locus bandwidth in Gb/s, -1 on failure. */
static double locus_bw(uint32_t size, unsigned iters)
{
	struct vt_node n;
	uint64_t t0, t1;
	double gbps = -1;
	pid_t pid = spawn_peer(size, 0, iters);

	if (vt_node_init(&n, "bench", DEV, 0, 1, NULL) < 0 || vt_node_peer(&n, 2, DEV, PORT) < 0 ||
	    vt_node_txbufs(&n, 128, size, 0) < 0 || !pump_up(&n))
		goto out;
	t0 = vt_now_us();
	while (n.tx_done < iters && vt_now_us() - t0 < 100000000ull) {
		/* perftest posts from one buffer without rewriting it: so do we (no fill) */
		struct locus_verbs_msg m[16];
		unsigned k, want = (unsigned)LOCUS_MIN(16u, iters - n.tx_posted);

		want = (unsigned)LOCUS_MIN((uint64_t)want, n.tx_nbuf - (n.tx_posted - n.tx_done));
		for (k = 0; k < want; k++) {
			m[k] = (struct locus_verbs_msg){
				.buf = (uint8_t *)n.txmr.addr + ((n.tx_posted + k) % n.tx_nbuf) * size,
				.len = size, .lkey = n.txmr.lkey, .cookie = n.tx_posted + k };
		}
		if (want) {
			int rc = locus_verbs_post(n.peer, m, want);

			if (rc > 0)
				n.tx_posted += (unsigned)rc;
			else if (rc < 0)
				break;
		}
		locus_verbs_poll(n.ep);
	}
	t1 = vt_now_us();
	if (n.tx_ok == iters)
		gbps = (double)iters * size * 8 / ((double)(t1 - t0) * 1000);
	{
		const struct locus_verbs_stats *st = locus_verbs_peer_stats(n.peer);

		printf("  locus %u B: %llu credit stalls, %llu send-queue stalls\n", size,
		       (unsigned long long)st->credit_stalls, (unsigned long long)st->sq_stalls);
	}
out:
	vt_node_fini(&n);
	waitpid(pid, NULL, 0);
	return gbps;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* locus one-way latency (half RTT) in us: *median and *mean; 0 or -1. */
static int locus_lat(uint32_t size, unsigned iters, double *median, double *mean)
{
	struct vt_node n;
	uint64_t *rtt = calloc(iters, sizeof(*rtt)), sum = 0;
	unsigned i;
	int rc = -1;
	pid_t pid = spawn_peer(size, 1, iters);

	if (!rtt || vt_node_init(&n, "bench", DEV, 0, 1, NULL) < 0 ||
	    vt_node_peer(&n, 2, DEV, PORT) < 0 || vt_node_txbufs(&n, 1, size, 0) < 0 || !pump_up(&n))
		goto out;
	for (i = 0; i < iters; i++) {
		struct locus_verbs_msg m = { .buf = n.txmr.addr, .len = size, .lkey = n.txmr.lkey };
		uint64_t t0 = vt_now_us(), got = n.rx_count;

		while (locus_verbs_post(n.peer, &m, 1) == 0)
			locus_verbs_poll(n.ep);
		while (n.rx_count == got && vt_now_us() - t0 < 2000000)
			locus_verbs_poll(n.ep);
		if (n.rx_count == got)
			goto out;
		rtt[i] = vt_now_us() - t0;
		sum += rtt[i];
	}
	qsort(rtt, iters, sizeof(*rtt), cmp_u64);
	*median = rtt[iters / 2] / 2.0;
	*mean = (double)sum / iters / 2.0;
	rc = 0;
out:
	vt_node_fini(&n);
	waitpid(pid, NULL, 0);
	free(rtt);
	return rc;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

#define REPS 5

static double median_of(double *v)
{
	qsort(v, REPS, sizeof(*v), cmp_d);
	return v[REPS / 2];
}

int main(int argc, char **argv)
{
	static const uint32_t bw_sizes[] = { 4096, 12288, 65536 };
	static const unsigned bw_iters[] = { 3000, 2000, 400 };
	static const uint32_t lat_sizes[] = { 8, 12288 };
	unsigned lat_iters = 1000, i, r;
	double ratio[3][REPS], sratio[3][REPS], dmed[2][REPS], davg[2][REPS];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "--peer"))
		return peer_main((uint32_t)atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10));
	printf("bench_verbs on %s (gid %d): locus vs perftest, same device, same run, %d rounds\n",
	       DEV, gid_index(), REPS);
	/* rounds interleave the two so that drifts of the emulator hit both alike */
	for (r = 0; r < REPS; r++) {
		for (i = 0; i < LOCUS_ARRAY_SIZE(bw_sizes); i++) {
			uint32_t s = bw_sizes[i];
			double p = perftest("ib_write_bw", s, bw_iters[i], 4);
			double q = perftest("ib_send_bw", s, bw_iters[i], 4);
			double l = locus_bw(s, bw_iters[i]);

			ratio[i][r] = p > 0 && l > 0 ? l / p : -1.0;
			sratio[i][r] = q > 0 && l > 0 ? l / q : -1.0;
			printf("round %u bw  %6u B x %u: ib_write_bw %.3f Gb/s, ib_send_bw %.3f Gb/s, "
			       "locus %.3f Gb/s, ratio to write %.2f, to send %.2f\n",
			       r, s, bw_iters[i], p, q, l, ratio[i][r], sratio[i][r]);
		}
		for (i = 0; i < LOCUS_ARRAY_SIZE(lat_sizes); i++) {
			uint32_t s = lat_sizes[i];
			double pt = perftest("ib_write_lat", s, lat_iters, 5);
			double st = perftest("ib_send_lat", s, lat_iters, 5);
			double lm = -1, la = -1;

			if (locus_lat(s, lat_iters, &lm, &la) < 0)
				lm = la = -1;
			dmed[i][r] = lm - pt;
			davg[i][r] = lm - st;
			printf("round %u lat %6u B x %u: ib_write_lat typical %.2f us, ib_send_lat typical %.2f us, "
			       "locus median %.2f us (mean %.2f us)\n", r, s, lat_iters, pt, st, lm, la);
		}
	}
	printf("== summary (median of %d rounds; goal: bw ratio >= 0.9, latency within perftest + small constant)\n",
	       REPS);
	for (i = 0; i < LOCUS_ARRAY_SIZE(bw_sizes); i++)
		printf("bandwidth %6u B: locus / ib_write_bw = %.2f   (locus / ib_send_bw = %.2f: "
		       "a RECV + completion per message at the receiver, as WRITE_WITH_IMM needs)\n",
		       bw_sizes[i], median_of(ratio[i]), median_of(sratio[i]));
	for (i = 0; i < LOCUS_ARRAY_SIZE(lat_sizes); i++)
		printf("latency   %6u B: locus - ib_write_lat = %+.2f us   (locus - ib_send_lat = %+.2f us); "
		       "median vs typical (= median)\n", lat_sizes[i], median_of(dmed[i]), median_of(davg[i]));
	return 0;
}
