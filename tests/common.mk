$(eval $(call PROGRAM,tests/test_common,tests/test_common.c,common,cmocka))
UNIT_TESTS += tests/test_common
