# locus-loadgen: client traffic through a running locusd (demo and daemon benchmark).
$(eval $(call PROGRAM,bin/locus-loadgen,tools/locus_loadgen.c tools/loadgen_opts.c tools/loadgen_rank.c tools/loadgen_dmabuf.c tools/loadgen_blocks.c,client wire shm eldr_router formats trace common,))
BINS += bin/locus-loadgen
BENCH_SCRIPTS += tools/bench_daemon.sh tools/bench_engines.sh
# bench_dataplane: the data plane from one pinned client thread (tools/bench_daemon.sh)
$(eval $(call PROGRAM,tools/bench_dataplane,tools/bench_dp.c tools/bench_dp_route.c tools/bench_dp_dispatch.c tools/bench_dp_idle.c tools/bench_dp_internode.c tools/bench_dp_ranks.c tools/loadgen_dmabuf.c,client wire shm eldr_router formats trace common,))
