#!/bin/sh
# Builds the "python" image of the QEMU test guest: OUT_DIR/initrd-python.cpio
# is the base initramfs (OUT_DIR/initrd.cpio, from build-test-guest.sh)
# followed by a second archive holding CPython 3.11 and the `mcp` SDK, so
# that a real MCP server written with the official Python SDK runs in the
# guest (`sandbox vm --image python …`).
#
# CPython and the C libraries its modules load come from Debian's packages
# (`apt-get download`, signatures checked by apt, unpacked with `dpkg-deb
# -x`); `mcp` and its dependencies come from PyPI as wheels for CPython 3.11
# on x86_64 Linux, at the version named by MCP_VERSION. Nothing is
# downloaded from anywhere else. The standard library and the packages are
# compiled to bytecode here, with the guest's own interpreter, so that the
# guest (in software emulation) does not compile them on every start.
# Idempotent, keyed like build-test-guest.sh.
#
# Usage: scripts/build-test-guest-python.sh OUT_DIR [CACHE_DIR]
# Needs: what build-test-guest.sh needs, plus python3 with pip (for
# `pip download`) on the host.
set -eu

out=${1:?usage: build-test-guest-python.sh OUT_DIR [CACHE_DIR]}
cache=${2:-$out/.cache}
mcp_version=${MCP_VERSION:-2.3.0}
[ -f "$out/initrd.cpio" ] || { echo "build-test-guest-python: $out/initrd.cpio is missing: run scripts/build-test-guest.sh $out first" >&2; exit 1; }
mkdir -p "$cache/debs" "$cache/wheels"
out=$(cd "$out" && pwd)
cache=$(cd "$cache" && pwd)

# The interpreter, its standard library, and the libraries its extension
# modules link against (ssl/hashlib, ctypes, bz2, lzma, uuid).
pkgs="python3.11-minimal libpython3.11-minimal libpython3.11-stdlib zlib1g libexpat1 libffi8 libssl3 libbz2-1.0 liblzma5 libuuid1"
. "$(dirname "$0")/guest-debs.sh"
candidates build-test-guest-python $pkgs
key=$(build_key "$(sha256sum "$out/initrd.cpio" | cut -d' ' -f1)" "mcp==$mcp_version")
up_to_date build-test-guest-python "$out/stamp-python" "$key" "$out/initrd-python.cpio" && exit 0

download_debs "$cache/debs"

work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/usr" "$root/lib/x86_64-linux-gnu" "$work/x"
unpack_debs "$cache/debs" "$work/x" $pkgs
# Interpreter and standard library under /usr; every shared library into
# /lib/x86_64-linux-gnu, where the base image's loader already looks.
for p in python3.11-minimal libpython3.11-minimal libpython3.11-stdlib; do
  cp -a "$work/x/$p/usr/." "$root/usr/"
done
for p in $pkgs; do
  for d in "$work/x/$p/lib/x86_64-linux-gnu" "$work/x/$p/usr/lib/x86_64-linux-gnu"; do
    [ -d "$d" ] && find "$d" -maxdepth 1 -name '*.so*' -exec cp -a {} "$root/lib/x86_64-linux-gnu/" \;
  done
done
ln -sf python3.11 "$root/usr/bin/python3"
# Not needed to serve MCP: tests, GUI and old tooling.
for d in test idlelib tkinter turtledemo lib2to3 ensurepip pydoc_data; do
  rm -rf "$root/usr/lib/python3.11/$d"
done
rm -rf "$root/usr/share"

# The SDK and its dependencies: wheels only, for this interpreter.
site="$root/usr/lib/python3/dist-packages"
mkdir -p "$site"
python3 -m pip download --quiet --dest "$cache/wheels" --only-binary=:all: \
  --python-version 3.11 --implementation cp --abi cp311 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  "mcp==$mcp_version" >&2
python3 -m pip install --quiet --no-index --find-links "$cache/wheels" --target "$site" \
  --only-binary=:all: --no-compile \
  --python-version 3.11 --implementation cp --abi cp311 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  "mcp==$mcp_version" >&2
rm -rf "$site/bin"

# Bytecode, compiled by the guest's own interpreter (same magic number),
# with timestamps that the archive keeps.
LD_LIBRARY_PATH="$root/lib/x86_64-linux-gnu" PYTHONHOME="$root/usr" PYTHONDONTWRITEBYTECODE= \
  "$root/usr/bin/python3.11" -I -m compileall -q -j 2 -d /usr/lib/python3.11 "$root/usr/lib/python3.11" >/dev/null
LD_LIBRARY_PATH="$root/lib/x86_64-linux-gnu" PYTHONHOME="$root/usr" \
  "$root/usr/bin/python3.11" -I -m compileall -q -j 2 -d /usr/lib/python3/dist-packages "$site" >/dev/null

busybox=$(command -v busybox || true)
[ -n "$busybox" ] || { echo "build-test-guest-python: busybox (busybox-static) is needed to write the archive" >&2; exit 1; }
(cd "$root" && find . | "$busybox" cpio -o -H newc) > "$work/layer.cpio" 2>/dev/null
cat "$out/initrd.cpio" "$work/layer.cpio" > "$work/initrd-python.cpio"
mv "$work/initrd-python.cpio" "$out/initrd-python.cpio"
chmod 644 "$out/initrd-python.cpio"
echo "$key" > "$out/stamp-python"
echo "build-test-guest-python: built $out/initrd-python.cpio ($(du -m "$out/initrd-python.cpio" | cut -f1) MiB, mcp $mcp_version)"
