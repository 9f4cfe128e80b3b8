#!/bin/sh
# Runs INSIDE the qemu guest (host root over 9p, chroot'ed), started by
# locusd-vm-test.sh: two locusd "nodes" of one cluster on Soft-RoCE,
#   n0 on rxex (vx, 192.0.2.20)  <-- veth pair -->  n1 on rxey (vy, 192.0.2.21)
# in the initial namespace (rxe on 6.1 answers RoCE only there; see
# guest-verbs.sh for the policy routing that makes the traffic cross the pair).
#   LV_WHAT=test   1 both up  2 tables fitted and pushed to both  3 traffic
#                  across nodes, checked end to end and in the counters
#                  3b the same with every rank's rows in a vgem dma-buf it
#                  registered with its locusd (which registration path the
#                  rxe device took, in the counters)
#                  4 n1 killed under traffic, restarted, traffic again
#                  5 n1 with a wrong secret refused
#   LV_WHAT=bench  locusd's inter-node byte rate against ib_write_bw on the
#                  same devices, same run (guest-bench.sh)
#   LV_WHAT=faults 1, 2, then the faults of guest-faults.sh (netem on the veth
#                  pair against the clean link, the link black-holed and set
#                  down, ranks killed mid-dispatch / mid-combine across nodes)
#   LV_WHAT=rails  two nodes with two rails each (a second veth pair, rxex2 /
#                  rxey2): traffic on both rails, then on one (guest-rails.sh)
# LV_LCORES (eal -l for both nodes): by default n0 runs three lcores (main:
# connections; worker 1: the engine; worker 2: completion queues and inboxes,
# reached through the relay) mapped onto the guest's two CPUs, n1 two (main
# and one worker polling both); "0" runs everything on one lcore.
# LV_N0_ENGINES (LV_WHAT=test: 2, else 1): n0's engine lcores; with 2, four
# lcores (main, engines on 1 and 2, each with a relay to the network on 3),
# so every step's traffic leaves n0 from two engines and arrives through
# engine 0, handed over to the other's clients.
# Every step is bounded; the exit status is the test's.
[ -n "${BASH_VERSION:-}" ] || exec /bin/bash "$0" "$@"
set -u
ROOT=${LV_ROOT:?}
B=${LV_BUILD:-$ROOT/build}/bin
WHAT=${LV_WHAT:-test}
LOCUSD_BIN=${LV_LOCUSD:-} # another locusd build to run (the default: $B/locusd)
cd "$ROOT" || exit 1
. "$ROOT/tests/vm/guest-lib.sh" # say, fail, W, PID, mksecret, wait_log

# ---- Soft-RoCE: two devices on a veth pair -------------------------------------------------
ip link set lo up
. "$ROOT/tests/vm/guest-veth.sh"
ulimit -l unlimited 2>/dev/null

