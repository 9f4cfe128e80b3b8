// SPDX-License-Identifier: MIT
/*
 * Verbs loopback (locus_verbs_loop.h): two RC QPs of one port connected to
 * each other by hand (INIT -> RTR -> RTS with each other's QPN and the
 * port's own GID), one MR per chunk of the area on a PD of its own, RDMA
 * WRITE gather lists.
 *
 * Every WR of copy s carries wr_id s and only its last is signalled: RC
 * completes in order, so a good completion of s ends every copy up to s. An
 * error completion ends copy s and everything before it with the error; the
 * QP is then in error, so whatever is still queued behind it is ended with
 * -EIO once the CQ runs dry (flushed unsignalled WRs need not produce
 * completions), and the pair is reset and reconnected.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "locus_err_priv.h"
#include "locus_verbs_loop.h"

#define MAX_SGE  16
#define MAX_WR   256 /* WRs of one copy */
#define CQ_BURST 32

struct copy_rec {
	uint64_t cookie;
	uint32_t n_wr;
};

/* One chunk's registration; keys is what the posting thread reads. */
struct loop_mr {
	struct ibv_mr *mr;
	uint64_t keys;          /* lkey | (u64)rkey << 32 */
	struct ibv_mr *old;     /* replaced: deregistered once the copies posted before end */
	uint64_t old_seq;       /* copies with seq < old_seq may still use it */
};

struct locus_verbs_loop {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qa, *qb;     /* qa writes, qb answers */
	struct loop_mr *mrs;        /* [n_chunks] */
	uint64_t chunk_off, chunk_len;
	unsigned n_chunks;
	uint8_t port;
	int gid_index;              /* -1: InfiniBand, no GRH */
	union ibv_gid gid;
	uint16_t lid;
	enum ibv_mtu mtu;
	unsigned depth, max_sge;
	uint8_t *base;
	uint64_t len;
	struct copy_rec *fifo;      /* [depth], by seq % depth */
	struct ibv_send_wr *wr;     /* [MAX_WR] one copy's list */
	struct ibv_sge *sge;        /* [MAX_WR * MAX_SGE] */
	uint64_t head, tail;        /* seq of the oldest open copy, next seq (stored
				     * atomically: the re-registering thread reads them) */
	uint32_t wr_inflight;
	int broken;
	struct locus_verbs_loop_stats st;
};

/* A RoCE v2 IPv4 GID if the port has one, else the first usable; -1 for InfiniBand. */
static int pick_gid(struct locus_verbs_loop *l, const struct ibv_port_attr *pa)
{
	int any = -1;

	if (pa->link_layer != IBV_LINK_LAYER_ETHERNET)
		return -1;
	for (int i = 0; i < pa->gid_tbl_len; i++) {
		struct ibv_gid_entry ge;

		if (ibv_query_gid_ex(l->ctx, l->port, (uint32_t)i, &ge, 0))
			continue;
		if (!memcmp(ge.gid.raw, (uint8_t[16]){ 0 }, 16))
			continue;
		if (ge.gid_type == IBV_GID_TYPE_ROCE_V2 &&
		    !memcmp(ge.gid.raw, (uint8_t[12]){ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff }, 12))
			return i;
		if (any < 0)
			any = i;
	}
	return any < 0 ? -2 : any;
}

static int qp_connect(struct locus_verbs_loop *l, struct ibv_qp *qp, uint32_t remote_qpn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = l->port,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return -errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = l->mtu;
	a.dest_qp_num = remote_qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = l->port;
	if (l->gid_index >= 0) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = l->gid;
		a.ah_attr.grh.sgid_index = (uint8_t)l->gid_index;
		a.ah_attr.grh.hop_limit = 64;
	} else {
		a.ah_attr.dlid = l->lid;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return -errno;
	return 0;
}

static int qp_reset(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	return ibv_modify_qp(qp, &a, IBV_QP_STATE) ? -errno : 0;
}

static int pair_connect(struct locus_verbs_loop *l)
{
	int ret = qp_connect(l, l->qa, l->qb->qp_num);

	return ret ? ret : qp_connect(l, l->qb, l->qa->qp_num);
}

static struct ibv_qp *make_qp(struct locus_verbs_loop *l, unsigned depth)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = l->cq, .recv_cq = l->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0,
		.cap = { .max_send_wr = depth, .max_recv_wr = 1, .max_send_sge = l->max_sge,
			 .max_recv_sge = 1 },
	};

	return ibv_create_qp(l->pd, &qa);
}

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	if (!list)
		return NULL;
	for (int i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name)) {
			ctx = ibv_open_device(list[i]);
			break;
		}
	if (!ctx && !errno)
		errno = ENODEV;
	ibv_free_device_list(list);
	return ctx;
}

