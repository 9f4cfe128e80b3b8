// SPDX-License-Identifier: MIT
/*
 * bench_dataplane ep-dispatch: the expert-parallel dispatch collective
 * (locus_ep.h) from one client thread driving every rank of the node, as
 * tools/python/bench_python.py drives the Python Buffer: the same batches
 * (rank r's i-th: trace request j = (i x ranks + r) mod 16, N tokens of it
 * at layer j mod L, its real top-k, gates 1/k), rows staged in place, window
 * 1 (a dispatch is a collective: one batch per rank in flight). A round
 * begins every rank's dispatch, polls each until every one is in, then
 * copies each out (recv_x, ids, weights, counts per expert, into buffers
 * made once) and frees its handle. It is the C side of Python's dispatch:
 * the same collective without the Python layer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dp.h"
#include "locus_ep.h"
#include "locus_trace.h"

#define N_BATCH   16
#define WARM_ROUNDS 40

struct eprank {
	struct bd_att a;
	struct locus_ep *ep;
	void *recv_x;
	int64_t *recv_idx;
	float *recv_w;
	struct locus_row_ref *refs;
	uint32_t *per_expert;
	uint32_t src_count[BD_MAX_ATT];
};

struct epctx {
	const struct bd_opts *o;
	struct locus_trace *T;
	struct eprank r[BD_MAX_ATT];
	uint32_t R, row_bytes;
	int64_t *ids;            /* [N_BATCH][tokens][k] */
	float *gates;            /* [tokens][k] */
};

/* One round: every rank's dispatch begun, polled until all are in, copied out. Rows, or -1. */
static int64_t round_once(struct epctx *x, uint64_t i)
{
	const struct locus_trace *T = x->T;
	struct locus_ep_recv rc[BD_MAX_ATT];
	struct locus_error err = { 0 };
	uint32_t k = T->k, done = 0, n_done = 0;
	int64_t rows = 0;

	for (uint32_t r = 0; r < x->R; r++) {
		uint32_t j = (uint32_t)((i * x->R + r) % N_BATCH);
		struct locus_ep_dispatch_args a = {
			.layer = (uint16_t)(j % T->n_layers), .top_k = (uint16_t)k,
			.n_tokens = x->o->tokens, .row_bytes = x->row_bytes,
			.n_experts = T->n_experts, .x = x->r[r].a.stage,
			.topk_idx = x->ids + (size_t)j * x->o->tokens * k, .topk_weights = x->gates,
		};

		if (locus_ep_dispatch_begin(x->r[r].ep, &a, &err) < 0)
			goto err;
	}
	while (n_done < x->R)
		for (uint32_t r = 0; r < x->R; r++) {
			int ret;

			if (done >> r & 1)
				continue;
			ret = locus_ep_dispatch_poll(x->r[r].ep, &rc[r], &err);
			if (ret < 0)
				goto err;
			if (ret) {
				done |= 1u << r;
				n_done++;
			}
		}
	for (uint32_t r = 0; r < x->R; r++) {
		struct eprank *p = &x->r[r];
		struct locus_ep_recv_out out = {
			.recv_x = p->recv_x, .recv_idx = p->recv_idx, .recv_weights = p->recv_w,
			.per_expert = p->per_expert, .n_experts = T->n_experts, .refs = p->refs,
			.src_count = p->src_count,
		};
		struct locus_ep_handle *h;

		if (locus_ep_dispatch_end(p->ep, &out, &h, &err) < 0)
			goto err;
		rows += rc[r].n_recv;
		locus_ep_handle_free(h);
	}
	return rows;
err:
	fprintf(stderr, "bench_dataplane: ep-dispatch round %llu: %s\n", (unsigned long long)i,
		err.msg);
	return -1;
}

/* The batches bench_python.py makes: request j's tokens t mod its length, at layer j mod L. */
static int make_batches(struct epctx *x)
{
	const struct locus_trace *T = x->T;
	uint32_t n = x->o->tokens, k = T->k;

	x->ids = malloc((size_t)N_BATCH * n * k * sizeof(*x->ids));
	x->gates = malloc((size_t)n * k * sizeof(*x->gates));
	if (!x->ids || !x->gates)
		return -1;
	for (uint32_t j = 0; j < N_BATCH; j++) {
		const struct locus_trace_req *q = &T->reqs[j % T->n_requests];

		for (uint32_t t = 0; t < n; t++)
			for (uint32_t s = 0; s < k; s++)
				x->ids[((size_t)j * n + t) * k + s] =
					q->prompt[((size_t)(t % q->prompt_len) * T->n_layers +
						   j % T->n_layers) * k + s];
	}
	for (size_t i = 0; i < (size_t)n * k; i++)
		x->gates[i] = 1.0f / (float)k;
	return 0;
}

