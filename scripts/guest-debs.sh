# Shared by build-test-guest.sh and build-test-guest-python.sh (sourced):
# Debian packages for the QEMU test guest, from the system's configured
# archive through `apt-get download` (signatures checked by apt).

# candidates WHO PKG…: sets $versions to "pkg=version …" (the candidates),
# or stops naming the package without one.
candidates() {
  who=$1; shift
  versions=""
  for p in "$@"; do
    v=$(apt-cache policy "$p" | sed -n 's/^ *Candidate: //p')
    [ -n "$v" ] && [ "$v" != "(none)" ] || { echo "$who: no candidate for $p (run apt-get update)" >&2; exit 1; }
    versions="$versions $p=$v"
  done
}

# download_debs CACHE_DEBS: fetches each of $versions not already in the
# folder (an older version of it is replaced).
download_debs() {
  ( cd "$1"
    for pv in $versions; do
      p=${pv%%=*}
      if [ -z "$(ls "$1/${p}_$(echo "${pv#*=}" | sed 's/:/%3a/')_"*.deb 2>/dev/null)" ]; then
        rm -f "$1/${p}_"*.deb
        apt-get download "$pv" >&2
      fi
    done )
}

# unpack_debs CACHE_DEBS DEST PKG…: unpacks each package into DEST/PKG.
unpack_debs() {
  debs=$1; dest=$2; shift 2
  for p in "$@"; do
    mkdir -p "$dest/$p"
    dpkg-deb -x "$debs/${p}_"*.deb "$dest/$p"
  done
}

