// SPDX-License-Identifier: MIT
/*
 * Table channels: the writer (lock, reserve, publish) and the wait for
 * readers to adopt or refuse a generation. Runs in locusctl, never on a
 * data-plane lcore: it may sleep and read /proc.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_crc32c.h"
#include "locus_err_priv.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"
#include "table_priv.h"

struct locus_table_writer {
	struct locus_table_region *t;
	struct locus_table_chan_view *cv;
	unsigned ch;
	uint64_t me;
	int reserved; /* slot index, -1 none */
};

/* Back off: yield for the first millisecond, then sleep 50 us at a time. */
static void backoff(uint64_t start_ns)
{
	struct timespec ts = { 0, 50000 };

	if (locus_table_now_ns() - start_ns < 1000000)
		sched_yield();
	else
		nanosleep(&ts, NULL);
}

int locus_table_writer_open(struct locus_table_region *t, unsigned ch,
			    struct locus_table_writer **out, struct locus_error *err)
{
	struct locus_table_writer *w;
	uint64_t me, old;

	if (!t || !out)
		return locus_error_set(err, EINVAL, "table writer: NULL argument");
	if (ch >= t->n_channels)
		return locus_error_set(err, LOCUS_ERANGE, "table channel %u >= %u channels", ch,
				       t->n_channels);
	me = locus_proc_self_ident();
	if (!me)
		return locus_error_set(err, EIO, "cannot read our start time from /proc");
	w = calloc(1, sizeof(*w));
	if (!w)
		return locus_error_set(err, ENOMEM, "table writer: out of memory");

