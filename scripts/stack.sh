#!/usr/bin/env bash
# Runs the compose stack of deploy/compose (see lib.sh for the compose
# command chosen). Usage:
#   scripts/stack.sh up      start it, wait until every service is healthy, print the URLs
#   scripts/stack.sh down    stop and remove the containers (DOWN_VOLUMES=1: the volumes too)
#   scripts/stack.sh logs    follow the logs of every service
#   scripts/stack.sh dump    print the last lines of every service's log
#   scripts/stack.sh wait    wait until every service is healthy
#   scripts/stack.sh patroni ARGS...   (STACK=ha) patronictl ARGS on the first
#                            Postgres member that answers: list, switchover
#                            --force, failover, history (docs/OPERATIONS.md)
# STACK=ha runs the cluster of deploy/compose/compose.ha.yaml instead, as
# the project <COMPOSE_PROJECT>-ha (make up-ha).
# The images must exist (make up builds them first).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

SERVICES=(postgres nats orders timeoutd)
if [ "${STACK:-}" = ha ]; then
  COMPOSE_FILE=deploy/compose/compose.ha.yaml
  COMPOSE_PROJECT=$COMPOSE_PROJECT-ha
  SERVICES=(etcd-1 etcd-2 etcd-3 pg-1 pg-2 pg-3 nats-1 nats-2 nats-3 orders-1 orders-2 timeoutd-1 timeoutd-2 timeoutd-3)
fi
WAIT_SECONDS=${WAIT_SECONDS:-120}
# TRACING=1 (make up TRACING=1) starts the OTLP receiver too, the compose
# profile "tracing"; down always removes it.
if [ "${TRACING:-}" = 1 ] && [ "${STACK:-}" != ha ]; then
  export COMPOSE_PROFILES=tracing
  export OTEL_EXPORTER_OTLP_ENDPOINT=${OTEL_EXPORTER_OTLP_ENDPOINT:-http://jaeger:4318}
  SERVICES+=(jaeger)
fi

# health SERVICE prints the health status of the service's container.
health() {
  local id
  id=$(compose ps -q "$1" 2>/dev/null | head -n1)
  [ -n "$id" ] || { echo missing; return; }
  docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id" 2>/dev/null || echo missing
}

wait_healthy() {
  local s st deadline=$((SECONDS + WAIT_SECONDS)) pending
  while :; do
    pending=()
    for s in "${SERVICES[@]}"; do
      st=$(health "$s")
      [ "$st" = healthy ] || pending+=("$s=$st")
    done
    [ ${#pending[@]} -eq 0 ] && return 0
    if [ $SECONDS -ge $deadline ]; then
      compose ps >&2 || true
      die "not healthy after ${WAIT_SECONDS}s: ${pending[*]} (see: make logs)"
    fi
    sleep 1
  done
}

case "${1:-}" in
  up)
    compose up -d
    log "waiting until ${SERVICES[*]} are healthy"
    wait_healthy
    if [ "${STACK:-}" = ha ]; then
      cat <<URLS
The cluster is up:
  dashboard + timeoutd API  http://localhost:${TIMEOUTD_PORT:-8080}/, :${TIMEOUTD_2_PORT:-8082}/, :${TIMEOUTD_3_PORT:-8083}/   (timeoutd-1, -2, -3; any shows the whole cluster)
  order API                 http://localhost:${ORDERS_PORT:-8081}/v1/orders, :${ORDERS_2_PORT:-8084}/v1/orders   (Authorization: Bearer ${ORDERS_API_TOKENS:-dev-token})
  NATS                      nats://localhost:${NATS_PORT:-4222},nats://localhost:${NATS_2_PORT:-4223},nats://localhost:${NATS_3_PORT:-4224}   (monitoring http://localhost:${NATS_MONITOR_PORT:-8222})
  Postgres (Patroni)        postgres://postgres:${POSTGRES_PASSWORD:-postgres}@localhost:${POSTGRES_PORT:-5432},localhost:${POSTGRES_2_PORT:-5433},localhost:${POSTGRES_3_PORT:-5434}/orders?target_session_attrs=read-write
                            (its members: STACK=ha scripts/stack.sh patroni list)
Next: make demo (load), STACK=ha scripts/stack.sh logs, make down.
URLS
      exit 0
    fi
    cat <<URLS
The platform is up:
  dashboard + timeoutd API  http://localhost:${TIMEOUTD_PORT:-8080}/   (API: /api/v1/stats)
  order API                 http://localhost:${ORDERS_PORT:-8081}/v1/orders   (Authorization: Bearer ${ORDERS_API_TOKENS:-dev-token})
  NATS                      nats://localhost:${NATS_PORT:-4222}   (monitoring http://localhost:${NATS_MONITOR_PORT:-8222})
  Postgres                  postgres://postgres:${POSTGRES_PASSWORD:-postgres}@localhost:${POSTGRES_PORT:-5432}/orders
Next: make demo (load), make logs, make down.
URLS
    if [ "${TRACING:-}" = 1 ]; then
      cat <<URLS
  OTLP receiver (Jaeger)    OTLP/HTTP http://localhost:${OTLP_HTTP_PORT:-4318}, gRPC localhost:${OTLP_GRPC_PORT:-4317};
                            query API http://localhost:${JAEGER_UI_PORT:-16686}/api/traces/<trace id>
URLS
    fi
    ;;
  down)
    [ "${STACK:-}" = ha ] || export COMPOSE_PROFILES=tracing
    if [ "${DOWN_VOLUMES:-}" = 1 ]; then compose down -v; else compose down; fi ;;
  logs) compose logs -f --tail=200 ;;
  dump) compose logs --no-color --tail=300 ;;
  wait) wait_healthy ;;
  patroni)
    [ "${STACK:-}" = ha ] || die "patroni: the Postgres cluster runs in the HA stack (STACK=ha)"
    shift
    for s in pg-1 pg-2 pg-3; do
      compose exec -T "$s" patronictl -c /etc/patroni/patroni.yml "$@" && exit 0
    done
    die "patroni: no Postgres member answered" ;;
  *) die "usage: scripts/stack.sh up|down|logs|dump|wait|patroni ARGS" ;;
esac
