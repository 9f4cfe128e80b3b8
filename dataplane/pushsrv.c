// SPDX-License-Identifier: MIT
/*
 * The control socket's server: who may push, the request's checks, and a
 * push's way through a slot, the publish and the readers' verdict.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "locus_counters_priv.h"
#include "locus_err_priv.h"
#include "locus_push.h"
#include "locus_pushsrv.h"
#include "locus_seqpkt.h"

#define MAX_CONNS       8
#define ACCEPT_PER_PASS 8
#define REQ_TIMEOUT_NS  1000000000ull
#define REQ_TIMEOUT_NS_REFUSED 500000000ull /* a sender refused anyway holds a connection less */
#define LOG_PERIOD_NS   1000000000ull
#define COPY_CHUNK      (1u << 20)
#define MAX_FDS         4
#define MAX_GROUPS      1024
#define NEED_SEALS      (F_SEAL_SHRINK | F_SEAL_WRITE)

enum conn_state { C_FREE = 0, C_READ, C_RESERVE, C_COPY, C_WAIT };

struct conn {
	int fd;
	enum conn_state st;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int allowed;
	uint64_t deadline_ns;   /* C_READ: the request's; after: the push's timeout */
	struct locus_push_req q;
	int tfd;                /* the table's memfd */
	uint8_t *dst;           /* the reserved slot */
	uint64_t done;          /* bytes copied into it */
	uint64_t gen;           /* generation published */
	/* a push from inside locusd (locus_pushsrv_submit): no socket, the answer to done */
	void (*done_cb)(void *arg, const struct locus_push_rep *rep);
	void *done_arg;
};

struct locus_pushsrv {
	struct locus_pushsrv_params p;
	char path[LOCUS_SEQPKT_PATH_MAX];
	int lfd;
	unsigned n_channels;
	struct locus_table_writer *w[LOCUS_TABLE_MAX_CHANNELS];
	int busy[LOCUS_TABLE_MAX_CHANNELS]; /* the connection pushing to it, -1 none */
	struct conn conns[MAX_CONNS];
	uint64_t c_pushes, c_refused;
	uint64_t log_next_ns;
	unsigned log_left_out;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int locus_pushsrv_allowed(uid_t uid, gid_t gid, const gid_t *groups, int n, gid_t ctl_gid)
{
	if (uid == 0 || uid == geteuid())
		return 1;
	if (ctl_gid == LOCUS_PUSHSRV_NO_GROUP)
		return 0;
	if (gid == ctl_gid)
		return 1;
	for (int i = 0; i < n; i++)
		if (groups[i] == ctl_gid)
			return 1;
	return 0;
}

gid_t locus_pushsrv_group(const char *name, struct locus_error *err)
{
	struct group gr, *res = NULL;
	char buf[4096], *end;
	unsigned long v;

	if (!name || !*name) {
		locus_error_set(err, ENOENT, "no control group configured: only root and locusd's "
				"own user may push tables");
		return LOCUS_PUSHSRV_NO_GROUP;
	}
	errno = 0;
	v = strtoul(name, &end, 10);
	if (!*end && !errno && v < LOCUS_PUSHSRV_NO_GROUP)
		return (gid_t)v;
	if (getgrnam_r(name, &gr, buf, sizeof(buf), &res) == 0 && res)
		return res->gr_gid;
	locus_error_set(err, ENOENT, "control group '%s' does not exist: only root and locusd's "
			"own user may push tables", name);
	return LOCUS_PUSHSRV_NO_GROUP;
}

/* ---- answers ------------------------------------------------------------------- */

static void conn_close(struct locus_pushsrv *s, int ci)
{
	struct conn *c = &s->conns[ci];

	if (c->st == C_FREE)
		return;
	if (c->st >= C_RESERVE && c->q.channel < s->n_channels && s->busy[c->q.channel] == ci)
		s->busy[c->q.channel] = -1;
	if (c->tfd >= 0)
		close(c->tfd);
	if (c->fd >= 0)
		close(c->fd);
	*c = (struct conn){ .fd = -1, .tfd = -1 };
}

/*
 * Send rep (best effort: a sender that left misses nothing) and close; a
 * push from inside locusd gets it through its callback.
 */
static void answer(struct locus_pushsrv *s, int ci, struct locus_push_rep *rep)
{
	struct conn *c = &s->conns[ci];
	void (*cb)(void *, const struct locus_push_rep *) = c->done_cb;
	void *arg = c->done_arg;

	rep->magic = LOCUS_PUSH_MAGIC;
	rep->version = LOCUS_PUSH_VERSION;
	if (!cb)
		(void)!locus_seqpkt_send(c->fd, rep, sizeof(*rep), -1);
	conn_close(s, ci);
	if (cb)
		cb(arg, rep);
}

/* A log line for a refusal, at most one a second (with how many were left out). */
static void log_refusal(struct locus_pushsrv *s, const struct conn *c, const char *msg)
{
	uint64_t now = mono_ns();

	if (now < s->log_next_ns) {
		s->log_left_out++;
		return;
	}
	fprintf(stderr, "locusd: table push refused: pid %d uid %u gid %u: %s", (int)c->pid,
		(unsigned)c->uid, (unsigned)c->gid, msg);
	if (s->log_left_out)
		fprintf(stderr, " (%u more refusals not logged)", s->log_left_out);
	fputc('\n', stderr);
	s->log_left_out = 0;
	s->log_next_ns = now + LOG_PERIOD_NS;
}

/* Refuse, count by reason, log, answer. */
static void refuse(struct locus_pushsrv *s, int ci, enum locus_push_refusal why, int status,
		   const char *fmt, ...)
{
	struct locus_push_rep rep = { .status = status, .channel = s->conns[ci].q.channel };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rep.msg, sizeof(rep.msg), fmt, ap);
	va_end(ap);
	locus_counter_add_elem(s->p.ctl_blk, s->c_refused, why, 1);
	log_refusal(s, &s->conns[ci], rep.msg);
	answer(s, ci, &rep);
}

