// SPDX-License-Identifier: MIT
/*
 * The registration socket: attachments handed to the node, and client
 * buffer regions (the checks, mapping and MR registration, the region's
 * life with the engine).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "locus_client_priv.h"
#include "locus_counters_priv.h"
#include "locus_err_priv.h"
#include "locus_regions.h"
#include "locus_seqpkt.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"

#define MAXR             LOCUS_CLIENT_MAX_REGIONS
#define MAX_CONNS        16
#define ACCEPT_PER_PASS  8
#define CONN_TIMEOUT_NS  1000000000ull
#define MAX_FDS          4 /* fds a message may carry before it is refused */
#define CONFIRM_MAX_MS   10000u /* a grant waits this long at most for its confirmation */

enum ent_state { ENT_FREE = 0, ENT_ADDING, ENT_LIVE, ENT_DELETING };

/* One region of one client slot: index idx = id % MAXR. */
struct ent {
	uint8_t state;
	uint8_t gone;            /* the client left while ADDING: DEL once added */
	uint32_t id;
	uint32_t flags;          /* enum locus_region_flags */
	int fd;                  /* our copy of the dma-buf */
	void *map;
	uint64_t len;
	void *mr;
	uint64_t ticket;         /* engine command in flight */
	int conn;                /* connection waiting for the answer, -1 */
};

struct conn {
	int fd;                  /* -1: free */
	pid_t pid;               /* SO_PEERCRED at accept */
	int waiting;             /* answered when the engine acknowledges */
	int attaching;           /* waiting: for the node's grant of an ATTACH */
	int confirming;          /* an attachment granted: its ATTACHED awaited */
	uint32_t slot;           /* confirming: the slot granted ... */
	uint64_t generation;     /* ... in this generation */
	uint32_t timeout_ms;     /* ATTACH: the client's own bound on the handshake */
	uint64_t deadline_ns;    /* for the request (the confirmation) to arrive */
	int parked;              /* a DMABUF request set up in a later pass (locus_regions_setup) */
	uint64_t parked_pass;
	struct locus_reg_req q;  /* parked: the request ... */
	int pfd;                 /* ... and its dma-buf */
};

struct locus_regions {
	struct locus_regions_params p;
	uint32_t n_slots;
	char path[LOCUS_SEQPKT_PATH_MAX];
	int lfd;
	struct ent *ents;        /* [n_slots * MAXR] */
	uint32_t *seq;           /* [n_slots] id sequence */
	uint64_t *bytes;         /* [n_slots] bytes held */
	struct conn conns[MAX_CONNS];
	uint64_t pass;           /* locus_regions_poll calls so far */
	uint64_t c_registered, c_released, c_refused, c_held;
	uint64_t c_dmabuf_regs, c_fallbacks, c_dmabuf_refused, c_no_mr, c_unmapped, c_host;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int register_counters(struct locus_regions *rs, struct locus_error *err)
{
	const struct {
		const char *name, *help;
		enum locus_ctr_kind kind;
		uint32_t dim;
		uint64_t *off;
	} defs[] = {
		{ "regions_registered", "client buffer regions registered", LOCUS_CTR_COUNTER, 0,
		  &rs->c_registered },
		{ "regions_released", "client buffer regions released (unregistered, detached, "
		  "died)", LOCUS_CTR_COUNTER, 0, &rs->c_released },
		{ "regions_refused", "region requests refused by reason: 0 malformed 1 not owner "
		  "2 not dma-buf 3 range 4 limit 5 map/MR 6 unknown", LOCUS_CTR_COUNTER,
		  LOCUS_REGREF_N, &rs->c_refused },
		{ "regions_held", "client buffer regions held", LOCUS_CTR_GAUGE, 0, &rs->c_held },
		{ "dmabuf_regs", "regions registered with the RDMA device as dma-buf MRs",
		  LOCUS_CTR_COUNTER, 0, &rs->c_dmabuf_regs },
		{ "dmabuf_reg_fallbacks", "regions registered as MRs on locusd's mapping only (the "
		  "devices refused the dma-buf MR, or host memory)", LOCUS_CTR_COUNTER, 0,
		  &rs->c_fallbacks },
		{ "dmabuf_refused", "regions whose dma-buf MR a rail's RDMA device refused",
		  LOCUS_CTR_COUNTER, 0, &rs->c_dmabuf_refused },
		{ "regions_no_mr", "regions without an MR on any rail of a multi-node locusd: rows "
		  "to other nodes are copied", LOCUS_CTR_COUNTER, 0, &rs->c_no_mr },
		{ "regions_host", "host-memory regions registered (memfds sealed against "
		  "shrinking)", LOCUS_CTR_COUNTER, 0, &rs->c_host },
		{ "regions_unmapped", "regions the exporter does not let locusd map: no "
		  "intra-node copies from them", LOCUS_CTR_COUNTER, 0, &rs->c_unmapped },
	};

	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(defs); i++) {
		struct locus_ctr_desc cd = { .name = defs[i].name, .help = defs[i].help,
					     .kind = defs[i].kind, .ndims = defs[i].dim ? 1 : 0,
					     .dim = { defs[i].dim },
					     .label = { defs[i].dim ? "reason" : NULL } };
		int ret = locus_counters_register(rs->p.ctrs, &cd, defs[i].off, err);

		if (ret < 0)
			return ret;
	}
	return 0;
}

