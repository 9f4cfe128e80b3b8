# The data-plane engine (plain C over shared memory).
$(eval $(call LIBRARY,engine,dataplane/engine.c dataplane/engine_route.c \
	dataplane/engine_dispatch.c dataplane/engine_ctr.c dataplane/engine_remote.c \
	dataplane/engine_ldma.c dataplane/engine_region.c dataplane/engine_load.c \
	dataplane/engine_grace.c dataplane/engine_blocks.c dataplane/engine_cross.c \
	dataplane/engine_topo.c dataplane/relay.c))
$(eval $(call LIBRARY,node,dataplane/node.c dataplane/node_clients.c dataplane/regions.c))
# the control socket's server: table pushes from the control group
$(eval $(call LIBRARY,pushsrv,dataplane/pushsrv.c))
$(eval $(call PROGRAM,tests/test_push,tests/test_push.c tests/push_util.c,pushsrv counters shm common,cmocka))
UNIT_TESTS += tests/test_push
$(eval $(call PROGRAM,tests/test_node,tests/test_node.c tests/node_tables.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_node
$(eval $(call PROGRAM,tests/test_client_race,tests/test_client_race.c tests/node_tables.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_client_race
# who may reach what on one node, with real file modes (drops to test uids)
$(eval $(call PROGRAM,tests/test_isolation,tests/test_isolation.c tests/node_tables.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_isolation
$(eval $(call PROGRAM,tests/test_twonode,tests/test_twonode.c tests/twonode_harness.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_twonode
$(eval $(call PROGRAM,tests/test_regions,tests/test_regions.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_regions
$(eval $(call PROGRAM,tests/test_region_gather,tests/test_region_gather.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_region_gather
$(eval $(call PROGRAM,tests/test_twonode_load,tests/test_twonode_load.c tests/twonode_harness.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_twonode_load
$(eval $(call PROGRAM,tests/test_engines,tests/test_engines.c tests/node_tables.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_engines
$(eval $(call PROGRAM,tests/test_relay,tests/test_relay.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_relay
$(eval $(call PROGRAM,tests/test_graceset_node,tests/test_graceset_node.c tests/graceset_util.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_graceset_node
$(eval $(call PROGRAM,tests/test_graceset_ctl,tests/test_graceset_ctl.c tests/graceset_util.c tests/node_util.c tests/mini_json.c tests/test_paths.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
$(BUILD)/tests/test_graceset_ctl: $(BUILD)/bin/locusctl
UNIT_TESTS += tests/test_graceset_ctl
$(eval $(call PROGRAM,tests/test_engine_topo,tests/test_engine_topo.c,engine common,cmocka))
UNIT_TESTS += tests/test_engine_topo
# which rail a message to a peer takes (pure; dataplane/locus_rails.h)
$(eval $(call LIBRARY,rails,dataplane/rails.c))
$(eval $(call PROGRAM,tests/test_rails,tests/test_rails.c,rails config common,cmocka))
UNIT_TESTS += tests/test_rails
# rdma_device = auto with gpu_pci: the device nearest each GPU and the rails it gives
$(eval $(call LIBRARY,rail_devs,dataplane/rail_devs.c))
$(eval $(call PROGRAM,tests/test_rail_auto,tests/test_rail_auto.c tests/fake_sysfs.c,rail_devs verbs_core config common,cmocka libcrypto))
UNIT_TESTS += tests/test_rail_auto
# client buffer regions on every rail: a registration per rail, gather or copy per rail
$(eval $(call LIBRARY,rail_mr,dataplane/rail_mr.c))
$(eval $(call PROGRAM,tests/test_rail_mr,tests/test_rail_mr.c,rail_mr common,cmocka))
UNIT_TESTS += tests/test_rail_mr
