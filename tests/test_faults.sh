#!/bin/bash
# Faults injected into one locusd on this host, under traffic (the inter-node
# ones, on Soft-RoCE, are in tests/vm/guest-faults.sh):
#  1. locusctl push killed by SIGKILL at random points, 60 times in a row,
#     while locus-loadgen routes: after each kill the table in force is the
#     old one, or the new one whole when the kill came after the publish;
#     the next push is adopted; no table refused, no request refused.
#  2. a rank killed right after submitting a DISPATCH, and right after a
#     COMBINE, with rows for it in flight (locus-loadgen --kill-rank): the
#     slot is reclaimed, the other ranks' requests complete exactly once
#     (those to the dead rank with "peer down", as many as locusd counted),
#     a new process takes the rank over (--respawn) and traffic goes on; with
#     every client still attached and idle, no inbox slot and no pending
#     request is left (gauges inbox_slots_used, requests_pending).
#  3. locusd killed by SIGKILL with clients attached: each learns it through
#     the client API within a bound; a restarted locusd takes the segment
#     over, they attach again and are served.
# Segments live in a private directory; every wait is bounded.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
B=$BUILD/bin
tmp=$(mktemp -d)
export LOCUS_SHM_DIR=$tmp/shm LOCUS_STATE_DIR=$tmp/state
mkdir -p "$LOCUS_SHM_DIR" "$LOCUS_STATE_DIR"
inst=flt-$$
pid=
bg=()
cleanup() {
	for p in $pid "${bg[@]+"${bg[@]}"}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_faults: FAIL: $*" >&2; exit 1; }
. tests/lib.sh # wait_running
say() { echo "test_faults: $*"; }
trace=tests/data/calib_sample.jsonl

cat > "$tmp/a.conf" <<CONF
[locusd]
instance = $inst
eal_args = -l 0-1 --no-huge --no-pci -m 64
idle_sleep_us = 50
client_slots = 16
client_inbox_slots = 256
CONF
start() { # n-th start of the instance (its log says "running" n times)
	"$B/locusd" -c "$tmp/a.conf" >> "$tmp/d.log" 2>&1 &
	pid=$!
	wait_running "$inst" $pid "$tmp/d.log" "$1" || fail "locusd did not come up"
}
# ctr NAME [LABEL-FILTER]: a counter or gauge of the instance, summed over elements
ctr() {
	"$B/locus-stat" -i $inst -p "$1" 2>/dev/null |
		awk -v n="locus_$1" -v f="${2:-}" '
			$1 !~ /^#/ && (index($1, n "{") == 1 || index($1, n "_total") == 1 || $1 == n) &&
			(f == "" || index($1, f)) { s += $2 } END { printf "%d\n", s }'
}
push() { "$B/locusctl" push -i $inst "$1" > "$tmp/push.out" 2>&1 || { cat "$tmp/push.out"; fail "push $1"; }; }
in_force() { "$B/locusctl" diff -i $inst "$1" 2>/dev/null | grep -x 'tables are equal' >/dev/null; }

"$B/locusctl" fit --trace $trace --decoders 4 --seed 1 -o "$tmp/e1.tbl" > /dev/null 2>&1 &&
	"$B/locusctl" fit --trace $trace --decoders 4 --seed 9 --tau 0.2 -o "$tmp/e2.tbl" \
		> /dev/null 2>&1 &&
	"$B/locusctl" fit --grace --trace $trace --nodes 1 --gpus 4 --capacity 20 \
		--replica-budget 4 -o "$tmp/g.tbl" > /dev/null 2>&1 || fail "fit"
start 1
push "$tmp/e1.tbl"
push "$tmp/g.tbl"
LG=("$B/locus-loadgen" -i $inst --trace $trace --decoders 4 --ranks 4)

# ---- 1. locusctl killed at random points of a push ----------------------------------------
"${LG[@]}" --requests 5000000 --batches 1000000 --tokens 8 --row-bytes 256 --decode-us 50 \
	--seconds 600 > "$tmp/lg1.out" 2>&1 &
lg=$!
bg+=($lg)
sleep 0.5
cur=$tmp/e1.tbl other=$tmp/e2.tbl
# how long a push takes here, under this traffic: the kills land anywhere in 1.3 times that
t0=${EPOCHREALTIME/./}
for _ in 1 2 3 4; do
	push "$other"
	t=$cur cur=$other other=$t
