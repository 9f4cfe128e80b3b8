#!/bin/sh
# make test-faults-vm (and make test): two locusd nodes on Soft-RoCE in the qemu guest under
# faults (tools/rxe-vm/guest-faults.sh): netem on the veth pair against the clean link, the
# link black-holed and set down under traffic, ranks killed mid-dispatch and mid-combine.
exec "$(dirname "$0")/locusd-vm-test.sh" --faults
