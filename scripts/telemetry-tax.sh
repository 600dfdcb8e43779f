#!/usr/bin/env bash
# telemetry-tax.sh: what telemetry costs a run. It builds amdahl once, then
# runs N interleaved pairs of `amdahl run --scenario S --json`, one with
# telemetry as configured (spans, metrics, attribution) and one with
# OTEL_SDK_DISABLED=true, alternating which goes first, and prints per pair
#
#   throughput ratio  on/off  (below 1: telemetry costs throughput)
#   e2e p50 ratio     on/off  (above 1: telemetry lengthens units)
#   CPU ratio         on/off  (user+system seconds of amdahl and its task
#                              hosts: the cost, less sensitive to other load)
#   runtime CPU ratio on/off  (the amdahl process's own CPU per unit,
#                              Summary.process_cpu_ns: where telemetry
#                              runs, without the hosts' noise)
#   runtime/host CPU on/off   (the amdahl process's CPU per unit over its
#                              task hosts' CPU per unit (CPU less runtime
#                              CPU): the hosts' work is the same in both
#                              arms, so it corrects for how fast the
#                              machine ran each run. On the 2-vCPU VM one
#                              run's CPU per unit varies by ±15 %, which
#                              the plain ratios carry; this one's interval
#                              is a third as wide. Printed only, not in
#                              the per-pair table)
#   host busy         on/off  (throughput times the hosts' CPU per unit:
#                              the hosts' CPU seconds per second, how busy
#                              they were. The machine's speed cancels out:
#                              on the 2-vCPU VM a pair's throughput ratio
#                              and its hosts' CPU-per-unit ratio correlate
#                              at r = -0.99, and this ratio's interval is
#                              4-7x narrower than throughput's. It
#                              reads as the throughput ratio as long as
#                              telemetry leaves the hosts' CPU per unit
#                              alone; CPU the hosts spend because of it
#                              counts here as busy, not as lost. Printed
#                              only)
#   e2e p50 per host CPU on/off (e2e p50 over the hosts' CPU per unit: the
#                              same correction for e2e p50. Printed only)
#   task units' e2e p50, fanout units' e2e p50 on/off (each kind's own
#                              median, Summary.e2e_by_kind, in a run of
#                              both kinds such as mixed: which kind
#                              carries the e2e p50 tax. Printed only)
#
# The three corrected ratios assume the hosts do the same work per unit in
# both runs of a ratio; under -r, cur/base's do not hold where the change
# is to what the hosts do (runtime.host_procs cut it by a third).
#
# then the median and min–max of each, and the geometric mean with its
# 95 % interval. Both arms read the runtime's own
# measurements (Summary.throughput_per_s, Summary.e2e_p50_ns), which do not
# depend on telemetry; e2e_p50_ns is within 0.05 % (attribution.FineSketch;
# before 9fea218 it moved in steps of 2 %, so a REV older than that reads
# its p50 in those steps). The load average is printed before and after: on a
# shared machine, quote it with the ratios. An interval covers the pairs'
# noise, not how the machine drifts over the hour: on the 2-vCPU VM two
# sets of 100 pairs of the same code, half an hour apart, gave taxes of
# 1.2 % and 4.6 % with disjoint intervals. Run sets at different times
# and quote their range. BenchmarkTelemetryTax (runtime/bench_test.go)
# measures the same ratios with both arms in one process, in blocks a
# fraction of a second apart, without process start (runtime/README.md,
# "In one process").
#
# With -r REV it also builds amdahl at git revision REV and runs its pair
# in the same rounds (the four runs in an order rotated per round), so the
# tax of REV ("base") and of the work tree ("cur") are measured under the
# same load. It then also prints the change itself, "cur/base on": per
# round, cur's telemetry-on run over base's. Use that to judge a change:
# the two taxes' difference carries the noise of both off arms too (the
# same code, yet on this 2-vCPU VM sets of 24 pairs gave base/cur off-arm
# ratios from 0.976 to 1.033, moving the taxes' difference by as much).
#
# With -o it measures what --out costs instead: both arms run with
# telemetry on, "on" with --out to a fresh directory (the trace file, the
# profiles and summary.json written), "off" without; the on run's trace
# file must hold every unit (amdahl report of it counts them), or under
# OTEL_TRACES_SAMPLER every unit the run attributed. Telemetry "as
# configured" takes the sampler from the environment too:
# OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=0.25
# measures the tax of attributing one unit in four.
#
# Arguments after -- go to every amdahl run: -- --scenario-file F runs the
# scenario in F instead of -s's, e.g. one workload of a mixed scenario
# alone, to see which workload carries its tax (-s orchestrated runs the
# orchestrated task units alone).
#
# With -b VAR=VALUE[,VAR=VALUE...] the off arm runs with telemetry on and
# that environment instead of OTEL_SDK_DISABLED=true: a baseline other than
# everything off. -b OTEL_TRACES_SAMPLER=always_off measures what the units'
# spans and their accounting cost over a run whose units are all sampled
# out (trace context still on the pipe and the gRPC calls, roots still
# made); the tax against off is the two's product.
#
# With -k SETS it runs SETS sets of N pairs, one after the other, prints
# each set's summary as it ends, and then pools them: per ratio, the
# geometric mean over the sets of the sets' geometric means, with a 95 %
# interval from Student's t over the sets (their mean log ratios). A set's
# interval covers its pairs' noise; the pooled one also covers how the
# machine drifts from set to set, which on the 2-vCPU VM is the larger
# part (mixed's e2e p50 tax went from 0.8 % to 5.1 % over twelve sets of
# 40 pairs at one code: docs/measurements/telemetry-cost.md, "December 5, 08:17").
# Quote the pooled figure for a goal.
#
# Usage: scripts/telemetry-tax.sh [-n pairs] [-k sets] [-s scenario] [-r rev] [-o | -b env] [-- extra amdahl run args]
#   e.g. scripts/telemetry-tax.sh -n 10 -s mixed -r HEAD~3
#        scripts/telemetry-tax.sh -n 40 -k 10 -s mixed
# Needs go, git and jq.
set -euo pipefail

