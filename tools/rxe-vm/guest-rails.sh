# Sourced INSIDE the qemu guest by guest-locusd.sh (LV_WHAT=rails) with its helpers (say,
# fail, ctr, loadgen, wait_log, start, mksecret, show_counters, $B, $W, $PID) and the
# first veth pair up (guest-veth.sh): two locusd nodes with two rails each,
#   rail 0: n0 rxex  on vx  (192.0.2.20)  <-->  n1 rxey  on vy  (192.0.2.21)
#   rail 1: n0 rxex2 on vx2 (192.0.3.20)  <-->  n1 rxey2 on vy2 (192.0.3.21)
#   R1 both nodes up with both rails, tables pushed, traffic across the nodes checked
#      end to end by locus-loadgen (every byte), both rails carried it (per-rail
#      counters verbs_* and verbs_r1_*), no errors
#   R2 the same traffic with the same nodes configured with rail 0 only: bytes/s of
#      two rails against one, same run
# Exits the guest with the test's status.

# ---- the second pair: the same policy routing as guest-veth.sh's -------------------------------
ip link add vx2 type veth peer name vy2 || veth_fail "veth 2"
ip addr add 192.0.3.20/24 dev vx2; ip addr add 192.0.3.21/24 dev vy2
ip link set vx2 up; ip link set vy2 up
for k in vx2.accept_local vy2.accept_local; do sysctl -qw net.ipv4.conf.$k=1; done
for k in vx2.rp_filter vy2.rp_filter; do sysctl -qw net.ipv4.conf.$k=0; done
ip route replace 192.0.3.21/32 dev vx2 table 122; ip route replace 192.0.3.20/32 dev vy2 table 123
ip rule add oif vx2 lookup 122 pref 104; ip rule add oif vy2 lookup 123 pref 105
ip rule add from 192.0.3.20 to 192.0.3.21 lookup 122 pref 106
ip rule add from 192.0.3.21 to 192.0.3.20 lookup 123 pref 107
ip rule add iif vx2 lookup local pref 12; ip rule add iif vy2 lookup local pref 13
rdma link add rxex2 type rxe netdev vx2 || veth_fail "rxex2"
rdma link add rxey2 type rxe netdev vy2 || veth_fail "rxey2"

# mkconf_rails NODE SECRET RAILS: the nodes of guest-locusd.sh's mkconf, on 1 or 2 rails
mkconf_rails() {
	local dev="rxex,rxex2" intra=shm lcores="--lcores 0@0,1@1,2@0" a0 a1
	[ "$1" = 1 ] && dev="rxey,rxey2" intra=verbs lcores="-l 0-1"
	a0="192.0.2.20:7471,192.0.3.20:7471" a1="192.0.2.21:7471,192.0.3.21:7471"
	if [ "$3" = 1 ]; then
		dev=${dev%%,*} a0=${a0%%,*} a1=${a1%%,*}
	fi
	cat > "$W/n$1.conf" <<CONF
[locusd]
instance = n$1
node = $1
eal_args = $lcores --no-huge --no-pci -m 64
rdma_device = $dev
intra_node = $intra
secret_file = $2
idle_sleep_us = 50
client_slots = 16
client_inbox_slots = ${LV_INBOX_SLOTS:-256}
[cluster]
id = 7
gpus_per_node = 2
node.0 = $a0
node.1 = $a1
CONF
}

stop_nodes() {
	local n
	for n in n0 n1; do
		[ -n "${PID[$n]}" ] && kill -TERM "${PID[$n]}" && wait "${PID[$n]}" 2>/dev/null
		PID[$n]=
	done
}

# up RAILS: both nodes started on RAILS rails, every rail connected both ways, tables pushed
up() {
	local r
	mkconf_rails 0 "$W/secret" "$1"; mkconf_rails 1 "$W/secret" "$1"
	: > "$W/n0.log"; : > "$W/n1.log"
	start 0 && start 1 || { fail "a locusd did not start ($1 rail(s))"; return 1; }
	if [ "$1" = 1 ]; then
		wait_log "$W/n0.log" "peer node 1 up" 1 60 && wait_log "$W/n1.log" "peer node 0 up" 1 30 ||
			{ show_logs 20; fail "one rail: the nodes did not connect"; return 1; }
	else
		for r in 0 1; do
			wait_log "$W/n0.log" "peer node 1 up on rail $r" 1 60 &&
				wait_log "$W/n1.log" "peer node 0 up on rail $r" 1 30 ||
				{ show_logs 20; fail "rail $r did not connect"; return 1; }
		done
	fi
	grep -h "RDMA device\|rail [0-9]: RDMA\|peer node" "$W/n0.log" | sed 's/^/  [n0 log] /'
	cp "$LV_TABLES/eldr.tbl" "$LV_TABLES/grace.tbl" "$W/" && push_tables 0 1 ||
		{ fail "push ($1 rail(s))"; return 1; }
}

