// SPDX-License-Identifier: MIT
/*
 * The client library: attach (a slot's memfd from locusd over the
 * registration socket), the rings, the buffer, detach. A client maps its
 * own slot only; the segment it maps read-only tells whether locusd runs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_err_priv.h"
#include "locus_shm.h"

#define MAX_ATTACH_TIMEOUT_MS 60000u /* what locusd waits for our confirmation at most */

struct locus_client {
	struct locus_shm *shm;            /* read-only: the daemon's state and identity */
	struct locus_clients v;           /* the slot geometry (base NULL) */
	uint8_t *map;                     /* our slot, slot_stride bytes */
	uint32_t slot;
	pid_t me;                         /* the attaching process */
	struct locus_ring_end submit;     /* producer */
	struct locus_ring_end completion; /* consumer */
	uint64_t next_check_ns;           /* poll: next look at the daemon's liveness */
	int gone;                         /* 0, or -ENOTCONN once the daemon is gone */
	/*
	 * RELEASEs a full submit ring refused, oldest first, submitted ahead of
	 * anything else at the next submit, poll or release: a slot is handed
	 * back at most once, so inbox_slots entries always hold them.
	 */
	uint32_t *rel_q;
	uint32_t n_rel;
};

static struct locus_client_ctl *my_ctl(const struct locus_client *c)
{
	return (struct locus_client_ctl *)c->map;
}

static uint8_t *my_buf(const struct locus_client *c)
{
	return c->map + c->v.buf_off;
}

/* The answer's geometry is the one of our slot's memfd, or we refuse to use it. */
static int check_slot(struct locus_client *c, const struct locus_reg_rep *rep, int fd,
		      struct locus_error *err)
{
	struct locus_clients_params p = {
		.n_slots = 1, .ring_size = rep->ring_size, .stage_size = rep->stage_size,
		.inbox_slots = rep->inbox_slots, .inbox_slot_size = rep->inbox_slot_size,
	};
	struct stat st;

	if (rep->clients_version != LOCUS_CLIENTS_VERSION)
		return locus_error_set(err, LOCUS_EVERSION, "locusd's client slots have layout "
				       "version %u, this client %u", rep->clients_version,
				       LOCUS_CLIENTS_VERSION);
	if (fd < 0)
		return locus_error_set(err, LOCUS_EPROTO, "locusd granted slot %u without its fd",
				       rep->slot);
	if (locus_clients_geometry(&c->v, &p) < 0 || c->v.slot_stride != rep->slot_size ||
	    fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != rep->slot_size)
		return locus_error_set(err, LOCUS_EPROTO, "slot %u: the geometry locusd sent does "
				       "not match its memfd", rep->slot);
	return 0;
}

/* Ask for a slot; on success *fd is its memfd and rep says which and how it is laid out. */
static int request_slot(int sock, const struct locus_client_req *req, uint32_t timeout_ms,
			struct locus_reg_rep *rep, int *fd, struct locus_error *err)
{
	struct locus_reg_req q = {
		.magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION, .op = LOCUS_REG_ATTACH,
		.roles = req->roles, .decoder_id = req->decoder_id, .rank = req->rank,
		.attach_reserved = LOCUS_MIN(timeout_ms, MAX_ATTACH_TIMEOUT_MS),
	};
	int ret = locus_client_reg_transact(sock, &q, -1, rep, fd, timeout_ms, err);

	if (ret < 0)
		return ret;
	if (rep->status < 0) {
		if (*fd >= 0)
			close(*fd);
		return locus_error_set(err, -rep->status, "locusd refused the attachment: %s",
				       rep->msg[0] ? rep->msg : locus_strerror(rep->status));
	}
	return 0;
}

/* Tell locusd we hold the slot: without this it takes the slot back. */
static int confirm(int sock, const struct locus_client *c, uint64_t generation,
		   struct locus_error *err)
{
	struct locus_reg_req q = { .magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION,
				   .op = LOCUS_REG_ATTACHED, .slot = c->slot,
				   .generation = generation };

	if (send(sock, &q, sizeof(q), MSG_NOSIGNAL) != (ssize_t)sizeof(q))
		return locus_error_set(err, errno ? errno : EIO, "confirming slot %u to locusd: %s",
				       c->slot, strerror(errno ? errno : EIO));
	return 0;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int locus_client_attach(const char *instance, const struct locus_client_req *req,
			struct locus_client **out, struct locus_error *err)
{
	uint64_t deadline;
	uint32_t timeout_ms;
	struct locus_reg_rep rep;
	struct locus_client *c;
	int ret, sock, fd = -1;

