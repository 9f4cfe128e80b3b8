// SPDX-License-Identifier: MIT
/* locus-loadgen's command line: options into O, checked. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"
#include "locus_blocks.h"
#include "locus_shm.h"

void lg_usage(void)
{
	fprintf(stderr,
		"usage: locus-loadgen --trace FILE [-i INSTANCE] [--decoders N] [--ranks N]\n"
		"         [--prefills N] [--requests N] [--batches N] [--tokens N]\n"
		"         [--row-bytes N] [--decode-us N] [--seconds N] [--midway-cmd CMD]\n"
		"         [--eldr-table TABLE]   (adds in-process baselines to the figures)\n"
		"         [--prefill-at NAME] [--decoder-at N0,N1,..] [--rank-at N0,N1,..]\n"
		"                                (instance of each prefill, decoder id, rank;\n"
		"                                 default -i; a rank attaches to its node's)\n"
		"         [--allow-errors [--batch-ms N]]  (a peer may die: errors are counted\n"
		"                                 by code; lost, duplicate, corrupt still fail)\n"
		"         [--dmabuf]             (ranks dispatch their rows from a dma-buf they\n"
		"                                 register with locusd: udmabuf, else vgem)\n"
		"         [--host-region]        (the same from host memory: a memfd sealed\n"
		"                                 against shrinking, which any RDMA device takes)\n"
		"         [--kill-rank R:dispatch:B | R:combine:N [--respawn]]\n"
		"                                (with --allow-errors: rank R's process dies by\n"
		"                                 SIGKILL right after submitting the DISPATCH of\n"
		"                                 batch B / its N-th COMBINE; --respawn: a new\n"
		"                                 process attaches as R and goes on)\n"
		"         [--mask]               (dispatch with masking: an expert with no live\n"
		"                                copy is masked, a batch ends without a lost rank)\n"
		"         [--placements]         (ranks take part in placement changes: each\n"
		"                                 acknowledges a staged generation at once and\n"
		"                                 releases older ones as free_below passes them;\n"
		"                                 a row of a generation it does not hold fails)\n"
		"         [--weights BYTES]      (with --placements: each rank holds BYTES of\n"
		"                                 weights per expert in a registered region and\n"
		"                                 moves them through locusd, nearest holder\n"
		"                                 first, before it acknowledges; every gained\n"
		"                                 expert and every row's expert is checked)\n"
		"         [--linger-ms N]        (at the end, stay attached and idle N ms)\n"
		"         [--attach-timeout-ms N] (each attach's bound, default 5000)\n"
		"         [--prefix-blocks N [--block-tokens B]]  (prefix-cached prompts: each\n"
		"                                 request is its domain's head of N blocks of B\n"
		"                                 tokens (16) + its own prompt, routed with\n"
		"                                 ROUTE_BLOCKS naming the head as cached; the\n"
		"                                 decoders check the whole prompt's signature)\n");
}

/* Split a comma list of instance names into out[]; returns the count or -1. */
static int parse_at(char *list, const char **out, uint32_t max)
{
	uint32_t n = 0;
	char *save, *tok;

	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == max || locus_shm_check_name(tok) < 0) {
			fprintf(stderr, "locus-loadgen: bad instance list entry '%s'\n", tok);
			return -1;
		}
		out[n++] = tok;
	}
	return (int)n;
}

/* --kill-rank R:dispatch:B or R:combine:N */
static int parse_kill(const char *arg)
{
	char what[16];
	unsigned r, n;
	int end = 0;

	if (sscanf(arg, "%u:%15[a-z]:%u%n", &r, what, &n, &end) != 3 || arg[end] ||
	    (strcmp(what, "dispatch") && strcmp(what, "combine")) ||
	    (!strcmp(what, "combine") && n == 0)) {
		fprintf(stderr, "locus-loadgen: --kill-rank wants R:dispatch:BATCH or "
				"R:combine:N (N >= 1), not '%s'\n", arg);
		return -1;
	}
	O.kill_rank = (int)r;
	O.kill_combine = what[0] == 'c';
	O.kill_n = n;
	return 0;
}

