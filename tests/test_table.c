// SPDX-License-Identifier: MIT
/*
 * Table channels: layout and its validation, publish / adopt / refuse, slot
 * reuse only after every live reader moved on, dead readers and writers,
 * offline readers, waiting for adoption. The region lives in anonymous
 * shared memory so forked children see it as another process would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "locus_common.h"
#include "locus_err_priv.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"
#include "locus_table.h"

#define SLOT_SIZE 256

struct fixture {
	void *mem;
	size_t size;
	struct locus_table_region *t;
};

static struct fixture F;

static void make_region(uint32_t n_slots, uint32_t n_readers)
{
	struct locus_table_params p = { .n_channels = 2, .n_readers = n_readers };
	struct locus_error err;

	p.channel[0].n_slots = n_slots;
	p.channel[0].slot_size = SLOT_SIZE;
	p.channel[1].n_slots = 3;
	p.channel[1].slot_size = 100;
	F.size = locus_table_region_size(&p);
	assert_true(F.size > 0);
	F.mem = mmap(NULL, F.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(F.mem != MAP_FAILED);
	assert_int_equal(locus_table_region_init(F.mem, F.size, &p, &err), 0);
	assert_int_equal(locus_table_region_attach(F.mem, F.size, &F.t, &err), 0);
}

static int teardown(void **state)
{
	(void)state;
	locus_table_region_detach(F.t);
	if (F.mem)
		munmap(F.mem, F.size);
	memset(&F, 0, sizeof(F));
	return 0;
}

/* A table of len bytes whose every byte is tag. */
static int64_t push(unsigned ch, uint8_t tag, size_t len, struct locus_error *err)
{
	uint8_t buf[SLOT_SIZE + 16];

	memset(buf, tag, sizeof(buf));
	return locus_table_push(F.t, ch, buf, len, 0, err);
}

static int count_calls;

static int accept_all(const void *buf, size_t len, void *arg, struct locus_error *err)
{
	(void)buf;
	(void)len;
	(void)arg;
	(void)err;
	count_calls++;
	return 0;
}

/* Refuses any table whose first byte is 0xbd ("bad"). */
static int refuse_bd(const void *buf, size_t len, void *arg, struct locus_error *err)
{
	(void)arg;
	count_calls++;
	if (len && ((const uint8_t *)buf)[0] == 0xbd)
		return locus_error_set(err, LOCUS_ERANGE, "decoder id 17 at index %d >= K=16", 3);
	return 0;
}

static void assert_table(struct locus_table_reader *r, uint8_t tag, size_t len)
{
	size_t l;
	const uint8_t *t = locus_table_reader_table(r, &l);

	assert_non_null(t);
	assert_int_equal(l, len);
	for (size_t i = 0; i < l; i++)
		assert_int_equal(t[i], tag);
}

static struct locus_table_chan_hdr *chan(unsigned ch)
{
	const struct locus_table_region_hdr *h = F.mem;

	return (void *)((uint8_t *)F.mem + h->chan_off[ch]);
}

static struct locus_table_slot_hdr *slot(unsigned ch, unsigned s)
{
	struct locus_table_chan_hdr *c = chan(ch);

	return (void *)((uint8_t *)c + c->slots_off + s * c->slot_stride);
}

static struct locus_table_reader_rec *rec(unsigned ch, unsigned i)
{
	struct locus_table_chan_hdr *c = chan(ch);

	return (void *)((uint8_t *)c + c->readers_off + i * sizeof(struct locus_table_reader_rec));
}

