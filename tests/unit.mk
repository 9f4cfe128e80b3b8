# tests/: the cmocka unit tests, by the module they test. $(call TEST,...)
# builds $(BUILD)/tests/<name> and adds it to make test-unit.
$(BUILD)/tests/%.o: INCLUDES += -Itests -Itests/oracle -Itools/eval -Itools/stat

NODE_TEST_SRCS := tests/node_util.c

# shm/: segment, table channels, counters, rings, formats, client library
$(eval $(call TEST,test_common,tests/test_common.c,common))
$(eval $(call TEST,test_ring,tests/test_ring.c,common))
$(eval $(call TEST,test_segment,tests/test_segment.c,shm))
$(eval $(call TEST,test_table,tests/test_table.c,shm))
$(eval $(call TEST,test_table_torture,tests/test_table_torture.c,shm))
$(eval $(call TEST,test_counters,tests/test_counters.c,counters))
$(eval $(call TEST,test_eldr_sig,tests/test_eldr_sig.c,formats))
$(eval $(call TEST,test_graceset,tests/test_graceset.c tests/graceset_util.c,formats))
$(eval $(call TEST,test_blocks,tests/test_blocks.c,formats))
$(eval $(call TEST,test_rows_msg,tests/test_rows_msg.c,wire))
$(eval $(call TEST,test_client,tests/test_client.c $(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_client_death,tests/test_client_death.c $(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_client_dispatch,tests/test_client_dispatch.c tests/node_tables.c \
	$(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_ep,tests/test_ep.c tests/node_tables.c $(NODE_TEST_SRCS),node config))

# dataplane/: config, idle, router, planner, signature cache, node, engines, rails
$(eval $(call TEST,test_config,tests/test_config.c,config))
$(eval $(call TEST,test_idle,tests/test_idle.c,idle))
$(eval $(call TEST,test_eldr_route,tests/test_eldr_route.c tests/eldr_rand.c,\
	eldrfit eldr_router datapaths))
$(eval $(call TEST,test_eldr_route_v2,tests/test_eldr_route_v2.c tests/eldr_rand.c,eldr_router))
$(eval $(call TEST,test_eldr_kernels,tests/test_eldr_kernels.c,\
	eldrfit eldr_router datapaths))
$(eval $(call TEST,test_grace_table,tests/test_grace_table.c,grace_plan))
$(eval $(call TEST,test_grace_plan,tests/test_grace_plan.c,grace_plan))
$(eval $(call TEST,test_grace_plan_ref,tests/test_grace_plan_ref.c,\
	oracle gracefit trace datapaths))
$(eval $(call TEST,test_grace_plan_same,tests/test_grace_plan_same.c,\
	oracle gracefit trace datapaths))
$(eval $(call TEST,test_sigcache,tests/test_sigcache.c,sigcache trace))
$(eval $(call TEST,test_push,tests/test_push.c tests/push_util.c,pushsrv))
$(eval $(call TEST,test_node,tests/test_node.c tests/node_tables.c $(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_client_race,tests/test_client_race.c tests/node_tables.c \
	$(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_isolation,tests/test_isolation.c tests/node_tables.c \
	$(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_twonode,tests/test_twonode.c tests/twonode_harness.c \
	$(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_placement_gen,tests/test_placement_gen.c tests/twonode_harness.c \
	$(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_twonode_load,tests/test_twonode_load.c tests/twonode_harness.c \
	$(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_regions,tests/test_regions.c $(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_region_gather,tests/test_region_gather.c $(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_engines,tests/test_engines.c tests/node_tables.c $(NODE_TEST_SRCS),\
	node config))
$(eval $(call TEST,test_relay,tests/test_relay.c,node config))
$(eval $(call TEST,test_sigroute,tests/test_sigroute.c $(NODE_TEST_SRCS),node config trace))
$(eval $(call TEST,test_graceset_node,tests/test_graceset_node.c tests/graceset_util.c \
	$(NODE_TEST_SRCS),node config))
$(eval $(call TEST,test_engine_topo,tests/test_engine_topo.c,engine))
$(eval $(call TEST,test_rails,tests/test_rails.c,rails config))
$(eval $(call TEST,test_rail_auto,tests/test_rail_auto.c tests/fake_sysfs.c,rail_devs config))
$(eval $(call TEST,test_rail_mr,tests/test_rail_mr.c,rail_mr common))

# control/: traces, ELDR fit, GRACE fit, EPLB, locusctl, simulate
$(eval $(call TEST,test_eldr_trace,tests/test_eldr_trace.c,trace))
$(eval $(call TEST,test_eldr_fit,tests/test_eldr_fit.c,eldrfit datapaths))
$(eval $(call TEST,test_eldr_balance,tests/test_eldr_balance.c,eldrfit datapaths))
$(eval $(call TEST,test_eldr_tau,tests/test_eldr_tau.c,eldrfit datapaths))
$(eval $(call TEST,test_eldr_tune,tests/test_eldr_tune.c,eldrfit datapaths))
$(eval $(call TEST,test_eldr_esft,tests/test_eldr_esft.c,eldrfit datapaths))
$(BUILD)/tests/test_eldr_esft: $(BUILD)/bin/esft2jsonl
$(eval $(call TEST,test_eldr_quality,tests/test_eldr_quality.c,eldr_replay))
$(eval $(call TEST,test_eldr_fit_same,tests/test_eldr_fit_same.c,eldr_replay datapaths))
$(eval $(call TEST,test_eldr_ctl,tests/test_eldr_ctl.c tests/push_util.c,\
	pushsrv trace formats datapaths))
$(BUILD)/tests/test_eldr_ctl: $(BUILD)/bin/locusctl
$(eval $(call TEST,test_grace_fit,tests/test_grace_fit.c,gracefit grace_plan))
$(eval $(call TEST,test_grace_rebalance,tests/test_grace_rebalance.c,gracefit))
$(eval $(call TEST,test_grace_adapt,tests/test_grace_adapt.c,gracefit trace formats datapaths))
$(eval $(call TEST,test_cluster_ranks,tests/test_cluster_ranks.c,cluster_ranks))
$(eval $(call TEST,test_grace_eplb,tests/test_grace_eplb.c,gracefit))
$(eval $(call TEST,test_eplb_balance,tests/test_eplb_balance.c,gracefit))
$(eval $(call TEST,test_grace_ctl,tests/test_grace_ctl.c tests/push_util.c,gracectl pushsrv))
$(eval $(call TEST,test_graceset_ctl,tests/test_graceset_ctl.c tests/graceset_util.c \
	$(NODE_TEST_SRCS) tests/mini_json.c,node config datapaths))
$(BUILD)/tests/test_graceset_ctl: $(BUILD)/bin/locusctl
$(eval $(call TEST,test_sim,tests/test_sim.c,sim eldr_replay datapaths))
$(eval $(call TEST,test_sim_moe,tests/test_sim_moe.c,sim_moe))

# tools/: locus-stat, the evaluations' shared parts
$(eval $(call TEST,test_locus_stat,tests/test_locus_stat.c tests/stat_test_run.c \
	tests/mini_json.c tests/stat_test_prom.c,counters shm))
$(eval $(call TEST,test_locus_stat_errors,tests/test_locus_stat_errors.c \
	tests/stat_test_run.c,counters shm))
$(BUILD)/tests/test_locus_stat $(BUILD)/tests/test_locus_stat_errors: $(BUILD)/bin/locus-stat
$(eval $(call TEST,test_grace_heldout,tests/test_grace_heldout.c,eval))
# the recovery fit held out on the real traces (skipped without them)
$(eval $(call TEST,test_grace_adapt_heldout,tests/test_grace_adapt_heldout.c,eval datapaths))
$(eval $(call TEST,test_grace_bound,tests/test_grace_bound.c,eval))
# locusctl rebalance against vLLM's EPLB online, replayed on the real traces (skipped without them)
$(eval $(call TEST,test_grace_online,tests/test_grace_online.c,eval datapaths))

# control/'s etcd client, against a real etcd the test starts
$(eval $(call TEST,test_etcd,tests/test_etcd.c tests/etcd_util.c,etcd))
# dataplane/'s membership agent, several nodes in one process, against a real etcd
$(eval $(call TEST,test_cluster,tests/test_cluster.c tests/etcd_util.c,cluster))
