#!/bin/bash
# The data plane through the real daemon, measured so that the figures are
# locusd's and not the machine's (make bench; tests/test_bench_daemon.sh runs a
# short one):
#   - locusd's engine lcore spins alone on CPU 1 (eal_args -l 0-1: the main
#     lcore and DPDK's control threads on CPU 0, asleep most of the time);
#   - ONE client thread (build/tools/bench/bench_dataplane) pinned to CPU 0 holds
#     every attachment (the prefill and the 4 decoders; or the 4 ranks) and
#     polls them all without sleeping. Never more spinning threads than cores;
#   - route: round trip at window 1 (p50/p99), routes/s at windows 8 and 32,
#     3.3 KiB signatures (the repository's sample, 26 x 64) and 12 KiB
#     (synthetic, 48 x 128), against the pure router in-process on the same
#     signatures; with more than 2 cores, client threads are added one per
#     core and the scaling printed;
#   - dispatch: rows of 4 KiB and 7 KiB, cache-hot and cache-cold, against
#     memcpy of the same rows with the same working sets;
#   - idle: for pure spinning, the deployment default and the demo's default
#     idle policy, locusd's CPU while idle and the first request's round trip
#     after 1 ms / 100 ms / 1 s without any;
#   - ROUTE against ROUTE_BLOCKS through locus-loadgen (its processes nap);
#   - the 12 KiB route again with eldr_precision = 8 (the router's 8-bit
#     arithmetic) against the pure 8-bit router.
# What ran where is printed from sched_getaffinity and /proc.
# Environment: BUILD, BENCH_SECONDS (per row, default 1), BENCH_QUICK=1 (short
# idle gaps, no ROUTE_BLOCKS runs: the test's setting).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build}/bin
BD=${BUILD:-build}/tools/bench/bench_dataplane
trace=tests/data/calib_sample.jsonl
secs=${BENCH_SECONDS:-1}
quick=${BENCH_QUICK:-0}
work=$(mktemp -d)
export LOCUS_SHM_DIR=$work LOCUS_STATE_DIR=$work/state
inst=bench-$$
pid=
stop_locusd() {
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=
}
trap 'stop_locusd; rm -rf "$work"' EXIT

ncpu=$(nproc)
echo "machine: $ncpu CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
if [ "$ncpu" -lt 2 ]; then
	echo "bench_daemon: skipped: one CPU (locusd's engine and the client each need a core)"
	exit 0
fi

# base config: room for cache-cold dispatch (32 MiB stages, 16 MiB inboxes),
# decoders that stay up through the idle gaps; $1: the idle policy's lines
conf() {
	cat <<CONF
[locusd]
instance = $inst
eal_args = -l 0-1 --no-huge --no-pci -m 64
client_slots = 16
stage_size = 33554432
client_inbox_slots = 1024
load_timeout_ms = 60000
$1
CONF
}
spin_policy="idle_spin_polls = 1000000000
idle_pause_polls = 0
idle_sleep_max_us = 0"

# start_locusd NAME: locusd on $work/NAME.conf; prints what runs where
start_locusd() {
	"$B/locusd" -c "$work/$1.conf" > "$work/$1.log" 2>&1 &
	pid=$!
	for _ in $(seq 200); do
		grep -q running "$work/$1.log" && return 0
		kill -0 $pid 2>/dev/null || break
		sleep 0.05
	done
	cat "$work/$1.log"
	exit 1
}
where_locusd() {
	for t in /proc/$pid/task/*; do
		# field 39 of stat: the CPU it last ran on (after the name in parentheses)
		printf 'where: locusd thread %-16s (tid %s): allowed CPU %s, last ran on CPU %s\n' \
			"$(cat "$t/comm")" "${t##*/}" \
			"$(awk '/Cpus_allowed_list/ { print $2 }' "$t/status")" \
			"$(sed 's/.*) //' "$t/stat" | awk '{ print $37 }')"
	done
}

"$B/locusctl" fit --trace $trace --decoders 4 -o "$work/eldr.tbl" >/dev/null 2>&1
"$B/locusctl" fit --grace --trace $trace --nodes 1 --gpus 4 --capacity 20 --replica-budget 4 \
	-o "$work/grace.tbl" >/dev/null

echo
echo "== the data plane: engine lcore spinning on CPU 1, one client thread on CPU 0"
conf "$spin_policy" > "$work/spin.conf"
start_locusd spin
"$B/locusctl" push -i $inst "$work/grace.tbl" >/dev/null
"$BD" route -i $inst --table "$work/eldr.tbl" --trace $trace --seconds "$secs" --cpus 0
"$BD" route -i $inst --layers 48 --experts 128 --decoders 4 --seconds "$secs" --cpus 0
where_locusd
if [ "$ncpu" -gt 2 ]; then
	cpus=0
	for c in $(seq 2 $((ncpu - 1))); do
		cpus="$cpus,$c"
		echo "scaling: client threads on CPUs $cpus"
		"$BD" route -i $inst --layers 48 --experts 128 --decoders 4 --windows 8,32 \
			--seconds "$secs" --cpus "$cpus"
	done
