#!/bin/bash
# locusd's membership through a real etcd on this host (one node per
# instance, no RDMA needed): its record published under its lease and read
# back; a second locusd with the same node id refused at start, naming the
# holder; etcd killed under a running locusd (it keeps running and serving,
# says etcd is unreachable, and is a member again once etcd is back); a
# locusd killed -9 and started again takes its record back at once (its
# lease file); SIGTERM removes the record at once; the same over TLS with a
# client certificate, and refused without the CA. The cluster's tables:
# locusctl push --cluster stores one, the node adopts it and reports, push
# prints the answer; a table the node refuses is reported refused; a node
# that comes back adopts the cluster's table by itself; show --cluster.
# Placements in two phases, with four rank clients taking part: committed once
# every rank acknowledged, aborted when one does not, a locusctl killed between
# the phases settled by the next push (aborted, then completed), a local
# placement push refused, older weights released once every node moved on.
# rebalance --cluster: every dispatched token counted once from the loads the
# node publishes in etcd, and a better placement pushed in two phases.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}/bin
tmp=$(mktemp -d)
export LOCUS_SHM_DIR=$tmp/shm LOCUS_STATE_DIR=$tmp/state
mkdir -p "$LOCUS_SHM_DIR"
pids=()
ETCD_PID=
cleanup() {
	for p in "${pids[@]+"${pids[@]}"}"; do kill -9 "$p" 2>/dev/null || true; done
	[ -n "$ETCD_PID" ] && kill -9 "$ETCD_PID" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_cluster_locusd: $*" >&2; exit 1; }
. tests/lib.sh # wait_running, etcd_start, etcdctl_t

# conf INSTANCE [tls]: one node (id 0) of cluster 42, through etcd
conf() {
	local f=$tmp/$1.conf
	cat > "$f" <<CONF
[locusd]
instance = $1
eal_args = -l 0 --no-huge --no-pci -m 64
idle_sleep_max_us = 100
client_slots = 12
table_slot_size = 65536
[cluster]
id = 42
nodes = 1
node.0 = 127.0.0.1:7471
etcd = $ETCD_URL
etcd_lease_s = 2
etcd_loads_s = 1
CONF
	if [ -n "${2:-}" ]; then
		printf 'etcd_cacert = %s\netcd_cert = %s\netcd_key = %s\n' "$ETCD_CA" "$ETCD_CERT" \
			"$ETCD_KEY" >> "$f"
	fi
	echo "$f"
}

# stat INSTANCE NAME: one counter's value
stat() { "$B/locus-stat" -i "$1" "$2" | awk -v n="$2" '$1 == n { print $3 }'; }

# until_stat INSTANCE NAME VALUE SECONDS
until_stat() {
	local i
	for ((i = 0; i < $4 * 20; i++)); do
		[ "$(stat "$1" "$2" 2>/dev/null)" = "$3" ] && return 0
		sleep 0.05
	done
	fail "$1: $2 is $(stat "$1" "$2"), not $3, after $4 s"
}

record() { etcdctl_t get --print-value-only /locus/42/nodes/0; }

etcd_start "$tmp/etcd"

# 1. a member: the record is there, with this node's address
"$B/locusd" -c "$(conf ca)" > "$tmp/a.log" 2>&1 &
pa=$!
pids+=($pa)
wait_running ca $pa "$tmp/a.log" || fail "locusd ca did not come up"
until_stat ca cluster_state 1 5
[ "$(stat ca cluster_members)" = 1 ] || fail "cluster_members $(stat ca cluster_members)"
rec=$(record)
case "$rec" in *'"node":0'*'"cluster":"42"'*'"rails":["127.0.0.1:7471"]'*'"state":"up"'*) ;;
	*) fail "the record: $rec" ;; esac
lease=$(etcdctl_t get -w json /locus/42/nodes/0 | grep -o '"lease":[0-9]*' | cut -d: -f2)
[ -n "$lease" ] && [ "$lease" != 0 ] || fail "the record is not held by a lease"

# 1b. the cluster's tables: stored once, adopted, answered; a refusal answered too
CTL=("$B/locusctl")
CL=(--cluster --etcd "$ETCD_URL" --cluster-id 42 --timeout-ms 5000)
"$B/locusctl" fit --trace tests/data/calib_sample.jsonl --decoders 2 --tune off \
	-o "$tmp/c1.tbl" > /dev/null 2>&1 || fail "fit"
