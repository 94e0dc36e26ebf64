# Shared by build-test-guest.sh, build-test-guest-python.sh and
# build-machine-guest.sh (sourced): Debian packages for the QEMU test
# guests, from the system's configured archive through `apt-get download`
# (signatures checked by apt), and the stamps that make the builds
# idempotent.

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

# build_key PART…: what a build is made from, hashed: the building script,
# this file, $versions (from `candidates`) and each PART.
build_key() {
  { cat "$0" "$(dirname "$0")/guest-debs.sh"; printf '%s\n' "$versions" "$@"; } | sha256sum | cut -d' ' -f1
}

# up_to_date WHO STAMP KEY FILE…: true, saying so, when STAMP holds KEY and
# every FILE exists: the build has nothing to do.
up_to_date() {
  who=$1; stamp=$2; want=$3; shift 3
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] || return 1
  for f in "$@"; do [ -f "$f" ] || return 1; done
  echo "$who: up to date ($(dirname "$stamp"))"
}
