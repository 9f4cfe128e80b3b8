// SPDX-License-Identifier: MIT
/*
 * Client buffer regions on every rail (dataplane/rail_mr.c), with a fake
 * device per rail standing in for verbs (the registrations themselves are
 * tested for real in the Soft-RoCE VM: tests/vm/guest-rails.sh): one
 * registration per rail at one iova; a rail whose device refuses the region
 * copies its rows (that rail only, counted) while the others gather them
 * zero-copy; a message resolved for one rail and moved to another by a
 * failover (before it was posted) follows the new rail's way; what cannot
 * be sent on a rail (no MR and no mapping) is refused there; bad keys and
 * segments are refused without a change; a full table; deregistration of
 * exactly what was registered. A rail whose device goes away and comes
 * back: its MRs dropped and its keys forgotten (resolve refuses the rail in
 * between, so no message is ever given the key of a freed MR: the fake
 * devices know which keys are live), regions registered meanwhile skip it,
 * and every region is registered on it again as at first (the same dma-buf,
 * the same iova) or copied there when the device no longer takes it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include <cmocka.h>

#include "locus_err_priv.h"
#include "locus_rail_mr.h"

/* The fake devices: what each rail takes, and what it was asked. */
struct fake {
	int dmabuf_ok[LOCUS_CFG_MAX_RAILS]; /* 1 takes it, 0 -EOPNOTSUPP, -1 -EIO */
	int mapped_ok[LOCUS_CFG_MAX_RAILS];
	int enodev[LOCUS_CFG_MAX_RAILS];    /* 1: the device is going (-ENODEV to both calls) */
	unsigned regs[LOCUS_CFG_MAX_RAILS], deregs[LOCUS_CFG_MAX_RAILS];
	uint64_t iova_seen[LOCUS_CFG_MAX_RAILS];
	int fd_seen[LOCUS_CFG_MAX_RAILS];
	uint64_t offset_seen[LOCUS_CFG_MAX_RAILS];
	uint8_t live[1 << 16];               /* by lkey: an MR registered and not deregistered */
	unsigned next;
};

static int f_dmabuf(void *ctx, uint32_t rail, int fd, uint64_t offset, uint64_t len,
		    uint64_t iova, uint32_t *lkey, void **mr, struct locus_error *err)
{
	struct fake *f = ctx;

	(void)len;
	if (f->enodev[rail])
		return locus_error_set(err, ENODEV, "rail %u is gone", rail);
	if (f->dmabuf_ok[rail] <= 0)
		return locus_error_set(err, f->dmabuf_ok[rail] ? EIO : EOPNOTSUPP, "rail %u says no",
				       rail);
	f->regs[rail]++;
	f->iova_seen[rail] = iova;
	f->fd_seen[rail] = fd;
	f->offset_seen[rail] = offset;
	*lkey = 0x1000 * (rail + 1) + ++f->next;
	f->live[*lkey & 0xffff] = 1;
	*mr = (void *)(uintptr_t)*lkey;
	return 0;
}

static int f_mapped(void *ctx, uint32_t rail, void *addr, uint64_t len, uint32_t *lkey, void **mr,
		    struct locus_error *err)
{
	struct fake *f = ctx;

	(void)len;
	if (f->enodev[rail])
		return locus_error_set(err, ENODEV, "rail %u is gone", rail);
	if (!f->mapped_ok[rail])
		return locus_error_set(err, EFAULT, "Bad address on rail %u", rail);
	f->regs[rail]++;
	f->iova_seen[rail] = (uintptr_t)addr;
	*lkey = 0x1000 * (rail + 1) + ++f->next;
	f->live[*lkey & 0xffff] = 1;
	*mr = (void *)(uintptr_t)*lkey;
	return 0;
}

static void f_dereg(void *ctx, uint32_t rail, void *mr)
{
	struct fake *f = ctx;

	assert_non_null(mr);
	/* each MR deregistered once */
	assert_int_equal(f->live[(uintptr_t)mr & 0xffff], 1);
	f->live[(uintptr_t)mr & 0xffff] = 0;
	f->deregs[rail]++;
}

