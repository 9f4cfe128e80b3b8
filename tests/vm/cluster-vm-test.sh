#!/bin/bash
# make test-cluster-vm (and make test): three locusd nodes on Soft-RoCE in the qemu
# guest whose membership goes through a real etcd in the guest (guest-cluster.sh):
# nodes that find each other, one added at run time, one killed and back.
# test-timeout: 900
# Builds what is missing; the tables (ELDR for 4 decoders, GRACE for 3 nodes x 2 GPUs)
# are fitted here, not in the slow guest. Prints the guest's output and exits with its
# status (124 when qemu hits its hard timeout). LV_LEASE_S: the nodes' etcd lease.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD;; esac
tools/dev/deps.sh ensure vm || exit 1
tools/dev/deps.sh ensure check || exit 1
REL=${BUILD#"$ROOT"/}
make --no-print-directory -j2 BUILD="$REL" "$REL/bin/locusd" "$REL/bin/locusctl" \
	"$REL/bin/locus-loadgen" "$REL/bin/locus-stat" || exit 1
. tests/vm/vm-image.sh
TABLES=$RXE_VM_DIR/rw/cluster-tables
mkdir -p "$TABLES"
T=tests/data/calib_sample.jsonl
"$BUILD/bin/locusctl" fit --trace $T --decoders 4 --seed 1 -o "$TABLES/eldr.tbl" > /dev/null 2>&1 &&
	"$BUILD/bin/locusctl" fit --grace --trace $T --nodes 3 --gpus 2 --capacity 24 \
		--replica-budget 4 -o "$TABLES/grace.tbl" > /dev/null 2>&1 &&
	"$BUILD/bin/locusctl" fit --grace --trace $T --nodes 3 --gpus 2 --capacity 28 \
		--replica-budget 2 --seed 3 -o "$TABLES/grace2.tbl" > /dev/null 2>&1 ||
	{ echo "fitting the tables failed"; exit 1; }
exec bash tests/vm/run-rxe-vm.sh -m 9p -a tcg -t "${RXE_VM_TIMEOUT:-880}" \
	-c "$ROOT/tests/vm/guest-cluster.sh" -w "$RXE_VM_DIR/rw" \
	LV_ROOT="$ROOT" LV_BUILD="$BUILD" LV_TABLES="$TABLES" ${LV_LEASE_S:+LV_LEASE_S=$LV_LEASE_S}
