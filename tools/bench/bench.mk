# tools/bench/: benchmarks. Each prints its figure as a ratio against a
# baseline run beside it in the same run; `make bench` runs them all through
# tools/bench/run.sh, which writes tools/bench/results/<date>.txt.
$(BUILD)/tools/bench/%.o: INCLUDES += -Itools/bench -Itools/loadgen -Itests/oracle -Itests/verbs

# table channel publish/adopt against a plain copy
$(eval $(call PROGRAM,tools/bench/bench_table,tools/bench/bench_table.c,shm))
BENCHES += tools/bench/bench_table
# counter increments against a plain array
$(eval $(call PROGRAM,tools/bench/bench_counters,tools/bench/bench_counters.c,counters))
BENCHES += tools/bench/bench_counters
# the ELDR router and fit against the read bound and the plain fit
$(eval $(call PROGRAM,tools/bench/eldr_bench,tools/bench/eldr_bench.c,\
	eldr_replay eldrfit eldr_router trace))
BENCHES += tools/bench/eldr_bench
# the GRACE planner against the reference planner; the fit
$(eval $(call PROGRAM,tools/bench/grace_bench,tools/bench/grace_bench.c,oracle gracefit grace_plan))
BENCHES += tools/bench/grace_bench
# routes/s with 90 % of the prompt in cached blocks against full signatures
$(eval $(call PROGRAM,tools/bench/sigcache_bench,tools/bench/sigcache_bench.c,sigcache eldr_router))
BENCHES += tools/bench/sigcache_bench
# bench_dataplane: the data plane from one pinned client thread (bench_daemon.sh)
$(eval $(call PROGRAM,tools/bench/bench_dataplane,tools/bench/bench_dp.c \
	tools/bench/bench_dp_route.c tools/bench/bench_dp_dispatch.c tools/bench/bench_dp_idle.c \
	tools/bench/bench_dp_internode.c tools/bench/bench_dp_ranks.c tools/bench/bench_dp_ep.c,\
	loadgen eldr_router trace))
BENCH_SCRIPTS += tools/bench/bench_daemon.sh tools/bench/bench_engines.sh
# guest-side verbs benchmarks, run in the Soft-RoCE VM (tests/vm/)
$(eval $(call PROGRAM,tools/bench/bench_verbs,tools/bench/bench_verbs.c,vt_util verbs))
$(eval $(call PROGRAM,tools/bench/bench_loop,tools/bench/bench_loop.c,verbs))
