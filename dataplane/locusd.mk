# locusd: the daemon (DPDK EAL + libsystemd); DPDK's flags only for this file.
$(eval $(call PROGRAM,bin/locusd,dataplane/locusd.c dataplane/locusd_net.c dataplane/locusd_net_ctr.c dataplane/locusd_secret.c dataplane/locusd_loop.c,node pushsrv rails rail_devs rail_mr engine idle sigcache wire eldr_router grace_plan formats client verbs verbs_core counters shm config common,libdpdk libsystemd libibverbs librdmacm numa libcrypto $(JEMALLOC)))
$(eval $(call USES_PKG,dataplane/locusd.c dataplane/locusd_net.c dataplane/locusd_net_ctr.c dataplane/locusd_loop.c,libdpdk libsystemd libibverbs librdmacm))
BINS += bin/locusd
EXTRA_TESTS += tests/test_locusd.sh tests/test_isolation.sh tests/test_push_kill.sh tests/test_engines.sh
$(eval $(call PROGRAM,tests/notify_listen,tests/notify_listen.c,,))
$(eval $(call PROGRAM,tests/telemetry_query,tests/telemetry_query.c,,))
