// SPDX-License-Identifier: MIT
/*
 * Decoder load rows (locus_wire.h) as a peer writes them one-sided into an
 * engine's load area, read by the engine's load exchange every load
 * period: any bytes, or rows built from fields (any node, entry count,
 * decoder ids, seq; torn or whole), between routes of signatures and time
 * passing. Contract: the engine reads only its copy of the area, takes a
 * row only from the node it belongs to, never names a decoder outside
 * 0..max_decoders-1 or on its own node as remote, and routes to a remote
 * decoder only while it knows that decoder's node; the harness's promises
 * hold throughout.
 */
#include "engine_priv.h"
#include "fuzz_engine_targets.h"

static void check_decoders(const struct fe_env *env)
{
	for (int i = 0; i < FE_NODES; i++) {
		const struct locus_engine *e = env->n[i].e;

		for (uint32_t d = 0; d < FE_MAX_DEC; d++) {
			const struct engine_decoder *dec = &e->dec[d];

			FUZZ_CHECK(dec->node == -1 || (dec->node >= 0 && dec->node < FE_NODES &&
						       dec->node != i),
				   "node %d places decoder %u on node %d", i, d, dec->node);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct fe_env *env = fe_create();

	/* node 1 stops writing its own row: the input is what node 0 reads */
	env->n[1].peer_up = 0;
	fe_run(env, &in, fe_ops_load, LOCUS_ARRAY_SIZE(fe_ops_load), check_decoders);
	fe_destroy(env);
	return 0;
}
