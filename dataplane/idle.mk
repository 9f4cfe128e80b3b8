# The engine lcore's idle policy (pure C): spin, pause, sleep with a growing bound.
$(eval $(call LIBRARY,idle,dataplane/idle.c))
$(eval $(call PROGRAM,tests/test_idle,tests/test_idle.c,idle,cmocka))
UNIT_TESTS += tests/test_idle
