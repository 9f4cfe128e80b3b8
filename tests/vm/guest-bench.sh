# Sourced INSIDE the qemu guest by guest-locusd.sh for LV_WHAT=bench, with its
# helpers (say, fail, ctr, start, wait_log, mksecret, show_counters, $B, $W,
# $PID, $TRACE): locusd's inter-node byte rate against ib_write_bw on the same
# two rxe devices in the same run, LV_REPEATS pairs, alternating:
#   locusd   bench_dataplane internode: ONE client thread holds ranks 0,1 on n0
#            and ranks 2,3 on n1; ranks 0,1 keep LV_WINDOW DISPATCH batches each
#            in flight (LV_TOKENS tokens of the trace's top-6, LV_ROW_BYTES
#            rows); a GRACE table with every expert on n1's GPUs makes every row
#            cross, one direction (n0 -> n1), as ib_write_bw's writes do; n1's
#            ranks release each message at once (a warm-up checks every byte
#            first); the client naps LV_NAP_US (100) after a poll that found
#            nothing. Both locusd spin (idle_pause_polls 0, idle_sleep_max_us 0).
#   perftest ib_write_bw -s S from rxex to rxey with both locusd stopped
#            (SIGSTOP; perftest's clock calibration fails beside polling daemons,
#            SIGCONT afterwards), S the power of two at or below locusd's average
#            message, 1000 iterations.
# Where things run (LV_PLACEMENT), for locusd and ib_write_bw alike:
#   split (default) one CPU per node, as two machines: n0 on one lcore (engine,
#            network and control) and the client thread on CPU 0, n1 on one lcore
#            on CPU 1; ib_write_bw's client (rxex) on CPU 0, its server (rxey)
#            on CPU 1. Every user thread under SCHED_IDLE: Soft-RoCE does its
#            work in softirq context on the CPU that sends each packet (CPU 0
#            here, for both benchmarks), which ksoftirqd takes over under load;
#            SCHED_IDLE lets it preempt a poller at once, as a NIC's work never
#            waits for one, instead of getting half of the CPU beside it. Both
#            locusd still spin.
#   device   everything on CPU 0 (both locusd, the client, both ib_write_bw),
#            SCHED_IDLE; CPU 1 idle.
#   lcores   the functional test's layout (guest-locusd.sh): n0's main and network
#            lcores on CPU 0, its engine on CPU 1 (the relay between them); n1's
#            main on CPU 0, its one worker on CPU 1; the client on CPU 0; every
#            thread SCHED_OTHER, ib_write_bw where the scheduler puts it.
# LV_VARIANTS="label=/path/to/locusd:placement ..." measures several locusd
# builds in turn in one run (each restarts both nodes; the default: this
# build's, placement LV_PLACEMENT), then prints one line per variant.
# LV_PERF=S: a system-wide perf profile (cpu-clock, call graphs) of S seconds of
# the first locusd phase and of the first ib_write_bw, with the guest's kallsyms,
# to $LV_OUT for perf report on the host (those figures are marked profiled).
REPEATS=${LV_REPEATS:-3}
SECS=${LV_SECONDS:-6}
ROWB=${LV_ROW_BYTES:-4096}
TOKENS=${LV_TOKENS:-64}
WINDOW=${LV_WINDOW:-4}
NAP=${LV_NAP_US:-100}
BD=${LV_BUILD:-$ROOT/build}/tools/bench/bench_dataplane
VARIANTS=${LV_VARIANTS:-"this=$B/locusd:${LV_PLACEMENT:-split}"}

hostload() { cut -d' ' -f1-3 "$LV_OUT/host-loadavg" 2>/dev/null || echo "?"; }

bench_conf() { # node secret-file lcores
	local dev=rxex
	[ "$1" = 1 ] && dev=rxey
	cat > "$W/n$1.conf" <<CONF
[locusd]
instance = n$1
node = $1
eal_args = --lcores $3 --no-huge --no-pci -m 64
rdma_device = $dev
intra_node = shm
secret_file = $2
idle_spin_polls = 1000000000
idle_pause_polls = 0
idle_sleep_max_us = 0
client_slots = 4
client_inbox_slots = ${LV_INBOX_SLOTS:-256}
[cluster]
id = 7
gpus_per_node = 2
node.0 = 192.0.2.20:7471
node.1 = 192.0.2.21:7471
CONF
}

