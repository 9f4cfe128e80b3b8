/* SPDX-License-Identifier: MIT */
/*
 * The monotonic clock the client library's waits and deadlines read
 * (CLOCK_MONOTONIC, in ns).
 */
#ifndef LOCUS_CLOCK_PRIV_H
#define LOCUS_CLOCK_PRIV_H

#include <stdint.h>
#include <time.h>

static inline uint64_t locus_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* LOCUS_CLOCK_PRIV_H */
