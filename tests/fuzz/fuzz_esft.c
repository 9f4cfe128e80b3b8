// SPDX-License-Identifier: MIT
/*
 * ESFT expert_scores files through locus_trace_load_esft (what esft2jsonl
 * and the fit tools read). Input: L (1..3), k (1..4) and E (1..64) from
 * three bytes, then the layer files: each but the last after a 16-bit
 * length, the last takes the rest; they are written as
 * expert_weights_<l>.txt in a private directory. Contract: an accepted
 * import has the shape asked for, every request named "<domain>-<i>" with
 * the domain's label and no decode tokens, the shape rules of
 * locus_trace.h, and it round-trips through the JSONL writer. With
 * LOCUS_TRACE_ESFT_GATE_ORDER, an accepted import is the same import with
 * each token's ids permuted (by gate weight), and it is refused only where
 * the plain import is refused too or the weights do not parse.
 */
#include <fcntl.h>
#include <unistd.h>

#include "fuzz.h"
#include "fuzz_trace_common.h"

static char dir[64], path[128];

static void cleanup(void)
{
	for (int l = 1; l <= 3; l++) {
		snprintf(path, sizeof(path), "%s/expert_weights_%d.txt", dir, l);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/t.jsonl", dir);
	unlink(path);
	rmdir(dir);
}

static void put_file(int l, const uint8_t *p, size_t n)
{
	int fd;

	snprintf(path, sizeof(path), "%s/expert_weights_%d.txt", dir, l);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || (n && write(fd, p, n) != (ssize_t)n))
		abort();
	close(fd);
}

/* b is a with every token's k ids in some other order. */
static void check_permuted(const struct locus_trace *a, const struct locus_trace *b)
{
	FUZZ_CHECK(a->n_requests == b->n_requests, "gate order: %u requests, plain %u",
		   b->n_requests, a->n_requests);
	for (uint32_t r = 0; r < a->n_requests; r++) {
		FUZZ_CHECK(a->reqs[r].prompt_len == b->reqs[r].prompt_len, "request %u length", r);
		for (uint32_t t = 0; t < a->reqs[r].prompt_len; t++)
			for (uint32_t l = 0; l < a->n_layers; l++) {
				const uint16_t *x = locus_trace_tok(a, a->reqs[r].prompt, t, l);
				const uint16_t *y = locus_trace_tok(b, b->reqs[r].prompt, t, l);

				for (uint32_t j = 0; j < a->k; j++) {
					uint32_t nx = 0, ny = 0;

					for (uint32_t q = 0; q < a->k; q++) {
						nx += x[q] == x[j];
						ny += y[q] == x[j];
					}
					FUZZ_CHECK(nx == ny, "request %u token %u layer %u: gate "
						   "order is not a permutation", r, t, l);
				}
			}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	uint16_t L = 1 + fin_u8(&in) % 3, k = 1 + fin_u8(&in) % 4, E = 1 + fin_u8(&in) % 64;
	struct locus_trace *t = NULL, *t2 = NULL;
	struct locus_error err = { 0 }, gerr = { 0 };
	int ret;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/dev/shm/locus-fuzz-esft-XXXXXX");
		if (!mkdtemp(dir))
			abort();
		atexit(cleanup);
	}
	for (int l = 1; l <= L; l++) {
		size_t n = l < L ? fin_u16(&in) : in.n;

		n = n < in.n ? n : in.n;
		put_file(l, in.p, n);
		in.p += n;
		in.n -= n;
	}
	ret = locus_trace_load_esft_flags(dir, "law", L, k, E, LOCUS_TRACE_ESFT_GATE_ORDER, &t2,
					  &gerr);
	if (ret < 0)
		FUZZ_CHECK(gerr.msg[0], "gate-order refusal %d without a message", ret);
	ret = locus_trace_load_esft(dir, "law", L, k, E, &t, &err);
	FUZZ_CHECK(!t2 || ret == 0, "the gate-order import took what the plain one refuses");
	FUZZ_CHECK(t2 || ret < 0 || strstr(gerr.msg, "gate weight"),
		   "the gate-order import refused an input the plain one takes: %s", gerr.msg);
	if (t2)
		check_permuted(t, t2);
	locus_trace_free(t2);
	t2 = NULL;
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal %d without a message", ret);
		goto out;
	}
	FUZZ_CHECK(ret == 0 && t, "import returned %d", ret);
	ftc_check_shape(t);
	FUZZ_CHECK(t->n_layers == L && t->k == k && t->n_experts == E,
		   "shape %u/%u/%u, asked %u/%u/%u", t->n_layers, t->k, t->n_experts, L, k, E);
	for (uint32_t i = 0; i < t->n_requests; i++) {
		char id[LOCUS_TRACE_ID_MAX];

		snprintf(id, sizeof(id), "law-%u", i);
		FUZZ_CHECK(!strcmp(t->reqs[i].id, id) &&
			   !strcmp(t->domains[t->reqs[i].domain], "law") && t->reqs[i].gen_len == 0,
			   "request %u is %s in domain %u", i, t->reqs[i].id, t->reqs[i].domain);
	}
	snprintf(path, sizeof(path), "%s/t.jsonl", dir);
	FUZZ_CHECK(locus_trace_write(t, path, &err) == 0, "write: %s", err.msg);
	FUZZ_CHECK(locus_trace_load(path, NULL, &t2, &err) == 0, "reload: %s", err.msg);
	FUZZ_CHECK(ftc_same(t, t2), "the import written as JSONL loads differently");
out:
	locus_trace_free(t);
	locus_trace_free(t2);
	return 0;
}