	old = 0;
	/* acquire: the previous holder's slot writes and P happen before ours */
	while (!__atomic_compare_exchange_n(&t->ch[ch].hdr->lock, &old, me, 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		if (old == me) {
			free(w);
			return locus_error_set(err, EBUSY,
					       "table channel %u: this process already holds the writer lock",
					       ch);
		}
		if (locus_proc_ident_alive(old)) {
			free(w);
			return locus_error_set(err, EBUSY,
					       "table channel %u: writer lock held by live pid %d", ch,
					       (int)(uint32_t)old);
		}
		/* holder died: break the lock; a failed CAS re-reads old and retries */
	}
	w->t = t;
	w->cv = &t->ch[ch];
	w->ch = ch;
	w->me = me;
	w->reserved = -1;
	*out = w;
	return 0;
}

void locus_table_writer_close(struct locus_table_writer *w)
{
	uint64_t me;

	if (!w)
		return;
	me = w->me;
	__atomic_compare_exchange_n(&w->cv->hdr->lock, &me, 0, 0, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
	free(w);
}

static int still_locked(struct locus_table_writer *w, struct locus_error *err)
{
	uint64_t l = __atomic_load_n(&w->cv->hdr->lock, __ATOMIC_ACQUIRE);

	if (l != w->me)
		return locus_error_set(err, LOCUS_ESTATE,
				       "table channel %u: writer lock lost (now held by pid %d)",
				       w->ch, (int)(uint32_t)l);
	return 0;
}

/*
 * Slots some live reader may be reading. *blocker: a reader holding a slot
 * other than the published one (for the error message), -1 none.
 * *undecided: some such reader has not refused generation gen yet (it may
 * still adopt it), so retracting gen would be premature.
 */
static uint64_t held_slots(struct locus_table_writer *w, uint64_t cur_bit, uint64_t gen,
			   int *blocker, int *undecided)
{
	uint64_t busy = 0, last_dead = 0, last_alive = 0;
	unsigned i;

	*blocker = -1;
	*undecided = 0;
	for (i = 0; i < w->t->n_readers; i++) {
		struct locus_table_reader_rec *rec = &w->cv->recs[i];
		uint64_t owner = __atomic_load_n(&rec->owner, __ATOMIC_ACQUIRE);
		uint64_t hold;

		if (!owner || owner == last_dead)
			continue;
		hold = __atomic_load_n(&rec->hold, __ATOMIC_ACQUIRE);
		if (!hold)
			continue;
		/* one /proc look per distinct owner per scan: lcores share a process */
		if (owner != last_alive) {
			if (!locus_proc_ident_alive(owner)) {
				last_dead = owner;
				continue;
			}
			last_alive = owner;
		}
		if (hold & ~cur_bit) {
			if (*blocker < 0)
				*blocker = (int)i;
			if (__atomic_load_n(&rec->rejected_gen, __ATOMIC_ACQUIRE) < gen)
				*undecided = 1;
		}
		busy |= hold;
	}
	return busy;
}

int locus_table_writer_reserve(struct locus_table_writer *w, uint64_t timeout_ns, void **buf,
			       size_t *cap, struct locus_error *err)
{
	struct locus_table_chan_view *cv;
	uint64_t start, p, busy, cur_bit;
	int rc, blocker, undecided, best;
	unsigned s, cur;

	if (!w || !buf || !cap)
		return locus_error_set(err, EINVAL, "table reserve: NULL argument");
	cv = w->cv;
	start = locus_table_now_ns();
	for (;;) {
		rc = still_locked(w, err);
		if (rc < 0)
			return rc;
		/*
		 * The writer's half of the Dekker pattern (see locus_table.h): an
		 * RMW on P, a seq_cst fence, then the readers' masks. The RMW
		 * rather than a plain load makes the write of P that retired a
		 * slot ours, sequenced before our fence, even when an earlier
		 * writer process published it: a reader whose fence comes after
		 * ours then reads this P or a later one, never the older P that
		 * named the slot we are about to reuse.
		 */
		p = __atomic_fetch_add(&cv->hdr->pub, 0, __ATOMIC_SEQ_CST);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		cur = p ? LOCUS_TABLE_SLOT(p) : LOCUS_TABLE_NO_SLOT;
		cur_bit = cur < LOCUS_TABLE_MAX_SLOTS ? 1ull << cur : 0;
		busy = held_slots(w, cur_bit, LOCUS_TABLE_GEN(p), &blocker, &undecided);

		/* the free slot published longest ago: readers left it first */
		best = -1;
		for (s = 0; s < cv->n_slots; s++) {
			if (s == cur || (busy & (1ull << s)))
				continue;
			if (best < 0 || locus_table_slot_hdr(cv, s)->gen <
					locus_table_slot_hdr(cv, (unsigned)best)->gen)
				best = (int)s;
		}
		if (best >= 0)
			break;
		if (cur_bit && !(busy & cur_bit) && !undecided) {
			/* every live reader refused the published table and the
			 * other slots are held: retract it, then scan again */
			__atomic_store_n(&cv->hdr->pub,
					 (LOCUS_TABLE_GEN(p) + 1) << LOCUS_TABLE_SLOT_BITS |
					 LOCUS_TABLE_NO_SLOT, __ATOMIC_RELEASE);
			continue;
		}
		if (locus_table_now_ns() - start >= timeout_ns) {
			struct locus_table_reader_rec *rec;

			if (blocker < 0)
				return locus_error_set(err, EBUSY,
						       "table channel %u: no free slot", w->ch);
			rec = &cv->recs[blocker];
			return locus_error_set(err, EBUSY,
					       "table channel %u: no free slot; reader %d (pid %d) still holds generation %llu",
					       w->ch, blocker, (int)(uint32_t)rec->owner,
					       (unsigned long long)__atomic_load_n(
						       &rec->gen_in_use, __ATOMIC_RELAXED));
		}
		backoff(start);
	}
	w->reserved = best;
	*buf = locus_table_slot_data(cv, (unsigned)best);
	*cap = cv->slot_size;
	return best;
}

int64_t locus_table_writer_publish(struct locus_table_writer *w, size_t len,
				   struct locus_error *err)
{
	struct locus_table_slot_hdr *sh;
	struct locus_table_chan_view *cv;
	uint64_t p, gen;
	unsigned s;
	int rc;

	if (!w)
		return locus_error_set(err, EINVAL, "table publish: NULL writer");
	cv = w->cv;
	if (w->reserved < 0)
		return locus_error_set(err, LOCUS_ESTATE,
				       "table channel %u: publish without a reserved slot", w->ch);
	if (len > cv->slot_size)
		return locus_error_set(err, LOCUS_ERANGE,
				       "table channel %u: table of %zu bytes > slot size %llu",
				       w->ch, len, (unsigned long long)cv->slot_size);
	rc = still_locked(w, err);
	if (rc < 0)
		return rc;
	s = (unsigned)w->reserved;
	p = __atomic_load_n(&cv->hdr->pub, __ATOMIC_RELAXED); /* only we store it */
	gen = LOCUS_TABLE_GEN(p) + 1;
	if (gen >> (64 - LOCUS_TABLE_SLOT_BITS - 1))
		return locus_error_set(err, LOCUS_ERANGE, "table channel %u: generations exhausted",
				       w->ch);
	sh = locus_table_slot_hdr(cv, s);
	sh->gen = gen;
	sh->len = len;
	sh->crc32c = locus_crc32c(locus_table_slot_data(cv, s), len);
	/* the one store readers wait for: everything above happens before it */
	__atomic_store_n(&cv->hdr->pub, gen << LOCUS_TABLE_SLOT_BITS | s, __ATOMIC_RELEASE);
	__atomic_store_n(&cv->hdr->n_published, cv->hdr->n_published + 1, __ATOMIC_RELAXED);
	w->reserved = -1;
	return (int64_t)gen;
}

int64_t locus_table_push(struct locus_table_region *t, unsigned ch, const void *buf,
			 size_t len, uint64_t timeout_ns, struct locus_error *err)
{
	struct locus_table_writer *w;
	int64_t gen;
	size_t cap;
	void *dst;
	int rc;

	if (!buf && len)
		return locus_error_set(err, EINVAL, "table push: NULL buffer");
	rc = locus_table_writer_open(t, ch, &w, err);
	if (rc < 0)
		return rc;
	rc = locus_table_writer_reserve(w, timeout_ns, &dst, &cap, err);
	if (rc < 0) {
		gen = rc;
		goto out;
	}
	if (len > cap) {
		gen = locus_error_set(err, LOCUS_ERANGE,
				      "table channel %u: table of %zu bytes > slot size %zu", ch,
				      len, cap);
		goto out;
	}
	memcpy(dst, buf, len);
	gen = locus_table_writer_publish(w, len, err);
out:
	locus_table_writer_close(w);
	return gen;
}

/* Copy a reader's last refusal consistently (it may refuse again meanwhile). */
static void read_refusal(struct locus_table_reader_rec *rec, uint64_t *gen, int *code,
			 char *msg)
{
	uint64_t g2;
	int tries;

	for (tries = 0; tries < 4; tries++) {
		*gen = __atomic_load_n(&rec->rejected_gen, __ATOMIC_ACQUIRE);
		*code = (int)__atomic_load_n(&rec->reject_code, __ATOMIC_RELAXED);
		for (unsigned i = 0; i < LOCUS_TABLE_REJECT_MSG; i++)
			msg[i] = __atomic_load_n(&rec->reject_msg[i], __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		g2 = __atomic_load_n(&rec->rejected_gen, __ATOMIC_RELAXED);
		if (g2 == *gen)
			break;
	}
	msg[LOCUS_TABLE_REJECT_MSG - 1] = '\0';
}

static void wait_look(struct locus_table_region *t, unsigned ch, uint64_t gen,
		      struct locus_table_wait_result *res)
{
	struct locus_table_chan_view *cv = &t->ch[ch];
	unsigned i;

	memset(res, 0, sizeof(*res));
	res->refused_reader = -1;
	for (i = 0; i < t->n_readers; i++) {
		struct locus_table_reader_rec *rec = &cv->recs[i];
		uint64_t owner = __atomic_load_n(&rec->owner, __ATOMIC_ACQUIRE);

		if (!owner ||
		    __atomic_load_n(&rec->state, __ATOMIC_ACQUIRE) != LOCUS_TABLE_READER_ONLINE ||
		    !locus_proc_ident_alive(owner))
			continue;
		res->n_live++;
		if (__atomic_load_n(&rec->gen_in_use, __ATOMIC_ACQUIRE) >= gen) {
			res->n_adopted++;
		} else if (__atomic_load_n(&rec->rejected_gen, __ATOMIC_ACQUIRE) >= gen) {
			res->n_refused++;
			if (res->refused_reader < 0) {
				res->refused_reader = (int)i;
				read_refusal(rec, &res->refused_gen, &res->refused_code,
					     res->refused_msg);
			}
		}
	}
}

int locus_table_wait(struct locus_table_region *t, unsigned ch, uint64_t gen,
		     uint64_t timeout_ns, struct locus_table_wait_result *res)
{
	uint64_t start = locus_table_now_ns();

	if (!t || !res)
		return -EINVAL;
	if (ch >= t->n_channels)
		return -LOCUS_ERANGE;
	if (gen == 0 || gen > LOCUS_TABLE_GEN(locus_table_published(t, ch)))
		return -LOCUS_ERANGE; /* never published: nobody will ever decide */
	for (;;) {
		wait_look(t, ch, gen, res);
		if (res->n_adopted + res->n_refused == res->n_live)
			return 0;
		if (locus_table_now_ns() - start >= timeout_ns)
			return -ETIMEDOUT;
		backoff(start);
	}
}