static void test_params_and_layout(void **state)
{
	struct locus_table_params p = { .n_channels = 1, .n_readers = 4 };
	struct locus_table_region *t;
	struct locus_error err;
	uint8_t *mem;
	size_t need;
	(void)state;

	p.channel[0].n_slots = 2;
	p.channel[0].slot_size = 1;
	need = locus_table_region_size(&p);
	assert_true(need > 0);
	assert_int_equal(need % LOCUS_CACHE_LINE, 0);

	/* each bound, one at a time */
	p.channel[0].n_slots = 1;
	assert_int_equal(locus_table_region_size(&p), 0);
	p.channel[0].n_slots = LOCUS_TABLE_MAX_SLOTS + 1;
	assert_int_equal(locus_table_region_size(&p), 0);
	p.channel[0].n_slots = LOCUS_TABLE_MAX_SLOTS;
	assert_true(locus_table_region_size(&p) > 0);
	p.channel[0].slot_size = 0;
	assert_int_equal(locus_table_region_size(&p), 0);
	p.channel[0].slot_size = LOCUS_TABLE_MAX_SLOT + 1;
	assert_int_equal(locus_table_region_size(&p), 0);
	p.channel[0].slot_size = 1;
	p.n_readers = 0;
	assert_int_equal(locus_table_region_size(&p), 0);
	p.n_readers = LOCUS_TABLE_MAX_READERS + 1;
	assert_int_equal(locus_table_region_size(&p), 0);
	p.n_readers = 4;
	p.n_channels = 0;
	assert_int_equal(locus_table_region_size(&p), 0);
	p.n_channels = LOCUS_TABLE_MAX_CHANNELS + 1;
	assert_int_equal(locus_table_region_size(&p), 0);
	assert_int_equal(locus_table_region_size(NULL), 0);
	p.n_channels = 1;
	p.channel[0].n_slots = 2;

	mem = aligned_alloc(64, need + 64);
	assert_non_null(mem);
	assert_int_equal(locus_table_region_init(mem, need - 1, &p, &err), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_table_region_init(mem + 8, need, &p, &err), -EINVAL);
	p.n_readers = 0;
	assert_int_equal(locus_table_region_init(mem, need, &p, &err), -LOCUS_ERANGE);
	assert_non_null(strstr(err.msg, "readers"));
	p.n_readers = 4;

	/* attach refuses what was never initialised */
	memset(mem, 0, need);
	assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_EBADMAGIC);
	assert_int_equal(locus_table_region_init(mem, need, &p, &err), 0);
	assert_int_equal(locus_table_region_attach(mem, need, &t, &err), 0);
	assert_int_equal(locus_table_channels(t), 1);
	assert_int_equal(locus_table_readers(t), 4);
	{
		unsigned n;
		size_t sz;

		assert_int_equal(locus_table_channel_geometry(t, 0, &n, &sz), 0);
		assert_int_equal(n, 2);
		assert_int_equal(sz, 1);
		assert_int_equal(locus_table_channel_geometry(t, 1, &n, &sz), -LOCUS_ERANGE);
		assert_int_equal(locus_table_published(t, 0), 0);
		assert_int_equal(locus_table_published(t, 7), 0);
	}
	locus_table_region_detach(t);
	assert_int_equal(locus_table_region_attach(mem, need - 1, &t, &err), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_table_region_attach(mem, 100, &t, &err), -LOCUS_ETRUNCATED);

	/* corruptions of the region's own headers, each refused */
	{
		struct locus_table_region_hdr *h = (void *)mem, save = *h;
		struct locus_table_chan_hdr *c = (void *)(mem + h->chan_off[0]), csave = *c;

		h->version = 2;
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_EVERSION);
		*h = save;
		h->n_channels = 17;
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_ERANGE);
		*h = save;
		h->chan_off[0] = need + 64;
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_ERANGE);
		*h = save;
		h->chan_off[0] += 64;
		assert_int_equal(locus_table_region_attach(mem + 0, need, &t, &err), -LOCUS_ERANGE);
		*h = save;
		h->chan_off[3] = 256;
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_ERANGE);
		*h = save;
		h->size = need + 4096;
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_ETRUNCATED);
		*h = save;
		c->n_slots = 64; /* layout would then run past the region */
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_ETRUNCATED);
		*c = csave;
		c->n_slots = 1000;
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_ERANGE);
		*c = csave;
		c->slot_size = 0;
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_ERANGE);
		*c = csave;
		c->slot_stride = 4096;
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_ERANGE);
		assert_non_null(strstr(err.msg, "geometry"));
		*c = csave;
		c->readers_off = 0;
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), -LOCUS_ERANGE);
		*c = csave;
		assert_int_equal(locus_table_region_attach(mem, need, &t, &err), 0);
		locus_table_region_detach(t);
	}
	free(mem);

	/* records and slots: cache-line aligned, inside the region */
	make_region(3, 4);
	for (unsigned ch = 0; ch < 2; ch++) {
		for (unsigned i = 0; i < 4; i++) {
			uintptr_t a = (uintptr_t)rec(ch, i);

			assert_int_equal(a % LOCUS_CACHE_LINE, 0);
			assert_true(a + sizeof(struct locus_table_reader_rec) <=
				    (uintptr_t)F.mem + F.size);
		}
		for (unsigned s = 0; s < chan(ch)->n_slots; s++) {
			uintptr_t a = (uintptr_t)slot(ch, s);

			assert_int_equal(a % LOCUS_CACHE_LINE, 0);
			assert_true(a + 64 + chan(ch)->slot_size <= (uintptr_t)F.mem + F.size);
		}
	}
	assert_true((uintptr_t)slot(0, 2) + 64 + SLOT_SIZE <= (uintptr_t)chan(1));
}

