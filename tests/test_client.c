// SPDX-License-Identifier: MIT
/*
 * Client slots: the attach handshake between a client process and a daemon
 * played by the test, refusals, time-outs, full slots, dead-client reclaim
 * and delivered-payload bounds.
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

static char shm_dir[64];

static const struct locus_clients_params params = {
	.n_slots = 2,
	.ring_size = 16,
	.stage_size = 64 * 1024,
	.inbox_slots = 4,
	.inbox_slot_size = 16384,
};

struct daemon {
	struct locus_shm *shm;
	struct locus_clients v;
};

static void daemon_up(struct daemon *d, const char *instance, const struct locus_clients_params *p,
		      int running)
{
	struct locus_shm_params sp = { .instance = instance };
	struct locus_error e;
	size_t size;
	void *region;

	sp.region_size[LOCUS_REGION_CLIENTS] = locus_clients_region_size(p);
	assert_true(sp.region_size[LOCUS_REGION_CLIENTS] > 0);
	if (locus_shm_create(&sp, &d->shm, &e) != 0)
		fail_msg("create: %s", e.msg);
	region = locus_shm_region(d->shm, LOCUS_REGION_CLIENTS, &size);
	assert_non_null(region);
	assert_int_equal(locus_clients_init(region, size, p), 0);
	assert_int_equal(locus_clients_open(&d->v, region, size), 0);
	if (running)
		locus_shm_set_state(d->shm, LOCUS_SHM_RUNNING);
}

static void daemon_down(struct daemon *d, const char *instance)
{
	locus_shm_detach(d->shm);
	locus_shm_remove(instance);
}

static uint32_t slot_state(struct daemon *d, uint32_t slot)
{
	return locus_client_state_of(__atomic_load_n(&locus_clients_ctl(&d->v, slot)->state_pid,
						     __ATOMIC_ACQUIRE));
}

/* Run the daemon's control loop until `slot` reports ev, bounded. */
static void wait_event(struct daemon *d, uint32_t slot, int ev)
{
	struct timespec ts = { 0, 1000000 };

	for (int i = 0; i < 5000; i++) {
		if (locus_clients_check(&d->v, slot) == ev)
			return;
		nanosleep(&ts, NULL);
	}
	fail_msg("slot %u never reported event %d (state %u)", slot, ev, slot_state(d, slot));
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
	struct locus_clients v;
	struct locus_clients_hdr *h = (struct locus_clients_hdr *)mem;
	struct locus_clients_params bad = params;
	uint64_t need = locus_clients_region_size(&params);
	(void)state;

	assert_true(need > 0 && need <= sizeof(mem));
	bad.ring_size = 12;
	assert_int_equal(locus_clients_region_size(&bad), 0);
	bad = params;
	bad.inbox_slot_size = 100;
	assert_int_equal(locus_clients_region_size(&bad), 0);
	assert_int_equal(locus_clients_open(&v, mem, need), -LOCUS_EBADMAGIC);
	assert_int_equal(locus_clients_init(mem, need - 1, &params), -EINVAL);
	assert_int_equal(locus_clients_init(mem, need, &params), 0);
	assert_int_equal(locus_clients_open(&v, mem, need), 0);
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

/* Child: attach as decoder 3, submit one ROUTE, wait for its completion. */
static int child_roundtrip(const char *instance)
{
	struct locus_client_req req = { .roles = LOCUS_ROLE_DECODE, .decoder_id = 3 };
	struct locus_client *c;
	struct locus_error e;
	struct locus_desc d = { .op = LOCUS_OP_ROUTE, .id = 77, .off = 128, .len = 12288 };
	uint64_t stage_size;

	if (locus_client_attach(instance, &req, &c, &e) != 0) {
		fprintf(stderr, "attach: %s\n", e.msg);
		return 1;
	}
	if (!locus_client_stage(c, &stage_size) || stage_size != params.stage_size)
		return 2;
	locus_client_report_load(c, 42);
	if (locus_client_submit(c, &d, 1) != 1)
		return 3;
	for (int i = 0; i < 5000; i++) {
		struct timespec ts = { 0, 1000000 };

		if (locus_client_poll(c, &d, 1) == 1) {
			const void *p = locus_client_inbox(c, &d);

			if (d.op != LOCUS_OP_ROUTE || d.id != 77 || d.status != 0 || d.peer != 3)
				return 4;
			if (p != NULL) /* a completion names no inbox data */
				return 5;
			locus_client_detach(c);
			return 0;
		}
		nanosleep(&ts, NULL);
	}
	return 6;
}

static void test_attach_roundtrip_detach(void **state)
{
	const char *inst = "t-client-rt";
	struct daemon d;
	struct locus_ring_end sub, cpl;
	struct locus_desc desc;
	struct locus_client_ctl *ctl;
	pid_t pid;
	(void)state;

	daemon_up(&d, inst, &params, 1);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_roundtrip(inst));
	wait_event(&d, 0, LOCUS_CLIENTS_CLAIM);
	ctl = locus_clients_ctl(&d.v, 0);
	assert_int_equal(ctl->roles, LOCUS_ROLE_DECODE);
	assert_int_equal(ctl->decoder_id, 3);
	assert_int_equal(locus_client_pid_of(ctl->state_pid), pid);
	assert_int_equal(locus_clients_activate(&d.v, 0, 0), 0);
	assert_int_equal(slot_state(&d, 0), LOCUS_CLIENT_ACTIVE);
	assert_int_equal(locus_ring_attach(&sub, locus_clients_submit_ring(&d.v, 0), d.v.ring_bytes,
					   params.ring_size, LOCUS_DESC_SIZE, 0), 0);
	assert_int_equal(locus_ring_attach(&cpl, locus_clients_completion_ring(&d.v, 0),
					   d.v.ring_bytes, params.ring_size, LOCUS_DESC_SIZE, 1), 0);
	for (int i = 0; i < 5000 && locus_ring_dequeue_burst(&sub, &desc, 1) == 0; i++)
		usleep(1000);
	assert_int_equal(desc.op, LOCUS_OP_ROUTE);
	assert_int_equal(desc.id, 77);
	assert_int_equal(__atomic_load_n(&ctl->load, __ATOMIC_ACQUIRE), 42);
	assert_int_equal(ctl->load_seq, 1);
	desc.status = 0;
	desc.peer = 3;
	desc.off = 0;
	desc.len = 0;
	assert_int_equal(locus_ring_enqueue_burst(&cpl, &desc, 1), 1);
	assert_int_equal(wait_child(pid), 0);
	wait_event(&d, 0, LOCUS_CLIENTS_GONE); /* detached */
	locus_clients_release(&d.v, 0);
	assert_int_equal(slot_state(&d, 0), LOCUS_CLIENT_FREE);
	daemon_down(&d, inst);
}

