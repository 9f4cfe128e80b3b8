#!/bin/bash
# Boot Debian's 6.1 kernel + the initramfs from build-initramfs.sh under qemu and
# run Soft-RoCE (rdma_rxe) tests inside it. No NIC: nothing can leave the guest.
# Usage: run-rxe-vm.sh [-m 9p|probe] [-a kvm|tcg|auto] [-c /host/path/script.sh]
#                      [-w /host/rw/dir] [-M mem] [-S smp] [-t timeout_s] [VAR=val ...]
#   VAR=val pairs are put on the kernel cmdline and so end up in the guest
#   init's environment (e.g. RXE_NETNS=0 RXE_T=30 RXE_EXTRA=/path/to/bin).
# Exit status = the guest script's exit status (GUEST_EXIT rc=N), 124 on timeout.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
P=${RXE_VM_DIR:-$PWD/rxe-vm-work}
mkdir -p "$P"
MODE=9p ACCEL=tcg CMD=$HERE/guest-verbs.sh RW=$P MEM=2G SMP=2 TMO=600
while getopts m:a:c:w:M:S:t: o; do case $o in
    m) MODE=$OPTARG;; a) ACCEL=$OPTARG;; c) CMD=$OPTARG;; w) RW=$OPTARG;;
    M) MEM=$OPTARG;; S) SMP=$OPTARG;; t) TMO=$OPTARG;; *) exit 2;; esac; done
shift $((OPTIND-1))
[ -e "$P/vmlinuz" ] && [ -e "$P/initramfs.cpio.gz" ] || RXE_VM_DIR="$P" bash "$HERE/build-initramfs.sh"
if [ "$ACCEL" = auto ]; then
    # qemu may open /dev/kvm fine and still never boot a stock kernel (e.g. on a
    # 'kvm_pvm' nested host: SeaBIOS runs, the kernel hangs silently), so probe-boot.
    ACCEL=tcg
    if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then
        timeout 20 qemu-system-x86_64 -accel kvm -cpu host -m 256M -nographic -no-reboot -nic none \
            -nodefaults -serial stdio -monitor none -kernel "$P/vmlinuz" -initrd "$P/initramfs.cpio.gz" \
            -append "console=ttyS0 quiet rxe.mode=probe" </dev/null 2>/dev/null | grep -q GUEST_PROBE_OK && ACCEL=kvm
    fi
fi
if [ "$ACCEL" = kvm ]; then ACC=(-accel kvm -cpu host); else ACC=(-accel tcg,thread=multi -cpu max); fi
EXTRA=""; for kv in "$@"; do case $kv in *" "*) EXTRA+=" ${kv%%=*}=\"${kv#*=}\"";; *) EXTRA+=" $kv";; esac; done
APPEND="console=ttyS0 quiet panic=-1 rxe.mode=$MODE rxe.cmd=$CMD rxe.rw=$RW$EXTRA"
FS=()
if [ "$MODE" = 9p ]; then
    FS=(-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
        -virtfs local,path="$RW",mount_tag=rw,security_model=none,multidevs=remap)
fi
echo "HOST: accel=$ACCEL mode=$MODE mem=$MEM smp=$SMP cmdline: $APPEND"
T0=$EPOCHREALTIME
timeout "$TMO" qemu-system-x86_64 "${ACC[@]}" -m "$MEM" -smp "$SMP" -M q35 \
    -nographic -no-reboot -nic none -nodefaults -serial stdio -monitor none \
    -kernel "$P/vmlinuz" -initrd "$P/initramfs.cpio.gz" -append "$APPEND" "${FS[@]}" \
    </dev/null 2>&1 | while IFS= read -r l; do
        l=${l%$'\r'}
        printf '[%7.2f] %s\n' "$(echo "$EPOCHREALTIME $T0" | awk '{print $1-$2}')" "$l"
    done | tee "$P/last-run.log"
QRC=${PIPESTATUS[0]}
T1=$EPOCHREALTIME
echo "HOST: qemu exit=$QRC wall=$(echo "$T1 $T0" | awk '{printf "%.2f", $1-$2}') s" | tee -a "$P/last-run.log"
[ "$QRC" = 0 ] || exit "$QRC"
GRC=$(sed -n 's/.*GUEST_EXIT rc=\([0-9]*\).*/\1/p' "$P/last-run.log" | tail -n1)
exit "${GRC:-1}"
