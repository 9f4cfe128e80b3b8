#!/bin/bash
# tools/bench/bench_daemon.sh runs on this machine and prints every line it
# promises (a short run: BENCH_QUICK=1, 0.2 s a row). Not a timed test: no
# figure is judged, only that each row was measured and what ran where.
set -uo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_bench_daemon: $*" >&2; exit 1; }

BENCH_QUICK=1 BENCH_SECONDS=0.2 tools/bench/bench_daemon.sh > "$tmp/out" 2>&1 ||
	{ cat "$tmp/out"; fail "bench_daemon.sh failed"; }
want() {
	grep -qE "$1" "$tmp/out" || { cat "$tmp/out"; fail "no line matching: $1"; }
}
want '^machine: [0-9]+ CPUs'
# what ran where: the client thread alone on CPU 0, the engine lcore alone on CPU 1
want '^where: route client thread 0 \(tid [0-9]+\): pinned to CPU 0 by sched_getaffinity, running on CPU 0$'
want '^where: dispatch client thread \(tid [0-9]+\): pinned to CPU 0 by sched_getaffinity'
want '^where: locusd thread rte-worker-1 +\(tid [0-9]+\): allowed CPU 1, last ran on CPU 1$'
for sig in 3360 12320; do
	want "^route $sig B baseline: the pure router in-process \\(auto\\) [0-9]+ decisions/s$"
	for w in ' 1' ' 8' 32; do
		want "^route $sig B, 1 client thread, window $w: +[0-9]+ routes/s = [0-9.]+x the pure router; round trip p50 [0-9.]+ us, p99 [0-9.]+ us"
	done
done
# the 12 KiB route with eldr_precision = 8, against the 8-bit router, which locusd runs
want "^route 12320 B baseline: the pure router in-process \\(auto-i8\\) [0-9]+ decisions/s$"
[ "$(grep -c "^route 12320 B, 1 client thread, window 32: " "$tmp/out")" = 2 ] ||
	{ cat "$tmp/out"; fail "the 12 KiB route not measured with both arithmetics"; }
want '^router_path +gauge +[5-7]$'
want '^scaling: (skipped: this machine has 2 cores|client threads on CPUs 0,2)'
for rb in 4096 7168; do
	for c in hot cold; do
		want "^dispatch $rb B rows, cache-$c: 4 ranks x window 4, 32 tokens x top-6: [0-9]+ rows/s .* memcpy of the same rows .* [0-9]+ MB/s; through locusd = [0-9.]+x$"
	done
done
for p in 'pure spinning' 'deployment default' 'demo default'; do
	want "^idle policy: $p \\(idle_spin_polls = [0-9]+ idle_pause_polls = [0-9]+ idle_sleep_max_us = [0-9]+\\)$"
done
want '^idle CPU \(1.0 s after the last request, over 0.[0-9] s\): locusd [0-9.]+ % of a core, its engine lcore \(rte-worker-1'
for gap in 1 100; do
	[ "$(grep -c "^idle first request after $gap ms: round trip p50 [0-9.]* us" "$tmp/out")" = 3 ] ||
		{ cat "$tmp/out"; fail "not 3 policies measured after $gap ms"; }
done
for p in spin deploy demo; do
	want "^  $p +locusd +[0-9.]+ % of a core while idle;  1 ms: [0-9.]+ us  100 ms: [0-9.]+ us$"
done
# the spinning locusd never slept, the others did
awk '/^idle policy:/ { p = $3 } /^idle_sleeps / { print p, $3 }' "$tmp/out" > "$tmp/sleeps"
grep -qx 'pure 0' "$tmp/sleeps" || { cat "$tmp/sleeps"; fail "the spinning locusd slept"; }
grep -qE '^demo [1-9]' "$tmp/sleeps" || { cat "$tmp/sleeps"; fail "the demo policy never slept"; }
echo "test_bench_daemon: ok"
