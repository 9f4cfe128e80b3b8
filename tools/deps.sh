#!/bin/sh
# Install the Debian 12 packages locus needs to build and test.
#   tools/deps.sh install   install them (idempotent: apt-get skips what is there)
#   tools/deps.sh ensure    install only when one of them is missing
#   tools/deps.sh check     exit 1 and name what is missing
set -eu

# Build and unit tests (prometheus: promtool lints locus-stat --prometheus).
BUILD_PKGS="build-essential pkg-config libibverbs-dev librdmacm-dev libdpdk-dev
libnuma-dev libjemalloc-dev libcmocka-dev liblapacke-dev libopenblas-dev
libsystemd-dev systemd procps libssl-dev prometheus"
# libFuzzer targets (make fuzz, and the smoke in make test): clang and its runtime.
FUZZ_PKGS="clang libclang-rt-14-dev"
# Real verbs under Soft-RoCE in a qemu guest (make test-verbs, make bench-verbs).
VM_PKGS="qemu-system-x86 busybox-static cpio kmod ibverbs-utils ibverbs-providers
rdmacm-utils perftest iproute2 dash coreutils tcpdump"

# The Python package (tools/python): Debian's interpreter, numpy, pytest, and torch
# (CPU build) for the tensor entry points; their tests skip what torch would check
# when it is absent; aiohttp for the PD-disaggregation proxy example (examples/pd_proxy.py).
PY_PKGS="python3 python3-numpy python3-pytest python3-torch python3-aiohttp"

PKGS="$BUILD_PKGS $FUZZ_PKGS $VM_PKGS $PY_PKGS"

missing() {
	out=""
	for p in $PKGS; do
		st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
		[ "$st" = installed ] || out="$out $p"
	done
	echo "$out"
}

do_install() {
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@"
}

case "${1:-install}" in
install)
	# shellcheck disable=SC2086
	do_install $PKGS
	;;
ensure)
	m=$(missing)
	if [ -n "$m" ]; then
		echo "deps: installing:$m"
		# shellcheck disable=SC2086
		do_install $m
	fi
	;;
check)
	m=$(missing)
	if [ -n "$m" ]; then
		echo "deps: missing:$m" >&2
		exit 1
	fi
	;;
*)
	echo "usage: $0 install|ensure|check" >&2
	exit 2
	;;
esac
