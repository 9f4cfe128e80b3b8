// SPDX-License-Identifier: MIT
/* GPU-to-engine placement by NUMA node (locus_engine_topo.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "locus_engine_topo.h"

/*
 * Spread in order the GPUs of NUMA node `node` over that node's engines, or
 * (strays) the GPUs not placed yet over every engine.
 */
static void spread(const int *gpu_numa, uint32_t G, const int *eng_numa, uint32_t N, int node,
		   int strays, uint8_t *gpu_engine)
{
	uint32_t eng[256], e = 0, m = 0, i = 0;

	for (uint32_t k = 0; k < N && e < 256; k++)
		if (strays || eng_numa[k] == node)
			eng[e++] = k;
	for (uint32_t g = 0; g < G; g++)
		m += strays ? gpu_engine[g] == UINT8_MAX : gpu_numa[g] == node;
	for (uint32_t g = 0; g < G; g++) {
		if (strays ? gpu_engine[g] != UINT8_MAX : gpu_numa[g] != node)
			continue;
		gpu_engine[g] = (uint8_t)eng[(uint64_t)i++ * e / m];
	}
}

void locus_engine_topo_map(const int *gpu_numa, uint32_t G, const int *eng_numa, uint32_t N,
			   uint8_t *gpu_engine)
{
	for (uint32_t g = 0; g < G; g++)
		gpu_engine[g] = UINT8_MAX;
	if (!N)
		return;
	for (uint32_t g = 0; g < G; g++) {
		int has = 0;

		/* a node's first GPU not placed yet: the whole node goes at once */
		if (gpu_numa[g] < 0 || gpu_engine[g] != UINT8_MAX)
			continue;
		for (uint32_t k = 0; k < N; k++)
			has |= eng_numa[k] == gpu_numa[g];
		if (has)
			spread(gpu_numa, G, eng_numa, N, gpu_numa[g], 0, gpu_engine);
	}
	/* the rest (unknown nodes, nodes without an engine) over every engine */
	spread(gpu_numa, G, eng_numa, N, 0, 1, gpu_engine);
}

int locus_engine_topo_pci_numa(const char *sysfs_root, const char *bdf)
{
	char path[512], buf[32], *end;
	ssize_t n;
	long v;
	int fd;

	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node",
		 sysfs_root ? sysfs_root : "/sys", bdf);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	v = strtol(buf, &end, 10);
	if (end == buf || v < 0 || v > 4095)
		return -1;
	return (int)v;
}