out=$("${CTL[@]}" push "${CL[@]}" "$tmp/c1.tbl") || fail "push --cluster: $out"
case "$out" in *"stored eldr table"*"generation 1"*"node 0: adopted generation 1 (its channel 0"*"1 of 1 node(s) adopted it"*) ;;
	*) fail "push --cluster said: $out" ;; esac
gen=$("$B/locus-stat" -i ca 'table_generation' | awk '/channel=0/ { print $3 }')
[ "$gen" = 1 ] || fail "channel 0 is at generation $gen after the cluster push"
[ "$(stat ca cluster_tables_adopted)" = 1 ] || fail "cluster_tables_adopted $(stat ca cluster_tables_adopted)"
# a GRACE table for 2 nodes x 2 GPUs: this node (1 x 4) refuses it, and says so in etcd
"$B/locusctl" fit --grace --trace tests/data/calib_sample.jsonl --nodes 2 --gpus 2 \
	--capacity 20 -o "$tmp/g22.tbl" > /dev/null 2>&1 || fail "fit --grace"
if out=$("${CTL[@]}" push "${CL[@]}" "$tmp/g22.tbl"); then
	fail "a refused cluster push exited 0: $out"
fi
case "$out" in *"node 0: refused placement generation 1: GRACE table is for 2 nodes x 2 GPUs"*"aborted placement generation 1 after"*"0 of 1 node(s) acknowledged it; nothing switched"*) ;;
	*) fail "refused push said: $out" ;; esac
[ "$(stat ca cluster_placements_refused)" = 1 ] ||
	fail "cluster_placements_refused $(stat ca cluster_placements_refused)"
[ "$(stat ca cluster_placement_generation)" = 0 ] || fail "a refused placement was committed"
# a second ELDR table, then the cluster rolled back to the first: stored again, adopted
"$B/locusctl" fit --trace tests/data/calib_sample.jsonl --decoders 2 --tune off --seed 7 \
	-o "$tmp/c2.tbl" > /dev/null 2>&1 || fail "fit c2"
"${CTL[@]}" push "${CL[@]}" "$tmp/c2.tbl" > /dev/null || fail "push --cluster c2"
if out=$("${CTL[@]}" diff "${CL[@]}" "$tmp/c1.tbl"); then fail "diff --cluster saw no change"; fi
case "$out" in *"--- the cluster's eldr generation 2"*) ;; *) fail "diff --cluster said: $out" ;; esac
out=$("${CTL[@]}" rollback "${CL[@]}" --kind eldr) || fail "rollback --cluster: $out"
case "$out" in *"back to generation 1"*"node 0: adopted generation 3"*) ;;
	*) fail "rollback --cluster said: $out" ;; esac
out=$("${CTL[@]}" diff "${CL[@]}" "$tmp/c1.tbl") || fail "diff --cluster after the rollback: $out"
case "$out" in *"tables are equal"*) ;; *) fail "diff --cluster after the rollback: $out" ;; esac
out=$("${CTL[@]}" show "${CL[@]}") || fail "show --cluster: $out"
case "$out" in *"eldr: generation 3"*"node 0: generation 3 in force"*"grace: generation 0 (none stored)"*"node 0: no report"*) ;;
	*) fail "show --cluster said: $out" ;; esac
# what etcd holds is input too: a generation counter that is not a number stops a push
etcdctl_t put /locus/42/tables/next/eldr 'x1' > /dev/null
if out=$("${CTL[@]}" push "${CL[@]}" "$tmp/c1.tbl" 2>&1); then
	fail "a push over a garbled counter exited 0: $out"
fi
case "$out" in *"tables/next/eldr holds 'x1', not a generation"*) ;;
	*) fail "push over a garbled counter said: $out" ;; esac
etcdctl_t put /locus/42/tables/next/eldr 3 > /dev/null

# 1c. placements change in two phases. Four rank clients take part: each sees the
# staged generation, works out what it gains and loses, and acknowledges; the
# push commits only then. A rank that does not acknowledge aborts the change and
# nothing switches; a locusctl killed between the phases leaves the cluster on one
# placement, and the next push settles what it left (completed or aborted).
"$B/locusctl" fit --grace --trace tests/data/calib_sample.jsonl --nodes 1 --gpus 4 \
	--capacity 20 -o "$tmp/g14.tbl" > /dev/null 2>&1 || fail "fit --grace 1 x 4"
