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
 * non-zero on any lost, duplicated or corrupt completion. Benchmark figures
 * (decision latency, routed requests/s, rows/s) come with their in-process
 * baselines: the pure router on the same signatures and memcpy of the same
 * bytes.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "locus_client.h"
#include "locus_dispatch.h"
#include "locus_eldr.h"
#include "locus_tblfile.h"
#include "locus_trace.h"
#include "locus_wire.h"

#define MAX_PROCS   32
#define LAT_BUCKETS 64
#define OUTSTANDING 16
#define SIG_SLOT    (64 * 1024)
#define ROWS_OFF    (64 * 1024)
#define COMB_OFF    (1024 * 1024)
#define COMB_SLOTS  8

struct opts {
	const char *instance;
	const char *trace;
	const char *midway_cmd;
	const char *eldr_table;   /* baseline: the pure router in-process on this table */
	uint32_t decoders, ranks, prefills;
	uint32_t requests, batches, tokens, row_bytes;
	uint32_t decode_us;
	uint32_t seconds;
};

/* Shared with the children (MAP_SHARED): each writes its own record. */
struct proc_stats {
	uint64_t submitted, completed, ok, errors, retries;
	uint64_t delivered, verified, corrupt, duplicate;
	uint64_t rows_out, rows_back, bytes;
	uint64_t lat_hist[LAT_BUCKETS]; /* ns, log2 buckets */
	uint64_t lat_sum_ns;
	uint64_t t_start_ns, t_end_ns;
	int attached, failed;
	char why[128];
} __attribute__((aligned(64)));

struct shared {
	int done;             /* parent -> decoders and ranks: stop */
	uint32_t ranks_up;    /* ranks attached: none dispatches before all are */
	uint64_t routed_total;
	struct proc_stats st[MAX_PROCS];
};

static struct opts O = {
	.instance = "default", .decoders = 4, .ranks = 4, .prefills = 1, .requests = 2000,
	.batches = 100, .tokens = 32, .row_bytes = 2048, .decode_us = 2000, .seconds = 120,
};
static struct shared *S;
static struct locus_trace *T;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap_us(unsigned us)
{
	struct timespec ts = { 0, (long)us * 1000 };

	nanosleep(&ts, NULL);
}

static int expired(uint64_t t0)
{
	return now_ns() - t0 > (uint64_t)O.seconds * 1000000000ull;
}

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

static struct locus_client *attach(uint32_t roles, uint32_t id, struct proc_stats *s)
{
	struct locus_client_req req = { .roles = roles, .decoder_id = id, .rank = id,
					.timeout_ms = 5000 };
	struct locus_client *c;
	struct locus_error e;

	if (locus_client_attach(O.instance, &req, &c, &e) != 0) {
		snprintf(s->why, sizeof(s->why), "attach: %.100s", e.msg);
		s->failed = 1;
		return NULL;
	}
	s->attached = 1;
	return c;
}

/* ---- prefill ------------------------------------------------------------------------ */

static int run_prefill(uint32_t idx, struct proc_stats *s)
{
	struct locus_client *c = attach(LOCUS_ROLE_PREFILL, 0, s);
	uint64_t t_sub[OUTSTANDING] = { 0 }, stage_size, t0 = now_ns();
	uint8_t *stage;
	uint32_t next = 0, inflight = 0, free_mask = (1u << OUTSTANDING) - 1;

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
	while ((next < O.requests || inflight) && !expired(t0)) {
		struct locus_desc d[OUTSTANDING];
		int n;

		while (next < O.requests && free_mask) {
			uint32_t slot = (uint32_t)__builtin_ctz(free_mask);
			const struct locus_trace_req *r = &T->reqs[(next * O.prefills + idx) %
								 T->n_requests];
			long len = locus_eldr_sig_build(stage + (size_t)slot * SIG_SLOT, SIG_SLOT,
							T->n_layers, T->n_experts, T->k, r->prompt,
							r->prompt_len, 0, NULL);
			struct locus_desc q = { .op = LOCUS_OP_ROUTE, .id = slot,
						.off = (uint64_t)slot * SIG_SLOT, .len = (uint32_t)len };

			if (len < 0 || locus_client_submit(c, &q, 1) != 1)
				break;
			free_mask &= ~(1u << slot);
			t_sub[slot] = now_ns();
			inflight++;
			next++;
			s->submitted++;
		}
		n = locus_client_poll(c, d, OUTSTANDING);
		for (int i = 0; i < n; i++) {
			uint64_t slot = d[i].id;

			if (d[i].op != LOCUS_OP_ROUTE || slot >= OUTSTANDING ||
			    (free_mask & (1u << slot))) {
				s->duplicate++;
				continue;
			}
			if (d[i].status == -LOCUS_EFULL) {
				/* the decoder's inbox is full: back-pressure, send it again */
				struct locus_desc q = d[i];

				s->retries++;
				q.status = 0;
				nap_us(50);
				if (locus_client_submit(c, &q, 1) == 1)
					continue;
				d[i].status = -LOCUS_EFULL;
			}
			lat_record(s, now_ns() - t_sub[slot]);
			free_mask |= 1u << slot;
			inflight--;
			s->completed++;
			if (d[i].status == 0 && d[i].peer < O.decoders)
				s->ok++;
			else
				s->errors++;
		}
		if (n == 0)
			nap_us(20);
	}
	s->t_end_ns = now_ns();
	if (inflight) {
		snprintf(s->why, sizeof(s->why), "%u requests never completed", inflight);
		s->failed = 1;
	}
	locus_client_detach(c);
	return s->failed;
}