pairs=10
nsets=1
scenario=taskhost
rev=
out=
baseline=
while getopts "n:k:s:r:ob:h" opt; do
	case $opt in
	n) pairs=$OPTARG ;;
	k) nsets=$OPTARG ;;
	s) scenario=$OPTARG ;;
	r) rev=$OPTARG ;;
	o) out=1 ;;
	b) baseline=$OPTARG ;;
	*) sed -n '2,/^set -euo/{/^set -euo/!p}' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[[ ${1:-} == -- ]] && shift
extra=("$@")
if ! [[ $pairs =~ ^[1-9][0-9]*$ ]] || ((pairs > 1000)); then
	echo "telemetry-tax: -n $pairs: want a whole number of pairs, 1..1000" >&2
	exit 2
fi
if ! [[ $nsets =~ ^[1-9][0-9]*$ ]] || ((nsets > 100)); then
	echo "telemetry-tax: -k $nsets: want a whole number of sets, 1..100" >&2
	exit 2
fi
command -v jq >/dev/null || { echo "telemetry-tax: needs jq" >&2; exit 2; }
off_env=(OTEL_SDK_DISABLED=true)
if [[ -n $baseline ]]; then
	if [[ -n $out ]]; then
		echo "telemetry-tax: -b and -o: -o measures --out against telemetry on; give one of them" >&2
		exit 2
	fi
	IFS=, read -ra off_env <<<"$baseline"
	for kv in "${off_env[@]}"; do
		if ! [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]]; then
			echo "telemetry-tax: -b $baseline: want VAR=VALUE[,VAR=VALUE...], got \"$kv\"" >&2
			exit 2
		fi
	done
	off_env=(OTEL_SDK_DISABLED=false "${off_env[@]}")
fi

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
# The task units' and the fanout units' e2e p50 of a summary (0 where the
# run had one kind, or the build predates e2e_by_kind).
kinds_p50='"\(.e2e_by_kind.taskhost.e2e_p50_ns // 0) \(.e2e_by_kind.fanout.e2e_p50_ns // 0)"'
trap 'rm -rf "$work"' EXIT
export GOFLAGS=${GOFLAGS:--buildvcs=false}
(cd "$root" && go build -o "$work/cur" ./cmd/amdahl && go build -o "$work/ratiostats" ./scripts/ratiostats)
builds=(cur)
if [[ -n $rev ]]; then
	mkdir "$work/src"
	git -C "$root" archive "$rev" | tar -x -C "$work/src"
	(cd "$work/src" && go build -o "$work/base" ./cmd/amdahl)
	builds=(base cur)
fi

