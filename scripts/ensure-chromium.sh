#!/usr/bin/env bash
# Makes sure a Chromium the browser tests can drive is installed: Debian's
# chromium package (/usr/bin/chromium), installed with apt-get as root on
# Debian when missing; elsewhere it says what to install. CHROMIUM_PATH
# points the tests at another binary.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

bin=${CHROMIUM_PATH:-/usr/bin/chromium}
if [ ! -x "$bin" ]; then
  [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] ||
    die "no Chromium at $bin: install chromium (or set CHROMIUM_PATH)"
  log "installing chromium from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
fi
log "$("$bin" --version 2>/dev/null | head -1)"
