// SPDX-License-Identifier: MIT
/*
 * Client buffer regions on one node, without EAL: the node's control work
 * (which serves the registration socket) and the engine run on threads,
 * clients use the client library or speak the socket protocol raw.
 *
 * This host has no dma-buf exporter (no /dev/udmabuf, /dev/dri or DMA
 * heaps), so what needs a real dma-buf runs in the Soft-RoCE VM (vgem,
 * tests/vm/guest-locusd.sh). Checked here: a memfd is refused as not a
 * dma-buf unless it is sealed against shrinking (host memory: taken,
 * mapped); bad offsets and lengths, a malformed request, a slot that is not
 * the sender's (unknown, another process's, a stale generation), an unknown
 * region, a request without its fd and a connection closed without a
 * request are refused with a clear status and counted by reason; a DISPATCH
 * or COMBINE naming a region nobody registered gets exactly one error
 * completion. The engine's side of regions is driven through its command
 * interface with host memory standing for a mapped dma-buf: rows are
 * dispatched and combined from the region with their content intact, the
 * same-GPU tier hands them over in place naming the region, a region locusd
 * could not map fails intra-node requests with one -EOPNOTSUPP completion,
 * and a removed region is refused.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_counters.h"
#include "locus_dispatch.h"
#include "locus_grace.h"
#include "locus_node.h"
#include "locus_regions.h"
#include "locus_shm.h"
#include "locus_table.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "node_util.h"

#define L 2
#define E 8
#define GPN 4
#define ROW 256
#define INST "t-regions"

static char shm_dir[64];
static struct locus_node *node;
static pthread_t th_ctl, th_eng;
static volatile int stop;
static struct tu_view tv;
static struct locus_counters *ctrs;

#define ctr_(name, elem) tu_ctr(ctrs, name, elem)

static struct tu_control ctl;

static void *eng_loop(void *arg)
{
	struct locus_engine *e = locus_node_engine(node);

	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
		if (locus_engine_poll(e) == 0)
			sched_yield();
	return NULL;
}

/* GRACE table, 1 node x 4 GPUs, E = 8: expert e on rank e / 2, no replicas. */
static void push_grace(void)
{
	struct locus_grace_dims d = { .n_layers = L, .n_experts = E, .n_nodes = 1,
				      .gpus_per_node = GPN, .max_replicas = 1, .capacity = 2,
				      .replica_budget = 1 };
	struct locus_grace_view v;
	int refused;
	size_t plen = locus_grace_payload_size(&d);
	uint8_t *blob;

	assert_true(plen > 0);
	blob = calloc(1, 64 + plen);
	memcpy(blob + 64, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, blob + 64, plen, NULL), 0);
	for (int l = 0; l < L; l++) {
		for (int x = 0; x < E; x++) {
			v.primary[l * E + x] = (uint16_t)(x / 2);
			v.replica[l * E + x] = LOCUS_GRACE_NO_RANK;
			v.expert_load[l * E + x] = 10.0f;
		}
		for (int r = 0; r < GPN; r++)
			v.pred_load[l * GPN + r] = 20.0f;
	}
	assert_int_equal(locus_grace_validate(&v, NULL), 0);
	assert_int_equal(locus_tbl_seal(blob, 64 + plen, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION,
					plen), 0);
	tu_push(INST, node, 1, blob, 64 + plen, &refused);
	assert_int_equal(refused, 0);
	free(blob);
}

