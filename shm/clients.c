// SPDX-License-Identifier: MIT
/*
 * Client slots: region layout (both sides), the daemon's activation, and
 * the client library's attach/submit/poll.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "locus_client.h"
#include "locus_shm.h"

#define BUF_ALIGN 4096u /* the buffer is registered memory: page aligned */
#define MAX_SLOTS 4096u
#define MAX_BUF   (1ull << 34)

struct locus_client {
	struct locus_shm *shm;
	struct locus_clients v;
	uint32_t slot;
	pid_t me;                         /* the attaching process */
	struct locus_ring_end submit;     /* producer */
	struct locus_ring_end completion; /* consumer */
	uint64_t next_check_ns;           /* poll: next look at the daemon's liveness */
	int gone;                         /* 0, or -ENOTCONN once the daemon is gone */
};

static int params_ok(const struct locus_clients_params *p)
{
	return p && p->n_slots >= 1 && p->n_slots <= MAX_SLOTS &&
	       locus_ring_geometry_ok(p->ring_size, LOCUS_DESC_SIZE) &&
	       p->stage_size % LOCUS_CACHE_LINE == 0 && p->stage_size <= MAX_BUF &&
	       p->inbox_slots >= 1 && p->inbox_slots <= (1u << 16) &&
	       p->inbox_slot_size >= LOCUS_CACHE_LINE &&
	       p->inbox_slot_size % LOCUS_CACHE_LINE == 0 &&
	       (uint64_t)p->inbox_slots * p->inbox_slot_size <= MAX_BUF;
}

/* Slot geometry derived from the params: one function for both sides. */
static void layout(const struct locus_clients_params *p, struct locus_clients *v)
{
	v->p = *p;
	v->ring_bytes = LOCUS_ALIGN_UP(locus_ring_bytes(p->ring_size, LOCUS_DESC_SIZE),
				       (uint64_t)LOCUS_CACHE_LINE);
	v->buf_off = LOCUS_ALIGN_UP(sizeof(struct locus_client_ctl) + 2 * v->ring_bytes,
				    (uint64_t)BUF_ALIGN);
	v->buf_size = p->stage_size + (uint64_t)p->inbox_slots * p->inbox_slot_size;
	v->slot_stride = LOCUS_ALIGN_UP(v->buf_off + v->buf_size, (uint64_t)BUF_ALIGN);
	v->slots_off = BUF_ALIGN;
}

uint64_t locus_clients_region_size(const struct locus_clients_params *p)
{
	struct locus_clients v;

	if (!params_ok(p))
		return 0;
	layout(p, &v);
	return v.slots_off + (uint64_t)p->n_slots * v.slot_stride;
}