placement() { # device | split | lcores: sets N0_LCORES N1_LCORES CLIENT_CPU SCHED IBPIN
	IBPIN_SRV=
	case $1 in
	device)
		N0_LCORES=0@0 N1_LCORES=0@0 CLIENT_CPU=0 SCHED="chrt -i 0" IBPIN="taskset -c 0" ;;
	split)
		N0_LCORES=0@0 N1_LCORES=0@1 CLIENT_CPU=0 SCHED="chrt -i 0" IBPIN="taskset -c 0"
		IBPIN_SRV="taskset -c 1" ;;
	lcores)
		N0_LCORES=0@0,1@1,2@0 N1_LCORES=0@0,1@1 CLIENT_CPU=0 SCHED= IBPIN= ;;
	*)
		fail "placement '$1': device or lcores"
		return 1 ;;
	esac
}

# vval FILE NAME: a counter's elements summed, from a locus-stat -p snapshot
vsnap() { "$B/locus-stat" -i "n$1" -p > "$2" 2>/dev/null; }
vval() {
	awk -v n="locus_$2" '$1 !~ /^#/ && (index($1, n "{") == 1 || index($1, n "_total") == 1 ||
		$1 == n) { s += $2 } END { printf "%d\n", s }' "$1"
}
# what the counters say about one locusd phase (snapshots $1.{0,1} before, $2.* after)
counters_line() {
	local m d c cb cw cs sg
	m=$(( $(vval "$2.0" verbs_tx_msgs) - $(vval "$1.0" verbs_tx_msgs) ))
	d=$(( $(vval "$2.0" verbs_tx_doorbells) - $(vval "$1.0" verbs_tx_doorbells) ))
	sg=$(( $(vval "$2.0" verbs_tx_signaled) - $(vval "$1.0" verbs_tx_signaled) ))
	c=$(( $(vval "$2.0" verbs_cqes) - $(vval "$1.0" verbs_cqes) ))
	cb=$(( $(vval "$2.0" verbs_cq_bursts) - $(vval "$1.0" verbs_cq_bursts) ))
	cw=$(( $(vval "$2.1" verbs_credit_writes) - $(vval "$1.1" verbs_credit_writes) ))
	cs=$(( $(vval "$2.0" verbs_credit_stalls) - $(vval "$1.0" verbs_credit_stalls) ))
	awk -v m=$m -v d=$d -v c=$c -v cb=$cb -v cw=$cw -v cs=$cs -v sg=$sg 'BEGIN {
		printf "   counters: n0 posted %d messages in %d doorbells (%.1f per doorbell), " \
		       "%d signalled (1 in %.1f); n0 polled %d completions in %d non-empty polls " \
		       "(%.2f per poll); n0 stopped for credits %d times; n1 returned credits %d " \
		       "times\n", m, d, d ? m / d : 0, sg, sg ? m / sg : 0, c, cb, cb ? c / cb : 0,
		       cs, cw }'
}

