/* SPDX-License-Identifier: MIT */
/*
 * A real etcd for a test (Debian's etcd-server, /usr/bin/etcd or $LOCUS_ETCD):
 * its own data directory and free loopback ports, started, stopped, killed
 * and restarted on the same data, optionally with TLS and client
 * certificates made with the openssl command.
 */
#ifndef LOCUS_TEST_ETCD_UTIL_H
#define LOCUS_TEST_ETCD_UTIL_H

#include <stdbool.h>
#include <sys/types.h>

struct etcd_srv {
	pid_t pid;
	bool tls;
	int client_port, peer_port;
	char dir[256];          /* data, logs, certificates */
	char url[80];           /* http(s)://127.0.0.1:port */
	char ca[300], cert[300], key[300];            /* the client's files (tls) */
	char other_ca[300];     /* a CA that did not sign the server (tls) */
};

/* Make the directory (and certificates), pick ports, start, wait until it answers. 0 or -1. */
int etcd_srv_start(struct etcd_srv *s, bool tls);
/* Start again on the same data and ports (after a stop or kill). 0 or -1. */
int etcd_srv_restart(struct etcd_srv *s);
/* SIGTERM and wait. */
void etcd_srv_stop(struct etcd_srv *s);
/* SIGKILL and wait. */
void etcd_srv_kill(struct etcd_srv *s);
/* Stop it and remove its directory. */
void etcd_srv_destroy(struct etcd_srv *s);
/* A loopback port nothing listens on (bound and closed). */
int etcd_free_port(void);

#endif /* LOCUS_TEST_ETCD_UTIL_H */
