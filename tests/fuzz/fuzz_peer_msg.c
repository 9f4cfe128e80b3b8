// SPDX-License-Identifier: MIT
/*
 * Every message a peer node can send an engine, through
 * locus_engine_remote_recv (what locusd's network lcore calls for each
 * arrival): any bytes injected as a message from node 1 (or claiming to
 * come from node 0 itself), and real messages node 1's engine builds for
 * its clients' requests, changed on the wire (a byte flipped, the tail
 * lost). Contract: receive returns 0 or a refusal, never touches a byte
 * past the message, and whatever it accepts reaches the local client as a
 * delivery that client's own checks accept (a signature its table's check
 * takes, rows a rows-message check takes, addressed to it, in a free inbox
 * slot); untouched messages are never refused as malformed.
 * LOCUS_FUZZ_SKIP names honoured: peer_sig (a delivered signature passes
 * locus_eldr_sig_check).
 */
#include "fuzz_engine_targets.h"
#include "fuzz_known.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct fe_env *env = fe_create();

	if (fuzz_skip("peer_sig"))
		env->skip_peer_sig = "peer_sig";
	fe_run(env, &in, fe_ops_peer, LOCUS_ARRAY_SIZE(fe_ops_peer), NULL);
	fe_destroy(env);
	return 0;
}
