#!/usr/bin/env bash
# govulncheck ./... (make vuln): installs govulncheck from the module proxy
# (GOVULNCHECK_VERSION, default latest) and checks the root module and the
# bench module against the Go vulnerability database. That database is
# fetched from https://vuln.go.dev (or VULNDB, e.g. file:///path/to/mirror);
# when it cannot be reached (an offline machine), the check is SKIPPED with
# that reason and the script exits 0, so an offline `make` does not fail;
# any vulnerability found, or any other error, fails it.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
VERSION=${GOVULNCHECK_VERSION:-latest}
DB=${VULNDB:-https://vuln.go.dev}
status=0
for mod in . bench; do
  out=$(cd "$mod" && $GO run "golang.org/x/vuln/cmd/govulncheck@$VERSION" -db "$DB" ./... 2>&1)
  rc=$?
  if ((rc != 0)) && grep -qE 'fetching vulnerabilities|vuln\.go\.dev|no such host|dial tcp|connection refused' <<<"$out" &&
    ! grep -q 'Vulnerability #' <<<"$out"; then
    echo "vuln: SKIPPED for module $mod: the vulnerability database $DB is unreachable from this machine:"
    grep -E 'fetching vulnerabilities|dial tcp|no such host' <<<"$out" | head -3 | sed 's/^/  /'
    echo "  (run it where vuln.go.dev answers, or set VULNDB=file:///path/to/a/mirror)"
    continue
  fi
  echo "$out"
  ((rc != 0)) && status=$rc
done
exit $status
