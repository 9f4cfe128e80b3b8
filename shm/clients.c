// SPDX-License-Identifier: MIT
/*
 * Client slots: region layout (both sides) and the daemon's side: the
 * region of memfds, claim, activation, release, renewal. The client library
 * is client_attach.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_err_priv.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"

#define BUF_ALIGN 4096u /* the buffer is registered memory: page aligned */
#define MAX_SLOTS 4096u
#define MAX_BUF   (1ull << 34)
#define SLOT_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

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

int locus_clients_geometry(struct locus_clients *v, const struct locus_clients_params *p)
{
	if (!params_ok(p))
		return -EINVAL;
	memset(v, 0, sizeof(*v));
	layout(p, v);
	v->size = v->slots_off + (uint64_t)p->n_slots * v->slot_stride;
	return 0;
}

uint64_t locus_clients_region_size(const struct locus_clients_params *p)
{
	struct locus_clients v;

	if (!params_ok(p))
		return 0;
	layout(p, &v);
	return v.slots_off + (uint64_t)p->n_slots * v.slot_stride;
}

/* The region header: geometry, then the magic (an opener never sees half of it). */
static void write_hdr(void *region, const struct locus_clients_params *p)
{
	struct locus_clients_hdr *h = region;
	struct locus_clients v;
	uint64_t need = locus_clients_region_size(p);

	layout(p, &v);
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
}

int locus_clients_init(void *region, uint64_t size, const struct locus_clients_params *p)
{
	uint64_t need = locus_clients_region_size(p);

	if (!region || ((uintptr_t)region % BUF_ALIGN) || need == 0 || size < need)
		return -EINVAL;
	memset(region, 0, need);
	write_hdr(region, p);
	return 0;
}

