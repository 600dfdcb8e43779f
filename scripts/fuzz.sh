#!/usr/bin/env bash
# Runs every fuzz target of the module for DURATION each, one after the
# other: go test -run '^$' -fuzz '^Target$' -fuzztime DURATION ./pkg.
# Targets are found by grepping the test files for `func Fuzz`, so a new
# one is picked up without editing this script. The seed corpora
# (testdata/fuzz/<Target>) also run in plain `go test ./...`.
#
# Usage: scripts/fuzz.sh DURATION    (a -fuzztime value: 60s, 5m, 100000x)
#
# Exits non-zero if any target finds a failing input, after running the
# rest, and prints where each crasher was written; rerun one with
# go test -run '^Target/<name>$' ./pkg.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 DURATION   (a go test -fuzztime value: 60s, 5m, 100000x)" >&2
  exit 2
fi
dur=$1

# "dir target" for every fuzz target, sorted.
targets=$(grep -rE --include='*_test.go' --exclude-dir=.git --exclude-dir=vendor \
  '^func Fuzz[A-Za-z0-9_]*\(' . |
  sed -E 's|^\./(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*|\1 \2|' | sort -u)
if [ -z "$targets" ]; then
  echo "no fuzz targets found" >&2
  exit 2
fi

failed=()
while read -r dir target; do
  echo "=== $target (./$dir) for $dur"
  log=$(mktemp)
  if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$dur" "./$dir" >"$log" 2>&1; then
    # The last progress line carries the exec count.
    grep -E '^fuzz: elapsed' "$log" | tail -n 1 || true
    echo "--- ok $target"
  else
    cat "$log"
    crasher=$(sed -nE 's|.*Failing input written to (.*)$|\1|p' "$log" | head -n 1)
    if [ -n "$crasher" ]; then
      echo "--- FAIL $target: crasher written to $dir/$crasher"
      failed+=("$target: $dir/$crasher")
    else
      echo "--- FAIL $target (no crasher written: see the output above)"
      failed+=("$target: ./$dir")
    fi
  fi
  rm -f "$log"
done <<<"$targets"

if [ ${#failed[@]} -gt 0 ]; then
  echo
  echo "fuzzing found ${#failed[@]} failing target(s):"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo
echo "all $(wc -l <<<"$targets") fuzz targets ran for $dur without a finding"
