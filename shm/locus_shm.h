/* SPDX-License-Identifier: MIT */
/*
 * The node's shared-memory segment: /dev/shm/locus.<instance>.
 *
 * One shm object per data-plane instance, mode 0640: locusd writes it, its
 * group (clients, locus-stat, locusctl) maps it read-only. It starts with a fixed
 * header (magic, ABI version, total size, owner pid and start time, state
 * word) followed by a region directory; every region is addressed by its
 * offset from the start of the segment, nothing in it is a pointer, so any
 * process maps it at any address.
 *
 * Regions (each owned by one module, which lays out its own contents):
 *   LOCUS_REGION_COUNTERS  counter directory and per-lcore blocks (locus_counters.h)
 * Since ABI 2 nothing a process other than locusd may write is in the
 * segment: the table channels live in locusd's own memory and reach it only
 * through the control socket (locus_push.h); each client slot is a memfd of
 * its own, mapped by locusd and by the one client it was given to
 * (locus_client.h).
 *
 * Any change of layout bumps LOCUS_SHM_ABI_VERSION; an attacher of another
 * version is refused with -LOCUS_EVERSION.
 *
 * The directory holding the objects is /dev/shm, or $LOCUS_SHM_DIR when set
 * (tests use private directories so they run in parallel). Objects are
 * opened with open(2) under that directory, which is what shm_open(3) does
 * for /dev/shm, so a segment is also visible as a plain file there.
 */
#ifndef LOCUS_SHM_H
#define LOCUS_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "locus_err.h"

#define LOCUS_SHM_MAGIC        0x4d48535355434f4cull /* "LOCUSSHM" little-endian */
#define LOCUS_SHM_ABI_VERSION  2u
#define LOCUS_SHM_NAME_MAX     64  /* instance name: [A-Za-z0-9_.-]{1,63} */
#define LOCUS_SHM_DIR_ENV      "LOCUS_SHM_DIR"
#define LOCUS_SHM_DEFAULT_DIR  "/dev/shm"
#define LOCUS_SHM_REGION_ALIGN 4096 /* page: client buffers are registered memory */
#define LOCUS_SHM_MAX_SIZE     (1ull << 40) /* sanity bound on a segment */

enum locus_shm_state {
	LOCUS_SHM_STARTING = 1,
	LOCUS_SHM_RUNNING  = 2,
	LOCUS_SHM_STOPPING = 3,
};

enum locus_shm_region_id {
	/* 0 and 2: the table channels and the client slots until ABI 1 */
	LOCUS_REGION_COUNTERS = 1,
	LOCUS_REGION_MAX      = 8,
};

enum locus_shm_attach_flags {
	LOCUS_SHM_RDONLY      = 1u << 0, /* map PROT_READ (locus-stat, monitors) */
	LOCUS_SHM_ALLOW_GROUP = 1u << 1, /* accept a segment of another owner whose
					  * group we belong to (mode 0640 grants reading) */
};

/*
 * The segment header as it lies at offset 0 (ABI version 2). magic and
 * abi_version stay at offsets 0 and 8 in every version so that any attacher
 * can tell what it is looking at. A region of size 0 is absent (offset 0).
 * state is accessed with atomic loads and stores only.
 */
struct locus_shm_region_desc {
	uint64_t offset;
	uint64_t size;
};

struct locus_shm_hdr {
	uint64_t magic;             /* LOCUS_SHM_MAGIC */
	uint32_t abi_version;       /* LOCUS_SHM_ABI_VERSION */
	uint32_t hdr_size;          /* sizeof(struct locus_shm_hdr) */
	uint64_t total_size;        /* bytes mapped, header included */
	uint64_t start_time_ns;     /* CLOCK_REALTIME at creation */
	uint64_t owner_start_ticks; /* /proc/<pid>/stat starttime of the owner */
	int32_t  owner_pid;
	uint32_t state;             /* enum locus_shm_state */
	uint32_t region_count;      /* LOCUS_REGION_MAX */
	uint8_t  reserved[12];      /* zero */
	struct locus_shm_region_desc region[LOCUS_REGION_MAX];
	char     instance[LOCUS_SHM_NAME_MAX]; /* NUL-terminated */
};

_Static_assert(sizeof(struct locus_shm_hdr) == 256, "segment header is 256 bytes");
_Static_assert(offsetof(struct locus_shm_hdr, region) == 64, "region directory at 64");

struct locus_shm; /* process-local handle; opaque */

/* Sizes of the regions to create. A size of 0 omits the region. */
struct locus_shm_params {
	const char *instance;
	size_t region_size[LOCUS_REGION_MAX];
};