/* ---- answers ------------------------------------------------------------------- */

/* The engine that polls slot: the only one that reads its regions. */
static struct locus_engine *engine_of(const struct locus_regions *rs, uint32_t slot)
{
	return rs->p.engines ? rs->p.engines[rs->p.slot_engine[slot]] : rs->p.engine;
}

static void conn_close(struct locus_regions *rs, int ci)
{
	if (ci < 0 || rs->conns[ci].fd < 0)
		return;
	if (rs->conns[ci].parked)
		close(rs->conns[ci].pfd);
	close(rs->conns[ci].fd);
	rs->conns[ci] = (struct conn){ .fd = -1 };
}

/* Send the answer (best effort: a client that left misses nothing) and close. */
static void answer(struct locus_regions *rs, int ci, int status, const struct ent *g,
		   const char *fmt, ...)
{
	struct locus_reg_rep rep = { .magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION,
				     .status = status };
	va_list ap;

	if (ci < 0 || rs->conns[ci].fd < 0)
		return;
	if (g && status == 0) {
		rep.region = g->id;
		rep.flags = g->flags;
	}
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(rep.msg, sizeof(rep.msg), fmt, ap);
		va_end(ap);
	}
	(void)!locus_seqpkt_send(rs->conns[ci].fd, &rep, sizeof(rep), -1);
	conn_close(rs, ci);
}

/* Refuse, count by reason; returns status for convenience. */
static int refuse(struct locus_regions *rs, int ci, enum locus_regions_refusal why, int status,
		  const char *msg)
{
	locus_counter_add_elem(rs->p.ctl_blk, rs->c_refused, why, 1);
	answer(rs, ci, status, NULL, "%s", msg);
	return status;
}

/* ---- checks ---------------------------------------------------------------------- */

/*
 * Whether fd is a dma-buf: its fdinfo has an exp_name line (the exporter),
 * which no other kind of file has. Fills exp with the name.
 */
static int is_dmabuf(int fd, char *exp, size_t len)
{
	char path[64], buf[1024];
	ssize_t n;
	int f;
	char *l;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return 0;
	n = read(f, buf, sizeof(buf) - 1);
	close(f);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	for (l = buf; l; l = strchr(l, '\n')) {
		if (*l == '\n')
			l++;
		if (!strncmp(l, "exp_name:", 9)) {
			l += 9;
			l += strspn(l, " \t");
			snprintf(exp, len, "%.*s", (int)strcspn(l, "\n"), l);
			return 1;
		}
	}
	return 0;
}

/*
 * Whether fd is host memory locusd can hold as a region: a memfd (or any
 * shmem file that allows seals) sealed against shrinking, so that no holder
 * can take pages from under locusd's mapping or its MRs.
 */
