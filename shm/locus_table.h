/* SPDX-License-Identifier: MIT */
/*
 * Table channels: versioned tables handed from one writer to the data-plane
 * lcores through a region of memory. In locusd the region is its own memory
 * and the writer its main lcore, fed by the control socket (locus_push.h);
 * the channel itself works between processes too (the torture test).
 *
 * The region holds C channels (ELDR, GRACE, ...: the ids are just numbers
 * here). A channel has N >= 2 slots of a size fixed at creation, a published
 * word P = generation << 8 | slot, a writer lock, and R reader records (one
 * per data-plane lcore), each in cache lines of its own. Tables are opaque
 * bytes; the owning module's validate callback judges their contents.
 *
 * Publishing: the writer reserves a slot no live reader may still hold,
 * fills it, records length and CRC32C in the slot header and release-stores
 * P once. Reading: one acquire-load of P per poll; when it changed, the
 * reader announces the candidate slot, checks it (slot index, length, CRC,
 * generation, callback) and only then switches; a table that fails is never
 * used, the old one stays and the rejection is counted and recorded.
 *
 * Reclamation. Each reader record holds a bitmask of the slots the reader may
 * be touching: the slot of the table in use plus, while it validates, the
 * candidate. The writer reuses a slot only when it is not the published one
 * and no live reader's mask has it. A mask rather than a single "generation
 * seen" word because a reader that refuses generation G keeps using an older
 * table: with a generation word it would pin every slot newer than its table
 * and, with two or three slots, stall the writer after two bad pushes. The
 * announcement is the QSBR/Dekker pattern, on both sides a store, a seq_cst
 * fence and a load of the other side's word:
 *
 *   reader: mask |= bit(s); fence; P' = load(P); use slot s only if P' == P
 *   writer: RMW(P);         fence; load every mask; reuse s only if no bit(s)
 *
 * Whichever fence comes first in the single total order, either the writer
 * sees bit(s) or the reader sees the newer P and retries: a reader can never
 * be handed a slot the writer is rewriting. Readers whose process died (pid
 * gone, or pid reused: start time differs) are skipped, as are readers that
 * went offline (mask 0).
 */
#ifndef LOCUS_TABLE_H
#define LOCUS_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "locus_common.h"
#include "locus_err.h"

#define LOCUS_TABLE_MAGIC        0x4241545355434f4cull /* "LOCUSTAB" */
#define LOCUS_TABLE_VERSION      1u
#define LOCUS_TABLE_MAX_CHANNELS 16
#define LOCUS_TABLE_MAX_SLOTS    64   /* a reader's hold mask is one 64-bit word */
#define LOCUS_TABLE_MAX_READERS  1024
#define LOCUS_TABLE_MAX_SLOT     ((1ull << 30) + 64) /* a sealed blob of the maximum payload */
#define LOCUS_TABLE_SLOT_BITS    8
#define LOCUS_TABLE_REJECT_MSG   128

/*
 * P: 0 = nothing published yet. A generation with slot LOCUS_TABLE_NO_SLOT
 * is a retraction: "nothing new, keep your table". The writer publishes one
 * before it refills the published slot, which it does only when every live
 * reader refused that table and no other slot is free (two slots, one bad
 * push): a slot must stop being named by P before the reclamation scan can
 * protect it.
 */
#define LOCUS_TABLE_GEN(p)  ((p) >> LOCUS_TABLE_SLOT_BITS)
#define LOCUS_TABLE_SLOT(p) ((unsigned)((p) & ((1u << LOCUS_TABLE_SLOT_BITS) - 1)))
#define LOCUS_TABLE_NO_SLOT ((1u << LOCUS_TABLE_SLOT_BITS) - 1)

struct locus_table_channel_params {
	uint32_t n_slots;    /* 2..LOCUS_TABLE_MAX_SLOTS */
	uint64_t slot_size;  /* bytes of table a slot holds, 1..LOCUS_TABLE_MAX_SLOT */
};

struct locus_table_params {
	uint32_t n_channels; /* 1..LOCUS_TABLE_MAX_CHANNELS */
	uint32_t n_readers;  /* per channel, 1..LOCUS_TABLE_MAX_READERS */
	struct locus_table_channel_params channel[LOCUS_TABLE_MAX_CHANNELS];
};

/* ---- layout in the segment (offsets from the region start) -------------- */

struct locus_table_region_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t n_channels;
	uint32_t n_readers;
	uint32_t reserved0;
	uint64_t size;       /* bytes of the region the layout uses */
	uint64_t chan_off[LOCUS_TABLE_MAX_CHANNELS];
	uint8_t  reserved[32];
};

