# shellcheck shell=bash
# Shared helpers of the project's scripts: sourced, never run.

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# apt_mirror prints the first Debian mirror apt is configured with, read from
# apt's own sources (deb822 .sources files, then one-line sources.list).
apt_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk '/^URIs:/ {print $2; exit}' "$f")
    case "$uri" in *debian-security*|"") ;; *) echo "$uri"; return 0 ;; esac
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk '$1=="deb" && $2 !~ /security/ {print ($2 ~ /^\[/ ? $3 : $2); exit}' "$f")
    [ -n "$uri" ] && { echo "$uri"; return 0; }
  done
  return 1
}

# input_hash prints a short hash of the given files' contents (and names),
# used to tag images so they are rebuilt only when their inputs change.
input_hash() {
  cat "$@" | sha256sum | cut -c1-12
}

# COMPOSE_FILE is the stack `make up` runs; COMPOSE_PROJECT names it.
COMPOSE_FILE=${COMPOSE_FILE:-deploy/compose/compose.yaml}
COMPOSE_PROJECT=${COMPOSE_PROJECT:-ordertimeout}

# compose runs the compose command this machine has on the project's stack:
# the `docker compose` plugin where present, else Debian's docker-compose
# (1.29, installed by scripts/ensure-docker.sh).
compose() {
  if docker compose version >/dev/null 2>&1; then
    docker compose -p "$COMPOSE_PROJECT" -f "$COMPOSE_FILE" "$@"
  elif command -v docker-compose >/dev/null 2>&1; then
    docker-compose -p "$COMPOSE_PROJECT" -f "$COMPOSE_FILE" "$@"
  else
    die "no compose command: install the Docker compose plugin (docker-compose-plugin) or run scripts/ensure-docker.sh"
  fi
}