static int is_host_memfd(int fd)
{
	int seals = fcntl(fd, F_GET_SEALS);

	return seals >= 0 && (seals & F_SEAL_SHRINK);
}

/* The request names the sender's own, attached slot in its current generation. */
static int peer_ok(struct locus_regions *rs, int ci, const struct locus_reg_req *q)
{
	const struct locus_client_ctl *ctl;
	uint64_t sp;

	if (q->slot >= rs->n_slots || !rs->p.attached[q->slot])
		return refuse(rs, ci, LOCUS_REGREF_PEER, -EACCES, "no attached client in that slot");
	ctl = locus_clients_ctl(rs->p.clients, q->slot);
	sp = __atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE);
	/* the start time too: a dead owner's pid reused by another process is not it */
	if (locus_client_state_of(sp) != LOCUS_CLIENT_ACTIVE ||
	    locus_client_pid_of(sp) != rs->conns[ci].pid ||
	    !locus_proc_alive(rs->conns[ci].pid, ctl->start_ticks))
		return refuse(rs, ci, LOCUS_REGREF_PEER, -EACCES,
			      "the sender does not own that client slot");
	if (__atomic_load_n(&ctl->generation, __ATOMIC_ACQUIRE) != q->generation)
		return refuse(rs, ci, LOCUS_REGREF_PEER, -EACCES,
			      "stale attachment generation for that slot");
	return 0;
}

/* ---- registration ---------------------------------------------------------------- */

static void ent_release(struct locus_regions *rs, uint32_t slot, struct ent *g)
{
	if (g->mr && rs->p.mr)
		rs->p.mr->dereg(rs->p.mr->ctx, g->mr);
	if (g->map)
		munmap(g->map, g->len);
	if (g->fd >= 0)
		close(g->fd);
	rs->bytes[slot] -= g->len;
	locus_counter_inc(rs->p.ctl_blk, rs->c_released);
	locus_gauge_add(rs->p.ctl_blk, rs->c_held, -1);
	*g = (struct ent){ .state = ENT_FREE, .fd = -1, .conn = -1 };
}

/*
 * Register g with every rail's device (mr ops): a dma-buf MR where a device
 * takes one, else an MR on the mapping; counted by the best path any rail
 * took. Fills *lkey (the engine's gather key, 0: no MR) and *iova; how says
 * what each rail got.
 */
static void ent_register(struct locus_regions *rs, struct ent *g, int fd,
			 const struct locus_reg_req *q, uint32_t *lkey, uint64_t *iova,
			 struct locus_rail_mr_how *how)
{
	int host = g->flags & LOCUS_REGION_HOST;

	if (rs->p.mr->reg(rs->p.mr->ctx, host ? -1 : fd, q->offset, q->len, g->map, lkey, iova,
			  &g->mr, how) < 0) {
		g->mr = NULL;
		*lkey = 0;
		*iova = 0;
	}
	if (how->dmabuf_refused)
		locus_counter_inc(rs->p.ctl_blk, rs->c_dmabuf_refused);
	if (how->dmabuf && g->mr) {
		g->flags |= LOCUS_REGION_MR_DMABUF;
		locus_counter_inc(rs->p.ctl_blk, rs->c_dmabuf_regs);
	} else if (how->mapped && g->mr) {
		g->flags |= LOCUS_REGION_MR_MAPPED;
		locus_counter_inc(rs->p.ctl_blk, rs->c_fallbacks);
	} else {
		locus_counter_inc(rs->p.ctl_blk, rs->c_no_mr);
	}
}

/* Map and register; fills g and the engine's view of it. Returns 0 or negative. */
static int ent_setup(struct locus_regions *rs, int ci, struct ent *g, int fd,
		     const struct locus_reg_req *q, const char *exp,
		     struct locus_engine_region *er)
{
	struct locus_rail_mr_how how = { .why = "no RDMA device" };
	uint64_t iova = 0;
	uint32_t lkey = 0;

