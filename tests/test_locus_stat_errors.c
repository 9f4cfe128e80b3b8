// SPDX-License-Identifier: MIT
/*
 * locus-stat error exits, each with its documented code and a message that
 * says what is wrong: usage, no such instance, version mismatch (segment ABI
 * and counter layout), corrupt segment (also one shrunk while being read),
 * no counters yet, and permission (mode, owner, world-writable; run as uid
 * 65534 through setresuid when we are root).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "locus_shm_priv.h"
#include "locus_stat.h"
#include "stat_test_run.h"

static void expect_exit(int want, const char *err_has, const char *const *args)
{
	struct run r;

	run_stat(&r, -1, stat_bin, NULL, args);
	if (r.status != want || (err_has && !strstr(r.err, err_has)))
		fail_msg("locus-stat %s ...: exit %d (want %d), stderr: %s", args[0], r.status,
			 want, r.err);
	run_free(&r);
}

#define EXPECT_EXIT(want, err_has, ...) \
	expect_exit((want), (err_has), (const char *const[]){ __VA_ARGS__, NULL })

static void test_usage_errors(void **state)
{
	struct run r;
	(void)state;

	EXPECT_EXIT(1, "exclude", "-i", "stattest", "--json", "--prometheus");
	EXPECT_EXIT(1, "--count needs --watch", "-i", "stattest", "--count", "2");
	EXPECT_EXIT(1, "--watch", "-i", "stattest", "--watch", "0");
	EXPECT_EXIT(1, "--watch", "-i", "stattest", "--watch", "1s");
	EXPECT_EXIT(1, "--count", "-i", "stattest", "--watch", "1", "--count", "-1");
	EXPECT_EXIT(1, "--prometheus", "-i", "stattest", "--prometheus", "--watch", "1");
	EXPECT_EXIT(1, "bad instance name", "-i", "../etc");
	EXPECT_EXIT(1, NULL, "--no-such-option");
	RUN(&r, "--help");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "Exit codes"));
	run_free(&r);
}

static void test_no_instance(void **state)
{
	(void)state;
	EXPECT_EXIT(LOCUS_STAT_EXIT_NOINSTANCE, "no locus instance \"nosuch\"", "-i", "nosuch");
	/* default instance name when neither -i nor $LOCUS_INSTANCE is given */
	EXPECT_EXIT(LOCUS_STAT_EXIT_NOINSTANCE, "\"default\"", "--json");
}

static void shm_file_patch(const char *instance, off_t off, const void *buf, size_t len)
{
	char path[PATH_MAX];
	int fd;

	assert_int_equal(locus_shm_path(instance, path, sizeof(path)), 0);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, len, off), (ssize_t)len);
	close(fd);
}

static struct locus_ctr_hdr *ctr_hdr(struct locus_shm *shm)
{
	return locus_shm_region(shm, LOCUS_REGION_COUNTERS, NULL);
}

static void test_version_mismatch(void **state)
{
	struct locus_counters *c;
	struct locus_shm *shm;
	uint32_t abi = LOCUS_SHM_ABI_VERSION + 1;
	(void)state;

	shm = small_segment("ctrver", &c);
	ctr_hdr(shm)->version = LOCUS_CTR_VERSION + 1;
	EXPECT_EXIT(LOCUS_STAT_EXIT_VERSION, "layout version", "-i", "ctrver");
	drop_segment(shm, c, "ctrver");

	shm = small_segment("abiver", &c);
	shm_file_patch("abiver", offsetof(struct locus_shm_hdr, abi_version), &abi, sizeof(abi));
	EXPECT_EXIT(LOCUS_STAT_EXIT_VERSION, "ABI version", "-i", "abiver");
	drop_segment(shm, c, "abiver");
}

