package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/amdahl-rt/amdahl/internal/outfile"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/amdahl-rt/amdahl/internal/htmlreport"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
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
	hostArgv               []string // tests: the task host program
}

func newABCmd() *cobra.Command {
	var f abFlags
	cmd := &cobra.Command{
		Use:   "ab --baseline name=value... --candidate name=value...",
		Short: "Run an A/B experiment: interleaved runs of two settings, predicted and measured gain with intervals",
		Long: `ab runs a scenario under two sets of settings, interleaved (A B, then B A,
alternating, so that both sides see the same machine, and each baseline
run is paired with the candidate run beside it), each run with fresh
task hosts and the same seeds, and compares them as amdahl report does: per
row q (the baseline's critical-path share), r (1 - mean span duration in the
candidate / in the baseline, from the row's own spans) and q·r; the gain
predicted for the target rows (Σ q·r, and a critical-path replay of the
baseline's units with the target spans scaled); the measured e2e gain; and
the gain in run wall time — each with a 95 % bootstrap interval over pairs
of runs, so that a drift of the machine's speed cancels out — and a
verdict.

The target rows come from the settings that differ: ipc.* targets the ipc
rows and the task host's receive, deserialize and serialize; chunking.* the
chunking rows; runtime.* the runtime rows; perturb.<component>.<phase> that
row. --target overrides.

A causal experiment: --candidate perturb.ipc.send=200us makes every
ipc.send phase sleep 200 µs longer (also perturb.ipc.serialize and
perturb.taskhost.execute); ab then prints the row's causal weight, Δ e2e /
Δ the row's own work per unit, beside its critical share (q / naive share).
On a serial phase both are near 1; where they disagree, the critical path
is wrong or the phase overlaps other work. One perturbation at a time: with
two, neither weight can be told apart.

Load: ab keeps as many units in flight as there are task hosts (a closed
loop: the next unit is submitted when one ends; --in-flight overrides), so
that units do not wait for a host or in the queue and each run measures the
code, not the queue (what is left of the wait is the runtime.queue row). The first --warmup fraction of each run's units (by start) is left
out of the attribution (hosts starting, caches filling).`,
		Example: `  amdahl ab --scenario taskhost --baseline ipc.buffer=128KiB --candidate ipc.buffer=1MiB
  amdahl ab --scenario fanout --baseline chunking.algorithm=legacy --candidate chunking.algorithm=cached --runs 6
  amdahl ab --scenario taskhost --candidate perturb.taskhost.execute=500us   # causal weight of execute
  amdahl ab --scenario taskhost --runs 20 --json            # A/A: identical sides`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAB(cmd.Context(), cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.scenario, "scenario", "taskhost", "built-in scenario: taskhost, fanout or mixed")
	fl.StringVar(&f.scenarioFile, "scenario-file", "", "scenario file (YAML or JSON); overrides --scenario")
	fl.StringArrayVar(&f.sets, "set", nil, "a setting for both sides, name=value (repeatable)")
	fl.StringArrayVar(&f.base, "baseline", nil, "a setting of the baseline, name=value (repeatable)")
	fl.StringArrayVar(&f.cand, "candidate", nil, "a setting of the candidate, name=value (repeatable)")
	fl.StringSliceVar(&f.target, "target", nil, "rows the change is about (default: from the settings that differ); see amdahl report --help")
	fl.IntVar(&f.runs, "runs", 10, "runs per side")
	fl.Float64Var(&f.warmup, "warmup", 0.1, "fraction of each run's units (the first to start) left out as warm-up, 0 to 0.5")
	fl.StringVar(&f.out, "out", "", "write each run's trace.jsonl and summary.json under DIR/baseline-N/ and DIR/candidate-N/, and ab.json and report.html")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
	fl.BoolVar(&f.markdown, "markdown", false, "print Markdown instead of a table")
	fl.StringVar(&f.by, "by", "component", "rows by component or by phase")
	fl.StringVar(&f.progress, "progress", "auto", "progress over runs on stderr: auto (when stderr is a terminal), always or never")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the bootstrap resampling")
	fl.IntVar(&f.inFlight, "in-flight", 0, "units in flight at most (closed loop); 0: runtime.nodes of the side, so that no unit waits for a host")
	return cmd
}

// abRun is one run of one side.
type abRun struct {
	Side       string        `json:"side"`
	Index      int           `json:"index"`
	Units      int           `json:"units"`
	OK         int           `json:"ok"`
	Attributed int           `json:"attributed"`
	Wall       time.Duration `json:"wall_ns"`
	Throughput float64       `json:"throughput_per_s"`
	E2EMean    time.Duration `json:"e2e_mean_ns"`
	works      []attribution.Work
}

// abResult is what ab prints as JSON (and writes to ab.json).
type abResult struct {
	SchemaVersion int                    `json:"schema_version"`
	Scenario      string                 `json:"scenario"`
	Baseline      map[string]string      `json:"baseline_settings"`
	Candidate     map[string]string      `json:"candidate_settings"`
	Differ        []string               `json:"settings_that_differ"`
	Runs          []abRun                `json:"runs"`
	UnitsPerRun   int                    `json:"units_per_run"`
	Warmup        float64                `json:"warmup_fraction"`
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
	sides := [2]abSide{{name: "baseline"}, {name: "candidate"}}
	for i, own := range [][]string{f.base, f.cand} {
		sets := append([]string(nil), f.sets...)
		sets = append(sets, own...)
		sets = append(sets, "variant="+sides[i].name)
		if sides[i].set, err = runtime.ResolveSettings(sets, nil); err != nil {
			return usageError{fmt.Errorf("--%s: %w", sides[i].name, err)}
		}
	}
	differ := settingsThatDiffer(sides[0].set.Map(), sides[1].set.Map())
	target := f.target
	derived := len(target) == 0
	if derived {
		target = targetsOf(differ)
	}
	units := sc.Count
	if sides[0].set.Count > 0 {
		units = sides[0].set.Count
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	runs, interrupted, err := runABPairs(ctx, sc, sides, f, logger, stderr)
	if err != nil {
		return err
	}
	var base, cand attribution.Side
	var bWall, cWall, bThr, cThr []float64
	for _, r := range runs {
		if r.Side == "baseline" {
			base.Runs = append(base.Runs, r.works)
			bWall, bThr = append(bWall, float64(r.Wall)), append(bThr, r.Throughput)
		} else {
			cand.Runs = append(cand.Runs, r.works)
			cWall, cThr = append(cWall, float64(r.Wall)), append(cThr, r.Throughput)
		}
	}
	// Pairs: run i of each side ran back to back; an interrupted pair is
	// left out.
	n := min(len(base.Runs), len(cand.Runs))
	if n < 2 {
		return fmt.Errorf("ab: interrupted before two runs of each side finished")
	}
	base.Runs, cand.Runs = base.Runs[:n], cand.Runs[:n]
	bWall, cWall, bThr, cThr = bWall[:n], cWall[:n], bThr[:n], cThr[:n]
	opt := attribution.CompareOptions{Target: target, IgnoreUnmatched: derived, ByPhase: f.by == "phase", Seed: f.seed, Paired: true}
	cmp, err := attribution.Compare(base, cand, opt)
	if err != nil {
		return usageError{err}
	}
	res := abResult{SchemaVersion: 1, Scenario: sc.Name, Baseline: sides[0].set.Map(), Candidate: sides[1].set.Map(), Differ: differ,
		Runs: runs, UnitsPerRun: units, Warmup: f.warmup, Comparison: cmp, Interrupted: interrupted,
		WallGain: attribution.MeanGain(bWall, cWall, opt)}
	// Throughput gain: the candidate's throughput over the baseline's, - 1.
	thr := attribution.MeanGain(cThr, bThr, opt) // 1 - mean(b)/mean(c)
	res.ThroughputUp = attribution.Interval{Value: 1/(1-thr.Value) - 1, Lo: 1/(1-thr.Lo) - 1, Hi: 1/(1-thr.Hi) - 1}
	// A causal experiment: each perturbed row's weight Δe2e / Δown beside
	// its critical share.
	var perturbed []string
	for _, name := range differ {
		if strings.HasPrefix(name, "perturb.") {
			perturbed = append(perturbed, name)
		}
	}
	for _, name := range perturbed {
		if sel, ok := strings.CutPrefix(name, "perturb."); ok && len(perturbed) == 1 {
			c, err := attribution.CausalWeight(base, cand, sel, opt)
			if err != nil {
				continue // the scenario has no such row
			}
			res.Causal = append(res.Causal, c)
		}
	}
	if f.out != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err == nil {
			err = outfile.WriteFile(filepath.Join(f.out, "ab.json"), append(b, '\n'))
		}
		if err != nil {
			return fmt.Errorf("write ab.json: %w", err)
		}
		if err := htmlreport.WriteFile(filepath.Join(f.out, "report.html"), abPage(res, base, cand, opt.ByPhase)); err != nil {
			return fmt.Errorf("write report.html: %w", err)
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

// checkABFlags rejects flag values out of range as usage errors.
func checkABFlags(f abFlags) error {
	if f.runs < 2 || f.runs > 1000 {
		return usageError{fmt.Errorf("--runs %d: want 2 to 1000 (intervals are over runs)", f.runs)}
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
	if err := checkChoice("progress", f.progress, "auto", "always", "never"); err != nil {
		return err
	}
	return nil
}

// abSide is one side of an A/B: its name and resolved settings.
type abSide struct {
	name string
	set  runtime.Settings
}

// runABPairs runs f.runs pairs, alternating which side goes first, with a
// progress bar; on Ctrl-C it stops and reports interrupted, keeping the
// runs that finished.
func runABPairs(ctx context.Context, sc *scenario.Scenario, sides [2]abSide, f abFlags, logger *slog.Logger, stderr io.Writer) (runs []abRun, interrupted bool, err error) {
	bar := newRunProgress(stderr, 2*f.runs, f.progress)
	bar.start()
	for i := 0; i < f.runs && !interrupted; i++ {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, s := range order {
			if ctx.Err() != nil {
				interrupted = true
				break
			}
			run, err := abOne(ctx, sc, sides[s].set, sides[s].name, i+1, f, logger)
			if err != nil {
				bar.stop()
				return nil, false, err
			}
			if ctx.Err() != nil {
				interrupted = true // a run cut short is not counted
				break
			}
			runs = append(runs, run)
			bar.add()
		}
	}
	bar.stop()
	return runs, interrupted, nil
}

// writeAB prints the result as --json, --markdown or text.
func writeAB(stdout io.Writer, res abResult, f abFlags, nBase, nCand int) error {
	var err error
	cmp := res.Comparison
	switch {
	case f.asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	case f.markdown:
		err = writeABHeader(stdout, res, "")
		if err == nil {
			err = cmp.WriteMarkdown(stdout)
		}
		if err == nil {
			_, err = fmt.Fprintf(stdout, "- run wall time gain %s, throughput gain %s.\n", pmInterval(res.WallGain), pmInterval(res.ThroughputUp))
		}
		for _, c := range res.Causal {
			if err == nil {
				_, err = fmt.Fprintf(stdout, "- %s\n", causalText(c))
			}
		}
	default:
		err = writeABHeader(stdout, res, "")
		if err == nil {
			err = cmp.WriteText(stdout)
		}
		if err == nil {
			_, err = fmt.Fprintf(stdout, "Run wall time gain %s, throughput gain %s (over %d and %d runs).\n",
				pmInterval(res.WallGain), pmInterval(res.ThroughputUp), nBase, nCand)
		}
		for _, c := range res.Causal {
			if err == nil {
				_, err = fmt.Fprintln(stdout, causalText(c))
			}
		}
	}
	if err != nil {
		return err
	}
	return err
}

// settingsThatDiffer lists "name: a → b" for every setting that differs,
// the variant label aside.
func settingsThatDiffer(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if k != "variant" && b[k] != v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// targetsOf maps the settings that differ to the rows they are about.
func targetsOf(differ []string) []string {
	var out []string
	for _, name := range differ {
		switch {
		case strings.HasPrefix(name, "ipc."):
			out = append(out, "ipc", "taskhost.receive", "taskhost.deserialize", "taskhost.serialize")
		case strings.HasPrefix(name, "chunking."):
			out = append(out, "chunking")
		case strings.HasPrefix(name, "runtime."):
			out = append(out, "runtime")
		case strings.HasPrefix(name, "perturb."):
			out = append(out, strings.TrimPrefix(name, "perturb."))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// abOne runs one side once and keeps its units past the warm-up.
func abOne(ctx context.Context, sc *scenario.Scenario, set runtime.Settings, side string, index int, f abFlags, logger *slog.Logger) (abRun, error) {
	var mu sync.Mutex
	var works []attribution.Work
	cfg := runtime.Config{Settings: set, Scenario: sc.Name, Logger: logger, HostArgv: f.hostArgv, MaxInFlight: f.inFlight,
		OnWork: func(w attribution.Work) {
			mu.Lock()
			works = append(works, w)
			mu.Unlock()
		}}
	dir := ""
	var topts []otelsetup.Option
	if f.out != "" {
		dir = filepath.Join(f.out, fmt.Sprintf("%s-%d", side, index))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return abRun{}, fmt.Errorf("--out: %w", err)
		}
		topts = append(topts, otelsetup.WithTraceFile(filepath.Join(dir, "trace.jsonl")))
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = set.Nodes
	}
	tel, err := otelsetup.Setup(ctx, topts...)
	if err != nil {
		return abRun{}, err
	}
	if tel.SDKDisabled() {
		err := tel.Shutdown(ctx)
		return abRun{}, errors.Join(fmt.Errorf("ab: %s=true leaves attribution no spans to compare", otelsetup.EnvSDKDisabled), err)
	}
	cfg.UseTelemetry(tel)
	sum, err := runtime.Run(ctx, cfg, sc)
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err = errors.Join(err, tel.Shutdown(shutCtx))
	cancel()
	if err != nil && ctx.Err() == nil {
		return abRun{}, fmt.Errorf("ab: %s run %d: %w", side, index, err)
	}
	if dir != "" {
		b, err := json.MarshalIndent(sum, "", "  ")
		if err == nil {
			err = outfile.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'))
		}
		if err != nil {
			return abRun{}, fmt.Errorf("write summary.json: %w", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(works, func(a, b attribution.Work) int { return int(a.Root.Start - b.Root.Start) })
	skip := int(f.warmup * float64(len(works)))
	works = works[skip:]
	run := abRun{Side: side, Index: index, Units: sum.Submitted, OK: sum.OK, Attributed: len(works), Wall: sum.Elapsed,
		Throughput: sum.Throughput, works: works}
	var total time.Duration
	for _, w := range works {
		total += w.E2E()
	}
	if len(works) > 0 {
		run.E2EMean = total / time.Duration(len(works))
	}
	return run, nil
}

func writeABHeader(w io.Writer, r abResult, _ string) error {
	diff := "none (A/A)"
	if len(r.Differ) > 0 {
		var parts []string
		for _, k := range r.Differ {
			parts = append(parts, fmt.Sprintf("%s %s → %s", k, r.Baseline[k], r.Candidate[k]))
		}
		diff = strings.Join(parts, ", ")
	}
	nb, nc := 0, 0
	for _, run := range r.Runs {
		if run.Side == "baseline" {
			nb++
		} else {
			nc++
		}
	}
	target := "none"
	if len(r.Comparison.Target) > 0 {
		target = strings.Join(r.Comparison.Target, ", ")
	}
	_, err := fmt.Fprintf(w, "ab: scenario %s, %d baseline and %d candidate runs (interleaved, order alternating), %d units per run, first %.0f %% of each run's units left out as warm-up\nsettings that differ: %s\ntarget rows: %s\n\n",
		r.Scenario, nb, nc, r.UnitsPerRun, 100*r.Warmup, diff, target)
	return err
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
