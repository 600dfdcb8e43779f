package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/amdahl-rt/amdahl/internal/report/htmlreport"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
	"github.com/spf13/cobra"
)

// reportFlags are the flags of `amdahl report`.
type reportFlags struct {
	asJSON     bool
	baseline   []string
	target     []string
	by         string
	maxSpans   int
	iterations int
	whatif     []string
	paired     bool
	warmup     float64
	htmlOut    string
	unit       string
	rows       string
	maxSpan    time.Duration
}

func newReportCmd() *cobra.Command {
	var f reportFlags
	cmd := &cobra.Command{
		Use:   "report FILE... [--baseline BASE...]",
		Short: "Attribute the units of work in OTLP JSON trace files; compare two sets A/B",
		Long: `report reads OTLP JSON trace files (amdahl's, or the OpenTelemetry Collector's
file exporter's) and prints per row its spans, mean and p99, critical-path
share q and naive share. Several files are several runs of one set. A
run --out directory stands for its trace.jsonl; given one, the table also
shows each row's CPU per unit from the directory's CPU profiles (parent
and task hosts), beside its critical time.

Units (--unit): amdahl.work spans, else each trace's root, or a selector.
Rows (--rows): amdahl's attributes, else the OTel semantic conventions
(service, span kind, rpc/http/db/messaging), or a YAML rules file.
docs/attribution.md explains both, the far side, gaps and bad timestamps.

With --baseline, the FILEs are the candidate: per row q, r (from the row's
own spans) and q·r; the gain predicted for the --target rows (Σ q·r and a
critical-path replay) against the measured one, each with a 95 % interval,
and a verdict. --whatif replays one set with rows made faster.`,
		Example: `  amdahl report out/trace.jsonl
  amdahl report out                                        # the same, with each row's CPU per unit
  amdahl report --by phase out/trace.jsonl
  amdahl report --html report.html out/trace.jsonl        # also a self-contained page
  amdahl report --whatif ipc.send=2x out/trace.jsonl      # no run: replay with ipc.send twice as fast
  amdahl report --baseline a/trace.jsonl --target ipc b/trace.jsonl
  amdahl report --baseline a1.jsonl,a2.jsonl,a3.jsonl --target ipc.send/request b1.jsonl b2.jsonl b3.jsonl`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{fmt.Errorf("report takes one trace file (or run --out directory) or more, got none")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runReport(cmd, args, f) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.asJSON, "json", false, "print JSON (docs/json.md) instead of a table")
	fl.StringSliceVar(&f.baseline, "baseline", nil, "trace files of the baseline runs (A/B comparison); repeat or separate by commas")
	fl.StringSliceVar(&f.target, "target", nil, "rows the change is about: a component (ipc), component.phase (ipc.send), a row (ipc.send/request) or phase/direction (send/request)")
	fl.StringVar(&f.by, "by", "component", "rows by component (ipc.send/request) or by phase (send/request: components folded)")
	fl.IntVar(&f.maxSpans, "max-spans", 20_000_000, "refuse a trace file with more spans than this (memory bound)")
	fl.IntVar(&f.iterations, "iterations", 400, "bootstrap resamples for the intervals")
	fl.Float64Var(&f.warmup, "warmup", 0, "leave out the first fraction (0 to 0.5) of each file's units, by start, as warm-up (amdahl ab leaves out 0.1)")
	fl.BoolVar(&f.paired, "paired", false, "the i-th baseline and candidate files are a pair of runs (as amdahl ab makes them): intervals are Student's t over the pairs")
	fl.StringVar(&f.htmlOut, "html", "", "also write the report as one self-contained HTML page (table, charts, e2e distribution, critical-path flame graph) to this file")
	fl.StringArrayVar(&f.whatif, "whatif", nil, "replay the critical path with rows N× as fast: ROWS=Nx, e.g. ipc.send=2x (repeatable; no --baseline)")
	fl.StringVar(&f.unit, "unit", "auto", "units of work: auto, amdahl, roots, or KEY=PATTERN,… on name, kind, service, attributes")
	fl.StringVar(&f.rows, "rows", "auto", "rows from: auto, amdahl, semconv, or a YAML rules file")
	fl.DurationVar(&f.maxSpan, "max-span-duration", attribution.DefaultMaxSpanDuration, "leave out (and count) spans longer than this")
	return cmd
}

// runReport is amdahl report: the flags checked, the candidate files
// read, then one set's attribution (reportOne) or an A/B comparison
// against --baseline (reportAB).
func runReport(cmd *cobra.Command, args []string, f reportFlags) error {
	if err := checkChoice("by", f.by, "component", "phase"); err != nil {
		return err
	}
	if f.maxSpans < 1 {
		return usageError{fmt.Errorf("--max-spans %d: want at least 1", f.maxSpans)}
	}
	if len(f.target) > 0 && len(f.baseline) == 0 {
		return usageError{fmt.Errorf("--target needs --baseline: a target is what a change between two runs is about")}
	}
	if f.warmup < 0 || f.warmup > 0.5 {
		return usageError{fmt.Errorf("--warmup %v: want 0 to 0.5", f.warmup)}
	}
	inp, err := reportInput(f.unit, f.rows, f.maxSpan)
	if err != nil {
		return err
	}
	inp.Limits = spans.Limits{MaxSpans: f.maxSpans}
	factors := map[string]float64{}
	for _, w := range f.whatif {
		sel, fac, err := attribution.ParseWhatIf(w)
		if err != nil {
			return usageError{err}
		}
		factors[sel] = fac
	}
	if len(factors) > 0 && len(f.baseline) > 0 {
		return usageError{fmt.Errorf("--whatif replays one set of runs: use it without --baseline")}
	}
	// A run --out directory stands for its trace.jsonl; with one such set,
	// its CPU profiles give each row's CPU.
	r := reportRun{f: f, inp: inp, in: &spans.Interner{}, factors: factors}
	var cpuDir string
	r.files, cpuDir = runDirs(args)
	if f.htmlOut != "" {
		r.cfl, r.bfl = &attribution.Flame{}, &attribution.Flame{}
	}
	cand, cacc, err := readSide(r.files, inp, r.in, len(f.baseline) > 0 || len(factors) > 0, len(factors) > 0, f.warmup, r.cfl)
	if err != nil {
		return err
	}
	if len(f.baseline) == 0 {
		return r.reportOne(cmd, cand, cacc, cpuDir)
	}
	return r.reportAB(cmd.OutOrStdout(), cand, cacc)
}

// reportRun is one amdahl report between its flags and its output.
type reportRun struct {
	f        reportFlags
	inp      attribution.Input
	in       *spans.Interner
	factors  map[string]float64 // --whatif
	files    []string           // the candidate's trace files
	cfl, bfl *attribution.Flame // report.html's critical paths (nil without --html)
}

// reportOne prints one set's attribution, with each row's CPU when cpuDir
// is a run --out directory, and the --whatif replay.
func (r reportRun) reportOne(cmd *cobra.Command, cand attribution.Side, cacc *attribution.Accumulator, cpuDir string) error {
	byPhase := r.f.by == "phase"
	rep := cacc.Report(byPhase)
	if cpuDir != "" {
		procs, err := runProcessesCPU(cpuDir)
		if err == nil {
			err = addCPU(&rep, cpuDir, byPhase, procs)
		}
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "amdahl report: no CPU per row: %v\n", err)
		}
	}
	if r.f.htmlOut != "" {
		if err := htmlreport.WriteFile(r.f.htmlOut, reportPage(r.files, nil, &rep, nil, r.cfl, nil, byPhase)); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
	}
	var wi *attribution.WhatIf
	if len(r.factors) > 0 {
		w, err := attribution.Replay(cand, r.factors, attribution.CompareOptions{ByPhase: byPhase, Iterations: r.f.iterations})
		if err != nil {
			return usageError{err}
		}
		wi = &w
	}
	out := cmd.OutOrStdout()
	if r.f.asJSON {
		return writeJSON(out, reportJSON{SchemaVersion: runtime.SchemaVersion, Report: rep, WhatIf: wi})
	}
	if err := rep.WriteText(out); err != nil {
		return err
	}
	if wi == nil {
		return nil
	}
	_, err := fmt.Fprintf(out, "\n%s\n", wi.Text())
	return err
}