static void test_publish_adopt(void **state)
{
	struct locus_table_reader r, r1;
	struct locus_table_wait_result res;
	struct locus_error err;
	int64_t g;
	(void)state;

	make_region(3, 4);
	count_calls = 0;
	assert_int_equal(locus_table_reader_register(F.t, 0, 0, accept_all, NULL, &r, &err), 0);
	/* a reader on the other channel sees nothing of channel 0 */
	assert_int_equal(locus_table_reader_register(F.t, 1, 0, NULL, NULL, &r1, &err), 0);
	assert_int_equal(locus_table_reader_poll(&r), 0);
	assert_null(locus_table_reader_get(&r, NULL));

	g = push(0, 0xa1, 100, &err);
	assert_int_equal(g, 1);
	assert_int_equal(LOCUS_TABLE_GEN(locus_table_published(F.t, 0)), 1);
	assert_int_equal(locus_table_reader_poll(&r), 1);
	assert_table(&r, 0xa1, 100);
	assert_int_equal(count_calls, 1);
	assert_int_equal(rec(0, 0)->gen_in_use, 1);
	assert_int_equal(rec(0, 0)->n_adopted, 1);
	assert_int_equal(rec(0, 0)->pid, getpid());
	/* unchanged: no revalidation */
	assert_int_equal(locus_table_reader_poll(&r), 0);
	assert_int_equal(count_calls, 1);
	assert_int_equal(locus_table_reader_poll(&r1), 0);
	assert_null(locus_table_reader_table(&r1, NULL));

	assert_int_equal(locus_table_wait(F.t, 0, 1, 0, &res), 0);
	assert_int_equal(res.n_live, 1);
	assert_int_equal(res.n_adopted, 1);
	assert_int_equal(res.n_refused, 0);
	assert_int_equal(res.refused_reader, -1);

	/* several publishes between two polls: the reader lands on the last;
	 * with three slots the writer cycles the two the reader does not hold */
	assert_int_equal(push(0, 0xa2, 10, &err), 2);
	assert_int_equal(push(0, 0xa3, 0, &err), 3); /* empty tables are tables */
	assert_int_equal(push(0, 0xa4, SLOT_SIZE, &err), 4);
	assert_table(&r, 0xa1, 100); /* untouched until we poll */
	assert_int_equal(rec(0, 0)->gen_in_use, 1);
	assert_int_equal(locus_table_reader_poll(&r), 1);
	assert_table(&r, 0xa4, SLOT_SIZE);
	assert_int_equal(count_calls, 2);
	assert_int_equal(rec(0, 0)->gen_in_use, 4);
	assert_int_equal(locus_table_wait(F.t, 0, 3, 0, &res), 0); /* superseded counts */
	assert_int_equal(res.n_adopted, 1);
	assert_int_equal(locus_table_wait(F.t, 0, 5, 0, &res), -LOCUS_ERANGE);
	assert_int_equal(locus_table_wait(F.t, 9, 1, 0, &res), -LOCUS_ERANGE);

	/* too big for the slot; publish without reserve */
	assert_int_equal(push(0, 0, SLOT_SIZE + 1, &err), -LOCUS_ERANGE);
	{
		struct locus_table_writer *w;

		assert_int_equal(locus_table_writer_open(F.t, 0, &w, &err), 0);
		assert_int_equal(locus_table_writer_publish(w, 1, &err), -LOCUS_ESTATE);
		locus_table_writer_close(w);
	}
	assert_int_equal(locus_table_published(F.t, 0) >> 8, 4);

	locus_table_reader_unregister(&r);
	locus_table_reader_unregister(&r1);
	locus_table_reader_unregister(&r1); /* twice is harmless */
	assert_int_equal(rec(0, 0)->owner, 0);
	assert_int_equal(rec(0, 0)->hold, 0);
}

