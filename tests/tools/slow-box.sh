#!/usr/bin/env bash
# Runs a command on a simulated slower machine: the command, everything it starts, and the
# private bench broker (tests/tools/bench-broker.sh) share a CPU quota of CPUS cores, so a
# benchmark can be repeated on "a slow day" on purpose instead of waiting for one. The
# quota is refilled every 2 ms, so a throttled process waits at most about a millisecond
# at a time: the box gets slower, not stall-prone. Needs root (it creates a cgroup).
#
# usage: tests/tools/slow-box.sh CPUS command [args...]
#   e.g. tests/tools/slow-box.sh 1.2 target/release/chime-bench --only W2 --backends sqlite
#   (at 1.2 CPUs this 2-core machine's reference ceiling drops to a slow day's 8 000 msg/s)
#
# Env:
#   CHIME_BENCH_BROKER_DIR   the private broker's data directory, to find its processes
#                            (default /tmp/chime-bench-broker, as bench-broker.sh)
#   CHIME_SLOW_BOX_POSTGRES  1: put the machine's PostgreSQL (every `postgres` process)
#                            under the quota too, for PostgreSQL runs; it is moved back
#                            when the command ends. Otherwise it runs outside the quota.
set -euo pipefail

CPUS=${1:?usage: $0 CPUS command [args...]}
shift
(($# > 0)) || {
    echo "usage: $0 CPUS command [args...]" >&2
    exit 2
}
BROKER_DIR=${CHIME_BENCH_BROKER_DIR:-/tmp/chime-bench-broker}
PERIOD_US=2000
QUOTA_US=$(awk -v c="$CPUS" -v p="$PERIOD_US" 'BEGIN { q = int(c * p); if (q < 1000) q = 1000; print q }')

log() { printf '[slow-box] %s\n' "$*" >&2; }

# Whatever was moved into the group goes back to the root group, and the group goes,
# however this script ends; set before the group exists so a failed setup is undone too.
release() {
    [[ -n ${GROUP:-} ]] || return 0
    local pid
    for pid in $(cat "$GROUP/cgroup.procs" 2>/dev/null); do
        echo "$pid" >"$ROOT_PROCS" 2>/dev/null || true
    done
    rmdir "$GROUP" 2>/dev/null || true
}
trap release EXIT
trap 'exit 130' INT TERM

# cgroup v1 (a cpu hierarchy) or v2 (a unified one with the cpu controller; not tried
# here, where the machine has v1).
if [[ -w /sys/fs/cgroup/cpu/cgroup.procs ]]; then
    GROUP=/sys/fs/cgroup/cpu/chime-slow-box
    ROOT_PROCS=/sys/fs/cgroup/cpu/cgroup.procs
    mkdir -p "$GROUP"
    echo "$PERIOD_US" >"$GROUP/cpu.cfs_period_us"
    echo "$QUOTA_US" >"$GROUP/cpu.cfs_quota_us"
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    GROUP=/sys/fs/cgroup/chime-slow-box
    ROOT_PROCS=/sys/fs/cgroup/cgroup.procs
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
    mkdir -p "$GROUP"
    echo "$QUOTA_US $PERIOD_US" >"$GROUP/cpu.max"
else
    log "error: no writable cgroup cpu controller (run as root)"
    exit 1
fi

# The broker's processes: bench-broker.sh writes beam.smp's pid; its helpers are its children.
broker_pids() {
    local beam
    beam=$(cat "$BROKER_DIR/node.pid" 2>/dev/null) || return 0
    kill -0 "$beam" 2>/dev/null || return 0
    echo "$beam"
    pgrep -P "$beam" || true
}

moved=0
for pid in $(broker_pids); do
    echo "$pid" >"$GROUP/cgroup.procs" && ((moved += 1))
done
if [[ ${CHIME_SLOW_BOX_POSTGRES:-0} == 1 ]]; then
    # Backends forked from here on inherit the postmaster's group.
    for pid in $(pgrep -x postgres || true); do
        echo "$pid" >"$GROUP/cgroup.procs" && ((moved += 1))
    done
fi
log "quota ${QUOTA_US} µs per ${PERIOD_US} µs (${CPUS} CPUs); moved $moved processes in (the broker in $BROKER_DIR, PostgreSQL if asked)"

# A child shell joins the group, then becomes the command; this script waits to clean up.
bash -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' slow-box "$GROUP" "$@"
