#!/usr/bin/env bash
# Builds every image the platform and its tests need, offline: no registry is
# contacted.
#   ordertimeout/postgres:15   Debian's postgresql-15 (debootstrap + docker import)
#   ordertimeout/nats:latest   nats-server built from the module pinned in
#                              go.mod, in scratch, with the project's config
#                              and /healthcheck probe
#   ordertimeout/orders:dev, ordertimeout/timeoutd:dev   the services, FROM scratch
#   ordertimeout/toxiproxy:latest   the TCP fault proxy of the chaos run, built
#                              from the toxiproxy module pinned in go.mod, in scratch
#   ordertimeout/patroni:15    Debian's postgresql-15, Patroni 3.0 and etcd 3.4
#                              (debootstrap + docker import), the Postgres
#                              cluster of deploy/compose/compose.ha.yaml and of
#                              the e2e failover test
#   ordertimeout/jaeger:latest the OTLP receiver of the tracing profile (make up
#                              TRACING=1), Jaeger v2 built from the module pinned in
#                              deploy/images/jaeger/go.mod, in scratch; not in the
#                              default set (its build takes minutes)
# Each image is labelled with a hash of its inputs and rebuilt only when they
# change; an image already current is never rebuilt.
# ORDERTIMEOUT_IMAGE_TAG=T tags the NATS, toxiproxy and service images :T
# instead (for a second checkout whose tests must not use the first one's
# images; point the tests at them with
# ORDERTIMEOUT_{NATS,ORDERS,TIMEOUTD,TOXIPROXY}_IMAGE).
# Usage: scripts/images.sh [postgres|patroni|nats|services|orders|timeoutd|toxiproxy|jaeger]...
# (default: all but jaeger)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

CACHE=${ORDERTIMEOUT_CACHE:-/var/cache/ordertimeout}
BUILD=build/images
mkdir -p "$CACHE" "$BUILD"

# current IMAGE HASH: true when IMAGE exists with label inputs=HASH.
current() {
  [ "$(docker image inspect -f '{{index .Config.Labels "ordertimeout.inputs"}}' "$1" 2>/dev/null)" = "$2" ]
}

# dbuild ARGS...: docker build, quiet; its output (the legacy builder's
# deprecation notice included) is shown only when the build fails.
dbuild() {
  local out
  out=$(docker build -q "$@" 2>&1 >/dev/null) || { printf '%s\n' "$out" >&2; return 1; }
}

gobuild() { # gobuild OUT PKG
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -tags timetzdata -ldflags='-s -w' -o "$1" "$2"
}

