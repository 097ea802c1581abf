#!/usr/bin/env bash
# consumer-py/scripts/test.sh — the Python package's test suite.
#
# Makes a virtual environment in consumer-py/.venv (once; gitignored), installs the
# package with its test extras from PyPI, builds the Rust binaries the tests drive
# (chimed, chime-test-consumer), and runs pytest: unit tests, mypy --strict, and the
# integration tests against the real RabbitMQ, PostgreSQL and chimed.
#
# Usage: consumer-py/scripts/test.sh [pytest arguments, e.g. -k duplicates]
# Env:   PYTHON                   interpreter for the venv (default python3; 3.9+)
#        CHIME_TEST_POSTGRES_URL  PostgreSQL the store tests create databases on
#        CHIME_RABBITMQCTL        command to manage vhosts and users (default rabbitmqctl)
set -euo pipefail

PKG=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$(cd -- "$PKG/.." && pwd)
VENV="$PKG/.venv"
PYTHON=${PYTHON:-python3}

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[consumer-py] creating $VENV" >&2
    "$PYTHON" -m venv "$VENV" || {
        echo "[consumer-py] error: '$PYTHON -m venv' failed (on Debian: apt-get install python3-venv)" >&2
        exit 1
    }
fi
# Reinstall when pyproject.toml changed since the last install.
stamp="$VENV/.installed"
if [[ ! -f "$stamp" || "$PKG/pyproject.toml" -nt "$stamp" ]]; then
    echo "[consumer-py] installing chime-consumer[test] into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$PKG[test]"
    touch "$stamp"
fi

echo "[consumer-py] building chimed and chime-test-consumer" >&2
(cd "$ROOT" && cargo build --quiet -p chime-scheduler --bin chimed -p chime-tests --bin chime-test-consumer)
export CHIME_BIN_DIR=${CHIME_BIN_DIR:-$ROOT/target/debug}

cd "$PKG"
exec "$VENV/bin/python" -m pytest "$@"