static uint8_t *chunk_addr(const struct locus_verbs_loop *l, unsigned i)
{
	return l->base + l->chunk_off + (uint64_t)i * l->chunk_len;
}

static struct ibv_mr *reg_chunk(struct locus_verbs_loop *l, unsigned i)
{
	return ibv_reg_mr(l->pd, chunk_addr(l, i), l->chunk_len,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
}

static uint64_t keys_of(const struct ibv_mr *mr)
{
	return (uint64_t)mr->lkey | (uint64_t)mr->rkey << 32;
}

static void dereg_all(struct locus_verbs_loop *l)
{
	for (unsigned i = 0; i < l->n_chunks; i++) {
		if (l->mrs[i].mr)
			ibv_dereg_mr(l->mrs[i].mr);
		if (l->mrs[i].old)
			ibv_dereg_mr(l->mrs[i].old);
	}
}

static int reg_all(struct locus_verbs_loop *l, struct locus_error *err)
{
	for (unsigned i = 0; i < l->n_chunks; i++) {
		l->mrs[i].mr = reg_chunk(l, i);
		if (!l->mrs[i].mr) {
			int e = errno;

			dereg_all(l);
			return locus_error_set(err, e, "verbs loopback: registering chunk %u (%llu "
					       "bytes): %s", i, (unsigned long long)l->chunk_len,
					       strerror(e));
		}
		l->mrs[i].keys = keys_of(l->mrs[i].mr);
	}
	return 0;
}

int locus_verbs_loop_create(const char *dev, void *addr, size_t len, unsigned depth,
			    struct locus_verbs_loop **out, struct locus_error *err)
{
	struct locus_verbs_loop_area a = { .addr = addr, .len = len };

	return locus_verbs_loop_create_area(dev, &a, depth, out, err);
}

int locus_verbs_loop_create_area(const char *dev, const struct locus_verbs_loop_area *a,
				 unsigned depth, struct locus_verbs_loop **out,
				 struct locus_error *err)
{
	struct locus_verbs_loop *l;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	int ret;