	/*
	 * Read-only, but host memory read-write where its seals allow: before
	 * Linux 6.2 the kernel pins the pages of an MR without write access with
	 * FOLL_WRITE | FOLL_FORCE (ib_umem_get), which a read-only shared mapping
	 * refuses ("Bad address"). locusd never writes through either mapping.
	 */
	g->map = MAP_FAILED;
	if (g->flags & LOCUS_REGION_HOST)
		g->map = mmap(NULL, q->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			      (off_t)q->offset);
	if (g->map == MAP_FAILED)
		g->map = mmap(NULL, q->len, PROT_READ, MAP_SHARED, fd, (off_t)q->offset);
	if (g->map == MAP_FAILED) {
		g->map = NULL;
		locus_counter_inc(rs->p.ctl_blk, rs->c_unmapped);
	} else {
		g->flags |= LOCUS_REGION_MAPPED;
	}
	if (rs->p.mr)
		ent_register(rs, g, fd, q, &lkey, &iova, &how);
	if (!g->map && !g->mr) {
		refuse(rs, ci, LOCUS_REGREF_REGISTER, -EOPNOTSUPP,
		       rs->p.mr ? "locusd can neither map this dma-buf nor register it with its "
				  "RDMA device"
				: "locusd cannot map this dma-buf (and has no RDMA device)");
		return -EOPNOTSUPP;
	}
	*er = (struct locus_engine_region){ .id = g->id, .lkey = lkey, .addr = g->map,
					    .iova = iova, .len = q->len };
	if (g->flags & LOCUS_REGION_HOST)
		locus_counter_inc(rs->p.ctl_blk, rs->c_host);
	/* rare and what an operator asks about: which path on each rail, and why not a better one */
	fprintf(stderr, "locusd: client slot %u: region %#x, %llu bytes of a %s%s: %s, %s\n",
		q->slot, g->id, (unsigned long long)q->len, exp,
		(g->flags & LOCUS_REGION_HOST) ? " (host memory)" : " dma-buf",
		g->map ? "mapped" : "not mappable", how.why);
	return 0;
}

static void do_register(struct locus_regions *rs, int ci, const struct locus_reg_req *q, int fd)
{
	uint64_t max = rs->p.max_bytes ? rs->p.max_bytes : LOCUS_REGION_MAX_LEN;
	struct locus_engine_region er;
	struct ent *g = NULL;
	char exp[64], msg[160];
	int host = 0;
	off_t size;
	uint32_t idx;

	if (fd < 0) {
		refuse(rs, ci, LOCUS_REGREF_MALFORMED, -EBADF, "registration carries no fd");
		return;
	}
	if (q->len == 0 || q->len > LOCUS_REGION_MAX_LEN || q->offset % LOCUS_REGION_ALIGN ||
	    q->len % LOCUS_REGION_ALIGN || q->offset > UINT64_MAX - q->len) {
		snprintf(msg, sizeof(msg), "region [%llu, +%llu): offset and length must be "
			 "multiples of %u, the length 1..%llu bytes", (unsigned long long)q->offset,
			 (unsigned long long)q->len, LOCUS_REGION_ALIGN,
			 (unsigned long long)LOCUS_REGION_MAX_LEN);
		refuse(rs, ci, LOCUS_REGREF_RANGE, -LOCUS_ERANGE, msg);
		goto err_close;
	}
	if (!is_dmabuf(fd, exp, sizeof(exp))) {
		if (!is_host_memfd(fd)) {
			refuse(rs, ci, LOCUS_REGREF_NOT_DMABUF, -ENOTSUP,
			       "the fd is not a dma-buf (its fdinfo names no exporter) nor a "
			       "memfd sealed against shrinking (F_SEAL_SHRINK)");
			goto err_close;
		}
		host = 1;
		snprintf(exp, sizeof(exp), "memfd");
	}
	size = lseek(fd, 0, SEEK_END);
	if (size < 0 || q->offset > (uint64_t)size || q->len > (uint64_t)size - q->offset) {
		snprintf(msg, sizeof(msg), "region [%llu, +%llu) does not fit the %s%s of "
			 "%lld bytes in %u-byte aligned pieces", (unsigned long long)q->offset,
			 (unsigned long long)q->len, exp, host ? "" : " dma-buf", (long long)size,
			 LOCUS_REGION_ALIGN);
		refuse(rs, ci, LOCUS_REGREF_RANGE, -LOCUS_ERANGE, msg);
		goto err_close;
	}
	for (idx = 0; idx < MAXR; idx++)
		if (rs->ents[(size_t)q->slot * MAXR + idx].state == ENT_FREE)
			break;
	if (idx == MAXR || rs->bytes[q->slot] + q->len > max) {
		snprintf(msg, sizeof(msg), "client holds %s (limits %u regions, %llu bytes)",
			 idx == MAXR ? "every region it may" : "too many bytes", MAXR,
			 (unsigned long long)max);
		refuse(rs, ci, LOCUS_REGREF_LIMIT, -LOCUS_EFULL, msg);
		goto err_close;
	}
	g = &rs->ents[(size_t)q->slot * MAXR + idx];
	*g = (struct ent){ .fd = fd, .len = q->len, .conn = -1,
			   .id = (++rs->seq[q->slot] << 3) | idx,
			   .flags = host ? LOCUS_REGION_HOST : 0 };
	if (ent_setup(rs, ci, g, fd, q, exp, &er) < 0)
		goto err_ent;
	g->state = ENT_ADDING;
	g->conn = ci;
	rs->conns[ci].waiting = 1;
	rs->bytes[q->slot] += q->len;
	locus_gauge_add(rs->p.ctl_blk, rs->c_held, 1);
	g->ticket = locus_engine_region_command(engine_of(rs, q->slot), q->slot, idx,
						LOCUS_ENGINE_REGION_ADD, &er);
	return;

err_ent:
	if (g->map)
		munmap(g->map, g->len);
	*g = (struct ent){ .state = ENT_FREE, .fd = -1, .conn = -1 };
err_close:
	close(fd);
}