int locus_clients_init(void *region, uint64_t size, const struct locus_clients_params *p)
{
	struct locus_clients_hdr *h = region;
	struct locus_clients v;
	uint64_t need = locus_clients_region_size(p);

	if (!region || ((uintptr_t)region % BUF_ALIGN) || need == 0 || size < need)
		return -EINVAL;
	layout(p, &v);
	memset(region, 0, need);
	h->version = LOCUS_CLIENTS_VERSION;
	h->n_slots = p->n_slots;
	h->ring_size = p->ring_size;
	h->inbox_slots = p->inbox_slots;
	h->inbox_slot_size = p->inbox_slot_size;
	h->stage_size = p->stage_size;
	h->slot_stride = v.slot_stride;
	h->slots_off = v.slots_off;
	h->region_size = need;
	__atomic_store_n(&h->magic, LOCUS_CLIENTS_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

int locus_clients_open(struct locus_clients *v, void *region, uint64_t size)
{
	const struct locus_clients_hdr *h = region;
	struct locus_clients_params p;

	if (!region || size < sizeof(*h))
		return -LOCUS_ETRUNCATED;
	if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != LOCUS_CLIENTS_MAGIC)
		return -LOCUS_EBADMAGIC;
	if (h->version != LOCUS_CLIENTS_VERSION)
		return -LOCUS_EVERSION;
	p = (struct locus_clients_params){
		.n_slots = h->n_slots,
		.ring_size = h->ring_size,
		.stage_size = h->stage_size,
		.inbox_slots = h->inbox_slots,
		.inbox_slot_size = h->inbox_slot_size,
	};
	if (!params_ok(&p))
		return -LOCUS_ERANGE;
	/* Geometry is recomputed, never taken from the header's offsets. */
	layout(&p, v);
	if (h->slot_stride != v->slot_stride || h->slots_off != v->slots_off ||
	    h->region_size != locus_clients_region_size(&p))
		return -LOCUS_ERANGE;
	if (size < h->region_size)
		return -LOCUS_ETRUNCATED;
	v->base = region;
	v->size = size;
	return 0;
}

int locus_clients_prepare(struct locus_clients *v, uint32_t slot)
{
	struct locus_client_ctl *ctl;
	int ret;

	if (slot >= v->p.n_slots)
		return -LOCUS_ERANGE;
	ctl = locus_clients_ctl(v, slot);
	if (locus_client_state_of(__atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE)) !=
	    LOCUS_CLIENT_CLAIMED)
		return -LOCUS_ESTATE;
	ret = locus_ring_init(locus_clients_submit_ring(v, slot), v->ring_bytes, v->p.ring_size,
			      LOCUS_DESC_SIZE);
	if (ret == 0)
		ret = locus_ring_init(locus_clients_completion_ring(v, slot), v->ring_bytes,
				      v->p.ring_size, LOCUS_DESC_SIZE);
	if (ret < 0)
		return ret;
	ctl->refusal = 0;
	ctl->load = 0;
	__atomic_store_n(&ctl->load_seq, 0, __ATOMIC_RELAXED);
	return 0;
}

