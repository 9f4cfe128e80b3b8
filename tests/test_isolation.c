// SPDX-License-Identifier: MIT
/*
 * Trust boundaries between the processes of one node, with real file
 * modes: this test runs as root (which ignores them), so every party but
 * the node is a forked child that dropped to an unused uid whose only group
 * is the service group (and, for the control plane, the control group).
 * Numeric ids, no /etc/group entry needed.
 *
 *   - a process in the service group but not the control group cannot push
 *     a table (-EACCES and a sentence, counted in table_pushes_refused) nor
 *     reach locusd's memory, where the table slots are; one in the control
 *     group pushes and its table is adopted;
 *   - it cannot write the counters (the segment opens read-only only, its
 *     mapping cannot be made writable), and reads them;
 *   - it still attaches, routes and gets the signature at its decoder;
 *   - a client cannot reach another client's slot: not through the segment
 *     (no slot is in it), not through /proc (the other's fds and memory,
 *     locusd's), not by naming it on the registration socket.
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
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_eldr.h"
#include "locus_push.h"
#include "locus_regions.h"
#include "locus_shm.h"
#include "node_tables.h"
#include "node_util.h"

#define INST      "t-iso"
#define GID_LOCUS 64210u /* the service group: clients, locus-stat */
#define GID_CTL   64211u /* the control group (ctl_group) */
#define UID_A     64301u /* a client */
#define UID_B     64303u /* another client, another user */
#define UID_CTL   64302u /* the control plane */

static char shm_dir[64];
static struct tu_node T;

#define ctr(name, elem) tu_ctr(T.view.ctrs, name, elem)

/* Drop to uid with the service group (and the control group if ctl). */
static void become(uid_t uid, int ctl)
{
	gid_t groups[2] = { GID_LOCUS, GID_CTL };

	if (setgroups(ctl ? 2 : 1, groups) || setresgid(GID_LOCUS, GID_LOCUS, GID_LOCUS) ||
	    setresuid(uid, uid, uid))
		_exit(99);
	/* a process started as that user is dumpable: its /proc entries are its own */
	prctl(PR_SET_DUMPABLE, 1);
}

static int wait_child(pid_t pid)
{
	int status;

	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* Fail a child with a line saying why. */
#define CHECK(cond, code)                                                              \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "child %d: %s failed (errno %d)\n", (int)getpid(), \
				#cond, errno);                                         \
			_exit(code);                                                   \
		}                                                                      \
	} while (0)

static int child_push(int ctl, const void *tbl, size_t len)
{
	struct locus_push_result res;
	uint64_t pub[LOCUS_TABLE_MAX_CHANNELS];
	struct locus_error e = { 0 };
	unsigned n;
	char mem[64];
	int ret;

	become(ctl ? UID_CTL : UID_A, ctl);
	ret = locus_push_table(INST, 0, tbl, len, 2000, &res, &e);
	if (ctl) {
		CHECK(ret == 0 && res.generation == 1 && res.wait.n_adopted == 1, 10);
		return 0;
	}
	CHECK(ret == -EACCES, 11);
	CHECK(strstr(e.msg, "not in the control group"), 12);
	CHECK(locus_push_status(INST, pub, &n, &e) == -EACCES, 13);
	/* the slots are locusd's own memory: out of reach */
	snprintf(mem, sizeof(mem), "/proc/%d/mem", (int)getppid());
	CHECK(open(mem, O_RDWR) < 0 && errno == EACCES, 14);
	return 0;
}

static void test_push_needs_control_group(void **state)
{
	uint64_t refused = ctr("table_pushes_refused", LOCUS_PUSHREF_PERM);
	size_t len;
	void *tbl = eldr_table(0.1f, 0, &len);
	pid_t pid;
	(void)state;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_push(0, tbl, len));
	assert_int_equal(wait_child(pid), 0);
	/* both requests refused and counted; nothing published */
	assert_int_equal(ctr("table_pushes_refused", LOCUS_PUSHREF_PERM), refused + 2);
	assert_int_equal(ctr("table_pushes", 0), 0);
	assert_int_equal(locus_engine_table_generation(locus_node_engine(T.node), 0), 0);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_push(1, tbl, len));
	assert_int_equal(wait_child(pid), 0);
	assert_int_equal(ctr("table_pushes", 0), 1);
	assert_int_equal(ctr("table_pushes_refused", LOCUS_PUSHREF_PERM), refused + 2);
	free(tbl);
}

