// SPDX-License-Identifier: MIT
/*
 * The shared-memory segment: create, attach, detach, remove.
 *
 * Creation builds the object unnamed (O_TMPFILE, or a private temporary
 * name where the file system lacks it), fills the header, then links it
 * under its name: link(2) fails if the name exists, which is our O_EXCL,
 * and nobody can ever observe a half-built header.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "locus_common.h"
#include "locus_err_priv.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"

#define SHM_MODE          0640 /* written by locusd alone, read by its group */
#define SHM_PAGE          4096
#define SHM_CREATE_TRIES  8

struct locus_shm {
	struct locus_shm_hdr *hdr;
	size_t size;      /* the header's total_size, validated */
	size_t map_len;   /* bytes mapped (the object may be longer) */
	int rdonly;
	/* copied at attach: later writes to the header cannot move them */
	struct locus_shm_region_desc region[LOCUS_REGION_MAX];
	pid_t owner_pid;
	uint64_t owner_ticks;
	char instance[LOCUS_SHM_NAME_MAX];
};

static const char *shm_dir(void)
{
	const char *d = getenv(LOCUS_SHM_DIR_ENV);

	return d && d[0] ? d : LOCUS_SHM_DEFAULT_DIR;
}

int locus_shm_check_name(const char *name)
{
	size_t i, n;

	if (!name)
		return -EINVAL;
	n = strnlen(name, LOCUS_SHM_NAME_MAX);
	if (n == 0 || n >= LOCUS_SHM_NAME_MAX)
		return -EINVAL;
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
			return -EINVAL;
	}
	return 0;
}

