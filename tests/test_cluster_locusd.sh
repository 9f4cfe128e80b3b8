#!/bin/bash
# locusd's membership through a real etcd on this host (one node per
# instance, no RDMA needed): its record published under its lease and read
# back; a second locusd with the same node id refused at start, naming the
# holder; etcd killed under a running locusd (it keeps running and serving,
# says etcd is unreachable, and is a member again once etcd is back); a
# locusd killed -9 and started again takes its record back at once (its
# lease file); SIGTERM removes the record at once; the same over TLS with a
# client certificate, and refused without the CA. The cluster's tables:
# locusctl push --cluster stores one, the node adopts it and reports, push
# prints the answer; a table the node refuses is reported refused; a node
# that comes back adopts the cluster's table by itself; show --cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}/bin
tmp=$(mktemp -d)
export LOCUS_SHM_DIR=$tmp/shm LOCUS_STATE_DIR=$tmp/state
mkdir -p "$LOCUS_SHM_DIR"
pids=()
ETCD_PID=
cleanup() {
	for p in "${pids[@]+"${pids[@]}"}"; do kill -9 "$p" 2>/dev/null || true; done
	[ -n "$ETCD_PID" ] && kill -9 "$ETCD_PID" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_cluster_locusd: $*" >&2; exit 1; }
. tests/lib.sh # wait_running, etcd_start, etcdctl_t

# conf INSTANCE [tls]: one node (id 0) of cluster 42, through etcd
conf() {
	local f=$tmp/$1.conf
	cat > "$f" <<CONF
[locusd]
instance = $1
eal_args = -l 0 --no-huge --no-pci -m 64
idle_sleep_max_us = 100
client_slots = 4
stage_size = 65536
table_slot_size = 65536
[cluster]
id = 42
nodes = 1
node.0 = 127.0.0.1:7471
etcd = $ETCD_URL
etcd_lease_s = 2
CONF
	if [ -n "${2:-}" ]; then
		printf 'etcd_cacert = %s\netcd_cert = %s\netcd_key = %s\n' "$ETCD_CA" "$ETCD_CERT" \
			"$ETCD_KEY" >> "$f"
	fi
	echo "$f"
}

# stat INSTANCE NAME: one counter's value
stat() { "$B/locus-stat" -i "$1" "$2" | awk -v n="$2" '$1 == n { print $3 }'; }

# until_stat INSTANCE NAME VALUE SECONDS
until_stat() {
	local i
	for ((i = 0; i < $4 * 20; i++)); do
		[ "$(stat "$1" "$2" 2>/dev/null)" = "$3" ] && return 0
		sleep 0.05
	done
	fail "$1: $2 is $(stat "$1" "$2"), not $3, after $4 s"
}

record() { etcdctl_t get --print-value-only /locus/42/nodes/0; }

etcd_start "$tmp/etcd"

# 1. a member: the record is there, with this node's address
"$B/locusd" -c "$(conf ca)" > "$tmp/a.log" 2>&1 &
pa=$!
pids+=($pa)
wait_running ca $pa "$tmp/a.log" || fail "locusd ca did not come up"
until_stat ca cluster_state 1 5
[ "$(stat ca cluster_members)" = 1 ] || fail "cluster_members $(stat ca cluster_members)"
rec=$(record)
case "$rec" in *'"node":0'*'"cluster":"42"'*'"rails":["127.0.0.1:7471"]'*'"state":"up"'*) ;;
	*) fail "the record: $rec" ;; esac
lease=$(etcdctl_t get -w json /locus/42/nodes/0 | grep -o '"lease":[0-9]*' | cut -d: -f2)
[ -n "$lease" ] && [ "$lease" != 0 ] || fail "the record is not held by a lease"

