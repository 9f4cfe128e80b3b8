#!/bin/bash
# make test-locusd-vm / make bench-locusd-vm: two locusd nodes of one cluster
# on Soft-RoCE in a qemu guest (TCG), driven by guest-locusd.sh.
#   tests/vm/locusd-vm-test.sh           across-node traffic checked end to
#                                            end, peer killed and restarted under
#                                            traffic, wrong secret refused
#   tests/vm/locusd-vm-test.sh --bench   locusd's inter-node byte rate vs
#                                            ib_write_bw, same devices, same run
#   tests/vm/locusd-vm-test.sh --faults  the two nodes under faults
#                                            (guest-faults.sh: netem, the link
#                                            black-holed and set down, ranks
#                                            killed; faults-vm-test.sh)
#   tests/vm/locusd-vm-test.sh --rails   two rails per node (guest-rails.sh):
#                                            traffic on both, per-rail counters,
#                                            bytes/s on two rails against one
# FAULT_NETEM, FAULT_NETEM_HARSH (tc netem parameters), FAULT_FLAPS, FAULT_STEPS (of
# "F1 F2 F3") go to the guest.
# Builds what is missing (binaries with make; kernel + initramfs cached in
# $BUILD/rxe-vm, shared with verbs-vm-test.sh), prints the guest's output and
# exits with the guest's status (124 when qemu hits its hard timeout).
# The benchmark (guest-bench.sh): LV_REPEATS (3 pairs), LV_SECONDS (6 per locusd
# phase), LV_TOKENS (64 per batch), LV_ROW_BYTES (4096), LV_WINDOW (4 batches per
# rank), LV_NAP_US (100), LV_PLACEMENT (split, device, lcores), LV_VARIANTS
# ("label=locusd-path:placement ..."), LV_PERF (seconds profiled); it writes the
# host's load average into the guest's folder every 2 s. Both: LV_INBOX_SLOTS
# (client_inbox_slots, 256). The test: LV_LCORES (locusd's eal -l), LV_LOCUSD (another
# locusd build to run).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD;; esac
WHAT=test
[ "${1:-}" = --bench ] && WHAT=bench
[ "${1:-}" = --faults ] && WHAT=faults
[ "${1:-}" = --rails ] && WHAT=rails
tools/dev/deps.sh ensure vm || exit 1
REL=${BUILD#"$ROOT"/}
make --no-print-directory -j2 BUILD="$REL" "$REL/bin/locusd" "$REL/bin/locusctl" \
	"$REL/bin/locus-loadgen" "$REL/bin/locus-stat" || exit 1
. tests/vm/vm-image.sh
TABLES=
if [ $WHAT = faults ] || [ $WHAT = rails ]; then
	# the guest's step 2 fits in TCG for a minute: these runs take these instead
	TABLES=$RXE_VM_DIR/rw/tables
	mkdir -p "$TABLES"
	T=tests/data/calib_sample.jsonl
	"$BUILD/bin/locusctl" fit --trace $T --decoders 4 --seed 1 -o "$TABLES/eldr.tbl" > /dev/null 2>&1 &&
		"$BUILD/bin/locusctl" fit --grace --trace $T --nodes 2 --gpus 2 --capacity 20 \
			--replica-budget 4 -o "$TABLES/grace.tbl" > /dev/null 2>&1 ||
		{ echo "fitting the tables failed"; exit 1; }
fi
[ $WHAT = bench ] &&
	{ make --no-print-directory -j2 BUILD="$REL" "$REL/tools/bench/bench_dataplane" || exit 1; }
if [ $WHAT = bench ] || [ $WHAT = rails ]; then
	# the figures are printed beside the host's load average (the guest cannot see it)
	( while :; do cat /proc/loadavg > "$RXE_VM_DIR/rw/host-loadavg.tmp" &&
		mv "$RXE_VM_DIR/rw/host-loadavg.tmp" "$RXE_VM_DIR/rw/host-loadavg"; sleep 2; done ) &
	LOADPID=$!
	trap 'kill $LOADPID 2>/dev/null' EXIT
fi
bash tests/vm/run-rxe-vm.sh -m 9p -a tcg -t "${RXE_VM_TIMEOUT:-580}" \
	-c "$ROOT/tests/vm/guest-locusd.sh" -w "$RXE_VM_DIR/rw" \
	LV_ROOT="$ROOT" LV_BUILD="$BUILD" LV_WHAT=$WHAT ${TABLES:+LV_TABLES="$TABLES"} \
	${LV_TOKENS:+LV_TOKENS=$LV_TOKENS} \
	${LV_ROW_BYTES:+LV_ROW_BYTES=$LV_ROW_BYTES} \
	${LV_INBOX_SLOTS:+LV_INBOX_SLOTS=$LV_INBOX_SLOTS} ${LV_LCORES:+LV_LCORES=$LV_LCORES} \
	${LV_N0_ENGINES:+LV_N0_ENGINES=$LV_N0_ENGINES} \
	LV_OUT="$RXE_VM_DIR/rw" ${LV_PERF:+LV_PERF=$LV_PERF} ${LV_REPEATS:+LV_REPEATS=$LV_REPEATS} \
	${LV_SECONDS:+LV_SECONDS=$LV_SECONDS} ${LV_WINDOW:+LV_WINDOW=$LV_WINDOW} \
	${LV_NAP_US:+LV_NAP_US=$LV_NAP_US} ${LV_PLACEMENT:+LV_PLACEMENT=$LV_PLACEMENT} \
	${LV_ACK_TIMEOUT:+LV_ACK_TIMEOUT=$LV_ACK_TIMEOUT} ${LV_STALL_MS:+LV_STALL_MS=$LV_STALL_MS} \
	${LV_VARIANTS:+LV_VARIANTS="$LV_VARIANTS"} ${LV_LOCUSD:+LV_LOCUSD=$LV_LOCUSD} \
	${FAULT_NETEM:+FAULT_NETEM="$FAULT_NETEM"} \
	${FAULT_NETEM_HARSH:+FAULT_NETEM_HARSH="$FAULT_NETEM_HARSH"} \
	${FAULT_FLAPS:+FAULT_FLAPS=$FAULT_FLAPS} ${FAULT_STEPS:+FAULT_STEPS="$FAULT_STEPS"} \
	${LR_REQUESTS:+LR_REQUESTS=$LR_REQUESTS} ${LR_BATCHES:+LR_BATCHES=$LR_BATCHES} \
	${LR_TOKENS:+LR_TOKENS=$LR_TOKENS} ${LR_ROW_BYTES:+LR_ROW_BYTES=$LR_ROW_BYTES}