static struct fake F;
static const struct locus_rail_mr_dev dev = { .reg_dmabuf = f_dmabuf, .reg_mapped = f_mapped,
					      .dereg = f_dereg, .ctx = &F };

/* A region of host memory: 4 rows of 64 bytes, row i filled with 'A' + i. */
static uint8_t region[256];
static void fill(void)
{
	for (int i = 0; i < 4; i++)
		memset(region + 64 * i, 'A' + i, 64);
}

/* A message: a 32-byte header, then rows 2 and 0 of the region (two segments). */
struct msg {
	uint8_t buf[512];
	uint32_t len, n_sg;
	struct locus_verbs_sge sg[2];
};

static void msg_of(struct msg *m, uint64_t iova, uint32_t key)
{
	memset(m, 0, sizeof(*m));
	memset(m->buf, 'h', 32);
	m->len = 32;
	m->n_sg = 2;
	m->sg[0] = (struct locus_verbs_sge){ .addr = iova + 128, .len = 64, .lkey = key };
	m->sg[1] = (struct locus_verbs_sge){ .addr = iova, .len = 64, .lkey = key };
}

static void expect_copied(const struct msg *m)
{
	assert_int_equal(m->len, 32 + 128);
	assert_int_equal(m->n_sg, 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(m->buf[i], 'h');
	for (int i = 0; i < 64; i++) {
		assert_int_equal(m->buf[32 + i], 'C');
		assert_int_equal(m->buf[96 + i], 'A');
	}
}

/* Resolve m as it is now for rail (the whole of its buffer to copy into). */
static int resolve(const struct locus_rail_mrs *t, struct msg *m, uint32_t key, uint32_t rail)
{
	return locus_rail_mrs_resolve(t, key, rail, m->buf, &m->len, sizeof(m->buf), m->sg,
				      &m->n_sg);
}

/*
 * Resolve a fresh message of key for rail: its return; on 0 every segment
 * carries the key of an MR that is registered now (never a freed one's).
 */
static int resolve_live(const struct locus_rail_mrs *t, struct msg *m, uint64_t iova,
			uint32_t key, uint32_t rail)
{
	int ret;

	msg_of(m, iova, key);
	ret = resolve(t, m, key, rail);
	for (uint32_t j = 0; ret == 0 && j < m->n_sg; j++) {
		assert_int_equal(F.live[m->sg[j].lkey & 0xffff], 1);
		assert_int_equal(m->sg[j].lkey, t->e[key - 1].lkey[rail]);
	}
	return ret;
}

static int reset(void **state)
{
	(void)state;
	memset(&F, 0, sizeof(F));
	fill();
	return 0;
}

/* Host memory on two rails that both take it: zero-copy on each, its own lkey. */
static void test_every_rail(void **state)
{
	struct locus_rail_mrs t;
	struct locus_rail_mr_how how;
	struct msg m;
	uint64_t iova = 0;
	int key;
	(void)state;

	F.mapped_ok[0] = F.mapped_ok[1] = 1;
	assert_int_equal(locus_rail_mrs_init(&t, 2, 4, &dev), 0);
	key = locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how);
	assert_true(key >= 1);
	assert_int_equal(iova, (uintptr_t)region);
	assert_int_equal(how.mapped, 2);
	assert_int_equal(how.none, 0);
	assert_int_equal(F.regs[0], 1);
	assert_int_equal(F.regs[1], 1);
	assert_int_equal(F.iova_seen[1], (uintptr_t)region);
	assert_string_equal(how.why, "rail 0 MR on the mapping, rail 1 MR on the mapping");
	for (uint32_t r = 0; r < 2; r++) {
		msg_of(&m, iova, (uint32_t)key);
		assert_int_equal(resolve(&t, &m, (uint32_t)key, r), 0);
		assert_int_equal(m.len, 32);
		assert_int_equal(m.n_sg, 2);
		assert_int_equal(m.sg[0].lkey, t.e[key - 1].lkey[r]);
		assert_int_equal(m.sg[1].lkey, t.e[key - 1].lkey[r]);
		assert_int_equal(m.sg[0].addr, iova + 128);
		assert_int_equal(locus_rail_mrs_no_mr(&t, r), 0);
	}
	assert_int_not_equal(t.e[key - 1].lkey[0], t.e[key - 1].lkey[1]);
	locus_rail_mrs_dereg(&t, (uint32_t)key);
	assert_int_equal(F.deregs[0], 1);
	assert_int_equal(F.deregs[1], 1);
	locus_rail_mrs_fini(&t);
	assert_int_equal(F.deregs[0], 1);
}