guest_work locusd-vm
TRACE=tests/data/calib_sample.jsonl
# RC's ACK time-out: a round trip through locusd takes milliseconds in this TCG guest, not
# microseconds, so under the faults' netem the default 14 (67 ms) can time out packets that
# arrived and give connections up (deploy/README.md, rdma_ack_timeout). 16: 268 ms, a dead
# link after 1.9 s, still inside F2's 3 s black holes.
[ "$WHAT" = faults ] && : "${LV_ACK_TIMEOUT:=16}"
# a connection whose sends see no completion for 5 s fails (locusd's stall watch); on a
# loaded host this oversubscribed guest can go that long under F1's 1 % netem with no RC
# error, so the faults run gives it 10 s (still inside F4's 20 s wait for the drop)
[ "$WHAT" = faults ] && : "${LV_STALL_MS:=10000}"
# n1 moves its intra-node rows with the verbs loopback, n0 with the CPU
N0_ENGINES=${LV_N0_ENGINES:-$([ "$WHAT" = test ] && echo 2 || echo 1)}
# mkconf NODE SECRET-FILE [DEVICES ADDR0 ADDR1]: node NODE's config; the optional lists
# (one item per rail, guest-rails.sh) replace its device and both nodes' addresses
mkconf() {
	local dev=rxex intra=shm lcores="--lcores 0@0,1@1,2@0" engines=1
	local a0=${4:-192.0.2.20:7471} a1=${5:-192.0.2.21:7471}
	[ "$1" = 0 ] && [ "$N0_ENGINES" = 2 ] && engines=2 lcores="--lcores 0@0,1@1,2@0,3@1"
	[ "$1" = 1 ] && dev=rxey intra=${LV_N1_INTRA:-verbs} lcores="-l 0-1"
	dev=${3:-$dev}
	[ -n "${LV_LCORES:-}" ] && lcores="-l $LV_LCORES"
	cat > "$W/n$1.conf" <<CONF
[locusd]
instance = n$1
node = $1
eal_args = $lcores --no-huge --no-pci -m 64
rdma_device = $dev
intra_node = $intra
engine_lcores = $engines
secret_file = $2
idle_sleep_us = 50
client_slots = 16
client_inbox_slots = ${LV_INBOX_SLOTS:-256}
${LV_ACK_TIMEOUT:+rdma_ack_timeout = $LV_ACK_TIMEOUT}
${LV_STALL_MS:+rdma_stall_ms = $LV_STALL_MS}
[cluster]
id = 7
gpus_per_node = 2
node.0 = $a0
node.1 = $a1
CONF
}

start() { # node: start locusd nN, appending to its log; bounded wait for "running"
	${LOCUSD_WRAP:-} "${LOCUSD_BIN:-$B/locusd}" -c "$W/n$1.conf" >> "$W/n$1.log" 2>&1 &
	PID[n$1]=$!
	for _ in $(seq 300); do
		[ "$(grep -c "instance n$1 running" "$W/n$1.log")" -ge "${2:-1}" ] && return 0
		kill -0 "${PID[n$1]}" 2>/dev/null || break
		sleep 0.1
	done
	sed 's/^/  [n'"$1"'] /' "$W/n$1.log"
	return 1
}


# ctr INSTANCE NAME [LABEL-FILTER]: sum of a counter's elements (Prometheus text)
ctr() {
	"$B/locus-stat" -i "$1" -p "$2" 2>/dev/null |
		awk -v n="locus_$2" -v f="${3:-}" '
			$1 !~ /^#/ && (index($1, n "{") == 1 || index($1, n "_total") == 1 || $1 == n) &&
			(f == "" || index($1, f)) { s += $2 } END { printf "%d\n", s }'
}

# snap NODE FILE: every counter of node NODE in one locus-stat call (each call is slow here)
snap() { "$B/locus-stat" -i "n$1" -p > "$2" 2>/dev/null; }
# snap2 PREFIX: both nodes at once, into PREFIX.0 and PREFIX.1 (never a bare wait: the
# locusd processes are background jobs of this shell too)
snap2() {
	local p
	snap 0 "$1.0" &
	p=$!
	snap 1 "$1.1"
	wait $p
}
# val FILE NAME [LABEL-FILTER]: a counter's elements summed, from a snap (%.0f: some are wall-clock ms)
val() {
	awk -v n="locus_$2" -v f="${3:-}" '
		$1 !~ /^#/ && (index($1, n "{") == 1 || index($1, n "_total") == 1 || $1 == n) &&
		(f == "" || index($1, f)) { s += $2 } END { printf "%.0f\n", s }' "$1"
}

show_logs() {
	for n in 0 1; do tail -n "${1:-8}" "$W/n$n.log" | sed "s/^/  [n$n log] /"; done
}

# what an operator would look at when traffic went wrong
show_counters() {
	for n in 0 1; do
		"$B/locus-stat" -i n$n 'remote_*' 'rejected_*' 'client_protocol_errors' 'rows' \
			'messages' 'verbs_*' 2>&1 | sed "s/^/  [n$n] /"
	done
	show_logs 5
}

