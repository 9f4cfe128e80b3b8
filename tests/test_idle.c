// SPDX-License-Identifier: MIT
/*
 * The idle policy's state machine (dataplane/locus_idle.h): the steps an
 * empty poll gets, one by one, against the rules written out here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "locus_idle.h"

/* n empty polls; returns how many of each step, the sleeps' bounds into us[]. */
static void run(struct locus_idle *s, unsigned n, unsigned got[3], uint32_t *us, unsigned *n_us)
{
	*n_us = 0;
	got[0] = got[1] = got[2] = 0;
	for (unsigned i = 0; i < n; i++) {
		uint32_t t = 0xdeadbeef;
		enum locus_idle_step st = locus_idle_next(s, &t);

		assert_true(st <= LOCUS_IDLE_SLEEP);
		got[st]++;
		if (st == LOCUS_IDLE_SLEEP)
			us[(*n_us)++] = t;
		else
			assert_int_equal(t, 0xdeadbeef); /* untouched unless sleeping */
	}
}

static void test_phases_in_order(void **state)
{
	struct locus_idle_params p = { .spin_polls = 3, .pause_polls = 4, .sleep_max_us = 40 };
	struct locus_idle s;
	uint32_t t;
	(void)state;

	locus_idle_init(&s, &p);
	for (int i = 0; i < 3; i++)
		assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_SPIN);
	for (int i = 0; i < 4; i++)
		assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_PAUSE);
	/* 1, 2, 4, 8, 16, 32, then the bound 40 (not 64), and 40 for ever */
	static const uint32_t want[] = { 1, 2, 4, 8, 16, 32, 40, 40, 40 };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		t = 0;
		assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_SLEEP);
		assert_int_equal(t, want[i]);
	}
}

static void test_work_resets(void **state)
{
	struct locus_idle_params p = { .spin_polls = 2, .pause_polls = 2, .sleep_max_us = 1000 };
	struct locus_idle s;
	uint32_t t = 0;
	(void)state;

	locus_idle_init(&s, &p);
	for (int i = 0; i < 10; i++)
		locus_idle_next(&s, &t);
	assert_int_equal(t, 32); /* sleeps 1..32 after 2 spins and 2 pauses */
	locus_idle_busy(&s);
	/* spins again, and the next sleep is 1 us, not 64 */
	assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_SPIN);
	assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_SPIN);
	assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_PAUSE);
	assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_PAUSE);
	assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_SLEEP);
	assert_int_equal(t, 1);
	/* work in the middle of the pauses: back to the spins */
	locus_idle_busy(&s);
	locus_idle_next(&s, &t);
	locus_idle_next(&s, &t);
	assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_PAUSE);
	locus_idle_busy(&s);
	assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_SPIN);
}

static void test_never_sleeps_without_bound(void **state)
{
	struct locus_idle_params p = { .spin_polls = 5, .pause_polls = 0, .sleep_max_us = 0 };
	struct locus_idle s;
	unsigned got[3], n_us;
	uint32_t us[1];
	(void)state;

	locus_idle_init(&s, &p);
	run(&s, 100000, got, us, &n_us);
	assert_int_equal(got[LOCUS_IDLE_SPIN], 5);
	assert_int_equal(got[LOCUS_IDLE_PAUSE], 100000 - 5);
	assert_int_equal(got[LOCUS_IDLE_SLEEP], 0);
	/* nothing at all but spins: pure polling */
	p = (struct locus_idle_params){ .spin_polls = LOCUS_IDLE_MAX_POLLS };
	locus_idle_init(&s, &p);
	run(&s, 100000, got, us, &n_us);
	assert_int_equal(got[LOCUS_IDLE_SPIN], 100000);
}

static void test_zero_polls_sleep_at_once(void **state)
{
	struct locus_idle_params p = { .spin_polls = 0, .pause_polls = 0, .sleep_max_us = 3 };
	struct locus_idle s;
	unsigned got[3], n_us;
	uint32_t us[8];
	(void)state;

	locus_idle_init(&s, &p);
	run(&s, 5, got, us, &n_us);
	assert_int_equal(got[LOCUS_IDLE_SLEEP], 5);
	assert_int_equal(us[0], 1);
	assert_int_equal(us[1], 2);
	assert_int_equal(us[2], 3); /* 4 capped at the bound */
	assert_int_equal(us[3], 3);
	/* no spins, pauses only */
	p = (struct locus_idle_params){ .pause_polls = 2 };
	locus_idle_init(&s, &p);
	run(&s, 7, got, us, &n_us);
	assert_int_equal(got[LOCUS_IDLE_PAUSE], 7);
}

/* Largest values: the counts neither wrap nor overflow the doubling. */
static void test_bounds(void **state)
{
	struct locus_idle_params p = { .spin_polls = LOCUS_IDLE_MAX_POLLS,
				       .pause_polls = LOCUS_IDLE_MAX_POLLS,
				       .sleep_max_us = LOCUS_IDLE_MAX_SLEEP_US };
	struct locus_idle s;
	uint32_t t = 0, last = 0;
	(void)state;

	locus_idle_init(&s, &p);
	s.empty = 2ull * LOCUS_IDLE_MAX_POLLS - 1; /* skip ahead: the last pause */
	assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_PAUSE);
	for (int i = 0; i < 40; i++) {
		assert_int_equal(locus_idle_next(&s, &t), LOCUS_IDLE_SLEEP);
		assert_true(t >= last && t <= LOCUS_IDLE_MAX_SLEEP_US);
		last = t;
	}
	assert_int_equal(t, LOCUS_IDLE_MAX_SLEEP_US);
	/* an odd bound right above a power of two: 1..4096 then 4097, never more */
	p = (struct locus_idle_params){ .sleep_max_us = 4097 };
	locus_idle_init(&s, &p);
	for (int i = 0; i < 14; i++)
		locus_idle_next(&s, &t);
	assert_int_equal(t, 4097);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_phases_in_order),
		cmocka_unit_test(test_work_resets),
		cmocka_unit_test(test_never_sleeps_without_bound),
		cmocka_unit_test(test_zero_polls_sleep_at_once),
		cmocka_unit_test(test_bounds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
