// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <time.h>
#include <cmocka.h>

#include "node_util.h"

uint64_t tu_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tu_nap(void)
{
	struct timespec ts = { 0, 200000 };

	nanosleep(&ts, NULL);
}

struct locus_client *tu_attach(const char *instance, uint32_t roles, uint32_t decoder_id,
			       uint32_t rank)
{
	struct locus_client_req req = { .roles = roles, .decoder_id = decoder_id, .rank = rank,
					.timeout_ms = 5000 };
	struct locus_client *c;
	struct locus_error e;
	int ret = -EEXIST;

	/*
	 * A decoder id or rank detached just before is free again only once the
	 * node's control pass reclaimed its slot: under load that takes a while.
	 */
	for (int i = 0; i < 25000 && ret == -EEXIST; i++) {
		ret = locus_client_attach(instance, &req, &c, &e);
		if (ret == -EEXIST)
			tu_nap();
	}
	if (ret != 0)
		fail_msg("attach to %s: %s", instance, e.msg);
	return c;
}

int tu_try_desc(struct locus_client *c, struct locus_desc *d, int tries)
{
	for (int i = 0; i < tries; i++) {
		if (locus_client_poll(c, d, 1) == 1)
			return 1;
		tu_nap();
	}
	return 0;
}

void tu_wait_desc(struct locus_client *c, struct locus_desc *d)
{
	if (!tu_try_desc(c, d, 50000))
		fail_msg("no descriptor within the bound");
}

int64_t tu_push(struct locus_table_region *tables, struct locus_node *node, unsigned ch,
		const void *blob, size_t len, int *refused)
{
	struct locus_table_wait_result res;
	struct locus_error e;
	int64_t gen = locus_table_push(tables, ch, blob, len, 2000000000ull, &e);

	if (gen <= 0)
		fail_msg("push: %s", e.msg);
	assert_int_equal(locus_table_wait(tables, ch, (uint64_t)gen, 5000000000ull, &res), 0);
	*refused = res.n_refused > 0;
	if (*refused)
		fprintf(stderr, "push of generation %lld refused: %s\n", (long long)gen,
			res.refused_msg);
	/*
	 * The wait ends when the engine's reader switched; the engine installs
	 * the table (router, map) right after, in the same poll iteration.
	 */
	for (int i = 0; !*refused && i < 25000 &&
			locus_engine_table_generation(locus_node_engine(node), ch) < (uint64_t)gen; i++)
		tu_nap();
	return gen;
}

uint64_t tu_ctr(struct locus_counters *c, const char *name, uint32_t elem)
{
	static uint64_t buf[1 << 16];
	int idx;

	locus_counters_refresh(c, NULL);
	idx = locus_counters_find(c, name);
	if (idx < 0)
		fail_msg("no counter %s", name);
	if (locus_counters_sum(c, (uint32_t)idx, buf, 1 << 16) <= (int)elem)
		fail_msg("counter %s has no element %u", name, elem);
	return buf[elem];
}

int tu_view_open(const char *instance, struct tu_view *v)
{
	struct locus_error e;
	void *region;
	size_t size;

	*v = (struct tu_view){ 0 };
	if (locus_shm_attach(instance, 0, &v->shm, &e))
		goto err;
	region = locus_shm_region(v->shm, LOCUS_REGION_TABLES, &size);
	if (locus_table_region_attach(region, size, &v->tables, &e))
		goto err;
	region = locus_shm_region(v->shm, LOCUS_REGION_COUNTERS, &size);
	if (locus_counters_open(region, size, LOCUS_CTR_RDONLY, &v->ctrs, &e))
		goto err;
	return 0;
err:
	fprintf(stderr, "view of %s: %s\n", instance, e.msg);
	tu_view_close(v);
	return -1;
}

void tu_view_close(struct tu_view *v)
{
	if (v->ctrs)
		locus_counters_close(v->ctrs);
	if (v->tables)
		locus_table_region_detach(v->tables);
	if (v->shm)
		locus_shm_detach(v->shm);
	*v = (struct tu_view){ 0 };
}

void *tu_control_loop(void *arg)
{
	const struct tu_control *c = arg;

	while (!__atomic_load_n(c->stop, __ATOMIC_ACQUIRE)) {
		locus_node_control(c->node);
		tu_nap();
	}
	return NULL;
}
