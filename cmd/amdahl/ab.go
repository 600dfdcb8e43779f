package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/amdahl-rt/amdahl/internal/outfile"
	"github.com/amdahl-rt/amdahl/internal/report/htmlreport"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/ab"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/spf13/cobra"
)

type abFlags struct {
	scenario, scenarioFile string
	sets, base, cand       []string
	target                 []string
	runs                   int
	warmup                 float64
	out                    string
	asJSON, markdown       bool
	by                     string
	progress               string
	seed                   uint64
	inFlight               int
	block                  int
	hostArgv               []string // tests: the task host program
}

func newABCmd() *cobra.Command {
	var f abFlags
	cmd := &cobra.Command{
		Use:   "ab --baseline name=value... --candidate name=value...",
		Short: "Run an A/B experiment: interleaved runs of two settings, predicted and measured gain with intervals",
		Long: `ab runs a scenario under two sets of settings in pairs of runs, each run
with fresh task hosts and the same seeds (the same units on both sides).
The two runs of a pair run side by side, taking turns of --block units
(the side going first alternating), so that a change of the machine's
speed falls on both sides alike.

ab compares the sides as amdahl report does: per row q (critical-path
share), r (1 - own work per unit, candidate / baseline) and q·r; the gain
predicted for the target rows (Σ q·r, and a critical-path replay with the
target spans scaled); the measured e2e gain; the gain in run wall time and
throughput; a verdict. Intervals are 95 %, Student's t over the pairs (the
independent draws), each figure computed per pair; gains and r from the
pairs' log ratios.

The target rows come from the settings that differ: ipc.* targets the ipc
rows and the task host's receive, deserialize and serialize; chunking.* the
chunking rows; runtime.* the runtime rows; perturb.<component>.<phase> that
row. --target overrides.

A causal experiment: --candidate perturb.ipc.send=200us makes every
ipc.send phase sleep 200 µs longer (also perturb.ipc.serialize and
perturb.taskhost.execute); ab then prints the row's causal weight, Δ e2e /
Δ the row's own work per unit, beside its critical share (q / naive share).
Where they disagree, the critical path is wrong or the phase overlaps
other work. One perturbation at a time.

Load: each side keeps one unit in flight per task host (a closed loop;
--in-flight overrides), so that units do not wait in the queue and a run
measures the code, not the queue (runtime.queue is its own row). A side's
wall time is that of its own turns. The first --warmup fraction of each
run's units is left out (hosts starting, caches filling).`,
		Example: `  amdahl ab --scenario taskhost --baseline ipc.buffer=128KiB --candidate ipc.buffer=1MiB
  amdahl ab --scenario fanout --baseline chunking.algorithm=legacy --candidate chunking.algorithm=cached --runs 6
  amdahl ab --scenario taskhost --candidate perturb.taskhost.execute=500us   # causal weight of execute
  amdahl ab --scenario taskhost --runs 20 --json            # A/A: identical sides`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAB(cmd.Context(), cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.scenario, "scenario", "taskhost", "built-in scenario: taskhost, fanout, mixed or orchestrated")
	fl.StringVar(&f.scenarioFile, "scenario-file", "", "scenario file (YAML or JSON); overrides --scenario")
	fl.StringArrayVar(&f.sets, "set", nil, "a setting for both sides, name=value (repeatable)")
	fl.StringArrayVar(&f.base, "baseline", nil, "a setting of the baseline, name=value (repeatable)")
	fl.StringArrayVar(&f.cand, "candidate", nil, "a setting of the candidate, name=value (repeatable)")
	fl.StringSliceVar(&f.target, "target", nil, "rows the change is about (default: from the settings that differ); see amdahl report --help")
	fl.IntVar(&f.runs, "runs", 10, "runs per side")
	fl.Float64Var(&f.warmup, "warmup", 0.1, "fraction of each run's units (the first to start) left out as warm-up, 0 to 0.5")
	fl.StringVar(&f.out, "out", "", "write each run's trace.jsonl and summary.json under DIR/baseline-N/ and DIR/candidate-N/, and ab.json and report.html")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON (docs/json.md; the same as --out's ab.json) instead of a table")
	fl.BoolVar(&f.markdown, "markdown", false, "print Markdown instead of a table")
	fl.StringVar(&f.by, "by", "component", "rows by component or by phase")
	fl.StringVar(&f.progress, "progress", "auto", "progress over runs on stderr: auto (when stderr is a terminal), always or never")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the bootstrap resampling")
	fl.IntVar(&f.block, "block", 0, "units a side runs per turn (the two runs of a pair take turns), up to 100000; 0: its units in flight (one per task host)")
	fl.IntVar(&f.inFlight, "in-flight", 0, "units in flight at most (closed loop); 0: runtime.nodes of the side, so that no unit waits for a host")
	return cmd
}

// abResult is what ab prints as JSON (and writes to ab.json).
type abResult struct {
	SchemaVersion int                    `json:"schema_version"`
	Scenario      string                 `json:"scenario"`
	Baseline      map[string]string      `json:"baseline_settings"`
	Candidate     map[string]string      `json:"candidate_settings"`
	Differ        []string               `json:"settings_that_differ"`
	Runs          []ab.Run               `json:"runs"`
	UnitsPerRun   int                    `json:"units_per_run"`
	Warmup        float64                `json:"warmup_fraction"`
	Block         int                    `json:"units_per_turn"`
	Comparison    attribution.Comparison `json:"comparison"`
	WallGain      attribution.Interval   `json:"wall_time_gain"`
	ThroughputUp  attribution.Interval   `json:"throughput_gain"`
	Causal        []attribution.Causal   `json:"causal,omitempty"`
	Interrupted   bool                   `json:"interrupted"`
}

func runAB(ctx context.Context, cmd *cobra.Command, f abFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := checkABFlags(f); err != nil {
		return err
	}
	sc, err := loadScenario(f.scenario, f.scenarioFile)
	if err != nil {
		return err
	}
	// The feature waves are the process's, common to both sides: an
	// invalid wave variable is reported once, not as a side's error.
	if _, err := runtime.DefaultSettings(); err != nil {
		return usageError{err}
	}
	sides, err := abSides(f)
	if err != nil {
		return err
	}
	differ := ab.SettingsThatDiffer(sides[0].Settings.Map(), sides[1].Settings.Map())
	target := f.target
	derived := len(target) == 0
	if derived {
		target = ab.Targets(differ)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	bar := newRunProgress(stderr, 2*f.runs, f.progress)
	cfg := ab.Config{Scenario: sc, Sides: sides, Runs: f.runs, Warmup: f.warmup, InFlight: f.inFlight, Block: f.block,
		OutDir: f.out, HostArgv: f.hostArgv, Logger: logger, OnRun: bar.add}
	bar.start()
	runs, interrupted, err := ab.RunPairs(ctx, cfg)
	bar.stop()
	if err != nil {
		return err
	}
	base, cand, bWall, cWall, bThr, cThr := splitPairs(runs)
	if len(base.Runs) < 2 {
		return fmt.Errorf("ab: interrupted before two runs of each side finished")
	}
	opt := attribution.CompareOptions{Target: target, IgnoreUnmatched: derived, ByPhase: f.by == "phase", Seed: f.seed, Paired: true}
	comparison, err := attribution.Compare(base, cand, opt)
	if err != nil {
		return usageError{err}
	}
	res := abResult{SchemaVersion: runtime.SchemaVersion, Scenario: sc.Name, Baseline: sides[0].Settings.Map(), Candidate: sides[1].Settings.Map(), Differ: differ,
		Runs: runs, UnitsPerRun: cmp.Or(sides[0].Settings.Count, sc.Count), Warmup: f.warmup, Block: cfg.UnitsPerTurn(sides[0].Settings), Comparison: comparison, Interrupted: interrupted,
		WallGain: attribution.MeanGain(bWall, cWall, opt)}
	// Throughput gain: the candidate's throughput over the baseline's, - 1.
	thr := attribution.MeanGain(cThr, bThr, opt) // 1 - mean(b)/mean(c)
	res.ThroughputUp = attribution.Interval{Value: 1/(1-thr.Value) - 1, Lo: 1/(1-thr.Lo) - 1, Hi: 1/(1-thr.Hi) - 1}
	res.Causal = causalWeights(differ, base, cand, opt)
	if f.out != "" {
		if err := writeABOut(f.out, res, base, cand, opt.ByPhase); err != nil {
			return err
		}
	}
	if err := writeAB(stdout, res, f, len(bWall), len(cWall)); err != nil {
		return err
	}
	if interrupted {
		return fmt.Errorf("ab: interrupted after %d runs; the comparison above covers them", len(runs))
	}
	return nil
}

// abSides resolves each side's settings: the common --set, then the
// side's own, then its variant.
func abSides(f abFlags) ([2]ab.Side, error) {
	sides := [2]ab.Side{{Name: "baseline"}, {Name: "candidate"}}
	for i, own := range [][]string{f.base, f.cand} {
		var err error
		sets := slices.Concat(f.sets, own, []string{"variant=" + sides[i].Name})
		if sides[i].Settings, err = runtime.ResolveSettings(sets, nil); err != nil {
			return sides, usageError{fmt.Errorf("--%s: %w", sides[i].Name, err)}
		}
	}
	return sides, nil
}

// splitPairs sorts the runs by side, with each run's wall time and
// throughput. Pairs: run i of each side ran back to back; an interrupted
// pair is left out, so both sides have as many runs.
func splitPairs(runs []ab.Run) (base, cand attribution.Side, bWall, cWall, bThr, cThr []float64) {
	for _, r := range runs {
		if r.Side == "baseline" {
			base.Runs = append(base.Runs, r.Works)
			bWall, bThr = append(bWall, float64(r.Wall)), append(bThr, r.Throughput)
		} else {
			cand.Runs = append(cand.Runs, r.Works)
			cWall, cThr = append(cWall, float64(r.Wall)), append(cThr, r.Throughput)
		}
	}
	n := min(len(base.Runs), len(cand.Runs))
	base.Runs, cand.Runs = base.Runs[:n], cand.Runs[:n]
	return base, cand, bWall[:n], cWall[:n], bThr[:n], cThr[:n]
}

// causalWeights is a causal experiment's result: when exactly one
// perturbation setting differs, the perturbed row's weight Δe2e / Δown,
// shown beside its critical share (none when the scenario has no such
// row).
func causalWeights(differ []string, base, cand attribution.Side, opt attribution.CompareOptions) []attribution.Causal {
	var perturbed []string
	for _, name := range differ {
		if strings.HasPrefix(name, "perturb.") {
			perturbed = append(perturbed, name)
		}
	}
	if len(perturbed) != 1 {
		return nil
	}
	c, err := attribution.CausalWeight(base, cand, strings.TrimPrefix(perturbed[0], "perturb."), opt)
	if err != nil {
		return nil // the scenario has no such row
	}
	return []attribution.Causal{c}
}

// writeABOut writes ab.json and report.html into the --out directory.
func writeABOut(dir string, res abResult, base, cand attribution.Side, byPhase bool) error {
	b, err := marshalJSON(res)
	if err == nil {
		err = outfile.WriteFile(filepath.Join(dir, "ab.json"), b)
	}
	if err != nil {
		return fmt.Errorf("write ab.json: %w", err)
	}
	if err := htmlreport.WriteFile(filepath.Join(dir, "report.html"), abPage(res, base, cand, byPhase)); err != nil {
		return fmt.Errorf("write report.html: %w", err)
	}
	return nil
}

// checkABFlags rejects flag values out of range as usage errors.
func checkABFlags(f abFlags) error {
	if f.runs < 2 || f.runs > 1000 {
		return usageError{fmt.Errorf("--runs %d: want 2 to 1000 (intervals are over runs)", f.runs)}
	}
	if f.block < 0 || f.block > 100_000 {
		return usageError{fmt.Errorf("--block %d: want 1 to 100000 units per turn, or 0 for the units in flight", f.block)}
	}
	if f.warmup < 0 || f.warmup > 0.5 {
		return usageError{fmt.Errorf("--warmup %v: want 0 to 0.5", f.warmup)}
	}
	if f.asJSON && f.markdown {
		return usageError{errors.New("--json and --markdown: choose one")}
	}
	if err := checkChoice("by", f.by, "component", "phase"); err != nil {
		return err
	}
	return checkChoice("progress", f.progress, "auto", "always", "never")
}

// writeAB prints the result as --json, --markdown or text: the header,
// the comparison, the run-level gains and any causal weight.
func writeAB(stdout io.Writer, res abResult, f abFlags, nBase, nCand int) error {
	if f.asJSON {
		return writeJSON(stdout, res)
	}
	write, item := res.Comparison.WriteText, "%s\n"
	gains := fmt.Sprintf("Run wall time gain %s, throughput gain %s (over %d and %d runs).\n",
		pmInterval(res.WallGain), pmInterval(res.ThroughputUp), nBase, nCand)
	if f.markdown {
		write, item = res.Comparison.WriteMarkdown, "- %s\n"
		gains = fmt.Sprintf("- run wall time gain %s, throughput gain %s.\n", pmInterval(res.WallGain), pmInterval(res.ThroughputUp))
	}
	if err := writeABHeader(stdout, res); err != nil {
		return err
	}
	if err := write(stdout); err != nil {
		return err
	}
	var tail strings.Builder
	tail.WriteString(gains)
	for _, c := range res.Causal {
		fmt.Fprintf(&tail, item, causalText(c))
	}
	_, err := io.WriteString(stdout, tail.String())
	return err
}

func writeABHeader(w io.Writer, r abResult) error {
	nb, nc := 0, 0
	for _, run := range r.Runs {
		if run.Side == "baseline" {
			nb++
		} else {
			nc++
		}
	}
	_, err := fmt.Fprintf(w, "ab: scenario %s, %d baseline and %d candidate runs in pairs (side by side, turns of %d units, order alternating), %d units per run, first %.0f %% of each run's units left out as warm-up\nsettings that differ: %s\ntarget rows: %s\n\n",
		r.Scenario, nb, nc, r.Block, r.UnitsPerRun, 100*r.Warmup, r.differText(), targetText(&r.Comparison))
	return err
}

// differText is each setting that differs as "name baseline → candidate",
// or "none (A/A)".
func (r abResult) differText() string {
	if len(r.Differ) == 0 {
		return "none (A/A)"
	}
	parts := make([]string, len(r.Differ))
	for i, k := range r.Differ {
		parts[i] = fmt.Sprintf("%s %s → %s", k, r.Baseline[k], r.Candidate[k])
	}
	return strings.Join(parts, ", ")
}

// targetText is the comparison's target rows, or "none".
func targetText(c *attribution.Comparison) string {
	if len(c.Target) == 0 {
		return "none"
	}
	return strings.Join(c.Target, ", ")
}

// causalText says a causal weight beside the critical path's claim.
func causalText(c attribution.Causal) string {
	verdict := "they agree"
	if !c.Weight.Contains(c.CriticalShare) {
		verdict = "they disagree: the row overlaps other work, the critical path is wrong for it, or other rows moved with it (see the rows outside the target)"
	}
	return fmt.Sprintf("Causal weight of %s: %.2f ± %.2f of each nanosecond added to it (%v per unit) reached e2e; its critical share (q / naive share) is %.2f — %s.",
		c.Row, c.Weight.Value, c.Weight.HalfWidth(), time.Duration(c.Added).Round(time.Microsecond), c.CriticalShare, verdict)
}

func pmInterval(i attribution.Interval) string {
	if !i.Defined() {
		return "-"
	}
	return fmt.Sprintf("%.1f%% ± %.1f", 100*i.Value, 100*i.HalfWidth())
}

// runProgress is a progress bar over runs on stderr (a terminal, or
// always).
type runProgress struct {
	w     io.Writer
	total int
	done  int
	on    bool
	begin time.Time
}

func newRunProgress(w io.Writer, total int, mode string) *runProgress {
	p := newProgress(w, total, mode)
	return &runProgress{w: w, total: total, on: p.on}
}

func (p *runProgress) start() { p.begin = time.Now() }

func (p *runProgress) add() {
	p.done++
	if !p.on {
		return
	}
	const width = 30
	fill := min(width, p.done*width/max(p.total, 1))
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d runs  %s ", strings.Repeat("#", fill), strings.Repeat(".", width-fill), p.done, p.total,
		time.Since(p.begin).Round(time.Second))
}

func (p *runProgress) stop() {
	if p.on && p.done > 0 {
		fmt.Fprintln(p.w)
	}
}
