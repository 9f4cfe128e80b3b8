// SPDX-License-Identifier: MIT
/*
 * Counter region: layout, registration, validation and reading.
 *
 * A reader never trusts the shared bytes twice: the header's geometry is
 * copied and checked once at open, every entry is copied and checked when it
 * is first seen, and all reads go through those local copies, so a corrupt
 * or hostile writer can at worst make the numbers wrong, never make this
 * process touch memory outside [region, region + size).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "locus_counters.h"
#include "locus_counters_priv.h"
#include "locus_err_priv.h"

/* Bounds on geometry a sane creator uses; larger values are corruption. */
#define CTR_MAX_ENTRIES  (1u << 16)
#define CTR_MAX_BLOCKS   4096u
#define CTR_MAX_BLOCK    (1ull << 32)

struct locus_counters {
	char *base;
	size_t size;
	unsigned flags;
	uint32_t max_entries;
	uint32_t n_blocks;
	uint64_t block_size;
	uint64_t dir_off;
	uint64_t blocks_off;
	uint32_t n_known;          /* entries validated into info[] */
	uint64_t used;             /* end of the last entry's storage */
	struct locus_ctr_info *info;
	pthread_mutex_t lock;      /* registration by threads of the writer */
};

const char *locus_ctr_kind_name(unsigned kind)
{
	switch (kind) {
	case LOCUS_CTR_COUNTER:
		return "counter";
	case LOCUS_CTR_GAUGE:
		return "gauge";
	case LOCUS_CTR_HISTOGRAM:
		return "histogram";
	}
	return "unknown";
}

/* Layout every reader recomputes: the directory follows the header, the
 * blocks follow the directory, each start cache-line aligned. */
static uint64_t ctr_dir_off(void)
{
	return LOCUS_ALIGN_UP((uint64_t)sizeof(struct locus_ctr_hdr), LOCUS_CACHE_LINE);
}

static uint64_t ctr_blocks_off(uint32_t max_entries)
{
	return LOCUS_ALIGN_UP(ctr_dir_off() +
			      (uint64_t)max_entries * sizeof(struct locus_ctr_entry),
			      LOCUS_CACHE_LINE);
}

size_t locus_counters_region_size(const struct locus_ctr_params *p)
{
	uint64_t bs, total;

	if (!p || p->max_entries == 0 || p->max_entries > CTR_MAX_ENTRIES ||
	    p->n_blocks == 0 || p->n_blocks > CTR_MAX_BLOCKS ||
	    p->block_size == 0 || p->block_size > CTR_MAX_BLOCK)
		return 0;
	bs = LOCUS_ALIGN_UP(p->block_size, LOCUS_CACHE_LINE);
	total = ctr_blocks_off(p->max_entries) + (uint64_t)p->n_blocks * bs;
	if (total > SIZE_MAX)
		return 0;
	return (size_t)total;
}

int locus_counters_init(void *region, size_t size, const struct locus_ctr_params *p,
			struct locus_error *err)
{
	struct locus_ctr_hdr *h = region;
	size_t need = locus_counters_region_size(p);

	if (!region || ((uintptr_t)region & 7))
		return locus_error_set(err, EINVAL, "counters: region %p is not 8-byte aligned",
				       region);
	if (need == 0)
		return locus_error_set(err, EINVAL,
				       "counters: bad params (entries 1..%u, blocks 1..%u, block bytes 1..%llu)",
				       CTR_MAX_ENTRIES, CTR_MAX_BLOCKS, CTR_MAX_BLOCK);
	if (size < need)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "counters: region of %zu bytes < %zu needed", size, need);

	memset(region, 0, need);
	h->version = LOCUS_CTR_VERSION;
	h->hdr_size = sizeof(*h);
	h->entry_size = sizeof(struct locus_ctr_entry);
	h->max_entries = p->max_entries;
	h->n_blocks = p->n_blocks;
	h->block_size = LOCUS_ALIGN_UP(p->block_size, LOCUS_CACHE_LINE);
	h->dir_off = ctr_dir_off();
	h->blocks_off = ctr_blocks_off(p->max_entries);
	h->region_size = need;
	/* A reader that sees the magic sees a complete header. */
	__atomic_store_n(&h->magic, LOCUS_CTR_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

static int valid_name(const char *s, size_t max, int label)
{
	size_t n = strnlen(s, max);

	if (n == 0 || n >= max)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || ch == '_' ||
		      (ch >= '0' && ch <= '9' && !(label && i == 0))))
			return 0;
	}
	return 1;
}

