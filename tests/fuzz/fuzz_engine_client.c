// SPDX-License-Identifier: MIT
/*
 * Client descriptors and staged requests as the engine reads them: a
 * sequence of operations on two real engines (fuzz_engine.h) by their
 * clients (descriptors of any bytes, stage writes of any bytes, dispatch /
 * combine / route requests built from fields, releases, loads, attach and
 * detach, buffer regions, hold), with table pushes, peers going down and
 * failing sends between them. Every promise the harness checks must hold
 * (exactly one completion per request, deliveries inside free inbox slots
 * and accepted by their receiver, messages between the engines accepted by
 * the peer, gathers inside registered regions).
 */
#include "fuzz_engine_targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct fe_env *env = fe_create();

	fe_run(env, &in, fe_ops_client, LOCUS_ARRAY_SIZE(fe_ops_client), NULL);
	fe_destroy(env);
	return 0;
}
