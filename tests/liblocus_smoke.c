// SPDX-License-Identifier: MIT
/*
 * A client built the way a user builds one: against the installed
 * liblocus.so through pkg-config (tests/test_liblocus.sh compiles it from a
 * DESTDIR staging tree), with the public headers only.
 *
 *   liblocus_smoke INSTANCE L E K
 *
 * Against a running locusd whose ELDR table is L x E and names decoder 0:
 * one attachment as prefiller and decoder 0, a load report, a ROUTE of a
 * synthetic prompt (its completion names decoder 0), the SIGNATURE_IN
 * byte for byte against the signature built here, the counters read back
 * (route_requests, table_layers/table_experts), a refused attach (rank out
 * of the cluster) with its code. Prints one line per check; exit 0 when
 * all held.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <locus.h>

#define TOKENS 40

static int fail(const char *what, int code, const struct locus_error *e)
{
	fprintf(stderr, "liblocus_smoke: %s: %s (%s)\n", what, locus_strerror(code),
		e ? e->msg : "");
	return 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Poll until a descriptor with op arrives (2 s at most); the other
 * descriptors of the same poll go to *other (the last one kept).
 */
static int wait_op(struct locus_client *c, uint8_t op, struct locus_desc *out,
		   struct locus_desc *other)
{
	double end = now_s() + 2.0;
	int found = 0;

	while (!found && now_s() < end) {
		struct locus_desc d[8];
		int n = locus_client_poll(c, d, 8);

		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			if (d[i].op == op && !found) {
				*out = d[i];
				found = 1;
			} else if (other) {
				*other = d[i];
			}
		}
		if (!n)
			nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
	}
	return found ? 0 : -ETIMEDOUT;
}

/* Sum of counter name's element elem, or -1. */
static long long counter(struct locus_counters *ctr, const char *name, uint32_t elem)
{
	int idx = locus_counters_find(ctr, name);
	const struct locus_ctr_info *in;
	uint64_t w[64];

	if (idx < 0 || !(in = locus_counters_info(ctr, (uint32_t)idx)) || elem >= in->n_elems ||
	    in->n_elems * in->elem_words > 64 || locus_counters_sum(ctr, (uint32_t)idx, w, 64) < 0)
		return -1;
	return (long long)w[elem * in->elem_words];
}

int main(int argc, char **argv)
{
	struct locus_client_req req = { .roles = LOCUS_ROLE_PREFILL | LOCUS_ROLE_DECODE };
	struct locus_client_signature sig;
	struct locus_client_route_req rr;
	struct locus_counters *ctr = NULL;
	struct locus_shm *shm = NULL;
	struct locus_client *c = NULL, *bad = NULL;
	struct locus_desc done, in;
	struct locus_error e;
	uint16_t *ids, L, E, K;
	uint8_t *want;
	size_t len, region_size;
	long sig_len;
	void *region;
	int ret;

	if (argc != 5)
		return fprintf(stderr, "usage: liblocus_smoke INSTANCE L E K\n"), 2;
	L = (uint16_t)atoi(argv[2]);
	E = (uint16_t)atoi(argv[3]);
	K = (uint16_t)atoi(argv[4]);
	len = (size_t)TOKENS * L * K;
	ids = malloc(len * sizeof(*ids));
	want = malloc(locus_eldr_sig_len(L, E));
	if (!ids || !want || !L || !E || !K || K > E)
		return fail("arguments", EINVAL, NULL);
	for (size_t i = 0; i < len; i++) /* distinct within a token's top-k */
		ids[i] = (uint16_t)((i / K * 7 + i % K) % E);

	ret = locus_client_attach(argv[1], &req, &c, &e);
	if (ret < 0)
		return fail("attach", ret, &e);
	printf("attached: slot %u generation %llu\n", locus_client_slot(c),
	       (unsigned long long)locus_client_generation(c));
	locus_client_report_load(c, 0);

	rr = (struct locus_client_route_req){ .n_layers = L, .n_experts = E, .k = K,
					      .n_tokens = TOKENS, .ids = ids };
	/* the load report reaches the router within its housekeeping period */
	for (int tries = 0;; tries++) {
		ret = locus_client_route(c, 0, &rr, 77, &e);
		if (ret < 0)
			return fail("route", ret, &e);
		in.op = 0;
		ret = wait_op(c, LOCUS_OP_ROUTE, &done, &in);
		if (ret < 0)
			return fail("route completion", ret, NULL);
		if (done.status != -LOCUS_ENODEST || tries == 100)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
	}
	if (done.status != 0 || done.id != 77 || done.peer != 0)
		return fail("route decision", done.status ? done.status : LOCUS_ERANGE, NULL);
	printf("routed: decoder %u, band %u\n", done.peer, done.count);

	ret = in.op == LOCUS_OP_SIGNATURE_IN ? 0 : wait_op(c, LOCUS_OP_SIGNATURE_IN, &in, NULL);
	if (ret < 0)
		return fail("SIGNATURE_IN", ret, NULL);
	ret = locus_client_signature_in(c, &in, &sig, &e);
	if (ret < 0)
		return fail("signature_in", ret, &e);
	sig_len = locus_eldr_sig_build(want, locus_eldr_sig_len(L, E), L, E, K, ids, TOKENS, 0,
				       &e);
	if (sig_len < 0 || sig.id != 77 || sig.sig_len != (size_t)sig_len ||
	    sig.prompt_tokens != TOKENS || memcmp(sig.sig, want, (size_t)sig_len))
		return fail("delivered signature", LOCUS_EPROTO, NULL);
	printf("delivered: %zu signature bytes equal, %u prompt tokens\n", sig.sig_len,
	       sig.prompt_tokens);
	locus_client_release_slot(c, sig.slot);

	ret = locus_shm_attach(argv[1], LOCUS_SHM_RDONLY | LOCUS_SHM_ALLOW_GROUP, &shm, &e);
	if (ret < 0)
		return fail("segment", ret, &e);
	region = locus_shm_region(shm, LOCUS_REGION_COUNTERS, &region_size);
	ret = locus_counters_open(region, region_size, LOCUS_CTR_RDONLY, &ctr, &e);
	if (ret < 0)
		return fail("counters", ret, &e);
	if (counter(ctr, "route_requests", 0) < 1 || counter(ctr, "table_layers", 0) != L ||
	    counter(ctr, "table_experts", 0) != E)
		return fail("counters read back", LOCUS_ERANGE, NULL);
	printf("counters: route_requests %lld, ELDR table %lld x %lld\n",
	       counter(ctr, "route_requests", 0), counter(ctr, "table_layers", 0),
	       counter(ctr, "table_experts", 0));

	req = (struct locus_client_req){ .roles = LOCUS_ROLE_RANK, .rank = 4095 };
	ret = locus_client_attach(argv[1], &req, &bad, &e);
	if (ret != -LOCUS_ERANGE)
		return fail("attach of rank 4095 was not refused with LOCUS_ERANGE", ret, &e);
	printf("refused: %s: %s\n", locus_strerror(ret), e.msg);

	locus_counters_close(ctr);
	locus_shm_detach(shm);
	locus_client_detach(c);
	free(ids);
	free(want);
	printf("liblocus_smoke: ok\n");
	return 0;
}
