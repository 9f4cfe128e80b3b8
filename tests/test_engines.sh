#!/bin/bash
# locusd with two engine lcores (engine_lcores = 2) on three EAL lcores. This
# box may have two cores: --lcores 0@0,1@1,2@1 puts both engines on CPU 1
# (oversubscribed: right for correctness with idle sleeps on, says nothing of
# speed). locus-loadgen's prefill, 4 decoders and 4 ranks check every byte:
#   1. traffic across the engines (ranks 0-1 on engine 0, 2-3 on engine 1;
#      prefill and decoders spread): ok, hand-overs counted, both engines
#      busy, locus-stat --by-lcore shows them apart;
#   2. rank 3 (engine 1) killed by SIGKILL right after a DISPATCH while the
#      others deliver to it, a new process attaching as rank 3: the run ends
#      ok (nothing lost, duplicated or corrupt), the slot is reclaimed and no
#      inbox slot stays used;
#   3. a table pushed while both engines carry traffic: adopted, the run ok;
#   4. engine_lcores = 2 without a second worker lcore is refused with the
#      reason, and so is it on a cluster of two nodes;
#   5. gpu_pci places each GPU's ranks on an engine of its NUMA node (a sysfs
#      tree of the test's own), said in the log; traffic ok; a GPU the
#      machine does not have is refused.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}/bin
tmp=$(mktemp -d)
export LOCUS_SHM_DIR=$tmp/shm LOCUS_STATE_DIR=$tmp/state
mkdir -p "$LOCUS_SHM_DIR" "$LOCUS_STATE_DIR"
inst=eng-t$$
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_engines: $*" >&2; exit 1; }
trace=tests/data/calib_sample.jsonl
LG=("$B/locus-loadgen" -i "$inst" --trace "$trace" --decoders 4 --ranks 4)
ctr() { # counter summed over the lcores
	"$B/locus-stat" -i "$inst" "$1" | awk -v n="$1" '$1 == n { print $3 }'
}
reclaimed() {
	for _ in $(seq 400); do
		[ "$(ctr clients_attached)" = 0 ] && return 0
		sleep 0.025
	done
	fail "the previous run's clients were not reclaimed within 10 s"
}

cat > "$tmp/a.conf" <<CONF
[locusd]
instance = $inst
eal_args = --lcores 0@0,1@1,2@1 --no-huge --no-pci -m 64
engine_lcores = 2
idle_spin_polls = 20000
idle_pause_polls = 0
idle_sleep_max_us = 50
client_slots = 16
client_inbox_slots = 256
sig_cache_bytes = 4194304
CONF
"$B/locusctl" fit --trace $trace --decoders 4 --seed 1 -o "$tmp/e.tbl" > /dev/null 2>&1 ||
	fail "fit eldr"
"$B/locusctl" fit --grace --trace $trace --nodes 1 --gpus 4 --capacity 20 --replica-budget 4 \
	-o "$tmp/g.tbl" > /dev/null 2>&1 || fail "fit grace"
# start CONF LOG [ENV=VALUE...]: locusd in the background ($pid), waited for (20 s at most)
start() {
	local conf=$1 log=$2
	shift 2
	env "$@" "$B/locusd" -c "$conf" > "$log" 2>&1 &
	pid=$!
	for _ in $(seq 400); do
		grep -q "instance $inst running" "$log" && return 0
		kill -0 $pid 2>/dev/null || { cat "$log"; fail "locusd ($conf) exited"; }
		sleep 0.05
	done
	fail "locusd ($conf) did not run within 20 s: $(cat "$log")"
}
start "$tmp/a.conf" "$tmp/d.log"
grep -q '2 engine lcores (1 .. 2)' "$tmp/d.log" || fail "$(cat "$tmp/d.log")"
"$B/locusctl" push -i "$inst" "$tmp/e.tbl" > /dev/null &&
	"$B/locusctl" push -i "$inst" "$tmp/g.tbl" > /dev/null || fail "push"

# 1. traffic across the engines
timeout 120 "${LG[@]}" --requests 2000 --batches 200 > "$tmp/1.out" 2>&1 ||
	{ cat "$tmp/1.out"; fail "run across two engines"; }
