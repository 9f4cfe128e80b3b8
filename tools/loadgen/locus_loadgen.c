// SPDX-License-Identifier: MIT
/*
 * locus-loadgen: drives a running locusd through the client API the way a
 * serving deployment would, with real routings from a calibration trace.
 *
 *   prefill processes  build signatures from the trace's prompts and ROUTE
 *                      them; they time submit -> decision;
 *   decoder processes  take delivered signatures, check them, "decode" them
 *                      for a while and report their load as a heartbeat;
 *   rank processes     DISPATCH batches of the trace's per-token top-k at
 *                      one layer, answer the rows they receive with COMBINE,
 *                      and check every (token, k) comes back exactly once
 *                      with the content the serving rank computed.
 *
 * Every process checks every byte it receives; the summary says what was
 * submitted, completed, delivered and verified, and the exit status is
 * non-zero on any lost, duplicated or corrupt completion.
 *
 * Across nodes each process may attach to another locusd instance
 * (--decoder-at, --rank-at, --prefill-at): the processes are one family
 * sharing their bookkeeping, so the rank barrier and the end-to-end checks
 * span instances. With --allow-errors (a peer killed under traffic)
 * completions may carry errors, counted by code; a batch whose results stop
 * coming is given up after --batch-ms, and a process whose own locusd died
 * stops and reports what it still waited for. Lost (never completed),
 * duplicated or corrupt completions still fail the run. Benchmark figures
 * (decision latency, routed requests/s, rows/s) come with their in-process
 * baselines: the pure router on the same signatures and memcpy of the same
 * bytes.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loadgen.h"
#include "locus_eldr_router.h"
#include "locus_shm.h"
#include "locus_tblfile.h"
#include "locus_wire.h"


struct opts O = {
	.block_tokens = 16, .instance = "default", .decoders = 4, .ranks = 4, .prefills = 1, .requests = 2000,
	.batches = 100, .tokens = 32, .row_bytes = 2048, .decode_us = 2000, .seconds = 120,
	.batch_ms = 3000, .kill_rank = -1, .attach_timeout_ms = ATTACH_TIMEOUT_MS,
};
struct shared *S;
struct locus_trace *T;
static uint8_t *Seen;  /* one byte per signature request: deliveries seen */

static void lat_record(struct proc_stats *s, uint64_t ns)
{
	unsigned b = ns ? 64u - (unsigned)__builtin_clzll(ns) : 0;

	s->lat_hist[b < LAT_BUCKETS ? b : LAT_BUCKETS - 1]++;
	s->lat_sum_ns += ns;
}

static double lat_quantile(const uint64_t *h, double q)
{
	uint64_t total = 0, acc = 0;

	for (int i = 0; i < LAT_BUCKETS; i++)
		total += h[i];
	if (!total)
		return NAN;
	for (int i = 0; i < LAT_BUCKETS; i++) {
		if (acc + h[i] >= q * (double)total && h[i]) {
			double lo = i ? ldexp(1.0, i - 1) : 0, hi = ldexp(1.0, i);

			return lo + (hi - lo) * (q * (double)total - (double)acc) / (double)h[i];
		}
		acc += h[i];
	}
	return ldexp(1.0, LAT_BUCKETS - 1);
}

void corrupt(struct proc_stats *s, const char *fmt, ...)
{
	va_list ap;

	if (!s->corrupt++) {
		va_start(ap, fmt);
		vsnprintf(s->bad, sizeof(s->bad), fmt, ap);
		va_end(ap);
	}
}

/* Count a completion that carries an error, by code (the last kind takes the rest). */
void err_record(struct proc_stats *s, int32_t status)
{
	int i;

	s->errors++;
	for (i = 0; i < ERR_KINDS - 1; i++)
		if (!s->err_n[i] || s->err_code[i] == status)
			break;
	s->err_code[i] = i < ERR_KINDS - 1 ? status : 0; /* 0: other codes */
	s->err_n[i]++;
}

struct locus_client *attach(const char *instance, uint32_t roles, uint32_t id,
			    struct proc_stats *s)
{
	struct locus_client_req req = { .roles = roles, .decoder_id = id, .rank = id,
					.timeout_ms = O.attach_timeout_ms };
	struct locus_client *c;
	struct locus_error e;

	if (locus_client_attach(instance, &req, &c, &e) != 0) {
		snprintf(s->why, sizeof(s->why), "attach to %.32s: %.80s", instance, e.msg);
		s->failed = 1;
		return NULL;
	}
	s->attached = 1;
	return c;
}

