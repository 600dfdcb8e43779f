// Package ab runs A/B experiments on the runtime: two sides' settings
// (a baseline and a candidate), run in interleaved pairs on one machine,
// each side's units attributed, so that package attribution can compare
// them (r, q·r, the measured gain, intervals) without the machine's drift
// falling on one side.
//
// A pair keeps both sides' task hosts and sidecars up for its whole length
// and runs them in turns of Config.Block units each, the side that goes
// first alternating from turn to turn and from pair to pair: a change in
// the machine's speed that lasts longer than a turn (another process's
// build, a burst of interrupts) falls on both sides alike. Each side keeps
// at most Config.InFlight units in flight (a closed loop: no queueing
// amplifies a difference) and waits for its turn's units to end before the
// other side's turn.
//
// amdahl ab is this package's command line; its flags map onto Config.
package ab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/amdahl-rt/amdahl/internal/outfile"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// Side is one side of an experiment: its name ("baseline", "candidate")
// and its resolved settings.
type Side struct {
	Name     string
	Settings runtime.Settings
}

// Config is an experiment. Scenario, Sides and Runs are required.
type Config struct {
	Scenario *scenario.Scenario
	Sides    [2]Side
	// Runs is the number of pairs (each side runs once per pair).
	Runs int
	// Warmup is the fraction of each run's units, earliest first, left out
	// of its attributed units (0 to 0.5).
	Warmup float64
	// InFlight bounds a side's units in flight; 0: one per task host
	// (runtime.nodes).
	InFlight int
	// Block is a side's units per turn; 0: its units in flight.
	Block int
	// OutDir, when set, gets a folder per run (SIDE-INDEX) with its
	// trace.jsonl and summary.json.
	OutDir string
	// HostArgv is the task host program (tests); nil: this executable.
	HostArgv []string
	// Logger gets the runtimes' logs (default slog.Default()).
	Logger *slog.Logger
	// OnRun, if set, is called after each run of a side ends (progress).
	OnRun func()
}

// Run is one side's run of a pair: what it submitted, what finished, the
// units attributed past the warm-up, its own wall time (its turns only:
// the other side ran in between) and throughput, and its mean e2e.
type Run struct {
	Side       string        `json:"side"`
	Index      int           `json:"index"`
	Units      int           `json:"units"`
	OK         int           `json:"ok"`
	Attributed int           `json:"attributed"`
	Wall       time.Duration `json:"wall_ns"`
	Throughput float64       `json:"throughput_per_s"`
	E2EMean    time.Duration `json:"e2e_mean_ns"`
	// Works are the run's attributed units past the warm-up, earliest
	// first.
	Works []attribution.Work `json:"-"`
}

// validate checks the config's ranges.
func (c Config) validate() error {
	switch {
	case c.Scenario == nil:
		return errors.New("ab: no scenario")
	case c.Runs < 2 || c.Runs > 1000:
		return fmt.Errorf("ab: %d runs: want 2 to 1000 (intervals are over runs)", c.Runs)
	case c.Block < 0 || c.Block > 100_000:
		return fmt.Errorf("ab: %d units per turn: want 1 to 100000, or 0 for the units in flight", c.Block)
	case c.InFlight < 0:
		return fmt.Errorf("ab: %d units in flight: want at least 1, or 0 for one per task host", c.InFlight)
	case c.Warmup < 0 || c.Warmup > 0.5:
		return fmt.Errorf("ab: warm-up %v: want 0 to 0.5", c.Warmup)
	}
	return nil
}

