#!/bin/bash
# The README's main job: on one machine, with no RDMA hardware and nothing
# from outside the repository, start locusd on its embedded default (one node,
# four ranks, shared-memory tiers), fit ELDR and GRACE tables from the repo's
# calibration sample, push them, drive prefill / decode / expert-parallel
# traffic through the client API, push a new table mid-run, and show the
# counters. Exits non-zero if anything is lost, corrupt or refused.
#
#   tools/demo/demo.sh            (make demo: installs packages and builds first)
# Environment: BUILD (default build), LOCUS_SHM_DIR (default /dev/shm),
# DEMO_REQUESTS (default 4000), DEMO_BATCHES (default 60).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD:-build}
B=$BUILD_DIR/bin
trace=tests/data/calib_sample.jsonl
work=$(mktemp -d)
inst=default
pid=
cleanup() {
	[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n== %s\n' "$*"; }

step "start locusd (embedded default: instance $inst, 1 node x 4 ranks, shared-memory tiers)"
"$B/locusd" > "$work/locusd.log" 2>&1 &
pid=$!
# locusd says "running" once the segment takes clients
for _ in $(seq 200); do
	grep -q 'running' "$work/locusd.log" && break
	kill -0 $pid 2>/dev/null || { cat "$work/locusd.log"; exit 1; }
	sleep 0.05
done
grep 'running' "$work/locusd.log" || { cat "$work/locusd.log"; exit 1; }

step "fit the ELDR decode-routing table (4 decoders) from $trace"
"$B/locusctl" fit --trace $trace --decoders 4 --seed 1 -o "$work/eldr1.tbl"
step "fit the GRACE placement (1 node x 4 GPUs, 20 experts per GPU at most, 4 replica slots)"
"$B/locusctl" fit --grace --trace $trace --nodes 1 --gpus 4 --capacity 20 --replica-budget 4 \
	-o "$work/grace.tbl" > "$work/grace.txt"
head -n 8 "$work/grace.txt"
echo "   ... (26 layers)"
step "push both tables"
"$B/locusctl" push -i $inst "$work/eldr1.tbl"
"$B/locusctl" push -i $inst "$work/grace.tbl"
step "refit ELDR with another seed and a wider band, to push under traffic"
"$B/locusctl" fit --trace $trace --decoders 4 --seed 7 --tau 0.15 -o "$work/eldr2.tbl" \
	| tail -n 1

step "traffic: 1 prefill, 4 decoders, 4 expert-parallel ranks; new ELDR table mid-run"
"$B/locus-loadgen" -i $inst --trace $trace --decoders 4 --ranks 4 \
	--requests "${DEMO_REQUESTS:-4000}" --batches "${DEMO_BATCHES:-60}" --tokens 32 \
	--row-bytes 2048 --midway-cmd "$B/locusctl push -i $inst $work/eldr2.tbl"

step "locus-stat"
"$B/locus-stat" -i $inst 'route*' 'routed' 'decoder_*' 'rejected_*' 'dispatch_*' \
	'combine_*' 'rows' 'bytes' 'messages' 'table_*' 'clients_*'

# what the demo promises, checked
json=$("$B/locus-stat" -i $inst --json)
gen=$(printf '%s' "$json" | tr -d ' \n' | grep -o '"name":"table_generation"[^}]*' |
	grep -o '"values":\[[0-9,]*' || true)
# ELDR at generation 2 (the mid-run push), GRACE at 1
[ "$gen" = '"values":[2,1' ] || { echo "demo: table generations are not [2,1]: $gen"; exit 1; }
# every refusal counter is an error, except a full decoder inbox: back-pressure
# that loadgen answered by sending again (it fails the run if any request is lost)
errs=$("$B/locus-stat" -i $inst 'rejected_*' 'client_protocol_errors' 'table_rejected' --json |
	tr -d ' \n' | grep -o '"name":"[a-z_]*"[^}]*' | grep -v '"name":"rejected_inbox_full"' |
	grep -E '"value":[1-9]|"values":\[[0-9,]*[1-9]' || true)
[ -z "$errs" ] || { echo "demo: non-zero error counters: $errs"; exit 1; }

echo
echo "demo: the loadgen figures above are this machine's, not the data plane's: 9 client"
echo "      processes that nap 20-50 us between polls share $(nproc) cores with locusd, and"
echo "      each check every byte they get. The data plane's own speed follows."
step "the data plane: one client thread pinned to CPU 0 (the prefill and the 4 decoders), locusd's engine lcore on CPU 1"
if [ "$(nproc)" -ge 2 ]; then
	# the same daemon and table (in force since the mid-run push); the engine spins
	# while requests keep coming (its idle policy sleeps only after 20000 empty polls)
	"$BUILD_DIR/tools/bench/bench_dataplane" route -i $inst --table "$work/eldr2.tbl" --no-push \
		--trace $trace --windows 1,8 --seconds 0.5 --cpus 0 | grep -v '^where: route baseline'
	echo "   (tools/bench/bench_daemon.sh, in make bench: 12 KiB signatures, dispatch against memcpy, idle)"
else
	echo "   skipped: one CPU (the client thread and locusd's engine lcore each need a core)"
fi

step "stop locusd (SIGTERM: drain, remove the segment)"
kill -TERM $pid
wait $pid
pid=
tail -n 2 "$work/locusd.log"
if "$B/locus-stat" -i $inst >/dev/null 2>&1; then echo "demo: segment still there"; exit 1; fi
echo
echo "demo: ok"