grep -q '^loadgen: ok$' "$tmp/1.out" || fail "$(cat "$tmp/1.out")"
grep -q '2000 delivered to decoders, 2000 verified' "$tmp/1.out" || fail "$(cat "$tmp/1.out")"
grep -q 'checks: 0 corrupt, 0 duplicate' "$tmp/1.out" || fail "$(cat "$tmp/1.out")"
h=$(ctr engine_handovers)
[ "${h:-0}" -gt 0 ] || fail "no hand-over between the engines"
# by lcore: block 0 and 2 are the engines, both handled work, both took hand-overs
"$B/locus-stat" -i "$inst" --by-lcore --json poll_busy engine_handovers engines > "$tmp/bl.json" ||
	fail "locus-stat --by-lcore"
python3 - "$tmp/bl.json" <<'PY' || fail "by lcore: $(cat "$tmp/bl.json")"
import json, sys
blocks = [json.loads(l) for l in open(sys.argv[1])]
val = lambda b, n: next(m["value"] for m in b["metrics"] if m["name"] == n)
eng = [b for b in blocks if b["lcore"].startswith("engine")]
assert [b["lcore"] for b in blocks] == ["engine 0", "main", "engine 1"], blocks
assert all(val(b, "poll_busy") > 0 and val(b, "engine_handovers") > 0 for b in eng)
assert val(blocks[1], "poll_busy") == 0
print("test_engines: by lcore: " + ", ".join("%s busy %d, hand-overs %d" % (
    b["lcore"], val(b, "poll_busy"), val(b, "engine_handovers")) for b in eng))
PY
echo "test_engines: 2000 signatures and 200 x 4 batches across two engines, $h hand-overs"

# 2. rank 3 (engine 1) dies while the others deliver to it; a new rank 3 takes over
reclaimed
r0=$(ctr clients_reclaimed)
timeout 120 "${LG[@]}" --requests 1000 --batches 200 --allow-errors --batch-ms 200 \
	--kill-rank 3:dispatch:50 --respawn > "$tmp/2.out" 2>&1 ||
	{ cat "$tmp/2.out"; fail "a rank killed under traffic"; }
grep -q '^loadgen: ok$' "$tmp/2.out" || fail "$(cat "$tmp/2.out")"
grep -q 'checks: 0 corrupt, 0 duplicate' "$tmp/2.out" || fail "$(cat "$tmp/2.out")"
reclaimed
[ "$(ctr clients_reclaimed)" -gt "${r0:-0}" ] || fail "the killed rank's slot was not reclaimed"
for _ in $(seq 100); do [ "$(ctr inbox_slots_used)" = 0 ] && break; sleep 0.02; done
[ "$(ctr inbox_slots_used)" = 0 ] || fail "inbox slots left used: $(ctr inbox_slots_used)"
echo "test_engines: rank 3 killed on engine 1 under traffic: $(grep '^allowed errors' "$tmp/2.out")"

# 3. a table pushed while both engines carry traffic
reclaimed
"${LG[@]}" --requests 4000 --batches 400 \
	--midway-cmd "$B/locusctl push -i $inst $tmp/e.tbl" > "$tmp/3.out" 2>&1 ||
	{ cat "$tmp/3.out"; fail "push under traffic"; }
grep -q '^loadgen: ok$' "$tmp/3.out" || fail "$(cat "$tmp/3.out")"
gen=$("$B/locus-stat" -i "$inst" 'table_generation' | awk '$1 == "table_generation{channel=0}" { print $3 }')
[ "${gen:-0}" = 2 ] || fail "ELDR generation after the push: ${gen:-none}"
"$B/locus-stat" -i "$inst" table_rejected | grep -q 'table_rejected{channel=\*} *counter *0 (all' ||
	fail "a table was rejected: $("$B/locus-stat" -i "$inst" table_rejected)"
echo "test_engines: ELDR table pushed under traffic on both engines: generation $gen"
kill -TERM $pid
wait $pid 2>/dev/null
pid=

