// SPDX-License-Identifier: MIT
/*
 * The rails' failover and region counters (rail_*{rail}): locusd_net keeps the counts
 * in its rail structs on the data lcore and copies them here into that
 * lcore's counter block every sync period, as the verbs counters are.
 */
#include <rte_cycles.h>

#include "locus_counters_priv.h"
#include "locus_err_priv.h"
#include "locusd_net_priv.h"

static const struct {
	const char *name, *help;
	enum locus_ctr_kind kind;
} rail_ctr[RC_N] = {
	[RC_FAILOVERS] = { "rail_failovers", "connections of the rail lost while up",
			   LOCUS_CTR_COUNTER },
	[RC_RESENT] = { "rail_resent", "queued messages moved to another rail to the same peer "
			"when the rail failed (never posted: the peer cannot have seen them)",
			LOCUS_CTR_COUNTER },
	[RC_FAILED] = { "rail_failed", "messages that ended with an error on the rail (posted "
			"ones when it failed, or queued ones with no other rail up)",
			LOCUS_CTR_COUNTER },
	[RC_AWAY] = { "rail_away_msgs", "messages sent on the rail whose source's home is "
		      "another rail (it was down)", LOCUS_CTR_COUNTER },
	[RC_DOWN_MS] = { "rail_down_ms", "time without the rail to peers it had been up with, "
			 "summed over peers (ms)", LOCUS_CTR_COUNTER },
	[RC_UP] = { "rail_up", "peers connected on the rail now", LOCUS_CTR_GAUGE },
	[RC_FAILED_AT] = { "rail_failed_at_ms", "when the rail last failed over (CLOCK_REALTIME ms, "
			   "0: never)", LOCUS_CTR_GAUGE },
	[RC_MOVED_AT] = { "rail_moved_at_ms", "when a message of the rail's sources first went out "
			  "on another rail after that (CLOCK_REALTIME ms, 0: not yet)",
			  LOCUS_CTR_GAUGE },
	[RC_ROWS_ZC] = { "rail_region_rows_zero_copy", "rows of clients' registered regions posted "
			 "on the rail gathered straight from the region (its MR on the rail's "
			 "device)", LOCUS_CTR_COUNTER },
	[RC_ROWS_COPIED] = { "rail_region_rows_copied", "rows of clients' registered regions "
			     "posted on the rail copied into the message (the region has no MR "
			     "on the rail's device)", LOCUS_CTR_COUNTER },
	[RC_NO_MR] = { "rail_region_no_mr", "regions registered with other rails' devices but "
		       "not this one's (their rows are copied on this rail)", LOCUS_CTR_COUNTER },
	[RC_DEV_LOST] = { "rail_device_lost", "times the rail's RDMA device went away (removed, "
			  "reset, fatal error): connections closed, verbs objects freed",
			  LOCUS_CTR_COUNTER },
	[RC_DEV_BACK] = { "rail_device_back", "times the rail's RDMA device came back under its "
			  "name and was reopened (memory registered again, peers redialled)",
			  LOCUS_CTR_COUNTER },
	[RC_DEV_LOST_AT] = { "rail_device_lost_at_ms", "when the rail's device last went away "
			     "(CLOCK_REALTIME ms, 0: never)", LOCUS_CTR_GAUGE },
	[RC_DEV_BACK_AT] = { "rail_device_back_at_ms", "when the rail's device was last reopened "
			     "(CLOCK_REALTIME ms, 0: never)", LOCUS_CTR_GAUGE },
	[RC_UP_MSG_AT] = { "rail_up_msg_at_ms", "when the rail's first message went out after a "
			   "connection of it last came up (CLOCK_REALTIME ms, 0: not yet)",
			   LOCUS_CTR_GAUGE },
};

/* A TSC reading as CLOCK_REALTIME ms (0 stays 0). */
static int64_t wall_ms(const struct locusd_net *n, uint64_t tsc)
{
	uint64_t hz = rte_get_tsc_hz();

	if (!tsc || tsc < n->base_tsc || !hz)
		return 0;
	return (int64_t)(n->base_ms + (tsc - n->base_tsc) / (hz / 1000 ? hz / 1000 : 1));
}

