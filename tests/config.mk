$(eval $(call PROGRAM,tests/test_config,tests/test_config.c,config common,cmocka))
UNIT_TESTS += tests/test_config