# loadgen across the two nodes: prefill on n0, decoders/ranks where told. Each attach
# may take 20 s: in this guest on a loaded host a main lcore can take more than
# loadgen's default 5 s to answer one.
LG_ATTACH="--attach-timeout-ms 20000"
loadgen() { # out-file decoder-at rank-at extra-args...
	local out=$1 dec=$2 rk=$3
	shift 3
	timeout 150 "$B/locus-loadgen" -i n0 $LG_ATTACH --trace $TRACE --prefill-at n0 \
		--decoders 4 --decoder-at "$dec" --ranks 4 --rank-at "$rk" "$@" > "$out" 2>&1
}

push_tables() { # node...
	local n
	for n in "$@"; do
		"$B/locusctl" push -i "n$n" "$W/eldr.tbl" > "$W/push.out" 2>&1 &&
			"$B/locusctl" push -i "n$n" "$W/grace.tbl" >> "$W/push.out" 2>&1 ||
			{ cat "$W/push.out"; return 1; }
		grep -o 'to n[01] channel [01]: generation [0-9]*' "$W/push.out" | sed 's/^/  pushed /'
	done
}

# the benchmark starts its own two nodes (guest-bench.sh)
[ "$WHAT" = bench ] && . "$ROOT/tests/vm/guest-bench.sh"
# so does the test of two rails per node (guest-rails.sh)
[ "$WHAT" = rails ] && . "$ROOT/tests/vm/guest-rails.sh"

# ---- 1. two nodes up -------------------------------------------------------------------------
say "1. start locusd n0 (rxex 192.0.2.20) and n1 (rxey 192.0.2.21), cluster 7, 2 GPUs per node"
mksecret "$W/secret"
mkconf 0 "$W/secret"
mkconf 1 "$W/secret"
: > "$W/n0.log"; : > "$W/n1.log"
start 0 && start 1 || { fail "a locusd did not start"; exit 1; }
if [ -z "${LV_LCORES:-}" ] && [ "$N0_ENGINES" = 2 ]; then
	grep -q "2 engines, each with a relay to the network (completion queues, inboxes) on lcore 3" \
		"$W/n0.log" || fail "n0 did not put two engines and the network on worker lcores"
	say "   n0: $(grep -o '2 engines, each with a relay.*' "$W/n0.log" | head -1)"
elif [ -z "${LV_LCORES:-}" ]; then
	grep -q "engine on lcore 1, network (completion queues, inboxes) on lcore 2" "$W/n0.log" ||
		fail "n0 did not put the engine and the network on two worker lcores"
	say "   n0: $(grep -o 'engine on lcore 1, network.*' "$W/n0.log" | head -1)"
fi
if wait_log "$W/n0.log" "peer node 1 up" 1 60 && wait_log "$W/n1.log" "peer node 0 up" 1 30; then
	say "   both peers up"
else
	show_logs 20
	fail "the nodes did not connect within 60 s"
	echo "GUEST RESULT rc=1"
	exit 1
fi

# ---- 2. tables --------------------------------------------------------------------------------
say "2. fit ELDR (4 decoders) and GRACE (2 nodes x 2 GPUs) from $TRACE, push to both"
# the faults run takes the same tables fitted by the host beforehand (LV_TABLES, the
# default fit: a version 2 table); fitted here in TCG, the table is the fixed fit
# (--tune off: the tuning's 16 fits and 1,058 replays do not end within the time-out)
if [ -n "${LV_TABLES:-}" ]; then
	cp "$LV_TABLES/eldr.tbl" "$LV_TABLES/grace.tbl" "$W/" && : > "$W/fit.out"
elif ! timeout 120 "$B/locusctl" fit --trace $TRACE --decoders 4 --seed 1 --tune off \
	-o "$W/eldr.tbl" \
	> "$W/fit.out" 2>&1 ||
   ! timeout 120 "$B/locusctl" fit --grace --trace $TRACE --nodes 2 --gpus 2 --capacity 20 \
	--replica-budget 4 -o "$W/grace.tbl" >> "$W/fit.out" 2>&1; then
	: > "$W/eldr.tbl"
