// SPDX-License-Identifier: MIT
/*
 * bench_dataplane route: ROUTE round trips and routes/s through locusd from
 * one client thread holding the prefill attachment and every decoder (with
 * --cpus A,B,...: one such thread per CPU, the decoders dealt out among
 * them), against the pure router on the same signatures in-process.
 *
 * Window 1 is the round trip: submit one ROUTE, poll every attachment until
 * its completion (the signature lands in a decoder's inbox on the way and
 * is released). Windows 8 and 32 keep that many ROUTEs in flight.
 *
 * The signatures are built once and submitted as they are, unless --build:
 * then each ROUTE is built from the trace prompt's routed experts as it is
 * submitted (locus_client_route, what a serving engine calls), and its
 * round trip counts from before the build.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dp.h"
#include "locus_eldr.h"
#include "locus_eldr_router.h"
#include "locus_tblfile.h"
#include "locus_trace.h"
#include "locus_wire.h"

#define N_SIG      64              /* distinct signatures, kept in the prefill's stage */
#define MAX_WINDOW 256
#define MAX_LAT    (4u << 20)      /* latency samples kept per row */
#define WARM_NS    200000000ull    /* untimed, every delivery checked byte for byte */

struct route_sh {                  /* what the threads share */
	const struct bd_opts *o;
	const uint8_t *sigs;           /* N_SIG signatures, sig_len each */
	size_t sig_len;
	uint32_t n_sig, n_threads;
	const uint32_t *dec_ids;
	uint32_t K;
	struct locus_trace *T;         /* --build: the routed experts each ROUTE is built from */
	uint16_t L, E;
	pthread_barrier_t bar;
	int failed;
};

struct route_th {
	struct route_sh *sh;
	uint32_t idx;
	struct bd_att att[BD_MAX_ATT];
	uint32_t n_att;
	uint64_t t_sub[MAX_WINDOW];
	uint64_t id_sub[MAX_WINDOW];
	uint32_t free_w[MAX_WINDOW], n_free;
	uint64_t seq;
	/* one row */
	uint64_t *lat;
	size_t n_lat;
	uint64_t completed, delivered, retries, bad;
	uint64_t t0, t1;
};

static uint64_t sig_stride(size_t sig_len)
{
	return LOCUS_ALIGN_UP((uint64_t)sig_len, 64);
}

/* Submit from window slot w: the next signature of the pool. */
static int submit(struct route_th *t, uint32_t w)
{
	struct route_sh *sh = t->sh;
	uint64_t s = t->seq % sh->n_sig;
	struct locus_desc q = { .op = LOCUS_OP_ROUTE, .id = (t->seq << 16) | (s << 8) | w,
				.off = s * sig_stride(sh->sig_len), .len = (uint32_t)sh->sig_len };
	uint64_t t0 = bd_now_ns();

	if (sh->T) {
		const struct locus_trace_req *r = &sh->T->reqs[s];
		struct locus_client_route_req rq = { .n_layers = sh->L, .n_experts = sh->E,
						     .k = (uint16_t)sh->T->k,
						     .n_tokens = r->prompt_len, .ids = r->prompt };
		struct locus_error err;

		/* built into window slot w's own range, past the prebuilt signatures */
		if (locus_client_route(t->att[0].c, (N_SIG + w) * sig_stride(sh->sig_len), &rq,
				       q.id, &err) < 0)
			return -1;
	} else if (locus_client_submit(t->att[0].c, &q, 1) != 1) {
		return -1;
	} else {
		t0 = bd_now_ns();
	}
	t->id_sub[w] = q.id;
	t->t_sub[w] = t0;
	t->seq++;
	return 0;
}

/* A delivered signature: the one its request named; check the bytes when asked. */
static void delivery(struct route_th *t, struct bd_att *a, const struct locus_desc *d, int check)
{
	const struct locus_msg_hdr *m = locus_client_inbox(a->c, d);
	struct route_sh *sh = t->sh;

	if (d->op != LOCUS_OP_SIGNATURE_IN || !m) {
		t->bad++;
		return;
	}
	if (m->type != LOCUS_MSG_SIGNATURE || m->payload_len != sh->sig_len ||
	    (check && memcmp(m + 1, sh->sigs + ((m->id >> 8) & 0xff) * sh->sig_len, sh->sig_len)))
		t->bad++;
	t->delivered++;
	if (locus_client_release_slot(a->c, d->slot) < 0)
		t->bad++;
}

