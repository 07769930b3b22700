#!/usr/bin/env bash
# A throwaway local PostgreSQL server for the store tests (CI and developers alike).
#
#   eval "$(.ci/postgres.sh start)"   # installs the server if missing, starts it, exports CG_TEST_POSTGRES_DSN
#   .ci/postgres.sh stop              # stops it and deletes its data directory
#   .ci/postgres.sh status            # prints the DSN when it is running
#
# or, in a bash script:  source .ci/postgres.sh && cg_postgres_start && trap cg_postgres_stop EXIT
#
# The server listens on 127.0.0.1 only, on a free port, with a random password; its data
# directory lives under /tmp (CG_POSTGRES_DIR, default /tmp/cg-postgres) and belongs to the
# user that runs it: the `postgres` OS user when this script runs as root (PostgreSQL refuses
# to run as root), otherwise the caller.  `start` is idempotent: a running server is reused.
# Everything the script logs goes to stderr; stdout carries only the `export` line.

CG_POSTGRES_DIR="${CG_POSTGRES_DIR:-/tmp/cg-postgres}"
CG_POSTGRES_DB="${CG_POSTGRES_DB:-cg_test}"

_cg_log() { echo "postgres.sh: $*" >&2; }

_cg_bindir() {
    local dir
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir 2>/dev/null)/initdb" ]; then
        pg_config --bindir
        return
    fi
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ]; then
            echo "$dir"
            return
        fi
    done
    return 1
}

_cg_install() {
    _cg_bindir >/dev/null && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        _cg_log "no PostgreSQL server found; install it (Debian/Ubuntu: apt-get install postgresql) and retry"
        return 1
    fi
    _cg_log "installing the PostgreSQL server (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends postgresql >&2
    # the package may start a cluster of its own; this script does not use it
}

_cg_owner() {
    if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi
}

# Run a command as the server's owner.
_cg_as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

_cg_free_port() {
    python3 - <<'PY'
import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
PY
}

_cg_dsn() {
    echo "postgresql://cg:$(cat "$CG_POSTGRES_DIR/password")@127.0.0.1:$(cat "$CG_POSTGRES_DIR/port")/$CG_POSTGRES_DB"
}

_cg_running() {
    local bin
    bin="$(_cg_bindir)" || return 1
    [ -f "$CG_POSTGRES_DIR/port" ] && [ -d "$CG_POSTGRES_DIR/data" ] \
        && _cg_as_owner "$bin/pg_ctl" -D "$CG_POSTGRES_DIR/data" status >/dev/null 2>&1
}

cg_postgres_start() {
    local bin owner port password
    _cg_install || return 1
    bin="$(_cg_bindir)"
    if _cg_running; then
        _cg_log "reusing the server in $CG_POSTGRES_DIR"
        export CG_TEST_POSTGRES_DSN="$(_cg_dsn)"
        return 0
    fi
    owner="$(_cg_owner)"
    rm -rf "$CG_POSTGRES_DIR"
    mkdir -p "$CG_POSTGRES_DIR"
    chmod 700 "$CG_POSTGRES_DIR"
    port="$(_cg_free_port)"
    password="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
    echo "$port" >"$CG_POSTGRES_DIR/port"
    (umask 077 && echo "$password" >"$CG_POSTGRES_DIR/password")
    chown -R "$owner" "$CG_POSTGRES_DIR"
    _cg_log "initdb $CG_POSTGRES_DIR/data (owner $owner, port $port, $bin)"
    _cg_as_owner "$bin/initdb" -D "$CG_POSTGRES_DIR/data" -U cg --pwfile="$CG_POSTGRES_DIR/password" \
        --auth=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$CG_POSTGRES_DIR/initdb.log" 2>&1 || {
        cat "$CG_POSTGRES_DIR/initdb.log" >&2
        return 1
    }
    # loopback only; the socket lives in the data directory, not /var/run
    _cg_as_owner "$bin/pg_ctl" -D "$CG_POSTGRES_DIR/data" -l "$CG_POSTGRES_DIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $CG_POSTGRES_DIR/data -c max_connections=200" start >&2 || {
        cat "$CG_POSTGRES_DIR/server.log" >&2
        return 1
    }
    _cg_as_owner env PGPASSWORD="$password" \
        "$bin/createdb" -h 127.0.0.1 -p "$port" -U cg "$CG_POSTGRES_DB" || return 1
    export CG_TEST_POSTGRES_DSN="$(_cg_dsn)"
    _cg_log "running: CG_TEST_POSTGRES_DSN=$CG_TEST_POSTGRES_DSN"
}

cg_postgres_stop() {
    local bin
    if bin="$(_cg_bindir)" && [ -d "$CG_POSTGRES_DIR/data" ]; then
        _cg_as_owner "$bin/pg_ctl" -D "$CG_POSTGRES_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$CG_POSTGRES_DIR"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    case "${1:-start}" in
        start)
            cg_postgres_start
            echo "export CG_TEST_POSTGRES_DSN='$CG_TEST_POSTGRES_DSN'"
            ;;
        stop) cg_postgres_stop ;;
        status)
            if _cg_running; then _cg_dsn; else
                echo "not running" >&2
                exit 1
            fi
            ;;
        *)
            echo "usage: $0 [start|stop|status]" >&2
            exit 2
            ;;
    esac
fi