fi
if [ ! -s "$W/eldr.tbl" ] || [ ! -s "$W/grace.tbl" ] || ! push_tables 0 1; then
	tail -n 5 "$W/fit.out"
	fail "fit or push"
	echo "GUEST RESULT rc=1"
	exit 1
fi

if [ "$WHAT" = faults ]; then
	. "$ROOT/tests/vm/guest-faults.sh"
	say "done in $((SECONDS - T0)) s"
	echo "GUEST RESULT rc=$FAILED"
	exit $FAILED
fi

# ---- 3. traffic across nodes --------------------------------------------------------------------
say "3. traffic: prefill n0; decoders 0,1 on n0, 2,3 on n1; ranks 0,1 on n0, 2,3 on n1"
VX0=$(ip -s link show vx | awk '/TX:/{getline; print $1}')
loadgen "$W/t3.out" n0,n0,n1,n1 n0,n0,n1,n1 --requests 300 --batches 20 --tokens 16 \
	--row-bytes 1024 --decode-us 500 --seconds 90
rc=$?
sed 's/^/  /' "$W/t3.out"
grep -q '^loadgen: ok$' "$W/t3.out" && [ $rc = 0 ] ||
	{ fail "loadgen across nodes (exit $rc)"; show_counters; }
VX1=$(ip -s link show vx | awk '/TX:/{getline; print $1}')
for n in 0 1; do
	o=$(ctr n$n remote_messages_out); i=$(ctr n$n remote_messages_in)
	ob=$(ctr n$n remote_bytes_out); t2=$(ctr n$n rows 'tier="2"')
	say "   n$n: remote messages out $o in $i, remote bytes out $ob, rows at tier 2: $t2"
	[ "$o" -gt 0 ] && [ "$i" -gt 0 ] || fail "n$n: no messages crossed"
	[ "$t2" -gt 0 ] || fail "n$n: no inter-node rows"
	for c in remote_send_errors remote_undeliverable remote_bad; do
		v=$(ctr n$n $c)
		[ "$v" = 0 ] || fail "n$n: $c = $v"
	done
done
lm=$(ctr n1 ldma_msgs); lb=$(ctr n1 ldma_bytes); t1=$(ctr n1 bytes 'tier="1"')
say "   n1 (intra_node = verbs): $lm intra-node messages, $lb row bytes moved by the rxe" \
	"loopback (tier-1 bytes $t1); errors $(ctr n1 ldma_errors), CPU fallbacks" \
	"$(ctr n1 ldma_fallbacks); n0 (shm): $(ctr n0 ldma_msgs)"
[ "$lm" -gt 0 ] && [ "$lb" -gt 0 ] || fail "n1: no intra-node rows went through the loopback"
[ "$(ctr n1 ldma_errors)" = 0 ] || fail "n1: loopback copies failed"
[ "$(ctr n0 ldma_msgs)" = 0 ] || fail "n0 (intra_node = shm) used the loopback"
if [ "$N0_ENGINES" = 2 ]; then
	# both of n0's engines sent to n1 through their own relays, and took in what n1 sent to
	# their own clients (the network lcore hands an arrival to its receiver's engine); both
	# handed over to the other engine's clients
	"$B/locus-stat" -i n0 --by-lcore --json remote_messages_out remote_messages_in \
		engine_handovers > "$W/bl.json" 2>&1 || fail "locus-stat -i n0 --by-lcore"
	python3 - "$W/bl.json" > "$W/bl.out" 2>&1 <<'PY'
import json, sys
def total(v):
    return v if isinstance(v, (int, float)) else sum(total(x) for x in v)