static void start_delete(struct locus_regions *rs, uint32_t slot, struct ent *g, int ci)
{
	g->state = ENT_DELETING;
	g->conn = ci;
	if (ci >= 0)
		rs->conns[ci].waiting = 1;
	g->ticket = locus_engine_region_command(engine_of(rs, slot), slot, g->id % MAXR,
						LOCUS_ENGINE_REGION_DEL, NULL);
}

static void do_unregister(struct locus_regions *rs, int ci, const struct locus_reg_req *q)
{
	struct ent *g = &rs->ents[(size_t)q->slot * MAXR + q->region % MAXR];

	if (q->region == 0 || g->id != q->region || g->state != ENT_LIVE) {
		refuse(rs, ci, LOCUS_REGREF_UNKNOWN, -LOCUS_ERANGE,
		       "the client holds no region of that id");
		return;
	}
	start_delete(rs, q->slot, g, ci);
}

/* ---- attachments ------------------------------------------------------------------ */

static int send_rep(struct locus_regions *rs, int ci, const struct locus_reg_rep *rep, int fd)
{
	return locus_seqpkt_send(rs->conns[ci].fd, rep, sizeof(*rep), fd) ==
		       (ssize_t)sizeof(*rep) ? 0 : -1;
}

int locus_regions_attach_answer(struct locus_regions *rs, int ci, int status, uint32_t slot,
				uint64_t generation, int fd, const char *msg)
{
	struct locus_reg_rep rep = { .magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION,
				     .status = status };
	const struct locus_clients *v;
	struct conn *c;

	if (!rs || ci < 0 || ci >= MAX_CONNS || rs->conns[ci].fd < 0 || !rs->conns[ci].waiting)
		return -ESTALE;
	v = rs->p.clients;
	c = &rs->conns[ci];
	if (status < 0) {
		snprintf(rep.msg, sizeof(rep.msg), "%s", msg ? msg : locus_strerror(status));
		answer(rs, ci, status, NULL, "%s", rep.msg);
		return status;
	}
	rep.slot = slot;
	rep.generation = generation;
	rep.ring_size = v->p.ring_size;
	rep.inbox_slots = v->p.inbox_slots;
	rep.inbox_slot_size = v->p.inbox_slot_size;
	rep.clients_version = LOCUS_CLIENTS_VERSION;
	rep.stage_size = v->p.stage_size;
	rep.slot_size = v->slot_stride;
	if (send_rep(rs, ci, &rep, fd) < 0) {
		conn_close(rs, ci); /* it gave up: nothing got there */
		return -EPIPE;
	}
	c->waiting = 0;
	c->attaching = 0;
	c->confirming = 1;
	c->slot = slot;
	c->generation = generation;
	/* the client's own bound, within [1 s, 10 s]: a connection is not held for long */
	c->deadline_ns = mono_ns() + (uint64_t)LOCUS_MIN(LOCUS_MAX(c->timeout_ms, 1000u),
							 CONFIRM_MAX_MS) * 1000000ull;
	return 0;
}

