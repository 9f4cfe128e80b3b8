#!/bin/bash
# The Python package against the C client on the same locusd (make bench):
# locusd's engine lcore spins alone on CPU 1 (as in tools/bench/bench_daemon.sh), the
# client on CPU 0: bench_dataplane's one thread, then tools/python/bench_python.py
# (one thread for route; for dispatch one thread per rank, all on CPU 0).
#   - route round trip at window 1 (submit, wait for the decision), the trace's
#     3.3 KiB signatures: the C client twice, submitting prebuilt signatures and
#     building each from the prompt's routed experts (locus_client_route, --build);
#     Python's Client.route() checks the routed experts and builds each one, and
#     is compared with the C client that builds them;
#   - dispatch rows/s, 4 ranks, 32 tokens x top-6 of the trace, 4 KiB and 7 KiB rows,
#     cache-hot, window 1 (a dispatch is a collective: one batch per rank in
#     flight); the C client at window 1 and at its default window 4. Python twice:
#     one thread driving the 4 ranks as the C client's one thread does
#     (Buffer.dispatch_async), then a thread per rank calling the blocking
#     Buffer.dispatch() (the 4 threads share CPU 0 and nap or yield while they wait).
#     Python's Buffer runs liblocus's collective (locus_ep.h): the C client through
#     that collective on one thread (bench_dataplane ep-dispatch, the same batches)
#     says how much of the gap to the raw C client is the collective, how much Python.
# Environment: BUILD, BENCH_SECONDS (per row, default 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build}/bin
BD=${BUILD:-build}/tools/bench/bench_dataplane
PY="/usr/bin/python3 tools/python/bench_python.py"
trace=tests/data/calib_sample.jsonl
secs=${BENCH_SECONDS:-1}
work=$(mktemp -d)
export LOCUS_SHM_DIR=$work LOCUS_STATE_DIR=$work/state
export LOCUS_LIBRARY=$PWD/${BUILD:-build}/lib/liblocus.so.0 PYTHONDONTWRITEBYTECODE=1
inst=pybench-$$
pid=
trap '[ -n "$pid" ] && { kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; }; rm -rf "$work"' EXIT

if [ "$(nproc)" -lt 2 ]; then
	echo "python bench: skipped: one CPU (locusd's engine and the client each need a core)"
	exit 0
fi
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
cat > "$work/l.conf" <<CONF
[locusd]
instance = $inst
eal_args = -l 0-1 --no-huge --no-pci -m 64
client_slots = 16
stage_size = 33554432
client_inbox_slots = 1024
load_timeout_ms = 60000
idle_spin_polls = 1000000000
idle_pause_polls = 0
idle_sleep_max_us = 0
CONF
"$B/locusctl" fit --trace $trace --decoders 4 -o "$work/eldr.tbl" >/dev/null 2>&1
"$B/locusctl" fit --grace --trace $trace --nodes 1 --gpus 4 --capacity 20 --replica-budget 4 \
	-o "$work/grace.tbl" >/dev/null
"$B/locusd" -c "$work/l.conf" > "$work/l.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
	grep -q running "$work/l.log" && break
	kill -0 $pid 2>/dev/null || { cat "$work/l.log"; exit 1; }
	sleep 0.05
done
"$B/locusctl" push -i $inst "$work/grace.tbl" >/dev/null

# field: the number after the word $1 on the line matching $2 in file $3
num_before() { awk -v w="$1" -v pat="$2" '$0 ~ pat { for (i = 2; i <= NF; i++) if ($i == w) v = $(i - 1) } END { print v + 0 }' "$3"; }
num_after() { awk -v w="$1" -v pat="$2" '$0 ~ pat { for (i = 1; i < NF; i++) if ($i == w) v = $(i + 1) } END { print v + 0 }' "$3"; }

"$BD" route -i $inst --table "$work/eldr.tbl" --trace $trace --windows 1 --seconds "$secs" \
	--cpus 0 | tee "$work/c_route"
"$BD" route -i $inst --table "$work/eldr.tbl" --trace $trace --windows 1 --seconds "$secs" \
	--cpus 0 --build | grep 'window  1' | tee "$work/c_route_b"
$PY route -i $inst --trace $trace --seconds "$secs" --cpu 0 | tee "$work/py_route"
c50=$(num_after p50 'window  1' "$work/c_route")
b50=$(num_after p50 'window  1' "$work/c_route_b")
p50=$(num_after p50 'python route' "$work/py_route")
awk -v c=$b50 -v p=$p50 'BEGIN { printf "python vs C: route round trip p50, both building the signature from the routed experts: %.2f us vs %.2f us: Python takes %.1fx the C client'"'"'s time\n", p, c, (c > 0 ? p / c : 0) }'
awk -v c=$c50 -v p=$p50 'BEGIN { printf "python vs C: route round trip p50, against the C client submitting prebuilt signatures: %.2f us vs %.2f us = %.1fx\n", p, c, (c > 0 ? p / c : 0) }'

for rb in 4096 7168; do
	"$BD" dispatch -i $inst --trace $trace --row-bytes $rb --window 1 --seconds "$secs" \
		--cpus 0 --tokens 32 | grep -v cache-cold | tee "$work/c_disp1"
	"$BD" dispatch -i $inst --trace $trace --row-bytes $rb --seconds "$secs" --cpus 0 \
		--tokens 32 | grep cache-hot | tee "$work/c_disp4"
	"$BD" ep-dispatch -i $inst --trace $trace --row-bytes $rb --tokens 32 \
		--seconds "$secs" --cpus 0 | grep -v '^where' | tee "$work/c_ep"
	$PY dispatch -i $inst --trace $trace --row-bytes $rb --tokens 32 --seconds "$secs" \
		--cpu 0 | tee "$work/py_disp"
	$PY dispatch -i $inst --trace $trace --row-bytes $rb --tokens 32 --seconds "$secs" \
		--cpu 0 --threads | tee "$work/py_disp_t"
	c1=$(num_before rows/s cache-hot "$work/c_disp1")
	c4=$(num_before rows/s cache-hot "$work/c_disp4")
	ce=$(num_before rows/s ep-dispatch "$work/c_ep")
	py=$(num_before rows/s 'python dispatch' "$work/py_disp")
	pt=$(num_before rows/s 'python dispatch' "$work/py_disp_t")
	awk -v c1=$c1 -v c4=$c4 -v p=$py -v rb=$rb 'BEGIN { printf "python vs C: dispatch %d B rows, one thread for 4 ranks each: %.0f rows/s vs %.0f (C, window 1) = %.3fx; vs %.0f (C, window 4) = %.3fx\n", rb, p, c1, (c1 > 0 ? p / c1 : 0), c4, (c4 > 0 ? p / c4 : 0) }'
	awk -v c1=$c1 -v p=$pt -v rb=$rb 'BEGIN { printf "python vs C: dispatch %d B rows, a Python thread per rank on one CPU: %.0f rows/s vs %.0f (C, window 1) = %.3fx\n", rb, p, c1, (c1 > 0 ? p / c1 : 0) }'
	awk -v c1=$c1 -v ce=$ce -v p=$py -v pt=$pt -v rb=$rb 'BEGIN { printf "python vs C: dispatch %d B rows through the same collective (C: locus_ep on one thread, %.0f rows/s = %.3fx the raw C client): Python one thread %.3fx, a thread per rank %.3fx\n", rb, ce, (c1 > 0 ? ce / c1 : 0), (ce > 0 ? p / ce : 0), (ce > 0 ? pt / ce : 0) }'
done
echo "load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