blocks = [json.loads(l) for l in open(sys.argv[1])]
eng = [b for b in blocks if b["lcore"].startswith("engine")]
val = lambda b, n: next(total(m["value"] if "value" in m else m["values"])
                        for m in b["metrics"] if m["name"] == n)
ok = (len(eng) == 2 and all(val(b, "remote_messages_out") > 0 and
                            val(b, "remote_messages_in") > 0 and
                            val(b, "engine_handovers") > 0 for b in eng))
print("n0 by engine: " + ", ".join("%s sent %d to n1, took in %d, handed over %d" % (
    b["lcore"], val(b, "remote_messages_out"), val(b, "remote_messages_in"),
    val(b, "engine_handovers")) for b in eng))
sys.exit(0 if ok else 1)
PY
	[ $? = 0 ] || fail "n0's two engines did not both send, take in and hand over: $(cat "$W/bl.json")"
	while read -r l; do say "   $l"; done < "$W/bl.out"
fi
r23=$(( $(ctr n0 routed 'decoder="2"') + $(ctr n0 routed 'decoder="3"') ))
say "   signatures routed by n0 to decoders 2,3 on n1: $r23; veth vx TX $((VX1 - VX0)) bytes"
[ "$r23" -gt 0 ] || fail "no signature crossed to n1"
# messages handed over together leave together: the messages one engine poll queued
# for a peer (a batch's rows for both remote ranks, combines) are posted as one list
# behind one doorbell (n1: one worker, no relay, so the count does not depend on timing)
m=$(ctr n1 verbs_tx_msgs); d=$(ctr n1 verbs_tx_doorbells)
say "   n1 posted $m messages in $d doorbells"
[ "$d" -gt 0 ] && [ $((m * 10)) -ge $((d * 13)) ] ||
	fail "n1: $m messages in $d doorbells (fewer than 1.3 per doorbell)"
# decoder loads cross as one-sided writes of load rows, not as messages
for n in 0 1; do
	o=$((1 - n))
	w=$(ctr n$o load_rows_written "node=\"$n\""); rd=$(ctr n$n load_rows_read "node=\"$o\"")
	torn=$(ctr n$n load_rows_torn); bad=$(ctr n$n load_rows_bad)
	say "   load rows n$o -> n$n: $w written, $rd new ones read, $torn torn, $bad refused"
	[ "$w" -gt 0 ] && [ "$rd" -gt 0 ] || fail "no load rows from n$o reached n$n"
	[ "$bad" = 0 ] || fail "n$n refused $bad load rows"
done
say "   remote decoders with a row that stopped moving: n0 $(ctr n0 load_decoders_stale), n1 $(ctr n1 load_decoders_stale)"
[ $((VX1 - VX0)) -gt 100000 ] || fail "under 100 kB crossed the veth pair"

# ---- 3b. rows from dma-buf regions ------------------------------------------------------------------
say "3b. dma-buf: every rank registers a vgem dma-buf with its locusd and dispatches from it"
ls /dev/dri/card* > /dev/null 2>&1 || say "   no /dev/dri/card* (vgem not loaded?)"
declare -A Z0 C0 R0 # (not T0: the start time every "say" counts from)
for n in 0 1; do
	Z0[$n]=$(ctr n$n region_rows_zero_copy)
	C0[$n]=$(ctr n$n region_messages_copied)
	R0[$n]=$(ctr n$n rows 'tier="2"')
done
loadgen "$W/t3b.out" n0,n0,n1,n1 n0,n0,n1,n1 --requests 50 --batches 10 --tokens 16 \
	--row-bytes 1024 --decode-us 500 --seconds 90 --dmabuf
rc=$?
sed 's/^/  /' "$W/t3b.out"
grep -q '^loadgen: ok$' "$W/t3b.out" && [ $rc = 0 ] ||
	{ fail "loadgen with dma-buf regions (exit $rc)"; show_counters; }
# locusd's own account of one registration per node: the path, and why not a better one
for n in 0 1; do
	grep -m1 "region 0x" "$W/n$n.log" | sed "s/^/  [n$n log] /"
