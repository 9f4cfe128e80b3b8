// SPDX-License-Identifier: MIT
/*
 * Client slots: the layout, and the client library against a real node on
 * threads (its registration socket, control loop and engine): the attach
 * handshake, refusals with their sentences, a daemon that does not answer,
 * full slots, dead and unconfirmed clients taken back, a slot's memfd
 * sealed, delivered-payload bounds, and a freed slot renewed: a process
 * that kept its old mapping neither sees nor touches the slot's next owner.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_shm.h"
#include "node_util.h"

#define INST "t-client"

static char shm_dir[64];
static struct tu_node T;

static const struct locus_clients_params params = {
	.n_slots = 2,
	.ring_size = 16,
	.stage_size = 64 * 1024,
	.inbox_slots = 4,
	.inbox_slot_size = 16384,
};

static const char conf[] =
	"[locusd]\ninstance = " INST "\nclient_slots = 2\nring_size = 16\n"
	"stage_size = 65536\nclient_inbox_slots = 4\ninbox_slot_size = 16384\n"
	"moe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\nmax_batch_tokens = 64\n"
	"table_slot_size = 65536\nload_timeout_ms = 60000\n"
	"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";

#define ctr(name, elem) tu_ctr(T.view.ctrs, name, elem)

/* The node's own view of its slots (the engine's region). */
static struct locus_client_ctl *node_ctl(uint32_t slot)
{
	struct locus_clients v;
	size_t len;

	assert_int_equal(locus_clients_geometry(&v, &params), 0);
	v.base = locus_node_client_region(T.node, &len);
	return locus_clients_ctl(&v, slot);
}

static uint32_t node_state(uint32_t slot)
{
	return locus_client_state_of(__atomic_load_n(&node_ctl(slot)->state_pid,
						     __ATOMIC_ACQUIRE));
}

/* Wait (bounded) until counter name reaches at least want. */
static void wait_ctr(const char *name, uint64_t want)
{
	for (int i = 0; i < 25000 && ctr(name, 0) < want; i++)
		tu_nap();
	assert_true(ctr(name, 0) >= want);
}