# 4. refusals
sed 's/^eal_args = .*/eal_args = -l 0-1 --no-huge --no-pci -m 64/' "$tmp/a.conf" > "$tmp/b.conf"
"$B/locusd" -c "$tmp/b.conf" > "$tmp/b.log" 2>&1 && fail "two engines on one worker lcore ran"
grep -q 'engine_lcores = 2 needs 2 worker lcores' "$tmp/b.log" || fail "$(cat "$tmp/b.log")"
cat > "$tmp/c.conf" <<CONF
[locusd]
engine_lcores = 2
rdma_device = rxe0
secret_file = /nonexistent
[cluster]
node.0 = 10.0.0.1:7471
node.1 = 10.0.0.2:7471
CONF
"$B/locusd" -c "$tmp/c.conf" --check-config > "$tmp/c.out" 2>&1 || fail "two engines on a cluster: $(cat "$tmp/c.out")"
# on a cluster the network needs a worker lcore beside the engines' (refused before any device)
echo "eal_args = --lcores 0@0,1@1,2@1 --no-huge --no-pci -m 64" | sed -i "2r /dev/stdin" "$tmp/c.conf"
"$B/locusd" -c "$tmp/c.conf" > "$tmp/c.log" 2>&1 && fail "two engines and the network on two worker lcores ran"
grep -q 'engine_lcores = 2 on a cluster needs a worker lcore for the network' "$tmp/c.log" ||
	fail "$(cat "$tmp/c.log")"

# 5. gpu_pci: each GPU's ranks on an engine of its NUMA node, from a sysfs tree of our own
# (this box's lcores are all on node 0): GPUs 0, 1 on node 1, which has no engine, spread
# over both; 2, 3 on node 0 spread over its two engines
for g in 0000:17:00.0:1 0000:3b:00.0:1 0000:5d:00.0:0 0000:61:00.0:0 0000:99:00.0:0; do
	mkdir -p "$tmp/sys/bus/pci/devices/${g%:*}"
	echo "${g##*:}" > "$tmp/sys/bus/pci/devices/${g%:*}/numa_node"
done
{ cat "$tmp/a.conf"; echo "gpu_pci = 0000:17:00.0,0000:3b:00.0,0000:5d:00.0,0000:61:00.0"; } \
	> "$tmp/d.conf"
start "$tmp/d.conf" "$tmp/d2.log" LOCUS_SYSFS_ROOT="$tmp/sys"
grep -q '^locusd: engine 0 (lcore 1, NUMA node 0) polls the ranks of GPUs 0 (0000:17:00.0, node 1), 2 (0000:5d:00.0, node 0)$' \
	"$tmp/d2.log" && grep -q '^locusd: engine 1 (lcore 2, NUMA node 0) polls the ranks of GPUs 1 (0000:3b:00.0, node 1), 3 (0000:61:00.0, node 0)$' \
	"$tmp/d2.log" || fail "placement by NUMA node: $(cat "$tmp/d2.log")"
"$B/locusctl" push -i "$inst" "$tmp/e.tbl" > /dev/null &&
	"$B/locusctl" push -i "$inst" "$tmp/g.tbl" > /dev/null || fail "push (gpu_pci)"
timeout 120 "${LG[@]}" --requests 200 --batches 100 > "$tmp/5.out" 2>&1 ||
	{ cat "$tmp/5.out"; fail "traffic with ranks placed by NUMA node"; }
grep -q '^loadgen: ok$' "$tmp/5.out" || fail "$(cat "$tmp/5.out")"
kill -TERM $pid
wait $pid 2>/dev/null
pid=
sed 's/^gpu_pci = .*/gpu_pci = 0000:17:00.0,0000:3b:00.0,0000:5d:00.0,0000:62:00.0/' \
	"$tmp/d.conf" > "$tmp/e.conf"
LOCUS_SYSFS_ROOT=$tmp/sys "$B/locusd" -c "$tmp/e.conf" > "$tmp/e.log" 2>&1 &&
	fail "a GPU the machine does not have was taken"
grep -q 'gpu_pci: GPU 3, 0000:62:00.0: no such PCI device' "$tmp/e.log" || fail "$(cat "$tmp/e.log")"
echo "test_engines: ranks placed by their GPUs' NUMA nodes (sysfs): traffic ok"
echo "test_engines: ok"
