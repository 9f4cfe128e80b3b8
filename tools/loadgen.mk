# locus-loadgen: client traffic through a running locusd (demo and daemon benchmark).
$(eval $(call PROGRAM,bin/locus-loadgen,tools/locus_loadgen.c tools/loadgen_opts.c tools/loadgen_rank.c tools/loadgen_dmabuf.c tools/loadgen_blocks.c,client wire shm eldr_router formats trace common,))
BINS += bin/locus-loadgen
BENCH_SCRIPTS += tools/bench_daemon.sh