# run BUILD ARM OUT: one run, its --json summary in OUT and its CPU seconds
# (user + system, children included) in OUT.cpu.
run() {
	local build=$1 arm=$2 out=$3 args=() envs=(OTEL_SDK_DISABLED=false)
	if [[ -n $out_mode ]]; then
		rm -rf "$work/out"
		[[ $arm == on ]] && args=(--out "$work/out")
	elif [[ $arm == off ]]; then
		envs=("${off_env[@]}")
	fi
	local TIMEFORMAT='%U %S'
	{ time env "${envs[@]}" "$work/$build" run --scenario "$scenario" --json ${args[@]+"${args[@]}"} ${extra[@]+"${extra[@]}"} >"$out" 2>"$out.err"; } 2>"$out.time" ||
		{ cat "$out.err" >&2; exit 1; }
	awk '{ print $1 + $2 }' "$out.time" >"$out.cpu"
	if [[ -n $out_mode && $arm == on ]]; then
		# Every unit the run attributed (all of them, unless
		# OTEL_TRACES_SAMPLER samples) must be in the file.
		local want got
		want=$(jq -r .attribution.works "$out")
		if [[ -z ${OTEL_TRACES_SAMPLER:-} ]]; then
			want=$(jq -r .submitted "$out")
		fi
		got=$("$work/$build" report --json "$work/out/trace.jsonl" | jq -r .report.works)
		if [[ $got != "$want" ]]; then
			echo "telemetry-tax: the trace file of a run that attributed $want units holds $got ($(jq -r .submitted "$out") submitted)" >&2
			exit 1
		fi
	fi
}

