# ELDR locality-band router and its scoring kernels (pure C, no EAL); the
# signature and table formats are shm/formats.mk's.
$(eval $(call LIBRARY,eldr_router,dataplane/eldr_router.c dataplane/eldr_router_build.c dataplane/eldr_kernels.c dataplane/eldr_qkernels.c dataplane/eldr_q8kernels.c))
$(eval $(call PROGRAM,tests/test_eldr_route,tests/test_eldr_route.c tests/test_paths.c tests/eldr_rand.c,eldrfit eldr_router formats trace common,cmocka))
UNIT_TESTS += tests/test_eldr_route
$(eval $(call PROGRAM,tests/test_eldr_route_v2,tests/test_eldr_route_v2.c tests/eldr_rand.c,eldr_router formats common,cmocka))
UNIT_TESTS += tests/test_eldr_route_v2
$(eval $(call PROGRAM,tests/test_eldr_quality,tests/test_eldr_quality.c tools/eldr_quality_sim.c tools/eldr_replay.c,eldrfit eldr_router formats trace common,cmocka))
UNIT_TESTS += tests/test_eldr_quality
$(eval $(call PROGRAM,tools/eldr_bench,tools/eldr_bench.c,eldrfit eldr_router formats common,))
BENCHES += tools/eldr_bench
$(eval $(call PROGRAM,tools/eldr_quality,tools/eldr_quality.c tools/eldr_quality_sim.c tools/eldr_replay.c,eldrfit eldr_router formats trace common,))
BENCHES += tools/eldr_quality
EXTRA_TESTS += tests/test_eldr_goal.sh
$(eval $(call PROGRAM,tests/test_eldr_kernels,tests/test_eldr_kernels.c tests/test_paths.c,eldrfit eldr_router formats trace common,cmocka))
UNIT_TESTS += tests/test_eldr_kernels
