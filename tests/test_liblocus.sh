#!/bin/bash
# liblocus.so as a user gets it: make install into a DESTDIR staging tree,
# the soname and its symlinks, exports limited to shm/liblocus.map (nm -D
# --defined-only lists exactly the map's symbols, nothing else), a small
# client (tests/liblocus_smoke.c) compiled against the staged headers and
# .so through pkg-config alone and run against a live locusd: attach as
# prefiller and decoder, route, the delivered signature byte for byte,
# counters read back, a refused attach.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
tmp=$(mktemp -d)
export LOCUS_SHM_DIR=$tmp/shm LOCUS_STATE_DIR=$tmp/state
mkdir -p "$LOCUS_SHM_DIR" "$LOCUS_STATE_DIR"
inst=lib-t$$
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_liblocus: $*" >&2; exit 1; }
. tests/lib.sh # wait_running

# 1. the staged install
dest=$tmp/dest
make --no-print-directory -s install DESTDIR="$dest" PREFIX=/usr BUILD="$B" >/dev/null ||
	fail "make install"
lib=$dest/usr/lib
real=$(readlink -f "$lib/liblocus.so")
[ "$(readlink "$lib/liblocus.so")" = liblocus.so.0 ] || fail "liblocus.so does not point at liblocus.so.0"
[[ "$(readlink "$lib/liblocus.so.0")" =~ ^liblocus\.so\.0\.[0-9]+\.[0-9]+$ ]] ||
	fail "liblocus.so.0 does not point at liblocus.so.0.MINOR.PATCH"
[ -f "$real" ] || fail "the symlinks lead to no file"
soname=$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = liblocus.so.0 ] || fail "soname is '$soname', not liblocus.so.0"
for h in locus.h locus_client.h locus_eldr.h locus_counters.h locus_dispatch.h locus_wire.h; do
	[ -f "$dest/usr/include/locus/$h" ] || fail "header $h not installed"
done
pc=$lib/pkgconfig/locus.pc
[ -f "$pc" ] || fail "locus.pc not installed"

# 2. exports: exactly the map's global symbols
want=$(sed -n '/^global:/,/^local:/p' shm/liblocus.map | grep -oE '^[[:space:]]*[a-z0-9_]+;' |
	tr -d ' \t;' | sort)
have=$(nm -D --defined-only "$real" | awk '{print $3}' | sed 's/@.*//' | grep -v '^LOCUS_' | sort)
extra=$(comm -13 <(echo "$want") <(echo "$have"))
missing=$(comm -23 <(echo "$want") <(echo "$have"))
[ -z "$extra" ] || fail "exported but not in shm/liblocus.map: $(echo $extra)"
[ -z "$missing" ] || fail "in shm/liblocus.map but not exported: $(echo $missing)"
n=$(echo "$have" | wc -l)
dyn=$(nm -D --defined-only "$real") || fail "nm -D"
grep -v ' A ' <<<"$dyn" | grep -qv '@@LOCUS_0$' && fail "an export without the LOCUS_0 version"
echo "test_liblocus: $n symbols exported, each in shm/liblocus.map (version LOCUS_0)"

# 3. a client built by pkg-config against the staged tree
export PKG_CONFIG_LIBDIR=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest
flags=$(pkg-config --cflags --libs locus) || fail "pkg-config locus"
[ "$(pkg-config --modversion locus)" = "${real##*liblocus.so.}" ] || fail "locus.pc's version"
cc -std=gnu11 -Wall -Wextra -Werror -o "$tmp/smoke" tests/liblocus_smoke.c $flags ||
	fail "compiling against the installed headers: cc ... $flags"
needed=$(readelf -d "$tmp/smoke") || fail "readelf -d"
grep -q 'NEEDED.*\[liblocus.so.0\]' <<<"$needed" || fail "the client does not need liblocus.so.0"

trace=tests/data/calib_sample.jsonl
"$B/bin/locusctl" fit --trace $trace --decoders 4 --seed 1 -o "$tmp/e.tbl" >/dev/null 2>&1 ||
	fail "fit"
cat > "$tmp/a.conf" <<CONF
[locusd]
instance = $inst
eal_args = -l 0-1 --no-huge --no-pci -m 64
idle_sleep_us = 50
CONF
"$B/bin/locusd" -c "$tmp/a.conf" > "$tmp/d.log" 2>&1 &
pid=$!
wait_running "$inst" $pid "$tmp/d.log" || fail "locusd did not come up"
"$B/bin/locusctl" push -i "$inst" "$tmp/e.tbl" >/dev/null || fail "push"
shape=$(sed -n '1s/.*"n_layers":\([0-9]*\),"k":\([0-9]*\),"n_experts":\([0-9]*\).*/\1 \3 \2/p' $trace)
# shellcheck disable=SC2086
LD_LIBRARY_PATH=$lib timeout 30 "$tmp/smoke" "$inst" $shape > "$tmp/smoke.out" 2>&1 ||
	{ cat "$tmp/smoke.out"; fail "the client against locusd"; }
cat "$tmp/smoke.out"
grep -q '^liblocus_smoke: ok$' "$tmp/smoke.out" || fail "no ok"
# it ran the staged copy, not another one
# (ldd's output is taken whole: grep -q closing the pipe early would make
# ldd die of SIGPIPE, and pipefail would fail a correct run)
deps=$(LD_LIBRARY_PATH=$lib ldd "$tmp/smoke") || fail "ldd on the client"
grep -q "liblocus.so.0 => $lib/liblocus.so.0 " <<<"$deps" ||
	fail "the client did not load the staged liblocus.so.0: $deps"

# 4. the Python package as installed, over the staged library (no checkout in sight)
py=$dest/usr/lib/python3/dist-packages
[ -f "$py/locus/_lib.py" ] || fail "the Python package was not installed"
(cd "$tmp" && env -u LOCUS_LIBRARY LD_LIBRARY_PATH=$lib PYTHONPATH=$py PYTHONDONTWRITEBYTECODE=1 \
	/usr/bin/python3 -c "
import locus, sys
assert locus.__file__.startswith('$py/'), locus.__file__
maps = open('/proc/self/maps').read()
assert '$real' in maps, 'the staged liblocus.so.0 is not the one loaded'
m = {x['name']: x for x in locus.stats('$inst')['metrics']}
assert m['route_requests']['value'] >= 1, m['route_requests']
print('test_liblocus: the installed Python package read route_requests =',
      m['route_requests']['value'], 'through the staged library')
") || fail "the installed Python package"
echo "test_liblocus: ok"