static int setup(void **state)
{
	struct locus_config cfg;
	struct locus_error e;
	static const char conf[] =
		"[locusd]\ninstance = " INST "\nclient_slots = 8\nring_size = 64\n"
		"stage_size = 262144\nclient_inbox_slots = 16\ninbox_slot_size = 4096\n"
		"moe_layers = 2\nmoe_experts = 8\nmax_decoders = 4\nmax_batch_tokens = 64\n"
		"table_slot_size = 65536\nload_timeout_ms = 60000\n"
		"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";
	(void)state;

	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-regions-test-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	if (locus_config_parse(conf, strlen(conf), "test.conf", &cfg, &e) ||
	    locus_node_create(&cfg, tu_now_ns, 1000000000ull, &node, &e) ||
	    locus_node_regions_open(node, NULL, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	locus_node_set_running(node);
	if (tu_view_open(INST, &tv))
		return -1;
	ctrs = tv.ctrs;
	ctl = (struct tu_control){ .node = node, .stop = &stop };
	pthread_create(&th_ctl, NULL, tu_control_loop, &ctl);
	pthread_create(&th_eng, NULL, eng_loop, NULL);
	push_grace();
	return 0;
}

static int teardown(void **state)
{
	char path[108];

	(void)state;
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(th_ctl, NULL);
	pthread_join(th_eng, NULL);
	tu_view_close(&tv);
	locus_node_destroy(node, 1);
	/* the socket went with the node */
	assert_int_equal(locus_client_reg_sock_path(INST, path, sizeof(path)), 0);
	assert_int_equal(access(path, F_OK), -1);
	return rmdir(shm_dir);
}

static struct locus_client *attach_rank(uint32_t rank)
{
	return tu_attach(INST, LOCUS_ROLE_RANK, 0, rank);
}

/* ---- the socket protocol, raw ------------------------------------------------------ */

/* Send len bytes of q with nfd copies of fd (nfd 0: none); the reply's status. */
static int raw(const void *q, size_t len, int fd, int nfd, struct locus_reg_rep *rep)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)q, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct timeval tv = { .tv_sec = 5 };
	int s, fds[2] = { fd, fd };

	assert_int_equal(locus_client_reg_sock_path(INST, sa.sun_path, sizeof(sa.sun_path)), 0);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(s >= 0);
	assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	memset(&u, 0, sizeof(u));
	if (nfd) {
		struct cmsghdr *cm;

		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfd * sizeof(int));
	}
	assert_int_equal(sendmsg(s, &mh, 0), (ssize_t)len);
	assert_int_equal(recv(s, rep, sizeof(*rep), 0), (ssize_t)sizeof(*rep));
	close(s);
	assert_int_equal(rep->magic, LOCUS_REG_MAGIC);
	return rep->status;
}

static struct locus_reg_req req_of(struct locus_client *c, uint32_t op)
{
	return (struct locus_reg_req){ .magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION,
				       .op = op, .slot = locus_client_slot(c),
				       .generation = locus_client_generation(c), .len = 65536 };
}

static int make_memfd(size_t size)
{
	int fd = memfd_create("not-a-dmabuf", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	return fd;
}

static void test_memfd_refused(void **state)
{
	struct locus_client *c = attach_rank(0);
	uint64_t before = ctr_("regions_refused", LOCUS_REGREF_NOT_DMABUF);
	int fd = make_memfd(1 << 20);
	struct locus_error e = { 0 };
	uint32_t id = 77;
	(void)state;

	assert_int_equal(locus_client_register_dmabuf(c, fd, 0, 65536, 5000, &id, NULL, &e),
			 -ENOTSUP);
	assert_non_null(strstr(e.msg, "not a dma-buf"));
	assert_int_equal(id, 77);
	assert_int_equal(ctr_("regions_refused", LOCUS_REGREF_NOT_DMABUF), before + 1);
	assert_int_equal(ctr_("regions_held", 0), 0);
	/* our fd is still ours */
	assert_int_equal(ftruncate(fd, 2 << 20), 0);
	close(fd);
	locus_client_detach(c);
}

/*
 * Host memory: a memfd sealed against shrinking is taken (mapped; no RDMA
 * device here, so no MR), counted, and given back; one that allows seals
 * but has not sealed shrinking is refused like any memfd.
 */
static void test_sealed_memfd(void **state)
{
	struct locus_client *c = attach_rank(3);
	uint64_t host = ctr_("regions_host", 0), reg = ctr_("regions_registered", 0);
	uint64_t ref = ctr_("regions_refused", LOCUS_REGREF_NOT_DMABUF);
	struct locus_error e = { 0 };
	uint32_t id = 0, flags = 0;
	int fd = memfd_create("rows", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	(void)state;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	assert_int_equal(locus_client_register_dmabuf(c, fd, 0, 65536, 5000, &id, &flags, &e),
			 -ENOTSUP);
	assert_non_null(strstr(e.msg, "nor a memfd sealed against shrinking"));
	assert_int_equal(ctr_("regions_refused", LOCUS_REGREF_NOT_DMABUF), ref + 1);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	if (locus_client_register_dmabuf(c, fd, 4096, 65536, 5000, &id, &flags, &e) < 0)
		fail_msg("%s", e.msg);
	assert_true(id != 0);
	assert_int_equal(flags, LOCUS_REGION_MAPPED | LOCUS_REGION_HOST);
	assert_int_equal(ctr_("regions_host", 0), host + 1);
	assert_int_equal(ctr_("regions_registered", 0), reg + 1);
	assert_int_equal(ctr_("regions_held", 0), 1);
	/* past its end, sealed or not */
	assert_int_equal(locus_client_register_dmabuf(c, fd, 1 << 20, 4096, 5000, &id, NULL, &e),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "does not fit the memfd of 1048576 bytes"));
	assert_int_equal(locus_client_unregister_region(c, id, 5000, &e), 0);
	assert_int_equal(ctr_("regions_held", 0), 0);
	close(fd);
	locus_client_detach(c);
}

static void test_bad_offsets(void **state)
{
	static const uint64_t bad[][2] = {
		{ 100, 65536 },              /* offset not page aligned */
		{ 0, 1000 },                 /* length not page aligned */
		{ 0, 0 },                    /* empty */
		{ 0, LOCUS_REGION_MAX_LEN + 4096 },
		{ UINT64_MAX - 4095, 8192 }, /* wraps */
	};
	struct locus_client *c = attach_rank(1);
	uint64_t before = ctr_("regions_refused", LOCUS_REGREF_RANGE);
	int fd = make_memfd(1 << 20);
	(void)state;

	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(bad); i++) {
		struct locus_error e = { 0 };
		uint32_t id;

		assert_int_equal(locus_client_register_dmabuf(c, fd, bad[i][0], bad[i][1], 5000,
							      &id, NULL, &e), -LOCUS_ERANGE);
		assert_non_null(strstr(e.msg, "multiples of 4096"));
	}
	assert_int_equal(ctr_("regions_refused", LOCUS_REGREF_RANGE),
			 before + LOCUS_ARRAY_SIZE(bad));
	/* no fd at all: the library refuses before asking */
	{
		uint32_t id;

		assert_int_equal(locus_client_register_dmabuf(c, -1, 0, 4096, 5000, &id, NULL,
							      NULL), -EBADF);
	}
	close(fd);
	locus_client_detach(c);
}

