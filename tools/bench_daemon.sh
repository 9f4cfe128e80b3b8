#!/bin/bash
# Through the real daemon: client-to-decision latency and routed requests/s
# against the pure router in-process on the same signatures; dispatch rows
# and bytes/s against memcpy of the same rows; rows and bytes by tier from
# locus-stat. locusd runs its embedded default in a private segment directory.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}/bin
trace=tests/data/calib_sample.jsonl
work=$(mktemp -d)
export LOCUS_SHM_DIR=$work LOCUS_STATE_DIR=$work/state
pid=
trap '[ -n "$pid" ] && kill -TERM $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
"$B/locusd" > "$work/locusd.log" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q running "$work/locusd.log" && break; sleep 0.05; done
"$B/locusctl" fit --trace $trace --decoders 4 -o "$work/eldr.tbl" >/dev/null 2>&1
"$B/locusctl" fit --grace --trace $trace --nodes 1 --gpus 4 --capacity 20 --replica-budget 4 \
	-o "$work/grace.tbl" >/dev/null
"$B/locusctl" push -i default "$work/eldr.tbl" >/dev/null
"$B/locusctl" push -i default "$work/grace.tbl" >/dev/null
echo "locusd embedded default (worker lcore polls, 50 us idle sleep); 2-core machine shared"
echo "with the 9 client processes: figures are for this box, ratios are the point"
"$B/locus-loadgen" -i default --trace $trace --requests 20000 --batches 200 --tokens 64 \
	--row-bytes 4096 --eldr-table "$work/eldr.tbl"
"$B/locus-stat" -i default 'route_ns' 'dispatch_ns' 'combine_ns' 'rows' 'bytes' 'messages'
