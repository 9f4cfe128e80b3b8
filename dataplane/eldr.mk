# ELDR: signatures, table payload, locality-band router (pure C, no EAL).
$(eval $(call LIBRARY,eldr,dataplane/eldr_router.c dataplane/eldr_kernels.c))
$(eval $(call PROGRAM,tests/test_eldr_sig,tests/test_eldr_sig.c,eldr formats common,cmocka))
UNIT_TESTS += tests/test_eldr_sig
$(eval $(call PROGRAM,tests/test_eldr_route,tests/test_eldr_route.c tests/test_paths.c,eldrfit eldr formats trace common,cmocka))
UNIT_TESTS += tests/test_eldr_route
$(eval $(call PROGRAM,tools/eldr_bench,tools/eldr_bench.c,eldrfit eldr formats common,))
BENCHES += tools/eldr_bench
$(eval $(call PROGRAM,tools/eldr_quality,tools/eldr_quality.c,eldrfit eldr formats trace common,))
BENCHES += tools/eldr_quality
