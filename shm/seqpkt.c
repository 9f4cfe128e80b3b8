// SPDX-License-Identifier: MIT
/*
 * Unix SOCK_SEQPACKET sockets: listening, connecting, a message with its
 * fds each way, and a client's bounded request and answer (locus_seqpkt.h).
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "locus_err_priv.h"
#include "locus_seqpkt.h"

/* sockaddr_un for path; -ENAMETOOLONG if it does not fit. */
static int sock_addr(const char *path, struct sockaddr_un *sa)
{
	size_t len = strlen(path);

	if (len >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	*sa = (struct sockaddr_un){ .sun_family = AF_UNIX };
	memcpy(sa->sun_path, path, len + 1);
	return 0;
}

int locus_seqpkt_listen(const char *path, const char *what, mode_t mode, int backlog,
			struct locus_error *err)
{
	struct sockaddr_un sa;
	int fd, ret;

	ret = sock_addr(path, &sa);
	if (ret < 0)
		return locus_error_set(err, -ret, "%s %s: %s", what, path, strerror(-ret));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return locus_error_set(err, errno, "socket: %s", strerror(errno));
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, mode) < 0 ||
	    listen(fd, backlog) < 0) {
		ret = locus_error_set(err, errno, "%s %s: %s", what, path, strerror(errno));
		goto err_sock;
	}
	return fd;

err_sock:
	close(fd);
	unlink(path);
	return ret;
}

int locus_seqpkt_connect(const char *path, int *conn_err, struct locus_error *err)
{
	struct sockaddr_un sa;
	int fd, ret;

	*conn_err = 0;
	ret = sock_addr(path, &sa);
	if (ret < 0) {
		*conn_err = -ret;
		return ret;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return locus_error_set(err, errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		*conn_err = errno == EAGAIN ? ECONNREFUSED : errno;
		close(fd);
		return -*conn_err;
	}
	return fd;
}

ssize_t locus_seqpkt_send(int sock, const void *buf, size_t len, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	memset(&u, 0, sizeof(u));
	if (fd >= 0) {
		struct cmsghdr *cm;

		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Keep the first max_fds fds of mh's SCM_RIGHTS in in, close the rest. */
static void take_fds(struct msghdr *mh, int max_fds, struct locus_seqpkt_fds *in)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (in->n < max_fds)
				in->fd[in->n++] = fd;
			else
				close(fd);
		}
	}
}

ssize_t locus_seqpkt_recv(int sock, void *buf, size_t cap, int flags, int max_fds,
			  struct locus_seqpkt_fds *in)
{
	union {
		char buf[CMSG_SPACE(LOCUS_SEQPKT_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;
	int e;

	in->n = 0;
	in->trunc = 0;
	if (max_fds > LOCUS_SEQPKT_MAX_FDS)
		max_fds = LOCUS_SEQPKT_MAX_FDS;
	if (max_fds > 0) {
		/* room for max_fds: the kernel drops (and flags) the ones beyond */
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)max_fds * sizeof(int));
	}
	n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return n; /* the control buffer was not written */
	e = errno;
	take_fds(&mh, max_fds, in);
	in->trunc = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
	errno = e;
	return n;
}

int locus_seqpkt_sole_fd(const struct locus_seqpkt_fds *in)
{
	if (in->n == 1)
		return in->fd[0];
	for (int i = 0; i < in->n; i++)
		close(in->fd[i]);
	return -1;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int locus_seqpkt_call(int sock, struct locus_seqpkt_call *c, struct locus_error *err)
{
	int64_t deadline = mono_ms() + c->timeout_ms;
	struct locus_seqpkt_fds in;
	ssize_t n;

	c->rep_len = -1;
	c->rep_errno = 0;
	c->rep_fd = -1;
	/* a fresh SEQPACKET connection has room for one small message */
	n = locus_seqpkt_send(sock, c->req, c->req_len, c->req_fd);
	if (n != (ssize_t)c->req_len) {
		int e = n < 0 ? errno : EIO;

		return locus_error_set(err, e, "sending the request to locusd: %s",
				       n < 0 ? strerror(e) : "short write");
	}
	for (;;) {
		struct pollfd pfd = { .fd = sock, .events = POLLIN };
		int64_t left = deadline - mono_ms();
		int r;

		if (left <= 0)
			return locus_error_set(err, ETIMEDOUT, "locusd did not answer within %u ms",
					       c->timeout_ms);
		r = poll(&pfd, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return locus_error_set(err, errno, "poll: %s", strerror(errno));
		if (r == 0)
			continue;
		n = locus_seqpkt_recv(sock, c->rep, c->rep_cap, 0, 1, &in);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		break;
	}
	c->rep_len = n;
	if (n < 0)
		c->rep_errno = errno;
	else if (in.n)
		c->rep_fd = in.fd[0];
	return 0;
}
