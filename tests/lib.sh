# Sourced by the shell tests (bash): helpers each of them would write again.

# wait_running INSTANCE PID LOG [COUNT [SECONDS]]: until LOG says "instance INSTANCE
# running" COUNT times (default 1: a restart appending to the same log waits for the
# next one), at most SECONDS (default 10). 0; or 1, with the log printed on stderr,
# when PID exits first or the time runs out.
wait_running() {
	local inst=$1 pid=$2 log=$3 count=${4:-1} secs=${5:-10} i n

	for ((i = 0; i < secs * 20; i++)); do
		n=$(grep -c "instance $inst running" "$log" 2>/dev/null)
		[ "${n:-0}" -ge "$count" ] && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			{ echo "locusd ($inst) exited before running:"; cat "$log"; } >&2
			return 1
		fi
		sleep 0.05
	done
	{ echo "locusd ($inst) not running within $secs s:"; cat "$log"; } >&2
	return 1
}