static void test_raw_refusals(void **state)
{
	struct locus_client *c = attach_rank(2);
	uint64_t mal = ctr_("regions_refused", LOCUS_REGREF_MALFORMED);
	uint64_t peer = ctr_("regions_refused", LOCUS_REGREF_PEER);
	uint64_t unk = ctr_("regions_refused", LOCUS_REGREF_UNKNOWN);
	struct locus_reg_req q;
	struct locus_reg_rep rep;
	int fd = make_memfd(1 << 20), go[2], ready[2], status;
	pid_t pid;
	(void)state;

	/* malformed: short, bad magic, reserved bytes, unknown op, two fds, fd on UNREGISTER */
	q = req_of(c, LOCUS_REG_DMABUF);
	assert_int_equal(raw(&q, 10, -1, 0, &rep), -LOCUS_EPROTO);
	q.magic = 1;
	assert_int_equal(raw(&q, sizeof(q), fd, 1, &rep), -LOCUS_EPROTO);
	q = req_of(c, LOCUS_REG_DMABUF);
	q.reserved = 1;
	assert_int_equal(raw(&q, sizeof(q), fd, 1, &rep), -LOCUS_EPROTO);
	q = req_of(c, 9);
	assert_int_equal(raw(&q, sizeof(q), fd, 1, &rep), -LOCUS_EPROTO);
	q = req_of(c, LOCUS_REG_DMABUF);
	assert_int_equal(raw(&q, sizeof(q), fd, 2, &rep), -LOCUS_EPROTO);
	q = req_of(c, LOCUS_REG_UNREGISTER);
	assert_int_equal(raw(&q, sizeof(q), fd, 1, &rep), -LOCUS_EPROTO);
	/* a registration without its fd */
	q = req_of(c, LOCUS_REG_DMABUF);
	assert_int_equal(raw(&q, sizeof(q), -1, 0, &rep), -EBADF);
	assert_non_null(strstr(rep.msg, "no fd"));
	assert_int_equal(ctr_("regions_refused", LOCUS_REGREF_MALFORMED), mal + 7);

	/* not the sender's slot: unknown, stale generation, another process's */
	q = req_of(c, LOCUS_REG_DMABUF);
	q.slot = 999;
	assert_int_equal(raw(&q, sizeof(q), fd, 1, &rep), -EACCES);
	q = req_of(c, LOCUS_REG_DMABUF);
	q.generation++;
	assert_int_equal(raw(&q, sizeof(q), fd, 1, &rep), -EACCES);
	assert_non_null(strstr(rep.msg, "generation"));
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(ready), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct locus_client_req r = { .roles = LOCUS_ROLE_RANK, .rank = 3,
					      .timeout_ms = 5000 };
		struct locus_client *cc;
		uint64_t sg[2];
		char b;

		if (locus_client_attach(INST, &r, &cc, NULL))
			_exit(1);
		sg[0] = locus_client_slot(cc);
		sg[1] = locus_client_generation(cc);
		if (write(ready[1], sg, sizeof(sg)) != sizeof(sg) || read(go[0], &b, 1) != 1)
			_exit(2);
		locus_client_detach(cc);
		_exit(0);
	}
	{
		uint64_t sg[2];

		assert_int_equal(read(ready[0], sg, sizeof(sg)), sizeof(sg));
		q = req_of(c, LOCUS_REG_DMABUF);
		q.slot = (uint32_t)sg[0];
		q.generation = sg[1];
		assert_int_equal(raw(&q, sizeof(q), fd, 1, &rep), -EACCES);
		assert_non_null(strstr(rep.msg, "does not own"));
		assert_int_equal(write(go[1], "x", 1), 1);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	assert_int_equal(ctr_("regions_refused", LOCUS_REGREF_PEER), peer + 3);

	/* a region the client does not hold */
	q = req_of(c, LOCUS_REG_UNREGISTER);
	q.region = 0x4b;
	assert_int_equal(raw(&q, sizeof(q), -1, 0, &rep), -LOCUS_ERANGE);
	assert_int_equal(locus_client_unregister_region(c, 0, 5000, NULL), -LOCUS_ERANGE);
	assert_int_equal(ctr_("regions_refused", LOCUS_REGREF_UNKNOWN), unk + 2);

	/* a connection closed before its request: refused and counted, nothing else */
	{
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

		assert_int_equal(locus_client_reg_sock_path(INST, sa.sun_path,
							    sizeof(sa.sun_path)), 0);
		assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
		close(s);
		for (int i = 0; i < 50000 &&
		     ctr_("regions_refused", LOCUS_REGREF_MALFORMED) == mal + 7; i++)
			tu_nap();
		assert_int_equal(ctr_("regions_refused", LOCUS_REGREF_MALFORMED), mal + 8);
	}
	close(go[0]);
	close(go[1]);
	close(ready[0]);
	close(ready[1]);
	close(fd);
	locus_client_detach(c);
}

