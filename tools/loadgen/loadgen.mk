# locus-loadgen: client traffic through a running locusd, checked end to end
# (the demo, the daemon benchmark, the soak).
$(BUILD)/tools/loadgen/%.o: INCLUDES += -Itools/loadgen
$(eval $(call LIBRARY,loadgen,tools/loadgen/loadgen_opts.c tools/loadgen/loadgen_rank.c \
	tools/loadgen/loadgen_dmabuf.c tools/loadgen/loadgen_blocks.c \
	tools/loadgen/loadgen_weights.c tools/loadgen/loadgen_live.c,\
	client wire formats shm common))
$(eval $(call PROGRAM,bin/locus-loadgen,tools/loadgen/locus_loadgen.c,\
	loadgen eldr_router trace))
BINS += bin/locus-loadgen
