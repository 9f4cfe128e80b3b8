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
	int router_path;          /* route: the baseline router's path (locusd's eldr_precision) */
	int build;                /* route: each ROUTE built from the trace's routed experts */
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

/*
 * Dispatching ranks (bench_dp_ranks.c), shared by the dispatch and the
 * inter-node parts: the DISPATCH bodies of BD_N_BODIES routings of the
 * trace, a window of batches in flight per rank, and one rank's poll.
 */
#define BD_MAX_WIN   16
#define BD_REQ_SLOT  16384       /* a dispatch request in the stage: header, experts, gates */
#define BD_ROWS_BASE (1u << 20)  /* rows from here in the stage */
#define BD_N_BODIES  64          /* distinct (request, layer) routings */

struct locus_trace;

struct bd_bodies {
	uint8_t *buf;             /* BD_N_BODIES experts + gates, body_len each */
	size_t body_len, req_len;
	uint32_t tokens;
	uint16_t k, n_layers;
};

struct bd_win {
	uint64_t id_sub[BD_MAX_WIN]; /* the batch in window slot w, 0: free */
	uint64_t next_b;             /* the next batch (from 1: an id is never 0) */
};

/* Routing j: trace request j at layer j % L, tokens of it, gates 1/k. 0, or -1. */
int bd_bodies_make(struct bd_bodies *b, const struct locus_trace *T, uint32_t tokens);

/*
 * Submit the window's next batch as rank of R from window slot w: its rows
 * at rows_off of the stage, or of region (0: the stage). 0, or -1 (ring full).
 */
int bd_submit_dispatch(struct bd_att *a, struct bd_win *win, const struct bd_bodies *b,
		       uint32_t rank, uint32_t R, uint32_t w, uint32_t row_bytes, uint64_t rows_off,
		       uint32_t region);

/* What one rank's poll saw: DISPATCH completions, rows delivered by them, bad ones. */
struct bd_poll_acc {
	uint64_t batches, rows_sent, bad;
};

/*
 * One poll of rank idx: rows messages go to rows_in(ctx, idx, d, check); a
 * DISPATCH a full inbox refused is submitted again; a completion frees its
 * window slot. The descriptors polled (0: nothing), or -1 after a message.
 */
int bd_poll_rank(struct bd_att *a, struct bd_win *win,
		 void (*rows_in)(void *ctx, uint32_t idx, const struct locus_desc *d, int check),
		 void *ctx, uint32_t idx, int check, struct bd_poll_acc *acc);

/* The parts; each returns 0 or 1 (a failure, said on stderr). */
int bd_route(const struct bd_opts *o);
int bd_dispatch(const struct bd_opts *o);
int bd_ep_dispatch(const struct bd_opts *o);
int bd_idle(const struct bd_opts *o);
int bd_table(const struct bd_opts *o);
int bd_internode(const struct bd_opts *o);
int bd_grace_table(const struct bd_opts *o);
int bd_push_table(const char *instance, const void *blob, size_t len);

/* A sealed synthetic ELDR table of K decoders over L x E (bench_dp.c), malloc'd, or NULL. */
void *bd_synthetic_table(uint32_t L, uint32_t E, uint32_t K, size_t *len);

#endif /* BENCH_DP_H */
