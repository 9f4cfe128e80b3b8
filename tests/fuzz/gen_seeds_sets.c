// SPDX-License-Identifier: MIT
/*
 * Seeds of GRACE placement sets (fuzz target graceset, and sealed for
 * tblfile): sets of several shapes built the way `locusctl fit
 * --ep-ranks-per-decoder` builds them (a group-local placement lifted onto
 * the group's ranks), and one with a missing group.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_tables.h"
#include "gen_seeds.h"
#include "locus_grace_epgroups.h"
#include "locus_graceset.h"
#include "locus_graceset_priv.h"
#include "locus_tblfile.h"

struct shape {
	uint32_t L, E, nodes, gpn, n_groups;
	uint32_t first[4], n[4], R[4];
};

static void one_set(const struct shape *sh, unsigned idx, int drop_last)
{
	struct locus_graceset_part parts[4];
	static struct bs s;
	char name[64];
	size_t blen;
	void *set = NULL;
	uint32_t n = sh->n_groups - (uint32_t)!!drop_last;

	for (uint32_t g = 0; g < sh->n_groups; g++) {
		uint32_t ln = sh->n[g] > sh->gpn ? sh->n[g] / sh->gpn : 1;
		uint32_t lg = sh->n[g] > sh->gpn ? sh->gpn : sh->n[g];
		size_t len;
		void *p = ft_grace_payload(sh->L, sh->E, ln, lg, sh->R[g], &len);

		parts[g] = (struct locus_graceset_part){ .group_id = g, .decoder_id = g,
							 .first_rank = sh->first[g],
							 .n_ranks = sh->n[g] };
		if (!p || locus_epgroups_lift(p, len, sh->first[g], sh->nodes, sh->gpn,
					      (void **)&parts[g].blob, &parts[g].blob_len, NULL)) {
			fprintf(stderr, "gen_seeds: group %u of a set does not lift\n", g);
			exit(1);
		}
		free(p);
	}
	if (locus_graceset_build_unchecked(parts, n, &set, &blen, NULL)) {
		fprintf(stderr, "gen_seeds: a set does not build\n");
		exit(1);
	}
	snprintf(name, sizeof(name), "set%u-%ux%u-%ux%u-%ug%s", idx, sh->L, sh->E, sh->nodes,
		 sh->gpn, sh->n_groups, drop_last ? "-missing" : "");
	put("graceset", name, (uint8_t *)set + sizeof(struct locus_tbl_hdr),
	    blen - sizeof(struct locus_tbl_hdr));
	s.n = 0;
	b8(&s, 0);
	bmem(&s, set, blen);
	put("tblfile", name, s.b, s.n);
	for (uint32_t g = 0; g < sh->n_groups; g++)
		free((void *)parts[g].blob);
	free(set);
}

void grace_sets(void)
{
	static const struct shape shapes[] = {
		{ 2, 8, 1, 4, 2, { 0, 2 }, { 2, 2 }, { 1, 1 } },
		{ 2, 8, 1, 4, 2, { 0, 1 }, { 1, 3 }, { 0, 2 } },
		{ 1, 4, 2, 2, 2, { 0, 2 }, { 2, 2 }, { 1, 0 } },
		{ 2, 8, 2, 4, 4, { 0, 2, 4, 6 }, { 2, 2, 2, 2 }, { 1, 0, 1, 0 } },
		{ 2, 8, 4, 2, 2, { 0, 4 }, { 4, 4 }, { 3, 1 } },
	};

	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		one_set(&shapes[i], (unsigned)i, 0);
	one_set(&shapes[0], 0, 1);
}