	if (!req || !out || !req->roles || (req->roles & ~(uint32_t)LOCUS_ROLE_ALL))
		return locus_error_set(err, EINVAL, "client request names no valid role");
	timeout_ms = req->timeout_ms ? req->timeout_ms : 2000;
	c = calloc(1, sizeof(*c));
	if (!c)
		return locus_error_set(err, ENOMEM, "out of memory");
	ret = locus_shm_attach(instance, LOCUS_SHM_RDONLY | LOCUS_SHM_ALLOW_GROUP, &c->shm, err);
	if (ret < 0)
		goto err_free;
	if (locus_shm_state(c->shm) != LOCUS_SHM_RUNNING) {
		ret = locus_error_set(err, LOCUS_ESTATE, "locusd instance '%s' is not running",
				      instance);
		goto err_detach;
	}
	c->me = getpid();
	deadline = mono_ms() + timeout_ms;
	for (uint32_t pause_ms = 1;; pause_ms = LOCUS_MIN(2 * pause_ms, 20u)) {
		sock = locus_client_reg_connect(instance, err);
		if (sock < 0) {
			ret = sock;
			goto err_detach;
		}
		ret = request_slot(sock, req, timeout_ms, &rep, &fd, err);
		/*
		 * -EAGAIN: our decoder id or rank is still held by a slot that
		 * detached (ours a moment ago, say) and locusd has not reclaimed
		 * yet: ask again until it has, within the time-out.
		 */
		if (ret != -EAGAIN || mono_ms() + pause_ms >= deadline)
			break;
		close(sock);
		usleep(pause_ms * 1000u);
		timeout_ms = (uint32_t)(deadline - mono_ms());
	}
	if (ret == -ECONNRESET && !locus_shm_owner_alive(c->shm))
		/* the kernel closed a dead daemon's end: no need to wait for the time-out */
		ret = locus_error_set(err, ENOTCONN, "locusd (pid %d) died before answering",
				      (int)locus_shm_owner_pid(c->shm));
	if (ret < 0)
		goto err_sock;
	c->slot = rep.slot;
	ret = check_slot(c, &rep, fd, err);
	if (ret < 0)
		goto err_fd;
	c->rel_q = calloc(c->v.p.inbox_slots, sizeof(*c->rel_q));
	if (!c->rel_q) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto err_fd;
	}
	c->map = mmap(NULL, c->v.slot_stride, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c->map == MAP_FAILED) {
		c->map = NULL;
		ret = locus_error_set(err, errno, "mapping slot %u: %s", c->slot, strerror(errno));
		goto err_fd;
	}
	close(fd);
	fd = -1;
	ret = locus_ring_attach(&c->submit, c->map + sizeof(struct locus_client_ctl),
				c->v.ring_bytes, c->v.p.ring_size, LOCUS_DESC_SIZE, 1);
	if (ret == 0)
		ret = locus_ring_attach(&c->completion,
					c->map + sizeof(struct locus_client_ctl) + c->v.ring_bytes,
					c->v.ring_bytes, c->v.p.ring_size, LOCUS_DESC_SIZE, 0);
	if (ret < 0) {
		locus_error_set(err, ret, "client slot %u rings unusable: %s", c->slot,
				locus_strerror(ret));
		goto err_leave;
	}
	ret = confirm(sock, c, rep.generation, err);
	if (ret < 0)
		goto err_unmap; /* locusd takes it back: our confirmation never came */
	close(sock);
	*out = c;
	return 0;

err_leave:
	/* leaving before the confirmation would do too: say it in the slot as well */
	__atomic_store_n(&my_ctl(c)->state_pid,
			 locus_client_state_pid(LOCUS_CLIENT_DETACHING, getpid()), __ATOMIC_RELEASE);
err_unmap:
	munmap(c->map, c->v.slot_stride);
err_fd:
	if (fd >= 0)
		close(fd);
err_sock:
	close(sock);
err_detach:
	locus_shm_detach(c->shm);
err_free:
	free(c->rel_q);
	free(c);
	return ret;
}

