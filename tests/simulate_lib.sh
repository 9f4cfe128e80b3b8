# Sourced by tests/test_simulate.sh and tests/test_simulate_moe.sh after
# `set -euo pipefail` and a cd to the repository, with SIM set to the
# command under test ("simulate" or "simulate --moe"): the build's bin
# directory ($B), a scratch directory removed at exit ($tmp), the sample
# trace ($trace), fail() counting failures and finish NAME reporting them.
B=${BUILD:-build}/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trace=tests/data/calib_sample.jsonl
fails=0

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# expect STATUS PATTERN ARGS...: locusctl $SIM ARGS exits STATUS, stderr matches PATTERN
expect() {
	local want=$1 pat=$2 rc=0
	shift 2
	# shellcheck disable=SC2086 # SIM is the command and its fixed flags, split on purpose
	"$B/locusctl" $SIM "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
	if [ "$rc" -ne "$want" ] || ! grep -Eq -- "$pat" "$tmp/err"; then
		fail "$SIM $* -> exit $rc (want $want), stderr: $(cat "$tmp/err")"
	fi
}

# finish NAME: exit 1 after listing the failures, else say NAME: ok
finish() {
	if [ "$fails" -ne 0 ]; then
		echo "$1: $fails failures"
		exit 1
	fi
	echo "$1: ok"
}
