// SPDX-License-Identifier: MIT
/* Helpers of the locus-stat tests: run the binary, build segments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "locus_counters_priv.h"
#include "locus_shm_priv.h"
#include "stat_test_run.h"

char stat_tmpdir[64];
char stat_bin[PATH_MAX];

static char *slurp(int fd)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	ssize_t r;

	assert_non_null(buf);
	lseek(fd, 0, SEEK_SET);
	while ((r = read(fd, buf + n, cap - n - 1)) > 0) {
		n += (size_t)r;
		if (n + 1 == cap) {
			buf = realloc(buf, cap *= 2);
			assert_non_null(buf);
		}
	}
	buf[n] = '\0';
	return buf;
}

/* An anonymous file for the child's output: nothing to name or clean up. */
static int tmp_fd(void)
{
	int fd = memfd_create("locus-stat-out", MFD_CLOEXEC);

	assert_true(fd >= 0);
	return fd;
}

/*
 * Run locus-stat with argv (NULL-terminated, argv[0] excluded) as uid (or
 * as ourselves when uid < 0). tick, when set, runs in the parent every
 * millisecond, with the child's stdout, until the child exits.
 */
void run_stat(struct run *r, int uid, const char *bin, void (*tick)(int out_fd),
		     const char *const *args)
{
	const char *argv[32] = { bin };
	int out = tmp_fd(), err = tmp_fd(), st;
	pid_t pid;
	size_t n = 1;

	for (; args[n - 1]; n++) {
		assert_true(n < LOCUS_ARRAY_SIZE(argv) - 1);
		argv[n] = args[n - 1];
	}
	argv[n] = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(30); /* survives exec: a hung locus-stat dies */
		dup2(out, 1);
		dup2(err, 2);
		if (uid >= 0 && (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
				 setresuid(uid, uid, uid) < 0))
			_exit(125);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &st, tick ? WNOHANG : 0) == 0) {
		tick(out);
		usleep(1000);
	}
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r->out = slurp(out);
	r->err = slurp(err);
	close(out);
	close(err);
}

void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
}

void reg(struct locus_counters *c, const char *name, const char *help,
		enum locus_ctr_kind kind, uint32_t ndims, uint32_t d0, uint32_t d1,
		const char *l0, const char *l1, uint64_t *off)
{
	struct locus_ctr_desc d = { .name = name, .help = help, .kind = kind, .ndims = ndims,
				    .dim = { d0, d1 }, .label = { l0, l1 } };
	struct locus_error err;

	if (locus_counters_register(c, &d, off, &err) < 0)
		fail_msg("register %s: %s", name, err.msg);
}

struct locus_shm *make_segment(const char *instance, size_t ctr_size,
				      struct locus_ctr_params *p, struct locus_counters **c)
{
	struct locus_shm_params sp = { .instance = instance };
	struct locus_shm *shm;
	struct locus_error err;
	size_t size;
	void *region;

	sp.region_size[LOCUS_REGION_COUNTERS] = ctr_size;
	if (locus_shm_create(&sp, &shm, &err) < 0)
		fail_msg("create %s: %s", instance, err.msg);
	region = locus_shm_region(shm, LOCUS_REGION_COUNTERS, &size);
	if (p) {
		assert_int_equal(locus_counters_init(region, size, p, &err), 0);
		assert_int_equal(locus_counters_open(region, size, 0, c, &err), 0);
	}
	locus_shm_set_state(shm, LOCUS_SHM_RUNNING);
	return shm;
}

struct locus_shm *small_segment(const char *instance, struct locus_counters **c)
{
	struct locus_ctr_params p = { .max_entries = 4, .n_blocks = 2, .block_size = 256 };

	return make_segment(instance, locus_counters_region_size(&p), &p, c);
}

void drop_segment(struct locus_shm *shm, struct locus_counters *c, const char *instance)
{
	locus_counters_close(c);
	locus_shm_detach(shm);
	assert_int_equal(locus_shm_remove(instance), 0);
}

void stat_test_env(void)
{
	char self[PATH_MAX];
	ssize_t n;

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(n > 0);
	self[n] = '\0';
	snprintf(stat_bin, sizeof(stat_bin), "%s/../bin/locus-stat", dirname(self));
	if (access(stat_bin, X_OK) < 0)
		fail_msg("%s not built", stat_bin);
	/* mkdtemp(3) replaces the template's six trailing 'X' characters */
	n = snprintf(stat_tmpdir, sizeof(stat_tmpdir), "/tmp/locus-stat-test.");
	memset(stat_tmpdir + n, 'X', 6);
	stat_tmpdir[n + 6] = '\0';
	assert_non_null(mkdtemp(stat_tmpdir));
	chmod(stat_tmpdir, 0755); /* uid 65534 must reach the files to meet their modes */
	setenv(LOCUS_SHM_DIR_ENV, stat_tmpdir, 1);
	unsetenv("LOCUS_INSTANCE");
}

int stat_test_env_cleanup(void)
{
	char cmd[sizeof(stat_tmpdir) + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", stat_tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}
