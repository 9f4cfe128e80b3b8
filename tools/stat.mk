# locus-stat: counters, gauges and histograms from the segment (read-only).
LOCUS_STAT_SRCS := tools/locus_stat.c tools/stat_snap.c tools/stat_fmt.c tools/stat_prom.c tools/stat_telemetry.c
$(eval $(call PROGRAM,bin/locus-stat,$(LOCUS_STAT_SRCS),counters shm common,))
BINS += bin/locus-stat

# The tests run the binary they check, found beside them: build/bin.
$(eval $(call PROGRAM,tests/test_locus_stat,tests/test_locus_stat.c tests/stat_test_run.c tests/mini_json.c tests/stat_test_prom.c,counters shm common,cmocka))
$(eval $(call PROGRAM,tests/test_locus_stat_errors,tests/test_locus_stat_errors.c tests/stat_test_run.c,counters shm common,cmocka))
$(BUILD)/tests/test_locus_stat $(BUILD)/tests/test_locus_stat_errors: $(BUILD)/bin/locus-stat
UNIT_TESTS += tests/test_locus_stat tests/test_locus_stat_errors

$(eval $(call PROGRAM,tools/bench_counters,tools/bench_counters.c,counters common,))
BENCHES += tools/bench_counters
