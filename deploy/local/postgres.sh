#!/usr/bin/env bash
# deploy/local/postgres.sh — make sure PostgreSQL answers on
# ${CHIME_PG_HOST:-127.0.0.1}:${CHIME_PG_PORT:-5432} for Chime's demo and test
# suite, then print the database URL they use (the only output on stdout).
#
# Owns: detecting a running server (used as-is: roles, auth and config are
# never touched), otherwise installing the Debian `postgresql` package,
# creating the `main` cluster if none exists, starting it without systemd
# (`pg_ctlcluster --skip-systemctl-redirect`), and — only for a cluster this
# script installed or created — setting the `postgres` role's password to
# `postgres` so password (scram) auth over TCP works. Idempotent.
#
# Env: CHIME_PG_HOST, CHIME_PG_PORT.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

PG_HOST=${CHIME_PG_HOST:-127.0.0.1}
PG_PORT=${CHIME_PG_PORT:-5432}
START_TIMEOUT=60
DB_URL="postgres://postgres:postgres@${PG_HOST}:${PG_PORT}/postgres"

# highest VERSION... read from stdin, one per line (version order, not text).
highest() {
    sort -V | tail -n 1
}

# cluster_version — newest PostgreSQL version that has a `main` cluster.
cluster_version() {
    local conf
    for conf in /etc/postgresql/*/main/postgresql.conf; do
        [[ -e "$conf" ]] || continue
        conf=${conf#/etc/postgresql/}
        printf '%s\n' "${conf%%/*}"
    done | highest
}

# server_version — newest installed PostgreSQL server version.
server_version() {
    local bin
    for bin in /usr/lib/postgresql/*/bin/postgres; do
        [[ -x "$bin" ]] || continue
        bin=${bin#/usr/lib/postgresql/}
        printf '%s\n' "${bin%%/*}"
    done | highest
}

# start_cluster VERSION — start VERSION/main without relying on systemd.
start_cluster() {
    local ver=$1 svc
    log "starting PostgreSQL: pg_ctlcluster --skip-systemctl-redirect ${ver} main start"
    if run_detached as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start; then
        return 0
    fi
    log "pg_ctlcluster failed; trying the service manager"
    if svc=$(find_cmd service) && run_detached as_root "$svc" postgresql start; then
        return 0
    fi
    if have_systemd && run_detached as_root systemctl start "postgresql@${ver}-main"; then
        return 0
    fi
    die "could not start PostgreSQL ${ver}/main; see /var/log/postgresql/postgresql-${ver}-main.log"
}

# report_url — print the URL on stdout and check (read-only) that it logs in.
report_url() {
    local psql
    log "database URL for the Chime demo and tests:"
    printf '%s\n' "$DB_URL"
    if psql=$(find_cmd psql) &&
        PGCONNECT_TIMEOUT=5 timeout 15 "$psql" "$DB_URL" -XAtq -c 'SELECT 1' >/dev/null 2>&1; then
        log "verified: the URL logs in"
    elif [[ -n "${psql:-}" ]]; then
        log "warning: could not log in with that URL; give the postgres role the password 'postgres'"
        log "         (or trust auth), or point the tests at another database"
    fi
}

main() {
    local installed=0 created=0 ver cluster_port

    if port_open "$PG_HOST" "$PG_PORT"; then
        log "PostgreSQL already answers on ${PG_HOST}:${PG_PORT}; using the running server (roles and auth left unchanged)"
        report_url
        return 0
    fi

    is_local_host "$PG_HOST" ||
        die "nothing answers on ${PG_HOST}:${PG_PORT}, which is not this machine; start that server or point CHIME_PG_HOST/CHIME_PG_PORT elsewhere"

    log "nothing answers on ${PG_HOST}:${PG_PORT}; bringing up a local PostgreSQL"
    if ! find_cmd pg_ctlcluster >/dev/null || [[ -z "$(server_version)" ]]; then
        # The package's postinst also creates (and may start) a `main` cluster.
        apt_install postgresql
        installed=1
    fi

    ver=$(cluster_version)
    if [[ -z "$ver" ]]; then
        ver=$(server_version)
        [[ -n "$ver" ]] || die "no PostgreSQL server found under /usr/lib/postgresql after installation"
        log "creating cluster ${ver}/main on port ${PG_PORT}"
        as_root pg_createcluster --port "$PG_PORT" "$ver" main >&2
        created=1
    fi

    cluster_port=$(pg_conftool -s "$ver" main show port 2>/dev/null || true)
    if [[ -n "$cluster_port" && "$cluster_port" != "$PG_PORT" ]]; then
        die "cluster ${ver}/main is configured for port ${cluster_port}, not ${PG_PORT}; export CHIME_PG_PORT=${cluster_port} (this script does not change the cluster's config)"
    fi

    # `status` exits 0 when the cluster runs (the postinst may have started it).
    if as_root pg_ctlcluster "$ver" main status >/dev/null 2>&1; then
        log "cluster ${ver}/main is already running (still starting?); not starting it again"
    else
        start_cluster "$ver"
    fi

    wait_for_port "$PG_HOST" "$PG_PORT" "$START_TIMEOUT" "PostgreSQL" ||
        die "PostgreSQL did not come up; see /var/log/postgresql/postgresql-${ver}-main.log"
    if find_cmd pg_isready >/dev/null; then
        pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -t "$START_TIMEOUT" ||
            die "PostgreSQL listens but does not accept connections; see /var/log/postgresql/postgresql-${ver}-main.log"
    fi

    if ((installed || created)); then
        # Fresh cluster: Debian's pg_hba.conf uses scram over TCP, and the
        # postgres role has no password yet. Connect over the Unix socket
        # (peer auth) as the postgres OS user to set one.
        log "setting the postgres role's password to 'postgres' (fresh cluster created by this script)"
        (cd / && as_user postgres psql -X -q -v ON_ERROR_STOP=1 -p "$PG_PORT" -d postgres \
            -c "ALTER USER postgres PASSWORD 'postgres'") >&2 ||
            die "could not set the postgres role's password"
    fi

    log "PostgreSQL ${ver}/main is up on ${PG_HOST}:${PG_PORT}"
    report_url
}

main "$@"
