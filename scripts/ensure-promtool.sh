#!/usr/bin/env bash
# Makes sure promtool, which checks and unit-tests the alert rules
# (deploy/prometheus), is installed: Debian's prometheus package ships it,
# installed with apt-get as root on Debian when missing (without its
# recommends; the package's server is not needed); elsewhere it says what
# to install. PROMTOOL points the tests at another binary.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

bin=${PROMTOOL:-$(command -v promtool || echo /usr/bin/promtool)}
if [ ! -x "$bin" ]; then
  [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] ||
    die "no promtool at $bin: install Prometheus's promtool (Debian: apt-get install prometheus), or set PROMTOOL"
  log "installing promtool from Debian's prometheus package"
  export DEBIAN_FRONTEND=noninteractive
  pkg=(apt-get install -y -qq --no-install-recommends prometheus)
  "${pkg[@]}" >/dev/null || { apt-get update -qq && "${pkg[@]}" >/dev/null; }
fi
log "$("$bin" --version 2>&1 | head -1)"