static int ep_open(struct epctx *x, uint32_t r)
{
	struct eprank *p = &x->r[r];
	struct locus_error err = { 0 };
	uint64_t half, cap = (uint64_t)x->R * x->o->tokens;
	struct locus_ep_params prm;

	if (bd_attach(&p->a, x->o->instance, LOCUS_ROLE_RANK, r) < 0)
		return -1;
	/* the stage split as the Python Buffer's default: 3/8, 3/8, then the requests */
	half = p->a.stage_size * 3 / 4 / 2 / 64 * 64;
	prm = (struct locus_ep_params){ .rank = r, .n_ranks = x->R, .x_off = 0, .x_len = half,
					.y_off = half, .y_len = half, .req_off = 2 * half,
					.req_len = (p->a.stage_size - 2 * half) * 3 / 4 / 64 * 64,
					.timeout_ms = 10000 };
	if (locus_ep_create(p->a.c, &prm, &p->ep, &err) < 0) {
		fprintf(stderr, "bench_dataplane: ep-dispatch rank %u: %s\n", r, err.msg);
		return -1;
	}
	p->recv_x = malloc(cap * x->o->row_bytes[0]);
	p->recv_idx = malloc(cap * x->T->k * sizeof(*p->recv_idx));
	p->recv_w = malloc(cap * x->T->k * sizeof(*p->recv_w));
	p->refs = malloc(cap * sizeof(*p->refs));
	p->per_expert = malloc(x->T->n_experts * sizeof(*p->per_expert));
	if (!p->recv_x || !p->recv_idx || !p->recv_w || !p->refs || !p->per_expert)
		return -1;
	return 0;
}

static void ep_close(struct eprank *p)
{
	locus_ep_destroy(p->ep);
	bd_detach(&p->a, 1);
	free(p->recv_x);
	free(p->recv_idx);
	free(p->recv_w);
	free(p->refs);
	free(p->per_expert);
}

int bd_ep_dispatch(const struct bd_opts *o)
{
	struct locus_error err = { 0 };
	struct epctx x = { .o = o, .R = o->ranks, .row_bytes = o->row_bytes[0] };
	uint32_t opened = 0;
	uint64_t rows = 0, rounds = 0, t0, t1, end;
	int ret = 1;

	if (x.R > BD_MAX_ATT || x.R > 32 || o->n_row_bytes != 1) {
		fprintf(stderr, "bench_dataplane: ep-dispatch: at most 32 ranks, one --row-bytes\n");
		return 1;
	}
	if (locus_trace_load(o->trace, NULL, &x.T, &err) < 0) {
		fprintf(stderr, "bench_dataplane: %s\n", err.msg);
		return 1;
	}
	if (make_batches(&x) < 0 || bd_pin("ep-dispatch client thread", o->cpus[0]) < 0)
		goto out;
	for (; opened < x.R; opened++)
		if (ep_open(&x, opened) < 0)
			goto out;
	for (uint32_t r = 0; r < x.R; r++)  /* rank r's rows: bytes r + 1, staged in place */
		memset(x.r[r].a.stage, (int)r + 1, (size_t)o->tokens * x.row_bytes);
	for (uint64_t i = 0; i < WARM_ROUNDS; i++)
		if (round_once(&x, i) < 0)
			goto out;
	t0 = bd_now_ns();
	end = t0 + (uint64_t)(o->seconds * 1e9);
	for (t1 = t0; t1 < end; t1 = bd_now_ns(), rounds++) {
		int64_t n = round_once(&x, rounds);

		if (n < 0)
			goto out;
		rows += (uint64_t)n;
	}
	printf("ep-dispatch %u B rows: %u ranks (one thread, locus_ep, window 1), %u tokens x "
	       "top-%u, %llu collective rounds: %.0f rows/s (%.0f us per round)\n", x.row_bytes,
	       x.R, o->tokens, x.T->k, (unsigned long long)rounds,
	       (double)rows * 1e9 / (double)(t1 - t0), (double)(t1 - t0) / 1e3 / (double)rounds);
	fflush(stdout);
	ret = 0;
out:
	for (uint32_t r = 0; r < opened; r++)
		ep_close(&x.r[r]);
	free(x.ids);
	free(x.gates);
	locus_trace_free(x.T);
	return ret;
}