// reportAB reads --baseline and prints its comparison with the candidate.
func (r reportRun) reportAB(out io.Writer, cand attribution.Side, cacc *attribution.Accumulator) error {
	byPhase := r.f.by == "phase"
	baseline, _ := runDirs(r.f.baseline)
	base, bacc, err := readSide(baseline, r.inp, r.in, true, true, r.f.warmup, r.bfl)
	if err != nil {
		return err
	}
	cmp, err := attribution.Compare(base, cand, attribution.CompareOptions{Target: r.f.target, ByPhase: byPhase, Iterations: r.f.iterations, Paired: r.f.paired})
	if err != nil {
		return usageError{err}
	}
	if r.f.htmlOut != "" {
		if err := htmlreport.WriteFile(r.f.htmlOut, reportPage(r.files, baseline, nil, &cmp, r.cfl, r.bfl, byPhase)); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
	}
	if r.f.asJSON {
		return writeJSON(out, compareJSON{SchemaVersion: runtime.SchemaVersion,
			Baseline: bacc.Report(byPhase), Candidate: cacc.Report(byPhase), Comparison: cmp})
	}
	return cmp.WriteText(out)
}

// reportInput makes the reader's Input of --unit, --rows and --max-span-duration.
func reportInput(unit, rows string, maxSpan time.Duration) (attribution.Input, error) {
	var inp attribution.Input
	mode, sel, err := attribution.ParseUnits(unit)
	if err != nil {
		return inp, usageError{fmt.Errorf("--unit: %w", err)}
	}
	inp.Units, inp.Select = mode, sel
	if maxSpan <= 0 || maxSpan > attribution.MaxMaxSpanDuration {
		return inp, usageError{fmt.Errorf("--max-span-duration %v: want above 0 and at most %v", maxSpan, attribution.MaxMaxSpanDuration)}
	}
	inp.MaxSpanDuration = maxSpan
	if inp.Rows, err = attribution.LoadRows(rows); err != nil {
		return inp, usageError{fmt.Errorf("--rows: %w", err)}
	}
	return inp, nil
}

