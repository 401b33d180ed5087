#!/usr/bin/env bash
# Makes sure a Docker engine answers and a compose command exists.
# On Debian as root it installs docker.io (and docker-compose) and starts
# dockerd when none answers; elsewhere it says what to install.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

engine_up() { docker info >/dev/null 2>&1; }

if ! engine_up; then
  if ! command -v dockerd >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] ||
      die "no Docker engine answers: install Docker (https://docs.docker.com/engine/install/) and start it"
    log "installing docker.io from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq docker.io >/dev/null
  fi
  if ! engine_up; then
    log "starting dockerd"
    if command -v systemctl >/dev/null 2>&1 && systemctl start docker 2>/dev/null; then :; else
      mkdir -p /var/log
      nohup dockerd >/var/log/dockerd.log 2>&1 &
    fi
    for _ in $(seq 1 60); do engine_up && break; sleep 1; done
    engine_up || die "dockerd did not start; see /var/log/dockerd.log"
  fi
fi

# Compose: the docker compose plugin where present, else Debian's
# docker-compose (installed here when missing).
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
    log "installing docker-compose from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq docker-compose >/dev/null || { apt-get update -qq && apt-get install -y -qq docker-compose >/dev/null; }
  else
    die "no compose command: install the Docker compose plugin"
  fi
fi
log "docker engine $(docker version --format '{{.Server.Version}}') is up"
