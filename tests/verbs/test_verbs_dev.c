// SPDX-License-Identifier: MIT
/*
 * Host tests of the device-life word (verbs/locus_verbs_dev.h): every
 * transition and refusal on one thread (up -> lost -> gone -> dead ->
 * reopening -> up, a failed reopening, an ack of an earlier death that must
 * not pass for this one), then a control thread and a data thread the way
 * dev.c and data.c use it: control loses the device, waits for the data
 * side to let go, poisons and frees the "device" (a heap object standing in
 * for the CQ), makes a new one and revives; the data side uses the device
 * whenever the word allows it and checks it never reads a poisoned or freed
 * one, and that it sees the new device (not the old) after a revival.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "locus_verbs_dev.h"

#define ROUNDS 20000

static void test_transitions(void **state)
{
	struct locus_verbs_dev d = { 0 };
	uint64_t gone;
	(void)state;

	assert_int_equal(locus_verbs_dev_state(&d), LOCUS_DEV_LIVE);
	/* the data side may use a live device; nothing is acked */
	assert_true(locus_verbs_dev_use(&d));
	assert_int_equal(d.ack, 0);
	/* nothing but losing it from LIVE */
	assert_int_equal(locus_verbs_dev_park(&d), 0);
	assert_int_equal(locus_verbs_dev_bury(&d), 0);
	assert_int_equal(locus_verbs_dev_reopen(&d), 0);
	assert_int_equal(locus_verbs_dev_revive(&d), 0);
	assert_int_equal(locus_verbs_dev_lose(&d), 1);
	assert_int_equal(locus_verbs_dev_lose(&d), 0); /* known already */
	assert_int_equal(locus_verbs_dev_state(&d), LOCUS_DEV_LOST);
	/* lost: the data side still polls (draining the closing connections) */
	assert_true(locus_verbs_dev_use(&d));
	assert_false(locus_verbs_dev_parked(&d));
	assert_int_equal(locus_verbs_dev_bury(&d), 0);
	assert_int_equal(locus_verbs_dev_park(&d), 1);
	gone = d.w;
	assert_int_equal(locus_verbs_dev_state_of(gone), LOCUS_DEV_GONE);
	assert_int_equal(locus_verbs_dev_epoch_of(gone), 1);
	/* not acked yet: not parked, cannot be buried */
	assert_false(locus_verbs_dev_parked(&d));
	assert_int_equal(locus_verbs_dev_bury(&d), 0);
	/* the data side reads GONE: keeps off the device and acks, once */
	assert_false(locus_verbs_dev_use(&d));
	assert_int_equal(d.ack, gone);
	assert_true(locus_verbs_dev_parked(&d));
	assert_int_equal(locus_verbs_dev_bury(&d), 1);
	assert_int_equal(locus_verbs_dev_state(&d), LOCUS_DEV_DEAD);
	assert_false(locus_verbs_dev_use(&d));
	assert_int_equal(d.ack, d.w);
	/* dead: only reopening */
	assert_int_equal(locus_verbs_dev_lose(&d), 0);
	assert_int_equal(locus_verbs_dev_revive(&d), 0);
	assert_int_equal(locus_verbs_dev_reopen(&d), 1);
	assert_false(locus_verbs_dev_use(&d));
	/* a reopening that failed: dead again */
	assert_int_equal(locus_verbs_dev_bury(&d), 1);
	assert_int_equal(locus_verbs_dev_state(&d), LOCUS_DEV_DEAD);
	assert_int_equal(locus_verbs_dev_reopen(&d), 1);
	assert_int_equal(locus_verbs_dev_revive(&d), 1);
	assert_int_equal(locus_verbs_dev_state(&d), LOCUS_DEV_LIVE);
	assert_int_equal(locus_verbs_dev_epoch_of(d.w), 2);
	assert_true(locus_verbs_dev_use(&d));
	/* the next death: the ack of the last one does not pass for it */
	assert_int_equal(locus_verbs_dev_lose(&d), 1);
	assert_int_equal(locus_verbs_dev_park(&d), 1);
	assert_int_equal(locus_verbs_dev_epoch_of(d.w), 3);
	assert_int_not_equal(d.ack, d.w);
	assert_false(locus_verbs_dev_parked(&d));
	d.ack = gone; /* the first death's GONE word */
	assert_false(locus_verbs_dev_parked(&d));
	assert_false(locus_verbs_dev_use(&d));
	assert_true(locus_verbs_dev_parked(&d));
}