/*
 * A poll returned ret < 0: the client API says our locusd is gone (-ENOTCONN:
 * killed; a restarted one has a new segment, not ours), or our rings broke.
 * The process stops; only with --allow-errors is a dead locusd no failure.
 */
void own_daemon_lost(struct proc_stats *s, int ret)
{
	if (ret == -ENOTCONN)
		s->gone = 1;
	if (ret != -ENOTCONN || !O.allow_errors) {
		if (!s->failed)
			snprintf(s->why, sizeof(s->why), "poll: %s%s", locus_strerror(ret),
				 ret == -ENOTCONN ? " (our locusd is gone)" : "");
		s->failed = 1;
	}
}

/* ---- prefill ------------------------------------------------------------------------ */

/*
 * A ROUTE's id: the request's number across all prefills (what the decoder
 * checks the signature against, and counts once) above the staging slot.
 */
static uint64_t route_id(uint64_t req, uint32_t slot)
{
	return req << 8 | slot;
}

static int run_prefill(uint32_t idx, struct proc_stats *s)
{
	struct locus_client *c = attach(O.prefill_at ? O.prefill_at : O.instance,
					LOCUS_ROLE_PREFILL, 0, s);
	uint64_t t_sub[OUTSTANDING] = { 0 }, id_sub[OUTSTANDING] = { 0 }, stage_size, t0 = now_ns();
	uint8_t *stage, inserted[64] = { 0 };
	uint32_t next = 0, inflight = 0, free_mask = (1u << OUTSTANDING) - 1;
	const uint8_t op = O.prefix_blocks ? LOCUS_OP_ROUTE_BLOCKS : LOCUS_OP_ROUTE;

	if (!c)
		return 1;
	stage = locus_client_stage(c, &stage_size);
	if (stage_size < (uint64_t)OUTSTANDING * SIG_SLOT ||
	    locus_eldr_sig_len(T->n_layers, T->n_experts) > SIG_SLOT) {
		snprintf(s->why, sizeof(s->why), "stage too small for %u signatures", OUTSTANDING);
		s->failed = 1;
		return 1;
	}
	s->t_start_ns = t0;
	while (((next < O.requests && !stopping()) || inflight) && !expired(t0)) {
		struct locus_desc d[OUTSTANDING];
		int n;

		while (next < O.requests && free_mask && !stopping()) {
			uint32_t slot = (uint32_t)__builtin_ctz(free_mask);
			uint64_t g = (uint64_t)next * O.prefills + idx;
			const struct locus_trace_req *r = &T->reqs[g % T->n_requests];
			uint32_t named = 0;
			long len = O.prefix_blocks
				? lg_blocks_req(r, inserted, stage + (size_t)slot * SIG_SLOT,
						SIG_SLOT, &named)
				: locus_eldr_sig_build(stage + (size_t)slot * SIG_SLOT, SIG_SLOT,
						       T->n_layers, T->n_experts, T->k, r->prompt,
						       r->prompt_len, 0, NULL);
			struct locus_desc q = { .op = op, .id = route_id(g, slot),
						.off = (uint64_t)slot * SIG_SLOT, .len = (uint32_t)len };

			if (len < 0 || locus_client_submit(c, &q, 1) != 1)
				break;
			free_mask &= ~(1u << slot);
			t_sub[slot] = now_ns();
			id_sub[slot] = q.id;
			inflight++;
			next++;
			s->submitted++;
			s->blocks_named += named;
		}
		n = locus_client_poll(c, d, OUTSTANDING);
		if (n < 0) {
			own_daemon_lost(s, n);
			break;
		}
		for (int i = 0; i < n; i++) {
			uint64_t slot = d[i].id & 0xff;

			if (d[i].op != op || slot >= OUTSTANDING ||
			    (free_mask & (1u << slot)) || d[i].id != id_sub[slot]) {
				s->duplicate++;
				continue;
			}
			if (d[i].status == -LOCUS_EFULL) {
				/* the decoder's inbox is full: back-pressure, send it again */
				struct locus_desc q = d[i];

				q.status = 0;
				nap_us(50);
				if (locus_client_submit(c, &q, 1) == 1) {
					s->retries++; /* sent again */
					continue;
				}
				d[i].status = -LOCUS_EFULL;
			}
			if (op == LOCUS_OP_ROUTE_BLOCKS) {
				s->blocks_found += d[i].blocks;
				s->partial += !!(d[i].flags & LOCUS_DESC_F_PARTIAL);
			}
			lat_record(s, now_ns() - t_sub[slot]);
			free_mask |= 1u << slot;
			inflight--;
			s->completed++;
			if (d[i].status == 0 && d[i].peer < O.decoders)
				s->ok++;
			else
				err_record(s, d[i].status ? d[i].status : -LOCUS_ERANGE);
		}
		if (n == 0)
			nap_us(20);
	}
	s->t_end_ns = now_ns();
	if (s->gone) {
		s->orphaned += inflight;
		inflight = 0;
	}
	if (inflight) {
		snprintf(s->why, sizeof(s->why), "%u requests never completed", inflight);
		s->failed = 1;
	}
	locus_client_detach(c);
	return s->failed;
}

