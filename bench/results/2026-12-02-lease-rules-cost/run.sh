#!/bin/bash
# The lease rules, the gate and the stream's fence against their cost
# (docs/BENCHMARKS.md, "The stream's fence"), interleaved:
#   before - 6b35f7e: no partition fences in the expiry stream, the fire
#            path's checks read piecewise
#   after  - every expiry event carries its partition's fence
#            (Nats-Expected-Last-Subject-Sequence with -Subject), checked by
#            JetStream at the store; the fire path takes one gate per batch
#            and checks it again before the publish
# The 10k/s storm (100,000 deadlines over 10 s), single commands, timeoutd
# alone, ROUNDS (5) rounds. Run from the repository root on a quiet machine:
#   bash bench/results/2026-12-02-lease-rules-cost/run.sh
set -u
root=$(git rev-parse --show-toplevel)
before=${BEFORE:-/tmp/ordertimeout-before-lease-rules}
[ -d "$before" ] || git -C "$root" worktree add -f "$before" 6b35f7e
cd "$root/bench"
OUT=${OUT:-results/2026-12-02-lease-rules-cost}
grep -m1 'model name' /proc/cpuinfo
for i in $(seq 1 "${ROUNDS:-5}"); do
  for v in before after; do
    src=..
    [ "$v" = before ] && src=$before
    go run ./cmd/loadgen timeoutd -root "$src" -steps storm -n 1000 -storm-n 100000 -peers timeoutd \
      -out "$OUT/run-$i-$v.txt" || echo "run $i $v failed"
  done
done