int lg_parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "instance", required_argument, NULL, 'i' },
		{ "trace", required_argument, NULL, 't' },
		{ "decoders", required_argument, NULL, 'd' },
		{ "ranks", required_argument, NULL, 'r' },
		{ "prefills", required_argument, NULL, 'p' },
		{ "requests", required_argument, NULL, 'n' },
		{ "batches", required_argument, NULL, 'b' },
		{ "tokens", required_argument, NULL, 'T' },
		{ "row-bytes", required_argument, NULL, 'R' },
		{ "decode-us", required_argument, NULL, 'D' },
		{ "seconds", required_argument, NULL, 's' },
		{ "midway-cmd", required_argument, NULL, 'm' },
		{ "eldr-table", required_argument, NULL, 'e' },
		{ "prefill-at", required_argument, NULL, 'P' },
		{ "decoder-at", required_argument, NULL, 'A' },
		{ "rank-at", required_argument, NULL, 'K' },
		{ "allow-errors", no_argument, NULL, 'E' },
		{ "batch-ms", required_argument, NULL, 'B' },
		{ "dmabuf", no_argument, NULL, 'G' },
		{ "host-region", no_argument, NULL, 'M' },
		{ "kill-rank", required_argument, NULL, 'X' },
		{ "respawn", no_argument, NULL, 'W' },
		{ "linger-ms", required_argument, NULL, 'L' },
		{ "placements", no_argument, NULL, 'Z' },
		{ "mask", no_argument, NULL, 'k' },
		{ "weights", required_argument, NULL, 'w' },
		{ "attach-timeout-ms", required_argument, NULL, 'U' },
		{ "prefix-blocks", required_argument, NULL, 'H' },
		{ "block-tokens", required_argument, NULL, 'Q' },
		{ NULL, 0, NULL, 0 },
	};
	int c, n;

	while ((c = getopt_long(argc, argv, "i:", opts, NULL)) != -1) {
		unsigned long v = optarg ? strtoul(optarg, NULL, 10) : 0;

		switch (c) {
		case 'i': O.instance = optarg; break;
		case 't': O.trace = optarg; break;
		case 'd': O.decoders = (uint32_t)v; break;
		case 'r': O.ranks = (uint32_t)v; break;
		case 'p': O.prefills = (uint32_t)v; break;
		case 'n': O.requests = (uint32_t)v; break;
		case 'b': O.batches = (uint32_t)v; break;
		case 'T': O.tokens = (uint32_t)v; break;
		case 'R': O.row_bytes = (uint32_t)v; break;
		case 'D': O.decode_us = (uint32_t)v; break;
		case 's': O.seconds = (uint32_t)v; break;
		case 'm': O.midway_cmd = optarg; break;
		case 'e': O.eldr_table = optarg; break;
		case 'P': O.prefill_at = optarg; break;
		case 'A':
			n = parse_at(optarg, O.decoder_at, MAX_PROCS);
			if (n <= 0)
				return -1;
			O.n_decoder_at = (uint32_t)n;
			break;
		case 'K':
			n = parse_at(optarg, O.rank_at, MAX_PROCS);
			if (n <= 0)
				return -1;
			O.n_rank_at = (uint32_t)n;
			break;
		case 'E': O.allow_errors = 1; break;
		case 'B': O.batch_ms = (uint32_t)v; break;
		case 'G': O.dmabuf = 1; break;
		case 'M': O.dmabuf = 1; O.host_region = 1; break;
		case 'X':
			if (parse_kill(optarg) < 0)
				return -1;
			break;
		case 'W': O.respawn = 1; break;
		case 'Z': O.placements = 1; break;
		case 'k': O.mask = 1; break;
		case 'w':
			O.weights = strtoull(optarg, NULL, 10);
			if (!O.weights || O.weights > (64ull << 20))
				return -1;
			break;
		case 'L': O.linger_ms = (uint32_t)v; break;
		case 'U':
			if (!v || v > 600000)
				return -1;
			O.attach_timeout_ms = (uint32_t)v;
			break;
		case 'H': O.prefix_blocks = (uint32_t)v; break;
		case 'Q': O.block_tokens = (uint32_t)v; break;
		default: return -1;
		}
	}
	if ((O.n_decoder_at && O.n_decoder_at != O.decoders) ||
	    (O.n_rank_at && O.n_rank_at != O.ranks)) {
		fprintf(stderr, "locus-loadgen: --decoder-at / --rank-at need one instance per "
				"decoder / rank (%u / %u)\n", O.decoders, O.ranks);
		return -1;
	}
	if (O.prefill_at && locus_shm_check_name(O.prefill_at) < 0)
		return -1;
	if ((O.kill_rank >= 0 && ((uint32_t)O.kill_rank >= O.ranks || !O.allow_errors)) ||
	    (O.respawn && O.kill_rank < 0)) {
		fprintf(stderr, "locus-loadgen: --kill-rank needs a rank below --ranks and "
				"--allow-errors; --respawn needs --kill-rank\n");
		return -1;
	}
	if (!O.batch_ms || (O.weights && !O.placements))
		return -1;
	if (O.block_tokens == 0 || O.block_tokens > LOCUS_BLOCKS_MAX_BLOCK_TOKENS ||
	    O.prefix_blocks > LOCUS_BLOCKS_MAX_CACHED) {
		fprintf(stderr, "locus-loadgen: --block-tokens 1..%u, --prefix-blocks 0..%u\n",
			LOCUS_BLOCKS_MAX_BLOCK_TOKENS, LOCUS_BLOCKS_MAX_CACHED);
		return -1;
	}
	if (!O.trace || optind != argc || O.decoders + O.ranks + O.prefills > MAX_PROCS ||
	    O.prefills == 0 || O.tokens == 0 || O.tokens > 4096 || O.row_bytes == 0 ||
	    O.row_bytes > 65536 || (uint64_t)O.tokens * O.row_bytes > 256 * 1024 || !O.seconds)
		return -1;
	return 0;
}
