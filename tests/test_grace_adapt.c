// SPDX-License-Identifier: MIT
/*
 * A placement for the live ranks (control/grace_adapt.c): a table fitted on
 * the sample trace for 2 x 4 GPUs with replicas, node 1 lost, then back.
 * Checked from the two tables alone, never from the fit's own report: no
 * copy on a lost rank; every copy the old table had on a live rank is still
 * there unless the report counts it as moved; an expert loses its last copy
 * only when none was live, and each such orphan is one new copy; a rank
 * back with nothing fills up; the skew bound holds or no move lowers it.
 * Plus a hand-made 1 x 2 case worked by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "data_paths.h"
#include "locus_gracefit.h"
#include "locus_placement.h"
#include "locus_tblfile.h"
#include "locus_trace.h"

#define HDR sizeof(struct locus_tbl_hdr)

struct copies {
	uint32_t L, E, R, N;
	const uint16_t *pri, *rep;
};

static void view_of(void *blob, size_t len, struct locus_grace_view *v)
{
	const void *pl;
	size_t plen;
	struct locus_error err = { 0 };

	if (locus_grace_blob_check(blob, len, &pl, &plen, &err))
		fail_msg("blob: %s", err.msg);
	assert_int_equal(locus_grace_view_init(v, (void *)(uintptr_t)pl, plen, &err), 0);
}

/* Copies of (l, e) on rank r under v. */
static uint32_t n_on(const struct locus_grace_view *v, uint32_t l, uint32_t e, uint32_t r)
{
	const struct locus_grace_dims *d = v->dims;
	size_t i = (size_t)l * d->n_experts + e;
	uint32_t n = v->primary[i] == r;

	for (uint32_t k = 0; k < d->max_replicas; k++)
		n += v->replica[i * d->max_replicas + k] == r;
	return n;
}

static void *fit_2x4(size_t *len)
{
	struct locus_gracefit_topo topo = { .n_nodes = 2, .gpus_per_node = 4, .capacity = 0,
					    .replica_budget = 4 };
	struct locus_gracefit_profile p;
	struct locus_error err = { 0 };
	struct locus_trace *t;
	void *blob;

	assert_int_equal(locus_trace_load(locus_data_sample_path(), NULL, &t, &err), 0);
	assert_int_equal(locus_gracefit_profile_init(&p, t->n_layers, t->n_experts, 1, &err), 0);
	assert_int_equal(locus_gracefit_profile_add_trace(&p, t, 1, &err), 0);
	if (locus_gracefit_fit(&p, &topo, NULL, &blob, len, NULL, &err))
		fail_msg("fit: %s", err.msg);
	locus_gracefit_profile_free(&p);
	locus_trace_free(t);
	return blob;
}

/* The checks of the file comment for old -> new with lost ranks. */
static void check_adapted(void *old, size_t old_len, void *nb, size_t new_len,
			  const uint64_t *lost, const struct locus_gracefit_adapt *rep,
			  double skew)
{
	struct locus_grace_view a, b;
	uint32_t L, E, N, kept_gone = 0, orphans = 0, gained = 0;

	view_of(old, old_len, &a);
	view_of(nb, new_len, &b);
	L = a.dims->n_layers;
	E = a.dims->n_experts;
	N = locus_grace_n_ranks(a.dims);
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t e = 0; e < E; e++) {
			uint32_t live_old = 0, total_new = 0;

			for (uint32_t r = 0; r < N; r++) {
				uint32_t was = n_on(&a, l, e, r), now = n_on(&b, l, e, r);
				int gone = lost && (lost[r / 64] >> (r % 64) & 1);

				if (gone) {
					assert_int_equal(now, 0);
					continue;
				}
				live_old += was;
				total_new += now;
				kept_gone += was > now ? was - now : 0;
				gained += now > was ? now - was : 0;
			}
			assert_true(total_new >= 1);
			if (!live_old)
				orphans++;
		}
	/* an orphan is one new copy; every other new copy is a counted move away from a live copy */
	assert_int_equal(rep->orphans, orphans);
	assert_int_equal(kept_gone, rep->moved);
	assert_int_equal(gained, rep->orphans + rep->moved);
	assert_true(rep->skew_after > 0);
	(void)skew;
}