static int wait_child(pid_t pid)
{
	int status;

	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

static void test_region_layout(void **state)
{
	static uint8_t mem[1 << 22] __attribute__((aligned(4096)));
	struct locus_clients v, g;
	struct locus_clients_hdr *h = (struct locus_clients_hdr *)mem;
	struct locus_clients_params bad = params;
	uint64_t need = locus_clients_region_size(&params);
	(void)state;

	assert_true(need > 0 && need <= sizeof(mem));
	bad.ring_size = 12;
	assert_int_equal(locus_clients_region_size(&bad), 0);
	assert_int_equal(locus_clients_geometry(&g, &bad), -EINVAL);
	bad = params;
	bad.inbox_slot_size = 100;
	assert_int_equal(locus_clients_region_size(&bad), 0);
	assert_int_equal(locus_clients_open(&v, mem, need), -LOCUS_EBADMAGIC);
	assert_int_equal(locus_clients_init(mem, need - 1, &params), -EINVAL);
	assert_int_equal(locus_clients_init(mem, need, &params), 0);
	assert_int_equal(locus_clients_open(&v, mem, need), 0);
	/* a client's geometry is the daemon's, without the memory */
	assert_int_equal(locus_clients_geometry(&g, &params), 0);
	assert_null(g.base);
	assert_int_equal(g.slot_stride, v.slot_stride);
	assert_int_equal(g.buf_off, v.buf_off);
	assert_int_equal(g.size, need);
	/* every slot's pieces lie inside the region and do not overlap */
	for (uint32_t i = 0; i < params.n_slots; i++) {
		uint8_t *ctl = (uint8_t *)locus_clients_ctl(&v, i);
		uint8_t *sub = locus_clients_submit_ring(&v, i);
		uint8_t *cpl = locus_clients_completion_ring(&v, i);
		uint8_t *buf = locus_clients_buf(&v, i);

		assert_true(sub >= ctl + sizeof(struct locus_client_ctl));
		assert_true(cpl >= sub + locus_ring_bytes(params.ring_size, LOCUS_DESC_SIZE));
		assert_true(buf >= cpl + locus_ring_bytes(params.ring_size, LOCUS_DESC_SIZE));
		assert_int_equal((uintptr_t)buf % 4096, 0);
		assert_true(buf + v.buf_size <= mem + need);
	}
	assert_int_equal(locus_clients_open(&v, mem, need - 1), -LOCUS_ETRUNCATED);
	h->slot_stride += 64; /* a header that disagrees with its own geometry */
	assert_int_equal(locus_clients_open(&v, mem, need), -LOCUS_ERANGE);
	h->slot_stride -= 64;
	h->ring_size = 3;
	assert_int_equal(locus_clients_open(&v, mem, need), -LOCUS_ERANGE);
	h->ring_size = params.ring_size;
	h->version = 9;
	assert_int_equal(locus_clients_open(&v, mem, need), -LOCUS_EVERSION);
}

/* Child: attach as decoder 3, report a load, one ROUTE, exactly one completion. */
static int child_roundtrip(void)
{
	struct locus_client_req req = { .roles = LOCUS_ROLE_DECODE, .decoder_id = 3 };
	struct locus_desc d = { .op = LOCUS_OP_ROUTE, .id = 77, .off = 128, .len = 12288 };
	struct locus_client *c;
	struct locus_error e;
	uint64_t stage_size;

	if (locus_client_attach(INST, &req, &c, &e) != 0) {
		fprintf(stderr, "attach: %s\n", e.msg);
		return 1;
	}
	if (!locus_client_stage(c, &stage_size) || stage_size != params.stage_size)
		return 2;
	if (locus_client_generation(c) == 0)
		return 3;
	locus_client_report_load(c, 42);
	if (locus_client_submit(c, &d, 1) != 1)
		return 4;
	/* no table pushed: the ROUTE is refused, with one completion of its own */
	if (!tu_try_desc(c, &d, 25000) || d.op != LOCUS_OP_ROUTE || d.id != 77 || d.status >= 0 ||
	    locus_client_inbox(c, &d) != NULL)
		return 5;
	if (tu_try_desc(c, &d, 100))
		return 6;
	locus_client_detach(c);
	return 0;
}

static void test_attach_roundtrip_detach(void **state)
{
	uint64_t detached = ctr("clients_detached", 0);
	pid_t pid;
	(void)state;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_roundtrip());
	assert_int_equal(wait_child(pid), 0);
	wait_ctr("clients_detached", detached + 1);
	for (int i = 0; i < 25000 && node_state(0) != LOCUS_CLIENT_FREE; i++)
		tu_nap();
	assert_int_equal(node_state(0), LOCUS_CLIENT_FREE);
}

static const char *expect_instance = INST;

static int child_attach_expect(uint32_t roles, uint32_t id, int want, const char *needle,
			       unsigned timeout_ms)
{
	struct locus_client_req req = { .roles = roles, .rank = id, .decoder_id = id,
					.timeout_ms = timeout_ms };
	struct locus_client *c = NULL;
	struct locus_error e = { 0 };
	int ret = locus_client_attach(expect_instance, &req, &c, &e);

	if (ret != want) {
		fprintf(stderr, "attach returned %d (%s), wanted %d\n", ret, e.msg, want);
		return 1;
	}
	if (needle && !strstr(e.msg, needle)) {
		fprintf(stderr, "message '%s' lacks '%s'\n", e.msg, needle);
		return 2;
	}
	if (ret == 0)
		locus_client_detach(c);
	return 0;
}

static int expect(uint32_t roles, uint32_t id, int want, const char *needle, unsigned ms)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_attach_expect(roles, id, want, needle, ms));
	return wait_child(pid);
}

