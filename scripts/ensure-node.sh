#!/usr/bin/env bash
# Makes sure Node.js (18 or newer) and npm are installed, for the contract's
# check (docs/contract) and the Node.js example (examples/reservations-js):
# Debian's nodejs and npm packages, installed with apt-get as root on Debian
# when missing; elsewhere it says what to install.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] ||
    die "no node or npm on PATH: install Node.js 18 or newer with npm (Debian: apt-get install nodejs npm)"
  log "installing nodejs and npm from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  pkg=(apt-get install -y -qq --no-install-recommends nodejs npm)
  "${pkg[@]}" >/dev/null || { apt-get update -qq && "${pkg[@]}" >/dev/null; }
fi
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || die "node $(node --version) is too old: the contract's tools need Node.js 18 or newer"
log "node $(node --version), npm $(npm --version)"
