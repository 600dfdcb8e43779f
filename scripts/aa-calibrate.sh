#!/usr/bin/env bash
# A/A calibration of amdahl ab: runs N identical-sides experiments (default
# 20) of the taskhost scenario with ab's defaults and prints, for each, the
# measured e2e gain with its 95 % interval, then how many intervals hold 0
# (want about 19 of 20) and the median half-width. Not a CI test: it takes
# minutes and measures the machine as much as the code.
#
#   scripts/aa-calibrate.sh [N] [extra ab flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
shift || true
bin=$(mktemp -d)/amdahl
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/amdahl
hold=0
widths=()
for i in $(seq 1 "$n"); do
  start=$(date +%s)
  line=$("$bin" ab --scenario taskhost --progress never --json --seed "$i" "$@" |
    python3 -c 'import json,sys; m=json.load(sys.stdin)["comparison"]["measured"]; print(m["value"], m["lo"], m["hi"])')
  read -r v lo hi <<<"$line"
  secs=$(( $(date +%s) - start ))
  in=$(python3 -c "print(1 if $lo <= 0 <= $hi else 0)")
  hold=$((hold + in))
  w=$(python3 -c "print(round(100*($hi-($lo))/2, 2))")
  widths+=("$w")
  printf 'A/A %2d: measured %+.1f%% [%+.1f, %+.1f]  half-width %s pp  holds 0: %s  (%ss)\n' "$i" \
    "$(python3 -c "print(100*$v)")" "$(python3 -c "print(100*$lo)")" "$(python3 -c "print(100*$hi)")" "$w" "$in" "$secs"
done
median=$(printf '%s\n' "${widths[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
echo "intervals holding 0: $hold of $n; median half-width $median percentage points"
