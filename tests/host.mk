# tests/: tests of whole programs on this host (no VM): real locusd
# processes, locusctl, locus-loadgen, the installed library and unit.
# Helper programs they run:
$(eval $(call PROGRAM,tests/notify_listen,tests/notify_listen.c))
$(eval $(call PROGRAM,tests/telemetry_query,tests/telemetry_query.c))
$(eval $(call PROGRAM,tests/client_waiter,tests/client_waiter.c,client))

HOST_TESTS += tests/test_layering.sh tests/test_locusd.sh tests/test_isolation.sh \
	tests/test_push_kill.sh tests/test_engines.sh tests/test_faults.sh \
	tests/test_loadgen.sh tests/test_bench_daemon.sh tests/test_liblocus.sh \
	tests/test_deploy.sh tests/test_eldr_goal.sh tests/test_sigcache_evidence.sh \
	tests/test_simulate.sh tests/test_simulate_moe.sh tests/test_soak.sh tests/test_docs.sh \
	tests/test_api_exports.sh tests/test_cluster_locusd.sh

# make soak: one locusd under 10^6 signatures and 10^5 dispatch batches, its
# memory, descriptors and inbox occupancy sampled and held flat, every counter
# reconciled (tests/soak.sh). test_soak.sh runs a short one.
.PHONY: soak
soak: all-targets
	BUILD=$(BUILD) tests/soak.sh