int locus_shm_path(const char *instance, char *buf, size_t len)
{
	int n;

	if (locus_shm_check_name(instance) < 0)
		return -EINVAL;
	n = snprintf(buf, len, "%s/locus.%s", shm_dir(), instance);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

int locus_shm_run_path(const char *instance, const char *suffix, char *buf, size_t len)
{
	const char *dir = getenv(LOCUS_SHM_DIR_ENV);
	struct stat st;
	int n;

	if (locus_shm_check_name(instance) < 0)
		return -EINVAL;
	if (!dir || !*dir)
		dir = stat(LOCUS_SHM_RUN_DIR, &st) == 0 && S_ISDIR(st.st_mode) ? LOCUS_SHM_RUN_DIR
									: LOCUS_SHM_DEFAULT_DIR;
	n = snprintf(buf, len, "%s/locus.%s%s", dir, instance, suffix);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int in_group(gid_t gid)
{
	gid_t groups[256];
	int n, i;

	if (gid == getegid())
		return 1;
	n = getgroups(LOCUS_ARRAY_SIZE(groups), groups);
	for (i = 0; i < n; i++)
		if (groups[i] == gid)
			return 1;
	return 0;
}

/* Ownership and mode of an opened object, as attach requires them. */
static int check_owner(const struct stat *st, unsigned flags, const char *path,
		       struct locus_error *err)
{
	if (!S_ISREG(st->st_mode))
		return locus_error_set(err, LOCUS_EBADMAGIC, "%s: not a regular file", path);
	if (st->st_mode & S_IWOTH)
		return locus_error_set(err, LOCUS_EWORLDWRITABLE,
				       "%s: mode %04o is world-writable: refused (expected 0640)",
				       path, (unsigned)(st->st_mode & 07777));
	if (st->st_uid != geteuid() &&
	    !((flags & LOCUS_SHM_ALLOW_GROUP) && in_group(st->st_gid)))
		return locus_error_set(err, LOCUS_EFOREIGN,
				       "%s: owned by uid %u, we are uid %u%s: refused", path,
				       (unsigned)st->st_uid, (unsigned)geteuid(),
				       (flags & LOCUS_SHM_ALLOW_GROUP) ?
				       " and not in its group" : "");
	return 0;
}

/*
 * Check magic and version (in that order: a foreign object has no version)
 * and the size the header claims against what the object holds.
 */
static int check_hdr_ident(const struct locus_shm_hdr *h, size_t have, const char *path,
			   struct locus_error *err)
{
	if (h->magic != LOCUS_SHM_MAGIC)
		return locus_error_set(err, LOCUS_EBADMAGIC,
				       "%s: magic %#llx is not a locus segment", path,
				       (unsigned long long)h->magic);
	if (h->abi_version != LOCUS_SHM_ABI_VERSION)
		return locus_error_set(err, LOCUS_EVERSION,
				       "%s: segment ABI version %u, this build speaks %u", path,
				       h->abi_version, LOCUS_SHM_ABI_VERSION);
	if (h->hdr_size != sizeof(*h) || h->region_count != LOCUS_REGION_MAX)
		return locus_error_set(err, LOCUS_ERANGE,
				       "%s: header size %u / region count %u, expected %zu / %u",
				       path, h->hdr_size, h->region_count, sizeof(*h),
				       LOCUS_REGION_MAX);
	if (h->total_size > have)
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "%s: header says %llu bytes, object holds %zu", path,
				       (unsigned long long)h->total_size, have);
	if (h->total_size < sizeof(*h))
		return locus_error_set(err, LOCUS_ETRUNCATED,
				       "%s: header says %llu bytes, less than the header itself",
				       path, (unsigned long long)h->total_size);
	return 0;
}

/* Every region inside the segment, aligned, disjoint from the others. */
static int check_regions(const struct locus_shm_region_desc *r, uint64_t total,
			 const char *path, struct locus_error *err)
{
	int i, j;

	for (i = 0; i < LOCUS_REGION_MAX; i++) {
		if (r[i].size == 0)
			continue;
		if (r[i].offset % LOCUS_SHM_REGION_ALIGN || r[i].offset < sizeof(struct locus_shm_hdr))
			return locus_error_set(err, LOCUS_ERANGE,
					       "%s: region %d offset %llu misaligned or inside the header",
					       path, i, (unsigned long long)r[i].offset);
		if (r[i].offset > total || r[i].size > total - r[i].offset)
			return locus_error_set(err, LOCUS_ERANGE,
					       "%s: region %d [%llu, +%llu) beyond the segment's %llu bytes",
					       path, i, (unsigned long long)r[i].offset,
					       (unsigned long long)r[i].size,
					       (unsigned long long)total);
	}
	for (i = 0; i < LOCUS_REGION_MAX; i++) {
		for (j = i + 1; j < LOCUS_REGION_MAX; j++) {
			if (!r[i].size || !r[j].size)
				continue;
			if (r[i].offset < r[j].offset + r[j].size &&
			    r[j].offset < r[i].offset + r[i].size)
				return locus_error_set(err, LOCUS_ERANGE,
						       "%s: regions %d and %d overlap", path, i, j);
		}
	}
	return 0;
}

static int layout(const struct locus_shm_params *p, struct locus_shm_region_desc *r,
		  uint64_t *total, struct locus_error *err)
{
	uint64_t cur = sizeof(struct locus_shm_hdr);
	int i;

	for (i = 0; i < LOCUS_REGION_MAX; i++) {
		uint64_t sz = p->region_size[i];

		r[i].offset = 0;
		r[i].size = sz;
		if (!sz)
			continue;
		if (sz > LOCUS_SHM_MAX_SIZE)
			return locus_error_set(err, LOCUS_ERANGE,
					       "region %d size %llu exceeds %llu", i,
					       (unsigned long long)sz, LOCUS_SHM_MAX_SIZE);
		cur = LOCUS_ALIGN_UP(cur, (uint64_t)LOCUS_SHM_REGION_ALIGN);
		r[i].offset = cur;
		cur += sz;
		if (cur > LOCUS_SHM_MAX_SIZE)
			return locus_error_set(err, LOCUS_ERANGE,
					       "segment size exceeds %llu", LOCUS_SHM_MAX_SIZE);
	}
	*total = LOCUS_ALIGN_UP(cur, (uint64_t)SHM_PAGE);
	return 0;
}

/*
 * The name exists. Decide under an exclusive flock on that inode whether it
 * is a stale segment, and if so unlink it while still holding the lock: a
 * concurrent creator that inspected the same inode finds the name no longer
 * points at it and starts over instead of unlinking our fresh segment.
 * Returns 0 to retry the link, or a refusal.
 */
static int replace_if_stale(const char *path, struct locus_error *err)
{
	struct locus_shm_hdr h;
	struct stat st, cur;
	ssize_t n;
	int fd, rc;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return locus_error_set(err, errno, "%s exists and cannot be opened: %s", path,
				       strerror(errno));
	}
	if (flock(fd, LOCK_EX) < 0) {
		rc = locus_error_set(err, errno, "%s: flock: %s", path, strerror(errno));
		goto out;
	}
	rc = 0;
	if (fstat(fd, &st) < 0 || stat(path, &cur) < 0 ||
	    st.st_dev != cur.st_dev || st.st_ino != cur.st_ino)
		goto out; /* replaced meanwhile: retry */
	rc = check_owner(&st, 0, path, err);
	if (rc < 0)
		goto out;
	if ((size_t)st.st_size < sizeof(h)) {
		rc = locus_error_set(err, LOCUS_ETRUNCATED,
				     "%s exists with %lld bytes, not a locus segment: remove it",
				     path, (long long)st.st_size);
		goto out;
	}
	n = pread(fd, &h, sizeof(h), 0);
	if (n != (ssize_t)sizeof(h)) {
		rc = locus_error_set(err, n < 0 ? errno : LOCUS_ETRUNCATED,
				     "%s: cannot read its header", path);
		goto out;
	}
	rc = check_hdr_ident(&h, (size_t)st.st_size, path, err);
	if (rc < 0)
		goto out;
	if (locus_proc_alive(h.owner_pid, h.owner_start_ticks)) {
		rc = locus_error_set(err, EEXIST, "%s exists and its owner pid %d is alive",
				     path, (int)h.owner_pid);
		goto out;
	}
	if (unlink(path) < 0 && errno != ENOENT)
		rc = locus_error_set(err, errno, "%s: stale (owner pid %d dead) but unlink: %s",
				     path, (int)h.owner_pid, strerror(errno));
out:
	close(fd); /* drops the lock */
	return rc;
}

