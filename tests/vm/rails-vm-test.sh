#!/bin/sh
# make test-rails-vm (and make test): two locusd nodes with two rails each on Soft-RoCE in
# the qemu guest (tests/vm/guest-rails.sh): traffic checked end to end on both rails,
# per-rail counters, bytes/s on two rails against one in the same run.
# test-timeout: 900
# (two node starts and two loadgen runs in the TCG guest; a loaded host can double their
# time, as for the faults run)
RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-880} exec "$(dirname "$0")/locusd-vm-test.sh" --rails