done
for n in 0 1; do
	reg=$(ctr n$n regions_registered); rel=$(ctr n$n regions_released)
	dm=$(ctr n$n dmabuf_regs); fb=$(ctr n$n dmabuf_reg_fallbacks); nm=$(ctr n$n regions_no_mr)
	ref=$(ctr n$n dmabuf_refused)
	z=$(( $(ctr n$n region_rows_zero_copy) - Z0[$n] ))
	c=$(( $(ctr n$n region_messages_copied) - C0[$n] ))
	t2=$(( $(ctr n$n rows 'tier="2"') - R0[$n] ))
	say "   n$n: regions registered $reg released $rel; MR path: dma-buf MR $dm," \
		"device refused dma-buf MR $ref, MR on the mapping $fb, no MR $nm"
	say "   n$n: inter-node rows $t2: $z gathered zero-copy from the region's MR," \
		"$c messages copied from locusd's mapping"
	[ "$reg" -ge 2 ] || fail "n$n: $reg regions registered, want 2 (one per rank)"
	[ "$rel" = "$reg" ] || fail "n$n: $rel of $reg regions released"
	[ "$(ctr n$n regions_held)" = 0 ] || fail "n$n: regions still held after the clients left"
	[ $((dm + fb + nm)) = "$reg" ] || fail "n$n: registration paths $dm + $fb + $nm != $reg"
	[ "$t2" -gt 0 ] || fail "n$n: no inter-node rows from the regions"
	[ $((z + c)) -gt 0 ] || fail "n$n: inter-node rows did not come from the region"
	for c in remote_send_errors remote_undeliverable remote_bad rejected_bad_region \
		rejected_region_unmapped; do
		v=$(ctr n$n $c)
		[ "$v" = 0 ] || fail "n$n: $c = $v"
	done
done

# ---- 4. n1 killed under traffic, restarted --------------------------------------------------------
say "4. traffic with every decoder on n1 (--allow-errors); kill -9 locusd n1 mid-run"
loadgen "$W/t4.out" n1,n1,n1,n1 n0,n0,n1,n1 --requests 3000 --batches 400 --tokens 16 \
	--row-bytes 1024 --decode-us 500 --seconds 60 --allow-errors --batch-ms 2000 &
lg=$!
# kill once traffic flows: n0 has routed 150 more signatures (to n1: all decoders are there)
r0=$(ctr n0 routed)
for _ in $(seq 300); do
	[ "$(ctr n0 routed)" -gt $((r0 + 150)) ] && break
	kill -0 $lg 2>/dev/null || break
	sleep 0.1
done
say "   n0 routed $(( $(ctr n0 routed) - r0 )) signatures of this run; kill -9 n1 (pid ${PID[n1]})"
kill -0 $lg 2>/dev/null || fail "loadgen had ended before the kill"
kill -9 "${PID[n1]}"
wait "${PID[n1]}" 2>/dev/null
PID[n1]=
t_kill=$SECONDS
wait $lg
rc=$?
sed 's/^/  /' "$W/t4.out"
say "   loadgen finished $((SECONDS - t_kill)) s after the kill, exit $rc"
grep -q '^loadgen: ok$' "$W/t4.out" && [ $rc = 0 ] || fail "loadgen with n1 killed (exit $rc)"
grep -q 'errors:' "$W/t4.out" || fail "no error summary"
# signatures reached the decoders on n1 before it died
grep -q ' [1-9][0-9]* delivered to decoders' "$W/t4.out" || fail "nothing delivered before the kill"
wait_log "$W/n0.log" "peer node 1 down" 1 30 || fail "n0 did not log peer node 1 down"
grep -m1 "peer node 1 down" "$W/n0.log" | sed 's/^/  [n0 log] /'
say "   n0 after the kill: verbs_peer_up $(ctr n0 verbs_peer_up), rejected_peer_down" \
	"$(ctr n0 rejected_peer_down), remote_send_errors $(ctr n0 remote_send_errors)"
