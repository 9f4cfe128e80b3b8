# the signature cache (issue 12): pure C, the engine's once it is wired in
$(eval $(call LIBRARY,sigcache,dataplane/sigcache.c))
$(eval $(call PROGRAM,tests/test_sigcache,tests/test_sigcache.c,sigcache formats trace common,cmocka))
UNIT_TESTS += tests/test_sigcache