# debootstrap_rootfs DIR PACKAGES [LOG]: a minbase bookworm rootfs in DIR
# with the comma-separated PACKAGES, from the mirror apt uses; its log goes
# to $CACHE/LOG.log (default debootstrap).
debootstrap_rootfs() {
  local rootfs=$1 pkgs=$2 mirror logf=$CACHE/${3:-debootstrap}.log
  command -v debootstrap >/dev/null || {
    log "installing debootstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  }
  mirror=$(apt_mirror) || die "no Debian mirror found in apt's sources"
  log "debootstrap bookworm + $pkgs from $mirror (a few minutes, once)"
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include="$pkgs" bookworm "$rootfs" "$mirror" >"$logf" 2>&1 ||
    die "debootstrap failed; see $logf"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
}

build_postgres() {
  local img=ordertimeout/postgres:15 hash rootfs=$CACHE/pg-rootfs
  hash=$(input_hash deploy/images/postgres/Dockerfile deploy/images/postgres/entrypoint.sh)
  current "$img" "$hash" && return 0
  if ! docker image inspect ordertimeout/postgres-rootfs:15 >/dev/null 2>&1; then
    [ -x "$rootfs/usr/lib/postgresql/15/bin/postgres" ] || debootstrap_rootfs "$rootfs" postgresql-15
    log "importing the Postgres rootfs"
    tar -C "$rootfs" -c . | docker import - ordertimeout/postgres-rootfs:15 >/dev/null
  fi
  log "building $img"
  dbuild --build-arg ROOTFS=ordertimeout/postgres-rootfs:15 --label ordertimeout.inputs="$hash" \
    -t "$img" deploy/images/postgres
}

# build_patroni: one rootfs for both roles of the Postgres cluster, Patroni
# (with postgresql-15) and etcd; python3-etcd is the etcd client library
# Patroni's etcd3 module builds on, libfaketime sets a member's clock off
# (PATRONI_CLOCK_OFFSET). The rootfs image's tag names its package list,
# so that a change of the list builds it again.
build_patroni() {
  local img=ordertimeout/patroni:15 hash rootfs=$CACHE/patroni-rootfs base
  local pkgs=postgresql-15,patroni,python3-etcd,etcd-server,etcd-client,curl,libfaketime
  base=ordertimeout/patroni-rootfs:15-$(printf '%s' "$pkgs" | sha256sum | cut -c1-8)
  hash=$(input_hash deploy/images/patroni/Dockerfile deploy/images/patroni/entrypoint.sh deploy/images/patroni/patch-etcd3-leader.py)
  current "$img" "$hash-$base" && return 0
  if ! docker image inspect "$base" >/dev/null 2>&1; then
    [ "$(cat "$rootfs/.packages" 2>/dev/null)" = "$pkgs" ] || {
      debootstrap_rootfs "$rootfs" "$pkgs" debootstrap-patroni
      printf '%s' "$pkgs" >"$rootfs/.packages"
    }
    log "importing the Patroni rootfs"
    tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
  fi
  log "building $img"
  dbuild --build-arg ROOTFS="$base" --label ordertimeout.inputs="$hash-$base" \
    -t "$img" deploy/images/patroni
}

build_nats() {
  local img=ordertimeout/nats:${ORDERTIMEOUT_IMAGE_TAG:-latest} ctx=$BUILD/nats hash
  hash=$( (grep -E 'nats-server|nats.go|x/crypto' go.mod; cat deploy/images/nats/* deploy/healthcheck/main.go deploy/streams/*.go internal/streams/*.go internal/tlsclient/*.go internal/tenants/*.go deploy/natsconf/*.go deploy/natsconf/cmd/natsconf/*.go pkg/events/*.go) | sha256sum | cut -c1-12)
  current "$img" "$hash" && return 0
  rm -rf "$ctx" && mkdir -p "$ctx/data"
  log "building $img from the nats-server module"
  gobuild "$ctx/nats-server" github.com/nats-io/nats-server/v2
  gobuild "$ctx/healthcheck" ./deploy/healthcheck
  gobuild "$ctx/streams" ./deploy/streams
  gobuild "$ctx/natsconf" ./deploy/natsconf/cmd/natsconf
  cp deploy/images/nats/Dockerfile deploy/images/nats/nats.conf "$ctx/"
  dbuild --label ordertimeout.inputs="$hash" -t "$img" "$ctx"
}

# build_toxiproxy: toxiproxy's server from the module pinned in go.mod (a
# `tool` there, like nats-server), in scratch; rebuilt when its version or
# the Dockerfile change.
build_toxiproxy() {
  local img=ordertimeout/toxiproxy:${ORDERTIMEOUT_IMAGE_TAG:-latest} ctx=$BUILD/toxiproxy hash
  hash=$( (grep -E 'Shopify/toxiproxy' go.mod; cat deploy/images/toxiproxy/Dockerfile) | sha256sum | cut -c1-12)
  current "$img" "$hash" && return 0
  rm -rf "$ctx" && mkdir -p "$ctx"
  log "building $img from the toxiproxy module"
  gobuild "$ctx/toxiproxy" github.com/Shopify/toxiproxy/v2/cmd/server
  cp deploy/images/toxiproxy/Dockerfile "$ctx/"
  dbuild --label ordertimeout.inputs="$hash" -t "$img" "$ctx"
}

# build_jaeger: Jaeger v2's cmd/jaeger from the module of deploy/images/jaeger
# (a `tool` there, kept out of the platform's go.mod), in scratch; rebuilt
# when its go.mod or Dockerfile change.
build_jaeger() {
  local img=ordertimeout/jaeger:${ORDERTIMEOUT_IMAGE_TAG:-latest} ctx=$BUILD/jaeger hash
  hash=$(cat deploy/images/jaeger/go.mod deploy/images/jaeger/Dockerfile deploy/healthcheck/main.go | sha256sum | cut -c1-12)
  current "$img" "$hash" && return 0
  rm -rf "$ctx" && mkdir -p "$ctx"
  log "building $img from the Jaeger module (minutes, once)"
  (cd deploy/images/jaeger && gobuild "../../../$ctx/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger)
  gobuild "$ctx/healthcheck" ./deploy/healthcheck
  cp deploy/images/jaeger/Dockerfile "$ctx/"
  dbuild --label ordertimeout.inputs="$hash" -t "$img" "$ctx"
}

# build_service NAME: the service's binary and its assets, in scratch.
build_service() {
  local name=$1 img=ordertimeout/$1:${ORDERTIMEOUT_IMAGE_TAG:-dev} ctx=$BUILD/$1 hash
  [ -d "./services/$name/cmd/$name" ] || die "services/$name/cmd/$name does not exist yet: cannot build $img"
  rm -rf "$ctx" && mkdir -p "$ctx/assets"
  gobuild "$ctx/$name" "./services/$name/cmd/$name"
  gobuild "$ctx/healthcheck" ./deploy/healthcheck
  if [ "$name" = timeoutd ]; then
    if make -n wasm >/dev/null 2>&1; then
      make -s wasm >/dev/null
      cp -r web/wasm/dist "$ctx/assets/dashboard"
    else
      log "no 'make wasm' target yet: $img gets no dashboard"
      mkdir -p "$ctx/assets/dashboard"
    fi
  fi
  printf 'app:x:65532:65532:app:/:/sbin/nologin\n' >"$ctx/passwd"
  cp deploy/images/service/Dockerfile "$ctx/"
  hash=$(cd "$ctx" && find . -type f | sort | xargs cat | sha256sum | cut -c1-12)
  current "$img" "$hash" && return 0
  log "building $img"
  dbuild --build-arg BIN="$name" --label ordertimeout.inputs="$hash" -t "$img" "$ctx"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(postgres patroni nats services toxiproxy)
for t in "${targets[@]}"; do
  case "$t" in
    postgres) build_postgres ;;
    patroni) build_patroni ;;
    nats) build_nats ;;
    services) build_service orders; build_service timeoutd ;;
    orders|timeoutd) build_service "$t" ;;
    toxiproxy) build_toxiproxy ;;
    jaeger) build_jaeger ;;
    *) die "unknown image $t" ;;
  esac
done