static int child_counters(void)
{
	char path[256];
	struct locus_counters *c;
	struct locus_shm *shm;
	struct locus_error e;
	struct stat st;
	size_t size;
	void *region;

	become(UID_A, 0);
	CHECK(locus_shm_path(INST, path, sizeof(path)) == 0, 20);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0640 && st.st_gid == GID_LOCUS, 21);
	CHECK(open(path, O_RDWR) < 0 && errno == EACCES, 22);
	CHECK(locus_shm_attach(INST, LOCUS_SHM_ALLOW_GROUP, &shm, &e) == -EACCES, 23);
	CHECK(locus_shm_attach(INST, LOCUS_SHM_RDONLY | LOCUS_SHM_ALLOW_GROUP, &shm, &e) == 0, 24);
	region = locus_shm_region(shm, LOCUS_REGION_COUNTERS, &size);
	CHECK(region != NULL, 25);
	/* a read-only fd's mapping cannot be made writable */
	CHECK(mprotect((void *)((uintptr_t)region & ~(uintptr_t)4095), 4096,
		       PROT_READ | PROT_WRITE) < 0 && errno == EACCES, 26);
	CHECK(locus_counters_open(region, size, LOCUS_CTR_RDONLY, &c, &e) == 0, 27);
	CHECK(locus_counters_find(c, "table_pushes_refused") >= 0, 28);
	locus_counters_close(c);
	locus_shm_detach(shm);
	return 0;
}

static void test_counters_read_only(void **state)
{
	pid_t pid = fork();
	(void)state;

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_counters());
	assert_int_equal(wait_child(pid), 0);
}

/* A prefiller and decoders 0 and 1 in one unprivileged process: one signature routed. */
static int child_route(void)
{
	struct locus_client_req rp = { .roles = LOCUS_ROLE_PREFILL, .timeout_ms = 5000 };
	struct locus_client_req rd = { .roles = LOCUS_ROLE_DECODE, .timeout_ms = 5000 };
	struct locus_client *pre, *dec[2];
	uint16_t tok[1][L][1] = { { { 0 }, { 0 } } };
	struct locus_desc d, in;
	struct locus_error e;
	uint8_t *stage;
	int len, got = 0;

	become(UID_A, 0);
	CHECK(locus_client_attach(INST, &rp, &pre, &e) == 0, 30);
	for (int i = 0; i < 2; i++) {
		rd.decoder_id = (uint32_t)i;
		CHECK(locus_client_attach(INST, &rd, &dec[i], &e) == 0, 31);
		locus_client_report_load(dec[i], 0);
	}
	stage = locus_client_stage(pre, NULL);
	len = locus_eldr_sig_build(stage, 4096, L, E, 1, &tok[0][0][0], 1, 0, NULL);
	CHECK(len > 0, 32);
	d = (struct locus_desc){ .op = LOCUS_OP_ROUTE, .id = 5, .off = 0, .len = (uint32_t)len };
	CHECK(locus_client_submit(pre, &d, 1) == 1, 33);
	CHECK(tu_try_desc(pre, &d, 25000) && d.id == 5 && d.status == 0 && d.peer < 2, 34);
	for (int i = 0; i < 25000 && !got; i++) {
		got = locus_client_poll(dec[d.peer], &in, 1);
		if (!got)
			tu_nap();
	}
	CHECK(got == 1 && in.op == LOCUS_OP_SIGNATURE_IN, 35);
	CHECK(locus_client_inbox(dec[d.peer], &in) != NULL, 36);
	for (int i = 0; i < 2; i++)
		locus_client_detach(dec[i]);
	locus_client_detach(pre);
	return 0;
}

static void test_client_works_unprivileged(void **state)
{
	uint64_t routed = ctr("route_requests", 0);
	size_t len;
	void *tbl = eldr_table(0.1f, 0, &len);
	int refused;
	pid_t pid;
	(void)state;

	tu_push(INST, T.node, 0, tbl, len, &refused); /* as root: allowed */
	assert_false(refused);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_route());
	assert_int_equal(wait_child(pid), 0);
	assert_int_equal(ctr("route_requests", 0), routed + 1);
	free(tbl);
}

/* Client A: attach as rank 0, fill the stage with pattern, wait to be told to leave. */
static int child_a(int ready, int leave, const uint8_t *pattern)
{
	struct locus_client_req req = { .roles = LOCUS_ROLE_RANK, .rank = 0, .timeout_ms = 5000 };
	struct locus_client *c;
	uint32_t slot;
	char x;

	become(UID_A, 0);
	CHECK(locus_client_attach(INST, &req, &c, NULL) == 0, 40);
	for (int i = 0; i < 16; i++)
		memcpy(locus_client_stage(c, NULL) + 64 * i, pattern, 64);
	slot = locus_client_slot(c);
	CHECK(write(ready, &slot, sizeof(slot)) == sizeof(slot), 41);
	CHECK(read(leave, &x, 1) == 1, 42);
	/* nobody wrote our slot meanwhile */
	for (int i = 0; i < 16; i++)
		CHECK(!memcmp(locus_client_stage(c, NULL) + 64 * i, pattern, 64), 43);
	locus_client_detach(c);
	return 0;
}

