/* SPDX-License-Identifier: MIT */
/*
 * liblocus (pkg-config locus): every public header of the client library
 * in one include. Each function they declare is exported (shm/liblocus.map).
 */
#ifndef LOCUS_H
#define LOCUS_H

#include "locus_common.h"
#include "locus_err.h"
#include "locus_crc32c.h"
#include "locus_shm.h"
#include "locus_counters.h"
#include "locus_client.h"
#include "locus_eldr.h"
#include "locus_blocks.h"
#include "locus_tblfile.h"
#include "locus_grace.h"
#include "locus_graceset.h"
#include "locus_wire.h"
#include "locus_dispatch.h"
#include "locus_placement.h"
#include "locus_weights.h"
#include "locus_ep.h"

#endif /* LOCUS_H */