static void test_refused_timeout_full_not_running(void **state)
{
	struct locus_client *a = tu_attach(INST, LOCUS_ROLE_DECODE, 5, 0);
	uint64_t refused = ctr("clients_refused", 0);
	struct locus_client *b;
	(void)state;

	/* the daemon refuses: the code and its sentence reach the client, counted */
	assert_int_equal(expect(LOCUS_ROLE_DECODE, 5, -EEXIST, "decoder id 5 is attached already",
				0), 0);
	assert_int_equal(expect(LOCUS_ROLE_RANK, 99, -LOCUS_ERANGE, "rank 99 is not on node 0",
				0), 0);
	assert_int_equal(expect(LOCUS_ROLE_DECODE, 8, -LOCUS_ERANGE, "max_decoders", 0), 0);
	assert_int_equal(ctr("clients_refused", 0), refused + 3);

	/* both slots taken */
	b = tu_attach(INST, LOCUS_ROLE_PREFILL, 0, 0);
	assert_int_equal(expect(LOCUS_ROLE_PREFILL, 0, -LOCUS_EFULL, "all 2 client slots", 0), 0);
	locus_client_detach(b);

	/* nobody answers: a bounded wait; the slot goes back once the daemon looks */
	tu_node_hold(&T, 1);
	assert_int_equal(expect(LOCUS_ROLE_RANK, 1, -ETIMEDOUT, "did not answer", 50), 0);
	tu_node_hold(&T, 0);
	b = tu_attach(INST, LOCUS_ROLE_RANK, 0, 1); /* rank 1 free again (EEXIST waited out) */
	locus_client_detach(b);

	/* a daemon stopping takes no clients */
	locus_node_set_stopping(T.node);
	assert_int_equal(expect(LOCUS_ROLE_PREFILL, 0, -LOCUS_ESTATE, "not running", 50), 0);
	locus_node_set_running(T.node);
	locus_client_detach(a);

	/* no such instance */
	expect_instance = "t-no-such";
	assert_int_equal(expect(LOCUS_ROLE_PREFILL, 0, -ENOENT, "does not exist", 50), 0);
	expect_instance = INST;
}

/* Attach without tu_attach's retries: what a serving process sees. */
static int attach_once(uint32_t roles, uint32_t id, unsigned timeout_ms, struct locus_client **c,
		       struct locus_error *e)
{
	struct locus_client_req req = { .roles = roles, .decoder_id = id, .rank = id,
					.timeout_ms = timeout_ms };

	return locus_client_attach(INST, &req, c, e);
}

static void *release_hold(void *arg)
{
	(void)arg;
	usleep(50 * 1000);
	tu_node_hold(&T, 0);
	return NULL;
}

/*
 * A decoder (or rank) that detaches and attaches again with the same id at
 * once is not refused "attached already": the attach waits out the pending
 * detach within its time-out. Forced here: the node's control pass is held,
 * so the detach is certainly not processed when the attach arrives. A live
 * holder still refuses at once, and a dead one is waited out too.
 */
static void test_reattach_waits_for_detach(void **state)
{
	uint64_t refused = ctr("clients_refused", 0);
	struct locus_client *a, *b;
	struct locus_error e = { 0 };
	pthread_t th;
	pid_t pid;
	(void)state;

	for (int i = 0; i < 20; i++) { /* back to back, the control pass free to race */
		assert_int_equal(attach_once(LOCUS_ROLE_DECODE, 3, 2000, &a, &e), 0);
		locus_client_detach(a);
	}
	a = tu_attach(INST, LOCUS_ROLE_DECODE | LOCUS_ROLE_RANK, 3, 3);
	tu_node_hold(&T, 1);
	locus_client_detach(a);
	assert_int_equal(pthread_create(&th, NULL, release_hold, NULL), 0);
	if (attach_once(LOCUS_ROLE_DECODE | LOCUS_ROLE_RANK, 3, 2000, &b, &e) != 0)
		fail_msg("re-attach after a detach: %s", e.msg);
	pthread_join(th, NULL);
	assert_int_equal(ctr("clients_refused", 0), refused);

	/* held by a live client: refused at once, with the sentence */
	assert_int_equal(expect(LOCUS_ROLE_DECODE, 3, -EEXIST, "decoder id 3 is attached already",
				2000), 0);
	locus_client_detach(b);

	/* held by a client that died: waited out as well */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		tu_attach(INST, LOCUS_ROLE_RANK, 0, 2);
		_exit(0);
	}
	assert_int_equal(wait_child(pid), 0);
	if (attach_once(LOCUS_ROLE_RANK, 2, 2000, &b, &e) != 0)
		fail_msg("attach after the holder died: %s", e.msg);
	locus_client_detach(b);
}