static int valid_help(const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	if (n >= max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

/*
 * Check the kind and shape shared by a descriptor and an entry; fills
 * n_elems and elem_words. Returns 0 or a static reason.
 */
static const char *check_shape(unsigned kind, uint32_t ndims, const uint32_t *dim,
			       const char *const *label, uint32_t *n_elems,
			       uint32_t *elem_words)
{
	uint64_t n = 1;

	if (kind < LOCUS_CTR_COUNTER || kind > LOCUS_CTR_HISTOGRAM)
		return "unknown kind";
	if (ndims > LOCUS_CTR_MAX_DIMS)
		return "more than 2 dimensions";
	for (uint32_t d = 0; d < LOCUS_CTR_MAX_DIMS; d++) {
		if (d < ndims) {
			if (dim[d] == 0)
				return "zero-length dimension";
			if (!label[d] || !valid_name(label[d], LOCUS_CTR_LABEL_MAX, 1))
				return "label name not [a-z_][a-z0-9_]{0,30}";
			/* Prometheus reserves "__*" and histograms use "le" */
			if (!strncmp(label[d], "__", 2) || !strcmp(label[d], "le"))
				return "label name is reserved (le, __*)";
			n *= dim[d];
			if (n > LOCUS_CTR_MAX_ELEMS)
				return "too many elements";
		} else if (dim[d] != 0 || (label[d] && label[d][0])) {
			return "dimension or label beyond ndims";
		}
	}
	if (ndims == 2 && strcmp(label[0], label[1]) == 0)
		return "both labels have the same name";
	*n_elems = (uint32_t)n;
	*elem_words = kind == LOCUS_CTR_HISTOGRAM ? LOCUS_HIST_WORDS : 1;
	return NULL;
}

static int name_known(const struct locus_counters *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_known; i++)
		if (strcmp(c->info[i].name, name) == 0)
			return (int)i;
	return -ENOENT;
}

/* Copy shared entry idx, validate it, and append it to info[]. */
static int adopt_entry(struct locus_counters *c, uint32_t idx, struct locus_error *err)
{
	struct locus_ctr_entry e;
	struct locus_ctr_info *in = &c->info[idx];
	const char *labels[LOCUS_CTR_MAX_DIMS];
	const char *why;
	uint32_t n_elems, words;
	uint64_t align;

	memcpy(&e, c->base + c->dir_off + (uint64_t)idx * sizeof(e), sizeof(e));
	if (!valid_name(e.name, sizeof(e.name), 0))
		return locus_error_set(err, LOCUS_ERANGE,
				       "counters: entry %u: name not NUL-terminated [a-z0-9_]{1,63}", idx);
	if (!valid_help(e.help, sizeof(e.help)))
		return locus_error_set(err, LOCUS_ERANGE,
				       "counters: entry %u (%s): help not NUL-terminated printable text",
				       idx, e.name);
	for (uint32_t d = 0; d < LOCUS_CTR_MAX_DIMS; d++) {
		if (!memchr(e.label[d], '\0', sizeof(e.label[d])))
			return locus_error_set(err, LOCUS_ERANGE,
					       "counters: entry %u (%s): label %u not NUL-terminated",
					       idx, e.name, d);
		labels[d] = e.label[d];
	}
	why = check_shape(e.kind, e.ndims, e.dim, labels, &n_elems, &words);
	if (why)
		return locus_error_set(err, LOCUS_ERANGE, "counters: entry %u (%s): %s",
				       idx, e.name, why);
	if (e.nbytes != (uint64_t)n_elems * words * 8)
		return locus_error_set(err, LOCUS_ERANGE,
				       "counters: entry %u (%s): %llu bytes for %u x %u words",
				       idx, e.name, (unsigned long long)e.nbytes, n_elems, words);
	align = e.kind == LOCUS_CTR_HISTOGRAM ? LOCUS_CACHE_LINE : 8;
	if ((e.offset & (align - 1)) || e.offset < c->used ||
	    e.offset > c->block_size || e.nbytes > c->block_size - e.offset)
		return locus_error_set(err, LOCUS_ERANGE,
				       "counters: entry %u (%s): storage [%llu, +%llu) misaligned, overlapping or beyond the %llu-byte block",
				       idx, e.name, (unsigned long long)e.offset,
				       (unsigned long long)e.nbytes,
				       (unsigned long long)c->block_size);
	if (name_known(c, e.name) >= 0)
		return locus_error_set(err, LOCUS_ERANGE, "counters: entry %u: duplicate name %s",
				       idx, e.name);

	memset(in, 0, sizeof(*in));
	memcpy(in->name, e.name, sizeof(in->name));
	memcpy(in->help, e.help, sizeof(in->help));
	memcpy(in->label, e.label, sizeof(in->label));
	in->kind = e.kind;
	in->ndims = e.ndims;
	in->dim[0] = e.dim[0];
	in->dim[1] = e.dim[1];
	in->n_elems = n_elems;
	in->elem_words = words;
	in->offset = e.offset;
	c->used = e.offset + e.nbytes;
	c->n_known = idx + 1;
	return 0;
}

static int check_header(const struct locus_ctr_hdr *h, size_t size, struct locus_error *err)
{
	uint64_t end;

	if (h->magic != LOCUS_CTR_MAGIC)
		return locus_error_set(err, LOCUS_EBADMAGIC, h->magic == 0 ?
				       "counters: region not initialised" :
				       "counters: bad magic 0x%016llx",
				       (unsigned long long)h->magic);
	if (h->version != LOCUS_CTR_VERSION || h->hdr_size != sizeof(*h) ||
	    h->entry_size != sizeof(struct locus_ctr_entry))
		return locus_error_set(err, LOCUS_EVERSION,
				       "counters: layout version %u (header %u, entry %u bytes); this build reads version %u (%zu, %zu)",
				       h->version, h->hdr_size, h->entry_size, LOCUS_CTR_VERSION,
				       sizeof(*h), sizeof(struct locus_ctr_entry));
	if (h->max_entries == 0 || h->max_entries > CTR_MAX_ENTRIES ||
	    h->n_blocks == 0 || h->n_blocks > CTR_MAX_BLOCKS ||
	    h->block_size == 0 || h->block_size > CTR_MAX_BLOCK ||
	    (h->block_size & (LOCUS_CACHE_LINE - 1)))
		return locus_error_set(err, LOCUS_ERANGE,
				       "counters: geometry out of range: %u entries, %u blocks of %llu bytes",
				       h->max_entries, h->n_blocks,
				       (unsigned long long)h->block_size);
	end = ctr_blocks_off(h->max_entries) + (uint64_t)h->n_blocks * h->block_size;
	if (h->dir_off != ctr_dir_off() || h->blocks_off != ctr_blocks_off(h->max_entries) ||
	    h->region_size != end)
		return locus_error_set(err, LOCUS_ERANGE,
				       "counters: offsets (dir %llu, blocks %llu, size %llu) do not match the geometry",
				       (unsigned long long)h->dir_off,
				       (unsigned long long)h->blocks_off,
				       (unsigned long long)h->region_size);
	if (end > size)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "counters: region needs %llu bytes, has %zu",
				       (unsigned long long)end, size);
	if (h->block_used > h->block_size || (h->block_used & 7))
		return locus_error_set(err, LOCUS_ERANGE,
				       "counters: %llu bytes used of a %llu-byte block",
				       (unsigned long long)h->block_used,
				       (unsigned long long)h->block_size);
	return 0;
}