/* ---- the request path ------------------------------------------------------------- */

/* A dispatch of T tokens, token t to experts (t % 8, (t + 3) % 8), rows at rows_off. */
static uint32_t put_dispatch(uint8_t *stage, uint64_t rows_off, uint32_t T, uint64_t batch)
{
	struct locus_dispatch_req *rq = (struct locus_dispatch_req *)stage;
	uint16_t *ex = (uint16_t *)(rq + 1);
	float *g;

	*rq = (struct locus_dispatch_req){ .magic = LOCUS_DISPATCH_MAGIC, .layer = 1, .top_k = 2,
					   .n_tokens = T, .row_bytes = ROW, .rows_off = rows_off,
					   .batch_id = batch };
	for (uint32_t t = 0; t < T; t++) {
		ex[2 * t] = (uint16_t)(t % 8);
		ex[2 * t + 1] = (uint16_t)((t + 3) % 8);
	}
	g = (float *)((uint8_t *)ex + locus_ids_bytes(T, 2));
	for (uint32_t i = 0; i < 2 * T; i++)
		g[i] = 0.5f;
	return (uint32_t)locus_dispatch_req_len(T, 2);
}

static void fill_row(uint8_t *row, uint32_t token)
{
	for (int i = 0; i < ROW; i++)
		row[i] = (uint8_t)(token * 29 + i * 3 + 1);
}

