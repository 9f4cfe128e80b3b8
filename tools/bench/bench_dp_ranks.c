// SPDX-License-Identifier: MIT
/*
 * bench_dataplane's dispatching ranks (bench_dp.h): the bodies, the window
 * and the poll the dispatch and inter-node parts share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dp.h"
#include "locus_dispatch.h"
#include "locus_trace.h"
#include "locus_wire.h"

int bd_bodies_make(struct bd_bodies *b, const struct locus_trace *T, uint32_t tokens)
{
	b->req_len = locus_dispatch_req_len(tokens, T->k);
	b->body_len = b->req_len - sizeof(struct locus_dispatch_req);
	b->tokens = tokens;
	b->k = T->k;
	b->n_layers = T->n_layers;
	if (b->req_len > BD_REQ_SLOT)
		return -1;
	b->buf = calloc(BD_N_BODIES, b->body_len);
	if (!b->buf)
		return -1;
	for (uint32_t j = 0; j < BD_N_BODIES; j++) {
		const struct locus_trace_req *r = &T->reqs[j % T->n_requests];
		uint8_t *body = b->buf + j * b->body_len;
		uint16_t *ex = (uint16_t *)body;
		float *g = (float *)(body + locus_ids_bytes(tokens, T->k));

		for (uint32_t t = 0; t < tokens; t++) {
			memcpy(ex + (size_t)t * T->k,
			       locus_trace_tok(T, r->prompt, t % r->prompt_len, j % T->n_layers),
			       2u * T->k);
			for (uint32_t k = 0; k < T->k; k++)
				g[t * T->k + k] = 1.0f / T->k;
		}
	}
	return 0;
}

int bd_submit_dispatch(struct bd_att *a, struct bd_win *win, const struct bd_bodies *b,
		       uint32_t rank, uint32_t R, uint32_t w, uint32_t row_bytes, uint64_t rows_off,
		       uint32_t region)
{
	uint64_t n = win->next_b, off = (uint64_t)w * BD_REQ_SLOT;
	uint32_t j = (uint32_t)((n * R + rank) % BD_N_BODIES);
	struct locus_dispatch_req *q = (struct locus_dispatch_req *)(a->stage + off);
	struct locus_desc d = { .op = LOCUS_OP_DISPATCH, .layer = (uint16_t)(j % b->n_layers),
				.id = (n << 8) | w, .off = off, .len = (uint32_t)b->req_len,
				.flags = region ? LOCUS_DESC_F_REGION : 0, .region = region };

	*q = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = d.layer,
					  .top_k = b->k, .n_tokens = b->tokens,
					  .row_bytes = row_bytes, .rows_off = rows_off,
					  .batch_id = (n << 8) | rank };
	memcpy(q + 1, b->buf + (size_t)j * b->body_len, b->body_len);
	if (locus_client_submit(a->c, &d, 1) != 1)
		return -1;
	win->id_sub[w] = d.id;
	win->next_b++;
	return 0;
}

int bd_poll_rank(struct bd_att *a, struct bd_win *win,
		 void (*rows_in)(void *ctx, uint32_t idx, const struct locus_desc *d, int check),
		 void *ctx, uint32_t idx, int check, struct bd_poll_acc *acc)
{
	struct locus_desc d[32];
	int n = locus_client_poll(a->c, d, 32);

	if (n < 0) {
		fprintf(stderr, "bench_dataplane: poll: %s\n", locus_strerror(n));
		return -1;
	}
	for (int k = 0; k < n; k++) {
		uint32_t w = (uint32_t)(d[k].id & 0xff);

		if (d[k].op == LOCUS_OP_ROWS_IN) {
			rows_in(ctx, idx, &d[k], check);
			continue;
		}
		if (d[k].op != LOCUS_OP_DISPATCH || w >= BD_MAX_WIN || win->id_sub[w] != d[k].id) {
			acc->bad++;
			continue;
		}
		if (d[k].status == -LOCUS_EFULL) {
			/* an inbox was full: nothing was delivered, the same batch again */
			struct locus_desc q = d[k];

			q.status = 0;
			if (locus_client_submit(a->c, &q, 1) == 1)
				continue;
		}
		if (d[k].status) {
			fprintf(stderr, "bench_dataplane: DISPATCH failed: %s\n",
				locus_strerror(d[k].status));
			return -1;
		}
		win->id_sub[w] = 0;
		acc->batches++;
		acc->rows_sent += d[k].aux; /* the rows locusd delivered for the batch */
	}
	return n;
}
