// SPDX-License-Identifier: MIT
/*
 * Client library: buffer regions. A dma-buf fd travels to locusd over the
 * registration socket next to the segment (SCM_RIGHTS); locusd answers once
 * the region is usable (or why not). One connection per request, every
 * wait bounded: a registration is a control-path operation, rare and slow
 * next to the rings.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_err_priv.h"
#include "locus_seqpkt.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"

#define DEFAULT_TIMEOUT_MS 2000u

int locus_client_reg_sock_path(const char *instance, char *buf, size_t len)
{
	return locus_shm_run_path(instance, LOCUS_REG_SOCK_SUFFIX, buf, len);
}

int locus_client_reg_connect(const char *instance, struct locus_error *err)
{
	char path[LOCUS_SEQPKT_PATH_MAX];
	int fd, ret;

	ret = locus_client_reg_sock_path(instance, path, sizeof(path));
	if (ret < 0)
		return locus_error_set(err, -ret, "registration socket of '%s': %s", instance,
				       strerror(-ret));
	fd = locus_seqpkt_connect(path, &ret, err);
	if (fd >= 0 || !ret)
		return fd;
	return locus_error_set(err, ret, "locusd registration socket %s: %s", path,
			       strerror(ret));
}

int locus_client_reg_transact(int sock, const struct locus_reg_req *req, int fd,
			      struct locus_reg_rep *rep, int *fd_in, uint32_t timeout_ms,
			      struct locus_error *err)
{
	struct locus_seqpkt_call call = { .req = req, .req_len = sizeof(*req), .req_fd = fd,
					  .rep = rep, .rep_cap = sizeof(*rep),
					  .timeout_ms = timeout_ms };
	ssize_t n;
	int ret;

	if (fd_in)
		*fd_in = -1;
	ret = locus_seqpkt_call(sock, &call, err);
	if (ret < 0)
		return ret;
	n = call.rep_len;
	if (n == 0 || (n < 0 && call.rep_errno == ECONNRESET)) {
		ret = locus_error_set(err, ECONNRESET, "locusd closed the connection without an "
				      "answer");
		goto err_close;
	}
	if (n < 0) {
		ret = locus_error_set(err, call.rep_errno, "reading locusd's answer: %s",
				      strerror(call.rep_errno));
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
		*fd_in = call.rep_fd;
	else if (call.rep_fd >= 0)
		close(call.rep_fd);
	return 0;

err_close:
	if (call.rep_fd >= 0)
		close(call.rep_fd);
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