static void test_refusals(void **state)
{
	struct locus_table_wait_result res;
	struct locus_table_writer *w;
	struct locus_table_reader r;
	struct locus_error err;
	uint64_t saved;
	size_t cap;
	void *buf;
	int s;
	(void)state;

	make_region(3, 2);
	assert_int_equal(locus_table_reader_register(F.t, 0, 0, refuse_bd, NULL, &r, &err), 0);
	assert_int_equal(push(0, 0x11, 64, &err), 1);
	assert_int_equal(locus_table_reader_poll(&r), 1);

	/* content corrupted after the CRC was taken */
	assert_int_equal(locus_table_writer_open(F.t, 0, &w, &err), 0);
	s = locus_table_writer_reserve(w, 0, &buf, &cap, &err);
	assert_true(s >= 0);
	assert_int_equal(cap, SLOT_SIZE);
	memset(buf, 0x22, 64);
	assert_int_equal(locus_table_writer_publish(w, 64, &err), 2);
	((uint8_t *)buf)[5] ^= 1;
	assert_int_equal(locus_table_reader_poll(&r), -LOCUS_ECRC);
	assert_table(&r, 0x11, 64);
	assert_int_equal(rec(0, 0)->n_rejected, 1);
	assert_int_equal(rec(0, 0)->rejected_gen, 2);
	assert_int_equal(rec(0, 0)->reject_code, LOCUS_ECRC);
	assert_int_equal(rec(0, 0)->gen_in_use, 1);
	assert_int_equal(locus_table_reader_poll(&r), 0); /* reported once */
	assert_int_equal(locus_table_wait(F.t, 0, 2, 0, &res), 0);
	assert_int_equal(res.n_refused, 1);
	assert_int_equal(res.n_adopted, 0);
	assert_int_equal(res.refused_reader, 0);
	assert_int_equal(res.refused_gen, 2);
	assert_int_equal(res.refused_code, LOCUS_ECRC);
	assert_non_null(strstr(res.refused_msg, "CRC32C"));

	/* the owner's bounds check refuses; the message travels to the waiter */
	assert_true(locus_table_writer_reserve(w, 0, &buf, &cap, &err) >= 0);
	memset(buf, 0xbd, 32);
	assert_int_equal(locus_table_writer_publish(w, 32, &err), 3);
	assert_int_equal(locus_table_reader_poll(&r), -LOCUS_ERANGE);
	assert_table(&r, 0x11, 64);
	assert_int_equal(locus_table_wait(F.t, 0, 3, 0, &res), 0);
	assert_int_equal(res.n_refused, 1);
	assert_int_equal(res.refused_code, LOCUS_ERANGE);
	assert_string_equal(res.refused_msg, "decoder id 17 at index 3 >= K=16");

	/* refusals pin nothing: two bad pushes in a row with three slots,
	 * then a good one is still accepted (the reader holds only gen 1) */
	assert_true(locus_table_writer_reserve(w, 0, &buf, &cap, &err) >= 0);
	memset(buf, 0x33, 16);
	assert_int_equal(locus_table_writer_publish(w, 16, &err), 4);
	assert_int_equal(locus_table_reader_poll(&r), 1);
	assert_table(&r, 0x33, 16);

	/* a slot header whose length exceeds the slot */
	s = locus_table_writer_reserve(w, 0, &buf, &cap, &err);
	assert_true(s >= 0);
	memset(buf, 0x44, 16);
	assert_int_equal(locus_table_writer_publish(w, 16, &err), 5);
	slot(0, (unsigned)s)->len = SLOT_SIZE + 1;
	assert_int_equal(locus_table_reader_poll(&r), -LOCUS_ERANGE);
	assert_non_null(strstr(rec(0, 0)->reject_msg, "slot size"));
	assert_table(&r, 0x33, 16);

	/* a slot header of another generation than P says */
	s = locus_table_writer_reserve(w, 0, &buf, &cap, &err);
	assert_true(s >= 0);
	assert_int_equal(locus_table_writer_publish(w, 16, &err), 6);
	slot(0, (unsigned)s)->gen = 77;
	assert_int_equal(locus_table_reader_poll(&r), -LOCUS_ESTATE);
	assert_table(&r, 0x33, 16);

	/* P naming a slot out of range, then the slot the reader holds */
	saved = chan(0)->pub;
	chan(0)->pub = (7ull << 8) | 40;
	assert_int_equal(locus_table_reader_poll(&r), -LOCUS_ERANGE);
	chan(0)->pub = (8ull << 8) | (unsigned)r.cur_slot;
	assert_int_equal(locus_table_reader_poll(&r), -LOCUS_ESTATE);
	assert_table(&r, 0x33, 16);
	chan(0)->pub = (4ull << 8) | 0; /* backwards */
	assert_int_equal(locus_table_reader_poll(&r), -LOCUS_ESTATE);
	assert_non_null(strstr(rec(0, 0)->reject_msg, "not newer"));
	chan(0)->pub = (8ull << 8) | (unsigned)r.cur_slot;
	assert_table(&r, 0x33, 16);
	assert_int_equal(rec(0, 0)->n_rejected, 7);
	assert_int_equal(rec(0, 0)->hold, 1ull << r.cur_slot);
	(void)saved;

	/* and the channel still works */
	assert_true(locus_table_writer_reserve(w, 0, &buf, &cap, &err) >= 0);
	memset(buf, 0x55, 8);
	assert_int_equal(locus_table_writer_publish(w, 8, &err), 9);
	assert_int_equal(locus_table_reader_poll(&r), 1);
	assert_table(&r, 0x55, 8);
	locus_table_writer_close(w);
	locus_table_reader_unregister(&r);
}