/* ---- a push's steps ------------------------------------------------------------- */

/* The readers decided (or the time is up): tell the sender. */
static void step_wait(struct locus_pushsrv *s, int ci)
{
	struct conn *c = &s->conns[ci];
	struct locus_table_wait_result res;
	struct locus_push_rep rep = { .channel = c->q.channel, .generation = c->gen };
	int rc = locus_table_wait(s->p.tables, c->q.channel, c->gen, 0, &res);

	if (rc == -ETIMEDOUT && mono_ns() < c->deadline_ns)
		return;
	rep.timed_out = rc == -ETIMEDOUT;
	rep.n_live = res.n_live;
	rep.n_adopted = res.n_adopted;
	rep.n_refused = res.n_refused;
	rep.refused_reader = res.refused_reader;
	rep.refused_gen = res.refused_gen;
	rep.refused_code = res.refused_code;
	memcpy(rep.refused_msg, res.refused_msg, sizeof(rep.refused_msg));
	answer(s, ci, &rep);
}

/* Copy the next piece of the table into the slot; publish once all is there. */
static void step_copy(struct locus_pushsrv *s, int ci)
{
	struct conn *c = &s->conns[ci];
	struct locus_error err = { 0 };
	uint64_t want = LOCUS_MIN((uint64_t)COPY_CHUNK, c->q.len - c->done);
	ssize_t n;
	int64_t gen;

	do
		n = pread(c->tfd, c->dst + c->done, want, (off_t)c->done);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		refuse(s, ci, LOCUS_PUSHREF_IO, n < 0 ? -errno : -EIO,
		       "reading the table at byte %llu: %s", (unsigned long long)c->done,
		       n < 0 ? strerror(errno) : "the file ended early");
		return;
	}
	c->done += (uint64_t)n;
	if (c->done < c->q.len)
		return;
	gen = locus_table_writer_publish(s->w[c->q.channel], c->q.len, &err);
	if (gen < 0) {
		refuse(s, ci, LOCUS_PUSHREF_RANGE, (int)gen, "%s", err.msg);
		return;
	}
	c->gen = (uint64_t)gen;
	locus_counter_inc(s->p.ctl_blk, s->c_pushes);
	fprintf(stderr, "locusd: table push from pid %d uid %u: channel %u, %llu bytes, "
		"generation %llu\n", (int)c->pid, (unsigned)c->uid, c->q.channel,
		(unsigned long long)c->q.len, (unsigned long long)c->gen);
	c->st = C_WAIT;
	step_wait(s, ci);
}

