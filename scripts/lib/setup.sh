# Sourced by scripts/test, scripts/demo and scripts/bench: installs what the
# project needs on a fresh machine, once, and exports where it is.
# Idempotent: a second call finds everything in place and does nothing.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache="$root/.cache"
mkdir -p "$cache"

# Debian's PostgreSQL: its binaries live in /usr/lib/postgresql/<v>/bin,
# which is not on PATH, so look there as well as on PATH.
pg_bindir() {
    local d
    if command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v postgres)")"
        return 0
    fi
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

ensure_postgres() {
    if ! pg_bindir >/dev/null; then
        echo "setup: installing Debian's postgresql (initdb not found)" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    fi
    ORCA_PG_BIN=$(pg_bindir) || { echo "setup: PostgreSQL's initdb is still missing" >&2; return 1; }
    export ORCA_PG_BIN
}

ensure_moto() {
    local venv="$cache/venv"
    if [ ! -x "$venv/bin/moto_server" ]; then
        echo "setup: creating $venv with moto[server]" >&2
        python3 -m venv "$venv" >&2
        "$venv/bin/pip" install -q 'moto[server]>=5,<6' >&2
    fi
    ORCA_MOTO_SERVER="$venv/bin/moto_server"
    export ORCA_MOTO_SERVER
}
