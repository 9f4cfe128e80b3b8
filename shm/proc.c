// SPDX-License-Identifier: MIT
/*
 * Process identity: pid + start time, so that a recycled pid is never taken
 * for the process that registered it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locus_shm.h"
#include "locus_shm_priv.h"

/*
 * Parse /proc/<pid>/stat. comm (field 2) may hold spaces and ')' so fields
 * are counted from the last ')'. Fields after it: 3 state, 9 flags (the
 * kernel's PF_* bits), ... 22 starttime.
 */
#define PROC_PF_EXITING 0x4u /* include/linux/sched.h: do_exit() has begun */

static int proc_stat(pid_t pid, char *state, unsigned long *flags, uint64_t *ticks)
{
	char path[64], buf[1024], *p, *end;
	ssize_t n;
	int fd, field;

	if (pid <= 0)
		return -ESRCH;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -ESRCH; /* the process went away between open and read */
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return -EPROTO;
	p += 2;
	*state = *p;
	for (field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return -EPROTO;
		p++;
		if (field + 1 == 9)
			*flags = strtoul(p, NULL, 10);
	}
	errno = 0;
	*ticks = strtoull(p, &end, 10);
	if (errno || end == p)
		return -EPROTO;
	return 0;
}

int locus_proc_start_ticks(pid_t pid, uint64_t *ticks)
{
	unsigned long flags;
	char state;

	return proc_stat(pid, &state, &flags, ticks);
}

/*
 * 1 if pid runs and its start ticks, masked by mask, equal want. An exited
 * child its parent has not reaped yet runs no code: dead. So is a process
 * inside do_exit(): the kernel closes its files (a peer sees its sockets
 * reset) before it turns zombie, and a reader that saw the reset must not
 * find it alive in that window.
 */
static int alive_masked(pid_t pid, uint64_t want, uint64_t mask)
{
	unsigned long flags = 0;
	uint64_t ticks;
	char state;
	int rc;

	if (pid <= 0)
		return 0;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 0;
	rc = proc_stat(pid, &state, &flags, &ticks);
	if (rc == -ESRCH)
		return 0;
	if (rc < 0)
		return 1; /* /proc hidden from us: kill() said it exists, believe it */
	if (state == 'Z' || state == 'X' || state == 'x' || (flags & PROC_PF_EXITING))
		return 0;
	return (ticks & mask) == (want & mask);
}

int locus_proc_alive(pid_t pid, uint64_t start_ticks)
{
	return alive_masked(pid, start_ticks, UINT64_MAX);
}

int locus_proc_ident_alive(uint64_t ident)
{
	return alive_masked((pid_t)(uint32_t)ident, ident >> 32, UINT32_MAX);
}

uint64_t locus_proc_self_ident(void)
{
	static pid_t cached_pid;
	static uint64_t cached;
	pid_t pid = getpid();
	uint64_t ticks;

	/* a forked child has a new pid and must not inherit the parent's word */
	if (__atomic_load_n(&cached_pid, __ATOMIC_ACQUIRE) == pid)
		return __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (locus_proc_start_ticks(pid, &ticks) < 0)
		return 0;
	__atomic_store_n(&cached, locus_proc_ident(pid, ticks), __ATOMIC_RELAXED);
	__atomic_store_n(&cached_pid, pid, __ATOMIC_RELEASE);
	return locus_proc_ident(pid, ticks);
}
