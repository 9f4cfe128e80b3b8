// SPDX-License-Identifier: MIT
/* SPSC shared-memory ring: bursts, full ring, wrap, hostile indices, two processes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_ring.h"

struct ent {
	uint64_t seq;
	uint64_t check;
};

static void *shared_mem(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

static void test_geometry(void **state)
{
	uint8_t *mem = shared_mem(1 << 16);
	struct locus_ring_end e;
	(void)state;

	assert_int_equal(locus_ring_init(mem, 1 << 16, 12, 16), -EINVAL);  /* not pow2 */
	assert_int_equal(locus_ring_init(mem, 1 << 16, 16, 12), -EINVAL);  /* esize % 8 */
	assert_int_equal(locus_ring_init(mem + 8, 1 << 16, 16, 16), -EINVAL); /* alignment */
	assert_int_equal(locus_ring_init(mem, locus_ring_bytes(16, 16) - 1, 16, 16), -EINVAL);
	assert_int_equal(locus_ring_attach(&e, mem, 1 << 16, 16, 16, 0), -LOCUS_EBADMAGIC);
	assert_int_equal(locus_ring_init(mem, 1 << 16, 16, 16), 0);
	assert_int_equal(locus_ring_attach(&e, mem, 1 << 16, 32, 16, 0), -LOCUS_ERANGE);
	assert_int_equal(locus_ring_attach(&e, mem, 100, 16, 16, 0), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_ring_attach(&e, mem, 1 << 16, 16, 16, 0), 0);
	munmap(mem, 1 << 16);
}

static void test_full_and_wrap(void **state)
{
	uint8_t *mem = shared_mem(1 << 16);
	struct locus_ring_end p, c;
	struct ent in[20], out[20];
	uint64_t next_in = 0, next_out = 0;
	(void)state;

	assert_int_equal(locus_ring_init(mem, 1 << 16, 8, sizeof(struct ent)), 0);
	assert_int_equal(locus_ring_attach(&p, mem, 1 << 16, 8, sizeof(struct ent), 1), 0);
	assert_int_equal(locus_ring_attach(&c, mem, 1 << 16, 8, sizeof(struct ent), 0), 0);
	assert_int_equal(locus_ring_dequeue_burst(&c, out, 4), 0);
	for (int i = 0; i < 20; i++)
		in[i] = (struct ent){ .seq = next_in + i, .check = ~(next_in + i) };
	/* a burst larger than the ring goes in partially; then the ring is full */
	assert_int_equal(locus_ring_enqueue_burst(&p, in, 20), 8);
	next_in += 8;
	assert_int_equal(locus_ring_enqueue_burst(&p, in, 1), 0);
	assert_int_equal(locus_ring_free_count(&p), 0);
	assert_int_equal(locus_ring_count(&c), 8);
	/* many wraps with odd burst sizes: order and content preserved */
	for (int round = 0; round < 1000; round++) {
		uint32_t n = (uint32_t)(round % 7) + 1;
		int64_t got = locus_ring_dequeue_burst(&c, out, n);

		assert_true(got >= 1);
		for (int64_t i = 0; i < got; i++) {
			assert_int_equal(out[i].seq, next_out);
			assert_int_equal(out[i].check, ~next_out);
			next_out++;
		}
		for (uint32_t i = 0; i < n; i++)
			in[i] = (struct ent){ .seq = next_in + i, .check = ~(next_in + i) };
		got = locus_ring_enqueue_burst(&p, in, n);
		assert_true(got >= 0);
		next_in += (uint64_t)got;
		assert_true(next_in - next_out <= 8);
	}
	munmap(mem, 1 << 16);
}

