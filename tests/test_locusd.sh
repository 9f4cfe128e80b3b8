#!/bin/bash
# locusd as a process: the demo end to end (tables, traffic, mid-run push,
# zero errors, clean stop), a second daemon for the same instance refused, a
# killed daemon's stale segment replaced on restart (also while the killed one
# is a zombie its parent has not reaped), SIGHUP re-reading the
# config, SIGTERM removing the segment, rdma_device = auto with gpu_pci on a
# cluster refused at start when the GPUs' nearest devices are not as many as
# node.<id>'s addresses (a sysfs tree of its own, $LOCUS_SYSFS_ROOT). Segments
# live in a private directory.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}/bin
tmp=$(mktemp -d)
export LOCUS_SHM_DIR=$tmp/shm LOCUS_STATE_DIR=$tmp/state
mkdir -p "$LOCUS_SHM_DIR"
pids=()
cleanup() {
	for p in "${pids[@]+"${pids[@]}"}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_locusd: $*" >&2; exit 1; }
. tests/lib.sh # wait_running


# 1. the README's main job (make demo)
DEMO_REQUESTS=1500 DEMO_BATCHES=20 tools/demo/demo.sh > "$tmp/demo.out" 2>&1 ||
	{ cat "$tmp/demo.out"; fail "demo failed"; }
grep -q '^demo: ok$' "$tmp/demo.out" || fail "demo did not finish"
grep -q '^loadgen: ok$' "$tmp/demo.out" || fail "loadgen did not pass"

# 2. one daemon per instance; a killed daemon's segment is taken over
cat > "$tmp/a.conf" <<CONF
[locusd]
instance = t-a
eal_args = -l 0-1 --no-huge --no-pci -m 64
idle_sleep_us = 100
client_slots = 4
stage_size = 1048576
table_slot_size = 1048576
CONF
"$B/locusd" -c "$tmp/a.conf" > "$tmp/a.log" 2>&1 &
pids+=($!)
wait_running t-a $! "$tmp/a.log" || fail "locusd t-a did not come up"
first=$!
if "$B/locusd" -c "$tmp/a.conf" > "$tmp/b.log" 2>&1; then
	fail "a second locusd for instance t-a started"
fi
grep -q "instance t-a is already served by pid $first" "$tmp/b.log" || fail "$(cat "$tmp/b.log")"
kill -9 "$first"
wait "$first" 2>/dev/null || true
[ -e "$LOCUS_SHM_DIR/locus.t-a" ] || fail "no stale segment after kill -9"
"$B/locusd" -c "$tmp/a.conf" > "$tmp/c.log" 2>&1 &
second=$!
pids+=($second)
wait_running t-a $second "$tmp/c.log" || fail "locusd t-a (the second) did not come up"
"$B/locus-stat" -i t-a --json | tr -d ' \n' | grep "\"owner_pid\":$second," >/dev/null ||
	fail "restarted locusd does not own the segment"
# the same when the killed daemon is a zombie its parent has not reaped: the pid still
# answers kill(pid, 0) but runs nothing. perl forks it and sleeps without waiting.
proc_state() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1; }
sed 's/^instance = t-a$/instance = t-z/' "$tmp/a.conf" > "$tmp/z.conf"
perl -e 'open(my $f, ">", shift) or die; my $p = fork() // die;
	if (!$p) { exec(@ARGV) or exit 127 } print $f "$p\n"; close($f); sleep(60)' \
	"$tmp/z.pid" "$B/locusd" -c "$tmp/z.conf" > "$tmp/z.log" 2>&1 &
parent=$!
pids+=($parent)
for _ in $(seq 100); do [ -s "$tmp/z.pid" ] && break; sleep 0.05; done
zombie=$(cat "$tmp/z.pid")
pids+=($zombie)
wait_running t-z $zombie "$tmp/z.log" || fail "locusd t-z did not come up"
kill -9 "$zombie"
for _ in $(seq 100); do [ "$(proc_state $zombie)" = Z ] && break; sleep 0.05; done
[ "$(proc_state $zombie)" = Z ] || fail "killed locusd t-z is not a zombie: '$(proc_state $zombie)'"
"$B/locusd" -c "$tmp/z.conf" > "$tmp/z2.log" 2>&1 &
znew=$!
pids+=($znew)
wait_running t-z $znew "$tmp/z2.log" || fail "locusd t-z did not take over from its zombie"
"$B/locus-stat" -i t-z --json | tr -d ' \n' | grep "\"owner_pid\":$znew," >/dev/null ||
	fail "locusd t-z does not own the segment its zombie left"
kill -TERM $znew
wait $znew || fail "locusd t-z exited non-zero on SIGTERM"
kill $parent
wait $parent 2>/dev/null || true

