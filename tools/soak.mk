# make soak: one locusd under 10^6 signatures and 10^5 dispatch batches, its memory,
# descriptors and inbox occupancy sampled and held flat, every counter reconciled
# (tools/soak.sh). make test runs a short one (tests/test_soak.sh).
.PHONY: soak
soak: all-targets
	BUILD=$(BUILD) tools/soak.sh
EXTRA_TESTS += tests/test_soak.sh