"$B/locusctl" fit --grace --trace tests/data/calib_sample.jsonl --nodes 1 --gpus 4 \
	--capacity 24 --seed 5 -o "$tmp/g14b.tbl" > /dev/null 2>&1 || fail "fit --grace 1 x 4 b"
RANKS=(env PYTHONPATH=tools/python PYTHONDONTWRITEBYTECODE=1 LOCUS_LIBRARY=${BUILD:-build}/lib/liblocus.so.0
	/usr/bin/python3 tests/cluster_ranks.py ca 4)
ranks_bg() { # ranks_bg LOG SECONDS [--hold R]: the rank clients, attached before it returns
	"${RANKS[@]}" "${@:2}" > "$1" 2>&1 &
	rpid=$!
	pids+=($rpid)
	for ((i = 0; i < 100; i++)); do
		[ "$(grep -sc attached "$1")" = 4 ] && return 0
		sleep 0.05
	done
	fail "the rank clients did not attach: $(cat "$1")"
}
ranks_bg "$tmp/r1.log" 60
out=$("${CTL[@]}" push "${CL[@]}" --prepare-timeout-ms 10000 "$tmp/g14.tbl") ||
	fail "two-phase push: $out"
case "$out" in *"prepared grace table"*"placement generation 2"*"committed placement generation 2: 1 node(s) and 4 rank client(s) acknowledged it"*"node 0: adopted generation 2"*) ;;
	*) fail "two-phase push said: $out" ;; esac
echo "$out" | grep -o 'committed placement generation 2.*' | sed 's/^/# /'
for r in 0 1 2 3; do
	grep -q "rank $r: generation 2 staged: gains [1-9][0-9]* experts" "$tmp/r1.log" ||
		fail "rank $r did not load and acknowledge generation 2: $(cat "$tmp/r1.log")"
done
[ "$(stat ca cluster_placement_generation)" = 2 ] || fail "not planning with generation 2"
chgen=$("$B/locus-stat" -i ca table_generation | awk '/channel=1/ { print $3 }')
until_stat ca cluster_placement_free_below 2 5
# a placement pushed locally is refused: this node follows the cluster's
if out=$("$B/locusctl" push -i ca "$tmp/g14b.tbl" 2>&1); then
	fail "a local placement push was taken under etcd: $out"
fi
case "$out" in *"push it"*|*"follows the cluster's placement"*) ;; *) fail "local placement push said: $out" ;; esac
kill $rpid 2>/dev/null; wait $rpid 2>/dev/null || true

# rank 3 never acknowledges: aborted at the bound, nothing switches
ranks_bg "$tmp/r2.log" 60 --hold 3
if out=$("${CTL[@]}" push "${CL[@]}" --prepare-timeout-ms 1500 "$tmp/g14b.tbl"); then
	fail "a push with a rank that did not acknowledge exited 0: $out"
fi
case "$out" in *"node 0: did not acknowledge placement generation 3 within 1500 ms"*"aborted placement generation 3 after"*"0 of 1 node(s) acknowledged it; nothing switched"*) ;;
	*) fail "the aborted push said: $out" ;; esac
grep -q "rank 0: generation 3 staged" "$tmp/r2.log" || fail "generation 3 was not staged: $(cat "$tmp/r2.log")"
[ "$(stat ca cluster_placement_generation)" = 2 ] || fail "an aborted placement switched"
[ "$("$B/locus-stat" -i ca table_generation | awk '/channel=1/ { print $3 }')" = "$chgen" ] ||
	fail "the engines adopted an aborted placement"
until_stat ca cluster_placement_staged 0 5

# locusctl killed between the phases: the cluster stays on generation 2, show says
# what is prepared, and the next push aborts it (rank 3 still holds back)
"${CTL[@]}" push "${CL[@]}" --prepare-timeout-ms 60000 "$tmp/g14b.tbl" > "$tmp/k.out" 2>&1 &
kp=$!
until_stat ca cluster_placement_staged 4 10
kill -9 $kp; wait $kp 2>/dev/null || true
[ "$(etcdctl_t get --print-value-only /locus/42/tables/current/grace)" = 2 ] ||
	fail "a killed push moved the placement"
[ "$(etcdctl_t get --print-value-only /locus/42/tables/prepare/grace)" = 4 ] ||
	fail "the killed push left no prepared generation"
