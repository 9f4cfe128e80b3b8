# tests/vm/: real verbs on Soft-RoCE in a qemu guest that sees the host's
# root (run-rxe-vm.sh). Each wrapper builds the binaries it needs.

# the transport: two endpoints, loopback, the handshake (guest-verbs.sh)
VM_TESTS += tests/vm/verbs-vm-test.sh
# locusd across two nodes (guest-locusd.sh)
VM_TESTS += tests/vm/locusd-vm-test.sh
# the same two nodes under faults (guest-faults.sh)
VM_TESTS += tests/vm/faults-vm-test.sh
# two rails per node (guest-rails.sh)
VM_TESTS += tests/vm/rails-vm-test.sh
# three nodes whose membership goes through etcd (guest-cluster.sh)
VM_TESTS += tests/vm/cluster-vm-test.sh

.PHONY: test-verbs bench-verbs test-locusd-vm bench-locusd-vm test-faults-vm test-rails-vm \
	test-cluster-vm
test-verbs: $(BUILD)/tests/verbs/vt_verbs $(BUILD)/tests/verbs/vt_loop $(BUILD)/tests/verbs/vt_auth
	BUILD=$(BUILD) tests/vm/verbs-vm-test.sh

bench-verbs: $(BUILD)/tools/bench/bench_verbs $(BUILD)/tools/bench/bench_loop
	BUILD=$(BUILD) tests/vm/verbs-vm-test.sh --bench

test-locusd-vm:
	BUILD=$(BUILD) tests/vm/locusd-vm-test.sh

bench-locusd-vm:
	BUILD=$(BUILD) tests/vm/locusd-vm-test.sh --bench

test-faults-vm:
	BUILD=$(BUILD) tests/vm/faults-vm-test.sh

test-rails-vm:
	BUILD=$(BUILD) tests/vm/rails-vm-test.sh

test-cluster-vm:
	BUILD=$(BUILD) tests/vm/cluster-vm-test.sh

BENCH_SCRIPTS += tests/vm/bench-locusd-vm.sh
