# locus-stat: counters, gauges and histograms from the segment (read-only).
$(BUILD)/tools/stat/%.o: INCLUDES += -Itools/stat
# the snapshot and its three formats (the fuzz target reads them too)
$(eval $(call LIBRARY,statfmt,tools/stat/stat_snap.c tools/stat/stat_fmt.c \
	tools/stat/stat_prom.c tools/stat/stat_slow.c,counters shm common))
$(eval $(call PROGRAM,bin/locus-stat,tools/stat/locus_stat.c tools/stat/stat_telemetry.c,\
	statfmt))
BINS += bin/locus-stat
MANPAGES += tools/stat/man/locus-stat.1
