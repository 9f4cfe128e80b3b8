# GRACE fitting (profile, spectral grouping, replication, EPLB interop) and
# the locusctl grace subcommands. LAPACKE/OpenBLAS via pkg-config.
GRACEFIT_SRCS := control/grace_profile.c control/grace_spectral.c control/grace_group.c control/grace_balance.c \
	control/grace_replicate.c control/grace_fit.c control/grace_eplb.c \
	control/grace_eplb_balance.c control/grace_epgroups.c control/grace_rebalance.c \
	control/grace_objective.c
$(eval $(call LIBRARY,gracefit,$(GRACEFIT_SRCS)))
$(eval $(call USES_PKG,$(GRACEFIT_SRCS),lapacke))
$(eval $(call PROGRAM,tests/test_grace_fit,tests/test_grace_fit.c,gracefit grace_plan formats common,cmocka lapacke openblas))
UNIT_TESTS += tests/test_grace_fit
$(eval $(call PROGRAM,tests/test_grace_rebalance,tests/test_grace_rebalance.c,gracefit formats common,cmocka lapacke openblas))
UNIT_TESTS += tests/test_grace_rebalance
$(eval $(call PROGRAM,tests/test_grace_eplb,tests/test_grace_eplb.c,gracefit formats common,cmocka lapacke openblas))
UNIT_TESTS += tests/test_grace_eplb
$(eval $(call PROGRAM,tests/test_eplb_balance,tests/test_eplb_balance.c,gracefit formats common,cmocka lapacke openblas))
UNIT_TESTS += tests/test_eplb_balance
# locusctl's GRACE subcommands (the lead links this into locusctl).
$(eval $(call LIBRARY,gracectl,control/locusctl_grace.c control/locusctl_graceset.c))
$(eval $(call PROGRAM,tests/test_grace_ctl,tests/test_grace_ctl.c tests/push_util.c,gracectl gracefit formats trace pushsrv counters shm common,cmocka lapacke openblas))
UNIT_TESTS += tests/test_grace_ctl
# Figures on the real ESFT / OLMoE routing data and the planner/fit benchmark.
$(eval $(call PROGRAM,tools/grace_figures,tools/grace_figures.c tools/grace_esft.c tools/grace_heldout.c tools/grace_olmoe.c,gracefit grace_plan formats trace common,lapacke openblas))
BENCHES += tools/grace_figures
$(eval $(call PROGRAM,tests/test_grace_heldout,tests/test_grace_heldout.c tools/grace_heldout.c,gracefit grace_plan formats common,cmocka lapacke openblas))
UNIT_TESTS += tests/test_grace_heldout
$(eval $(call PROGRAM,tools/grace_bench,tools/grace_bench.c tools/grace_plan_ref.c,gracefit grace_plan formats common,lapacke openblas))
BENCHES += tools/grace_bench
# The planner against the planner of earlier builds (the same plans) on real routings.
$(eval $(call PROGRAM,tests/test_grace_plan_ref,tests/test_grace_plan_ref.c tools/grace_plan_ref.c tests/test_paths.c,gracefit grace_plan formats trace common,cmocka lapacke openblas))
UNIT_TESTS += tests/test_grace_plan_ref
# The planner against its frozen copy and the reference, on fitted and synthetic tables.
$(eval $(call PROGRAM,tests/test_grace_plan_same,tests/test_grace_plan_same.c tests/grace_plan_frozen.c tools/grace_plan_ref.c tests/test_paths.c,gracefit grace_plan formats trace common,cmocka lapacke openblas))
UNIT_TESTS += tests/test_grace_plan_same
# Per-decoder placement against one global placement on ELDR-routed held-out requests.
$(eval $(call PROGRAM,tools/epgroups_figures,tools/epgroups_figures.c tools/epgroups_score.c,gracefit eldrfit eldr_router grace_plan formats trace common,lapacke openblas))
BENCHES += tools/epgroups_figures
# The oracle bound on rows off the GPU any placement could reach on grace_figures' held-out tokens.
$(eval $(call PROGRAM,tools/grace_bound_figures,tools/grace_bound_figures.c tools/grace_esft.c tools/grace_bound.c tools/grace_pairs.c tools/grace_heldout.c,gracefit grace_plan formats trace common,lapacke openblas))
BENCHES += tools/grace_bound_figures
$(eval $(call PROGRAM,tests/test_grace_bound,tests/test_grace_bound.c tools/grace_bound.c tools/grace_pairs.c,common,cmocka))
UNIT_TESTS += tests/test_grace_bound
