#!/bin/bash
# Layering: shm/ (the segment, the table channels, the table formats) builds
# on shm/ headers alone, and the control plane (control/) on shm/ and
# control/ headers, plus the two pure-C modules of dataplane/ that simulate
# and the ELDR replay run as the data plane does (the router and the
# planner: no EAL, verbs or segment). Neither includes any other header of
# dataplane/, verbs/ or tools/ (nor shm/ one of control/), by name or by a
# relative path. The build enforces the same with narrowed include paths
# (shm/shm.mk, control/control.mk); this check also catches
# "../dataplane/x.h" and names every offending line at once. Prints the
# files and includes checked.
set -uo pipefail
cd "$(dirname "$0")/.."

fail=0
n_files=0
n_incl=0

# The data plane's pure modules the control plane may include.
CONTROL_MAY_USE="locus_eldr_router.h locus_grace_plan.h"

# check_dir DIR ALLOWED...: every #include of a DIR/*.[ch] that names a
# header of this repository must resolve inside one of the ALLOWED dirs
# (or, for control/, be one of CONTROL_MAY_USE).
check_dir() {
	local dir=$1
	shift
	local allowed=("$@")
	local f line name base found d

	for f in "$dir"/*.[ch]; do
		n_files=$((n_files + 1))
		while IFS= read -r line; do
			n_incl=$((n_incl + 1))
			name=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/' \
				<<<"${line#*:}")
			base=${name##*/}
			found=
			for d in "${allowed[@]}"; do
				if [ "$name" = "$base" ] && [ -f "$d/$base" ]; then
					found=$d
					break
				fi
			done
			[ -n "$found" ] && continue
			if [ "$dir" = control ] && [ "$name" = "$base" ] &&
				[[ " $CONTROL_MAY_USE " == *" $base "* ]] && [ -f "dataplane/$base" ]; then
				continue
			fi
			# Not an allowed module's header: a repository header elsewhere
			# (by name or relative path) is a layering break.
			if [ "$name" != "$base" ] && [ -f "$(dirname "$f")/$name" ]; then
				echo "FAIL: $f:${line%%:*}: includes $name (outside ${allowed[*]})"
				fail=1
				continue
			fi
			for d in dataplane verbs control shm tools/*; do
				if [ -f "$d/$base" ]; then
					echo "FAIL: $f:${line%%:*}: includes $d/$base (outside ${allowed[*]})"
					fail=1
					break
				fi
			done
		done < <(grep -nE '^[[:space:]]*#[[:space:]]*include' "$f")
	done
}

check_dir shm shm
check_dir control control shm

echo "layering: $n_files files, $n_incl includes checked (shm/ -> shm/; control/ -> control/, shm/, dataplane/{${CONTROL_MAY_USE// /,}})"
if [ "$fail" -ne 0 ]; then
	echo "layering: FAILED"
	exit 1
fi
echo "layering: ok"
