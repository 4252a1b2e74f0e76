#!/usr/bin/env bash
# Start or stop a private Docker engine for nemo_gym's docker sandbox tests.
#
#   scripts/docker-engine.sh start    # idempotent; prints `export NEMO_GYM_DOCKER_HOST=...`
#   scripts/docker-engine.sh stop     # idempotent; stops dockerd by its pid file
#   scripts/docker-engine.sh status
#
# The engine listens on a socket of its own (never the system's /var/run/docker.sock),
# with no bridge network and no iptables rules, so it touches nothing else on the host.
# `start` also builds the test image (Debian bookworm minbase + python3, via
# debootstrap) once and caches its rootfs tarball, since no registry is reachable.
#
# Needs root, `dockerd` (Debian: apt-get install docker.io) and, for the first image
# build, `debootstrap` and a Debian mirror. Settings (environment):
#   NEMO_GYM_DOCKER_ROOT   state directory          (default /tmp/nemo-gym-docker)
#   NEMO_GYM_DOCKER_IMAGE  image tag to build        (default nemo-gym-test:py)
#   NEMO_GYM_DEBIAN_MIRROR mirror for debootstrap   (default http://deb.debian.org/debian)
set -euo pipefail

ROOT="${NEMO_GYM_DOCKER_ROOT:-/tmp/nemo-gym-docker}"
IMAGE="${NEMO_GYM_DOCKER_IMAGE:-nemo-gym-test:py}"
MIRROR="${NEMO_GYM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SOCK="$ROOT/docker.sock"
PIDFILE="$ROOT/docker.pid"
CACHE="${NEMO_GYM_DOCKER_CACHE:-$HOME/.cache/nemo-gym}"
ROOTFS_TAR="$CACHE/bookworm-python3.tar"

log() { echo "docker-engine: $*" >&2; }

running() {
    [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

dk() { docker --host "unix://$SOCK" "$@"; }

start_engine() {
    if running; then
        log "dockerd already running (pid $(cat "$PIDFILE"))"
        return
    fi
    command -v dockerd >/dev/null || { log "dockerd not found (apt-get install docker.io)"; exit 1; }
    mkdir -p "$ROOT"
    # setsid: the engine must not die with the shell that started it.
    setsid dockerd --bridge=none --iptables=false --ip-masq=false \
        --host "unix://$SOCK" --data-root "$ROOT/data" --exec-root "$ROOT/exec" \
        --pidfile "$PIDFILE" >"$ROOT/dockerd.log" 2>&1 < /dev/null &
    for _ in $(seq 1 100); do
        if [[ -S "$SOCK" ]] && dk version >/dev/null 2>&1; then
            log "dockerd started (pid $(cat "$PIDFILE")), socket $SOCK"
            return
        fi
        sleep 0.2
    done
    log "dockerd did not come up; see $ROOT/dockerd.log"
    tail -20 "$ROOT/dockerd.log" >&2
    exit 1
}

build_image() {
    if dk image inspect "$IMAGE" >/dev/null 2>&1; then
        log "image $IMAGE present"
        return
    fi
    if [[ ! -s "$ROOTFS_TAR" ]]; then
        command -v debootstrap >/dev/null || { log "debootstrap not found (apt-get install debootstrap)"; exit 1; }
        local dir
        dir="$(mktemp -d "$ROOT/rootfs.XXXXXX")"
        log "debootstrap bookworm into $dir (first run only)"
        local t0=$SECONDS
        debootstrap --variant=minbase --include=python3 bookworm "$dir" "$MIRROR" \
            >"$ROOT/debootstrap.log" 2>&1 || { tail -20 "$ROOT/debootstrap.log" >&2; exit 1; }
        # Trim what a sandbox never needs: apt lists, docs, locales.
        rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/* "$dir"/usr/share/doc \
            "$dir"/usr/share/man "$dir"/usr/share/locale
        mkdir -p "$CACHE"
        tar -C "$dir" -cf "$ROOTFS_TAR.tmp" . && mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
        rm -rf "$dir"
        log "rootfs built in $((SECONDS - t0))s: $ROOTFS_TAR"
    fi
    dk import "$ROOTFS_TAR" "$IMAGE" >/dev/null
    log "image $IMAGE imported"
}

stop_engine() {
    if ! running; then
        log "dockerd not running"
        rm -f "$PIDFILE"
        return
    fi
    local pid
    pid="$(cat "$PIDFILE")"
    # Remove our containers first so no container process outlives the engine.
    dk ps -aq | xargs -r docker --host "unix://$SOCK" rm -f >/dev/null 2>&1 || true
    kill -TERM "$pid"
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || { log "dockerd (pid $pid) stopped"; return; }
        sleep 0.2
    done
    log "dockerd (pid $pid) did not stop on TERM; sending KILL"
    kill -KILL "$pid" || true
}

case "${1:-}" in
    start)
        start_engine
        build_image
        echo "export NEMO_GYM_DOCKER_HOST=unix://$SOCK NEMO_GYM_DOCKER_IMAGE=$IMAGE"
        ;;
    stop) stop_engine ;;
    status)
        if running; then echo "running pid=$(cat "$PIDFILE") socket=$SOCK"; else echo "stopped"; exit 3; fi
        ;;
    *)
        echo "usage: $0 start|stop|status" >&2
        exit 2
        ;;
esac