// RunPairs runs cfg.Runs pairs, alternating which side goes first. When
// ctx ends it stops, reports interrupted and returns the runs of the pairs
// that finished (a pair cut short is left out whole). Runs come in pair
// order, each pair's first side first.
func RunPairs(ctx context.Context, cfg Config) (runs []Run, interrupted bool, err error) {
	if err := cfg.validate(); err != nil {
		return nil, false, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for i := 0; i < cfg.Runs; i++ {
		if ctx.Err() != nil {
			return runs, true, nil
		}
		first := i % 2 // the side that goes first alternates from pair to pair
		pair, err := runPair(ctx, cfg, first, i+1)
		if err != nil {
			return nil, false, err
		}
		if ctx.Err() != nil {
			return runs, true, nil // a pair cut short is not counted
		}
		runs = append(runs, pair[first], pair[1-first])
		if cfg.OnRun != nil {
			cfg.OnRun()
			cfg.OnRun()
		}
	}
	return runs, false, nil
}

// SettingsThatDiffer lists the settings whose values differ between a and
// b (Settings.Map of each side), the variant label aside, sorted.
func SettingsThatDiffer(a, b map[string]string) []string {
	out := []string{} // JSON: [] for A/A, not null
	for k, v := range a {
		if k != "variant" && b[k] != v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Targets maps the settings that differ to the rows they are about
// (attribution.CompareOptions.Target).
func Targets(differ []string) []string {
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

// InFlight is a side's bound on units in flight: cfg.InFlight, or one per
// task host.
func (c Config) inFlight(set runtime.Settings) int {
	if c.InFlight > 0 {
		return c.InFlight
	}
	return set.Nodes
}

// UnitsPerTurn is a side's units per turn: cfg.Block, or its units in
// flight.
func (c Config) UnitsPerTurn(set runtime.Settings) int {
	if c.Block > 0 {
		return c.Block
	}
	return c.inFlight(set)
}

// runPair runs baseline run index and candidate run index side by side
// (the package doc), starting with Sides[first].
func runPair(ctx context.Context, cfg Config, first, index int) (runs [2]Run, err error) {
	var ss [2]*session
	defer func() {
		// Close whatever is still open (an error part way).
		for _, s := range ss {
			if s != nil {
				err = errors.Join(err, s.close(ctx))
			}
		}
	}()
	for k := range 2 {
		i := (first + k) % 2 // the side that goes first starts first
		s, err := openSession(ctx, cfg, cfg.Sides[i], index)
		if s != nil {
			ss[i] = s
		}
		if err != nil {
			return runs, err
		}
	}
	for turn := 0; ss[0].left > 0 || ss[1].left > 0; turn++ {
		for k := range 2 {
			s := ss[(first+turn+k)%2]
			if err := s.turn(ctx, s.per); err != nil {
				if ctx.Err() != nil {
					return runs, nil // interrupted: the caller drops the pair
				}
				return runs, fmt.Errorf("ab: %s run %d: %w", s.name, index, err)
			}
		}
	}
	for i, s := range ss {
		run, err := s.finish(ctx, cfg.Warmup)
		ss[i] = nil
		if err != nil {
			if ctx.Err() != nil {
				return runs, nil // interrupted: the caller drops the pair
			}
			return runs, err
		}
		runs[i] = run
	}
	return runs, nil
}

// session is one side of a pair while the pair runs: its runtime (task
// hosts, sidecar), telemetry, scenario generator and the units it has
// accounted.
type session struct {
	name   string
	index  int
	dir    string
	tel    *otelsetup.Telemetry
	rt     *runtime.Runtime
	gen    *scenario.Generator
	left   int           // units still to submit
	active time.Duration // the side's own blocks, first submit to last end
	slots  chan struct{} // closed loop: a slot per unit in flight
	per    int           // units per turn
	block  sync.WaitGroup

	mu    sync.Mutex
	works []attribution.Work
}

func openSession(ctx context.Context, cfg Config, side Side, index int) (*session, error) {
	set := side.Settings
	s := &session{name: side.Name, index: index}
	sc := *cfg.Scenario
	if set.Count > 0 {
		sc.Count = set.Count
	}
	if set.SeedSet {
		sc.Seed = set.Seed
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	s.gen, s.left = sc.NewGenerator(), sc.Count
	s.slots = make(chan struct{}, cfg.inFlight(set))
	s.per = cfg.UnitsPerTurn(set)
	var topts []otelsetup.Option
	if cfg.OutDir != "" {
		s.dir = filepath.Join(cfg.OutDir, fmt.Sprintf("%s-%d", side.Name, index))
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, fmt.Errorf("ab: out: %w", err)
		}
		topts = append(topts, otelsetup.WithTraceFile(filepath.Join(s.dir, "trace.jsonl")))
	}
	tel, err := otelsetup.Setup(ctx, topts...)
	if err != nil {
		return nil, err
	}
	s.tel = tel
	if tel.SDKDisabled() {
		return s, fmt.Errorf("ab: %s=true leaves attribution no spans to compare", otelsetup.EnvSDKDisabled)
	}
	rcfg := runtime.Config{Settings: set, Scenario: sc.Name, Logger: cfg.Logger, Hosts: runtime.HostsConfig{Argv: cfg.HostArgv},
		OnResult: func(runtime.Result) {
			<-s.slots
			s.block.Done()
		},
		OnWork: func(w attribution.Work) {
			s.mu.Lock()
			s.works = append(s.works, w)
			s.mu.Unlock()
		}}
	rcfg.UseTelemetry(tel)
	if s.rt, err = runtime.New(ctx, rcfg); err != nil {
		return s, fmt.Errorf("ab: %s run %d: %w", side.Name, index, err)
	}
	return s, nil
}

// turn submits up to n of the side's units, at most len(slots) in
// flight, and waits until they have ended.
func (s *session) turn(ctx context.Context, n int) error {
	n = min(n, s.left)
	if n == 0 {
		return nil
	}
	start := time.Now()
	var err error
	for range n {
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
		s.block.Add(1)
		if err = s.rt.Submit(ctx, s.gen.Next()); err != nil {
			s.block.Done()
			<-s.slots
			break
		}
		s.left--
	}
	s.block.Wait()
	s.active += time.Since(start)
	return err
}

// finish waits for the side's last units to be accounted, closes its
// runtime and telemetry, writes its summary.json, and keeps its units past
// the warm-up.
func (s *session) finish(ctx context.Context, warmup float64) (Run, error) {
	err := s.rt.Wait(ctx)
	err = errors.Join(err, s.close(ctx))
	if err != nil {
		return Run{}, fmt.Errorf("ab: %s run %d: %w", s.name, s.index, err)
	}
	sum := s.rt.Summary()
	// The run's wall time is its own turns' (the pair's other side ran in
	// between).
	sum.Elapsed = s.active
	sum.Throughput = 0
	if s.active > 0 {
		sum.Throughput = float64(sum.Submitted) / s.active.Seconds()
	}
	if s.dir != "" {
		b, err := json.MarshalIndent(sum, "", "  ")
		if err == nil {
			err = outfile.WriteFile(filepath.Join(s.dir, "summary.json"), append(b, '\n'))
		}
		if err != nil {
			return Run{}, fmt.Errorf("write summary.json: %w", err)
		}
	}
	s.mu.Lock()
	works := s.works
	s.mu.Unlock()
	slices.SortFunc(works, func(a, b attribution.Work) int { return int(a.Root.Start - b.Root.Start) })
	works = works[int(warmup*float64(len(works))):]
	run := Run{Side: s.name, Index: s.index, Units: sum.Submitted, OK: sum.OK, Attributed: len(works), Wall: sum.Elapsed,
		Throughput: sum.Throughput, Works: works}
	var total time.Duration
	for _, w := range works {
		total += w.E2E()
	}
	if len(works) > 0 {
		run.E2EMean = total / time.Duration(len(works))
	}
	return run, nil
}

// close closes the side's runtime (stopping its task hosts) and shuts its
// telemetry down (flushing the trace file); safe to call twice.
func (s *session) close(ctx context.Context) error {
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var err error
	if s.rt != nil {
		err = s.rt.Close(shutCtx)
	}
	if s.tel != nil {
		err = errors.Join(err, s.tel.Shutdown(shutCtx))
		s.tel = nil
	}
	return err
}