done
push_us=$(( (${EPOCHREALTIME/./} - t0) / 4 ))
mkfifo "$tmp/never"
exec 9<> "$tmp/never"
before=0 after=0 late=0
rej0=$(ctr table_rejected)
for i in $(seq 60); do
	gen0=$(ctr table_generation 'channel="0"')
	d=$(awk -v r=$RANDOM -v u=$push_us 'BEGIN { printf "%.6f", (50 + r % 1000 * u * 1.3 / 1000) / 1e6 }')
	"$B/locusctl" push -i $inst "$other" > /dev/null 2>&1 &
	p=$!
	read -r -t "$d" -u 9 # a delay without a fork: nothing ever comes on fd 9
	kill -9 $p 2>/dev/null
	{ wait $p; } 2>/dev/null # gone for good before the next push looks at its lock
	# locusd may still publish a push whose sender died after sending it, and
	# the engine's gauge follows the publish at its next poll: settle (bounded)
	# until the gauge and the table in force agree, one way or the other
	state=
	for _ in $(seq 100); do
		gen1=$(ctr table_generation 'channel="0"')
		if [ "$gen1" = "$gen0" ] && in_force "$cur"; then
			state=before
			break
		elif [ "$gen1" = $((gen0 + 1)) ] && in_force "$other"; then
			state=after # killed after the publish: the new table whole
			break
		elif [ "$gen1" = $((gen0 + 1)) ] && in_force "$cur"; then
			# the table in force pushed again: an earlier kill's sender had handed
			# it over whole and locusd published it only now (a loaded host)
			state=stale
			break
		fi
		sleep 0.02
	done
	case $state in
	before) before=$((before + 1)) ;;
	stale) late=$((late + 1)) ;;
	after) t=$cur cur=$other other=$t after=$((after + 1)) ;;
	*)
		if in_force "$cur"; then what="the old one"
		elif in_force "$other"; then what="the new one"
		else what=neither; fi
		fail "kill $i (after $d s): generation $gen0 -> $gen1 and the table in force is $what" \
			"(after 100 looks)" ;;
	esac
	# the next push is adopted; a push the dead sender had handed over whole
	# may still have been published after the look above (then it was this
	# same table, and this push is one generation later)
	push "$other"
	if ! grep -q "generation $((gen1 + 1))" "$tmp/push.out"; then
		[ $state != after ] && grep -q "generation $((gen1 + 2))" "$tmp/push.out" ||
			fail "push after kill $i: $(cat "$tmp/push.out")"
		[ $state = before ] && before=$((before - 1))
		late=$((late + 1))
	fi
	in_force "$other" || fail "push after kill $i: not in force"
	t=$cur cur=$other other=$t
done
kill -0 $lg 2>/dev/null || { cat "$tmp/lg1.out"; fail "loadgen ended during the kills"; }
kill -TERM $lg
wait $lg
rc=$?
[ $rc = 0 ] && grep -q '^loadgen: ok$' "$tmp/lg1.out" || { cat "$tmp/lg1.out"; fail "traffic under the kills"; }
say "1. a push takes $push_us us here; 60 pushes killed 50 us to $((push_us * 13 / 10)) us in:" \
	"$before before the publish (old table kept), $after after it (new table adopted whole," \
	"in the history), $late published by locusd after the look (the sender had handed it" \
	"over whole); each next push adopted; table generation now" \
	"$(ctr table_generation 'channel="0"'); traffic meanwhile:" \
	"$(grep -o '^stopped by a signal: .*' "$tmp/lg1.out" | cut -d: -f2)"
grep '^checks:' "$tmp/lg1.out"
[ "$(ctr table_rejected)" = "$rej0" ] || fail "tables refused: $(ctr table_rejected)"
for c in rejected_no_table rejected_bad_signature rejected_no_decoder rejected_bad_descriptor; do
	[ "$(ctr $c)" = 0 ] || fail "$c = $(ctr $c) under the kills"
done
[ $before -gt 0 ] || fail "no kill landed before a publish: the kill points do not cover the push"
"$B/locusctl" push -i $inst "$tmp/g.tbl" > /dev/null || fail "GRACE push after the kills"

