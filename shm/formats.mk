# formats: the ELDR signature and table formats, the GRACE table format and
# the GRACE placement set (one table per EP group), the signature cache's
# blocks ROUTE / EVICT requests, with their validators, the contract both
# planes share (pure C: no EAL, verbs or shm segment).
$(eval $(call LIBRARY,formats,shm/eldr_sig.c shm/eldr_table.c shm/grace_table.c \
	shm/grace_set.c shm/blocks.c))
# wire: the message header and the dispatch / combine / rows payloads, shared
# by the engine and the clients (rank clients write requests, read rows).
$(eval $(call LIBRARY,wire,shm/dispatch.c))
$(eval $(call PROGRAM,tests/test_eldr_sig,tests/test_eldr_sig.c,formats common,cmocka))
UNIT_TESTS += tests/test_eldr_sig

$(eval $(call PROGRAM,tests/test_graceset,tests/test_graceset.c tests/graceset_util.c,formats common,cmocka))
UNIT_TESTS += tests/test_graceset
$(eval $(call PROGRAM,tests/test_blocks,tests/test_blocks.c,formats common,cmocka))
UNIT_TESTS += tests/test_blocks