# 3. SIGHUP re-reads the config: the safe key is applied, others named
sed -i 's/idle_sleep_us = 100/idle_sleep_us = 20/; s/client_slots = 4/client_slots = 5/' "$tmp/a.conf"
kill -HUP $second
for _ in $(seq 100); do grep -q 'SIGHUP' "$tmp/c.log" && break; sleep 0.05; done
grep -q 'SIGHUP: applied the idle policy (idle_spin_polls [0-9]*, idle_pause_polls [0-9]*, idle_sleep_max_us 20) and watchdog; other changes need a restart' "$tmp/c.log" ||
	{ cat "$tmp/c.log"; fail "SIGHUP not handled"; }
printf '[locusd]\nbogus = 1\n' > "$tmp/a.conf"
kill -HUP $second
for _ in $(seq 100); do grep -q 'keeping the running' "$tmp/c.log" && break; sleep 0.05; done
grep -q "a.conf:2: unknown key 'bogus'" "$tmp/c.log" || { cat "$tmp/c.log"; fail "bad reload"; }
kill -0 $second || fail "a bad config on SIGHUP stopped locusd"

# 4. push history: diff and rollback against the running instance
trace=tests/data/calib_sample.jsonl
"$B/locusctl" fit --trace $trace --decoders 4 --seed 1 --tau 0.1 -o "$tmp/e1.tbl" >/dev/null 2>&1
"$B/locusctl" fit --trace $trace --decoders 4 --seed 9 --tau 0.2 -o "$tmp/e2.tbl" >/dev/null 2>&1
"$B/locusctl" push -i t-a "$tmp/e1.tbl" >/dev/null
"$B/locusctl" push -i t-a "$tmp/e2.tbl" >/dev/null
[ -s "$LOCUS_STATE_DIR/t-a/eldr-1.tbl" ] && [ -s "$LOCUS_STATE_DIR/t-a/eldr-2.tbl" ] ||
	fail "push history not kept"
"$B/locusctl" diff "$tmp/e1.tbl" "$tmp/e1.tbl" | grep -x 'tables are equal' >/dev/null || fail "diff of equal tables"
set +e
out=$("$B/locusctl" diff "$tmp/e1.tbl" "$tmp/e2.tbl"); rc=$?
set -e
[ $rc -eq 1 ] || fail "diff of different tables exited $rc"
echo "$out" | grep -q '^tau: 0.1 -> 0.2$' || fail "diff: $out"
"$B/locusctl" diff -i t-a "$tmp/e2.tbl" | grep -x 'tables are equal' >/dev/null || fail "diff -i: running table"
"$B/locusctl" rollback -i t-a | grep 'back from generation 2 to the table of generation 1' >/dev/null ||
	fail "rollback"
"$B/locus-stat" -i t-a --json 'table_generation' | tr -d ' \n' | grep '"values":\[3,0\]' >/dev/null ||
	fail "rollback did not publish generation 3"
"$B/locusctl" diff -i t-a "$tmp/e1.tbl" | grep -x 'tables are equal' >/dev/null || fail "rolled back table differs"
if "$B/locusctl" rollback -i t-a --to 42 2>"$tmp/rb.err"; then fail "rollback to a missing generation"; fi
grep -q 'no kept eldr table of t-a with generation 42' "$tmp/rb.err" || fail "$(cat "$tmp/rb.err")"

# 5. systemd notification: READY once running, WATCHDOG=1 at half the period, STOPPING at the end
cat > "$tmp/w.conf" <<CONF
[locusd]
instance = t-w
eal_args = -l 0-1 --no-huge --no-pci -m 64
idle_sleep_us = 100
client_slots = 2
stage_size = 65536
table_slot_size = 65536
CONF
"${BUILD:-build}/tests/notify_listen" "$tmp/notify" 60 > "$tmp/notify.log" &
lpid=$!
for _ in $(seq 50); do [ -S "$tmp/notify" ] && break; sleep 0.05; done
NOTIFY_SOCKET=$tmp/notify WATCHDOG_USEC=200000 "$B/locusd" -c "$tmp/w.conf" > "$tmp/w.log" 2>&1 &
wpid=$!
pids+=($wpid)
wait_running t-w $wpid "$tmp/w.log" || fail "locusd t-w did not come up"
# DPDK telemetry: /locus/info names the instance and the tables in use
tel=$("${BUILD:-build}/tests/telemetry_query" locus-t-w /locus/info) || fail "telemetry: $tel"
case "$tel" in *'"/locus/info":'*'"instance":"t-w"'*'"eldr_generation":0'*) ;;
	*) fail "telemetry answer: $tel" ;; esac
