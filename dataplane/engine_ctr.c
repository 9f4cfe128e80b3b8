// SPDX-License-Identifier: MIT
/* The engine's counters: names, help, shapes. */
#include "locus_counters_priv.h"
#include "locus_engine.h"
#include "locus_grace_plan.h"
#include "locus_graceset.h"

#define N_OPS 2 /* dispatch, combine */

struct ctr_def {
	const char *name;
	const char *help;
	enum locus_ctr_kind kind;
	uint32_t ndims;
	uint32_t dim0, dim1;
	const char *label0, *label1;
	uint64_t *off;
};

int locus_engine_register_counters(struct locus_counters *c, const struct locus_engine_dims *d,
				   struct locus_engine_ctr *o, struct locus_error *err)
{
	const uint32_t tiers = LOCUS_GRACE_N_TIERS, n_ranks = d->n_nodes * d->gpus_per_node;
	const struct ctr_def defs[] = {
		{ "poll_iterations", "poll loop iterations", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0,
		  &o->poll_iterations },
		{ "poll_busy", "poll loop iterations that handled work", LOCUS_CTR_COUNTER, 0, 0, 0,
		  0, 0, &o->poll_busy },
		{ "idle_sleeps", "idle sleeps of the poll loop (idle policy)", LOCUS_CTR_COUNTER, 0,
		  0, 0, 0, 0, &o->idle_sleeps },
		{ "idle_sleep_ns", "time the poll loop slept while idle, ns", LOCUS_CTR_COUNTER, 0,
		  0, 0, 0, 0, &o->idle_sleep_ns },
		{ "clients_attached", "client slots served", LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0,
		  &o->clients_attached },
		{ "client_protocol_errors", "clients dropped for corrupting their rings",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->client_protocol_errors },
		{ "route_requests", "signatures submitted for routing", LOCUS_CTR_COUNTER, 0, 0, 0,
		  0, 0, &o->route_requests },
		{ "routed", "signatures routed, by decoder id", LOCUS_CTR_COUNTER, 1,
		  d->max_decoders, 0, "decoder", 0, &o->routed },
		{ "route_band_size", "eligible decoders inside the locality band",
		  LOCUS_CTR_HISTOGRAM, 0, 0, 0, 0, 0, &o->route_band },
		{ "route_ns", "route handling time per signature, ns", LOCUS_CTR_HISTOGRAM, 0, 0, 0,
		  0, 0, &o->route_ns },
		{ "decoder_load", "last load a decoder reported", LOCUS_CTR_GAUGE, 1,
		  d->max_decoders, 0, "decoder", 0, &o->decoder_load },
		{ "decoder_up", "1 while a decoder is attached and reporting", LOCUS_CTR_GAUGE, 1,
		  d->max_decoders, 0, "decoder", 0, &o->decoder_up },
		{ "rejected_bad_signature", "signatures refused: magic, version, shape, length",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->rej_bad_signature },
		{ "rejected_no_decoder", "signatures refused: no eligible decoder up",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->rej_no_decoder },
		{ "rejected_no_table", "requests refused: no table published yet",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->rej_no_table },
		{ "rejected_inbox_full", "requests refused: receiver inbox or ring full",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->rej_inbox_full },
		{ "rejected_bad_descriptor", "descriptors refused: malformed or wrong role",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->rej_bad_descriptor },
		{ "rejected_peer_down", "requests refused: receiver not attached or node down",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->rej_peer_down },
		{ "rejected_bad_release", "inbox releases naming no message", LOCUS_CTR_COUNTER, 0,
		  0, 0, 0, 0, &o->rej_bad_release },
		{ "rejected_placement", "rows refused: planned under a placement generation the rank "
		  "does not hold, by reason (0 below its floor, 1 above its ack)", LOCUS_CTR_COUNTER,
		  1, LOCUS_ENGINE_PLACEMENT_N_REASONS, 0, "reason", 0, &o->rej_placement },
		{ "dispatch_batches", "dispatch batches submitted", LOCUS_CTR_COUNTER, 0, 0, 0, 0,
		  0, &o->dispatch_batches },
		{ "combine_batches", "combine batches submitted", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0,
		  &o->combine_batches },
		{ "rows", "token rows moved, by op (0 dispatch, 1 combine) and tier "
			  "(0 gpu, 1 node, 2 remote)", LOCUS_CTR_COUNTER, 2, N_OPS, tiers, "op", "tier",
		  &o->rows },
		{ "bytes", "row bytes copied, by op and tier", LOCUS_CTR_COUNTER, 2, N_OPS, tiers,
		  "op", "tier", &o->bytes },
		{ "messages", "rows messages delivered, by op and tier", LOCUS_CTR_COUNTER, 2, N_OPS,
		  tiers, "op", "tier", &o->msgs },
		{ "dispatch_ns", "dispatch handling time per batch, ns", LOCUS_CTR_HISTOGRAM, 0, 0,
		  0, 0, 0, &o->dispatch_ns },
		{ "combine_ns", "combine handling time per batch, ns", LOCUS_CTR_HISTOGRAM, 0, 0, 0,
		  0, 0, &o->combine_ns },
		{ "expert_tokens", "tokens dispatched per (layer, expert): live expert load",
		  LOCUS_CTR_COUNTER, 2, d->max_layers, d->max_experts, "layer", "expert",
		  &o->expert_tokens },
		{ "table_generation", "table generation in use, by channel (0 eldr, 1 grace)",
		  LOCUS_CTR_GAUGE, 1, LOCUS_TABLE_N_CHANNELS, 0, "channel", 0,
		  &o->table_generation },
		{ "table_layers", "MoE layers of the table in use, by channel (0: none yet); "
		  "clients check their requests' shape against it", LOCUS_CTR_GAUGE, 1,
		  LOCUS_TABLE_N_CHANNELS, 0, "channel", 0, &o->table_layers },
		{ "table_experts", "experts per layer of the table in use, by channel (0: none "
		  "yet)", LOCUS_CTR_GAUGE, 1, LOCUS_TABLE_N_CHANNELS, 0, "channel", 0,
		  &o->table_experts },
		{ "router_path", "ELDR scoring path in use: 0 none, 1-3 scalar/avx2/avx512 "
		  "(16-bit), 5-7 the same 8-bit (eldr_precision = 8)", LOCUS_CTR_GAUGE, 0, 0, 0, 0,
		  0, &o->router_path },
		{ "table_adopted", "tables adopted, by channel", LOCUS_CTR_COUNTER, 1,
		  LOCUS_TABLE_N_CHANNELS, 0, "channel", 0, &o->table_adopted },
		{ "table_rejected", "tables refused by validation, by channel", LOCUS_CTR_COUNTER, 1,
		  LOCUS_TABLE_N_CHANNELS, 0, "channel", 0, &o->table_rejected },
		{ "grace_groups", "EP groups of the GRACE placement in use (1: one table for "
		  "every rank, 0: none)", LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0, &o->grace_groups },
		{ "ranks_lost", "GRACE ranks this node cannot reach (node down, rank client "
		  "gone): no rows are planned to them", LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0,
		  &o->ranks_lost },
		{ "ranks_lost_changes", "times an engine's set of lost ranks changed",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->ranks_lost_changes },
		{ "ranks_lost_changed_at", "when the set of lost ranks last changed (CLOCK_MONOTONIC "
		  "ms)", LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0, &o->ranks_lost_at },
		{ "slots_masked", "(token, slot) pairs whose expert had no live copy: not sent, "
		  "reported to the source", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->slots_masked },
		{ "dispatch_replanned", "dispatch batches planned again because a destination's "
		  "node went down meanwhile", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->replanned },
		{ "rank_answers", "answers timed: a rank's results of a batch back at the local "
		  "rank that sent it rows, by the answering rank", LOCUS_CTR_COUNTER,
		  1, n_ranks, 0, "rank", 0, &o->rank_answers },
		{ "rank_answer_ns", "the time of those answers from rows sent to results back, "
		  "summed (ns), by the answering rank", LOCUS_CTR_COUNTER, 1, n_ranks, 0, "rank",
		  0, &o->rank_answer_ns },
		{ "rank_answer_max_ns", "the slowest answer of the last second (ns), by the "
		  "answering rank", LOCUS_CTR_GAUGE, 1, n_ranks, 0, "rank", 0,
		  &o->rank_answer_max },
		{ "grace_set_refused", "GRACE placement sets refused, by reason (0 malformed, "
		  "1 missing group, 2 overlapping groups, 3 dims disagree)", LOCUS_CTR_COUNTER, 1,
		  LOCUS_GRACESET_N_PROBLEMS - 1, 0, "reason", 0, &o->grace_set_refused },
		{ "remote_messages_out", "messages sent to other nodes, by node", LOCUS_CTR_COUNTER,
		  1, d->n_nodes, 0, "node", 0, &o->remote_msgs_out },
		{ "remote_messages_in", "messages received from other nodes, by node",
		  LOCUS_CTR_COUNTER, 1, d->n_nodes, 0, "node", 0, &o->remote_msgs_in },
		{ "remote_bytes_out", "bytes sent to other nodes, by node", LOCUS_CTR_COUNTER, 1,
		  d->n_nodes, 0, "node", 0, &o->remote_bytes_out },
		{ "remote_bytes_in", "bytes received from other nodes, by node", LOCUS_CTR_COUNTER,
		  1, d->n_nodes, 0, "node", 0, &o->remote_bytes_in },
		{ "remote_send_errors", "sends to other nodes that failed", LOCUS_CTR_COUNTER, 0, 0,
		  0, 0, 0, &o->remote_send_errors },
		{ "remote_undeliverable", "messages from other nodes with no local receiver or room",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->remote_undeliverable },
		{ "remote_bad", "messages from other nodes refused by the checks", LOCUS_CTR_COUNTER,
		  0, 0, 0, 0, 0, &o->remote_bad },
		{ "ldma_msgs", "intra-node messages whose rows the RDMA device moved (loopback)",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->ldma_msgs },
		{ "ldma_bytes", "row bytes the RDMA device moved within the node", LOCUS_CTR_COUNTER,
		  0, 0, 0, 0, 0, &o->ldma_bytes },
		{ "ldma_fallbacks", "intra-node messages copied by the CPU: loopback queue full/down",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->ldma_fallbacks },
		{ "ldma_errors", "loopback copies that failed (their request failed)",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->ldma_errors },
		{ "rejected_bad_region", "requests refused: region flag naming no usable region",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->rej_bad_region },
		{ "rejected_region_unmapped", "requests refused: rows of a region locusd cannot "
		  "map needed a CPU copy", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0,
		  &o->rej_region_unmapped },
		{ "region_rows_zero_copy", "rows to other nodes handed over to be gathered from a "
		  "region's MRs (see rail_region_rows_*)", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0,
		  &o->region_rows_zero_copy },
		{ "region_messages_copied", "region rows messages to other nodes that were copied "
		  "(no MR, or more row runs than gather entries)", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0,
		  &o->region_msgs_copied },
		{ "regions", "client buffer regions the engine serves", LOCUS_CTR_GAUGE, 0, 0, 0, 0,
		  0, &o->regions },
		{ "load_rows_written", "decoder load rows written one-sided to a node, by node",
		  LOCUS_CTR_COUNTER, 1, d->n_nodes, 0, "node", 0, &o->load_rows_written },
		{ "load_rows_read", "new decoder load rows taken from a node, by node",
		  LOCUS_CTR_COUNTER, 1, d->n_nodes, 0, "node", 0, &o->load_rows_read },
		{ "load_rows_torn", "load rows read with a bad checksum (half written), by node",
		  LOCUS_CTR_COUNTER, 1, d->n_nodes, 0, "node", 0, &o->load_rows_torn },
		{ "load_rows_bad", "load rows refused by the checks (node, count, decoder ids)",
		  LOCUS_CTR_COUNTER, 1, d->n_nodes, 0, "node", 0, &o->load_rows_bad },
		{ "load_decoders_stale", "remote decoders on a live node whose load row stopped "
		  "moving", LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0, &o->load_decoders_stale },
		{ "inbox_slots_used", "inbox slots of attached clients holding a delivery they "
		  "have not released", LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0, &o->inbox_slots_used },
		{ "requests_pending", "client requests waiting for their sends to other nodes or "
		  "their intra-node copies", LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0, &o->requests_pending },
		{ "engines", "engine lcores (each sets 1 in its own block)", LOCUS_CTR_GAUGE, 0, 0,
		  0, 0, 0, &o->engines },
		{ "engine_handovers", "deliveries handed to the engine owning the receiver",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->x_handovers },
		{ "engine_handovers_dropped", "hand-overs whose receiver left before its owner "
		  "took them", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->x_dropped },
		{ "route_blocks_requests", "routes naming KV blocks (ROUTE_BLOCKS) submitted",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->route_blocks_requests },
		{ "route_blocks_partial", "ROUTE_BLOCKS routed with a named block not cached",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->route_blocks_partial },
		{ "evict_requests", "EVICT requests submitted", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0,
		  &o->evict_requests },
		{ "rejected_blocks", "ROUTE_BLOCKS / EVICT refused, by reason (0 cache off, 1 "
		  "format, 2 duplicate hash, 3 counts, 4 tail signature)", LOCUS_CTR_COUNTER, 1,
		  LOCUS_ENGINE_BLOCKS_N_REASONS, 0, "reason", 0, &o->rej_blocks },
		{ "sigcache_hits", "named cached blocks found in the signature cache",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->sc_hits },
		{ "sigcache_misses", "named cached blocks not in the signature cache",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->sc_misses },
		{ "sigcache_inserts", "new blocks cached", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0,
		  &o->sc_inserts },
		{ "sigcache_refreshes", "new blocks already cached with the same counts",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->sc_refreshes },
		{ "sigcache_replaced", "new blocks already cached with other counts (replaced)",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->sc_replaced },
		{ "sigcache_evictions", "cached blocks dropped, by reason (0 lru, 1 explicit)",
		  LOCUS_CTR_COUNTER, 1, 2, 0, "reason", 0, &o->sc_evictions },
		{ "sigcache_resets", "signature cache emptied for a table of another shape",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->sc_resets },
		{ "sigcache_entries", "blocks in the signature cache", LOCUS_CTR_GAUGE, 0, 0, 0, 0,
		  0, &o->sc_entries },
		{ "sigcache_bytes", "bytes of the signature cache's entries in use",
		  LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0, &o->sc_bytes },
		{ "sigcache_capacity", "blocks the signature cache holds at most",
		  LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0, &o->sc_capacity },
		{ "sigcache_block_tokens", "tokens per KV block a ROUTE_BLOCKS must use "
		  "(sig_cache_block_tokens; 0: the cache is off)", LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0,
		  &o->sc_block_tokens },
		{ "sigcache_blocks_summed", "cached blocks' counts added into a routed signature "
		  "(the blocks under a prefix checkpoint are not)", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0,
		  &o->sc_summed },
		{ "sigcache_checkpoint_hits", "ROUTE_BLOCKS summed from a prefix checkpoint",
		  LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0, &o->sc_ckpt_hits },
		{ "sigcache_checkpoint_mismatch", "prefix checkpoints named at another block index "
		  "than their own (hashes not chained; not used)", LOCUS_CTR_COUNTER, 0, 0, 0, 0, 0,
		  &o->sc_ckpt_mismatch },
		{ "sigcache_checkpoint_inserts", "prefix checkpoints written", LOCUS_CTR_COUNTER, 0,
		  0, 0, 0, 0, &o->sc_ckpt_inserts },
		{ "sigcache_checkpoint_evictions", "prefix checkpoints dropped, by reason (0 lru, 1 "
		  "explicit)", LOCUS_CTR_COUNTER, 1, 2, 0, "reason", 0, &o->sc_ckpt_evictions },
		{ "sigcache_checkpoints", "prefix checkpoints in the signature cache",
		  LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0, &o->sc_ckpt_entries },
		{ "sigcache_checkpoint_capacity", "prefix checkpoints the signature cache holds at "
		  "most", LOCUS_CTR_GAUGE, 0, 0, 0, 0, 0, &o->sc_ckpt_capacity },
	};

	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(defs); i++) {
		struct locus_ctr_desc cd = {
			.name = defs[i].name,
			.help = defs[i].help,
			.kind = defs[i].kind,
			.ndims = defs[i].ndims,
			.dim = { defs[i].dim0, defs[i].dim1 },
			.label = { defs[i].label0, defs[i].label1 },
		};
		int ret = locus_counters_register(c, &cd, defs[i].off, err);

		if (ret < 0)
			return ret;
	}
	return 0;
}
