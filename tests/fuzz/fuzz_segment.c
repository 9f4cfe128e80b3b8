// SPDX-License-Identifier: MIT
/*
 * A segment file as clients, locusctl and locus-stat attach it
 * (locus_shm_attach on $LOCUS_SHM_DIR/locus.<instance>), whatever its
 * bytes: the input is written as the segment of instance "fz" in a private
 * directory, attached read-only (clients, locus-stat, locusctl: mode 0640)
 * and read-write (a stale segment locusd looks at), and the counters
 * region, the only one a segment holds, is opened as
 * locus-stat opens it (locus_counters_open, read-only) and summed.
 * Contract, from locus_shm.h and locus_counters.h: an attached segment's
 * regions lie inside it, aligned and apart; whatever the counters module
 * accepts it describes inside its region.
 */
#include <fcntl.h>
#include <unistd.h>

#include "fuzz.h"
#include "locus_counters.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"

static char dir[64], path[128];

static void cleanup(void)
{
	unlink(path);
	rmdir(dir);
}

static void check_counters(void *region, size_t size)
{
	struct locus_counters *c;
	uint64_t w[LOCUS_HIST_WORDS * 4];

	if (locus_counters_open(region, size, LOCUS_CTR_RDONLY, &c, NULL) < 0)
		return;
	for (uint32_t i = 0; i < locus_counters_n_entries(c); i++)
		locus_counters_sum(c, i, w, LOCUS_ARRAY_SIZE(w));
	locus_counters_close(c);
}

static void attach(const struct locus_shm_hdr *file, unsigned flags)
{
	struct locus_error err = { 0 };
	struct locus_shm *shm;
	struct { uint8_t *p; size_t n; } r[LOCUS_REGION_MAX];
	size_t total;

	if (locus_shm_attach("fz", flags, &shm, &err) < 0) {
		FUZZ_CHECK(err.msg[0], "refusal without a sentence");
		return;
	}
	FUZZ_CHECK(file, "a segment shorter than its header was attached");
	total = locus_shm_size(shm);
	for (int id = 0; id < LOCUS_REGION_MAX; id++) {
		r[id].p = locus_shm_region(shm, (enum locus_shm_region_id)id, &r[id].n);
	}
	for (int id = 0; id < LOCUS_REGION_MAX; id++) {
		if (!r[id].p)
			continue;
		FUZZ_CHECK(r[id].n > 0, "region %d present with size 0", id);
		for (int j = 0; j < id; j++)
			FUZZ_CHECK(!r[j].p || r[j].p + r[j].n <= r[id].p ||
				   r[id].p + r[id].n <= r[j].p,
				   "regions %d and %d overlap", j, id);
	}
	/* each region inside the segment; its offset as the file's header says */
	for (int id = 0; id < LOCUS_REGION_MAX; id++) {
		if (!r[id].p)
			continue;
		FUZZ_CHECK(file->region[id].size == r[id].n, "region %d size differs from the "
			   "header's", id);
		FUZZ_CHECK(file->region[id].offset >= sizeof(struct locus_shm_hdr) &&
			   file->region[id].offset % LOCUS_SHM_REGION_ALIGN == 0 &&
			   file->region[id].offset <= total &&
			   r[id].n <= total - file->region[id].offset,
			   "region %d at +%llu, %zu bytes, in a segment of %zu", id,
			   (unsigned long long)file->region[id].offset, r[id].n, total);
	}
	FUZZ_CHECK(memchr(locus_shm_instance(shm), 0, LOCUS_SHM_NAME_MAX), "instance name");
	if (r[LOCUS_REGION_COUNTERS].p)
		check_counters(r[LOCUS_REGION_COUNTERS].p, r[LOCUS_REGION_COUNTERS].n);
	locus_shm_detach(shm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/dev/shm/locus-fuzz-seg-XXXXXX");
		if (!mkdtemp(dir))
			abort();
		setenv(LOCUS_SHM_DIR_ENV, dir, 1);
		snprintf(path, sizeof(path), "%s/locus.fz", dir);
		atexit(cleanup);
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	close(fd);
	if (size >= sizeof(struct locus_shm_hdr)) {
		struct locus_shm_hdr h;

		memcpy(&h, data, sizeof(h));
		attach(&h, LOCUS_SHM_RDONLY);
		attach(&h, 0);
	} else {
		attach(NULL, LOCUS_SHM_RDONLY);
	}
	return 0;
}
