# shellcheck shell=bash
# deploy/local/lib.sh — shared helpers for Chime's local service-bootstrap
# scripts (rabbitmq.sh, postgres.sh, and the demo/test wrappers).
#
# Owns: logging (log, die), TCP probing (port_open, wait_for_port), privilege
# escalation (as_root, as_user) and Debian package installation (apt_install).
#
# Source it; do not execute it. It defines functions only and leaves the
# caller's shell options alone, so callers should `set -euo pipefail` themselves.

if [[ -n "${_CHIME_LIB_SH_LOADED:-}" ]]; then
    return 0
fi
_CHIME_LIB_SH_LOADED=1

# Set once apt-get update has run in this shell (one update per script run).
_CHIME_APT_UPDATED=""

# log MESSAGE... — progress message on stderr, prefixed with [chime].
log() {
    printf '[chime] %s\n' "$*" >&2
}

# die MESSAGE... — print an error on stderr and exit 1.
die() {
    printf '[chime] error: %s\n' "$*" >&2
    exit 1
}

# port_open HOST PORT — succeed when a TCP connection to HOST:PORT succeeds
# within one second. Pure bash (/dev/tcp); needs only coreutils' timeout.
port_open() {
    local host=$1 port=$2
    # shellcheck disable=SC2016  # $1/$2 expand in the child bash, not here
    timeout 1 bash -c ': >"/dev/tcp/$1/$2"' _ "$host" "$port" 2>/dev/null
}

# wait_for_port HOST PORT SECONDS NAME — poll HOST:PORT once a second until it
# accepts connections. Reports progress every 5 s; after SECONDS prints an
# error and returns 1 (callers add a hint with `|| die "..."`).
wait_for_port() {
    local host=$1 port=$2 limit=$3 name=$4
    local start=$SECONDS next_report=$((SECONDS + 5))
    log "waiting up to ${limit}s for ${name} on ${host}:${port} ..."
    until port_open "$host" "$port"; do
        if ((SECONDS - start >= limit)); then
            printf '[chime] error: %s did not answer on %s:%s within %ss\n' \
                "$name" "$host" "$port" "$limit" >&2
            return 1
        fi
        if ((SECONDS >= next_report)); then
            log "  still waiting for ${name} ($((SECONDS - start))s elapsed)"
            next_report=$((SECONDS + 5))
        fi
        sleep 1
    done
    log "${name} answers on ${host}:${port} (after $((SECONDS - start))s)"
}

# as_root CMD [ARG...] — run CMD as root: directly when already uid 0,
# otherwise through sudo; dies when neither is possible.
as_root() {
    if [[ ${EUID:-$(id -u)} -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "'$*' needs root; run this script as root or install sudo"
    fi
}

# can_root — succeed when as_root can work (uid 0, or sudo is installed).
can_root() {
    [[ ${EUID:-$(id -u)} -eq 0 ]] || command -v sudo >/dev/null 2>&1
}

# as_user USER CMD [ARG...] — run CMD as USER (runuser/su as root, else sudo -u).
as_user() {
    local user=$1
    shift
    if [[ ${EUID:-$(id -u)} -eq 0 ]]; then
        if command -v runuser >/dev/null 2>&1; then
            runuser -u "$user" -- "$@"
        else
            # su needs a single command string; quote every word.
            su -s /bin/sh "$user" -c "$(printf '%q ' "$@")"
        fi
    elif [[ "$(id -un)" == "$user" ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -u "$user" -- "$@"
    else
        die "'$*' must run as user '${user}'; run this script as root or install sudo"
    fi
}

# is_local_host HOST — succeed when HOST names this machine (loopback), i.e.
# a service we could install and start ourselves.
is_local_host() {
    case "$1" in
        127.* | localhost | ::1 | '[::1]' | 0.0.0.0) return 0 ;;
        *) return 1 ;;
    esac
}

# apt_install PKG... — install Debian packages non-interactively, without
# recommends. Runs `apt-get update` once per script run.
apt_install() {
    command -v apt-get >/dev/null 2>&1 ||
        die "apt-get not found: install $* with your system's package manager"
    if [[ -z "$_CHIME_APT_UPDATED" ]]; then
        log "running apt-get update ..."
        as_root apt-get update >&2
        _CHIME_APT_UPDATED=1
    fi
    log "installing Debian package(s): $*"
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "$@" </dev/null >&2
}

# find_cmd NAME — print the path of command NAME, also looking in the sbin
# directories a non-root user's PATH usually lacks; fail when not installed.
find_cmd() {
    local name=$1 dir
    if command -v "$name" 2>/dev/null; then
        return 0
    fi
    for dir in /usr/local/sbin /usr/sbin /sbin; do
        if [[ -x "$dir/$name" ]]; then
            printf '%s\n' "$dir/$name"
            return 0
        fi
    done
    return 1
}

# run_detached CMD [ARG...] — run a command that starts a daemon, with stdin
# from /dev/null and its output captured in a temporary file that is replayed
# on stderr afterwards. The daemon therefore never inherits our stdout/stderr,
# so a caller that pipes or captures this script's output still sees EOF.
run_detached() {
    local out rc=0
    out=$(mktemp "${TMPDIR:-/tmp}/chime-start.XXXXXX")
    "$@" </dev/null >"$out" 2>&1 || rc=$?
    if [[ -s "$out" ]]; then
        sed 's/^/[chime]   | /' "$out" >&2
    fi
    rm -f "$out"
    return "$rc"
}

# have_systemd — succeed when systemd is PID 1 (so systemctl can work).
have_systemd() {
    [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1
}
