#!/bin/sh
# Builds the "machine" guest for the node's tests on real kernels unlike
# this host's (crates/oz0-node/tests/machines.rs): OUT_DIR/initrd-machine.cpio
# is the test guest's base initramfs (OUT_DIR/initrd.cpio, from
# build-test-guest.sh: busybox, the C library, the 9p modules) followed by a
# second archive holding what the node's checks and its black-box limit
# tests run: bubblewrap and its libraries, bash, coreutils' sleep, and a
# minimal CPython (`python3.11-minimal`: os, sys, time), plus an /init that
# mounts the host's test folder (9p tag `m`) at /m and runs /m/machine.sh
# as root.
# The kernel is the test guest's (Debian's linux-image-amd64).
#
# Everything comes from Debian's packages (`apt-get download`, signatures
# checked by apt, unpacked with `dpkg-deb -x`). Idempotent, keyed like
# build-test-guest.sh.
#
# Usage: scripts/build-machine-guest.sh OUT_DIR [CACHE_DIR]
set -eu

out=${1:?usage: build-machine-guest.sh OUT_DIR [CACHE_DIR]}
cache=${2:-$out/.cache}
[ -f "$out/initrd.cpio" ] || { echo "build-machine-guest: $out/initrd.cpio is missing: run scripts/build-test-guest.sh $out first" >&2; exit 1; }
mkdir -p "$cache/debs"
out=$(cd "$out" && pwd)
cache=$(cd "$cache" && pwd)

pkgs="busybox-static bubblewrap libcap2 libselinux1 libpcre2-8-0 bash libtinfo6 python3.11-minimal libpython3.11-minimal zlib1g libexpat1 coreutils"
. "$(dirname "$0")/guest-debs.sh"
candidates build-machine-guest $pkgs
key=$(build_key "$(sha256sum "$out/initrd.cpio" | cut -d' ' -f1)")
up_to_date build-machine-guest "$out/stamp-machine" "$key" "$out/initrd-machine.cpio" && exit 0
download_debs "$cache/debs"

work=$(mktemp -d "$cache/build-machine.XXXXXX")
trap 'rm -rf "$work"' EXIT
unpack_debs "$cache/debs" "$work/x" $pkgs
root="$work/root"
mkdir -p "$root/usr/bin" "$root/lib/x86_64-linux-gnu" "$root/m" "$root/home" "$root/etc"

cp "$work/x/bubblewrap/usr/bin/bwrap" "$root/usr/bin/bwrap"
cp "$work/x/bash/bin/bash" "$root/usr/bin/bash"
# A real `sleep` before busybox's on PATH: the limit tests name processes
# with `exec -a NAME sleep`, which a busybox applet cannot answer to.
cp "$work/x/coreutils/bin/sleep" "$root/usr/bin/sleep"
# The libraries, from each package's (merged-/usr or not) library folder.
for p in libcap2 libselinux1 libpcre2-8-0 libtinfo6 zlib1g libexpat1; do
  for d in "$work/x/$p/lib/x86_64-linux-gnu" "$work/x/$p/usr/lib/x86_64-linux-gnu"; do
    [ -d "$d" ] && find "$d" -maxdepth 1 -name '*.so.*' -exec cp -L {} "$root/lib/x86_64-linux-gnu/" \;
  done
done
# CPython: the interpreter and its minimal standard library.
cp -a "$work/x/python3.11-minimal/usr/." "$root/usr/"
cp -a "$work/x/libpython3.11-minimal/usr/." "$root/usr/"
ln -sf python3.11 "$root/usr/bin/python3"

cat > "$root/init" <<'EOF'
#!/bin/sh
# oz0 machine guest. A sandbox cannot pivot away from the initramfs
# (rootfs), as no real machine's root is: copy it into a tmpfs and
# switch_root there first.
mount -t proc proc /proc
if [ ! -e /.oz0-switched ]; then
  mkdir -p /newroot
  mount -t tmpfs -o mode=755 root /newroot
  for e in /*; do
    case "$e" in /proc|/sys|/dev|/newroot) continue;; esac
    cp -a "$e" /newroot/
  done
  mkdir -p /newroot/proc /newroot/sys /newroot/dev
  : > /newroot/.oz0-switched
  umount /proc
  exec switch_root /newroot /init
fi
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs -o mode=1777,nosuid,nodev tmp /tmp
for pass in 1 2; do
  while read -r m; do grep -q "^${m%.ko} " /proc/modules || insmod "/lib/modules/$m" 2>/dev/null; done < /etc/oz0-modules
done
ip link set lo up
# /bin is the base image's busybox folder: bash goes beside it.
ln -sf /usr/bin/bash /bin/bash
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none m /m || echo "oz0 machine: no /m" >&2
/bin/sh /m/machine.sh
echo "oz0-machine: done"
poweroff -f
EOF
chmod 755 "$root/init"

# The second archive, after the base (the kernel unpacks both, in order).
(cd "$root" && find . | "$work/x/busybox-static/bin/busybox" cpio -o -H newc) > "$work/extra.cpio" 2>/dev/null
cat "$out/initrd.cpio" "$work/extra.cpio" > "$work/initrd-machine.cpio"
mv "$work/initrd-machine.cpio" "$out/initrd-machine.cpio"
chmod 644 "$out/initrd-machine.cpio"
echo "$key" > "$out/stamp-machine"
echo "build-machine-guest: built $out/initrd-machine.cpio"