/*
 * Rail 1's device refuses the region: rail 0 gathers, rail 1 copies (counted),
 * and a message moved from rail 0 to rail 1 by a failover is copied then.
 */
static void test_one_rail_refuses(void **state)
{
	struct locus_rail_mrs t;
	struct locus_rail_mr_how how;
	struct msg m;
	uint64_t iova = 0;
	int key;
	(void)state;

	F.mapped_ok[0] = 1;
	F.mapped_ok[2] = 1;
	assert_int_equal(locus_rail_mrs_init(&t, 3, 4, &dev), 0);
	key = locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how);
	assert_true(key >= 1);
	assert_int_equal(how.mapped, 2);
	assert_int_equal(how.none, 1);
	assert_string_equal(how.why, "rail 0 MR on the mapping, rail 1 no MR (MR on the mapping: "
			    "Bad address on rail 1), rail 2 MR on the mapping");
	assert_int_equal(locus_rail_mrs_no_mr(&t, 0), 0);
	assert_int_equal(locus_rail_mrs_no_mr(&t, 1), 1);
	assert_int_equal(locus_rail_mrs_no_mr(&t, 2), 0);
	/* rail 1: copied from the mapping, in the segments' order */
	msg_of(&m, iova, (uint32_t)key);
	assert_int_equal(resolve(&t, &m, (uint32_t)key, 1), 1);
	expect_copied(&m);
	/* resolved for rail 0 (gathered), then moved to rail 1 before it was posted */
	msg_of(&m, iova, (uint32_t)key);
	assert_int_equal(resolve(&t, &m, (uint32_t)key, 0), 0);
	assert_int_equal(m.sg[0].lkey, t.e[key - 1].lkey[0]);
	assert_int_equal(resolve(&t, &m, (uint32_t)key, 1), 1);
	expect_copied(&m);
	/* ... and from rail 1 to rail 2: already whole, nothing left to resolve */
	assert_int_equal(resolve(&t, &m, (uint32_t)key, 2), 0);
	expect_copied(&m);
	/* a message that would not fit its buffer is refused there, unchanged */
	msg_of(&m, iova, (uint32_t)key);
	assert_int_equal(locus_rail_mrs_resolve(&t, (uint32_t)key, 1, m.buf, &m.len, 100, m.sg,
						&m.n_sg), -EMSGSIZE);
	assert_int_equal(m.len, 32);
	assert_int_equal(m.n_sg, 2);
	locus_rail_mrs_fini(&t);
	assert_int_equal(F.deregs[0], 1);
	assert_int_equal(F.deregs[1], 0);
	assert_int_equal(F.deregs[2], 1);
}

/*
 * A dma-buf: rail 0 takes the dma-buf MR, rail 1's device refuses it and
 * takes an MR on the mapping, at the same iova; without a mapping, rail 1
 * has nothing: its messages cannot be copied either.
 */
static void test_dmabuf_mixed(void **state)
{
	struct locus_rail_mrs t;
	struct locus_rail_mr_how how;
	struct msg m;
	uint64_t iova = 0;
	int key;
	(void)state;

	F.dmabuf_ok[0] = 1;
	F.mapped_ok[1] = 1;
	assert_int_equal(locus_rail_mrs_init(&t, 2, 4, &dev), 0);
	key = locus_rail_mrs_reg(&t, 7, 4096, sizeof(region), region, &iova, &how);
	assert_true(key >= 1);
	assert_int_equal(how.dmabuf, 1);
	assert_int_equal(how.mapped, 1);
	assert_int_equal(how.dmabuf_refused, 1);
	assert_int_equal(F.iova_seen[0], (uintptr_t)region);
	assert_int_equal(F.iova_seen[1], (uintptr_t)region);
	assert_string_equal(how.why, "rail 0 dma-buf MR, rail 1 MR on the mapping (dma-buf MR: "
			    "rail 1 says no)");
	locus_rail_mrs_dereg(&t, (uint32_t)key);

	/* not mappable: iova is the dma-buf offset, rail 1 has no MR and no copy */
	key = locus_rail_mrs_reg(&t, 7, 4096, sizeof(region), NULL, &iova, &how);
	assert_true(key >= 1);
	assert_int_equal(iova, 4096);
	assert_int_equal(how.none, 1);
	msg_of(&m, iova, (uint32_t)key);
	assert_int_equal(resolve(&t, &m, (uint32_t)key, 1), -EOPNOTSUPP);
	assert_int_equal(m.n_sg, 2);
	assert_int_equal(resolve(&t, &m, (uint32_t)key, 0), 0);
	locus_rail_mrs_fini(&t);
	assert_int_equal(F.regs[0], 2);
	assert_int_equal(F.deregs[0], 2);
	assert_int_equal(F.deregs[1], 1);
}

