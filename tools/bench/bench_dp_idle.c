// SPDX-License-Identifier: MIT
/*
 * bench_dataplane idle: what locusd's idle policy costs. The CPU time locusd
 * (and its engine lcore thread) uses while no request comes, from
 * /proc/<pid>/stat and /proc/<pid>/task/<tid>/stat over a few seconds; and
 * the round trip of the first ROUTE after 1 ms, 100 ms and 1 s without any,
 * the client thread asleep during the gap and polling without sleeping
 * from its submit on. tools/bench/bench_daemon.sh runs it against a locusd with
 * each idle policy, pure spinning first, in one run.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_dp.h"
#include "locus_eldr.h"
#include "locus_trace.h"
#include "locus_wire.h"

#define SETTLE_S 1.0

/* utime + stime of /proc/<pid>[/task/<tid>]/stat in clock ticks, or -1. */
static long long cpu_ticks(int pid, int tid)
{
	char path[96], buf[1024], *p;
	unsigned long long ut, st;
	FILE *f;
	size_t n;

	if (tid)
		snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	else
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the name in parentheses may hold blanks: fields count from its ')' */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			 &st) != 2)
		return -1;
	return (long long)(ut + st);
}

/* locusd's engine lcore: the first worker lcore thread (DPDK 22.11 names it rte-worker-N). */
static int find_worker(int pid, char *name, size_t len)
{
	char path[96];
	struct dirent *de;
	DIR *d;
	int tid = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return 0;
	while (!tid && (de = readdir(d))) {
		char comm[64] = "";
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/comm", pid, de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && (!strncmp(comm, "rte-worker-", 11) || !strncmp(comm, "lcore-worker-", 13))) {
			tid = atoi(de->d_name);
			comm[strcspn(comm, "\n")] = '\0';
			snprintf(name, len, "%s", comm);
		}
		fclose(f);
	}
	closedir(d);
	return tid;
}

static void nap_ms(double ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)((ms - 1000.0 * (time_t)(ms / 1000)) * 1e6) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* One ROUTE of sig (at stage offset 0), polled for without a pause: its round trip in ns. */
static int64_t one_route(struct bd_att *a, uint64_t id, size_t sig_len)
{
	struct locus_desc q = { .op = LOCUS_OP_ROUTE, .id = id, .off = 0, .len = (uint32_t)sig_len };
	struct locus_desc d[8];
	uint64_t t0, t1 = 0;
	int done = 0, got = 0;

	/*
	 * Not locusd's time: the client library's liveness look at /proc (due
	 * on the first empty poll 100 ms after the last) and this thread's own
	 * wake-up. One poll and 20 us of polling first, then the clock starts.
	 */
	locus_client_report_load(a->c, 0);
	t0 = bd_now_ns();
	while (bd_now_ns() - t0 < 20000)
		if (locus_client_poll(a->c, d, 8) != 0)
			return -1;
	t0 = bd_now_ns();
	if (locus_client_submit(a->c, &q, 1) != 1)
		return -1;
	while (!done || !got) {
		int n = locus_client_poll(a->c, d, 8);

		if (n < 0)
			return -1;
		for (int i = 0; i < n; i++) {
			if (d[i].op == LOCUS_OP_ROUTE) {
				t1 = bd_now_ns();
				if (d[i].id != id || d[i].status)
					return -1;
				done = 1;
			} else if (d[i].op == LOCUS_OP_SIGNATURE_IN) {
				got = 1;
				if (locus_client_release_slot(a->c, d[i].slot) < 0)
					return -1;
			}
		}
	}
	return (int64_t)(t1 - t0);
}

int bd_idle(const struct bd_opts *o)
{
	struct locus_error err = { 0 };
	struct locus_trace *T = NULL;
	struct bd_att a = { 0 };
	char wname[64] = "?";
	long long p0, p1, w0, w1;
	uint64_t id = 1, lat[1000], t0, t1;
	size_t sig_len;
	double hz = (double)sysconf(_SC_CLK_TCK), secs;
	int tid, ret = 1;

	if (locus_trace_load(o->trace ? o->trace : "tests/data/calib_sample.jsonl", NULL, &T,
			     &err) < 0) {
		fprintf(stderr, "bench_dataplane: %s\n", err.msg);
		return 1;
	}
	tid = o->worker_tid ? o->worker_tid : find_worker(o->pid, wname, sizeof(wname));
	if (!tid) {
		fprintf(stderr, "bench_dataplane: no worker lcore thread (rte-worker-N) in locusd %d\n", o->pid);
		goto out;
	}
	if (bd_pin("idle client thread", o->cpus[0]) < 0 ||
	    bd_attach(&a, o->instance, LOCUS_ROLE_PREFILL | LOCUS_ROLE_DECODE, 0) < 0)
		goto out;
	sig_len = locus_eldr_sig_len(T->n_layers, T->n_experts);
	if (locus_eldr_sig_build(a.stage, a.stage_size, T->n_layers, T->n_experts, T->k,
				 T->reqs[0].prompt, T->reqs[0].prompt_len, 0, &err) != (long)sig_len) {
		fprintf(stderr, "bench_dataplane: %s\n", err.msg);
		goto out;
	}
	for (int i = 0; i < 2000; i++)
		if (one_route(&a, id++, sig_len) < 0)
			goto err_route;
	/* CPU while idle: past the policy's spins and pauses, over cpu_seconds */
	nap_ms(SETTLE_S * 1000);
	p0 = cpu_ticks(o->pid, 0);
	w0 = cpu_ticks(o->pid, tid);
	t0 = bd_now_ns();
	nap_ms(o->cpu_seconds * 1000);
	t1 = bd_now_ns();
	p1 = cpu_ticks(o->pid, 0);
	w1 = cpu_ticks(o->pid, tid);
	if (p0 < 0 || w0 < 0 || p1 < 0 || w1 < 0) {
		fprintf(stderr, "bench_dataplane: cannot read /proc/%d/stat\n", o->pid);
		goto out;
	}
	secs = (double)(t1 - t0) / 1e9;
	printf("idle CPU (%.1f s after the last request, over %.1f s): locusd %.1f %% of a core, "
	       "its engine lcore (%s, tid %d) %.1f %%\n", SETTLE_S, secs,
	       100.0 * (double)(p1 - p0) / hz / secs, wname, tid,
	       100.0 * (double)(w1 - w0) / hz / secs);
	for (uint32_t g = 0; g < o->n_gaps; g++) {
		uint32_t n = LOCUS_MIN(o->repeats[g], 1000u);

		for (uint32_t i = 0; i < n; i++) {
			int64_t ns;

			nap_ms(o->gaps_ms[g]);
			ns = one_route(&a, id++, sig_len);
			if (ns < 0)
				goto err_route;
			lat[i] = (uint64_t)ns;
		}
		printf("idle first request after %u ms: round trip p50 %.2f us, max %.2f us "
		       "(%u gaps)\n", o->gaps_ms[g], bd_quantile(lat, n, 0.5) / 1e3,
		       bd_quantile(lat, n, 1.0) / 1e3, n);
		fflush(stdout);
	}
	ret = 0;
	goto out;
err_route:
	fprintf(stderr, "bench_dataplane: a ROUTE failed (is an ELDR table of the trace's shape "
			"pushed?)\n");
out:
	bd_detach(&a, a.c ? 1 : 0);
	locus_trace_free(T);
	return ret;
}