static void test_corrupt(void **state)
{
	struct locus_counters *c;
	struct locus_shm *shm;
	struct locus_ctr_entry *e;
	uint64_t off, magic = 0x1122334455667788ull;
	(void)state;

	shm = small_segment("ctrbad", &c);
	reg(c, "x", NULL, LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &off);
	e = (struct locus_ctr_entry *)((char *)ctr_hdr(shm) + ctr_hdr(shm)->dir_off);
	e->offset = 256;
	EXPECT_EXIT(LOCUS_STAT_EXIT_CORRUPT, "beyond", "-i", "ctrbad");
	e->offset = 0;
	e->name[0] = 'X';
	EXPECT_EXIT(LOCUS_STAT_EXIT_CORRUPT, "name", "-i", "ctrbad");
	ctr_hdr(shm)->magic = magic;
	EXPECT_EXIT(LOCUS_STAT_EXIT_CORRUPT, "bad magic", "-i", "ctrbad");
	drop_segment(shm, c, "ctrbad");

	shm = small_segment("segbad", &c);
	shm_file_patch("segbad", 0, &magic, sizeof(magic));
	EXPECT_EXIT(LOCUS_STAT_EXIT_CORRUPT, "not a locus segment", "-i", "segbad");
	drop_segment(shm, c, "segbad");
}

static void test_no_counters(void **state)
{
	struct locus_shm_params sp = { .instance = "noctr" };
	struct locus_shm *shm;
	(void)state;

	shm = make_segment("uninit", 4096, NULL, NULL);
	locus_shm_set_state(shm, LOCUS_SHM_STARTING);
	EXPECT_EXIT(LOCUS_STAT_EXIT_NOCOUNTERS, "state starting): counters not initialised",
		    "-i", "uninit");
	drop_segment(shm, NULL, "uninit");

	sp.region_size[2] = 4096; /* a region, but not the counters */
	assert_int_equal(locus_shm_create(&sp, &shm, NULL), 0);
	EXPECT_EXIT(LOCUS_STAT_EXIT_NOCOUNTERS, "no counters region", "-i", "noctr");
	drop_segment(shm, NULL, "noctr");
}

static void test_permission(void **state)
{
	char path[PATH_MAX], bin[sizeof(stat_tmpdir) + 16], cmd[2 * PATH_MAX];
	struct locus_counters *c;
	struct locus_shm *shm;
	struct run r;
	(void)state;

	if (geteuid() != 0)
		skip(); /* needs chown and setresuid */
	snprintf(bin, sizeof(bin), "%s/locus-stat", stat_tmpdir);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && chmod 0755 '%s'", stat_bin, bin, bin);
	assert_int_equal(system(cmd), 0);
	shm = small_segment("perm", &c);
	assert_int_equal(locus_shm_path("perm", path, sizeof(path)), 0);

	/* mode 0600, root's: the OS refuses uid 65534 */
	assert_int_equal(chmod(path, 0600), 0);
	run_stat(&r, 65534, bin, NULL, (const char *const[]){ "-i", "perm", NULL });
	if (r.status != LOCUS_STAT_EXIT_PERM || !strstr(r.err, "permission denied"))
		fail_msg("as uid 65534: exit %d, stderr %s", r.status, r.err);
	run_free(&r);
	/* mode 0660 but root:root, and 65534 is not in group root */
	assert_int_equal(chmod(path, 0660), 0);
	run_stat(&r, 65534, bin, NULL, (const char *const[]){ "-i", "perm", NULL });
	assert_int_equal(r.status, LOCUS_STAT_EXIT_PERM);
	run_free(&r);
	/* owned by another user whose group we are not in */
	assert_int_equal(chown(path, 65534, 65534), 0);
	EXPECT_EXIT(LOCUS_STAT_EXIT_PERM, "owned by uid 65534", "-i", "perm");
	/* world-writable */
	assert_int_equal(chown(path, 0, 0), 0);
	assert_int_equal(chmod(path, 0666), 0);
	EXPECT_EXIT(LOCUS_STAT_EXIT_PERM, "world-writable", "-i", "perm");
	assert_int_equal(chmod(path, 0660), 0);
	EXPECT_EXIT(0, NULL, "-i", "perm");
	drop_segment(shm, c, "perm");
}

static const char *shrink_path;
static int shrink_ticks; /* 1 once truncated */

