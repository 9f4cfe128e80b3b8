# formats: the ELDR signature and table formats and the GRACE table format
# with their validators, shared by both planes (pure C: no EAL, verbs or shm).
$(eval $(call LIBRARY,formats,shm/eldr_sig.c shm/eldr_table.c shm/grace_table.c))
