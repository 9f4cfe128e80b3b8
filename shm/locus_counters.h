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

/* Shape of the region, chosen by its creator. */
struct locus_ctr_params {
	uint32_t max_entries; /* directory capacity, >= 1 */
	uint32_t n_blocks;    /* writer lcores, >= 1 */
	uint64_t block_size;  /* bytes per block, rounded up to 64 */
};

/* What to register. Labels are required for the dimensions in use. */
struct locus_ctr_desc {
	const char *name;
	const char *help;     /* may be NULL (empty) */
	enum locus_ctr_kind kind;
	uint32_t ndims;       /* 0, 1 or 2 */
	uint32_t dim[LOCUS_CTR_MAX_DIMS];
	const char *label[LOCUS_CTR_MAX_DIMS];
};

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
 * Bytes a region with these params needs, or 0 if they are out of range
 * (no blocks, no entries, or a size that overflows).
 */
size_t locus_counters_region_size(const struct locus_ctr_params *p);

/*
 * Lay out an empty region at region (8-byte aligned, size bytes, which must
 * be >= locus_counters_region_size(p)). Zeroes it and writes the magic last.
 * Returns 0, -EINVAL or -LOCUS_ETRUNCATED (message in err).
 */
int locus_counters_init(void *region, size_t size, const struct locus_ctr_params *p,
			struct locus_error *err);

/*
 * Open a region laid out by init. Validates the header against size and
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

/*
 * Register an entry (read-write handles only). Returns its directory index
 * (>= 0) and its storage offset inside every block in *off. Errors:
 * -EINVAL bad name/label/help/kind/shape, -EEXIST duplicate name,
 * -LOCUS_EFULL directory or block space exhausted, -EPERM on a read-only
 * handle. Safe to call from several threads of the owning process.
 */
int locus_counters_register(struct locus_counters *c, const struct locus_ctr_desc *d,
			    uint64_t *off, struct locus_error *err);

/* Directory index of name, or -ENOENT. */
int locus_counters_find(const struct locus_counters *c, const char *name);

/*
 * Base of lcore's block for the hot-path helpers below; each block has one
 * writing thread at a time. NULL if lcore is out of range or the handle is
 * read-only.
 */
void *locus_counters_block(struct locus_counters *c, uint32_t lcore);

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

/*
 * The same for one block alone (block < n_blocks): what the lcore writing
 * it counted. Returns the words written, -LOCUS_ERANGE (bad idx or block)
 * or -ENOSPC.
 */
int locus_counters_read_block(const struct locus_counters *c, uint32_t idx, uint32_t block,
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

/* ---- hot path: the block's single owner writes with plain stores ---- */

static inline uint64_t *locus_ctr_word(void *block, uint64_t off)
{
	return (uint64_t *)((char *)block + off);
}

static inline void locus_counter_add(void *block, uint64_t off, uint64_t n)
{
	uint64_t *p = locus_ctr_word(block, off);

	__atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

static inline void locus_counter_inc(void *block, uint64_t off)
{
	locus_counter_add(block, off, 1);
}

/* Element i of a vector counter (i < n_elems, unchecked). */
static inline void locus_counter_add_elem(void *block, uint64_t off, uint32_t i, uint64_t n)
{
	locus_counter_add(block, off + (uint64_t)i * sizeof(uint64_t), n);
}

static inline void locus_gauge_set(void *block, uint64_t off, int64_t v)
{
	__atomic_store_n(locus_ctr_word(block, off), (uint64_t)v, __ATOMIC_RELAXED);
}

static inline void locus_gauge_set_elem(void *block, uint64_t off, uint32_t i, int64_t v)
{
	locus_gauge_set(block, off + (uint64_t)i * sizeof(uint64_t), v);
}

static inline void locus_gauge_add(void *block, uint64_t off, int64_t d)
{
	locus_counter_add(block, off, (uint64_t)d);
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

static inline void locus_hist_record(void *block, uint64_t off, uint64_t v)
{
	locus_counter_add(block, off + 8 * (LOCUS_HIST_BUCKET0 + locus_hist_bucket(v)), 1);
	locus_counter_add(block, off + 8 * LOCUS_HIST_SUM, v);
	locus_counter_add(block, off + 8 * LOCUS_HIST_COUNT, 1);
}

/* Element i of a vector of histograms. */
static inline void locus_hist_record_elem(void *block, uint64_t off, uint32_t i, uint64_t v)
{
	locus_hist_record(block, off + (uint64_t)i * 8 * LOCUS_HIST_WORDS, v);
}

#endif /* LOCUS_COUNTERS_H */
