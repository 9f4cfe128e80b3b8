#!/bin/sh
# make bench: locusd's inter-node byte rate against ib_write_bw in the Soft-RoCE guest.
exec "$(dirname "$0")/locusd-vm-test.sh" --bench