static int child_attach_expect(const char *instance, int want, const char *needle,
			       unsigned timeout_ms)
{
	struct locus_client_req req = { .roles = LOCUS_ROLE_RANK, .rank = 99,
					.timeout_ms = timeout_ms };
	struct locus_client *c = NULL;
	struct locus_error e = { 0 };
	int ret = locus_client_attach(instance, &req, &c, &e);

	if (ret != want) {
		fprintf(stderr, "attach returned %d (%s), wanted %d\n", ret, e.msg, want);
		return 1;
	}
	if (needle && !strstr(e.msg, needle)) {
		fprintf(stderr, "message '%s' lacks '%s'\n", e.msg, needle);
		return 2;
	}
	return 0;
}

static void test_refused_timeout_full_not_running(void **state)
{
	const char *inst = "t-client-ref";
	struct locus_clients_params one = params;
	struct daemon d;
	pid_t pid;
	(void)state;

	one.n_slots = 1;
	daemon_up(&d, inst, &one, 1);
	/* the daemon refuses: the code and a sentence reach the client */
	pid = fork();
	if (pid == 0)
		_exit(child_attach_expect(inst, -LOCUS_ERANGE, "refused", 0));
	wait_event(&d, 0, LOCUS_CLIENTS_CLAIM);
	assert_int_equal(locus_clients_activate(&d.v, 0, -LOCUS_ERANGE), 0);
	assert_int_equal(wait_child(pid), 0);
	assert_int_equal(slot_state(&d, 0), LOCUS_CLIENT_FREE);

	/* nobody answers: bounded wait, the claim is taken back */
	pid = fork();
	if (pid == 0)
		_exit(child_attach_expect(inst, -ETIMEDOUT, "did not answer", 50));
	assert_int_equal(wait_child(pid), 0);
	assert_int_equal(slot_state(&d, 0), LOCUS_CLIENT_FREE);

	/* the only slot is taken */
	__atomic_store_n(&locus_clients_ctl(&d.v, 0)->state_pid,
			 locus_client_state_pid(LOCUS_CLIENT_ACTIVE, getpid()), __ATOMIC_RELEASE);
	pid = fork();
	if (pid == 0)
		_exit(child_attach_expect(inst, -LOCUS_EFULL, "all client slots", 50));
	assert_int_equal(wait_child(pid), 0);
	locus_clients_release(&d.v, 0);

	/* a daemon still starting takes no clients */
	locus_shm_set_state(d.shm, LOCUS_SHM_STARTING);
	pid = fork();
	if (pid == 0)
		_exit(child_attach_expect(inst, -LOCUS_ESTATE, "not running", 50));
	assert_int_equal(wait_child(pid), 0);
	daemon_down(&d, inst);

	/* no such instance */
	pid = fork();
	if (pid == 0)
		_exit(child_attach_expect(inst, -ENOENT, NULL, 50));
	assert_int_equal(wait_child(pid), 0);
}

