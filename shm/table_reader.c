// SPDX-License-Identifier: MIT
/*
 * Table channels: the reader (one per data-plane lcore and channel).
 * The fast path is locus_table_reader_poll() in the header; this is the slow
 * path taken when P changed, plus registration. No allocation, no syscall,
 * no lock here except in register (which reads /proc once).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "locus_crc32c.h"
#include "locus_err_priv.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"
#include "table_priv.h"

/* Rounds of "announce, fence, re-read P" before leaving it to the next poll. */
#define SWITCH_TRIES 8

static uint64_t bit(int s)
{
	return s >= 0 ? 1ull << s : 0;
}

int locus_table_reader_register(struct locus_table_region *t, unsigned ch, unsigned reader_idx,
				locus_table_validate_fn validate, void *arg,
				struct locus_table_reader *r, struct locus_error *err)
{
	struct locus_table_reader_rec *rec;
	struct locus_table_chan_view *cv;
	uint64_t me, old, ticks;

	if (!t || !r)
		return locus_error_set(err, EINVAL, "table reader: NULL argument");
	if (ch >= t->n_channels)
		return locus_error_set(err, LOCUS_ERANGE, "table channel %u >= %u channels", ch,
				       t->n_channels);
	if (reader_idx >= t->n_readers)
		return locus_error_set(err, LOCUS_ERANGE, "table reader %u >= %u readers",
				       reader_idx, t->n_readers);
	me = locus_proc_self_ident();
	if (!me || locus_proc_start_ticks(getpid(), &ticks) < 0)
		return locus_error_set(err, EIO, "cannot read our start time from /proc");
	cv = &t->ch[ch];
	rec = &cv->recs[reader_idx];

	old = 0;
	while (!__atomic_compare_exchange_n(&rec->owner, &old, me, 0, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE)) {
		if (old == me)
			return locus_error_set(err, EBUSY,
					       "table channel %u reader %u: already registered in this process",
					       ch, reader_idx);
		if (locus_proc_ident_alive(old))
			return locus_error_set(err, EBUSY,
					       "table channel %u reader %u: owned by live pid %d", ch,
					       reader_idx, (int)(uint32_t)old);
		/* owner died: take the record over */
	}
	/* the record is ours; a writer skips it while hold is 0 */
	__atomic_store_n(&rec->hold, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&rec->gen_in_use, 0, __ATOMIC_RELAXED);
	rec->pid = getpid();
	rec->start_ticks = ticks;
	__atomic_store_n(&rec->n_adopted, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->n_rejected, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->reject_code, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->rejected_gen, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->state, LOCUS_TABLE_READER_ONLINE, __ATOMIC_RELEASE);

	memset(r, 0, sizeof(*r));
	r->pub = &cv->hdr->pub;
	r->cached = 0;
	r->cur = NULL;
	r->cur_slot = -1;
	r->rec = rec;
	r->chan = cv->hdr;
	r->slots = cv->slots;
	r->slot_size = cv->slot_size;
	r->slot_stride = cv->slot_stride;
	r->n_slots = cv->n_slots;
	r->validate = validate;
	r->arg = arg;
	r->ident = me;
	r->online = 1;
	return 0;
}

static void drop_table(struct locus_table_reader *r)
{
	r->cur = NULL;
	r->cur_len = 0;
	r->cur_gen = 0;
	r->cur_slot = -1;
	r->cached = 0; /* the next poll after online adopts what is published */
}