out=$("${CTL[@]}" show "${CL[@]}") || fail "show --cluster: $out"
case "$out" in *"grace: generation 2"*"generation 4 prepared: 0 of 1 node(s) acknowledged it"*) ;;
	*) fail "show --cluster with a change prepared: $out" ;; esac
if out=$("${CTL[@]}" push "${CL[@]}" --prepare-timeout-ms 500 "$tmp/g14b.tbl"); then
	fail "push with rank 3 holding back exited 0: $out"
fi
case "$out" in *"aborted placement generation 4, left prepared by an earlier push: 0 of 1 node(s)"*"aborted placement generation 5 after"*) ;;
	*) fail "the push after a killed one said: $out" ;; esac
# killed again, then every rank acknowledges: the next push completes what it left
"${CTL[@]}" push "${CL[@]}" --prepare-timeout-ms 60000 "$tmp/g14b.tbl" > "$tmp/k.out" 2>&1 &
kp=$!
until_stat ca cluster_placement_staged 6 10
kill -9 $kp; wait $kp 2>/dev/null || true
kill $rpid 2>/dev/null; wait $rpid 2>/dev/null || true
ranks_bg "$tmp/r3.log" 60
for ((i = 0; i < 100; i++)); do
	[ "$(grep -c 'generation 6 staged' "$tmp/r3.log")" = 4 ] && break
	sleep 0.05
done
sleep 0.5 # the node's acknowledgement reaches etcd
out=$("${CTL[@]}" push "${CL[@]}" --prepare-timeout-ms 10000 "$tmp/g14.tbl") ||
	fail "the push after a killed one: $out"
case "$out" in *"completed placement generation 6, left prepared by an earlier push"*"committed placement generation 7"*"node 0: adopted generation 7"*) ;;
	*) fail "the push that settles a killed one said: $out" ;; esac
[ "$(stat ca cluster_placement_generation)" = 7 ] || fail "not on generation 7"
# the rank clients free the weights of older generations once every node plans with 7
until_stat ca cluster_placement_free_below 7 5
for ((i = 0; i < 100; i++)); do
	[ "$(grep -c 'generation 7 or later: older weights released' "$tmp/r3.log")" = 4 ] && break
	sleep 0.05
done
[ "$(grep -c 'generation 7 or later: older weights released' "$tmp/r3.log")" = 4 ] ||
	fail "the ranks did not release: $(cat "$tmp/r3.log")"
kill $rpid 2>/dev/null; wait $rpid 2>/dev/null || true

# 1d. rebalance --cluster: the node publishes its expert loads under its lease every
# second while rank traffic runs; locusctl sums every member's, refits the placement
# in force and, when that gains, pushes it in two phases
# the base: a placement fitted on a few prompts only, so the live loads can do better
head -n 6 tests/data/calib_sample.jsonl > "$tmp/few.jsonl"
"$B/locusctl" fit --grace --trace "$tmp/few.jsonl" --nodes 1 --gpus 4 --capacity 20 \
	--replica-budget 4 -o "$tmp/gfew.tbl" > /dev/null 2>&1 || fail "fit --grace on a few prompts"
"${CTL[@]}" push "${CL[@]}" "$tmp/gfew.tbl" > /dev/null || fail "push of the few-prompt placement"
"${CTL[@]}" rebalance "${CL[@]}" --interval 1 --threshold 0 --prepare-timeout-ms 5000 \
	> "$tmp/rb.out" 2>&1 &
rbp=$!
pids+=($rbp)
for ((i = 0; i < 100; i++)); do grep -sq rebalancing "$tmp/rb.out" && break; sleep 0.05; done
# the ranks take part: every row is checked against what they acknowledged, so a row
# planned under a placement a rank does not hold would fail the run
"$B/locus-loadgen" -i ca --trace tests/data/calib_sample.jsonl --decoders 4 --ranks 4 \
	--requests 20 --batches 20000 --tokens 16 --seconds 90 --placements --weights 8192 \
	> "$tmp/lg.out" 2>&1 ||
	fail "loadgen under rebalance --cluster: $(tail -5 "$tmp/lg.out")"
sleep 3.5 # two more loads periods: the last counts reach etcd and a round
kill -TERM $rbp
wait $rbp || fail "rebalance --cluster exited $?: $(cat "$tmp/rb.out")"
out=$(cat "$tmp/rb.out")
echo "$out" | sed 's/^/# /'
case "$out" in *"rebalancing the cluster's placement generation 8"*) ;;
	*) fail "rebalance --cluster said: $out" ;; esac
