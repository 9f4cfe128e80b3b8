#!/bin/bash
# engine_lcores 1 -> 2 through the real daemon with the pinned probe
# (build/tools/bench/bench_dataplane, as tools/bench/bench_daemon.sh runs it): the same
# table, traffic and idle policy, one client thread per CPU it is given.
#   route:    a prefill and 4 decoders in one client thread, windows 8 and 32
#             (with two engines the prefill is engine 0's, the decoders are
#             spread: half the signatures are handed over);
#   dispatch: 4 ranks in one client thread (ranks 0-1 on engine 0, 2-3 on
#             engine 1 with two engines), 4 KiB rows, cache-hot.
# (bench_dataplane route with several client threads checks each thread's
# deliveries against its own completions, which signatures routed to
# another thread's decoders break: one client thread here.)
# Layouts: one engine on CPU 1; two engines sharing CPU 1 (--lcores
# 0@0,1@1,2@1); two engines on CPUs 0 and 1 (--lcores 0@0,1@0,2@1, engine 0
# beside the main lcore and the client thread). On a machine with fewer
# cores than engines + client threads the engines share cores: the ratios
# then show what splitting the work costs, not how it scales
# (dataplane/README.md, "Several engines"). Figures are printed, never asserted.
# Environment: BUILD, BENCH_SECONDS (per row, default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build}/bin
BD=${BUILD:-build}/tools/bench/bench_dataplane
trace=tests/data/calib_sample.jsonl
secs=${BENCH_SECONDS:-2}
work=$(mktemp -d)
export LOCUS_SHM_DIR=$work LOCUS_STATE_DIR=$work/state
inst=bench-eng-$$
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
[ "$ncpu" -ge 2 ] || { echo "bench_engines: skipped: one CPU"; exit 0; }
"$B/locusctl" fit --trace $trace --decoders 4 -o "$work/eldr.tbl" >/dev/null 2>&1
"$B/locusctl" fit --grace --trace $trace --nodes 1 --gpus 4 --capacity 20 --replica-budget 4 \
	-o "$work/grace.tbl" >/dev/null

# $1 engines, $2 eal lcore arguments
conf() {
	cat <<CONF
[locusd]
instance = $inst
eal_args = $2 --no-huge --no-pci -m 64
engine_lcores = $1
client_slots = 16
stage_size = 33554432
client_inbox_slots = 1024
ring_size = 4096
load_timeout_ms = 60000
idle_spin_polls = 100000
idle_pause_polls = 0
idle_sleep_max_us = 20
CONF
}

run_layout() { # name engines lcores
	echo
	echo "== $1"
	conf "$2" "$3" > "$work/l.conf"
	"$B/locusd" -c "$work/l.conf" > "$work/l.log" 2>&1 &
	pid=$!
	for _ in $(seq 400); do
		grep -q running "$work/l.log" && break
		kill -0 $pid 2>/dev/null || { cat "$work/l.log"; exit 1; }
		sleep 0.05
	done
	"$B/locusctl" push -i $inst "$work/grace.tbl" >/dev/null
	"$BD" route -i $inst --table "$work/eldr.tbl" --trace $trace --windows 8,32 \
		--seconds "$secs" --cpus 0 | tee "$work/$1.r1"
	"$BD" dispatch -i $inst --trace $trace --row-bytes 4096 --seconds "$secs" --cpus 0 |
		tee "$work/$1.d"
	"$B/locus-stat" -i $inst --by-lcore poll_busy engine_handovers | grep -E '^lcore|^poll_busy|^engine_h'
	stop_locusd
}

run_layout one 1 "-l 0-1"
run_layout two-shared 2 "--lcores 0@0,1@1,2@1"
run_layout two-split 2 "--lcores 0@0,1@0,2@1"

# routes/s of window W from a route run's output, dispatch rows/s
rate() { awk -v w="$2" '$0 ~ "window +" w ":" { for (i = 1; i <= NF; i++) if ($i == "routes/s" || $i == "routes/s,") print $(i - 1) }' "$1" | head -1; }
drate() { awk '/^dispatch 4096 B rows/ { for (i = 1; i <= NF; i++) if ($i == "rows/s") { print $(i - 1); exit } }' "$1"; }
echo
echo "engine lcores 1 -> 2 (ratio to one engine on CPU 1; same run, load average $(cut -d' ' -f1-3 /proc/loadavg) after):"
for l in two-shared two-split; do
	for f in "route window 8, 1 client thread:r1:8" "route window 32, 1 client thread:r1:32"; do
		IFS=: read -r what file w <<<"$f"
		a=$(rate "$work/one.$file" "$w"); b=$(rate "$work/$l.$file" "$w")
		awk -v l=$l -v what="$what" -v a="$a" -v b="$b" 'BEGIN { printf "  %-11s %-34s %9.0f -> %9.0f /s = %.2fx\n", l, what, a, b, (a > 0 ? b / a : 0) }'
	done
	a=$(drate "$work/one.d"); b=$(drate "$work/$l.d")
	awk -v l=$l -v a="$a" -v b="$b" 'BEGIN { printf "  %-11s %-34s %9.0f -> %9.0f /s = %.2fx\n", l, "dispatch 4 KiB rows, 1 client thread", a, b, (a > 0 ? b / a : 0) }'
done