# traffic OUT RAILS: the same loadgen run on both configurations; prints and records
# bytes/s (remote bytes out of both nodes over the run's wall time)
traffic() {
	local out=$1 t0 t1 b0 b1 rc
	b0=$(( $(ctr n0 remote_bytes_out) + $(ctr n1 remote_bytes_out) ))
	t0=$(date +%s%N)
	loadgen "$out" n0,n0,n1,n1 n0,n0,n1,n1 --requests ${LR_REQUESTS:-200} \
		--batches ${LR_BATCHES:-60} --tokens ${LR_TOKENS:-32} --row-bytes ${LR_ROW_BYTES:-4096} \
		--decode-us 500 --seconds 120
	rc=$?
	t1=$(date +%s%N)
	b1=$(( $(ctr n0 remote_bytes_out) + $(ctr n1 remote_bytes_out) ))
	sed 's/^/  /' "$out"
	grep -q '^loadgen: ok$' "$out" && [ $rc = 0 ] ||
		{ fail "loadgen on $2 rail(s) (exit $rc)"; show_counters; }
	for n in 0 1; do
		for c in remote_send_errors remote_undeliverable remote_bad; do
			v=$(ctr n$n $c)
			[ "$v" = 0 ] || fail "n$n: $c = $v ($2 rail(s))"
		done
	done
	BYTES[$2]=$((b1 - b0)) NS[$2]=$((t1 - t0))
	RATE[$2]=$(awk -v b=$((b1 - b0)) -v ns=$((t1 - t0)) 'BEGIN { printf "%.0f", b * 1e9 / ns }')
	say "   $2 rail(s): $((b1 - b0)) remote bytes out in $(( (t1 - t0) / 1000000 )) ms:" \
		"${RATE[$2]} B/s; $(grep -o '[0-9]* rows/s' "$out")"
}

declare -A BYTES NS RATE
mksecret "$W/secret"
if [ -z "${LV_TABLES:-}" ]; then
	fail "no tables (LV_TABLES: locusd-vm-test.sh --rails fits them on the host)"
	echo "GUEST RESULT rc=1"
	exit 1
fi

say "R1. two nodes, two rails each (rxex,rxex2 <-> rxey,rxey2), traffic checked end to end"
if up 2; then
	traffic "$W/r2.out" 2
	for n in 0 1; do
		m0=$(ctr n$n verbs_tx_msgs); m1=$(ctr n$n verbs_r1_tx_msgs)
		b0=$(ctr n$n verbs_tx_bytes); b1=$(ctr n$n verbs_r1_tx_bytes)
		u0=$(ctr n$n verbs_peer_up); u1=$(ctr n$n verbs_r1_peer_up)
		say "   n$n rail 0 ($( [ $n = 0 ] && echo rxex || echo rxey)): $m0 messages," \
			"$b0 bytes, peers up $u0; rail 1: $m1 messages, $b1 bytes, peers up $u1;" \
			"failed sends $(( $(ctr n$n verbs_tx_failed) + $(ctr n$n verbs_r1_tx_failed) ))"
		[ "$m0" -gt 0 ] && [ "$m1" -gt 0 ] || fail "n$n: a rail carried no messages"
		[ "$u0" = 1 ] && [ "$u1" = 1 ] || fail "n$n: a rail's connection is not up"
		[ "$(( $(ctr n$n verbs_tx_failed) + $(ctr n$n verbs_r1_tx_failed) ))" = 0 ] ||
			fail "n$n: sends failed"
	done
	for d in vx vx2; do
		say "   veth $d: TX $(ip -s link show $d | awk '/TX:/{getline; print $1}') bytes"
	done
fi
stop_nodes

say "R2. the same nodes on rail 0 only, the same traffic"
if up 1; then
	traffic "$W/r1.out" 1
	[ "$(ctr n0 verbs_r1_tx_msgs)" = 0 ] || fail "one rail: rail 1 counters exist"
fi
stop_nodes

if [ -n "${RATE[1]:-}" ] && [ -n "${RATE[2]:-}" ] && [ "${RATE[1]}" -gt 0 ]; then
	say "   two rails against one, same run: ${RATE[2]} / ${RATE[1]} B/s =" \
		"$(awk -v a=${RATE[2]} -v b=${RATE[1]} 'BEGIN { printf "%.2f", a / b }')x" \
		"(qemu TCG, 2 vCPUs: both rails' rxe devices run on the same two CPUs)"
fi
say "done in $((SECONDS - T0)) s"
echo "GUEST RESULT rc=$FAILED"
exit $FAILED