# every dispatched (token, expert) pair is counted once, summed over the rounds
want=$(awk '/^dispatch:/ { print $2 * $5 * $8 * substr($11, 5) }' "$tmp/lg.out")
got=$(awk '/^rebalance [0-9]+: [0-9]+ tokens from/ { n += $3 } END { print n + 0 }' <<<"$out")
[ -n "$want" ] && [ "$want" -gt 0 ] && [ "$got" = "$want" ] ||
	fail "rebalance --cluster counted $got tokens, the ranks dispatched $want: $out"
[ "$(stat ca cluster_loads_published)" -gt 0 ] || fail "no loads published"
grep -Eh '^(placements|weights):' "$tmp/lg.out" | sed 's/^/# /'
[ "$("$B/locus-stat" -i ca 'rejected_placement' | awk '/rejected_placement/ { s += $3 } END { print s + 0 }')" = 0 ] ||
	fail "rows refused for their placement: $("$B/locus-stat" -i ca 'rejected_placement')"
if echo "$out" | grep -q 'pushing to the cluster'; then
	# a round whose etcd read timed out on a busy machine pushes again the next second
	echo "$out" | grep -Eq 'committed placement generation [0-9]+: 1 node\(s\) and 4 rank client\(s\)' ||
		fail "the rebalance was not committed with the ranks' acknowledgements: $out"
	grep -Eq '^placements: the ranks acknowledged [1-9]' "$tmp/lg.out" ||
		fail "the loadgen's ranks acknowledged nothing: $(cat "$tmp/lg.out")"
	[ "$(stat ca cluster_placement_generation)" -ge 9 ] || fail "not on the rebalanced placement"
fi

# 1e. recover --cluster: rank 3's client is killed -9; its engine masks it at once
# (ranks_lost), the node says so in etcd (ranks/0), and the leader of two recover
# processes refits the placement over ranks 0..2 and commits it in two phases, the
# three live ranks acknowledging. Rank 3 comes back: a placement that uses it is
# committed. The leader killed: the other takes over within a lease.
"$B/locusctl" fit --grace --trace tests/data/calib_sample.jsonl --nodes 1 --gpus 4 \
	--capacity 20 --replica-budget 6 -o "$tmp/gr.tbl" > /dev/null 2>&1 || fail "fit for recover"
# each rank moves the weights of every change through locusd before it acknowledges it
R3=(env PYTHONPATH=tools/python PYTHONDONTWRITEBYTECODE=1 LOCUS_LIBRARY=${BUILD:-build}/lib/liblocus.so.0
	/usr/bin/python3 tests/cluster_ranks.py ca --weights 4096 --group 4)
"${R3[@]}" 3 120 > "$tmp/r012.log" 2>&1 &
pids+=($!)
disown $!
"${R3[@]}" 1 120 --first 3 > "$tmp/r3.log" 2>&1 &
r3pid=$!
pids+=($r3pid)
disown $r3pid
for ((i = 0; i < 100; i++)); do
	[ "$(cat "$tmp/r012.log" "$tmp/r3.log" 2>/dev/null | grep -c attached)" = 4 ] && break
	sleep 0.05
done
"${CTL[@]}" push "${CL[@]}" --prepare-timeout-ms 10000 "$tmp/gr.tbl" > /dev/null ||
	fail "push of the recover base"
base=$(stat ca cluster_placement_generation)
gen_after() { # GEN: until the node plans with a later placement (at most 10 s)
	local i
	for ((i = 0; i < 200; i++)); do
		[ "$(stat ca cluster_placement_generation)" -gt "$1" ] && return 0
		sleep 0.05
	done
	return 0 # the caller says what did not happen
}
recover_bg() { # recover_bg LOG: a recover process (one per node in production)
	"${CTL[@]}" recover "${CL[@]}" --interval 0.05 --settle-ms 300 --lease-s 2 \
		--expert-bytes 44040192 -o "$1.tbl" > "$1" 2>&1 &
	pids+=($!)
	disown $!
}
recover_bg "$tmp/rec1.out"
rec1=$!
sleep 0.3
recover_bg "$tmp/rec2.out"
rec2=$!
for ((i = 0; i < 100; i++)); do grep -sq leads "$tmp/rec1.out" "$tmp/rec2.out" && break; sleep 0.05; done
[ "$(grep -l leads "$tmp/rec1.out" "$tmp/rec2.out" | wc -l)" = 1 ] ||
	fail "not one recover leader: $(cat "$tmp/rec1.out" "$tmp/rec2.out")"
