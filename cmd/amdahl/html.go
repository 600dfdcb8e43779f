package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/amdahl-rt/amdahl/internal/report/htmlreport"
	"github.com/amdahl-rt/amdahl/internal/report/profiles"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// pageTopFuncs is how many functions report.html lists per phase.
const pageTopFuncs = 10

// profileTops returns the top functions per phase of the CPU profiles in
// dir (cpu.pprof and hosts/*/cpu.pprof, merged; internal/report/profiles), for
// report.html: nil, without an error, when dir holds no CPU profile (they
// went to Pyroscope, or telemetry was off).
func profileTops(dir string) ([]htmlreport.PhaseFuncs, error) {
	if _, err := profiles.Files(dir, false); err != nil {
		return nil, nil
	}
	tops, err := profiles.TopByPhase(dir, false, pageTopFuncs)
	if err != nil {
		return nil, err
	}
	out := make([]htmlreport.PhaseFuncs, 0, len(tops))
	for _, pt := range tops {
		pf := htmlreport.PhaseFuncs{Phase: pt.Phase, Unit: pt.Unit, Total: pt.Total, Funcs: make([]htmlreport.Func, 0, len(pt.Funcs))}
		for _, f := range pt.Funcs {
			pf.Funcs = append(pf.Funcs, htmlreport.Func{Name: f.Name, Flat: f.Flat, Cum: f.Cum})
		}
		out = append(out, pf)
	}
	return out, nil
}

// writeRunPage writes dir/report.html for amdahl run: the summary's
// attribution (the numbers of summary.json), the e2e distribution and the
// critical paths of the units fl saw.
func writeRunPage(dir string, s runtime.Summary, fl *attribution.Flame, byPhase bool) error {
	// A profile that cannot be read leaves its section out of the page and
	// fails the run's exit status; the page is still written.
	tops, profErr := profileTops(dir)
	in := htmlreport.Input{
		Title: fmt.Sprintf("amdahl run: scenario %s, variant %s", s.Scenario, s.Variant),
		Facts: []htmlreport.Fact{
			{Name: "settings", Value: fmt.Sprintf("transport %s, send %s, buffer %s, chunking %s/%s", s.Settings["ipc.transport"], s.Settings["ipc.send"],
				s.Settings["ipc.buffer"], s.Settings["chunking.algorithm"], s.Settings["chunking.accounting"])},
			{Name: "units", Value: fmt.Sprintf("%d: ok %d, failed %d, cancelled %d", s.Submitted, s.OK, s.Failed, s.Cancelled)},
			{Name: "elapsed", Value: fmt.Sprintf("%v, throughput %.1f/s", s.Elapsed.Round(time.Millisecond), s.Throughput)},
			{Name: "task hosts", Value: fmt.Sprintf("%d spawned, %d replaced; sidecar: %s", s.HostsSpawned, s.HostsReplaced, sidecarText(s))},
		},
		Report:   &s.Attribution,
		Profiles: tops,
	}
	if note := untracedNote(s); note != "" {
		in.Facts = append(in.Facts, htmlreport.Fact{Name: "trace context", Value: note})
	}
	if fl != nil {
		in.Sets = []htmlreport.Set{htmlreport.NewSet("all units", fl, byPhase,
			htmlreport.Mark{Name: "p50", At: s.Attribution.E2EP50}, htmlreport.Mark{Name: "p99", At: s.Attribution.E2EP99})}
	}
	if err := htmlreport.WriteFile(filepath.Join(dir, "report.html"), in); err != nil {
		return errors.Join(fmt.Errorf("write report.html: %w", err), profErr)
	}
	if profErr != nil {
		return fmt.Errorf("report.html: top functions per phase left out: %w", profErr)
	}
	return nil
}

// abPage is report.html of amdahl ab: the comparison (the numbers of
// ab.json) and each side's e2e distribution and critical paths.
func abPage(res abResult, base, cand attribution.Side, byPhase bool) htmlreport.Input {
	in := htmlreport.Input{
		Title: "amdahl ab: scenario " + res.Scenario,
		Facts: []htmlreport.Fact{
			{Name: "settings that differ", Value: res.differText()},
			{Name: "target rows", Value: targetText(&res.Comparison)},
			{Name: "runs", Value: fmt.Sprintf("%d baseline, %d candidate (interleaved), %d units per run, first %.0f %% left out as warm-up",
				res.Comparison.BaseRuns, res.Comparison.CandRuns, res.UnitsPerRun, 100*res.Warmup)},
			{Name: "run wall time gain", Value: pmInterval(res.WallGain)},
			{Name: "throughput gain", Value: pmInterval(res.ThroughputUp)},
		},
		Comparison: &res.Comparison,
	}
	for _, c := range res.Causal {
		in.Facts = append(in.Facts, htmlreport.Fact{Name: "causal weight", Value: causalText(c)})
	}
	in.Sets = abSets(flameOf(base), flameOf(cand), res.Comparison, byPhase)
	return in
}

// flameOf aggregates the critical paths of a side's units (with their
// trees).
func flameOf(side attribution.Side) *attribution.Flame {
	fl := &attribution.Flame{}
	for _, run := range side.Runs {
		for _, w := range run {
			fl.Add(w)
		}
	}
	return fl
}

// abSets is the baseline's and the candidate's e2e distribution and
// critical paths.
func abSets(base, cand *attribution.Flame, c attribution.Comparison, byPhase bool) []htmlreport.Set {
	return []htmlreport.Set{
		htmlreport.NewSet("baseline", base, byPhase, htmlreport.Mark{Name: "mean", At: c.BaseE2E}),
		htmlreport.NewSet("candidate", cand, byPhase, htmlreport.Mark{Name: "mean", At: c.CandE2E}),
	}
}

// reportPage is report.html of amdahl report: one set's attribution (rep)
// or, with a comparison, the A/B; the numbers of report --json.
func reportPage(files, baseline []string, rep *attribution.Report, c *attribution.Comparison, cfl, bfl *attribution.Flame, byPhase bool) htmlreport.Input {
	if c == nil {
		return htmlreport.Input{
			Title:  "amdahl report: " + strings.Join(files, ", "),
			Facts:  []htmlreport.Fact{{Name: "trace files", Value: strings.Join(files, ", ")}},
			Report: rep,
			Sets: []htmlreport.Set{htmlreport.NewSet("all units", cfl, byPhase,
				htmlreport.Mark{Name: "p50", At: rep.E2EP50}, htmlreport.Mark{Name: "p99", At: rep.E2EP99})},
		}
	}
	return htmlreport.Input{
		Title: "amdahl report: A/B",
		Facts: []htmlreport.Fact{
			{Name: "baseline", Value: strings.Join(baseline, ", ")},
			{Name: "candidate", Value: strings.Join(files, ", ")},
			{Name: "target rows", Value: targetText(c)},
		},
		Comparison: c,
		Sets:       abSets(bfl, cfl, *c, byPhase),
	}
}