static int child_attach_and_die(const char *instance)
{
	struct locus_client_req req = { .roles = LOCUS_ROLE_PREFILL };
	struct locus_client *c;

	if (locus_client_attach(instance, &req, &c, NULL) != 0)
		return 1;
	_exit(0); /* no detach: the daemon must notice by itself */
}

static void test_dead_clients_reclaimed(void **state)
{
	const char *inst = "t-client-dead";
	struct daemon d;
	struct locus_client_ctl *ctl;
	pid_t pid;
	(void)state;

	daemon_up(&d, inst, &params, 1);
	pid = fork();
	if (pid == 0)
		_exit(child_attach_and_die(inst));
	wait_event(&d, 0, LOCUS_CLIENTS_CLAIM);
	assert_int_equal(locus_clients_activate(&d.v, 0, 0), 0);
	assert_int_equal(wait_child(pid), 0);
	wait_event(&d, 0, LOCUS_CLIENTS_GONE);
	locus_clients_release(&d.v, 0);
	assert_int_equal(slot_state(&d, 0), LOCUS_CLIENT_FREE);

	/* a claim whose owner died before the daemon answered is freed by check */
	pid = fork();
	if (pid == 0)
		_exit(0);
	assert_int_equal(wait_child(pid), 0);
	ctl = locus_clients_ctl(&d.v, 1);
	ctl->start_ticks = 1;
	__atomic_store_n(&ctl->state_pid, locus_client_state_pid(LOCUS_CLIENT_CLAIMED, pid),
			 __ATOMIC_RELEASE);
	assert_int_equal(locus_clients_check(&d.v, 1), LOCUS_CLIENTS_IDLE);
	assert_int_equal(slot_state(&d, 1), LOCUS_CLIENT_FREE);
	/* and a CLAIMING one (no start time yet) */
	__atomic_store_n(&ctl->state_pid, locus_client_state_pid(LOCUS_CLIENT_CLAIMING, pid),
			 __ATOMIC_RELEASE);
	assert_int_equal(locus_clients_check(&d.v, 1), LOCUS_CLIENTS_IDLE);
	assert_int_equal(slot_state(&d, 1), LOCUS_CLIENT_FREE);
	/* garbage in the state word is taken back too */
	__atomic_store_n(&ctl->state_pid, 0x77ull, __ATOMIC_RELEASE);
	assert_int_equal(locus_clients_check(&d.v, 1), LOCUS_CLIENTS_IDLE);
	assert_int_equal(slot_state(&d, 1), LOCUS_CLIENT_FREE);
	daemon_down(&d, inst);
}

/* The client side checks what the daemon names as delivered data. */
static void test_inbox_bounds(void **state)
{
	const char *inst = "t-client-inbox";
	struct locus_client_req req = { .roles = LOCUS_ROLE_RANK, .rank = 1 };
	struct locus_client *c = NULL;
	struct daemon d;
	struct locus_desc in;
	pid_t pid;
	int status;
	(void)state;

	daemon_up(&d, inst, &params, 1);
	/* answer the claim from a helper process while we attach */
	pid = fork();
	if (pid == 0) {
		struct daemon dd;
		size_t size;
		void *region;
		struct locus_shm *shm;

		if (locus_shm_attach(inst, 0, &shm, NULL))
			_exit(1);
		region = locus_shm_region(shm, LOCUS_REGION_CLIENTS, &size);
		if (locus_clients_open(&dd.v, region, size))
			_exit(2);
		for (int i = 0; i < 5000; i++) {
			if (locus_clients_check(&dd.v, 0) == LOCUS_CLIENTS_CLAIM)
				_exit(locus_clients_activate(&dd.v, 0, 0) ? 3 : 0);
			usleep(1000);
		}
		_exit(4);
	}
	assert_int_equal(locus_client_attach(inst, &req, &c, NULL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
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
	/* the submit ring fills: the caller sees it */
	for (uint32_t i = 0; i < params.ring_size; i++)
		assert_int_equal(locus_client_release_slot(c, 0), 0);
	assert_int_equal(locus_client_release_slot(c, 0), -LOCUS_EFULL);
	locus_client_detach(c);
	daemon_down(&d, inst);
}

static int setup(void **state)
{
	(void)state;
	snprintf(shm_dir, sizeof(shm_dir), "/tmp/locus-client-test-XXXXXX");
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
		cmocka_unit_test(test_region_layout),
		cmocka_unit_test(test_attach_roundtrip_detach),
		cmocka_unit_test(test_refused_timeout_full_not_running),
		cmocka_unit_test(test_dead_clients_reclaimed),
		cmocka_unit_test(test_inbox_bounds),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
