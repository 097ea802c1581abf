#!/usr/bin/env bash
# deploy/local/demo.sh — the README's demo command.
#
# Owns the demo: makes sure RabbitMQ runs (rabbitmq.sh), builds and starts chimed on its
# embedded SQLite store and the example consumer app (consumer-lib/examples/demo_consumer),
# creates three demo jobs through the HTTP API with chimectl, and prints each job's run
# history as fires and results arrive. Ctrl-C stops everything it started.
#
# Usage: deploy/local/demo.sh [--for DURATION]     DURATION: 20s, 2m (default: until Ctrl-C)
# Env:   CHIME_AMQP_URL   broker (default amqp://guest:guest@127.0.0.1:5672/%2f)
#        CHIME_HTTP_ADDR  chimed's API address (default 127.0.0.1:8080)
#        CHIME_DEMO_DIR   where chime.db and the logs go (default .demo/ in the repository)
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

usage() {
    sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

DURATION=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --for) DURATION=${2:-}; shift 2 || die "--for needs a duration, e.g. --for 20s" ;;
        --for=*) DURATION=${1#--for=}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) die "unknown argument '$1' (try --help)" ;;
    esac
done

seconds_of() {
    local text=$1
    case $text in
        *[0-9]s) echo "${text%s}" ;;
        *[0-9]m) echo $((${text%m} * 60)) ;;
        *[0-9]) echo "$text" ;;
        *) die "cannot read duration '$text': use e.g. 20s or 2m" ;;
    esac
}
LIMIT=""
if [[ -n $DURATION ]]; then
    LIMIT=$(seconds_of "$DURATION")
    [[ $LIMIT =~ ^[0-9]+$ ]] || die "cannot read duration '$DURATION'"
fi

export CHIME_AMQP_URL=${CHIME_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
export CHIME_HTTP_ADDR=${CHIME_HTTP_ADDR:-127.0.0.1:8080}
export CHIME_SERVER="http://$CHIME_HTTP_ADDR"
DIR=${CHIME_DEMO_DIR:-$ROOT/.demo}

"$SCRIPT_DIR/rabbitmq.sh"

command -v cargo >/dev/null 2>&1 || die "cargo is needed to build Chime (install Rust from https://rustup.rs)"
log "building chimed, chimectl and the example consumer (the first build takes a few minutes)"
(cd "$ROOT" && cargo build --workspace --bins --examples)
BIN=$ROOT/target/debug

mkdir -p "$DIR"
rm -f "$DIR"/chime.db "$DIR"/chime.db-* "$DIR/pids"
PIDS=()
stop_all() {
    local pid
    trap - INT TERM EXIT
    if [[ ${#PIDS[@]} -gt 0 ]]; then
        log "stopping chimed and the consumer"
        for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
        for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    fi
}
trap 'stop_all; exit 130' INT TERM
trap stop_all EXIT

# A node name of our own: /v1/cluster's this_node then says whether the chimed that
# answers on $CHIME_HTTP_ADDR is the one started here, not another that holds the port.
NODE_NAME="chime-demo-$$"
log "starting chimed on $CHIME_HTTP_ADDR with store sqlite://$DIR/chime.db (log: $DIR/chimed.log)"
(cd "$DIR" && CHIME_NODE_NAME=$NODE_NAME exec "$BIN/chimed") >"$DIR/chimed.log" 2>&1 &
CHIMED_PID=$!
PIDS+=("$CHIMED_PID")
echo "$CHIMED_PID" >>"$DIR/pids"

log "starting the example consumer of group 'demo' (log: $DIR/consumer.log)"
CHIME_GROUP=demo "$BIN/examples/demo_consumer" >"$DIR/consumer.log" 2>&1 &
PIDS+=($!)
echo $! >>"$DIR/pids"

# chimed (started in $DIR) wrote its first admin token there; chimectl sends it.
ctl() { CHIME_TOKEN_FILE="$DIR/chime-admin.token" "$BIN/chimectl" "$@"; }

# chimed_failed WHY — the end of chimed's log, then WHY, and exit 1.
chimed_failed() {
    log "the last lines of $DIR/chimed.log:"
    tail -n 20 "$DIR/chimed.log" | sed 's/^/[chime]   | /' >&2
    die "$1"
}

# The node id of the chimed answering on $CHIME_HTTP_ADDR, if a chimed answers.
answering_node() {
    { ctl --json cluster 2>/dev/null || true; } | sed -n 's/^ *"this_node": *"\([^"]*\)".*/\1/p'
}

deadline=$((SECONDS + 30))
while :; do
    kill -0 "$CHIMED_PID" 2>/dev/null || chimed_failed "chimed exited during start-up"
    node=$(answering_node)
    case $node in
        "$NODE_NAME"-*) break ;;
        ?*)
            # Another chimed holds the port; ours cannot listen and exits: give it a
            # moment so its log says so.
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                kill -0 "$CHIMED_PID" 2>/dev/null || break
                sleep 0.5
            done
            chimed_failed "another chimed (node $node) answers on $CHIME_HTTP_ADDR, not the one this demo started: stop it, or give the demo a free address with CHIME_HTTP_ADDR=127.0.0.1:PORT"
            ;;
    esac
    ((SECONDS < deadline)) || chimed_failed "chimed did not answer on $CHIME_HTTP_ADDR within 30s"
    sleep 0.2
done
log "chimed $node answers on $CHIME_HTTP_ADDR"

log "creating demo jobs"
ctl job add --app demo --name heartbeat --every 2s --group demo >/dev/null
ctl job add --app demo --name nightly-report --cron '*/5 * * * * *' --timezone Europe/Berlin \
    --group demo --payload '{"rows": 1200, "work_ms": 300}' >/dev/null
ctl job add --app demo --name greet --at "$(date -u -d '+3 seconds' +%Y-%m-%dT%H:%M:%SZ)" \
    --group demo --payload '{"name": "chime"}' >/dev/null
ctl job ls --app demo

show_runs() {
    local job
    printf '\n=== run history at %s ===\n' "$(date -u +%H:%M:%S)"
    for job in heartbeat nightly-report greet; do
        printf -- '--- demo/%s\n' "$job"
        ctl run ls "demo/$job" --limit 3
    done
}

started=$SECONDS
if [[ -n $LIMIT ]]; then
    log "running for ${LIMIT}s"
else
    log "running until Ctrl-C"
fi
while [[ -z $LIMIT ]] || ((SECONDS - started < LIMIT)); do
    sleep 4
    kill -0 "$CHIMED_PID" 2>/dev/null || chimed_failed "chimed exited"
    show_runs
done
log "demo finished"