# ---- 2. a rank killed mid-dispatch, mid-combine ---------------------------------------------
# lg_kill NAME ARGS...: one run; while every client is still attached and idle (--linger-ms)
# no inbox slot and no pending request may be left
lg_kill() {
	local name=$1 rec0 pd0 out=$tmp/$1.out
	shift
	rec0=$(ctr clients_reclaimed) pd0=$(ctr rejected_peer_down)
	timeout 120 "${LG[@]}" --requests 3000 --batches 200 --tokens 16 --row-bytes 1024 \
		--decode-us 100 --seconds 60 --allow-errors --batch-ms 300 --linger-ms 3000 "$@" \
		> "$out" 2>&1 &
	local l=$!
	used=x pend=x att=x
	for _ in $(seq 600); do
		grep -q '^loadgen: lingering' "$out" && break
		kill -0 $l 2>/dev/null || break
		sleep 0.1
	done
	for _ in $(seq 20); do
		used=$(ctr inbox_slots_used) pend=$(ctr requests_pending) att=$(ctr clients_attached)
		[ "$used" = 0 ] && [ "$pend" = 0 ] && break
		sleep 0.1
	done
	wait $l
	local rc=$?
	[ $rc = 0 ] && grep -q '^loadgen: ok$' "$out" || { cat "$out"; fail "$name: loadgen exit $rc"; }
	grep -q '^killed: .* (1 times)' "$out" || { cat "$out"; fail "$name: no kill"; }
	local pdl pd=$(( $(ctr rejected_peer_down) - pd0 ))
	pdl=$(sed -n 's/^  completed with peer down: //p' "$out")
	say "2. $name: $(grep -o 'leaving [0-9]* requests in flight; .*' "$out");" \
		"$(grep -o '[0-9]* batches given up' "$out"); ${pdl:-0} completions with 'peer down'" \
		"(locusd refused $pd for a rank not attached); idle with $att clients attached:" \
		"inbox slots used $used, requests pending $pend"
	[ "$used" = 0 ] && [ "$pend" = 0 ] || fail "$name: inbox slots $used, pending $pend left"
	[ "$(ctr clients_reclaimed)" = $((rec0 + 1)) ] || fail "$name: the dead rank was not reclaimed once"
	[ "${pdl:-0}" = "$pd" ] || fail "$name: loadgen saw ${pdl:-0} 'peer down', locusd refused $pd"
	grep -q 'checks: 0 corrupt, 0 duplicate' "$out" || fail "$name: $(cat "$out")"
}
lg_kill mid-dispatch --kill-rank 2:dispatch:40 --respawn
[ "$att" = 8 ] || fail "mid-dispatch: $att clients attached while idle, want 8 (the new rank 2)"
lg_kill mid-combine --kill-rank 1:combine:60 --respawn
lg_kill not-replaced --kill-rank 3:dispatch:20
[ "$(sed -n 's/^  completed with peer down: //p' "$tmp/not-replaced.out")" -gt 0 ] ||
	fail "not-replaced: no request to the dead rank failed"

# ---- 3. locusd killed with clients attached, restarted -----------------------------------------
for k in 0 1 2 3; do
	"$BUILD/tests/client_waiter" $inst $k 20 > "$tmp/w$k.out" 2>&1 &
	bg+=($!)
done
for _ in $(seq 100); do
	[ "$(cat "$tmp"/w?.out | grep -c '^attached')" = 4 ] && break
	sleep 0.05
done
[ "$(cat "$tmp"/w?.out | grep -c '^attached')" = 4 ] || fail "the waiters did not attach"
t_kill=$(date +%s%N)
kill -9 $pid
wait $pid 2>/dev/null
for _ in $(seq 100); do
	[ "$(cat "$tmp"/w?.out | grep -c '^learned')" = 4 ] && break
	sleep 0.05
done
worst=0
for k in 0 1 2 3; do
	l=$(sed -n 's/^learned \([0-9]*\).*/\1/p' "$tmp/w$k.out")
	[ -n "$l" ] || fail "client $k did not learn that locusd died: $(cat "$tmp/w$k.out")"
	ms=$(( (l - t_kill) / 1000000 ))
	[ $ms -gt $worst ] && worst=$ms
done
say "3. locusd killed with 4 clients attached: each poll said so within $worst ms" \
	"($(sed -n 's/^learned [0-9]* //p' "$tmp/w0.out"))"
[ $worst -le 1000 ] || fail "a client took $worst ms to learn its locusd died"
start 2
for _ in $(seq 200); do
	[ "$(cat "$tmp"/w?.out | grep -c '^served')" = 4 ] && break
	sleep 0.05
done
for k in 0 1 2 3; do
	grep -q '^served' "$tmp/w$k.out" || fail "client $k: $(cat "$tmp/w$k.out")"
done
for p in "${bg[@]}"; do wait "$p" 2>/dev/null; done
bg=()
say "   restarted locusd (pid $pid) took the segment over; the 4 attached again after" \
	"$(sed -n 's/^reattached after \([0-9]*\) ms/\1/p' "$tmp"/w?.out | tr '\n' ' ')ms and" \
	"each got the one completion of its ROUTE ($(sed -n 's/^served //p' "$tmp/w0.out"):" \
	"no table pushed yet); route_requests $(ctr route_requests), clients_detached" \
	"$(ctr clients_detached)"
[ "$(ctr route_requests)" = 4 ] || fail "the new locusd saw $(ctr route_requests) requests"
[ "$(ctr clients_detached)" = 4 ] || fail "clients_detached $(ctr clients_detached)"
kill -TERM $pid
wait $pid || fail "locusd exited non-zero on SIGTERM"
pid=
say "ok"
