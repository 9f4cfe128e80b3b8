#!/bin/bash
# make bench: run every benchmark program and script given, one at a time,
# and write what they print to a dated results file with what is needed to
# read it: the commit (and whether the tree was clean), the CPU, its cores,
# the load average before and after each run, and the exact command.
#   tools/bench/run.sh PROGRAM|SCRIPT ...
# Environment: BUILD (default build); BENCH_RESULTS (default
# tools/bench/results/<UTC date>.txt; a second run that day gets -2, -3 ...).
# A benchmark that fails is reported in the file and makes the run fail, after
# the others ran.
set -uo pipefail
cd "$(dirname "$0")/../.."
export BUILD=${BUILD:-build}

day=$(date -u +%F)
out=${BENCH_RESULTS:-}
if [ -z "$out" ]; then
	mkdir -p tools/bench/results
	out=tools/bench/results/$day.txt
	n=2
	while [ -e "$out" ]; do
		out=tools/bench/results/$day-$n.txt
		n=$((n + 1))
	done
fi

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -qv '^$' && echo ", uncommitted changes" || true)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
load() { cut -d' ' -f1-3 /proc/loadavg; }

{
	echo "# locus benchmarks, $(date -u '+%F %T') UTC"
	echo "commit:  $commit$dirty"
	echo "cpu:     ${cpu:-unknown}"
	echo "cores:   $(nproc) online ($(getconf _NPROCESSORS_CONF) configured)"
	echo "kernel:  $(uname -r)"
	echo "load:    $(load) (1, 5, 15 min) at the start"
	echo "Each section: the exact command, the load average before and after, what it printed."
} | tee "$out"

failed=()
for b in "$@"; do
	{
		echo
		echo "== $b"
		echo "command: BUILD=$BUILD $b"
		echo "load before: $(load)"
	} | tee -a "$out"
	t0=$SECONDS
	"$b" 2>&1 | tee -a "$out"
	rc=${PIPESTATUS[0]}
	{
		echo "load after: $(load); $((SECONDS - t0)) s; exit $rc"
	} | tee -a "$out"
	[ "$rc" -eq 0 ] || failed+=("$b (exit $rc)")
done
{
	echo
	if [ ${#failed[@]} -eq 0 ]; then
		echo "all $# benchmarks ran"
	else
		printf 'FAILED: %s\n' "${failed[@]}"
	fi
} | tee -a "$out"
echo "results: $out"
[ ${#failed[@]} -eq 0 ]