/* Poll every attachment once; completions free their window slot. */
static int poll_all(struct route_th *t, int check, int record)
{
	struct locus_desc d[32];
	uint64_t now = 0;
	int got = 0;

	for (uint32_t i = 0; i < t->n_att; i++) {
		int n = locus_client_poll(t->att[i].c, d, 32);

		if (n < 0) {
			fprintf(stderr, "bench_dataplane: poll: %s\n", locus_strerror(n));
			return -1;
		}
		for (int k = 0; k < n; k++) {
			uint32_t w = (uint32_t)(d[k].id & 0xff);

			if (d[k].op != LOCUS_OP_ROUTE) {
				delivery(t, &t->att[i], &d[k], check);
				continue;
			}
			if (!now)
				now = bd_now_ns();
			if (w >= MAX_WINDOW || t->id_sub[w] != d[k].id) {
				t->bad++;
				continue;
			}
			if (d[k].status == -LOCUS_EFULL) {
				/* a decoder's inbox is full: back-pressure, the same request again */
				struct locus_desc q = d[k];

				q.status = 0;
				t->retries++;
				if (locus_client_submit(t->att[0].c, &q, 1) == 1)
					continue;
			}
			if (d[k].status) {
				fprintf(stderr, "bench_dataplane: ROUTE failed: %s\n",
					locus_strerror(d[k].status));
				return -1;
			}
			if (record && t->n_lat < MAX_LAT)
				t->lat[t->n_lat++] = now - t->t_sub[w];
			t->id_sub[w] = 0;
			t->free_w[t->n_free++] = w;
			t->completed++;
			got++;
		}
	}
	return got;
}

/* Keep `window` ROUTEs in flight for ns (then drain). 0 or -1. */
static int run_window(struct route_th *t, uint32_t window, uint64_t ns, int check, int record)
{
	uint64_t end = bd_now_ns() + ns, now;

	t->n_free = 0;
	for (uint32_t w = 0; w < window; w++)
		t->free_w[t->n_free++] = window - 1 - w;
	t->n_lat = 0;
	t->completed = t->delivered = t->retries = 0;
	t->t0 = bd_now_ns();
	for (;;) {
		now = bd_now_ns();
		if (now < end)
			while (t->n_free && submit(t, t->free_w[t->n_free - 1]) == 0)
				t->n_free--;
		else if (t->n_free == window)
			break;
		if (poll_all(t, check, record) < 0)
			return -1;
		bd_report_loads(t->att, t->n_att, now);
	}
	t->t1 = bd_now_ns();
	/*
	 * The last deliveries may trail their completions: by a poll, and with
	 * several engine lcores by the hand-over to the decoder's engine (which
	 * may share a core with others): up to 2 s.
	 */
	for (uint64_t until = bd_now_ns() + 2000000000ull;
	     t->delivered < t->completed && bd_now_ns() < until;)
		if (poll_all(t, check, 0) < 0)
			return -1;
	if (t->bad || t->delivered != t->completed) {
		fprintf(stderr, "bench_dataplane: %llu routed, %llu delivered, %llu bad\n",
			(unsigned long long)t->completed, (unsigned long long)t->delivered,
			(unsigned long long)t->bad);
		return -1;
	}
	return 0;
}