/*
 * A raw ATTACH for rank 2 on a connection of its own (*sock): the grant's
 * fd into *fd. Slots the previous test freed are waited for, like tu_attach.
 */
static int raw_attach(int *sock, struct locus_reg_rep *rep, int *fd)
{
	struct locus_reg_req q = { .magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION,
				   .op = LOCUS_REG_ATTACH, .roles = LOCUS_ROLE_RANK, .rank = 2,
				   .attach_reserved = 2000 };
	struct locus_error e;

	for (int i = 0; i < 25000; i++) {
		*sock = locus_client_reg_connect(INST, &e);
		if (*sock < 0 || locus_client_reg_transact(*sock, &q, -1, rep, fd, 5000, &e) < 0) {
			fprintf(stderr, "raw attach: %s\n", e.msg);
			return -1;
		}
		if (rep->status != -LOCUS_EFULL && rep->status != -EEXIST)
			return rep->status;
		close(*sock);
		tu_nap();
	}
	return rep->status;
}

static void test_unconfirmed_dead_sealed(void **state)
{
	uint64_t detached = ctr("clients_detached", 0), reclaimed = ctr("clients_reclaimed", 0);
	struct locus_reg_rep rep;
	struct locus_client *c;
	struct locus_error e;
	int sock, fd;
	pid_t pid;
	(void)state;

	/* granted, never confirmed (the connection closes): taken back, rank free again */
	assert_int_equal(raw_attach(&sock, &rep, &fd), 0);
	assert_true(fd >= 0);
	/* the memfd is sealed: no holder can shrink or grow what locusd maps */
	assert_int_equal(ftruncate(fd, 0), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ftruncate(fd, (off_t)rep.slot_size * 2), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(rep.slot_size, (uint64_t)((uint8_t *)node_ctl(1) - (uint8_t *)node_ctl(0)));
	close(fd);
	close(sock);
	wait_ctr("clients_detached", detached + 1);
	c = tu_attach(INST, LOCUS_ROLE_RANK, 0, 2);
	locus_client_detach(c);

	/* asked for, then gone before the answer: nothing stays held either */
	sock = locus_client_reg_connect(INST, &e);
	assert_true(sock >= 0);
	{
		struct locus_reg_req q = { .magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION,
					   .op = LOCUS_REG_ATTACH, .roles = LOCUS_ROLE_RANK,
					   .rank = 2 };

		assert_int_equal(send(sock, &q, sizeof(q), 0), (ssize_t)sizeof(q));
	}
	close(sock);
	c = tu_attach(INST, LOCUS_ROLE_RANK, 0, 2);
	locus_client_detach(c);

	/* attached, died without a word: reclaimed */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		tu_attach(INST, LOCUS_ROLE_RANK, 0, 3);
		_exit(0);
	}
	assert_int_equal(wait_child(pid), 0);
	wait_ctr("clients_reclaimed", reclaimed + 1);

	/* a client that writes garbage into its own state word is detached */
	c = tu_attach(INST, LOCUS_ROLE_RANK, 0, 3);
	detached = ctr("clients_detached", 0) + ctr("clients_reclaimed", 0);
	{
		uint8_t *stage = locus_client_stage(c, NULL);
		struct locus_client_ctl *mine =
			(void *)(stage - locus_client_region(c)->buf_off);

		__atomic_store_n(&mine->state_pid, 0x77ull, __ATOMIC_RELEASE);
	}
	for (int i = 0; i < 25000 &&
			ctr("clients_detached", 0) + ctr("clients_reclaimed", 0) == detached; i++)
		tu_nap();
	assert_true(ctr("clients_detached", 0) + ctr("clients_reclaimed", 0) > detached);
	locus_client_detach(c);
}

