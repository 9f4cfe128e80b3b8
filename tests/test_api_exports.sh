#!/bin/bash
# The installed API is what liblocus.so exports. Checked with the compiler:
#   1. every header of LIBLOCUS_HEADERS (read from shm/liblocus.mk through
#      make, so the list is the one `make install` uses) compiles alone as
#      <locus/x.h> from a copy of the installed tree, -std=c11 -Wall -Wextra
#      -Werror: it includes nothing that is not installed;
#   2. every function those headers declare without defining it (gcc
#      -aux-info) is a global of shm/liblocus.map;
#   3. every static inline helper of those headers calls only exported
#      functions (the helpers are emitted with -fkeep-inline-functions; the
#      object's undefined locus_* symbols must be in the map);
#   4. every name of the map is declared in an installed header and, when
#      $BUILD/lib/liblocus.so (BUILD default build) exists, defined by it.
# Needs only cc and make; step 4's second half needs the built library.
# C++ is not checked: the headers use C11's _Static_assert and have no
# extern "C" block.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}
CC=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
problem() { echo "test_api_exports: $*" >&2; bad=1; }

# shellcheck disable=SC2016 # $(LIBLOCUS_HEADERS) is make's, not the shell's
hdrs=$(make -s --no-print-directory BUILD="$B" \
	--eval='print-liblocus-headers: ; @echo $(LIBLOCUS_HEADERS)' print-liblocus-headers) ||
	{ echo "test_api_exports: cannot read LIBLOCUS_HEADERS" >&2; exit 1; }
[ -n "$hdrs" ] || { echo "test_api_exports: LIBLOCUS_HEADERS is empty" >&2; exit 1; }
inc=$tmp/include
mkdir -p "$inc/locus"
# shellcheck disable=SC2086
cp $hdrs "$inc/locus/" || exit 1

map=$(sed -e 's|/\*.*\*/||g' shm/liblocus.map | sed -n '/^global:/,/^local:/p' |
	grep -oE '^[[:space:]]*[A-Za-z_][A-Za-z0-9_]*;' | tr -d ' \t;' | sort -u)
[ -n "$map" ] || { echo "test_api_exports: no global: names in shm/liblocus.map" >&2; exit 1; }

# 1. each installed header on its own
all=$tmp/all.c
: > "$all"
for h in $hdrs; do
	b=${h##*/}
	printf '#include <locus/%s>\n' "$b" > "$tmp/one.c"
	"$CC" -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$inc" "$tmp/one.c" \
		> "$tmp/one.log" 2>&1 ||
		problem "<locus/$b> does not compile alone (C11): $(head -n 3 "$tmp/one.log")"
	printf '#include <locus/%s>\n' "$b" >> "$all"
done

# 2. what the installed headers declare
"$CC" -std=gnu11 -D_GNU_SOURCE -I"$inc" -fsyntax-only -aux-info "$tmp/aux" "$all" ||
	{ echo "test_api_exports: the installed headers do not compile together" >&2; exit 1; }
# "/* FILE:LINE:NC */ extern int name (...);": N/O/I then C (declaration) or F (definition)
grep -E "^/\\* $inc/locus/[^ ]+:[0-9]+:[NOI]C \\*/" "$tmp/aux" > "$tmp/protos"
proto_re="^/\\* $inc/locus/([^ ]+):([0-9]+):.. \\*/ [^(]*[^A-Za-z0-9_(]([A-Za-z_][A-Za-z0-9_]*) \\(.*"
decls=$(sed -nE "s|$proto_re|\\3 <locus/\\1>:\\2|p" "$tmp/protos" | sort -u -k1,1)
odd=$(grep -vE "$proto_re" "$tmp/protos")
[ -z "$odd" ] || problem "a prototype -aux-info printed was not understood: $odd"
names=$(awk '{print $1}' <<<"$decls")
n_decl=$(grep -c . <<<"$names")
unexported=$(comm -23 <(echo "$names") <(echo "$map"))
n_bad=$(grep -c . <<<"$unexported")
echo "test_api_exports: the installed headers declare $n_decl functions, $n_bad not exported"
for f in $unexported; do
	problem "$(awk -v f="$f" '$1 == f {print $2}' <<<"$decls"): $f is declared but not in shm/liblocus.map"
done

# 3. the static inline helpers' calls
"$CC" -std=gnu11 -D_GNU_SOURCE -I"$inc" -O0 -fkeep-inline-functions -c -o "$tmp/all.o" "$all" ||
	{ echo "test_api_exports: the installed headers do not compile to an object" >&2; exit 1; }
calls=$(nm -u "$tmp/all.o" | awk '{print $NF}' | grep '^locus_' | sort -u)
for f in $(comm -23 <(echo "$calls") <(echo "$map")); do
	problem "an inline helper of an installed header calls $f, which is not exported"
done

# 4. the map's names: declared, and defined by the built library
for f in $(comm -13 <(echo "$names") <(echo "$map")); do
	problem "$f is in shm/liblocus.map but no installed header declares it"
done
so=$B/lib/liblocus.so
if [ -e "$so" ]; then
	defined=$(nm -D --defined-only "$so" | awk '{print $3}' | sed 's/@.*//' | sort -u)
	for f in $(comm -23 <(echo "$map") <(echo "$defined")); do
		problem "$f is in shm/liblocus.map but $so does not define it"
	done
else
	echo "test_api_exports: no $so (build it to compare its exports too)"
fi

[ "$bad" -eq 0 ] || exit 1
echo "test_api_exports: ok ($(grep -c . <<<"$map") exports, each declared; $(wc -w <<<"$hdrs") headers compile alone)"
