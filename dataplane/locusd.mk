# locusd: the daemon (DPDK EAL + libsystemd); DPDK's flags only for this file.
$(eval $(call PROGRAM,bin/locusd,dataplane/locusd.c,node engine wire eldr grace client counters shm config common,libdpdk libsystemd))
$(eval $(call USES_PKG,dataplane/locusd.c,libdpdk libsystemd))
BINS += bin/locusd
EXTRA_TESTS += tests/test_locusd.sh