out_mode=$out
what="telemetry (on: as configured, off: OTEL_SDK_DISABLED=true)"
[[ -n $out_mode ]] && what="--out (telemetry on in both; on: with --out, off: without)"
[[ -n $baseline ]] && what="telemetry (on: as configured, off: telemetry on with $baseline)"
echo "measuring $what"
names=(throughput "e2e p50" CPU "runtime CPU" "runtime/host CPU" "host busy" "e2e p50 per host CPU" "task units' e2e p50" "fanout units' e2e p50")
# run_pairs: one set of the pairs, each pair's ratios in $work/BUILD.ratios
# (and, with -r, $work/change.ratios).
run_pairs() {
	printf '%4s %5s %9s %10s %10s %9s %9s %9s %9s %7s %7s %9s %8s %8s %9s\n' pair build first thr_on thr_off thr_ratio p50_on_us p50_off_us p50_ratio cpu_on cpu_off cpu_ratio rt_on_us rt_off_us rt_ratio
	runs=()
	for b in "${builds[@]}"; do runs+=("$b on" "$b off"); done
	for ((i = 1; i <= pairs; i++)); do
		declare -A first=()
		for ((k = 0; k < ${#runs[@]}; k++)); do
			read -r b arm <<<"${runs[(i - 1 + k) % ${#runs[@]}]}"
			[[ -n ${first[$b]:-} ]] || first[$b]=$arm
			run "$b" "$arm" "$work/$b.$arm.json"
		done
		for b in "${builds[@]}"; do
			# process_cpu_ns: the amdahl process's own CPU (builds before it
			# was in the summary give 0, and no runtime CPU ratio).
			read -r ton pon ron non < <(jq -r '"\(.throughput_per_s) \(.e2e_p50_ns) \((.process_cpu_ns // 0) / .submitted) \(.submitted)"' "$work/$b.on.json")
			read -r toff poff roff noff < <(jq -r '"\(.throughput_per_s) \(.e2e_p50_ns) \((.process_cpu_ns // 0) / .submitted) \(.submitted)"' "$work/$b.off.json")
			# Each kind's e2e p50 (e2e_by_kind: runs of more than one kind;
			# 0 without it, and no ratio).
			read -r kton kfon < <(jq -r "$kinds_p50" "$work/$b.on.json")
			read -r ktoff kfoff < <(jq -r "$kinds_p50" "$work/$b.off.json")
			if [[ $(jq -r .attribution.works "$work/$b.on.json") == 0 ]]; then
				echo "telemetry-tax: the telemetry-on run attributed no unit: is OTEL_SDK_DISABLED or sampling set?" >&2
				exit 1
			fi
			awk -v i="$i" -v b="$b" -v f="${first[$b]}" -v ton="$ton" -v toff="$toff" -v pon="$pon" -v poff="$poff" \
				-v con="$(cat "$work/$b.on.json.cpu")" -v coff="$(cat "$work/$b.off.json.cpu")" -v ron="$ron" -v roff="$roff" \
				-v non="$non" -v noff="$noff" -v kton="$kton" -v ktoff="$ktoff" -v kfon="$kfon" -v kfoff="$kfoff" 'BEGIN {
				rr = (ron > 0 && roff > 0) ? ron / roff : 0
				# The hosts CPU per unit: all CPU less the runtime CPU.
				hon = con * 1e9 / non - ron; hoff = coff * 1e9 / noff - roff
				rh = (rr > 0 && hon > 0 && hoff > 0) ? (ron / hon) / (roff / hoff) : 0
				# The hosts busy, and e2e p50 per host CPU (see the top).
				hb = (rr > 0 && hon > 0 && hoff > 0) ? (ton * hon) / (toff * hoff) : 0
				hp = (rr > 0 && hon > 0 && hoff > 0) ? (pon / hon) / (poff / hoff) : 0
				printf "%4d %5s %9s %10.1f %10.1f %9.3f %9.0f %9.0f %9.3f %7.2f %7.2f %9.3f %8.1f %8.1f %9.3f\n", i, b, f, ton, toff, ton/toff, pon/1000, poff/1000, pon/poff, con, coff, con/coff, ron/1000, roff/1000, rr
				kt = (kton > 0 && ktoff > 0) ? kton / ktoff : 0
				kf = (kfon > 0 && kfoff > 0) ? kfon / kfoff : 0
				printf "%.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f\n", ton/toff, pon/poff, con/coff, rr, rh, hb, hp, kt, kf >> "/dev/stderr"
			}' 2>>"$work/$b.ratios"
		done
		if [[ -n $rev ]]; then
			# The change itself: cur's on run over base's, in the same round
			# (the off arms, the same code in both builds, add only noise).
			read -r tc pc cc rc nc < <(jq -r '"\(.throughput_per_s) \(.e2e_p50_ns) \((.process_cpu_ns // 0) / .submitted) \(.submitted)"' "$work/cur.on.json" | awk -v c="$(cat "$work/cur.on.json.cpu")" '{ print $1, $2, c, $3, $4 }')
			read -r tb pb cb rb nb < <(jq -r '"\(.throughput_per_s) \(.e2e_p50_ns) \((.process_cpu_ns // 0) / .submitted) \(.submitted)"' "$work/base.on.json" | awk -v c="$(cat "$work/base.on.json.cpu")" '{ print $1, $2, c, $3, $4 }')
			read -r ktc kfc < <(jq -r "$kinds_p50" "$work/cur.on.json")
			read -r ktb kfb < <(jq -r "$kinds_p50" "$work/base.on.json")
			awk -v tc="$tc" -v tb="$tb" -v pc="$pc" -v pb="$pb" -v cc="$cc" -v cb="$cb" -v rc="$rc" -v rb="$rb" -v nc="$nc" -v nb="$nb" \
				-v ktc="$ktc" -v ktb="$ktb" -v kfc="$kfc" -v kfb="$kfb" 'BEGIN {
				rr = (rc > 0 && rb > 0) ? rc / rb : 0
				hc = cc * 1e9 / nc - rc; hb = cb * 1e9 / nb - rb
				ok = rr > 0 && hc > 0 && hb > 0
				rh = ok ? (rc / hc) / (rb / hb) : 0
				printf "%.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f\n", tc/tb, pc/pb, cc/cb, rr, rh, ok ? (tc * hc) / (tb * hb) : 0, ok ? (pc / hc) / (pb / hb) : 0,
					(ktc > 0 && ktb > 0) ? ktc / ktb : 0, (kfc > 0 && kfb > 0) ? kfc / kfb : 0
			}' >>"$work/change.ratios"
		fi
		unset first
	done
	echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# summarize: per ratio of the set just run, the median, min and max of the
# pairs, and the geometric mean with its 95 % interval (Student's t over
# the pairs' log ratios, as amdahl ab computes its intervals): an interval
# that holds 1 does not tell the tax from noise.
# With -r, "cur/base on" is the change: cur's telemetry-on run over base's
# in the same round.
summarize() {
	summaries=()
	for b in "${builds[@]}"; do summaries+=("$b:on/off:$work/$b.ratios"); done
	[[ -n $rev ]] && summaries+=("cur/base:on:$work/change.ratios")
	for summary in "${summaries[@]}"; do
		IFS=: read -r b kind file <<<"$summary"
		for col in 1 2 3 4 5 6 7 8 9; do
			((col >= 4)) && awk -v c="$col" '$c == 0 { z = 1 } END { exit !z }' "$file" && continue
			# The set's mean log ratio goes to $work/pooled, for -k.
			cut -d' ' -f"$col" "$file" | "$work/ratiostats" set "$b ${names[col - 1]}" "$kind" "$work/pooled"
		done
	done
}

for ((set = 1; set <= nsets; set++)); do
	rm -f "$work"/*.ratios
	((nsets > 1)) && echo "set $set of $nsets"
	echo "scenario $scenario, $pairs pairs${rev:+, base $rev}; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
	run_pairs
	summarize
done
((nsets > 1)) || exit 0
# Pooled over the sets: per ratio, the geometric mean of the sets'
# geometric means, with a 95 % interval from Student's t over the sets'
# mean log ratios, and the sets' least and greatest geometric means.
echo "pooled over $nsets sets of $pairs pairs"
"$work/ratiostats" pool <"$work/pooled"