/* A client of another registration protocol is told which, and counted. */
static void test_other_protocol_refused(void **state)
{
	struct locus_reg_req q = { .magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION - 1,
				   .op = LOCUS_REG_ATTACH, .roles = LOCUS_ROLE_PREFILL };
	uint64_t malformed = ctr("regions_refused", 0);
	struct locus_reg_rep rep;
	struct locus_error e;
	char want[96];
	int sock = locus_client_reg_connect(INST, &e);
	(void)state;

	assert_true(sock >= 0);
	assert_int_equal(locus_client_reg_transact(sock, &q, -1, &rep, NULL, 5000, &e), 0);
	close(sock);
	assert_int_equal(rep.status, -LOCUS_EVERSION);
	snprintf(want, sizeof(want), "registration protocol version %u, locusd speaks %u",
		 LOCUS_REG_VERSION - 1, LOCUS_REG_VERSION);
	assert_non_null(strstr(rep.msg, want));
	assert_int_equal(ctr("regions_refused", 0), malformed + 1);
}

/* The client side checks what the daemon names as delivered data. */
static void test_inbox_bounds(void **state)
{
	struct locus_client *c = tu_attach(INST, LOCUS_ROLE_RANK, 0, 1);
	struct locus_desc in;
	(void)state;

	in = (struct locus_desc){ .op = LOCUS_OP_ROWS_IN, .slot = 2,
				  .off = locus_clients_inbox_off(locus_client_region(c), 2),
				  .len = params.inbox_slot_size };
	assert_non_null(locus_client_inbox(c, &in));
	in.len = 2 * params.inbox_slot_size; /* slots 2 and 3: the last two */
	assert_non_null(locus_client_inbox(c, &in));
	in.len++;
	assert_null(locus_client_inbox(c, &in));
	in.len = 100;
	in.off += 64; /* not where slot 2 starts */
	assert_null(locus_client_inbox(c, &in));
	in.slot = params.inbox_slots;
	in.off = locus_clients_inbox_off(locus_client_region(c), 0);
	assert_null(locus_client_inbox(c, &in));
	assert_int_equal(locus_client_release_slot(c, params.inbox_slots), -LOCUS_ERANGE);
	locus_client_detach(c);
}

/*
 * A RELEASE the full submit ring cannot take is kept by the client and goes
 * out, first, at its next poll: with the engine held, the ring is filled
 * (RELEASEs of slots holding nothing, which the engine counts as bad), then
 * inbox_slots more are accepted and wait; one more than that is refused.
 * Let go, the engine sees every one of them.
 */
static void test_release_waits_for_ring_room(void **state)
{
	struct locus_client *c = tu_attach(INST, LOCUS_ROLE_RANK, 0, 1);
	uint64_t bad = ctr("rejected_bad_release", 0);
	struct locus_desc d = { .op = LOCUS_OP_RELEASE, .slot = 0 }, out[8];
	uint32_t filled = 0;
	(void)state;

	tu_engine_hold(&T, 1);
	while (filled <= params.ring_size && locus_client_submit(c, &d, 1) == 1)
		filled++;
	assert_in_range(filled, 1, params.ring_size);
	assert_int_equal(locus_client_releases_waiting(c), 0);
	for (uint32_t s = 0; s < params.inbox_slots; s++)
		assert_int_equal(locus_client_release_slot(c, s), 0);
	assert_int_equal(locus_client_releases_waiting(c), params.inbox_slots);
	assert_int_equal(locus_client_release_slot(c, 0), -LOCUS_EFULL);
	/* still no room: a poll leaves them waiting, and a submit gets no room either */
	assert_int_equal(locus_client_poll(c, out, 8), 0);
	assert_int_equal(locus_client_releases_waiting(c), params.inbox_slots);
	assert_int_equal(locus_client_submit(c, &d, 1), -LOCUS_EFULL);
	tu_engine_hold(&T, 0);
	for (int i = 0; i < 25000 && locus_client_releases_waiting(c); i++) {
		locus_client_poll(c, out, 8);
		tu_nap();
	}
	assert_int_equal(locus_client_releases_waiting(c), 0);
	wait_ctr("rejected_bad_release", bad + filled + params.inbox_slots);
	assert_int_equal(ctr("rejected_bad_release", 0), bad + filled + params.inbox_slots);
	locus_client_detach(c);
}

