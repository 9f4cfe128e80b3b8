/* SPDX-License-Identifier: MIT */
/*
 * locus-stat internals: a sample of the counter region (every selected
 * entry summed over the lcore blocks) and its three renderings.
 */
#ifndef LOCUS_STAT_H
#define LOCUS_STAT_H

#include <stdint.h>
#include <stdio.h>

#include "locus_counters.h"

/* Exit codes of locus-stat (documented in its --help). */
enum locus_stat_exit {
	LOCUS_STAT_EXIT_OK         = 0,
	LOCUS_STAT_EXIT_USAGE      = 1, /* bad arguments, output or memory error */
	LOCUS_STAT_EXIT_NOINSTANCE = 2,
	LOCUS_STAT_EXIT_PERM       = 3,
	LOCUS_STAT_EXIT_VERSION    = 4,
	LOCUS_STAT_EXIT_CORRUPT    = 5,
	LOCUS_STAT_EXIT_NOCOUNTERS = 6, /* region absent or not initialised yet */
};

/* One selected directory entry, summed over all blocks (or one block's). */
struct locus_stat_entry {
	uint32_t idx;
	const struct locus_ctr_info *info;
	uint64_t *w;             /* n_elems * elem_words words */
	const uint64_t *prev;    /* same entry in the previous sample, or NULL */
};

struct locus_stat_snap {
	uint64_t mono_ns;        /* CLOCK_MONOTONIC when taken */
	uint32_t n;
	struct locus_stat_entry *e;
};

/* Segment facts printed with each sample. */
struct locus_stat_view {
	const char *instance;
	const char *state;       /* "starting", "running", "stopping", "unknown" */
	long owner_pid;
	uint64_t start_ns;       /* CLOCK_REALTIME */
	uint64_t now_ns;         /* CLOCK_REALTIME */
	uint32_t n_blocks;
	uint32_t n_entries;      /* in the directory, selected or not */
	double interval_s;       /* since the previous sample; 0: no rates */
	int block;               /* with role: the lcore block whose values these are */
	const char *role;        /* "engine K" or "main" (--by-lcore); NULL: sums */
};

/*
 * Sum every entry whose name matches one of the fnmatch(3) patterns (all
 * entries when npat is 0) into s; block >= 0: that block's values alone.
 * Returns 0 or -ENOMEM.
 */
int locus_stat_sample(const struct locus_counters *c, char *const *pat, int npat, int block,
		      struct locus_stat_snap *s);

/*
 * What lcore writes block b: "engine K" (its "engines" gauge is 1: the
 * K-th such block) or "main" (control, network). Into buf.
 */
void locus_stat_block_role(const struct locus_counters *c, uint32_t b, char *buf, size_t len);

void locus_stat_snap_free(struct locus_stat_snap *s);

/* Point each entry of cur at the same entry in prev (entries never change
 * once registered, so the directory index identifies them). */
void locus_stat_link(struct locus_stat_snap *cur, const struct locus_stat_snap *prev);

/*
 * Per-second rate of word w of element k of entry e: a counter's increase
 * (or a histogram's count increase) over interval_s. Returns 0 and *rate,
 * or -1 when there is no previous sample or the value went down.
 */
int locus_stat_rate(const struct locus_stat_entry *e, uint32_t k, double interval_s,
		    double *rate);

/* Element k's label values: idx[0] (and idx[1] for 2-D). */
void locus_stat_elem_index(const struct locus_ctr_info *in, uint32_t k, uint32_t idx[2]);

/*
 * Renderers; each returns 0, -EIO if the stream failed, or -ENOMEM. The
 * Prometheus one leaves out, with a warning on stderr, an entry whose
 * metric names clash with an earlier one's (counter "x" and "x_total").
 */
int locus_stat_print_table(FILE *f, const struct locus_stat_view *v,
			   const struct locus_stat_snap *s);
int locus_stat_print_json(FILE *f, const struct locus_stat_view *v,
			  const struct locus_stat_snap *s);
int locus_stat_print_prom(FILE *f, const struct locus_stat_view *v,
			  const struct locus_stat_snap *s);
/*
 * --slow: the top ranks by mean answer time and the top (rail, peer) pairs
 * by p99 send time in s (sampled with at least rank_answer*, rail_send_ns,
 * rail_peer_node). 0, or -1 (memory or output).
 */
int locus_stat_print_slow(FILE *f, const struct locus_stat_snap *s, uint32_t top,
			  uint32_t gpus_per_node);

/*
 * Send command to instance's DPDK telemetry socket (EAL file prefix
 * "locus-INSTANCE") and print the JSON reply to out. Returns an exit code:
 * 0, NOINSTANCE when nothing listens, PERM, CORRUPT on a protocol error,
 * USAGE for a bad or unknown command (messages on stderr).
 */
int locus_stat_telemetry(const char *instance, const char *command, FILE *out);

#endif /* LOCUS_STAT_H */
