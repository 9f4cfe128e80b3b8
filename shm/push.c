// SPDX-License-Identifier: MIT
/*
 * Table pushes, the sender's side (locusctl): the table goes into a sealed
 * memfd, the memfd to locusd over the control socket, and the reply says
 * what the data plane did with it. Every wait is bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "locus_err_priv.h"
#include "locus_push.h"
#include "locus_seqpkt.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"

#define DEFAULT_TIMEOUT_MS 2000u
#define ANSWER_MARGIN_MS   3000u /* locusd's own passes on top of the push's bound */
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

int locus_push_sock_path(const char *instance, char *buf, size_t len)
{
	return locus_shm_run_path(instance, LOCUS_PUSH_SOCK_SUFFIX, buf, len);
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
	char path[LOCUS_SEQPKT_PATH_MAX];
	int fd, ret;

	ret = locus_push_sock_path(instance, path, sizeof(path));
	if (ret < 0)
		return locus_error_set(err, -ret, "control socket of '%s': %s", instance,
				       strerror(-ret));
	fd = locus_seqpkt_connect(path, &ret, err);
	if (fd >= 0 || !ret)
		return fd;
	if (ret == EACCES)
		return locus_error_set(err, EACCES, "locusd control socket %s is for the service "
				       "group", path);
	if (ret == ENOENT)
		return locus_error_set(err, ENOENT, "no locusd control socket %s (is locusd "
				       "running?)", path);
	return locus_error_set(err, ret, "locusd control socket %s: cannot connect", path);
}

/* One request (with fd if >= 0), one reply, within timeout_ms. */
static int transact(const char *instance, const struct locus_push_req *q, int fd,
		    struct locus_push_rep *rep, uint32_t timeout_ms, struct locus_error *err)
{
	struct locus_seqpkt_call call = { .req = q, .req_len = sizeof(*q), .req_fd = fd,
					  .rep = rep, .rep_cap = sizeof(*rep),
					  .timeout_ms = timeout_ms };
	int sock, ret;
	ssize_t n;

	sock = connect_ctl(instance, err);
	if (sock < 0)
		return sock;
	ret = locus_seqpkt_call(sock, &call, err);
	if (ret < 0)
		goto out;
	if (call.rep_fd >= 0)
		close(call.rep_fd); /* an answer carries none */
	n = call.rep_len;
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
