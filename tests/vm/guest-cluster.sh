#!/bin/sh
# Runs INSIDE the qemu guest (host root over 9p), started by cluster-vm-test.sh:
# three locusd nodes of one cluster on Soft-RoCE, their membership through a
# real etcd in the guest (Debian's etcd-server, seen through the host's root):
#   n0 on rxea (192.0.2.30), n1 on rxeb (.31), n2 on rxec (.32), one bridge
#   1 etcd up; n0 and n1 started from configs that name no other node: they
#     find each other through etcd and connect; the tables pushed once to the
#     cluster (locusctl push --cluster), every member's answer printed;
#     routing traffic between them
#   2 n2 started at run time: n0 and n1 connect to it without a restart; it
#     adopts the cluster's tables by itself; traffic across the three nodes,
#     dispatch and combine included, checked end to end; the time from n2's
#     start to carrying traffic
#   3 n2 killed (-9): n0 and n1 see it leave within its lease; the time
#     measured; routing between n0 and n1 goes on
#   4 n2 started again: it takes its record back (its lease file), adopts the
#     cluster's tables by itself and carries traffic
#   5 one more push --cluster: three answers, and the time to the last; a
#     placement changed in two phases under dispatch traffic whose six ranks
#     take part: staged, acknowledged by all six, committed, every row
#     checked and none refused; the time from prepared to committed
#   5b n2's locusd killed -9 under masked dispatch traffic with locusctl
#     recover running: n0 and n1 mask n2's ranks, the survivors' placement
#     commits, traffic goes on checked; n2 back: a placement using it commits
#     and rows reach it; every time measured, beside the published anchors
#   5c n2 cut off from n0 and n1 (its bridge port down) but not from etcd:
#     masked, refitted (its peers say it is unreachable), healed, used again
#   5d etcd killed -9 and restarted under traffic: nothing masked, no error
#   5e a rank client killed -9 under traffic: masked everywhere, refitted
#   5f n2 cut off from etcd but not from n0 and n1: its lease expires, it is
#     masked and refitted around; healed, it is used again
#     After each: every request completed once, rows checked, one placement;
#     from 5 on, the ranks move their expert weights through locusd before
#     they acknowledge a change, every byte and every row's expert checked
# Every step is bounded; the exit status is the test's.
[ -n "${BASH_VERSION:-}" ] || exec /bin/bash "$0" "$@"
set -u
ROOT=${LV_ROOT:?}
B=${LV_BUILD:-$ROOT/build}/bin
cd "$ROOT" || exit 1
. "$ROOT/tests/vm/guest-lib.sh" # say, fail, W, PID, mksecret, wait_log
LEASE_S=${LV_LEASE_S:-2}

ip link set lo up
. "$ROOT/tests/vm/guest-bridge3.sh"
ulimit -l unlimited 2>/dev/null

guest_work cluster-vm
TRACE=tests/data/calib_sample.jsonl

now_ms() { date +%s%3N; }

show_logs() {
	for n in 0 1 2; do
		[ -f "$W/n$n.log" ] && tail -n "${1:-8}" "$W/n$n.log" | sed "s/^/  [n$n log] /"
	done
}

# ---- etcd ---------------------------------------------------------------------------------------
# n2 reaches etcd at 127.0.0.2, the others at 127.0.0.1: 5f cuts n2 alone off from it
ETCD_URLS=http://127.0.0.1:2379,http://127.0.0.2:2379
say "1. etcd on 127.0.0.1:2379 in the guest; n0 and n1 with configs that name no other node"
etcd --name default --data-dir "$W/etcd" --listen-client-urls "$ETCD_URLS" \
	--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
	--initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster default=http://127.0.0.1:2380 > "$W/etcd.log" 2>&1 &
PID[etcd]=$!
for _ in $(seq 300); do
	ETCDCTL_API=3 etcdctl --endpoints http://127.0.0.1:2379 endpoint health > /dev/null 2>&1 &&
		break
	sleep 0.1
done
ETCDCTL_API=3 etcdctl --endpoints http://127.0.0.1:2379 endpoint health > /dev/null 2>&1 ||
	{ tail "$W/etcd.log"; fail "etcd did not answer"; echo "GUEST RESULT rc=1"; exit 1; }

