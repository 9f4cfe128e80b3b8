#!/bin/bash
# make soak: one locusd on this host under a long locus-loadgen run (1 prefill,
# 4 decoders, 4 ranks): SOAK_SIGNATURES signatures (default 10^6) and
# SOAK_BATCHES dispatch batches per rank (default 25,000: 10^5 in all), each
# answered by COMBINEs. Every SOAK_SAMPLE_S seconds it prints locusd's RSS
# (anonymous, and file-backed: the segment), open descriptors (/proc/PID/fd), inbox slots
# in use, pending requests and attached clients, and fails if
#   - the descriptors change after the first sample,
#   - anonymous memory grows by more than SOAK_RSS_KB (default 4096 KiB) from
#     the first sample to the last,
#   - inbox slots or pending requests are left once every client is idle
#     (still attached: loadgen --linger-ms),
#   - a counter disagrees at the end: ROUTE / DISPATCH / COMBINE requests
#     locusd counted = those loadgen submitted (resubmissions included);
#     signatures routed = submitted - refused for a full inbox; rows
#     dispatched = rows combined back; every rejected_* 0 but
#     rejected_inbox_full, which equals loadgen's resubmissions; clients all
#     detached, none reclaimed;
#   - loadgen finds anything lost, duplicated or corrupt.
# Where it runs (2 cores): locusd's worker lcore polls without sleeping on
# CPU 1 (the only spinning thread); its main lcore (control, sleeps between
# passes) and every client process (they nap 20-50 us when their rings are
# empty) on CPU 0. tests/test_soak.sh runs a short one in make test.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}/bin
SIGS=${SOAK_SIGNATURES:-1000000}
BATCHES=${SOAK_BATCHES:-25000}
SAMPLE_S=${SOAK_SAMPLE_S:-2}
RSS_KB=${SOAK_RSS_KB:-4096}
trace=tests/data/calib_sample.jsonl
tmp=$(mktemp -d)
export LOCUS_SHM_DIR=$tmp/shm LOCUS_STATE_DIR=$tmp/state
mkdir -p "$LOCUS_SHM_DIR" "$LOCUS_STATE_DIR"
inst=soak-$$
pid= lg=
cleanup() {
	[ -n "$lg" ] && kill -9 "$lg" 2>/dev/null
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "soak: FAIL: $*"; exit 1; }

cat > "$tmp/soak.conf" <<CONF
[locusd]
instance = $inst
eal_args = --lcores 0@0,1@1 --no-huge --no-pci -m 64
idle_sleep_us = 0
client_slots = 16
client_inbox_slots = 256
CONF
"$B/locusd" -c "$tmp/soak.conf" > "$tmp/d.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
	grep -q "instance $inst running" "$tmp/d.log" && break
	kill -0 $pid 2>/dev/null || { cat "$tmp/d.log"; fail "locusd exited"; }
	sleep 0.05
done
"$B/locusctl" fit --trace $trace --decoders 4 --seed 1 -o "$tmp/e.tbl" > /dev/null 2>&1 &&
	"$B/locusctl" fit --grace --trace $trace --nodes 1 --gpus 4 --capacity 20 \
		--replica-budget 4 -o "$tmp/g.tbl" > /dev/null 2>&1 &&
	"$B/locusctl" push -i $inst "$tmp/e.tbl" > /dev/null &&
	"$B/locusctl" push -i $inst "$tmp/g.tbl" > /dev/null || fail "fit or push"

