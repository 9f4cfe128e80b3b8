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
. tests/lib.sh # wait_running
# "published in-force rejected": channel 0's counters, read at one instant
state() {
	"$B/locus-stat" -i "$inst" --prometheus 'table_*' | awk '
		$1 == "locus_table_pushes_total" { p = $2 }
		$1 == "locus_table_generation{channel=\"0\"}" { g = $2 }
		$1 == "locus_table_rejected_total{channel=\"0\"}" { r = $2 }
		END { print p, g, r }'
}
# Wait until every table locusd published is in force and that stayed so for $1 looks
# 20 ms apart: a killed locusctl's request may still sit in locusd's socket for a pass.
settled() {
	local last= same=0 cur
	for _ in $(seq $(( $1 + 300 ))); do
		cur=$(state)
		set -- $cur
		if [ "$1" = "$2" ] && [ "$cur" = "$last" ]; then
			same=$((same + 1))
			[ $same -ge "$1" ] && { echo "$cur"; return 0; }
		else
			same=0
		fi
		last=$cur
		sleep 0.02
	done
	echo "$cur"
	return 1
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
wait_running "$inst" $pid "$tmp/d.log" || fail "locusd did not come up"
"$B/locusctl" push -i "$inst" "$tmp/e4.tbl" > /dev/null || fail "first push"

set -- $(settled 15) || fail "the first push did not settle"
first=$1
for i in $(seq "$KILLS"); do
	t=$([ $((i % 2)) = 0 ] && echo e4 || echo e8)
	"$B/locusctl" push -i "$inst" "$tmp/$t.tbl" > /dev/null 2>&1 &
	p=$!
	sleep "0.0$(printf "%02d" $((RANDOM % 16)))"
	kill -9 $p 2>/dev/null
	wait $p 2>/dev/null
	kill -0 $pid 2>/dev/null || fail "locusd died at kill $i"
	# what locusd took it finishes alone; nothing half: in force = published, none refused
	st=$(settled 15) || fail "kill $i: published / in force / refused: $st"
	set -- $st
	[ "$3" = 0 ] || fail "kill $i: a table was refused ($st)"
	[ "$1" -le $((first + i)) ] || fail "kill $i: more tables published than pushes ($st)"
done
# before the last push: long enough that no request of a killed one is left in flight
st=$(settled 75) || fail "published / in force / refused: $st"
set -- $st
g=$2
reached=$(( $1 - first ))
out=$("$B/locusctl" push -i "$inst" "$tmp/e4.tbl" 2>&1) || fail "the push after the kills: $out"
case "$out" in *"generation $((g + 1))"*"1 live, 1 adopted, 0 refused"*) ;;
	*) fail "the push after the kills: $out" ;; esac
kill -TERM $pid
wait $pid
pid=
echo "test_push_kill: $KILLS kills of locusctl push ($((KILLS - reached)) before locusd had the" \
	"table, $reached after), the old or the new table in force each time, the next push adopted"
