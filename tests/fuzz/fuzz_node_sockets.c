// SPDX-License-Identifier: MIT
/*
 * A node's two sockets as locusd's main lcore serves them: a whole node
 * (locus_node_create: segment, client slots, table channels, registration
 * and control sockets) on one thread, its control work and its engine
 * polled between requests. Every process of group locus can reach the
 * registration socket (attachments, regions) and the control socket (table
 * pushes: this fuzzer runs as root, so the sender check lets it through and
 * the request itself is what is fuzzed). Input: up to 6 requests, each
 *   f    bit 0: the control socket (else registration); bits 1-2: fds
 *        passed (0..3); bits 3-7: their kinds (fz_kind_fd); bit 5: the header made
 *        well-formed (magic, version, an op) before the input's fields go
 *        deeper; bit 6 (control): the first fd is a memfd holding a valid
 *        ELDR table, sealed or not, a byte of it possibly changed; bit 7
 *        (registration): an attachment granted is confirmed
 *   len, bytes    the request (up to 64 bytes)
 *   a u16, a u8   the table byte to change and its new value
 * Contract, from locus_push.h and locus_client.h: one answer per request at
 * most, well-formed (magic, version; a refusal has a sentence); a grant
 * carries exactly one fd, a memfd of the slot's size; a table is published
 * under a new generation and run only if the reader validated it (the
 * generation in use is the answer's when every reader adopted it, else the
 * old one), and nothing else changes the generation in use; no control pass blocks (each returns
 * within 2 s under ASan); every fd passed in is closed by locusd once the
 * node is gone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"
#include "fuzz_sock.h"
#include "fuzz_tables.h"
#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_config.h"
#include "locus_counters.h"
#include "locus_node.h"
#include "locus_push.h"
#include "locus_seqpkt.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"

#define MAX_REQS   6
#define PASSES     64
#define PASS_BOUND (2000ull * 1000000ull) /* ns a control pass may take */

static const char conf[] =
	"[locusd]\ninstance = fzn\nclient_slots = 2\nring_size = 16\n"
	"stage_size = 65536\nclient_inbox_slots = 4\ninbox_slot_size = 16384\n"
	"moe_layers = 4\nmoe_experts = 16\nmax_decoders = 8\nmax_batch_tokens = 64\n"
	"table_slot_size = 65536\n"
	"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";

static char dir[64];

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void cleanup(void)
{
	struct dirent *de;
	DIR *d = opendir(dir);

	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.')
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	rmdir(dir);
}

