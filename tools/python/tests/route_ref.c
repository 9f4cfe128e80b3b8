// SPDX-License-Identifier: MIT
/*
 * The C router's decisions for the Python tests to compare with: the pure
 * ELDR router (dataplane/locus_eldr_router.h, the code locusd routes with)
 * built from a table file, every decoder of the table up with the loads
 * given, then the trace's prompts routed in order, their signatures built
 * by the C trace reader and locus_eldr_sig_build, not by the Python package.
 *
 *   route_ref TABLE TRACE LOADS MODE SIGS
 *
 * LOADS: "id=load,..." for the table's decoder ids. MODE 0: no constraint;
 * 1: request i allows decoders ids[i % K] and ids[(i + 1) % K] only.
 * Prints one line per request, "i decoder band similarity-bits(hex)", and
 * writes every signature (header included) to SIGS, one after another.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_eldr_router.h"
#include "locus_tblfile.h"
#include "locus_trace.h"

static int die(const char *what, const struct locus_error *e)
{
	fprintf(stderr, "route_ref: %s: %s\n", what, e ? e->msg : "");
	return 1;
}

int main(int argc, char **argv)
{
	struct locus_eldr_tbl_view view;
	struct locus_eldr_router *r;
	struct locus_trace *tr;
	struct locus_error e = { 0 };
	const void *payload;
	size_t len, plen, mem_len, sig_len;
	void *blob, *mem;
	uint8_t *sig;
	FILE *out;
	int mode;

	if (argc != 6)
		return fprintf(stderr, "usage: route_ref TABLE TRACE LOADS MODE SIGS\n"), 2;
	mode = atoi(argv[4]);
	if (locus_tbl_read_file(argv[1], LOCUS_TBL_ELDR, &blob, &len, &e) < 0 ||
	    locus_tbl_check(blob, len, LOCUS_TBL_ELDR, &payload, &plen, &e) < 0 ||
	    locus_eldr_tbl_validate(payload, plen, &view, &e) < 0)
		return die(argv[1], &e);
	mem_len = locus_eldr_router_mem_size(payload, plen);
	mem = aligned_alloc(64, (mem_len + 63) / 64 * 64);
	if (!mem || locus_eldr_router_build(mem, mem_len, payload, plen, LOCUS_ELDR_PATH_AUTO, &r,
					    &e) < 0)
		return die("router", &e);
	for (char *tok = strtok(argv[3], ","); tok; tok = strtok(NULL, ",")) {
		unsigned id, load;
		int slot;

		if (sscanf(tok, "%u=%u", &id, &load) != 2 ||
		    (slot = locus_eldr_router_slot(r, id)) < 0)
			return die("LOADS: not id=load of a decoder of the table", NULL);
		locus_eldr_router_set_up(r, (uint32_t)slot, 1);
		locus_eldr_router_set_load(r, (uint32_t)slot, load);
	}
	if (locus_trace_load(argv[2], NULL, &tr, &e) < 0)
		return die(argv[2], &e);
	sig_len = locus_eldr_sig_len(tr->n_layers, tr->n_experts);
	sig = malloc(sig_len);
	out = fopen(argv[5], "wb");
	if (!sig || !out)
		return die(argv[5], NULL);
	for (uint32_t i = 0; i < tr->n_requests; i++) {
		const struct locus_trace_req *q = &tr->reqs[i];
		uint32_t k = view.hdr->n_decoders;
		uint64_t allowed = 0;
		struct locus_eldr_decision d;
		uint32_t bits;
		int ret;

		if (mode == 1)
			allowed = 1ull << view.decoder_ids[i % k] |
				  1ull << view.decoder_ids[(i + 1) % k];
		if (locus_eldr_sig_build(sig, sig_len, tr->n_layers, tr->n_experts, tr->k, q->prompt,
					 q->prompt_len, allowed, &e) != (long)sig_len)
			return die("signature", &e);
		fwrite(sig, 1, sig_len, out);
		ret = locus_eldr_route(r, sig, sig_len, &d);
		if (ret < 0)
			return die("route", NULL);
		memcpy(&bits, &d.similarity, 4);
		printf("%u %u %u %08x\n", i, d.decoder_id, d.n_candidates, bits);
	}
	fclose(out);
	free(sig);
	locus_trace_free(tr);
	free(mem);
	free(blob);
	return 0;
}
