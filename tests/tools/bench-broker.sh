#!/usr/bin/env bash
# Starts (or stops) a private RabbitMQ node for chime-bench, configured with Chime's
# recommended broker settings (deploy/rabbitmq/rabbitmq.conf), beside the machine's own
# broker: its own node name, AMQP port and data directory, so the shared broker's
# settings and data are never touched. Uses the installed RabbitMQ's binaries.
#
# usage: tests/tools/bench-broker.sh start|stop|env
#   start  start the node (idempotent), wait until it has booted, print the env to use
#   stop   stop the node and delete its data directory
#   env    print the env that points chime-bench at the node:
#            eval "$(tests/tools/bench-broker.sh env)"
#
# Env:
#   CHIME_BENCH_BROKER_PORT   AMQP port (default 5673; Erlang distribution port + 20000)
#   CHIME_BENCH_BROKER_DIR    data and log directory (default /tmp/chime-bench-broker)
#   CHIME_BENCH_BROKER_CONF   the config file (default deploy/rabbitmq/rabbitmq.conf)
#
# Runs the node as the current user, with that user's Erlang cookie, so the same
# user's rabbitmqctl reaches it (Debian's /usr/sbin wrappers switch to the rabbitmq
# user and its cookie, so the scripts under /usr/lib/rabbitmq/bin are used directly).
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
PORT=${CHIME_BENCH_BROKER_PORT:-5673}
DIR=${CHIME_BENCH_BROKER_DIR:-/tmp/chime-bench-broker}
CONF=${CHIME_BENCH_BROKER_CONF:-$ROOT/deploy/rabbitmq/rabbitmq.conf}
NODE="chimebench@localhost"
BIN=/usr/lib/rabbitmq/bin

log() { printf '[bench-broker] %s\n' "$*" >&2; }
die() {
    printf '[bench-broker] error: %s\n' "$*" >&2
    exit 1
}

ctl() { "$BIN/rabbitmqctl" -n "$NODE" "$@"; }

print_env() {
    echo "export CHIME_TEST_AMQP_ADDR=127.0.0.1:$PORT"
    echo "export CHIME_RABBITMQCTL=\"$BIN/rabbitmqctl -n $NODE\""
}

start() {
    [[ -x $BIN/rabbitmq-server ]] || die "RabbitMQ is not installed ($BIN/rabbitmq-server); run deploy/local/rabbitmq.sh"
    [[ -r $CONF ]] || die "no config file at $CONF"
    if ctl -q ping >/dev/null 2>&1; then
        log "node $NODE already runs"
        print_env
        return 0
    fi
    mkdir -p "$DIR/mnesia" "$DIR/log"
    # No plugins: the shared broker may hold the management and Prometheus ports.
    echo "[]." >"$DIR/enabled_plugins"
    # The node reads its own copy, so editing the deploy file cannot change a running node.
    cp "$CONF" "$DIR/rabbitmq.conf"
    log "starting $NODE on port $PORT (data in $DIR, config $CONF)"
    RABBITMQ_NODENAME=$NODE \
        RABBITMQ_NODE_PORT=$PORT \
        RABBITMQ_DIST_PORT=$((PORT + 20000)) \
        RABBITMQ_MNESIA_BASE=$DIR/mnesia \
        RABBITMQ_LOG_BASE=$DIR/log \
        RABBITMQ_CONFIG_FILE=$DIR/rabbitmq.conf \
        RABBITMQ_ENABLED_PLUGINS_FILE=$DIR/enabled_plugins \
        RABBITMQ_PID_FILE=$DIR/node.pid \
        "$BIN/rabbitmq-server" -detached
    # await_startup fails at once while the node has not registered its name yet.
    local waited=0
    until timeout 60 "$BIN/rabbitmqctl" -n "$NODE" -q await_startup >/dev/null 2>&1; do
        ((waited += 2))
        ((waited < 120)) || die "the node did not boot within 120 s; see $DIR/log"
        sleep 2
    done
    log "node $NODE is up; wal_max_size_bytes = $(ctl -q eval 'application:get_env(ra, wal_max_size_bytes).')"
    print_env
}

stop() {
    if ctl -q ping >/dev/null 2>&1; then
        log "stopping $NODE"
        ctl -q stop
    fi
    rm -rf "$DIR"
    log "stopped; $DIR removed"
}

case ${1:-} in
start) start ;;
stop) stop ;;
env) print_env ;;
*) die "usage: $0 start|stop|env" ;;
esac
