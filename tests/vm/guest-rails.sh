# Sourced INSIDE the qemu guest by guest-locusd.sh (LV_WHAT=rails) with its helpers (say,
# fail, ctr, snap, snap2, val, loadgen, wait_log, start, mksecret, show_counters, $B, $W,
# $PID) and the
# first veth pair up (guest-veth.sh): two locusd nodes with two rails each,
#   rail 0: n0 rxex  on vx  (192.0.2.20)  <-->  n1 rxey  on vy  (192.0.2.21)
#   rail 1: n0 rxex2 on vx2 (192.0.3.20)  <-->  n1 rxey2 on vy2 (192.0.3.21)
#   R1 both nodes up with both rails, tables pushed, traffic across the nodes checked
#      end to end by locus-loadgen (every byte), both rails carried it (per-rail
#      counters verbs_* and verbs_r1_*), no errors. n0 finds its two devices itself:
#      rdma_device = auto with gpu_pci, on a made-up PCIe tree ($LOCUS_SYSFS_ROOT: rxe
#      devices have no PCI parent) that puts rxex beside GPU 0 and rxex2 beside GPU 1
#   R1b the same traffic with every rank's rows in a host-memory region it registered
#      (a sealed memfd: Soft-RoCE cannot register vgem's pages): each region has an MR on
#      both rails' devices, rows leave zero-copy on whichever rail carries them, counted
#      per rail (rail_region_rows_zero_copy / _copied)
#   R2 under traffic from host-memory regions, rail 1 black-holed for 3 s (R2a: netem
#      loss 100% on vx2 / vy2: RC's retries run out, completion errors), then n0's rail 1
#      device removed for 3 s and added again (R2b: rdma link delete rxex2 / rdma link add
#      rxex2 type rxe netdev vx2: rdma_cm's device removal), then vx2 set down for 2 s
#      (R2c: the port's async event): each time locusd fails rail 1 over (queued
#      messages re-sent on rail 0, posted ones failed once and counted, new traffic on
#      rail 0); the time from the fault to the failover and to rail 1's sources' first
#      message on rail 0, from locusd's clock; after the black hole rail 1 rejoins and
#      its sources come home; the removed device is let go of (the kernel's `rdma link
#      delete` waits until every process closed it), found again once it is added,
#      reopened with the message pool and the regions registered on it again, and rail 1
#      carries n0's messages again within 30 s (the time from the add to the device
#      reopened, to rail 1 up and to its first message, from locusd's clock); after the
#      link flap Soft-RoCE may refuse new connections: reported; every request once,
#      every byte checked (region rows re-sent on rail 0 take rail 0's MR of the region)
#   R3 the same traffic as R1 with the nodes configured with rail 0 only: bytes/s of
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

# mkconf_rails NODE SECRET RAILS: guest-locusd.sh's mkconf, on 1 or 2 rails
mkconf_rails() {
	local dev="rxex,rxex2" a0="192.0.2.20:7471,192.0.3.20:7471" a1="192.0.2.21:7471,192.0.3.21:7471"

	[ "$1" = 1 ] && dev="rxey,rxey2"
	if [ "$3" = 1 ]; then
		dev=${dev%%,*} a0=${a0%%,*} a1=${a1%%,*}
	fi
	mkconf "$1" "$2" "$dev" "$a0" "$a1"
}