static void test_reuse_after_grace(void **state)
{
	struct locus_table_reader a, b;
	struct locus_table_writer *w;
	struct locus_error err;
	size_t cap;
	void *buf;
	int s0, s1, s;
	(void)state;

	make_region(2, 2);
	assert_int_equal(locus_table_reader_register(F.t, 0, 0, NULL, NULL, &a, &err), 0);
	assert_int_equal(locus_table_reader_register(F.t, 0, 1, NULL, NULL, &b, &err), 0);
	assert_int_equal(locus_table_writer_open(F.t, 0, &w, &err), 0);

	s0 = locus_table_writer_reserve(w, 0, &buf, &cap, &err);
	assert_true(s0 >= 0);
	memset(buf, 1, 8);
	assert_int_equal(locus_table_writer_publish(w, 8, &err), 1);
	assert_int_equal(locus_table_reader_poll(&a), 1);
	assert_int_equal(locus_table_reader_poll(&b), 1);

	s1 = locus_table_writer_reserve(w, 0, &buf, &cap, &err);
	assert_true(s1 >= 0 && s1 != s0);
	memset(buf, 2, 8);
	assert_int_equal(locus_table_writer_publish(w, 8, &err), 2);

	/* both readers still on gen 1 in s0, gen 2 in s1 published: no slot */
	assert_int_equal(locus_table_writer_reserve(w, 0, &buf, &cap, &err), -EBUSY);
	assert_int_equal(locus_table_writer_reserve(w, 2000000, &buf, &cap, &err), -EBUSY);
	assert_non_null(strstr(err.msg, "generation 1"));
	assert_int_equal(locus_table_reader_poll(&a), 1);
	/* one moved on, the other still reads s0 */
	assert_int_equal(locus_table_writer_reserve(w, 0, &buf, &cap, &err), -EBUSY);
	assert_non_null(strstr(err.msg, "reader 1"));
	assert_table(&b, 1, 8);
	assert_int_equal(locus_table_reader_poll(&b), 1);
	s = locus_table_writer_reserve(w, 0, &buf, &cap, &err);
	assert_int_equal(s, s0);
	assert_table(&b, 2, 8);

	/* an offline reader holds nothing; online again it adopts P */
	memset(buf, 3, 8);
	assert_int_equal(locus_table_writer_publish(w, 8, &err), 3);
	locus_table_reader_offline(&b);
	assert_null(locus_table_reader_table(&b, NULL));
	assert_int_equal(rec(0, 1)->hold, 0);
	assert_int_equal(locus_table_reader_poll(&b), 0); /* offline: stays out */
	assert_int_equal(locus_table_writer_reserve(w, 0, &buf, &cap, &err), -EBUSY); /* a */
	assert_int_equal(locus_table_reader_poll(&a), 1);
	s = locus_table_writer_reserve(w, 0, &buf, &cap, &err);
	assert_int_equal(s, s1);
	memset(buf, 4, 8);
	assert_int_equal(locus_table_writer_publish(w, 8, &err), 4);
	locus_table_reader_online(&b);
	assert_int_equal(locus_table_reader_poll(&b), 1);
	assert_table(&b, 4, 8);
	assert_int_equal(rec(0, 1)->gen_in_use, 4);

	locus_table_writer_close(w);
	locus_table_reader_unregister(&a);
	locus_table_reader_unregister(&b);
}

