# control/: calibration trace importer (shared with GRACE), ELDR fit, locusctl.
# The control plane never includes data-plane headers: its objects see shm/
# (the segment, the table channel, the table formats) and control/ only.
$(BUILD)/control/%.o: INCLUDES = -Ishm -Icontrol
$(eval $(call LIBRARY,trace,control/trace.c control/trace_json.c control/trace_write.c \
	control/trace_esft.c))
$(eval $(call LIBRARY,eldrfit,control/eldr_fit.c control/eldr_mask.c control/eldr_kmeans.c \
	control/eldr_cluster.c control/eldr_subcent.c control/eldr_tau.c control/eldr_tune.c))
$(eval $(call PROGRAM,bin/locusctl,control/locusctl.c control/eldr_ctl.c control/eldr_ctl_fit.c control/locusctl_history.c tools/eldr_replay.c tools/eldr_quality_sim.c tools/sim_args.c tools/sim_ctl.c tools/sim_report.c tools/sim_moe_ctl.c tools/sim_moe_report.c,sim sim_moe eldrfit eldr_router grace_plan gracectl gracefit formats trace counters shm common,lapacke openblas $(JEMALLOC)))
BINS += bin/locusctl
$(eval $(call PROGRAM,bin/esft2jsonl,tools/esft2jsonl.c,trace common,))
BINS += bin/esft2jsonl
$(eval $(call PROGRAM,tests/test_eldr_fit,tests/test_eldr_fit.c tests/test_paths.c,eldrfit formats trace common,cmocka))
UNIT_TESTS += tests/test_eldr_fit
$(eval $(call PROGRAM,tests/test_eldr_balance,tests/test_eldr_balance.c tests/test_paths.c,eldrfit formats trace common,cmocka))
UNIT_TESTS += tests/test_eldr_balance
$(eval $(call PROGRAM,tests/test_eldr_tau,tests/test_eldr_tau.c tests/test_paths.c,eldrfit formats trace common,cmocka))
$(eval $(call PROGRAM,tests/test_eldr_tune,tests/test_eldr_tune.c tests/test_paths.c,eldrfit formats trace common,cmocka))
UNIT_TESTS += tests/test_eldr_tune
UNIT_TESTS += tests/test_eldr_tau
$(eval $(call PROGRAM,tests/test_eldr_trace,tests/test_eldr_trace.c,trace common,cmocka))
UNIT_TESTS += tests/test_eldr_trace
$(eval $(call PROGRAM,tests/test_eldr_esft,tests/test_eldr_esft.c tests/test_paths.c,eldrfit formats trace common,cmocka))
$(BUILD)/tests/test_eldr_esft: $(BUILD)/bin/esft2jsonl
UNIT_TESTS += tests/test_eldr_esft
$(eval $(call PROGRAM,tests/test_eldr_ctl,tests/test_eldr_ctl.c tests/test_paths.c tests/push_util.c,formats trace pushsrv counters shm common,cmocka))
$(BUILD)/tests/test_eldr_ctl: $(BUILD)/bin/locusctl
UNIT_TESTS += tests/test_eldr_ctl
EXTRA_TESTS += tests/test_layering.sh