# ctr NAME [LABEL-FILTER] [FILE]: a counter summed over its elements
ctr() {
	local f=${3:-}
	[ -n "$f" ] || { f=$tmp/ctr.prom; "$B/locus-stat" -i $inst -p > "$f" 2>/dev/null; }
	awk -v n="locus_$1" -v f="${2:-}" '
		$1 !~ /^#/ && (index($1, n "{") == 1 || index($1, n "_total") == 1 || $1 == n) &&
		(f == "" || index($1, f)) { s += $2 } END { printf "%d\n", s }' "$f"
}
# the worker lcore's thread (the one that spins), for the record
echo "soak: locusd pid $pid; threads and their CPUs:"
for t in /proc/$pid/task/*; do
	printf '  %-16s cpus %s\n' "$(cat "$t/comm")" \
		"$(awk '/Cpus_allowed_list/ { print $2 }' "$t/status")"
done
echo "soak: $SIGS signatures, 4 ranks x $BATCHES dispatch batches; clients on CPU 0"
taskset -c 0 "$B/locus-loadgen" -i $inst --trace $trace --decoders 4 --ranks 4 \
	--requests "$SIGS" --batches "$BATCHES" --tokens 8 --row-bytes 256 --decode-us 0 \
	--seconds 1800 --linger-ms 3000 > "$tmp/lg.out" 2>&1 &
lg=$!
printf 'soak: %6s %10s %10s %5s %8s %8s %8s %10s %10s\n' t_s rss_anon_kB rss_file_kB fds \
	inbox_used pending clients routes batches
samples=0 first_anon= first_fds= last_anon= max_inbox=0 t0=$SECONDS lingering=0
while kill -0 $lg 2>/dev/null; do
	f=$tmp/s.prom
	"$B/locus-stat" -i $inst -p > "$f" 2>/dev/null
	anon=$(awk '/^RssAnon:/ { print $2 }' /proc/$pid/status)
	shm=$(awk '/^Rss(Shmem|File):/ { s += $2 } END { print s }' /proc/$pid/status)
	# (not counting /proc files: the control lcore reads /proc/PID/stat of its clients)
	fds=$(find /proc/$pid/fd -mindepth 1 -printf '%l\n' 2>/dev/null | grep -vc '^/proc/')
	used=$(ctr inbox_slots_used '' "$f") pend=$(ctr requests_pending '' "$f")
	printf 'soak: %6d %10d %10d %5d %8d %8d %8d %10d %10d\n' $((SECONDS - t0)) "$anon" "$shm" \
		"$fds" "$used" "$pend" "$(ctr clients_attached '' "$f")" \
		"$(ctr route_requests '' "$f")" "$(ctr dispatch_batches '' "$f")"
	samples=$((samples + 1))
	[ -n "$first_anon" ] || first_anon=$anon
	last_anon=$anon
	[ "$used" -gt "$max_inbox" ] && max_inbox=$used
	# a leak shows once the clients are idle (checked below); a sample taken while
	# clients register also counts locusd's accepted registration sockets in flight
	[ -z "$first_fds" ] || [ "$fds" -lt "$first_fds" ] && first_fds=$fds
	if grep -q '^loadgen: lingering' "$tmp/lg.out" && [ $lingering = 0 ]; then
		# every client attached and idle: nothing may be held (a moment to settle)
		sleep 0.5
		"$B/locus-stat" -i $inst -p > "$f" 2>/dev/null
		idle_used=$(ctr inbox_slots_used '' "$f") idle_pend=$(ctr requests_pending '' "$f")
		idle_att=$(ctr clients_attached '' "$f")
		idle_fds=$(find /proc/$pid/fd -mindepth 1 -printf '%l\n' 2>/dev/null | grep -vc '^/proc/')
		[ "$idle_fds" -le "$first_fds" ] ||
			fail "open descriptors went from $first_fds to $idle_fds with the clients idle"
		lingering=1
		continue
	fi
	sleep "$SAMPLE_S"
done
wait $lg
rc=$?
lg=
cat "$tmp/lg.out" | grep -v '^loadgen: lingering'
[ $rc = 0 ] && grep -q '^loadgen: ok$' "$tmp/lg.out" || fail "loadgen exit $rc"
[ $lingering = 1 ] || fail "no sample while the clients lingered"
echo "soak: $samples samples over $((SECONDS - t0)) s; anonymous RSS $first_anon -> $last_anon kB" \
	"(bound +$RSS_KB), descriptors $first_fds at the fewest and $idle_fds with the clients idle, inbox slots in use at most" \
	"$max_inbox of $((16 * 256)); with all $idle_att clients idle: inbox slots $idle_used," \
	"pending $idle_pend"
[ $((last_anon - first_anon)) -le "$RSS_KB" ] ||
	fail "anonymous RSS grew by $((last_anon - first_anon)) kB"
[ "$idle_used" = 0 ] && [ "$idle_pend" = 0 ] || fail "inbox slots or requests left while idle"

# the accounts, after every client left: locusd processes the detaches in its
# control pass, after the processes ended (waited for, bounded, 10 s)
f=$tmp/end.prom
for _ in $(seq 200); do
	"$B/locus-stat" -i $inst -p > "$f" 2>/dev/null
	[ "$(ctr clients_attached '' "$f")" = 0 ] && break
	sleep 0.05
done
read -r n_route n_disp n_comb <<< "$(sed -n 's/^requests: \([0-9]*\) ROUTE, \([0-9]*\) DISPATCH, \([0-9]*\) COMBINE.*/\1 \2 \3/p' "$tmp/lg.out")"
sig_retry=$(sed -n 's/^signatures: .* \([0-9]*\) inbox-full retries$/\1/p' "$tmp/lg.out")
rank_retry=$(sed -n 's/^dispatch: .*, \([0-9]*\) inbox-full retries (dispatch, combine).*/\1/p' "$tmp/lg.out")
routed=$(ctr routed '' "$f")
rows_d=$(ctr rows 'op="0"' "$f") rows_c=$(ctr rows 'op="1"' "$f")
echo "soak: locusd counted $(ctr route_requests '' "$f") ROUTE (loadgen sent $n_route)," \
	"$(ctr dispatch_batches '' "$f") DISPATCH ($n_disp), $(ctr combine_batches '' "$f") COMBINE" \
	"($n_comb); $routed routed; rows dispatched $rows_d, combined back $rows_c;" \
	"rejected_inbox_full $(ctr rejected_inbox_full '' "$f") (loadgen resent $sig_retry" \
	"signatures, $rank_retry dispatch/combine); clients attached $(ctr clients_attached '' "$f")," \
	"detached $(ctr clients_detached '' "$f"), reclaimed $(ctr clients_reclaimed '' "$f")"
