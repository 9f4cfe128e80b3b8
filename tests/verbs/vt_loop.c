// SPDX-License-Identifier: MIT
/*
 * Soft-RoCE tests of the verbs loopback (locus_verbs_loop.h), run in the
 * qemu guest after vt_verbs: gathers of scattered ranges land byte for byte,
 * copies end once each in posting order, ranges outside the area and a full
 * send queue are refused with nothing posted, the area of one loop cannot be
 * named by another loop's rkey-less API (offsets only); an area registered
 * in chunks (locusd: one per client slot) refuses ranges across chunks, and
 * a chunk whose memory was replaced (a freed slot's fresh memfd) is written
 * in its new pages once registered again, never in the old ones.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_err.h"
#include "locus_verbs_loop.h"

#define DEV   "rxe0"
#define AREA  (4u << 20)

static uint8_t *area;
static uint64_t ended[4096];
static int n_ended, bad_status;

static void on_done(void *arg, uint64_t cookie, int status)
{
	(void)arg;
	if (status)
		bad_status++;
	if (n_ended < 4096)
		ended[n_ended++] = cookie;
}

static void drain(struct locus_verbs_loop *l)
{
	for (long spins = 0; locus_verbs_loop_inflight(l) && spins < 200000000L; spins++)
		locus_verbs_loop_poll(l, on_done, NULL);
	assert_int_equal(locus_verbs_loop_inflight(l), 0);
}

static uint32_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (uint32_t)*s;
}

/* 200 copies of 1..100 scattered ranges each, gathered to the upper half */
static void test_gather_copies(void **state)
{
	struct locus_verbs_loop *l;
	struct locus_error err;
	struct locus_verbs_loop_src src[100];
	uint64_t seed = 42;
	(void)state;

	for (uint32_t i = 0; i < AREA / 2; i++)
		area[i] = (uint8_t)(i * 7 + (i >> 9));
	memset(area + AREA / 2, 0, AREA / 2);
	assert_int_equal(locus_verbs_loop_create(DEV, area, AREA, 256, &l, &err), 0);
	assert_true(locus_verbs_loop_max_sge(l) >= 1);
	n_ended = bad_status = 0;
	for (int c = 0; c < 200; c++) {
		uint32_t n = 1 + rnd(&seed) % 100, total = 0;
		uint64_t dst = AREA / 2 + (uint64_t)(rnd(&seed) % 1024) * 1024;
		int ret;

		for (uint32_t i = 0; i < n; i++) {
			src[i].len = 1 + rnd(&seed) % 700;
			src[i].off = rnd(&seed) % (AREA / 2 - src[i].len);
			total += src[i].len;
		}
		if (dst + total > AREA)
			dst = AREA - total;
		while ((ret = locus_verbs_loop_copy(l, dst, src, n, 1000 + c)) == -LOCUS_EFULL)
			locus_verbs_loop_poll(l, on_done, NULL);
		assert_int_equal(ret, 0);
		drain(l);
		/* every byte where the gather put it */
		for (uint32_t i = 0, at = 0; i < n; at += src[i].len, i++)
			assert_memory_equal(area + dst + at, area + src[i].off, src[i].len);
	}
	assert_int_equal(n_ended, 200);
	assert_int_equal(bad_status, 0);
	for (int c = 0; c < 200; c++)
		assert_int_equal(ended[c], 1000 + c);
	assert_int_equal(locus_verbs_loop_stats(l)->copies, 200);
	assert_int_equal(locus_verbs_loop_stats(l)->errors, 0);
	locus_verbs_loop_destroy(l);
}

/* refusals: outside the area, empty, queue full; nothing posted by any of them */
static void test_refusals(void **state)
{
	struct locus_verbs_loop *l;
	struct locus_error err;
	struct locus_verbs_loop_src s = { .off = 0, .len = 64 };
	struct locus_verbs_loop_src out = { .off = AREA - 32, .len = 64 };
	int posted = 0, ret;
	(void)state;

	assert_int_equal(locus_verbs_loop_create(DEV, area, AREA, 4, &l, &err), 0);
	assert_int_equal(locus_verbs_loop_copy(l, 4096, &out, 1, 1), -ERANGE);
	assert_int_equal(locus_verbs_loop_copy(l, AREA - 16, &s, 1, 1), -ERANGE);
	assert_int_equal(locus_verbs_loop_copy(l, 4096, &s, 0, 1), -ERANGE);
	assert_int_equal(locus_verbs_loop_inflight(l), 0);
	n_ended = bad_status = 0;
	/* depth 4: the fifth copy before any completion is polled finds the queue full */
	while ((ret = locus_verbs_loop_copy(l, 8192 + 64 * posted, &s, 1, 50 + posted)) == 0)
		posted++;
	assert_int_equal(ret, -LOCUS_EFULL);
	assert_int_equal(posted, 4);
	assert_true(locus_verbs_loop_stats(l)->full >= 1);
	drain(l);
	assert_int_equal(n_ended, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(ended[i], 50 + i);
	assert_int_equal(bad_status, 0);
	locus_verbs_loop_destroy(l);
	/* a device that does not exist */
	assert_true(locus_verbs_loop_create("nosuchdev", area, AREA, 4, &l, &err) < 0);
	assert_non_null(strstr(err.msg, "nosuchdev"));
}

#define CHUNK (1u << 20)
#define HEAD  4096u

static int chunk_object(void)
{
	int fd = memfd_create("vt-chunk", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, CHUNK), 0);
	return fd;
}