/* An unnamed object in dir, or a privately named one (*tmp set) as fallback. */
static int open_unnamed(const char *dir, const char *instance, char *tmp, size_t tmplen,
			struct locus_error *err)
{
	int fd;

	tmp[0] = '\0';
	fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, SHM_MODE);
	if (fd >= 0)
		return fd;
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return locus_error_set(err, errno, "%s: cannot create an object: %s", dir,
				       strerror(errno));
	snprintf(tmp, tmplen, "%s/.locus.%s.%d.tmp", dir, instance, (int)getpid());
	unlink(tmp); /* our own pid's leftover */
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, SHM_MODE);
	if (fd < 0) {
		int e = errno;

		tmp[0] = '\0';
		return locus_error_set(err, e, "%s: cannot create an object: %s", dir,
				       strerror(e));
	}
	return fd;
}

static int link_named(int fd, const char *tmp, const char *path)
{
	char proc[64];

	if (tmp[0])
		return link(tmp, path) < 0 ? -errno : 0;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
}

int locus_shm_create(const struct locus_shm_params *p, struct locus_shm **out,
		     struct locus_error *err)
{
	char path[4096], tmp[4096];
	struct locus_shm_region_desc r[LOCUS_REGION_MAX];
	struct locus_shm_hdr *h;
	struct locus_shm *shm;
	uint64_t total = 0, ticks = 0;
	int fd, rc, tries;
	void *base;

	if (!p || !out)
		return locus_error_set(err, EINVAL, "create: NULL argument");
	rc = locus_shm_path(p->instance, path, sizeof(path));
	if (rc < 0)
		return locus_error_set(err, -rc, "bad instance name \"%.64s\": want [A-Za-z0-9_.-]{1,%d}",
				       p->instance ? p->instance : "(null)",
				       LOCUS_SHM_NAME_MAX - 1);
	rc = layout(p, r, &total, err);
	if (rc < 0)
		return rc;
	rc = locus_proc_start_ticks(getpid(), &ticks);
	if (rc < 0)
		return locus_error_set(err, -rc, "cannot read our own start time from /proc");