until_stat ca ranks_lost 0 5
t0=$(date +%s%N)
kill -9 $r3pid
until_stat ca ranks_lost 1 5
t1=$(date +%s%N)
gen_after "$base"
t2=$(date +%s%N)
gen=$(stat ca cluster_placement_generation)
[ "$gen" -gt "$base" ] || fail "no placement over the live ranks: $(cat "$tmp/rec1.out" "$tmp/rec2.out")"
echo "# rank 3 killed -9: masked after $(((t1 - t0) / 1000000)) ms, placement generation $gen over ranks 0..2 committed after $(((t2 - t0) / 1000000)) ms"
"${CTL[@]}" show "${CL[@]}" > /dev/null || fail "show --cluster after recover"
# what was committed holds nothing on rank 3 (-o: the leader's copy of each commit)
# (the leader writes it once push --cluster returned: after the node adopted it)
tbl=
for ((i = 0; i < 100; i++)); do
	for f in "$tmp/rec1.out.tbl" "$tmp/rec2.out.tbl"; do
		[ -s "$f" ] && tbl=$f
	done
	[ -n "$tbl" ] && break
	sleep 0.05
done
[ -n "$tbl" ] || fail "recover wrote no copy of what it committed"
"$B/locusctl" show "$tbl" | grep -E '^  rank   3 ' | grep -Eq 'experts: +replicas: *$' ||
	fail "the recovered placement still has copies on rank 3: $("$B/locusctl" show "$tbl" | grep 'rank   3')"
for r in 0 1 2; do
	grep -q "rank $r: generation $gen staged" "$tmp/r012.log" ||
		fail "rank $r did not acknowledge the recovered placement: $(cat "$tmp/r012.log")"
done
# rank 3 back: it attaches, takes the placement in force, and one that uses it commits
"${R3[@]}" 1 120 --first 3 > "$tmp/r3b.log" 2>&1 &
pids+=($!)
disown $!
until_stat ca ranks_lost 0 5
t3=$(date +%s%N)
gen_after "$gen"
t4=$(date +%s%N)
[ "$(stat ca cluster_placement_generation)" -gt "$gen" ] ||
	fail "no placement using rank 3 again: $(cat "$tmp/rec1.out" "$tmp/rec2.out")"
grep -Eq "rank 3: generation [0-9]+ staged: gains [1-9][0-9]* experts \([0-9]+ from this node, 0 from another, 0 from storage; [1-9]" "$tmp/r3b.log" ||
	fail "rank 3 did not get its weights from the live ranks when it came back: $(cat "$tmp/r3b.log")"
! grep -q CORRUPT "$tmp/r012.log" "$tmp/r3b.log" ||
	fail "weights moved through locusd differ: $(grep CORRUPT "$tmp/r012.log" "$tmp/r3b.log")"
grep -E "generation [0-9]+ staged" "$tmp/r012.log" "$tmp/r3b.log" | sed 's/^.*rank/# rank/'
echo "# rank 3 back: a placement using it committed $(((t4 - t3) / 1000000)) ms after it attached"
sleep 0.5 # the leader's last lines
cat "$tmp/rec1.out" "$tmp/rec2.out" | grep -E '^recover: (a placement over|[0-9]+ expert copies)' |
	sed 's/^/# /'
# the leader killed: the other recover process leads within its lease
leader=$rec1
grep -q leads "$tmp/rec2.out" && leader=$rec2
kill -9 $leader
other=$tmp/rec1.out
[ $leader = $rec1 ] && other=$tmp/rec2.out
for ((i = 0; i < 100; i++)); do grep -sq leads "$other" && break; sleep 0.05; done
grep -q leads "$other" || fail "nobody took over the recovery: $(cat "$other")"
echo "# the recover leader killed -9: the other leads within the 2 s lease"
kill -9 "${pids[@]: -5}" 2>/dev/null || true

# 2. a second locusd with node id 0 (another instance): refused at start, naming the holder
if "$B/locusd" -c "$(conf cb)" > "$tmp/b.log" 2>&1; then
	fail "a second node 0 was accepted: $(cat "$tmp/b.log")"