struct locus_table_chan_hdr {
	/* line 0: loaded by every reader on every poll, stored once per publish */
	uint64_t pub;
	uint8_t  pad0[56];
	/* line 1: the writer */
	uint64_t lock;        /* 0 or the holder's identity (locus_proc_ident) */
	uint64_t n_published;
	uint8_t  pad1[48];
	/* line 2: geometry, immutable after init */
	uint32_t n_slots;
	uint32_t n_readers;
	uint64_t slot_size;
	uint64_t slot_stride;
	uint64_t readers_off; /* from the channel header */
	uint64_t slots_off;
	uint8_t  pad2[24];
};

struct locus_table_slot_hdr {
	uint64_t gen;        /* generation published from this slot */
	uint64_t len;        /* bytes of table */
	uint32_t crc32c;     /* over the len bytes of table */
	uint8_t  pad[44];
};

enum locus_table_reader_state {
	LOCUS_TABLE_READER_FREE    = 0,
	LOCUS_TABLE_READER_ONLINE  = 1,
	LOCUS_TABLE_READER_OFFLINE = 2,
};

struct locus_table_reader_rec {
	/* line 0: written by the reader when it switches, read by the writer */
	uint64_t owner;       /* locus_proc_ident of the registered process; 0 free */
	uint64_t hold;        /* bitmask of slots it may be reading */
	uint64_t gen_in_use;  /* generation of the table in use, 0 none */
	uint32_t state;       /* enum locus_table_reader_state */
	int32_t  pid;
	uint64_t start_ticks;
	uint8_t  pad0[24];
	/* line 1: statistics and the last refusal */
	uint64_t n_adopted;
	uint64_t n_rejected;
	uint64_t rejected_gen;
	uint32_t reject_code; /* errno or LOCUS_E* */
	uint8_t  pad1[36];
	/* lines 2-3 */
	char     reject_msg[LOCUS_TABLE_REJECT_MSG];
};

_Static_assert(sizeof(struct locus_table_region_hdr) == 192, "region header");
_Static_assert(sizeof(struct locus_table_chan_hdr) == 3 * LOCUS_CACHE_LINE, "channel header");
_Static_assert(sizeof(struct locus_table_slot_hdr) == LOCUS_CACHE_LINE, "slot header");
_Static_assert(sizeof(struct locus_table_reader_rec) == 4 * LOCUS_CACHE_LINE, "reader record");

/* ---- region --------------------------------------------------------------- */

struct locus_table_region; /* process-local, validated view of a region */

/* Bytes the layout for p needs, or 0 if p is invalid. */
size_t locus_table_region_size(const struct locus_table_params *p);

/*
 * Lay out a fresh region of size bytes (zeroed here) for p. -EINVAL for
 * invalid parameters, -LOCUS_ETRUNCATED if size is too small.
 */
int locus_table_region_init(void *region, size_t size, const struct locus_table_params *p,
			    struct locus_error *err);

/*
 * Validate an existing region (magic, version, counts, and every channel's
 * geometry recomputed and compared, all within size) and return a
 * process-local view holding copies of the geometry, so that later writes to
 * the region's headers cannot move our pointers. region stays mapped by the
 * caller for the life of the view.
 */
int locus_table_region_attach(void *region, size_t size, struct locus_table_region **out,
			      struct locus_error *err);
void locus_table_region_detach(struct locus_table_region *t);

unsigned locus_table_channels(const struct locus_table_region *t);
unsigned locus_table_readers(const struct locus_table_region *t);
/* Slot count and slot size of channel ch; -LOCUS_ERANGE for a bad ch. */
int locus_table_channel_geometry(const struct locus_table_region *t, unsigned ch,
				 unsigned *n_slots, size_t *slot_size);
/* The published word P of ch (0 if nothing published or bad ch). */
uint64_t locus_table_published(const struct locus_table_region *t, unsigned ch);

/* ---- writer (one per channel at a time, any process) --------------------- */

struct locus_table_writer;

/*
 * Take the channel's writer lock (CAS of our identity into the lock word). A
 * lock whose holder died is broken. -EBUSY if a live process holds it.
 */
int locus_table_writer_open(struct locus_table_region *t, unsigned ch,
			    struct locus_table_writer **out, struct locus_error *err);

/* Release the lock (if still ours) and free w. NULL is a no-op. */
void locus_table_writer_close(struct locus_table_writer *w);

/*
 * Reserve a slot to fill: not the published one and held by no live reader.
 * Waits up to timeout_ns for readers to move on (0: try once). Returns the
 * slot index and *buf / *cap to fill, -EBUSY (err names a reader that still
 * holds every candidate) or -LOCUS_ESTATE if the lock was lost.
 */
int locus_table_writer_reserve(struct locus_table_writer *w, uint64_t timeout_ns, void **buf,
			       size_t *cap, struct locus_error *err);

/*
 * Publish len bytes of the reserved slot: length and CRC32C into its header,
 * then one release-store of P. Returns the new generation (> 0) or
 * -LOCUS_ERANGE (len > slot size), -LOCUS_ESTATE (nothing reserved, lock lost).
 */