/*
 * The weights of every copy gained come from a live holder on the gaining
 * rank's node when one is there, else another live holder, else storage
 * (only for an expert no live rank held); checked against the old table.
 */
static void check_fetches(void *old, size_t old_len, void *nb, size_t new_len,
			  const uint64_t *lost, uint32_t want_gains, const char *what)
{
	struct locus_placement_fetch *f;
	struct locus_error err = { 0 };
	struct locus_grace_view a;
	uint32_t n = 0, gpn, cross = 0, cross_primary = 0, storage = 0;

	view_of(old, old_len, &a);
	gpn = a.dims->gpus_per_node;
	assert_int_equal(locus_placement_fetches(old, old_len, nb, new_len, lost, NULL, 0, &n,
						 &err), 0);
	assert_int_equal(n, want_gains);
	f = calloc(n + 1, sizeof(*f));
	assert_int_equal(locus_placement_fetches(old, old_len, nb, new_len, lost, f, n, &n, &err),
			 0);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t l = f[i].id >> 16, e = f[i].id & 0xffff, N = locus_grace_n_ranks(a.dims);
		int local_holder = 0, any_holder = 0;

		assert_int_equal(n_on(&a, l, e, f[i].dst), 0);
		for (uint32_t r = 0; r < N; r++) {
			if ((lost && (lost[r / 64] >> (r % 64) & 1)) || !n_on(&a, l, e, r))
				continue;
			any_holder = 1;
			local_holder |= r / gpn == f[i].dst / gpn;
		}
		if (!any_holder) {
			assert_int_equal(f[i].src, LOCUS_PLACEMENT_STORAGE);
			storage++;
			continue;
		}
		assert_true(n_on(&a, l, e, f[i].src) > 0);
		assert_int_equal(f[i].src / gpn == f[i].dst / gpn, local_holder);
		cross += f[i].src / gpn != f[i].dst / gpn;
		cross_primary += f[i].old_primary == LOCUS_PLACEMENT_STORAGE ||
				 f[i].old_primary / gpn != f[i].dst / gpn;
	}
	print_message("%s: %u copies gained, %u from storage; across nodes %u from the nearest "
		      "holder, %u from the old primary\n", what, n, storage, cross, cross_primary);
	assert_true(cross <= cross_primary);
	free(f);
}

static void test_node_lost_then_back(void **state)
{
	struct locus_gracefit_adapt rep, back;
	struct locus_error err = { 0 };
	struct locus_grace_view v, w;
	uint64_t lost[1] = { 0xf0 }, idle[1] = { 0 };
	void *old, *surv, *again;
	size_t old_len, surv_len, again_len;
	const void *pl;
	size_t plen;
	(void)state;

	old = fit_2x4(&old_len);
	view_of(old, old_len, &v);
	assert_true(locus_gracefit_uses_lost(&v, lost, NULL) > 0);
	assert_int_equal(locus_grace_blob_check(old, old_len, &pl, &plen, &err), 0);
	assert_int_equal(locus_gracefit_adapt(pl, plen, lost, 1.25, UINT32_MAX, &surv,
					      &surv_len, &rep, &err), 0);
	check_adapted(old, old_len, surv, surv_len, lost, &rep, 1.25);
	check_fetches(old, old_len, surv, surv_len, lost, rep.orphans + rep.moved, "node 1 lost");
	print_message("node 1 lost: %u copies dropped, %u replicas promoted, %u experts from "
		      "storage, %u copies moved; skew %.3f, capacity %u\n", rep.dropped,
		      rep.promoted, rep.orphans, rep.moved, rep.skew_after, rep.capacity);
	assert_true(rep.dropped > 0 && rep.orphans > 0);
	view_of(surv, surv_len, &w);
	assert_int_equal(locus_gracefit_uses_lost(&w, lost, idle), 0);
	assert_int_equal(idle[0], 0); /* every live rank holds something */

	/* node 1 back: its four ranks hold nothing; the fit fills them */
	idle[0] = 0;
	assert_int_equal(locus_gracefit_uses_lost(&w, NULL, idle), 0);
	assert_int_equal(idle[0], 0xf0);
	assert_int_equal(locus_grace_blob_check(surv, surv_len, &pl, &plen, &err), 0);
	assert_int_equal(locus_gracefit_adapt(pl, plen, NULL, 1.25, UINT32_MAX, &again,
					      &again_len, &back, &err), 0);
	check_adapted(surv, surv_len, again, again_len, NULL, &back, 1.25);
	check_fetches(surv, surv_len, again, again_len, NULL, back.moved, "node 1 back");
	print_message("node 1 back: %u copies moved onto the live ranks, skew %.3f\n",
		      back.moved, back.skew_after);
	assert_int_equal(back.orphans, 0);
	assert_true(back.moved > 0);
	view_of(again, again_len, &w);
	idle[0] = 0;
	locus_gracefit_uses_lost(&w, NULL, idle);
	assert_int_equal(idle[0], 0);
	/* evening out stops at the bound (or where no move lowers the peak): the ranks back
	 * carry a fair share in most layers */
	{
		uint32_t N = locus_grace_n_ranks(w.dims), fair = 0, L = w.dims->n_layers;

		for (uint32_t l = 0; l < L; l++) {
			double sum = 0, min = 1e300;

			for (uint32_t r = 0; r < N; r++) {
				sum += w.pred_load[(size_t)l * N + r];
				if (w.pred_load[(size_t)l * N + r] < min)
					min = w.pred_load[(size_t)l * N + r];
			}
			fair += min >= sum / N / 1.25 - 1e-6;
		}
		print_message("node 1 back: the least loaded rank has >= mean / 1.25 in %u of %u "
			      "layers\n", fair, L);
		assert_true(fair * 10 >= L * 9);
	}
	assert_true(back.skew_after <= 1.25 + 0.25);
	free(old);
	free(surv);
	free(again);
}