/* Thread idx's attachments: the prefill (+ its first decoder), decoders idx, idx + n, ... */
static int attach_thread(struct route_th *t)
{
	struct route_sh *sh = t->sh;
	uint32_t first = 1;

	t->n_att = 0;
	for (uint32_t k = t->idx; k < sh->K; k += sh->n_threads) {
		uint32_t roles = LOCUS_ROLE_DECODE | (first ? LOCUS_ROLE_PREFILL : 0);

		if (bd_attach(&t->att[t->n_att], sh->o->instance, roles, sh->dec_ids[k]) < 0)
			return -1;
		t->n_att++;
		first = 0;
	}
	if (first && bd_attach(&t->att[t->n_att++], sh->o->instance, LOCUS_ROLE_PREFILL, 0) < 0)
		return -1;
	if (t->att[0].stage_size < (N_SIG + MAX_WINDOW) * sig_stride(sh->sig_len)) {
		fprintf(stderr, "bench_dataplane: stage too small for %u signatures\n",
			N_SIG + MAX_WINDOW);
		return -1;
	}
	for (uint32_t s = 0; s < sh->n_sig; s++)
		memcpy(t->att[0].stage + s * sig_stride(sh->sig_len), sh->sigs + s * sh->sig_len,
		       sh->sig_len);
	return 0;
}

static void *route_thread(void *arg)
{
	struct route_th *t = arg;
	struct route_sh *sh = t->sh;
	const struct bd_opts *o = sh->o;
	char who[64];
	int fail;

	snprintf(who, sizeof(who), "route client thread %u", t->idx);
	fail = bd_pin(who, o->cpus[t->idx]) < 0 || attach_thread(t) < 0;
	/* the decoders report before the first route; the warm-up checks every byte */
	pthread_barrier_wait(&sh->bar);
	fail = fail || __atomic_load_n(&sh->failed, __ATOMIC_RELAXED);
	if (!fail)
		fail = run_window(t, 8, WARM_NS, 1, 0) < 0;
	for (uint32_t i = 0; i < o->n_windows; i++) {
		if (fail)
			__atomic_store_n(&sh->failed, 1, __ATOMIC_RELAXED);
		pthread_barrier_wait(&sh->bar);
		fail = __atomic_load_n(&sh->failed, __ATOMIC_RELAXED) ||
		       run_window(t, o->windows[i], (uint64_t)(o->seconds * 1e9), 0, 1) < 0;
		pthread_barrier_wait(&sh->bar); /* the main thread reads the row */
		pthread_barrier_wait(&sh->bar);
	}
	if (fail)
		__atomic_store_n(&sh->failed, 1, __ATOMIC_RELAXED);
	return NULL;
}

/* Decisions/s of the pure router on the same signatures, this thread, no daemon. */
static double pure_router(const void *payload, size_t plen, const struct route_sh *sh)
{
	size_t mem_len = locus_eldr_router_mem_size(payload, plen);
	struct locus_eldr_router *r;
	struct locus_eldr_decision dec;
	struct locus_error err = { 0 };
	void *mem = NULL;
	uint64_t ok = 0, t0, n = 0;
	double rate = 0;

	if (!mem_len || posix_memalign(&mem, 64, mem_len) ||
	    locus_eldr_router_build(mem, mem_len, payload, plen,
				    (enum locus_eldr_path)sh->o->router_path, &r, &err)) {
		fprintf(stderr, "bench_dataplane: router: %s\n", err.msg);
		free(mem);
		return 0;
	}
	for (uint32_t s = 0; s < locus_eldr_router_n_decoders(r); s++)
		locus_eldr_router_set_up(r, s, 1);
	t0 = bd_now_ns();
	while (bd_now_ns() - t0 < (uint64_t)(sh->o->seconds * 1e9))
		for (int i = 0; i < 1024; i++, n++)
			ok += locus_eldr_route(r, sh->sigs + (n % sh->n_sig) * sh->sig_len,
					       sh->sig_len, &dec) == 0;
	rate = (double)ok * 1e9 / (double)(bd_now_ns() - t0);
	free(mem);
	return rate;
}

