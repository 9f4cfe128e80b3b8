#!/bin/bash
# Deployment checks: make install into a DESTDIR, systemd-analyze verify of
# the unit as installed (pointing at this build's locusd), the shipped configs
# accepted by locusd itself, bad configs refused with their line, and the CPU
# affinity drop-in generated from eal_args.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_deploy: $*" >&2; exit 1; }

make --no-print-directory -s install DESTDIR="$tmp/root" PREFIX=/usr >/dev/null
for f in usr/lib/systemd/system/locusd@.service usr/lib/systemd/system/locus-recover@.service \
	 usr/lib/tmpfiles.d/locus.conf \
	 usr/lib/sysusers.d/locus.conf etc/locus/default.conf.example usr/bin/locusd \
	 usr/bin/locusctl usr/bin/locus-stat usr/bin/locusd-cpus usr/share/doc/locus/README.md; do
	[ -e "$tmp/root/$f" ] || fail "make install did not install $f"
done
grep -q '^ExecStart=/usr/bin/locusd -c /etc/locus/%i.conf$' \
	"$tmp/root/usr/lib/systemd/system/locusd@.service" || fail "ExecStart not substituted"
grep -qx 'g locus-ctl -' "$tmp/root/usr/lib/sysusers.d/locus.conf" ||
	fail "sysusers.d lacks the control group locus-ctl"
for k in 'Type=notify' 'WatchdogSec=' 'LimitMEMLOCK=infinity' 'Restart=on-failure'; do
	grep -q "^$k" "$tmp/root/usr/lib/systemd/system/locusd@.service" || fail "unit lacks $k"
done

grep -q '^ExecStart=/usr/bin/locusctl recover --cluster $RECOVER_ARGS$' \
	"$tmp/root/usr/lib/systemd/system/locus-recover@.service" || fail "recover's ExecStart"

# verify the units as instances whose binaries exist on this machine (recover's
# environment file and locusd's config are conditions: the unit still verifies)
for u in locusd@ locus-recover@; do
	sed -e "s|@BINDIR@|$PWD/$build/bin|g" -e "s|@DOCDIR@|$PWD|g" -e "s|@SYSCONFDIR@|/etc|g" \
		"deploy/$u.service.in" > "$tmp/${u}default.service"
	out=$(systemd-analyze verify --man=no "$tmp/${u}default.service" 2>&1) ||
		fail "systemd-analyze verify $u: $out"
	[ -z "$out" ] || fail "systemd-analyze verify $u warned: $out"
done

for c in deploy/default.conf deploy/two-node.conf; do
	[ "$("$build/bin/locusd" -c "$c" --check-config)" = ok ] || fail "$c refused"
done
printf '[locusd]\nring_size = 1000\n' > "$tmp/bad.conf"
if msg=$("$build/bin/locusd" -c "$tmp/bad.conf" --check-config 2>&1); then
	fail "a bad config was accepted"
fi
case "$msg" in *"bad.conf:2: ring_size: 1000 is not a power of two"*) ;;
	*) fail "bad config message: $msg" ;; esac

# CPU affinity drop-in from eal_args
mkdir -p "$tmp/r/etc/locus"
cp deploy/two-node.conf "$tmp/r/etc/locus/node0.conf"
LOCUSD="$build/bin/locusd" deploy/locusd-cpus node0 "$tmp/r" >/dev/null
grep -qx 'CPUAffinity=2-5' "$tmp/r/etc/systemd/system/locusd@node0.service.d/cpus.conf" ||
	fail "drop-in: $(cat "$tmp/r/etc/systemd/system/locusd@node0.service.d/cpus.conf")"
# Another prefix: everything lands under DESTDIR/PREFIX, configuration
# included (SYSCONFDIR defaults to PREFIX/etc), and the unit and locusd-cpus
# name that directory.
make --no-print-directory -s install DESTDIR="$tmp/p" PREFIX=/opt/locus >/dev/null
outside=$(cd "$tmp/p" && find . \( -type f -o -type l \) ! -path './opt/locus/*')
[ -z "$outside" ] || fail "PREFIX=/opt/locus installed outside the prefix: $outside"
[ -e "$tmp/p/opt/locus/etc/locus/default.conf.example" ] ||
	fail "PREFIX=/opt/locus: no etc/locus/default.conf.example under the prefix"
grep -q '^ExecStart=/opt/locus/bin/locusd -c /opt/locus/etc/locus/%i.conf$' \
	"$tmp/p/opt/locus/lib/systemd/system/locusd@.service" ||
	fail "PREFIX=/opt/locus: the unit does not read /opt/locus/etc/locus"
grep -q '^confdir=${LOCUS_CONF_DIR:-/opt/locus/etc/locus}$' "$tmp/p/opt/locus/bin/locusd-cpus" ||
	fail "PREFIX=/opt/locus: locusd-cpus does not read /opt/locus/etc/locus"
echo "test_deploy: install, unit verify, configs, CPU drop-in and PREFIX=/opt/locus ok"
