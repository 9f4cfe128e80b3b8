/* SPDX-License-Identifier: MIT */
/*
 * locus-loadgen's processes share this: options, the per-process records in
 * a MAP_SHARED area (the parent sums them), and the helpers every process
 * uses. The rank processes live in loadgen_rank.c, the options in
 * loadgen_opts.c.
 */
#ifndef LOADGEN_H
#define LOADGEN_H

#include <stdint.h>
#include <time.h>

#include "locus_client.h"
#include "locus_trace.h"


#define MAX_PROCS   32
#define LAT_BUCKETS 64
#define OUTSTANDING 16
#define SIG_SLOT    (64 * 1024)
#define ROWS_OFF    (64 * 1024)
#define COMB_OFF    (1024 * 1024)
#define COMB_SLOTS  8
#define ERR_KINDS   8

struct opts {
	const char *instance;
	const char *trace;
	const char *midway_cmd;
	const char *eldr_table;   /* baseline: the pure router in-process on this table */
	uint32_t decoders, ranks, prefills;
	uint32_t requests, batches, tokens, row_bytes;
	uint32_t decode_us;
	uint32_t seconds;
	const char *prefill_at;          /* instance of the prefill processes */
	const char *decoder_at[MAX_PROCS]; /* instance of each decoder id */
	const char *rank_at[MAX_PROCS];  /* instance of each rank */
	uint32_t n_decoder_at, n_rank_at;
	int allow_errors;
	uint32_t batch_ms;               /* with allow_errors: give a batch up after this */
	int dmabuf;                      /* ranks' rows in registered regions ... */
	int host_region;                 /* ... of host memory (sealed memfds), not dma-bufs */
	/* --kill-rank R:dispatch:B | R:combine:N: rank R's first process raises
	 * SIGKILL right after submitting the DISPATCH of batch B / its N-th COMBINE */
	int kill_rank;                   /* -1: none */
	int kill_combine;                /* 0: at a dispatch, 1: at a combine */
	uint32_t kill_n;
	int respawn;                     /* --respawn: a new process takes the rank over */
	uint32_t linger_ms;              /* stay attached and idle this long at the end */
	uint32_t attach_timeout_ms;      /* --attach-timeout-ms: each attach's bound */
	uint32_t prefix_blocks;          /* --prefix-blocks: a cached head of N blocks (0: ROUTE) */
	uint32_t block_tokens;           /* --block-tokens: locusd's sig_cache_block_tokens */
	int placements;                  /* --placements: ranks take part in placement changes */
	uint64_t weights;                /* --weights BYTES: ranks hold and move expert weights */
	int mask;                        /* --mask: dispatch with LOCUS_DESC_F_MASK; a batch
					  * ends without the ranks that were lost */
};

/* Shared with the children (MAP_SHARED): each writes its own record. */
struct proc_stats {
	uint64_t submitted, completed, ok, errors, retries;
	uint64_t delivered, verified, corrupt, duplicate;
	uint64_t rows_out, rows_back, bytes;
	uint64_t lat_hist[LAT_BUCKETS]; /* ns, log2 buckets */
	uint64_t lat_sum_ns;
	uint64_t t_start_ns, t_end_ns;
	uint64_t abandoned, late;       /* batches given up; results of earlier batches */
	uint64_t dropped;               /* rows of given-up batches a rank had no room for */
	uint64_t orphaned;              /* requests unanswered because our locusd died */
	uint64_t pl_acked, pl_released; /* --placements: generations acknowledged, released */
	uint64_t masked;                /* --mask: (token, slot) pairs locusd masked */
	uint64_t unanswered;            /* --mask: pairs sent to a rank lost before it answered */
	uint64_t gone_refusals;         /* --mask: refusals of rows whose rank had left */
	uint64_t lost_batches;          /* --mask: batches ended without a lost rank's answers */
	uint64_t first_mask_ns;         /* --mask: when the first masked batch completed */
	int32_t err_code[ERR_KINDS];    /* completions with an error, by code */
	uint64_t err_n[ERR_KINDS];
	int attached, failed, gone;
	char why[224];
	char bad[128];                  /* what the first corrupt delivery was */
	uint32_t batch_at, batch_open;  /* killed rank: the batch it was at, and if sent */
	uint32_t kills;                 /* rank: processes of this rank killed (--kill-rank) */
	uint64_t killed_inflight;       /* requests those had in flight: never completed */
	uint64_t killed_ns;             /* CLOCK_MONOTONIC of the first kill */
	uint64_t combines;              /* rank: COMBINEs submitted */
	uint32_t region_flags;          /* --dmabuf: enum locus_region_flags locusd gave */
	int region_registered, region_released;
	char region_how[16];            /* the exporter used */
	uint64_t blocks_named, blocks_found, partial; /* prefill, --prefix-blocks */
	/* --weights: moves done, experts sent / received (our node, another) / from storage */
	uint64_t w_moves, w_sent, w_here, w_other, w_storage, w_bytes_in, w_timeouts;
	uint64_t w_ms_max;              /* the longest move, staged seen -> acknowledged */
	uint64_t w_unheld;              /* rows for an expert whose weights we did not hold */
	uint64_t w_stray, w_unplanned;  /* rows over held weights; moves with no table */
	char w_first[96];
} __attribute__((aligned(64)));

