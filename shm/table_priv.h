/* SPDX-License-Identifier: MIT */
/* Table channels: the process-local view shared by table*.c (not installed). */
#ifndef LOCUS_TABLE_PRIV_H
#define LOCUS_TABLE_PRIV_H

#include "locus_table.h"

/* Geometry copied out of the region at attach and trusted from then on. */
struct locus_table_chan_view {
	struct locus_table_chan_hdr *hdr;
	struct locus_table_reader_rec *recs;
	uint8_t *slots;
	uint64_t slot_size;
	uint64_t slot_stride;
	unsigned n_slots;
};

struct locus_table_region {
	uint8_t *base;
	size_t size;
	unsigned n_channels;
	unsigned n_readers;
	struct locus_table_chan_view ch[LOCUS_TABLE_MAX_CHANNELS];
};

static inline struct locus_table_slot_hdr *
locus_table_slot_hdr(const struct locus_table_chan_view *cv, unsigned s)
{
	return (struct locus_table_slot_hdr *)(cv->slots + (uint64_t)s * cv->slot_stride);
}

static inline uint8_t *locus_table_slot_data(const struct locus_table_chan_view *cv, unsigned s)
{
	return cv->slots + (uint64_t)s * cv->slot_stride + sizeof(struct locus_table_slot_hdr);
}

uint64_t locus_table_now_ns(void);

#endif /* LOCUS_TABLE_PRIV_H */
