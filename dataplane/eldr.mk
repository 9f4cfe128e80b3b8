# ELDR: signatures, table payload, locality-band router (pure C, no EAL).
$(eval $(call LIBRARY,eldr,dataplane/eldr_sig.c dataplane/eldr_table.c \
	dataplane/eldr_router.c dataplane/eldr_kernels.c))
