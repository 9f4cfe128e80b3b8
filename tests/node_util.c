// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>
#include <time.h>
#include <sched.h>
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
	 * A decoder id or rank (or a slot) detached just before is free again
	 * only once the node's control pass reclaimed its slot: under load that
	 * takes a while.
	 */
	for (int i = 0; i < 25000 && (ret == -EEXIST || ret == -LOCUS_EFULL); i++) {
		ret = locus_client_attach(instance, &req, &c, &e);
		if (ret == -EEXIST || ret == -LOCUS_EFULL)
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

int64_t tu_push(const char *instance, struct locus_node *node, unsigned ch, const void *blob,
		size_t len, int *refused)
{
	struct locus_push_result r;
	struct locus_error e;

	if (locus_push_table(instance, ch, blob, len, 5000, &r, &e) < 0)
		fail_msg("push to %s channel %u: %s", instance, ch, e.msg);
	if (r.timed_out)
		fail_msg("push to %s channel %u: generation %llu not decided in 5 s", instance, ch,
			 (unsigned long long)r.generation);
	*refused = r.wait.n_refused > 0;
	if (*refused)
		fprintf(stderr, "push of generation %llu refused: %s\n",
			(unsigned long long)r.generation, r.wait.refused_msg);
	/*
	 * The verdict comes when the engine's reader switched; the engine
	 * installs the table (router, map) right after, in the same iteration.
	 */
	for (int i = 0; node && !*refused && i < 25000 &&
			locus_node_table_generation(node, ch) < r.generation; i++)
		tu_nap();
	return (int64_t)r.generation;
}

int tu_view_open(const char *instance, struct tu_view *v)
{
	struct locus_error e;
	void *region;
	size_t size;

	*v = (struct tu_view){ 0 };
	if (locus_shm_attach(instance, LOCUS_SHM_RDONLY, &v->shm, &e))
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

static void *tn_control(void *arg)
{
	struct tu_node *t = arg;

	while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
		int hold = __atomic_load_n(&t->hold, __ATOMIC_ACQUIRE);

		__atomic_store_n(&t->held, hold, __ATOMIC_RELEASE);
		if (!hold)
			locus_node_control(t->node);
		tu_nap();
	}
	return NULL;
}

void tu_node_hold(struct tu_node *t, int on)
{
	__atomic_store_n(&t->hold, on, __ATOMIC_RELEASE);
	for (int i = 0; on && i < 25000 && !__atomic_load_n(&t->held, __ATOMIC_ACQUIRE); i++)
		tu_nap();
}

void tu_engine_hold(struct tu_node *t, int on)
{
	__atomic_store_n(&t->eng_hold, on, __ATOMIC_RELEASE);
	for (int i = 0; on && i < 25000 && !__atomic_load_n(&t->eng_held, __ATOMIC_ACQUIRE); i++)
		tu_nap();
}

/* Every engine of the node on this one thread, in turn (see tu_engines_start for one each). */
static void *tn_engine(void *arg)
{
	struct tu_node *t = arg;
	uint32_t n = locus_node_n_engines(t->node);

	while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
		int work = 0, hold = __atomic_load_n(&t->eng_hold, __ATOMIC_ACQUIRE);

		__atomic_store_n(&t->eng_held, hold, __ATOMIC_RELEASE);
		for (uint32_t k = 0; !hold && k < n; k++)
			work += locus_engine_poll(locus_node_engine_at(t->node, k));
		if (work == 0)
			sched_yield();
	}
	return NULL;
}

int tu_node_start(struct tu_node *t, const char *conf)
{
	struct locus_config cfg;
	struct locus_error e;

	memset(t, 0, sizeof(*t));
	if (locus_config_parse(conf, strlen(conf), "test.conf", &cfg, &e) ||
	    locus_node_create(&cfg, tu_now_ns, 1000000000ull, &t->node, &e)) {
		fprintf(stderr, "node: %s\n", e.msg);
		return -1;
	}
	locus_node_set_running(t->node);
	if (tu_view_open(cfg.instance, &t->view)) {
		locus_node_destroy(t->node, 1);
		return -1;
	}
	pthread_create(&t->th_ctl, NULL, tn_control, t);
	pthread_create(&t->th_eng, NULL, tn_engine, t);
	return 0;
}

void tu_node_stop(struct tu_node *t)
{
	__atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
	pthread_join(t->th_ctl, NULL);
	pthread_join(t->th_eng, NULL);
	tu_view_close(&t->view);
	locus_node_destroy(t->node, 1);
	memset(t, 0, sizeof(*t));
}
