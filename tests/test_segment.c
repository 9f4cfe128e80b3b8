// SPDX-License-Identifier: MIT
/*
 * The shared-memory segment: lifecycle, header, region directory, and every
 * refusal of attach with its own code. Each test works in a private
 * directory ($LOCUS_SHM_DIR) and leaves nothing behind.
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
#include <grp.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "locus_common.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"

#define INST "t0"
#define NOBODY 65534

static char g_dir[64];
static char g_path[256];

static int setup(void **state)
{
	static unsigned n;

	(void)state;
	/* private per process and test: runs in parallel never share one */
	snprintf(g_dir, sizeof(g_dir), "/dev/shm/locus-test-seg.%d.%u", (int)getpid(), n++);
	if (mkdir(g_dir, 0700) < 0)
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, g_dir, 1);
	snprintf(g_path, sizeof(g_path), "%s/locus.%s", g_dir, INST);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The segment lays out regions by id whatever module owns them: 0 is unused. */
#define REGION_0 ((enum locus_shm_region_id)0)

static struct locus_shm *create_default(void)
{
	struct locus_shm_params p = { .instance = INST };
	struct locus_shm *shm = NULL;
	struct locus_error err;
	int rc;

	p.region_size[REGION_0] = 1000;
	p.region_size[LOCUS_REGION_COUNTERS] = 4096 + 3;
	rc = locus_shm_create(&p, &shm, &err);
	if (rc)
		print_error("create: %s\n", err.msg);
	assert_int_equal(rc, 0);
	assert_non_null(shm);
	return shm;
}

/* Overwrite bytes of the object at off, as a corrupter would. */
static void patch(off_t off, const void *buf, size_t len)
{
	int fd = open(g_path, O_WRONLY);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, len, off), (ssize_t)len);
	close(fd);
}

static int attach_code(unsigned flags, struct locus_error *err)
{
	struct locus_shm *shm = NULL;
	int rc = locus_shm_attach(INST, flags, &shm, err);

	if (rc == 0)
		locus_shm_detach(shm);
	else
		assert_null(shm);
	return rc;
}

