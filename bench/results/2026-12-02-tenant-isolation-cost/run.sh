#!/bin/bash
# Tenant isolation against its cost (docs/BENCHMARKS.md, "Tenant
# isolation"), interleaved:
#   before - 5b586ce: command ids <kind>:<key>:<version>, no check of them
#            at ingest, no check of the fire subject at the deadline
#   after  - command ids with a nonce, checked at ingest; the fire subject
#            checked against the tenant's prefixes at each expiry; dead
#            letter ids with a digest
# The 10k/s storm (100,000 deadlines over 10 s), single commands, timeoutd
# alone, ROUNDS (5) rounds. Run from the repository root on a quiet machine:
#   bash bench/results/2026-12-02-tenant-isolation-cost/run.sh
set -u
root=$(git rev-parse --show-toplevel)
before=${BEFORE:-/tmp/ordertimeout-before-tenants}
[ -d "$before" ] || git -C "$root" worktree add -f "$before" 5b586ce
cd "$root/bench"
OUT=${OUT:-results/2026-12-02-tenant-isolation-cost}
grep -m1 'model name' /proc/cpuinfo
for i in $(seq 1 "${ROUNDS:-5}"); do
  for v in before after; do
    src=..
    [ "$v" = before ] && src=$before
    go run ./cmd/loadgen timeoutd -root "$src" -steps storm -n 1000 -storm-n 100000 -peers timeoutd \
      -out "$OUT/run-$i-$v.txt" || echo "run $i $v failed"
  done
done