/* Two slots, and every reader refuses the published table: the writer
 * retracts it rather than wait for ever, and readers keep their table. */
static void test_two_slots_refused_table_retracted(void **state)
{
	struct locus_table_reader r;
	struct locus_error err;
	uint8_t bad[8];
	(void)state;

	make_region(2, 1);
	assert_int_equal(locus_table_reader_register(F.t, 0, 0, refuse_bd, NULL, &r, &err), 0);
	assert_int_equal(push(0, 0x10, 8, &err), 1);
	assert_int_equal(locus_table_reader_poll(&r), 1);
	memset(bad, 0xbd, sizeof(bad));
	assert_int_equal(locus_table_push(F.t, 0, bad, 8, 0, &err), 2);
	/* not looked at yet: the writer must not retract it */
	assert_int_equal(push(0, 0x20, 8, &err), -EBUSY);
	assert_int_equal(locus_table_reader_poll(&r), -LOCUS_ERANGE);
	/* refused: retracted (gen 3 names no slot), new table is gen 4 */
	assert_int_equal(locus_table_push(F.t, 0, bad, 8, 0, &err), 4);
	assert_int_equal(locus_table_reader_poll(&r), -LOCUS_ERANGE);
	assert_table(&r, 0x10, 8);
	assert_int_equal(push(0, 0x30, 8, &err), 6);
	assert_int_equal(locus_table_reader_poll(&r), 1);
	assert_table(&r, 0x30, 8);
	assert_int_equal(rec(0, 0)->gen_in_use, 6);
	/* a retraction alone changes nothing for a reader */
	chan(0)->pub = (7ull << 8) | LOCUS_TABLE_NO_SLOT;
	assert_int_equal(locus_table_reader_poll(&r), 0);
	assert_table(&r, 0x30, 8);
	locus_table_reader_unregister(&r);
}

