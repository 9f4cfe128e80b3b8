// SPDX-License-Identifier: MIT
/* Client buffer regions on every rail (locus_rail_mr.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_rail_mr.h"

static const char *const path_name[] = {
	[LOCUS_RAIL_MR_NONE] = "no MR",
	[LOCUS_RAIL_MR_DMABUF] = "dma-buf MR",
	[LOCUS_RAIL_MR_MAPPED] = "MR on the mapping",
};

int locus_rail_mrs_init(struct locus_rail_mrs *t, uint32_t n_rails, uint32_t cap,
			const struct locus_rail_mr_dev *dev)
{
	memset(t, 0, sizeof(*t));
	if (!n_rails || n_rails > LOCUS_CFG_MAX_RAILS || !cap)
		return -EINVAL;
	t->e = calloc(cap, sizeof(*t->e));
	if (!t->e)
		return -ENOMEM;
	t->dev = *dev;
	t->n_rails = n_rails;
	t->cap = cap;
	return 0;
}

void locus_rail_mrs_fini(struct locus_rail_mrs *t)
{
	for (uint32_t k = 1; t->e && k <= t->cap; k++)
		locus_rail_mrs_dereg(t, k);
	free(t->e);
	t->e = NULL;
}

/* Append to how->why (what stays if it is full: the line is for people). */
static void say(struct locus_rail_mr_how *how, size_t *at, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*at >= sizeof(how->why))
		return;
	va_start(ap, fmt);
	n = vsnprintf(how->why + *at, sizeof(how->why) - *at, fmt, ap);
	va_end(ap);
	if (n > 0)
		*at += (size_t)n;
}

static bool rail_gone(const struct locus_rail_mrs *t, uint32_t r)
{
	/* acquire: a rail given back (restore_rail) comes with its new keys */
	return __atomic_load_n(&t->gone[r], __ATOMIC_ACQUIRE);
}

/*
 * Register m on rail r: a dma-buf MR if m->fd says so and the device takes
 * it, else an MR on the mapping; nothing when gone (the rail's device is
 * gone: it registers m when it is back), or when the device says so
 * (-ENODEV). Says what it got, and why not better, in how. Returns whether
 * the rail's device was there to ask.
 */
static bool reg_rail(struct locus_rail_mrs *t, struct locus_rail_mr *m, uint32_t r, bool gone,
		     struct locus_rail_mr_how *how, size_t *at)
{
	struct locus_error e1 = { 0 }, e2 = { 0 };
	void *map = (void *)(uintptr_t)m->addr;
	int ret = -1;

	m->path[r] = LOCUS_RAIL_MR_NONE;
	if (!gone && m->fd >= 0) {
		ret = t->dev.reg_dmabuf(t->dev.ctx, r, m->fd, m->offset, m->len, m->iova,
					&m->lkey[r], &m->mr[r], &e1);
		if (ret == 0)
			m->path[r] = LOCUS_RAIL_MR_DMABUF;
		else if (ret == -EOPNOTSUPP)
			how->dmabuf_refused++;
		gone = ret == -ENODEV;
	}
	if (!gone && ret < 0 && map) {
		ret = t->dev.reg_mapped(t->dev.ctx, r, map, m->len, &m->lkey[r], &m->mr[r], &e2);
		if (ret == 0)
			m->path[r] = LOCUS_RAIL_MR_MAPPED;
		gone = ret == -ENODEV;
	}
	if (m->path[r] == LOCUS_RAIL_MR_NONE) {
		m->lkey[r] = 0;
		m->mr[r] = NULL;
	}
	how->dmabuf += m->path[r] == LOCUS_RAIL_MR_DMABUF;
	how->mapped += m->path[r] == LOCUS_RAIL_MR_MAPPED;
	how->none += m->path[r] == LOCUS_RAIL_MR_NONE && !gone;
	how->gone += gone;
	if (gone) {
		say(how, at, "%srail %u device gone (an MR when it is back)", r ? ", " : "", r);
		return false;
	}
	/* one rail: "MR on the mapping; dma-buf MR: why", as locusd always said it */
	if (t->n_rails == 1) {
		say(how, at, "%s", path_name[m->path[r]]);
		if (e1.msg[0])
			say(how, at, "; dma-buf MR: %s", e1.msg);
		if (e2.msg[0])
			say(how, at, "; MR on the mapping: %s", e2.msg);
		return true;
	}
	say(how, at, "%srail %u %s", r ? ", " : "", r, path_name[m->path[r]]);
	if (e1.msg[0] || e2.msg[0])
		say(how, at, " (%s%s%s%s%s)", e1.msg[0] ? "dma-buf MR: " : "", e1.msg,
		    e1.msg[0] && e2.msg[0] ? "; " : "", e2.msg[0] ? "MR on the mapping: " : "",
		    e2.msg);
	return true;
}

