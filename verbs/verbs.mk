# verbs/: the RDMA transport on rdma-core.
#   liblocus_verbs_core.a  pure logic (handshake encodings and MACs, ring and credit
#                          rules, sysfs device choice); the MACs are OpenSSL's (libcrypto)
#   liblocus_verbs.a       endpoint, connections, data path, memory (libibverbs,
#                          librdmacm, libnuma)
$(eval $(call LIBRARY,verbs_core,verbs/proto.c verbs/auth.c verbs/sysfs.c verbs/devmap.c,\
	common,libcrypto))
$(eval $(call LIBRARY,verbs,verbs/ep.c verbs/cm.c verbs/data.c verbs/mem.c verbs/counters.c \
	verbs/loop.c verbs/port.c verbs/dev.c,verbs_core counters common,libibverbs librdmacm numa))
