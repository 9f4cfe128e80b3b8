/* SPDX-License-Identifier: MIT */
/* The client library's registration-socket exchange, shared by its files (not installed). */
#ifndef LOCUS_CLIENT_PRIV_H
#define LOCUS_CLIENT_PRIV_H

#include <stdint.h>

#include "locus_client.h"

/* A non-blocking connection to instance's registration socket, or -code (err says). */
int locus_client_reg_connect(const char *instance, struct locus_error *err);

/*
 * Send req on sock (with fd, if >= 0) and wait up to timeout_ms for the
 * reply; the fd the reply carried goes to *fd_in (-1 none; closed if fd_in
 * is NULL). 0 with rep checked for magic and version, or -code (err says);
 * rep->status is the caller's to judge.
 */
int locus_client_reg_transact(int sock, const struct locus_reg_req *req, int fd,
			      struct locus_reg_rep *rep, int *fd_in, uint32_t timeout_ms,
			      struct locus_error *err);

#endif /* LOCUS_CLIENT_PRIV_H */
