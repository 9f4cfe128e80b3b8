# tests/oracle/: the GRACE planner's rules written plainly, the reference the
# planner is checked against (tests) and measured against (tools/bench/).
$(BUILD)/tests/oracle/%.o: INCLUDES += -Itests/oracle
$(eval $(call LIBRARY,oracle,tests/oracle/grace_plan_ref.c,grace_plan formats common))
