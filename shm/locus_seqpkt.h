/* SPDX-License-Identifier: MIT */
/*
 * Unix SOCK_SEQPACKET sockets as locusd's control and registration sockets
 * and their clients use them: one message per call, at most a few fds with
 * it (SCM_RIGHTS), every socket and every fd received non-blocking where it
 * applies and close-on-exec, no call that raises SIGPIPE.
 *
 * These functions say what happened, not what it means: a server keeps its
 * own refusals, counters and bounds, a client its own sentences for a failed
 * connect or an answer it does not like. What is the same everywhere (a
 * failed socket(), a request that could not be sent, no answer in time) is
 * said here.
 */
#ifndef LOCUS_SEQPKT_H
#define LOCUS_SEQPKT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "locus_err.h"

/* Room for a socket's path, its terminating NUL included. */
#define LOCUS_SEQPKT_PATH_MAX sizeof(((struct sockaddr_un *)0)->sun_path)
/* The most fds one received message may hand over (more are closed). */
#define LOCUS_SEQPKT_MAX_FDS  4

/* The fds a received message carried. */
struct locus_seqpkt_fds {
	int fd[LOCUS_SEQPKT_MAX_FDS];
	int n;     /* how many of fd[] are set (and the caller's to close) */
	int trunc; /* the message or its fds did not fit: MSG_TRUNC or MSG_CTRUNC */
};

/*
 * A non-blocking listening socket at path with mode on its file and room
 * for backlog pending connections. Whatever was at path is removed first:
 * the caller owns it (a stale socket of a dead locusd). The fd, or -code
 * with err saying "socket: ..." or "<what> <path>: ..."; then nothing is
 * left at path.
 */
int locus_seqpkt_listen(const char *path, const char *what, mode_t mode, int backlog,
			struct locus_error *err);

/*
 * A non-blocking connection to the socket at path (a unix socket connects
 * at once or not: nothing to wait for). The fd, or -code: a failed
 * socket() is said in err and *conn_err is 0; a failed connect() is the
 * caller's to say (err is left alone) and *conn_err is its errno, a full
 * backlog's EAGAIN as ECONNREFUSED.
 */
int locus_seqpkt_connect(const char *path, int *conn_err, struct locus_error *err);

/*
 * Send len bytes of buf as one message, with fd (SCM_RIGHTS) if fd >= 0,
 * without blocking. sendmsg's result: the bytes sent, or -1 with errno.
 */
ssize_t locus_seqpkt_send(int sock, const void *buf, size_t len, int fd);

/*
 * Receive one message into buf (at most cap bytes) with recvmsg's flags
 * (MSG_DONTWAIT, ...; MSG_CMSG_CLOEXEC is added). The first max_fds fds it
 * carried (0..LOCUS_SEQPKT_MAX_FDS) go to in->fd, any others are closed;
 * in->trunc says whether the message or its fds were cut. recvmsg's result:
 * the bytes received (0: the peer closed), or -1 with errno (in->n 0).
 */
ssize_t locus_seqpkt_recv(int sock, void *buf, size_t cap, int flags, int max_fds,
			  struct locus_seqpkt_fds *in);

/* The one fd a message carried, or -1: with more than one, all are closed. */
int locus_seqpkt_sole_fd(const struct locus_seqpkt_fds *in);

/* A client's request and the answer it waits for (locus_seqpkt_call). */
struct locus_seqpkt_call {
	const void *req;
	size_t req_len;
	int req_fd;          /* sent with the request if >= 0 */
	void *rep;
	size_t rep_cap;
	uint32_t timeout_ms; /* for the answer, from the call on */
	ssize_t rep_len;     /* out: recv's result, 0 the peer closed, -1 failed ... */
	int rep_errno;       /* ... with this errno (never EINTR or EAGAIN) */
	int rep_fd;          /* out: the first fd the answer carried, -1 none (others closed) */
};

/*
 * One exchange with locusd on the connected, non-blocking sock: send the
 * request whole, then wait until the answer comes or the time is up, and
 * receive it. 0 once the answer was read (c->rep_len and c->rep_errno say
 * how that went, c->rep_fd is the caller's to close), or -code with err
 * saying why no answer was read (not sent, poll failed, no answer within
 * timeout_ms).
 */
int locus_seqpkt_call(int sock, struct locus_seqpkt_call *c, struct locus_error *err);

#endif /* LOCUS_SEQPKT_H */