static void test_region_flag_without_registration(void **state)
{
	struct locus_client *c = attach_rank(0);
	uint64_t before = ctr_("rejected_bad_region", 0);
	uint8_t *stage = locus_client_stage(c, NULL);
	struct locus_desc d, in;
	(void)state;

	d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = 31, .flags = LOCUS_DESC_F_REGION,
				 .region = 0x18,
				 .len = put_dispatch(stage, 0, 8, 31) };
	assert_int_equal(locus_client_submit(c, &d, 1), 1);
	d.op = LOCUS_OP_COMBINE;
	d.id = 32;
	assert_int_equal(locus_client_submit(c, &d, 1), 1);
	tu_wait_desc(c, &in);
	assert_int_equal(in.op, LOCUS_OP_DISPATCH);
	assert_int_equal(in.id, 31);
	assert_int_equal(in.status, -LOCUS_ERANGE);
	tu_wait_desc(c, &in);
	assert_int_equal(in.op, LOCUS_OP_COMBINE);
	assert_int_equal(in.id, 32);
	assert_int_equal(in.status, -LOCUS_ERANGE);
	assert_false(tu_try_desc(c, &in, 200));
	assert_int_equal(ctr_("rejected_bad_region", 0), before + 2);
	locus_client_detach(c);
}

/* Hand the engine a region directly, as the control side does after its checks. */
static void engine_region(uint32_t slot, uint32_t idx, enum locus_engine_region_cmd cmd,
			  const struct locus_engine_region *r)
{
	struct locus_engine *e = locus_node_engine(node);
	uint64_t t = locus_engine_region_command(e, slot, idx, cmd, r);

	for (int i = 0; i < 50000 && !locus_engine_region_done(e, slot, idx, t); i++)
		tu_nap();
	assert_true(locus_engine_region_done(e, slot, idx, t));
}

