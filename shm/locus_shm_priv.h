/* SPDX-License-Identifier: MIT */
/*
 * The segment as its owner (locusd) creates and runs it, and the process
 * identity that ownership and liveness checks use: locus's own programs
 * only (not installed, not exported). What a reader of the segment uses is
 * locus_shm.h.
 */
#ifndef LOCUS_SHM_PRIV_H
#define LOCUS_SHM_PRIV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "locus_err.h"
#include "locus_shm.h"

/* Sizes of the regions to create. A size of 0 omits the region. */
struct locus_shm_params {
	const char *instance;
	size_t region_size[LOCUS_REGION_MAX];
};

/*
 * Create the segment with mode 0640 in state STARTING; regions are zeroed
 * and LOCUS_SHM_REGION_ALIGN-aligned; the owning module initialises each.
 * The object appears under its name fully formed (built unnamed, then
 * linked in), so an attacher never sees a half-written header. Fails with
 * -EEXIST if a segment of that name exists and its owner is alive (pid and
 * process start time both match); a stale one (owner dead) is replaced. An
 * existing object that is not a readable locus segment of this ABI is left
 * alone and reported with the refusal codes of locus_shm_attach. Returns 0
 * and *out, or a negative code; err (may be NULL) receives a sentence.
 */
int locus_shm_create(const struct locus_shm_params *p, struct locus_shm **out,
		     struct locus_error *err);

/* Remove the object of that instance. Returns 0 or -errno (-EINVAL: bad name). */
int locus_shm_remove(const char *instance);

/* The owner's state changes; the size and the mode of a handle (tests). */
void locus_shm_set_state(struct locus_shm *shm, enum locus_shm_state st); /* owner only */
size_t locus_shm_size(const struct locus_shm *shm);
int locus_shm_is_rdonly(const struct locus_shm *shm);

/*
 * Where an instance's sockets live: "<dir>/locus.<instance><suffix>", dir
 * $LOCUS_SHM_DIR when set (tests: next to the segment), else /run/locus when
 * it exists (the deployment's tmpfiles.d entry), else /dev/shm. 0, -EINVAL,
 * -ENAMETOOLONG.
 */
#define LOCUS_SHM_RUN_DIR "/run/locus"
int locus_shm_run_path(const char *instance, const char *suffix, char *buf, size_t len);

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

#endif /* LOCUS_SHM_PRIV_H */
