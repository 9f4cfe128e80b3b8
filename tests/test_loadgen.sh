#!/bin/bash
# locus-loadgen's flags for several instances and for a peer killed under
# traffic, on one host node (the two-node runs are in make test-locusd-vm):
# per-process instances, rows from host-memory regions (--host-region), bad
# instance lists refused, an unreachable instance
# reported, a locusd killed under traffic: with --allow-errors the run ends
# ok and says what its dead locusd left unanswered; without, it fails (never
# hangs); either way within 5 s of the kill (the client API's poll says so).
# Segments live in a private directory.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}/bin
tmp=$(mktemp -d)
export LOCUS_SHM_DIR=$tmp/shm LOCUS_STATE_DIR=$tmp/state
mkdir -p "$LOCUS_SHM_DIR" "$LOCUS_STATE_DIR"
inst=lg-t$$
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_loadgen: $*" >&2; exit 1; }
. tests/lib.sh # wait_running
trace=tests/data/calib_sample.jsonl
LG=("$B/locus-loadgen" -i "$inst" --trace "$trace" --decoders 4 --ranks 4)

cat > "$tmp/a.conf" <<CONF
[locusd]
instance = $inst
eal_args = -l 0-1 --no-huge --no-pci -m 64
idle_sleep_us = 50
client_slots = 16
client_inbox_slots = 256
CONF
start() { # n-th start of the instance
	"$B/locusd" -c "$tmp/a.conf" >> "$tmp/d.log" 2>&1 &
	pid=$!
	wait_running "$inst" $pid "$tmp/d.log" "$1" || fail "locusd did not come up"
	"$B/locusctl" push -i "$inst" "$tmp/e.tbl" > /dev/null &&
		"$B/locusctl" push -i "$inst" "$tmp/g.tbl" > /dev/null || fail "push"
}
# A run's decoder ids and ranks are free for the next run once locusd reclaimed
# its slots, which it does asynchronously (a loaded host takes a while).
reclaimed() {
	for _ in $(seq 400); do
		[ "$("$B/locus-stat" -i "$inst" clients_attached | awk '$1 == "clients_attached" {print $3}')" = 0 ] &&
			return 0
		sleep 0.025
	done
	fail "the previous run's clients were not reclaimed within 10 s"
}
"$B/locusctl" fit --trace $trace --decoders 4 --seed 1 -o "$tmp/e.tbl" > /dev/null 2>&1 ||
	fail "fit eldr"
"$B/locusctl" fit --grace --trace $trace --nodes 1 --gpus 4 --capacity 20 --replica-budget 4 \
	-o "$tmp/g.tbl" > /dev/null 2>&1 || fail "fit grace"
start 1

# 1. every process told where to attach
a=$inst
timeout 60 "${LG[@]}" --prefill-at $a --decoder-at $a,$a,$a,$a --rank-at $a,$a,$a,$a \
	--requests 400 --batches 10 > "$tmp/1.out" 2>&1 || { cat "$tmp/1.out"; fail "run with -at lists"; }
