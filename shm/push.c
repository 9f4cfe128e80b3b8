// SPDX-License-Identifier: MIT
/*
 * Table pushes, the sender's side (locusctl): the table goes into a sealed
 * memfd, the memfd to locusd over the control socket, and the reply says
 * what the data plane did with it. Every wait is bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "locus_push.h"
#include "locus_shm.h"

#define DEFAULT_TIMEOUT_MS 2000u
#define ANSWER_MARGIN_MS   3000u /* locusd's own passes on top of the push's bound */
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

int locus_push_sock_path(const char *instance, char *buf, size_t len)
{
	return locus_shm_run_path(instance, LOCUS_PUSH_SOCK_SUFFIX, buf, len);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The table in a memfd nobody can change any more: locusd reads exactly it. */
static int sealed_copy(const void *buf, size_t len, struct locus_error *err)
{
	size_t done = 0;
	int fd;

	fd = memfd_create("locus-table", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return locus_error_set(err, errno, "memfd_create: %s", strerror(errno));
	while (done < len) {
		ssize_t n = write(fd, (const char *)buf + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;

			close(fd);
			return locus_error_set(err, e, "writing the table to a memfd: %s", strerror(e));
		}
		done += (size_t)n;
	}
	if (fcntl(fd, F_ADD_SEALS, SEALS) < 0) {
		int e = errno;

		close(fd);
		return locus_error_set(err, e, "sealing the table's memfd: %s", strerror(e));
	}
	return fd;
}

static int connect_ctl(const char *instance, struct locus_error *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, ret;

	ret = locus_push_sock_path(instance, sa.sun_path, sizeof(sa.sun_path));
	if (ret < 0)
		return locus_error_set(err, -ret, "control socket of '%s': %s", instance,
				       strerror(-ret));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return locus_error_set(err, errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = errno == EAGAIN ? ECONNREFUSED : errno;
		close(fd);
		if (ret == EACCES)
			return locus_error_set(err, EACCES, "locusd control socket %s is for the "
					       "service group", sa.sun_path);
		if (ret == ENOENT)
			return locus_error_set(err, ENOENT, "no locusd control socket %s (is locusd "
					       "running?)", sa.sun_path);
		return locus_error_set(err, ret, "locusd control socket %s: cannot connect",
				       sa.sun_path);
	}
	return fd;
}

/* One request (with fd if >= 0), one reply, within timeout_ms. */
static int transact(const char *instance, const struct locus_push_req *q, int fd,
		    struct locus_push_rep *rep, uint32_t timeout_ms, struct locus_error *err)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)q, .iov_len = sizeof(*q) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int64_t deadline = mono_ms() + timeout_ms;
	int sock, ret;
	ssize_t n;

	sock = connect_ctl(instance, err);
	if (sock < 0)
		return sock;
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
	n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	if (n != (ssize_t)sizeof(*q)) {
		ret = locus_error_set(err, n < 0 ? errno : EIO, "sending the request to locusd: %s",
				      n < 0 ? strerror(errno) : "short write");
		goto out;
	}
	for (;;) {
		struct pollfd pfd = { .fd = sock, .events = POLLIN };
		int64_t left = deadline - mono_ms();
		int r;

		if (left <= 0) {
			ret = locus_error_set(err, ETIMEDOUT, "locusd did not answer within %u ms",
					      timeout_ms);
			goto out;
		}
		r = poll(&pfd, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = locus_error_set(err, errno, "poll: %s", strerror(errno));
			goto out;
		}
		if (r == 0)
			continue;
		n = recv(sock, rep, sizeof(*rep), 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		break;
	}
	if (n == 0) {
		ret = locus_error_set(err, ECONNRESET, "locusd closed the control connection "
				      "without an answer");
	} else if (n != (ssize_t)sizeof(*rep) || rep->magic != LOCUS_PUSH_MAGIC) {
		ret = locus_error_set(err, LOCUS_EPROTO, "malformed answer from locusd (%zd bytes)",
				      n);
	} else if (rep->version != LOCUS_PUSH_VERSION) {
		ret = locus_error_set(err, LOCUS_EVERSION, "locusd speaks push protocol version %u, "
				      "this build %u", rep->version, LOCUS_PUSH_VERSION);
	} else {
		rep->msg[sizeof(rep->msg) - 1] = 0;
		rep->refused_msg[sizeof(rep->refused_msg) - 1] = 0;
		ret = rep->status < 0 ? locus_error_set(err, -rep->status, "locusd refused: %s",
							rep->msg[0] ? rep->msg :
							locus_strerror(rep->status))
				      : 0;
	}
out:
	close(sock);
	return ret;
}

int locus_push_table(const char *instance, unsigned ch, const void *buf, size_t len,
		     uint32_t timeout_ms, struct locus_push_result *res, struct locus_error *err)
{
	struct locus_push_req q = { .magic = LOCUS_PUSH_MAGIC, .version = LOCUS_PUSH_VERSION,
				    .op = LOCUS_PUSH_TABLE, .channel = ch, .len = len };
	struct locus_push_rep rep;
	int fd, ret;

	if (!res || (!buf && len))
		return locus_error_set(err, EINVAL, "push: NULL argument");
	q.timeout_ms = timeout_ms ? timeout_ms : DEFAULT_TIMEOUT_MS;
	fd = sealed_copy(buf, len, err);
	if (fd < 0)
		return fd;
	ret = transact(instance, &q, fd, &rep, q.timeout_ms + ANSWER_MARGIN_MS, err);
	close(fd);
	if (ret < 0)
		return ret;
	memset(res, 0, sizeof(*res));
	res->generation = rep.generation;
	res->timed_out = rep.timed_out != 0;
	res->wait.n_live = rep.n_live;
	res->wait.n_adopted = rep.n_adopted;
	res->wait.n_refused = rep.n_refused;
	res->wait.refused_reader = rep.refused_reader;
	res->wait.refused_gen = rep.refused_gen;
	res->wait.refused_code = rep.refused_code;
	memcpy(res->wait.refused_msg, rep.refused_msg, sizeof(res->wait.refused_msg));
	return 0;
}

int locus_push_status(const char *instance, uint64_t published[LOCUS_TABLE_MAX_CHANNELS],
		      unsigned *n_channels, struct locus_error *err)
{
	struct locus_push_req q = { .magic = LOCUS_PUSH_MAGIC, .version = LOCUS_PUSH_VERSION,
				    .op = LOCUS_PUSH_STATUS };
	struct locus_push_rep rep;
	int ret;

	if (!published || !n_channels)
		return locus_error_set(err, EINVAL, "push status: NULL argument");
	ret = transact(instance, &q, -1, &rep, DEFAULT_TIMEOUT_MS, err);
	if (ret < 0)
		return ret;
	*n_channels = LOCUS_MIN(rep.n_channels, (uint32_t)LOCUS_TABLE_MAX_CHANNELS);
	memcpy(published, rep.published, sizeof(rep.published));
	return 0;
}
