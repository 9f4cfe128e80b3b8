# Sourced by the host wrappers (verbs-vm-test.sh, locusd-vm-test.sh) from the
# repository root with BUILD set: the guest kernel and initramfs under
# $RXE_VM_DIR (default $BUILD/rxe-vm), built when missing or older than
# build-initramfs.sh, and the guest's read-write folder.
export RXE_VM_DIR=${RXE_VM_DIR:-$BUILD/rxe-vm}
mkdir -p "$RXE_VM_DIR/rw"
if [ ! -e "$RXE_VM_DIR/vmlinuz" ] || [ ! -e "$RXE_VM_DIR/initramfs.cpio.gz" ] ||
   [ tests/vm/build-initramfs.sh -nt "$RXE_VM_DIR/initramfs.cpio.gz" ]; then
	bash tests/vm/build-initramfs.sh > "$RXE_VM_DIR/initramfs.log" 2>&1 ||
		{ cat "$RXE_VM_DIR/initramfs.log"; echo "initramfs build failed"; exit 1; }
fi
