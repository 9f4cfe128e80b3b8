// SPDX-License-Identifier: MIT
/*
 * The control socket's server (dataplane/pushsrv.c) on a thread, with table
 * channels in this process and a reader on channel 0 polled each pass:
 * pushes adopted byte for byte and the generation status; every malformed
 * or out-of-range request refused with its sentence and counted by reason
 * (another protocol version, a short message, no fd, two fds, an unsealed
 * memfd, a plain file, a channel or a length out of range, an unknown op);
 * a push to a channel whose reader never decides times out with the table
 * published, and a second push meanwhile is refused as busy. Who may push is
 * test_isolation's.
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
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_counters_priv.h"
#include "locus_push.h"
#include "locus_shm.h"
#include "push_util.h"

#define INST "t-push"
#define SLOT 4096

static char dir[64];
static struct tpush srv;
static struct locus_table_reader rd0, rd1;

static void poll_reader(void *arg)
{
	(void)arg;
	locus_table_reader_poll(&rd0); /* channel 1's reader never polls: it never decides */
}

static uint64_t refused(enum locus_push_refusal why)
{
	uint64_t off;
	int idx = locus_counters_find(srv.ctrs, "table_pushes_refused");

	assert_true(idx >= 0);
	off = locus_counters_info(srv.ctrs, (uint32_t)idx)->offset;
	return __atomic_load_n((uint64_t *)((uint8_t *)locus_counters_block(srv.ctrs, 0) + off) +
			       why, __ATOMIC_ACQUIRE);
}

