#!/usr/bin/env bash
# deploy/local/test.sh — the README's test command (and what CI runs).
#
# Owns the test run: makes sure RabbitMQ and PostgreSQL run (rabbitmq.sh, postgres.sh),
# builds the workspace, and runs the whole test suite — unit tests, the store suite on
# SQLite and PostgreSQL, and the end-to-end scenarios against real processes — then the
# Python consumer package's tests (consumer-py/scripts/test.sh: a virtual environment
# in consumer-py/.venv, dependencies from PyPI, pytest against the same services), and
# the property-based API test driven by the OpenAPI document (tests/tools/api-schema-test.sh:
# schemathesis from PyPI against a live chimed).
# Installs promtool (Debian package prometheus) when missing, for the rule checks, and
# Chromium with chromium-driver for the console's browser tests.
#
# Usage: deploy/local/test.sh [extra cargo test arguments, e.g. -- restart]
# Env:   CHIME_TEST_POSTGRES_URL  server the tests create databases on
#                                 (default: the URL postgres.sh prints)
#        CHIME_TEST_THREADS       parallel tests per binary (default 4)
#        CHIME_RABBITMQCTL        command to manage vhosts (default rabbitmqctl)
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

"$SCRIPT_DIR/rabbitmq.sh"
pg_url=$("$SCRIPT_DIR/postgres.sh")
export CHIME_TEST_POSTGRES_URL=${CHIME_TEST_POSTGRES_URL:-$pg_url}
# postgres.sh printed its label on stderr and the URL on stdout, which went to pg_url.
log "the tests create their databases on $(printf '%s' "$CHIME_TEST_POSTGRES_URL" | sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#')"

# promtool (Debian's prometheus package) checks the alert rules, the Grafana dashboard's
# queries and the Compose stack's prometheus.yml (scheduler/tests/alert_rules.rs). Only
# promtool is used; on a host with systemd the package also starts its own prometheus
# service (port 9090): `systemctl disable --now prometheus` if you do not want it.
if ! command -v promtool >/dev/null 2>&1; then
    apt_install prometheus
fi
command -v promtool >/dev/null 2>&1 || die "promtool is needed (Debian package prometheus)"

# Headless Chromium and its WebDriver (Debian's chromium and chromium-driver) for the
# console's browser tests (tests/tests/console/); screenshots of every page are left in
# target/console-screenshots/.
if [[ ! -x /usr/bin/chromium ]] || ! command -v chromedriver >/dev/null 2>&1; then
    apt_install chromium chromium-driver
fi
command -v chromedriver >/dev/null 2>&1 || die "chromedriver is needed (Debian package chromium-driver)"

command -v cargo >/dev/null 2>&1 || die "cargo is needed (install Rust from https://rustup.rs)"
cd "$ROOT"
log "building the workspace"
cargo build --workspace --all-targets
log "running the test suite"
cargo test --workspace "$@" -- --test-threads="${CHIME_TEST_THREADS:-4}"
log "console screenshots: target/console-screenshots/"

# --- the Python consumer package (consumer-py/) -------------------------------------
# Python 3.9+ with venv and pip; Debian splits venv/ensurepip into python3-venv.
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt_install python3 python3-venv
fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' ||
    die "consumer-py needs Python 3.9 or newer (found $(python3 --version 2>&1))"
log "running the Python consumer package's tests (consumer-py)"
"$ROOT/consumer-py/scripts/test.sh" -q

# --- the API against its OpenAPI document (schemathesis) ------------------------------
# A live chimed (SQLite, its own vhost) tested with schemathesis from PyPI, in a venv the
# script makes in target/schemathesis-venv; a few minutes at most.
log "running the property-based API test (tests/tools/api-schema-test.sh)"
"$ROOT/tests/tools/api-schema-test.sh"
