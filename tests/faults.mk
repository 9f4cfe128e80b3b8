# Faults injected into one host node under traffic (tests/test_faults.sh): locusctl
# killed mid-push, ranks killed mid-dispatch and mid-combine, locusd killed with
# clients attached and restarted. The Soft-RoCE ones run in make test-locusd-vm.
$(eval $(call PROGRAM,tests/client_waiter,tests/client_waiter.c,client shm common,))
EXTRA_TESTS += tests/test_faults.sh