static void test_hostile_indices(void **state)
{
	uint8_t *mem = shared_mem(1 << 16);
	struct locus_ring *r = (struct locus_ring *)mem;
	struct locus_ring_end p, c;
	struct ent e[4] = { 0 };
	(void)state;

	assert_int_equal(locus_ring_init(mem, 1 << 16, 8, sizeof(struct ent)), 0);
	assert_int_equal(locus_ring_attach(&c, mem, 1 << 16, 8, sizeof(struct ent), 0), 0);
	/* a producer claiming more entries than the ring holds */
	r->head = 9;
	assert_int_equal(locus_ring_dequeue_burst(&c, e, 4), -LOCUS_EPROTO);
	assert_int_equal(locus_ring_count(&c), -LOCUS_EPROTO);
	/* a head that goes backwards */
	r->head = 3;
	assert_int_equal(locus_ring_count(&c), 3);
	r->head = 2;
	assert_int_equal(locus_ring_count(&c), -LOCUS_EPROTO);
	/* attach refuses an impossible pair */
	r->head = 20;
	r->tail = 3;
	assert_int_equal(locus_ring_attach(&c, mem, 1 << 16, 8, sizeof(struct ent), 0), -LOCUS_EPROTO);
	/* a consumer tail beyond the producer's head */
	r->head = 0;
	r->tail = 0;
	assert_int_equal(locus_ring_attach(&p, mem, 1 << 16, 8, sizeof(struct ent), 1), 0);
	assert_int_equal(locus_ring_enqueue_burst(&p, e, 4), 4);
	assert_int_equal(locus_ring_enqueue_burst(&p, e, 4), 4);
	r->tail = 50;
	assert_int_equal(locus_ring_enqueue_burst(&p, e, 1), -LOCUS_EPROTO);
	/* the shared geometry is not re-read: corrupting it changes nothing */
	r->tail = 8;
	r->size = 1u << 30;
	assert_int_equal(locus_ring_enqueue_burst(&p, e, 4), 4);
	assert_int_equal(locus_ring_free_count(&p), 4);
	munmap(mem, 1 << 16);
}

#define XPROC_N 2000000ull

static void test_two_processes(void **state)
{
	size_t len = locus_ring_bytes(256, sizeof(struct ent));
	uint8_t *mem = shared_mem(len);
	struct locus_ring_end c;
	struct ent buf[32];
	uint64_t next = 0;
	int status;
	pid_t pid;
	(void)state;

	assert_int_equal(locus_ring_init(mem, len, 256, sizeof(struct ent)), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct locus_ring_end p;
		uint64_t sent = 0;

		if (locus_ring_attach(&p, mem, len, 256, sizeof(struct ent), 1))
			_exit(2);
		while (sent < XPROC_N) {
			uint32_t n = (uint32_t)((sent * 2654435761u) % 32) + 1;
			int64_t got;

			if (n > XPROC_N - sent)
				n = (uint32_t)(XPROC_N - sent);
			for (uint32_t i = 0; i < n; i++)
				buf[i] = (struct ent){ .seq = sent + i, .check = (sent + i) * 0x9e3779b97f4a7c15ull };
			got = locus_ring_enqueue_burst(&p, buf, n);
			if (got < 0)
				_exit(3);
			sent += (uint64_t)got;
		}
		_exit(0);
	}
	assert_int_equal(locus_ring_attach(&c, mem, len, 256, sizeof(struct ent), 0), 0);
	while (next < XPROC_N) {
		int64_t got = locus_ring_dequeue_burst(&c, buf, 32);

		assert_true(got >= 0);
		for (int64_t i = 0; i < got; i++) {
			if (buf[i].seq != next || buf[i].check != next * 0x9e3779b97f4a7c15ull)
				fail_msg("entry %llu: got seq %llu", (unsigned long long)next,
					 (unsigned long long)buf[i].seq);
			next++;
		}
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(locus_ring_dequeue_burst(&c, buf, 1), 0);
	munmap(mem, len);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_full_and_wrap),
		cmocka_unit_test(test_hostile_indices),
		cmocka_unit_test(test_two_processes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