else
	echo "scaling: skipped: this machine has $ncpu cores, one for locusd's engine lcore and" \
		"one for the client thread (a second client thread would spin on a shared core)"
fi
"$BD" dispatch -i $inst --trace $trace --row-bytes 4096,7168 --seconds "$secs" --cpus 0
"$B/locus-stat" -i $inst 'rows' 'route_ns' 'dispatch_ns' 'rejected_*' | grep -v ' 0 (all'

if [ "$quick" = 0 ]; then
	# The signature cache through the daemon: ROUTE of full signatures against
	# ROUTE_BLOCKS naming a 10-block head per domain as cached (177-token
	# prompts: 160 tokens, 90.4 %, in cached blocks; one new block, a 1-token
	# tail), same daemon and table, signatures only; the decoders check every
	# delivered signature against the whole prompt's. Best of 3 alternating
	# runs; locus-loadgen's 5 processes nap on an empty ring, on CPU 0.
	echo
	echo "== signature cache: locus-loadgen's processes on CPU 0 (they build and check the"
	echo "   requests: client-bound), locusd's engine lcore on CPU 1"
	"$B/locusctl" push -i $inst "$work/eldr.tbl" >/dev/null
	best() { awk '/routed requests\/s/ { for (i = 1; i <= NF; i++) if ($i == "routed") v = $(i - 1) }
		END { print v + 0 }'; }
	plain=0 blocks=0
	for run in 1 2 3; do
		for pb in 0 10; do
			r=$(taskset -c 0 "$B/locus-loadgen" -i $inst --trace $trace --requests 20000 \
				--ranks 0 --batches 0 --prefix-blocks $pb | tee "$work/sc.out" | best)
			grep -q 'loadgen: ok' "$work/sc.out" || { cat "$work/sc.out"; exit 1; }
			[ $pb = 0 ] && plain=$(awk -v a=$plain -v b=$r 'BEGIN { print (b > a ? b : a) }')
			[ $pb = 10 ] && blocks=$(awk -v a=$blocks -v b=$r 'BEGIN { print (b > a ? b : a) }')
		done
	done
	grep 'signature cache:' "$work/sc.out"
	awk -v p=$plain -v b=$blocks 'BEGIN { printf "through locusd: ROUTE %.0f routed/s, ROUTE_BLOCKS " \
		"(90.4 %% cached) %.0f routed/s = %.2fx\n", p, b, (p > 0 ? b / p : 0) }'
	"$B/locus-stat" -i $inst sigcache_hits sigcache_misses route_blocks_partial 'rejected_blocks'
fi
stop_locusd

# The 12 KiB route again with the router's 8-bit arithmetic (eldr_precision =
# 8), against the pure 8-bit router in-process: same placement, same client.
echo
echo "== the 12 KiB route with eldr_precision = 8: engine lcore on CPU 1, one client thread on CPU 0"
conf "$spin_policy
eldr_precision = 8" > "$work/spin8.conf"
start_locusd spin8
"$BD" route -i $inst --layers 48 --experts 128 --decoders 4 --seconds "$secs" --cpus 0 \
	--path auto-i8
"$B/locus-stat" -i $inst router_path
stop_locusd

# The idle policies, pure spinning first. The deployment default is
# deploy/default.conf's (the compiled-in one, test_config checks); the demo's
# the embedded default's (locusd --print-default).
echo
echo "== idle: locusd's CPU while no request comes, and the first request after a gap"
if [ "$quick" = 0 ]; then
	gaps="--gaps 1,100,1000 --repeats 20,8,3 --cpu-seconds 3"
else
	gaps="--gaps 1,100 --repeats 3,2 --cpu-seconds 0.5"
fi
demo_policy=$("$B/locusd" --print-default | grep '^idle_')
deploy_policy=$(grep '^idle_' deploy/default.conf)
for p in spin deploy demo; do
	case $p in
	spin) conf "$spin_policy" > "$work/$p.conf"; what="pure spinning" ;;
	deploy) conf "$deploy_policy" > "$work/$p.conf"; what="deployment default" ;;
	demo) conf "$demo_policy" > "$work/$p.conf"; what="demo default" ;;
	esac
	start_locusd $p
	"$B/locusctl" push -i $inst "$work/eldr.tbl" >/dev/null
	echo "idle policy: $what ($(grep -h '^idle_' "$work/$p.conf" | tr '\n' ' ' | sed 's/ $//'))"
	"$BD" idle -i $inst --pid $pid --trace $trace $gaps --cpus 0 | tee "$work/idle.$p"
	"$B/locus-stat" -i $inst idle_sleeps idle_sleep_ns poll_iterations poll_busy |
		awk '$2 == "counter" || $3 == "counter"'
	stop_locusd
done
echo
echo "idle summary (the same run; round trips p50 of the first request after each gap):"
for p in spin deploy demo; do
	awk -v p=$p '/^idle CPU/ { for (i = 1; i <= NF; i++) if ($i == "locusd") cpu = $(i + 1) }
		/^idle first request after/ { lat = lat sprintf("  %s ms: %s us", $5, $10) }
		END { printf "  %-7s locusd %6s %% of a core while idle;%s\n", p, cpu, lat }' "$work/idle.$p"
done
echo "load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
