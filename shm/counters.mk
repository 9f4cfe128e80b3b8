# counters: directory + per-lcore blocks in the segment's counters region.
$(eval $(call LIBRARY,counters,shm/counters.c))
$(eval $(call PROGRAM,tests/test_counters,tests/test_counters.c,counters common,cmocka))
UNIT_TESTS += tests/test_counters