/* The signatures: the trace's first prompts, or synthetic prompts of cluster s % K. */
static uint8_t *make_sigs(const struct bd_opts *o, uint32_t L, uint32_t E, uint32_t K,
			  size_t sig_len, uint32_t *n_sig)
{
	uint8_t *sigs = malloc(N_SIG * sig_len);
	struct locus_error err = { 0 };
	struct locus_trace *T = NULL;
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	uint16_t *ids = NULL;
	long len = 0;

	if (!sigs)
		return NULL;
	if (o->trace && locus_trace_load(o->trace, NULL, &T, &err) < 0) {
		fprintf(stderr, "bench_dataplane: %s\n", err.msg);
		goto err;
	}
	if (T && (T->n_layers != L || T->n_experts != E)) {
		fprintf(stderr, "bench_dataplane: the trace is %u x %u, the table %u x %u\n",
			T->n_layers, T->n_experts, L, E);
		goto err;
	}
	*n_sig = T ? LOCUS_MIN(T->n_requests, (uint32_t)N_SIG) : N_SIG;
	ids = T ? NULL : malloc(32 * (size_t)L * 8 * sizeof(*ids));
	if (!T && !ids)
		goto err;
	for (uint32_t s = 0; s < *n_sig; s++) {
		if (T) {
			const struct locus_trace_req *r = &T->reqs[s];

			len = locus_eldr_sig_build(sigs + s * sig_len, sig_len, L, (uint16_t)E, T->k,
						   r->prompt, r->prompt_len, 0, &err);
		} else {
			/* 32 tokens, top-8: six experts of the cluster's block, two anywhere */
			for (uint32_t i = 0; i < 32 * L * 8; i++) {
				rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
				ids[i] = (uint16_t)(i % 8 < 6 ? (s % K) * (E / K) + rng % (E / K)
							     : rng % E);
			}
			len = locus_eldr_sig_build(sigs + s * sig_len, sig_len, L, (uint16_t)E, 8, ids,
						   32, 0, &err);
		}
		if (len != (long)sig_len) {
			fprintf(stderr, "bench_dataplane: signature %u: %s\n", s, err.msg);
			goto err;
		}
	}
	free(ids);
	locus_trace_free(T);
	return sigs;
err:
	free(ids);
	locus_trace_free(T);
	free(sigs);
	return NULL;
}

static void print_row(const struct route_sh *sh, struct route_th *th, uint32_t window,
		      double pure)
{
	uint64_t done = 0, retries = 0, t0 = UINT64_MAX, t1 = 0;
	size_t n_lat = 0;
	uint64_t *all;
	double rate;

	for (uint32_t i = 0; i < sh->n_threads; i++) {
		done += th[i].completed;
		retries += th[i].retries;
		n_lat += th[i].n_lat;
		t0 = LOCUS_MIN(t0, th[i].t0);
		t1 = LOCUS_MAX(t1, th[i].t1);
	}
	all = malloc((n_lat ? n_lat : 1) * sizeof(*all));
	if (!all)
		return;
	n_lat = 0;
	for (uint32_t i = 0; i < sh->n_threads; i++) {
		memcpy(all + n_lat, th[i].lat, th[i].n_lat * sizeof(*all));
		n_lat += th[i].n_lat;
	}
	rate = (double)done * 1e9 / (double)(t1 - t0);
	printf("route %zu B%s, %u client thread%s, window %2u: %9.0f routes/s = %.3fx the pure "
	       "router; round trip p50 %.2f us, p99 %.2f us (%llu routes, %llu inbox-full "
	       "retries)\n", sh->sig_len, sh->T ? " built from the routed experts" : "",
	       sh->n_threads, sh->n_threads > 1 ? "s" : "", window,
	       rate, pure > 0 ? rate / pure : 0.0, bd_quantile(all, n_lat, 0.5) / 1e3,
	       bd_quantile(all, n_lat, 0.99) / 1e3, (unsigned long long)done,
	       (unsigned long long)retries);
	fflush(stdout);
	free(all);
}

