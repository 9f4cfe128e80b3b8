// SPDX-License-Identifier: MIT
/*
 * Table channels under fire: a writer PROCESS publishes as fast as slots come
 * free, while reader THREADS here switch tables and check every table they
 * switch to and every read they make against a content check of their own
 * (a sequence number, a pattern derived from it and an FNV-1a hash: nothing
 * the channel code computed). A torn or recycled slot shows up as a pattern
 * or hash mismatch. Some tables are deliberately bad: they must be refused
 * and the old table kept. Two and three slots, so reuse is hammered.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "locus_common.h"
#include "locus_err_priv.h"
#include "locus_table.h"

#define N_READERS      2
#define SLOT_SIZE      2048
#define MIN_PUBLISHES  50000
#define MIN_READS      1000000ull
#define BAD_EVERY      97       /* every 97th table carries a wrong hash */
#define SAFETY_CAP_S   60       /* a hung run fails instead of hanging; a run this slow (a
				 * busy machine) must still have done a tenth of the work */
#define EBAD           LOCUS_EPROTO /* our validator's refusal code */

struct tbl {
	uint64_t seq;
	uint32_t nwords;
	uint32_t reserved;
	uint64_t word[];          /* nwords of pattern, then the hash */
};

struct shared {
	uint64_t stop;
	uint64_t seq;             /* last sequence number, bumped under the lock */
	uint64_t lock_handoffs;
	uint64_t published;
	uint64_t bad_published;
	int      writer_rc;
	char     writer_msg[LOCUS_ERRMSG_MAX];
};

struct reader_arg {
	struct locus_table_region *t;
	unsigned idx;
	int churn;                /* go offline and online now and then */
	uint64_t reads, switches, refusals, bad_refusals, errors, full_checks;
	char first_error[LOCUS_ERRMSG_MAX + 64];
};

static struct shared *S;

