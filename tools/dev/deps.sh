#!/bin/sh
# Install the Debian 12 packages a make target needs, and no more.
#   tools/dev/deps.sh ensure TARGET    install what TARGET needs when any is missing
#   tools/dev/deps.sh install TARGET   install them all (apt-get skips what is there)
#   tools/dev/deps.sh check TARGET     exit 1 and name what is missing
#   tools/dev/deps.sh list TARGET      print the packages
# TARGET: demo, build, check, fuzz, vm, bench, test, all (default: all).
set -eu

# What builds locusd, locusctl, locus-stat and locus-loadgen: rdma-core,
# DPDK, libnuma, jemalloc, LAPACKE/OpenBLAS (spectral grouping), libsystemd
# (sd_notify), OpenSSL's libcrypto (the handshake's HMAC), libcurl and
# jansson (the etcd client, over etcd's JSON gateway).
CORE_PKGS="build-essential pkg-config libibverbs-dev librdmacm-dev libdpdk-dev
libnuma-dev libjemalloc-dev liblapacke-dev libopenblas-dev libsystemd-dev libssl-dev
libcurl4-openssl-dev libjansson-dev"
# The unit tests (cmocka).
UNIT_PKGS="libcmocka-dev"
# The host tests: systemd-analyze verifies the unit, promtool lints locus-stat's
# Prometheus output, ps and ip, groff checks the man pages, a real etcd (the
# tests start their own; etcdctl, and openssl for TLS certificates); the Python package's tests: Debian's
# interpreter, numpy, pytest, torch (CPU; the tests skip what torch would check
# when it is absent), aiohttp (the PD proxy example), matplotlib (the plots of
# locusctl simulate, control/sim_plot.py).
HOST_PKGS="systemd procps iproute2 prometheus groff-base etcd-server etcd-client openssl"
PY_PKGS="python3 python3-numpy python3-pytest python3-torch python3-aiohttp python3-matplotlib"
# libFuzzer targets (make fuzz, and the smoke in make test): clang and its runtime.
FUZZ_PKGS="clang libclang-rt-14-dev"
# Real verbs under Soft-RoCE in a qemu guest (tests/vm/).
VM_PKGS="qemu-system-x86 busybox-static cpio kmod ibverbs-utils ibverbs-providers
rdmacm-utils perftest iproute2 dash coreutils tcpdump"

pkgs_of() {
	case "$1" in
	demo) echo "$CORE_PKGS" ;;
	build) echo "$CORE_PKGS $UNIT_PKGS" ;;
	check) echo "$CORE_PKGS $UNIT_PKGS $HOST_PKGS $PY_PKGS" ;;
	fuzz) echo "$CORE_PKGS $UNIT_PKGS $FUZZ_PKGS" ;;
	vm) echo "$CORE_PKGS $UNIT_PKGS $VM_PKGS" ;;
	bench) echo "$CORE_PKGS $UNIT_PKGS python3 python3-numpy $VM_PKGS" ;;
	test | all) echo "$CORE_PKGS $UNIT_PKGS $HOST_PKGS $PY_PKGS $FUZZ_PKGS $VM_PKGS" ;;
	*)
		echo "deps: unknown target '$1' (demo, build, check, fuzz, vm, bench, test, all)" >&2
		exit 2
		;;
	esac
}

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

cmd=${1:-install}
PKGS=$(pkgs_of "${2:-all}")
case "$cmd" in
install)
	# shellcheck disable=SC2086
	do_install $PKGS
	;;
ensure)
	m=$(missing)
	if [ -n "$m" ]; then
		echo "deps: installing for ${2:-all}:$m"
		# shellcheck disable=SC2086
		do_install $m
	fi
	;;
check)
	m=$(missing)
	if [ -n "$m" ]; then
		echo "deps: missing for ${2:-all}:$m" >&2
		exit 1
	fi
	;;
list)
	echo $PKGS | tr ' ' '\n' | sort -u
	;;
*)
	echo "usage: $0 ensure|install|check|list [TARGET]" >&2
	exit 2
	;;
esac
