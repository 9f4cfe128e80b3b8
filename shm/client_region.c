// SPDX-License-Identifier: MIT
/*
 * Client library: buffer regions. A dma-buf fd travels to locusd over the
 * registration socket next to the segment (SCM_RIGHTS); locusd answers once
 * the region is usable (or why not). One connection per request, every
 * wait bounded: a registration is a control-path operation, rare and slow
 * next to the rings.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client_priv.h"
#include "locus_client.h"
#include "locus_shm.h"

#define DEFAULT_TIMEOUT_MS 2000u

int locus_client_reg_sock_path(const char *instance, char *buf, size_t len)
{
	return locus_shm_run_path(instance, LOCUS_REG_SOCK_SUFFIX, buf, len);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int locus_client_reg_connect(const char *instance, struct locus_error *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, ret;

	ret = locus_client_reg_sock_path(instance, sa.sun_path, sizeof(sa.sun_path));
	if (ret < 0)
		return locus_error_set(err, -ret, "registration socket of '%s': %s", instance,
				       strerror(-ret));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return locus_error_set(err, errno, "socket: %s", strerror(errno));
	/* a unix socket connects at once or fails: no EINPROGRESS to wait for */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = errno == EAGAIN ? ECONNREFUSED : errno;
		close(fd);
		return locus_error_set(err, ret, "locusd registration socket %s: %s", sa.sun_path,
				       strerror(ret));
	}
	return fd;
}

/* The one fd a message carried (*fd, else -1); any others are closed. */
static void take_fds(struct msghdr *mh, int *fd)
{
	*fd = -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int f;

			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (*fd < 0)
				*fd = f;
			else
				close(f);
		}
	}
}

int locus_client_reg_transact(int sock, const struct locus_reg_req *req, int fd,
			      struct locus_reg_rep *rep, int *fd_in, uint32_t timeout_ms,
			      struct locus_error *err)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u, ur;
	struct iovec iov = { .iov_base = (void *)req, .iov_len = sizeof(*req) };
	struct iovec riov = { .iov_base = rep, .iov_len = sizeof(*rep) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct msghdr rh = { .msg_iov = &riov, .msg_iovlen = 1 };
	int64_t deadline = mono_ms() + timeout_ms;
	int got = -1, ret;
	ssize_t n;

	if (fd_in)
		*fd_in = -1;

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
	/* a fresh SEQPACKET connection has room for one small message */
	n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	if (n != (ssize_t)sizeof(*req))
		return locus_error_set(err, n < 0 ? errno : EIO, "sending the request to locusd: %s",
				       n < 0 ? strerror(errno) : "short write");
	for (;;) {
		struct pollfd pfd = { .fd = sock, .events = POLLIN };
		int64_t left = deadline - mono_ms();
		int r;

		if (left <= 0)
			return locus_error_set(err, ETIMEDOUT, "locusd did not answer within %u ms",
					       timeout_ms);
		r = poll(&pfd, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return locus_error_set(err, errno, "poll: %s", strerror(errno));
		if (r == 0)
			continue;
		rh.msg_control = ur.buf;
		rh.msg_controllen = sizeof(ur.buf);
		n = recvmsg(sock, &rh, MSG_CMSG_CLOEXEC);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n > 0)
			take_fds(&rh, &got);
		break;
	}
	if (n == 0 || (n < 0 && errno == ECONNRESET)) {
		ret = locus_error_set(err, ECONNRESET, "locusd closed the connection without an "
				      "answer");
		goto err_close;
	}
	if (n < 0) {
		ret = locus_error_set(err, errno, "reading locusd's answer: %s", strerror(errno));
		goto err_close;
	}
	if (n != (ssize_t)sizeof(*rep) || rep->magic != LOCUS_REG_MAGIC) {
		ret = locus_error_set(err, LOCUS_EPROTO, "malformed answer from locusd (%zd bytes)",
				      n);
		goto err_close;
	}
	if (rep->version != LOCUS_REG_VERSION) {
		ret = locus_error_set(err, LOCUS_EVERSION, "locusd speaks registration protocol "
				      "version %u, this client %u", rep->version, LOCUS_REG_VERSION);
		goto err_close;
	}
	rep->msg[sizeof(rep->msg) - 1] = 0;
	if (fd_in)
		*fd_in = got;
	else if (got >= 0)
		close(got);
	return 0;

err_close:
	if (got >= 0)
		close(got);
	return ret;
}

static int request(struct locus_client *c, struct locus_reg_req *req, int fd,
		   uint32_t timeout_ms, struct locus_reg_rep *rep, struct locus_error *err)
{
	int sock, ret;

	req->magic = LOCUS_REG_MAGIC;
	req->version = LOCUS_REG_VERSION;
	req->slot = locus_client_slot(c);
	req->generation = locus_client_generation(c);
	sock = locus_client_reg_connect(locus_client_instance(c), err);
	if (sock < 0)
		return sock;
	ret = locus_client_reg_transact(sock, req, fd, rep, NULL,
					timeout_ms ? timeout_ms : DEFAULT_TIMEOUT_MS, err);
	close(sock);
	if (ret < 0)
		return ret;
	if (rep->status < 0)
		return locus_error_set(err, -rep->status, "locusd refused: %s",
				       rep->msg[0] ? rep->msg : locus_strerror(rep->status));
	return 0;
}

int locus_client_register_dmabuf(struct locus_client *c, int fd, uint64_t offset, uint64_t len,
				 uint32_t timeout_ms, uint32_t *region_id, uint32_t *flags,
				 struct locus_error *err)
{
	struct locus_reg_req req = { .op = LOCUS_REG_DMABUF, .offset = offset, .len = len };
	struct locus_reg_rep rep;
	int ret;

	if (!c || !region_id)
		return locus_error_set(err, EINVAL, "no client or no place for the region id");
	if (fd < 0)
		return locus_error_set(err, EBADF, "no dma-buf fd");
	ret = request(c, &req, fd, timeout_ms, &rep, err);
	if (ret < 0)
		return ret;
	*region_id = rep.region;
	if (flags)
		*flags = rep.flags;
	return 0;
}

int locus_client_unregister_region(struct locus_client *c, uint32_t region_id,
				   uint32_t timeout_ms, struct locus_error *err)
{
	struct locus_reg_req req = { .op = LOCUS_REG_UNREGISTER, .region = region_id };
	struct locus_reg_rep rep;

	if (!c)
		return locus_error_set(err, EINVAL, "no client");
	return request(c, &req, -1, timeout_ms, &rep, err);
}
