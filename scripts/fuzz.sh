#!/usr/bin/env bash
# Runs every Go fuzz target of the repository (func FuzzXxx in a _test.go
# file, found with grep, bench/ included: it is a module of its own) with
# `go test -fuzz` for FUZZTIME each (default 10s), one after the other.
# Committed seed corpora (testdata/fuzz/<target>/) are replayed first by the
# fuzzing run itself. A failure stops the script with the failing input,
# which go test writes under testdata/fuzz/<target>/ of its package: commit
# it with the fix as a regression seed.
#
#   scripts/fuzz.sh                 # every target, 10s each (make fuzz)
#   FUZZTIME=100000x scripts/fuzz.sh # the short run of make test: a count of
#                                   # executions, immune to the deadline race
#                                   # of go1.26's fuzz coordinator (go#75804)
#   scripts/fuzz.sh FuzzDecodeCommand FuzzWheel   # only these targets
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
# Two cores are shared: one fuzzing worker per core at most.
PARALLEL=${FUZZ_PARALLEL:-2}

# "<module dir> <package dir> <target>" for every fuzz target.
targets=$(grep -rlE --include='*_test.go' '^func Fuzz[A-Z0-9_][A-Za-z0-9_]*\(f \*testing\.F\)' . |
  grep -v '/testdata/' | sort |
  while read -r file; do
    dir=$(dirname "$file")
    mod=.
    [[ $dir == ./bench || $dir == ./bench/* ]] && mod=./bench
    grep -oE '^func Fuzz[A-Z0-9_][A-Za-z0-9_]*' "$file" | sed 's/^func //' |
      while read -r name; do echo "$mod $dir $name"; done
  done)
if [[ -z $targets ]]; then
  echo "fuzz.sh: no fuzz targets found" >&2
  exit 1
fi

ran=0
while read -r mod dir name; do
  if (($# > 0)) && [[ " $* " != *" $name "* ]]; then
    continue
  fi
  rel=${dir#"$mod"}
  echo "== $name in ${dir#./} for $FUZZTIME"
  (cd "$mod" && $GO test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -parallel "$PARALLEL" "./${rel#/}")
  ran=$((ran + 1))
done <<<"$targets"
echo "fuzz.sh: $ran target(s) fuzzed for $FUZZTIME each, no failure"
