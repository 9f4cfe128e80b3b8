#!/bin/sh
# The soak of make soak (tests/soak.sh), short: 30,000 signatures and 4 x 1,000 dispatch
# batches, the same samples and checks.
exec env SOAK_SIGNATURES=${SOAK_SIGNATURES:-30000} SOAK_BATCHES=${SOAK_BATCHES:-1000} \
	SOAK_SAMPLE_S=${SOAK_SAMPLE_S:-1} "$(dirname "$0")/soak.sh"
