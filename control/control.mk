# control/: locusctl and the libraries it is built from. The control plane
# never includes a data-plane header, except the pure router and planner
# that simulate and the ELDR replay run (tests/test_layering.sh).
$(BUILD)/control/%.o: INCLUDES = -Ishm -Icontrol
$(BUILD)/control/sim.o $(BUILD)/control/sim_%.o $(BUILD)/control/eldr_replay.o \
	$(BUILD)/control/eldr_quality_sim.o $(BUILD)/control/eldr_steps.o: INCLUDES += -Idataplane

# an etcd v3 client over etcd's JSON gateway (libcurl, jansson, OpenSSL's base64)
$(eval $(call LIBRARY,etcd,control/etcd.c control/etcd_watch.c,common,libcurl jansson libcrypto))
# calibration traces: JSON Lines, ESFT, writing
$(eval $(call LIBRARY,trace,control/trace.c control/trace_json.c control/trace_write.c \
	control/trace_esft.c,common))
# the ELDR fit
$(eval $(call LIBRARY,eldrfit,control/eldr_fit.c control/eldr_mask.c control/eldr_kmeans.c \
	control/eldr_cluster.c control/eldr_subcent.c control/eldr_tau.c control/eldr_tune.c,\
	trace formats common))
# the GRACE fit: profile, spectral grouping (LAPACKE), replication, EPLB interop
$(eval $(call LIBRARY,gracefit,control/grace_profile.c control/grace_spectral.c \
	control/grace_group.c control/grace_balance.c control/grace_replicate.c \
	control/grace_swap.c control/grace_fit.c control/grace_eplb.c \
	control/grace_eplb_balance.c control/grace_epgroups.c control/grace_rebalance.c \
	control/grace_objective.c \
	control/grace_adapt.c,formats common,lapacke openblas))
# locusctl's GRACE subcommands
$(eval $(call LIBRARY,gracectl,control/locusctl_grace.c control/locusctl_graceset.c,\
	gracefit trace formats counters shm common))
# locusctl simulate: the serving simulation and its presets
$(eval $(call LIBRARY,sim,control/sim.c control/sim_preset.c,eldr_router common))
# simulate --moe: the layer model and its placements (the GRACE planner, EPLB's dispatch)
$(eval $(call LIBRARY,sim_moe,control/sim_moe.c control/sim_moe_route.c,\
	grace_plan gracefit common))
# the ELDR replay: decoder batches of a trace under a routing policy
$(eval $(call LIBRARY,eldr_replay,control/eldr_replay.c control/eldr_quality_sim.c \
	control/eldr_steps.c,\
	eldrfit eldr_router trace formats common))

# the loads record a node keeps in etcd for a rebalance of the cluster
$(eval $(call LIBRARY,cluster_loads,control/cluster_loads.c,common))
# which ranks are lost, from the members and their ranks/<node> reports
$(eval $(call LIBRARY,cluster_ranks,control/cluster_ranks.c,common,jansson))

$(eval $(call PROGRAM,bin/locusctl,control/locusctl.c control/eldr_ctl.c \
	control/eldr_ctl_fit.c control/locusctl_history.c control/locusctl_cluster.c \
	control/locusctl_recover.c control/sim_args.c control/sim_ctl.c control/sim_report.c \
	control/sim_moe_ctl.c control/sim_moe_report.c,\
	eldr_replay sim sim_moe gracectl etcd cluster_loads cluster_ranks,$(JEMALLOC)))
$(eval $(call USES_PKG,control/locusctl_cluster.c,jansson))
BINS += bin/locusctl
# ESFT's expert_scores to a calibration trace
$(eval $(call PROGRAM,bin/esft2jsonl,control/esft2jsonl.c,trace))
BINS += bin/esft2jsonl
MANPAGES += control/man/locusctl.8