int locus_rail_mrs_reg(struct locus_rail_mrs *t, int fd, uint64_t offset, uint64_t len,
		       void *map, uint64_t *iova, struct locus_rail_mr_how *how)
{
	struct locus_rail_mr *m = NULL;
	size_t at = 0;

	memset(how, 0, sizeof(*how));
	for (uint32_t i = 0; i < t->cap && !m; i++)
		if (!t->e[i].used)
			m = &t->e[i];
	if (!m) {
		say(how, &at, "no MR: all %u region registrations are in use", t->cap);
		return -ENOSPC;
	}
	bool asked[LOCUS_CFG_MAX_RAILS];

	*m = (struct locus_rail_mr){ .iova = map ? (uint64_t)(uintptr_t)map : offset,
				     .addr = map, .len = len, .fd = fd, .offset = offset };
	for (uint32_t r = 0; r < t->n_rails; r++)
		asked[r] = reg_rail(t, m, r, rail_gone(t, r), how, &at);
	if (how->dmabuf + how->mapped == 0) {
		*m = (struct locus_rail_mr){ 0 }; /* nothing registered: the entry stays free */
		return -EOPNOTSUPP;
	}
	for (uint32_t r = 0; r < t->n_rails; r++)
		if (asked[r] && m->path[r] == LOCUS_RAIL_MR_NONE)
			__atomic_add_fetch(&t->no_mr[r], 1, __ATOMIC_RELAXED);
	m->used = 1;
	*iova = m->iova;
	return (int)(m - t->e) + 1;
}

void locus_rail_mrs_dereg(struct locus_rail_mrs *t, uint32_t key)
{
	struct locus_rail_mr *m;

	if (key == 0 || key > t->cap || !t->e[key - 1].used)
		return;
	m = &t->e[key - 1];
	for (uint32_t r = 0; r < t->n_rails; r++)
		if (m->path[r] != LOCUS_RAIL_MR_NONE)
			t->dev.dereg(t->dev.ctx, r, m->mr[r]);
	memset(m, 0, sizeof(*m));
}

int locus_rail_mrs_resolve(const struct locus_rail_mrs *t, uint32_t key, uint32_t rail,
			   void *buf, uint32_t *len, size_t cap, struct locus_verbs_sge *sg,
			   uint32_t *n_sg)
{
	const struct locus_rail_mr *m;
	uint64_t total = *len;
	uint8_t *to;

	if (key == 0 || key > t->cap || rail >= t->n_rails || !t->e[key - 1].used)
		return -EINVAL;
	/* never the key of an MR freed with its device, never a copy in its stead */
	if (unlikely(rail_gone(t, rail)))
		return -ENODEV;
	m = &t->e[key - 1];
	for (uint32_t j = 0; j < *n_sg; j++) {
		uint64_t off = sg[j].addr - m->iova;

		if (sg[j].addr < m->iova || off > m->len || sg[j].len > m->len - off)
			return -EINVAL;
		total += sg[j].len;
	}
	if (m->path[rail] != LOCUS_RAIL_MR_NONE) {
		for (uint32_t j = 0; j < *n_sg; j++)
			sg[j].lkey = m->lkey[rail];
		return 0;
	}
	if (!m->addr)
		return -EOPNOTSUPP;
	if (total > cap)
		return -EMSGSIZE;
	to = (uint8_t *)buf + *len;
	for (uint32_t j = 0; j < *n_sg; j++) {
		memcpy(to, m->addr + (sg[j].addr - m->iova), sg[j].len);
		to += sg[j].len;
	}
	*len = (uint32_t)total;
	*n_sg = 0;
	return 1;
}

void locus_rail_mrs_drop_rail(struct locus_rail_mrs *t, uint32_t rail)
{
	if (rail >= t->n_rails)
		return;
	__atomic_store_n(&t->gone[rail], 1, __ATOMIC_RELAXED);
	for (uint32_t k = 0; t->e && k < t->cap; k++) {
		struct locus_rail_mr *m = &t->e[k];

		if (!m->used || m->path[rail] == LOCUS_RAIL_MR_NONE)
			continue;
		t->dev.dereg(t->dev.ctx, rail, m->mr[rail]);
		m->path[rail] = LOCUS_RAIL_MR_NONE;
		m->lkey[rail] = 0;
		m->mr[rail] = NULL;
	}
}

uint32_t locus_rail_mrs_restore_rail(struct locus_rail_mrs *t, uint32_t rail, uint32_t *none)
{
	uint32_t got = 0, missed = 0;

	if (rail >= t->n_rails)
		return 0;
	for (uint32_t k = 0; t->e && k < t->cap; k++) {
		struct locus_rail_mr *m = &t->e[k];
		struct locus_rail_mr_how how = { 0 };
		size_t at = 0;

		if (!m->used)
			continue;
		if (!reg_rail(t, m, rail, false, &how, &at))
			continue; /* gone again meanwhile: the next restore registers it */
		if (m->path[rail] != LOCUS_RAIL_MR_NONE) {
			got++;
		} else {
			missed++;
			__atomic_add_fetch(&t->no_mr[rail], 1, __ATOMIC_RELAXED);
		}
	}
	/* the new keys, then the rail: a resolve that sees it back sees them (acquire) */
	__atomic_store_n(&t->gone[rail], 0, __ATOMIC_RELEASE);
	if (none)
		*none = missed;
	return got;
}
