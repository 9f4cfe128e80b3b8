# Sourced INSIDE the qemu guest by guest-locusd.sh, with both locusd nodes up
# (n0 on rxex/vx, n1 on rxey/vy), their tables pushed, and its helpers (say,
# fail, ctr, snap, snap2, val, loadgen, wait_log, show_counters, $B, $W, $PID): faults on the
# inter-node link and in the clients, under locus-loadgen traffic across the
# nodes (decoders 0,1 and ranks 0,1 on n0; 2,3 on n1).
#   F1 netem on both ends of the veth pair: the same traffic on the clean
#      link, with loss, delay, reordering and duplication RC rides out
#      (FAULT_NETEM), then with a harsh setting (FAULT_NETEM_HARSH) where
#      connections may fail: every request still gets exactly one
#      completion, errors are counted, nothing hangs; then clean again
#   F2 the link black-holed (every frame lost for 3 s) FAULT_FLAPS times under
#      traffic: connections drop and come back, every request completes
#      once, traffic resumes, counters agree, nothing left pending
#   F3 a rank killed mid-dispatch on n1 and mid-combine on n0 with rows in
#      flight across the nodes, each replaced by a new process
#   F4 vx set down and up under traffic: the same checks but a reconnect, which
#      Soft-RoCE may refuse after its netdev flapped (the last step, then)
# FAILED is set on a failure; every wait is bounded.

# netem parameters RC on rxe survives within the test's time bound (TCG, the ACK
# time-out guest-locusd.sh sets for the faults: 268 ms, 7 retries), and one it need not
# survive
FAULT_NETEM=${FAULT_NETEM:-loss 1% duplicate 1% delay 1ms reorder 10%}
FAULT_NETEM_HARSH=${FAULT_NETEM_HARSH:-loss 40% duplicate 5% delay 5ms reorder 25%}
FAULT_FLAPS=${FAULT_FLAPS:-3}
FAULT_STEPS=${FAULT_STEPS:-F1 F2 F3 F4} # which of them run

netem() { # "PARAMETERS" on both ends of the pair, or off
	local d
	for d in vx vy; do
		tc qdisc del dev $d root 2> /dev/null
		[ "$1" = off ] && continue
		tc qdisc add dev $d root netem $1 || fail "tc qdisc add dev $d root netem $1"
	done
}

# wait_up SECONDS: until each node has its peer up again
wait_up() {
	local end=$((SECONDS + $1))
	while [ $SECONDS -lt $end ]; do
		[ "$(ctr n0 verbs_peer_up)" = 1 ] && [ "$(ctr n1 verbs_peer_up)" = 1 ] && return 0
		sleep 0.5
	done
	return 1
}

# rxe_snap FILE: Soft-RoCE's own counters of both devices (rdma statistic: NAME VALUE pairs)
rxe_snap() {
	local d
	for d in rxex rxey; do
		rdma statistic show link $d/1 2> /dev/null |
			awk -v d=$d '{ for (i = 3; i < NF; i += 2) print d, $i, $(i + 1) }'
	done > "$1"
}
# rxe_delta A B WHAT: how RC recovered on each device between two snaps (go-back-N after
# a NAK for a sequence error, retries after an ACK time-out, and giving up)
rxe_delta() {
	awk -v w="$3" 'NR == FNR { a[$1 " " $2] = $3; next }
		{ d[$1] = d[$1] sprintf(" %s %d", $2, $3 - a[$1 " " $2]) }
		END { for (k in d) print "   rxe " k " over the " w ":" d[k] }' "$1" "$2" |
		sed -E 's/ (rdma_sends|rdma_recvs|link_downed|send_err|ack_deferred) -?[0-9]+//g' |
		sort | while read -r l; do say "$l"; done
}

# figures OUT: "signatures/s p50 p99 rows/s" from a loadgen output
figures() {
	awk '/^decision latency/ { for (i = 1; i <= NF; i++) {
			if ($i == "p50") p50 = $(i + 1); if ($i == "p99") p99 = $(i + 1)
			if ($i == "routed" && $(i + 1) == "requests/s") rs = $(i - 1) } }
	     /^dispatch:/ { for (i = 1; i <= NF; i++) if ($i == "rows/s") rows = $(i - 1) }
	     END { printf "%s %s %s %s\n", rs, p50, p99, rows }' "$1"
}