/* Every fd of pid (EACCES expected), and its memory. */
static int proc_denied(pid_t pid)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if (opendir(path) || errno != EACCES)
		return 0;
	for (int n = 0; n < 64; n++) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, n);
		fd = open(path, O_RDWR);
		if (fd >= 0 || (errno != EACCES && errno != ENOENT))
			return 0;
	}
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	if (open(path, O_RDWR) >= 0 || errno != EACCES)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/map_files", (int)pid);
	return !opendir(path) && (errno == EACCES || errno == EPERM);
}

/* Client B, another user: A's slot is nowhere within reach. */
static int child_b(pid_t a, uint32_t a_slot, const uint8_t *pattern)
{
	struct locus_client_req req = { .roles = LOCUS_ROLE_RANK, .rank = 1, .timeout_ms = 5000 };
	struct locus_reg_req q = { .magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION,
				   .op = LOCUS_REG_UNREGISTER, .slot = a_slot, .region = 8 };
	struct locus_reg_rep rep;
	struct locus_client *c;
	struct locus_error e;
	char path[256];
	struct stat st;
	uint8_t *seg;
	int fd, sock;

	become(UID_B, 0);
	/* the segment: read-only, and no slot in it */
	CHECK(locus_shm_path(INST, path, sizeof(path)) == 0, 50);
	CHECK(open(path, O_RDWR) < 0 && errno == EACCES, 51);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && fstat(fd, &st) == 0, 52);
	seg = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	CHECK(seg != MAP_FAILED, 53);
	CHECK(!memmem(seg, (size_t)st.st_size, pattern, 64), 54);
	munmap(seg, (size_t)st.st_size);
	close(fd);
	/* /proc: not A's fds or memory, nor locusd's */
	CHECK(proc_denied(a), 55);
	CHECK(proc_denied(getppid()), 56);
	/* the registration socket: naming A's slot is refused */
	sock = locus_client_reg_connect(INST, &e);
	CHECK(sock >= 0, 57);
	CHECK(locus_client_reg_transact(sock, &q, -1, &rep, NULL, 5000, &e) == 0, 58);
	CHECK(rep.status == -EACCES, 59);
	close(sock);
	/* our own slot is another, and holds nothing of A's */
	CHECK(locus_client_attach(INST, &req, &c, NULL) == 0, 60);
	CHECK(locus_client_slot(c) != a_slot, 61);
	CHECK(!memmem(locus_client_stage(c, NULL), 65536, pattern, 64), 62);
	memset(locus_client_stage(c, NULL), 0x5b, 65536);
	locus_client_detach(c);
	return 0;
}

static void test_other_client_unreachable(void **state)
{
	uint64_t refused = ctr("regions_refused", LOCUS_REGREF_PEER);
	uint8_t pattern[64];
	int ready[2], leave[2];
	uint32_t slot;
	pid_t a, b;
	(void)state;

	for (int i = 0; i < 64; i++)
		pattern[i] = (uint8_t)(0x9d ^ (i * 37));
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(leave), 0);
	a = fork();
	assert_true(a >= 0);
	if (a == 0) {
		alarm(30);
		_exit(child_a(ready[1], leave[0], pattern));
	}
	assert_int_equal(read(ready[0], &slot, sizeof(slot)), (ssize_t)sizeof(slot));
	b = fork();
	assert_true(b >= 0);
	if (b == 0)
		_exit(child_b(a, slot, pattern));
	assert_int_equal(wait_child(b), 0);
	assert_int_equal(ctr("regions_refused", LOCUS_REGREF_PEER), refused + 1);
	assert_int_equal(write(leave[1], "x", 1), 1);
	assert_int_equal(wait_child(a), 0);
	close(ready[0]);
	close(ready[1]);
	close(leave[0]);
	close(leave[1]);
}

static int setup(void **state)
{
	static const char conf[] =
		"[locusd]\ninstance = " INST "\nclient_slots = 4\nring_size = 16\n"
		"stage_size = 65536\nclient_inbox_slots = 4\ninbox_slot_size = 16384\n"
		"moe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\nmax_batch_tokens = 64\n"
		"table_slot_size = 65536\nload_timeout_ms = 60000\nctl_group = 64211\n"
		"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";
	(void)state;

	return tu_node_start(&T, conf);
}

static int teardown(void **state)
{
	(void)state;
	tu_node_stop(&T);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_push_needs_control_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_counters_read_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_works_unprivileged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_client_unreachable, setup, teardown),
	};
	int ret;

	if (geteuid() != 0) {
		/* file modes bind root not at all and others fully: only root can stage this */
		printf("test_isolation: needs root to drop to test users, skipped\n");
		return 0;
	}
	/* what the node creates gets the service group, as under systemd's Group=locus */
	if (setegid(GID_LOCUS) < 0)
		return 1;
	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-iso-test-XXXXXX");
	if (!mkdtemp(shm_dir) || chmod(shm_dir, 0755) < 0)
		return 1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	rmdir(shm_dir);
	return ret;
}
