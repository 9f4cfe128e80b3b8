/* SPDX-License-Identifier: MIT */
/*
 * The control socket's server (locusd's main lcore; tests: the control
 * thread): table pushes from the control plane into the table channels,
 * which only this process maps (shm/locus_push.h has the protocol).
 *
 * It is the channels' only writer: it holds every channel's writer lock
 * for its life, copies an accepted table into a slot no reader holds,
 * publishes it and answers once the readers decided. Who may push: root,
 * our own user, and members of the control group (SO_PEERCRED's gid and
 * SO_PEERGROUPS); every refusal is answered with a sentence, counted in
 * table_pushes_refused{reason} (enum locus_push_refusal) and logged with
 * the sender's uid and pid (at most one line a second, with a count of the
 * ones left out); every accepted push is logged too.
 *
 * Nothing here blocks: the socket is non-blocking, a connection that has
 * not sent its request within a second is dropped, a table is copied in
 * pieces of at most 1 MiB per pass, and slots and readers are waited for
 * across passes, up to the request's timeout.
 */
#ifndef LOCUS_PUSHSRV_H
#define LOCUS_PUSHSRV_H

#include <sys/types.h>

#include "locus_counters.h"
#include "locus_err.h"
#include "locus_table.h"

#define LOCUS_PUSHSRV_NO_GROUP ((gid_t)-1)

struct locus_pushsrv_params {
	const char *instance;              /* socket locus_push_sock_path(instance) */
	struct locus_table_region *tables; /* the channels (every one is served) */
	gid_t ctl_gid;                     /* the control group, or LOCUS_PUSHSRV_NO_GROUP */
	struct locus_counters *ctrs;       /* counters are registered here ... */
	void *ctl_blk;                     /* ... and counted in this block */
};

struct locus_pushsrv;

/* Take every channel's writer lock, register counters, bind and listen. */
int locus_pushsrv_create(const struct locus_pushsrv_params *p, struct locus_pushsrv **out,
			 struct locus_error *err);

/*
 * A push from inside locusd (a table the cluster stored in etcd): the same
 * way as a sender's (the checks, a free slot, the publish, the readers'
 * verdict), its answer handed to done(arg, rep) once decided, from a later
 * locus_pushsrv_poll (or from this call when refused at once). Returns 0,
 * or -EBUSY when every connection is taken (try again), or -errno when the
 * table cannot be put in a memfd; then done never runs.
 */
struct locus_push_rep;
int locus_pushsrv_submit(struct locus_pushsrv *s, unsigned channel, const void *buf, size_t len,
			 uint32_t timeout_ms,
			 void (*done)(void *arg, const struct locus_push_rep *rep), void *arg);

/* One pass: accept, read requests, move pushes on, answer what is decided. */
void locus_pushsrv_poll(struct locus_pushsrv *s);

/*
 * Whether the sender of these credentials may push: uid 0, our effective
 * uid, or ctl_gid among gid and groups[0..n). Pure; exposed for tests.
 */
int locus_pushsrv_allowed(uid_t uid, gid_t gid, const gid_t *groups, int n, gid_t ctl_gid);

/*
 * Resolve a ctl_group setting (a group name or a number) to a gid:
 * LOCUS_PUSHSRV_NO_GROUP with a warning in err when no such group exists.
 */
gid_t locus_pushsrv_group(const char *name, struct locus_error *err);

/* Close connections, unlink the socket, release the writer locks. NULL is a no-op. */
void locus_pushsrv_destroy(struct locus_pushsrv *s);

#endif /* LOCUS_PUSHSRV_H */
