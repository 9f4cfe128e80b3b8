// SPDX-License-Identifier: MIT
/*
 * bench_dataplane dispatch: DISPATCH batches through locusd from one client
 * thread holding every rank of the node, against memcpy of the same rows in
 * the same run.
 *
 * Each rank keeps `window` batches in flight: N tokens of the trace at one
 * layer (its real top-k), rows of row_bytes in its stage; locusd plans them
 * with the pushed GRACE table, hands the same-GPU rows over in place and
 * copies the others into the destination ranks' inboxes, which release
 * every message at once (a GPU rank would not read the rows with the CPU
 * either). Cache-hot: every batch of a rank sends the same rows; cache-cold:
 * batches walk the whole stage (4 ranks x the stage, far above the L3).
 *
 * The baseline copies rows of the same size with memcpy on this thread:
 * the same source working set (the rows the batches walk), the same
 * destination working set (the inbox bytes locusd actually used, measured
 * from the deliveries) and the same copies per token row (measured).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dp.h"
#include "locus_dispatch.h"
#include "locus_trace.h"
#include "locus_wire.h"

#define WARM_NS   200000000ull

struct drank {
	struct bd_att a;
	uint32_t rank;
	struct bd_win win;
	uint64_t inbox_hi;            /* highest inbox byte a delivery used, from the inbox start */
};

struct dctx {
	const struct bd_opts *o;
	struct locus_trace *T;
	struct drank r[BD_MAX_ATT];
	uint32_t R, row_bytes, window;
	uint64_t batch_bytes, n_cold;
	int cold;
	struct bd_bodies bodies;
	/* one row */
	uint64_t batches, rows_copied, rows_in_place, msgs, bad;
};

static uint64_t rows_off(const struct dctx *x, uint64_t b)
{
	return BD_ROWS_BASE + (x->cold ? b % x->n_cold : 0) * x->batch_bytes;
}

/* Rows delivered to rank dst: count them; when checking, every byte against the source. */
static void rows_in(struct dctx *x, struct drank *dst, const struct locus_desc *d, int check)
{
	const uint8_t *msg = locus_client_inbox(dst->a.c, d);
	const struct locus_rows_hdr *h;
	uint64_t src, b;

	x->msgs++;
	if (!msg) {
		x->bad++;
		return;
	}
	h = locus_rows_hdr_of((void *)msg);
	dst->inbox_hi = LOCUS_MAX(dst->inbox_hi, d->off + d->len - dst->a.stage_size);
	if (h->flags & LOCUS_ROWS_IN_PLACE)
		x->rows_in_place += h->n_rows;
	else
		x->rows_copied += h->n_rows;
	if (check) {
		struct locus_error err;
		const struct locus_row_ref *refs = locus_rows_refs((void *)msg);

		src = h->batch_id & 0xff;
		b = h->batch_id >> 8;
		if (locus_rows_msg_check(msg, d->len, x->R, dst->a.stage_size, &err) < 0 ||
		    src >= x->R || h->row_bytes != x->row_bytes) {
			if (!x->bad++)
				fprintf(stderr, "bench_dataplane: rows message to rank %u: %s\n",
					dst->rank, err.msg);
		} else {
			for (uint32_t j = 0; j < h->n_rows; j++) {
				const uint8_t *want = x->r[src].a.stage + rows_off(x, b) +
						      (size_t)refs[j].token * x->row_bytes;
				const uint8_t *got = h->flags & LOCUS_ROWS_IN_PLACE
					? dst->a.stage + h->rows_off +
						  (size_t)refs[j].token * x->row_bytes
					: msg + h->rows_off + (size_t)j * x->row_bytes;

				if ((refs[j].token >= x->o->tokens ||
				     memcmp(got, want, x->row_bytes)) && !x->bad++)
					fprintf(stderr, "bench_dataplane: rank %u got token %u of "
						"batch %llu of rank %llu wrong\n", dst->rank,
						refs[j].token, (unsigned long long)b,
						(unsigned long long)src);
			}
		}
	}
	if (locus_client_release_slot(dst->a.c, d->slot) < 0)
		x->bad++;
}

static void on_rows(void *ctx, uint32_t i, const struct locus_desc *d, int check)
{
	struct dctx *x = ctx;

	rows_in(x, &x->r[i], d, check);
}