static void test_engine_region_rows(void **state)
{
	const uint32_t T = 32, rid = (5u << 3) | 2, unmapped = (6u << 3) | 3;
	struct locus_client *rk[GPN];
	struct locus_engine_region r;
	struct locus_desc d, in;
	uint8_t *buf, *stage;
	uint32_t slot0, got[T][2];
	uint64_t rows = 0, unm = ctr_("rejected_region_unmapped", 0);
	(void)state;

	for (int i = 0; i < GPN; i++)
		rk[i] = attach_rank((uint32_t)i);
	slot0 = locus_client_slot(rk[0]);
	buf = aligned_alloc(4096, 1 << 20);
	assert_non_null(buf);
	memset(buf, 0xee, 1 << 20);
	for (uint32_t t = 0; t < T; t++)
		fill_row(buf + 8192 + (size_t)t * ROW, t);
	r = (struct locus_engine_region){ .id = rid, .addr = buf, .len = 1 << 20 };
	engine_region(slot0, rid % LOCUS_CLIENT_MAX_REGIONS, LOCUS_ENGINE_REGION_ADD, &r);
	assert_int_equal(ctr_("regions", 0), 1);

	/* rows beyond the region's end are refused like rows beyond the stage */
	stage = locus_client_stage(rk[0], NULL);
	d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = 40, .flags = LOCUS_DESC_F_REGION,
				 .region = rid, .len = put_dispatch(stage, (1 << 20) - 4096, T, 40) };
	assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);
	tu_wait_desc(rk[0], &in);
	assert_int_equal(in.id, 40);
	assert_int_equal(in.status, -LOCUS_ERANGE);

	/* the batch from the region: every (token, k) once, content intact */
	memset(got, 0, sizeof(got));
	d.id = 41;
	d.len = put_dispatch(stage, 8192, T, 41);
	assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);
	for (int rank = 0; rank < GPN; rank++) {
		for (;;) {
			struct locus_rows_hdr *h;
			struct locus_row_ref *refs;
			uint8_t *msg;

			if (rank == 0)
				tu_wait_desc(rk[0], &in);
			else if (!tu_try_desc(rk[rank], &in, 50))
				break;
			if (in.op == LOCUS_OP_DISPATCH) {
				assert_int_equal(in.id, 41);
				assert_int_equal(in.status, 0);
				break;
			}
			assert_int_equal(in.op, LOCUS_OP_ROWS_IN);
			msg = (uint8_t *)locus_client_inbox(rk[rank], &in);
			assert_non_null(msg);
			h = locus_rows_hdr_of(msg);
			refs = locus_rows_refs(msg);
			/* in place (rank 0's own rows) the descriptor names the region */
			assert_int_equal(locus_rows_msg_check(msg, in.len, GPN,
							      rank == 0 ? 1 << 20 : 0, NULL), 0);
			assert_int_equal(!!(h->flags & LOCUS_ROWS_IN_REGION), rank == 0);
			assert_int_equal(!!(in.flags & LOCUS_DESC_F_REGION), rank == 0);
			if (rank == 0)
				assert_int_equal(in.region, rid);
			for (uint32_t j = 0; j < h->n_rows; j++) {
				uint32_t t = refs[j].token;
				const uint8_t *row = rank == 0 ? buf + h->rows_off + (size_t)t * ROW
							       : msg + h->rows_off + (size_t)j * ROW;
				uint8_t want[ROW];

				assert_true(t < T);
				fill_row(want, t);
				assert_memory_equal(row, want, ROW);
				for (int k = 0; k < 2; k++)
					if (refs[j].kmask & (1u << k))
						got[t][k]++;
			}
			rows += h->n_rows;
			locus_client_release_slot(rk[rank], in.slot);
		}
	}
	for (uint32_t t = 0; t < T; t++)
		assert_true(got[t][0] == 1 && got[t][1] == 1);
	assert_true(rows >= T);

	/* COMBINE from the region to rank 1: rows 0..3 of the region's batch */
	{
		struct locus_combine_req *cq = (struct locus_combine_req *)stage;
		struct locus_row_ref *refs = (struct locus_row_ref *)(cq + 1);
		uint8_t *msg;
		struct locus_rows_hdr *h;

		*cq = (struct locus_combine_req){ .magic = LOCUS_COMBINE_MAGIC, .layer = 1,
						  .dst_rank = 1, .n_rows = 4, .row_bytes = ROW,
						  .rows_off = 8192, .batch_id = 41 };
		for (int j = 0; j < 4; j++)
			refs[j] = (struct locus_row_ref){ .token = (uint32_t)j, .kmask = 1 };
		d = (struct locus_desc){ .op = LOCUS_OP_COMBINE, .id = 42,
					 .flags = LOCUS_DESC_F_REGION, .region = rid,
					 .len = (uint32_t)locus_combine_req_len(4) };
		assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);
		tu_wait_desc(rk[0], &in);
		assert_int_equal(in.id, 42);
		assert_int_equal(in.status, 0);
		tu_wait_desc(rk[1], &in);
		assert_int_equal(in.op, LOCUS_OP_RESULTS_IN);
		msg = (uint8_t *)locus_client_inbox(rk[1], &in);
		assert_non_null(msg);
		h = locus_rows_hdr_of(msg);
		assert_int_equal(h->n_rows, 4);
		assert_memory_equal(msg + h->rows_off, buf + 8192, 4 * ROW);
		locus_client_release_slot(rk[1], in.slot);
	}

	/* a region locusd could not map: intra-node copies fail, once, with EOPNOTSUPP */
	r = (struct locus_engine_region){ .id = unmapped, .len = 1 << 20 };
	engine_region(slot0, unmapped % LOCUS_CLIENT_MAX_REGIONS, LOCUS_ENGINE_REGION_ADD, &r);
	d = (struct locus_desc){ .op = LOCUS_OP_DISPATCH, .id = 43, .flags = LOCUS_DESC_F_REGION,
				 .region = unmapped, .len = put_dispatch(stage, 8192, T, 43) };
	assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);
	tu_wait_desc(rk[0], &in);
	assert_int_equal(in.id, 43);
	assert_int_equal(in.status, -EOPNOTSUPP);
	assert_int_equal(ctr_("rejected_region_unmapped", 0), unm + 1);
	for (int rank = 0; rank < GPN; rank++)
		assert_false(tu_try_desc(rk[rank], &in, 20));

	/* removed regions are refused */
	engine_region(slot0, rid % LOCUS_CLIENT_MAX_REGIONS, LOCUS_ENGINE_REGION_DEL, NULL);
	engine_region(slot0, unmapped % LOCUS_CLIENT_MAX_REGIONS, LOCUS_ENGINE_REGION_DEL, NULL);
	assert_int_equal(ctr_("regions", 0), 0);
	d.id = 44;
	d.region = rid;
	assert_int_equal(locus_client_submit(rk[0], &d, 1), 1);
	tu_wait_desc(rk[0], &in);
	assert_int_equal(in.id, 44);
	assert_int_equal(in.status, -LOCUS_ERANGE);
	for (int i = 0; i < GPN; i++)
		locus_client_detach(rk[i]);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_memfd_refused),
		cmocka_unit_test(test_sealed_memfd),
		cmocka_unit_test(test_bad_offsets),
		cmocka_unit_test(test_raw_refusals),
		cmocka_unit_test(test_region_flag_without_registration),
		cmocka_unit_test(test_engine_region_rows),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
