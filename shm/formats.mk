# formats: the ELDR signature and table formats and the GRACE table format
# with their validators, the contract both planes share (pure C: no EAL,
# verbs or shm segment).
$(eval $(call LIBRARY,formats,shm/eldr_sig.c shm/eldr_table.c shm/grace_table.c \
	shm/blocks.c))
$(eval $(call PROGRAM,tests/test_eldr_sig,tests/test_eldr_sig.c,formats common,cmocka))
UNIT_TESTS += tests/test_eldr_sig

$(eval $(call PROGRAM,tests/test_blocks,tests/test_blocks.c,formats common,cmocka))
UNIT_TESTS += tests/test_blocks