/* What the data side uses: the endpoint's CQ pointer and the object behind it. */
struct fake_cq {
	uint32_t epoch;      /* the device's life it belongs to */
	uint32_t poison;     /* set before it is freed */
	uint64_t polls;
};

struct shared {
	struct locus_verbs_dev d;
	struct fake_cq *cq;  /* control's; the data side reads it only while allowed */
	uint32_t stop;
	/* data's */
	uint64_t uses, refusals, bad, stale, lost_uses;
};

static uint32_t rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void *data_thread(void *arg)
{
	struct shared *sh = arg;
	uint32_t seen_epoch = 0, seed = 12345;

	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
		struct fake_cq *cq;
		uint64_t w;

		if (!locus_verbs_dev_use(&sh->d)) {
			sh->refusals++;
			continue;
		}
		w = __atomic_load_n(&sh->d.w, __ATOMIC_RELAXED);
		cq = sh->cq;
		/* a poll: several reads of the object, spread out */
		for (unsigned k = 0; k < 4; k++) {
			if (cq->poison)
				sh->bad++;
			cq->polls++;
			for (unsigned j = rnd(&seed) & 63; j; j--)
				__asm__ __volatile__("" ::: "memory");
		}
		/* after a revival the new device, never the old one */
		if (cq->epoch < seen_epoch)
			sh->stale++;
		seen_epoch = cq->epoch;
		sh->uses++;
		sh->lost_uses += locus_verbs_dev_state_of(w) == LOCUS_DEV_LOST;
	}
	return NULL;
}

static void test_two_threads(void **state)
{
	struct shared *sh = calloc(1, sizeof(*sh));
	uint32_t seed = 4242;
	pthread_t th;
	(void)state;

	assert_non_null(sh);
	sh->cq = calloc(1, sizeof(*sh->cq));
	assert_non_null(sh->cq);
	assert_int_equal(pthread_create(&th, NULL, data_thread, sh), 0);
	for (uint32_t r = 0; r < ROUNDS; r++) {
		struct fake_cq *old = sh->cq, *cq;

		for (unsigned k = rnd(&seed) & 1023; k; k--)
			__asm__ __volatile__("" ::: "memory");
		assert_int_equal(locus_verbs_dev_lose(&sh->d), 1);
		/* the connections drain: the data side may still poll meanwhile */
		for (unsigned k = rnd(&seed) & 255; k; k--)
			__asm__ __volatile__("" ::: "memory");
		assert_int_equal(locus_verbs_dev_park(&sh->d), 1);
		while (!locus_verbs_dev_parked(&sh->d))
			;
		assert_int_equal(locus_verbs_dev_bury(&sh->d), 1);
		/* the data side let go: poison, then free (a use now would be seen) */
		__atomic_store_n(&old->poison, 1, __ATOMIC_RELAXED);
		for (unsigned k = rnd(&seed) & 255; k; k--)
			__asm__ __volatile__("" ::: "memory");
		sh->cq = NULL;
		free(old);
		assert_int_equal(locus_verbs_dev_reopen(&sh->d), 1);
		cq = calloc(1, sizeof(*cq));
		assert_non_null(cq);
		cq->epoch = r + 1;
		sh->cq = cq; /* plain: published by the revival's release */
		assert_int_equal(locus_verbs_dev_revive(&sh->d), 1);
	}
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	printf("# %u deaths: %llu uses (%llu while lost), %llu refusals\n", ROUNDS,
	       (unsigned long long)sh->uses, (unsigned long long)sh->lost_uses,
	       (unsigned long long)sh->refusals);
	assert_int_equal(sh->bad, 0);
	assert_int_equal(sh->stale, 0);
	/* both sides of the race happened, or the test proved nothing */
	assert_true(sh->uses > 0);
	assert_true(sh->refusals > 0);
	assert_true(sh->lost_uses > 0);
	free(sh->cq);
	free(sh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_transitions),
		cmocka_unit_test(test_two_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
