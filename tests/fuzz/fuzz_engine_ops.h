/* SPDX-License-Identifier: MIT */
/*
 * The input language of the engine fuzz targets: a sequence of operations
 * on the two-engine harness (fuzz_engine.h), each an opcode byte and its
 * fields. A target allows a subset: its input bytes pick among them.
 */
#ifndef LOCUS_FUZZ_ENGINE_OPS_H
#define LOCUS_FUZZ_ENGINE_OPS_H

#include "fuzz.h"
#include "fuzz_engine.h"

enum fe_op {
	FE_OP_DESC,        /* any descriptor from a client (a RELEASE: fe_release_raw) */
	FE_OP_STAGE,       /* any bytes into a client's stage */
	FE_OP_DISPATCH,    /* a dispatch request built from fields, and its descriptor */
	FE_OP_COMBINE,     /* a combine request built from fields, and its descriptor */
	FE_OP_ROUTE,       /* a signature built from fields, and its descriptor */
	FE_OP_ROUNDS,      /* 1..8 rounds */
	FE_OP_CLOCK,       /* time passes (decoders may go stale) */
	FE_OP_LOAD,        /* a client reports a load */
	FE_OP_PEER,        /* a node sees its peer go down / come back */
	FE_OP_FAIL,        /* a node's sends complete with an error / succeed again */
	FE_OP_ATTACH,      /* a client detaches / attaches again */
	FE_OP_REGION,      /* a client registers / drops a buffer region */
	FE_OP_HOLD,        /* a client keeps / releases its deliveries */
	FE_OP_TABLE,       /* a table is pushed (some refused) */
	FE_OP_INJECT,      /* any bytes arrive at node 0 as a message from node 1 */
	FE_OP_TAMPER,      /* the next message node 1 sends changes on the wire */
	FE_OP_AREA_RAW,    /* any bytes land in node 0's load area for node 1 */
	FE_OP_AREA_ROW,    /* a load row built from fields lands there */
	FE_N_OPS
};

/*
 * Run the input's operations (opcodes from allowed[]), a round after each
 * and then after() when not NULL; then quiesce and check.
 */
void fe_run(struct fe_env *env, struct fuzz_in *in, const enum fe_op *allowed, size_t n_allowed,
	    void (*after)(const struct fe_env *env));

#endif /* LOCUS_FUZZ_ENGINE_OPS_H */
