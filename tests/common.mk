$(eval $(call PROGRAM,tests/test_common,tests/test_common.c,common,cmocka))
UNIT_TESTS += tests/test_common
$(eval $(call PROGRAM,tests/test_ring,tests/test_ring.c,common,cmocka))
UNIT_TESTS += tests/test_ring
