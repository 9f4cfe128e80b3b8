/* SPDX-License-Identifier: MIT */
/*
 * Which engine lcore serves each GPU's ranks (engine_lcores > 1 with
 * gpu_pci): one on the GPU's NUMA node, so that the engine polling a rank's
 * ring and copying its rows sits next to the GPU's memory and NIC. Pure
 * logic and a sysfs read; locusd gives the NUMA nodes of its lcores.
 */
#ifndef LOCUS_ENGINE_TOPO_H
#define LOCUS_ENGINE_TOPO_H

#include <stdint.h>

/*
 * gpu_engine[g] for G GPUs over N engines: the m GPUs of a NUMA node spread
 * in order over the e engines of that node (its i-th GPU to its
 * (i * e / m)-th engine); GPUs of a node without an engine, or of an
 * unknown node (< 0), spread over all N engines the same way.
 */
void locus_engine_topo_map(const int *gpu_numa, uint32_t G, const int *eng_numa, uint32_t N,
			   uint8_t *gpu_engine);

/*
 * The NUMA node of PCI device bdf ("dddd:bb:dd.f") under sysfs_root (NULL:
 * "/sys"): >= 0, -1 when the kernel does not know it (one node, or no
 * firmware table), -ENOENT when there is no such device.
 */
int locus_engine_topo_pci_numa(const char *sysfs_root, const char *bdf);

#endif /* LOCUS_ENGINE_TOPO_H */
