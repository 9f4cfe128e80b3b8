// SPDX-License-Identifier: MIT
/*
 * Table channels: region layout, initialisation and validation on attach.
 *
 *   region header (192) | channel 0 | channel 1 | ...   (each 64-aligned)
 *   channel: header (192) | R reader records (256 each) | N slots
 *   slot:    header (64) | slot_size bytes, stride rounded up to 64
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_common.h"
#include "locus_err_priv.h"
#include "table_priv.h"

struct chan_layout {
	uint64_t readers_off, slots_off, stride, size;
};

static void chan_layout(uint32_t n_slots, uint64_t slot_size, uint32_t n_readers,
			struct chan_layout *l)
{
	l->readers_off = sizeof(struct locus_table_chan_hdr);
	l->slots_off = l->readers_off +
		       (uint64_t)n_readers * sizeof(struct locus_table_reader_rec);
	l->stride = LOCUS_ALIGN_UP(sizeof(struct locus_table_slot_hdr) + slot_size,
				   (uint64_t)LOCUS_CACHE_LINE);
	l->size = l->slots_off + (uint64_t)n_slots * l->stride;
}

static int check_counts(uint32_t n_channels, uint32_t n_readers, struct locus_error *err)
{
	if (n_channels < 1 || n_channels > LOCUS_TABLE_MAX_CHANNELS)
		return locus_error_set(err, LOCUS_ERANGE, "table channels %u not in 1..%u",
				       n_channels, LOCUS_TABLE_MAX_CHANNELS);
	if (n_readers < 1 || n_readers > LOCUS_TABLE_MAX_READERS)
		return locus_error_set(err, LOCUS_ERANGE, "table readers %u not in 1..%u",
				       n_readers, LOCUS_TABLE_MAX_READERS);
	return 0;
}

static int check_chan(unsigned ch, uint32_t n_slots, uint64_t slot_size,
		      struct locus_error *err)
{
	if (n_slots < 2 || n_slots > LOCUS_TABLE_MAX_SLOTS)
		return locus_error_set(err, LOCUS_ERANGE, "channel %u: %u slots not in 2..%u",
				       ch, n_slots, LOCUS_TABLE_MAX_SLOTS);
	if (slot_size < 1 || slot_size > LOCUS_TABLE_MAX_SLOT)
		return locus_error_set(err, LOCUS_ERANGE,
				       "channel %u: slot size %llu not in 1..%llu", ch,
				       (unsigned long long)slot_size, LOCUS_TABLE_MAX_SLOT);
	return 0;
}

/* Offsets of every channel for p and the total into *total. */
static int region_layout(const struct locus_table_params *p,
			 uint64_t off[LOCUS_TABLE_MAX_CHANNELS], uint64_t *total,
			 struct locus_error *err)
{
	uint64_t cur = sizeof(struct locus_table_region_hdr);
	struct chan_layout l;
	unsigned i;
	int rc;

	if (!p)
		return locus_error_set(err, EINVAL, "table params: NULL");
	rc = check_counts(p->n_channels, p->n_readers, err);
	if (rc < 0)
		return rc;
	for (i = 0; i < p->n_channels; i++) {
		rc = check_chan(i, p->channel[i].n_slots, p->channel[i].slot_size, err);
		if (rc < 0)
			return rc;
		chan_layout(p->channel[i].n_slots, p->channel[i].slot_size, p->n_readers, &l);
		cur = LOCUS_ALIGN_UP(cur, (uint64_t)LOCUS_CACHE_LINE);
		off[i] = cur;
		cur += l.size; /* bounded: 16 * (64 * (2^30 + 128) + 1024 * 256) */
	}
	for (; i < LOCUS_TABLE_MAX_CHANNELS; i++)
		off[i] = 0;
	*total = cur;
	return 0;
}

size_t locus_table_region_size(const struct locus_table_params *p)
{
	uint64_t off[LOCUS_TABLE_MAX_CHANNELS], total;

	if (region_layout(p, off, &total, NULL) < 0)
		return 0;
	return (size_t)total;
}

int locus_table_region_init(void *region, size_t size, const struct locus_table_params *p,
			    struct locus_error *err)
{
	uint64_t off[LOCUS_TABLE_MAX_CHANNELS] = { 0 };
	struct locus_table_region_hdr *h = region;
	struct chan_layout l;
	uint64_t need;
	unsigned i;
	int rc;

