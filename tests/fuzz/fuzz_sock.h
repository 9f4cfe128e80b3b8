/* SPDX-License-Identifier: MIT */
/* What the socket targets (regions, node_sockets) share: descriptors, connections, requests. */
#ifndef LOCUS_FUZZ_SOCK_H
#define LOCUS_FUZZ_SOCK_H

#include <stddef.h>
#include <sys/types.h>

/* Entries of /proc/self/fd right now (a leak check compares two of these). */
int fz_open_fds(void);

/*
 * A descriptor of kind k % 5 to pass: 0 a 64 KiB memfd, 1 /dev/null, 2 a
 * socket whose peer is closed, 3 an empty memfd, 4 a directory.
 */
int fz_kind_fd(unsigned k);

/* A SOCK_SEQPACKET connection to path; aborts if there is none. */
int fz_connect(const char *path);

/* One message of len bytes with nfd (<= 8) descriptors: sendmsg's result. */
ssize_t fz_send(int sock, const void *bytes, size_t len, const int *fds, int nfd);

#endif /* LOCUS_FUZZ_SOCK_H */
