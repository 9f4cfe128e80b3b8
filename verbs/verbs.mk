# verbs: RDMA transport on rdma-core (issue 3).
#   liblocus_verbs_core.a  pure logic (handshake encodings and MACs, ring/credit rules, sysfs
#                          device choice); the MACs are OpenSSL's (libcrypto): every program
#                          linking it names libcrypto among its packages
#   liblocus_verbs.a       endpoint, connections, data path, memory (libibverbs, librdmacm, libnuma)
VERBS_PKGS := libibverbs librdmacm numa
$(eval $(call LIBRARY,verbs_core,verbs/proto.c verbs/auth.c verbs/sysfs.c verbs/devmap.c))
$(eval $(call USES_PKG,verbs/auth.c,libcrypto))
$(eval $(call LIBRARY,verbs,verbs/ep.c verbs/cm.c verbs/data.c verbs/mem.c verbs/counters.c verbs/loop.c verbs/port.c verbs/dev.c))
$(eval $(call USES_PKG,verbs/ep.c verbs/cm.c verbs/data.c verbs/mem.c verbs/counters.c verbs/loop.c verbs/port.c verbs/dev.c,libibverbs librdmacm numa))

# host unit tests (no device)
$(eval $(call PROGRAM,tests/test_verbs_unit,tests/verbs/test_verbs_unit.c tests/fake_sysfs.c,verbs_core common,cmocka libcrypto))
UNIT_TESTS += tests/test_verbs_unit
$(eval $(call PROGRAM,tests/test_verbs_auth,tests/verbs/test_verbs_auth.c,verbs_core common,cmocka libcrypto))
$(eval $(call USES_PKG,tests/verbs/test_verbs_auth.c,libcrypto))
UNIT_TESTS += tests/test_verbs_auth
$(eval $(call PROGRAM,tests/test_verbs_link,tests/verbs/test_verbs_link.c,common,cmocka))
UNIT_TESTS += tests/test_verbs_link
$(eval $(call PROGRAM,tests/test_verbs_dev,tests/verbs/test_verbs_dev.c,common,cmocka))
UNIT_TESTS += tests/test_verbs_dev

# guest-side programs (run inside the Soft-RoCE VM by tools/rxe-vm/verbs-vm-test.sh)
VERBS_GUEST_LIBS := verbs verbs_core counters common
VERBS_GUEST_PKGS := cmocka libibverbs librdmacm numa libcrypto
$(eval $(call PROGRAM,tests/verbs/vt_verbs,tests/verbs/vt_verbs.c tests/verbs/vt_util.c,$(VERBS_GUEST_LIBS),$(VERBS_GUEST_PKGS)))
$(eval $(call PROGRAM,tools/bench_verbs,tools/bench_verbs.c tests/verbs/vt_util.c,$(VERBS_GUEST_LIBS),libibverbs librdmacm numa libcrypto))
$(eval $(call PROGRAM,tools/bench_loop,tools/bench_loop.c,$(VERBS_GUEST_LIBS),libibverbs librdmacm numa libcrypto))
$(eval $(call PROGRAM,tests/verbs/vt_loop,tests/verbs/vt_loop.c,$(VERBS_GUEST_LIBS),$(VERBS_GUEST_PKGS)))
$(eval $(call PROGRAM,tests/verbs/vt_auth,tests/verbs/vt_auth.c tests/verbs/vt_util.c,$(VERBS_GUEST_LIBS),$(VERBS_GUEST_PKGS)))
$(eval $(call USES_PKG,tests/verbs/vt_verbs.c tests/verbs/vt_util.c tools/bench_verbs.c tests/verbs/vt_loop.c tools/bench_loop.c tests/verbs/vt_auth.c,libibverbs librdmacm numa))
EXTRA_TESTS += tools/rxe-vm/verbs-vm-test.sh

.PHONY: test-verbs bench-verbs
test-verbs: $(BUILD)/tests/verbs/vt_verbs $(BUILD)/tests/verbs/vt_loop $(BUILD)/tests/verbs/vt_auth
	BUILD=$(BUILD) tools/rxe-vm/verbs-vm-test.sh

bench-verbs: $(BUILD)/tools/bench_verbs $(BUILD)/tools/bench_loop
	BUILD=$(BUILD) tools/rxe-vm/verbs-vm-test.sh --bench