static void test_lifecycle(void **state)
{
	struct locus_shm *own, *rw, *ro;
	struct locus_error err;
	struct timespec t0;
	struct stat st;
	uint8_t *a, *b;
	size_t sz, sz2;
	mode_t old;
	(void)state;

	clock_gettime(CLOCK_REALTIME, &t0);
	old = umask(077); /* the mode must not depend on the caller's umask */
	own = create_default();
	umask(old);
	assert_int_equal(stat(g_path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(st.st_uid, geteuid());
	assert_int_equal((size_t)st.st_size, locus_shm_size(own));

	assert_int_equal(locus_shm_state(own), LOCUS_SHM_STARTING);
	assert_int_equal(locus_shm_owner_pid(own), getpid());
	assert_true(locus_shm_start_time_ns(own) >=
		    (uint64_t)t0.tv_sec * 1000000000ull + (uint64_t)t0.tv_nsec);
	assert_string_equal(locus_shm_instance(own), INST);

	/* regions: aligned, in bounds, disjoint, zeroed; absent ones NULL */
	a = locus_shm_region(own, REGION_0, &sz);
	b = locus_shm_region(own, LOCUS_REGION_COUNTERS, &sz2);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(sz, 1000);
	assert_int_equal(sz2, 4099);
	assert_int_equal(((uintptr_t)a) % LOCUS_SHM_REGION_ALIGN, 0);
	assert_int_equal(((uintptr_t)b) % LOCUS_SHM_REGION_ALIGN, 0);
	assert_true(a + sz <= b);
	{
		struct locus_shm_hdr h;
		int fd = open(g_path, O_RDONLY);

		assert_true(fd >= 0);
		assert_int_equal(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
		close(fd);
		assert_int_equal(h.magic, LOCUS_SHM_MAGIC);
		assert_int_equal(h.abi_version, LOCUS_SHM_ABI_VERSION);
		assert_int_equal(h.hdr_size, sizeof(h));
		assert_int_equal(h.total_size, locus_shm_size(own));
		assert_int_equal(h.owner_pid, getpid());
		assert_string_equal(h.instance, INST);
		for (int i = 0; i < LOCUS_REGION_MAX; i++) {
			if (!h.region[i].size)
				continue;
			assert_int_equal(h.region[i].offset % LOCUS_SHM_REGION_ALIGN, 0);
			assert_true(h.region[i].offset >= sizeof(h));
			assert_true(h.region[i].offset + h.region[i].size <= h.total_size);
		}
		assert_int_equal(b - a, (ptrdiff_t)(h.region[1].offset - h.region[0].offset));
	}
	for (size_t i = 0; i < sz; i++)
		assert_int_equal(a[i], 0);
	assert_null(locus_shm_region(own, (enum locus_shm_region_id)2, &sz));
	assert_int_equal(sz, 0);
	assert_null(locus_shm_region(own, LOCUS_REGION_MAX, &sz));

	/* read-write attach shares memory with the creator */
	assert_int_equal(locus_shm_attach(INST, 0, &rw, &err), 0);
	assert_int_equal(locus_shm_size(rw), locus_shm_size(own));
	assert_int_equal(locus_shm_owner_pid(rw), getpid());
	a = locus_shm_region(rw, REGION_0, NULL);
	a[7] = 0x5a;
	assert_int_equal(((uint8_t *)locus_shm_region(own, REGION_0, NULL))[7], 0x5a);
	locus_shm_set_state(own, LOCUS_SHM_RUNNING);
	assert_int_equal(locus_shm_state(rw), LOCUS_SHM_RUNNING);

	/* read-only attach reads; a write faults */
	assert_int_equal(locus_shm_attach(INST, LOCUS_SHM_RDONLY, &ro, &err), 0);
	assert_true(locus_shm_is_rdonly(ro));
	b = locus_shm_region(ro, REGION_0, NULL);
	assert_int_equal(b[7], 0x5a);
	locus_shm_set_state(ro, LOCUS_SHM_STOPPING); /* ignored, must not fault */
	assert_int_equal(locus_shm_state(own), LOCUS_SHM_RUNNING);
	{
		pid_t pid = fork();
		int status;

		assert_true(pid >= 0);
		if (pid == 0) {
			/* cmocka catches SIGSEGV; the child must die of it */
			signal(SIGSEGV, SIG_DFL);
			*(volatile uint8_t *)&b[7] = 1;
			_exit(0);
		}
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status));
		assert_int_equal(WTERMSIG(status), SIGSEGV);
	}
	assert_int_equal(b[7], 0x5a);

	locus_shm_detach(ro);
	locus_shm_detach(rw);
	locus_shm_detach(own);
	locus_shm_detach(NULL);
	assert_int_equal(locus_shm_remove(INST), 0);
	assert_int_equal(locus_shm_remove(INST), -ENOENT);
	assert_int_equal(attach_code(0, &err), -ENOENT);
	assert_non_null(strstr(err.msg, INST));
}

static void test_names(void **state)
{
	static const char *const bad[] = {
		"", ".", "..", "a/b", "/x", "a b", "a\nb", "ab*",
		"0123456789012345678901234567890123456789012345678901234567890123",
	};
	struct locus_shm_params p = { 0 };
	struct locus_shm *shm = NULL;
	struct locus_error err;
	char buf[256];
	(void)state;

	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(bad); i++) {
		assert_int_equal(locus_shm_check_name(bad[i]), -EINVAL);
		assert_int_equal(locus_shm_path(bad[i], buf, sizeof(buf)), -EINVAL);
		assert_int_equal(locus_shm_attach(bad[i], 0, &shm, &err), -EINVAL);
		p.instance = bad[i];
		assert_int_equal(locus_shm_create(&p, &shm, &err), -EINVAL);
		assert_int_equal(locus_shm_remove(bad[i]), -EINVAL);
	}
	assert_int_equal(locus_shm_check_name(NULL), -EINVAL);
	assert_int_equal(locus_shm_check_name("node-1_a.B9"), 0);
	assert_int_equal(locus_shm_check_name(
		"012345678901234567890123456789012345678901234567890123456789012"), 0);
	assert_int_equal(locus_shm_path("x", buf, sizeof(buf)), 0);
	assert_non_null(strstr(buf, "/locus.x"));
	assert_int_equal(locus_shm_path("x", buf, 4), -ENAMETOOLONG);

	/* a region larger than the bound is refused, nothing is left */
	p.instance = INST;
	p.region_size[0] = LOCUS_SHM_MAX_SIZE + 1;
	assert_int_equal(locus_shm_create(&p, &shm, &err), -LOCUS_ERANGE);
	assert_int_equal(access(g_path, F_OK), -1);
}

