#!/usr/bin/env bash
# Start or stop a private Podman service (Docker-compatible API) for the docker sandbox tests.
#
#   scripts/podman-engine.sh start   # prints `export NEMO_GYM_DOCKER_HOST=... ...`
#   scripts/podman-engine.sh stop    # stops the service by its PID, removes its containers
#
# Storage, run state and socket live under NEMO_GYM_PODMAN_ROOT (default
# /tmp/nemo-gym-podman), never the system's. The image is the rootfs tarball that
# scripts/docker-engine.sh builds (run that first). Needs root and Debian's podman and
# catatonit (the engine's --init). This host needs lowered default ulimits: podman's own
# defaults (nofile and nproc 1048576) exceed the hard limits, so they are set from this
# shell's limits, and NEMO_GYM_DOCKER_NPROC (the service's own RLIMIT_NPROC) tells
# DockerProvider to pass nproc itself, since podman drops the defaults when given ulimits.
set -euo pipefail

ROOT="${NEMO_GYM_PODMAN_ROOT:-/tmp/nemo-gym-podman}"
IMAGE="localhost/nemo-gym-test:py"
CACHE="${NEMO_GYM_DOCKER_CACHE:-$HOME/.cache/nemo-gym}"
ROOTFS_TAR="$CACHE/bookworm-python3.tar"
SOCK="$ROOT/podman.sock"
PIDFILE="$ROOT/podman.pid"
NPROC="$(ulimit -Hu)"
NOFILE="$(ulimit -Hn)"

log() { echo "podman-engine: $*" >&2; }
pm() { CONTAINERS_CONF="$ROOT/containers.conf" podman --root "$ROOT/storage" --runroot "$ROOT/run" "$@"; }
running() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

start() {
    command -v podman >/dev/null || { log "podman not found (apt-get install podman catatonit)"; exit 1; }
    [[ -s "$ROOTFS_TAR" ]] || { log "no $ROOTFS_TAR: run scripts/docker-engine.sh start first"; exit 1; }
    mkdir -p "$ROOT"
    printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' \
        "$NOFILE" "$NOFILE" "$NPROC" "$NPROC" > "$ROOT/containers.conf"
    if ! running; then
        rm -f "$SOCK"
        # From our own directory: conmon drops files (e.g. `oom`) in its working directory.
        (cd "$ROOT" && CONTAINERS_CONF="$ROOT/containers.conf" exec setsid podman --root "$ROOT/storage" \
            --runroot "$ROOT/run" system service --time=0 "unix://$SOCK" \
            >"$ROOT/service.log" 2>&1 </dev/null) &
        echo $! > "$PIDFILE"
        for _ in $(seq 1 100); do [[ -S "$SOCK" ]] && break; sleep 0.1; done
        [[ -S "$SOCK" ]] || { log "the service did not come up; see $ROOT/service.log"; exit 1; }
        log "podman service started (pid $(cat "$PIDFILE")), socket $SOCK"
    fi
    pm image exists "$IMAGE" || pm import "$ROOTFS_TAR" "$IMAGE" >/dev/null
    # Podman lowers its own RLIMIT_NPROC at start-up; a container may not exceed it.
    local nproc
    nproc="$(awk '/^Max processes/ {print $4}' "/proc/$(cat "$PIDFILE")/limits")"
    echo "export NEMO_GYM_DOCKER_HOST=unix://$SOCK NEMO_GYM_DOCKER_IMAGE=$IMAGE NEMO_GYM_DOCKER_NPROC=$nproc"
}

stop() {
    if running; then
        pm rm -af >/dev/null 2>&1 || true
        kill -TERM "$(cat "$PIDFILE")"
        log "podman service (pid $(cat "$PIDFILE")) stopped"
    fi
    rm -f "$PIDFILE"
    # Each exec leaves a conmon waiting out podman's exit delay (5 min); ours name our root.
    pkill -KILL -f "conmon .*$ROOT/storage" 2>/dev/null || true
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
