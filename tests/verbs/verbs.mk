# tests/verbs/: the transport's host unit tests (no device) and the programs
# the Soft-RoCE VM runs (tests/vm/verbs-vm-test.sh).
$(BUILD)/tests/verbs/%.o: INCLUDES += -Itests/verbs
$(eval $(call TEST,test_verbs_unit,tests/verbs/test_verbs_unit.c tests/fake_sysfs.c,verbs_core))
$(eval $(call TEST,test_verbs_auth,tests/verbs/test_verbs_auth.c,verbs_core))
$(eval $(call USES_PKG,tests/verbs/test_verbs_auth.c,libcrypto))
$(eval $(call TEST,test_verbs_link,tests/verbs/test_verbs_link.c,common))
$(eval $(call TEST,test_verbs_dev,tests/verbs/test_verbs_dev.c,common))

# guest-side programs: a tiny harness around one endpoint pair
$(eval $(call LIBRARY,vt_util,tests/verbs/vt_util.c,verbs))
$(eval $(call PROGRAM,tests/verbs/vt_verbs,tests/verbs/vt_verbs.c,vt_util,cmocka))
$(eval $(call PROGRAM,tests/verbs/vt_loop,tests/verbs/vt_loop.c,verbs,cmocka))
$(eval $(call PROGRAM,tests/verbs/vt_auth,tests/verbs/vt_auth.c,vt_util,cmocka))