sleep 1
# SIGHUP applies the watchdog key: off, no ping; on again, pings
n_pings() { grep -c '^WATCHDOG=1$' "$tmp/notify.log" || true; }
hup_w() {
	local before
	before=$(grep -c 'SIGHUP' "$tmp/w.log" || true)
	kill -HUP $wpid
	for _ in $(seq 100); do
		[ "$(grep -c 'SIGHUP' "$tmp/w.log" || true)" -gt "$before" ] && return 0
		sleep 0.05
	done
	fail "SIGHUP not answered: $(cat "$tmp/w.log")"
}
printf 'watchdog = no\n' >> "$tmp/w.conf"
hup_w
sleep 0.3
off=$(n_pings)
sleep 0.6
[ "$(n_pings)" -eq "$off" ] || fail "watchdog = no on SIGHUP: pings went on ($off, then $(n_pings))"
sed -i 's/^watchdog = no$/watchdog = yes/' "$tmp/w.conf"
hup_w
sleep 0.6
[ "$(n_pings)" -ge $((off + 3)) ] || fail "watchdog = yes on SIGHUP: $(n_pings) pings, $off before"
kill -TERM $wpid
wait $wpid || fail "locusd t-w exited non-zero"
# notify_listen quits by itself after 60 s: gone already is no error under set -e
kill $lpid 2>/dev/null || true
wait $lpid 2>/dev/null || true
grep -q '^READY=1;STATUS=instance t-w' "$tmp/notify.log" || fail "no READY: $(cat "$tmp/notify.log")"
[ "$(grep -c '^WATCHDOG=1$' "$tmp/notify.log")" -ge 5 ] ||
	fail "watchdog pings: $(grep -c '^WATCHDOG=1$' "$tmp/notify.log") in 1 s at 100 ms"
grep -q '^STOPPING=1$' "$tmp/notify.log" || fail "no STOPPING"

# 6. SIGTERM: clean exit, segment removed
kill -TERM $second
wait $second || fail "locusd exited non-zero on SIGTERM"
[ ! -e "$LOCUS_SHM_DIR/locus.t-a" ] || fail "segment left after SIGTERM"
# 7. rdma_device = auto with gpu_pci: GPU 0 nearest mlx5_1 (socket 1), GPU 1 nearest mlx5_0,
# so two rails in that order; node.0 lists one address: refused before any device is opened
S=$tmp/sys
for d in pci0000:00/0000:00:01.0/0000:03:00.0 pci0000:00/0000:00:01.0/0000:04:00.0 \
	 pci0000:80/0000:80:01.0/0000:83:00.0 pci0000:80/0000:80:01.0/0000:84:00.0; do
	mkdir -p "$S/devices/$d"
done
mkdir -p "$S/bus/pci/devices" "$S/class/infiniband/mlx5_0" "$S/class/infiniband/mlx5_1"
ln -s "$S/devices/pci0000:80/0000:80:01.0/0000:83:00.0" "$S/bus/pci/devices/0000:83:00.0"
ln -s "$S/devices/pci0000:00/0000:00:01.0/0000:03:00.0" "$S/bus/pci/devices/0000:03:00.0"
ln -s "$S/devices/pci0000:00/0000:00:01.0/0000:04:00.0" "$S/class/infiniband/mlx5_0/device"
ln -s "$S/devices/pci0000:80/0000:80:01.0/0000:84:00.0" "$S/class/infiniband/mlx5_1/device"
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/secret")
cat > "$tmp/r.conf" <<CONF
[locusd]
instance = t-r
eal_args = -l 0-1 --no-huge --no-pci -m 64
rdma_device = auto
gpu_pci = 0000:83:00.0,0000:03:00.0
secret_file = $tmp/secret
[cluster]
gpus_per_node = 2
node.0 = 10.0.0.1:7471
node.1 = 10.0.0.2:7471
CONF
"$B/locusd" -c "$tmp/r.conf" --check-config > /dev/null 2>&1 || fail "auto with gpu_pci: --check-config"
LOCUS_SYSFS_ROOT=$S timeout 60 "$B/locusd" -c "$tmp/r.conf" > "$tmp/r.log" 2>&1 &&
	fail "auto with two rails' devices and one address started"
grep -q "locusd: rdma_device = auto: gpu_pci's 2 GPUs are nearest to 2 RDMA device(s), rails in this order: mlx5_1 mlx5_0; node.0 lists 1 address(es): list one per rail, in that order" \
	"$tmp/r.log" || fail "auto with gpu_pci, one address: $(cat "$tmp/r.log")"
echo "test_locusd: demo, single instance, stale takeover (also from a zombie), SIGHUP, diff/rollback, sd_notify, SIGTERM, rails by GPU refused on a count ok"
