#!/bin/bash
# Run test programs and print one closing line: "N passed, N failed".
# cmocka binaries and pytest runs are counted by their own per-test results;
# any other program (a shell test, the VM harness) counts as one test by exit
# status.
# Each program gets a bound (TEST_TIMEOUT seconds, default 600): nothing hangs.
# A script that needs longer says so in its first lines, "# test-timeout: N".
# A failed program's failure lines (FAIL, cmocka's [  FAILED  ], assertions,
# errors) are printed again after the closing list, last, so that a log cut to
# its tail (a CI summary) still says why. Each program's wall time is printed
# after it ("--- t: 12 s"), and the ten slowest before the closing line.
set -u
passed=0
failed=0
failed_names=()
why=$(mktemp)
times=$(mktemp)
trap 'rm -f "$why" "$times"' EXIT
t_all=$SECONDS
for t in "$@"; do
	echo "=== $t"
	log=$(mktemp)
	timeout_s=${TEST_TIMEOUT:-600}
	own=$(head -n 10 "$t" 2>/dev/null | tr -d '\0' | sed -n 's/^# test-timeout: \([0-9]\+\)$/\1/p' | head -n 1)
	[ -z "${TEST_TIMEOUT:-}" ] && [ -n "$own" ] && timeout_s=$own
	t0=$SECONDS
	timeout --kill-after=10 "$timeout_s" "$t" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	echo "--- $t: $((SECONDS - t0)) s"
	echo "$((SECONDS - t0)) $t" >> "$times"
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]\+\) test(s)\./\1/p' "$log" | awk '{s+=$1} END {print s+0}')
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]\+\) test(s).*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
	runs=$(grep -c '^\[==========\] .* test(s) run\.' "$log")
	# pytest's closing line: "12 passed, 1 skipped in 3.2s" (errors count as failures)
	py=$(grep -E '^=* *[0-9]+ (passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)(, [0-9]+ [a-z]+)* in [0-9.]+s' "$log" | tail -1)
	if [ "$rc" -ne 0 ]; then
		{
			echo "--- why $t failed (its failure lines, the last 25):"
			grep -E 'FAIL|[Ff]ailed|[Ee]rror|[Aa]ssert|[Tt]imed out|Traceback|^E ' "$log" |
				grep -vE '^\[  PASSED|^ok |errors: 0' | tail -n 25
		} >> "$why"
	fi
	rm -f "$log"
	if [ -n "$py" ]; then
		p=$(grep -oE '[0-9]+ passed' <<<"$py" | awk '{s+=$1} END {print s+0}')
		f=$(grep -oE '[0-9]+ (failed|errors?)' <<<"$py" | awk '{s+=$1} END {print s+0}')
		passed=$((passed + p))
		failed=$((failed + f))
		if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
			failed=$((failed + 1))
		fi
	elif [ "$runs" -gt 0 ]; then
		passed=$((passed + p))
		failed=$((failed + f))
		# A crash after cmocka's summary or a non-zero exit without a
		# FAILED line still fails the program.
		if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
			failed=$((failed + 1))
		fi
	elif [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
	if [ "$rc" -ne 0 ]; then
		[ "$rc" -eq 124 ] && echo "*** $t: timed out after ${timeout_s}s"
		failed_names+=("$t (exit $rc)")
	fi
done
echo
echo "slowest (s):"
sort -rn "$times" | head -n 10 | sed 's/^/  /'
echo "all: $((SECONDS - t_all)) s"
echo
cat "$why"
for n in "${failed_names[@]+"${failed_names[@]}"}"; do echo "FAILED: $n"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
