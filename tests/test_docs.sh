#!/bin/bash
# The documentation holds together with the code:
#  - every key the config parser (dataplane/config.c) knows has an entry in
#    locusd.conf(5), under the section it belongs to, and every entry there
#    is a key the parser knows;
#  - every locusctl command (the table in control/locusctl.c) has a .SS of
#    its own in locusctl(8), and every option of locusctl, locusd and
#    locus-stat (their getopt tables and the options parsed by hand) appears
#    in its man page;
#  - each man page renders without a groff warning;
#  - every relative link of every Markdown file resolves, a #anchor to a
#    heading of its file (GitHub's slugs), and no table row has more cells
#    than its header (GitHub drops the rest).
# The lists come from the sources, not from a build: nothing needs building.
# Needs groff (Debian: groff-base) and python3. Prints what it checked and
# one line per problem, FILE:LINE: what; exits 1 if there is any.
set -uo pipefail
case $0 in */*) cd "${0%/*}/.." || exit 1 ;; *) cd .. || exit 1 ;; esac
if [ ! -f Makefile ] || [ ! -d dataplane ] || [ ! -d control ]; then
	echo "test_docs: $PWD is not the repository's root" >&2
	exit 1
fi

# Markdown files whose problems are printed but do not fail the test
# (empty: every file counts).
DOCS_SKIP=${DOCS_SKIP-}

PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3

LOCUSD_8=dataplane/man/locusd.8
LOCUSD_CONF_5=dataplane/man/locusd.conf.5
LOCUSCTL_8=control/man/locusctl.8
LOCUS_STAT_1=tools/stat/man/locus-stat.1
MAN_PAGES=("$LOCUSD_8" "$LOCUSD_CONF_5" "$LOCUSCTL_8" "$LOCUS_STAT_1")

fail=0

problem() {
	echo "$*"
	fail=$((fail + 1))
}

# repo_files NAME-GLOB [DIR-TO-SKIP...]: the repository's files called
# NAME-GLOB, without .git, hidden directories and build trees.
repo_files() {
	local name=$1 d prune=()
	shift
	for d in "$@"; do
		prune+=(-o -path "./$d")
	done
	find . -type d \( -name '.?*' -o -path './build*' "${prune[@]}" \) -prune -o \
		-type f -name "$name" -print | sed 's|^\./||' | sort
}

# find_src VAR NAME [PATH...]: VAR = the source file NAME: the first PATH
# that exists, else the one file of the repository called NAME (files move
# between folders; their names stay). Returns 1, a problem said, when there
# is no such file or several.
find_src() {
	local var=$1 name=$2 p hits
	shift 2
	printf -v "$var" '%s' ''
	for p in "$@"; do
		if [ -f "$p" ]; then
			printf -v "$var" '%s' "$p"
			return 0
		fi
	done
	hits=$(repo_files "$name")
	if [ "$(grep -c . <<<"$hits")" != 1 ]; then
		problem "tests/test_docs.sh: expected one file named $name, found: ${hits:-none}"
		return 1
	fi
	printf -v "$var" '%s' "$hits"
}

# man_text PAGE: the page's source with comments dropped and the escapes
# that hide words undone (\- -> -, fonts, \&, \e), for searching.
man_text() {
	grep -v '^\.\\"' "$1" | sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' \
		-e 's/\\&//g' -e 's/\\e/\\/g' -e 's/\\(aq/'"'"'/g'
}

# has_opt TEXT OPT: OPT ("--name" or "-x") appears in TEXT as a word of its own.
has_opt() {
	grep -qE -- "(^|[^A-Za-z0-9_-])$2([^A-Za-z0-9_-]|\$)" <<<"$1"
}

# getopt_opts FILE...: "OPTION FILE:LINE" for each option of the getopt
# tables and optstrings in FILE..., and of the ones compared by hand
# (strcmp(argv[i], "--name")); each option once, where it is first seen.
getopt_opts() {
	local f ln m s i

	for f in "$@"; do
		# { "name", no_argument, ... } entries of struct option tables
		grep -noE '\{ *"[a-z0-9][a-z0-9-]*", *(no|required|optional)_argument' "$f" |
			sed -E 's/^([0-9]+):\{ *"([^"]+)".*/--\2 '"${f//\//\\/}"':\1/'
		# getopt_long(argc, argv, "i:o:h", ...): the short options
		grep -noE 'getopt(_long)? *\([^,]+, *[^,]+, *"[^"]*"' "$f" |
			while IFS=: read -r ln m; do
				s=${m%\"}
				s=${s##*\"}
				s=${s//:/}
				for ((i = 0; i < ${#s}; i++)); do
					echo "-${s:i:1} $f:$ln"
				done
			done
		# strcmp(argv[i], "--json") / "-i"
		grep -noE 'strcmp\(argv\[[a-z0-9+ ]+\], *"-{1,2}[a-z0-9][a-z0-9-]*"\)' "$f" |
			sed -E 's/^([0-9]+):.*"(-[^"]+)"\)$/\2 '"${f//\//\\/}"':\1/'
	done | awk '!seen[$1]++'
}

# check_opts WHAT PAGE FILE...: every option of FILE... appears in PAGE.
check_opts() {
	local what=$1 page=$2
	shift 2
	local text o where n=0

	text=$(man_text "$page")
	while read -r o where; do
		[ -n "$o" ] || continue
		n=$((n + 1))
		has_opt "$text" "$o" || problem "$where: option $o of $what is not in $page"
	done < <(getopt_opts "$@")
	if [ "$n" -lt "${MIN_OPTS:-3}" ]; then
		problem "tests/test_docs.sh: found only $n options of $what in $*: has the option parsing changed shape? Update getopt_opts()"
	fi
	echo "$page: $n options of $what ($*)"
}

# ---- the man pages exist -------------------------------------------------------------

for p in "${MAN_PAGES[@]}"; do
	[ -f "$p" ] || problem "$p: missing"
done

# ---- config keys: config.c's parser against locusd.conf(5) ---------------------------

# The keys: every strcmp(k, "key") / strncmp(k, "prefix.", n) in config.c, its
# section from the function it is in (set_cluster: [cluster], else [locusd]).
cfg_keys() {
	awk '
		/^[a-z].*\(/ { fn = $0; sub(/\(.*/, "", fn); sub(/.* \**/, "", fn) }
		{
			line = $0
			while (match(line, /strn?cmp\(k, "[^"]+"/)) {
				key = substr(line, RSTART, RLENGTH)
				sub(/^strn?cmp\(k, "/, "", key)
				sub(/"$/, "", key)
				print (fn == "set_cluster" ? "cluster" : "locusd"), key, FILENAME ":" NR
				line = substr(line, RSTART + RLENGTH)
			}
		}' "$1" | sort -u -k1,2
}

# The entries of locusd.conf(5): "section tag file:line" for each .TP tag
# under a .SH naming [locusd] or [cluster]; node.<id> gives "node.".
man_conf_entries() {
	awk '
		/^\.SH/ { sec = ""; if ($0 ~ /\[locusd\]/) sec = "locusd"; if ($0 ~ /\[cluster\]/) sec = "cluster" }
		/^\.TP/ { tp = 1; next }
		tp && !/^\.\\"/ {
			tp = 0
			if (sec == "") next
			t = $0
			sub(/^\.[A-Z]+ +/, "", t)
			gsub(/\\f[BIRP]/, "", t); gsub(/\\-/, "-", t); gsub(/"/, "", t)
			sub(/[ <].*/, "", t)
			print sec, t, FILENAME ":" NR
		}' "$1"
}

find_src config_c config.c dataplane/config.c
find_src config_h locus_config.h dataplane/locus_config.h
if [ -n "$config_c" ] && [ -f "$LOCUSD_CONF_5" ]; then
	keys=$(cfg_keys "$config_c")
	entries=$(man_conf_entries "$LOCUSD_CONF_5")
	n_keys=$(grep -c . <<<"$keys")
	n_cluster=$(grep -c '^cluster ' <<<"$keys")
	# a parser of another shape (a key table, another variable name) must not pass silently
	if [ "$n_keys" -lt 30 ] || [ "$n_cluster" -lt 3 ]; then
		problem "$config_c: found only $n_keys keys ($n_cluster in [cluster]): has the parser changed shape? Update cfg_keys() in tests/test_docs.sh"
		keys= entries=
	fi
	while read -r sec key where; do
		[ -n "$key" ] || continue
		if ! awk -v s="$sec" -v k="$key" '
			$1 == s && ($2 == k || (k ~ /\.$/ && index($2, k) == 1)) { found = 1 }
			END { exit !found }' <<<"$entries"; then
			problem "$where: key '$key' of [$sec] has no entry under SECTION [$sec] in $LOCUSD_CONF_5"
		fi
	done <<<"$keys"
	# and the other way: an entry for a key the parser does not know is stale
	while read -r sec tag where; do
		[ -n "$tag" ] || continue
		if ! awk -v s="$sec" -v t="$tag" '
			$1 == s && ($2 == t || ($2 ~ /\.$/ && index(t, $2) == 1)) { found = 1 }
			END { exit !found }' <<<"$keys"; then
			problem "$where: entry '$tag' is not a key of [$sec] in $config_c"
		fi
	done <<<"$entries"
	# the header's own list of keys (its comment) names only keys the parser knows
	if [ -n "$config_h" ] && [ -n "$keys" ]; then
		while read -r sec key where; do
			grep -qE "^$sec ${key//./\\.} " <<<"$keys" ||
				problem "$where: documents key '$key' of [$sec], which $config_c does not parse"
		done < <(awk '
			/^ \*   \[locusd\]/ { sec = "locusd" } /^ \*   \[cluster\]/ { sec = "cluster" }
			sec != "" && /^ \*   [a-z_][a-z0-9_.]* *=/ {
				k = $0; sub(/^ \*   /, "", k); sub(/ *=.*/, "", k); sub(/\.[0-9]+$/, ".", k)
				print sec, k, FILENAME ":" NR
			}
			/\*\// { sec = "" }' "$config_h")
	fi
	echo "$LOCUSD_CONF_5: $n_keys config keys of $config_c ($n_cluster in [cluster]), $(grep -c . <<<"$entries") entries"
fi

# ---- locusctl commands and options ---------------------------------------------------

find_src locusctl_c locusctl.c control/locusctl.c
if [ -n "$locusctl_c" ] && [ -f "$LOCUSCTL_8" ]; then
	# the command table: { "name", handler, "usage" } between "cmds[] = {" and "};"
	cmds=$(awk '/locusctl_cmd cmds\[\] *= *\{/ { on = 1; next } on && /^\};/ { on = 0 }
		on && match($0, /^\t\{ "[a-z][a-z0-9-]*",/) {
			c = substr($0, RSTART, RLENGTH); gsub(/^\t\{ "|",$/, "", c); print c, FILENAME ":" NR }' \
		"$locusctl_c")
	kinds=$(awk '/fit_kinds\[\] *= *\{/ { on = 1; next } on && /^\};/ { on = 0 }
		on && match($0, /\{ "--[a-z]+"/) {
			c = substr($0, RSTART, RLENGTH); gsub(/^\{ "|"$/, "", c); print c, FILENAME ":" NR }' \
		"$locusctl_c")
	# the .SS headings of the page's COMMANDS (a command's name, then its kind)
	heads=$(awk '/^\.SH/ { on = /COMMANDS/ }
		on && /^\.SS/ { h = $0; sub(/^\.SS +/, "", h); gsub(/"/, "", h); gsub(/\\-/, "-", h)
		print h }' "$LOCUSCTL_8")
	n_cmds=$(grep -c . <<<"$cmds")
	[ "$n_cmds" -ge 5 ] || problem "$locusctl_c: found only $n_cmds commands in cmds[]: has the table changed shape? Update tests/test_docs.sh"
	while read -r c where; do
		[ -n "$c" ] || continue
		awk -v c="$c" '$1 == c { found = 1 } END { exit !found }' <<<"$heads" ||
			problem "$where: command '$c' has no .SS section in $LOCUSCTL_8"
	done <<<"$cmds"
	while read -r k where; do
		[ -n "$k" ] || continue
		awk -v k="$k" '$1 == "fit" && index($0, k) { found = 1 } END { exit !found }' <<<"$heads" ||
			problem "$where: fit kind '$k' has no .SS \"fit ... $k\" in $LOCUSCTL_8"
	done <<<"$kinds"
	# a section for a command that no longer exists is stale
	while read -r first rest; do
		[ -n "$first" ] || continue
		awk -v c="$first" '$1 == c { found = 1 } END { exit !found }' <<<"$cmds" ||
			problem "$LOCUSCTL_8: section '${first}${rest:+ $rest}' is not a command of $locusctl_c"
	done <<<"$heads"
	echo "$LOCUSCTL_8: $n_cmds commands, $(grep -c . <<<"$kinds") kinds of fit"
	# every option of every file linked into locusctl that parses options
	# (the sources that include locusctl.h, tests aside, and parse options)
	mapfile -t ctl_files < <(repo_files '*.c' tests | xargs -r grep -l '#include "locusctl.h"' |
		xargs -r grep -lE 'struct option|strcmp\(argv\[')
	MIN_OPTS=40 check_opts locusctl "$LOCUSCTL_8" "${ctl_files[@]}"
fi

# ---- locusd and locus-stat options ---------------------------------------------------

find_src locusd_c locusd.c dataplane/locusd.c && [ -f "$LOCUSD_8" ] &&
	check_opts locusd "$LOCUSD_8" "$locusd_c"
find_src locus_stat_c locus_stat.c tools/stat/locus_stat.c && [ -f "$LOCUS_STAT_1" ] &&
	check_opts locus-stat "$LOCUS_STAT_1" "$locus_stat_c"

# ---- the man pages render without warnings -------------------------------------------

if command -v groff >/dev/null; then
	for p in "${MAN_PAGES[@]}"; do
		[ -f "$p" ] || continue
		# as man(1) shows it on a terminal, and typeset
		for dev in utf8 ps; do
			out=$(groff -man -T"$dev" -ww -z "$p" 2>&1)
			rc=$?
			if [ $rc -ne 0 ] || [ -n "$out" ]; then
				while IFS= read -r l; do
					problem "$p: groff -T$dev: ${l:-exit status $rc}"
				done <<<"${out:-}"
			fi
		done
	done
	echo "man pages: ${#MAN_PAGES[@]} rendered with groff -man -ww (utf8, ps)"
else
	problem "tests/test_docs.sh: groff not found (Debian: groff-base): the man pages are not checked"
fi

# ---- Markdown: relative links, anchors, table rows -----------------------------------

mapfile -t md_files < <(repo_files '*.md')
md_out=$("$PY" - "$DOCS_SKIP" "${md_files[@]}" <<'EOF'
import os
import re
import sys
import unicodedata
from urllib.parse import unquote

skip = set(sys.argv[1].split())
files = sys.argv[2:]
FENCE = re.compile(r'^ {0,3}(`{3,}|~{3,})')
DELIM = re.compile(r'^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$')
ATX = re.compile(r'^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$')
LINK = re.compile(r'!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+(?:"[^"]*"|\'[^\']*\'))?\s*\)')
REFDEF = re.compile(r'^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)')
HTML_ID = re.compile(r'<a\s[^>]*(?:name|id)\s*=\s*"([^"]+)"', re.I)


def code_lines(lines):
    """Which lines are code (fenced, or indented after a paragraph break)."""
    code = [False] * len(lines)
    fence = None
    prev_blank, prev_text_indented, in_list = True, False, False
    for i, l in enumerate(lines):
        if fence:
            code[i] = True
            if re.match(r'^ {0,3}' + re.escape(fence[0]) + '{%d,}\\s*$' % len(fence), l):
                fence = None
            continue
        m = FENCE.match(l)
        if m:
            code[i] = True
            fence = m.group(1)
            continue
        blank = not l.strip()
        if not blank and re.match(r'^(    |\t)', l) and (prev_blank or prev_text_indented) \
                and not in_list:
            code[i] = True
            prev_text_indented = True
            prev_blank = False
            continue
        if not blank:
            in_list = bool(re.match(r'^\s*([-*+]|\d+[.)])\s', l)) or \
                (in_list and l.startswith((' ', '\t')))
        prev_text_indented = False
        prev_blank = blank
    return code


def strip_code_spans(s):
    """s with its inline code spans blanked (same length)."""
    out, i = [], 0
    while i < len(s):
        if s[i] == '`':
            j = i
            while j < len(s) and s[j] == '`':
                j += 1
            run = s[i:j]
            k = s.find(run, j)
            while k >= 0 and k + len(run) < len(s) and s[k + len(run)] == '`':
                k = s.find(run, k + len(run) + 1)
            if k < 0:
                out.append(run)
                i = j
                continue
            out.append(' ' * (k + len(run) - i))
            i = k + len(run)
            continue
        out.append(s[i])
        i += 1
    return ''.join(out)


def slug(text):
    """GitHub's anchor of a heading's text."""
    t = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)   # links: their text
    t = re.sub(r'<[^>]+>', '', t)                          # inline HTML
    t = t.replace('`', '').strip().lower()
    keep = []
    for ch in t:
        cat = unicodedata.category(ch)
        if ch in '-_ ' or cat[0] in 'LNM':
            keep.append(ch)
    return ''.join(keep).replace(' ', '-')


anchors_of = {}


def anchors(path):
    if path in anchors_of:
        return anchors_of[path]
    seen, out = {}, set()
    try:
        lines = open(path, encoding='utf-8').read().split('\n')
    except OSError:
        anchors_of[path] = out
        return out
    code = code_lines(lines)
    for i, l in enumerate(lines):
        if code[i]:
            continue
        for m in HTML_ID.finditer(l):
            out.add(m.group(1))
        text = None
        m = ATX.match(l)
        if m:
            text = m.group(2) or ''
        elif i + 1 < len(lines) and l.strip() and not code[i + 1] and \
                re.match(r'^ {0,3}(=+|-+)\s*$', lines[i + 1]) and '|' not in l and \
                not re.match(r'^\s*([-*+]|\d+[.)])\s', l):
            text = l.strip()
        if text is None:
            continue
        s = slug(text)
        n = seen.get(s, 0)
        out.add(s if n == 0 else '%s-%d' % (s, n))
        seen[s] = n + 1
    anchors_of[path] = out
    return out


def cells(row):
    """GFM cells of a table row: split on pipes not escaped by an odd run of
    backslashes (a pipe inside a code span splits it too: GFM splits the
    row before it reads code spans)."""
    r = row.strip()
    seps, bs = [], 0
    for i, ch in enumerate(r):
        if ch == '|' and bs % 2 == 0:
            seps.append(i)
        bs = bs + 1 if ch == '\\' else 0
    n = len(seps) + 1
    if seps and seps[0] == 0:
        n -= 1
    if seps and seps[-1] == len(r) - 1 and len(r) > 1:
        n -= 1
    return n


n_links = n_tables = n_rows = 0
for f in files:
    skipped = f in skip
    lines = open(f, encoding='utf-8').read().split('\n')
    code = code_lines(lines)
    here = os.path.dirname(f)

    def report(i, msg):
        print(('SKIP ' if skipped else 'FAIL ') + '%s:%d: %s' % (f, i + 1, msg))

    # links
    for i, l in enumerate(lines):
        if code[i]:
            continue
        s = strip_code_spans(l)
        dests = [m.group(2) for m in LINK.finditer(s)]
        m = REFDEF.match(s)
        if m:
            dests.append(m.group(1))
        for d in dests:
            d = d[1:-1] if d.startswith('<') and d.endswith('>') else d
            if not d or re.match(r'^[A-Za-z][A-Za-z0-9+.-]*:', d) or d.startswith('//'):
                continue
            n_links += 1
            path, _, frag = d.partition('#')
            path = unquote(path)
            if path.startswith('/'):
                target = os.path.normpath(path.lstrip('/'))
            elif path:
                target = os.path.normpath(os.path.join(here, path))
            else:
                target = f
            if not os.path.exists(target):
                report(i, 'link %s: %s does not exist' % (d, target if path.startswith('/')
                                                          else os.path.join(here, path)))
                continue
            if frag and target.endswith('.md') and os.path.isfile(target) and \
                    unquote(frag) not in anchors(target):
                report(i, 'link %s: no heading of %s has the anchor #%s' % (d, target, frag))
    # tables
    i = 0
    while i + 1 < len(lines):
        if code[i] or code[i + 1] or '|' not in lines[i] or not DELIM.match(lines[i + 1]) \
                or '|' not in lines[i] + lines[i + 1]:
            i += 1
            continue
        head = cells(lines[i])
        if cells(lines[i + 1]) != head:
            i += 1
            continue
        n_tables += 1
        j = i + 2
        while j < len(lines) and lines[j].strip() and not code[j] and \
                not re.match(r'^ {0,3}(#|>|```|~~~)', lines[j]):
            n_rows += 1
            n = cells(lines[j])
            if n > head:
                report(j, 'table row has %d cells, its header %d: GitHub drops the rest '
                       '(write a | inside a cell, code spans included, as \\|)' % (n, head))
            j += 1
        i = j
print('INFO %d Markdown files: %d relative links, %d tables (%d rows)'
      % (len(files), n_links, n_tables, n_rows))
EOF
)
rc=$?
[ $rc -eq 0 ] || problem "tests/test_docs.sh: the Markdown check failed to run (python exit $rc)"
while IFS= read -r l; do
	case $l in
	FAIL\ *) problem "${l#FAIL }" ;;
	SKIP\ *) echo "${l#SKIP } (not failing: listed in DOCS_SKIP)" ;;
	INFO\ *) echo "${l#INFO }" ;;
	'') ;;
	*) problem "tests/test_docs.sh: unexpected output from the Markdown check: $l" ;;
	esac
done <<<"$md_out"

if [ $fail -ne 0 ]; then
	echo "test_docs: $fail problem(s)"
	exit 1
fi
echo "test_docs: ok"