int64_t locus_table_writer_publish(struct locus_table_writer *w, size_t len,
				   struct locus_error *err);

/*
 * Open, reserve (waiting up to timeout_ns), copy len bytes, publish, close.
 * Returns the generation or a negative code.
 */
int64_t locus_table_push(struct locus_table_region *t, unsigned ch, const void *buf,
			 size_t len, uint64_t timeout_ns, struct locus_error *err);

/* Of the live online readers of a channel, how many adopted or refused gen. */
struct locus_table_wait_result {
	unsigned n_live;      /* registered, online, process alive */
	unsigned n_adopted;   /* table in use is gen or newer */
	unsigned n_refused;   /* refused gen (or a newer one) and runs an older table */
	int      refused_reader;         /* first refusing reader, -1 none */
	uint64_t refused_gen;
	int      refused_code;           /* positive errno or LOCUS_E* */
	char     refused_msg[LOCUS_TABLE_REJECT_MSG];
};

/*
 * Wait up to timeout_ns until every live online reader of ch adopted or
 * refused generation gen. Returns 0 when all decided (res says how: a refusal
 * is reported there, not as an error), -ETIMEDOUT with res filled as of the
 * last look, -LOCUS_ERANGE for a bad ch.
 */
int locus_table_wait(struct locus_table_region *t, unsigned ch, uint64_t gen,
		     uint64_t timeout_ns, struct locus_table_wait_result *res);

/* ---- reader (one per lcore and channel) ----------------------------------- */

/*
 * Bounds check of the table's contents by the module that owns the channel:
 * 0 to accept, a negative code (and err) to refuse. Runs on the reader's lcore.
 */
typedef int (*locus_table_validate_fn)(const void *buf, size_t len, void *arg,
				       struct locus_error *err);

/* Per-lcore reader state; lives in the lcore's own memory, not the segment. */
struct locus_table_reader {
	const uint64_t *pub;          /* the channel's P */
	uint64_t cached;              /* last P handled (adopted or refused) */
	const void *cur;              /* table in use, NULL none */
	size_t cur_len;
	uint64_t cur_gen;
	int cur_slot;                 /* -1 none */
	struct locus_table_reader_rec *rec;
	struct locus_table_chan_hdr *chan;
	uint8_t *slots;
	uint64_t slot_size;
	uint64_t slot_stride;
	unsigned n_slots;
	locus_table_validate_fn validate;
	void *arg;
	uint64_t ident;               /* our process identity (locus_proc_ident) */
	int online;
} __locus_cache_aligned;

/*
 * Claim reader record reader_idx of channel ch for this process (pid and
 * start time recorded; a record owned by a dead process is taken over) and
 * go online. validate may be NULL (CRC and length checks only). -EBUSY if a
 * live process owns the record, -LOCUS_ERANGE for a bad ch or index.
 */
int locus_table_reader_register(struct locus_table_region *t, unsigned ch, unsigned reader_idx,
				locus_table_validate_fn validate, void *arg,
				struct locus_table_reader *r, struct locus_error *err);

/* Release the record: it no longer holds anything nor counts for waits. */
void locus_table_reader_unregister(struct locus_table_reader *r);

/*
 * Offline: hold nothing (the writer may reuse every slot) and drop the table
 * in use. Online: count again; the next poll adopts the published table.
 */
void locus_table_reader_offline(struct locus_table_reader *r);
void locus_table_reader_online(struct locus_table_reader *r);

/* Slow path of poll: P changed to p. 1 switched, 0 nothing to do, < 0 refused. */
int locus_table_reader_switch(struct locus_table_reader *r, uint64_t p);

/*
 * Once per poll iteration: 1 if the reader switched to a new table, 0 if
 * unchanged, a negative code if a new table was refused (reported once; the
 * old table stays). One acquire-load when nothing changed.
 */
static inline int locus_table_reader_poll(struct locus_table_reader *r)
{
	uint64_t p = __atomic_load_n(r->pub, __ATOMIC_ACQUIRE);

	if (likely(p == r->cached))
		return 0;
	return locus_table_reader_switch(r, p);
}

/*
 * The table in use (NULL before the first one, or offline) and its length.
 * The pointer stays valid until the next poll, offline or unregister.
 */
static inline const void *locus_table_reader_table(const struct locus_table_reader *r,
						   size_t *len)
{
	if (len)
		*len = r->cur_len;
	return r->cur;
}

/* Poll, then the table in use: the per-iteration call of a data-plane loop. */
static inline const void *locus_table_reader_get(struct locus_table_reader *r, size_t *len)
{
	locus_table_reader_poll(r);
	return locus_table_reader_table(r, len);
}

#endif /* LOCUS_TABLE_H */