static int memfd_of(const void *buf, size_t len, unsigned seals)
{
	int fd = memfd_create("t-push", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	if (seals)
		assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

/* Send msg_len bytes of q with nfd fds, return the reply's status and message. */
static int raw(const struct locus_push_req *q, size_t msg_len, const int *fds, int nfd,
	       char *msg, size_t msg_size)
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct iovec iov = { .iov_base = (void *)q, .iov_len = msg_len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct locus_push_rep rep;
	int s;

	assert_int_equal(locus_push_sock_path(INST, sa.sun_path, sizeof(sa.sun_path)), 0);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(s >= 0);
	assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	memset(&u, 0, sizeof(u));
	if (nfd) {
		struct cmsghdr *cm;

		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(nfd * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfd * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfd * sizeof(int));
	}
	assert_int_equal(sendmsg(s, &mh, 0), (ssize_t)msg_len);
	assert_int_equal(recv(s, &rep, sizeof(rep), 0), (ssize_t)sizeof(rep));
	close(s);
	assert_int_equal(rep.magic, LOCUS_PUSH_MAGIC);
	assert_int_equal(rep.version, LOCUS_PUSH_VERSION);
	snprintf(msg, msg_size, "%s", rep.msg);
	return rep.status;
}

/* One refusal: its status, a word of its sentence, one more count of its reason. */
static void expect(const struct locus_push_req *q, size_t msg_len, const int *fds, int nfd,
		   int status, const char *word, enum locus_push_refusal why)
{
	uint64_t before = refused(why);
	char msg[LOCUS_PUSH_MSG_MAX];

	assert_int_equal(raw(q, msg_len, fds, nfd, msg, sizeof(msg)), status);
	if (!strstr(msg, word))
		fail_msg("refusal '%s' lacks '%s'", msg, word);
	for (int i = 0; i < 1000 && refused(why) == before; i++)
		usleep(1000);
	assert_int_equal(refused(why), before + 1);
}

static void test_push_and_status(void **state)
{
	struct locus_push_result res;
	struct locus_error e;
	uint64_t pub[LOCUS_TABLE_MAX_CHANNELS];
	uint8_t tbl[1000];
	const void *cur;
	unsigned n;
	size_t len;
	(void)state;

	for (size_t i = 0; i < sizeof(tbl); i++)
		tbl[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(locus_push_table(INST, 0, tbl, sizeof(tbl), 2000, &res, &e), 0);
	assert_int_equal(res.generation, 1);
	assert_false(res.timed_out);
	assert_int_equal(res.wait.n_live, 1);
	assert_int_equal(res.wait.n_adopted, 1);
	cur = locus_table_reader_table(&rd0, &len);
	assert_int_equal(len, sizeof(tbl));
	assert_memory_equal(cur, tbl, sizeof(tbl));
	assert_int_equal(locus_push_status(INST, pub, &n, &e), 0);
	assert_int_equal(n, 2);
	assert_int_equal(pub[0], 1);
	assert_int_equal(pub[1], 0);
}

static void test_refusals_counted(void **state)
{
	const struct locus_push_req ok = { .magic = LOCUS_PUSH_MAGIC, .version = LOCUS_PUSH_VERSION,
					   .op = LOCUS_PUSH_TABLE, .len = 100 };
	struct locus_push_req q;
	uint8_t tbl[SLOT + 64] = { 1 };
	int sealed = memfd_of(tbl, sizeof(tbl), F_SEAL_SHRINK | F_SEAL_WRITE);
	int open_fd = memfd_of(tbl, 100, 0);
	int fds[2] = { sealed, sealed };
	char path[128];
	int file;
	(void)state;

	q = ok;
	q.version = 0;
	expect(&q, sizeof(q), &sealed, 1, -LOCUS_EVERSION, "push protocol version 0, locusd speaks",
	       LOCUS_PUSHREF_MALFORMED);
	expect(&ok, 16, &sealed, 1, -LOCUS_EPROTO, "malformed", LOCUS_PUSHREF_MALFORMED);
	expect(&ok, sizeof(ok), NULL, 0, -EBADF, "no table fd", LOCUS_PUSHREF_MALFORMED);
	expect(&ok, sizeof(ok), fds, 2, -LOCUS_EPROTO, "malformed", LOCUS_PUSHREF_MALFORMED);
	expect(&ok, sizeof(ok), &open_fd, 1, -LOCUS_EPROTO, "sealed", LOCUS_PUSHREF_MALFORMED);
	snprintf(path, sizeof(path), "%s/plain", dir);
	file = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(file >= 0);
	assert_int_equal(write(file, tbl, 100), 100);
	expect(&ok, sizeof(ok), &file, 1, -LOCUS_EPROTO, "sealed", LOCUS_PUSHREF_MALFORMED);
	q = ok;
	q.op = 9;
	expect(&q, sizeof(q), NULL, 0, -LOCUS_EPROTO, "malformed", LOCUS_PUSHREF_MALFORMED);
	q = ok;
	q.channel = 5;
	expect(&q, sizeof(q), &sealed, 1, -LOCUS_ERANGE, "no table channel 5", LOCUS_PUSHREF_RANGE);
	q = ok;
	q.len = 0;
	expect(&q, sizeof(q), &sealed, 1, -LOCUS_ERANGE, "table_slot_size", LOCUS_PUSHREF_RANGE);
	q.len = SLOT + 1;
	expect(&q, sizeof(q), &sealed, 1, -LOCUS_ERANGE, "table_slot_size", LOCUS_PUSHREF_RANGE);
	close(sealed);
	sealed = memfd_of(tbl, 50, F_SEAL_SHRINK | F_SEAL_WRITE);
	expect(&ok, sizeof(ok), &sealed, 1, -LOCUS_ERANGE, "its memfd holds 50",
	       LOCUS_PUSHREF_RANGE);
	/* none of it published anything */
	assert_int_equal(LOCUS_TABLE_GEN(locus_table_published(srv.t, 0)), 1);
	close(sealed);
	close(open_fd);
	close(file);
	unlink(path);
}

struct slow_push {
	int ret;
	struct locus_push_result res;
};

static void *push_ch1(void *arg)
{
	struct slow_push *p = arg;
	uint8_t tbl[64] = { 9 };

	p->ret = locus_push_table(INST, 1, tbl, sizeof(tbl), 400, &p->res, NULL);
	return NULL;
}

static void test_busy_and_timeout(void **state)
{
	struct locus_push_result res;
	struct slow_push sp = { 0 };
	struct locus_error e;
	uint64_t busy = refused(LOCUS_PUSHREF_BUSY);
	uint8_t tbl[64] = { 7 };
	pthread_t th;
	(void)state;

	assert_int_equal(pthread_create(&th, NULL, push_ch1, &sp), 0);
	/* published at once, then waiting for a reader that never decides */
	for (int i = 0; i < 2000 && !LOCUS_TABLE_GEN(locus_table_published(srv.t, 1)); i++)
		usleep(1000);
	assert_int_equal(locus_push_table(INST, 1, tbl, sizeof(tbl), 100, &res, &e), -EBUSY);
	assert_non_null(strstr(e.msg, "in progress"));
	pthread_join(th, NULL);
	assert_int_equal(sp.ret, 0);
	assert_true(sp.res.timed_out);
	assert_int_equal(sp.res.generation, 1);
	assert_int_equal(sp.res.wait.n_adopted, 0);
	assert_int_equal(refused(LOCUS_PUSHREF_BUSY), busy + 1);
}

static int setup(void **state)
{
	struct locus_table_params tp = { .n_channels = 2, .n_readers = 1 };
	struct locus_error e;
	size_t n = (size_t)snprintf(dir, sizeof(dir), "/tmp/locus-push-test.");
	(void)state;

	memset(dir + n, 'X', 6);
	dir[n + 6] = '\0';
	if (!mkdtemp(dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, dir, 1);
	for (int ch = 0; ch < 2; ch++)
		tp.channel[ch] = (struct locus_table_channel_params){ .n_slots = 2,
								      .slot_size = SLOT };
	tpush_open(&srv, INST, &tp, NULL, NULL, LOCUS_PUSHSRV_NO_GROUP);
	if (locus_table_reader_register(srv.t, 0, 0, NULL, NULL, &rd0, &e) ||
	    locus_table_reader_register(srv.t, 1, 0, NULL, NULL, &rd1, &e))
		return -1;
	tpush_run(&srv, poll_reader, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	tpush_halt(&srv); /* the thread first: it polls rd0 */
	locus_table_reader_unregister(&rd0);
	locus_table_reader_unregister(&rd1);
	tpush_close(&srv);
	return rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_push_and_status),
		cmocka_unit_test(test_refusals_counted),
		cmocka_unit_test(test_busy_and_timeout),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