#define ATTACH_TIMEOUT_MS 5000u /* every attach of locus-loadgen's processes, by default */

struct shared {
	int done;             /* parent -> decoders and ranks: stop */
	int stop;             /* SIGTERM / SIGINT: submit nothing new, finish what is sent */
	uint32_t ranks_up;    /* ranks attached: none dispatches before all are */
	uint32_t ranks_failed; /* ranks that could not attach: the others give up */
	uint32_t decoders_up;  /* decoders attached and reporting: prefills start after them */
	uint64_t routed_total;
	struct proc_stats st[MAX_PROCS];
};

extern struct opts O;
extern struct shared *S;
extern struct locus_trace *T;

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void nap_us(unsigned us)
{
	struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

/* Whether the run was told to stop early (SIGTERM, SIGINT). */
static inline int stopping(void)
{
	return __atomic_load_n(&S->stop, __ATOMIC_RELAXED);
}

/* Whether --seconds have passed since t0. */
static inline int expired(uint64_t t0)
{
	return now_ns() - t0 > (uint64_t)O.seconds * 1000000000ull;
}

/* Count a corrupt delivery; the first one is described in s->bad (printf format). */
void corrupt(struct proc_stats *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Count a completion that carries an error, by code. */
void err_record(struct proc_stats *s, int32_t status);

/* Attach to instance in roles (id: decoder id or rank); NULL with s->why on failure. */
struct locus_client *attach(const char *instance, uint32_t roles, uint32_t id,
			    struct proc_stats *s);

/* A poll failed with ret: our locusd is gone (s->gone) or our rings broke. */
void own_daemon_lost(struct proc_stats *s, int ret);

/* --dmabuf (loadgen_dmabuf.c): a dma-buf of len bytes (udmabuf, else vgem), or -errno. */
int lg_dmabuf_create(size_t len, const char **how);
/* --host-region: a memfd of len bytes sealed against shrinking, or -errno. */
int lg_hostmem_create(size_t len, const char **how);
void *lg_dmabuf_map(int fd, size_t len);
void lg_dmabuf_sync(int fd, int start);

/*
 * 1 when c's engine sees ranks 0..n-1 all reachable (locus_client_ranks()),
 * 0 while any is lost or the set is not yet written or readable.
 */
int lg_ranks_live(struct locus_client *c, uint32_t n);

/*
 * --prefix-blocks (loadgen_blocks.c): the domains' heads, built before the
 * processes fork (0, or -1 with why); request r's whole prompt's signature
 * (what its decoder must receive); its ROUTE_BLOCKS request into buf, the
 * head named as cached once this process inserted it (inserted[domain]),
 * *n_cached the blocks it names. Lengths, or negative.
 */
int lg_blocks_init(char *why, size_t len);
long lg_whole_sig(const struct locus_trace_req *r, void *buf, size_t cap);
long lg_blocks_req(const struct locus_trace_req *r, uint8_t *inserted, void *buf, size_t cap,
		   uint32_t *n_cached);

/*
 * --weights (loadgen_weights.c): a rank's weights region and mover; the
 * generation in force loaded; descriptors of the mover taken (1) or not
 * (0); placement changes followed with the weights moved before the ack;
 * rows checked against what is held.
 */
struct lg_weights;
struct lg_weights *lg_weights_open(struct locus_client *c, uint32_t rank, struct proc_stats *s);
void lg_weights_close(struct lg_weights *w);
void lg_weights_start(struct lg_weights *w, uint64_t current);
int lg_weights_take(struct lg_weights *w, const struct locus_desc *d);
void lg_weights_follow(struct lg_weights *w);
void lg_weights_check_rows(struct lg_weights *w, uint32_t layer, const uint16_t *experts,
			   const struct locus_row_ref *refs, uint32_t n_rows, uint32_t top_k);

/* loadgen_opts.c: the command line into O (-1 when it is wrong), and its help. */
int lg_parse_args(int argc, char **argv);
void lg_usage(void);

/*
 * The expert-parallel rank process; returns its exit status. A rank whose
 * process was killed (s->kills) is taken over where it stopped.
 */
int run_rank(uint32_t rank, struct proc_stats *s);

#endif /* LOADGEN_H */
