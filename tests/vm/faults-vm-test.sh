#!/bin/sh
# make test-faults-vm (and make test): two locusd nodes on Soft-RoCE in the qemu guest under
# faults (tests/vm/guest-faults.sh): netem on the veth pair against the clean link, the
# link black-holed and set down under traffic, ranks killed mid-dispatch and mid-combine.
# test-timeout: 900
# (four fault scenarios in a TCG guest, each with its traffic and recoveries: on a loaded
# host they outlast the 600 s bound of the other tests)
RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-880} exec "$(dirname "$0")/locusd-vm-test.sh" --faults