static void map_chunk(uint8_t *base, unsigned i, int fd)
{
	void *at = base + HEAD + (size_t)i * CHUNK;

	assert_true(mmap(at, CHUNK, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == at);
}

/* one MR per chunk: ranges across chunks refused, a replaced chunk written in its new pages */
static void test_chunks_renewed(void **state)
{
	struct locus_verbs_loop_area a = { .len = HEAD + 2 * CHUNK, .chunk_off = HEAD,
					   .chunk_len = CHUNK, .n_chunks = 2 };
	struct locus_verbs_loop_src s = { .off = HEAD, .len = 4096 };
	struct locus_verbs_loop_src across = { .off = HEAD + CHUNK - 64, .len = 128 };
	struct locus_verbs_loop_src head = { .off = 0, .len = 64 };
	struct locus_verbs_loop *l;
	struct locus_error err;
	uint8_t *base, *old;
	int c0 = chunk_object(), c1 = chunk_object(), fresh = chunk_object();
	(void)state;

	base = mmap(NULL, a.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(base != MAP_FAILED);
	map_chunk(base, 0, c0);
	map_chunk(base, 1, c1);
	old = mmap(NULL, CHUNK, PROT_READ, MAP_SHARED, c1, 0); /* what a stale holder sees */
	assert_true(old != MAP_FAILED);
	for (uint32_t i = 0; i < CHUNK; i++)
		base[HEAD + i] = (uint8_t)(i * 13 + 1);
	a.addr = base;
	assert_int_equal(locus_verbs_loop_create_area(DEV, &a, 16, &l, &err), 0);

	n_ended = bad_status = 0;
	assert_int_equal(locus_verbs_loop_copy(l, HEAD + CHUNK, &s, 1, 1), 0);
	drain(l);
	assert_memory_equal(base + HEAD + CHUNK, base + HEAD, 4096);
	assert_memory_equal(old, base + HEAD, 4096);
	/* nothing may cross a chunk's end, nor name the head outside every chunk */
	assert_int_equal(locus_verbs_loop_copy(l, HEAD + CHUNK, &across, 1, 2), -ERANGE);
	assert_int_equal(locus_verbs_loop_copy(l, HEAD + CHUNK - 64, &s, 1, 2), -ERANGE);
	assert_int_equal(locus_verbs_loop_copy(l, HEAD + CHUNK, &head, 1, 2), -ERANGE);
	assert_int_equal(locus_verbs_loop_inflight(l), 0);

	/* chunk 1 replaced (a freed slot's fresh memfd), registered again */
	map_chunk(base, 1, fresh);
	assert_int_equal(locus_verbs_loop_rereg(l, 1, &err), 0);
	s.off = HEAD + 8192;
	assert_int_equal(locus_verbs_loop_copy(l, HEAD + CHUNK + 8192, &s, 1, 3), 0);
	drain(l);
	assert_memory_equal(base + HEAD + CHUNK + 8192, base + HEAD + 8192, 4096);
	for (uint32_t i = 8192; i < 8192 + 4096; i++)
		assert_int_equal(old[i], 0); /* the old object got nothing */
	assert_int_equal(bad_status, 0);
	/* the old MR went once its copies ended: registering again works at once */
	assert_int_equal(locus_verbs_loop_rereg(l, 1, &err), 0);
	assert_int_equal(locus_verbs_loop_rereg(l, 2, &err), -ERANGE);
	locus_verbs_loop_destroy(l);
	munmap(old, CHUNK);
	munmap(base, a.len);
	close(c0);
	close(c1);
	close(fresh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gather_copies),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_chunks_renewed),
	};

	area = aligned_alloc(4096, AREA);
	if (!area)
		return 1;
	return cmocka_run_group_tests_name("verbs loopback", tests, NULL, NULL);
}
