#!/usr/bin/env bash
# Runs `go test` with the given arguments, its output streamed as usual, and
# when it fails prints again, at the very end, what failed: every "--- FAIL"
# line with the test's log lines under it, every panic with its first lines,
# and the failing packages. A CI log is often kept as its head and tail; the
# e2e package's container logs would otherwise push a failure's reason out
# of both.
#
#   scripts/gotest.sh -count=1 -p 1 ./...     # as make test runs it
set -uo pipefail
GO=${GO:-go}
log=$(mktemp "${TMPDIR:-/tmp}/gotest.XXXXXX")
trap 'rm -f "$log"' EXIT

"$GO" test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo
  echo "==> go test $* failed (exit $rc); what failed:"
  # A failing test's lines are indented under its "--- FAIL"; the
  # containers' timestamped log lines in between are skipped, and any other
  # unindented line ends the block. A panic keeps its first 40 lines.
  awk '
    /^[0-9]{4}\/[0-9]{2}\/[0-9]{2} [0-9:]{8} / { next }
    /^[ \t]*--- FAIL/ { block = 1; print; next }
    /^panic: / { panic = 40 }
    panic > 0 { print; panic--; next }
    /^FAIL[ \t]/ { block = 0; print; next }
    block && /^[ \t]/ { print; next }
    { block = 0 }
  ' "$log" | head -n 400
fi
exit "$rc"
