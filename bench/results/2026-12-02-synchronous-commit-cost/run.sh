#!/bin/bash
# Synchronous replication against its cost (docs/BENCHMARKS.md,
# "Synchronous replication's cost"), interleaved:
#   single  - timeoutd's Postgres is one server (ordertimeout/postgres:15)
#   patroni - a three-member cluster under Patroni (ordertimeout/patroni:15),
#             synchronous_mode_strict: a commit returns once the synchronous
#             standby flushed it; three etcd members beside it; timeoutd on
#             the multi-host URL (target_session_attrs=read-write)
# Both with harness.PostgresArgs (the in_force on the infra line lists what
# the cluster's bootstrap sets beside them). The same timeoutd, built from
# COMMIT (default HEAD) in a worktree of its own, so edits in progress in
# the work tree are not measured. The 10k/s storm (100,000 deadlines over
# 10 s; STORM_N), single commands, timeoutd alone, ROUNDS (5) rounds. Run from the
# repository root on a quiet machine:
#   bash bench/results/2026-12-02-synchronous-commit-cost/run.sh
set -u
root=$(git rev-parse --show-toplevel)
commit=$(git -C "$root" rev-parse --short "${COMMIT:-HEAD}")
src=${SRC:-/tmp/ordertimeout-sccost-$commit}
[ -d "$src" ] || git -C "$root" worktree add -f --detach "$src" "$commit"
cd "$root/bench"
OUT=${OUT:-results/2026-12-02-synchronous-commit-cost}
echo "timeoutd at $commit ($src)"
grep -m1 'model name' /proc/cpuinfo
uptime
for i in $(seq 1 "${ROUNDS:-5}"); do
  for pg in single patroni; do
    go run ./cmd/loadgen timeoutd -root "$src" -pg "$pg" -steps storm -n 1000 -storm-n "${STORM_N:-100000}" -peers timeoutd \
      -out "$OUT/run-$i-$pg.txt" || echo "run $i $pg failed"
  done
done
grep -m1 'model name' /proc/cpuinfo
uptime
