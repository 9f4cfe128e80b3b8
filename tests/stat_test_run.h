/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the locus-stat tests: a private LOCUS_SHM_DIR, the built
 * binary found beside the test (build/bin/locus-stat for build/tests/...),
 * running it in a child, and segments with counters. Failures are cmocka
 * failures.
 */
#ifndef STAT_TEST_RUN_H
#define STAT_TEST_RUN_H

#include <limits.h>
#include <stdint.h>

#include "locus_counters.h"
#include "locus_counters_priv.h"
#include "locus_shm.h"

extern char stat_tmpdir[64];
extern char stat_bin[PATH_MAX];

struct run {
	int status;      /* exit code, or 128 + signal */
	char *out, *err;
};

/* Find the binary, create and export the private segment directory. */
void stat_test_env(void);
/* Remove that directory; 0 or -1. */
int stat_test_env_cleanup(void);

/*
 * Run bin with args (NULL-terminated, argv[0] excluded) as uid (ourselves
 * when uid < 0); stdout and stderr are captured into r. tick, when set, runs
 * in the parent every millisecond, with the child's stdout, until it exits.
 */
void run_stat(struct run *r, int uid, const char *bin, void (*tick)(int out_fd),
	      const char *const *args);
void run_free(struct run *r);

#define RUN(r, ...) run_stat((r), -1, stat_bin, NULL, (const char *const[]){ __VA_ARGS__, NULL })

void reg(struct locus_counters *c, const char *name, const char *help,
	 enum locus_ctr_kind kind, uint32_t ndims, uint32_t d0, uint32_t d1,
	 const char *l0, const char *l1, uint64_t *off);

/* A RUNNING segment whose counters region has ctr_size bytes, laid out
 * with p and opened read-write into *c (left uninitialised if p is NULL). */
struct locus_shm *make_segment(const char *instance, size_t ctr_size,
			       struct locus_ctr_params *p, struct locus_counters **c);
/* 4 entries, 2 blocks of 256 bytes. */
struct locus_shm *small_segment(const char *instance, struct locus_counters **c);
void drop_segment(struct locus_shm *shm, struct locus_counters *c, const char *instance);

#endif /* STAT_TEST_RUN_H */