/* A memfd holding a valid 4 x 16 ELDR table, byte at changed to val if at < its length. */
static int table_fd(int seal, uint16_t at, uint8_t val, size_t *len)
{
	uint8_t *blob = ft_eldr_blob(4, 16, 2, 0, len);
	int fd = memfd_create("fz-table", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (!blob || fd < 0 || write(fd, blob, *len) != (ssize_t)*len)
		abort();
	if (at < *len && pwrite(fd, &val, 1, at) != 1)
		abort();
	if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		abort();
	free(blob);
	return fd;
}

static int connect_sock(const char *suffix)
{
	char path[108];

	if (locus_shm_run_path("fzn", suffix, path, sizeof(path)))
		abort();
	return fz_connect(path);
}

/* A request; one refused early may find its connection closed already. */
static void send_req(int sock, const void *bytes, size_t len, const int *fds, int nfd)
{
	(void)fz_send(sock, bytes, len, fds, nfd);
}

/* One control pass and one engine pass, bounded in time. */
static void pass(struct locus_node *n)
{
	uint64_t t0 = now_ns();

	locus_node_control(n);
	locus_engine_poll(locus_node_engine(n));
	FUZZ_CHECK(now_ns() - t0 < PASS_BOUND, "a control pass took %llu ms",
		   (unsigned long long)((now_ns() - t0) / 1000000));
}

/* Receive one message (and its fds) without waiting: its length, 0 none, -1 closed. */
static ssize_t take(int sock, void *buf, size_t cap, int *fds, int *nfd)
{
	struct locus_seqpkt_fds in;
	ssize_t r = locus_seqpkt_recv(sock, buf, cap, MSG_DONTWAIT, LOCUS_SEQPKT_MAX_FDS, &in);

	*nfd = in.n;
	memcpy(fds, in.fd, sizeof(int) * (size_t)in.n);
	if (r < 0)
		return errno == EAGAIN ? 0 : -1;
	return r == 0 ? -1 : r;
}

/* The table generation channel ch's reader (the engine) runs on. */
static uint64_t in_use(struct locus_node *n, unsigned ch)
{
	struct locus_counters *c = locus_node_counters(n);
	uint64_t w[LOCUS_TABLE_MAX_CHANNELS] = { 0 };
	int idx;

	locus_counters_refresh(c, NULL);
	idx = locus_counters_find(c, "table_generation");
	if (idx < 0 || locus_counters_sum(c, (uint32_t)idx, w, LOCUS_ARRAY_SIZE(w)) <= (int)ch)
		abort();
	return w[ch];
}

/* A control-socket request: its one answer checked against what was published. */
static void ctl_request(struct locus_node *n, const uint8_t *req, size_t len, const int *fds,
			int nfd)
{
	struct locus_push_req q = { 0 };
	struct locus_push_rep rep;
	uint64_t gen0[2] = { in_use(n, 0), in_use(n, 1) };
	int sock = connect_sock(LOCUS_PUSH_SOCK_SUFFIX), got = 0, rfd[8], rn;
	ssize_t r = 0;

	memcpy(&q, req, LOCUS_MIN(len, sizeof(q)));
	send_req(sock, req, len, fds, nfd);
	for (int p = 0; p < PASSES && !got; p++) {
		pass(n);
		while ((r = take(sock, &rep, sizeof(rep), rfd, &rn)) > 0) {
			for (int i = 0; i < rn; i++)
				close(rfd[i]);
			FUZZ_CHECK(rn == 0, "a push answer carried %d fds", rn);
			FUZZ_CHECK(r == sizeof(rep), "a push answer of %zd bytes", r);
			FUZZ_CHECK(rep.magic == LOCUS_PUSH_MAGIC && rep.version == LOCUS_PUSH_VERSION,
				   "push answer magic/version");
			FUZZ_CHECK(memchr(rep.msg, 0, sizeof(rep.msg)) &&
				   memchr(rep.refused_msg, 0, sizeof(rep.refused_msg)),
				   "an answer's message is no C string");
			FUZZ_CHECK(rep.status <= 0 && (rep.status == 0 || rep.msg[0]),
				   "a refusal (%d) without a sentence", rep.status);
			got++;
		}
		if (r < 0)
			break;
	}
	FUZZ_CHECK(got <= 1, "%d answers to one push request", got);
	if (got && rep.status == 0 && q.op == LOCUS_PUSH_TABLE && q.channel < 2) {
		uint64_t now = in_use(n, q.channel);
		int adopted = rep.n_adopted == rep.n_live && !rep.n_refused && !rep.timed_out;

		FUZZ_CHECK(rep.n_adopted + rep.n_refused <= rep.n_live, "readers' verdict");
		FUZZ_CHECK(rep.generation > gen0[q.channel] &&
			   now == (adopted ? rep.generation : gen0[q.channel]),
			   "push of generation %llu (%s), %llu was in use, %llu now",
			   (unsigned long long)rep.generation, adopted ? "adopted" : "refused",
			   (unsigned long long)gen0[q.channel], (unsigned long long)now);
		FUZZ_CHECK(!rep.n_refused || rep.refused_msg[0], "a reader refused without a reason");
	} else {
		for (unsigned ch = 0; ch < 2; ch++)
			FUZZ_CHECK(in_use(n, ch) == gen0[ch], "channel %u went from %llu to %llu "
				   "without an accepted push", ch, (unsigned long long)gen0[ch],
				   (unsigned long long)in_use(n, ch));
	}
	close(sock);
}

/* A registration-socket request; a granted slot is checked and confirmed if asked. */
static void reg_request(struct locus_node *n, const uint8_t *req, size_t len, const int *fds,
			int nfd, int confirm)
{
	struct locus_reg_rep rep;
	int sock = connect_sock(LOCUS_REG_SOCK_SUFFIX), got = 0, rfd[8], rn;
	ssize_t r = 0;

	send_req(sock, req, len, fds, nfd);
	for (int p = 0; p < PASSES && !got; p++) {
		pass(n);
		while ((r = take(sock, &rep, sizeof(rep), rfd, &rn)) > 0) {
			struct stat st;

			FUZZ_CHECK(r == sizeof(rep), "a registration answer of %zd bytes", r);
			FUZZ_CHECK(rep.magic == LOCUS_REG_MAGIC && rep.version == LOCUS_REG_VERSION,
				   "registration answer magic/version");
			FUZZ_CHECK(memchr(rep.msg, 0, sizeof(rep.msg)), "answer msg no C string");
			FUZZ_CHECK(rep.status <= 0 && (rep.status == 0 || rep.msg[0]),
				   "a refusal (%d) without a sentence", rep.status);
			if (rep.status == 0 && rn) {
				FUZZ_CHECK(rn == 1 && fstat(rfd[0], &st) == 0 && S_ISREG(st.st_mode) &&
					   (uint64_t)st.st_size == rep.slot_size,
					   "a grant with %d fds, not its slot's memfd", rn);
				if (confirm) {
					struct locus_reg_req c = {
						.magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION,
						.op = LOCUS_REG_ATTACHED, .slot = rep.slot,
						.generation = rep.generation,
					};

					send_req(sock, &c, sizeof(c), NULL, 0);
					for (int k = 0; k < 4; k++)
						pass(n);
				}
			}
			for (int i = 0; i < rn; i++)
				close(rfd[i]);
			got++;
		}
		if (r < 0)
			break;
	}
	FUZZ_CHECK(got <= 1, "%d answers to one registration request", got);
	close(sock);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct locus_error err = { 0 };
	struct locus_config cfg;
	struct locus_node *n;
	int fds_before;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/locus-fuzz-node-XXXXXX");
		if (!mkdtemp(dir))
			abort();
		setenv(LOCUS_SHM_DIR_ENV, dir, 1);
		atexit(cleanup);
	}
	fds_before = fz_open_fds();
	if (locus_config_parse(conf, strlen(conf), "fuzz.conf", &cfg, &err) ||
	    locus_node_create(&cfg, now_ns, 1000000000ull, &n, &err)) {
		fprintf(stderr, "node: %s\n", err.msg);
		abort();
	}
	locus_node_set_running(n);
	for (int i = 0; i < MAX_REQS && in.n; i++) {
		uint8_t f = fin_u8(&in), len = fin_u8(&in) % 65, req[64];
		uint16_t at;
		uint8_t val;
		int fds[3], nfd = (f >> 1) & 3;
		size_t tlen = 0;

		fin_copy(&in, req, len);
		at = fin_u16(&in);
		val = fin_u8(&in);
		for (int k = 0; k < nfd; k++)
			fds[k] = (k == 0 && (f & 1) && (f & 0x40))
					 ? table_fd(!(val & 1), at, val, &tlen)
					 : fz_kind_fd((unsigned)(f >> 3) + (unsigned)k);
		if (f & 0x20) {
			uint32_t magic = (f & 1) ? LOCUS_PUSH_MAGIC : LOCUS_REG_MAGIC;
			uint32_t version = (f & 1) ? LOCUS_PUSH_VERSION : LOCUS_REG_VERSION;

			if (len < 32)
				len = (f & 1) ? 32 : 48;
			memcpy(req, &magic, 4);
			memcpy(req + 4, &version, 4);
			if ((f & 1) && tlen && !req[16])
				memcpy(req + 16, &(uint64_t){ tlen }, 8);
		}
		if (f & 1)
			ctl_request(n, req, len, fds, nfd);
		else
			reg_request(n, req, len, fds, nfd, f >> 7);
		for (int k = 0; k < nfd; k++)
			close(fds[k]);
	}
	for (int k = 0; k < 4; k++)
		pass(n);
	locus_node_destroy(n, 1);
	FUZZ_CHECK(fz_open_fds() == fds_before, "%d descriptors left open", fz_open_fds() - fds_before);
	return 0;
}