static void test_dead_reader(void **state)
{
	struct locus_table_wait_result res;
	struct locus_table_reader r, take;
	struct locus_error err;
	int status, pfd[2];
	pid_t pid;
	char c;
	(void)state;

	make_region(2, 3);
	assert_int_equal(locus_table_reader_register(F.t, 0, 0, NULL, NULL, &r, &err), 0);
	assert_int_equal(push(0, 1, 8, &err), 1);
	assert_int_equal(locus_table_reader_poll(&r), 1);

	/* a child process registers reader 1, adopts gen 1 and stays alive */
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct locus_table_reader cr;

		close(pfd[1]);
		if (locus_table_reader_register(F.t, 0, 1, NULL, NULL, &cr, NULL) ||
		    locus_table_reader_poll(&cr) != 1)
			_exit(1);
		/* wait for the parent to close the pipe, then die holding */
		if (read(pfd[0], &c, 1) < 0)
			_exit(2);
		_exit(0);
	}
	close(pfd[0]);
	while (__atomic_load_n(&rec(0, 1)->gen_in_use, __ATOMIC_ACQUIRE) != 1)
		usleep(1000);
	/* live other process owns the record */
	assert_int_equal(locus_table_reader_register(F.t, 0, 1, NULL, NULL, &take, &err), -EBUSY);
	assert_non_null(strstr(err.msg, "live pid"));
	assert_int_equal(locus_table_reader_register(F.t, 0, 0, NULL, NULL, &take, &err), -EBUSY);
	assert_int_equal(locus_table_reader_register(F.t, 0, 3, NULL, NULL, &take, &err),
			 -LOCUS_ERANGE);
	assert_int_equal(locus_table_reader_register(F.t, 2, 0, NULL, NULL, &take, &err),
			 -LOCUS_ERANGE);

	assert_int_equal(push(0, 2, 8, &err), 2);
	assert_int_equal(locus_table_reader_poll(&r), 1);
	/* the live child still reads gen 1: blocked */
	assert_int_equal(push(0, 3, 8, &err), -EBUSY);
	assert_int_equal(locus_table_wait(F.t, 0, 2, 1000000, &res), -ETIMEDOUT);
	assert_int_equal(res.n_live, 2);
	assert_int_equal(res.n_adopted, 1);

	close(pfd[1]);
	/* exited, not reaped yet: a zombie runs no code and counts as dead */
	{
		siginfo_t si;

		assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
		assert_int_equal(locus_table_wait(F.t, 0, 2, 0, &res), 0);
		assert_int_equal(res.n_live, 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* dead: it neither blocks the writer nor counts in waits */
	assert_int_equal(locus_table_wait(F.t, 0, 2, 0, &res), 0);
	assert_int_equal(res.n_live, 1);
	assert_int_equal(push(0, 3, 8, &err), 3);
	assert_int_equal(locus_table_reader_poll(&r), 1);
	assert_int_equal(push(0, 4, 8, &err), 4);

	/* the dead process's record can be taken over */
	assert_int_equal(locus_table_reader_register(F.t, 0, 1, NULL, NULL, &take, &err), 0);
	assert_int_equal(locus_table_reader_poll(&take), 1);
	assert_table(&take, 4, 8);
	locus_table_reader_unregister(&take);

	/* a recycled pid: our pid with another start time holds a slot */
	assert_int_equal(locus_table_reader_poll(&r), 1);
	rec(0, 2)->owner = locus_proc_ident(getpid(), 424242);
	rec(0, 2)->hold = 3;
	rec(0, 2)->state = LOCUS_TABLE_READER_ONLINE;
	assert_int_equal(push(0, 5, 8, &err), 5);
	assert_int_equal(locus_table_wait(F.t, 0, 4, 0, &res), 0);
	assert_int_equal(res.n_live, 1);
	locus_table_reader_unregister(&r);
}

static void test_writer_lock(void **state)
{
	struct locus_table_writer *w, *w2;
	struct locus_error err;
	int status, pfd[2], go[2];
	size_t cap;
	void *buf;
	pid_t pid;
	char c = 0;
	(void)state;

	make_region(3, 1);
	assert_int_equal(locus_table_writer_open(F.t, 0, &w, &err), 0);
	assert_int_equal(locus_table_writer_open(F.t, 0, &w2, &err), -EBUSY);
	assert_int_equal(locus_table_writer_open(F.t, 1, &w2, &err), 0); /* per channel */
	locus_table_writer_close(w2);
	assert_int_equal(locus_table_writer_open(F.t, 2, &w2, &err), -LOCUS_ERANGE);
	locus_table_writer_close(w);
	locus_table_writer_close(NULL);

	/* a live writer in another process */
	assert_int_equal(pipe(pfd), 0);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct locus_table_writer *cw;

		close(pfd[1]);
		close(go[0]);
		if (locus_table_writer_open(F.t, 0, &cw, NULL))
			_exit(1);
		if (write(go[1], &c, 1) != 1)
			_exit(2);
		if (read(pfd[0], &c, 1) < 0)
			_exit(3);
		_exit(0); /* dies holding the lock */
	}
	close(pfd[0]);
	close(go[1]);
	assert_int_equal(read(go[0], &c, 1), 1);
	assert_int_equal(locus_table_writer_open(F.t, 0, &w, &err), -EBUSY);
	assert_non_null(strstr(err.msg, "live pid"));
	assert_int_equal(locus_table_push(F.t, 0, "x", 1, 0, &err), -EBUSY);
	close(pfd[1]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(go[0]);

	/* the dead holder's lock is broken by the next writer */
	assert_int_equal(locus_table_writer_open(F.t, 0, &w, &err), 0);
	assert_true(locus_table_writer_reserve(w, 0, &buf, &cap, &err) >= 0);
	/* stolen meanwhile (a corrupt or foreign lock word): we notice */
	chan(0)->lock = 1;
	assert_int_equal(locus_table_writer_publish(w, 1, &err), -LOCUS_ESTATE);
	assert_int_equal(locus_table_writer_reserve(w, 0, &buf, &cap, &err), -LOCUS_ESTATE);
	locus_table_writer_close(w); /* not ours: left as is */
	assert_int_equal(chan(0)->lock, 1);
	chan(0)->lock = 0;
	assert_int_equal(locus_table_push(F.t, 0, "x", 1, 0, &err), 1);
}

static void test_wait_adopted_refused(void **state)
{
	struct locus_table_wait_result res;
	struct locus_table_reader a, b, c;
	struct locus_error err;
	uint8_t bad[4] = { 0xbd, 0, 0, 0 };
	(void)state;

	make_region(3, 3);
	assert_int_equal(locus_table_reader_register(F.t, 0, 0, NULL, NULL, &a, &err), 0);
	assert_int_equal(locus_table_reader_register(F.t, 0, 1, refuse_bd, NULL, &b, &err), 0);
	assert_int_equal(locus_table_reader_register(F.t, 0, 2, NULL, NULL, &c, &err), 0);
	locus_table_reader_offline(&c);

	assert_int_equal(locus_table_push(F.t, 0, bad, sizeof(bad), 0, &err), 1);
	assert_int_equal(locus_table_wait(F.t, 0, 1, 0, &res), -ETIMEDOUT);
	assert_int_equal(res.n_live, 2); /* the offline one does not count */
	assert_int_equal(res.n_adopted + res.n_refused, 0);
	assert_int_equal(locus_table_reader_poll(&a), 1);
	assert_int_equal(locus_table_wait(F.t, 0, 1, 1000000, &res), -ETIMEDOUT);
	assert_int_equal(res.n_adopted, 1);
	assert_int_equal(locus_table_reader_poll(&b), -LOCUS_ERANGE);
	assert_int_equal(locus_table_wait(F.t, 0, 1, 0, &res), 0);
	assert_int_equal(res.n_adopted, 1);
	assert_int_equal(res.n_refused, 1);
	assert_int_equal(res.refused_reader, 1);
	assert_int_equal(res.refused_gen, 1);
	assert_int_equal(res.refused_code, LOCUS_ERANGE);
	assert_non_null(strstr(res.refused_msg, "K=16"));
	assert_null(locus_table_reader_table(&b, NULL));

	/* a good one next: everybody adopts, the refusal is history */
	assert_int_equal(push(0, 7, 4, &err), 2);
	assert_int_equal(locus_table_reader_poll(&a), 1);
	assert_int_equal(locus_table_reader_poll(&b), 1);
	assert_int_equal(locus_table_wait(F.t, 0, 2, 0, &res), 0);
	assert_int_equal(res.n_adopted, 2);
	assert_int_equal(res.n_refused, 0);
	locus_table_reader_unregister(&a);
	locus_table_reader_unregister(&b);
	locus_table_reader_unregister(&c);
	/* nobody left: trivially decided */
	assert_int_equal(locus_table_wait(F.t, 0, 2, 0, &res), 0);
	assert_int_equal(res.n_live, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_params_and_layout, teardown),
		cmocka_unit_test_teardown(test_publish_adopt, teardown),
		cmocka_unit_test_teardown(test_refusals, teardown),
		cmocka_unit_test_teardown(test_reuse_after_grace, teardown),
		cmocka_unit_test_teardown(test_two_slots_refused_table_retracted, teardown),
		cmocka_unit_test_teardown(test_dead_reader, teardown),
		cmocka_unit_test_teardown(test_writer_lock, teardown),
		cmocka_unit_test_teardown(test_wait_adopted_refused, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