	if (!dev || !a || !a->addr || !a->len || depth < 2 || depth > 16384 ||
	    (a->n_chunks && (!a->chunk_len || a->chunk_off > a->len ||
			     (a->len - a->chunk_off) / a->chunk_len < a->n_chunks)))
		return locus_error_set(err, EINVAL, "verbs loopback: bad arguments");
	l = calloc(1, sizeof(*l));
	if (!l)
		return locus_error_set(err, ENOMEM, "verbs loopback: out of memory");
	l->depth = depth;
	l->base = a->addr;
	l->len = a->len;
	l->n_chunks = a->n_chunks ? a->n_chunks : 1;
	l->chunk_off = a->n_chunks ? a->chunk_off : 0;
	l->chunk_len = a->n_chunks ? a->chunk_len : a->len;
	l->port = 1;
	l->fifo = calloc(depth, sizeof(*l->fifo));
	l->wr = calloc(MAX_WR, sizeof(*l->wr));
	l->sge = calloc((size_t)MAX_WR * MAX_SGE, sizeof(*l->sge));
	l->mrs = calloc(l->n_chunks, sizeof(*l->mrs));
	if (!l->fifo || !l->wr || !l->sge || !l->mrs) {
		ret = locus_error_set(err, ENOMEM, "verbs loopback: out of memory");
		goto err_free;
	}
	errno = 0;
	l->ctx = open_dev(dev);
	if (!l->ctx) {
		ret = locus_error_set(err, errno ? errno : ENODEV, "verbs loopback: device %s: %s",
				      dev, strerror(errno ? errno : ENODEV));
		goto err_free;
	}
	if (ibv_query_device(l->ctx, &da) || ibv_query_port(l->ctx, l->port, &pa)) {
		ret = locus_error_set(err, errno, "verbs loopback: %s: query: %s", dev,
				      strerror(errno));
		goto err_ctx;
	}
	if (pa.state != IBV_PORT_ACTIVE) {
		ret = locus_error_set(err, ENETDOWN, "verbs loopback: %s port 1 is not active", dev);
		goto err_ctx;
	}
	l->mtu = pa.active_mtu;
	l->lid = pa.lid;
	l->max_sge = (unsigned)(da.max_sge < MAX_SGE ? da.max_sge : MAX_SGE);
	l->gid_index = pick_gid(l, &pa);
	if (l->gid_index == -2) {
		ret = locus_error_set(err, EADDRNOTAVAIL, "verbs loopback: %s has no GID", dev);
		goto err_ctx;
	}
	if (l->gid_index >= 0 && ibv_query_gid(l->ctx, l->port, l->gid_index, &l->gid)) {
		ret = locus_error_set(err, errno, "verbs loopback: %s: GID: %s", dev, strerror(errno));
		goto err_ctx;
	}
	l->pd = ibv_alloc_pd(l->ctx);
	if (!l->pd) {
		ret = locus_error_set(err, errno, "verbs loopback: PD: %s", strerror(errno));
		goto err_ctx;
	}
	ret = reg_all(l, err);
	if (ret < 0)
		goto err_pd;
	l->cq = ibv_create_cq(l->ctx, (int)(2 * depth), NULL, NULL, 0);
	if (!l->cq) {
		ret = locus_error_set(err, errno, "verbs loopback: CQ: %s", strerror(errno));
		goto err_mr;
	}
	l->qa = make_qp(l, depth);
	if (!l->qa) {
		ret = locus_error_set(err, errno, "verbs loopback: QP: %s", strerror(errno));
		goto err_cq;
	}
	l->qb = make_qp(l, 1);
	if (!l->qb) {
		ret = locus_error_set(err, errno, "verbs loopback: QP: %s", strerror(errno));
		goto err_qa;
	}
	ret = pair_connect(l);
	if (ret) {
		ret = locus_error_set(err, -ret, "verbs loopback: connecting the pair: %s",
				      strerror(-ret));
		goto err_qb;
	}
	*out = l;
	return 0;

err_qb:
	ibv_destroy_qp(l->qb);
err_qa:
	ibv_destroy_qp(l->qa);
err_cq:
	ibv_destroy_cq(l->cq);
err_mr:
	dereg_all(l);
err_pd:
	ibv_dealloc_pd(l->pd);
err_ctx:
	ibv_close_device(l->ctx);
err_free:
	free(l->mrs);
	free(l->sge);
	free(l->wr);
	free(l->fifo);
	free(l);
	return ret;
}

void locus_verbs_loop_destroy(struct locus_verbs_loop *l)
{
	if (!l)
		return;
	ibv_destroy_qp(l->qb);
	ibv_destroy_qp(l->qa);
	ibv_destroy_cq(l->cq);
	dereg_all(l);
	ibv_dealloc_pd(l->pd);
	ibv_close_device(l->ctx);
	free(l->mrs);
	free(l->sge);
	free(l->wr);
	free(l->fifo);
	free(l);
}

unsigned locus_verbs_loop_max_sge(const struct locus_verbs_loop *l)
{
	return l->max_sge;
}

unsigned locus_verbs_loop_inflight(const struct locus_verbs_loop *l)
{
	return (unsigned)(l->tail - l->head);
}

const struct locus_verbs_loop_stats *locus_verbs_loop_stats(const struct locus_verbs_loop *l)
{
	return &l->st;
}

/* The chunk [off, off + len) lies in, -1 if none holds it whole. */
static int chunk_of(const struct locus_verbs_loop *l, uint64_t off, uint64_t len)
{
	uint64_t i;

	if (off < l->chunk_off)
		return -1;
	i = (off - l->chunk_off) / l->chunk_len;
	if (i >= l->n_chunks || len > l->chunk_len - (off - l->chunk_off - i * l->chunk_len))
		return -1;
	return (int)i;
}

static uint64_t chunk_keys(struct locus_verbs_loop *l, int i)
{
	return __atomic_load_n(&l->mrs[i].keys, __ATOMIC_ACQUIRE);
}

void locus_verbs_loop_reap(struct locus_verbs_loop *l)
{
	uint64_t ended = __atomic_load_n(&l->head, __ATOMIC_ACQUIRE);

	for (unsigned i = 0; i < l->n_chunks; i++) {
		struct loop_mr *m = &l->mrs[i];

		if (m->old && ended >= m->old_seq) {
			ibv_dereg_mr(m->old);
			m->old = NULL;
		}
	}
}

int locus_verbs_loop_rereg(struct locus_verbs_loop *l, unsigned chunk, struct locus_error *err)
{
	struct loop_mr *m;
	struct ibv_mr *mr;

	if (chunk >= l->n_chunks)
		return locus_error_set(err, ERANGE, "verbs loopback: no chunk %u (%u chunks)", chunk,
				       l->n_chunks);
	m = &l->mrs[chunk];
	locus_verbs_loop_reap(l);
	if (m->old)
		return locus_error_set(err, EBUSY, "verbs loopback: chunk %u: copies posted before "
				       "its last re-registration still run", chunk);
	mr = reg_chunk(l, chunk);
	if (!mr)
		return locus_error_set(err, errno, "verbs loopback: re-registering chunk %u: %s",
				       chunk, strerror(errno));
	/* every copy naming the old pages was posted before this seq */
	m->old = m->mr;
	m->old_seq = __atomic_load_n(&l->tail, __ATOMIC_ACQUIRE);
	m->mr = mr;
	__atomic_store_n(&m->keys, keys_of(mr), __ATOMIC_RELEASE);
	locus_verbs_loop_reap(l);
	return 0;
}

int locus_verbs_loop_copy(struct locus_verbs_loop *l, uint64_t dst_off,
			  const struct locus_verbs_loop_src *src, unsigned n, uint64_t cookie)
{
	struct ibv_send_wr *wr = l->wr, *bad;
	struct ibv_sge *sge = l->sge;
	unsigned n_wr = (n + l->max_sge - 1) / l->max_sge, s = 0;
	uint64_t total = 0, seq = l->tail;
	int dst_chunk;
	uint32_t rkey;

	if (l->broken)
		return -EIO;
	if (!n || n_wr > MAX_WR)
		return -ERANGE;
	if (l->tail - l->head >= l->depth || l->wr_inflight + n_wr > l->depth) {
		l->st.full++;
		return -LOCUS_EFULL;
	}
	for (unsigned i = 0; i < n; i++) {
		if (chunk_of(l, src[i].off, src[i].len) < 0)
			return -ERANGE;
		total += src[i].len;
	}
	dst_chunk = chunk_of(l, dst_off, total);
	if (dst_chunk < 0)
		return -ERANGE;
	rkey = (uint32_t)(chunk_keys(l, dst_chunk) >> 32);
	for (unsigned w = 0; w < n_wr; w++) {
		unsigned k = 0;
		uint64_t bytes = 0;

		for (; k < l->max_sge && s < n; k++, s++) {
			sge[w * MAX_SGE + k] = (struct ibv_sge){
				.addr = (uintptr_t)(l->base + src[s].off), .length = src[s].len,
				.lkey = (uint32_t)chunk_keys(l, chunk_of(l, src[s].off, src[s].len)),
			};
			bytes += src[s].len;
		}
		wr[w] = (struct ibv_send_wr){
			.wr_id = seq, .sg_list = &sge[w * MAX_SGE], .num_sge = (int)k,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = w + 1 == n_wr ? IBV_SEND_SIGNALED : 0,
			.next = w + 1 == n_wr ? NULL : &wr[w + 1],
			.wr.rdma = { .remote_addr = (uintptr_t)(l->base + dst_off), .rkey = rkey },
		};
		dst_off += bytes;
	}
	if (ibv_post_send(l->qa, wr, &bad)) {
		if (bad == wr) {
			l->st.full++;
			return -LOCUS_EFULL;
		}
		/* part of the list went: the copy is open and will end with -EIO */
		l->broken = 1;
	}
	l->fifo[seq % l->depth] = (struct copy_rec){ .cookie = cookie, .n_wr = n_wr };
	__atomic_store_n(&l->tail, l->tail + 1, __ATOMIC_RELEASE);
	l->wr_inflight += n_wr;
	l->st.copies++;
	l->st.wrs += n_wr;
	l->st.bytes += total;
	return 0;
}

/* End every open copy up to and including seq with status. */
static int end_upto(struct locus_verbs_loop *l, uint64_t seq, int status,
		    locus_verbs_loop_done_fn done, void *arg)
{
	int n = 0;

	while (l->head != l->tail && l->head <= seq) {
		struct copy_rec *r = &l->fifo[l->head % l->depth];

		__atomic_store_n(&l->head, l->head + 1, __ATOMIC_RELEASE);
		l->wr_inflight -= r->n_wr;
		if (status)
			l->st.errors++;
		done(arg, r->cookie, status);
		n++;
	}
	return n;
}

int locus_verbs_loop_poll(struct locus_verbs_loop *l, locus_verbs_loop_done_fn done, void *arg)
{
	struct ibv_wc wc[CQ_BURST];
	int n = ibv_poll_cq(l->cq, CQ_BURST, wc), ended = 0;

	if (n < 0)
		n = 0, l->broken = 1;
	for (int i = 0; i < n; i++) {
		if (wc[i].wr_id < l->head)
			continue; /* a flushed WR of a copy already ended */
		if (wc[i].status == IBV_WC_SUCCESS) {
			ended += end_upto(l, wc[i].wr_id, 0, done, arg);
		} else {
			l->broken = 1;
			ended += end_upto(l, wc[i].wr_id, -EIO, done, arg);
		}
	}
	if (l->broken && n == 0) {
		/* the CQ ran dry: what is still queued behind the error can only fail */
		ended += end_upto(l, UINT64_MAX, -EIO, done, arg);
		if (qp_reset(l->qa) == 0 && qp_reset(l->qb) == 0 && pair_connect(l) == 0) {
			l->broken = 0;
			l->wr_inflight = 0;
			l->st.resets++;
		}
	}
	return ended;
}
