// SPDX-License-Identifier: MIT
/*
 * bench_dataplane internode: locusd's inter-node byte rate, from one client
 * thread holding ranks on two locusd nodes (tests/vm/guest-bench.sh runs
 * it against ib_write_bw on the same devices in the same run).
 *
 * The sending ranks (on the first node) keep `window` DISPATCH batches each
 * in flight: N tokens of the trace at one layer (its real top-k), rows of
 * row_bytes in the stage, the same rows every batch (ib_write_bw sends from
 * one buffer too). The GRACE table (`bench_dataplane grace-table --on-node
 * 1`) places every expert on the other node's GPUs, so every row crosses,
 * one direction, as ib_write_bw's writes do. The receiving ranks release
 * each message at once; during a warm-up every row is checked byte for
 * byte against its source first.
 *
 * The figure: bytes of the rows messages the receivers got (headers
 * included: what crossed) from the first submit of the timed phase to the
 * last arrival, once everything drained. --region puts the senders' rows in
 * dma-bufs registered with their locusd (gathered zero-copy where the device
 * registers them); --nap-us sleeps after a poll round that found nothing, so
 * that a client sharing a CPU with locusd leaves it to locusd and the device.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_dp.h"
#include "loadgen.h"
#include "locus_dispatch.h"
#include "locus_grace.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locus_trace.h"
#include "locus_wire.h"

#define DRAIN_NS   30000000000ull  /* rows still missing after this long without any: lost */

struct irank {
	struct bd_att a;
	uint32_t rank;
	int sends;
	struct bd_win win;
	/* --region: the rows in a dma-buf registered with the rank's locusd */
	int dmafd;
	uint8_t *rows;                /* the rows: in the stage at BD_ROWS_BASE, or the region */
	size_t rlen;
	uint32_t region;
};

struct ictx {
	const struct bd_opts *o;
	struct locus_trace *T;
	struct irank r[BD_MAX_ATT];
	uint32_t R;
	struct bd_bodies bodies;
	const char *how;              /* --region: which dma-buf exporter */
	/* one phase */
	uint64_t batches, msgs, rows, bytes, row_bytes_in, bad, last_rx_ns;
	uint64_t rows_sent;           /* the completions' counts of rows delivered */
};

static uint8_t row_byte(uint32_t rank, uint32_t token, uint32_t b)
{
	return (uint8_t)(rank * 131 + token * 7 + b);
}

/* A rows message at dst: counted; when checking, every row against its source's stage. */
static void rows_in(struct ictx *x, struct irank *dst, const struct locus_desc *d, int check)
{
	const uint8_t *msg = locus_client_inbox(dst->a.c, d);
	uint32_t rb = x->o->row_bytes[0];
	const struct locus_rows_hdr *h;
	const struct locus_row_ref *refs;
	struct locus_error err;
	uint32_t src;

	x->msgs++;
	x->last_rx_ns = bd_now_ns();
	if (!msg) {
		x->bad++;
		return;
	}
	h = locus_rows_hdr_of((void *)msg);
	x->rows += h->n_rows;
	x->bytes += d->len;
	x->row_bytes_in += (uint64_t)h->n_rows * rb;
	if (check) {
		refs = locus_rows_refs((void *)msg);
		src = (uint32_t)(h->batch_id & 0xff);
		if (locus_rows_msg_check(msg, d->len, x->R, dst->a.stage_size, &err) < 0 ||
		    src >= x->R || !x->r[src].sends || h->row_bytes != rb ||
		    (h->flags & LOCUS_ROWS_IN_PLACE)) {
			if (!x->bad++)
				fprintf(stderr, "bench_dataplane: rows message to rank %u: %s\n",
					dst->rank, err.msg);
		} else {
			for (uint32_t j = 0; j < h->n_rows; j++) {
				const uint8_t *got = msg + h->rows_off + (size_t)j * rb;
				uint32_t t = refs[j].token;

				for (uint32_t k = 0; k < rb && t < x->o->tokens; k++)
					if (got[k] != row_byte(src, t, k)) {
						t = x->o->tokens;
						break;
					}
				if (t >= x->o->tokens && !x->bad++)
					fprintf(stderr, "bench_dataplane: rank %u got token %u of "
						"rank %u wrong\n", dst->rank, refs[j].token, src);
			}
		}
	}
	if (locus_client_release_slot(dst->a.c, d->slot) != 0 && !x->bad++)
		fprintf(stderr, "bench_dataplane: rank %u: release refused\n", dst->rank);
}