/* A slot no reader holds, retried each pass until the push's timeout. */
static void step_reserve(struct locus_pushsrv *s, int ci)
{
	struct conn *c = &s->conns[ci];
	struct locus_error err = { 0 };
	size_t cap;
	void *dst;
	int rc = locus_table_writer_reserve(s->w[c->q.channel], 0, &dst, &cap, &err);

	if (rc == -EBUSY && mono_ns() < c->deadline_ns)
		return;
	if (rc < 0) {
		refuse(s, ci, LOCUS_PUSHREF_BUSY, rc, "%s", err.msg);
		return;
	}
	c->dst = dst;
	c->done = 0;
	c->st = C_COPY;
	step_copy(s, ci);
}

static void step(struct locus_pushsrv *s, int ci)
{
	switch (s->conns[ci].st) {
	case C_RESERVE:
		step_reserve(s, ci);
		break;
	case C_COPY:
		step_copy(s, ci);
		break;
	case C_WAIT:
		step_wait(s, ci);
		break;
	default:
		break;
	}
}

/* ---- requests ----------------------------------------------------------------- */

/* The table fd: a sealed memfd holding at least len bytes (nothing that may block). */
static int check_fd(struct locus_pushsrv *s, int ci, int fd)
{
	const struct locus_push_req *q = &s->conns[ci].q;
	size_t slot = 0;
	struct stat st;
	int seals;

	locus_table_channel_geometry(s->p.tables, q->channel, NULL, &slot);
	if (q->len == 0 || q->len > slot) {
		refuse(s, ci, LOCUS_PUSHREF_RANGE, -LOCUS_ERANGE,
		       "a table of %llu bytes: channel %u takes 1..%zu (table_slot_size)",
		       (unsigned long long)q->len, q->channel, slot);
		return -1;
	}
	seals = fcntl(fd, F_GET_SEALS);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || seals < 0 ||
	    (seals & NEED_SEALS) != NEED_SEALS) {
		refuse(s, ci, LOCUS_PUSHREF_MALFORMED, -LOCUS_EPROTO,
		       "the table must come in a memfd sealed against writing and shrinking");
		return -1;
	}
	if ((uint64_t)st.st_size < q->len) {
		refuse(s, ci, LOCUS_PUSHREF_RANGE, -LOCUS_ERANGE,
		       "the request says %llu bytes, its memfd holds %lld",
		       (unsigned long long)q->len, (long long)st.st_size);
		return -1;
	}
	return 0;
}

static void start_push(struct locus_pushsrv *s, int ci, int fd)
{
	struct conn *c = &s->conns[ci];
	uint32_t ms = c->q.timeout_ms ? c->q.timeout_ms : 2000;

	if (fd < 0) {
		refuse(s, ci, LOCUS_PUSHREF_MALFORMED, -EBADF, "the push carries no table fd");
		return;
	}
	if (c->q.channel >= s->n_channels) {
		close(fd);
		refuse(s, ci, LOCUS_PUSHREF_RANGE, -LOCUS_ERANGE, "no table channel %u (%u channels)",
		       c->q.channel, s->n_channels);
		return;
	}
	if (check_fd(s, ci, fd) < 0) {
		close(fd);
		return;
	}
	if (s->busy[c->q.channel] >= 0) {
		close(fd);
		refuse(s, ci, LOCUS_PUSHREF_BUSY, -EBUSY,
		       "a push to channel %u is in progress (pid %d)", c->q.channel,
		       (int)s->conns[s->busy[c->q.channel]].pid);
		return;
	}
	c->tfd = fd;
	s->busy[c->q.channel] = ci;
	c->deadline_ns = mono_ns() + (uint64_t)ms * 1000000ull;
	c->st = C_RESERVE;
	step_reserve(s, ci);
}

static void answer_status(struct locus_pushsrv *s, int ci)
{
	struct locus_push_rep rep = { .n_channels = s->n_channels };

	for (unsigned ch = 0; ch < s->n_channels; ch++)
		rep.published[ch] = LOCUS_TABLE_GEN(locus_table_published(s->p.tables, ch));
	answer(s, ci, &rep);
}

