#!/bin/bash
# locusctl killed (SIGKILL) at a random point of a push, 60 times in a row,
# against a running locusd: after each kill the table in force is the old
# one or the new one whole (every table locusd published was adopted,
# none refused, locusd alive), and the next push is adopted. Prints how
# many kills came before locusd had the table and how many after.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}/bin
KILLS=${KILLS:-60}
tmp=$(mktemp -d)
export LOCUS_SHM_DIR=$tmp/shm LOCUS_STATE_DIR=$tmp/state
mkdir -p "$LOCUS_SHM_DIR" "$LOCUS_STATE_DIR"
inst=pk-t$$
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_push_kill: $*" >&2; exit 1; }
ctr() { # ctr NAME: its value (channel 0's for a vector by channel)
	"$B/locus-stat" -i "$inst" --prometheus "$1" |
		awk -v n="$1" '$1 ~ "^locus_" n "(_total)?([{]channel=\"0\"[}])?$" {print $2; exit}'
}

cat > "$tmp/a.conf" <<CONF
[locusd]
instance = $inst
eal_args = -l 0-1 --no-huge --no-pci -m 64
idle_sleep_us = 50
CONF
for k in 4 8; do
	"$B/locusctl" fit --trace tests/data/calib_sample.jsonl --decoders $k --seed 1 \
		-o "$tmp/e$k.tbl" > /dev/null 2>&1 || fail "fit"
done
"$B/locusd" -c "$tmp/a.conf" > "$tmp/d.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
	grep -q "instance $inst running" "$tmp/d.log" && break
	kill -0 $pid 2>/dev/null || { cat "$tmp/d.log"; fail "locusd exited"; }
	sleep 0.05
done
"$B/locusctl" push -i "$inst" "$tmp/e4.tbl" > /dev/null || fail "first push"

before=0 after=0
for i in $(seq "$KILLS"); do
	pushed=$(ctr table_pushes)
	t=$([ $((i % 2)) = 0 ] && echo e4 || echo e8)
	"$B/locusctl" push -i "$inst" "$tmp/$t.tbl" > /dev/null 2>&1 &
	p=$!
	sleep "0.0$(printf "%02d" $((RANDOM % 16)))"
	kill -9 $p 2>/dev/null
	wait $p 2>/dev/null
	kill -0 $pid 2>/dev/null || fail "locusd died at kill $i"
	# what locusd took it finishes alone: wait until every published table is in force
	for _ in $(seq 200); do
		n=$(ctr table_pushes)
		[ "$(ctr table_generation)" = "$n" ] && break
		sleep 0.01
	done
	n=$(ctr table_pushes)
	g=$(ctr table_generation)
	[ "$g" = "$n" ] || fail "kill $i: generation $g in force, $n published"
	case $((n - pushed)) in
	0) before=$((before + 1)) ;;
	1) after=$((after + 1)) ;;
	*) fail "kill $i: $((n - pushed)) tables published by one push" ;;
	esac
	[ "$(ctr table_rejected)" = 0 ] || fail "kill $i: a table was refused"
done
out=$("$B/locusctl" push -i "$inst" "$tmp/e4.tbl" 2>&1) || fail "the push after the kills: $out"
case "$out" in *"generation $((g + 1))"*"1 live, 1 adopted, 0 refused"*) ;;
	*) fail "the push after the kills: $out" ;; esac
kill -TERM $pid
wait $pid
pid=
echo "test_push_kill: $KILLS kills of locusctl push ($before before locusd had the table," \
	"$after after), the old or the new table in force each time, the next push adopted"
