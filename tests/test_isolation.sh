#!/bin/bash
# Who may do what to a running locusd, with the real binaries and the real
# file modes. Run as root (which file modes do not bind), so every party but
# locusd runs under setpriv as an unused uid: a client (service group only)
# and a control-plane user (service and control groups). Numeric ids: no
# /etc/group entries needed.
#   - the segment is 0640 and the sockets 0660, in the service group;
#   - the client's `locusctl push` is refused with a sentence, exit 1, and
#     counted (table_pushes_refused{reason="0"}, read by the client itself
#     with locus-stat), and logged by locusd with its uid;
#   - the client cannot open the segment for writing, reads it with
#     locus-stat (table, JSON, Prometheus);
#   - the control-plane user pushes both tables, adopted;
#   - the client runs real traffic (locus-loadgen: attach, route, dispatch,
#     combine, every byte checked).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}/bin
[ "$(id -u)" = 0 ] || { echo "test_isolation.sh: needs root to drop to test users: skipped"; exit 0; }
G_LOCUS=64210 G_CTL=64211 U_CLIENT=64301 U_CTL=64302
tmp=$(mktemp -d)
chmod 0755 "$tmp"
export LOCUS_SHM_DIR=$tmp/shm LOCUS_STATE_DIR=$tmp/state
mkdir -m 0755 "$LOCUS_SHM_DIR" "$tmp/bin"
mkdir -m 1777 "$LOCUS_STATE_DIR"
inst=iso-t$$
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_isolation.sh: $*" >&2; exit 1; }
. tests/lib.sh # wait_running
# the build tree may sit where the test users cannot reach: their copies
cp "$B/locusctl" "$B/locus-stat" "$B/locus-loadgen" "$tmp/bin/"
cp tests/data/calib_sample.jsonl "$tmp/trace.jsonl"
chmod 0644 "$tmp/trace.jsonl"
as_client() { setpriv --reuid=$U_CLIENT --regid=$G_LOCUS --groups=$G_LOCUS "$@"; }
as_ctl() { setpriv --reuid=$U_CTL --regid=$G_LOCUS --groups=$G_LOCUS,$G_CTL "$@"; }

cat > "$tmp/a.conf" <<CONF
[locusd]
instance = $inst
eal_args = -l 0-1 --no-huge --no-pci -m 64
idle_sleep_us = 50
client_slots = 16
client_inbox_slots = 256
ctl_group = $G_CTL
CONF
"$B/locusctl" fit --trace "$tmp/trace.jsonl" --decoders 4 --seed 1 -o "$tmp/e.tbl" > /dev/null 2>&1 ||
	fail "fit eldr"
"$B/locusctl" fit --grace --trace "$tmp/trace.jsonl" --nodes 1 --gpus 4 --capacity 20 \
	--replica-budget 4 -o "$tmp/g.tbl" > /dev/null 2>&1 || fail "fit grace"
chmod 0644 "$tmp/e.tbl" "$tmp/g.tbl"
# root with the service group, as systemd's User=/Group= would give it its group
setpriv --regid=$G_LOCUS --clear-groups "$B/locusd" -c "$tmp/a.conf" > "$tmp/d.log" 2>&1 &
pid=$!
wait_running "$inst" $pid "$tmp/d.log" || fail "locusd did not come up"
seg=$LOCUS_SHM_DIR/locus.$inst

# 1. modes and groups
[ "$(stat -c '%a %g' "$seg")" = "640 $G_LOCUS" ] || fail "segment: $(stat -c '%a %g' "$seg")"
for s in ctl reg; do
	[ "$(stat -c '%a %g' "$seg.$s")" = "660 $G_LOCUS" ] ||
		fail "$s socket: $(stat -c '%a %g' "$seg.$s")"
done

# 2. a client's push: refused, said, counted (the client reads the count), logged
out=$(as_client "$tmp/bin/locusctl" push -i "$inst" "$tmp/e.tbl" 2>&1)
rc=$?
[ $rc = 1 ] || fail "a client's push exited $rc: $out"
case "$out" in *"uid $U_CLIENT is not in the control group (gid $G_CTL, ctl_group)"*) ;;
	*) fail "a client's push said: $out" ;; esac
stat_out=$(as_client "$tmp/bin/locus-stat" -i "$inst" 'table_push*') || fail "locus-stat as a client"
grep -Eq '^table_pushes_refused\{reason=0\} +counter +1$' <<<"$stat_out" ||
	fail "refusal not counted: $stat_out"
grep -Eq '^table_pushes +counter +0$' <<<"$stat_out" || fail "$stat_out"
grep -q "table push refused: pid [0-9]* uid $U_CLIENT gid $G_LOCUS" "$tmp/d.log" ||
	fail "refusal not logged: $(grep push "$tmp/d.log")"

# 3. the segment is not the client's to write; reading it works in every format
as_client sh -c "exec 3<>'$seg'" 2>/dev/null && fail "a client opened the segment read-write"
as_client sh -c "exec 3<'$seg'" || fail "a client cannot read the segment"
as_client "$tmp/bin/locus-stat" -i "$inst" --json > "$tmp/s.json" || fail "locus-stat --json"
grep -q '"instance": *"'"$inst"'"' "$tmp/s.json" || fail "json: $(head -c 300 "$tmp/s.json")"
# (the output whole first: grep -q leaving early would make locus-stat's exit a SIGPIPE)
prom=$(as_client "$tmp/bin/locus-stat" -i "$inst" --prometheus) || fail "locus-stat --prometheus"
# (and fed to grep whole: under pipefail an echo that grep -q left early dies of SIGPIPE)
grep -q '^locus_table_pushes_refused_total{reason="0"} 1$' <<<"$prom" ||
	fail "locus-stat --prometheus: $(echo "$prom" | grep pushes)"

# 4. the control plane pushes
for t in e g; do
	out=$(as_ctl "$tmp/bin/locusctl" push -i "$inst" "$tmp/$t.tbl" 2>&1) || fail "ctl push: $out"
	case "$out" in *"1 live, 1 adopted, 0 refused"*) ;; *) fail "ctl push: $out" ;; esac
done
grep -q "table push from pid [0-9]* uid $U_CTL: channel 1" "$tmp/d.log" || fail "push not logged"

# 5. the client's real traffic
as_client timeout 120 "$tmp/bin/locus-loadgen" -i "$inst" --trace "$tmp/trace.jsonl" --decoders 4 \
	--ranks 4 --requests 400 --batches 10 > "$tmp/lg.out" 2>&1 ||
	{ cat "$tmp/lg.out"; fail "loadgen as a client"; }
grep -q '^loadgen: ok$' "$tmp/lg.out" || fail "$(cat "$tmp/lg.out")"
grep -q '400 delivered to decoders, 400 verified' "$tmp/lg.out" || fail "$(cat "$tmp/lg.out")"
grep -q 'checks: 0 corrupt, 0 duplicate, 0 errors' "$tmp/lg.out" || fail "$(cat "$tmp/lg.out")"

kill -TERM $pid
wait $pid
pid=
echo "test_isolation.sh: modes, a client's push refused/counted/logged, counters read-only," \
	"control-plane pushes, client traffic as another user ok"