// reportJSON is amdahl report --json of one set of runs; WhatIf is null
// without --whatif.
type reportJSON struct {
	SchemaVersion int                 `json:"schema_version"`
	Report        attribution.Report  `json:"report"`
	WhatIf        *attribution.WhatIf `json:"whatif"`
}

// compareJSON is amdahl report --json --baseline: each side's attribution
// and their comparison.
type compareJSON struct {
	SchemaVersion int                    `json:"schema_version"`
	Baseline      attribution.Report     `json:"baseline"`
	Candidate     attribution.Report     `json:"candidate"`
	Comparison    attribution.Comparison `json:"comparison"`
}

// readSide reads each file as one run into an accumulator and, with keep,
// keeps its units for a comparison (with their trees when nodes: the
// baseline's, for the replay). With warmup, the first fraction of each
// file's units (by start) is left out, as amdahl ab does.
// fl, when not nil, also gets every unit (for report.html).
func readSide(paths []string, inp attribution.Input, in *spans.Interner, keep, nodes bool, warmup float64, fl *attribution.Flame) (attribution.Side, *attribution.Accumulator, error) {
	var side attribution.Side
	acc := &attribution.Accumulator{}
	for _, p := range paths {
		p = strings.TrimSpace(p)
		var works []attribution.Work
		// The accumulator sees each unit with its tree (the rows' mean and
		// p99 come from it); only a kept unit loses it, after, unless the
		// replay needs it.
		diag, err := inp.ReadFile(p, in, func(w attribution.Work) {
			if keep || warmup > 0 {
				works = append(works, w)
			} else {
				acc.Add(w)
				if fl != nil {
					fl.Add(w)
				}
			}
		})
		if err != nil {
			return side, nil, fmt.Errorf("report: %w", err)
		}
		if warmup > 0 {
			slices.SortStableFunc(works, func(a, b attribution.Work) int { return cmp.Compare(a.Root.Start, b.Root.Start) })
			works = works[int(warmup*float64(len(works))):]
		}
		if keep || warmup > 0 {
			for i := range works {
				acc.Add(works[i])
				if fl != nil {
					fl.Add(works[i])
				}
				if !nodes {
					works[i].Nodes = nil
				}
			}
		}
		acc.AddDiagnostics(diag)
		if keep {
			side.Runs = append(side.Runs, works)
		}
	}
	return side, acc, nil
}

// runDirs replaces each run --out directory among paths by its
// trace.jsonl, and returns the directory when paths is one such.
func runDirs(paths []string) ([]string, string) {
	out := make([]string, len(paths))
	dir := ""
	for i, p := range paths {
		out[i] = p
		if fi, err := os.Stat(strings.TrimSpace(p)); err == nil && fi.IsDir() {
			out[i] = filepath.Join(strings.TrimSpace(p), "trace.jsonl")
			if len(paths) == 1 {
				dir = strings.TrimSpace(p)
			}
		}
	}
	return out, dir
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print amdahl's version, module version and VCS revision",
		Example: `  amdahl version
  amdahl --version
  amdahl version --json          # version, module_version, vcs_revision, go_version`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), versionInfo())
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "amdahl %s\n", versionString())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (docs/json.md) instead of a line")
	return cmd
}

// versionString is amdahl's version with the module version and VCS
// revision the binary was built from, as far as the build recorded them
// ("go run" and tests record no revision).
func versionString() string {
	i := versionInfo()
	v := i.Version
	if i.GoVersion == "" {
		return v // no build information
	}
	if mv := i.ModuleVersion; mv != "" && mv != "(devel)" {
		v += " (module " + mv + ")"
	}
	if i.VCSRevision != "" {
		modified := ""
		if i.VCSModified {
			modified = ", modified"
		}
		v += fmt.Sprintf(" (revision %.12s%s)", i.VCSRevision, modified)
	}
	return v + " " + i.GoVersion
}
