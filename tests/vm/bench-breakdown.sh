#!/bin/bash
# The inter-node benchmark over several locusd builds in one guest run
# (guest-bench.sh, LV_VARIANTS): label=commit is locusd built at that commit, and
# every variant is measured against ib_write_bw in the same guest, so their
# ratios compare.
#   tests/vm/bench-breakdown.sh [label=commit[:placement] ...]
# Without arguments: this checkout's HEAD, with the split and the lcores
# placements. Each commit's locusd is built from `git archive` in a temporary
# tree (only locusd; everything else is this checkout's); LV_REPEATS, LV_SECONDS
# and the other LV_* variables go to the guest.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD;; esac
if [ $# = 0 ]; then
	set -- split=HEAD lcores=HEAD:lcores
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$BUILD/variants"
variants=
for v in "$@"; do
	label=${v%%=*} spec=${v#*=}
	commit=${spec%%:*} placement=split
	[ "$spec" != "$commit" ] && placement=${spec#*:}
	bin=$BUILD/variants/locusd-$(git rev-parse --short=12 "$commit")
	if [ ! -x "$bin" ]; then
		rm -rf "$tmp/tree" && mkdir -p "$tmp/tree"
		git archive "$commit" | tar -x -C "$tmp/tree"
		make --no-print-directory -C "$tmp/tree" -j2 build/bin/locusd > "$tmp/build.log" 2>&1 ||
			{ tail -n 20 "$tmp/build.log"; echo "building locusd at $commit failed"; exit 1; }
		cp "$tmp/tree/build/bin/locusd" "$bin"
	fi
	echo "variant $label: locusd of $commit ($(git log -1 --format=%s "$commit" | cut -c1-70)), placement $placement"
	variants="$variants $label=$bin:$placement"
done
export LV_VARIANTS="${variants# }"
# each variant is one more benchmark run in the guest: more than the single
# benchmark's time-out
export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-$((300 + 150 * $#))}
"$ROOT/tests/vm/locusd-vm-test.sh" --bench
