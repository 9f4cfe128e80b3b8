# the signature cache (issue 12): pure C, the engine's (engine_blocks.c)
$(eval $(call LIBRARY,sigcache,dataplane/sigcache.c dataplane/sigcache_route.c dataplane/sigcache_sum.c))
$(eval $(call PROGRAM,tests/test_sigcache,tests/test_sigcache.c,sigcache formats trace common,cmocka))
UNIT_TESTS += tests/test_sigcache
# the signature cache through a whole node: ROUTE_BLOCKS, EVICT, LRU, restart, refusals
$(eval $(call PROGRAM,tests/test_sigroute,tests/test_sigroute.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan client formats trace counters shm config common,cmocka))
UNIT_TESTS += tests/test_sigroute
# routes/s with 90 % of the prompt in cached blocks against full signatures (engine level)
$(eval $(call PROGRAM,tools/sigcache_bench,tools/sigcache_bench.c,sigcache eldr_router formats common,))
BENCHES += tools/sigcache_bench
# distinct experts per decode batch: cached head + own tokens = the full prompt, and without the cache
$(eval $(call PROGRAM,tools/sigcache_evidence,tools/sigcache_evidence.c,sigcache eldrfit eldr_router formats trace common,))
BENCHES += tools/sigcache_evidence
EXTRA_TESTS += tests/test_sigcache_evidence.sh
