# shm: the segment (create/attach/remove) and the table channels.
$(eval $(call LIBRARY,shm,shm/segment.c shm/proc.c))
$(eval $(call PROGRAM,tests/test_segment,tests/test_segment.c,shm common,cmocka))
UNIT_TESTS += tests/test_segment
