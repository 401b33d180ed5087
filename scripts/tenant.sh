#!/usr/bin/env bash
# Adds, removes or re-prefixes a tenant (a producer service) of the
# platform, without Go and without restarting anything:
#   scripts/tenant.sh add NAME FIRE_PREFIX[,FIRE_PREFIX...]
#   scripts/tenant.sh prefixes NAME FIRE_PREFIX[,FIRE_PREFIX...]
#   scripts/tenant.sh remove NAME
#   make tenant-add TENANT=billing FIRE=billing.due.   (tenant-prefixes, tenant-remove alike)
# remove takes NAME out of the registry: its NATS user goes, its commands
# still in the streams are dead-lettered unknown_tenant, and its pending
# deadlines stay stored but fire no more: each ends at its deadline as a
# missed event, reason unknown_tenant, on timeouts.missed.NAME.<key>.
# prefixes replaces NAME's fire subject prefixes: its pending deadlines
# under none of the new ones end the same way, reason subject_not_allowed.
# A prefix given up may then go to another tenant: timeoutd checks every
# deadline against the registry as it is when it passes, so nothing of
# the former tenant fires into it. For add:
# 1. /natsconf of the project's NATS image adds NAME to the tenant registry
#    deploy/compose/tenants.json, with its fire subject prefixes and a new
#    password (its bcrypt hash in the registry; the password is printed
#    once), and renders deploy/compose/nats.conf again: NAME's user, which
#    may publish commands only on timeouts.cmd.NAME.<key>, and timeoutd's
#    right to publish on NAME's fire subjects;
# 2. the running NATS server (the three of STACK=ha) reload their
#    configuration (SIGHUP);
# 3. the streams bootstrap runs again, so that TIMEOUT_EXPIRIES captures
#    NAME's fire subjects;
# 4. timeoutd reads the registry again within a second
#    (TIMEOUTD_TENANTS_FILE) and accepts NAME's commands.
# Without a running stack only the two files change; `make up` uses them.
# Commit them: they are the platform's configuration. The tenant then
# connects as NAME (its inbox prefix _INBOX_NAME), publishes its commands on
# timeouts.cmd.NAME.<key> (its keys are NAME.<key>), reads its expiries
# through the durable consumer NAME on TIMEOUT_EXPIRIES and the dead
# letters of its commands through NAME-dlq on DEAD_LETTERS, filtered on
# dlq.timeoutd.NAME.> (docs/OPERATIONS.md, "Tenants").
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

usage="usage: scripts/tenant.sh add|prefixes NAME FIRE_PREFIX[,FIRE_PREFIX...] | remove NAME   (e.g. add billing billing.due.)"
verb=${1:-} name=${2:-} fire=${3:-}
case "$verb $#" in
  "add 3") change=(-add "$name" -fire "$fire") ;;
  "prefixes 3") change=(-prefixes "$name" -fire "$fire") ;;
  "remove 2") change=(-remove "$name") ;;
  *) die "$usage" ;;
esac
NATS_IMAGE=${NATS_IMAGE:-ordertimeout/nats:${ORDERTIMEOUT_IMAGE_TAG:-latest}}
nats_services=(nats)
if [ "${STACK:-}" = ha ]; then
  COMPOSE_FILE=deploy/compose/compose.ha.yaml
  COMPOSE_PROJECT=$COMPOSE_PROJECT-ha
  nats_services=(nats-1 nats-2 nats-3)
fi
docker image inspect "$NATS_IMAGE" >/dev/null 2>&1 || die "no image $NATS_IMAGE: run make images"

# 1. The registry and the NATS configuration, rewritten in place (the
# containers mount the files).
docker run --rm --network none --user "$(id -u):$(id -g)" -v "$PWD/deploy/compose:/compose" \
  --entrypoint /natsconf "$NATS_IMAGE" \
  -in /compose/nats.conf.tmpl -tenants /compose/tenants.json -out /compose/nats.conf "${change[@]}"

running=0
for s in "${nats_services[@]}"; do
  id=$(compose ps -q "$s" 2>/dev/null | head -n1 || true)
  [ -n "$id" ] || continue
  # 2. The server reloads its configuration: users and permissions change
  # without a restart. A reload it refuses keeps the old configuration and
  # says why in its log only: wait for the verdict there.
  since=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
  docker kill -s HUP "$id" >/dev/null
  verdict=
  for _ in $(seq 50); do
    verdict=$(docker logs --since "$since" "$id" 2>&1 | grep -E 'Reloaded server configuration|Failed to reload' | tail -n1 || true)
    [ -n "$verdict" ] && break
    sleep 0.1
  done
  case "$verdict" in
    *Reloaded*) log "$s reloaded its configuration" ;;
    *) die "$s did not reload its configuration: ${verdict:-no answer in 5s} (tenants.json and nats.conf are written: fix and send SIGHUP again)" ;;
  esac
  running=1
done
if [ "$running" = 0 ]; then
  log "no running stack: tenants.json and nats.conf changed; make up starts with them"
  exit 0
fi
if [ -n "$fire" ]; then
  # 3. The expiry stream captures the new fire subjects.
  out=$(compose run --rm --no-deps streams 2>&1) || { printf '%s\n' "$out" >&2; die "the streams bootstrap failed: run it again with compose run --rm streams"; }
  log "TIMEOUT_EXPIRIES captures $fire"
fi
# 4. timeoutd polls the registry every second.
log "tenant $name: timeoutd reads the registry within a second"