/* The client's ATTACHED, or the slot goes back to the node. */
static void serve_confirm(struct locus_regions *rs, int ci)
{
	struct conn *c = &rs->conns[ci];
	struct locus_reg_req q;
	ssize_t n = recv(c->fd, &q, sizeof(q), MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR) && mono_ns() <= c->deadline_ns)
		return;
	if (n != (ssize_t)sizeof(q) || q.magic != LOCUS_REG_MAGIC ||
	    q.version != LOCUS_REG_VERSION || q.op != LOCUS_REG_ATTACHED || q.slot != c->slot ||
	    q.generation != c->generation)
		rs->p.attach->unconfirmed(rs->p.attach->ctx, c->slot, c->generation);
	conn_close(rs, ci);
}

static void do_attach(struct locus_regions *rs, int ci, const struct locus_reg_req *q)
{
	char msg[sizeof(((struct locus_reg_rep *)0)->msg)] = "";
	int ret;

	if (!rs->p.attach) {
		/* an op this socket does not serve: a malformed request, counted like any */
		refuse(rs, ci, LOCUS_REGREF_MALFORMED, -ENOTSUP,
		       "this locusd takes no attachments here");
		return;
	}
	rs->conns[ci].timeout_ms = q->attach_reserved;
	rs->conns[ci].waiting = 1;
	rs->conns[ci].attaching = 1;
	ret = rs->p.attach->request(rs->p.attach->ctx, ci, rs->conns[ci].pid, q, msg,
				    sizeof(msg));
	if (ret < 0)
		answer(rs, ci, ret, NULL, "%s", msg[0] ? msg : locus_strerror(ret));
}

/* ---- the socket -------------------------------------------------------------------- */

/* Read a connection's request if it came; bad ones are refused and counted. */
static void serve(struct locus_regions *rs, int ci)
{
	struct locus_seqpkt_fds in;
	struct locus_reg_req q;
	ssize_t n;
	int fd;

	n = locus_seqpkt_recv(rs->conns[ci].fd, &q, sizeof(q), MSG_DONTWAIT, MAX_FDS, &in);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		if (mono_ns() > rs->conns[ci].deadline_ns)
			refuse(rs, ci, LOCUS_REGREF_MALFORMED, -ETIMEDOUT, "no request within 1 s");
		return;
	}
	fd = locus_seqpkt_sole_fd(&in);
	if (n <= 0 || n != (ssize_t)sizeof(q) || in.trunc || q.magic != LOCUS_REG_MAGIC ||
	    q.version != LOCUS_REG_VERSION || q.reserved || in.n > 1 ||
	    ((q.op == LOCUS_REG_UNREGISTER || q.op == LOCUS_REG_ATTACH) && in.n) ||
	    (q.op != LOCUS_REG_DMABUF && q.op != LOCUS_REG_UNREGISTER &&
	     q.op != LOCUS_REG_ATTACH)) {
		if (fd >= 0)
			close(fd);
		if (n == (ssize_t)sizeof(q) && q.magic == LOCUS_REG_MAGIC &&
		    q.version != LOCUS_REG_VERSION) {
			char msg[96];

			snprintf(msg, sizeof(msg), "registration protocol version %u, locusd "
				 "speaks %u", q.version, LOCUS_REG_VERSION);
			refuse(rs, ci, LOCUS_REGREF_MALFORMED, -LOCUS_EVERSION, msg);
		} else {
			refuse(rs, ci, LOCUS_REGREF_MALFORMED, n == 0 ? -ECONNRESET : -LOCUS_EPROTO,
			       n == 0 ? "closed before its request" :
			       "malformed registration request");
		}
		return;
	}
	if (q.op == LOCUS_REG_ATTACH) {
		do_attach(rs, ci, &q);
		return;
	}
	if (peer_ok(rs, ci, &q) < 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	if (q.op == LOCUS_REG_DMABUF) {
		/*
		 * Mapping and registering a dma-buf may take long (seconds for an
		 * MR on a loaded Soft-RoCE guest): it waits for the next pass's
		 * locus_regions_setup, after the node answered the attachments
		 * whose engine commands this pass posted.
		 */
		rs->conns[ci].parked = 1;
		rs->conns[ci].parked_pass = rs->pass;
		rs->conns[ci].q = q;
		rs->conns[ci].pfd = fd;
		return;
	}
	do_unregister(rs, ci, &q);
}

