#!/bin/sh
# deploy/prometheus/scrape-token.sh — the Compose stack's one-shot `monitoring-secrets`
# service: what Prometheus and Grafana need, each in its own volume.
#
#   scrape-token.sh CHIMED_DIR PROMETHEUS_DIR GRAFANA_DIR
#
# PROMETHEUS_DIR/ ca.crt (the stack's CA, copied from CHIMED_DIR), chimed.token: a
#                 `reader` token created through a node's API with the admin token of
#                 CHIMED_DIR, scoped to the app `monitoring`, which no job uses: it reads
#                 /metrics, /v1/cluster and DLQ depths, and no job, run or message.
# GRAFANA_DIR/    admin.password: Grafana's admin password (32 random bytes, hex).
#
# Idempotent: a token or password that exists is kept (the token's name carries the
# time it was made, so a new one never collides with a revoked one). Run as root, the
# files are given to the users the prom/prometheus (65534) and grafana (472) images run
# as. Needs chimectl (CHIME_SERVER, CHIME_CA_FILE and CHIME_TOKEN_FILE set) and openssl.
set -eu

CHIMED=${1:?usage: scrape-token.sh CHIMED_DIR PROMETHEUS_DIR GRAFANA_DIR}
PROM=${2:?usage: scrape-token.sh CHIMED_DIR PROMETHEUS_DIR GRAFANA_DIR}
GRAFANA=${3:?usage: scrape-token.sh CHIMED_DIR PROMETHEUS_DIR GRAFANA_DIR}
umask 077
log() { echo "scrape-token: $*"; }

cp "$CHIMED/ca.crt" "$PROM/ca.crt.new" && mv "$PROM/ca.crt.new" "$PROM/ca.crt"
chmod 0644 "$PROM/ca.crt"

if [ -s "$PROM/chimed.token" ]; then
    log "the scrape token exists"
else
    name="prometheus-$(date -u +%Y%m%d%H%M%S)"
    log "creating the reader token $name"
    # The secret is the last line of chimectl's answer; it goes to the file only.
    answer=$(chimectl token create --name "$name" --role reader --app monitoring)
    printf '%s\n' "$answer" | tail -n 1 >"$PROM/chimed.token.new"
    grep -q '^chime_' "$PROM/chimed.token.new" || {
        rm -f "$PROM/chimed.token.new"
        log "chimectl did not print a token"
        exit 1
    }
    mv "$PROM/chimed.token.new" "$PROM/chimed.token"
fi

[ -s "$GRAFANA/admin.password" ] || openssl rand -hex 32 >"$GRAFANA/admin.password"

if [ "$(id -u)" = 0 ]; then
    chown -R 65534:65534 "$PROM"
    chown -R 472:0 "$GRAFANA"
fi
log "done"
