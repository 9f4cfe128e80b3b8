# client slots: region layout, the daemon's side and the client library.
$(eval $(call LIBRARY,client,shm/clients.c shm/client_attach.c shm/client_region.c shm/client_route.c \
	shm/client_blocks.c shm/client_dispatch.c))
$(eval $(call PROGRAM,tests/test_client,tests/test_client.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_client
$(eval $(call PROGRAM,tests/test_client_death,tests/test_client_death.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_client_death
$(eval $(call PROGRAM,tests/test_client_dispatch,tests/test_client_dispatch.c tests/node_tables.c tests/node_util.c,node pushsrv engine sigcache wire eldr_router grace_plan formats client counters shm config common,cmocka))
UNIT_TESTS += tests/test_client_dispatch
