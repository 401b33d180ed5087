#!/bin/bash
# The fire path's levers, interleaved (docs/BENCHMARKS.md, "The fire path's levers"):
#   before  - bc42bfa: every fire reads its rows, a mark starts at once
#   plain   - plain timeouts fire without a read; marks at once (TIMEOUTD_MARK_DELAY=1ns)
#   delay5  - the same, marks gathered for 5ms
#   delay20 - the same, marks gathered for 20ms (the default since)
# Run from the repository root: bash bench/results/2026-11-27-fire-levers/run.sh
set -u
root=$(git rev-parse --show-toplevel)
before=${BEFORE:-/tmp/ordertimeout-before}
[ -d "$before" ] || git -C "$root" worktree add -f "$before" bc42bfa
cd "$root/bench"
OUT=${OUT:-results/2026-11-27-fire-levers}
for i in 1 2 3; do
  for v in before plain delay5 delay20; do
    src=..; env=()
    case $v in
      before) src=$before;;
      plain) env=(-timeoutd-env TIMEOUTD_MARK_DELAY=1ns);;
      delay5) env=(-timeoutd-env TIMEOUTD_MARK_DELAY=5ms);;
      delay20) env=(-timeoutd-env TIMEOUTD_MARK_DELAY=20ms);;
    esac
    go run ./cmd/loadgen timeoutd -root "$src" -steps storm -n 1000 -storm-n 100000 -peers timeoutd "${env[@]}" \
      -storm-profiles "$OUT/prof-$v-$i" -out "$OUT/run-$i-$v.txt" || echo "run $i $v failed"
  done
done