# 1b. the cluster's tables: stored once, adopted, answered; a refusal answered too
CTL=("$B/locusctl")
CL=(--cluster --etcd "$ETCD_URL" --cluster-id 42 --timeout-ms 5000)
"$B/locusctl" fit --trace tests/data/calib_sample.jsonl --decoders 2 --tune off \
	-o "$tmp/c1.tbl" > /dev/null 2>&1 || fail "fit"
out=$("${CTL[@]}" push "${CL[@]}" "$tmp/c1.tbl") || fail "push --cluster: $out"
case "$out" in *"stored eldr table"*"generation 1"*"node 0: adopted generation 1 (its channel 0"*"1 of 1 node(s) adopted it"*) ;;
	*) fail "push --cluster said: $out" ;; esac
gen=$("$B/locus-stat" -i ca 'table_generation' | awk '/channel=0/ { print $3 }')
[ "$gen" = 1 ] || fail "channel 0 is at generation $gen after the cluster push"
[ "$(stat ca cluster_tables_adopted)" = 1 ] || fail "cluster_tables_adopted $(stat ca cluster_tables_adopted)"
# a GRACE table for 2 nodes x 2 GPUs: this node (1 x 4) refuses it, and says so in etcd
"$B/locusctl" fit --grace --trace tests/data/calib_sample.jsonl --nodes 2 --gpus 2 \
	--capacity 20 -o "$tmp/g22.tbl" > /dev/null 2>&1 || fail "fit --grace"
if out=$("${CTL[@]}" push "${CL[@]}" "$tmp/g22.tbl"); then
	fail "a refused cluster push exited 0: $out"
fi
case "$out" in *"node 0: refused generation 1:"*) ;; *) fail "refused push said: $out" ;; esac
[ "$(stat ca cluster_tables_refused)" = 1 ] || fail "cluster_tables_refused $(stat ca cluster_tables_refused)"
# a second ELDR table, then the cluster rolled back to the first: stored again, adopted
"$B/locusctl" fit --trace tests/data/calib_sample.jsonl --decoders 2 --tune off --seed 7 \
	-o "$tmp/c2.tbl" > /dev/null 2>&1 || fail "fit c2"
"${CTL[@]}" push "${CL[@]}" "$tmp/c2.tbl" > /dev/null || fail "push --cluster c2"
if out=$("${CTL[@]}" diff "${CL[@]}" "$tmp/c1.tbl"); then fail "diff --cluster saw no change"; fi
case "$out" in *"--- the cluster's eldr generation 2"*) ;; *) fail "diff --cluster said: $out" ;; esac
out=$("${CTL[@]}" rollback "${CL[@]}" --kind eldr) || fail "rollback --cluster: $out"
case "$out" in *"back to generation 1"*"node 0: adopted generation 3"*) ;;
	*) fail "rollback --cluster said: $out" ;; esac
out=$("${CTL[@]}" diff "${CL[@]}" "$tmp/c1.tbl") || fail "diff --cluster after the rollback: $out"
case "$out" in *"tables are equal"*) ;; *) fail "diff --cluster after the rollback: $out" ;; esac
out=$("${CTL[@]}" show "${CL[@]}") || fail "show --cluster: $out"
case "$out" in *"eldr: generation 3"*"node 0: generation 3 in force"*"grace: generation 1"*"node 0: refused generation 1"*) ;;
	*) fail "show --cluster said: $out" ;; esac

# 2. a second locusd with node id 0 (another instance): refused at start, naming the holder
if "$B/locusd" -c "$(conf cb)" > "$tmp/b.log" 2>&1; then
	fail "a second node 0 was accepted: $(cat "$tmp/b.log")"
fi
grep -q "node id 0 is in use" "$tmp/b.log" || fail "refusal: $(cat "$tmp/b.log")"
grep -q "by host $(hostname)" "$tmp/b.log" || fail "the refusal does not name the holder"

# 3. etcd killed: locusd keeps running and serving; back with etcd
etcd_stop
until_stat ca cluster_state 3 10
sleep 3 # past the lease: nothing of locusd's own service depends on it
kill -0 $pa || fail "locusd stopped with etcd"
"$B/locusctl" fit --trace tests/data/calib_sample.jsonl --decoders 2 --tune off -o "$tmp/e.tbl" \
	> /dev/null 2>&1