	shm = calloc(1, sizeof(*shm));
	if (!shm)
		return locus_error_set(err, ENOMEM, "create: out of memory");
	fd = open_unnamed(shm_dir(), p->instance, tmp, sizeof(tmp), err);
	if (fd < 0) {
		rc = fd;
		goto err_free;
	}
	/* the umask may have narrowed the mode; 0640 is part of the contract */
	if (fchmod(fd, SHM_MODE) < 0 || ftruncate(fd, (off_t)total) < 0) {
		rc = locus_error_set(err, errno, "%s: sizing to %llu bytes: %s", path,
				     (unsigned long long)total, strerror(errno));
		goto err_close;
	}
	base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = locus_error_set(err, errno, "%s: mmap: %s", path, strerror(errno));
		goto err_close;
	}
	h = base;
	h->magic = LOCUS_SHM_MAGIC;
	h->abi_version = LOCUS_SHM_ABI_VERSION;
	h->hdr_size = sizeof(*h);
	h->total_size = total;
	h->start_time_ns = realtime_ns();
	h->owner_start_ticks = ticks;
	h->owner_pid = getpid();
	h->region_count = LOCUS_REGION_MAX;
	memcpy(h->region, r, sizeof(r));
	snprintf(h->instance, sizeof(h->instance), "%s", p->instance);
	__atomic_store_n(&h->state, LOCUS_SHM_STARTING, __ATOMIC_RELEASE);

	for (tries = 0; tries < SHM_CREATE_TRIES; tries++) {
		rc = link_named(fd, tmp, path);
		if (rc != -EEXIST)
			break;
		rc = replace_if_stale(path, err);
		if (rc < 0)
			goto err_unmap;
		rc = -EEXIST;
	}
	if (rc < 0) {
		rc = locus_error_set(err, -rc, "%s: cannot name the segment: %s", path,
				     strerror(-rc));
		goto err_unmap;
	}
	if (tmp[0])
		unlink(tmp);
	close(fd);

	shm->hdr = h;
	shm->size = total;
	shm->map_len = total;
	shm->owner_pid = h->owner_pid;
	shm->owner_ticks = ticks;
	memcpy(shm->region, r, sizeof(r));
	snprintf(shm->instance, sizeof(shm->instance), "%s", p->instance);
	*out = shm;
	return 0;

err_unmap:
	munmap(base, total);
err_close:
	if (tmp[0])
		unlink(tmp);
	close(fd);
err_free:
	free(shm);
	return rc;
}

int locus_shm_attach(const char *instance, unsigned flags, struct locus_shm **out,
		     struct locus_error *err)
{
	int rdonly = !!(flags & LOCUS_SHM_RDONLY);
	char path[4096];
	struct locus_shm *shm;
	struct stat st;
	size_t have;
	void *base;
	int fd, rc;

