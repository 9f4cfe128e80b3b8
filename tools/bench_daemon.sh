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
	--row-bytes 4096 --eldr-table "$work/eldr.tbl" | tee "$work/lg.out"
"$B/locus-stat" -i default 'route_ns' 'dispatch_ns' 'combine_ns' 'rows' 'bytes' 'messages'
# per tier: rows and bytes over the dispatch phase loadgen timed (rows out / rows/s)
secs=$(awk '/^dispatch:/ { for (i = 1; i <= NF; i++) { if ($i == "out,") r = $(i - 2)
	if ($i == "rows/s") v = $(i - 1) } } END { print (v > 0 ? r / v : 0) }' "$work/lg.out")
echo "per tier over the $secs s dispatch phase:"
"$B/locus-stat" -i default -p rows bytes | awk -v s="$secs" '
	/^locus_(rows|bytes)_total\{/ {
		split($1, a, "[{}]"); op = a[2] ~ /op="0"/ ? "dispatch" : "combine"
		t = a[2]; sub(/.*tier="/, "", t); sub(/".*/, "", t)
		k = op " tier " t; if (a[1] == "locus_rows_total") rows[k] = $2; else bytes[k] = $2
	}
	END {
		name["0"] = "same GPU (handed over)"; name["1"] = "intra-node"; name["2"] = "inter-node"
		for (k in rows) { split(k, b, " "); if (s > 0 && rows[k] > 0)
			printf "  %-8s %-24s %10.0f rows/s %9.1f MB/s\n", b[1], name[b[3]],
			       rows[k] / s, bytes[k] / s / 1e6 }
	}' | sort
# The signature cache through the daemon: ROUTE of full signatures against
# ROUTE_BLOCKS naming a 10-block head per domain as cached (177-token
# prompts: 160 tokens, 90.4 %, in cached blocks; one new block, a 1-token
# tail), same daemon and table, signatures only; the decoders check every
# delivered signature against the whole prompt's. Best of 3 alternating runs.
echo "signature cache: locusd's worker lcore polls on CPU 1, loadgen's 5 processes on CPU 0"
echo "(they build and check the requests: client-bound on this box)"
best() { awk '/routed requests\/s/ { for (i = 1; i <= NF; i++) if ($i == "routed") v = $(i - 1) }
	END { print v + 0 }'; }
plain=0 blocks=0
for run in 1 2 3; do
	for pb in 0 10; do
		sleep 1 # the previous run's decoders are reclaimed
		r=$(taskset -c 0 "$B/locus-loadgen" -i default --trace $trace --requests 20000 \
			--ranks 0 --batches 0 --prefix-blocks $pb | tee "$work/sc.out" | best)
		grep -q 'loadgen: ok' "$work/sc.out" || { cat "$work/sc.out"; exit 1; }
		[ $pb = 0 ] && plain=$(awk -v a=$plain -v b=$r 'BEGIN { print (b > a ? b : a) }')
		[ $pb = 10 ] && blocks=$(awk -v a=$blocks -v b=$r 'BEGIN { print (b > a ? b : a) }')
	done
done
grep 'signature cache:' "$work/sc.out"
awk -v p=$plain -v b=$blocks 'BEGIN { printf "through locusd: ROUTE %.0f routed/s, ROUTE_BLOCKS " \
	"(90.4 %% cached) %.0f routed/s = %.2fx\n", p, b, (p > 0 ? b / p : 0) }'
"$B/locus-stat" -i default sigcache_hits sigcache_misses route_blocks_partial 'rejected_blocks'