[ "$(ctr route_requests '' "$f")" = "$n_route" ] || fail "ROUTE requests disagree"
[ "$(ctr dispatch_batches '' "$f")" = "$n_disp" ] || fail "DISPATCH requests disagree"
[ "$(ctr combine_batches '' "$f")" = "$n_comb" ] || fail "COMBINE requests disagree"
[ "$routed" = $((n_route - sig_retry)) ] || fail "routed $routed != $n_route - $sig_retry resent"
[ "$rows_d" = "$rows_c" ] && [ "$rows_d" -gt 0 ] || fail "rows out $rows_d != rows back $rows_c"
[ "$(ctr rejected_inbox_full '' "$f")" = $((sig_retry + rank_retry)) ] ||
	fail "rejected_inbox_full is not loadgen's resubmissions"
bad=$(awk '/^locus_rejected_/ && !/^locus_rejected_inbox_full/ && $2 != 0 { print }' "$f")
bad+=$(awk '/^locus_(client_protocol_errors|table_rejected)/ && $2 != 0 { print }' "$f")
[ -z "$bad" ] || fail "refusals: $bad"
[ "$(ctr clients_attached '' "$f")" = 0 ] && [ "$(ctr clients_reclaimed '' "$f")" = 0 ] &&
	[ "$(ctr clients_detached '' "$f")" = 9 ] || fail "client slots do not add up"
kill -TERM $pid
wait $pid || fail "locusd exited non-zero on SIGTERM"
pid=
echo "soak: ok"
