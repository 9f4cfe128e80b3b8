#!/bin/bash
# Build a small initramfs that boots Debian 12's 6.1 kernel under qemu with
# Soft-RoCE (rdma_rxe), adapted from the recipe in /work/shared/rxe-vm.
#   rxe.mode=probe: print GUEST_PROBE_OK and power off (accelerator probe)
#   rxe.mode=9p   : mount the host root read-only over virtio-9p (tag hostroot),
#                   put a tmpfs overlay on top, mount the host dir given by
#                   rxe.rw= read-write (tag rw) at the same path, chroot, and run
#                   rxe.cmd= (a host path) -> host-built binaries run in the guest.
# Host packages: qemu-system-x86 busybox-static cpio kmod ibverbs-utils
#   ibverbs-providers rdmacm-utils perftest iproute2 (ip, tc) tcpdump (+ linux-image-6.1.0-*-amd64
#   .deb, only downloaded with `apt-get download` and unpacked, never installed).
set -euo pipefail
P=${RXE_VM_DIR:-$PWD/rxe-vm-work}
mkdir -p "$P"; cd "$P"
# ---- kernel: download + unpack Debian's kernel package (does not touch host /boot)
if [ ! -d kernel/lib/modules ]; then
    KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    mkdir -p dl kernel
    (cd dl && apt-get download "$KPKG")
    dpkg-deb -x dl/"$KPKG"_*.deb kernel
fi
KV=$(ls kernel/lib/modules | sort -V | tail -n1)
cp -f kernel/boot/vmlinuz-"$KV" vmlinuz
depmod -b kernel "$KV"

R=$P/initramfs-root
rm -rf "$R"; mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,run,tmp,etc,mnt,newroot,lib/modules/"$KV"}
ln -s lib "$R"/lib64 2>/dev/null || true
cp /bin/busybox "$R"/bin/busybox
# Debian's busybox-static runs its own applets in preference to PATH (SH_STANDALONE),
# so busybox sh would run busybox's `ip` instead of iproute2's: use dash as /bin/sh.
cp /bin/dash "$R"/bin/dash; ln -s dash "$R"/bin/sh
ln -s /bin/busybox "$R"/sbin/modprobe   # kernel request_module() calls /sbin/modprobe

# ---- kernel modules: closure of what we need, via the modules' own deps
# vgem: a dma-buf exporter without a GPU (Debian's 6.1 builds no udmabuf), for locusd's
# buffer-region test
# sch_netem: loss, delay, reordering and duplication on the veth pair (guest-faults.sh)
# bridge: three nodes on one bridge (guest-bridge3.sh)
MODS="rdma_rxe rdma_ucm ib_uverbs ib_umad veth dummy overlay 9p 9pnet_virtio virtio_pci \
      crc32_generic crc32-pclmul crc32c_generic crc32c-intel vgem sch_netem bridge"
for m in $MODS; do
    modprobe -d kernel -S "$KV" --show-depends "$m" | awk '/^insmod/{print $2}'
done | sort -u | while read -r f; do
    rel=${f#"$P"/kernel/}
    mkdir -p "$R/$(dirname "$rel")"; cp "$f" "$R/$rel"
done
cp kernel/lib/modules/"$KV"/modules.{builtin,builtin.modinfo,order} "$R"/lib/modules/"$KV"/
depmod -b "$R" "$KV"

# ---- userspace for the self-contained mode (real iproute2 + rdma-core tools)
BINS="ip tc rdma ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong
      ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat
      rping ucmatose rdma_server rdma_client udaddy tcpdump"
copy_with_libs() { # file
    local f=$1
    mkdir -p "$R/$(dirname "$f")"; cp -L "$f" "$R/$f"
    ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | while read -r l; do
        [ -e "$R/$l" ] || { mkdir -p "$R/$(dirname "$l")"; cp -L "$l" "$R/$l"; }
    done
}
for b in $BINS; do
    p=$(command -v "$b" || true); [ -n "$p" ] || { echo "missing $b" >&2; continue; }
    copy_with_libs "$p"
done
ML=/usr/lib/x86_64-linux-gnu
copy_with_libs $ML/libibverbs/librxe-rdmav34.so
copy_with_libs $ML/libgcc_s.so.1      # glibc dlopens it for pthread_exit/cancel (rping aborts without)
# coreutils timeout: busybox's applets exec other applets in preference to PATH
copy_with_libs /usr/bin/timeout
# librdmacm looks for rsocket preload etc. only optionally; ibverbs needs the .driver file
mkdir -p "$R"/etc/libibverbs.d; cp /etc/libibverbs.d/rxe.driver "$R"/etc/libibverbs.d/
mkdir -p "$R"/usr/share/misc; [ -e /usr/share/misc/pci.ids ] && cp /usr/share/misc/pci.ids "$R"/usr/share/misc/ || true
echo "root:x:0:0:root:/root:/bin/sh" > "$R"/etc/passwd

cat > "$R"/init <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs shm /dev/shm
echo "GUEST_INIT uptime=$(cut -d' ' -f1 /proc/uptime)"
for a in $(cat /proc/cmdline); do case $a in rxe.*=*) k=${a%%=*}; k=${k#rxe.}; eval "RXE_$k=\${a#*=}";; esac; done
MODE=${RXE_mode:-full}
[ "$MODE" = probe ] && { echo GUEST_PROBE_OK; poweroff -f; }
for m in crc32_generic crc32-pclmul rdma_rxe rdma_ucm veth "dummy numdummies=0" vgem sch_netem bridge; do modprobe $m || echo "modprobe $m failed"; done
echo "GUEST_MODULES_LOADED uptime=$(cut -d' ' -f1 /proc/uptime)"
rc=1
if [ "$MODE" = 9p ]; then
    for m in virtio_pci 9pnet_virtio 9p overlay; do modprobe $m || echo "modprobe $m failed"; done
    mkdir -p /lower /ovl
    if mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower; then
        mount -t tmpfs -o size=512m ovl /ovl; mkdir -p /ovl/up /ovl/work
        if ! mount -t overlay -o lowerdir=/lower,upperdir=/ovl/up,workdir=/ovl/work ovl /newroot; then
            echo "overlay failed; using read-only 9p root + tmpfs /tmp,/run"
            mount --bind /lower /newroot; mount -t tmpfs tmp /newroot/tmp
        fi
        mount -t proc proc /newroot/proc; mount -t sysfs sys /newroot/sys
        mount --bind /dev /newroot/dev; mount --bind /dev/pts /newroot/dev/pts
        mount -t tmpfs run /newroot/run
        if [ -n "${RXE_rw:-}" ]; then
            mkdir -p /newroot"$RXE_rw" 2>/dev/null
            mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 rw /newroot"$RXE_rw" || echo "rw mount failed"
        fi
        echo "GUEST_9P_MOUNTED uptime=$(cut -d' ' -f1 /proc/uptime)"
        chroot /newroot /bin/sh -c "cd ${RXE_rw:-/}; exec /bin/sh ${RXE_cmd:-/guest-tests.sh}"
        rc=$?
        sync
    else
        echo "9p mount of hostroot failed"
    fi
else
    echo "only rxe.mode=9p runs tests in this harness"
fi
echo "GUEST_EXIT rc=$rc uptime=$(cut -d' ' -f1 /proc/uptime)"
poweroff -f
EOF
chmod +x "$R"/init
(cd "$R" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$P"/initramfs.cpio.gz
echo "kernel: $P/vmlinuz ($KV)"; ls -la "$P"/initramfs.cpio.gz; du -sh "$R"
