/* SPDX-License-Identifier: MIT */
/*
 * The operations each engine fuzz target allows (fuzz_engine_ops.h): an
 * input's opcode byte indexes its target's table. The seed generator
 * encodes its inputs with the same tables.
 */
#ifndef LOCUS_FUZZ_ENGINE_TARGETS_H
#define LOCUS_FUZZ_ENGINE_TARGETS_H

#include "fuzz_engine_ops.h"

static const enum fe_op fe_ops_client[] = {
	FE_OP_DESC, FE_OP_STAGE, FE_OP_DISPATCH, FE_OP_DISPATCH, FE_OP_COMBINE, FE_OP_COMBINE,
	FE_OP_ROUTE, FE_OP_ROUNDS, FE_OP_CLOCK, FE_OP_LOAD, FE_OP_PEER, FE_OP_FAIL,
	FE_OP_ATTACH, FE_OP_REGION, FE_OP_REGION, FE_OP_HOLD, FE_OP_TABLE,
};

static const enum fe_op fe_ops_peer[] = {
	FE_OP_INJECT, FE_OP_INJECT, FE_OP_INJECT, FE_OP_TAMPER, FE_OP_TAMPER, FE_OP_DISPATCH,
	FE_OP_COMBINE, FE_OP_ROUTE, FE_OP_ROUNDS, FE_OP_HOLD, FE_OP_LOAD, FE_OP_CLOCK,
};

static const enum fe_op fe_ops_load[] = {
	FE_OP_AREA_RAW, FE_OP_AREA_ROW, FE_OP_AREA_ROW, FE_OP_ROUTE, FE_OP_ROUTE, FE_OP_CLOCK,
	FE_OP_ROUNDS, FE_OP_PEER, FE_OP_LOAD,
};

#endif /* LOCUS_FUZZ_ENGINE_TARGETS_H */