	if (!out)
		return locus_error_set(err, EINVAL, "attach: NULL argument");
	rc = locus_shm_path(instance, path, sizeof(path));
	if (rc < 0)
		return locus_error_set(err, -rc, "bad instance name \"%.64s\": want [A-Za-z0-9_.-]{1,%d}",
				       instance ? instance : "(null)", LOCUS_SHM_NAME_MAX - 1);
	fd = open(path, (rdonly ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rc = errno;
		if (rc == ENOENT)
			return locus_error_set(err, ENOENT,
					       "no locus instance \"%s\" (%s does not exist)",
					       instance, path);
		if (rc == EPERM || rc == EACCES)
			return locus_error_set(err, EACCES, "%s: permission denied (%s access)",
					       path, rdonly ? "read" : "read-write");
		if (rc == ELOOP)
			return locus_error_set(err, LOCUS_EBADMAGIC, "%s is a symbolic link: refused",
					       path);
		return locus_error_set(err, rc, "%s: %s", path, strerror(rc));
	}
	if (fstat(fd, &st) < 0) {
		rc = locus_error_set(err, errno, "%s: fstat: %s", path, strerror(errno));
		goto err_close;
	}
	rc = check_owner(&st, flags, path, err);
	if (rc < 0)
		goto err_close;
	if (st.st_size < (off_t)sizeof(struct locus_shm_hdr)) {
		rc = locus_error_set(err, LOCUS_ETRUNCATED,
				     "%s: %lld bytes, smaller than the %zu-byte header", path,
				     (long long)st.st_size, sizeof(struct locus_shm_hdr));
		goto err_close;
	}
	if ((unsigned long long)st.st_size > LOCUS_SHM_MAX_SIZE) {
		rc = locus_error_set(err, LOCUS_ERANGE, "%s: %lld bytes exceeds the %llu limit",
				     path, (long long)st.st_size, LOCUS_SHM_MAX_SIZE);
		goto err_close;
	}
	have = (size_t)st.st_size;
	base = mmap(NULL, have, rdonly ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = locus_error_set(err, errno, "%s: mmap: %s", path, strerror(errno));
		goto err_close;
	}
	close(fd);

	shm = calloc(1, sizeof(*shm));
	if (!shm) {
		rc = locus_error_set(err, ENOMEM, "attach: out of memory");
		goto err_unmap;
	}
	/* copy what we validate: another process may write the header later */
	memcpy(shm->region, ((struct locus_shm_hdr *)base)->region, sizeof(shm->region));
	rc = check_hdr_ident(base, have, path, err);
	if (rc < 0)
		goto err_free;
	shm->size = ((struct locus_shm_hdr *)base)->total_size;
	if (shm->size > have) {
		rc = locus_error_set(err, LOCUS_ETRUNCATED, "%s: header changed while attaching",
				     path);
		goto err_free;
	}
	rc = check_regions(shm->region, shm->size, path, err);
	if (rc < 0)
		goto err_free;
	shm->hdr = base;
	shm->rdonly = rdonly;
	shm->map_len = have;
	shm->owner_pid = ((struct locus_shm_hdr *)base)->owner_pid;
	shm->owner_ticks = ((struct locus_shm_hdr *)base)->owner_start_ticks;
	snprintf(shm->instance, sizeof(shm->instance), "%s", instance);
	*out = shm;
	return 0;

err_free:
	free(shm);
err_unmap:
	munmap(base, have);
	return rc;
err_close:
	close(fd);
	return rc;
}

void locus_shm_detach(struct locus_shm *shm)
{
	if (!shm)
		return;
	munmap(shm->hdr, shm->map_len);
	free(shm);
}

int locus_shm_remove(const char *instance)
{
	char path[4096];
	int rc;

	rc = locus_shm_path(instance, path, sizeof(path));
	if (rc < 0)
		return rc;
	return unlink(path) < 0 ? -errno : 0;
}

void *locus_shm_region(struct locus_shm *shm, enum locus_shm_region_id id, size_t *size)
{
	if (!shm || (unsigned)id >= LOCUS_REGION_MAX || !shm->region[id].size) {
		if (size)
			*size = 0;
		return NULL;
	}
	if (size)
		*size = shm->region[id].size;
	return (char *)shm->hdr + shm->region[id].offset;
}

enum locus_shm_state locus_shm_state(const struct locus_shm *shm)
{
	return __atomic_load_n(&shm->hdr->state, __ATOMIC_ACQUIRE);
}

void locus_shm_set_state(struct locus_shm *shm, enum locus_shm_state st)
{
	if (shm->rdonly)
		return;
	__atomic_store_n(&shm->hdr->state, (uint32_t)st, __ATOMIC_RELEASE);
}

pid_t locus_shm_owner_pid(const struct locus_shm *shm)
{
	return __atomic_load_n(&shm->hdr->owner_pid, __ATOMIC_RELAXED);
}

int locus_shm_owner_alive(const struct locus_shm *shm)
{
	return locus_proc_alive(shm->owner_pid, shm->owner_ticks);
}

uint64_t locus_shm_start_time_ns(const struct locus_shm *shm)
{
	return shm->hdr->start_time_ns;
}

size_t locus_shm_size(const struct locus_shm *shm)
{
	return shm->size;
}

const char *locus_shm_instance(const struct locus_shm *shm)
{
	return shm->instance;
}

int locus_shm_is_rdonly(const struct locus_shm *shm)
{
	return shm->rdonly;
}
