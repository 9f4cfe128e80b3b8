// SPDX-License-Identifier: MIT
/*
 * A segment file as clients, locusctl and locus-stat attach it
 * (locus_shm_attach on $LOCUS_SHM_DIR/locus.<instance>), whatever its
 * bytes: the input is written as the segment of instance "fz" in a private
 * directory, attached read-only (locus-stat) and read-write (a client,
 * locusctl), and each region present is opened by its module: table
 * channels (locus_table_region_attach), counters (locus_counters_open,
 * read-only) and client slots (locus_clients_open). Contract, from
 * locus_shm.h and the modules' headers: an attached segment's regions lie
 * inside it, aligned and apart; whatever a module accepts it describes
 * inside its region (client slots, rings and buffers; counter storage).
 */
#include <fcntl.h>
#include <unistd.h>

#include "fuzz.h"
#include "locus_client.h"
#include "locus_counters.h"
#include "locus_shm.h"
#include "locus_table.h"

static char dir[64], path[128];

static void cleanup(void)
{
	unlink(path);
	rmdir(dir);
}

static void check_clients(uint8_t *region, size_t size)
{
	struct locus_clients v;

	if (locus_clients_open(&v, region, size) < 0)
		return;
	FUZZ_CHECK(v.p.n_slots >= 1 && v.slots_off + (uint64_t)v.p.n_slots * v.slot_stride <= size,
		   "%u client slots of %llu bytes from %llu exceed a region of %zu", v.p.n_slots,
		   (unsigned long long)v.slot_stride, (unsigned long long)v.slots_off, size);
	FUZZ_CHECK(v.buf_off + v.buf_size <= v.slot_stride &&
		   sizeof(struct locus_client_ctl) + 2 * v.ring_bytes <= v.buf_off,
		   "a slot's parts overlap");
	FUZZ_CHECK(v.buf_size == v.p.stage_size + (uint64_t)v.p.inbox_slots * v.p.inbox_slot_size,
		   "buffer size");
	/* what the engine reads of every slot first */
	for (uint32_t s = 0; s < v.p.n_slots; s++) {
		volatile uint64_t sp = locus_clients_ctl(&v, s)->state_pid;

		(void)sp;
		(void)*(volatile uint8_t *)(locus_clients_buf(&v, s) + v.buf_size - 1);
	}
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

static void check_tables(void *region, size_t size)
{
	struct locus_table_region *t;

	if (locus_table_region_attach(region, size, &t, NULL) < 0)
		return;
	for (unsigned ch = 0; ch < locus_table_channels(t); ch++)
		locus_table_published(t, ch);
	locus_table_region_detach(t);
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
	if (r[LOCUS_REGION_TABLES].p)
		check_tables(r[LOCUS_REGION_TABLES].p, r[LOCUS_REGION_TABLES].n);
	if (r[LOCUS_REGION_COUNTERS].p)
		check_counters(r[LOCUS_REGION_COUNTERS].p, r[LOCUS_REGION_COUNTERS].n);
	if (r[LOCUS_REGION_CLIENTS].p)
		check_clients(r[LOCUS_REGION_CLIENTS].p, r[LOCUS_REGION_CLIENTS].n);
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
