#!/bin/bash
# Run libFuzzer targets one at a time and print, per target, executions,
# exec/s and libFuzzer's final cov/ft and corpus size.
#   tests/fuzz/run.sh [TARGET...]      (default: every built target)
# Environment: FUZZ_SECONDS (60) per target; FUZZ_BUILD (build-fuzz);
# FUZZ_WORK (FUZZ_BUILD/corpus): where each target's grown corpus lives,
# never checked in; FUZZ_LOGS (FUZZ_BUILD/logs); FUZZ_NICE (10). Each run
# reads the checked-in seeds (tests/fuzz/corpus/T) and regression inputs
# (tests/fuzz/regress/T) first: one that crashes fails the run. Crash
# inputs go to FUZZ_BUILD/crashes/.
# Exit status: 0 when no target crashed.
set -u
cd "$(dirname "$0")/../.."
B=${FUZZ_BUILD:-build-fuzz}
S=${FUZZ_SECONDS:-60}
W=${FUZZ_WORK:-$B/corpus}
NICE=${FUZZ_NICE:-10}
LOGS=${FUZZ_LOGS:-$B/logs}
# a small quarantine: the engine targets allocate per input and would
# otherwise spend their time faulting in fresh pages
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# inputs larger than this are not generated (text and tables need room)
max_len() {
	case $1 in
	trace | eplb | counters) echo 16384 ;;
	segment) echo 32768 ;;
	eldr_table | grace_table | tblfile | peer_msg) echo 8192 ;;
	graceset) echo 16384 ;;
	*) echo 4096 ;;
	esac
}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	for f in "$B"/tests/fuzz/fuzz_*; do
		[ -x "$f" ] && targets+=("${f##*/fuzz_}")
	done
fi
mkdir -p "$B/crashes" "$LOGS"
failed=0
printf '%-14s %10s %8s %7s %7s %8s  %s\n' target execs exec/s cov ft corpus result
for t in "${targets[@]}"; do
	bin=$B/tests/fuzz/fuzz_$t
	log=$LOGS/$t.log
	dirs=("$W/$t")
	mkdir -p "$W/$t"
	[ -d "tests/fuzz/corpus/$t" ] && dirs+=("tests/fuzz/corpus/$t")
	[ -d "tests/fuzz/regress/$t" ] && dirs+=("tests/fuzz/regress/$t")
	dict=()
	[ -f "tests/fuzz/dict/$t.dict" ] && dict=(-dict="tests/fuzz/dict/$t.dict")
	nice -n "$NICE" "$bin" -max_total_time="$S" -print_final_stats=1 -timeout=20 \
		-rss_limit_mb=2048 -max_len="$(max_len "$t")" "${dict[@]}" \
		-artifact_prefix="$B/crashes/$t-" "${dirs[@]}" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
	cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
	ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
	corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
	if [ "$rc" -eq 0 ]; then
		res=ok
	else
		res="CRASH (exit $rc, log $log)"
		failed=1
	fi
	printf '%-14s %10s %8s %7s %7s %8s  %s\n' "$t" "${execs:-?}" "${eps:-?}" "${cov:-?}" \
		"${ft:-?}" "${corp:-?}" "$res"
	if [ "$rc" -ne 0 ]; then
		grep -E 'fuzz contract|ERROR: |runtime error|SUMMARY|Test unit written' "$log" |
			head -8 | sed 's/^/    /'
	fi
done
exit $failed
