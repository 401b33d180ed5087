#!/bin/bash
# The fire path's safety fixes against their cost (issue 34, "Cost stays";
# docs/BENCHMARKS.md, "The fire path's safety fixes"), interleaved:
#   before - fdfa0fb: the levers of 2026-11-27 without the fixes
#   after  - the fixes: claims, room for keys in flight, the monotonic
#            schedule clock, the contact window, pins
# The 10k/s storm (100,000 deadlines over 10 s), single commands, timeoutd
# alone, ROUNDS (5) rounds. Run from the repository root on a quiet machine:
#   bash bench/results/2026-11-28-safety-cost/run.sh
set -u
root=$(git rev-parse --show-toplevel)
before=${BEFORE:-/tmp/ordertimeout-before}
[ -d "$before" ] || git -C "$root" worktree add -f "$before" fdfa0fb
cd "$root/bench"
OUT=${OUT:-results/2026-11-28-safety-cost}
grep -m1 'model name' /proc/cpuinfo
for i in $(seq 1 "${ROUNDS:-5}"); do
  for v in before after; do
    src=..
    [ "$v" = before ] && src=$before
    go run ./cmd/loadgen timeoutd -root "$src" -steps storm -n 1000 -storm-n 100000 -peers timeoutd \
      -out "$OUT/run-$i-$v.txt" || echo "run $i $v failed"
  done
done
