#!/bin/sh
# Builds the QEMU test guest for oz0-microvm's test backend
# (OZ0_MICROVM_TEST_BACKEND=qemu-tcg) into OUT_DIR:
#   OUT_DIR/vmlinuz      Debian's kernel (linux-image-amd64's current image)
#   OUT_DIR/initrd.cpio  busybox (busybox-static), the virtio-serial and 9p
#                        modules, the dynamic loader and C library (libc6,
#                        libgcc-s1) the node binary needs, and /init
#
# Everything comes from Debian's packages through `apt-get download` (the
# system's configured archive, signatures checked by apt) and `dpkg-deb -x`;
# nothing is downloaded from anywhere else. Idempotent: the result is keyed
# by the packages' versions and this script's content, and CACHE_DIR keeps
# the downloaded packages.
#
# Usage: scripts/build-test-guest.sh OUT_DIR [CACHE_DIR]
# Needs: apt-get, apt-cache, dpkg-deb, sha256sum (and xz when the kernel's
# modules are compressed). Runs as any user (apt-get download needs no root).
set -eu

out=${1:?usage: build-test-guest.sh OUT_DIR [CACHE_DIR]}
cache=${2:-$out/.cache}
mkdir -p "$out" "$cache/debs"
out=$(cd "$out" && pwd)
cache=$(cd "$cache" && pwd)

# The kernel package linux-image-amd64 depends on (e.g. linux-image-6.1.0-57-amd64).
kpkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n1)
[ -n "$kpkg" ] || { echo "build-test-guest: no linux-image-*-amd64 candidate (run apt-get update)" >&2; exit 1; }
pkgs="$kpkg busybox-static libc6 libgcc-s1"

. "$(dirname "$0")/guest-debs.sh"
candidates build-test-guest $pkgs
key=$(build_key)
up_to_date build-test-guest "$out/stamp" "$key" "$out/vmlinuz" "$out/initrd.cpio" && exit 0

download_debs "$cache/debs"

work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
unpack_debs "$cache/debs" "$work/x" $pkgs

k="$work/x/$kpkg"
kver=$(ls "$k/lib/modules" | head -n1)
mods="$k/lib/modules/$kver"
root="$work/root"
mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/work" "$root/oz0" \
         "$root/lib/modules" "$root/lib/x86_64-linux-gnu" "$root/lib64" "$root/etc"

# busybox and its applets.
cp "$work/x/busybox-static/bin/busybox" "$root/bin/busybox"
for a in $("$root/bin/busybox" --list); do
  [ "$a" = busybox ] || ln -sf busybox "$root/bin/$a"
done
ln -s bin "$root/sbin"

# The C library the node binary links against.
libc="$work/x/libc6/lib/x86_64-linux-gnu"
[ -d "$libc" ] || libc="$work/x/libc6/usr/lib/x86_64-linux-gnu"
for f in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1; do
  cp -L "$libc/$f" "$root/lib/x86_64-linux-gnu/$f"
done
gcc="$work/x/libgcc-s1/lib/x86_64-linux-gnu"
[ -d "$gcc" ] || gcc="$work/x/libgcc-s1/usr/lib/x86_64-linux-gnu"
cp -L "$gcc/libgcc_s.so.1" "$root/lib/x86_64-linux-gnu/"
ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/lib64/ld-linux-x86-64.so.2"

# The modules for virtio-serial and 9p, with their dependencies (read from
# each module's own `depends=` field: the package ships no modules.dep), in
# load order; modules built into the kernel are skipped.
want="virtio_pci virtio_console 9pnet_virtio 9p"
order=""
modfile() { # module name -> path of its file, or nothing when built in
  n=$(echo "$1" | tr - _)
  find "$mods/kernel" -name "$n.ko*" -o -name "$(echo "$n" | tr _ -).ko*" | head -n1
}
moddeps() { # module file -> its dependencies' names
  case "$1" in
    *.xz) xz -dc "$1";; *.zst) zstd -dcq "$1";; *) cat "$1";;
  esac | tr '\0' '\n' | sed -n 's/^depends=//p' | tr , ' '
}
add() { # recursive: no variable survives the inner calls but "$1"
  [ -n "$(modfile "$1")" ] || return 0
  case " $order " in *" $(modfile "$1") "*) return 0;; esac
  for d in $(moddeps "$(modfile "$1")"); do add "$d"; done
  case " $order " in *" $(modfile "$1") "*) return 0;; esac
  order="$order $(modfile "$1")"
}
for m in $want; do
  if [ -z "$(modfile "$m")" ] && ! grep -q "/$m.ko" "$mods/modules.builtin"; then
    echo "build-test-guest: module $m not found in $kpkg" >&2; exit 1
  fi
  add "$m"
done
: > "$root/etc/oz0-modules"
for f in $order; do
  name=$(basename "$f")
  case "$name" in
    *.ko.xz) xz -dc "$f" > "$root/lib/modules/${name%.xz}"; name=${name%.xz};;
    *.ko.zst) zstd -dcq "$f" > "$root/lib/modules/${name%.zst}"; name=${name%.zst};;
    *) cp "$f" "$root/lib/modules/$name";;
  esac
  echo "$name" >> "$root/etc/oz0-modules"
done

cat > "$root/init" <<'EOF'
#!/bin/sh
# oz0 test guest: mount what the guest agent needs, then become it.
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs -o mode=1777,nosuid,nodev tmp /tmp
# Two passes: a module whose dependency came later in the list loads in the second.
for pass in 1 2; do
  while read -r m; do grep -q "^${m%.ko} " /proc/modules || insmod "/lib/modules/$m" 2>/dev/null; done < /etc/oz0-modules
done
ip link set lo up
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none work /work || echo "oz0 guest: no /work" >&2
mount -t 9p -o trans=virtio,version=9p2000.L,ro,nodev,nosuid oz0 /oz0 || echo "oz0 guest: no /oz0" >&2
exec /oz0/oz0-node __oz0-vm-guest
EOF
chmod 755 "$root/init"

(cd "$root" && find . | "$work/x/busybox-static/bin/busybox" cpio -o -H newc) > "$work/initrd.cpio" 2>/dev/null
cp "$k/boot/vmlinuz-$kver" "$work/vmlinuz"
# The uncompressed kernel boots several seconds faster in software
# emulation (no decompressor to emulate): the bzImage's xz payload.
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$work/vmlinuz" | head -n1 | cut -d: -f1)
if [ -n "$off" ]; then
  tail -c +$((off + 1)) "$work/vmlinuz" | xz -dcq > "$work/vmlinux" 2>/dev/null || true
  if [ "$(head -c4 "$work/vmlinux" | od -An -c | tr -d ' ')" = "177ELF" ]; then
    mv "$work/vmlinux" "$out/vmlinux"; chmod 644 "$out/vmlinux"
  fi
fi
mv "$work/initrd.cpio" "$out/initrd.cpio"
mv "$work/vmlinuz" "$out/vmlinuz"
chmod 644 "$out/initrd.cpio" "$out/vmlinuz"
echo "$key" > "$out/stamp"
echo "build-test-guest: built $out (kernel $kver, modules:$(tr '\n' ' ' < "$root/etc/oz0-modules"))"
