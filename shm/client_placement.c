// SPDX-License-Identifier: MIT
/* A rank client's part in placement changes (locus_client.h, "Placement changes"). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_err_priv.h"
#include "locus_shm_priv.h"
#include "locus_tblfile.h"

int locus_client_placement(const struct locus_client *c, struct locus_client_placement *p)
{
	const struct locus_client_ctl *ctl = locus_client_ctl_of(c);

	p->staged = __atomic_load_n(&ctl->pl_staged, __ATOMIC_ACQUIRE);
	p->current = __atomic_load_n(&ctl->pl_current, __ATOMIC_RELAXED);
	p->free_below = __atomic_load_n(&ctl->pl_free_below, __ATOMIC_RELAXED);
	p->acked = __atomic_load_n(&ctl->pl_acked, __ATOMIC_RELAXED);
	p->floor = __atomic_load_n(&ctl->pl_floor, __ATOMIC_RELAXED);
	p->part = __atomic_load_n(&ctl->pl_part, __ATOMIC_RELAXED);
	return 0;
}

int locus_client_placement_join(struct locus_client *c)
{
	__atomic_store_n(&locus_client_ctl_of(c)->pl_part, 1, __ATOMIC_RELEASE);
	return 0;
}

int locus_client_placement_ack(struct locus_client *c, uint64_t gen)
{
	struct locus_client_ctl *ctl = locus_client_ctl_of(c);
	uint64_t floor = __atomic_load_n(&ctl->pl_floor, __ATOMIC_RELAXED);

	if (!gen || gen < floor)
		return -LOCUS_ERANGE;
	/* the range only grows here: floor first, so [floor, acked] is never empty */
	if (!floor)
		__atomic_store_n(&ctl->pl_floor, gen, __ATOMIC_RELEASE);
	__atomic_store_n(&ctl->pl_acked, gen, __ATOMIC_RELEASE);
	__atomic_store_n(&ctl->pl_part, 1, __ATOMIC_RELEASE);
	return 0;
}

int locus_client_placement_release(struct locus_client *c, uint64_t floor)
{
	struct locus_client_ctl *ctl = locus_client_ctl_of(c);
	uint64_t acked = __atomic_load_n(&ctl->pl_acked, __ATOMIC_RELAXED);

	if (!acked || floor > acked)
		return -LOCUS_ERANGE;
	if (floor > __atomic_load_n(&ctl->pl_floor, __ATOMIC_RELAXED))
		__atomic_store_n(&ctl->pl_floor, floor, __ATOMIC_RELEASE);
	return 0;
}

int locus_client_placement_table(const struct locus_client *c, uint64_t gen, void **blob,
				 size_t *len, struct locus_error *err)
{
	char path[256], sfx[40];

	*blob = NULL;
	*len = 0;
	snprintf(sfx, sizeof(sfx), ".placement.%" PRIu64, gen);
	if (!gen || locus_shm_run_path(locus_client_instance(c), sfx, path, sizeof(path)) < 0)
		return locus_error_set(err, ENOENT, "no placement generation %" PRIu64, gen);
	return locus_tbl_read_file(path, 0, blob, len, err);
}

int locus_client_ranks(const struct locus_client *c, uint64_t *lost, uint32_t n_words,
		       struct locus_client_ranks *info)
{
	const struct locus_client_ctl *ctl;
	uint64_t s1, s2;

	if (!c || !info || (n_words && !lost))
		return -EINVAL;
	ctl = locus_client_ctl_of(c);
	if (n_words > LOCUS_CLIENT_RANK_WORDS)
		n_words = LOCUS_CLIENT_RANK_WORDS;
	/* a few tries: the engine rewrites the words only when the set changes */
	for (int tries = 0; tries < 64; tries++) {
		s1 = __atomic_load_n(&ctl->ranks_seq, __ATOMIC_ACQUIRE);
		if (s1 & 1)
			continue;
		info->seq = s1;
		info->changed_ns = __atomic_load_n(&ctl->ranks_changed_ns, __ATOMIC_RELAXED);
		info->n_ranks = __atomic_load_n(&ctl->ranks_n, __ATOMIC_RELAXED);
		info->n_lost = __atomic_load_n(&ctl->ranks_lost_n, __ATOMIC_RELAXED);
		for (uint32_t w = 0; w < n_words; w++)
			lost[w] = __atomic_load_n(&ctl->ranks_lost[w], __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s2 = __atomic_load_n(&ctl->ranks_seq, __ATOMIC_RELAXED);
		if (s1 == s2)
			return 0;
	}
	return -EAGAIN;
}