/* ---- decoder ------------------------------------------------------------------------ */

static int run_decoder(uint32_t id, struct proc_stats *s)
{
	struct locus_client *c = attach(LOCUS_ROLE_DECODE, id, s);
	uint64_t finish[4096], last_report = 0;
	uint32_t active = 0;

	if (!c)
		return 1;
	locus_client_report_load(c, 0);
	while (!__atomic_load_n(&S->done, __ATOMIC_ACQUIRE)) {
		struct locus_desc d[32];
		uint64_t now = now_ns();
		int n = locus_client_poll(c, d, 32);

		for (int i = 0; i < n; i++) {
			const struct locus_msg_hdr *m = locus_client_inbox(c, &d[i]);
			size_t sig_len = locus_eldr_sig_len(T->n_layers, T->n_experts);

			s->delivered++;
			if (d[i].op != LOCUS_OP_SIGNATURE_IN || !m ||
			    locus_msg_hdr_check(m, d[i].len, UINT32_MAX) < 0 ||
			    m->type != LOCUS_MSG_SIGNATURE || m->dst_rank != id ||
			    m->payload_len != sig_len ||
			    locus_eldr_sig_check(m + 1, sig_len, T->n_layers, T->n_experts, NULL)) {
				s->corrupt++;
			} else {
				s->verified++;
				if (active < 4096)
					finish[active++] = now + (uint64_t)O.decode_us * 1000;
			}
			if (m)
				locus_client_release_slot(c, d[i].slot);
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
	locus_client_detach(c);
	return 0;
}

/* ---- expert-parallel rank -------------------------------------------------------------- */

static uint8_t row_byte(uint32_t src, uint32_t batch, uint32_t token, uint32_t b)
{
	return (uint8_t)(src * 131 + batch * 31 + token * 7 + b);
}

struct rank_state {
	struct locus_client *c;
	uint32_t rank;
	uint8_t *stage;
	uint32_t comb_busy;           /* bitmask of combine slots awaiting completion */
	uint8_t got[4096][8];         /* (token, k) results of the batch in flight */
	uint32_t want_pairs, got_pairs;
	int dispatch_done;
	uint32_t batch;
	struct locus_desc pending[1024]; /* a ring's worth, taken while waiting for a combine slot */
	uint32_t n_pending;
};

/* Answer rows: the "expert output" is the row xor (rank + 1). */
static void answer_rows(struct rank_state *rs, struct proc_stats *s, const struct locus_desc *d)
{
	uint8_t *msg = (uint8_t *)locus_client_inbox(rs->c, d);
	const struct locus_msg_hdr *m = (const struct locus_msg_hdr *)msg;
	struct locus_rows_hdr *h;
	struct locus_row_ref *refs;
	struct locus_combine_req *cq;
	uint32_t slot;
	uint64_t base;

	s->delivered++;
	if (!msg || locus_rows_msg_check(msg, d->len, O.ranks, 4u << 20, NULL) < 0) {
		s->corrupt++;
		if (msg)
			locus_client_release_slot(rs->c, d->slot);
		return;
	}
	h = locus_rows_hdr_of(msg);
	refs = locus_rows_refs(msg);
	/* every combine slot in flight: wait for one, keep what else arrives */
	while (rs->comb_busy == (1u << COMB_SLOTS) - 1) {
		struct locus_desc cd;

		if (locus_client_poll(rs->c, &cd, 1) != 1)
			continue;
		if (cd.op == LOCUS_OP_COMBINE) {
			rs->comb_busy &= ~(1u << cd.id);
			if (cd.status)
				s->errors++;
		} else if (rs->n_pending < LOCUS_ARRAY_SIZE(rs->pending)) {
			rs->pending[rs->n_pending++] = cd;
		} else {
			s->corrupt++; /* more than a ring's worth: cannot happen */
		}
	}
	slot = (uint32_t)__builtin_ctz(~rs->comb_busy);
	base = COMB_OFF + (uint64_t)slot * (256 * 1024 + 65536);
	cq = (struct locus_combine_req *)(rs->stage + base);
	*cq = (struct locus_combine_req){ .magic = LOCUS_COMBINE_MAGIC, .layer = h->layer,
					  .dst_rank = m->src_rank, .n_rows = h->n_rows,
					  .row_bytes = h->row_bytes, .rows_off = base + 65536,
					  .batch_id = h->batch_id };
	for (uint32_t j = 0; j < h->n_rows; j++) {
		const uint8_t *row = (h->flags & LOCUS_ROWS_IN_PLACE)
			? rs->stage + h->rows_off + (size_t)refs[j].token * h->row_bytes
			: msg + h->rows_off + (size_t)j * h->row_bytes;
		uint8_t *out = rs->stage + base + 65536 + (size_t)j * h->row_bytes;
		int bad = 0;

		for (uint32_t b = 0; b < h->row_bytes; b++) {
			bad |= row[b] != row_byte(m->src_rank, (uint32_t)h->batch_id, refs[j].token, b);
			out[b] = row[b] ^ (uint8_t)(rs->rank + 1);
		}
		if (bad)
			s->corrupt++;
		else
			s->verified++;
		((struct locus_row_ref *)(cq + 1))[j] = refs[j];
	}
	locus_client_release_slot(rs->c, d->slot);
	{
		struct locus_desc q = { .op = LOCUS_OP_COMBINE, .id = slot, .off = base,
					.len = (uint32_t)locus_combine_req_len(h->n_rows),
					.slot = slot };

		while (locus_client_submit(rs->c, &q, 1) != 1)
			nap_us(10);
	}
	rs->comb_busy |= 1u << slot;
	s->rows_back += h->n_rows;
}

static void take_results(struct rank_state *rs, struct proc_stats *s, const struct locus_desc *d)
{
	uint8_t *msg = (uint8_t *)locus_client_inbox(rs->c, d);
	const struct locus_msg_hdr *m = (const struct locus_msg_hdr *)msg;
	struct locus_rows_hdr *h;
	struct locus_row_ref *refs;

	if (!msg || locus_rows_msg_check(msg, d->len, O.ranks, 4u << 20, NULL) < 0) {
		s->corrupt++;
		goto out;
	}
	h = locus_rows_hdr_of(msg);
	refs = locus_rows_refs(msg);
	if (h->batch_id != rs->batch) {
		s->corrupt++;
		goto out;
	}
	for (uint32_t j = 0; j < h->n_rows; j++) {
		const uint8_t *row = (h->flags & LOCUS_ROWS_IN_PLACE)
			? rs->stage + h->rows_off + (size_t)j * h->row_bytes
			: msg + h->rows_off + (size_t)j * h->row_bytes;
		int bad = refs[j].token >= O.tokens;

		for (uint32_t b = 0; !bad && b < h->row_bytes; b++)
			bad = row[b] != (uint8_t)(row_byte(rs->rank, rs->batch, refs[j].token, b) ^
						  (uint8_t)(m->src_rank + 1));
		if (bad) {
			s->corrupt++;
			continue;
		}
		for (uint32_t k = 0; k < T->k; k++) {
			if (!(refs[j].kmask & (1u << k)))
				continue;
			if (rs->got[refs[j].token][k]++)
				s->duplicate++;
			else
				rs->got_pairs++;
		}
	}
out:
	if (msg)
		locus_client_release_slot(rs->c, d->slot);
}

static void handle(struct rank_state *rs, struct proc_stats *s, const struct locus_desc *d)
{
	switch (d->op) {
	case LOCUS_OP_ROWS_IN:
		answer_rows(rs, s, d);
		break;
	case LOCUS_OP_RESULTS_IN:
		take_results(rs, s, d);
		break;
	case LOCUS_OP_COMBINE:
		rs->comb_busy &= ~(1u << d->id);
		if (d->status)
			s->errors++;
		break;
	case LOCUS_OP_DISPATCH:
		s->completed++;
		if (d->status == -LOCUS_EFULL) {
			s->retries++;
			rs->dispatch_done = -1; /* resubmit */
		} else if (d->status) {
			s->errors++;
			rs->dispatch_done = 2;
		} else {
			s->ok++;
			s->rows_out += d->aux;
			rs->dispatch_done = 1;
		}
		break;
	default:
		s->corrupt++;
	}
}

/* Build batch b: tokens of a trace request's prompt at one layer. */
static void build_batch(struct rank_state *rs, uint32_t b)
{
	const struct locus_trace_req *r = &T->reqs[(b * O.ranks + rs->rank) % T->n_requests];
	struct locus_dispatch_req *q = (struct locus_dispatch_req *)rs->stage;
	uint16_t *ex = (uint16_t *)(q + 1);
	float *g;
	uint32_t layer = b % T->n_layers;

	*q = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = (uint16_t)layer,
					  .top_k = T->k, .n_tokens = O.tokens,
					  .row_bytes = O.row_bytes, .rows_off = ROWS_OFF,
					  .batch_id = b };
	for (uint32_t t = 0; t < O.tokens; t++) {
		const uint16_t *ids = locus_trace_tok(T, r->prompt, t % r->prompt_len, layer);

		memcpy(ex + (size_t)t * T->k, ids, 2u * T->k);
		for (uint32_t x = 0; x < O.row_bytes; x++)
			rs->stage[ROWS_OFF + (size_t)t * O.row_bytes + x] = row_byte(rs->rank, b, t, x);
	}
	g = (float *)((uint8_t *)ex + locus_ids_bytes(O.tokens, T->k));
	for (uint32_t i = 0; i < O.tokens * T->k; i++)
		g[i] = 1.0f / T->k;
}

static int run_rank(uint32_t rank, struct proc_stats *s)
{
	struct rank_state *rs = calloc(1, sizeof(*rs));
	uint64_t t0 = now_ns();
	uint32_t b = 0;

	if (!rs)
		return 1;
	rs->c = attach(LOCUS_ROLE_RANK, rank, s);
	if (!rs->c)
		return 1;
	rs->rank = rank;
	rs->stage = locus_client_stage(rs->c, NULL);
	/* a batch may need every rank: start once all are attached */
	__atomic_add_fetch(&S->ranks_up, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&S->ranks_up, __ATOMIC_ACQUIRE) < O.ranks && !expired(t0))
		nap_us(100);
	t0 = now_ns();
	s->t_start_ns = t0;
	rs->dispatch_done = -1;
	while (!expired(t0)) {
		struct locus_desc d[32];
		int n;

		if (b < O.batches && rs->dispatch_done == -1) {
			struct locus_desc q = { .op = LOCUS_OP_DISPATCH, .id = b, .off = 0,
						.len = (uint32_t)locus_dispatch_req_len(O.tokens,
											T->k) };

			if (rs->got_pairs == 0 && rs->want_pairs == 0) {
				build_batch(rs, b);
				memset(rs->got, 0, sizeof(rs->got));
				rs->batch = b;
				rs->want_pairs = O.tokens * T->k;
			}
			if (locus_client_submit(rs->c, &q, 1) == 1) {
				rs->dispatch_done = 0;
				s->submitted++;
			}
		}
		if (rs->n_pending) {
			n = (int)LOCUS_MIN(rs->n_pending, 32u);
			memcpy(d, rs->pending, sizeof(d[0]) * (size_t)n);
			rs->n_pending -= (uint32_t)n;
			memmove(rs->pending, rs->pending + n, sizeof(d[0]) * rs->n_pending);
		} else {
			n = locus_client_poll(rs->c, d, 32);
		}
		for (int i = 0; i < n; i++)
			handle(rs, s, &d[i]);
		if (rs->dispatch_done == 1 && rs->got_pairs == rs->want_pairs) {
			b++;
			rs->got_pairs = rs->want_pairs = 0;
			rs->dispatch_done = b < O.batches ? -1 : 3;
		} else if (rs->dispatch_done == 2) {
			rs->got_pairs = rs->want_pairs = 0;
			b++;
			rs->dispatch_done = b < O.batches ? -1 : 3;
		}
		if (b >= O.batches && !s->t_end_ns)
			s->t_end_ns = now_ns();
		/* after our own batches, keep answering the others until told to stop */
		if (b >= O.batches && __atomic_load_n(&S->done, __ATOMIC_ACQUIRE) && !rs->comb_busy)
			break;
		if (!n)
			nap_us(20);
	}
	if (b < O.batches) {
		snprintf(s->why, sizeof(s->why), "rank %u finished %u of %u batches", rank, b,
			 O.batches);
		s->failed = 1;
	}
	locus_client_detach(rs->c);
	free(rs);
	return s->failed;
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

static void usage(void)
{
	fprintf(stderr,
		"usage: locus-loadgen --trace FILE [-i INSTANCE] [--decoders N] [--ranks N]\n"
		"         [--prefills N] [--requests N] [--batches N] [--tokens N]\n"
		"         [--row-bytes N] [--decode-us N] [--seconds N] [--midway-cmd CMD]\n"
		"         [--eldr-table TABLE]   (adds in-process baselines to the figures)\n");
}

static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "instance", required_argument, NULL, 'i' },
		{ "trace", required_argument, NULL, 't' },
		{ "decoders", required_argument, NULL, 'd' },
		{ "ranks", required_argument, NULL, 'r' },
		{ "prefills", required_argument, NULL, 'p' },
		{ "requests", required_argument, NULL, 'n' },
		{ "batches", required_argument, NULL, 'b' },
		{ "tokens", required_argument, NULL, 'T' },
		{ "row-bytes", required_argument, NULL, 'R' },
		{ "decode-us", required_argument, NULL, 'D' },
		{ "seconds", required_argument, NULL, 's' },
		{ "midway-cmd", required_argument, NULL, 'm' },
		{ "eldr-table", required_argument, NULL, 'e' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "i:", opts, NULL)) != -1) {
		unsigned long v = optarg ? strtoul(optarg, NULL, 10) : 0;

		switch (c) {
		case 'i': O.instance = optarg; break;
		case 't': O.trace = optarg; break;
		case 'd': O.decoders = (uint32_t)v; break;
		case 'r': O.ranks = (uint32_t)v; break;
		case 'p': O.prefills = (uint32_t)v; break;
		case 'n': O.requests = (uint32_t)v; break;
		case 'b': O.batches = (uint32_t)v; break;
		case 'T': O.tokens = (uint32_t)v; break;
		case 'R': O.row_bytes = (uint32_t)v; break;
		case 'D': O.decode_us = (uint32_t)v; break;
		case 's': O.seconds = (uint32_t)v; break;
		case 'm': O.midway_cmd = optarg; break;
		case 'e': O.eldr_table = optarg; break;
		default: return -1;
		}
	}
	if (!O.trace || optind != argc || O.decoders + O.ranks + O.prefills > MAX_PROCS ||
	    O.prefills == 0 || O.tokens == 0 || O.tokens > 4096 || O.row_bytes == 0 ||
	    O.row_bytes > 65536 || (uint64_t)O.tokens * O.row_bytes > 256 * 1024 || !O.seconds)
		return -1;
	return 0;
}

