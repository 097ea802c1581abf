#!/bin/sh
# deploy/compose/make-certs.sh — the Compose stack's one-shot `certs` service: a private
# CA, server certificates for RabbitMQ, PostgreSQL and the chimed nodes, random passwords
# and the admin token, and the connection URL files chimed and the consumer read.
#
#   make-certs.sh OUT     (Compose runs it as root with OUT=/secrets)
#
# OUT/ca/        ca.key (never leaves this directory), ca.crt
# OUT/rabbitmq/  ca.crt server.crt server.key amqp.password            (uid 999)
# OUT/postgres/  ca.crt server.crt server.key postgres.password        (uid 999)
# OUT/chimed/    ca.crt chimed.crt chimed.key amqp-url database-url admin.token (uid 10001)
# OUT/consumer/  ca.crt amqp-url                                       (uid 10001)
#
# Idempotent: what exists and is still good is kept (the CA, the passwords, the token, and
# every certificate that verifies against the CA, names the same hosts and is valid for
# at least 30 more days); only what is missing or stale is made again. Run as root, each
# directory's files are given to the user of the service that reads them (the
# rabbitmq:3.10 and postgres:15 images run as uid 999, the Chime image as 10001); run
# as another user (tests, trying it out), ownership is left alone. Needs openssl.
set -eu

OUT=${1:?usage: make-certs.sh OUT}
DAYS=${CHIME_CERT_DAYS:-397}
CA_DAYS=${CHIME_CA_DAYS:-3650}
umask 077

mkdir -p "$OUT/ca" "$OUT/rabbitmq" "$OUT/postgres" "$OUT/chimed" "$OUT/consumer"
CA_KEY=$OUT/ca/ca.key
CA_CRT=$OUT/ca/ca.crt

log() { echo "make-certs: $*"; }

# A new P-256 key in $1 (PKCS#8 PEM, mode 0600).
new_key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"
}

if [ ! -s "$CA_KEY" ] || [ ! -s "$CA_CRT" ]; then
    log "creating the CA"
    new_key "$CA_KEY"
    openssl req -x509 -new -key "$CA_KEY" -sha256 -days "$CA_DAYS" \
        -subj "/CN=Chime Compose CA" \
        -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$CA_CRT"
    # A new CA invalidates every certificate signed by the old one.
    rm -f "$OUT"/rabbitmq/server.crt "$OUT"/postgres/server.crt "$OUT"/chimed/chimed.crt
fi
chmod 0644 "$CA_CRT"

# issue DIR NAME CN SANS: DIR/NAME.crt and DIR/NAME.key for CN with subjectAltName SANS,
# unless the certificate there verifies against the CA, has the same SANS and is valid
# for 30 more days.
issue() {
    dir=$1 name=$2 cn=$3 sans=$4
    crt=$dir/$name.crt key=$dir/$name.key
    if [ -s "$crt" ] && [ -s "$key" ] \
        && [ "$(cat "$dir/$name.sans" 2>/dev/null)" = "$sans" ] \
        && openssl verify -CAfile "$CA_CRT" "$crt" >/dev/null 2>&1 \
        && openssl x509 -in "$crt" -noout -checkend 2592000 >/dev/null; then
        log "$crt is current"
        return
    fi
    log "issuing $crt for $sans"
    tmp=$(mktemp -d)
    new_key "$tmp/key"
    openssl req -new -key "$tmp/key" -subj "/CN=$cn" -out "$tmp/csr"
    cat >"$tmp/ext" <<EOF
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
extendedKeyUsage = serverAuth
subjectAltName = $sans
EOF
    openssl x509 -req -in "$tmp/csr" -CA "$CA_CRT" -CAkey "$CA_KEY" -sha256 \
        -set_serial "0x$(openssl rand -hex 16)" -days "$DAYS" \
        -extfile "$tmp/ext" -out "$tmp/crt" 2>/dev/null
    # Key first, then certificate, each renamed into place (chimed reloads the pair).
    mv "$tmp/key" "$key"
    mv "$tmp/crt" "$crt"
    printf '%s\n' "$sans" >"$dir/$name.sans"
    rm -rf "$tmp"
}

# secret FILE: 32 random bytes as hex in FILE, unless it exists.
secret() {
    [ -s "$1" ] || openssl rand -hex 32 >"$1"
}

issue "$OUT/rabbitmq" server rabbitmq "DNS:rabbitmq,DNS:localhost,IP:127.0.0.1"
issue "$OUT/postgres" server postgres "DNS:postgres,DNS:localhost,IP:127.0.0.1"
issue "$OUT/chimed" chimed chimed \
    "DNS:chimed-1,DNS:chimed-2,DNS:chimed-3,DNS:chimed,DNS:localhost,IP:127.0.0.1"
for dir in rabbitmq postgres chimed consumer; do
    cp "$CA_CRT" "$OUT/$dir/ca.crt.new" && mv "$OUT/$dir/ca.crt.new" "$OUT/$dir/ca.crt"
    chmod 0644 "$OUT/$dir/ca.crt"
done

secret "$OUT/rabbitmq/amqp.password"
secret "$OUT/postgres/postgres.password"
secret "$OUT/chimed/admin.token"
AMQP_PASSWORD=$(cat "$OUT/rabbitmq/amqp.password")
PG_PASSWORD=$(cat "$OUT/postgres/postgres.password")

# The URLs chimed and the consumer read (CHIME_*_URL_FILE); the paths are where Compose
# mounts each service's directory (/run/chime). Hex passwords need no percent-encoding.
AMQP_URL="amqps://chime:$AMQP_PASSWORD@rabbitmq:5671/%2f?cacertfile=/run/chime/ca.crt&server_name_indication=rabbitmq"
DATABASE_URL="postgres://chime:$PG_PASSWORD@postgres:5432/chime?sslmode=verify-full&sslrootcert=/run/chime/ca.crt"
printf '%s\n' "$AMQP_URL" >"$OUT/chimed/amqp-url"
printf '%s\n' "$DATABASE_URL" >"$OUT/chimed/database-url"
printf '%s\n' "$AMQP_URL" >"$OUT/consumer/amqp-url"

if [ "$(id -u)" = 0 ]; then
    chown -R 999:999 "$OUT/rabbitmq" "$OUT/postgres"
    chown -R 10001:10001 "$OUT/chimed" "$OUT/consumer"
    chown -R 0:0 "$OUT/ca"
fi
chmod 0700 "$OUT/ca"
chmod 0755 "$OUT/rabbitmq" "$OUT/postgres" "$OUT/chimed" "$OUT/consumer"
log "done"
