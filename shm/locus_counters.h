/* SPDX-License-Identifier: MIT */
/*
 * Counters, gauges and log2 histograms in shared memory (the segment's
 * LOCUS_REGION_COUNTERS, in the style of VPP's stats segment).
 *
 * Region layout (all offsets from the start of the region, no pointers):
 *
 *   struct locus_ctr_hdr            magic, version, sizes, entry count, epoch
 *   struct locus_ctr_entry[max]     directory: name, help, kind, shape, offset
 *   block 0 | block 1 | ...         one per writer lcore, block_size bytes each,
 *                                   cache-line aligned
 *
 * An entry's storage lives at the same offset inside every block. A writer
 * lcore owns its block and updates it with relaxed 64-bit loads and stores
 * (never torn, no lock, no read-modify-write bus lock); readers sum a value
 * over all blocks.
 *
 * Kinds and what a reader's sum means:
 *   counter    u64, monotonic per block; the sum is the node total.
 *   gauge      i64 (two's complement in a u64 word); per-lcore values are
 *              summed, so a gauge set by one lcore only (any block) reads as
 *              that value, and per-lcore depths read as the node total.
 *   histogram  LOCUS_HIST_WORDS words per element: count, sum, then 64
 *              buckets; bucket 0 holds value 0, bucket i (1..62) holds v with
 *              floor(log2(v)) == i-1, i.e. [2^(i-1), 2^i - 1]; bucket 63 holds
 *              every v >= 2^62 (the last bucket is open-ended so that 64
 *              buckets cover the whole u64 range). Buckets, sum and count
 *              are summed over blocks.
 *
 * Shapes: scalar, a vector of dim[0] elements with one label name (e.g.
 * "decoder"), or a 2-D array dim[0] x dim[1] with two label names (e.g.
 * "layer", "expert"), row-major: element (i, j) is i * dim[1] + j.
 *
 * Registration (one writer process; the handle serialises its threads)
 * fills a directory entry, then publishes it with a release store of the
 * entry count and bumps the epoch, so a reader that loads the count with
 * acquire sees only complete entries and notices new ones by the epoch.
 */
#ifndef LOCUS_COUNTERS_H
#define LOCUS_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#include "locus_common.h"
#include "locus_err.h"

#define LOCUS_CTR_MAGIC      0x5352544355434f4cull /* "LOCUCTRS" little-endian */
#define LOCUS_CTR_VERSION    1u
#define LOCUS_CTR_NAME_MAX   64  /* [a-z0-9_], 1..63 chars, NUL-terminated */
#define LOCUS_CTR_HELP_MAX   128 /* printable ASCII, NUL-terminated */
#define LOCUS_CTR_LABEL_MAX  32  /* [a-z_][a-z0-9_]*, 1..31 chars, not le or __* */
#define LOCUS_CTR_MAX_DIMS   2
#define LOCUS_CTR_MAX_ELEMS  (1u << 20) /* elements of one entry */

#define LOCUS_HIST_BUCKETS   64
#define LOCUS_HIST_COUNT     0  /* word index of the count */
#define LOCUS_HIST_SUM       1  /* word index of the sum (mod 2^64) */
#define LOCUS_HIST_BUCKET0   2  /* word index of bucket 0 */
#define LOCUS_HIST_WORDS     (LOCUS_HIST_BUCKET0 + LOCUS_HIST_BUCKETS)

enum locus_ctr_kind {
	LOCUS_CTR_COUNTER   = 1,
	LOCUS_CTR_GAUGE     = 2,
	LOCUS_CTR_HISTOGRAM = 3,
};

struct locus_ctr_hdr {
	uint64_t magic;        /* written last by init (release) */
	uint32_t version;      /* LOCUS_CTR_VERSION */
	uint32_t hdr_size;     /* sizeof(struct locus_ctr_hdr) */
	uint32_t entry_size;   /* sizeof(struct locus_ctr_entry) */
	uint32_t max_entries;
	uint32_t n_blocks;
	uint32_t n_entries;    /* published entries (release store) */
	uint64_t block_size;   /* bytes per block, multiple of 64 */
	uint64_t dir_off;      /* directory offset from region start */
	uint64_t blocks_off;   /* block 0 offset, multiple of 64 */
	uint64_t region_size;  /* bytes used: blocks_off + n_blocks * block_size */
	uint64_t block_used;   /* bytes of each block handed out */
	uint64_t epoch;        /* bumped after each registration */
	uint8_t  reserved[48]; /* zero */
};

