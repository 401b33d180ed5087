#!/usr/bin/env bash
# Checks the language-neutral contract, docs/contract/asyncapi.yaml and its
# JSON Schemas, with the AsyncAPI project's own parser (@asyncapi/parser,
# pinned by docs/contract/package-lock.json): npm ci from the registry the
# machine's npm is configured with (its cache first), then validate.mjs.
# The Go side of the check (the schemas against pkg/events' types and
# decoders) is pkg/events' TestContract, run by `go test ./pkg/events`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

command -v npm >/dev/null 2>&1 || die "no npm on PATH: run scripts/ensure-node.sh (make node)"
dir=docs/contract
# npm ci starts from an empty node_modules; skip it while the installed
# tree is the lockfile's (a copy of the lockfile marks it).
if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.installed-lock.json"; then
  npm ci --prefix "$dir" --prefer-offline --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null ||
    die "npm ci in $dir failed: is an npm registry reachable (npm config get registry)?"
  cp "$dir/package-lock.json" "$dir/node_modules/.installed-lock.json"
fi
(cd "$dir" && node validate.mjs asyncapi.yaml)