void locus_client_detach(struct locus_client *c)
{
	if (!c)
		return;
	__atomic_store_n(&my_ctl(c)->state_pid,
			 locus_client_state_pid(LOCUS_CLIENT_DETACHING, getpid()), __ATOMIC_RELEASE);
	munmap(c->map, c->v.slot_stride);
	locus_shm_detach(c->shm);
	free(c->rel_q);
	free(c);
}

uint8_t *locus_client_stage(struct locus_client *c, uint64_t *size)
{
	if (size)
		*size = c->v.p.stage_size;
	return my_buf(c);
}

const void *locus_client_inbox(struct locus_client *c, const struct locus_desc *d)
{
	uint64_t lo = c->v.p.stage_size;

	/* a message may span consecutive slots up to the end of the inbox */
	if (d->slot >= c->v.p.inbox_slots || d->off != locus_clients_inbox_off(&c->v, d->slot) ||
	    d->len > (uint64_t)(c->v.p.inbox_slots - d->slot) * c->v.p.inbox_slot_size ||
	    d->off < lo)
		return NULL;
	return my_buf(c) + d->off;
}

/* Submit what RELEASEs wait, oldest first, as far as the ring takes them. */
static void flush_releases(struct locus_client *c)
{
	struct locus_desc d[32];
	uint32_t done = 0;

	while (done < c->n_rel) {
		uint32_t k = LOCUS_MIN(c->n_rel - done, (uint32_t)LOCUS_ARRAY_SIZE(d));
		int64_t got;

		for (uint32_t i = 0; i < k; i++)
			d[i] = (struct locus_desc){ .op = LOCUS_OP_RELEASE, .slot = c->rel_q[done + i] };
		got = locus_ring_enqueue_burst(&c->submit, d, k);
		if (got <= 0)
			break;
		done += (uint32_t)got;
		if ((uint32_t)got < k)
			break;
	}
	if (done) {
		memmove(c->rel_q, c->rel_q + done, sizeof(*c->rel_q) * (c->n_rel - done));
		c->n_rel -= done;
	}
}

int locus_client_submit(struct locus_client *c, const struct locus_desc *d, uint32_t n)
{
	int64_t got;

	if (c->n_rel)
		flush_releases(c);
	got = locus_ring_enqueue_burst(&c->submit, d, n);

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
	sp = __atomic_load_n(&my_ctl(c)->state_pid, __ATOMIC_ACQUIRE);
	if (sp != locus_client_state_pid(LOCUS_CLIENT_ACTIVE, c->me) ||
	    !locus_shm_owner_alive(c->shm))
		c->gone = -ENOTCONN;
	return c->gone;
}

int locus_client_poll(struct locus_client *c, struct locus_desc *out, uint32_t max)
{
	int64_t n;
	uint64_t now;

	if (c->n_rel)
		flush_releases(c);
	n = locus_ring_dequeue_burst(&c->completion, out, max);

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
	if (c->n_rel)
		flush_releases(c);
	if (!c->n_rel && locus_ring_enqueue_burst(&c->submit, &d, 1) == 1)
		return 0;
	/* behind the ones already waiting, in order; more than one a slot is the caller's bug */
	if (c->n_rel >= c->v.p.inbox_slots)
		return -LOCUS_EFULL;
	c->rel_q[c->n_rel++] = slot;
	return 0;
}

uint32_t locus_client_releases_waiting(const struct locus_client *c)
{
	return c->n_rel;
}

void locus_client_report_load(struct locus_client *c, uint32_t load)
{
	struct locus_client_ctl *ctl = my_ctl(c);

	__atomic_store_n(&ctl->load, load, __ATOMIC_RELAXED);
	__atomic_store_n(&ctl->load_seq, ctl->load_seq + 1, __ATOMIC_RELEASE);
}

uint32_t locus_client_slot(const struct locus_client *c)
{
	return c->slot;
}

uint64_t locus_client_generation(const struct locus_client *c)
{
	return __atomic_load_n(&my_ctl(c)->generation, __ATOMIC_ACQUIRE);
}

const char *locus_client_instance(const struct locus_client *c)
{
	return locus_shm_instance(c->shm);
}

struct locus_client_ctl *locus_client_ctl_of(const struct locus_client *c)
{
	return my_ctl(c);
}

const struct locus_clients *locus_client_region(const struct locus_client *c)
{
	return &c->v;
}