int bd_route(const struct bd_opts *o)
{
	struct locus_eldr_tbl_view v;
	struct locus_error err = { 0 };
	struct route_sh sh = { .o = o, .n_threads = o->n_cpus };
	struct route_th *th = NULL;
	pthread_t tid[BD_MAX_CPUS];
	const void *payload;
	void *blob = NULL;
	size_t len, plen;
	double pure;
	int ret = 1;
	uint32_t started = 0;

	if (o->table ? locus_tbl_read_file(o->table, LOCUS_TBL_ELDR, &blob, &len, &err) < 0
		     : !(blob = bd_synthetic_table(o->layers, o->experts, o->decoders, &len))) {
		fprintf(stderr, "bench_dataplane: table: %s\n", o->table ? err.msg : "synthetic");
		goto out;
	}
	if (locus_eldr_blob_check(blob, len, &v, &err) < 0 ||
	    locus_tbl_check(blob, len, LOCUS_TBL_ELDR, &payload, &plen, &err) < 0) {
		fprintf(stderr, "bench_dataplane: table: %s\n", err.msg);
		goto out;
	}
	sh.K = v.hdr->n_decoders;
	sh.dec_ids = v.decoder_ids;
	sh.sig_len = locus_eldr_sig_len(v.hdr->n_layers, v.hdr->n_experts);
	if (sh.K > BD_MAX_ATT || sh.n_threads > BD_MAX_CPUS) {
		fprintf(stderr, "bench_dataplane: at most %d decoders\n", BD_MAX_ATT);
		goto out;
	}
	sh.sigs = make_sigs(o, v.hdr->n_layers, v.hdr->n_experts, sh.K, sh.sig_len, &sh.n_sig);
	if (!sh.sigs || (!o->no_push && bd_push_table(o->instance, blob, len) < 0))
		goto out;
	sh.L = v.hdr->n_layers;
	sh.E = v.hdr->n_experts;
	if (o->build && (!o->trace || locus_trace_load(o->trace, NULL, &sh.T, &err) < 0)) {
		fprintf(stderr, "bench_dataplane: --build: %s\n", o->trace ? err.msg :
			"the routed experts come from --trace");
		goto out;
	}
	printf("route: %zu-byte signatures (%u layers x %u experts, %s), %u decoders; the table "
	       "%s\n", sh.sig_len, v.hdr->n_layers, v.hdr->n_experts,
	       o->trace ? "the trace's prompts" : "synthetic, 32 tokens x top-8", sh.K,
	       o->no_push ? "in force (not pushed)" : "pushed");
	/* the baseline first, on the first client's CPU, before any client spins */
	if (bd_pin("route baseline (pure router in-process)", o->cpus[0]) < 0)
		goto out;
	pure = pure_router(payload, plen, &sh);
	printf("route %zu B baseline: the pure router in-process (%s) %.0f decisions/s\n",
	       sh.sig_len, locus_eldr_path_name((enum locus_eldr_path)o->router_path), pure);
	th = calloc(sh.n_threads, sizeof(*th));
	if (!th || pthread_barrier_init(&sh.bar, NULL, sh.n_threads + 1))
		goto out;
	for (uint32_t i = 0; i < sh.n_threads; i++) {
		th[i].sh = &sh;
		th[i].idx = i;
		th[i].lat = malloc(MAX_LAT * sizeof(uint64_t));
		if (!th[i].lat || pthread_create(&tid[i], NULL, route_thread, &th[i])) {
			sh.failed = 1;
			break;
		}
		started++;
	}
	if (started == sh.n_threads) {
		pthread_barrier_wait(&sh.bar); /* attached */
		for (uint32_t i = 0; i < o->n_windows; i++) {
			pthread_barrier_wait(&sh.bar); /* start */
			pthread_barrier_wait(&sh.bar); /* done */
			if (!__atomic_load_n(&sh.failed, __ATOMIC_RELAXED))
				print_row(&sh, th, o->windows[i], pure);
			pthread_barrier_wait(&sh.bar);
		}
	}
	for (uint32_t i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	ret = started == sh.n_threads && !sh.failed ? 0 : 1;
	if (started == sh.n_threads)
		pthread_barrier_destroy(&sh.bar);
out:
	for (uint32_t i = 0; th && i < sh.n_threads; i++) {
		bd_detach(th[i].att, th[i].n_att);
		free(th[i].lat);
	}
	free(th);
	locus_trace_free(sh.T);
	free((void *)sh.sigs);
	free(blob);
	return ret;
}
