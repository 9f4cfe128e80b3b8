// SPDX-License-Identifier: MIT
/*
 * A client learns that its locusd is gone. The daemon is a forked child
 * that creates the segment, answers claims and echoes every descriptor back
 * as its completion; the test kills it with SIGKILL
 *   - while the client polls: the completions posted before the kill come
 *     first, then poll returns -ENOTCONN within a bound (and never while the
 *     daemon lives); a new daemon takes the instance over and the client
 *     attaches again and is served;
 *   - while the client waits for the answer to its claim: attach fails with
 *     -ENOTCONN long before its time-out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_shm.h"

#define DEATH_BOUND_MS (LOCUS_CLIENT_CHECK_MS + 400) /* poll's period, plus a loaded box */

static char shm_dir[64];

static const struct locus_clients_params params = {
	.n_slots = 2,
	.ring_size = 16,
	.stage_size = 64 * 1024,
	.inbox_slots = 4,
	.inbox_slot_size = 16384,
};

enum { ANSWER = 0, KILL_ON_CLAIM = 1 };

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void nap_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * The daemon (child process): create the segment, say so on the pipe, then
 * answer claims and echo submissions until killed. KILL_ON_CLAIM: die by
 * SIGKILL 100 ms after seeing a claim, without answering it.
 */
static void daemon_main(const char *instance, int mode, int ready_fd)
{
	struct locus_shm_params sp = { .instance = instance };
	struct locus_ring_end sub[2], cpl[2];
	int active[2] = { 0, 0 };
	struct locus_clients v;
	struct locus_shm *shm;
	size_t size;
	void *region;

	sp.region_size[LOCUS_REGION_CLIENTS] = locus_clients_region_size(&params);
	if (locus_shm_create(&sp, &shm, NULL) != 0)
		_exit(10);
	region = locus_shm_region(shm, LOCUS_REGION_CLIENTS, &size);
	if (locus_clients_init(region, size, &params) || locus_clients_open(&v, region, size))
		_exit(11);
	locus_shm_set_state(shm, LOCUS_SHM_RUNNING);
	if (write(ready_fd, "r", 1) != 1)
		_exit(12);
	for (;;) {
		for (uint32_t i = 0; i < params.n_slots; i++) {
			int ev = locus_clients_check(&v, i);
			struct locus_desc d;

			if (ev == LOCUS_CLIENTS_CLAIM && mode == KILL_ON_CLAIM) {
				nap_ms(100);
				raise(SIGKILL);
			}
			if (ev == LOCUS_CLIENTS_CLAIM && locus_clients_activate(&v, i, 0) == 0) {
				locus_ring_attach(&sub[i], locus_clients_submit_ring(&v, i), v.ring_bytes,
						  params.ring_size, LOCUS_DESC_SIZE, 0);
				locus_ring_attach(&cpl[i], locus_clients_completion_ring(&v, i),
						  v.ring_bytes, params.ring_size, LOCUS_DESC_SIZE, 1);
				active[i] = 1;
			} else if (ev == LOCUS_CLIENTS_GONE) {
				active[i] = 0;
				locus_clients_release(&v, i);
			}
			while (active[i] && locus_ring_free_count(&cpl[i]) &&
			       locus_ring_dequeue_burst(&sub[i], &d, 1) == 1)
				locus_ring_enqueue_burst(&cpl[i], &d, 1);
		}
		nap_ms(1);
	}
}

/* Fork a daemon for instance; returns once its segment takes clients. */
static pid_t daemon_start(const char *instance, int mode)
{
	int fds[2];
	char c;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		daemon_main(instance, mode, fds[1]);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &c, 1), 1);
	close(fds[0]);
	return pid;
}