static int poll_all(struct dctx *x, int check, int *idle)
{
	struct bd_poll_acc acc = { 0 };

	*idle = 1;
	for (uint32_t i = 0; i < x->R; i++) {
		int n = bd_poll_rank(&x->r[i].a, &x->r[i].win, on_rows, x, i, check, &acc);

		if (n < 0)
			return -1;
		*idle &= n == 0;
	}
	x->batches += acc.batches;
	x->bad += acc.bad;
	return 0;
}

/* Every rank keeps the window full for ns, then everything drains. Elapsed ns, or 0. */
static uint64_t run(struct dctx *x, uint64_t ns, int check)
{
	uint64_t t0 = bd_now_ns(), end = t0 + ns, t1;
	int idle, busy;

	x->batches = x->rows_copied = x->rows_in_place = x->msgs = 0;
	for (;;) {
		uint64_t now = bd_now_ns();

		busy = 0;
		for (uint32_t i = 0; i < x->R; i++)
			for (uint32_t w = 0; w < x->window; w++) {
				struct drank *r = &x->r[i];

				if (!r->win.id_sub[w] && now < end &&
				    bd_submit_dispatch(&r->a, &r->win, &x->bodies, r->rank, x->R, w,
						       x->row_bytes, rows_off(x, r->win.next_b), 0) < 0)
					break;
				busy |= r->win.id_sub[w] != 0;
			}
		if (!busy && now >= end)
			break;
		if (poll_all(x, check, &idle) < 0)
			return 0;
	}
	t1 = bd_now_ns();
	/*
	 * Deliveries still in the rings: with one engine a completion comes after
	 * its rows; with several, a delivery handed to the receiver's engine may
	 * come later (that engine's next poll, on a core it may share): drain
	 * until nothing came for 20 ms (at most 2 s), so that none is checked in
	 * the next row against that row's layout.
	 */
	for (uint64_t quiet = t1 + 20000000ull, stop = t1 + 2000000000ull;;) {
		uint64_t now = bd_now_ns();

		if (now >= quiet || now >= stop || poll_all(x, check, &idle) < 0)
			break;
		if (!idle)
			quiet = now + 20000000ull;
	}
	if (x->bad) {
		fprintf(stderr, "bench_dataplane: dispatch: %llu bad deliveries\n",
			(unsigned long long)x->bad);
		return 0;
	}
	return t1 - t0;
}

/*
 * memcpy of rows: token rows walk src_ws (row after row), each copied to
 * `fanout` destinations on average, destinations walking dst_ws. Bytes/s.
 */
static double memcpy_rate(size_t row, size_t src_ws, size_t dst_ws, double fanout, double secs)
{
	uint8_t *src = aligned_alloc(4096, LOCUS_ALIGN_UP(src_ws, 4096));
	uint8_t *dst = aligned_alloc(4096, LOCUS_ALIGN_UP(dst_ws, 4096));
	size_t so = 0, dof = 0, n_src = src_ws / row, n_dst = dst_ws / row;
	uint64_t bytes = 0, t0, t1;
	double acc = 0, rate = 0;

	if (!src || !dst || !n_src || !n_dst)
		goto out;
	memset(src, 1, src_ws);
	memset(dst, 2, dst_ws);
	t0 = bd_now_ns();
	do {
		for (int i = 0; i < 256; i++) {
			for (acc += fanout; acc >= 1.0; acc -= 1.0) {
				memcpy(dst + dof * row, src + so * row, row);
				dof = dof + 1 == n_dst ? 0 : dof + 1;
				bytes += row;
			}
			so = so + 1 == n_src ? 0 : so + 1;
		}
		__asm__ volatile("" : : "r"(dst) : "memory");
		t1 = bd_now_ns();
	} while (t1 - t0 < (uint64_t)(secs * 1e9));
	rate = (double)bytes * 1e9 / (double)(t1 - t0);
out:
	free(src);
	free(dst);
	return rate;
}

