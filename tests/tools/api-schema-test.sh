#!/usr/bin/env bash
# tests/tools/api-schema-test.sh — property-based API test driven by the OpenAPI document.
#
# Starts a real chimed (SQLite store in a temporary directory, a RabbitMQ vhost of its own,
# a bootstrap admin token) and runs schemathesis against GET /v1/openapi.json with that
# token: every phase (examples, coverage, fuzzing, and the stateful phase that follows the
# document's links: create -> read/update/pause/trigger -> runs/run -> delete) and every
# check (no 5xx; status codes, content types, headers and bodies as documented; invalid
# input refused; a deleted job gone), less the few tests/tools/api-schema-test.toml turns
# off with its reasons. Bounded by --max-time, a few minutes in all.
#
# schemathesis comes from PyPI, pinned, into a virtual environment made once in
# target/schemathesis-venv (like consumer-py/scripts/test.sh's).
#
# Usage: tests/tools/api-schema-test.sh [extra schemathesis arguments]
# Env:   PYTHON                    interpreter for the venv (default python3)
#        CHIME_RABBITMQCTL         command to manage vhosts (default rabbitmqctl)
#        CHIME_API_SCHEMA_MAX_TIME seconds schemathesis may spend (default 150)
#        CHIME_AMQP_HOST           broker host:port (default 127.0.0.1:5672)
#        CHIME_API_SCHEMA_SEED     the generator's seed (default 20261128, so a run is
#                                  repeatable and CI judges the code, not the draw);
#                                  `random` explores new inputs on every run
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
SCHEMATHESIS_VERSION=4.32.5
VENV="$ROOT/target/schemathesis-venv"
PYTHON=${PYTHON:-python3}
read -r -a RABBITMQCTL <<<"${CHIME_RABBITMQCTL:-rabbitmqctl}"
MAX_TIME=${CHIME_API_SCHEMA_MAX_TIME:-150}
SEED=${CHIME_API_SCHEMA_SEED:-20261128}
seed_args=()
[[ "$SEED" == random ]] || seed_args=(--seed "$SEED")

log() { printf '[api-schema] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- schemathesis --------------------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV"
    mkdir -p "$(dirname -- "$VENV")"
    "$PYTHON" -m venv "$VENV" || die "'$PYTHON -m venv' failed (on Debian: apt-get install python3-venv)"
fi
if [[ "$("$VENV/bin/python" -m pip show schemathesis 2>/dev/null | sed -n 's/^Version: //p')" != "$SCHEMATHESIS_VERSION" ]]; then
    log "installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

# --- chimed ----------------------------------------------------------------------------
log "building chimed"
(cd "$ROOT" && cargo build --quiet -p chime-scheduler --bin chimed)

work=$(mktemp -d -t chime-api-schema.XXXXXX)
vhost="chime-api-schema-$$-$RANDOM"
chimed_pid=
cleanup() {
    local status=$?
    if [[ -n "$chimed_pid" ]]; then
        kill "$chimed_pid" 2>/dev/null || true
        wait "$chimed_pid" 2>/dev/null || true
    fi
    if [[ $status -ne 0 && -f "$work/chimed.log" ]]; then
        log "chimed's log (last 80 lines):"
        tail -n 80 "$work/chimed.log" >&2 || true
    fi
    "${RABBITMQCTL[@]}" delete_vhost "$vhost" >/dev/null 2>&1 || true
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT

"${RABBITMQCTL[@]}" add_vhost "$vhost" >/dev/null ||
    die "cannot add a RabbitMQ vhost (start it with deploy/local/rabbitmq.sh; CHIME_RABBITMQCTL='sudo rabbitmqctl' if needed)"
"${RABBITMQCTL[@]}" set_permissions -p "$vhost" guest '.*' '.*' '.*' >/dev/null

token="chime_api_schema_$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
(umask 077 && printf '%s' "$token" >"$work/admin.token")
port=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"

log "starting chimed on $base (vhost $vhost)"
CHIME_DATABASE_URL="sqlite://$work/chime.db" \
    CHIME_AMQP_URL="amqp://guest:guest@${CHIME_AMQP_HOST:-127.0.0.1:5672}/$vhost" \
    CHIME_HTTP_ADDR="127.0.0.1:$port" \
    CHIME_ADMIN_TOKEN_FILE="$work/admin.token" \
    CHIME_LOG=info \
    "$ROOT/target/debug/chimed" >"$work/chimed.log" 2>&1 &
chimed_pid=$!
for _ in $(seq 1 120); do
    if "$VENV/bin/python" - "$base/readyz" <<'EOF' 2>/dev/null; then break; fi
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
EOF
    kill -0 "$chimed_pid" 2>/dev/null || die "chimed exited"
    sleep 0.5
done
kill -0 "$chimed_pid" 2>/dev/null || die "chimed exited"

# --- the test ----------------------------------------------------------------------------
# Every check runs (schemathesis' default) but those tests/tools/api-schema-test.toml turns
# off, with its reasons. (A --checks option would override that file.)
log "running schemathesis $SCHEMATHESIS_VERSION (at most ${MAX_TIME}s, seed $SEED)"
cd "$work"
"$VENV/bin/schemathesis" --config-file "$ROOT/tests/tools/api-schema-test.toml" \
    run "$base/v1/openapi.json" \
    --header "Authorization: Bearer $token" \
    --phases examples,coverage,fuzzing,stateful \
    --workers 1 \
    --max-examples 30 \
    --max-time "$MAX_TIME" \
    --request-timeout 20 \
    --suppress-health-check too_slow,filter_too_much \
    --report junit --report-dir "$work/report" \
    --output-truncate true \
    "${seed_args[@]}" \
    "$@"
log "passed"