static void daemon_kill(pid_t pid)
{
	int status;

	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static struct locus_client *attach(const char *instance)
{
	struct locus_client_req req = { .roles = LOCUS_ROLE_PREFILL, .timeout_ms = 5000 };
	struct locus_client *c = NULL;
	struct locus_error e;

	if (locus_client_attach(instance, &req, &c, &e) != 0)
		fail_msg("attach: %s", e.msg);
	return c;
}

/* Submit n descriptors with ids from id0 and collect their n echoes, bounded. */
static void roundtrip(struct locus_client *c, uint64_t id0, uint32_t n)
{
	struct locus_desc d = { .op = LOCUS_OP_ROUTE };
	uint32_t got = 0;

	for (uint32_t i = 0; i < n; i++) {
		d.id = id0 + i;
		assert_int_equal(locus_client_submit(c, &d, 1), 1);
	}
	for (int w = 0; w < 5000 && got < n; w++) {
		int r = locus_client_poll(c, &d, 1);

		assert_true(r >= 0);
		if (r == 1)
			assert_int_equal(d.id, id0 + got++);
		else
			nap_ms(1);
	}
	assert_int_equal(got, n);
}

static void test_poll_learns_death_then_reattach(void **state)
{
	const char *inst = "t-death-poll";
	struct locus_client *c;
	struct locus_desc d[4] = { { .op = LOCUS_OP_ROUTE } };
	uint64_t t0, t_kill, learned = 0;
	uint32_t got = 0;
	pid_t pid;
	int r;
	(void)state;

	pid = daemon_start(inst, ANSWER);
	c = attach(inst);
	roundtrip(c, 1, 3);
	/* a live daemon that has nothing to say is not taken for a dead one */
	t0 = now_ms();
	while (now_ms() - t0 < 3 * LOCUS_CLIENT_CHECK_MS) {
		assert_int_equal(locus_client_poll(c, d, 4), 0);
		nap_ms(1);
	}
	assert_int_equal(locus_client_check(c), 0);

	/* two answers are posted, then the daemon dies before we read them */
	for (uint64_t i = 0; i < 2; i++) {
		d[0].id = 100 + i;
		assert_int_equal(locus_client_submit(c, &d[0], 1), 1);
	}
	nap_ms(50);
	t_kill = now_ms();
	daemon_kill(pid);
	while (now_ms() - t_kill < 5000) {
		r = locus_client_poll(c, d, 4);
		if (r < 0) {
			assert_int_equal(r, -ENOTCONN);
			learned = now_ms();
			break;
		}
		for (int i = 0; i < r; i++)
			assert_int_equal(d[i].id, 100 + got++);
		nap_ms(1);
	}
	assert_int_equal(got, 2);
	assert_true(learned > 0);
	print_message("poll returned -ENOTCONN %llu ms after the SIGKILL\n",
		      (unsigned long long)(learned - t_kill));
	assert_true(learned - t_kill <= DEATH_BOUND_MS);
	/* for good */
	assert_int_equal(locus_client_poll(c, d, 4), -ENOTCONN);
	assert_int_equal(locus_client_check(c), -ENOTCONN);
	locus_client_detach(c);

	/* a new daemon takes the instance over (a new segment): attach again, served */
	pid = daemon_start(inst, ANSWER);
	c = attach(inst);
	roundtrip(c, 200, 3);
	assert_int_equal(locus_client_check(c), 0);
	locus_client_detach(c);
	daemon_kill(pid);
	assert_int_equal(locus_shm_remove(inst), 0);
}

static void test_attach_learns_death(void **state)
{
	const char *inst = "t-death-attach";
	struct locus_client_req req = { .roles = LOCUS_ROLE_PREFILL, .timeout_ms = 10000 };
	struct locus_client *c = NULL;
	struct locus_error e = { 0 };
	uint64_t t0, took;
	pid_t pid;
	int ret, status;
	(void)state;

	pid = daemon_start(inst, KILL_ON_CLAIM);
	t0 = now_ms();
	ret = locus_client_attach(inst, &req, &c, &e);
	took = now_ms() - t0;
	print_message("attach: %d (%s) after %llu ms, time-out 10000 ms\n", ret, e.msg,
		      (unsigned long long)took);
	assert_int_equal(ret, -ENOTCONN);
	assert_null(c);
	assert_non_null(strstr(e.msg, "died before answering"));
	/* the daemon dies 100 ms after the claim; we look every 50 ms */
	assert_true(took <= 100 + DEATH_BOUND_MS);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(locus_shm_remove(inst), 0);
}

static int setup(void **state)
{
	(void)state;
	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-death-test-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return rmdir(shm_dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_poll_learns_death_then_reattach),
		cmocka_unit_test(test_attach_learns_death),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