/* ---- decoder ------------------------------------------------------------------------ */

/*
 * A delivered signature is the one its prefill built for request id >> 8,
 * byte for byte, and is delivered once.
 */
static int sig_expected(const struct locus_msg_hdr *m, uint8_t *want, size_t sig_len)
{
	uint64_t g = m->id >> 8;
	const struct locus_trace_req *r;

	if (g >= (uint64_t)O.requests * O.prefills)
		return 0;
	r = &T->reqs[g % T->n_requests];
	if ((O.prefix_blocks ? lg_whole_sig(r, want, sig_len)
			     : locus_eldr_sig_build(want, sig_len, T->n_layers, T->n_experts, T->k,
						    r->prompt, r->prompt_len, 0, NULL)) != (long)sig_len)
		return 0;
	return memcmp(m + 1, want, sig_len) == 0;
}

static int run_decoder(uint32_t id, struct proc_stats *s)
{
	struct locus_client *c = attach(O.n_decoder_at ? O.decoder_at[id] : O.instance,
					LOCUS_ROLE_DECODE, id, s);
	size_t sig_len = locus_eldr_sig_len(T->n_layers, T->n_experts);
	uint64_t finish[4096], last_report = 0;
	uint32_t active = 0;
	uint8_t *want = malloc(sig_len);

	if (!c || !want) {
		free(want);
		locus_client_detach(c);
		return 1;
	}
	locus_client_report_load(c, 0);
	__atomic_fetch_add(&S->decoders_up, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&S->done, __ATOMIC_ACQUIRE)) {
		struct locus_desc d[32];
		uint64_t now = now_ns();
		int n = locus_client_poll(c, d, 32);

		if (n < 0) {
			own_daemon_lost(s, n);
			break;
		}
		for (int i = 0; i < n; i++) {
			const struct locus_msg_hdr *m = locus_client_inbox(c, &d[i]);

			s->delivered++;
			if (d[i].op != LOCUS_OP_SIGNATURE_IN || !m ||
			    locus_msg_hdr_check(m, d[i].len, UINT32_MAX) < 0 ||
			    m->type != LOCUS_MSG_SIGNATURE || m->dst_rank != id ||
			    m->payload_len != sig_len ||
			    locus_eldr_sig_check(m + 1, sig_len, T->n_layers, T->n_experts, NULL) ||
			    !sig_expected(m, want, sig_len)) {
				corrupt(s, "decoder %u: signature id %llu: bad header or content", id,
					m ? (unsigned long long)m->id : 0ull);
			} else if (__atomic_fetch_add(&Seen[m->id >> 8], 1, __ATOMIC_RELAXED)) {
				s->duplicate++;
			} else {
				s->verified++;
				if (active < 4096)
					finish[active++] = now + (uint64_t)O.decode_us * 1000;
			}
			if (m && locus_client_release_slot(c, d[i].slot) < 0)
				corrupt(s, "decoder %u: RELEASE of inbox slot %u refused", id,
					d[i].slot);
		}
		/* requests finish decoding; the load is what is still running */
		for (uint32_t i = 0; i < active;)
			if (finish[i] <= now)
				finish[i] = finish[--active];
			else
				i++;
		if (n || now - last_report > 1000000) {
			locus_client_report_load(c, active);
			last_report = now;
		}
		if (!n)
			nap_us(50);
	}
	free(want);
	locus_client_detach(c);
	return 0;
}

/* ---- in-process baselines ---------------------------------------------------------------- */

