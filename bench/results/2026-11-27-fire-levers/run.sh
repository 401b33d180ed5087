#!/bin/bash
# The fire path's levers, interleaved: before (bc42bfa: every fire reads its rows, marks at once),
# plain (9db2af1 with TIMEOUTD_MARK_DELAY=1ns: plain timeouts fire without a read), delay5 (9db2af1's default 5ms), delay20.
cd /work/main/bench
OUT=results/2026-11-27-fire-levers
for i in 1 2 3; do
  for v in before plain delay5 delay20; do
    root=..; env=()
    case $v in
      before) root=/tmp/before;;
      plain) env=(-timeoutd-env TIMEOUTD_MARK_DELAY=1ns);;
      delay20) env=(-timeoutd-env TIMEOUTD_MARK_DELAY=20ms);;
    esac
    go run ./cmd/loadgen timeoutd -root $root -steps storm -n 1000 -storm-n 100000 -peers timeoutd "${env[@]}" \
      -storm-profiles $OUT/prof-$v-$i -out $OUT/run-$i-$v.txt > $OUT/log-$i-$v.txt 2>&1 || echo "run $i $v failed"
  done
done
echo done