# gauges_idle NAME: while every client lingers attached and idle, nothing held on either node
# (both nodes read at once: a read takes seconds here, the clients linger 10 s)
gauges_idle() {
	local n used pend ok end=$((SECONDS + 10))
	while :; do
		snap2 "$W/idle"
		ok=1
		for n in 0 1; do
			[ "$(val "$W/idle.$n" inbox_slots_used)" = 0 ] &&
				[ "$(val "$W/idle.$n" requests_pending)" = 0 ] || ok=0
		done
		[ $ok = 1 ] || [ $SECONDS -ge $end ] && break
		sleep 0.3
	done
	for n in 0 1; do
		used=$(val "$W/idle.$n" inbox_slots_used) pend=$(val "$W/idle.$n" requests_pending)
		say "   $1: n$n idle: inbox slots used $used, requests pending $pend," \
			"clients attached $(val "$W/idle.$n" clients_attached)"
		[ "$used" = 0 ] && [ "$pend" = 0 ] || fail "$1: n$n holds inbox slots or pending requests"
	done
}

# lg_bg OUT ARGS...: loadgen across the nodes in the background (LINGER: its clients stay
# attached and idle 10 s at the end, for gauges_idle);
# LG_PID is the timeout(1) around it, which passes a SIGTERM on; attaches get 20 s (LG_ATTACH)
lg_bg() {
	local out=$1
	shift
	timeout 200 "$B/locus-loadgen" -i n0 $LG_ATTACH --trace $TRACE --prefill-at n0 --decoders 4 \
		--decoder-at n0,n0,n1,n1 --ranks 4 --rank-at n0,n0,n1,n1 --row-bytes 1024 \
		--decode-us 500 "$@" > "$out" 2>&1 &
	LG_PID=$!
}
LINGER="--linger-ms 10000"
# lg_wait OUT NAME: the run's end (bounded by loadgen's timeout), checking the gauges as it lingers
lg_wait() {
	local out=$1 rc
	for _ in $(seq 1500); do
		grep -q '^loadgen: lingering' "$out" && break
		kill -0 $LG_PID 2> /dev/null || break
		sleep 0.1
	done
	grep -q '^loadgen: lingering' "$out" && gauges_idle "$2"
	wait $LG_PID
	rc=$?
	sed 's/^/    /' "$out" | grep -v '^    loadgen: lingering'
	grep -q '^loadgen: ok$' "$out" && [ $rc = 0 ] || { fail "$2: loadgen exit $rc"; show_counters; }
}

# net_state: what an operator looks at when a connection does not come back
net_state() {
	ip route get 192.0.2.21 from 192.0.2.20 2>&1 | sed 's/^/   route: /'
	ip neigh show | grep 192.0.2 | sed 's/^/   neigh: /'
	rdma res show cm_id 2>&1 | sed 's/^/   cm_id: /'
	rdma res show qp 2>&1 | grep -v 'qpn 1 ' | sed 's/^/   qp: /'
	rdma statistic show link rxex/1 2>&1 | sed 's/^/   rxex: /'
	rdma statistic show link rxey/1 2>&1 | sed 's/^/   rxey: /'
	ip -s link show vx | sed 's/^/   vx: /'
	grep -h '^Udp:' /proc/net/snmp | sed 's/^/   snmp: /'
	dmesg | tail -n 25 | sed 's/^/   dmesg: /'
	tail -n 12 "$W/n0.log" | sed 's/^/   [n0 log] /'
	tail -n 12 "$W/n1.log" | sed 's/^/   [n1 log] /'
}