# one_variant LABEL LOCUSD PLACEMENT: both nodes on that binary, REPEATS pairs; appends
# "LABEL ratio..." to $W/summary
one_variant() {
	local label=$1 bin=$2 i rc bdp perfpid ack avg
	local -a GL LD
	GP=()
	placement "$3" || return 1
	LOCUSD_BIN=$bin LOCUSD_WRAP=$SCHED
	say "bench $label: $bin; placement $3: n0 --lcores $N0_LCORES, n1 --lcores $N1_LCORES," \
		"client thread on CPU $CLIENT_CPU, ${SCHED:-SCHED_OTHER}${SCHED:+ (SCHED_IDLE)}"
	bench_conf 0 "$W/secret" "$N0_LCORES"
	bench_conf 1 "$W/secret" "$N1_LCORES"
	: > "$W/n0.log"; : > "$W/n1.log"
	if ! start 0 || ! start 1 || ! wait_log "$W/n0.log" "peer node 1 up" 1 60 ||
	   ! wait_log "$W/n1.log" "peer node 0 up" 1 30; then
		show_logs 20
		fail "$label: the nodes did not come up and connect"
		stop_nodes
		return 1
	fi
	if ! "$B/locusctl" push -i n0 "$W/grace1.tbl" > "$W/push.out" 2>&1 ||
	   ! "$B/locusctl" push -i n1 "$W/grace1.tbl" >> "$W/push.out" 2>&1; then
		cat "$W/push.out"
		fail "$label: GRACE table (every expert on n1) not pushed"
		stop_nodes
		return 1
	fi
	for i in $(seq "$REPEATS"); do
		vsnap 0 "$W/c$i.a.0"; vsnap 1 "$W/c$i.a.1"
		perfpid=
		if [ -n "${LV_PERF:-}" ] && [ "$i" = 1 ] && [ ! -e "$LV_OUT/perf-locusd.data.done" ]; then
			# started disabled (reading every process's maps takes seconds here),
			# enabled once the warm-up is over
			echo 0 > /proc/sys/kernel/kptr_restrict
			echo -1 > /proc/sys/kernel/perf_event_paranoid
			rm -f "$W/perf.ctl" "$W/perf.ack"
			mkfifo "$W/perf.ctl" "$W/perf.ack"
			exec 7<>"$W/perf.ctl" 8<>"$W/perf.ack"
			perf record -a -g -e cpu-clock -F 999 -D -1 --control "fd:7,8" \
				-o "$LV_OUT/perf-locusd.data" -- sleep 600 > "$W/perf.rec" 2>&1 &
			perfpid=$!
			sleep 15
		fi
		$SCHED "$BD" internode --rank-at n0,n0,n1,n1 --send-ranks 0,1 --trace $TRACE \
			--row-bytes "$ROWB" --tokens "$TOKENS" --window "$WINDOW" --warmup 2 \
			--seconds "$SECS" --cpus "$CLIENT_CPU" --nap-us "$NAP" > "$W/in.$i" 2>&1 &
		bdp=$!
		if [ -n "$perfpid" ]; then
			wait_log "$W/in.$i" "internode warm-up" 1 60
			echo enable >&7 && read -r -t 30 -u 8 ack
			sleep "$LV_PERF"
			echo disable >&7 && read -r -t 30 -u 8 ack
		fi
		wait $bdp
		rc=$?
		if [ -n "$perfpid" ]; then
			kill -INT "$(pgrep -P $perfpid sleep)" 2>/dev/null
			wait $perfpid
			exec 7>&- 8>&-
			: > "$LV_OUT/perf-locusd.data.done"
		fi
		vsnap 0 "$W/c$i.b.0"; vsnap 1 "$W/c$i.b.1"
		sed 's/^/  /' "$W/in.$i"
		[ $rc = 0 ] || { fail "$label: bench_dataplane internode exited $rc"; show_counters; break; }
		LD[$i]=$(hostload)
		counters_line "$W/c$i.a" "$W/c$i.b"
		for c in remote_send_errors remote_undeliverable remote_bad; do
			v=$(( $(ctr n0 $c) + $(ctr n1 $c) ))
			[ "$v" = 0 ] || fail "$label: $c = $v during the benchmark"
		done
		GL[$i]=$(sed -n 's/.* \([0-9.]*\) Gb\/s of messages.*/\1/p' "$W/in.$i")
		if [ "$SZ" = 0 ]; then
			avg=$(sed -n 's/.*(avg \([0-9]*\) B).*/\1/p' "$W/in.$i")
			SZ=64
			while [ $((SZ * 2)) -le "${avg:-0}" ] && [ $SZ -lt 65536 ]; do SZ=$((SZ * 2)); done
		fi
		kill -STOP "${PID[n0]}" "${PID[n1]}"
		GP[$i]=0.0000
		for try in 1 2 3; do
			ibbw $i
			[ "${GP[$i]}" != 0.0000 ] && break
			# perftest times by the TSC against its own clock calibration, which
			# sometimes fails here and prints 0: run it again
			say "   $label repeat $i: ib_write_bw printed 0 (its clock calibration), again"
		done
		kill -CONT "${PID[n0]}" "${PID[n1]}"
		if [ "${GP[$i]}" = 0.0000 ]; then
			tail -n 20 "$W/bw.cli.$i" "$W/bw.srv.$i" | sed 's/^/  [ib_write_bw] /'
			fail "$label: ib_write_bw gave no figure"
			break
		fi
		say "   $label repeat $i: locusd ${GL[$i]} Gb/s, ib_write_bw -s $SZ ${GP[$i]} Gb/s," \
			"ratio $(awk -v a="${GL[$i]}" -v b="${GP[$i]}" 'BEGIN { printf "%.3f", a / b }')" \
			"(host load average ${LD[$i]})"
	done
	stop_nodes
	grep -h 'locusd: relay:' "$W/n0.log" | sed 's/^/  [n0] /'
	[ ${#GP[@]} = "$REPEATS" ] || return 1
	for i in $(seq "$REPEATS"); do echo "${GL[$i]} ${GP[$i]} ${LD[$i]%% *}"; done |
		awk -v l="$label" -v p="$3" -v s=$SZ '{ r = $1 / $2; t = t sprintf(" %.3f", r)
			g = g sprintf(" %s", $3); m += r; n++ }
			END { printf "%-12s %-7s ratio %.3f (mean of %d:%s; host load%s)\n", l, p,
			      m / n, n, t, g }' >> "$W/summary"
}

# ibbw I: one ib_write_bw pair (server on rxey, client on rxex); its Gb/s in GP[I]
ibbw() {
	local srv
	timeout 60 $SCHED ${IBPIN_SRV:-$IBPIN} ib_write_bw -d rxey -x 1 -F -s $SZ -n 1000 \
		--report_gbits > "$W/bw.srv.$1" 2>&1 &
	srv=$!
	sleep 1.5
	if [ -n "${LV_PERF:-}" ] && [ ! -e "$LV_OUT/perf-ibbw.data.done" ]; then
		timeout 120 perf record -a -g -e cpu-clock -F 999 -o "$LV_OUT/perf-ibbw.data" -- \
			timeout 60 $SCHED $IBPIN ib_write_bw -d rxex -x 1 -F -s $SZ -n 1000 \
			--report_gbits 192.0.2.21 > "$W/bw.cli.$1" 2>&1
		: > "$LV_OUT/perf-ibbw.data.done"
	else
		timeout 60 $SCHED $IBPIN ib_write_bw -d rxex -x 1 -F -s $SZ -n 1000 --report_gbits \
			192.0.2.21 > "$W/bw.cli.$1" 2>&1
	fi
	wait $srv
	# from the message rate (Mpps, 6 decimals): the Gb/s column has only 2
	GP[$1]=$(awk -v s=$SZ '$1 == s && NF >= 5 && $5 * s * 8 / 1000 > v {
		v = $5 * s * 8 / 1000 } END { printf "%.4f\n", v }' "$W/bw.cli.$1" "$W/bw.srv.$1")
}

stop_nodes() {
	local n
	for n in 0 1; do [ -n "${PID[n$n]:-}" ] && kill -TERM "${PID[n$n]}" 2>/dev/null; done
	for n in 0 1; do [ -n "${PID[n$n]:-}" ] && wait "${PID[n$n]}" 2>/dev/null; PID[n$n]=; done
}

mksecret "$W/secret"
if ! "$BD" grace-table -o "$W/grace1.tbl" --trace $TRACE --nodes 2 --gpus 2 --on-node 1 \
	> "$W/grace.out" 2>&1; then
	cat "$W/grace.out"
	fail "grace-table"
	echo "GUEST RESULT rc=1"
	exit 1
fi
SZ=0
: > "$W/summary"
for v in $VARIANTS; do
	one_variant "${v%%=*}" "$(echo "${v#*=}" | cut -d: -f1)" "${v##*:}"
done
if [ -n "${LV_PERF:-}" ]; then
	cat /proc/kallsyms > "$LV_OUT/kallsyms"
	rm -f "$LV_OUT"/perf-*.done
	say "   profiles of the first variant: $LV_OUT/perf-locusd.data, perf-ibbw.data, kallsyms"
fi
echo "locusd inter-node (n0 -> n1, one direction) against ib_write_bw -s $SZ (rxex -> rxey), same guest run:"
cat "$W/summary"
echo "(emulated rxe under TCG: only the ratios mean anything)"
echo "GUEST RESULT rc=$FAILED"
exit $FAILED
