#!/bin/bash
# The stream's partition fence against its cost (docs/BENCHMARKS.md, "The
# stream's fence"), interleaved:
#   before - 6b35f7e: no fence, the fire path's checks read piecewise (the
#            lease-rules issue's starting point)
#   after  - every event expects its partition's fence in the expiry
#            stream; one fence message per partition taken over
# One server (the single stack): each event goes on its own, asynchronously,
# with two headers more; a replicated stream's atomic batches are measured
# by e2e's TestCluster. The 10k/s storm (100,000 deadlines over 10 s),
# single commands, timeoutd alone, ROUNDS (5) rounds. Run from the
# repository root on a quiet machine:
#   bash bench/results/2026-12-02-stream-fence-cost/run.sh
set -u
root=$(git rev-parse --show-toplevel)
before=${BEFORE:-/tmp/ordertimeout-before-lease-rules}
[ -d "$before" ] || git -C "$root" worktree add -f "$before" 6b35f7e
cd "$root/bench"
OUT=${OUT:-results/2026-12-02-stream-fence-cost}
grep -m1 'model name' /proc/cpuinfo
for i in $(seq 1 "${ROUNDS:-5}"); do
  for v in before after; do
    src=..
    [ "$v" = before ] && src=$before
    go run ./cmd/loadgen timeoutd -root "$src" -steps storm -n 1000 -storm-n 100000 -peers timeoutd \
      -out "$OUT/run-$i-$v.txt" || echo "run $i $v failed"
  done
done