int locus_clients_publish(struct locus_clients *v, uint32_t slot, uint64_t claimed)
{
	struct locus_client_ctl *ctl;
	uint64_t sp = claimed;

	if (slot >= v->p.n_slots)
		return -LOCUS_ERANGE;
	ctl = locus_clients_ctl(v, slot);
	if (locus_client_state_of(sp) != LOCUS_CLIENT_CLAIMED)
		return -LOCUS_ESTATE;
	ctl->generation++;
	/*
	 * Only the claim that was prepared: a client that gave up meanwhile
	 * (or another that claimed the slot since) changed the word.
	 */
	if (!__atomic_compare_exchange_n(&ctl->state_pid, &sp,
					 locus_client_state_pid(LOCUS_CLIENT_ACTIVE,
								locus_client_pid_of(sp)),
					 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		return -LOCUS_ESTATE;
	return 0;
}

int locus_clients_activate(struct locus_clients *v, uint32_t slot, int refusal)
{
	struct locus_client_ctl *ctl;
	uint64_t sp;
	int ret;

	if (slot >= v->p.n_slots)
		return -LOCUS_ERANGE;
	ctl = locus_clients_ctl(v, slot);
	sp = __atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE);
	if (locus_client_state_of(sp) != LOCUS_CLIENT_CLAIMED)
		return -LOCUS_ESTATE;
	if (refusal < 0) {
		ctl->refusal = refusal;
		__atomic_store_n(&ctl->state_pid,
				 locus_client_state_pid(LOCUS_CLIENT_REFUSED, locus_client_pid_of(sp)),
				 __ATOMIC_RELEASE);
		return 0;
	}
	ret = locus_clients_prepare(v, slot);
	return ret < 0 ? ret : locus_clients_publish(v, slot, sp);
}

void locus_clients_release(struct locus_clients *v, uint32_t slot)
{
	struct locus_client_ctl *ctl;

	if (slot >= v->p.n_slots)
		return;
	ctl = locus_clients_ctl(v, slot);
	ctl->roles = 0;
	ctl->start_ticks = 0;
	__atomic_store_n(&ctl->state_pid, locus_client_state_pid(LOCUS_CLIENT_FREE, 0),
			 __ATOMIC_RELEASE);
}

int locus_clients_check(struct locus_clients *v, uint32_t slot)
{
	struct locus_client_ctl *ctl;
	uint64_t sp;
	pid_t pid;

	if (slot >= v->p.n_slots)
		return LOCUS_CLIENTS_IDLE;
	ctl = locus_clients_ctl(v, slot);
	sp = __atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE);
	pid = locus_client_pid_of(sp);
	switch (locus_client_state_of(sp)) {
	case LOCUS_CLIENT_FREE:
		return LOCUS_CLIENTS_IDLE;
	case LOCUS_CLIENT_CLAIMING:
		/* start time not written yet: the pid alone must do */
		if (kill(pid, 0) < 0 && errno == ESRCH)
			break;
		return LOCUS_CLIENTS_IDLE;
	case LOCUS_CLIENT_CLAIMED:
		if (!locus_proc_alive(pid, ctl->start_ticks))
			break;
		return LOCUS_CLIENTS_CLAIM;
	case LOCUS_CLIENT_REFUSED:
		if (!locus_proc_alive(pid, ctl->start_ticks))
			break;
		return LOCUS_CLIENTS_IDLE;
	case LOCUS_CLIENT_ACTIVE:
		if (locus_proc_alive(pid, ctl->start_ticks))
			return LOCUS_CLIENTS_IDLE;
		return LOCUS_CLIENTS_GONE;
	case LOCUS_CLIENT_DETACHING:
		return LOCUS_CLIENTS_GONE;
	default:
		break; /* garbage in the state word: take the slot back */
	}
	/* Free the slot only if nobody changed it since we looked. */
	if (__atomic_compare_exchange_n(&ctl->state_pid, &sp,
					locus_client_state_pid(LOCUS_CLIENT_FREE, 0), 0,
					__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		ctl->roles = 0;
		ctl->start_ticks = 0;
	}
	return LOCUS_CLIENTS_IDLE;
}

/* ------------------------------------------------------------------ */

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int claim_slot(struct locus_client *c, const struct locus_client_req *req)
{
	pid_t me = getpid();
	uint64_t ticks = 0;

	if (locus_proc_start_ticks(me, &ticks) < 0)
		return -ESRCH;
	for (uint32_t i = 0; i < c->v.p.n_slots; i++) {
		struct locus_client_ctl *ctl = locus_clients_ctl(&c->v, i);
		uint64_t expect = locus_client_state_pid(LOCUS_CLIENT_FREE, 0);

		if (!__atomic_compare_exchange_n(&ctl->state_pid, &expect,
						 locus_client_state_pid(LOCUS_CLIENT_CLAIMING, me),
						 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		ctl->start_ticks = ticks;
		ctl->roles = req->roles;
		ctl->decoder_id = req->decoder_id;
		ctl->rank = req->rank;
		ctl->refusal = 0;
		__atomic_store_n(&ctl->state_pid, locus_client_state_pid(LOCUS_CLIENT_CLAIMED, me),
				 __ATOMIC_RELEASE);
		c->slot = i;
		return 0;
	}
	return -LOCUS_EFULL;
}

/* Wait for the daemon's answer; on time-out take the claim back. */
static int await_answer(struct locus_client *c, unsigned timeout_ms, struct locus_error *err)
{
	struct locus_client_ctl *ctl = locus_clients_ctl(&c->v, c->slot);
	uint64_t claimed = locus_client_state_pid(LOCUS_CLIENT_CLAIMED, getpid());

	for (unsigned waited = 0;; waited++) {
		uint64_t sp = __atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE);
		uint32_t st = locus_client_state_of(sp);

		if (st == LOCUS_CLIENT_ACTIVE)
			return 0;
		if (st == LOCUS_CLIENT_REFUSED) {
			int why = ctl->refusal;

			__atomic_store_n(&ctl->state_pid,
					 locus_client_state_pid(LOCUS_CLIENT_FREE, 0),
					 __ATOMIC_RELEASE);
			return locus_error_set(err, why < 0 ? why : -LOCUS_EPROTO,
					       "locusd refused the attachment: %s",
					       locus_strerror(why));
		}
		if (st != LOCUS_CLIENT_CLAIMED)
			return locus_error_set(err, LOCUS_EPROTO,
					       "client slot %u changed to state %u under us",
					       c->slot, st);
		if ((waited % 50 == 49 || waited >= timeout_ms) && !locus_shm_owner_alive(c->shm)) {
			/* nobody will answer: leave the claim to the next daemon's reclaim */
			return locus_error_set(err, ENOTCONN,
					       "locusd (pid %d) died before answering",
					       (int)locus_shm_owner_pid(c->shm));
		}
		if (waited >= timeout_ms) {
			if (__atomic_compare_exchange_n(&ctl->state_pid, &claimed,
							locus_client_state_pid(LOCUS_CLIENT_FREE, 0),
							0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				return locus_error_set(err, ETIMEDOUT,
						       "locusd did not answer within %u ms",
						       timeout_ms);
			continue; /* it answered just now */
		}
		sleep_ms(1);
	}
}

int locus_client_attach(const char *instance, const struct locus_client_req *req,
			struct locus_client **out, struct locus_error *err)
{
	struct locus_client *c;
	void *region;
	size_t size;
	int ret;

	if (!req || !out || !req->roles || (req->roles & ~(uint32_t)LOCUS_ROLE_ALL))
		return locus_error_set(err, EINVAL, "client request names no valid role");
	c = calloc(1, sizeof(*c));
	if (!c)
		return locus_error_set(err, ENOMEM, "out of memory");
	ret = locus_shm_attach(instance, LOCUS_SHM_ALLOW_GROUP, &c->shm, err);
	if (ret < 0)
		goto err_free;
	if (locus_shm_state(c->shm) != LOCUS_SHM_RUNNING) {
		ret = locus_error_set(err, LOCUS_ESTATE, "locusd instance '%s' is not running",
				      instance);
		goto err_detach;
	}
	region = locus_shm_region(c->shm, LOCUS_REGION_CLIENTS, &size);
	ret = region ? locus_clients_open(&c->v, region, size) : -LOCUS_ERANGE;
	if (ret < 0) {
		locus_error_set(err, ret, "instance '%s': client region unusable: %s", instance,
				locus_strerror(ret));
		goto err_detach;
	}
	c->me = getpid();
	ret = claim_slot(c, req);
	if (ret < 0) {
		locus_error_set(err, ret, "instance '%s': %s", instance,
				ret == -LOCUS_EFULL ? "all client slots are taken"
						    : locus_strerror(ret));
		goto err_detach;
	}
	ret = await_answer(c, req->timeout_ms ? req->timeout_ms : 2000, err);
	if (ret < 0)
		goto err_detach;
	ret = locus_ring_attach(&c->submit, locus_clients_submit_ring(&c->v, c->slot),
				c->v.ring_bytes, c->v.p.ring_size, LOCUS_DESC_SIZE, 1);
	if (ret == 0)
		ret = locus_ring_attach(&c->completion, locus_clients_completion_ring(&c->v, c->slot),
					c->v.ring_bytes, c->v.p.ring_size, LOCUS_DESC_SIZE, 0);
	if (ret < 0) {
		locus_error_set(err, ret, "client slot %u rings unusable: %s", c->slot,
				locus_strerror(ret));
		goto err_leave;
	}
	*out = c;
	return 0;

err_leave:
	__atomic_store_n(&locus_clients_ctl(&c->v, c->slot)->state_pid,
			 locus_client_state_pid(LOCUS_CLIENT_DETACHING, getpid()), __ATOMIC_RELEASE);
err_detach:
	locus_shm_detach(c->shm);
err_free:
	free(c);
	return ret;
}

void locus_client_detach(struct locus_client *c)
{
	if (!c)
		return;
	__atomic_store_n(&locus_clients_ctl(&c->v, c->slot)->state_pid,
			 locus_client_state_pid(LOCUS_CLIENT_DETACHING, getpid()), __ATOMIC_RELEASE);
	locus_shm_detach(c->shm);
	free(c);
}

uint8_t *locus_client_stage(struct locus_client *c, uint64_t *size)
{
	if (size)
		*size = c->v.p.stage_size;
	return locus_clients_buf(&c->v, c->slot);
}

const void *locus_client_inbox(struct locus_client *c, const struct locus_desc *d)
{
	uint64_t lo = c->v.p.stage_size;

	/* a message may span consecutive slots up to the end of the inbox */
	if (d->slot >= c->v.p.inbox_slots || d->off != locus_clients_inbox_off(&c->v, d->slot) ||
	    d->len > (uint64_t)(c->v.p.inbox_slots - d->slot) * c->v.p.inbox_slot_size ||
	    d->off < lo)
		return NULL;
	return locus_clients_buf(&c->v, c->slot) + d->off;
}

int locus_client_submit(struct locus_client *c, const struct locus_desc *d, uint32_t n)
{
	int64_t got = locus_ring_enqueue_burst(&c->submit, d, n);

	if (got < 0)
		return (int)got;
	return got == 0 && n ? -LOCUS_EFULL : (int)got;
}

static uint64_t coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int locus_client_check(struct locus_client *c)
{
	uint64_t sp;

	if (c->gone)
		return c->gone;
	sp = __atomic_load_n(&locus_clients_ctl(&c->v, c->slot)->state_pid, __ATOMIC_ACQUIRE);
	if (sp != locus_client_state_pid(LOCUS_CLIENT_ACTIVE, c->me) ||
	    !locus_shm_owner_alive(c->shm))
		c->gone = -ENOTCONN;
	return c->gone;
}

int locus_client_poll(struct locus_client *c, struct locus_desc *out, uint32_t max)
{
	int64_t n = locus_ring_dequeue_burst(&c->completion, out, max);
	uint64_t now;

	if (n != 0 || !max)
		return (int)n;
	/* an empty ring: at most every LOCUS_CLIENT_CHECK_MS, is anyone still there? */
	now = coarse_ns();
	if (!c->gone && now < c->next_check_ns)
		return 0;
	c->next_check_ns = now + LOCUS_CLIENT_CHECK_MS * 1000000ull;
	return locus_client_check(c);
}

int locus_client_release_slot(struct locus_client *c, uint32_t slot)
{
	struct locus_desc d = { .op = LOCUS_OP_RELEASE, .slot = slot };

	if (slot >= c->v.p.inbox_slots)
		return -LOCUS_ERANGE;
	return locus_client_submit(c, &d, 1) == 1 ? 0 : -LOCUS_EFULL;
}

void locus_client_report_load(struct locus_client *c, uint32_t load)
{
	struct locus_client_ctl *ctl = locus_clients_ctl(&c->v, c->slot);

	__atomic_store_n(&ctl->load, load, __ATOMIC_RELAXED);
	__atomic_store_n(&ctl->load_seq, ctl->load_seq + 1, __ATOMIC_RELEASE);
}

uint32_t locus_client_slot(const struct locus_client *c)
{
	return c->slot;
}

uint64_t locus_client_generation(const struct locus_client *c)
{
	return __atomic_load_n(&locus_clients_ctl(&c->v, c->slot)->generation, __ATOMIC_ACQUIRE);
}

const char *locus_client_instance(const struct locus_client *c)
{
	return locus_shm_instance(c->shm);
}

const struct locus_clients *locus_client_region(const struct locus_client *c)
{
	return &c->v;
}
