# dataplane/: locusd and the libraries it is built from. The routing,
# planning, rail and idle modules are plain C (no EAL, verbs or segment);
# DPDK's flags reach locusd's own files only.

# configuration parser
$(eval $(call LIBRARY,config,dataplane/config.c,common))
# the engine lcore's idle policy: spin, pause, sleep with a growing bound
$(eval $(call LIBRARY,idle,dataplane/idle.c))
# ELDR locality-band router and its scoring kernels
$(eval $(call LIBRARY,eldr_router,dataplane/eldr_router.c dataplane/eldr_router_build.c \
	dataplane/eldr_kernels.c dataplane/eldr_qkernels.c dataplane/eldr_q8kernels.c,formats common))
# GRACE planner map and dispatch planner
$(eval $(call LIBRARY,grace_plan,dataplane/grace_map.c dataplane/grace_plan.c,formats common))
# the signature cache of KV blocks' expert counts
$(eval $(call LIBRARY,sigcache,dataplane/sigcache.c dataplane/sigcache_route.c \
	dataplane/sigcache_sum.c,formats common))
# the engine: client rings, routing, dispatch and combine, tiers, relay
$(eval $(call LIBRARY,engine,dataplane/engine.c dataplane/engine_route.c \
	dataplane/engine_dispatch.c dataplane/engine_ctr.c dataplane/engine_remote.c \
	dataplane/engine_ldma.c dataplane/engine_region.c dataplane/engine_load.c \
	dataplane/engine_live.c dataplane/engine_answer.c dataplane/engine_grace.c dataplane/engine_blocks.c dataplane/engine_cross.c \
	dataplane/engine_topo.c dataplane/relay.c,\
	sigcache eldr_router grace_plan wire formats counters shm common))
# the control socket's server: table pushes from the control group
$(eval $(call LIBRARY,pushsrv,dataplane/pushsrv.c,counters shm common))
# one node's control side: attachments, reclaim, regions, tables
$(eval $(call LIBRARY,node,dataplane/node.c dataplane/node_clients.c dataplane/regions.c,\
	engine pushsrv client counters shm common))
# which rail a message to a peer takes
$(eval $(call LIBRARY,rails,dataplane/rails.c))
# rdma_device = auto with gpu_pci: the device nearest each GPU and the rails it gives
$(eval $(call LIBRARY,rail_devs,dataplane/rail_devs.c,verbs_core common))
# cluster membership through etcd: node records, leases, the watch
$(eval $(call LIBRARY,cluster,dataplane/cluster.c dataplane/cluster_record.c \
	dataplane/cluster_tables.c dataplane/cluster_prepare.c,etcd cluster_loads common,jansson))
# client buffer regions on every rail: a registration per rail, gather or copy per rail
$(eval $(call LIBRARY,rail_mr,dataplane/rail_mr.c))

# locusd: the daemon (DPDK EAL + libsystemd)
LOCUSD_SRCS := dataplane/locusd.c dataplane/locusd_net.c dataplane/locusd_net_ctr.c \
	dataplane/locusd_secret.c dataplane/locusd_loop.c dataplane/locusd_cluster.c
$(eval $(call PROGRAM,bin/locusd,$(LOCUSD_SRCS),node rails rail_devs rail_mr idle verbs config \
	cluster,\
	libdpdk libsystemd libibverbs librdmacm numa libcrypto $(JEMALLOC)))
$(eval $(call USES_PKG,dataplane/locusd.c dataplane/locusd_net.c dataplane/locusd_net_ctr.c \
	dataplane/locusd_loop.c,libdpdk libsystemd libibverbs librdmacm))
BINS += bin/locusd
MANPAGES += dataplane/man/locusd.8 dataplane/man/locusd.conf.5
