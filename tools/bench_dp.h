/* SPDX-License-Identifier: MIT */
/*
 * bench_dataplane: the data plane through a running locusd, measured from
 * ONE client thread pinned to one core that holds several attachments
 * (prefill + every decoder, or every rank of the node) and polls them all,
 * never sleeping while it waits. The daemon's engine lcore spins on another
 * core. Shared by its parts: bench_dp.c (command line, pinning, tables),
 * bench_dp_route.c, bench_dp_dispatch.c, bench_dp_idle.c, bench_dp_internode.c
 * (ranks on two nodes, every row crossing: the Soft-RoCE guest's benchmark).
 */
#ifndef BENCH_DP_H
#define BENCH_DP_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "locus_client.h"

#define BD_MAX_ATT    16
#define BD_MAX_CPUS   64

/* One attachment of the client thread. */
struct bd_att {
	struct locus_client *c;
	uint8_t *stage;
	uint64_t stage_size;
	uint32_t roles, id;
	uint64_t last_report_ns;  /* decoder: last load report */
};

struct bd_opts {
	const char *instance;
	const char *trace;        /* the repository's sample: real signatures and routings */
	const char *table;        /* route: an ELDR table file pushed before (or NULL) */
	int no_push;              /* route: the table is in force already (the demo's) */
	const char *out;          /* table: where to write */
	int cpus[BD_MAX_CPUS];    /* client threads' CPUs; -1: not pinned */
	uint32_t n_cpus;
	uint32_t layers, experts, decoders; /* synthetic signatures and table */
	uint32_t windows[4], n_windows;
	uint32_t row_bytes[4], n_row_bytes;
	uint32_t ranks, tokens, dwindow;
	double seconds;           /* per measured row */
	int pid;                  /* idle: locusd's pid */
	uint32_t gaps_ms[8], n_gaps, repeats[8];
	double cpu_seconds;       /* idle: CPU sampled over this long */
	int worker_tid;           /* idle: locusd's engine lcore thread, 0: find it */
	const char *rank_at[BD_MAX_ATT]; /* internode: rank r's instance */
	uint32_t n_rank_at;
	uint32_t send_mask;       /* internode: the ranks that dispatch (bit r) */
	double warmup;            /* internode: seconds of checked traffic first */
	int region;               /* internode: the senders' rows in registered dma-bufs */
	uint32_t nap_us;          /* internode: sleep this long after a poll found nothing */
	uint32_t nodes, gpus, on_node; /* grace-table: topology, the node holding every expert */
};

static inline uint64_t bd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Pin the calling thread to cpu (-1: leave it) and say where it runs:
 * "<who>: pinned to CPU n (sched_getaffinity: n), running on CPU n" into
 * stdout. 0, or -1 when the pinning did not hold.
 */
int bd_pin(const char *who, int cpu);

/*
 * Attach to instance in roles (id: decoder id or rank), retrying while the
 * daemon still holds the same id's earlier attachment (-EEXIST, up to 3 s).
 * 0, or -1 with the reason on stderr.
 */
int bd_attach(struct bd_att *a, const char *instance, uint32_t roles, uint32_t id);
void bd_detach(struct bd_att *a, uint32_t n);

/* Decoders report a load of 0 now and then (a decoder silent too long leaves routing). */
void bd_report_loads(struct bd_att *a, uint32_t n, uint64_t now);

/* q-quantile (0..1) of n samples, sorting them in place. */
double bd_quantile(uint64_t *v, size_t n, double q);

/* The parts; each returns 0 or 1 (a failure, said on stderr). */
int bd_route(const struct bd_opts *o);
int bd_dispatch(const struct bd_opts *o);
int bd_idle(const struct bd_opts *o);
int bd_table(const struct bd_opts *o);
int bd_internode(const struct bd_opts *o);
int bd_grace_table(const struct bd_opts *o);
int bd_push_table(const char *instance, const void *blob, size_t len);

/* A sealed synthetic ELDR table of K decoders over L x E (bench_dp.c), malloc'd, or NULL. */
void *bd_synthetic_table(uint32_t L, uint32_t E, uint32_t K, size_t *len);

#endif /* BENCH_DP_H */