"$B/locusctl" push -i ca "$tmp/e.tbl" > /dev/null || fail "a push while etcd is down"
[ "$(stat ca cluster_etcd_errors)" -gt 0 ] || fail "no etcd error counted"
etcd_restart "$tmp/etcd"
until_stat ca cluster_state 1 10
case "$(record)" in *'"node":0'*) ;; *) fail "no record after etcd came back" ;; esac
grep -q 'etcd unreachable' "$tmp/a.log" || fail "the log does not say etcd was unreachable"

# 4. killed -9 and started again: a member at once (its lease file), not refused
kill -9 $pa
wait $pa 2>/dev/null || true
t0=$(date +%s%N)
"$B/locusd" -c "$tmp/ca.conf" > "$tmp/a2.log" 2>&1 &
pa=$!
pids+=($pa)
wait_running ca $pa "$tmp/a2.log" || fail "locusd ca did not come back"
until_stat ca cluster_state 1 5
ms=$((($(date +%s%N) - t0) / 1000000))
grep -q 'in use' "$tmp/a2.log" && fail "the restarted node was refused: $(cat "$tmp/a2.log")"
# it took the cluster's ELDR table by itself
for _ in $(seq 100); do
	gen=$("$B/locus-stat" -i ca 'table_generation' | awk '/channel=0/ { print $3 }')
	[ "$gen" = 1 ] && break
	sleep 0.05
done
[ "$gen" = 1 ] || fail "the restarted node did not adopt the cluster's table (channel 0 at $gen)"
grep -q 'cluster: eldr table generation 3 adopted' "$tmp/a2.log" || fail "no adoption logged"

# a push while etcd is away fails with a sentence, and nothing waits forever
etcd_stop
if out=$("${CTL[@]}" push "${CL[@]}" "$tmp/c1.tbl" 2>&1); then
	fail "push --cluster without etcd exited 0"
fi
case "$out" in *"locusctl: etcd"*) ;; *) fail "push --cluster without etcd said: $out" ;; esac
etcd_restart "$tmp/etcd"
until_stat ca cluster_state 1 10

# 5. SIGTERM: the record goes with the revoked lease, at once
kill -TERM $pa
wait $pa || fail "locusd ca exited non-zero"
[ -z "$(record)" ] || fail "the record outlived a clean stop: $(record)"
grep -q 'left (lease revoked)' "$tmp/a2.log" || fail "no leave in the log"
etcd_stop

# 6. TLS with a client certificate; without the CA locusd says why it cannot join
etcd_start "$tmp/etcd-tls" tls
"$B/locusd" -c "$(conf ct tls)" > "$tmp/t.log" 2>&1 &
pt=$!
pids+=($pt)
wait_running ct $pt "$tmp/t.log" || fail "locusd ct did not come up"
until_stat ct cluster_state 1 5
case "$(record)" in *'"node":0'*) ;; *) fail "no record over TLS" ;; esac
kill -TERM $pt
wait $pt || true
sed -i '/^etcd_cacert/d' "$tmp/ct.conf"
"$B/locusd" -c "$tmp/ct.conf" > "$tmp/t2.log" 2>&1 &
pt=$!
pids+=($pt)
wait_running ct $pt "$tmp/t2.log" || fail "locusd ct (no CA) did not come up"
until_stat ct cluster_state 3 10
grep -q 'etcd unreachable.*SSL' "$tmp/t2.log" || fail "no reason for the TLS failure: $(cat "$tmp/t2.log")"
kill -TERM $pt
wait $pt || true
etcd_stop
echo "test_cluster_locusd: record under a lease, cluster tables adopted and refused, duplicate id refused, etcd down and back, restart in ${ms} ms with the cluster table, clean leave, TLS ok"