static pid_t spawn(int (*fn)(uint32_t, struct proc_stats *), uint32_t arg, struct proc_stats *s)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(fn(arg, s));
	return pid;
}

int main(int argc, char **argv)
{
	struct locus_error err;
	pid_t pids[MAX_PROCS];
	uint32_t np = 0, p0, r0, d0;
	uint64_t sub = 0, comp = 0, ok = 0, errs = 0, lost = 0, corrupt = 0, dup = 0;
	uint64_t rows_out = 0, delivered = 0, verified = 0, retries = 0, lat[LAT_BUCKETS] = { 0 };
	uint64_t sig_retries = 0;
	uint64_t pre_t0 = UINT64_MAX, pre_t1 = 0, rk_t0 = UINT64_MAX, rk_t1 = 0;
	int failed = 0, midway_done = 0, status;

	if (parse_args(argc, argv) < 0) {
		usage();
		return 2;
	}
	if (locus_trace_load(O.trace, NULL, &T, &err) < 0) {
		fprintf(stderr, "locus-loadgen: %s\n", err.msg);
		return 1;
	}
	S = mmap(NULL, sizeof(*S), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (S == MAP_FAILED)
		return 1;
	memset(S, 0, sizeof(*S));
	d0 = np;
	for (uint32_t i = 0; i < O.decoders; i++, np++)
		pids[np] = spawn(run_decoder, i, &S->st[np]);
	r0 = np;
	for (uint32_t i = 0; i < O.ranks; i++, np++)
		pids[np] = spawn(run_rank, i, &S->st[np]);
	nap_us(200000); /* decoders attach and report before traffic starts */
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
		for (uint32_t i = r0; i < p0; i++)
			busy |= !S->st[i].t_end_ns && !S->st[i].failed;
		if (!busy)
			break;
		nap_us(1000);
	}
	/* decoders may still hold deliveries in their rings: let them drain (bounded) */
	for (int w = 0; w < 5000; w++) {
		uint64_t routed = 0, got = 0;

		for (uint32_t i = p0; i < np; i++)
			routed += __atomic_load_n(&S->st[i].ok, __ATOMIC_RELAXED);
		for (uint32_t i = d0; i < r0; i++)
			got += __atomic_load_n(&S->st[i].delivered, __ATOMIC_RELAXED);
		if (got >= routed)
			break;
		nap_us(1000);
	}
	__atomic_store_n(&S->done, 1, __ATOMIC_RELEASE);
	for (uint32_t i = d0; i < p0; i++) {
		waitpid(pids[i], &status, 0);
		failed |= !WIFEXITED(status) || WEXITSTATUS(status);
	}

	for (uint32_t i = 0; i < np; i++) {
		struct proc_stats *s = &S->st[i];

		if (s->failed) {
			fprintf(stderr, "locus-loadgen: process %u failed: %s\n", i, s->why);
			failed = 1;
		}
		corrupt += s->corrupt;
		dup += s->duplicate;
		if (i >= p0) {
			sub += s->submitted;
			comp += s->completed;
			ok += s->ok;
			errs += s->errors;
			sig_retries += s->retries;
			for (int b = 0; b < LAT_BUCKETS; b++)
				lat[b] += s->lat_hist[b];
			pre_t0 = s->t_start_ns < pre_t0 ? s->t_start_ns : pre_t0;
			pre_t1 = s->t_end_ns > pre_t1 ? s->t_end_ns : pre_t1;
		} else if (i >= r0) {
			rows_out += s->rows_out;
			retries += s->retries;
			errs += s->errors;
			rk_t0 = s->t_start_ns < rk_t0 ? s->t_start_ns : rk_t0;
			rk_t1 = s->t_end_ns > rk_t1 ? s->t_end_ns : rk_t1;
		} else {
			delivered += s->delivered;
			verified += s->verified;
		}
	}
	lost = sub - comp;
	printf("signatures: %llu submitted, %llu completed (%llu routed, %llu refused), %llu lost, "
	       "%llu delivered to decoders, %llu verified, %llu inbox-full retries\n",
	       (unsigned long long)sub, (unsigned long long)comp, (unsigned long long)ok,
	       (unsigned long long)(comp - ok), (unsigned long long)lost,
	       (unsigned long long)delivered, (unsigned long long)verified,
	       (unsigned long long)sig_retries);
	printf("decision latency (client submit -> completion): p50 %.1f us, p99 %.1f us; "
	       "%.0f routed requests/s\n",
	       lat_quantile(lat, 0.5) / 1e3, lat_quantile(lat, 0.99) / 1e3,
	       pre_t1 > pre_t0 ? (double)comp * 1e9 / (double)(pre_t1 - pre_t0) : 0.0);
	printf("dispatch: %u ranks x %u batches of %u tokens x top-%u, %llu rows out, "
	       "%llu inbox-full retries; %.0f rows/s\n",
	       O.ranks, O.batches, O.tokens, T->k, (unsigned long long)rows_out,
	       (unsigned long long)retries,
	       rk_t1 > rk_t0 ? (double)rows_out * 1e9 / (double)(rk_t1 - rk_t0) : 0.0);
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
	printf("checks: %llu corrupt, %llu duplicate, %llu errors\n", (unsigned long long)corrupt,
	       (unsigned long long)dup, (unsigned long long)errs);
	if (lost || corrupt || dup || errs || delivered != ok || verified != delivered)
		failed = 1;
	printf("%s\n", failed ? "loadgen: FAILED" : "loadgen: ok");
	locus_trace_free(T);
	return failed;
}