[ "$(ctr n0 verbs_peer_up)" = 0 ] || fail "n0 still counts n1 as up"
# a down node's decoders are skipped at once (not after the load timeout)
up23=$(( $(ctr n0 decoder_up 'decoder="2"') + $(ctr n0 decoder_up 'decoder="3"') ))
say "   n0: decoders 2,3 of the dead n1 routable: $up23; signatures refused for no live" \
	"decoder: $(ctr n0 rejected_no_decoder)"
[ "$up23" = 0 ] || fail "n0 still routes to decoders of the dead n1"
[ "$(ctr n0 remote_bad)" = 0 ] || fail "n0 refused $(ctr n0 remote_bad) malformed messages"
[ -e "$LOCUS_SHM_DIR/locus.n1" ] && say "   n1's stale segment is there; restart n1"
start 1 2 || fail "n1 did not restart over its stale segment"
owner=$("$B/locus-stat" -i n1 --json 2>/dev/null | tr -d ' \n' | grep -o '"owner_pid":[0-9]*' |
	cut -d: -f2)
[ "$owner" = "${PID[n1]}" ] || fail "n1's segment is owned by pid '$owner', not the new ${PID[n1]}"
if wait_log "$W/n0.log" "peer node 1 up" 2 60; then
	say "   n0: peer node 1 up again (verbs_reconnects on n0: $(ctr n0 verbs_reconnects))"
else
	show_logs 10
	fail "n1 did not reconnect within 60 s"
fi
push_tables 1 || fail "push to the restarted n1"
loadgen "$W/t4b.out" n0,n0,n1,n1 n0,n0,n1,n1 --requests 200 --batches 10 --tokens 16 \
	--row-bytes 1024 --decode-us 500 --seconds 90
rc=$?
sed 's/^/  /' "$W/t4b.out"
grep -q '^loadgen: ok$' "$W/t4b.out" && [ $rc = 0 ] || fail "traffic after the restart (exit $rc)"

# ---- 5. wrong secret ---------------------------------------------------------------------------------
say "5. restart n1 with a different secret: it must be refused"
kill -TERM "${PID[n1]}"; wait "${PID[n1]}" 2>/dev/null; PID[n1]=
# counted before the start: either side may have reconnected more than once before
ups0=$(grep -c "peer node 1 up" "$W/n0.log")
ups1=$(grep -c "peer node 0 up" "$W/n1.log")
mksecret "$W/secret.wrong"
mkconf 1 "$W/secret.wrong"
start 1 3 || fail "n1 did not start with the other secret"
if wait_log "$W/n0.log" "peer node 1 up" $((ups0 + 1)) 20 ||
   wait_log "$W/n1.log" "peer node 0 up" $((ups1 + 1)) 1; then
	fail "a node with the wrong secret came up"
	grep -h 'peer node' "$W/n0.log" "$W/n1.log" | tail -n 8 | sed 's/^/  [log] /'
else
	say "   no 'peer ... up' within 20 s"
fi
auth=$(ctr n1 verbs_auth_refused 'reason="2"') # the request's MAC
rej=$(ctr n0 verbs_rejects_received)
say "   listener n1: verbs_auth_refused{request MAC} $auth; dialler n0: verbs_rejects_received $rej"
grep -h -i 'authentic\|secret' "$W/n0.log" "$W/n1.log" | tail -n 3 | sed 's/^/  [log] /'
[ "$auth" -gt 0 ] || grep -qi 'authentic' "$W/n0.log" "$W/n1.log" ||
	fail "the refusal is not visible (no verbs_auth_refused, no log line)"

for n in n0 n1; do
	[ -n "${PID[$n]}" ] && kill -TERM "${PID[$n]}" && wait "${PID[$n]}" 2>/dev/null
	PID[$n]=
done
say "done in $((SECONDS - T0)) s"
echo "GUEST RESULT rc=$FAILED"
exit $FAILED
