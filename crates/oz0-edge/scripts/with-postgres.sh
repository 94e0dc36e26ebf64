#!/usr/bin/env bash
# Runs a command with a throwaway PostgreSQL 15 cluster (OZ0_PG_SHARED=1:
# reachable by other local users too):
#
#   crates/oz0-edge/scripts/with-postgres.sh cargo test -p oz0-edge
#
# The cluster lives in a temporary folder, listens on a unix socket there and
# on no TCP port, trusts only local connections, runs as an unprivileged user
# (as root: the `postgres` user the Debian package makes, or $OZ0_PG_USER),
# and is stopped and removed when the command ends. The command gets
# OZ0_EDGE_TEST_POSTGRES=postgres://… and the command's exit status is ours.
#
# Needs Debian's `postgresql` package (PostgreSQL 15: initdb and pg_ctl from
# /usr/lib/postgresql/15/bin, or $PG_BIN).
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARG]..." >&2
    exit 2
fi

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
if [ ! -x "$PG_BIN/initdb" ]; then
    echo "with-postgres: no $PG_BIN/initdb: apt-get install -y postgresql (PostgreSQL 15), or set PG_BIN" >&2
    exit 2
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/oz0-pg.XXXXXX")
as_user=()
db_user=$(id -un)
if [ "$(id -u)" -eq 0 ]; then
    db_user=${OZ0_PG_USER:-postgres}
    if ! id "$db_user" >/dev/null 2>&1; then
        echo "with-postgres: running as root and there is no user $db_user to run PostgreSQL as: install the postgresql package or set OZ0_PG_USER" >&2
        rm -rf "$dir"
        exit 2
    fi
    chown "$db_user" "$dir"
    as_user=(runuser -u "$db_user" --)
fi
chmod 700 "$dir"
# OZ0_PG_SHARED=1: other local users (the unprivileged test user of the
# black-box tests) may reach the socket; the folder stays unlistable.
if [ "${OZ0_PG_SHARED:-}" = 1 ]; then chmod 711 "$dir"; fi
port=$((50000 + RANDOM % 10000))

cleanup() {
    "${as_user[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

"${as_user[@]}" "$PG_BIN/initdb" -D "$dir/data" -U "$db_user" --auth=trust --encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
"${as_user[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses='' -c unix_socket_directories='$dir' -p $port -c fsync=off -c max_connections=200" start >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }

export OZ0_EDGE_TEST_POSTGRES="postgres://$db_user@localhost/postgres?host=$dir&port=$port"
echo "with-postgres: PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on $dir/.s.PGSQL.$port" >&2
set +e
"$@"
status=$?
set -e
exit "$status"