/* One rail: the line locusd always logged; no rail at all: refused, nothing kept. */
static void test_one_rail_and_none(void **state)
{
	struct locus_rail_mrs t;
	struct locus_rail_mr_how how;
	uint64_t iova = 0;
	int key;
	(void)state;

	F.mapped_ok[0] = 1;
	assert_int_equal(locus_rail_mrs_init(&t, 1, 2, &dev), 0);
	key = locus_rail_mrs_reg(&t, 3, 0, sizeof(region), region, &iova, &how);
	assert_int_equal(key, 1);
	assert_string_equal(how.why, "MR on the mapping; dma-buf MR: rail 0 says no");
	F.mapped_ok[0] = 0;
	assert_int_equal(locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how),
			 -EOPNOTSUPP);
	assert_int_equal(how.none, 1);
	assert_string_equal(how.why, "no MR; MR on the mapping: Bad address on rail 0");
	assert_int_equal(t.e[1].used, 0);
	assert_int_equal(locus_rail_mrs_no_mr(&t, 0), 0);
	/* full: two entries, both in use */
	F.mapped_ok[0] = 1;
	assert_int_equal(locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how), 2);
	assert_int_equal(locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how),
			 -ENOSPC);
	assert_non_null(strstr(how.why, "all 2 region registrations are in use"));
	locus_rail_mrs_dereg(&t, 1);
	assert_int_equal(locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how), 1);
	locus_rail_mrs_fini(&t);
	assert_int_equal(F.regs[0], F.deregs[0]);
	assert_int_equal(locus_rail_mrs_init(&t, 0, 2, &dev), -EINVAL);
	assert_int_equal(locus_rail_mrs_init(&t, LOCUS_CFG_MAX_RAILS + 1, 2, &dev), -EINVAL);
}

/* Keys and segments that are not a region's: refused, nothing changed. */
static void test_bad_keys(void **state)
{
	struct locus_rail_mrs t;
	struct locus_rail_mr_how how;
	struct msg m;
	uint64_t iova = 0;
	int key;
	(void)state;

	F.mapped_ok[0] = F.mapped_ok[1] = 1;
	assert_int_equal(locus_rail_mrs_init(&t, 2, 4, &dev), 0);
	key = locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how);
	msg_of(&m, iova, (uint32_t)key);
	assert_int_equal(resolve(&t, &m, 0, 0), -EINVAL);
	assert_int_equal(resolve(&t, &m, 5, 0), -EINVAL);
	assert_int_equal(resolve(&t, &m, 2, 0), -EINVAL); /* not registered */
	assert_int_equal(resolve(&t, &m, (uint32_t)key, 2), -EINVAL); /* no rail 2 */
	m.sg[1].addr = iova + 200; /* 200 + 64 > 256 */
	assert_int_equal(resolve(&t, &m, (uint32_t)key, 0), -EINVAL);
	m.sg[1].addr = iova - 64;
	assert_int_equal(resolve(&t, &m, (uint32_t)key, 0), -EINVAL);
	assert_int_equal(m.sg[0].lkey, (uint32_t)key);
	assert_int_equal(m.len, 32);
	locus_rail_mrs_dereg(&t, (uint32_t)key);
	locus_rail_mrs_dereg(&t, (uint32_t)key); /* twice: nothing more */
	locus_rail_mrs_dereg(&t, 0);
	locus_rail_mrs_dereg(&t, 99);
	assert_int_equal(F.deregs[0], 1);
	assert_int_equal(F.deregs[1], 1);
	locus_rail_mrs_fini(&t);
}

