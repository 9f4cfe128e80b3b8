# locusctl simulate (issue 17): the serving simulation's pure-C core and presets;
# locusctl links them with tools/sim_ctl.c (control/locusctl.mk).
$(eval $(call LIBRARY,sim,tools/sim.c tools/sim_preset.c))
# simulate --moe's core: the layer model and its placements (the GRACE planner, EPLB's dispatch)
$(eval $(call LIBRARY,sim_moe,tools/sim_moe.c tools/sim_moe_route.c))
$(eval $(call PROGRAM,tests/test_sim,tests/test_sim.c tests/test_paths.c tools/eldr_quality_sim.c,sim eldr_router formats trace common,cmocka))
UNIT_TESTS += tests/test_sim
$(eval $(call PROGRAM,tests/test_sim_moe,tests/test_sim_moe.c,sim_moe grace_plan gracefit formats common,cmocka lapacke openblas))
UNIT_TESTS += tests/test_sim_moe
EXTRA_TESTS += tests/test_simulate.sh tests/test_simulate_moe.sh