/*
 * A sender's rows: in its stage at BD_ROWS_BASE, or with --region in a dma-buf
 * (udmabuf or vgem, as locus-loadgen --dmabuf makes them) registered with
 * its locusd, which then gathers inter-node rows straight from it.
 */
static int rows_setup(struct irank *r, const struct bd_opts *o, const char **how)
{
	struct locus_error err = { 0 };
	size_t len = (size_t)o->tokens * o->row_bytes[0];

	if (!o->region) {
		if (r->a.stage_size < BD_ROWS_BASE + len) {
			fprintf(stderr, "bench_dataplane: rank %u: stage too small\n", r->rank);
			return -1;
		}
		r->rows = r->a.stage + BD_ROWS_BASE;
		return 0;
	}
	r->rlen = LOCUS_ALIGN_UP(len, (size_t)LOCUS_REGION_ALIGN);
	r->dmafd = lg_dmabuf_create(r->rlen, how);
	if (r->dmafd < 0 || !(r->rows = lg_dmabuf_map(r->dmafd, r->rlen))) {
		fprintf(stderr, "bench_dataplane: rank %u: no dma-buf (udmabuf or vgem)\n",
			r->rank);
		return -1;
	}
	if (locus_client_register_dmabuf(r->a.c, r->dmafd, 0, r->rlen, 30000, &r->region, NULL,
					 &err) < 0) {
		fprintf(stderr, "bench_dataplane: rank %u: registering the %s dma-buf: %s\n",
			r->rank, *how, err.msg);
		return -1;
	}
	lg_dmabuf_sync(r->dmafd, 1);
	return 0;
}

static void on_rows(void *ctx, uint32_t i, const struct locus_desc *d, int check)
{
	struct ictx *x = ctx;

	rows_in(x, &x->r[i], d, check);
}

static int poll_all(struct ictx *x, int check, int *idle)
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
	x->rows_sent += acc.rows_sent;
	x->bad += acc.bad;
	return 0;
}

/*
 * The senders keep their windows full for ns, then everything drains: every
 * batch complete and every row its completion counted arrived (a completion
 * says the writes landed in the peer's inbox, not that the peer's locusd
 * handed them over yet), within DRAIN_NS of the last arrival. The ns from the
 * first submit to the last arrival, or 0.
 */
static uint64_t run(struct ictx *x, uint64_t ns, int check)
{
	uint64_t t0 = bd_now_ns(), end = t0 + ns, now = t0;
	int idle, busy;

	x->batches = x->msgs = x->rows = x->bytes = x->row_bytes_in = x->rows_sent = 0;
	x->last_rx_ns = t0;
	for (uint32_t it = 0;; it++) {
		/* the clock now and then: in the guest it is a system call (HPET) */
		if (!(it & 31))
			now = bd_now_ns();
		busy = 0;
		for (uint32_t i = 0; i < x->R; i++) {
			struct irank *r = &x->r[i];

			for (uint32_t w = 0; r->sends && w < x->o->dwindow; w++) {
				if (!r->win.id_sub[w] && now < end &&
				    bd_submit_dispatch(&r->a, &r->win, &x->bodies, r->rank, x->R, w,
						       x->o->row_bytes[0],
						       r->region ? 0 : BD_ROWS_BASE, r->region) < 0)
					break;
				busy |= r->win.id_sub[w] != 0;
			}
		}
		if (poll_all(x, check, &idle) < 0)
			return 0;
		if (!busy && now >= end && x->rows >= x->rows_sent)
			break;
		/* now is read every 32 rounds: an arrival since may be later than it */
		if (!busy && now >= end && now > x->last_rx_ns && now - x->last_rx_ns >= DRAIN_NS) {
			fprintf(stderr, "bench_dataplane: internode: %llu of %llu rows arrived, none "
				"for %llu ms\n", (unsigned long long)x->rows,
				(unsigned long long)x->rows_sent, DRAIN_NS / 1000000ull);
			return 0;
		}
		/* --nap-us: leave the CPU to locusd and the device while nothing came */
		if (idle && x->o->nap_us)
			usleep(x->o->nap_us);
	}
	if (x->bad) {
		fprintf(stderr, "bench_dataplane: internode: %llu bad deliveries\n",
			(unsigned long long)x->bad);
		return 0;
	}
	return x->last_rx_ns - t0;
}