void locus_regions_setup(struct locus_regions *rs)
{
	if (!rs)
		return;
	/* an attachment waiting for its grant goes first: it comes within a pass or two */
	for (int ci = 0; ci < MAX_CONNS; ci++)
		if (rs->conns[ci].fd >= 0 && rs->conns[ci].attaching)
			return;
	for (int ci = 0; ci < MAX_CONNS; ci++) {
		struct conn *c = &rs->conns[ci];
		struct locus_reg_req q;
		int fd;

		if (c->fd < 0 || !c->parked || c->parked_pass >= rs->pass)
			continue;
		q = c->q;
		fd = c->pfd;
		c->parked = 0;
		/* the owner may have gone meanwhile: judged again */
		if (peer_ok(rs, ci, &q) < 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		do_register(rs, ci, &q, fd);
		return; /* one a pass: each may take long */
	}
}

static void accept_some(struct locus_regions *rs)
{
	struct pollfd pfd = { .fd = rs->lfd, .events = POLLIN };

	/* accept4 on an empty backlog still makes and frees a socket and a file */
	if (poll(&pfd, 1, 0) != 1)
		return;
	for (int k = 0; k < ACCEPT_PER_PASS; k++) {
		struct ucred cr;
		socklen_t cl = sizeof(cr);
		int ci, fd;

		for (ci = 0; ci < MAX_CONNS; ci++)
			if (rs->conns[ci].fd < 0)
				break;
		if (ci == MAX_CONNS)
			return; /* the backlog holds the rest until a connection ends */
		fd = accept4(rs->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
			close(fd);
			continue;
		}
		rs->conns[ci] = (struct conn){ .fd = fd, .pid = cr.pid,
					       .deadline_ns = mono_ns() + CONN_TIMEOUT_NS };
		serve(rs, ci);
	}
}

/* Regions whose engine command was acknowledged: answer, release, go on. */
static void finish(struct locus_regions *rs)
{
	for (uint32_t slot = 0; slot < rs->n_slots; slot++) {
		for (uint32_t i = 0; i < MAXR; i++) {
			struct ent *g = &rs->ents[(size_t)slot * MAXR + i];
			int ci = g->conn;

			if ((g->state != ENT_ADDING && g->state != ENT_DELETING) ||
			    !locus_engine_region_done(engine_of(rs, slot), slot, i, g->ticket))
				continue;
			g->conn = -1;
			if (g->state == ENT_ADDING) {
				g->state = ENT_LIVE;
				locus_counter_inc(rs->p.ctl_blk, rs->c_registered);
				answer(rs, ci, 0, g, NULL);
				if (g->gone)
					start_delete(rs, slot, g, -1);
			} else {
				ent_release(rs, slot, g);
				answer(rs, ci, 0, NULL, NULL);
			}
		}
	}
}

void locus_regions_poll(struct locus_regions *rs)
{
	if (!rs)
		return;
	rs->pass++;
	accept_some(rs);
	for (int ci = 0; ci < MAX_CONNS; ci++) {
		if (rs->conns[ci].fd < 0 || rs->conns[ci].waiting || rs->conns[ci].parked)
			continue;
		if (rs->conns[ci].confirming)
			serve_confirm(rs, ci);
		else
			serve(rs, ci);
	}
	finish(rs);
}

void locus_regions_set_mr(struct locus_regions *rs, const struct locus_regions_mr_ops *mr)
{
	rs->p.mr = mr;
}

void locus_regions_slot_gone(struct locus_regions *rs, uint32_t slot)
{
	if (!rs || slot >= rs->n_slots)
		return;
	for (uint32_t i = 0; i < MAXR; i++) {
		struct ent *g = &rs->ents[(size_t)slot * MAXR + i];

		if (g->state == ENT_LIVE)
			start_delete(rs, slot, g, -1);
		else if (g->state == ENT_ADDING)
			g->gone = 1;
	}
}

int locus_regions_slot_busy(const struct locus_regions *rs, uint32_t slot)
{
	if (!rs || slot >= rs->n_slots)
		return 0;
	for (uint32_t i = 0; i < MAXR; i++)
		if (rs->ents[(size_t)slot * MAXR + i].state != ENT_FREE)
			return 1;
	return 0;
}

int locus_regions_create(const struct locus_regions_params *p, struct locus_regions **out,
			 struct locus_error *err)
{
	struct locus_regions *rs;
	int ret;

	if (!p || !p->clients || !p->engine || !p->ctrs || !p->ctl_blk || !p->attached)
		return locus_error_set(err, EINVAL, "regions: missing parameters");
	rs = calloc(1, sizeof(*rs));
	if (!rs)
		return locus_error_set(err, ENOMEM, "out of memory");
	rs->p = *p;
	rs->lfd = -1;
	rs->n_slots = p->clients->p.n_slots;
	for (int i = 0; i < MAX_CONNS; i++)
		rs->conns[i] = (struct conn){ .fd = -1 };
	rs->ents = calloc((size_t)rs->n_slots * MAXR, sizeof(*rs->ents));
	rs->seq = calloc(rs->n_slots, sizeof(*rs->seq));
	rs->bytes = calloc(rs->n_slots, sizeof(*rs->bytes));
	if (!rs->ents || !rs->seq || !rs->bytes) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto err_free;
	}
	for (size_t i = 0; i < (size_t)rs->n_slots * MAXR; i++)
		rs->ents[i] = (struct ent){ .fd = -1, .conn = -1 };
	ret = register_counters(rs, err);
	if (ret < 0)
		goto err_free;
	ret = locus_client_reg_sock_path(p->instance, rs->path, sizeof(rs->path));
	if (ret < 0) {
		locus_error_set(err, -ret, "registration socket path: %s", strerror(-ret));
		goto err_free;
	}
	/* the segment is ours (its creation refused a live owner): so is a stale socket */
	rs->lfd = locus_seqpkt_listen(rs->path, "registration socket", 0660, 64, err);
	if (rs->lfd < 0) {
		ret = rs->lfd;
		goto err_free;
	}
	*out = rs;
	return 0;

err_free:
	free(rs->ents);
	free(rs->seq);
	free(rs->bytes);
	free(rs);
	return ret;
}

void locus_regions_destroy(struct locus_regions *rs)
{
	if (!rs)
		return;
	for (int ci = 0; ci < MAX_CONNS; ci++)
		conn_close(rs, ci);
	close(rs->lfd);
	unlink(rs->path);
	for (uint32_t slot = 0; slot < rs->n_slots; slot++)
		for (uint32_t i = 0; i < MAXR; i++)
			if (rs->ents[(size_t)slot * MAXR + i].state != ENT_FREE)
				ent_release(rs, slot, &rs->ents[(size_t)slot * MAXR + i]);
	free(rs->ents);
	free(rs->seq);
	free(rs->bytes);
	free(rs);
}