# ---- F1. netem --------------------------------------------------------------------------------
case " $FAULT_STEPS " in *" F1 "*)
say "F1. traffic across the nodes on the clean link, then with netem '$FAULT_NETEM' on vx and vy"
snap2 "$W/f1a"
lg_bg "$W/f1-clean.out" --requests 200 --batches 12 --tokens 16 --seconds 90
lg_wait "$W/f1-clean.out" "clean"
netem "$FAULT_NETEM"
tc qdisc show dev vx | sed 's/^/   vx: /'
rxe_snap "$W/f1-rxe.a"
lg_bg "$W/f1-netem.out" --requests 200 --batches 12 --tokens 16 --seconds 120
lg_wait "$W/f1-netem.out" "netem"
rxe_snap "$W/f1-rxe.b"
snap2 "$W/f1b"
netem off
rxe_delta "$W/f1-rxe.a" "$W/f1-rxe.b" "netem run"
read -r c_rs c_p50 c_p99 c_rows <<< "$(figures "$W/f1-clean.out")"
read -r n_rs n_p50 n_p99 n_rows <<< "$(figures "$W/f1-netem.out")"
say "   same run, same traffic (200 signatures, 4 ranks x 12 batches of 16 rows of 1 KiB):"
awk -v a="$c_rs" -v b="$n_rs" -v c="$c_p50" -v d="$n_p50" -v e="$c_p99" -v f="$n_p99" \
    -v g="$c_rows" -v h="$n_rows" 'BEGIN {
	printf "   %-34s %12s %12s %8s\n", "", "clean", "netem", "ratio"
	printf "   %-34s %12.0f %12.0f %8.2f\n", "routed signatures/s", a, b, (a > 0 ? b / a : 0)
	printf "   %-34s %12.1f %12.1f %8.2f\n", "decision latency p50 (us)", c, d, (c > 0 ? d / c : 0)
	printf "   %-34s %12.1f %12.1f %8.2f\n", "decision latency p99 (us)", e, f, (e > 0 ? f / e : 0)
	printf "   %-34s %12.0f %12.0f %8.2f\n", "dispatched rows/s", g, h, (g > 0 ? h / g : 0)
}'
for n in 0 1; do
	rc=$(( $(val "$W/f1b.$n" verbs_reconnects) - $(val "$W/f1a.$n" verbs_reconnects) ))
	se=$(( $(val "$W/f1b.$n" remote_send_errors) - $(val "$W/f1a.$n" remote_send_errors) ))
	say "   n$n over both runs: reconnects $rc, remote send errors $se, veth: $(ip -s link show \
		$([ $n = 0 ] && echo vx || echo vy) | awk '/TX:/ { getline; print $1 " bytes sent" }')"
	[ "$rc" = 0 ] && [ "$se" = 0 ] || fail "n$n: the connection did not ride out '$FAULT_NETEM'"
done

say "F1b. harsh netem '$FAULT_NETEM_HARSH' for 10 s under traffic (errors allowed), then the" \
	"clean link again: each request completed once, nothing left pending"
lg_bg "$W/f1-harsh.out" $LINGER --requests 100000 --batches 100000 --tokens 16 --seconds 150 \
	--allow-errors --batch-ms 3000
sleep 2
snap2 "$W/f1c"
netem "$FAULT_NETEM_HARSH"
t_h=$SECONDS
sleep 10
t_h=$((SECONDS - t_h))
snap2 "$W/f1d"
netem off
wait_up 60 || fail "the nodes did not reconnect within 60 s of the clean link"
sleep 2 # traffic on the mended link, then stop submitting
kill -TERM $LG_PID
lg_wait "$W/f1-harsh.out" "harsh netem"
for n in 0 1; do
	say "   n$n in ${t_h} s of harsh netem (and the counter reads): rows sent to the other node" \
		"$(( $(val "$W/f1d.$n" rows 'tier="2"') - $(val "$W/f1c.$n" rows 'tier="2"') ))," \
		"disconnects $(( $(val "$W/f1d.$n" verbs_disconnects) - $(val "$W/f1c.$n" \
		verbs_disconnects) )), remote send errors $(( $(val "$W/f1d.$n" remote_send_errors) - \
		$(val "$W/f1c.$n" remote_send_errors) )); completion errors by status so far:" \
		"$(awk '/^locus_verbs_cq_errors/ && $2 > 0 { printf "%s ", $0 }' "$W/f1d.$n")"
done

;; esac