/*
 * Rail 1's device goes away and comes back: its MRs are dropped and its keys
 * forgotten, resolve refuses the rail meanwhile (the message untouched),
 * rail 0 goes on; a region registered meanwhile gets rail 0 only, not
 * counted as refused by rail 1; at the restore both get an MR on rail 1
 * again, under new keys, and every key resolve gives is a live MR's.
 */
static void test_rail_gone_and_back(void **state)
{
	struct locus_rail_mrs t;
	struct locus_rail_mr_how how;
	struct msg m;
	uint64_t iova = 0, iova_b = 0;
	uint32_t none = 99, old;
	int a, b;
	(void)state;

	F.mapped_ok[0] = F.mapped_ok[1] = 1;
	assert_int_equal(locus_rail_mrs_init(&t, 2, 4, &dev), 0);
	a = locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how);
	assert_true(a >= 1);
	assert_int_equal(resolve_live(&t, &m, iova, (uint32_t)a, 1), 0);
	old = m.sg[0].lkey;

	locus_rail_mrs_drop_rail(&t, 1);
	assert_int_equal(F.deregs[1], 1);
	assert_int_equal(F.live[old & 0xffff], 0);
	assert_int_equal(t.e[a - 1].lkey[1], 0);
	/* refused, nothing changed: not the old key, not a copy */
	assert_int_equal(resolve_live(&t, &m, iova, (uint32_t)a, 1), -ENODEV);
	assert_int_equal(m.len, 32);
	assert_int_equal(m.n_sg, 2);
	assert_int_equal(m.sg[0].lkey, (uint32_t)a);
	assert_int_equal(resolve_live(&t, &m, iova, (uint32_t)a, 0), 0);
	/* twice: nothing more to drop */
	locus_rail_mrs_drop_rail(&t, 1);
	assert_int_equal(F.deregs[1], 1);

	/* a region registered while rail 1 is gone: rail 0 only, rail 1 not asked */
	b = locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova_b, &how);
	assert_true(b >= 1);
	assert_int_equal(how.mapped, 1);
	assert_int_equal(how.gone, 1);
	assert_int_equal(how.none, 0);
	assert_string_equal(how.why, "rail 0 MR on the mapping, rail 1 device gone (an MR when it "
			    "is back)");
	assert_int_equal(F.regs[1], 1);
	assert_int_equal(locus_rail_mrs_no_mr(&t, 1), 0);
	assert_int_equal(resolve_live(&t, &m, iova_b, (uint32_t)b, 1), -ENODEV);

	/* back: both regions on rail 1 again, new keys, live ones */
	assert_int_equal(locus_rail_mrs_restore_rail(&t, 1, &none), 2);
	assert_int_equal(none, 0);
	assert_int_equal(F.regs[1], 3);
	assert_int_equal(F.iova_seen[1], (uintptr_t)region);
	assert_int_equal(resolve_live(&t, &m, iova, (uint32_t)a, 1), 0);
	assert_int_not_equal(m.sg[0].lkey, old);
	assert_int_equal(resolve_live(&t, &m, iova_b, (uint32_t)b, 1), 0);
	assert_int_equal(resolve_live(&t, &m, iova_b, (uint32_t)b, 0), 0);
	assert_int_equal(locus_rail_mrs_no_mr(&t, 1), 0);
	locus_rail_mrs_dereg(&t, (uint32_t)a);
	locus_rail_mrs_fini(&t);
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(F.regs[r], F.deregs[r]);
}

/*
 * The device comes back but no longer takes the region on the mapping: that
 * rail copies its rows (counted as refused), the other still gathers; a
 * dma-buf is registered again from the same fd and offset at the same iova.
 */
