# locusd across two nodes on Soft-RoCE in a qemu guest (issue 6): see
# tools/rxe-vm/locusd-vm-test.sh. The wrapper builds the binaries it needs.
EXTRA_TESTS += tools/rxe-vm/locusd-vm-test.sh

.PHONY: test-locusd-vm bench-locusd-vm
test-locusd-vm:
	BUILD=$(BUILD) tools/rxe-vm/locusd-vm-test.sh

bench-locusd-vm:
	BUILD=$(BUILD) tools/rxe-vm/locusd-vm-test.sh --bench
BENCH_SCRIPTS += tools/rxe-vm/bench-locusd-vm.sh

# the same two nodes under faults (tools/rxe-vm/guest-faults.sh)
EXTRA_TESTS += tools/rxe-vm/faults-vm-test.sh
.PHONY: test-faults-vm
test-faults-vm:
	BUILD=$(BUILD) tools/rxe-vm/faults-vm-test.sh

# two rails per node (tools/rxe-vm/guest-rails.sh)
EXTRA_TESTS += tools/rxe-vm/rails-vm-test.sh
.PHONY: test-rails-vm
test-rails-vm:
	BUILD=$(BUILD) tools/rxe-vm/rails-vm-test.sh