/*
 * Create the segment with mode 0640 in state STARTING; regions are zeroed and
 * LOCUS_SHM_REGION_ALIGN-aligned; the owning module initialises each. The object appears
 * under its name fully formed (built unnamed, then linked in), so an attacher
 * never sees a half-written header. Fails with -EEXIST if a segment of that
 * name exists and its owner is alive (pid and process start time both match);
 * a stale one (owner dead) is replaced. An existing object that is not a
 * readable locus segment of this ABI is left alone and reported with the
 * attach refusal codes below. Returns 0 and *out, or a negative code; err
 * (may be NULL) receives a sentence.
 */
int locus_shm_create(const struct locus_shm_params *p, struct locus_shm **out,
		     struct locus_error *err);

/*
 * Attach an existing segment. Refusals, each distinct:
 *   -EINVAL               bad instance name
 *   -ENOENT               no such instance
 *   -EACCES               the OS denied access
 *   -LOCUS_EWORLDWRITABLE the object is world-writable
 *   -LOCUS_EFOREIGN       owned by another user (and not allowed by group)
 *   -LOCUS_ETRUNCATED     smaller than its header or than the header's size
 *   -LOCUS_EBADMAGIC      not a locus segment
 *   -LOCUS_EVERSION       another ABI version
 *   -LOCUS_ERANGE         corrupt header: a region outside the segment,
 *                         misaligned or overlapping another
 * err (may be NULL) receives a sentence naming the segment and the cause.
 */
int locus_shm_attach(const char *instance, unsigned flags, struct locus_shm **out,
		     struct locus_error *err);

/* Unmap and free the handle (does not remove the segment). NULL is a no-op. */
void locus_shm_detach(struct locus_shm *shm);

/* Remove the object of that instance. Returns 0 or -errno (-EINVAL: bad name). */
int locus_shm_remove(const char *instance);

/* Base address of region id and its size; NULL (size 0) if absent. */
void *locus_shm_region(struct locus_shm *shm, enum locus_shm_region_id id, size_t *size);

/* Header fields. */
enum locus_shm_state locus_shm_state(const struct locus_shm *shm);
void locus_shm_set_state(struct locus_shm *shm, enum locus_shm_state st); /* owner only */
pid_t locus_shm_owner_pid(const struct locus_shm *shm);
/*
 * 1 while the process that created the segment runs (the pid and start time
 * it had when we attached: a header rewritten since cannot fool it; a
 * killed daemon's pid reused by another process is not it), else 0. Reads
 * /proc: not for a hot loop.
 */
int locus_shm_owner_alive(const struct locus_shm *shm);
uint64_t locus_shm_start_time_ns(const struct locus_shm *shm); /* CLOCK_REALTIME */
size_t locus_shm_size(const struct locus_shm *shm);
const char *locus_shm_instance(const struct locus_shm *shm);
int locus_shm_is_rdonly(const struct locus_shm *shm);

/*
 * "<dir>/locus.<instance>" into buf, dir as described above. -EINVAL on a
 * bad instance name, -ENAMETOOLONG if buf is too short.
 */
int locus_shm_path(const char *instance, char *buf, size_t len);

/*
 * Where an instance's sockets live: "<dir>/locus.<instance><suffix>", dir
 * $LOCUS_SHM_DIR when set (tests: next to the segment), else /run/locus when
 * it exists (the deployment's tmpfiles.d entry), else /dev/shm. 0, -EINVAL,
 * -ENAMETOOLONG.
 */
#define LOCUS_SHM_RUN_DIR "/run/locus"
int locus_shm_run_path(const char *instance, const char *suffix, char *buf, size_t len);

/* 0 if name is a valid instance name ([A-Za-z0-9_.-]{1,63}, not "." / ".."). */
int locus_shm_check_name(const char *name);

/*
 * Process identity used for ownership and liveness: a pid alone can be
 * reused, a pid plus its start time (clock ticks since boot, field 22 of
 * /proc/<pid>/stat) cannot. locus_proc_start_ticks returns 0 and *ticks,
 * or -ESRCH if there is no such process. locus_proc_alive returns 1 if pid
 * runs and started at start_ticks, 0 otherwise (a pid <= 0 is never alive;
 * nor is a zombie, though kill(pid, 0) still finds it).
 */
int locus_proc_start_ticks(pid_t pid, uint64_t *ticks);
int locus_proc_alive(pid_t pid, uint64_t start_ticks);

/*
 * The same identity in one word, for lock and ownership words taken with a
 * single CAS: pid in the low 32 bits, the low 32 bits of its start ticks
 * above (never 0 for a real process). locus_proc_ident_alive(0) is 0.
 */
static inline uint64_t locus_proc_ident(pid_t pid, uint64_t start_ticks)
{
	return (uint64_t)(uint32_t)pid | (start_ticks << 32);
}

int locus_proc_ident_alive(uint64_t ident);
/* Our own identity word (computed once per process). 0 if /proc is unreadable. */
uint64_t locus_proc_self_ident(void);

#endif /* LOCUS_SHM_H */
