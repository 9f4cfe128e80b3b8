/* SPDX-License-Identifier: MIT */
/*
 * The node's shared-memory segment: /dev/shm/locus.<instance>.
 *
 * One POSIX shm object per data-plane instance, mode 0660. It starts with a
 * fixed header (magic, ABI version, total size, owner pid and start time,
 * state word) followed by a region directory; every region is addressed by
 * its offset from the start of the segment, nothing in it is a pointer, so
 * any process maps it at any address.
 *
 * Regions (each owned by one module, which lays out its own contents):
 *   LOCUS_REGION_TABLES    table channels (locus_table.h)
 *   LOCUS_REGION_COUNTERS  counter directory and per-lcore blocks (locus_counters.h)
 *   LOCUS_REGION_CLIENTS   client slots and their rings (the client API)
 *
 * Any change of layout bumps LOCUS_SHM_ABI_VERSION; an attacher of another
 * version is refused with -LOCUS_EVERSION.
 */
#ifndef LOCUS_SHM_H
#define LOCUS_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "locus_err.h"

#define LOCUS_SHM_MAGIC        0x4d48535355434f4cull /* "LOCUSSHM" little-endian */
#define LOCUS_SHM_ABI_VERSION  1u
#define LOCUS_SHM_NAME_MAX     64  /* instance name: [A-Za-z0-9_.-]{1,63} */

enum locus_shm_state {
	LOCUS_SHM_STARTING = 1,
	LOCUS_SHM_RUNNING  = 2,
	LOCUS_SHM_STOPPING = 3,
};

enum locus_shm_region_id {
	LOCUS_REGION_TABLES   = 0,
	LOCUS_REGION_COUNTERS = 1,
	LOCUS_REGION_CLIENTS  = 2,
	LOCUS_REGION_MAX      = 8,
};

enum locus_shm_attach_flags {
	LOCUS_SHM_RDONLY      = 1u << 0, /* map PROT_READ (locus-stat, monitors) */
	LOCUS_SHM_ALLOW_GROUP = 1u << 1, /* accept a segment of another owner whose
					  * group we belong to (mode 0660 grants it) */
};

struct locus_shm; /* process-local handle; opaque */

/* Sizes of the regions to create. A size of 0 omits the region. */
struct locus_shm_params {
	const char *instance;
	size_t region_size[LOCUS_REGION_MAX];
};

/*
 * Create the segment with mode 0660 in state STARTING; regions are zeroed and
 * 64-byte aligned; the owning module initialises each. Fails with -EEXIST
 * if a segment of that name exists and its owner pid is alive; a stale one
 * (owner dead) is replaced. Returns 0 and *out, or a negative code.
 */
int locus_shm_create(const struct locus_shm_params *p, struct locus_shm **out);

/*
 * Attach an existing segment. Refusals, each distinct:
 *   -ENOENT               no such instance
 *   -EACCES               the OS denied access
 *   -LOCUS_EWORLDWRITABLE the object is world-writable
 *   -LOCUS_EFOREIGN       owned by another user (and not allowed by group)
 *   -LOCUS_ETRUNCATED     smaller than its header or than the header's size
 *   -LOCUS_EBADMAGIC      not a locus segment
 *   -LOCUS_EVERSION       another ABI version
 * err (may be NULL) receives a sentence naming the segment and the cause.
 */
int locus_shm_attach(const char *instance, unsigned flags, struct locus_shm **out,
		     struct locus_error *err);

/* Unmap and free the handle (does not remove the segment). NULL is a no-op. */
void locus_shm_detach(struct locus_shm *shm);

/* Remove /dev/shm/locus.<instance>. Returns 0 or -errno. */
int locus_shm_remove(const char *instance);

/* Base address of region id and its size; NULL (size 0) if absent. */
void *locus_shm_region(struct locus_shm *shm, enum locus_shm_region_id id, size_t *size);

/* Header fields. */
enum locus_shm_state locus_shm_state(const struct locus_shm *shm);
void locus_shm_set_state(struct locus_shm *shm, enum locus_shm_state st); /* owner only */
pid_t locus_shm_owner_pid(const struct locus_shm *shm);
uint64_t locus_shm_start_time_ns(const struct locus_shm *shm); /* CLOCK_REALTIME */
size_t locus_shm_size(const struct locus_shm *shm);
const char *locus_shm_instance(const struct locus_shm *shm);

/* "/dev/shm/locus.<instance>" into buf; -EINVAL on a bad instance name. */
int locus_shm_path(const char *instance, char *buf, size_t len);

#endif /* LOCUS_SHM_H */
