# GRACE placement table and dispatch planner (pure C: no EAL, verbs or shm).
$(eval $(call LIBRARY,grace,dataplane/grace_plan.c))
$(eval $(call PROGRAM,tests/test_grace_table,tests/test_grace_table.c,grace formats common,cmocka))
$(eval $(call PROGRAM,tests/test_grace_plan,tests/test_grace_plan.c,grace formats common,cmocka))
UNIT_TESTS += tests/test_grace_table tests/test_grace_plan
