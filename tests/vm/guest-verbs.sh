#!/bin/sh
# Runs INSIDE the qemu guest (host root over 9p, chroot'ed). Sets up
#   rxe0 on dummy0 (192.0.2.1)               one device, loopback tests
#   rxex on vx (192.0.2.20), rxey on vy (.21) two "nodes" on a veth pair in the
#       initial namespace (rxe on 6.1 answers RoCE only there), policy routing
#       so traffic between the two local addresses really crosses the pair
# then runs $RXE_VT (the cmocka suite), $RXE_VT_LOOP and $RXE_VT_AUTH under
# tcpdump (guest-auth.sh) or, with RXE_WHAT=bench, $RXE_BENCH next to
# perftest. Exit status = the tests' status.
set -u
T=${RXE_T:-420}
fail() { echo "GUEST SETUP FAILED: $*"; exit 1; }
ip link set lo up
ip link add dummy0 type dummy || fail "dummy0"
ip addr add 192.0.2.1/24 dev dummy0 && ip link set dummy0 up || fail "dummy0 addr"
rdma link add rxe0 type rxe netdev dummy0 || fail "rxe0"
. "$(dirname "$0")/guest-veth.sh"
rdma link show
ulimit -l unlimited 2>/dev/null
VX0=$(ip -s link show vx | awk '/TX:/{getline; print $1}')
if [ "${RXE_WHAT:-test}" = bench ]; then
	timeout $T "$RXE_BENCH"; rc=$?
	if [ -n "${RXE_BENCH_LOOP:-}" ]; then
		timeout $T "$RXE_BENCH_LOOP" rxe0 || rc=1
	fi
else
	timeout $T "$RXE_VT"; rc=$?
	if [ -z "${VT_FILTER:-}" ] && [ -n "${RXE_VT_LOOP:-}" ]; then
		timeout $T "$RXE_VT_LOOP" || rc=1
	fi
	# the handshake under tcpdump: the secret never on the wire, replays refused
	if [ -z "${VT_FILTER:-}" ] && [ -n "${RXE_VT_AUTH:-}" ]; then
		. "$(dirname "$0")/guest-auth.sh"
	fi
fi
VX1=$(ip -s link show vx | awk '/TX:/{getline; print $1}')
echo "veth vx TX bytes during the run: $((VX1 - VX0))"
# the veth test must really have crossed the pair (not a local shortcut)
if [ "${RXE_WHAT:-test}" = test ] && [ -z "${VT_FILTER:-}" ] && [ $((VX1 - VX0)) -lt 1000000 ]; then
	echo "FAIL: under 1 MB crossed the veth pair"; rc=1
fi
dmesg | grep -iE 'rxe|rdma' | tail -n 5 | sed 's/^/  [dmesg] /'
echo "GUEST RESULT rc=$rc"
exit $rc