# ---- F2. link flapping ------------------------------------------------------------------------
# flaps OUT NAME COUNT KIND: KIND blackhole (every frame on the pair lost for 3 s: the cable
# pulled, netdevs untouched) or netdev (vx set down for 2 s), COUNT times under traffic;
# FLAP_BACK: how many times the connection came back
flaps() {
	local out=$1 name=$2 count=$3 kind=$4 k d0 n o sent in se dn rd
	snap2 "$W/fl-a"
	lg_bg "$out" $LINGER --requests 100000 --batches 100000 --tokens 16 --seconds 170 \
		--allow-errors --batch-ms 2000
	sleep 3
	FLAP_BACK=0
	for k in $(seq "$count"); do
		d0=$(grep -c "peer node 1 down" "$W/n0.log")
		if [ "$kind" = blackhole ]; then
			netem "loss 100%"
			sleep 3
			netem off
		else
			ip link set vx down
			sleep 2
			ip link set vx up
			veth_routes # the kernel dropped vx's routes with the link
		fi
		wait_log "$W/n0.log" "peer node 1 down" $((d0 + 1)) 20 ||
			fail "$name $k: n0 never saw n1 down"
		if wait_up $([ "$kind" = blackhole ] && echo 45 || echo 30); then
			FLAP_BACK=$((FLAP_BACK + 1))
			say "   $name $k: the connection dropped and came back"
		elif [ "$kind" = blackhole ]; then
			fail "$name $k: no reconnect within 45 s"
			net_state
			break
		else
			say "   $name $k: the connection dropped and did not come back within 30 s"
			break
		fi
	done
	snap2 "$W/fl-m"
	sleep 3 # traffic on the mended link, then stop submitting
	kill -TERM $LG_PID
	lg_wait "$out" "$name"
	snap2 "$W/fl-b"
	for n in 0 1; do
		o=$((1 - n))
		sent=$(( $(val "$W/fl-b.$n" remote_messages_out) - $(val "$W/fl-a.$n" remote_messages_out) ))
		in=$(( $(val "$W/fl-b.$o" remote_messages_in "node=\"$n\"") - \
		       $(val "$W/fl-a.$o" remote_messages_in "node=\"$n\"") ))
		se=$(( $(val "$W/fl-b.$n" remote_send_errors) - $(val "$W/fl-a.$n" remote_send_errors) ))
		# acked by n$o's device, then dropped with the connection (held, or landed as it failed)
		rd=$(( $(val "$W/fl-b.$o" verbs_rx_dropped) - $(val "$W/fl-a.$o" verbs_rx_dropped) ))
		dn=$(( $(val "$W/fl-b.$n" verbs_disconnects) - $(val "$W/fl-a.$n" verbs_disconnects) ))
		say "   n$n -> n$o: $sent messages sent, $in taken in by n$o, $se sends failed," \
			"$rd dropped by n$o with the connection;" \
			"disconnects $dn, stalled sends that failed the connection $(( \
			$(val "$W/fl-b.$n" verbs_stalls) - $(val "$W/fl-a.$n" verbs_stalls) ))"
		# every message sent arrived, or its send failed (a failed one may still have
		# landed), or n$o dropped it with the connection and said so
		[ "$in" -le "$sent" ] && [ "$sent" -le $((in + se + rd)) ] ||
			fail "n$n -> n$o: sent $sent, received $in, failed $se, dropped $rd do not add up"
		[ "$dn" -ge 1 ] || fail "n$n: no disconnect in $count ${name}s"
		# traffic resumed: rows went across after the connection came back
		[ "$FLAP_BACK" = 0 ] && continue
		in=$(( $(val "$W/fl-b.$n" rows 'tier="2"') - $(val "$W/fl-m.$n" rows 'tier="2"') ))
		say "   n$n sent $in rows to the other node after the connection came back"
		[ "$in" -gt 0 ] || fail "n$n: no traffic after the link came back"
	done
}

case " $FAULT_STEPS " in *" F2 "*)
say "F2. the link black-holed (netem loss 100% on vx and vy, 3 s) $FAULT_FLAPS times under" \
	"traffic (errors allowed, each request once)"
flaps "$W/f2.out" "black hole" "$FAULT_FLAPS" blackhole
[ "$FLAP_BACK" = "$FAULT_FLAPS" ] || fail "came back $FLAP_BACK of $FAULT_FLAPS times"
;; esac

# ---- F3. ranks killed across nodes ------------------------------------------------------------
case " $FAULT_STEPS " in *" F3 "*)
for kill in 3:dispatch:4 0:combine:8; do
	r=${kill%%:*}
	n=$([ "$r" -ge 2 ] && echo 1 || echo 0)
	say "F3. rank $r (on n$n) killed right after its ${kill#*:} with rows in flight across" \
		"the nodes; a new process takes it over"
	rec0=$(ctr n$n clients_reclaimed)
	lg_bg "$W/f3-$r.out" $LINGER --requests 100 --batches 10 --tokens 16 --seconds 90 \
		--allow-errors \
		--batch-ms 1500 --kill-rank "$kill" --respawn
	lg_wait "$W/f3-$r.out" "rank $r killed"
	grep -q '^killed: .*(1 times).*a new process took the rank over' "$W/f3-$r.out" ||
		fail "rank $r: not killed and replaced once"
	[ "$(ctr n$n clients_reclaimed)" = $((rec0 + 1)) ] || fail "n$n did not reclaim rank $r once"
done
;; esac

# ---- F4. the netdev set down and up -----------------------------------------------------------
# Last: Soft-RoCE in Debian's 6.1 kernel may take no new connection on the pair after its
# netdev flapped under traffic (rping shows it too, until the processes that held a connection
# across the flap are gone), so nothing runs after this step. What locusd owes is checked
# either way: the drop noticed, every request completed once, nothing left pending.
case " $FAULT_STEPS " in *" F4 "*)
say "F4. vx set down for 2 s and up again under traffic (errors allowed, each request once)"
flaps "$W/f4.out" "link down" 1 netdev
;; esac