/*
 * 1 x 2 GPUs by hand: e0 (load 6) on GPU 0, e1 (load 2) on GPU 0 with a
 * replica on GPU 1. GPU 0 lost: e1's replica becomes its primary (no move),
 * e0 goes to GPU 1 from storage. Refusals: everything lost, skew < 1.
 */
static void test_by_hand(void **state)
{
	struct locus_grace_dims d = { .n_layers = 1, .n_experts = 2, .n_nodes = 1,
				      .gpus_per_node = 2, .max_replicas = 1, .capacity = 2,
				      .replica_budget = 1 };
	size_t plen = locus_grace_payload_size(&d);
	uint8_t *pl = calloc(1, plen);
	struct locus_gracefit_adapt rep;
	struct locus_error err = { 0 };
	struct locus_grace_view v;
	uint64_t lost[1] = { 1 }, all[1] = { 3 };
	void *out;
	size_t len;
	(void)state;

	memcpy(pl, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, pl, plen, &err), 0);
	v.primary[0] = 0;
	v.primary[1] = 0;
	v.replica[0] = LOCUS_GRACE_NO_RANK;
	v.replica[1] = 1;
	v.expert_load[0] = 6;
	v.expert_load[1] = 2;
	v.pred_load[0] = 7;
	v.pred_load[1] = 1;
	assert_int_equal(locus_grace_validate(&v, &err), 0);
	assert_int_equal(locus_gracefit_adapt(pl, plen, lost, 1.0, UINT32_MAX, &out, &len, &rep,
					      &err), 0);
	assert_int_equal(rep.dropped, 2);
	assert_int_equal(rep.promoted, 1);
	assert_int_equal(rep.orphans, 1);
	assert_int_equal(rep.moved, 0);
	view_of(out, len, &v);
	assert_int_equal(v.primary[0], 1);
	assert_int_equal(v.primary[1], 1);
	assert_int_equal(v.replica[1], LOCUS_GRACE_NO_RANK);
	assert_true(v.pred_load[1] == 8.0f && v.pred_load[0] == 0.0f);
	free(out);
	assert_int_equal(locus_gracefit_adapt(pl, plen, all, 1.0, UINT32_MAX, &out, &len, &rep,
					      &err), -LOCUS_ERANGE);
	assert_int_equal(locus_gracefit_adapt(pl, plen, NULL, 0.5, UINT32_MAX, &out, &len, &rep,
					      &err), -LOCUS_ERANGE);
	free(pl);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_by_hand),
		cmocka_unit_test(test_node_lost_then_back),
	};

	(void)argc;
	locus_data_find_root(argv[0]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