	rc = region_layout(p, off, &need, err);
	if (rc < 0)
		return rc;
	if (!region || ((uintptr_t)region % LOCUS_CACHE_LINE))
		return locus_error_set(err, EINVAL, "table region %p not cache-line aligned",
				       region);
	if (size < need)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "table region of %zu bytes, the channels need %llu", size,
				       (unsigned long long)need);
	memset(region, 0, need);
	for (i = 0; i < p->n_channels; i++) {
		struct locus_table_chan_hdr *c = (void *)((uint8_t *)region + off[i]);

		chan_layout(p->channel[i].n_slots, p->channel[i].slot_size, p->n_readers, &l);
		c->n_slots = p->channel[i].n_slots;
		c->n_readers = p->n_readers;
		c->slot_size = p->channel[i].slot_size;
		c->slot_stride = l.stride;
		c->readers_off = l.readers_off;
		c->slots_off = l.slots_off;
	}
	h->version = LOCUS_TABLE_VERSION;
	h->n_channels = p->n_channels;
	h->n_readers = p->n_readers;
	h->size = need;
	memcpy(h->chan_off, off, sizeof(h->chan_off));
	/* the magic last: an attacher never accepts a half-initialised region */
	__atomic_store_n(&h->magic, LOCUS_TABLE_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

int locus_table_region_attach(void *region, size_t size, struct locus_table_region **out,
			      struct locus_error *err)
{
	struct locus_table_params p = { 0 };
	struct locus_table_region_hdr h;
	uint64_t off[LOCUS_TABLE_MAX_CHANNELS] = { 0 };
	struct locus_table_region *t;
	uint64_t need;
	unsigned i;
	int rc;

	if (!out)
		return locus_error_set(err, EINVAL, "table attach: NULL argument");
	if (!region || size < sizeof(h))
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "table region of %zu bytes, smaller than its header", size);
	if ((uintptr_t)region % LOCUS_CACHE_LINE)
		return locus_error_set(err, EINVAL, "table region %p not cache-line aligned",
				       region);
	/* one snapshot, then judge only the copy */
	memcpy(&h, region, sizeof(h));
	if (__atomic_load_n(&((struct locus_table_region_hdr *)region)->magic,
			    __ATOMIC_ACQUIRE) != LOCUS_TABLE_MAGIC || h.magic != LOCUS_TABLE_MAGIC)
		return locus_error_set(err, LOCUS_EBADMAGIC,
				       "table region: magic %#llx, not initialised",
				       (unsigned long long)h.magic);
	if (h.version != LOCUS_TABLE_VERSION)
		return locus_error_set(err, LOCUS_EVERSION,
				       "table region version %u, this build speaks %u", h.version,
				       LOCUS_TABLE_VERSION);
	rc = check_counts(h.n_channels, h.n_readers, err);
	if (rc < 0)
		return rc;
	p.n_channels = h.n_channels;
	p.n_readers = h.n_readers;
	for (i = 0; i < h.n_channels; i++) {
		const struct locus_table_chan_hdr *c;

		/* the previous channels were checked to fit; this header must too */
		if (h.chan_off[i] > size || size - h.chan_off[i] < sizeof(*c) ||
		    h.chan_off[i] % LOCUS_CACHE_LINE)
			return locus_error_set(err, LOCUS_ERANGE,
					       "table channel %u at offset %llu outside the %zu-byte region",
					       i, (unsigned long long)h.chan_off[i], size);
		c = (const void *)((const uint8_t *)region + h.chan_off[i]);
		p.channel[i].n_slots = c->n_slots;
		p.channel[i].slot_size = c->slot_size;
	}
	rc = region_layout(&p, off, &need, err);
	if (rc < 0)
		return rc;
	if (need > size || h.size != need)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "table region: layout needs %llu bytes, header says %llu, region has %zu",
				       (unsigned long long)need, (unsigned long long)h.size, size);
	for (i = 0; i < LOCUS_TABLE_MAX_CHANNELS; i++) {
		if (h.chan_off[i] != off[i])
			return locus_error_set(err, LOCUS_ERANGE,
					       "table channel %u at offset %llu, layout says %llu", i,
					       (unsigned long long)h.chan_off[i],
					       (unsigned long long)off[i]);
	}

	t = calloc(1, sizeof(*t));
	if (!t)
		return locus_error_set(err, ENOMEM, "table attach: out of memory");
	t->base = region;
	t->size = size;
	t->n_channels = h.n_channels;
	t->n_readers = h.n_readers;
	for (i = 0; i < h.n_channels; i++) {
		struct locus_table_chan_view *cv = &t->ch[i];
		struct locus_table_chan_hdr *c = (void *)(t->base + off[i]);
		struct chan_layout l;

		chan_layout(p.channel[i].n_slots, p.channel[i].slot_size, p.n_readers, &l);
		if (c->n_readers != p.n_readers || c->slot_stride != l.stride ||
		    c->readers_off != l.readers_off || c->slots_off != l.slots_off) {
			free(t);
			return locus_error_set(err, LOCUS_ERANGE,
					       "table channel %u: geometry fields disagree with its slot count and size",
					       i);
		}
		cv->hdr = c;
		cv->recs = (void *)((uint8_t *)c + l.readers_off);
		cv->slots = (uint8_t *)c + l.slots_off;
		cv->slot_size = p.channel[i].slot_size;
		cv->slot_stride = l.stride;
		cv->n_slots = p.channel[i].n_slots;
	}
	*out = t;
	return 0;
}

void locus_table_region_detach(struct locus_table_region *t)
{
	free(t);
}

unsigned locus_table_channels(const struct locus_table_region *t)
{
	return t->n_channels;
}

unsigned locus_table_readers(const struct locus_table_region *t)
{
	return t->n_readers;
}

int locus_table_channel_geometry(const struct locus_table_region *t, unsigned ch,
				 unsigned *n_slots, size_t *slot_size)
{
	if (ch >= t->n_channels)
		return -LOCUS_ERANGE;
	if (n_slots)
		*n_slots = t->ch[ch].n_slots;
	if (slot_size)
		*slot_size = t->ch[ch].slot_size;
	return 0;
}

uint64_t locus_table_published(const struct locus_table_region *t, unsigned ch)
{
	if (ch >= t->n_channels)
		return 0;
	return __atomic_load_n(&t->ch[ch].hdr->pub, __ATOMIC_ACQUIRE);
}

uint64_t locus_table_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
