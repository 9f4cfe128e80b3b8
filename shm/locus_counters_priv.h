/* SPDX-License-Identifier: MIT */
/*
 * Counters as their writer (locusd) creates, registers and updates them,
 * and one block read alone (locus-stat's per-lcore view): locus's own
 * programs only (not installed, not exported). Reading the sums is
 * locus_counters.h.
 */
#ifndef LOCUS_COUNTERS_PRIV_H
#define LOCUS_COUNTERS_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "locus_counters.h"
#include "locus_err.h"

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
 * Register an entry (read-write handles only). Returns its directory index
 * (>= 0) and its storage offset inside every block in *off. Errors:
 * -EINVAL bad name/label/help/kind/shape, -EEXIST duplicate name,
 * -LOCUS_EFULL directory or block space exhausted, -EPERM on a read-only
 * handle. Safe to call from several threads of the owning process.
 */
int locus_counters_register(struct locus_counters *c, const struct locus_ctr_desc *d,
			    uint64_t *off, struct locus_error *err);

/*
 * Base of lcore's block for the hot-path helpers below; each block has one
 * writing thread at a time. NULL if lcore is out of range or the handle is
 * read-only.
 */
void *locus_counters_block(struct locus_counters *c, uint32_t lcore);

/*
 * locus_counters_sum for one block alone (block < n_blocks): what the
 * lcore writing it counted. Returns the words written, -LOCUS_ERANGE (bad
 * idx or block) or -ENOSPC.
 */
int locus_counters_read_block(const struct locus_counters *c, uint32_t idx, uint32_t block,
			      uint64_t *out, size_t out_words);

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

#endif /* LOCUS_COUNTERS_PRIV_H */