struct locus_ctr_entry {
	char     name[LOCUS_CTR_NAME_MAX];
	char     help[LOCUS_CTR_HELP_MAX];
	char     label[LOCUS_CTR_MAX_DIMS][LOCUS_CTR_LABEL_MAX];
	uint32_t kind;         /* enum locus_ctr_kind */
	uint32_t ndims;        /* 0 scalar, 1 vector, 2 matrix */
	uint32_t dim[LOCUS_CTR_MAX_DIMS]; /* unused dims are 0 */
	uint64_t offset;       /* of the storage inside every block */
	uint64_t nbytes;       /* storage bytes inside every block */
	uint8_t  reserved[32]; /* zero */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_ctr_hdr) == 128, "counters header size");
LOCUS_STATIC_ASSERT(sizeof(struct locus_ctr_entry) == 320, "counters entry size");

/* A validated, process-local copy of a directory entry. */
struct locus_ctr_info {
	char name[LOCUS_CTR_NAME_MAX];
	char help[LOCUS_CTR_HELP_MAX];
	char label[LOCUS_CTR_MAX_DIMS][LOCUS_CTR_LABEL_MAX];
	enum locus_ctr_kind kind;
	uint32_t ndims;
	uint32_t dim[LOCUS_CTR_MAX_DIMS];
	uint32_t n_elems;     /* product of the dims (1 for a scalar) */
	uint32_t elem_words;  /* 1, or LOCUS_HIST_WORDS for a histogram */
	uint64_t offset;
};

enum locus_ctr_open_flags {
	LOCUS_CTR_RDONLY = 1u << 0, /* never write the region (may be PROT_READ) */
};

struct locus_counters; /* process-local handle; opaque */

/*
 * Open a region its creator laid out. Validates the header against size and
 * every published directory entry against the block bounds, and keeps a
 * local copy of each entry so a later change of the shared bytes cannot
 * make this process read out of bounds. Errors: -LOCUS_EBADMAGIC (also for
 * a region not initialised yet), -LOCUS_EVERSION, -LOCUS_ETRUNCATED,
 * -LOCUS_ERANGE (a field or an entry out of bounds or malformed), -ENOMEM.
 */
int locus_counters_open(void *region, size_t size, unsigned flags,
			struct locus_counters **out, struct locus_error *err);

/* Free the handle (the region is untouched). NULL is a no-op. */
void locus_counters_close(struct locus_counters *c);

/* Directory index of name, or -ENOENT. */
int locus_counters_find(const struct locus_counters *c, const char *name);

uint32_t locus_counters_n_blocks(const struct locus_counters *c);
uint32_t locus_counters_n_entries(const struct locus_counters *c);

/*
 * Pick up entries registered since open or the last refresh (readers).
 * Returns the number of entries now known, or -LOCUS_ERANGE if the shared
 * header or a new entry is corrupt (the entries known before stay usable).
 */
int locus_counters_refresh(struct locus_counters *c, struct locus_error *err);

/* Validated copy of entry idx; NULL if idx is out of range. */
const struct locus_ctr_info *locus_counters_info(const struct locus_counters *c,
						 uint32_t idx);

/*
 * Sum entry idx over all blocks into out[0 .. n_elems * elem_words - 1]
 * (element-major; for a histogram each element is count, sum, buckets).
 * Returns the number of words written, -LOCUS_ERANGE on a bad idx, or
 * -ENOSPC if out_words is too small. Never writes the region.
 */
int locus_counters_sum(const struct locus_counters *c, uint32_t idx,
		       uint64_t *out, size_t out_words);

/* Name of a kind: "counter", "gauge", "histogram" or "unknown". */
const char *locus_ctr_kind_name(unsigned kind);

/*
 * Estimate quantile q (0..1) of a summed histogram element h (count, sum,
 * buckets as above) by linear interpolation inside the log2 bucket where the
 * cumulative count reaches q * total (see counters.c). NaN for an empty one.
 */
double locus_hist_quantile(const uint64_t *h, double q);

/* Inclusive upper bound of bucket i (i < 63): 0 for bucket 0, else 2^i - 1. */
static inline uint64_t locus_hist_bucket_le(unsigned i)
{
	return i == 0 ? 0 : (i >= 64 ? UINT64_MAX : (1ull << i) - 1);
}

/* Bucket of value v (see the top of this file). */
static inline unsigned locus_hist_bucket(uint64_t v)
{
	unsigned b;

	if (v == 0)
		return 0;
	b = 64u - (unsigned)__builtin_clzll(v); /* floor(log2(v)) + 1 */
	return b > LOCUS_HIST_BUCKETS - 1 ? LOCUS_HIST_BUCKETS - 1 : b;
}

#endif /* LOCUS_COUNTERS_H */