fi
grep -q "node id 0 is in use" "$tmp/b.log" || fail "refusal: $(cat "$tmp/b.log")"
grep -q "by host $(hostname)" "$tmp/b.log" || fail "the refusal does not name the holder"

# 3. etcd killed: locusd keeps running and serving; back with etcd
etcd_stop
until_stat ca cluster_state 3 10
sleep 3 # past the lease: nothing of locusd's own service depends on it
kill -0 $pa || fail "locusd stopped with etcd"
"$B/locusctl" fit --trace tests/data/calib_sample.jsonl --decoders 2 --tune off -o "$tmp/e.tbl" \
	> /dev/null 2>&1
"$B/locusctl" push -i ca "$tmp/e.tbl" > /dev/null || fail "a push while etcd is down"
[ "$(stat ca cluster_etcd_errors)" -gt 0 ] || fail "no etcd error counted"
etcd_restart "$tmp/etcd"
until_stat ca cluster_state 1 10
case "$(record)" in *'"node":0'*) ;; *) fail "no record after etcd came back" ;; esac
grep -q 'etcd unreachable' "$tmp/a.log" || fail "the log does not say etcd was unreachable"

# 4. killed -9 and started again: a member at once (its lease file), not refused
kill -9 $pa
wait $pa 2>/dev/null || true
t0=$(date +%s%N)
"$B/locusd" -c "$tmp/ca.conf" > "$tmp/a2.log" 2>&1 &
pa=$!
pids+=($pa)
wait_running ca $pa "$tmp/a2.log" || fail "locusd ca did not come back"
until_stat ca cluster_state 1 5
ms=$((($(date +%s%N) - t0) / 1000000))
grep -q 'in use' "$tmp/a2.log" && fail "the restarted node was refused: $(cat "$tmp/a2.log")"
# it took the cluster's ELDR table by itself
for _ in $(seq 100); do
	gen=$("$B/locus-stat" -i ca 'table_generation' | awk '/channel=0/ { print $3 }')
	[ "$gen" = 1 ] && break
	sleep 0.05
done
[ "$gen" = 1 ] || fail "the restarted node did not adopt the cluster's table (channel 0 at $gen)"
grep -q 'cluster: eldr table generation 3 adopted' "$tmp/a2.log" || fail "no adoption logged"

# a push while etcd is away fails with a sentence, and nothing waits forever
etcd_stop
if out=$("${CTL[@]}" push "${CL[@]}" "$tmp/c1.tbl" 2>&1); then
	fail "push --cluster without etcd exited 0"
fi
case "$out" in *"locusctl: etcd"*) ;; *) fail "push --cluster without etcd said: $out" ;; esac
etcd_restart "$tmp/etcd"
until_stat ca cluster_state 1 10

# 5. SIGTERM: the record goes with the revoked lease, at once
kill -TERM $pa
wait $pa || fail "locusd ca exited non-zero"
[ -z "$(record)" ] || fail "the record outlived a clean stop: $(record)"
grep -q 'left (lease revoked)' "$tmp/a2.log" || fail "no leave in the log"
etcd_stop

# 6. TLS with a client certificate; without the CA locusd says why it cannot join
etcd_start "$tmp/etcd-tls" tls
"$B/locusd" -c "$(conf ct tls)" > "$tmp/t.log" 2>&1 &
pt=$!
pids+=($pt)
wait_running ct $pt "$tmp/t.log" || fail "locusd ct did not come up"
until_stat ct cluster_state 1 5
case "$(record)" in *'"node":0'*) ;; *) fail "no record over TLS" ;; esac
kill -TERM $pt
wait $pt || true
sed -i '/^etcd_cacert/d' "$tmp/ct.conf"
"$B/locusd" -c "$tmp/ct.conf" > "$tmp/t2.log" 2>&1 &
pt=$!
pids+=($pt)
wait_running ct $pt "$tmp/t2.log" || fail "locusd ct (no CA) did not come up"
until_stat ct cluster_state 3 10
grep -q 'etcd unreachable.*SSL' "$tmp/t2.log" || fail "no reason for the TLS failure: $(cat "$tmp/t2.log")"
kill -TERM $pt
wait $pt || true
etcd_stop
echo "test_cluster_locusd: record under a lease, cluster tables adopted and refused, placements in two phases (committed, aborted, killed push settled), rebalance --cluster, duplicate id refused, etcd down and back, restart in ${ms} ms with the cluster table, clean leave, TLS ok"