/* Read a connection's request if it came: checks, then the sender's right to it. */
static void serve(struct locus_pushsrv *s, int ci)
{
	struct conn *c = &s->conns[ci];
	struct locus_seqpkt_fds in;
	ssize_t n;
	int fd;

	n = locus_seqpkt_recv(c->fd, &c->q, sizeof(c->q), MSG_DONTWAIT, MAX_FDS, &in);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		if (mono_ns() > c->deadline_ns)
			refuse(s, ci, c->allowed ? LOCUS_PUSHREF_MALFORMED : LOCUS_PUSHREF_PERM,
			       c->allowed ? -ETIMEDOUT : -EACCES, "no request in time");
		return;
	}
	fd = locus_seqpkt_sole_fd(&in);
	if (n <= 0 || n != (ssize_t)sizeof(c->q) || in.trunc || c->q.magic != LOCUS_PUSH_MAGIC ||
	    c->q.version != LOCUS_PUSH_VERSION || c->q.reserved || in.n > 1 ||
	    (c->q.op == LOCUS_PUSH_STATUS && in.n) ||
	    (c->q.op != LOCUS_PUSH_TABLE && c->q.op != LOCUS_PUSH_STATUS)) {
		if (fd >= 0)
			close(fd);
		if (n == (ssize_t)sizeof(c->q) && c->q.magic == LOCUS_PUSH_MAGIC &&
		    c->q.version != LOCUS_PUSH_VERSION)
			refuse(s, ci, LOCUS_PUSHREF_MALFORMED, -LOCUS_EVERSION,
			       "push protocol version %u, locusd speaks %u", c->q.version,
			       LOCUS_PUSH_VERSION);
		else
			refuse(s, ci, LOCUS_PUSHREF_MALFORMED, n == 0 ? -ECONNRESET : -LOCUS_EPROTO,
			       n == 0 ? "closed before its request" : "malformed push request");
		return;
	}
	if (!c->allowed) {
		if (fd >= 0)
			close(fd);
		if (s->p.ctl_gid == LOCUS_PUSHSRV_NO_GROUP)
			refuse(s, ci, LOCUS_PUSHREF_PERM, -EACCES,
			       "uid %u may not push tables: locusd has no control group (ctl_group), "
			       "only root and its own user may", (unsigned)c->uid);
		else
			refuse(s, ci, LOCUS_PUSHREF_PERM, -EACCES,
			       "uid %u is not in the control group (gid %u, ctl_group): only the "
			       "control plane pushes tables", (unsigned)c->uid,
			       (unsigned)s->p.ctl_gid);
		return;
	}
	if (c->q.op == LOCUS_PUSH_STATUS)
		answer_status(s, ci);
	else
		start_push(s, ci, fd);
}

/* The sender's supplementary groups as they were at connect(). */
static int peer_groups(int fd, gid_t *groups)
{
	socklen_t len = MAX_GROUPS * sizeof(gid_t);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return -1; /* ERANGE: more than MAX_GROUPS; judged by the primary gid only */
	return (int)(len / sizeof(gid_t));
}

static void accept_some(struct locus_pushsrv *s)
{
	static gid_t groups[MAX_GROUPS];
	struct pollfd pfd = { .fd = s->lfd, .events = POLLIN };

	/* accept4 on an empty backlog still makes and frees a socket and a file */
	if (poll(&pfd, 1, 0) != 1)
		return;
	for (int k = 0; k < ACCEPT_PER_PASS; k++) {
		struct ucred cr;
		socklen_t cl = sizeof(cr);
		int ci, fd, ng;

		for (ci = 0; ci < MAX_CONNS; ci++)
			if (s->conns[ci].st == C_FREE)
				break;
		if (ci == MAX_CONNS)
			return; /* the backlog holds the rest until a connection ends */
		fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
			close(fd);
			continue;
		}
		ng = peer_groups(fd, groups);
		s->conns[ci] = (struct conn){
			.fd = fd, .st = C_READ, .pid = cr.pid, .uid = cr.uid, .gid = cr.gid,
			.tfd = -1,
			.allowed = locus_pushsrv_allowed(cr.uid, cr.gid, groups, ng < 0 ? 0 : ng,
							 s->p.ctl_gid),
		};
		s->conns[ci].deadline_ns = mono_ns() + (s->conns[ci].allowed ? REQ_TIMEOUT_NS :
							REQ_TIMEOUT_NS_REFUSED);
		serve(s, ci);
	}
}

void locus_pushsrv_poll(struct locus_pushsrv *s)
{
	if (!s)
		return;
	accept_some(s);
	for (int ci = 0; ci < MAX_CONNS; ci++) {
		if (s->conns[ci].st == C_READ)
			serve(s, ci);
		else if (s->conns[ci].st != C_FREE)
			step(s, ci);
	}
}