/* Decisions/s of the pure router on the same signatures, one core, no daemon. */
static double baseline_router(uint64_t n_requests)
{
	struct locus_eldr_router *r;
	struct locus_error err;
	size_t len, sig_len = locus_eldr_sig_len(T->n_layers, T->n_experts), mem_len;
	void *blob = NULL, *mem = NULL;
	uint8_t *sigs = NULL;
	const void *payload;
	size_t plen;
	uint32_t n_sig = LOCUS_MIN(T->n_requests, 256u);
	double rate = 0;

	if (locus_tbl_read_file(O.eldr_table, LOCUS_TBL_ELDR, &blob, &len, &err) < 0 ||
	    locus_tbl_check(blob, len, LOCUS_TBL_ELDR, &payload, &plen, &err) < 0) {
		fprintf(stderr, "locus-loadgen: %s\n", err.msg);
		goto out;
	}
	mem_len = locus_eldr_router_mem_size(payload, plen);
	sigs = malloc(sig_len * n_sig);
	if (!mem_len || posix_memalign(&mem, 64, mem_len) || !sigs)
		goto out;
	if (locus_eldr_router_build(mem, mem_len, payload, plen, LOCUS_ELDR_PATH_AUTO, &r, &err) < 0) {
		fprintf(stderr, "locus-loadgen: %s\n", err.msg);
		goto out;
	}
	for (uint32_t i = 0; i < n_sig; i++)
		locus_eldr_sig_build(sigs + i * sig_len, sig_len, T->n_layers, T->n_experts, T->k,
				     T->reqs[i].prompt, T->reqs[i].prompt_len, 0, NULL);
	for (uint32_t s = 0; s < locus_eldr_router_n_decoders(r); s++)
		locus_eldr_router_set_up(r, s, 1);
	{
		struct locus_eldr_decision d;
		uint64_t t0 = now_ns(), ok = 0;

		for (uint64_t i = 0; i < n_requests; i++)
			ok += locus_eldr_route(r, sigs + (i % n_sig) * sig_len, sig_len, &d) == 0;
		rate = (double)ok * 1e9 / (double)(now_ns() - t0);
	}
out:
	free(blob);
	free(mem);
	free(sigs);
	return rate;
}

/* Bytes/s of memcpy moving the same rows, row by row, one core. */
static double baseline_memcpy(uint64_t rows)
{
	size_t n = 4096, bytes = n * O.row_bytes;
	uint8_t *a = malloc(bytes), *b = malloc(bytes);
	double rate = 0;

	if (a && b && rows) {
		uint64_t t0;

		memset(a, 1, bytes);
		memset(b, 2, bytes);
		t0 = now_ns();
		for (uint64_t i = 0; i < rows; i++)
			memcpy(b + (i % n) * O.row_bytes, a + ((i * 7) % n) * O.row_bytes, O.row_bytes);
		__asm__ volatile("" : : "r"(b) : "memory");
		rate = (double)rows * O.row_bytes * 1e9 / (double)(now_ns() - t0);
	}
	free(a);
	free(b);
	return rate;
}

/* ---- parent ---------------------------------------------------------------------------- */

static void on_stop(int sig)
{
	(void)sig;
	__atomic_store_n(&S->stop, 1, __ATOMIC_RELAXED);
}

static pid_t spawn(int (*fn)(uint32_t, struct proc_stats *), uint32_t arg, struct proc_stats *s)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(fn(arg, s));
	return pid;
}

/*
 * --kill-rank: whether rank's process *pid was killed as planned; with
 * --respawn a new process takes the rank over (*pid) and 0 is returned.
 * 1: the rank is gone for good (its process reaped).
 */
static int rank_killed(pid_t *pid, uint32_t rank, struct proc_stats *s)
{
	int status;

	if (waitpid(*pid, &status, WNOHANG) != *pid)
		return 0;
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL ||
	    !__atomic_load_n(&s->kills, __ATOMIC_ACQUIRE)) {
		/* it ended by itself: its record says how */
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			s->failed = 1;
		return 1;
	}
	fprintf(stderr, "locus-loadgen: rank %u's process %d was killed after %s %u%s\n", rank,
		(int)*pid, O.kill_combine ? "combine" : "dispatch of batch", O.kill_n,
		O.respawn ? "; a new process takes it over" : "");
	if (!O.respawn) {
		s->t_end_ns = now_ns();
		return 1;
	}
	*pid = spawn(run_rank, rank, s);
	return 0;
}

