#!/bin/bash
# The lease rules, the gate and the ownership view against their cost
# (docs/BENCHMARKS.md, "The gate and the lease rules"), interleaved:
#   before - 6b35f7e: the fire path's checks read piecewise
#   after  - the fire path takes one gate per batch and checks it again
#            before the publish; each heartbeat publishes the instance's
#            gate; each lease round reads every lease by the rules
# (with-fence/ holds the runs of a partition fence in the expiry stream,
# withdrawn since: docs/journal/2026-12-02-lease-rules.md.)
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