static int one_row(struct dctx *x, uint32_t row_bytes, int cold)
{
	const struct bd_opts *o = x->o;
	uint64_t ns, inbox = 0;
	double rows_s, copied_mb, mc, fanout, tok;
	size_t src_ws;

	x->row_bytes = row_bytes;
	x->cold = cold;
	x->batch_bytes = LOCUS_ALIGN_UP((uint64_t)o->tokens * row_bytes, 4096);
	x->n_cold = (x->r[0].a.stage_size - BD_ROWS_BASE) / x->batch_bytes;
	if (!x->n_cold) {
		fprintf(stderr, "bench_dataplane: the stage holds no batch of %u x %u B\n",
			o->tokens, row_bytes);
		return -1;
	}
	for (uint32_t i = 0; i < x->R; i++) {
		/* every row byte written once: the pages exist, the content is known */
		uint8_t *p = x->r[i].a.stage + BD_ROWS_BASE;
		size_t len = (cold ? x->n_cold : 1) * x->batch_bytes;

		for (size_t k = 0; k < len; k++)
			p[k] = (uint8_t)(i * 131 + k * 7 + k / row_bytes);
		x->r[i].inbox_hi = 0;
	}
	if (!run(x, WARM_NS, 1)) /* every row checked byte for byte */
		return -1;
	ns = run(x, (uint64_t)(o->seconds * 1e9), 0);
	if (!ns)
		return -1;
	for (uint32_t i = 0; i < x->R; i++)
		inbox += x->r[i].inbox_hi;
	tok = (double)x->batches * o->tokens;
	fanout = tok > 0 ? (double)x->rows_copied / tok : 0;
	rows_s = (double)(x->rows_copied + x->rows_in_place) * 1e9 / (double)ns;
	copied_mb = (double)x->rows_copied * row_bytes * 1e3 / (double)ns;
	src_ws = (size_t)x->R * (cold ? x->n_cold : 1) * x->batch_bytes;
	mc = memcpy_rate(row_bytes, src_ws, inbox ? inbox : row_bytes, fanout, o->seconds / 2);
	printf("dispatch %u B rows, %s: %u ranks x window %u, %u tokens x top-%u: %.0f rows/s "
	       "(%.0f copied = %.0f MB/s, %.0f handed over in place); memcpy of the same rows "
	       "(source %.1f MiB, destination %.1f MiB, %.2f copies per token) %.0f MB/s; "
	       "through locusd = %.3fx\n", row_bytes, cold ? "cache-cold" : "cache-hot", x->R,
	       x->window, o->tokens, x->T->k, rows_s, (double)x->rows_copied * 1e9 / (double)ns,
	       copied_mb, (double)x->rows_in_place * 1e9 / (double)ns, src_ws / 1048576.0,
	       inbox / 1048576.0, fanout, mc / 1e6, mc > 0 ? copied_mb * 1e6 / mc : 0.0);
	fflush(stdout);
	return 0;
}

int bd_dispatch(const struct bd_opts *o)
{
	struct locus_error err = { 0 };
	struct dctx x = { .o = o, .R = o->ranks, .window = o->dwindow };
	uint32_t attached = 0;
	int ret = 1;

	if (x.window > BD_MAX_WIN || x.R > BD_MAX_ATT)
		return 1;
	if (locus_trace_load(o->trace, NULL, &x.T, &err) < 0) {
		fprintf(stderr, "bench_dataplane: %s\n", err.msg);
		return 1;
	}
	if (bd_bodies_make(&x.bodies, x.T, o->tokens) < 0 || bd_pin("dispatch client thread", o->cpus[0]) < 0)
		goto out;
	for (; attached < x.R; attached++) {
		x.r[attached].rank = attached;
		x.r[attached].win.next_b = 1; /* descriptor ids are never 0: 0 marks a free slot */
		if (bd_attach(&x.r[attached].a, o->instance, LOCUS_ROLE_RANK, attached) < 0)
			goto out;
	}
	printf("dispatch: %u ranks attached to one thread, rows from the trace's top-%u "
	       "routings, the pushed GRACE table\n", x.R, x.T->k);
	ret = 0;
	for (uint32_t i = 0; i < o->n_row_bytes && !ret; i++)
		for (int cold = 0; cold < 2 && !ret; cold++)
			ret = one_row(&x, o->row_bytes[i], cold) < 0;
out:
	for (uint32_t i = 0; i < attached; i++)
		bd_detach(&x.r[i].a, 1);
	free(x.bodies.buf);
	locus_trace_free(x.T);
	return ret;
}