/*
 * Every sending rank's engine knows every rank of the run as reachable
 * before the first batch: a peer learns of a rank client attached just now
 * from its next load row, and a batch planned before that fails with
 * -LOCUS_EPEERDOWN. 0, or -1 after timeout_ms with a sentence.
 */
static int ranks_live_wait(const struct ictx *x, unsigned timeout_ms)
{
	uint64_t t0 = bd_now_ns();

	for (uint32_t r = 0; r < x->R; r++) {
		while (x->r[r].sends && !lg_ranks_live(x->r[r].a.c, x->R)) {
			if (bd_now_ns() - t0 > (uint64_t)timeout_ms * 1000000ull) {
				fprintf(stderr, "bench_dataplane: rank %u's engine did not see every "
					"rank of the run reachable within %u ms\n", r, timeout_ms);
				return -1;
			}
			usleep(1000);
		}
	}
	return 0;
}

int bd_internode(const struct bd_opts *o)
{
	struct locus_error err = { 0 };
	struct ictx x = { .o = o, .R = o->n_rank_at, .how = "no" };
	uint32_t attached = 0, rb = o->row_bytes[0];
	uint64_t ns;
	int ret = 1;

	if (o->dwindow > BD_MAX_WIN || x.R > BD_MAX_ATT || !o->send_mask)
		return 1;
	if (locus_trace_load(o->trace, NULL, &x.T, &err) < 0) {
		fprintf(stderr, "bench_dataplane: %s\n", err.msg);
		return 1;
	}
	if (bd_bodies_make(&x.bodies, x.T, o->tokens) < 0 ||
	    bd_pin("internode client thread", o->cpus[0]) < 0)
		goto out;
	for (; attached < x.R; attached++) {
		struct irank *r = &x.r[attached];

		r->rank = attached;
		r->win.next_b = 1; /* descriptor ids are never 0: 0 marks a free slot */
		r->sends = (o->send_mask >> attached) & 1;
		if (bd_attach(&r->a, o->rank_at[attached], LOCUS_ROLE_RANK, attached) < 0)
			goto out;
		r->dmafd = -1;
		if (r->sends && rows_setup(r, o, &x.how) < 0)
			goto out;
		for (uint32_t t = 0; r->sends && t < o->tokens; t++)
			for (uint32_t k = 0; k < rb; k++)
				r->rows[(size_t)t * rb + k] = row_byte(attached, t, k);
		if (r->dmafd >= 0)
			lg_dmabuf_sync(r->dmafd, 0);
	}
	if (o->region)
		printf("internode: the senders' rows in %s dma-bufs registered with their locusd\n",
		       x.how);
	if (ranks_live_wait(&x, 30000) < 0)
		goto out;
	if (!run(&x, (uint64_t)(o->warmup * 1e9), 1)) /* every row checked byte for byte */
		goto out;
	printf("internode warm-up: %llu batches, %llu rows in %llu messages, every byte "
	       "checked\n", (unsigned long long)x.batches, (unsigned long long)x.rows,
	       (unsigned long long)x.msgs);
	fflush(stdout); /* the script profiles the timed phase from here */
	ns = run(&x, (uint64_t)(o->seconds * 1e9), 0);
	if (!ns || !x.msgs)
		goto out;
	printf("internode: %llu batches of %u tokens x top-%u, %llu rows of %u B in %llu "
	       "messages (avg %llu B), %llu message bytes in %.3f s: %.4f Gb/s of messages, "
	       "%.4f Gb/s of rows\n", (unsigned long long)x.batches, o->tokens, x.T->k,
	       (unsigned long long)x.rows, rb, (unsigned long long)x.msgs,
	       (unsigned long long)(x.bytes / x.msgs), (unsigned long long)x.bytes, ns / 1e9,
	       (double)x.bytes * 8 / (double)ns, (double)x.row_bytes_in * 8 / (double)ns);
	fflush(stdout);
	ret = 0;
out:
	for (uint32_t i = 0; i < attached; i++) {
		if (x.r[i].region)
			locus_client_unregister_region(x.r[i].a.c, x.r[i].region, 30000, NULL);
		bd_detach(&x.r[i].a, 1);
		if (x.r[i].dmafd >= 0) {
			munmap(x.r[i].rows, x.r[i].rlen);
			close(x.r[i].dmafd);
		}
	}
	free(x.bodies.buf);
	locus_trace_free(x.T);
	return ret;
}