int locus_counters_open(void *region, size_t size, unsigned flags,
			struct locus_counters **out, struct locus_error *err)
{
	const struct locus_ctr_hdr *sh = region;
	struct locus_ctr_hdr h;
	struct locus_counters *c;
	int rc;

	*out = NULL;
	if (!region || ((uintptr_t)region & 7))
		return locus_error_set(err, EINVAL, "counters: region %p is not 8-byte aligned",
				       region);
	if (size < sizeof(h))
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "counters: region of %zu bytes has no room for the header", size);
	h.magic = __atomic_load_n(&sh->magic, __ATOMIC_ACQUIRE);
	memcpy((char *)&h + sizeof(h.magic), (const char *)sh + sizeof(h.magic),
	       sizeof(h) - sizeof(h.magic));
	rc = check_header(&h, size, err);
	if (rc)
		return rc;

	c = calloc(1, sizeof(*c));
	if (!c)
		return locus_error_set(err, ENOMEM, "counters: out of memory");
	c->info = calloc(h.max_entries, sizeof(*c->info));
	if (!c->info) {
		rc = locus_error_set(err, ENOMEM, "counters: out of memory for %u entries",
				     h.max_entries);
		goto err_free;
	}
	rc = pthread_mutex_init(&c->lock, NULL);
	if (rc) {
		rc = locus_error_set(err, rc, "counters: mutex init failed");
		goto err_info;
	}
	c->base = region;
	c->size = size;
	c->flags = flags;
	c->max_entries = h.max_entries;
	c->n_blocks = h.n_blocks;
	c->block_size = h.block_size;
	c->dir_off = h.dir_off;
	c->blocks_off = h.blocks_off;

	rc = locus_counters_refresh(c, err);
	if (rc < 0)
		goto err_lock;
	/* A writer resumes allocation after whatever the header says is taken. */
	if (!(flags & LOCUS_CTR_RDONLY) && h.block_used > c->used)
		c->used = h.block_used;
	*out = c;
	return 0;