# fake_sysfs DIR: a two-socket PCIe tree for n0's rdma_device = auto: GPU 0 (0000:03:00.0)
# beside rxex under one switch, GPU 1 (0000:83:00.0) beside rxex2 under another; n1's
# devices without a parent (as every rxe device is). The devices are real, the tree made up.
fake_sysfs() {
	local S=$1 p
	rm -rf "$S"
	mkdir -p "$S/bus/pci/devices" "$S/class/infiniband/rxey" "$S/class/infiniband/rxey2"
	for p in "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0 0" \
		 "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0 0" \
		 "pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:00.0/0000:83:00.0 1" \
		 "pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0/0000:84:00.0 1"; do
		mkdir -p "$S/devices/${p% *}"
		echo "${p#* }" > "$S/devices/${p% *}/numa_node"
		ln -s "$S/devices/${p% *}" "$S/bus/pci/devices/$(basename "${p% *}")"
	done
	mkdir -p "$S/class/infiniband/rxex" "$S/class/infiniband/rxex2"
	ln -s "$S/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0" \
		"$S/class/infiniband/rxex/device"
	ln -s "$S/devices/pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0/0000:84:00.0" \
		"$S/class/infiniband/rxex2/device"
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
	if [ "$1" = 2 ] && [ "${LR_AUTO:-1}" = 1 ]; then
		# n0 finds its rails itself: the device nearest each GPU
		sed -i 's/^rdma_device = .*/rdma_device = auto\ngpu_pci = 0000:03:00.0,0000:83:00.0/' \
			"$W/n0.conf"
		fake_sysfs "$W/sys"
	fi
	: > "$W/n0.log"; : > "$W/n1.log"
	# the listener first: the dialler's first attempt then finds it
	start 1 && LOCUSD_WRAP="env LOCUS_SYSFS_ROOT=$W/sys" start 0 ||
		{ fail "a locusd did not start ($1 rail(s))"; return 1; }
	if [ "$1" = 2 ] && [ "${LR_AUTO:-1}" = 1 ]; then
		grep -h "is the home of the ranks" "$W/n0.log" | sed 's/^/  [n0 log] /'
		grep -q "rail 0 (rxex) is the home of the ranks of GPU 0 (0000:03:00.0)" "$W/n0.log" &&
			grep -q "rail 1 (rxex2) is the home of the ranks of GPU 1 (0000:83:00.0)" \
				"$W/n0.log" || fail "n0: rdma_device = auto did not map GPU 0 to rxex, 1 to rxex2"
	fi
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

# traffic OUT RAILS [LOADGEN-ARGS...]: the same loadgen run on both configurations; prints
# and records bytes/s (remote bytes out of both nodes over the run's wall time)
traffic() {
	local out=$1 rails=$2 t0 t1 b0 b1 rc
	shift 2
	snap2 "$W/pre"
	b0=$(( $(val "$W/pre.0" remote_bytes_out) + $(val "$W/pre.1" remote_bytes_out) ))
	t0=$(date +%s%N)
	timeout 400 "$B/locus-loadgen" -i n0 $LG_ATTACH --trace $TRACE --prefill-at n0 \
		--decoders 4 --decoder-at n0,n0,n1,n1 --ranks 4 --rank-at n0,n0,n1,n1 \
		--requests ${LR_REQUESTS:-100} --batches ${LR_BATCHES:-30} --tokens ${LR_TOKENS:-32} \
		--row-bytes ${LR_ROW_BYTES:-4096} --decode-us 500 --seconds 360 "$@" > "$out" 2>&1
	rc=$?
	t1=$(date +%s%N)
	snap2 "$W/post"
	b1=$(( $(val "$W/post.0" remote_bytes_out) + $(val "$W/post.1" remote_bytes_out) ))
	sed 's/^/  /' "$out"
	grep -q '^loadgen: ok$' "$out" && [ $rc = 0 ] ||
		{ fail "loadgen on $rails rail(s) (exit $rc)"; show_counters; }
	for n in 0 1; do
		for c in remote_send_errors remote_undeliverable remote_bad; do
			v=$(( $(val "$W/post.$n" $c) - $(val "$W/pre.$n" $c) ))
			[ "$v" = 0 ] || fail "n$n: $c + $v in this run ($rails rail(s))"
		done
	done
	BYTES[$rails]=$((b1 - b0)) NS[$rails]=$((t1 - t0))
	RATE[$rails]=$(awk -v b=$((b1 - b0)) -v ns=$((t1 - t0)) 'BEGIN { printf "%.0f", b * 1e9 / ns }')
	say "   $rails rail(s): $((b1 - b0)) remote bytes out in $(( (t1 - t0) / 1000000 )) ms:" \
		"${RATE[$rails]} B/s; $(grep -o '[0-9]* rows/s' "$out"); host load average at the end:" \
		"$(cut -d' ' -f1-3 "${LV_OUT:-/nonexistent}/host-loadavg" 2>/dev/null || echo '?')"
}

# ms since the epoch
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# R2: rail 1 black-holed, then set down, under traffic. fo_report KIND T0: the times from
# T0 (ms, just before the fault) to n0's failover and to the first message of rail 1's
# sources on rail 0, from locusd's own clock readings (rail_failed_at_ms, rail_moved_at_ms)
fo_report() {
	# the guest's vCPUs read the clock a few ms apart under TCG: a failover stamped up to
	# 100 ms before the fault's own stamp is this fault's (a link down acts at once)
	local f=$W/fo-${1// /-} fa=0 ma=0 end=$((SECONDS + 30)) lo=$(($2 - 100))
	while [ $SECONDS -lt $end ]; do
		snap 0 "$f"
		fa=$(val "$f" rail_failed_at_ms 'rail="1"'); ma=$(val "$f" rail_moved_at_ms 'rail="1"')
		[ "$fa" -ge "$lo" ] && [ "$ma" -ge "$fa" ] && break
		sleep 0.5
	done
	if [ "$fa" -ge "$lo" ] && [ "$ma" -ge "$fa" ]; then
		say "   $1: fault -> n0 failed rail 1 over in $((fa - $2)) ms -> rail 1's sources'" \
			"first message on rail 0 $((ma - fa)) ms later ($((ma - $2)) ms after the fault)"
	else
		fail "$1: n0 did not fail rail 1 over (failed at $fa, moved at $ma, fault at $2)"
	fi
}

# regions_report TAG PRE POST: per node and rail, rows of host-memory regions that left
# zero-copy and copied between two snaps, beside the engine's own counts; checks that every
# row the engines handed over for gathering left zero-copy on some rail, none copied
regions_report() {
	local n f g z0 z1 c0 c1 ez ec
	for n in 0 1; do
		f=$2.$n g=$3.$n
		z0=$(( $(val $g rail_region_rows_zero_copy 'rail="0"') - $(val $f rail_region_rows_zero_copy 'rail="0"') ))
		z1=$(( $(val $g rail_region_rows_zero_copy 'rail="1"') - $(val $f rail_region_rows_zero_copy 'rail="1"') ))
		c0=$(( $(val $g rail_region_rows_copied 'rail="0"') - $(val $f rail_region_rows_copied 'rail="0"') ))
		c1=$(( $(val $g rail_region_rows_copied 'rail="1"') - $(val $f rail_region_rows_copied 'rail="1"') ))
		ez=$(( $(val $g region_rows_zero_copy) - $(val $f region_rows_zero_copy) ))
		ec=$(( $(val $g region_messages_copied) - $(val $f region_messages_copied) ))
		say "   $1 n$n: region rows out on rail 0: $z0 zero-copy, $c0 copied; on rail 1:" \
			"$z1 zero-copy, $c1 copied (engine: $ez rows handed over to gather, $ec" \
			"messages it copied itself: more row runs than gather entries); regions" \
			"without an MR on rail 0 / 1: $(val $g rail_region_no_mr 'rail="0"') /" \
			"$(val $g rail_region_no_mr 'rail="1"')"
		[ $((c0 + c1)) = 0 ] || fail "$1 n$n: region rows copied on a rail that has their MR"
		[ $((z0 + z1)) = "$ez" ] ||
			fail "$1 n$n: the rails sent $((z0 + z1)) region rows zero-copy, the engine handed $ez"
		[ "$(val $g rail_region_no_mr)" = 0 ] || fail "$1 n$n: a region without an MR on a rail"
		RZ[$1.$n.0]=$z0 RZ[$1.$n.1]=$z1
	done
}

# R2b: n0's rail 1 device removed under traffic for 3 s, then added again (device_gone, from
# failover). The times come from locusd's clock (rail_*_at_ms) against the script's. Returns
# 1 only when n0 kept the device and had to be killed for the kernel to finish (failed)
device_gone() {
	local t td ta ups f0 f rc lost0 back0 ba ua la end del carried=0
	snap 0 "$W/dg-a.0"
	lost0=$(val "$W/dg-a.0" rail_device_lost 'rail="1"')
	back0=$(val "$W/dg-a.0" rail_device_back 'rail="1"')
	f0=$(val "$W/dg-a.0" verbs_r1_tx_msgs)
	ups=$(grep -c "peer node 1 up on rail 1" "$W/n0.log")
	rm -f "$W/del.rc"
	t=$(now_ms)
	# the kernel's unregistration of a device waits until every process closed it (rxe
	# cannot disassociate a context), uninterruptibly: its return says n0's locusd let go
	# of all of it (a locusd that does not leaves the command blocked for good)
	( rdma link delete rxex2; echo "$? $(now_ms)" > "$W/del.rc" ) &
	del=$!
	end=$((SECONDS + 60))
	while [ ! -s "$W/del.rc" ] && [ $SECONDS -lt $end ]; do sleep 0.2; done
	if [ ! -s "$W/del.rc" ]; then
		fail "device removed: rdma link delete rxex2 did not return within 60 s: n0's locusd" \
			"kept the device open"
		grep -h "rxex2" "$W/n0.log" | tail -n 5 | sed 's/^/  [n0 log] /'
		dmesg | grep -A 3 "blocked for more" | head -n 4 | sed 's/^/  [dmesg] /'
		# only n0 holds the device: stopped, it lets the kernel finish
		kill -9 "${PID[n0]}"
		wait $del
		return 1
	fi
	wait $del
	read -r rc td < "$W/del.rc"
	[ "$rc" = 0 ] || { fail "device removed: rdma link delete rxex2 failed (exit $rc)"; return 0; }
	# gone for 3 s, then back under its name on the same netdev
	sleep 3
	ta=$(now_ms)
	rdma link add rxex2 type rxe netdev vx2 || { fail "rdma link add rxex2 again"; return 0; }
	say "   device removed: rdma link delete rxex2 returned after $((td - t)) ms (n0's locusd" \
		"had freed everything it had on the device), added again $((ta - td)) ms later"
	fo_report "device removed" "$t"
	snap 0 "$W/dg-b.0"
	la=$(val "$W/dg-b.0" rail_device_lost_at_ms 'rail="1"')
	[ "$(val "$W/dg-b.0" rail_device_lost 'rail="1"')" = $((lost0 + 1)) ] && [ "$la" -ge "$t" ] &&
		say "   device removed: n0 saw it go $((la - t)) ms after the delete began" ||
		fail "device removed: n0's rail_device_lost{rail=1} did not count it"
	wait_log "$W/n0.log" "peer node 1 up on rail 1" $((ups + 1)) 30 || {
		fail "device back: rail 1 did not rejoin within 30 s of rdma link add"
		grep -h "rxex2\|on rail 1" "$W/n0.log" | tail -n 6 | sed 's/^/  [n0 log] /'
		return 0
	}
	# lost, released, (listed again but not reopened yet,) back
	grep -h "RDMA device rxex2 (rail 1)" "$W/n0.log" | tail -n 4 | sed 's/^/  [n0 log] /'
	# the rail carries n0's messages again: its first one after it came up, from locusd's clock
	end=$((SECONDS + 30))
	while [ $SECONDS -lt $end ]; do
		snap 0 "$W/dg-d.0"
		ua=$(val "$W/dg-d.0" rail_up_msg_at_ms 'rail="1"')
		[ "$ua" -ge "$ta" ] && [ "$(val "$W/dg-d.0" verbs_r1_tx_msgs)" -gt $((f0 + 20)) ] &&
			{ carried=1; break; }
		kill -0 $LG 2>/dev/null || break
		sleep 0.5
	done
	ba=$(val "$W/dg-d.0" rail_device_back_at_ms 'rail="1"')
	if [ $carried = 1 ]; then
		say "   device back: rdma link add -> n0 reopened rxex2 in $((ba - ta)) ms -> rail 1's" \
			"first message $((ua - ta)) ms after the add (the device away $((ua - la)) ms" \
			"in all); $(( $(val "$W/dg-d.0" verbs_r1_tx_msgs) - f0 )) messages on rail 1" \
			"since the delete"
	else
		fail "device back: rail 1 carried no traffic within 30 s (first message at $ua," \
			"add at $ta)"
	fi
	[ "$(val "$W/dg-d.0" rail_device_back 'rail="1"')" = $((back0 + 1)) ] ||
		fail "device back: n0's rail_device_back{rail=1} did not count it"
	# the regions the ranks on n0 hold (host memory) on the new device too, none copied
	f=$(grep -h "RDMA device rxex2 (rail 1) back" "$W/n0.log" | tail -n 1 |
		sed -n 's/.*the message pool and \([0-9]*\) client region(s) registered with it again (0 without an MR.*/\1/p')
	[ "${f:-0}" -ge 1 ] ||
		fail "device back: n0 did not register its host-memory regions on rxex2 again"
	[ "$(val "$W/dg-d.0" rail_region_no_mr 'rail="1"')" = 0 ] ||
		fail "device back: a region without an MR on the new rxex2"
	return 0
}

failover() {
	local t ups f0 back=0
	say "R2. rail 1 black-holed for 3 s, then n0's rail 1 device removed for 3 s and added" \
		"again, then vx2 set down for 2 s, under traffic (rows from host-memory regions)"
	snap2 "$W/fo-r0"
	timeout 400 "$B/locus-loadgen" -i n0 $LG_ATTACH --trace $TRACE --prefill-at n0 --decoders 4 \
		--decoder-at n0,n0,n1,n1 --ranks 4 --rank-at n0,n0,n1,n1 --row-bytes 4096 \
		--decode-us 500 --requests 100000 --batches 100000 --tokens 16 --seconds 360 \
		--allow-errors --batch-ms 5000 --host-region > "$W/fo.out" 2>&1 &
	LG=$!
	snap2 "$W/fo-a"
	f0=$(val "$W/fo-a.0" verbs_r1_tx_msgs)
	for _ in $(seq 100); do # rail 1 carries traffic first
		snap 0 "$W/fo-b.0"
		[ "$(val "$W/fo-b.0" verbs_r1_tx_msgs)" -gt $((f0 + 20)) ] && break
		kill -0 $LG 2>/dev/null || break
	done
	# R2a: every frame on the second pair lost: RC's retries run out (completion errors)
	ups=$(grep -c "peer node 1 up on rail 1" "$W/n0.log")
	t=$(now_ms)
	for d in vx2 vy2; do tc qdisc add dev $d root netem loss 100% || fail "netem on $d"; done
	sleep 3
	for d in vx2 vy2; do tc qdisc del dev $d root; done
	fo_report "black hole" "$t"
	if wait_log "$W/n0.log" "peer node 1 up on rail 1" $((ups + 1)) 60; then
		say "   black hole: rail 1 rejoined $(( $(now_ms) - t )) ms after the fault began"
		back=1
	else
		fail "black hole: rail 1 did not rejoin within 60 s"
	fi
	grep -h "on rail 1" "$W/n0.log" | tail -n 3 | sed 's/^/  [n0 log] /'
	# rail 1's sources came home: rail 1 carries n0's messages again
	snap 0 "$W/fo-c.0"
	f0=$(val "$W/fo-c.0" verbs_r1_tx_msgs)
	for _ in $(seq 100); do
		[ $back = 1 ] || break
		snap 0 "$W/fo-d.0"
		[ "$(val "$W/fo-d.0" verbs_r1_tx_msgs)" -gt $((f0 + 20)) ] && break
		kill -0 $LG 2>/dev/null || break
	done
	[ $back = 0 ] || [ "$(val "$W/fo-d.0" verbs_r1_tx_msgs)" -gt $((f0 + 20)) ] ||
		fail "black hole: rail 1 carried no traffic after it rejoined"
	[ $back = 1 ] && say "   black hole: rail 1 carries n0's messages again" \
		"($(( $(val "$W/fo-d.0" verbs_r1_tx_msgs) - f0 )) since it rejoined)"
	if [ $back = 1 ] && ! device_gone; then
		# n0 is gone with the device it kept: nothing more to fail over
		kill -TERM $LG 2>/dev/null
		wait $LG
		return
	fi
	# R2c: the netdev down: the port's async event
	ups=$(grep -c "peer node 1 up on rail 1" "$W/n0.log")
	t=$(now_ms)
	ip link set vx2 down
	sleep 2
	ip link set vx2 up
	# a link set down loses its routes (guest-veth.sh)
	ip route replace 192.0.3.21/32 dev vx2 table 122; ip route replace 192.0.3.20/32 dev vy2 table 123
	fo_report "link down" "$t"
	# Soft-RoCE in Debian's 6.1 kernel may take no new connection on a pair whose netdev
	# flapped under traffic (guest-faults.sh, F4): a rejoin is reported, not required
	if wait_log "$W/n0.log" "peer node 1 up on rail 1" $((ups + 1)) 30; then
		say "   link down: rail 1 rejoined $(( $(now_ms) - t )) ms after the link went down"
	else
		say "   link down: rail 1 did not rejoin within 30 s of the link coming back" \
			"(Soft-RoCE after a netdev flap, as in guest-faults.sh F4); traffic stays on rail 0"
	fi
	sleep 2
	kill -TERM $LG
	wait $LG
	rc=$?
	sed 's/^/  /' "$W/fo.out"
	grep -q '^loadgen: ok$' "$W/fo.out" && [ $rc = 0 ] ||
		fail "loadgen across the failovers (exit $rc): a request lost, corrupt or answered twice"
	snap2 "$W/fo-e"
	for n in 0 1; do
		f=$W/fo-e.$n
		say "   n$n: rail 1 failovers $(val $f rail_failovers 'rail="1"') (rail 0:" \
			"$(val $f rail_failovers 'rail="0"')); queued messages re-sent on rail 0" \
			"$(val $f rail_resent 'rail="1"'); failed on rail 1 $(val $f rail_failed 'rail="1"');" \
			"sent on rail 0 away from home $(val $f rail_away_msgs 'rail="0"');" \
			"time without rail 1 $(val $f rail_down_ms 'rail="1"') ms; rail 1 port errors" \
			"$(val $f verbs_r1_port_errors), ups $(val $f verbs_r1_port_ups)"
		[ "$(val $f rail_failovers 'rail="1"')" -ge 3 ] ||
			fail "n$n: fewer than 3 failovers of rail 1"
		# during R2's faults (the count from the start may hold a flap of the first connect:
		# on a loaded host the dialler's last leg can time out after the listener went up)
		[ "$(val $f rail_failovers 'rail="0"')" = "$(val $W/fo-r0.$n rail_failovers 'rail="0"')" ] ||
			{ fail "n$n: rail 0 failed over too"; grep -h "on rail 0" "$W/n$n.log" |
				tail -n 4 | sed "s/^/  [n$n log] /"; }
		say "   n$n: rail 1's completion errors by status (ibv_wc_status):" \
			"$(awk '$1 ~ /^locus_verbs_r1_cq_errors(_total)?\{/ && $2 > 0 { sub(/.*status="/, "", $1);
				sub(/".*/, "", $1); printf "%s%s: %d", sep, $1, $2; sep = ", " }' "$f")"
		[ "$(val $f rail_down_ms 'rail="1"')" -gt 0 ] || fail "n$n: no time without rail 1"
		[ "$(val $f rail_away_msgs 'rail="0"')" -gt 0 ] || fail "n$n: nothing moved to rail 0"
		[ "$(val $f remote_bad)" = 0 ] || fail "n$n: malformed messages"
	done
	[ "$(val "$W/fo-e.0" verbs_r1_port_errors)" -ge 1 ] ||
		fail "n0: the link down came without a port error event"
	regions_report R2 "$W/fo-r0" "$W/fo-e"
	[ "${RZ[R2.0.0]}" -gt 0 ] || fail "R2 n0: no region row left zero-copy on rail 0"
}

declare -A BYTES NS RATE RZ
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
		f=$W/post.$n
		m0=$(val $f verbs_tx_msgs); m1=$(val $f verbs_r1_tx_msgs)
		b0=$(val $f verbs_tx_bytes); b1=$(val $f verbs_r1_tx_bytes)
		u0=$(val $f verbs_peer_up); u1=$(val $f verbs_r1_peer_up)
		tf=$(( $(val $f verbs_tx_failed) + $(val $f verbs_r1_tx_failed) ))
		say "   n$n rail 0 ($( [ $n = 0 ] && echo rxex || echo rxey)): $m0 messages," \
			"$b0 bytes, peers up $u0; rail 1: $m1 messages, $b1 bytes, peers up $u1;" \
			"failed sends $tf; rail_up $(val $f rail_up 'rail="0"') $(val $f rail_up 'rail="1"')"
		[ "$m0" -gt 0 ] && [ "$m1" -gt 0 ] || fail "n$n: a rail carried no messages"
		[ "$u0" = 1 ] && [ "$u1" = 1 ] || fail "n$n: a rail's connection is not up"
		[ "$tf" = 0 ] || fail "n$n: sends failed"
		[ "$(val $f rail_away_msgs)" = 0 ] || fail "n$n: messages left their home rail"
	done
	for d in vx vx2; do
		say "   veth $d: TX $(ip -s link show $d | awk '/TX:/{getline; print $1}') bytes"
	done
	say "R1b. the same traffic from host-memory regions (sealed memfds): an MR per rail"
	cp "$W/post.0" "$W/hr-a.0"; cp "$W/post.1" "$W/hr-a.1"
	traffic "$W/r2h.out" "2 (host-memory regions)" --host-region
	grep -q "host-memory regions (memfd): 4 of 4 ranks registered, 4 unregistered; locusd mapped 4, dma-buf MR 0, MR on the mapping 4, no MR 0" \
		"$W/r2h.out" || fail "R1b: the regions were not all registered on the mapping"
	for n in 0 1; do
		grep -m1 "region 0x" "$W/n$n.log" | sed "s/^/  [n$n log] /"
		grep -q "bytes of a memfd (host memory): mapped, rail 0 MR on the mapping, rail 1 MR on the mapping" \
			"$W/n$n.log" || fail "n$n: a region without an MR on both rails"
	done
	regions_report R1b "$W/hr-a" "$W/post"
	for n in 0 1; do
		[ "${RZ[R1b.$n.0]}" -gt 0 ] && [ "${RZ[R1b.$n.1]}" -gt 0 ] ||
			fail "R1b n$n: a rail sent no region rows zero-copy"
	done
	[ "${LR_FAILOVER:-1}" = 1 ] && failover
fi
stop_nodes

say "R3. the same nodes on rail 0 only, the same traffic as R1"
if up 1; then
	traffic "$W/r1.out" 1
	[ "$(val "$W/post.0" verbs_r1_tx_msgs)" = 0 ] || fail "one rail: rail 1 counters exist"
fi
stop_nodes

if [ -n "${RATE[1]:-}" ] && [ -n "${RATE[2]:-}" ] && [ "${RATE[1]}" -gt 0 ]; then
	say "   two rails against one, same run: ${RATE[2]} / ${RATE[1]} B/s =" \
		"$(awk -v a=${RATE[2]} -v b=${RATE[1]} 'BEGIN { printf "%.2f", a / b }')x" \
		"(qemu TCG, 2 vCPUs: both rails' rxe devices run on the same two CPUs, beside the" \
		"host's other work: the load averages above; TCG's figure says little about NICs)"
fi
say "done in $((SECONDS - T0)) s"
echo "GUEST RESULT rc=$FAILED"
exit $FAILED
