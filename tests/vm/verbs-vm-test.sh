#!/bin/bash
# make test-verbs / make bench-verbs: run the verbs transport for real on
# Soft-RoCE in a qemu guest (TCG) booting Debian's kernel with rdma_rxe.
#   tests/vm/verbs-vm-test.sh            the cmocka suites (build/tests/verbs/vt_verbs,
#                                            vt_loop, vt_auth under tcpdump)
#   tests/vm/verbs-vm-test.sh --bench    locus vs ib_write_bw / ib_write_lat
# Builds what is missing (binaries with make, kernel + initramfs cached in
# $BUILD/rxe-vm), prints the guest's output, exits with the guest's status
# (124 when qemu hits its hard timeout). VT_FILTER (a cmocka test filter)
# and ASAN_OPTIONS are passed on to the guest.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD;; esac
WHAT=test
[ "${1:-}" = --bench ] && WHAT=bench
tools/dev/deps.sh ensure vm || exit 1
VT=$BUILD/tests/verbs/vt_verbs
VT_LOOP=$BUILD/tests/verbs/vt_loop
VT_AUTH=$BUILD/tests/verbs/vt_auth
BENCH=$BUILD/tools/bench/bench_verbs
BENCH_LOOP=$BUILD/tools/bench/bench_loop
if [ "$WHAT" = bench ]; then T=$BENCH; else T=$VT; fi
if [ "$WHAT" = bench ]; then EXTRA=$BENCH_LOOP; else EXTRA=$VT_LOOP; fi
[ "$WHAT" = bench ] || EXTRA="$EXTRA $VT_AUTH"
for t in "$T" $EXTRA; do
	[ -x "$t" ] || make --no-print-directory -j2 BUILD="${BUILD#"$ROOT"/}" "${t#"$ROOT"/}" || exit 1
done
. tests/vm/vm-image.sh
exec bash tests/vm/run-rxe-vm.sh -m 9p -a tcg -t "${RXE_VM_TIMEOUT:-540}" \
	-c "$ROOT/tests/vm/guest-verbs.sh" -w "$RXE_VM_DIR/rw" \
	RXE_VT="$VT" RXE_VT_LOOP="$VT_LOOP" RXE_VT_AUTH="$VT_AUTH" RXE_BENCH="$BENCH" RXE_BENCH_LOOP="$BENCH_LOOP" RXE_WHAT=$WHAT ${VT_FILTER:+VT_FILTER="$VT_FILTER"} \
	${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"}
