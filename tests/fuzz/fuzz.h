/* SPDX-License-Identifier: MIT */
/*
 * What every libFuzzer target of tests/fuzz shares: the contract check that
 * turns a broken promise of a header into a crash libFuzzer records, and a
 * reader that takes structured fields from the input bytes (a field past
 * the end of the input reads as zero, so every input is a valid program).
 */
#ifndef LOCUS_FUZZ_H
#define LOCUS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A documented contract does not hold: report it and abort (libFuzzer saves the input). */
#define FUZZ_CHECK(cond, ...)                                                           \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "fuzz contract broken at %s:%d: ", __FILE__,    \
				__LINE__);                                              \
			fprintf(stderr, __VA_ARGS__);                                   \
			fputc('\n', stderr);                                            \
			abort();                                                        \
		}                                                                       \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fuzz_in {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t fin_u8(struct fuzz_in *in)
{
	uint8_t v = 0;

	if (in->n) {
		v = *in->p++;
		in->n--;
	}
	return v;
}

static inline uint16_t fin_u16(struct fuzz_in *in)
{
	return (uint16_t)(fin_u8(in) | fin_u8(in) << 8);
}

static inline uint32_t fin_u32(struct fuzz_in *in)
{
	return (uint32_t)fin_u16(in) | (uint32_t)fin_u16(in) << 16;
}

static inline uint64_t fin_u64(struct fuzz_in *in)
{
	return (uint64_t)fin_u32(in) | (uint64_t)fin_u32(in) << 32;
}

/* Up to n bytes into dst (the rest zero); returns how many came from the input. */
static inline size_t fin_copy(struct fuzz_in *in, void *dst, size_t n)
{
	size_t k = n < in->n ? n : in->n;

	memcpy(dst, in->p, k);
	memset((uint8_t *)dst + k, 0, n - k);
	in->p += k;
	in->n -= k;
	return k;
}

/*
 * A private copy of exactly n bytes in its own allocation (malloc aligns to
 * 16), so that ASan sees a read one byte past the input and parsers that
 * want aligned payloads get them. n == 0 still returns a valid pointer.
 */
static inline void *fuzz_dup(const void *p, size_t n)
{
	void *c = malloc(n ? n : 1);

	if (!c)
		abort();
	if (n)
		memcpy(c, p, n);
	return c;
}

#endif /* LOCUS_FUZZ_H */