int locus_pushsrv_submit(struct locus_pushsrv *s, unsigned channel, const void *buf, size_t len,
			 uint32_t timeout_ms,
			 void (*done)(void *arg, const struct locus_push_rep *rep), void *arg)
{
	int ci, fd;
	struct conn *c;

	for (ci = 0; ci < MAX_CONNS && s->conns[ci].st != C_FREE; ci++)
		;
	if (ci == MAX_CONNS)
		return -EBUSY;
	/* the table in a memfd sealed as a sender's: the same checks, the same copy */
	fd = memfd_create("locus-table", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (write(fd, buf, len) != (ssize_t)len ||
	    fcntl(fd, F_ADD_SEALS, NEED_SEALS | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int ret = errno ? -errno : -EIO;

		close(fd);
		return ret;
	}
	c = &s->conns[ci];
	*c = (struct conn){ .fd = -1, .tfd = -1, .st = C_READ, .pid = getpid(), .uid = geteuid(),
			    .gid = getegid(), .allowed = 1, .done_cb = done, .done_arg = arg };
	c->q.channel = channel;
	c->q.len = len;
	c->q.timeout_ms = timeout_ms;
	start_push(s, ci, fd);
	return 0;
}

/* ---- life -------------------------------------------------------------------------- */

static int register_counters(struct locus_pushsrv *s, struct locus_error *err)
{
	const struct locus_ctr_desc pushes = {
		.name = "table_pushes", .kind = LOCUS_CTR_COUNTER,
		.help = "tables the control socket accepted and published",
	};
	const struct locus_ctr_desc refused = {
		.name = "table_pushes_refused", .kind = LOCUS_CTR_COUNTER, .ndims = 1,
		.dim = { LOCUS_PUSHREF_N }, .label = { "reason" },
		.help = "control socket requests refused by reason: 0 not in the control group "
			"1 malformed 2 range 3 busy 4 read error",
	};
	int ret = locus_counters_register(s->p.ctrs, &pushes, &s->c_pushes, err);

	return ret < 0 ? ret : locus_counters_register(s->p.ctrs, &refused, &s->c_refused, err);
}

int locus_pushsrv_create(const struct locus_pushsrv_params *p, struct locus_pushsrv **out,
			 struct locus_error *err)
{
	struct locus_pushsrv *s;
	int ret;

	if (!p || !p->tables || !p->ctrs || !p->ctl_blk || !out)
		return locus_error_set(err, EINVAL, "control socket: missing parameters");
	s = calloc(1, sizeof(*s));
	if (!s)
		return locus_error_set(err, ENOMEM, "out of memory");
	s->p = *p;
	s->lfd = -1;
	s->n_channels = locus_table_channels(p->tables);
	for (int i = 0; i < MAX_CONNS; i++)
		s->conns[i] = (struct conn){ .fd = -1, .tfd = -1 };
	for (unsigned ch = 0; ch < LOCUS_TABLE_MAX_CHANNELS; ch++)
		s->busy[ch] = -1;
	for (unsigned ch = 0; ch < s->n_channels; ch++) {
		ret = locus_table_writer_open(p->tables, ch, &s->w[ch], err);
		if (ret < 0)
			goto err_writers;
	}
	ret = register_counters(s, err);
	if (ret < 0)
		goto err_writers;
	ret = locus_push_sock_path(p->instance, s->path, sizeof(s->path));
	if (ret < 0) {
		locus_error_set(err, -ret, "control socket path: %s", strerror(-ret));
		goto err_writers;
	}
	/*
	 * The instance is ours (the segment's creation refused a live owner): so
	 * is a stale socket. 0660: the service group reaches it, and its
	 * refusals are counted here.
	 */
	s->lfd = locus_seqpkt_listen(s->path, "control socket", 0660, 16, err);
	if (s->lfd < 0) {
		ret = s->lfd;
		goto err_writers;
	}
	*out = s;
	return 0;

err_writers:
	for (unsigned ch = 0; ch < s->n_channels; ch++)
		locus_table_writer_close(s->w[ch]);
	free(s);
	return ret;
}

void locus_pushsrv_destroy(struct locus_pushsrv *s)
{
	if (!s)
		return;
	for (int ci = 0; ci < MAX_CONNS; ci++)
		conn_close(s, ci);
	close(s->lfd);
	unlink(s->path);
	for (unsigned ch = 0; ch < s->n_channels; ch++)
		locus_table_writer_close(s->w[ch]);
	free(s);
}
