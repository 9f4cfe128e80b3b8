# Sourced INSIDE the qemu guest by guest-locusd.sh and guest-cluster.sh, after
# ROOT is set and the working directory is the repository: what both need.
#   say / fail          a line with the guest's clock; a failure (FAILED=1)
#   W                   a private work folder: segments, sockets, history, logs
#   PID[...]            processes killed -9 when the script exits
#   mksecret FILE       a cluster secret: 64 hex characters, mode 0600
#   wait_log FILE PATTERN COUNT SECONDS
T0=$SECONDS
say() { printf '[guest %4ds] %s\n' $((SECONDS - T0)) "$*"; }
fail() { say "FAIL: $*"; FAILED=1; }
FAILED=0

guest_work() { # prefix: make W and the locus folders in it
	W=$(mktemp -d "/tmp/$1.XXXXXX")
	export LOCUS_SHM_DIR=$W/shm LOCUS_STATE_DIR=$W/state
	mkdir -p "$LOCUS_SHM_DIR" "$LOCUS_STATE_DIR"
}

declare -A PID
cleanup() {
	for n in "${!PID[@]}"; do
		[ -n "${PID[$n]}" ] && kill -9 "${PID[$n]}" 2>/dev/null
	done
}
trap cleanup EXIT

# secret: 64 hex characters, mode 0600 (locusd refuses a world-readable one)
mksecret() { # file
	(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$1")
}

# wait_log FILE PATTERN COUNT SECONDS: until PATTERN occurs COUNT times in FILE
wait_log() {
	local end=$((SECONDS + $4))
	while [ $SECONDS -lt $end ]; do
		[ "$(grep -c -- "$2" "$1" 2>/dev/null)" -ge "$3" ] && return 0
		sleep 0.2
	done
	return 1
}
