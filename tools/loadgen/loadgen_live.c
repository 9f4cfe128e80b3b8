// SPDX-License-Identifier: MIT
/*
 * Whether a client's engine sees a run's ranks reachable: the check the
 * loadgen's ranks and the two-node benchmark make before their first batch
 * (a peer learns of a rank client attached just now from its next load row).
 */
#include "loadgen.h"

int lg_ranks_live(struct locus_client *c, uint32_t n)
{
	uint64_t lost[LOCUS_CLIENT_RANK_WORDS];
	struct locus_client_ranks info;
	int all = locus_client_ranks(c, lost, LOCUS_CLIENT_RANK_WORDS, &info) == 0 &&
		  info.n_ranks >= n;

	for (uint32_t r = 0; all && r < n; r++)
		all = !(lost[r / 64] >> (r % 64) & 1);
	return all;
}