/* Once locus-stat has printed its first sample, pull the pages from under it. */
static void shrink_later(int out_fd)
{
	struct stat st;

	if (shrink_ticks || fstat(out_fd, &st) < 0 || st.st_size == 0)
		return;
	shrink_ticks = 1;
	assert_int_equal(truncate(shrink_path, 0), 0);
}

/* A segment truncated under a running locus-stat: exit 5, not SIGBUS. */
static void test_shrunk_segment(void **state)
{
	char path[PATH_MAX];
	struct locus_counters *c;
	struct locus_shm *shm;
	struct run r;
	(void)state;

	shm = small_segment("shrink", &c);
	assert_int_equal(locus_shm_path("shrink", path, sizeof(path)), 0);
	shrink_path = path;
	shrink_ticks = 0;
	run_stat(&r, -1, stat_bin, shrink_later, (const char *const[]){
		"-i", "shrink", "--json", "--watch", "0.01", "--count", "1000", NULL });
	assert_int_equal(shrink_ticks, 1);
	if (r.status != LOCUS_STAT_EXIT_CORRUPT || !strstr(r.err, "shrank"))
		fail_msg("exit %d, stderr %s", r.status, r.err);
	assert_non_null(strstr(r.out, "\"instance\":\"shrink\"")); /* it ran before */
	run_free(&r);
	/* our own mapping lost its pages too: unmap without touching them */
	locus_counters_close(c);
	locus_shm_detach(shm);
	assert_int_equal(locus_shm_remove("shrink"), 0);
}

static struct locus_ctr_hdr *corrupt_hdr;
static int corrupted;

static void corrupt_later(int out_fd)
{
	struct stat st;

	if (corrupted || fstat(out_fd, &st) < 0 || st.st_size == 0)
		return;
	corrupted = 1;
	__atomic_store_n(&corrupt_hdr->n_entries, 0, __ATOMIC_RELEASE);
}

/* The directory goes bad between two --watch samples: exit 5, say why. */
static void test_corrupted_while_watching(void **state)
{
	struct locus_counters *c;
	struct locus_shm *shm;
	struct run r;
	uint64_t off;
	(void)state;

	shm = small_segment("watchbad", &c);
	reg(c, "x", NULL, LOCUS_CTR_COUNTER, 0, 0, 0, NULL, NULL, &off);
	corrupt_hdr = ctr_hdr(shm);
	corrupted = 0;
	run_stat(&r, -1, stat_bin, corrupt_later, (const char *const[]){
		"-i", "watchbad", "--watch", "0.01", "--count", "1000", NULL });
	assert_int_equal(corrupted, 1);
	if (r.status != LOCUS_STAT_EXIT_CORRUPT || !strstr(r.err, "entry count 0"))
		fail_msg("exit %d, stderr %s", r.status, r.err);
	run_free(&r);
	drop_segment(shm, c, "watchbad");
}

/* Output that cannot be written (a full disk) is an error, not silence. */
static void test_output_failure(void **state)
{
	struct locus_counters *c;
	struct locus_shm *shm;
	int full, st, err_fd;
	char buf[512] = "";
	pid_t pid;
	(void)state;

	full = open("/dev/full", O_WRONLY);
	if (full < 0)
		skip();
	err_fd = memfd_create("stderr", 0);
	assert_true(err_fd >= 0);
	shm = small_segment("fullout", &c);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(30);
		dup2(full, 1);
		dup2(err_fd, 2);
		execl(stat_bin, stat_bin, "-i", "fullout", "--json", (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), LOCUS_STAT_EXIT_USAGE);
	assert_true(pread(err_fd, buf, sizeof(buf) - 1, 0) > 0);
	assert_non_null(strstr(buf, "writing the output failed"));
	close(full);
	close(err_fd);
	drop_segment(shm, c, "fullout");
}

static int setup(void **state)
{
	(void)state;
	stat_test_env();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return stat_test_env_cleanup();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_usage_errors),
		cmocka_unit_test(test_no_instance),
		cmocka_unit_test(test_version_mismatch),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_no_counters),
		cmocka_unit_test(test_permission),
		cmocka_unit_test(test_shrunk_segment),
		cmocka_unit_test(test_corrupted_while_watching),
		cmocka_unit_test(test_output_failure),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