static uint64_t splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t fnv1a(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static size_t tbl_len(uint32_t nwords)
{
	return sizeof(struct tbl) + ((size_t)nwords + 1) * sizeof(uint64_t);
}

/* Full independent check: 0 good, 1 hash wrong (a deliberately bad table
 * is only ever wrong there), 2 anything else (torn or garbage). */
static int tbl_check(const void *buf, size_t len)
{
	const struct tbl *t = buf;

	if (len < tbl_len(0) || t->nwords > (SLOT_SIZE - tbl_len(0)) / 8 ||
	    len != tbl_len(t->nwords))
		return 2;
	for (uint32_t i = 0; i < t->nwords; i++)
		if (t->word[i] != splitmix(t->seq * 1000003ull + i))
			return 2;
	return fnv1a(buf, len - 8) == t->word[t->nwords] ? 0 : 1;
}

static int validate(const void *buf, size_t len, void *arg, struct locus_error *err)
{
	(void)arg;
	switch (tbl_check(buf, len)) {
	case 0:
		return 0;
	case 1:
		return locus_error_set(err, EBAD, "hash mismatch (a deliberately bad table)");
	default:
		return locus_error_set(err, LOCUS_ERANGE, "torn table: pattern mismatch");
	}
}

/*
 * Publish batches of tables; with several writer processes they take turns
 * at the channel's writer lock, so the lock handoff and a reuse scan right
 * after another process's publish are exercised too.
 */
static void writer_main(struct locus_table_region *t, unsigned batch)
{
	struct locus_table_writer *w = NULL;
	struct locus_error err;
	uint64_t seq;
	size_t cap;
	void *buf;
	int rc;

	while (!__atomic_load_n(&S->stop, __ATOMIC_ACQUIRE)) {
		rc = locus_table_writer_open(t, 0, &w, &err);
		if (rc == -EBUSY) {
			sched_yield();
			continue;
		}
		if (rc < 0)
			goto fail;
		__atomic_fetch_add(&S->lock_handoffs, 1, __ATOMIC_RELAXED);
		for (unsigned b = 0; b < batch && !__atomic_load_n(&S->stop, __ATOMIC_ACQUIRE);
		     b++) {
			struct tbl *tb;
			uint32_t n;

			rc = locus_table_writer_reserve(w, 10ull * 1000000000ull, &buf, &cap, &err);
			if (rc < 0)
				goto fail;
			seq = ++S->seq; /* we hold the lock: nobody else bumps it */
			n = 8 + (uint32_t)(splitmix(seq) % 240);
			tb = buf;
			tb->seq = seq;
			tb->nwords = n;
			tb->reserved = 0;
			for (uint32_t i = 0; i < n; i++)
				tb->word[i] = splitmix(seq * 1000003ull + i);
			tb->word[n] = fnv1a(tb, tbl_len(n) - 8);
			if (seq % BAD_EVERY == 0) {
				tb->word[n] ^= 1;
				__atomic_fetch_add(&S->bad_published, 1, __ATOMIC_RELAXED);
			}
			if (locus_table_writer_publish(w, tbl_len(n), &err) < 0) {
				rc = -1;
				goto fail;
			}
			__atomic_fetch_add(&S->published, 1, __ATOMIC_RELEASE);
			sched_yield(); /* with free slots it never waits: share the cores */
		}
		locus_table_writer_close(w);
		w = NULL;
	}
	_exit(0);
fail:
	S->writer_rc = rc;
	snprintf(S->writer_msg, sizeof(S->writer_msg), "%s", err.msg);
	_exit(1);
}

static void reader_fail(struct reader_arg *a, const char *what, uint64_t seq)
{
	if (!a->errors++)
		snprintf(a->first_error, sizeof(a->first_error), "reader %u: %s (seq %llu)",
			 a->idx, what, (unsigned long long)seq);
}

static void *reader_main(void *p)
{
	struct reader_arg *a = p;
	struct locus_table_reader r;
	struct locus_error err;
	uint64_t last_seq = 0, it = 0;

	if (locus_table_reader_register(a->t, 0, a->idx, validate, NULL, &r, &err) < 0) {
		reader_fail(a, err.msg, 0);
		return NULL;
	}
	while (!__atomic_load_n(&S->stop, __ATOMIC_ACQUIRE)) {
		const struct tbl *t;
		size_t len;
		int rc = locus_table_reader_poll(&r);

		it++;
		t = locus_table_reader_table(&r, &len);
		if (rc == 1) {
			a->switches++;
			/* the switch itself: whole table, newer than the last one */
			if (tbl_check(t, len) != 0)
				reader_fail(a, "switched to an invalid table", t->seq);
			if (t->seq <= last_seq)
				reader_fail(a, "sequence went backwards", t->seq);
			last_seq = t->seq;
		} else if (rc < 0) {
			a->refusals++;
			if (rc != -EBAD)
				a->bad_refusals++; /* refused for anything but the planted fault */
		}
		if (!t)
			continue;
		/* one read per iteration, checked against the pattern */
		{
			uint32_t i = (uint32_t)(it % t->nwords);

			if (t->word[i] != splitmix(t->seq * 1000003ull + i))
				reader_fail(a, "read a word that changed under us", t->seq);
			/* single writer; main polls it while we run */
			__atomic_store_n(&a->reads, a->reads + 1, __ATOMIC_RELAXED);
		}
		if ((it & 1023) == 0) {
			a->full_checks++;
			if (tbl_check(t, len) != 0)
				reader_fail(a, "table in use changed under us", t->seq);
		}
		/* this box oversubscribes its cores (unlike pinned lcores): let a
		 * descheduled peer run, or the writer waits a timeslice per publish */
		if ((it & 63) == 0)
			sched_yield();
		if (a->churn && (it % 200003) == 0) {
			locus_table_reader_offline(&r);
			locus_table_reader_online(&r);
			last_seq = 0; /* we may land on the same table again */
		}
	}
	locus_table_reader_unregister(&r);
	return NULL;
}

static void run(unsigned n_slots, unsigned n_writers)
{
	struct locus_table_params p = { .n_channels = 1, .n_readers = N_READERS + 1 };
	struct reader_arg ra[N_READERS];
	pthread_t th[N_READERS];
	struct locus_table_region *t;
	struct locus_error err;
	uint64_t reads, switches, refusals;
	struct timespec t0, t1;
	size_t size;
	void *mem;
	pid_t pid[2];
	int status = 0, writers_ok = 1, capped = 0;

	assert_true(n_writers >= 1 && n_writers <= 2);
	p.channel[0].n_slots = n_slots;
	p.channel[0].slot_size = SLOT_SIZE;
	size = locus_table_region_size(&p);
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	S = mmap(NULL, sizeof(*S), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(mem != MAP_FAILED && S != MAP_FAILED);
	memset(S, 0, sizeof(*S));
	assert_int_equal(locus_table_region_init(mem, size, &p, &err), 0);
	assert_int_equal(locus_table_region_attach(mem, size, &t, &err), 0);

	memset(ra, 0, sizeof(ra));
	for (unsigned i = 0; i < N_READERS; i++) {
		ra[i].t = t;
		ra[i].idx = i;
		ra[i].churn = (i == 1);
		assert_int_equal(pthread_create(&th[i], NULL, reader_main, &ra[i]), 0);
	}
	for (unsigned i = 0; i < n_writers; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0)
			writer_main(t, n_writers == 1 ? UINT32_MAX : 16);
	}

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct timespec ts = { 0, 5000000 };

		reads = 0;
		for (unsigned i = 0; i < N_READERS; i++)
			reads += __atomic_load_n(&ra[i].reads, __ATOMIC_RELAXED);
		if (reads >= MIN_READS &&
		    __atomic_load_n(&S->published, __ATOMIC_ACQUIRE) >= MIN_PUBLISHES)
			break;
		if (__atomic_load_n(&S->writer_rc, __ATOMIC_RELAXED))
			break; /* a writer gave up: reported below */
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec > SAFETY_CAP_S) {
			capped = 1;
			break;
		}
		nanosleep(&ts, NULL);
	}
	__atomic_store_n(&S->stop, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < N_READERS; i++)
		pthread_join(th[i], NULL);
	for (unsigned i = 0; i < n_writers; i++) {
		assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			writers_ok = 0;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);

	reads = switches = refusals = 0;
	for (unsigned i = 0; i < N_READERS; i++) {
		if (ra[i].errors)
			print_error("%s\n", ra[i].first_error);
		assert_int_equal(ra[i].errors, 0);
		assert_int_equal(ra[i].bad_refusals, 0);
		assert_true(ra[i].switches > 0);
		assert_true(ra[i].full_checks > 0);
		reads += ra[i].reads;
		switches += ra[i].switches;
		refusals += ra[i].refusals;
	}
	if (!writers_ok)
		print_error("writer: rc %d: %s\n", S->writer_rc, S->writer_msg);
	assert_true(writers_ok);
	print_message("  %u slots, %u writer(s), %llu lock holds: %llu publishes (%llu bad), "
		      "%llu reads, %llu switches, %llu refusals in %.2f s\n", n_slots, n_writers,
		      (unsigned long long)S->lock_handoffs,
		      (unsigned long long)S->published, (unsigned long long)S->bad_published,
		      (unsigned long long)reads, (unsigned long long)switches,
		      (unsigned long long)refusals,
		      (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	if (capped)
		print_message("  (the %d s cap came first: the machine is busy)\n", SAFETY_CAP_S);
	assert_true(S->published >= (capped ? MIN_PUBLISHES / 10 : MIN_PUBLISHES));
	if (n_writers > 1)
		assert_true(S->lock_handoffs > 1);
	assert_true(reads >= (capped ? MIN_READS / 10 : MIN_READS));
	assert_true(S->bad_published > 0);
	assert_true(refusals > 0);

	locus_table_region_detach(t);
	munmap(mem, size);
	munmap(S, sizeof(*S));
}

static void test_torture_two_slots(void **state)
{
	(void)state;
	run(2, 1);
}

static void test_torture_three_slots(void **state)
{
	(void)state;
	run(3, 1);
}

static void test_torture_two_writers(void **state)
{
	(void)state;
	run(2, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_torture_two_slots),
		cmocka_unit_test(test_torture_three_slots),
		cmocka_unit_test(test_torture_two_writers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