static void test_rail_back_otherwise(void **state)
{
	struct locus_rail_mrs t;
	struct locus_rail_mr_how how;
	struct msg m;
	uint64_t iova = 0, iova_d = 0;
	uint32_t none = 0;
	int a, d;
	(void)state;

	F.mapped_ok[0] = F.mapped_ok[1] = 1;
	F.dmabuf_ok[0] = F.dmabuf_ok[1] = 1;
	assert_int_equal(locus_rail_mrs_init(&t, 2, 4, &dev), 0);
	a = locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how);
	d = locus_rail_mrs_reg(&t, 9, 8192, sizeof(region), NULL, &iova_d, &how);
	assert_true(a >= 1 && d >= 1);
	assert_int_equal(how.dmabuf, 2);
	locus_rail_mrs_drop_rail(&t, 1);
	F.fd_seen[1] = -1;
	F.mapped_ok[1] = 0;
	assert_int_equal(locus_rail_mrs_restore_rail(&t, 1, &none), 1);
	assert_int_equal(none, 1);
	assert_int_equal(locus_rail_mrs_no_mr(&t, 1), 1);
	assert_int_equal(F.fd_seen[1], 9);
	assert_int_equal(F.offset_seen[1], 8192);
	assert_int_equal(F.iova_seen[1], 8192);
	assert_int_equal(t.e[d - 1].path[1], LOCUS_RAIL_MR_DMABUF);
	assert_int_equal(resolve_live(&t, &m, iova_d, (uint32_t)d, 1), 0);
	/* the host region: copied on rail 1 now, gathered on rail 0 */
	assert_int_equal(resolve_live(&t, &m, iova, (uint32_t)a, 1), 1);
	expect_copied(&m);
	assert_int_equal(resolve_live(&t, &m, iova, (uint32_t)a, 0), 0);
	locus_rail_mrs_fini(&t);
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(F.regs[r], F.deregs[r]);
}

/*
 * A registration that meets a device on its way out (-ENODEV before the
 * rail was dropped) counts as gone there, not as refused, and gets its MR at
 * the restore; with every rail gone there is nothing to register.
 */
static void test_rail_going(void **state)
{
	struct locus_rail_mrs t;
	struct locus_rail_mr_how how;
	struct msg m;
	uint64_t iova = 0;
	uint32_t none = 0;
	int a;
	(void)state;

	F.mapped_ok[0] = F.mapped_ok[1] = 1;
	F.enodev[1] = 1;
	assert_int_equal(locus_rail_mrs_init(&t, 2, 4, &dev), 0);
	a = locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how);
	assert_true(a >= 1);
	assert_int_equal(how.gone, 1);
	assert_int_equal(how.none, 0);
	assert_int_equal(locus_rail_mrs_no_mr(&t, 1), 0);
	locus_rail_mrs_drop_rail(&t, 1);
	assert_int_equal(F.deregs[1], 0);
	F.enodev[1] = 0;
	assert_int_equal(locus_rail_mrs_restore_rail(&t, 1, &none), 1);
	assert_int_equal(resolve_live(&t, &m, iova, (uint32_t)a, 1), 0);
	locus_rail_mrs_fini(&t);

	/* one rail, gone: nothing registered, the entry stays free */
	assert_int_equal(locus_rail_mrs_init(&t, 1, 2, &dev), 0);
	locus_rail_mrs_drop_rail(&t, 0);
	assert_int_equal(locus_rail_mrs_reg(&t, -1, 0, sizeof(region), region, &iova, &how),
			 -EOPNOTSUPP);
	assert_int_equal(how.gone, 1);
	assert_int_equal(t.e[0].used, 0);
	assert_int_equal(locus_rail_mrs_restore_rail(&t, 0, &none), 0);
	assert_int_equal(none, 0);
	locus_rail_mrs_fini(&t);
	for (uint32_t r = 0; r < 2; r++)
		assert_int_equal(F.regs[r], F.deregs[r]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_every_rail, reset),
		cmocka_unit_test_setup(test_one_rail_refuses, reset),
		cmocka_unit_test_setup(test_dmabuf_mixed, reset),
		cmocka_unit_test_setup(test_one_rail_and_none, reset),
		cmocka_unit_test_setup(test_bad_keys, reset),
		cmocka_unit_test_setup(test_rail_gone_and_back, reset),
		cmocka_unit_test_setup(test_rail_back_otherwise, reset),
		cmocka_unit_test_setup(test_rail_going, reset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