err_lock:
	pthread_mutex_destroy(&c->lock);
err_info:
	free(c->info);
err_free:
	free(c);
	return rc;
}

void locus_counters_close(struct locus_counters *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c->info);
	free(c);
}

int locus_counters_refresh(struct locus_counters *c, struct locus_error *err)
{
	const struct locus_ctr_hdr *sh = (const void *)c->base;
	uint32_t n = __atomic_load_n(&sh->n_entries, __ATOMIC_ACQUIRE);
	int rc;

	if (n > c->max_entries || n < c->n_known)
		return locus_error_set(err, LOCUS_ERANGE,
				       "counters: entry count %u (known %u, capacity %u)",
				       n, c->n_known, c->max_entries);
	while (c->n_known < n) {
		rc = adopt_entry(c, c->n_known, err);
		if (rc)
			return rc;
	}
	return (int)c->n_known;
}

int locus_counters_register(struct locus_counters *c, const struct locus_ctr_desc *d,
			    uint64_t *off, struct locus_error *err)
{
	struct locus_ctr_hdr *sh = (void *)c->base;
	struct locus_ctr_entry *e;
	const char *help = d->help ? d->help : "";
	const char *why;
	uint32_t n_elems, words, idx;
	uint64_t align, start, nbytes;
	int rc;

	if (c->flags & LOCUS_CTR_RDONLY)
		return locus_error_set(err, EPERM, "counters: read-only handle cannot register %s",
				       d->name ? d->name : "(null)");
	if (!d->name || !valid_name(d->name, LOCUS_CTR_NAME_MAX, 0))
		return locus_error_set(err, EINVAL, "counters: name \"%.70s\" is not [a-z0-9_]{1,63}",
				       d->name ? d->name : "(null)");
	if (!valid_help(help, LOCUS_CTR_HELP_MAX))
		return locus_error_set(err, EINVAL,
				       "counters: %s: help must be printable ASCII of < %d chars",
				       d->name, LOCUS_CTR_HELP_MAX);
	why = check_shape(d->kind, d->ndims, d->dim, d->label, &n_elems, &words);
	if (why)
		return locus_error_set(err, EINVAL, "counters: %s: %s", d->name, why);
	nbytes = (uint64_t)n_elems * words * 8;
	align = d->kind == LOCUS_CTR_HISTOGRAM ? LOCUS_CACHE_LINE : 8;

	pthread_mutex_lock(&c->lock);
	if (name_known(c, d->name) >= 0) {
		rc = locus_error_set(err, EEXIST, "counters: %s is already registered", d->name);
		goto out;
	}
	if (c->n_known >= c->max_entries) {
		rc = locus_error_set(err, LOCUS_EFULL,
				     "counters: directory full (%u entries) registering %s",
				     c->max_entries, d->name);
		goto out;
	}
	start = LOCUS_ALIGN_UP(c->used, align);
	if (start > c->block_size || nbytes > c->block_size - start) {
		rc = locus_error_set(err, LOCUS_EFULL,
				     "counters: %s needs %llu bytes per block, %llu of %llu left",
				     d->name, (unsigned long long)nbytes,
				     (unsigned long long)(c->block_size - LOCUS_MIN(start, c->block_size)),
				     (unsigned long long)c->block_size);
		goto out;
	}
	idx = c->n_known;
	e = (void *)(c->base + c->dir_off + (uint64_t)idx * sizeof(*e));
	memset(e, 0, sizeof(*e));
	strcpy(e->name, d->name);
	strcpy(e->help, help);
	for (uint32_t i = 0; i < d->ndims; i++)
		strcpy(e->label[i], d->label[i]);
	e->kind = d->kind;
	e->ndims = d->ndims;
	e->dim[0] = d->dim[0];
	e->dim[1] = d->dim[1];
	e->offset = start;
	e->nbytes = nbytes;
	/* Storage past block_used is never handed out twice, but a reopened
	 * region may hold leftovers of an older run: start from zero. */
	for (uint32_t b = 0; b < c->n_blocks; b++)
		memset(c->base + c->blocks_off + (uint64_t)b * c->block_size + start, 0, nbytes);
	rc = adopt_entry(c, idx, err);
	if (rc)
		goto out;
	__atomic_store_n(&sh->block_used, c->used, __ATOMIC_RELAXED);
	__atomic_store_n(&sh->n_entries, idx + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->epoch, __atomic_load_n(&sh->epoch, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELEASE);
	*off = start;
	rc = (int)idx;
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int locus_counters_find(const struct locus_counters *c, const char *name)
{
	return name_known(c, name);
}

void *locus_counters_block(struct locus_counters *c, uint32_t lcore)
{
	if (lcore >= c->n_blocks || (c->flags & LOCUS_CTR_RDONLY))
		return NULL;
	return c->base + c->blocks_off + (uint64_t)lcore * c->block_size;
}

uint32_t locus_counters_n_blocks(const struct locus_counters *c)
{
	return c->n_blocks;
}

uint32_t locus_counters_n_entries(const struct locus_counters *c)
{
	return c->n_known;
}

const struct locus_ctr_info *locus_counters_info(const struct locus_counters *c, uint32_t idx)
{
	return idx < c->n_known ? &c->info[idx] : NULL;
}

/* Add blocks [first, last) of entry idx into out (zeroed first). */
static int sum_blocks(const struct locus_counters *c, uint32_t idx, uint32_t first,
		      uint32_t last, uint64_t *out, size_t out_words)
{
	const struct locus_ctr_info *in = locus_counters_info(c, idx);
	size_t words;

	if (!in || last > c->n_blocks || first >= last)
		return -LOCUS_ERANGE;
	words = (size_t)in->n_elems * in->elem_words;
	if (out_words < words)
		return -ENOSPC;
	memset(out, 0, words * sizeof(*out));
	for (uint32_t b = first; b < last; b++) {
		const uint64_t *p = (const void *)(c->base + c->blocks_off +
						   (uint64_t)b * c->block_size + in->offset);

		for (size_t w = 0; w < words; w++)
			out[w] += __atomic_load_n(&p[w], __ATOMIC_RELAXED);
	}
	return (int)words;
}

int locus_counters_sum(const struct locus_counters *c, uint32_t idx,
		       uint64_t *out, size_t out_words)
{
	return sum_blocks(c, idx, 0, c->n_blocks, out, out_words);
}

int locus_counters_read_block(const struct locus_counters *c, uint32_t idx, uint32_t block,
			      uint64_t *out, size_t out_words)
{
	return sum_blocks(c, idx, block, block + 1, out, out_words);
}

/*
 * Quantile estimate from log2 buckets. The total is the sum of the buckets
 * (not the count word, which a reader may see out of step with them). The
 * target rank q * total falls in bucket i; inside it, values are assumed
 * uniform over the bucket's integer range [lo, hi] (bucket 0: [0, 0];
 * bucket i: [2^(i-1), 2^i - 1]; the open last bucket: [2^62, 2^64 - 1]),
 * so the estimate is lo + (hi - lo) * (rank - below) / in_bucket. The error
 * is therefore bounded by the bucket width: at most a factor of 2.
 */
double locus_hist_quantile(const uint64_t *h, double q)
{
	const uint64_t *b = h + LOCUS_HIST_BUCKET0;
	double total = 0, rank, below = 0;

	if (isnan(q))
		return NAN;
	q = q < 0 ? 0 : (q > 1 ? 1 : q);
	for (unsigned i = 0; i < LOCUS_HIST_BUCKETS; i++)
		total += (double)b[i];
	if (total == 0)
		return NAN;
	rank = q * total;
	for (unsigned i = 0; i < LOCUS_HIST_BUCKETS; i++) {
		double lo, hi, frac;

		if (b[i] == 0)
			continue;
		/* the last non-empty bucket takes any rounding excess of rank */
		if (below + (double)b[i] >= rank || below + (double)b[i] >= total) {
			lo = i == 0 ? 0 : ldexp(1.0, (int)i - 1);
			hi = i == 0 ? 0 : (i == LOCUS_HIST_BUCKETS - 1 ?
					   (double)UINT64_MAX : ldexp(1.0, (int)i) - 1);
			frac = (rank - below) / (double)b[i];
			frac = frac < 0 ? 0 : (frac > 1 ? 1 : frac);
			return lo + (hi - lo) * frac;
		}
		below += (double)b[i];
	}
	return NAN;
}