/* ---- a GRACE table with every expert on one node's GPUs ------------------------------------ */

/*
 * Experts e of every layer on rank on_node * gpus + e % gpus, no replicas,
 * every load 1; L x E given, or the trace's. Written sealed to o->out.
 */
int bd_grace_table(const struct bd_opts *o)
{
	struct locus_grace_dims dims = {
		.n_layers = o->layers, .n_experts = o->experts, .n_nodes = o->nodes,
		.gpus_per_node = o->gpus, .max_replicas = 0, .replica_budget = 0,
	};
	struct locus_grace_view v;
	struct locus_error err = { 0 };
	struct locus_trace *T;
	uint32_t N = o->nodes * o->gpus, L, E;
	size_t plen, len;
	uint8_t *blob;
	int ret = 1;

	if (o->trace) {
		if (locus_trace_load(o->trace, NULL, &T, &err) < 0) {
			fprintf(stderr, "bench_dataplane: %s\n", err.msg);
			return 1;
		}
		dims.n_layers = T->n_layers;
		dims.n_experts = T->n_experts;
		locus_trace_free(T);
	}
	L = dims.n_layers;
	E = dims.n_experts;
	dims.capacity = (E + o->gpus - 1) / o->gpus;
	plen = locus_grace_payload_size(&dims);
	len = sizeof(struct locus_tbl_hdr) + plen;
	if (!plen || o->on_node >= o->nodes) {
		fprintf(stderr, "bench_dataplane: grace-table: bad dims\n");
		return 1;
	}
	blob = calloc(1, len);
	if (!blob)
		return 1;
	memcpy(blob + sizeof(struct locus_tbl_hdr), &dims, sizeof(dims));
	if (locus_grace_view_init(&v, blob + sizeof(struct locus_tbl_hdr), plen, &err) < 0)
		goto out;
	for (uint32_t l = 0; l < L; l++) {
		for (uint32_t e = 0; e < E; e++) {
			uint32_t rank = o->on_node * o->gpus + e % o->gpus;

			v.primary[l * E + e] = (uint16_t)rank;
			v.expert_load[l * E + e] = 1.0f;
			v.pred_load[l * N + rank] += 1.0f;
		}
	}
	if (locus_grace_validate(&v, &err) < 0 ||
	    locus_tbl_seal(blob, len, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, plen) < 0 ||
	    locus_tbl_write_file(o->out, blob, len, &err) < 0)
		goto out;
	ret = 0;
out:
	if (ret)
		fprintf(stderr, "bench_dataplane: grace-table: %s\n", err.msg);
	free(blob);
	return ret;
}
