#!/bin/bash
# What the watch of a primary-only pool's sessions costs (internal/pgparams
# takeover.go: a timer reset and stopped around every read of a session),
# interleaved, on the Patroni cluster (docs/BENCHMARKS.md, "Synchronous
# replication's cost", the same storm): timeoutd built from BEFORE (default
# 5f55c81, the pool without the watch) and AFTER (default HEAD), each in a
# worktree of its own, ROUNDS (3) rounds. Run from the repository root on a
# quiet machine:
#   bash bench/results/2026-12-03-session-watch-cost/run.sh
set -u
root=$(git rev-parse --show-toplevel)
cd "$root/bench"
OUT=${OUT:-results/2026-12-03-session-watch-cost}
grep -m1 'model name' /proc/cpuinfo
uptime
declare -A src
for side in before after; do
  if [ $side = before ]; then rev=${BEFORE:-5f55c81}; else rev=${AFTER:-HEAD}; fi
  commit=$(git -C "$root" rev-parse --short "$rev")
  src[$side]=/tmp/ordertimeout-watchcost-$commit
  [ -d "${src[$side]}" ] || git -C "$root" worktree add -f --detach "${src[$side]}" "$commit" >/dev/null
  echo "$side: timeoutd at $commit (${src[$side]})"
done
for i in $(seq 1 "${ROUNDS:-3}"); do
  for side in before after; do
    go run ./cmd/loadgen timeoutd -root "${src[$side]}" -pg patroni -steps storm -n 1000 -storm-n "${STORM_N:-100000}" -peers timeoutd \
      -out "$OUT/run-$i-$side.txt" || echo "run $i $side failed"
  done
done
grep -m1 'model name' /proc/cpuinfo
uptime
