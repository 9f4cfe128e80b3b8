/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for locusd's control work in tests of locusctl: table channels
 * in this process's memory, served by the real control socket server
 * (dataplane/locus_pushsrv.h) on a thread, which also calls back each pass
 * (the test's readers poll there).
 */
#ifndef LOCUS_PUSH_UTIL_H
#define LOCUS_PUSH_UTIL_H

#include <pthread.h>

#include "locus_counters.h"
#include "locus_pushsrv.h"
#include "locus_table.h"

struct tpush {
	void *mem;                        /* the table region */
	size_t len;
	struct locus_table_region *t;
	void *ctr_mem;                    /* counters, when the test brings none */
	struct locus_counters *ctrs;
	struct locus_pushsrv *srv;
	void (*each)(void *arg);          /* every pass, may be NULL */
	void *arg;
	pthread_t th;
	int running, stop;
};

/*
 * Lay out tables for p and open instance's control socket on them. ctrs and
 * blk: where the server registers and counts (NULL: counters of its own).
 * cmocka failure on any error.
 */
void tpush_open(struct tpush *tp, const char *instance, const struct locus_table_params *p,
		struct locus_counters *ctrs, void *blk, gid_t ctl_gid);

/* Serve on a thread until tpush_halt or tpush_close. */
void tpush_run(struct tpush *tp, void (*each)(void *arg), void *arg);

/* Stop the serving thread (its readers may then be unregistered). */
void tpush_halt(struct tpush *tp);

void tpush_close(struct tpush *tp);

#endif /* LOCUS_PUSH_UTIL_H */