grep -q '^loadgen: ok$' "$tmp/1.out" || fail "no ok"
grep -q '400 delivered to decoders, 400 verified' "$tmp/1.out" || fail "$(cat "$tmp/1.out")"
# locus-stat --slow: every rank that got rows answered, timed; one node has no rails
slow=$("$B/locus-stat" -i "$inst" --slow) || fail "locus-stat --slow: $slow"
answered=$(awk '/^ranks, slowest/ { on = 1; next } on && /^ +[0-9]+ +[0-9]+ +[0-9]+ / { n++ }
	/^$/ { on = 0 } END { print n + 0 }' <<<"$slow")
[ "$answered" = 4 ] || fail "locus-stat --slow timed $answered ranks' answers, not 4: $slow"
grep -q '^no send times by rail' <<<"$slow" || fail "locus-stat --slow on one node: $slow"
[ "$("$B/locus-stat" -i "$inst" rank_answers | awk '/rank_answers/ { s += $3 } END { print s + 0 }')" -gt 0 ] ||
	fail "no rank_answers counted"
if "$B/locus-stat" -i "$inst" --slow --json > /dev/null 2>&1; then fail "--slow --json accepted"; fi

# 1b. prefix-cached prompts (ROUTE_BLOCKS, a 6-block head per domain named as cached once
#     inserted): every decoder gets exactly the whole prompt's signature, locusd found
#     every named block and counted it
reclaimed
timeout 60 "${LG[@]}" --requests 400 --batches 10 --prefix-blocks 6 > "$tmp/1b.out" 2>&1 ||
	{ cat "$tmp/1b.out"; fail "run with --prefix-blocks"; }
grep -q '400 delivered to decoders, 400 verified' "$tmp/1b.out" || fail "$(cat "$tmp/1b.out")"
named=$(sed -n 's/.*: \([0-9]*\) cached blocks named, \([0-9]*\) found, 0 partial routes$/\1 \2/p' \
	"$tmp/1b.out")
read -r n f <<<"$named"
[ -n "$n" ] && [ "$n" = "$f" ] && [ "$n" -gt 0 ] || fail "cached blocks: $(cat "$tmp/1b.out")"
stat=$("$B/locus-stat" -i "$inst" --prometheus)
for kv in "sigcache_hits_total $n" "sigcache_misses_total 0" "route_blocks_requests_total 400" \
	"route_blocks_partial_total 0"; do
	grep -q "^locus_$kv$" <<<"$stat" || fail "locus-stat --prometheus lacks locus_$kv"
done
echo "test_loadgen: ROUTE_BLOCKS through locusd: $n cached blocks named and found, 400 verified"

# 1c. the exposition of a daemon that has carried traffic passes Prometheus's own linter
#     (base units, histogram series): promtool prints nothing and exits 0
command -v promtool > /dev/null || fail "promtool missing (Debian package prometheus; tools/dev/deps.sh)"
lint=$(promtool check metrics <<<"$stat" 2>&1) || fail "promtool check metrics: $lint"
[ -z "$lint" ] || fail "promtool check metrics: $lint"
grep -q '^locus_route_seconds_count [1-9]' <<<"$stat" || fail "no locus_route_seconds_count"
echo "test_loadgen: locus-stat --prometheus passes promtool check metrics"

# 1d. /locus/info through DPDK's telemetry socket, with locus-stat (Debian ships no
#     dpdk-telemetry.py); an unknown command and a missing instance are refused
info=$("$B/locus-stat" -i "$inst" --telemetry /locus/info) || fail "locus-stat --telemetry /locus/info"
grep -q "^{\"/locus/info\":{\"instance\":\"$inst\",\"node\":0," <<<"$info" || fail "telemetry: $info"
grep -q '"eldr_generation":[1-9]' <<<"$info" || fail "telemetry: no ELDR table in $info"
"$B/locus-stat" -i "$inst" --telemetry /locus/nope > /dev/null 2> "$tmp/tel.err"
[ $? = 1 ] && grep -q 'no telemetry command /locus/nope' "$tmp/tel.err" || fail "unknown command: $(cat "$tmp/tel.err")"
"$B/locus-stat" -i "$inst-absent" --telemetry /locus/info > /dev/null 2>&1
[ $? = 2 ] || fail "telemetry of an absent instance did not exit 2"
echo "test_loadgen: locus-stat --telemetry /locus/info: $info"

# 1e. --host-region: every rank's rows in a memfd sealed against shrinking, registered with
#     locusd as host memory (no RDMA device here: mapped, no MR), every byte checked
reclaimed
timeout 60 "${LG[@]}" --requests 200 --batches 20 --host-region > "$tmp/1e.out" 2>&1 ||
	{ cat "$tmp/1e.out"; fail "run with --host-region"; }
grep -q '^host-memory regions (memfd): 4 of 4 ranks registered, 4 unregistered; locusd mapped 4, dma-buf MR 0, MR on the mapping 0, no MR 4$' \
	"$tmp/1e.out" || fail "host-memory regions: $(cat "$tmp/1e.out")"
grep -q '^loadgen: ok$' "$tmp/1e.out" || fail "$(cat "$tmp/1e.out")"
hr=$("$B/locus-stat" -i "$inst" regions_host | awk '$1 == "regions_host" { print $3 }')
[ "$hr" = 4 ] || fail "regions_host $hr, want 4"
echo "test_loadgen: host-memory regions (sealed memfds): 4 registered, rows from them checked"

# 2. lists that do not fit are refused before anything starts
timeout 10 "${LG[@]}" --decoder-at $a,$a > "$tmp/2.out" 2>&1
[ $? = 2 ] || fail "a short --decoder-at list was not refused"
grep -q 'one instance per decoder / rank (4 / 4)' "$tmp/2.out" || fail "$(cat "$tmp/2.out")"
timeout 10 "${LG[@]}" --rank-at $a,$a,../x,$a > "$tmp/2b.out" 2>&1
[ $? = 2 ] || fail "a bad instance name was not refused"
grep -q "bad instance list entry '../x'" "$tmp/2b.out" || fail "$(cat "$tmp/2b.out")"

# 3. a decoder sent to an instance that does not run: the run fails and says so
reclaimed
timeout 60 "${LG[@]}" --decoder-at $a,$a,$a,nosuch-$$ --requests 50 --batches 2 --seconds 10 \
	> "$tmp/3.out" 2>&1 && fail "a decoder without its instance passed"
grep -q "attach to nosuch-$$" "$tmp/3.out" || fail "$(cat "$tmp/3.out")"

# 3b. a healthy locusd, batches given up after 1 ms: late rows and results keep arriving
#     while ranks dispatch the next batches. Every rank must finish (no credit cycle:
#     a rank waiting for a combine slot while it holds inbox slots deadlocked here), late
#     results are checked byte for byte, nothing is corrupt or answered twice.
reclaimed
timeout 120 "${LG[@]}" --requests 2000 --batches 400 --seconds 60 --allow-errors --batch-ms 1 \
	> "$tmp/3b.out" 2>&1 || { cat "$tmp/3b.out"; fail "give-up after 1 ms on a healthy locusd"; }
grep -q '^loadgen: ok$' "$tmp/3b.out" || fail "$(cat "$tmp/3b.out")"
grep -q 'checks: 0 corrupt, 0 duplicate' "$tmp/3b.out" || fail "$(cat "$tmp/3b.out")"
grep -o '[0-9]* batches given up after 1 ms' "$tmp/3b.out"

# 4. locusd killed under traffic, --allow-errors: ends ok, says what was left unanswered.
#    Batches are given up after 5 s, so only because locusd died.
reclaimed
"${LG[@]}" --requests 200000 --batches 100000 --seconds 20 --allow-errors --batch-ms 5000 \
	> "$tmp/4.out" 2>&1 &
lg=$!
sleep 1
kill -9 $pid
wait $pid 2>/dev/null
t0=$SECONDS
timeout 60 tail --pid=$lg -f /dev/null
wait $lg
rc=$?
[ $rc = 0 ] || { cat "$tmp/4.out"; fail "--allow-errors run exited $rc after the kill"; }
# every process polls: the client API tells it within 100 ms that its locusd is gone
echo "test_loadgen: the run ended $((SECONDS - t0)) s after locusd was killed"
[ $((SECONDS - t0)) -lt 5 ] || fail "the run took $((SECONDS - t0)) s to notice its locusd died"
grep -q 'requests unanswered because their own locusd died' "$tmp/4.out" || fail "$(cat "$tmp/4.out")"
grep -q ' 0 lost' "$tmp/4.out" || fail "lost completions: $(cat "$tmp/4.out")"

# 5. the same without --allow-errors: fails, as soon as the processes learn it
start 2
"${LG[@]}" --requests 200000 --batches 100000 --seconds 5 > "$tmp/5.out" 2>&1 &
lg=$!
sleep 1
kill -9 $pid
wait $pid 2>/dev/null
pid=
t0=$SECONDS
timeout 60 tail --pid=$lg -f /dev/null
wait $lg
rc=$?
[ $rc != 0 ] || fail "a run whose locusd died passed without --allow-errors"
grep -q '^loadgen: FAILED$' "$tmp/5.out" || fail "$(cat "$tmp/5.out")"
grep -q 'our locusd is gone' "$tmp/5.out" || fail "the failure does not say why: $(cat "$tmp/5.out")"
[ $((SECONDS - t0)) -lt 5 ] || fail "the run took $((SECONDS - t0)) s to fail after the kill"
echo "test_loadgen: instance lists, refusals, missing instance, give-up under load, killed" \
	"locusd with and without --allow-errors ok"