void locus_table_reader_unregister(struct locus_table_reader *r)
{
	uint64_t me;

	if (!r || !r->rec)
		return;
	drop_table(r);
	r->online = 0;
	__atomic_store_n(&r->rec->hold, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&r->rec->state, LOCUS_TABLE_READER_FREE, __ATOMIC_RELEASE);
	me = r->ident;
	__atomic_compare_exchange_n(&r->rec->owner, &me, 0, 0, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
	r->rec = NULL;
}

void locus_table_reader_offline(struct locus_table_reader *r)
{
	if (!r->rec)
		return; /* unregistered */
	drop_table(r);
	r->online = 0;
	/* release: our reads of the old table come before the writer reuses it */
	__atomic_store_n(&r->rec->hold, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&r->rec->state, LOCUS_TABLE_READER_OFFLINE, __ATOMIC_RELEASE);
}

void locus_table_reader_online(struct locus_table_reader *r)
{
	if (!r->rec)
		return;
	__atomic_store_n(&r->rec->state, LOCUS_TABLE_READER_ONLINE, __ATOMIC_RELEASE);
	r->online = 1;
}

/* Check the candidate in slot s for generation g; 0 or a refusal in err. */
static int check_slot(struct locus_table_reader *r, unsigned s, uint64_t g, const void **data,
		      size_t *len, struct locus_error *err)
{
	const struct locus_table_slot_hdr *sh =
		(const void *)(r->slots + (uint64_t)s * r->slot_stride);
	const uint8_t *d = (const uint8_t *)sh + sizeof(*sh);
	/* one read of each header field: we judge exactly what we use */
	uint64_t hgen = __atomic_load_n(&sh->gen, __ATOMIC_RELAXED);
	uint64_t hlen = __atomic_load_n(&sh->len, __ATOMIC_RELAXED);
	uint32_t hcrc = __atomic_load_n(&sh->crc32c, __ATOMIC_RELAXED);
	uint32_t crc;
	int rc;

	if (hgen != g)
		return locus_error_set(err, LOCUS_ESTATE,
				       "slot %u holds generation %llu, published word says %llu", s,
				       (unsigned long long)hgen, (unsigned long long)g);
	if (hlen > r->slot_size)
		return locus_error_set(err, LOCUS_ERANGE,
				       "generation %llu: length %llu > slot size %llu",
				       (unsigned long long)g, (unsigned long long)hlen,
				       (unsigned long long)r->slot_size);
	crc = locus_crc32c(d, hlen);
	if (crc != hcrc)
		return locus_error_set(err, LOCUS_ECRC,
				       "generation %llu: CRC32C %08x, header says %08x",
				       (unsigned long long)g, crc, hcrc);
	if (r->validate) {
		locus_error_clear(err);
		rc = r->validate(d, hlen, r->arg, err);
		if (rc < 0) {
			if (!err->code)
				locus_error_set(err, -rc, "refused by the table's validator: %s",
						locus_strerror(rc));
			return -err->code;
		}
	}
	*data = d;
	*len = hlen;
	return 0;
}

/* Record a refusal for locus_table_wait: details first, the generation last. */
static void refuse(struct locus_table_reader *r, uint64_t g, const struct locus_error *e)
{
	struct locus_table_reader_rec *rec = r->rec;
	size_t i;

	for (i = 0; i < LOCUS_TABLE_REJECT_MSG - 1 && e->msg[i]; i++)
		__atomic_store_n(&rec->reject_msg[i], e->msg[i], __ATOMIC_RELAXED);
	__atomic_store_n(&rec->reject_msg[i], '\0', __ATOMIC_RELAXED);
	__atomic_store_n(&rec->reject_code, (uint32_t)e->code, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->n_rejected, rec->n_rejected + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->rejected_gen, g, __ATOMIC_RELEASE);
}

int locus_table_reader_switch(struct locus_table_reader *r, uint64_t p)
{
	struct locus_table_reader_rec *rec = r->rec;
	struct locus_error err = { 0 };
	uint64_t p2, g;
	const void *data = NULL;
	size_t len = 0;
	unsigned s;
	int tries;

	if (!r->online || !p)
		return 0;
	for (tries = 0;; tries++) {
		s = LOCUS_TABLE_SLOT(p);
		g = LOCUS_TABLE_GEN(p);
		if (s == LOCUS_TABLE_NO_SLOT) {
			/* a retraction: nothing to read, keep our table */
			__atomic_store_n(&rec->hold, bit(r->cur_slot), __ATOMIC_RELEASE);
			r->cached = p;
			return 0;
		}
		if (s >= r->n_slots) {
			locus_error_set(&err, LOCUS_ERANGE,
					"generation %llu names slot %u of %u",
					(unsigned long long)g, s, r->n_slots);
			goto refused;
		}
		if (g <= r->cur_gen) {
			/* P only grows: this is a corrupt word, not a table */
			locus_error_set(&err, LOCUS_ESTATE,
					"generation %llu is not newer than %llu in use",
					(unsigned long long)g, (unsigned long long)r->cur_gen);
			goto refused;
		}
		if ((int)s == r->cur_slot) {
			/* we hold it: no honest writer could have refilled it */
			locus_error_set(&err, LOCUS_ESTATE,
					"generation %llu published in slot %u we still read",
					(unsigned long long)g, s);
			goto refused;
		}
		/*
		 * The reader's half of the Dekker pattern: announce the slot,
		 * seq_cst fence, re-read P. If P still names it, the writer's
		 * scan after its own fence sees our bit and leaves the slot alone.
		 */
		__atomic_store_n(&rec->hold, bit(r->cur_slot) | bit((int)s), __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		p2 = __atomic_load_n(r->pub, __ATOMIC_ACQUIRE);
		if (p2 == p)
			break;
		p = p2; /* moved on meanwhile: chase the newer one */
		if (tries + 1 >= SWITCH_TRIES) {
			/* a writer outpacing us; keep our table, try next poll */
			__atomic_store_n(&rec->hold, bit(r->cur_slot), __ATOMIC_RELEASE);
			return 0;
		}
	}

	if (check_slot(r, s, g, &data, &len, &err) < 0)
		goto refused;
	r->cur = data;
	r->cur_len = len;
	r->cur_gen = g;
	r->cur_slot = (int)s;
	r->cached = p;
	/* release: our reads of the old table are done before it can be reused */
	__atomic_store_n(&rec->hold, bit((int)s), __ATOMIC_RELEASE);
	__atomic_store_n(&rec->gen_in_use, g, __ATOMIC_RELEASE);
	__atomic_store_n(&rec->n_adopted, rec->n_adopted + 1, __ATOMIC_RELAXED);
	return 1;

refused:
	r->cached = p;
	__atomic_store_n(&rec->hold, bit(r->cur_slot), __ATOMIC_RELEASE);
	refuse(r, g, &err);
	return -err.code;
}