int main(int argc, char **argv)
{
	struct locus_error err;
	pid_t pids[MAX_PROCS];
	uint32_t np = 0, p0, r0, d0;
	uint64_t sub = 0, comp = 0, ok = 0, errs = 0, lost = 0, corrupt = 0, dup = 0;
	uint64_t rows_out = 0, delivered = 0, verified = 0, retries = 0, lat[LAT_BUCKETS] = { 0 };
	uint64_t pl_acked = 0, pl_released = 0;
	struct proc_stats wsum = { 0 };
	const char *w_first = NULL;
	uint64_t masked = 0, unanswered = 0, gone_ref = 0, lost_b = 0, first_mask = 0;
	uint64_t sig_retries = 0, abandoned = 0, late = 0, orphaned = 0, pre_orphaned = 0;
	uint64_t dropped = 0, disp = 0, combs = 0;
	int32_t ecode[ERR_KINDS * MAX_PROCS];
	uint64_t en[ERR_KINDS * MAX_PROCS];
	uint32_t nk = 0;
	uint64_t b_named = 0, b_found = 0, b_partial = 0;
	uint64_t pre_t0 = UINT64_MAX, pre_t1 = 0, rk_t0 = UINT64_MAX, rk_t1 = 0;
	int failed = 0, midway_done = 0, status;
	uint8_t reaped[MAX_PROCS] = { 0 };

	if (lg_parse_args(argc, argv) < 0) {
		lg_usage();
		return 2;
	}
	if (locus_trace_load(O.trace, NULL, &T, &err) < 0) {
		fprintf(stderr, "locus-loadgen: %s\n", err.msg);
		return 1;
	}
	if (O.prefix_blocks && lg_blocks_init(err.msg, sizeof(err.msg)) < 0) {
		fprintf(stderr, "locus-loadgen: %s\n", err.msg);
		return 2;
	}
	S = mmap(NULL, sizeof(*S), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (S == MAP_FAILED)
		return 1;
	memset(S, 0, sizeof(*S));
	Seen = mmap(NULL, (size_t)O.requests * O.prefills + 1, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (Seen == MAP_FAILED)
		return 1;
	/* SIGTERM / SIGINT end the run early, and cleanly (the children too) */
	signal(SIGTERM, on_stop);
	signal(SIGINT, on_stop);
	d0 = np;
	for (uint32_t i = 0; i < O.decoders; i++, np++)
		pids[np] = spawn(run_decoder, i, &S->st[np]);
	r0 = np;
	for (uint32_t i = 0; i < O.ranks; i++, np++)
		pids[np] = spawn(run_rank, i, &S->st[np]);
	/*
	 * Traffic starts once every decoder is attached (locusd processed its
	 * attach: it is routable) and reported, or failed to attach (its record
	 * says so): a fixed nap would be too short on a loaded machine, and the
	 * first requests would find no decoder. Bounded by twice the attach
	 * timeout. Then
	 * 200 ms more, for decoders on other nodes, whose loads reach this node
	 * by the load rows.
	 */
	for (uint64_t t_end = now_ns() + 2ull * O.attach_timeout_ms * 1000000ull; now_ns() < t_end;) {
		uint32_t failed_dec = 0;

		for (uint32_t i = d0; i < d0 + O.decoders; i++)
			failed_dec += __atomic_load_n(&S->st[i].failed, __ATOMIC_RELAXED) != 0;
		if (__atomic_load_n(&S->decoders_up, __ATOMIC_ACQUIRE) + failed_dec >= O.decoders)
			break;
		nap_us(1000);
	}
	nap_us(200000);
	p0 = np;
	for (uint32_t i = 0; i < O.prefills; i++, np++)
		pids[np] = spawn(run_prefill, i, &S->st[np]);

	/* wait for prefills and ranks' own batches; run the mid-way command once */
	for (;;) {
		uint64_t done = 0, want = (uint64_t)O.requests * O.prefills;
		int busy = 0;

		for (uint32_t i = p0; i < np; i++)
			done += __atomic_load_n(&S->st[i].completed, __ATOMIC_RELAXED);
		if (O.midway_cmd && !midway_done && done >= want / 2) {
			midway_done = 1;
			fprintf(stderr, "locus-loadgen: %llu of %llu routed, running: %s\n",
				(unsigned long long)done, (unsigned long long)want, O.midway_cmd);
			if (system(O.midway_cmd) != 0) {
				fprintf(stderr, "locus-loadgen: mid-way command failed\n");
				failed = 1;
			}
		}
		for (uint32_t i = p0; i < np; i++)
			busy |= waitpid(pids[i], &status, WNOHANG) == 0;
		for (uint32_t i = r0; i < p0; i++) {
			if (O.kill_rank >= 0 && !reaped[i])
				reaped[i] = rank_killed(&pids[i], i - r0, &S->st[i]);
			busy |= !S->st[i].t_end_ns && !S->st[i].failed && !reaped[i];
		}
		if (!busy)
			break;
		nap_us(1000);
	}
	/* decoders may still hold deliveries in their rings: let them drain (bounded) */
	for (int w = 0; w < 5000; w++) {
		uint64_t routed = 0, got = 0;
		uint32_t live = 0;

		for (uint32_t i = p0; i < np; i++)
			routed += __atomic_load_n(&S->st[i].ok, __ATOMIC_RELAXED);
		for (uint32_t i = d0; i < r0; i++) {
			got += __atomic_load_n(&S->st[i].delivered, __ATOMIC_RELAXED);
			live += !__atomic_load_n(&S->st[i].gone, __ATOMIC_RELAXED);
		}
		if (got >= routed || !live)
			break;
		nap_us(1000);
	}
	if (O.linger_ms) {
		/* every process stays attached, idle: the caller may look at locusd now */
		printf("loadgen: lingering %u ms\n", O.linger_ms);
		fflush(stdout);
		nap_us(O.linger_ms * 1000);
	}
	__atomic_store_n(&S->done, 1, __ATOMIC_RELEASE);
	for (uint32_t i = d0; i < p0; i++) {
		if (reaped[i])
			continue;
		waitpid(pids[i], &status, 0);
		failed |= !WIFEXITED(status) || WEXITSTATUS(status);
	}

	for (uint32_t i = 0; i < np; i++) {
		struct proc_stats *s = &S->st[i];

		if (s->failed) {
			fprintf(stderr, "locus-loadgen: process %u failed: %s\n", i, s->why);
			failed = 1;
		}
		if (s->corrupt)
			fprintf(stderr, "locus-loadgen: process %u: %llu corrupt, the first: %s\n", i,
				(unsigned long long)s->corrupt, s->bad);
		corrupt += s->corrupt;
		dup += s->duplicate;
		abandoned += s->abandoned;
		late += s->late;
		dropped += s->dropped;
		orphaned += s->orphaned;
		for (int k = 0; k < ERR_KINDS && s->err_n[k]; k++) {
			uint32_t j = 0;

			while (j < nk && ecode[j] != s->err_code[k])
				j++;
			if (j == nk) {
				ecode[nk] = s->err_code[k];
				en[nk++] = 0;
			}
			en[j] += s->err_n[k];
		}
		if (i >= p0) {
			pre_orphaned += s->orphaned;
			sub += s->submitted;
			comp += s->completed;
			ok += s->ok;
			errs += s->errors;
			sig_retries += s->retries;
			b_named += s->blocks_named;
			b_found += s->blocks_found;
			b_partial += s->partial;
			for (int b = 0; b < LAT_BUCKETS; b++)
				lat[b] += s->lat_hist[b];
			pre_t0 = s->t_start_ns < pre_t0 ? s->t_start_ns : pre_t0;
			pre_t1 = s->t_end_ns > pre_t1 ? s->t_end_ns : pre_t1;
		} else if (i >= r0) {
			rows_out += s->rows_out;
			pl_acked += s->pl_acked;
			pl_released += s->pl_released;
			wsum.w_moves += s->w_moves;
			wsum.w_sent += s->w_sent;
			wsum.w_here += s->w_here;
			wsum.w_other += s->w_other;
			wsum.w_storage += s->w_storage;
			wsum.w_bytes_in += s->w_bytes_in;
			wsum.w_timeouts += s->w_timeouts;
			wsum.w_unheld += s->w_unheld;
			wsum.w_stray += s->w_stray;
			wsum.w_unplanned += s->w_unplanned;
			if (s->w_ms_max > wsum.w_ms_max)
				wsum.w_ms_max = s->w_ms_max;
			if (s->w_unheld && !w_first)
				w_first = s->w_first;
			masked += s->masked;
			unanswered += s->unanswered;
			gone_ref += s->gone_refusals;
			lost_b += s->lost_batches;
			if (s->first_mask_ns && (!first_mask || s->first_mask_ns < first_mask))
				first_mask = s->first_mask_ns;
			disp += s->submitted;
			combs += s->combines;
			retries += s->retries;
			errs += s->errors;
			rk_t0 = s->t_start_ns < rk_t0 ? s->t_start_ns : rk_t0;
			rk_t1 = s->t_end_ns > rk_t1 ? s->t_end_ns : rk_t1;
		} else {
			delivered += s->delivered;
			verified += s->verified;
		}
	}
	lost = sub - comp - pre_orphaned;
	printf("signatures: %llu submitted, %llu completed (%llu routed, %llu refused), %llu lost, "
	       "%llu delivered to decoders, %llu verified, %llu inbox-full retries\n",
	       (unsigned long long)sub, (unsigned long long)comp, (unsigned long long)ok,
	       (unsigned long long)(comp - ok), (unsigned long long)lost,
	       (unsigned long long)delivered, (unsigned long long)verified,
	       (unsigned long long)sig_retries);
	if (O.prefix_blocks)
		printf("signature cache: ROUTE_BLOCKS with a %u-block head per domain (blocks of "
		       "%u tokens): %llu cached blocks named, %llu found, %llu partial routes\n",
		       O.prefix_blocks, O.block_tokens, (unsigned long long)b_named,
		       (unsigned long long)b_found, (unsigned long long)b_partial);
	printf("decision latency (client submit -> completion): p50 %.1f us, p99 %.1f us; "
	       "%.0f routed requests/s\n",
	       lat_quantile(lat, 0.5) / 1e3, lat_quantile(lat, 0.99) / 1e3,
	       pre_t1 > pre_t0 ? (double)comp * 1e9 / (double)(pre_t1 - pre_t0) : 0.0);
	printf("dispatch: %u ranks x %u batches of %u tokens x top-%u, %llu rows out, "
	       "%llu inbox-full retries (dispatch, combine); %.0f rows/s\n",
	       O.ranks, O.batches, O.tokens, T->k, (unsigned long long)rows_out,
	       (unsigned long long)retries,
	       rk_t1 > rk_t0 ? (double)rows_out * 1e9 / (double)(rk_t1 - rk_t0) : 0.0);
	if (O.placements)
		printf("placements: the ranks acknowledged %llu staged generation(s) and released "
		       "older ones %llu time(s)\n", (unsigned long long)pl_acked,
		       (unsigned long long)pl_released);
	if (O.weights) {
		printf("weights: %llu moves; experts received %llu from their node, %llu from another "
		       "node, %llu from storage, %.3f MB in; %llu sent; longest move %llu ms; %llu "
		       "timed out, %llu without a plan\n", (unsigned long long)wsum.w_moves,
		       (unsigned long long)wsum.w_here, (unsigned long long)wsum.w_other,
		       (unsigned long long)wsum.w_storage, (double)wsum.w_bytes_in / 1e6,
		       (unsigned long long)wsum.w_sent, (unsigned long long)wsum.w_ms_max,
		       (unsigned long long)wsum.w_timeouts, (unsigned long long)wsum.w_unplanned);
		printf("weights: %llu rows for an expert not held, %llu rows over held weights%s%s\n",
		       (unsigned long long)wsum.w_unheld, (unsigned long long)wsum.w_stray,
		       w_first ? "; first: " : "", w_first ? w_first : "");
		if (wsum.w_unheld || wsum.w_stray)
			failed = 1;
	}
	if (O.mask)
		printf("mask: %llu (token, slot) pairs masked (no live copy), %llu unanswered (their "
		       "rank lost holding them) in %llu batches, %llu refusals of rows whose rank had "
		       "left; first masked batch done at %.3f s (CLOCK_MONOTONIC)\n",
		       (unsigned long long)masked, (unsigned long long)unanswered,
		       (unsigned long long)lost_b, (unsigned long long)gone_ref,
		       (double)first_mask / 1e9);
	if (O.eldr_table) {
		double pure = baseline_router(comp ? comp : 1000);
		double daemon = pre_t1 > pre_t0 ? (double)comp * 1e9 / (double)(pre_t1 - pre_t0) : 0;
		double rows_s = rk_t1 > rk_t0 ? (double)rows_out * 1e9 / (double)(rk_t1 - rk_t0) : 0;
		double mc = baseline_memcpy(rows_out);

		printf("baseline: pure router in-process %.0f decisions/s; through locusd %.0f "
		       "routed/s = %.3fx (client rings, copy to the decoder, completion)\n",
		       pure, daemon, pure > 0 ? daemon / pure : 0.0);
		printf("baseline: memcpy of the same rows %.1f MB/s; dispatch through locusd "
		       "%.1f MB/s of rows = %.3fx (planning, delivery, combine back)\n",
		       mc / 1e6, rows_s * O.row_bytes / 1e6, mc > 0 ? rows_s * O.row_bytes / mc : 0.0);
	}
	if (O.dmabuf) {
		uint32_t reg = 0, rel = 0, fl[4] = { 0 };
		const char *how = "?";

		for (uint32_t i = r0; i < p0; i++) {
			const struct proc_stats *s = &S->st[i];

			reg += (uint32_t)s->region_registered;
			rel += (uint32_t)s->region_released;
			how = s->region_how[0] ? s->region_how : how;
			fl[0] += !!(s->region_flags & LOCUS_REGION_MAPPED);
			fl[1] += !!(s->region_flags & LOCUS_REGION_MR_DMABUF);
			fl[2] += !!(s->region_flags & LOCUS_REGION_MR_MAPPED);
			fl[3] += s->region_registered &&
				 !(s->region_flags & (LOCUS_REGION_MR_DMABUF | LOCUS_REGION_MR_MAPPED));
		}
		printf("%s regions (%s): %u of %u ranks registered, %u unregistered; locusd "
		       "mapped %u, dma-buf MR %u, MR on the mapping %u, no MR %u\n",
		       O.host_region ? "host-memory" : "dma-buf", how, reg,
		       O.ranks, rel, fl[0], fl[1], fl[2], fl[3]);
		if (reg != O.ranks || (!O.allow_errors && rel != O.ranks))
			failed = 1;
	}
	/* what locusd's route_requests, dispatch_batches, combine_batches must say */
	printf("requests: %llu %s, %llu DISPATCH, %llu COMBINE submitted (resubmissions "
	       "after a full inbox included)\n", (unsigned long long)(sub + sig_retries),
	       O.prefix_blocks ? "ROUTE_BLOCKS" : "ROUTE",
	       (unsigned long long)disp, (unsigned long long)combs);
	if (stopping())
		printf("stopped by a signal: %llu signatures and %llu dispatch batches were sent\n",
		       (unsigned long long)sub, (unsigned long long)disp);
	printf("checks: %llu corrupt, %llu duplicate, %llu errors\n", (unsigned long long)corrupt,
	       (unsigned long long)dup, (unsigned long long)errs);
	for (uint32_t j = 0; j < nk; j++)
		printf("  completed with %s: %llu\n", ecode[j] ? locus_strerror(ecode[j]) : "other",
		       (unsigned long long)en[j]);
	if (O.allow_errors) {
		printf("allowed errors: %llu batches given up after %u ms, %llu late result rows "
		       "checked, %llu rows messages of given-up batches dropped, %llu requests "
		       "unanswered because their own locusd died\n",
		       (unsigned long long)abandoned, O.batch_ms, (unsigned long long)late,
		       (unsigned long long)dropped, (unsigned long long)orphaned);
		if (O.kill_rank >= 0) {
			const struct proc_stats *k = &S->st[r0 + (uint32_t)O.kill_rank];

			printf("killed: rank %d's process by SIGKILL right after its %s %u (%u "
			       "times), leaving %llu requests in flight; %s; at %.3f s "
			       "(CLOCK_MONOTONIC)\n", O.kill_rank,
			       O.kill_combine ? "COMBINE no." : "DISPATCH of batch", O.kill_n,
			       k->kills, (unsigned long long)k->killed_inflight,
			       !O.respawn ? "not replaced" : k->failed ? "its replacement FAILED"
			       : "a new process took the rank over", (double)k->killed_ns / 1e9);
		}
		/* a signature may be lost with its node, never delivered twice or unasked */
		if (lost || corrupt || dup || delivered > comp || verified != delivered)
			failed = 1;
	} else if (lost || corrupt || dup || errs || delivered != ok || verified != delivered) {
		failed = 1;
	}
	printf("%s\n", failed ? "loadgen: FAILED" : "loadgen: ok");
	locus_trace_free(T);
	return failed;
}
