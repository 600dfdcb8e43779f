#!/usr/bin/env bash
# A/A calibration of amdahl ab: runs N identical-sides experiments (default
# 20) of the taskhost scenario with ab's defaults and prints, for each, the
# measured e2e gain with its 95 % interval, its wall time and the machine's
# load average (1 min) when it ended, then how many intervals hold 0 (want
# about 19 of 20), the median half-width and the median wall time. Not a CI
# test: it takes minutes and measures the machine as much as the code.
#
#   scripts/aa-calibrate.sh [N] [extra ab flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
shift || true
bin=$(mktemp -d)/amdahl
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/amdahl
load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "ab flags: --scenario taskhost $*; load average at start $(load)"
hold=0
widths=()
secs_all=()
for i in $(seq 1 "$n"); do
  start=$(date +%s)
  read -r v lo hi < <("$bin" ab --scenario taskhost --progress never --json --seed "$i" "$@" |
    python3 -c 'import json,sys; m=json.load(sys.stdin)["comparison"]["measured"]; print(m["value"], m["lo"], m["hi"])')
  secs=$(($(date +%s) - start))
  in=$(python3 -c "print(1 if $lo <= 0 <= $hi else 0)")
  hold=$((hold + in))
  w=$(python3 -c "print(round(100*($hi-($lo))/2, 2))")
  widths+=("$w")
  secs_all+=("$secs")
  printf 'A/A %2d: measured %+.1f%% [%+.1f, %+.1f]  half-width %s pp  holds 0: %s  (%ss, load %s)\n' "$i" \
    "$(python3 -c "print(100*$v)")" "$(python3 -c "print(100*$lo)")" "$(python3 -c "print(100*$hi)")" "$w" "$in" "$secs" "$(load)"
done
echo "intervals holding 0: $hold of $n; median half-width $(printf '%s\n' "${widths[@]}" | median) percentage points;" \
  "median wall $(printf '%s\n' "${secs_all[@]}" | median) s; load average at end $(load)"