/* rail_*{rail} in the data lcore's block, written by locusd_net_poll's sync. */
int locusd_net_attach_rail_counters(struct locusd_net *n, struct locus_counters *c,
				    uint32_t block, struct locus_error *err)
{
	n->ctr_block = locus_counters_block(c, block);
	if (!n->ctr_block)
		return locus_error_set(err, LOCUS_ERANGE, "no writable counter block %u", block);
	for (unsigned i = 0; i < RC_N; i++) {
		struct locus_ctr_desc d = { .name = rail_ctr[i].name, .help = rail_ctr[i].help,
					    .kind = rail_ctr[i].kind, .ndims = 1,
					    .dim = { n->n_rails }, .label = { "rail" } };
		int ret = locus_counters_register(c, &d, &n->ctr_off[i], err);

		if (ret < 0)
			return ret;
	}
	if (n->n_peer_ids) {
		struct locus_ctr_desc h = {
			.name = "rail_send_ns", .help = "a message's post to its completion (the "
			"peer's device acked it), ns, by rail and peer (see rail_peer_node)",
			.kind = LOCUS_CTR_HISTOGRAM, .ndims = 2,
			.dim = { n->n_rails, n->n_peer_ids }, .label = { "rail", "peer" } };
		struct locus_ctr_desc g = {
			.name = "rail_peer_node", .help = "the node id of each peer index of "
			"rail_send_ns", .kind = LOCUS_CTR_GAUGE, .ndims = 1,
			.dim = { n->n_peer_ids }, .label = { "peer" } };
		/* the index of the entry registered, or < 0 */
		int ret = locus_counters_register(c, &h, &n->ctr_send_ns, err);

		if (ret >= 0)
			ret = locus_counters_register(c, &g, &n->ctr_peer_node, err);
		if (ret < 0)
			return ret;
		for (uint32_t i = 0; i < n->n_peer_ids; i++)
			locus_gauge_set_elem(n->ctr_block, n->ctr_peer_node, i,
					     (int64_t)n->peer_ids[i]);
	}
	return 0;
}

/* The rails' failover counts into the data lcore's block (plain stores). */
void locusd_net_sync_rail_counters(struct locusd_net *n, uint64_t now)
{
	uint64_t ms_div = rte_get_tsc_hz() / 1000 ? rte_get_tsc_hz() / 1000 : 1;

	if (!n->ctr_block)
		return;
	for (uint32_t r = 0; r < n->n_rails; r++) {
		const struct rail *rl = &n->rail[r];
		uint64_t down = rl->down_tsc, up = 0;

		for (uint32_t i = 0; i < n->n_peer_ids; i++) {
			uint32_t node = n->peer_ids[i];

			if (rl->down_since[node] && now > rl->down_since[node])
				down += now - rl->down_since[node];
			up += (uint64_t)rl->up[node];
		}
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_FAILOVERS], r, (int64_t)rl->failovers);
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_RESENT], r, (int64_t)rl->resent);
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_FAILED], r, (int64_t)rl->failed);
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_AWAY], r, (int64_t)rl->away);
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_DOWN_MS], r,
				     (int64_t)(down / ms_div));
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_UP], r, (int64_t)up);
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_FAILED_AT], r,
				     wall_ms(n, rl->failed_tsc));
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_MOVED_AT], r,
				     wall_ms(n, rl->moved_tsc));
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_ROWS_ZC], r, (int64_t)rl->rows_zc);
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_ROWS_COPIED], r,
				     (int64_t)rl->rows_copied);
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_NO_MR], r,
				     (int64_t)locus_rail_mrs_no_mr(&n->mrs, r));
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_DEV_LOST], r,
				     (int64_t)__atomic_load_n(&rl->dev_lost, __ATOMIC_RELAXED));
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_DEV_BACK], r,
				     (int64_t)__atomic_load_n(&rl->dev_back, __ATOMIC_RELAXED));
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_DEV_LOST_AT], r,
				     __atomic_load_n(&rl->dev_lost_ms, __ATOMIC_RELAXED));
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_DEV_BACK_AT], r,
				     __atomic_load_n(&rl->dev_back_ms, __ATOMIC_RELAXED));
		locus_gauge_set_elem(n->ctr_block, n->ctr_off[RC_UP_MSG_AT], r,
				     wall_ms(n, rl->up_msg_tsc));
	}
}