mksecret "$W/secret"
# mkconf NODE: node NODE's config: its own address only, the rest from etcd
mkconf() {
	local dev=rxe${BR3_IF[$1]#v}
	cat > "$W/n$1.conf" <<CONF
[locusd]
instance = n$1
node = $1
eal_args = -l 0 --no-huge --no-pci -m 64
rdma_device = $dev
secret_file = $W/secret
idle_sleep_us = 200
client_slots = 16
client_inbox_slots = 256
[cluster]
id = 11
gpus_per_node = 2
nodes = 3
node.$1 = ${BR3_IP[$1]}:7471
etcd = http://127.0.0.$(($1 == 2 ? 2 : 1)):2379
etcd_lease_s = $LEASE_S
${NODE_GROUPS:-}
CONF
}

start() { # node: start locusd nN; bounded wait for its "running" (one more in its log)
	local want=$(($(grep -c "instance n$1 running" "$W/n$1.log" 2>/dev/null) + 1))
	"$B/locusd" -c "$W/n$1.conf" >> "$W/n$1.log" 2>&1 &
	PID[n$1]=$!
	for _ in $(seq 600); do
		[ "$(grep -c "instance n$1 running" "$W/n$1.log")" -ge "$want" ] && return 0
		kill -0 "${PID[n$1]}" 2>/dev/null || break
		sleep 0.1
	done
	sed 's/^/  [n'"$1"'] /' "$W/n$1.log"
	return 1
}

loadgen() { # out-file decoders-at ranks ranks-at extra-args...
	local out=$1 dec=$2 nr=$3 rk=$4
	shift 4
	timeout 200 "$B/locus-loadgen" -i n0 --attach-timeout-ms 20000 --trace $TRACE \
		--prefill-at n0 --decoders 4 --decoder-at "$dec" --ranks "$nr" \
		${rk:+--rank-at "$rk"} "$@" > "$out" 2>&1
}

# push_cluster TABLE: once, to the cluster; prints every member's answer
push_cluster() {
	timeout 60 "$B/locusctl" push --cluster --etcd http://127.0.0.1:2379 --cluster-id 11 \
		--timeout-ms 30000 "$1" > "$W/push.out" 2>&1
	local rc=$?
	sed 's/^/  /' "$W/push.out"
	return $rc
}

# adopted NODE: both tables of the cluster in force on nN (generation 1 of each)
adopted() {
	local n=$1 i
	for i in $(seq 300); do
		[ "$(grep -c 'table generation 1 adopted' "$W/n$n.log")" -ge "${2:-2}" ] && return 0
		sleep 0.1
	done
	return 1
}

for n in 0 1 2; do mkconf $n; : > "$W/n$n.log"; done
start 0 && start 1 || { fail "n0 or n1 did not start"; echo "GUEST RESULT rc=1"; exit 1; }
if wait_log "$W/n0.log" "peer node 1 up" 1 90 && wait_log "$W/n1.log" "peer node 0 up" 1 30; then
	say "   n0 and n1 found each other through etcd and connected"
else
	show_logs 20
	fail "n0 and n1 did not connect"
	echo "GUEST RESULT rc=1"
	exit 1
fi
grep -q 'cluster: node 1 is up' "$W/n0.log" || fail "n0 did not log node 1's record"
push_cluster "$LV_TABLES/eldr.tbl" || fail "push --cluster of the ELDR table"
push_cluster "$LV_TABLES/grace.tbl" || fail "push --cluster of the GRACE placement"
grep -q '^2 of 2 node(s) adopted it' "$W/push.out" || fail "not every member adopted the placement"
loadgen "$W/t1.out" n0,n0,n1,n1 0 "" --requests 200 --decode-us 500 --seconds 60
rc=$?
sed 's/^/  /' "$W/t1.out" | tail -n 4
grep -q '^loadgen: ok$' "$W/t1.out" && [ $rc = 0 ] || fail "routing across n0 and n1 (exit $rc)"

# ---- a node added at run time -----------------------------------------------------------------
say "2. n2 started at run time: n0 and n1 connect to it; traffic across the three nodes"
t_start=$(now_ms)
start 2 || { fail "n2 did not start"; show_logs 20; echo "GUEST RESULT rc=1"; exit 1; }
if wait_log "$W/n0.log" "peer node 2 up" 1 90 && wait_log "$W/n1.log" "peer node 2 up" 1 60 &&
   wait_log "$W/n2.log" "peer node 0 up" 1 30 && wait_log "$W/n2.log" "peer node 1 up" 1 30; then
	t_conn=$(now_ms)
	say "   n2 connected to n0 and n1 $((t_conn - t_start)) ms after its start (n0, n1 not restarted)"
else
	show_logs 20
	fail "n2 did not connect to both"
fi
adopted 2 || fail "n2 did not adopt the cluster's tables by itself"
say "   n2 adopted the cluster's two tables $(( $(now_ms) - t_start)) ms after its start"
loadgen "$W/t2.out" n0,n1,n2,n2 6 n0,n0,n1,n1,n2,n2 --requests 200 --batches 10 --tokens 16 \
	--row-bytes 1024 --decode-us 500 --seconds 90
rc=$?
t_traffic=$(now_ms)
sed 's/^/  /' "$W/t2.out" | tail -n 6
grep -q '^loadgen: ok$' "$W/t2.out" && [ $rc = 0 ] || fail "traffic across three nodes (exit $rc)"
for n in 0 1 2; do
	o=$("$B/locus-stat" -i "n$n" remote_messages_out | awk '{s += $3} END {print s + 0}')
	[ "${o:-0}" -gt 0 ] || fail "n$n sent nothing to other nodes"
done
say "   from n2's start to the end of its first checked traffic: $((t_traffic - t_start)) ms"

# ---- a node that dies ----------------------------------------------------------------------------
say "3. n2 killed (-9): n0 and n1 see it leave within its lease ($LEASE_S s)"
t_kill=$(now_ms)
kill -9 "${PID[n2]}"
wait "${PID[n2]}" 2>/dev/null
unset 'PID[n2]'
if wait_log "$W/n0.log" "cluster: node 2 left" 1 30 && wait_log "$W/n1.log" "cluster: node 2 left" 1 10
then
	t_gone=$(now_ms)
	say "   n0 and n1 saw node 2 leave $((t_gone - t_kill)) ms after the kill (lease $LEASE_S s)"
	[ $((t_gone - t_kill)) -le $((LEASE_S * 1000 * 2 + 3000)) ] ||
		fail "node 2 left later than twice its lease plus 3 s"
else
	show_logs 10
	fail "node 2's departure not seen"
fi
loadgen "$W/t3.out" n0,n0,n1,n1 0 "" --requests 100 --decode-us 500 --seconds 60
rc=$?
sed 's/^/  /' "$W/t3.out" | tail -n 4
grep -q '^loadgen: ok$' "$W/t3.out" && [ $rc = 0 ] || fail "routing between n0 and n1 after n2 left"

# ---- back -----------------------------------------------------------------------------------------
say "4. n2 started again: its record back at once (its lease file), traffic again"
t_start=$(now_ms)
start 2 || { fail "n2 did not come back"; show_logs 20; }
if wait_log "$W/n0.log" "peer node 2 up" 2 90 && wait_log "$W/n1.log" "peer node 2 up" 2 60; then
	say "   n2 connected again $(( $(now_ms) - t_start)) ms after its start"
else
	show_logs 20
	fail "n2 did not connect again"
fi
grep -q 'in use' "$W/n2.log" && fail "n2 was refused its own id"
# a restarted locusd takes the cluster's tables from etcd, nobody pushes
adopted 2 4 || fail "n2 did not adopt the cluster's tables again by itself"
loadgen "$W/t4.out" n0,n1,n2,n2 6 n0,n0,n1,n1,n2,n2 --requests 100 --batches 10 --tokens 16 \
	--row-bytes 1024 --decode-us 500 --seconds 90
rc=$?
sed 's/^/  /' "$W/t4.out" | tail -n 6
grep -q '^loadgen: ok$' "$W/t4.out" && [ $rc = 0 ] || fail "traffic after n2 came back (exit $rc)"
# ---- one push, three nodes -----------------------------------------------------------------------
say "5. push --cluster with three members: every node answers"
push_cluster "$LV_TABLES/eldr.tbl" || fail "push --cluster to three nodes"
grep -q '^3 of 3 node(s) adopted it' "$W/push.out" || fail "not every one of the three adopted it"
# a placement change in two phases across the three nodes under dispatch traffic: the six
# ranks (two per node) take part, acknowledge the staged placement, and every row they get
# is checked against what they hold; the push commits once all six hold it
say "   a placement in two phases under traffic: six ranks acknowledge, then it commits"
loadgen "$W/t5.out" n0,n1,n2,n2 6 n0,n0,n1,n1,n2,n2 --requests 50 --batches 150 --tokens 16 \
	--row-bytes 1024 --decode-us 500 --seconds 150 --placements --weights 1024 &
PID[lg5]=$!
sleep 8 # the ranks attached and traffic flows
push_cluster "$LV_TABLES/grace2.tbl" || fail "two-phase push to three nodes"
grep -q '^committed placement generation 2: 3 node(s) and 6 rank client(s) acknowledged' \
	"$W/push.out" || fail "the placement was not committed with every rank's acknowledgement"
grep -q '^3 of 3 node(s) adopted it' "$W/push.out" || fail "not every node adopted the placement"
wait "${PID[lg5]}"
rc=$?
sed 's/^/  /' "$W/t5.out" | tail -n 9
grep -q '^loadgen: ok$' "$W/t5.out" || { sed 's/^/  [t5] /' "$W/t5.out" | head -n 40; show_logs 25; }
grep -Eq '^weights: [1-9][0-9]* moves; experts received [0-9]+ from their node, [1-9]' "$W/t5.out" ||
	fail "no weights moved across nodes for the placement change"
grep -q '^loadgen: ok$' "$W/t5.out" && [ $rc = 0 ] || fail "traffic across the switch (exit $rc)"
grep -Eq '^placements: the ranks acknowledged [1-9]' "$W/t5.out" ||
	fail "the ranks acknowledged no placement"
for n in 0 1 2; do
	r=$("$B/locus-stat" -i "n$n" rejected_placement 2>/dev/null |
		awk '/rejected_placement/ { s += $3 } END { print s + 0 }')
	[ "$r" = 0 ] || fail "n$n refused $r rows for their placement"
done
for n in 0 1 2; do
	"$B/locus-stat" -i "n$n" 'cluster_*' 2>/dev/null | sed "s/^/  [n$n] /" | grep -v 'KIND' |
		head -n 26
done

# ---- a node lost under traffic, recovered, and back ----------------------------------------------
say "5b. n2's locusd killed -9 under masked dispatch traffic; recover refits; n2 back"
# dispatch batches of n0 and n1's ranks, summed, every 0.25 s: the survivors' rate
sampler() {
	while :; do
		local t v0 v1
		t=$(now_ms)
		v0=$("$B/locus-stat" -i n0 dispatch_batches 2>/dev/null | awk '$1 == "dispatch_batches" { print $3 }')
		v1=$("$B/locus-stat" -i n1 dispatch_batches 2>/dev/null | awk '$1 == "dispatch_batches" { print $3 }')
		echo "$t ${v0:-0} ${v1:-0}"
		sleep 0.25
	done
}
gen_of() { "$B/locus-stat" -i "n$1" cluster_placement_generation 2>/dev/null | awk '$1 == "cluster_placement_generation" { print $3 }'; }
lost_of() { "$B/locus-stat" -i "n$1" ranks_lost 2>/dev/null | awk '$1 == "ranks_lost" { print $3 }'; }
timeout 300 "$B/locusctl" recover --cluster --etcd http://127.0.0.1:2379 --cluster-id 11 \
	--interval 0.1 --settle-ms 500 --lease-s 5 --expert-bytes 44040192 > "$W/recover.out" 2>&1 &
PID[rec]=$!
sampler > "$W/rate.txt" &
PID[smp]=$!
g0=$(gen_of 0)
loadgen "$W/t5b.out" n0,n1,n2,n2 6 n0,n0,n1,n1,n2,n2 --requests 20 --batches 100000 \
	--tokens 16 --row-bytes 1024 --decode-us 500 --seconds 150 --placements --mask \
	--allow-errors --batch-ms 5000 --weights 4096 &
PID[lg5b]=$!
# loadgen_stop: SIGTERM: no new batch, what is sent finishes (a run of no fixed length)
loadgen_stop() { pkill -TERM -x locus-loadgen; }
sleep 10
t_kill=$(now_ms)
kill -9 "${PID[n2]}"
wait "${PID[n2]}" 2>/dev/null
unset "PID[n2]"
t_mask=
t_commit=
for _ in $(seq 300); do
	[ -z "$t_mask" ] && [ "$(lost_of 0)" = 2 ] && [ "$(lost_of 1)" = 2 ] && t_mask=$(now_ms)
	[ -z "$t_commit" ] && [ "$(gen_of 0)" -gt "$g0" ] 2>/dev/null && [ "$(gen_of 1)" -gt "$g0" ] 2>/dev/null && t_commit=$(now_ms)
	[ -n "$t_mask" ] && [ -n "$t_commit" ] && break
	sleep 0.1
done
[ -n "$t_mask" ] || fail "n0 and n1 did not mask n2's two ranks"
[ -n "$t_commit" ] || { sed 's/^/  [recover] /' "$W/recover.out"; fail "no survivors' placement committed"; }
sleep 12 # the survivors' steady state on their placement
t_term=$(now_ms)
loadgen_stop
wait "${PID[lg5b]}"
rc=$?
kill "${PID[smp]}" 2>/dev/null
sed 's/^/  /' "$W/t5b.out" | tail -n 11
grep -Eq '^checks: 0 corrupt, 0 duplicate' "$W/t5b.out" || fail "rows lost their check under the node kill"
grep -q '^loadgen: ok$' "$W/t5b.out" && [ $rc = 0 ] || fail "masked traffic across the node kill (exit $rc)"
grep -E '^recover: (a placement over|[0-9]+ expert copies|committed)' "$W/recover.out" | head -n 3 |
	sed 's/^/  /'
# one placement on the survivors, and no row reached a rank that did not hold its experts
[ "$(gen_of 0)" = "$(gen_of 1)" ] || fail "n0 and n1 plan with other placements: $(gen_of 0), $(gen_of 1)"
grep -q '^mask: [1-9]' "$W/t5b.out" || fail "no pair was masked: n2's ranks held experts of their own"
for n in 0 1; do
	r=$("$B/locus-stat" -i "n$n" rejected_placement 2>/dev/null |
		awk '/rejected_placement/ { s += $3 } END { print s + 0 }')
	[ "$r" = 0 ] || fail "n$n refused $r rows for their placement"
done
# the survivors' rate: per 1 s window after the kill, against the 5 s before the stop
awk -v k="$t_kill" -v e="$t_term" '
	{ t[NR] = $1; v[NR] = $2 + $3 }
	END {
		for (i = 1; i <= NR; i++) if (t[i] >= e - 5000) { s = i; break }
		for (z = NR; z > s && t[z] > e; z--);
		steady = (v[z] - v[s]) / ((t[z] - t[s]) / 1000)
		for (i = 1; i <= NR; i++) {
			if (t[i] < k) continue
			for (j = i; j <= NR && t[j] < t[i] + 1000; j++);
			if (j > z) break
			r = (v[j] - v[i]) / ((t[j] - t[i]) / 1000)
			if (r >= 0.95 * steady) { printf "%d %.1f\n", t[i] - k, steady; exit }
		}
		printf "-1 %.1f\n", steady
	}' "$W/rate.txt" > "$W/back95.txt"
read -r t95 steady < "$W/back95.txt"
# when n0's transport saw n2 go (its rail failed over): masking follows that within a load period
t_det=$("$B/locus-stat" -i n0 rail_failed_at_ms 2>/dev/null | awk '$1 ~ /^rail_failed_at_ms/ && $3 > 0 { print $3; exit }')
det='?'
[ -n "$t_det" ] && [ "$t_det" -ge "$t_kill" ] && det=$((t_det - t_kill))
say "   n2 killed -9: n0's transport saw it after $det ms; masked on n0 and n1 after $((t_mask - t_kill)) ms (poll step 100 ms); survivors' placement committed after $((t_commit - t_kill)) ms; survivors' dispatch rate back to 95 % of their steady ${steady} batches/s after ${t95} ms (-1: never)"
say "   anchors: SGLang elastic EP ~6-7 s downtime; EEP paper 11 s pause, 95 % after 52 s; Mooncake deactivates a silent rank after 30 s"
# n2 back: it joins, its ranks attach, a placement that uses them commits, rows reach it
say "   n2 started again under traffic: a placement using it commits, rows reach its ranks"
g1=$(gen_of 0)
t_back=$(now_ms)
start 2 || fail "n2 did not start again"
loadgen "$W/t5c.out" n0,n1,n2,n2 6 n0,n0,n1,n1,n2,n2 --requests 20 --batches 100000 \
	--tokens 16 --row-bytes 1024 --decode-us 500 --seconds 150 --placements --mask \
	--weights 4096 &
PID[lg5c]=$!
t_use=
t_rows=
for _ in $(seq 600); do
	[ -z "$t_use" ] && [ "$(gen_of 2)" -gt "$g1" ] 2>/dev/null && t_use=$(now_ms)
	if [ -z "$t_rows" ]; then
		# n2's ranks answer rows (COMBINE) only once a placement gives them experts
		r2=$("$B/locus-stat" -i n2 combine_batches 2>/dev/null | awk '$1 == "combine_batches" { print $3 }')
		[ "${r2:-0}" -gt 0 ] && t_rows=$(now_ms)
	fi
	[ -n "$t_use" ] && [ -n "$t_rows" ] && break
	sleep 0.1
done
sleep 5
loadgen_stop
wait "${PID[lg5c]}"
rc=$?
sed 's/^/  /' "$W/t5c.out" | tail -n 7
# n2's ranks came back empty: what the placement gives them comes from n0 and n1's
grep -Eq '^weights: [1-9][0-9]* moves; experts received [0-9]+ from their node, [1-9]' "$W/t5c.out" ||
	fail "n2's ranks got no weights from the other nodes"
[ -n "$t_use" ] || { sed 's/^/  [recover] /' "$W/recover.out" | tail -n 12; fail "no placement using n2 again"; }
[ -n "$t_rows" ] || fail "no rows reached n2 after it came back"
grep -q '^loadgen: ok$' "$W/t5c.out" && [ $rc = 0 ] || fail "traffic with n2 back (exit $rc)"
say "   n2 back: a placement using its ranks committed $((t_use - t_back)) ms after its start, rows on it after $((t_rows - t_back)) ms"
[ "$(gen_of 0)" = "$(gen_of 2)" ] && [ "$(gen_of 1)" = "$(gen_of 2)" ] ||
	fail "the three nodes plan with other placements: $(gen_of 0) $(gen_of 1) $(gen_of 2)"
slow=$("$B/locus-stat" -i n0 --slow 2>&1)
echo "$slow" | head -n 14 | sed 's/^/  [n0 --slow] /'
"$B/locus-stat" -i n0 rail_peer_node 2>&1 | sed 's/^/  [n0] /'
# n0's peers are nodes 1 and 2: the rails table names them, not their indices
echo "$slow" | awk '/^rails to peers/ { on = 1; next } on && $1 ~ /^[0-9]+$/ { print $2 }' |
	grep -qx 0 && fail "locus-stat --slow names node 0 as n0's peer"
echo "$slow" | grep -Eq '^ +4 +2 +[1-9]' || fail "n0 timed no answer of rank 4 (n2)"
kill "${PID[rec]}" 2>/dev/null
wait "${PID[rec]}" 2>/dev/null
unset "PID[rec]"
sed 's/^/  [recover] /' "$W/recover.out" | grep -E 'leads|committed|placement over' | head -n 8

# ---- chaos: a partition, etcd restarted, a rank client killed --------------------------------------
chaos_start() { # OUT [loadgen args]: recover (if not running) and masked, checked traffic
	local out=$1
	shift
	if [ -z "${PID[rec]:-}" ]; then
		timeout 400 "$B/locusctl" recover --cluster --etcd http://127.0.0.1:2379 \
			--cluster-id 11 --interval 0.1 --settle-ms 500 --lease-s 5 >> "$W/recover.out" 2>&1 &
		PID[rec]=$!
	fi
	loadgen "$out" n0,n1,n2,n2 6 n0,n0,n1,n1,n2,n2 --requests 20 --batches 100000 \
		--tokens 16 --row-bytes 1024 --decode-us 500 --seconds 200 --placements --mask \
		--allow-errors --batch-ms 5000 --weights 4096 "$@" &
	PID[lgc]=$!
}
chaos_stop() { # OUT WHAT: stop the traffic, check it
	loadgen_stop
	wait "${PID[lgc]}"
	local rc=$?
	sed 's/^/  /' "$1" | grep -E '^  (mask|checks|killed|allowed|weights|loadgen)'
	grep -Eq '^checks: 0 corrupt, 0 duplicate' "$1" || fail "$2: rows lost their check"
	grep -q '^loadgen: ok$' "$1" && [ $rc = 0 ] || fail "$2: traffic (exit $rc)"
}
one_placement() { # WHAT: every live node plans with the same generation
	local g0 g1 g2
	g0=$(gen_of 0) g1=$(gen_of 1) g2=$(gen_of 2)
	[ "$g0" = "$g1" ] && [ "$g1" = "$g2" ] || fail "$1: the nodes plan with $g0, $g1, $g2"
}
wait_until() { # SECONDS CMD...: poll every 0.1 s; prints the ms it took, or fails (rc 1)
	local t0 n
	t0=$(now_ms)
	n=$(($1 * 10))
	shift
	for _ in $(seq "$n"); do
		"$@" && { echo $(($(now_ms) - t0)); return 0; }
		sleep 0.1
	done
	return 1
}
lost_is() { [ "$(lost_of "$1")" = "$2" ]; }
gen_above() { [ "$(gen_of "$1")" -gt "$2" ] 2>/dev/null; }

recover_tail() { tail -n 12 "$W/recover.out" | sed 's/^/  [recover] /'; }
# cut_and_heal STEP OUT CUT HEAL HOW: under traffic, n2 is cut (eval CUT): n0 and n1 mask its
# ranks and a placement without them commits; then healed (eval HEAL): its ranks are live again
# and a placement using them commits. HOW names the cut in the lines said and failed.
cut_and_heal() {
	local step=$1 out=$2 cut=$3 heal=$4 how=$5 g t0 t1 a b
	chaos_start "$out"
	wait_until 60 lost_is 0 0 > /dev/null || fail "the ranks of $step did not all attach"
	sleep 5
	g=$(gen_of 0)
	t0=$(now_ms)
	eval "$cut"
	a=$(wait_until 30 lost_is 0 2) && b=$(wait_until 30 lost_is 1 2) ||
		fail "n0 and n1 did not mask the ranks of n2, $how"
	wait_until 60 gen_above 0 "$g" > /dev/null || { recover_tail; fail "no placement without n2, $how"; }
	t1=$(now_ms)
	say "   n2 $how: masked on n0 after $a ms, on n1 $b ms later; a placement without n2's ranks committed after $((t1 - t0)) ms"
	g=$(gen_of 0)
	sleep 4
	t0=$(now_ms)
	eval "$heal"
	a=$(wait_until 60 lost_is 0 0) || fail "n0 did not see n2's ranks again after the heal ($how)"
	wait_until 60 gen_above 0 "$g" > /dev/null || { recover_tail; fail "no placement using n2 after the heal ($how)"; }
	t1=$(now_ms)
	say "   healed: n2's ranks live on n0 after $a ms; a placement using them committed after $((t1 - t0)) ms"
	sleep 4
	chaos_stop "$out" "n2 $how"
	one_placement "n2 $how"
}

say "5c. n2 cut off from n0 and n1 (its bridge port down), not from etcd; then healed"
cut_and_heal 5c "$W/t5c2.out" "ip link set vcbr down" "ip link set vcbr up" "cut off from its peers"

say "5d. etcd killed -9 and restarted under traffic: the data plane does not notice"
chaos_start "$W/t5d.out"
sleep 6
g=$(gen_of 0)
kill -9 "${PID[etcd]}"
wait "${PID[etcd]}" 2>/dev/null
sleep 3
etcd --name default --data-dir "$W/etcd" --listen-client-urls "$ETCD_URLS" \
	--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
	--initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster default=http://127.0.0.1:2380 >> "$W/etcd.log" 2>&1 &
PID[etcd]=$!
members3() { [ "$("$B/locus-stat" -i n0 cluster_members | awk '$1 == "cluster_members" { print $3 }')" = 3 ]; }
a=$(wait_until 60 members3) || fail "n0 did not see three members after etcd came back"
sleep 4
chaos_stop "$W/t5d.out" "etcd restarted"
grep -Eq '^mask: 0 ' "$W/t5d.out" || fail "pairs were masked while only etcd was away"
grep -Eq '^checks: 0 corrupt, 0 duplicate, 0 errors' "$W/t5d.out" ||
	fail "requests failed while only etcd was away"
one_placement "etcd restarted"
say "   etcd back after 3 s away: three members again after $a ms; no pair masked, no request failed; placement $g then $(gen_of 0)"

say "5e. rank 5's client (on n2) killed -9 under traffic"
g=$(gen_of 0)
chaos_start "$W/t5e.out" --kill-rank 5:dispatch:60
# every rank attached and known first (while they attach, n0 counts some lost)
wait_until 60 lost_is 0 0 > /dev/null || fail "the ranks of 5e did not all attach"
a=$(wait_until 90 lost_is 0 1) || fail "n0 did not mask rank 5"
tm=$("$B/locus-stat" -i n0 ranks_lost_changed_at | awk '$1 == "ranks_lost_changed_at" { print $3 }')
t0=$(now_ms)
c=$(wait_until 60 gen_above 0 "$g") || { recover_tail; fail "no placement without rank 5"; }
t1=$(now_ms)
sleep 4
chaos_stop "$W/t5e.out" "a rank killed"
one_placement "a rank killed"
tk=$(sed -n 's/.* at \([0-9.]*\) s (CLOCK_MONOTONIC)$/\1/p' "$W/t5e.out" | head -n 1)
[ -n "$tk" ] && [ -n "$tm" ] &&
	say "   rank 5 killed -9: n0 counted it lost $(awk -v k="$tk" -v m="$tm" 'BEGIN { printf "%.0f", m - k * 1000 }') ms from its death by the guest's monotonic clock (read on two vCPUs: under TCG they differ by up to ~0.1 s); a placement without it committed within $((t1 - t0 + 100)) ms after that was seen"

say "5f. n2 cut off from etcd (not from n0 and n1) under traffic; then healed (its lease is ${LEASE_S} s)"
# n2's packets to its etcd address are dropped: its requests hang, its lease expires
cut_and_heal 5f "$W/t5f.out" "ip rule add pref 5 to 127.0.0.2 blackhole" \
	"ip rule del pref 5 to 127.0.0.2 blackhole" "cut off from etcd"
grep -E 'etcd' "$W/n2.log" | tail -n 3 | sed 's/^/  [n2 log] /'
kill "${PID[rec]}" 2>/dev/null
wait "${PID[rec]}" 2>/dev/null
unset "PID[rec]"

# ---- groups: connect only what talks -------------------------------------------------------------
say "6. the three nodes again, in two groups (0-1 and 1-2): n0 and n2 never connect"
for n in 0 1 2; do kill "${PID[n$n]}" 2>/dev/null; done
for n in 0 1 2; do wait "${PID[n$n]}" 2>/dev/null; unset "PID[n$n]"; done
for n in 0 1 2; do cp "$W/n$n.log" "$W/n$n.log.before6"; done
n1_up0=$(grep -c "peer node 0 up" "$W/n1.log")
n1_up2=$(grep -c "peer node 2 up" "$W/n1.log")
NODE_GROUPS=$'group.a = 0-1\ngroup.b = 1-2'
for n in 0 1 2; do mkconf $n; done
start 0 && start 1 && start 2 || fail "the nodes did not start with groups"
# since6 N: node N's log lines since this step began
since6() { tail -n +$(($(wc -l < "$W/n$1.log.before6") + 1)) "$W/n$1.log"; }
since6 0 | grep -q '1 peer(s) (the nodes of its groups)' ||
	fail "n0 declared other peers than its group's: $(since6 0 | grep 'peer(s)')"
since6 1 | grep -q '2 peer(s) (the nodes of its groups)' ||
	fail "n1 declared other peers than its groups': $(since6 1 | grep 'peer(s)')"
since6 2 | grep -q '1 peer(s) (the nodes of its groups)' ||
	fail "n2 declared other peers than its group's: $(since6 2 | grep 'peer(s)')"
if wait_log "$W/n1.log" "peer node 0 up" $((n1_up0 + 1)) 60 &&
	wait_log "$W/n1.log" "peer node 2 up" $((n1_up2 + 1)) 60 &&
	wait_log "$W/n0.log" "cluster: node 2 is up.*in none of this node's groups" 1 30 &&
	wait_log "$W/n2.log" "cluster: node 0 is up.*in none of this node's groups" 1 30; then
	say "   n1 connected to n0 and n2; n0 and n2 saw each other's records and left them alone"
else
	show_logs 20
	fail "the groups' connections"
fi
sleep 2 # had n0 and n2 dialled each other, they would be up by now
for n in 0 2; do
	o=$((2 - n))
	[ "$(grep -c "peer node $o up" "$W/n$n.log")" = \
		"$(grep -c "peer node $o up" "$W/n$n.log.before6" 2>/dev/null || echo 0)" ] ||
		fail "n$n connected to n$o, outside its groups"
	v=$("$B/locus-stat" -i "n$n" cluster_records_outside | awk '$1 == "cluster_records_outside" { print $3 }')
	[ "${v:-0}" -ge 1 ] || fail "n$n did not count n$o's record as outside its groups"
done
wait_log "$W/n0.log" "eldr table generation 2 adopted" 2 60 ||
	fail "n0 did not adopt the cluster's tables again"
# decoders on every node, prefill on n0: n0 routes to the decoders of its group only (n2's
# never report their loads to it), and sends n2 nothing
loadgen "$W/t6.out" n0,n1,n2,n2 0 "" --requests 100 --decode-us 500 --seconds 60
rc=$?
sed 's/^/  /' "$W/t6.out" | tail -n 4
grep -q '^loadgen: ok$' "$W/t6.out" && [ $rc = 0 ] || fail "routing within group a (exit $rc)"
o=$("$B/locus-stat" -i n0 'remote_messages_out' | awk '/node=2/ { print $3 }')
[ "${o:-0}" = 0 ] || fail "n0 sent $o messages to n2, outside its groups"
o=$("$B/locus-stat" -i n0 'remote_messages_out' | awk '/node=1/ { print $3 }')
[ "${o:-0}" -gt 0 ] || fail "n0 routed nothing to n1, in its group"
say "done in $((SECONDS - T0)) s"
echo "GUEST RESULT rc=$FAILED"
exit $FAILED
