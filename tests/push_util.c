// SPDX-License-Identifier: MIT
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "locus_counters_priv.h"
#include "push_util.h"

void tpush_open(struct tpush *tp, const char *instance, const struct locus_table_params *p,
		struct locus_counters *ctrs, void *blk, gid_t ctl_gid)
{
	struct locus_ctr_params cp = { .max_entries = 8, .n_blocks = 1, .block_size = 4096 };
	struct locus_pushsrv_params sp = { .instance = instance, .ctl_gid = ctl_gid };
	struct locus_error e = { 0 };

	memset(tp, 0, sizeof(*tp));
	tp->len = locus_table_region_size(p);
	assert_true(tp->len > 0);
	tp->mem = aligned_alloc(64, LOCUS_ALIGN_UP(tp->len, (size_t)64));
	assert_non_null(tp->mem);
	if (locus_table_region_init(tp->mem, tp->len, p, &e) ||
	    locus_table_region_attach(tp->mem, tp->len, &tp->t, &e))
		fail_msg("tables: %s", e.msg);
	if (!ctrs) {
		size_t n = locus_counters_region_size(&cp);

		tp->ctr_mem = aligned_alloc(64, LOCUS_ALIGN_UP(n, (size_t)64));
		assert_non_null(tp->ctr_mem);
		if (locus_counters_init(tp->ctr_mem, n, &cp, &e) ||
		    locus_counters_open(tp->ctr_mem, n, 0, &tp->ctrs, &e))
			fail_msg("counters: %s", e.msg);
		ctrs = tp->ctrs;
		blk = locus_counters_block(ctrs, 0);
	}
	sp.tables = tp->t;
	sp.ctrs = ctrs;
	sp.ctl_blk = blk;
	if (locus_pushsrv_create(&sp, &tp->srv, &e))
		fail_msg("control socket: %s", e.msg);
}

static void *serve(void *arg)
{
	struct tpush *tp = arg;
	struct timespec ts = { 0, 200000 };

	while (!__atomic_load_n(&tp->stop, __ATOMIC_ACQUIRE)) {
		locus_pushsrv_poll(tp->srv);
		if (tp->each)
			tp->each(tp->arg);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

void tpush_run(struct tpush *tp, void (*each)(void *arg), void *arg)
{
	tp->each = each;
	tp->arg = arg;
	__atomic_store_n(&tp->stop, 0, __ATOMIC_RELEASE);
	assert_int_equal(pthread_create(&tp->th, NULL, serve, tp), 0);
	tp->running = 1;
}

void tpush_halt(struct tpush *tp)
{
	if (tp->running) {
		__atomic_store_n(&tp->stop, 1, __ATOMIC_RELEASE);
		pthread_join(tp->th, NULL);
		tp->running = 0;
	}
}

void tpush_close(struct tpush *tp)
{
	tpush_halt(tp);
	locus_pushsrv_destroy(tp->srv);
	locus_table_region_detach(tp->t);
	locus_counters_close(tp->ctrs);
	free(tp->ctr_mem);
	free(tp->mem);
	memset(tp, 0, sizeof(*tp));
}