/* A fresh slot object: zeroed, its size sealed. Returns the fd or -errno. */
static int slot_object(uint32_t slot, uint64_t len)
{
	char name[32];
	int fd;

	snprintf(name, sizeof(name), "locus-slot-%u", slot);
	fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0 || fcntl(fd, F_ADD_SEALS, SLOT_SEALS) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

/* Map fd over slot's place in the range (replacing what was there). */
static int map_slot(struct locus_clients *v, uint32_t slot, int fd)
{
	void *at = locus_clients_ctl(v, slot);

	if (mmap(at, v->slot_stride, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) !=
	    at)
		return -errno;
	return 0;
}

int locus_clients_create(struct locus_clients *v, const struct locus_clients_params *p,
			 struct locus_error *err)
{
	uint32_t i = 0;
	void *base;
	int ret;

	if (locus_clients_geometry(v, p) < 0)
		return locus_error_set(err, EINVAL, "client slots: parameters out of range");
	v->fd = malloc(sizeof(int) * p->n_slots);
	if (!v->fd)
		return locus_error_set(err, ENOMEM, "client slots: out of memory");
	/* the whole range first, so the slots land where the offsets say */
	base = mmap(NULL, v->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED) {
		ret = locus_error_set(err, errno, "client slots: reserving %llu bytes: %s",
				      (unsigned long long)v->size, strerror(errno));
		goto err_fds;
	}
	v->base = base;
	if (mmap(base, v->slots_off, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		 -1, 0) != base) {
		ret = locus_error_set(err, errno, "client slots: header: %s", strerror(errno));
		goto err_unmap;
	}
	for (i = 0; i < p->n_slots; i++) {
		v->fd[i] = slot_object(i, v->slot_stride);
		ret = v->fd[i] < 0 ? v->fd[i] : map_slot(v, i, v->fd[i]);
		if (ret < 0) {
			if (v->fd[i] >= 0)
				close(v->fd[i]);
			locus_error_set(err, -ret, "client slot %u: memfd of %llu bytes: %s", i,
					(unsigned long long)v->slot_stride, strerror(-ret));
			goto err_close;
		}
	}
	write_hdr(base, p);
	return 0;

err_close:
	while (i--)
		close(v->fd[i]);
err_unmap:
	munmap(base, v->size);
err_fds:
	free(v->fd);
	memset(v, 0, sizeof(*v));
	return ret;
}

void locus_clients_destroy(struct locus_clients *v)
{
	if (!v || !v->fd)
		return;
	for (uint32_t i = 0; i < v->p.n_slots; i++)
		close(v->fd[i]);
	munmap(v->base, v->size);
	free(v->fd);
	memset(v, 0, sizeof(*v));
}

int locus_clients_renew(struct locus_clients *v, uint32_t slot)
{
	uint64_t gen;
	int fd, ret;

	if (!v->fd || slot >= v->p.n_slots)
		return -LOCUS_ERANGE;
	fd = slot_object(slot, v->slot_stride);
	if (fd < 0)
		return fd;
	/* generations go on counting: a request of an earlier attachment stays stale */
	gen = __atomic_load_n(&locus_clients_ctl(v, slot)->generation, __ATOMIC_RELAXED);
	ret = map_slot(v, slot, fd);
	if (ret < 0) {
		close(fd);
		return ret;
	}
	close(v->fd[slot]);
	v->fd[slot] = fd;
	__atomic_store_n(&locus_clients_ctl(v, slot)->generation, gen, __ATOMIC_RELEASE);
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

int locus_clients_claim(struct locus_clients *v, uint32_t slot, pid_t pid, uint64_t start_ticks,
			uint32_t roles, uint32_t decoder_id, uint32_t rank)
{
	struct locus_client_ctl *ctl;

	if (slot >= v->p.n_slots)
		return -LOCUS_ERANGE;
	ctl = locus_clients_ctl(v, slot);
	if (locus_client_state_of(__atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE)) !=
	    LOCUS_CLIENT_FREE)
		return -LOCUS_ESTATE;
	ctl->start_ticks = start_ticks;
	ctl->roles = roles;
	ctl->decoder_id = decoder_id;
	ctl->rank = rank;
	ctl->reserved0 = 0;
	__atomic_store_n(&ctl->state_pid, locus_client_state_pid(LOCUS_CLIENT_CLAIMED, pid),
			 __ATOMIC_RELEASE);
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
	ctl->load = 0;
	__atomic_store_n(&ctl->load_seq, 0, __ATOMIC_RELAXED);
	/* a new client holds no placement's experts until it says so */
	__atomic_store_n(&ctl->pl_acked, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ctl->pl_floor, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ctl->pl_part, 0, __ATOMIC_RELAXED);
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
	/* only the claim that was prepared: nothing else may have become of the slot */
	if (!__atomic_compare_exchange_n(&ctl->state_pid, &sp,
					 locus_client_state_pid(LOCUS_CLIENT_ACTIVE,
								locus_client_pid_of(sp)),
					 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		return -LOCUS_ESTATE;
	return 0;
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

int locus_clients_check_state(struct locus_clients *v, uint32_t slot)
{
	if (slot >= v->p.n_slots)
		return LOCUS_CLIENTS_IDLE;
	return locus_client_state_of(__atomic_load_n(&locus_clients_ctl(v, slot)->state_pid,
						     __ATOMIC_ACQUIRE)) == LOCUS_CLIENT_ACTIVE
		       ? LOCUS_CLIENTS_IDLE : LOCUS_CLIENTS_GONE;
}

int locus_clients_check(struct locus_clients *v, uint32_t slot)
{
	struct locus_client_ctl *ctl;
	uint64_t sp;

	if (slot >= v->p.n_slots)
		return LOCUS_CLIENTS_IDLE;
	ctl = locus_clients_ctl(v, slot);
	sp = __atomic_load_n(&ctl->state_pid, __ATOMIC_ACQUIRE);
	/* the client may write its control line: anything but ACTIVE ends it */
	if (locus_client_state_of(sp) == LOCUS_CLIENT_ACTIVE &&
	    locus_proc_alive(locus_client_pid_of(sp), ctl->start_ticks))
		return LOCUS_CLIENTS_IDLE;
	return LOCUS_CLIENTS_GONE;
}
