// SPDX-License-Identifier: MIT
/*
 * Buffer region registration requests as locusd's main lcore reads them:
 * real SOCK_SEQPACKET connections to the registration socket of a
 * locus_regions instance (dataplane/regions.c) over a real engine
 * (fuzz_engine.h, node 0), each carrying any bytes and 0..5 file
 * descriptors (memfds none of which is sealed against shrinking, /dev/null,
 * a socket: this host has no dma-buf exporter, so none can be registered).
 * Input: up to 8 requests, each a flags byte (fd count and kinds; bit 7 sets
 * slot and generation to the sender's own), a length byte and the bytes.
 * Contract, from
 * locus_regions.h and locus_client.h: every connection gets exactly one
 * well-formed answer (magic, version, a refusal with a sentence) and every
 * refusal is counted once in regions_refused; no descriptor passed in is
 * kept open by locusd once it answered; the daemon side never blocks.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <dirent.h>

#include "fuzz.h"
#include "fuzz_engine.h"
#include "fuzz_sock.h"
#include "locus_client_priv.h"
#include "locus_counters_priv.h"
#include "locus_regions.h"
#include "locus_shm.h"

#define MAX_REQS 8

static char dir[64];

static void cleanup(void)
{
	char p[128];

	snprintf(p, sizeof(p), "%s/locus.fz.reg", dir);
	unlink(p);
	rmdir(dir);
}

static uint64_t refused_total(struct locus_counters *c)
{
	int idx = locus_counters_find(c, "regions_refused");
	uint64_t w[LOCUS_REGREF_N], t = 0;

	if (idx < 0 || locus_counters_sum(c, (uint32_t)idx, w, LOCUS_REGREF_N) != LOCUS_REGREF_N)
		abort();
	for (int i = 0; i < LOCUS_REGREF_N; i++)
		t += w[i];
	return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t attached[FE_SLOTS] = { 1, 1, 1, 1 };
	struct locus_ctr_params cp = { .max_entries = 32, .n_blocks = 1, .block_size = 4096 };
	struct fuzz_in in = { data, size };
	struct locus_error err = { 0 };
	struct locus_regions *rs = NULL;
	struct locus_counters *ctrs;
	struct fe_env *env;
	size_t klen = locus_counters_region_size(&cp);
	void *kmem;
	char path[128];
	int fds_before;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/locus-fuzz-reg-XXXXXX");
		if (!mkdtemp(dir))
			abort();
		setenv(LOCUS_SHM_DIR_ENV, dir, 1);
		atexit(cleanup);
	}
	snprintf(path, sizeof(path), "%s/locus.fz.reg", dir);
	fds_before = fz_open_fds();
	env = fe_create();
	if (posix_memalign(&kmem, 64, klen) || locus_counters_init(kmem, klen, &cp, &err) ||
	    locus_counters_open(kmem, klen, 0, &ctrs, &err))
		abort();
	{
		struct locus_regions_params p = {
			.instance = "fz", .clients = &env->n[0].cv, .engine = env->n[0].e,
			.ctrs = ctrs, .ctl_blk = locus_counters_block(ctrs, 0),
			.attached = attached,
		};

		if (locus_regions_create(&p, &rs, &err) < 0) {
			fprintf(stderr, "%s\n", err.msg);
			abort();
		}
	}
	for (int r = 0; r < MAX_REQS && in.n; r++) {
		uint8_t f = fin_u8(&in), len = fin_u8(&in) % 80;
		uint8_t req[80];
		struct locus_reg_rep rep;
		int fds[8], nfd = f % 6, sock, got = 0;
		uint64_t refused = refused_total(ctrs);
		int open_before = fz_open_fds();
		ssize_t n;

		fin_copy(&in, req, len);
		if ((f & 0x80) && len >= 24) {
			/* the sender's own slot (0) in its generation: past the peer check */
			struct locus_client_ctl *ctl = locus_clients_ctl(&env->n[0].cv, 0);
			uint32_t slot = 0;
			uint64_t gen = ctl->generation;

			memcpy(req + 12, &slot, 4);
			memcpy(req + 16, &gen, 8);
		}
		for (int i = 0; i < nfd; i++)
			fds[i] = fz_kind_fd(((unsigned)(f >> 3) + (unsigned)i) % 4);
		sock = fz_connect(path);
		if (fz_send(sock, req, len, fds, nfd) < 0)
			abort();
		for (int i = 0; i < nfd; i++)
			close(fds[i]);
		for (int k = 0; k < 4; k++) {
			locus_regions_poll(rs);
			locus_regions_setup(rs); /* a parked dma-buf registration: one per pass */
			locus_engine_poll(env->n[0].e);
		}
		while ((n = recv(sock, &rep, sizeof(rep), MSG_DONTWAIT)) > 0) {
			FUZZ_CHECK(n == sizeof(rep), "an answer of %zd bytes", n);
			FUZZ_CHECK(rep.magic == LOCUS_REG_MAGIC && rep.version == LOCUS_REG_VERSION,
				   "answer magic/version");
			FUZZ_CHECK(rep.status < 0, "a registration accepted without a dma-buf or a "
				   "sealed memfd");
			FUZZ_CHECK(memchr(rep.msg, 0, sizeof(rep.msg)) && rep.msg[0],
				   "a refusal without a sentence");
			got++;
		}
		FUZZ_CHECK(got == 1, "request %d got %d answers", r, got);
		FUZZ_CHECK(n == 0, "the connection stays open after the answer (%zd)", n);
		FUZZ_CHECK(refused_total(ctrs) == refused + 1, "a refusal counted %llu times",
			   (unsigned long long)(refused_total(ctrs) - refused));
		close(sock);
		FUZZ_CHECK(fz_open_fds() == open_before, "request %d: %d descriptors kept open after "
			   "its answer", r, fz_open_fds() - open_before);
	}
	locus_regions_destroy(rs);
	fe_destroy(env);
	locus_counters_close(ctrs);
	free(kmem);
	FUZZ_CHECK(fz_open_fds() == fds_before, "%d descriptors left open", fz_open_fds() - fds_before);
	return 0;
}
