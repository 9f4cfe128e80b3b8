// SPDX-License-Identifier: MIT
/*
 * A client learns that its locusd is gone. The daemon is a forked child
 * running a whole node (tests/node_util.c: the control loop that answers
 * attachments over the registration socket, and the engine); the test kills
 * it with SIGKILL
 *   - while the client polls: the completions posted before the kill come
 *     first, then poll returns -ENOTCONN within a bound (and never while the
 *     daemon lives); a new daemon takes the instance over and the client
 *     attaches again and is served;
 *   - while the client waits for the answer to its attachment: attach fails
 *     with -ENOTCONN long before its time-out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"
#include "node_util.h"

#define DEATH_BOUND_MS (LOCUS_CLIENT_CHECK_MS + 400) /* poll's period, plus a loaded box */

static char shm_dir[64];

enum { ANSWER = 0, KILL_UNANSWERED = 1 };

#define KILL_AFTER_MS 300 /* KILL_UNANSWERED: the daemon dies this long after it took clients */

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
 * The daemon (child process): a node for instance, running; say so on the
 * pipe, then serve until killed. KILL_UNANSWERED: the control loop is held
 * (no attachment is answered) and the daemon dies by SIGKILL KILL_AFTER_MS
 * after saying it runs.
 */
static void daemon_main(const char *instance, int mode, int ready_fd)
{
	static struct tu_node t;
	char conf[1024];

	snprintf(conf, sizeof(conf),
		 "[locusd]\ninstance = %s\nclient_slots = 2\nring_size = 16\n"
		 "stage_size = 65536\nclient_inbox_slots = 4\ninbox_slot_size = 16384\n"
		 "moe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\nmax_batch_tokens = 64\n"
		 "table_slot_size = 65536\n"
		 "[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n", instance);
	if (tu_node_start(&t, conf) != 0)
		_exit(10);
	if (mode == KILL_UNANSWERED)
		tu_node_hold(&t, 1);
	if (write(ready_fd, "r", 1) != 1)
		_exit(12);
	if (mode == KILL_UNANSWERED) {
		nap_ms(KILL_AFTER_MS);
		raise(SIGKILL);
	}
	for (;;)
		pause();
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

/*
 * Submit n descriptors with ids from id0 and collect their n completions,
 * bounded (a ROUTE with no signature: each is refused, with its completion).
 */
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

	pid = daemon_start(inst, KILL_UNANSWERED);
	t0 = now_ms();
	ret = locus_client_attach(inst, &req, &c, &e);
	took = now_ms() - t0;
	print_message("attach: %d (%s) after %llu ms, time-out 10000 ms\n", ret, e.msg,
		      (unsigned long long)took);
	assert_int_equal(ret, -ENOTCONN);
	assert_null(c);
	assert_non_null(strstr(e.msg, "died before answering"));
	/* the daemon dies KILL_AFTER_MS after it runs; the kernel closes its socket then */
	assert_true(took <= KILL_AFTER_MS + DEATH_BOUND_MS);
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
	struct dirent *de;
	DIR *d = opendir(shm_dir);
	(void)state;

	/* a killed daemon leaves its sockets behind: the next one replaces them */
	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
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