/*
 * A freed slot gets a fresh memfd. A process that kept the old mapping
 * (here a forked child of the first owner, which detached) writes into an
 * object nobody reads, and reads nothing of the next owner's.
 */
static void test_slot_renewed(void **state)
{
	struct locus_client *other = tu_attach(INST, LOCUS_ROLE_PREFILL, 0, 0);
	struct locus_client *a, *b;
	uint64_t detached;
	int to_child[2], to_parent[2];
	uint8_t *sa, *sb;
	uint32_t slot;
	char ch;
	pid_t pid;
	(void)state;

	a = tu_attach(INST, LOCUS_ROLE_RANK, 0, 0);
	slot = locus_client_slot(a);
	sa = locus_client_stage(a, NULL);
	memset(sa, 0xa1, 4096);
	assert_int_equal(pipe(to_child), 0);
	assert_int_equal(pipe(to_parent), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* the stale holder: the mapping it inherited, after its parent left */
		int bad = 0;

		alarm(30); /* a parent that failed leaves us waiting */
		if (read(to_child[0], &ch, 1) != 1)
			_exit(10);
		memset(sa, 0xee, 4096);      /* B must never see this */
		if (write(to_parent[1], "w", 1) != 1)
			_exit(11);
		if (read(to_child[0], &ch, 1) != 1)
			_exit(12);
		for (int i = 0; i < 4096; i++)
			bad += sa[i] != 0xee; /* nor we what B wrote */
		_exit(bad ? 13 : 0);
	}
	detached = ctr("clients_detached", 0);
	locus_client_detach(a);
	wait_ctr("clients_detached", detached + 1);
	/* the other slot is held: the next owner can only get this one */
	b = NULL;
	for (int i = 0; i < 25000 && !b; i++) {
		struct locus_client_req req = { .roles = LOCUS_ROLE_RANK, .rank = 0 };

		if (locus_client_attach(INST, &req, &b, NULL) < 0)
			tu_nap();
	}
	assert_non_null(b);
	assert_int_equal(locus_client_slot(b), slot);
	sb = locus_client_stage(b, NULL);
	for (int i = 0; i < 4096; i++)
		assert_int_equal(sb[i], 0); /* fresh: nothing of A's */
	assert_int_equal(write(to_child[1], "g", 1), 1);
	assert_int_equal(read(to_parent[0], &ch, 1), 1);
	for (int i = 0; i < 4096; i++)
		assert_int_equal(sb[i], 0); /* the stale holder's write went nowhere */
	memset(sb, 0xb2, 4096);
	assert_int_equal(write(to_child[1], "g", 1), 1);
	assert_int_equal(wait_child(pid), 0);
	close(to_child[0]);
	close(to_child[1]);
	close(to_parent[0]);
	close(to_parent[1]);
	locus_client_detach(b);
	locus_client_detach(other);
}

/* A node of its own for each test: what one leaves behind cannot fail the next. */
static int setup(void **state)
{
	(void)state;
	return tu_node_start(&T, conf);
}

static int teardown(void **state)
{
	(void)state;
	tu_node_stop(&T);
	return 0;
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-client-test-XXXXXX");
	if (!mkdtemp(shm_dir))
		return -1;
	setenv(LOCUS_SHM_DIR_ENV, shm_dir, 1);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	return rmdir(shm_dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_region_layout),
		cmocka_unit_test_setup_teardown(test_attach_roundtrip_detach, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slot_renewed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_timeout_full_not_running, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reattach_waits_for_detach, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unconfirmed_dead_sealed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_protocol_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inbox_bounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_release_waits_for_ring_room, setup, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