static void test_exists_and_stale(void **state)
{
	struct locus_shm_params p = { .instance = INST };
	struct locus_shm *own, *again = NULL;
	struct locus_error err;
	uint64_t bogus;
	pid_t pid;
	int status;
	(void)state;

	own = create_default();
	p.region_size[0] = 64;
	assert_int_equal(locus_shm_create(&p, &again, &err), -EEXIST);
	assert_null(again);
	assert_non_null(strstr(err.msg, "alive"));

	/* same pid but another start time: a recycled pid, hence stale */
	bogus = 12345;
	patch(offsetof(struct locus_shm_hdr, owner_start_ticks), &bogus, sizeof(bogus));
	assert_int_equal(locus_shm_create(&p, &again, &err), 0);
	/* header, one aligned 64-byte region, rounded up to a page */
	assert_int_equal(locus_shm_size(again),
			 LOCUS_ALIGN_UP(LOCUS_ALIGN_UP(sizeof(struct locus_shm_hdr),
						       (size_t)LOCUS_SHM_REGION_ALIGN) + 64,
					(size_t)4096));
	locus_shm_detach(again);
	locus_shm_detach(own);
	assert_int_equal(locus_shm_remove(INST), 0);

	/* the owner exits without removing its segment */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct locus_shm *c;

		_exit(locus_shm_create(&p, &c, NULL) == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(access(g_path, F_OK), 0);
	own = create_default();
	assert_int_equal(locus_shm_owner_pid(own), getpid());
	assert_non_null(locus_shm_region(own, LOCUS_REGION_COUNTERS, NULL));
	locus_shm_detach(own);

	/* something that is not a locus segment is never replaced */
	assert_int_equal(locus_shm_remove(INST), 0);
	{
		int fd = open(g_path, O_CREAT | O_WRONLY, 0660);
		char junk[512];

		memset(junk, 'j', sizeof(junk));
		assert_true(fd >= 0);
		assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
		close(fd);
	}
	assert_int_equal(locus_shm_create(&p, &again, &err), -LOCUS_EBADMAGIC);
	assert_int_equal(access(g_path, F_OK), 0);
	assert_int_equal(locus_shm_remove(INST), 0);
}

static void test_refusals_mode_owner(void **state)
{
	struct locus_shm *own;
	struct locus_error err;
	char link[300];
	pid_t pid;
	int status;
	(void)state;

	own = create_default();

	assert_int_equal(chmod(g_path, 0666), 0);
	assert_int_equal(attach_code(0, &err), -LOCUS_EWORLDWRITABLE);
	assert_non_null(strstr(err.msg, g_path));
	assert_int_equal(attach_code(LOCUS_SHM_RDONLY, &err), -LOCUS_EWORLDWRITABLE);
	assert_int_equal(chmod(g_path, 0660), 0);
	assert_int_equal(attach_code(0, &err), 0);

	/* another user's segment, unless our group and the caller allows it */
	assert_int_equal(chown(g_path, NOBODY, NOBODY), 0);
	assert_int_equal(attach_code(0, &err), -LOCUS_EFOREIGN);
	assert_non_null(strstr(err.msg, "65534"));
	assert_int_equal(attach_code(LOCUS_SHM_ALLOW_GROUP, &err), -LOCUS_EFOREIGN);
	assert_int_equal(chown(g_path, NOBODY, getegid()), 0);
	assert_int_equal(attach_code(0, &err), -LOCUS_EFOREIGN);
	assert_int_equal(attach_code(LOCUS_SHM_ALLOW_GROUP | LOCUS_SHM_RDONLY, &err), 0);
	/* a foreign stale segment is not ours to replace either */
	{
		struct locus_shm_params p = { .instance = INST };
		struct locus_shm *x = NULL;
		int32_t dead = 0;

		patch(offsetof(struct locus_shm_hdr, owner_pid), &dead, sizeof(dead));
		assert_int_equal(locus_shm_create(&p, &x, &err), -LOCUS_EFOREIGN);
		assert_null(x);
	}
	assert_int_equal(chown(g_path, geteuid(), getegid()), 0);

	/* the OS says no: an unprivileged user without access */
	assert_int_equal(chmod(g_path, 0600), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct locus_error e;

		if (setresgid(NOBODY, NOBODY, NOBODY) || setgroups(0, NULL) ||
		    setresuid(NOBODY, NOBODY, NOBODY))
			_exit(99);
		_exit(attach_code(LOCUS_SHM_RDONLY, &e) == -EACCES &&
		      strstr(e.msg, "permission") ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(chmod(g_path, 0660), 0);

	/* a symbolic link in place of the object */
	snprintf(link, sizeof(link), "%s/locus.ln", g_dir);
	assert_int_equal(symlink(g_path, link), 0);
	{
		struct locus_shm *x = NULL;

		assert_int_equal(locus_shm_attach("ln", 0, &x, &err), -LOCUS_EBADMAGIC);
		assert_null(x);
	}
	unlink(link);

	locus_shm_detach(own);
	assert_int_equal(locus_shm_remove(INST), 0);
}

static void test_refusals_content(void **state)
{
	struct locus_shm_region_desc r;
	struct locus_shm *own;
	struct locus_error err;
	uint64_t v64, size;
	uint32_t v32;
	(void)state;

	own = create_default();
	size = locus_shm_size(own);
	locus_shm_detach(own);

	v64 = 0x1122334455667788ull;
	patch(0, &v64, sizeof(v64));
	assert_int_equal(attach_code(0, &err), -LOCUS_EBADMAGIC);
	v64 = LOCUS_SHM_MAGIC;
	patch(0, &v64, sizeof(v64));
	assert_int_equal(attach_code(0, &err), 0);

	/* a newer build's segment, and ABI 1's (tables and client slots in the segment) */
	v32 = LOCUS_SHM_ABI_VERSION + 1;
	patch(offsetof(struct locus_shm_hdr, abi_version), &v32, sizeof(v32));
	assert_int_equal(attach_code(0, &err), -LOCUS_EVERSION);
	assert_non_null(strstr(err.msg, "segment ABI version 3, this build speaks 2"));
	v32 = 1;
	patch(offsetof(struct locus_shm_hdr, abi_version), &v32, sizeof(v32));
	assert_int_equal(attach_code(0, &err), -LOCUS_EVERSION);
	assert_non_null(strstr(err.msg, "segment ABI version 1, this build speaks 2"));
	v32 = LOCUS_SHM_ABI_VERSION;
	patch(offsetof(struct locus_shm_hdr, abi_version), &v32, sizeof(v32));

	/* header claims more than the object holds */
	v64 = size + 4096;
	patch(offsetof(struct locus_shm_hdr, total_size), &v64, sizeof(v64));
	assert_int_equal(attach_code(0, &err), -LOCUS_ETRUNCATED);
	patch(offsetof(struct locus_shm_hdr, total_size), &size, sizeof(size));
	assert_int_equal(attach_code(0, &err), 0);

	/* the region directory: beyond the end, wrapping, misaligned, overlapping,
	 * inside the header; each refused before any pointer is handed out */
	{
		const off_t at = offsetof(struct locus_shm_hdr, region[LOCUS_REGION_COUNTERS]);
		struct locus_shm_region_desc orig, bad[] = {
			{ .offset = 4096, .size = size },
			{ .offset = size, .size = 1 },
			{ .offset = 1024, .size = UINT64_MAX - 100 },
			{ .offset = 1032, .size = 64 },
			{ .offset = 64, .size = 64 },
			{ .offset = 0, .size = 64 },
		};
		int fd = open(g_path, O_RDONLY);

		assert_int_equal(pread(fd, &orig, sizeof(orig), at), (ssize_t)sizeof(orig));
		close(fd);
		for (size_t i = 0; i < LOCUS_ARRAY_SIZE(bad); i++) {
			patch(at, &bad[i], sizeof(bad[i]));
			assert_int_equal(attach_code(LOCUS_SHM_RDONLY, &err), -LOCUS_ERANGE);
			assert_non_null(strstr(err.msg, "region"));
		}
		/* overlapping the tables region */
		fd = open(g_path, O_RDONLY);
		assert_int_equal(pread(fd, &r, sizeof(r),
				       offsetof(struct locus_shm_hdr, region[0])),
				 (ssize_t)sizeof(r));
		close(fd);
		r.size = 64;
		patch(at, &r, sizeof(r));
		assert_int_equal(attach_code(0, &err), -LOCUS_ERANGE);
		assert_non_null(strstr(err.msg, "overlap"));
		patch(at, &orig, sizeof(orig));
		assert_int_equal(attach_code(0, &err), 0);
	}

	/* cut short: below the header, then below what the header says */
	assert_int_equal(truncate(g_path, 100), 0);
	assert_int_equal(attach_code(0, &err), -LOCUS_ETRUNCATED);
	assert_int_equal(truncate(g_path, 0), 0);
	assert_int_equal(attach_code(0, &err), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_shm_remove(INST), 0);

	own = create_default();
	locus_shm_detach(own);
	assert_int_equal(truncate(g_path, (off_t)sizeof(struct locus_shm_hdr)), 0);
	assert_int_equal(attach_code(0, &err), -LOCUS_ETRUNCATED);
	assert_non_null(strstr(err.msg, "header says"));
	assert_int_equal(locus_shm_remove(INST), 0);
}

/*
 * Several processes race to create the same instance over a stale segment:
 * exactly one wins each round, the others see its live owner (-EEXIST), and
 * nobody unlinks the winner's fresh segment.
 */
static void test_create_race(void **state)
{
	enum { K = 4, ROUNDS = 20 };
	struct locus_shm_params p = { .instance = INST };
	(void)state;

	p.region_size[0] = 128;
	for (int round = 0; round < ROUNDS; round++) {
		int go[2], res[2], rel[2], wins = 0, busy = 0, status;
		pid_t pids[K], winner = 0;

		/* a stale segment: its creator exited without removing it */
		if (round % 2 == 0) {
			pid_t c = fork();

			assert_true(c >= 0);
			if (c == 0) {
				struct locus_shm *x;

				_exit(locus_shm_create(&p, &x, NULL) == 0 ? 0 : 1);
			}
			assert_int_equal(waitpid(c, &status, 0), c);
			assert_int_equal(WEXITSTATUS(status), 0);
		}
		assert_int_equal(pipe(go), 0);
		assert_int_equal(pipe(res), 0);
		assert_int_equal(pipe(rel), 0);
		for (int k = 0; k < K; k++) {
			pids[k] = fork();
			assert_true(pids[k] >= 0);
			if (pids[k] == 0) {
				struct locus_shm *x;
				char c;
				int rc;

				close(go[1]);
				close(rel[1]);
				if (read(go[0], &c, 1) < 0)
					_exit(2);
				rc = locus_shm_create(&p, &x, NULL);
				if (write(res[1], &rc, sizeof(rc)) != sizeof(rc))
					_exit(3);
				if (rc == 0 && read(rel[0], &c, 1) < 0) /* stay alive */
					_exit(4);
				_exit(0);
			}
		}
		close(go[0]);
		close(go[1]); /* everyone starts */
		for (int k = 0; k < K; k++) {
			int rc;

			assert_int_equal(read(res[0], &rc, sizeof(rc)), sizeof(rc));
			if (rc == 0)
				wins++;
			else if (rc == -EEXIST)
				busy++;
		}
		assert_int_equal(wins, 1);
		assert_int_equal(busy, K - 1);
		{
			struct locus_shm *x;
			struct locus_error err;

			assert_int_equal(locus_shm_attach(INST, LOCUS_SHM_RDONLY, &x, &err), 0);
			winner = locus_shm_owner_pid(x);
			locus_shm_detach(x);
		}
		close(rel[1]);
		close(rel[0]);
		close(res[0]);
		close(res[1]);
		for (int k = 0; k < K; k++) {
			assert_int_equal(waitpid(pids[k], &status, 0), pids[k]);
			assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
			if (pids[k] == winner)
				winner = -1;
		}
		assert_int_equal(winner, -1); /* the segment is the winner's */
		/* odd rounds start from the previous winner's now-stale segment */
	}
	assert_int_equal(locus_shm_remove(INST), 0);
}

/* pid + start time: ours is alive, a recycled pid or a reaped child is not. */
static void test_proc_identity(void **state)
{
	uint64_t ticks, ident;
	pid_t pid;
	int status;
	(void)state;

	assert_int_equal(locus_proc_start_ticks(getpid(), &ticks), 0);
	assert_true(ticks > 0);
	assert_int_equal(locus_proc_alive(getpid(), ticks), 1);
	assert_int_equal(locus_proc_alive(getpid(), ticks + 1), 0);
	assert_int_equal(locus_proc_alive(0, ticks), 0);
	assert_int_equal(locus_proc_alive(-1, ticks), 0);
	ident = locus_proc_self_ident();
	assert_int_equal(ident, locus_proc_ident(getpid(), ticks));
	assert_int_equal(locus_proc_ident_alive(ident), 1);
	assert_int_equal(locus_proc_ident_alive(ident ^ (1ull << 40)), 0);
	assert_int_equal(locus_proc_ident_alive(0), 0);

	{
		uint64_t child_ticks = 0;
		int fds[2];

		assert_int_equal(pipe(fds), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			uint64_t t = 0;

			/* its own identity, not a copy of the parent's cached one */
			if (locus_proc_self_ident() == ident ||
			    (pid_t)(uint32_t)locus_proc_self_ident() != getpid() ||
			    locus_proc_start_ticks(getpid(), &t) < 0 ||
			    write(fds[1], &t, sizeof(t)) != sizeof(t))
				_exit(1);
			_exit(0);
		}
		close(fds[1]);
		assert_int_equal(read(fds[0], &child_ticks, sizeof(child_ticks)),
				 sizeof(child_ticks));
		close(fds[0]);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		/* reaped: that process is gone, even if its pid were recycled */
		assert_int_equal(locus_proc_alive(pid, child_ticks), 0);
		assert_int_equal(locus_proc_ident_alive(locus_proc_ident(pid, child_ticks)), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_lifecycle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exists_and_stale, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals_mode_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals_content, setup, teardown),
		cmocka_unit_test_setup_teardown(test_create_race, setup, teardown),
		cmocka_unit_test(test_proc_identity),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
