# GRACE planner map and dispatch planner (pure C: no EAL, verbs or shm); the
# table format is shm/formats.mk's.
$(eval $(call LIBRARY,grace_plan,dataplane/grace_map.c dataplane/grace_plan.c))
$(eval $(call PROGRAM,tests/test_grace_table,tests/test_grace_table.c,grace_plan formats common,cmocka))
$(eval $(call PROGRAM,tests/test_grace_plan,tests/test_grace_plan.c,grace_plan formats common,cmocka))
UNIT_TESTS += tests/test_grace_table tests/test_grace_plan
