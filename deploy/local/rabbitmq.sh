#!/usr/bin/env bash
# deploy/local/rabbitmq.sh — make sure a RabbitMQ broker answers on
# ${CHIME_AMQP_HOST:-127.0.0.1}:${CHIME_AMQP_PORT:-5672} for Chime's demo and
# test suite.
#
# Owns: detecting a running broker (used as-is: its config and plugins are
# never touched), otherwise installing the Debian `rabbitmq-server` package and
# starting it without systemd (`rabbitmq-server -detached`), then checking that
# `rabbitmqctl` (used by the tests to create a vhost per test) works for the
# current user. Idempotent: safe to run any number of times.
#
# Env: CHIME_AMQP_HOST, CHIME_AMQP_PORT, CHIME_RABBITMQCTL (command used
# instead of plain `rabbitmqctl`, e.g. "sudo rabbitmqctl").
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

AMQP_HOST=${CHIME_AMQP_HOST:-127.0.0.1}
AMQP_PORT=${CHIME_AMQP_PORT:-5672}
START_TIMEOUT=90

# check_rabbitmqctl — read-only check that the command the test suite uses to
# manage vhosts works for this user; prints a hint when it does not.
check_rabbitmqctl() {
    local -a ctl
    local path
    if [[ -n "${CHIME_RABBITMQCTL:-}" ]]; then
        read -r -a ctl <<<"$CHIME_RABBITMQCTL"
    else
        if ! is_local_host "$AMQP_HOST"; then
            log "note: the broker is remote; set CHIME_RABBITMQCTL to a command that reaches it if you run the test suite"
            return 0
        fi
        if ! path=$(find_cmd rabbitmqctl); then
            log "note: rabbitmqctl is not installed here; the test suite needs it to create per-test vhosts"
            log "      set CHIME_RABBITMQCTL (e.g. \"docker compose -f deploy/compose/docker-compose.yml exec -T rabbitmq rabbitmqctl\")"
            return 0
        fi
        ctl=("$path")
    fi

    if timeout 60 "${ctl[@]}" list_vhosts >/dev/null 2>&1; then
        log "rabbitmqctl works for user $(id -un) (${ctl[*]})"
        return 0
    fi
    if [[ -z "${CHIME_RABBITMQCTL:-}" && ${EUID:-$(id -u)} -ne 0 ]]; then
        log "hint: 'rabbitmqctl list_vhosts' fails for user $(id -un) (Debian's rabbitmqctl runs only as root or rabbitmq)"
        log "      for the test suite, export CHIME_RABBITMQCTL=\"sudo rabbitmqctl\""
    else
        log "warning: '${ctl[*]} list_vhosts' failed; the test suite cannot create its per-test vhosts"
    fi
    return 0
}

# node_running — succeed when a local RabbitMQ node is up (perhaps still booting).
node_running() {
    local tool
    can_root || return 1
    if tool=$(find_cmd rabbitmq-diagnostics); then
        as_root timeout 30 "$tool" -q ping >/dev/null 2>&1
    elif tool=$(find_cmd rabbitmqctl); then
        as_root timeout 30 "$tool" -q status >/dev/null 2>&1
    else
        return 1
    fi
}

# start_broker — start the local node without relying on systemd.
start_broker() {
    local server svc
    server=$(find_cmd rabbitmq-server) || die "rabbitmq-server not found after installation"
    log "starting RabbitMQ: rabbitmq-server -detached"
    # Debian's wrapper switches to the rabbitmq user itself when run as root.
    if run_detached as_root "$server" -detached; then
        return 0
    fi
    log "rabbitmq-server -detached failed; trying the service manager"
    if svc=$(find_cmd service) && run_detached as_root "$svc" rabbitmq-server start; then
        return 0
    fi
    if have_systemd && run_detached as_root systemctl start rabbitmq-server; then
        return 0
    fi
    die "could not start RabbitMQ; see /var/log/rabbitmq/ for the broker's logs"
}

# await_boot — after the port answers, wait until the broker reports it has
# fully booted (listeners open before every boot step has finished).
await_boot() {
    local ctl diag
    if ! can_root; then
        log "note: not root and no sudo; skipping the broker's boot check"
        return 0
    fi
    if ctl=$(find_cmd rabbitmqctl) &&
        as_root timeout "$START_TIMEOUT" "$ctl" -q await_startup >/dev/null 2>&1; then
        log "RabbitMQ reports it has finished booting"
    elif diag=$(find_cmd rabbitmq-diagnostics) &&
        as_root timeout "$START_TIMEOUT" "$diag" -q check_running >/dev/null 2>&1; then
        log "RabbitMQ reports it is running"
    else
        log "warning: could not confirm the broker finished booting; continuing since the port answers"
    fi
}

main() {
    if port_open "$AMQP_HOST" "$AMQP_PORT"; then
        log "RabbitMQ already answers on ${AMQP_HOST}:${AMQP_PORT}; using the running broker (left as configured)"
        check_rabbitmqctl
        return 0
    fi

    is_local_host "$AMQP_HOST" ||
        die "nothing answers on ${AMQP_HOST}:${AMQP_PORT}, which is not this machine; start that broker or point CHIME_AMQP_HOST/CHIME_AMQP_PORT elsewhere"

    log "nothing answers on ${AMQP_HOST}:${AMQP_PORT}; bringing up a local RabbitMQ"
    if ! find_cmd rabbitmq-server >/dev/null; then
        apt_install rabbitmq-server
    fi

    # The package's postinst may have started the broker, or a node may be
    # running but still booting: only start one when no node is up.
    if port_open "$AMQP_HOST" "$AMQP_PORT"; then
        :
    elif node_running; then
        log "a RabbitMQ node is already running (still booting?); not starting another"
    else
        start_broker
    fi

    wait_for_port "$AMQP_HOST" "$AMQP_PORT" "$START_TIMEOUT" "RabbitMQ" ||
        die "RabbitMQ did not come up; see /var/log/rabbitmq/ (if it listens on another port, set CHIME_AMQP_PORT)"
    await_boot
    log "RabbitMQ is up on ${AMQP_HOST}:${AMQP_PORT} (default user guest/guest, loopback only)"
    check_rabbitmqctl
}

main "$@"
